"""The paper's four experiments, each run through the library's own facades and held against
the published values.

* ``table1``: :func:`mhaaudit.auditing.audit` on ViT-Base, the four columns of Table 1.
* ``table3``: the same on BERT-large and GPT-2-large at layers 0 and 1, plus a Kruskal-rank
  sweep (:func:`mhaaudit.kruskal.kruskal_sweep`) of the columns whose sweep the paper published.
* ``figure1``: the sweep of the random-attention features of ViT-Base.
* ``figure2``: :func:`mhaaudit.memorize.run_memorize_grid` over the number of heads.

With the hub reachable the data are the paper's (ImageNet-1k train, Wikipedia) and the trained
columns use the paper's checkpoints; offline they use the built-in data and random weights, and
a trained column is unavailable unless ``weights`` names local trained weights. Every verdict
here is the audit's: Monte-Carlo fractions are estimates, dependent subsets and rank ceilings
are proofs, and the comparison says which (see :mod:`mhaaudit.reproduce.compare`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import validate
from ..auditing import audit, capture_features
from ..capacity import theorem1_bound
from ..display import Report
from ..documents import OMITTED_WHEN_NONE
from ..errors import InputError, param
from ..facts import SettingsFacts
from ..hub import is_offline
from ..io import stamp
from ..kruskal import draw_decisions, kruskal_sweep
from ..memorize import run_memorize_grid
from ..numerics import svd_rank
from ..progress import task
from ..render import reproduction_report
from ..settings import Settings
from .compare import Comparison, RunFacts, compare, compare_memorization, setting_differences
from .published import published, target_spec
from .request import TargetRequest, target_conveniences

if TYPE_CHECKING:
    from ..auditing import AuditResult
    from ..kruskal import Sweep
    from ..memorize import MemorizeGrid

SWEEP_KINDS = ("sweep", "shape", "estimate")


@dataclass(frozen=True, kw_only=True)
class TargetSettings(SettingsFacts):
    """The settings of a table or Figure 1 run, as its ``meta`` gives them (in that order): the
    :class:`~mhaaudit.facts.SettingsFacts` (draws, threshold, seeds, rank rule), the examples asked for, the data
    (None: the paper's online, the built-in offline), and the model
    keys a table ran (None for Figure 1: then the ``meta`` leaves them out)."""

    limit: int
    data: str | None
    models: tuple[str, ...] | None = field(default=None, metadata=OMITTED_WHEN_NONE)


@dataclass(frozen=True)
class GridTargetSettings:
    """The settings of a Figure 2 run, as its ``meta`` gives them: the seed, the device, the
    preset and the grid trained (its :meth:`~mhaaudit.memorize.MemorizeGrid.to_dict`, without
    the runs, which the document gives beside the meta)."""

    seed: int
    device: str | None
    preset: str | None
    grid: MemorizeGrid = field(repr=False)

    def as_dict(self) -> dict:
        """The settings as the ``meta`` gives them."""
        return {
            "seed": self.seed,
            "device": self.device,
            "preset": self.preset,
            "grid": self.grid.to_dict() | {"runs": None},
        }


@dataclass(repr=False)
class Reproduction(Report):
    """One target's comparisons, what the run was (``facts`` per model) and what it produced;
    ``print()`` shows it as ``mhaaudit reproduce`` prints it."""

    target: str
    title: str
    source: str
    comparisons: list[Comparison]
    facts: dict[str, RunFacts]  # model key -> what its run was
    setting: list[str]  # the run in words, with how it differs from the paper's
    settings: TargetSettings | GridTargetSettings  # for the output's meta
    # phase -> seconds (an audit's phases nested under its model, and a column's under the column's name)
    timings: dict[str, float | dict[str, float | dict[str, float]]]
    sweeps: dict[tuple[str, str], Sweep] = field(default_factory=dict)  # (model key, column) -> its sweep
    audits: dict[str, AuditResult] = field(default_factory=dict)  # model key -> its audit
    grid: MemorizeGrid | None = None  # figure2: the grid trained
    notes: list[str] = field(default_factory=list)

    def records(self) -> list[dict]:
        """One row per published value: the comparisons' records."""
        return [c.record() for c in self.comparisons]

    def sweep_rows(self) -> list[dict]:
        """The sweeps' rows, each with its model key and column."""
        return [{"model": key, "column": col, **row} for (key, col), sw in self.sweeps.items() for row in sw.rows()]

    def counts(self) -> dict:
        """How many comparisons have each status (match, differs, undetermined, unavailable)."""
        c = Counter(x.status for x in self.comparisons)
        return {s: c.get(s, 0) for s in ("match", "differs", "undetermined", "unavailable")}

    def meta(self) -> dict:
        """The run's provenance stamp (the JSON ``meta``): the target, the paper, the counts, the setting."""
        return stamp(
            command="reproduce",
            target=self.target,
            title=self.title,
            source=self.source,
            paper=published()["paper"],
            counts=self.counts(),
            setting=self.setting,
            notes=self.notes,
            timings_s=self.timings,
            **self.settings.as_dict(),
        )

    def document(self, meta: dict | None = None) -> dict:
        """What ``--format json`` prints: ``meta``, the records, and the sweep rows and memorize runs
        when the target has them."""
        doc = {"meta": self.meta() if meta is None else meta, "records": self.records()}
        if self.sweeps:
            doc["sweep"] = self.sweep_rows()
        if self.grid is not None:
            doc["runs"] = [r.to_dict() for r in self.grid.runs]
        return doc

    REPORT = reproduction_report

    def summary_line(self) -> str:
        """The target in one line: how many published values have each status."""
        return (
            f"{self.target}: "
            + ", ".join(f"{v} {k}" for k, v in self.counts().items())
            + f" of {len(self.comparisons)} published values"
        )


# --------------------------------------------------------------------------- shared steps


def _data_for(spec: dict, data: str | None) -> tuple[str | None, bool]:
    """The data to read and whether it is the paper's dataset: the paper's online, the built-in offline."""
    paper = spec["data"]["dataset"]
    if data is None:
        return (None, False) if is_offline() else (paper, True)
    return data, data.strip().lower() == paper


def _facts(result, name: str, paper_data: bool, settings: Settings) -> RunFacts:
    cols = {c.probe.variant: (c.weights_source or c.reason) for c in result.columns}
    T = result.T
    return RunFacts(
        model=name,
        resolved=result.info.resolved,
        n=result.info.n,
        d=result.info.d,
        T=T,
        data=result.data,
        paper_data=paper_data,
        samples=settings.samples,
        threshold=settings.threshold,
        seed=settings.seed,
        weights=cols,
    )


def _sweep_doc(sw) -> dict:
    return {"rows": sw.rows(), "summary": sw.summary(), "samples": sw.samples, "threshold": sw.threshold}


def _column(col, settings: Settings, sweep=None) -> dict:
    """Our records of one audited column, as :func:`compare` reads them."""
    if col.status != "ok":
        return {"unavailable": col.reason}
    recs = {r["check"]: r for r in col.records("")}
    out = {"records": recs, "sweep": _sweep_doc(sweep) if sweep is not None else None, "n": col.features.n}
    gp = recs.get("general_position")
    if gp is not None and not gp["sampled"] and gp["k"] <= gp["d"] and (gp.get("set_rank_ceiling") or 0) > 1:
        out["draw_ranks"] = _draw_ranks(col.features.queries, gp["k"], settings)
    return out


def _draw_ranks(X, k: int, settings: Settings, draws: int = 10) -> dict:
    """Ranks of the first ``draws`` draws of k rows that the test would make: the General Position
    test needs none when the whole set's rank already decides it, but the paper reports them."""
    rule = settings.rule(X.dtype)
    idx, _ = draw_decisions(X, k, samples=draws, seed=settings.seed, rule=rule, device=settings.device)
    ranks = svd_rank(X[idx.cpu()], rule)[0].tolist()
    return {str(r): ranks.count(r) for r in sorted(set(ranks))}


def _sweep(fs, settings: Settings, kmax: int, label: str):
    with task(f"{label} sweep", settings.samples, settings.progress) as adv:
        return kruskal_sweep(
            fs.queries,
            samples=settings.samples,
            threshold=settings.threshold,
            seed=settings.seed,
            rule=settings.rule(fs.dtype),
            device=settings.device,
            kmax=kmax,
            progress=adv,
        )


def _setting_lines(spec: dict, facts: dict, settings: Settings) -> list[str]:
    lines = []
    for key, f in facts.items():
        diffs = setting_differences(spec, key, f)
        lines.append(f"{key}: {f.model} ({f.resolved}), n = {f.n}, d = {f.d}, T = {f.T}; data: {f.data}")
        for col, src in f.weights.items():
            lines.append(f"  {col}: {src}")
        lines.append(
            "  differs from the paper's: "
            + ("; ".join(d.brief() for d in diffs) if diffs else "nothing in data, model, T or draws")
        )
    lines.append(
        f"{settings.samples} draws per test, threshold {settings.threshold}, seed {settings.seed}, "
        f"device {settings.device_name}, rank rule: {settings.rule().describe()}"
    )
    return lines


def _check_keys(name: str, given: Mapping | None, allowed: Sequence[str]) -> dict:
    given = dict(given or {})
    for key in given:
        if key not in allowed:
            raise InputError(f"{name} {key}=...: this target's models are {', '.join(allowed)}")
    return given


# --------------------------------------------------------------------------- Table 1 and Table 3


@target_conveniences("models", "context_length")
def table1(request: TargetRequest) -> Reproduction:
    """Table 1: ViT-Base's four columns (embedding, random attention, random ViT, trained ViT).

    Called with a :class:`~.request.TargetRequest` or with its keywords (see
    :func:`~.request.target_conveniences`)."""
    return _tables("table1", request)


@target_conveniences()
def table3(request: TargetRequest) -> Reproduction:
    """Table 3: BERT-large and GPT-2-large (``models``: a subset of ``bert``, ``gpt2``), random and
    trained, layers 0 and 1, and the Kruskal-rank sweep of the BERT layer-1 columns.

    Called with a :class:`~.request.TargetRequest` or with its keywords (see
    :func:`~.request.target_conveniences`)."""
    return _tables("table3", request)


def _tables(target: str, request: TargetRequest) -> Reproduction:
    spec = target_spec(target)
    keys = list(spec["models"])
    chosen = keys if not request.models else [validate.choice("model key", m, keys) for m in request.models]
    names = _check_keys(param("model"), request.model, keys)
    weights = _check_keys(param("weights"), request.weights, keys)
    lengths = _check_keys(param("context_length"), request.context_length, keys)
    settings = request.settings
    data, paper_data = _data_for(spec, request.data)
    T = spec["data"]["T"] if request.limit is None else request.limit
    run = TargetSettings.of(settings, limit=T, data=data, models=tuple(chosen))
    out = Reproduction(target, spec["title"], spec["source"], [], {}, [], run, {})
    t0 = time.perf_counter()
    for key in chosen:
        name = names.get(key, spec["models"][key]["alias"])
        result = audit(
            name,
            layers=[0, 1] if target == "table3" else None,
            data=data,
            split=request.split,
            limit=T,
            batch_size=request.batch_size,
            weights=weights.get(key),
            context_length=lengths.get(key),
            on_note=request.on_note,
            settings=settings,
        )
        out.audits[key] = result
        out.facts[key] = _facts(result, name, paper_data, settings)
        out.notes += result.notes
        out.comparisons += _compare_model(target, spec, key, result, out, settings)
    out.timings |= {
        f"audit {key}": a.timings | {c.probe.variant: c.timings for c in a.columns if c.timings}
        for key, a in out.audits.items()
    } | {"total": round(time.perf_counter() - t0, 3)}
    out.setting = _setting_lines(spec, out.facts, settings)
    return out


def _compare_model(
    target: str, spec: dict, key: str, result, out: Reproduction, settings: Settings
) -> list[Comparison]:
    """Sweep the columns whose sweep the paper published (into ``out.sweeps``), then hold every
    published item of model ``key`` against the audit's records."""
    swept = [it for it in spec["values"] if it["model"] == key and it["kind"] in SWEEP_KINDS]
    kmax = {c: max(it["k"] for it in swept if it["column"] == c) for c in {it["column"] for it in swept}}
    cols = {}
    for c in result.columns:
        sw = None
        if c.probe.variant in kmax and c.status == "ok":
            t0 = time.perf_counter()
            sw = _sweep(c.features, settings, max(kmax[c.probe.variant], c.features.n), f"{key} {c.probe.variant}")
            out.sweeps[(key, c.probe.variant)] = sw
            out.timings[f"sweep {key} {c.probe.variant}"] = round(time.perf_counter() - t0, 3)
        cols[c.probe.variant] = _column(c, settings, sw)
    return [
        compare(target, it, cols.get(it["column"]), out.facts[key], spec, spec["protocol"]["threshold"])
        for it in spec["values"]
        if it["model"] == key
    ]


# --------------------------------------------------------------------------- Figure 1


@target_conveniences("models", "weights", "context_length", "stop_when_decided", "on_note")
def figure1(request: TargetRequest) -> Reproduction:
    """Figure 1: the satisfied fraction against k for ViT-Base's random-attention features.

    Called with a :class:`~.request.TargetRequest` (its weights, context lengths and models are
    refused: the figure has one model and one column) or with its keywords (see
    :func:`~.request.target_conveniences`).

    Raises:
        InputError: the request gives weights, context lengths or models.
    """
    spec = target_spec("figure1")
    (key,) = spec["models"]
    (column,) = spec["columns"]
    for name in ("weights", "context_length", "models"):
        if getattr(request, name):
            raise InputError(f"{{param:{name}}} does not apply to figure1 (one model, one random column)")
    name = _check_keys(param("model"), request.model, [key]).get(key, spec["models"][key]["alias"])
    settings = request.settings
    data, paper_data = _data_for(spec, request.data)
    T = spec["data"]["T"] if request.limit is None else request.limit
    t0 = time.perf_counter()
    fs = capture_features(
        name,
        variant=column,
        data=data,
        split=request.split,
        limit=T,
        batch_size=request.batch_size,
        settings=settings,
    )
    sw = _sweep(fs, settings, max(max(it["k"] for it in spec["values"]), fs.d), column)
    facts = _features_facts(fs, name, paper_data, settings, column)
    col = {"records": {}, "sweep": _sweep_doc(sw), "n": fs.n}
    comps = [compare("figure1", it, col, facts, spec, spec["protocol"]["threshold"]) for it in spec["values"]]
    return Reproduction(
        "figure1",
        spec["title"],
        spec["source"],
        comps,
        {key: facts},
        _setting_lines(spec, {key: facts}, settings),
        TargetSettings.of(settings, limit=T, data=data),
        {"total": round(time.perf_counter() - t0, 3)},
        sweeps={(key, column): sw},
    )


def _features_facts(fs, name: str, paper_data: bool, settings: Settings, column: str) -> RunFacts:
    """What a capture of one column was (figure1's one model)."""
    return RunFacts(
        model=name,
        resolved=str(fs.meta.get("resolved", name)),
        n=fs.n,
        d=fs.d,
        T=fs.T,
        data=str(fs.meta.get("data", "")),
        paper_data=paper_data,
        samples=settings.samples,
        threshold=settings.threshold,
        seed=settings.seed,
        weights={column: str(fs.meta.get("weights_source", ""))},
    )


# --------------------------------------------------------------------------- Figure 2


def figure2(
    *,
    preset: str | None = "cpu",
    values=None,
    sizes=None,
    max_steps: int | None = None,
    seed: int = 0,
    device: str = "auto",
    progress: bool = False,
) -> Reproduction:
    """Figure 2(a): memorisation against H on a memorize grid (``cpu`` preset by default).

    Raises:
        InputError: the grid does not vary the number of heads.
    """
    spec = target_spec("figure2")
    t0 = time.perf_counter()
    grid = run_memorize_grid(
        vary="heads" if preset is None else None,
        preset=preset,
        values=values,
        sizes=sizes,
        max_steps=max_steps,
        seed=seed,
        device=device,
        progress=progress,
    )
    if grid.vary != "heads":
        raise InputError(
            f"figure2 compares memorisation against the number of heads; preset {preset!r} varies {grid.vary}"
        )
    s = grid.settings
    d = s.d

    def bound(run: dict):
        return theorem1_bound(
            heads=run["heads"], head_dim=run["head_dim"], n=run["n"], d=d, a1_holds=True, a2_holds=True
        )

    runs = [r.to_dict() for r in grid.runs]
    comps = compare_memorization("figure2", spec, runs, [f.to_dict() for f in grid.fits], bound)
    tr = spec["training"]
    setting = [
        f"grid {grid.preset or 'custom'}: H in {list(grid.values)}, n = {s.n}, d_h = {s.head_dim}, d = {d}, "
        f"T in {list(grid.sizes)}, {s.recipe.context} context, {s.recipe.task}, seed {s.seed}, device {s.device}",
        f"training: at most {s.recipe.max_steps or 'the paper rule of'} steps per point (the paper: {tr['rule']})",
        f"data: {spec['data']['description']}",
    ]
    return Reproduction(
        "figure2",
        spec["title"],
        spec["source"],
        comps,
        {},
        setting,
        GridTargetSettings(seed, s.device, grid.preset, grid),
        {"total": round(time.perf_counter() - t0, 3)},
        grid=grid,
    )


TARGET_FUNCTIONS: dict[str, Callable[..., Reproduction]] = {
    "table1": table1,
    "table3": table3,
    "figure1": figure1,
    "figure2": figure2,
}
