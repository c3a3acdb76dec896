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
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from .. import validate
from ..auditing import audit, capture_features
from ..defaults import DEFAULT_DEVICE, DEFAULT_SEED
from ..errors import InputError, MhaauditError, Param
from ..hub import is_offline
from ..kruskal import draw_decisions, kruskal_sweep
from ..memorize import MemorizeRequest, run_memorize_grid
from ..memorize.data import make_dataset, point_generator
from ..memorize.model import one_head_ceiling
from ..models.families import family_of
from ..models.resolution import resolve
from ..numerics import svd_rank
from ..progress import task
from ..settings import Settings
from ..theory import theorem1_bound
from .compare import Comparison, RunFacts, compare, setting_differences
from .memorization import compare_memorization
from .published import target_spec
from .reproduction import GridTargetSettings, Reproduction, TargetSettings
from .request import TargetRequest, columns_by_name, target_request

if TYPE_CHECKING:
    pass

SWEEP_KINDS = ("sweep", "shape", "estimate")


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
    return {"rows": sw.rows(), "summary": sw.summary(), "samples": sw.samples, "threshold": sw.threshold, "T": sw.T}


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
        for col, src in f.weights.items():  # joined with +: an unavailable column's reason may name parameters
            lines.append("  " + str(col) + ": " + src)
        lines.append(
            "  differs from the paper's: "
            + ("; ".join(d.brief() for d in diffs) if diffs else "nothing in data, model, T or draws")
        )
    lines.append(
        f"{settings.samples} draws per test, threshold {settings.threshold}, seed {settings.seed}, "
        f"device {settings.device_name}, rank rule: {settings.rule().describe()}"
    )
    return lines


def _check_keys(name: str | Param, given: Mapping | None, allowed: Sequence[str]) -> dict:
    given = dict(given or {})
    for key in given:
        if key not in allowed:
            raise InputError(name + f" {key}=...: this target's models are {', '.join(allowed)}")
    return given


def _check_modality(target: str, spec: dict, names: Mapping[str, str]) -> None:
    """Refuse, before any model runs, a model put in place of one of the paper's that takes the other kind of
    input: the target's published values are of the paper model's columns (an image model's embedding,
    random-attention, random and trained; a text model's at layers 0 and 1), none of which such a model has.
    Only a model whose input is known without loading it is refused here: an alias, a timm model or a local
    folder of a supported family (``models.families``). A hub id, or a family the audit does not probe, is left
    to the run, which says what it finds.

    Raises:
        InputError: when a model named in ``names`` (by the paper's model key) is known to take other input.
    """
    for key, name in names.items():
        paper = spec["models"][key]["alias"]
        want = resolve(paper).modality
        try:
            found = resolve(name)
        except MhaauditError:  # the run says what is wrong with the name
            continue
        known = found.alias is not None or found.backend == "timm" or family_of(found.family) is not None
        got = found.modality if known else None
        if got is not None and got != want:
            use, a = ("table3", "a") if got == "text" else ("table1 or figure1", "an")
            raise InputError(
                Param("model")
                + f" {key}={name} is {a} {got} model, but {target} holds the values of the paper's {want} model "
                f"({paper}): its columns would not be run. Use {use} for {a} {got} model"
            )


# --------------------------------------------------------------------------- Table 1 and Table 3


def table1(
    request: TargetRequest | None = None,
    *,
    data: str | None = None,
    split: str | None = None,
    limit: int | None = None,
    model: Mapping[str, str] | None = None,
    weights: Mapping[str, str] | None = None,
    samples: int | None = None,
    threshold: float | None = None,
    seed: int | None = None,
    device: str | None = None,
    batch_size: int | str | None = None,
    stop_when_decided: bool | None = None,
    progress: bool | None = None,
    on_note: Callable[[str], None] | None = None,
    weights_seed: int | None = None,
    data_seed: int | None = None,
) -> Reproduction:
    """Reproduce Table 1: ViT-Base's four columns (embedding, random attention, random and trained ViT).

    A keyword left at None is not given. See :mod:`mhaaudit.request` for a keyword given beside ``request``.

    Args:
        request: the run as one :class:`~.request.TargetRequest` (None: built from the keywords).
        data: the data source (None: the paper's online, the built-in data offline).
        split: the data split to read.
        limit: the examples T (None: the paper's).
        model: by the paper's model key, a model put in place of the paper's.
        weights: by the paper's model key, trained weights put in place of the paper's.
        samples: Monte-Carlo draws per test.
        threshold: the satisfied fraction at which a test holds.
        seed: the run's seed (default 0).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (default auto).
        batch_size: examples per forward pass, or ``"auto"``.
        stop_when_decided: stop a test once its verdict is settled.
        progress: show progress bars on stderr.
        on_note: called with each note as it comes.
        weights_seed: the seed of the random weights, set apart from ``seed``.
        data_seed: the seed of the data, set apart from ``seed``.

    Returns:
        The :class:`Reproduction`: ours beside the published values.
    """
    keywords = dict(
        data=data,
        split=split,
        limit=limit,
        model=model,
        weights=weights,
        samples=samples,
        threshold=threshold,
        seed=seed,
        device=device,
        batch_size=batch_size,
        stop_when_decided=stop_when_decided,
        progress=progress,
        on_note=on_note,
        weights_seed=weights_seed,
        data_seed=data_seed,
    )
    return _tables("table1", target_request(request, keywords))


