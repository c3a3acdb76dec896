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

from dataclasses import replace

from .. import validate
from ..distributed import shared
from ..errors import InputError, Param
from ..seeds import (
    AgainstPaper,
    Layout,
    SeedRecords,
    SeedsResult,
    SummaryRecord,
    over_seeds,
    plan_seeds,
    runs_meta,
    spread,
)
from ..seeds.plan import refuse_vary_without_seeds
from ..seeds.records import cell_of, sweep_estimate_record
from .compare import Comparison, RunFacts
from .published import TARGETS, published, target_spec
from .reproduction import GridTargetSettings, Reproduction, TargetSettings
from .targets import (
    TARGET_FUNCTIONS,
    figure1,
    figure2,
    table1,
    table3,
)

__all__ = [
    "TARGETS",
    "Comparison",
    "GridTargetSettings",
    "Reproduction",
    "RunFacts",
    "TargetSettings",
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
    """Run one target of the paper and compare it with the published values.

    ``seeds`` (``"0-4"``, ``"0,3,7"`` or a list) runs the target once per seed, with ``vary``,
    ``weights_seed`` and ``data_seed`` as :func:`mhaaudit.audit` takes them.

    Args:
        target: ``table1``, ``table3``, ``figure1`` or ``figure2``.
        **options (Any): the keyword arguments of the target's function, and ``seeds``.

    Returns:
        The target's :class:`Reproduction` (ours beside the published values), or a
        :class:`mhaaudit.seeds.SeedsResult` with ``seeds``: each published value beside our range over seeds.

    Raises:
        InputError: when ``target`` is not one of the targets, or ``vary`` is given other than ``"both"``
            without ``seeds``.
    """
    if options.get("seeds") is not None:
        return reproduce_seeds(validate.choice("target", target, TARGETS), **options)
    options.pop("seeds", None)
    refuse_vary_without_seeds(options.pop("vary", "both"))

    return TARGET_FUNCTIONS[validate.choice("target", target, TARGETS)](**options)


_CELL = ("model", "column", "kind", "check", "k")


def _comparison_records(result: Reproduction) -> list[dict]:
    return [c.record() for c in result.comparisons]


def _sweep_estimates(result: Reproduction) -> list[dict]:
    return [
        sweep_estimate_record(sw, model=key, variant=variant, layer=None)
        for (key, variant), sw in result.sweeps.items()
    ]


def _sweep_rows(result: Reproduction) -> list[dict]:
    return result.sweep_rows()


#: How ``reproduce --seeds`` sets its runs side by side: our value per published value (with the
#: paper's value, verdict and source beside it), and the swept columns' Kruskal estimates.
REPRODUCE_LAYOUT = Layout(
    "reproduce",
    _comparison_records,
    _CELL,
    value="our_value",
    estimates=_sweep_estimates,
    estimate_key=("model", "variant", "layer", "check"),
    sweep_rows=_sweep_rows,
    paper=True,
)


@shared
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
    and the differences of the swept columns' Kruskal estimates. Under torchrun every rank makes
    this call (the seeds spread over the ranks, see :func:`mhaaudit.seeds.over_seeds`).

    Raises:
        InputError: when ``target`` is ``figure2`` (its memorize grid takes its own seeds), or ``seeds`` /
            ``vary`` / the seed options are refused by :func:`mhaaudit.seeds.plan_seeds`.
    """
    if target == "figure2":
        raise InputError(
            Param("seeds") + " does not apply to figure2: its memorize grid takes its own seeds "
            "(those of memorize, e.g. the preset paper-fig2a with seeds 0-4)"
        )
    plan = plan_seeds(seeds, vary=vary, seed=seed, weights_seed=weights_seed, data_seed=data_seed)
    runs = over_seeds(reproduce_paper, plan, target=target, **options)
    meta = {k: v for k, v in runs_meta(runs, plan).items() if k != "counts"}  # counts are per seed: in the records
    out = spread(REPRODUCE_LAYOUT, plan, runs, meta=meta)
    out.summaries = [
        replace(s, against_paper=_against_paper(s, out.per_seed)) if s.value == "our_value" else s
        for s in out.summaries
    ]
    out.title = runs[0].title
    return out


def _against_paper(summary: SummaryRecord, per_seed: list[SeedRecords]) -> AgainstPaper:
    """A summary's seeds that match the paper, and whether the published value lies in our range: None where no
    seed's run could be held against it (every seed undetermined, such as a test of the whole set where the paper
    tested k-subsets, or unavailable), as the run of one seed says."""
    cell = [r for seed in per_seed for r in seed.records if cell_of(r, _CELL) == summary.cell.values(_CELL)]
    p = summary.paper.value if summary.paper is not None else None
    lo, hi = summary.low, summary.high
    held = any(r.get("status") in ("match", "differs") for r in cell)
    return AgainstPaper(
        seeds_matching=sum(r.get("status") == "match" for r in cell),
        inside=None if p is None or lo is None or hi is None or not held else bool(lo <= p <= hi),
    )
