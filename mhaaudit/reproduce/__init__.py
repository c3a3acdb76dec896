"""Hold the tool against the paper: run one of its experiments and compare with the published values.

``reproduce_paper("table1" | "table3" | "figure1" | "figure2", ...)`` runs the paper's protocol
with the paper's settings through the library's facades (:mod:`.targets`) and returns a
:class:`Reproduction`: for every value the paper or its official notebooks publish
(``published.json``, read by :mod:`.published`), our value beside it, whether the two match
(the same verdict), and for every difference the reason drawn from the run's own records
(:mod:`.compare`). What is proven and what is estimated is the audit's: Monte-Carlo fractions
and Kruskal-rank estimates are estimates with 95% intervals; dependent subsets, rank ceilings
and context-rank counts are proofs. A "match" is agreement of verdicts, not a proof that the
paper's numbers are right; a difference names what differs, not which side is wrong.
"""

from __future__ import annotations

from .. import validate
from ..errors import InputError
from ..io import stamp
from ..seeds import SeedsResult, cell_of, is_trained, over_seeds, plan_seeds, spread, sweep_estimate_record
from .compare import Comparison, RunFacts
from .published import TARGETS, published, target_spec
from .targets import TARGET_FUNCTIONS, Reproduction, figure1, figure2, table1, table3

__all__ = [
    "TARGETS",
    "Comparison",
    "Reproduction",
    "RunFacts",
    "figure1",
    "figure2",
    "published",
    "reproduce_paper",
    "reproduce_seeds",
    "table1",
    "table3",
    "target_spec",
]


def reproduce_paper(target: str, **options) -> Reproduction | SeedsResult:
    """Run one target (``table1``, ``table3``, ``figure1``, ``figure2``) with ``options`` (the
    keyword arguments of the target's function) and compare it with the published values.

    ``seeds`` (``"0-4"``, ``"0,3,7"`` or a list; with ``vary``, ``weights_seed``, ``data_seed`` as in
    :func:`mhaaudit.audit`) runs the target once per seed and returns a
    :class:`mhaaudit.seeds.SeedsResult`: each published value beside the between-seed range of ours."""
    if options.get("seeds") is not None:
        return reproduce_seeds(validate.choice("target", target, TARGETS), **options)
    options.pop("seeds", None)
    if options.get("vary", "both") != "both":
        raise InputError("{param:vary} has no effect without {param:seeds}: it says which seed {param:seeds} varies")
    options.pop("vary", None)

    return TARGET_FUNCTIONS[validate.choice("target", target, TARGETS)](**options)


def reproduce_seeds(
    target: str,
    *,
    seeds,
    vary: str = "both",
    seed: int = 0,
    weights_seed: int | None = None,
    data_seed: int | None = None,
    **options,
) -> SeedsResult:
    """:func:`mhaaudit.reproduce_paper` for each seed: every published value beside the between-seed
    range of ours (``paper_inside``: whether the published value lies in it), the seeds that match,
    and the differences of the swept columns' Kruskal estimates."""
    if target == "figure2":
        raise InputError(
            "{param:seeds} does not apply to figure2: its memorize grid takes its own seeds "
            "(those of memorize, e.g. the preset paper-fig2a with seeds 0-4)"
        )
    plan = plan_seeds(seeds, vary=vary, seed=seed, weights_seed=weights_seed, data_seed=data_seed)
    runs = over_seeds(reproduce_paper, plan, target=target, **options)

    def records(res) -> list[dict]:
        return [c.record() for c in res.comparisons]

    def estimates(res) -> list[dict]:
        return [
            sweep_estimate_record(sw, model=key, variant=variant, layer=None)
            for (key, variant), sw in res.sweeps.items()
        ]

    first = runs[0]
    meta = stamp(
        command="reproduce",
        target=first.target,
        title=first.title,
        source=first.source,
        paper=published()["paper"],
        setting=first.setting,
        notes=first.notes,
        timings_s={str(run.seed): r.timings for run, r in zip(plan.runs(), runs, strict=True)},
        **first.settings,
    )
    out = spread(
        "reproduce",
        plan,
        runs,
        records=records,
        key=("model", "column", "kind", "check", "k"),
        value="our_value",
        estimates=estimates,
        estimate_key=("model", "variant", "layer", "check"),
        trained=is_trained,
        sweep_rows=lambda r: r.sweep_rows(),
        meta=meta,
        extra=("paper_value", "paper_verdict", "source"),
    )
    for rec in out.summaries:
        if rec.get("value") != "our_value":
            continue
        cell = [
            r
            for _, recs in out.per_seed
            for r in recs
            if cell_of(r, ("model", "column", "kind", "check", "k"))
            == cell_of(rec, ("model", "column", "kind", "check", "k"))
        ]
        rec["seeds_matching"] = sum(r.get("status") == "match" for r in cell)
        p, lo, hi = rec.get("paper_value"), rec.get("low"), rec.get("high")
        rec["paper_inside"] = None if p is None or lo is None else bool(lo <= p <= hi)
    out.title = first.title
    return out