def table3(
    request: TargetRequest | None = None,
    *,
    data: str | None = None,
    split: str | None = None,
    limit: int | None = None,
    models: Sequence[str] | None = None,
    model: Mapping[str, str] | None = None,
    weights: Mapping[str, str] | None = None,
    context_length: Mapping[str, int] | None = None,
    samples: int | None = None,
    threshold: float | None = None,
    seed: int | None = None,
    device: str | None = None,
    batch_size: int | str | None = None,
    stop_when_decided: bool | None = None,
    progress: bool | None = None,
    on_note: Callable[[str], None] | None = None,
    weights_seed: int | None = None,
    data_seed: int | None = None,
) -> Reproduction:
    """Reproduce Table 3: BERT-large and GPT-2-large, random and trained, at layers 0 and 1.

    The Kruskal-rank sweep of the BERT layer-1 columns runs too.
    A keyword left at None is not given. See :mod:`mhaaudit.request` for a keyword given beside ``request``.

    Args:
        request: the run as one :class:`~.request.TargetRequest` (None: built from the keywords).
        data: the data source (None: the paper's online, the built-in data offline).
        split: the data split to read.
        limit: the examples T (None: the paper's).
        models: the paper's model keys to run, a subset of ``bert`` and ``gpt2`` (default both).
        model: by the paper's model key, a model put in place of the paper's.
        weights: by the paper's model key, trained weights put in place of the paper's.
        context_length: by the paper's model key, a context length put in place of the paper's.
        samples: Monte-Carlo draws per test.
        threshold: the satisfied fraction at which a test holds.
        seed: the run's seed (default 0).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (default auto).
        batch_size: examples per forward pass, or ``"auto"``.
        stop_when_decided: stop a test once its verdict is settled.
        progress: show progress bars on stderr.
        on_note: called with each note as it comes.
        weights_seed: the seed of the random weights, set apart from ``seed``.
        data_seed: the seed of the data, set apart from ``seed``.

    Returns:
        The :class:`Reproduction`: ours beside the published values.
    """
    keywords = dict(
        data=data,
        split=split,
        limit=limit,
        models=models,
        model=model,
        weights=weights,
        context_length=context_length,
        samples=samples,
        threshold=threshold,
        seed=seed,
        device=device,
        batch_size=batch_size,
        stop_when_decided=stop_when_decided,
        progress=progress,
        on_note=on_note,
        weights_seed=weights_seed,
        data_seed=data_seed,
    )
    return _tables("table3", target_request(request, keywords))


def _tables(target: str, request: TargetRequest) -> Reproduction:
    spec = target_spec(target)
    keys = list(spec["models"])
    chosen = keys if not request.models else [validate.choice("model key", m, keys) for m in request.models]
    names = _check_keys(Param("model"), request.model, keys)
    weights = _check_keys(Param("weights"), request.weights, keys)
    lengths = _check_keys(Param("context_length"), request.context_length, keys)
    for option, given in (("model", names), ("weights", weights), ("context_length", lengths)):
        for key in given:
            if key not in chosen:  # before any model runs: a setting for a model left out would go unused
                raise InputError(
                    Param(option) + f" {key}=... has no effect: only {', '.join(chosen)} runs (" + Param("models") + ")"
                )
    _check_modality(target, spec, names)
    settings = request.settings
    data, paper_data = _data_for(spec, request.data)
    T = spec["data"]["T"] if request.limit is None else request.limit
    run = TargetSettings.of(settings, limit=T, data=data, models=tuple(chosen))
    out = Reproduction(target, spec["title"], spec["source"], [], {}, [], run, {})
    t0 = time.perf_counter()
    for key in chosen:
        name = names.get(key, spec["models"][key]["alias"])
        with columns_by_name():
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


