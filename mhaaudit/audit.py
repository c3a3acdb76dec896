"""The audit: model probe -> streaming reduction -> checks, for one or several probe points.

A *probe point* (a column of the paper's tables) is a choice of weights (random or trained),
a depth (0 = embedding output, k = output of block k) and, for the paper's "random attention"
column, one frozen random attention head applied to the embedding output. One forward pass per
batch and per set of weights serves every depth requested for those weights.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from .checks import CHECKS, ContextRankResult
from .errors import DataError, InputError, OfflineError
from .features import FeatureSet, StreamingReducer
from .kruskal import DEFAULT_SAMPLES, DEFAULT_THRESHOLD, Sweep, kruskal_sweep, set_stats, subset_test
from .rank import RankRule

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
    weights: str  # random | trained
    layer: int
    random_attention: bool = False

    def describe(self) -> str:
        if self.random_attention:
            return VARIANT_HELP["random-attention"]
        if self.layer == 0:
            return f"{self.weights} weights, embedding output (layer 0)"
        return f"{self.weights} weights, output of block {self.layer}"


def plan_probes(modality: str, variants: Sequence[str] | None = None, layers: Sequence[int] | None = None,
                layer: int = 1) -> list[Probe]:
    """The columns to audit.

    Images: the paper's Table 1 columns (``variants``; ``layer`` sets the depth of ``random`` and
    ``trained``). Text, or any model with ``layers`` given: random/trained x each layer (the
    paper's Table 3 uses layers 0 and 1).
    """
    if layer < 1:
        raise InputError(f"--layer must be at least 1 (block index; 0 is the embedding output), got {layer}")
    if layers is not None or modality == "text":
        ls = sorted(set(layers if layers is not None else (0, 1)))
        if any(v < 0 for v in ls):
            raise InputError(f"layers must be >= 0, got {ls}")
        ws = _weights_from_variants(variants)
        return [Probe(f"{w}-L{l}", w, l) for w in ws for l in ls]
    vs = list(dict.fromkeys(variants or IMAGE_VARIANTS))
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


def _weights_from_variants(variants: Sequence[str] | None) -> list[str]:
    if not variants:
        return ["random", "trained"]
    ws = []
    for v in variants:
        if v not in ("random", "trained"):
            raise InputError(f"with layers, variants are 'random' and/or 'trained', got {v!r}")
        ws.append(v)
    return list(dict.fromkeys(ws))


@dataclass
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


@dataclass
class AuditResult:
    model: str
    info: dict
    data: str
    columns: list[Column]
    settings: dict
    timings: dict
    skipped: int = 0
    notes: list = field(default_factory=list)

    def records(self) -> list[dict]:
        return [r for c in self.columns for r in c.records(self.model, self.settings["seed"])]

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


def _load(model: str, weights: str, *, backend, weights_path, device, context_length, max_layer, seed):
    from .models import load_model

    return load_model(model, weights=weights, backend=backend, weights_path=weights_path if weights == "trained" else None,
                      device=device, context_length=context_length, max_layer=max_layer, seed=seed)


def _batches(pm, *, data, split, limit, batch_size, seed, notes: list):
    """Model-ready example batches for ``pm`` and a description of the data."""
    info = pm.info
    if info.modality == "image":
        from .sources import image_source

        src = image_source(data, split=split, limit=limit, seed=seed)
        return src, src.batches(batch_size)
    from .sources import bert_pair_examples, gpt_window_examples, offline_tokenizer, text_source

    src = text_source(data, split=split, seed=seed)
    tok = pm.tokenizer
    if tok is None and info.weights == "trained":
        from .errors import ModelError

        raise ModelError(f"{info.name} has trained weights but no tokenizer files (vocab.txt, vocab.json, "
                         "tokenizer.json); a trained text model must be fed its own vocabulary: save the tokenizer "
                         "beside the weights with tokenizer.save_pretrained(folder)")
    if tok is None:
        vocab = int(getattr(pm.config, "vocab_size", 0) or 0)
        tok, tok_desc = offline_tokenizer(info.family, vocab)
        notes.append(f"tokenizer: {tok_desc} (no tokenizer shipped with the model offline)")
    decoder = info.query_index == info.n - 1 and info.n > 1
    build = gpt_window_examples if decoder else bert_pair_examples
    ex = build(src, tok, info.n, limit, seed=seed)
    ids = ex.ids
    # Segment ids as BERT's next-sentence inputs have them: 0 up to and including [SEP], 1 after.
    segments = None
    if not decoder and ex.s1_lengths is not None and int(getattr(pm.config, "type_vocab_size", 0) or 0) >= 2:
        segments = [[0] * (s1 + 2) + [1] * (info.n - s1 - 2) for s1 in ex.s1_lengths]

    class _Text:
        name = ex.description
        skipped = getattr(src, "skipped", 0)

    def gen():
        for i in range(0, len(ids), batch_size):
            batch = pm.preprocess(ids[i : i + batch_size])
            if segments is not None:
                batch["token_type_ids"] = torch.tensor(segments[i : i + batch_size], dtype=torch.long, device=pm.device)
            yield batch

    return _Text(), gen()


def collect_features(
    model: str,
    probes: Sequence[Probe],
    *,
    data: str | None = None,
    split: str = "train",
    limit: int = 2000,
    batch_size: int = 32,
    device: str = "auto",
    seed: int = 0,
    backend: str | None = None,
    weights_path: str | None = None,
    context_length: int | None = None,
    query_index: int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    progress: bool = False,
    on_note: Callable[[str], None] | None = None,
) -> tuple[dict[str, FeatureSet], dict[str, str], dict, str, int, list[str], dict]:
    """Run the model(s) over the data once per set of weights and reduce every probe point.

    Returns ``(features by variant, unavailable reasons by variant, model info, data
    description, skipped examples, notes, timings)``.
    """
    from .progress import task

    if limit < 1:
        raise InputError(f"--limit must be at least 1, got {limit}")
    if batch_size < 1:
        raise InputError(f"--batch-size must be at least 1, got {batch_size}")
    feats: dict[str, FeatureSet] = {}
    unavailable: dict[str, str] = {}
    info_d: dict = {}
    data_name = ""
    skipped = 0
    notes: list[str] = []
    timings: dict = {}
    by_weights: dict[str, list[Probe]] = {}
    for p in probes:
        by_weights.setdefault(p.weights, []).append(p)
    for weights, group in by_weights.items():
        max_layer = max(p.layer for p in group)
        t0 = time.perf_counter()
        try:
            pm = _load(model, weights, backend=backend, weights_path=weights_path, device=device,
                       context_length=context_length, max_layer=max(1, max_layer), seed=seed)
        except OfflineError as exc:
            if weights != "trained":
                raise
            for p in group:
                unavailable[p.variant] = str(exc)
            continue
        timings[f"load {weights}"] = round(time.perf_counter() - t0, 3)
        info = pm.info
        if info.n > info.d and not any("cannot hold" in x for x in notes):
            fix = (f"pass --context-length below {info.d} to audit a setting where it can" if info.modality == "text"
                   else "use a wider model or a smaller input resolution (fewer patches) to audit a setting where it can")
            msg = (f"n = {info.n} > d = {info.d}: Assumption 1 cannot hold (any n vectors in R^d are dependent) and no "
                   f"context matrix can have rank n; {fix}")
            notes.append(msg)
            if on_note is not None:
                on_note(msg)
        if not info_d or weights == "random":
            info_d = info.to_dict()
        info_d[f"{weights}_weights_source"] = info.weights_source
        qi = info.query_index if query_index is None else query_index
        if not -info.n <= qi < info.n:
            raise InputError(f"--query-index {qi} is out of range for n = {info.n} tokens")
        layers = sorted({p.layer for p in group})
        ra = None
        if any(p.random_attention for p in group):
            from .models import RandomAttention

            ra = RandomAttention(info.d, seed=seed, device=pm.device)
        rule = RankRule.for_dtype(torch.float32, rtol=rtol, atol=atol)
        reducers = {p.variant: StreamingReducer(qi, rule) for p in group}
        t0 = time.perf_counter()
        src, batches = _batches(pm, data=data, split=split, limit=limit, batch_size=batch_size, seed=seed, notes=notes)
        count = 0
        with task(f"{weights} weights: capture", limit, progress) as adv:
            for batch in batches:
                size = len(batch["input_ids"]) if isinstance(batch, dict) else len(batch)
                if not size:
                    continue
                out = pm.capture(batch, layers)
                for p in group:
                    tokens = out[p.layer]
                    if p.random_attention:
                        with torch.no_grad():
                            tokens = ra(tokens)
                    reducers[p.variant].update(tokens)
                count += size
                adv(size)
        timings[f"capture {weights}"] = round(time.perf_counter() - t0, 3)
        data_name = src.name
        skipped = max(skipped, int(getattr(src, "skipped", 0) or 0))
        if count == 0:
            raise DataError(f"the data source yielded no usable examples ({src.name})")
        for p in group:
            feats[p.variant] = reducers[p.variant].result(
                {"model": model, "variant": p.variant, "layer": p.layer, "weights": weights,
                 "weights_source": info.weights_source, "data": src.name, "resolved": info.resolved,
                 "random_attention": p.random_attention}
            )
    return feats, unavailable, info_d, data_name, skipped, notes, timings


def capture_features(model: str, *, variant: str = "random", layer: int = 1, data: str | None = None, limit: int = 2000,
                     batch_size: int = 32, device: str = "auto", seed: int = 0, progress: bool = False, **kw) -> FeatureSet:
    """Reduced features of one probe point (what ``mhaaudit kruskal`` uses with no file)."""
    from .models import load_model  # noqa: F401  (import errors surface here, before any work)

    if variant in IMAGE_VARIANTS:
        probe = plan_probes("image", [variant], layer=layer)[0]
    else:
        import re

        m = re.fullmatch(r"(random|trained)-L(\d+)", variant)
        if not m:
            raise InputError(f"unknown variant {variant!r}; choose from {', '.join(IMAGE_VARIANTS)} or random-L<k>/trained-L<k>")
        probe = Probe(variant, m.group(1), int(m.group(2)))
    feats, unavailable, *_ = collect_features(model, [probe], data=data, limit=limit, batch_size=batch_size,
                                              device=device, seed=seed, progress=progress, **kw)
    if probe.variant in unavailable:
        raise OfflineError(unavailable[probe.variant])
    return feats[probe.variant]


# --------------------------------------------------------------------------- checks


def check_features(fs: FeatureSet, *, samples: int = DEFAULT_SAMPLES, threshold: float = DEFAULT_THRESHOLD, seed: int = 0,
                   rtol: float | None = None, atol: float | None = None, device="cpu", sweep: bool = False,
                   progress: bool = False, label: str = "", stop_when_decided: bool = False) -> tuple[dict, Sweep | None, dict]:
    """GP, A1, A2, A3 (and optionally the sweep) on one reduced feature set."""
    from .settings import resolve_device
    from .progress import task

    dev = resolve_device(device)
    rule = fs.rule(rtol, atol)
    T, n, d = fs.T, fs.n, fs.d
    timings = {}
    tests: dict = {}
    t0 = time.perf_counter()
    tests["assumption_2"] = fs.assumption_2(rule)
    q_stats = set_stats(fs.queries, rule)
    a3_stats = set_stats(fs.a3, rule)
    timings["set ranks"] = round(time.perf_counter() - t0, 3)
    common = dict(samples=samples, threshold=threshold, seed=seed, rule=rule, device=dev)
    for check, X, k, st in (("general_position", fs.queries, min(T, d), q_stats), ("assumption_1", fs.queries, n, q_stats),
                            ("assumption_3", fs.a3, n, a3_stats)):
        t0 = time.perf_counter()
        with task(f"{label} {check} (k = {k})", samples, progress) as adv:
            tests[check] = subset_test(X, k, check=check, stats=st, progress=adv, stop_when_decided=stop_when_decided, **common)
        timings[check] = round(time.perf_counter() - t0, 3)
    sw = None
    if sweep:
        t0 = time.perf_counter()
        with task(f"{label} sweep", samples, progress) as adv:
            sw = kruskal_sweep(fs.queries, stats=q_stats, progress=adv, **common)
        timings["sweep"] = round(time.perf_counter() - t0, 3)
    return tests, sw, timings


def audit(
    model: str,
    *,
    variants: Sequence[str] | None = None,
    layer: int = 1,
    layers: Sequence[int] | None = None,
    data: str | None = None,
    split: str = "train",
    limit: int = 2000,
    batch_size: int = 32,
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
    stop_when_decided: bool = False,
    on_note: Callable[[str], None] | None = None,
) -> AuditResult:
    """Audit ``model`` on ``data``: the paper's Table 1 (images) or Table 3 (text) and more.

    ``weights`` is a local folder or file with trained weights for the ``trained`` column.
    ``stop_when_decided`` lets each Monte-Carlo test stop once its verdict is settled.
    """
    from .settings import device_name, resolve_device
    from .kruskal import validate_params
    from .models import load_model  # noqa: F401

    validate_params(samples=samples, threshold=threshold)
    dev = resolve_device(device)
    t_start = time.perf_counter()
    modality = _modality_of(model, backend=backend, weights_path=weights)
    probes = plan_probes(modality, variants, layers, layer)
    feats, unavailable, info, data_name, skipped, notes, timings = collect_features(
        model, probes, data=data, split=split, limit=limit, batch_size=batch_size, device=str(dev), seed=seed,
        backend=backend, weights_path=weights, context_length=context_length, query_index=query_index,
        rtol=rtol, atol=atol, progress=progress, on_note=on_note,
    )
    columns = []
    for p in probes:
        col = Column(p)
        if p.variant in unavailable:
            col.status, col.reason = "unavailable", unavailable[p.variant]
            columns.append(col)
            continue
        fs = feats[p.variant]
        if fs.T < fs.n:
            raise DataError(f"only {fs.T} examples were read but Assumptions 1 and 3 need at least n = {fs.n}; "
                            "raise --limit or supply more data")
        col.features = fs
        col.weights_source = fs.meta.get("weights_source", "")
        col.tests, col.sweep, col.timings = check_features(
            fs, samples=samples, threshold=threshold, seed=seed, rtol=rtol, atol=atol, device=dev, sweep=sweep,
            progress=progress, label=p.variant, stop_when_decided=stop_when_decided,
        )
        columns.append(col)
    settings = dict(samples=samples, threshold=threshold, seed=seed, device=device_name(dev),
                    tolerance=RankRule.for_dtype(torch.float32, rtol=rtol, atol=atol).as_dict(), limit=limit,
                    batch_size=batch_size, layer=layer, layers=list(layers) if layers is not None else None,
                    stop_when_decided=stop_when_decided)
    timings["total"] = round(time.perf_counter() - t_start, 3)
    return AuditResult(model=model, info=info, data=data_name, columns=columns, settings=settings, timings=timings,
                       skipped=skipped, notes=notes)


def _modality_of(model: str, *, backend: str | None = None, weights_path: str | None = None) -> str:
    """Image or text, decided from the name or the config, without building the model."""
    from .models import modality_of

    return modality_of(model, backend=backend, weights_path=weights_path)
