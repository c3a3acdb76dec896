"""The audit: plan the probe points, capture them through the pipeline, run the checks.

A *probe point* (a column of the paper's tables) is a choice of initialisation (``init``:
random or trained weights), a depth (0 = embedding output, k = output of block k) and, for the
paper's "random attention" column, one frozen random attention head applied to the embedding
output. One pass of :func:`mhaaudit.pipeline.stream` per set of weights serves every depth
requested for those weights; the streaming reduction keeps O(T d) per probe point.

:func:`audit` is the facade the CLI calls: it resolves the :class:`~mhaaudit.settings.Settings`
once and passes them down. Under ``torchrun`` every rank makes the call (:func:`~mhaaudit.distributed.shared`):
the batches are dealt among the ranks and the reduced features gathered back, so every rank holds
what one process would, and the record ``meta`` names the world size and backend.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import torch

from . import distributed, pipeline, validate
from .batching import available_memory, parse_batch_size
from .checks import CHECK_TITLES, CHECKS, ContextRankResult
from .distributed import describe, shared
from .errors import DataError, InputError, OfflineError, param, plain
from .features import FeatureSet, StreamingReducer
from .io import stamp
from .kruskal import Sweep, kruskal_sweep, set_stats, subset_test
from .models import RandomAttention, modality_of, resolve
from .models.load import check_hub_options, check_revision
from .pipeline import DataRequest, ModelRequest
from .progress import task
from .render import audit_report
from .settings import DEFAULT_SAMPLES, DEFAULT_THRESHOLD, Settings
from .sources import describe_skips
from .tables import ResultTable, table_rows, verdict_tally

IMAGE_VARIANTS = ("embedding", "random-attention", "random", "trained")
VARIANT_HELP = {
    "embedding": "random-initialised embedding module output (layer 0)",
    "random-attention": "LayerNorm (no affine) + one frozen random attention head + skip, on the embedding output",
    "random": "random-initialised model, output of block {layer}",
    "trained": "trained weights, output of block {layer}",
}


@dataclass(frozen=True)
class Probe:
    """One column: weights, depth and whether the random attention head is applied."""

    variant: str  # embedding | random-attention | random | trained | random-L{k} | trained-L{k}
    init: str  # random | trained: the weights the model is built with
    layer: int
    random_attention: bool = False

    def describe(self) -> str:
        if self.random_attention:
            return VARIANT_HELP["random-attention"]
        if self.layer == 0:
            return f"{self.init} weights, embedding output (layer 0)"
        return f"{self.init} weights, output of block {self.layer}"


def plan_probes(modality: str, variants: Sequence[str] | None = None, layers: Sequence[int] | None = None,
                layer: int | None = None) -> list[Probe]:
    """The columns to audit.

    Images: the paper's Table 1 columns (``variants``; ``layer`` sets the depth of ``random`` and
    ``trained``, default 1). Text, or any model with ``layers`` given: random/trained x each layer
    (the paper's Table 3 uses layers 0 and 1); ``layer`` has no effect there and is refused.
    """
    if layer is not None and layers is not None:
        raise InputError("{param:layer} has no effect with {param:layers}: {param:layers} names every depth to audit; give one of them")
    if layer is not None and modality == "text":
        raise InputError("{param:layer} has no effect on a text model (it sets the depth of the image columns); "
                         "give {param:layers} instead (default 0,1)")
    given_layer, layer = layer is not None, 1 if layer is None else layer
    if layer < 1:
        raise InputError(f"{{param:layer}} must be at least 1 (block index; 0 is the embedding output), got {layer}")
    if layers is not None or modality == "text":
        ls = sorted(set(layers if layers is not None else (0, 1)))
        if any(v < 0 for v in ls):
            raise InputError(f"layers must be >= 0, got {ls}")
        inits = _inits_from_variants(variants)
        return [Probe(f"{w}-L{l}", w, l) for w in inits for l in ls]
    vs = list(dict.fromkeys(variants or IMAGE_VARIANTS))
    if given_layer and not {"random", "trained"} & set(vs):
        raise InputError(f"{{param:layer}} has no effect on the columns {', '.join(vs)} (they read the embedding output); "
                         "it sets the depth of the random and trained columns")
    out = []
    for v in vs:
        if v not in IMAGE_VARIANTS:
            raise InputError(f"unknown variant {v!r}; choose from {', '.join(IMAGE_VARIANTS)}")
        if v == "embedding":
            out.append(Probe(v, "random", 0))
        elif v == "random-attention":
            out.append(Probe(v, "random", 0, random_attention=True))
        else:
            out.append(Probe(v, v, layer))
    return out


def _inits_from_variants(variants: Sequence[str] | None) -> list[str]:
    if not variants:
        return ["random", "trained"]
    ws = []
    for v in variants:
        if v not in ("random", "trained"):
            raise InputError(f"with layers, variants are 'random' and/or 'trained', got {v!r}")
        ws.append(v)
    return list(dict.fromkeys(ws))


@dataclass(repr=False)
class Column:
    """The audit of one probe point."""

    probe: Probe
    status: str = "ok"  # ok | unavailable
    reason: str = ""
    features: FeatureSet | None = None
    tests: dict = field(default_factory=dict)  # check -> SubsetTest | ContextRankResult
    sweep: Sweep | None = None
    timings: dict = field(default_factory=dict)
    weights_source: str = ""

    def records(self, model: str, seed: int) -> list[dict]:
        out = []
        for check in CHECKS:
            r = self.tests.get(check)
            if r is None:
                rec = {"check": check, "verdict": "unavailable", "reason": self.reason or "not run"}
            elif isinstance(r, ContextRankResult):
                rec = r.record(seed)
            else:
                rec = r.record()
            out.append({"model": model, "variant": self.probe.variant, "layer": self.probe.layer, **rec})
        return out

    def __repr__(self) -> str:
        what = verdict_tally(self.records("", 0)) if self.status == "ok" else f"unavailable: {self.reason}"
        T = f", T = {self.features.T}" if self.features is not None else ""
        return f"<Column {self.probe.variant} (layer {self.probe.layer}{T}): {what}>"


@dataclass(repr=False)
class AuditResult(ResultTable):
    """The audit of every column; ``to_arrow()`` / ``to_pandas()`` give the rows ``check --out`` writes,
    and a notebook shows it as the report ``check`` prints."""

    model: str
    info: dict
    data: str
    columns: list[Column]
    settings: dict
    timings: dict
    skipped: int = 0
    notes: list = field(default_factory=list)
    duplicates: dict = field(default_factory=dict)  # exact duplicate inputs found: total, repeats, dropped, example
    skips: dict = field(default_factory=dict)  # inputs skipped, by cause: {cause: {"count", "example"}}
    image_policy: str = ""  # images: the rule for modes other than RGB (skipped, or converted)

    def records(self) -> list[dict]:
        return [r for c in self.columns for r in c.records(self.model, self.settings["seed"])]

    def table_records(self) -> list[dict]:
        return table_rows(self.records(), self.sweep_rows())

    def table_meta(self) -> dict:
        return self.meta()

    def renderables(self) -> list:
        return audit_report(self)

    def summary_line(self) -> str:
        T = next((c.features.T for c in self.columns if c.features is not None), None)
        cols = ", ".join(c.probe.variant + ("" if c.status == "ok" else " (unavailable)") for c in self.columns)
        return f"{self.model!r}" + ("" if T is None else f", T = {T}") + f"; columns {cols}: {verdict_tally(self.records())}"

    def meta(self) -> dict:
        """The provenance stamp of the audit, with what each column read and how (the JSON ``meta``)."""
        meta = stamp(command="check", model=self.model, model_info=self.info, data=self.data, skipped=self.skipped,
                     skips=self.skips, image_policy=self.image_policy or None, duplicates=self.duplicates, notes=self.notes, timings_s=self.timings, **self.settings)
        meta["columns"] = {c.probe.variant: {"status": c.status, "reason": c.reason, "layer": c.probe.layer,
                                             "weights": c.probe.init, "describe": c.probe.describe(),
                                             "weights_source": c.weights_source, "timings_s": c.timings,
                                             "weights_read": c.features.meta.get("weights_read") if c.features else None,
                                             "sweep": c.sweep.summary() if c.sweep else None}
                           for c in self.columns}
        return meta

    def sweep_rows(self) -> list[dict]:
        rows = []
        for c in self.columns:
            if c.sweep is not None:
                rows.extend({"model": self.model, "variant": c.probe.variant, "layer": c.probe.layer, **r} for r in c.sweep.rows())
        return rows

    def column(self, variant: str) -> Column:
        for c in self.columns:
            if c.probe.variant == variant:
                return c
        raise KeyError(variant)


# --------------------------------------------------------------------------- capture


@dataclass
class Captured:
    """Reduced features of every probe point that could be captured, and what the capture saw."""

    features: dict = field(default_factory=dict)  # variant -> FeatureSet
    unavailable: dict = field(default_factory=dict)  # variant -> reason
    info: dict = field(default_factory=dict)  # the model's ModelInfo as a dict
    data: str = ""
    skipped: int = 0
    skips: dict = field(default_factory=dict)  # inputs skipped, by cause
    image_policy: str = ""
    duplicates: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    batch: dict = field(default_factory=dict)  # the batch size used and how it was chosen


def _n_above_d_note(info) -> str:
    fix = (f"pass {{param:context_length}} below {info.d} to audit a setting where it can" if info.modality == "text"
           else "use a wider model or a smaller input resolution (fewer patches) to audit a setting where it can")
    return plain(f"n = {info.n} > d = {info.d}: Assumption 1 cannot hold (any n vectors in R^d are dependent) and no "
                 f"context matrix can have rank n; {fix}")


def _reducer_consumer(group: Sequence[Probe], reducers: dict, ra):
    """The consumer that feeds each probe point's tokens (through the random head if asked) to its reducer."""

    def consume(tokens: dict) -> None:
        for p in group:
            x = tokens[p.layer]
            if p.random_attention:
                with torch.no_grad():
                    x = ra(x)
            reducers[p.variant].update(x)

    return consume


def _check_limit_fits(data: DataRequest, info, probes: int) -> None:
    """The reduced features of T examples must fit in memory: each probe point keeps two float32
    vectors of d per example, and the checks a float64 copy of one of them and a scaled copy."""
    per_example = probes * 2 * 4 * info.d + 2 * 8 * info.d
    most = available_memory() // max(per_example, 1)
    if data.limit > most:
        raise InputError(f"{{param:limit}} {data.limit}: the features of {info.name} (d = {info.d}, {probes} probe point(s)) "
                         f"would need about {data.limit * per_example / 2**30:.3g} GiB; the largest {{param:limit}} that fits "
                         f"in the memory available here is {most}")


def _check_limit_reaches_n(data: DataRequest, info) -> None:
    """Assumptions 1 and 3 draw n of the T examples: T < n is refused before the data pass."""
    if data.limit < info.n:
        way = (f"raise {{param:limit}} to at least {info.n} or lower {{param:context_length}}" if info.modality == "text"
               else f"raise {{param:limit}} to at least {info.n}")
        raise InputError(f"{{param:limit}} {data.limit} is below n = {info.n} tokens per example of {info.name}: Assumptions 1 "
                         f"and 3 draw n of the T examples, so T must be at least n; {way}")


def _short_of_limit_note(fed, limit: int) -> str:
    """The note when the data gave fewer examples than ``limit`` asked for (T is then smaller)."""
    if fed.count >= limit:
        return ""
    why = []
    if fed.skips:
        why.append(f"skipped: {describe_skips(fed.skips)}")
    if fed.duplicates.get("dropped"):
        why.append(f"{fed.duplicates['dropped']} exact duplicates dropped")
    because = f" ({'; '.join(why)})" if why else ""
    return (f"{limit} examples were asked for (limit) but the data gave only {fed.count} usable ones{because}: "
            f"the audit uses T = {fed.count}")


def collect_features(request: ModelRequest, probes: Sequence[Probe], data: DataRequest, settings: Settings,
                     on_note: Callable[[str], None] | None = None) -> Captured:
    """Run the model over the data once per set of weights and reduce every probe point.

    A ``trained`` group whose weights cannot be had offline is reported unavailable, not raised.
    ``data.limit`` below the model's n is refused as soon as the model's n is known.
    """
    out = Captured()
    by_init: dict[str, list[Probe]] = {}
    for p in probes:
        by_init.setdefault(p.init, []).append(p)
    rule = settings.rule(torch.float32)  # features that feed a rank decision are float32
    for init, group in by_init.items():
        t0 = time.perf_counter()
        pm = _load_or_unavailable(request, init, settings, max(p.layer for p in group), group, out)
        if pm is None:
            continue
        out.timings[f"load {init}"] = round(time.perf_counter() - t0, 3)
        info = pm.info
        _check_limit_reaches_n(data, info)
        _check_limit_fits(data, info, len(group))
        if info.n > info.d and not any("cannot hold" in x for x in out.notes):
            out.notes.append(_n_above_d_note(info))
            if on_note is not None:
                on_note(out.notes[-1])
        if not out.info or init == "random":
            out.info = info.to_dict()
        out.info[f"{init}_weights_source"] = info.weights_source
        if info.weights_read is not None:
            out.info[f"{init}_weights_read"] = info.weights_read
        qi = pipeline.query_index(pm, request)
        if request.query_index is not None:  # the report and meta name the query the audit read
            out.info.update(query_index=qi, query_token=f"token {qi} (--query-index)")
        ra = None
        if any(p.random_attention for p in group):
            ra = RandomAttention(info.d, seed=settings.seed, device=pm.device)
        reducers = {p.variant: StreamingReducer(qi, rule) for p in group}
        fed = pipeline.stream(pm, data, {p.layer for p in group}, [_reducer_consumer(group, reducers, ra)], settings,
                              out.notes, label=f"{init} weights: capture", need=info.n)
        out.timings[f"capture {init}"] = fed.seconds
        out.batch = out.batch or fed.batch
        if data.batch_size == "auto":  # the other weights have the same shapes: the same batch, not a second search
            data = replace(data, batch_size=fed.batch["size"])
        out.data, out.skipped, out.duplicates = fed.name, max(out.skipped, fed.skipped), fed.duplicates
        out.skips, out.image_policy = fed.skips or out.skips, fed.policy or out.image_policy
        short = _short_of_limit_note(fed, data.limit)
        if short and short not in out.notes:
            out.notes.append(short)
            if on_note is not None:
                on_note(short)
        if fed.duplicates.get("repeats") and fed.duplicates_line not in out.notes:
            out.notes.append(f"duplicate inputs: {fed.duplicates_line} (identical inputs give identical vectors at "
                             "every layer, a dependence that is about the data, not the model)")
        for p in group:
            out.features[p.variant] = reducers[p.variant].result(
                {"model": request.model, "variant": p.variant, "layer": p.layer, "weights": init,
                 "weights_source": info.weights_source, "weights_read": info.weights_read, "batch": fed.batch,
                 "data": fed.name, "resolved": info.resolved,
                 "random_attention": p.random_attention}, fed=fed)
    return out


def _load_or_unavailable(request: ModelRequest, init: str, settings: Settings, max_layer: int,
                         group: Sequence[Probe], out: Captured):
    """The model for ``group``, or None with the group marked unavailable when trained weights
    cannot be had offline. Under torchrun every rank must come to the same outcome."""
    pm, reason = None, None
    try:
        pm = pipeline.load(request, init, settings, max_layer)
    except OfflineError as exc:
        if init != "trained":
            raise
        reason = str(exc)
    shard = distributed.session()
    if shard is not None:
        shard.same(reason is None, f"whether the {init} weights of {request.model} can be loaded")
    if reason is not None:
        out.unavailable.update({p.variant: reason for p in group})
    return pm


def probe_for_variant(variant: str, layer: int = 1) -> Probe:
    """The probe point a variant name stands for: a Table 1 column or ``random-L<k>`` / ``trained-L<k>``."""
    if variant in IMAGE_VARIANTS:
        return plan_probes("image", [variant], layer=layer if variant in ("random", "trained") else None)[0]
    m = re.fullmatch(r"(random|trained)-L(\d+)", variant)
    if not m:
        raise InputError(f"unknown variant {variant!r}; choose from {', '.join(IMAGE_VARIANTS)} or random-L<k>/trained-L<k>")
    return Probe(variant, m.group(1), int(m.group(2)))


@shared
def capture_features(model: str, *, variant: str = "random", layer: int = 1, data: str | None = None, limit: int = 2000,
                     batch_size: int | str = 32, device: str = "auto", seed: int = 0, progress: bool = False,
                     split: str = "train", backend: str | None = None, weights_path: str | None = None,
                     context_length: int | None = None, query_index: int | None = None,
                     rtol: float | None = None, atol: float | None = None, keep_duplicates: bool = False,
                     settings: Settings | None = None, revision: str | None = None,
                     trust_remote_code: bool = False, text_column: str | None = None,
                     image_column: str | None = None, convert_rgb: bool = False) -> FeatureSet:
    """Reduced features of one probe point (what ``mhaaudit kruskal`` uses with no file)."""
    settings = settings or Settings.resolve(device=device, seed=seed, rtol=rtol, atol=atol, progress=progress)
    probe = probe_for_variant(variant, layer)
    if weights_path is not None and probe.init != "trained":
        raise InputError(f"{{param:weights}} loads trained weights; use it with {{param:variants}} trained (or trained-L<k>), not {variant!r}")
    request = model_request(model, backend=backend, weights=weights_path, context_length=context_length,
                            query_index=query_index, revision=revision, trust_remote_code=trust_remote_code)
    got = collect_features(request, [probe], data_request(data, split, limit, batch_size, keep_duplicates,
                                                          text_column=text_column, image_column=image_column,
                                                          convert_rgb=convert_rgb), settings)
    if probe.variant in got.unavailable:
        raise OfflineError(got.unavailable[probe.variant])
    return got.features[probe.variant]


def model_request(model: str, *, backend: str | None = None, weights: str | None = None,
                  context_length: int | None = None, query_index: int | None = None, revision: str | None = None,
                  trust_remote_code: bool = False) -> ModelRequest:
    """A checked :class:`ModelRequest`: a ``--weights`` path that does not exist is refused before any work."""
    if weights is not None and not Path(weights).expanduser().exists():
        raise InputError(f"{{param:weights}} {weights}: does not exist (no such file or folder)")
    if context_length is not None:
        context_length = validate.integer(param("context_length"), context_length)
    if query_index is not None:
        query_index = validate.integer(param("query_index"), query_index, minimum=None)

    revision = check_revision(revision)
    if revision is not None or trust_remote_code:  # refused before any work when they cannot apply
        check_hub_options(resolve(model, backend=backend, weights_path=weights), revision, trust_remote_code)
    return ModelRequest(model, backend=backend, weights_path=weights, context_length=context_length,
                        query_index=query_index, revision=revision, trust_remote_code=bool(trust_remote_code))


def data_request(data: str | None, split: str, limit, batch_size, keep_duplicates: bool = False, *,
                 text_column: str | None = None, image_column: str | None = None,
                 convert_rgb: bool = False) -> DataRequest:
    """A checked :class:`DataRequest` (``batch_size``: a positive integer or ``"auto"``)."""
    for name, value in (("text_column", text_column), ("image_column", image_column)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise InputError(f"{{param:{name}}} must name a column, got {value!r}")
    # Whatever the model, every example kept costs its vectors (at least 64 bytes): a bound before any work.
    return DataRequest(data=data, split=split, limit=validate.integer(param("limit"), limit, maximum=available_memory() // 64),
                       batch_size=parse_batch_size(batch_size), keep_duplicates=bool(keep_duplicates),
                       text_column=text_column, image_column=image_column, convert_rgb=bool(convert_rgb))


# --------------------------------------------------------------------------- checks


def run_checks(fs: FeatureSet, settings: Settings, *, sweep: bool = False, label: str = "") -> tuple[dict, Sweep | None, dict]:
    """GP, A1, A2, A3 (and optionally the sweep) on one reduced feature set, under ``settings``."""
    rule = settings.rule(fs.dtype)
    T, n, d = fs.T, fs.n, fs.d
    timings: dict = {}
    tests: dict = {}
    t0 = time.perf_counter()
    tests["assumption_2"] = fs.assumption_2(rule)
    q_stats = set_stats(fs.queries, rule)
    a3_stats = set_stats(fs.a3, rule)
    timings["set ranks"] = round(time.perf_counter() - t0, 3)
    common = dict(samples=settings.samples, threshold=settings.threshold, seed=settings.seed, rule=rule,
                  device=settings.device)
    for check, X, k, st in (("general_position", fs.queries, min(T, d), q_stats), ("assumption_1", fs.queries, n, q_stats),
                            ("assumption_3", fs.a3, n, a3_stats)):
        t0 = time.perf_counter()
        with task(f"{label} {check} (k = {k})", settings.samples, settings.progress) as adv:
            tests[check] = subset_test(X, k, check=check, title=CHECK_TITLES[check], stats=st, progress=adv,
                                       stop_when_decided=settings.stop_when_decided, **common)
        timings[check] = round(time.perf_counter() - t0, 3)
    sw = None
    if sweep:
        t0 = time.perf_counter()
        with task(f"{label} sweep", settings.samples, settings.progress) as adv:
            sw = kruskal_sweep(fs.queries, stats=q_stats, progress=adv, **common)
        timings["sweep"] = round(time.perf_counter() - t0, 3)
    return tests, sw, timings


def check_features(fs: FeatureSet, *, samples: int = DEFAULT_SAMPLES, threshold: float = DEFAULT_THRESHOLD, seed: int = 0,
                   rtol: float | None = None, atol: float | None = None, device="auto", sweep: bool = False,
                   progress: bool = False, label: str = "", stop_when_decided: bool = True) -> tuple[dict, Sweep | None, dict]:
    """GP, A1, A2, A3 (and optionally the sweep) on one reduced feature set (:func:`run_checks`
    with the settings resolved from these arguments; the defaults are :func:`audit`'s)."""
    settings = Settings.resolve(device=device, samples=samples, threshold=threshold, seed=seed, rtol=rtol, atol=atol,
                                stop_when_decided=stop_when_decided, progress=progress)
    return run_checks(fs, settings, sweep=sweep, label=label)


def _column(p: Probe, got: Captured, settings: Settings, sweep: bool) -> Column:
    col = Column(p)
    if p.variant in got.unavailable:
        col.status, col.reason = "unavailable", got.unavailable[p.variant]
        return col
    fs = got.features[p.variant]
    if fs.T < fs.n:
        # the limit is at least n (checked before the data pass), so the data ran out: raising it cannot help

        skipped = f"; skipped: {describe_skips(got.skips)}" if got.skips else ""
        dups = got.duplicates.get("dropped") or 0
        dropped = f"; {dups} exact duplicates dropped (keep them with {{param:keep_duplicates}})" if dups else ""
        hint = ("; convert the other modes to RGB with {param:convert_rgb} (as torchvision's ImageFolder does)"
                if "not RGB" in (got.skips or {}) and got.image_policy.startswith("RGB only") else "")
        raise DataError(f"the data gave only {fs.T} usable examples, but Assumptions 1 and 3 draw n = {fs.n} of the "
                        f"T examples, so T must be at least {fs.n}{skipped}{dropped}{hint}; supply more data")
    col.features = fs
    col.weights_source = fs.meta.get("weights_source", "")
    col.tests, col.sweep, col.timings = run_checks(fs, settings, sweep=sweep, label=p.variant)
    return col


@shared
def audit(
    model: str,
    *,
    variants: Sequence[str] | None = None,
    layer: int | None = None,
    layers: Sequence[int] | None = None,
    data: str | None = None,
    split: str = "train",
    limit: int = 2000,
    batch_size: int | str = 32,
    samples: int = DEFAULT_SAMPLES,
    threshold: float = DEFAULT_THRESHOLD,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    device: str = "auto",
    backend: str | None = None,
    weights: str | None = None,
    context_length: int | None = None,
    query_index: int | None = None,
    sweep: bool = False,
    progress: bool = False,
    stop_when_decided: bool = True,
    keep_duplicates: bool = False,
    on_note: Callable[[str], None] | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    text_column: str | None = None,
    image_column: str | None = None,
    convert_rgb: bool = False,
) -> AuditResult:
    """Audit ``model`` on ``data``: the paper's Table 1 (images) or Table 3 (text) and more.

    ``weights`` is a local folder or file with trained weights for the ``trained`` column(s)
    (refused when no trained column is audited). ``layer`` (default 1) is the depth of the image
    columns; ``layers`` audits several depths. ``stop_when_decided`` (default, as in ``check``
    without ``--all-draws``) lets each Monte-Carlo test stop once its verdict is settled; False
    makes every draw. Exact duplicate inputs are dropped before the forward pass
    (the same ones in every column) unless ``keep_duplicates``; what was found is in
    ``AuditResult.duplicates`` and the notes. ``batch_size="auto"`` chooses the batch (see
    :mod:`mhaaudit.batching`); ``revision`` and ``trust_remote_code`` are passed to the hub reads.
    ``text_column`` / ``image_column`` choose the column of the data (found otherwise: see
    :func:`mhaaudit.sources.choose_column`); ``convert_rgb`` converts images of other modes to RGB
    (as torchvision's ImageFolder does) instead of skipping them, the paper's rule. Inputs skipped
    are in ``AuditResult.skips`` by cause; a run that gets fewer than ``limit`` examples says so
    in the notes and the table.
    """
    settings = Settings.resolve(device=device, samples=samples, threshold=threshold, seed=seed, rtol=rtol, atol=atol,
                                stop_when_decided=stop_when_decided, progress=progress)
    request = model_request(model, backend=backend, weights=weights, context_length=context_length,
                            query_index=query_index, revision=revision, trust_remote_code=trust_remote_code)
    data_req = data_request(data, split, limit, batch_size, keep_duplicates, text_column=text_column,
                            image_column=image_column, convert_rgb=convert_rgb)
    t_start = time.perf_counter()
    probes = plan_probes(modality_of(model, backend=backend, weights_path=weights), variants, layers, layer)
    if weights is not None and not any(p.init == "trained" for p in probes):
        raise InputError("{param:weights} has no effect without a trained column; add trained to {param:variants}")
    got = collect_features(request, probes, data_req, settings, on_note=on_note)
    if not got.features:  # every column unavailable: there is nothing to audit, and that is no success
        raise OfflineError("no column could be audited: " + "; ".join(dict.fromkeys(got.unavailable.values())))
    columns = [_column(p, got, settings, sweep) for p in probes]
    run = dict(settings.as_dict(), limit=data_req.limit, batch_size=got.batch.get("size", data_req.batch_size),
               batch_size_choice=got.batch.get("how"), layer=1 if layer is None else layer,
               layers=list(layers) if layers is not None else None, **describe())
    got.timings["total"] = round(time.perf_counter() - t_start, 3)
    return AuditResult(model=model, info=got.info, data=got.data, columns=columns, settings=run, timings=got.timings,
                       skipped=got.skipped, notes=got.notes, duplicates=got.duplicates, skips=got.skips,
                       image_policy=got.image_policy)