def figure1(
    request: TargetRequest | None = None,
    *,
    data: str | None = None,
    split: str | None = None,
    limit: int | None = None,
    model: Mapping[str, str] | None = None,
    samples: int | None = None,
    threshold: float | None = None,
    seed: int | None = None,
    device: str | None = None,
    batch_size: int | str | None = None,
    progress: bool | None = None,
    weights_seed: int | None = None,
    data_seed: int | None = None,
) -> Reproduction:
    """Reproduce Figure 1: the satisfied fraction against k for ViT-Base's random-attention features.

    The figure has one model and one column, so a request with weights, context lengths or models is refused.
    A keyword left at None is not given. See :mod:`mhaaudit.request` for a keyword given beside ``request``.

    Args:
        request: the run as one :class:`~.request.TargetRequest` (None: built from the keywords).
        data: the data source (None: the paper's online, the built-in data offline).
        split: the data split to read.
        limit: the examples T (None: the paper's).
        model: by the paper's model key, a model put in place of the paper's.
        samples: Monte-Carlo draws per test.
        threshold: the satisfied fraction at which a test holds.
        seed: the run's seed (default 0).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (default auto).
        batch_size: examples per forward pass, or ``"auto"``.
        progress: show progress bars on stderr.
        weights_seed: the seed of the random weights, set apart from ``seed``.
        data_seed: the seed of the data, set apart from ``seed``.

    Returns:
        The :class:`Reproduction`: ours beside the published values.

    Raises:
        InputError: the request gives weights, context lengths or models.
    """
    keywords = dict(
        data=data,
        split=split,
        limit=limit,
        model=model,
        samples=samples,
        threshold=threshold,
        seed=seed,
        device=device,
        batch_size=batch_size,
        progress=progress,
        weights_seed=weights_seed,
        data_seed=data_seed,
    )
    request = target_request(request, keywords)
    spec = target_spec("figure1")
    (key,) = spec["models"]
    (column,) = spec["columns"]
    for name in ("weights", "context_length", "models"):
        if getattr(request, name):
            raise InputError(Param(name) + " does not apply to figure1 (one model, one random column)")
    names = _check_keys(Param("model"), request.model, [key])
    _check_modality("figure1", spec, names)
    name = names.get(key, spec["models"][key]["alias"])
    settings = request.settings
    data, paper_data = _data_for(spec, request.data)
    T = spec["data"]["T"] if request.limit is None else request.limit
    t0 = time.perf_counter()
    with columns_by_name():
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
    seed: int = DEFAULT_SEED,
    device: str = DEFAULT_DEVICE,
    progress: bool = False,
) -> Reproduction:
    """Reproduce Figure 2(a): memorisation against the number of heads H on a memorize grid.

    Args:
        preset: the grid's preset (default ``cpu``; None: vary the heads over ``values``).
        values: the head counts, as :func:`~mhaaudit.memorize.run_memorize_grid` takes them.
        sizes: the dataset sizes T, as :func:`~mhaaudit.memorize.run_memorize_grid` takes them.
        max_steps: the most optimisation steps a point trains.
        seed: the seed of every point (default 0).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (default auto).
        progress: show progress bars on stderr.

    Returns:
        The :class:`Reproduction`: our memorised fractions beside the published ones and the bounds.

    Raises:
        InputError: the grid does not vary the number of heads.
    """
    spec = target_spec("figure2")
    t0 = time.perf_counter()
    request = MemorizeRequest(
        vary="heads" if preset is None else None,
        preset=preset,
        values=values,
        sizes=sizes,
        max_steps=max_steps,
        seed=seed,
        device=device,
        progress=progress,
    )
    varied = request.grid["vary"]  # the grid's axis is known from the request: refused before a point trains
    if varied != "heads":
        raise InputError(
            f"figure2 compares memorisation against the number of heads; preset {preset!r} varies {varied}"
        )
    grid = run_memorize_grid(request)
    s = grid.settings
    d = s.d

    def bound(run: dict):
        return theorem1_bound(
            heads=run["heads"], head_dim=run["head_dim"], n=run["n"], d=d, a1_holds=True, a2_holds=True
        )

    def most(run: dict) -> int | None:  # one head: only three classes can be predicted (one_head_ceiling)
        if run["heads"] != 1 or run["task"] != "classification":
            return None
        kw = {k: run[k] for k in ("size", "n", "task", "context", "classes")}
        return one_head_ceiling(make_dataset(**kw, generator=point_generator(run["seed"]))[2])

    runs = [r.to_dict() for r in grid.runs]
    comps = compare_memorization("figure2", spec, runs, [f.to_dict() for f in grid.fits], bound, most)
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
