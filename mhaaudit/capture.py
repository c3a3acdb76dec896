"""Capture: the reduced features of planned probe points, one pipeline pass per set of weights.

One pass of :func:`mhaaudit.pipeline.stream` per set of weights serves every depth requested for
those weights; the streaming reduction keeps O(T d) per probe point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from . import distributed, phases, pipeline, readings
from .distributed import shared
from .errors import InputError, OfflineError, Param
from .facts import BatchChoice, DuplicateInputs, ModelFacts, SkipCounts, meta_value
from .features import FeatureSet, StreamingReducer
from .hostmem import available_memory
from .models import RandomAttention
from .notes import Note, NoteKind, add_note
from .probes import Probe, probe_for_variant, refuse_weights_without_trained
from .request import DataRequest, ModelRequest, Requests
from .settings import Settings
from .sources import describe_skips
from .sources import images_ahead as builtin_images_ahead


@dataclass
class Captured:
    """Reduced features of every probe point that could be captured, and what the capture saw."""

    features: dict[str, FeatureSet] = field(default_factory=dict)  # variant -> its reduced features
    unavailable: dict[str, str] = field(default_factory=dict)  # variant -> why it could not be captured
    info: ModelFacts | None = None  # the model's ModelInfo, and the weights each set of weights read
    data: str = ""
    skipped: int = 0
    skips: SkipCounts = field(default_factory=SkipCounts)  # inputs skipped, by cause
    image_policy: str = ""
    duplicates: DuplicateInputs | None = None
    notes: list[Note] = field(default_factory=list)
    batch: BatchChoice | None = None  # the batch size used and how it was chosen

    def note(self, text: str, kind: NoteKind, on_note: Callable[[str], None] | None = None) -> None:
        """Keep a note (once: see :func:`add_note`), and pass it to ``on_note`` when it is new."""
        added = add_note(self.notes, text, kind)
        if added is not None and on_note is not None:
            on_note(added)


def _n_above_d_note(info) -> str:
    fix = (
        "pass " + Param("context_length") + f" below {info.d} to audit a setting where it can"
        if info.modality == "text"
        else "use a wider model or a smaller input resolution (fewer patches) to audit a setting where it can"
    )
    return (
        f"n = {info.n} > d = {info.d}: Assumption 1 cannot hold (any n vectors in R^d are dependent) and no "
        "context matrix can have rank n; " + fix
    )


def _reducer_consumer(group: Sequence[Probe], reducers: dict, ra):
    """The consumer that feeds each probe point's tokens (through the random head if asked) to its reducer."""

    def consume(tokens: dict) -> None:
        for p in group:
            x = tokens[p.layer]
            if p.random_attention:  # the paper's random attention layer: part of the forward pass
                with torch.no_grad(), phases.phase("forward", device=x.device):
                    x = ra(x)
            reducers[p.variant].update(x)

    return consume


def _check_limit_fits(data: DataRequest, info, probes: int) -> None:
    """The reduced features of T examples must fit in memory: each probe point keeps two float32
    vectors of d per example, and the checks a float64 copy of one of them and a scaled copy.

    Raises:
        InputError: when ``limit`` examples would need more memory than is available here.
    """
    per_example = probes * 2 * 4 * info.d + 2 * 8 * info.d
    most = available_memory() // max(per_example, 1)
    if data.limit > most:
        raise InputError(
            Param("limit") + f" {data.limit}: the features of {info.name} (d = {info.d}, {probes} probe point(s)) "
            f"would need about {data.limit * per_example / 2**30:.3g} GiB; the largest "
            + Param("limit")
            + " that fits "
            f"in the memory available here is {most}"
        )


def _check_limit_reaches_n(data: DataRequest, info) -> None:
    """Assumptions 1 and 3 draw n of the T examples: T < n is refused before the data pass.

    Raises:
        InputError: when ``limit`` is below the model's n tokens per example.
    """
    if data.limit < info.n:
        way = (
            "raise " + Param("limit") + f" to at least {info.n} or lower " + Param("context_length")
            if info.modality == "text"
            else "raise " + Param("limit") + f" to at least {info.n}"
        )
        raise InputError(
            Param("limit") + f" {data.limit} is below n = {info.n} tokens per example of {info.name}: Assumptions 1 "
            "and 3 draw n of the T examples, so T must be at least n; " + way
        )


def data_notes(fed, limit: int) -> list[str]:
    """What a run that reads its examples once (``capacity``) notes of its pass ``fed`` over the data: the data
    gave fewer examples than ``limit`` (with the inputs skipped and the duplicates dropped), else the inputs
    skipped, by cause, when there were any."""
    short = _short_of_limit_note(fed, limit)
    if short:
        return [short]
    return [f"inputs skipped: {describe_skips(fed.skips)}"] if fed.skips else []


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
    return (
        f"{limit} examples were asked for ("
        + Param("limit")
        + f") but the data gave only {fed.count} usable ones{because}: the audit uses T = {fed.count}"
    )


def images_ahead(data: DataRequest, settings: Settings) -> None:
    """Start making the first built-in images on a helper thread, to be read when the capture begins
    (:func:`mhaaudit.sources.mosaics.make_ahead`): the first batch then need not wait for them. A run
    of an image model calls this before it loads the model. Only in one process, on the CPU, with the
    built-in images, when the data will be read (not when a pass's kept inputs are fed again); elsewhere
    nothing."""
    if settings.device.type == "cpu" and distributed.current().world_size == 1 and not pipeline.inputs_kept():
        builtin_images_ahead(data.data, settings.data_seed_used, data.limit)


def collect_features(
    request: ModelRequest,
    probes: Sequence[Probe],
    data: DataRequest,
    settings: Settings,
    on_note: Callable[[str], None] | None = None,
    contexts: bool = True,
    needs_n: bool = True,
) -> Captured:
    """Run the model over the data once per set of weights and reduce every probe point.

    A ``trained`` group whose weights cannot be had offline is reported unavailable, not raised.
    ``data.limit`` below the model's n is refused as soon as the model's n is known, unless ``needs_n`` is
    False (a caller whose draws are of other sizes, checked by itself). ``contexts=False``: the query and
    Assumption 3 rows only, no context ranks (``StreamingReducer``).
    """
    out = Captured()
    by_init: dict[str, list[Probe]] = {}
    for p in probes:
        by_init.setdefault(p.init, []).append(p)
    for init, group in by_init.items():
        pm = _load_or_unavailable(request, init, settings, max(p.layer for p in group), group, out)
        if pm is None:
            continue
        qi = _take_model(out, pm, request, init, data, len(group), on_note, needs_n)
        fed, reducers, data_notes = _capture_group(pm, init, group, qi, data, settings, contexts)
        data = _take_pass(out, fed, data_notes, init, data, on_note)
        for p in group:
            out.features[p.variant] = reducers[p.variant].result(_feature_meta(request, p, pm.info, fed), fed=fed)
    return out


def _take_model(
    out: Captured,
    pm,
    request: ModelRequest,
    init: str,
    data: DataRequest,
    probes: int,
    on_note: Callable[[str], None] | None,
    needs_n: bool = True,
) -> int:
    """Check the limit against the model loaded for ``probes`` probe points (against its n too where the caller
    ``needs_n``), keep what it says (its info, weights, the n > d note) in ``out``; the query token's index."""
    info = pm.info
    if needs_n:
        _check_limit_reaches_n(data, info)
    _check_limit_fits(data, info, probes)
    if info.n > info.d:
        out.note(_n_above_d_note(info), NoteKind.N_ABOVE_D, on_note)
    if out.info is None or init == "random":  # the random model's facts stand; the weights recorded before are kept
        out.info = replace(ModelFacts.of(info), weights_used=() if out.info is None else out.info.weights_used)
    out.info = out.info.with_weights(init, info.weights_source, info.weights_read)
    qi = pipeline.query_index(pm, request)
    if request.query_index is not None:  # the report and meta name the query the audit read
        out.info = replace(out.info, query_index=qi, query_token=(f"token {qi} (" + Param("query_index") + ")"))
    return qi


def _capture_group(
    pm, init: str, group: Sequence[Probe], qi: int, data: DataRequest, settings: Settings, contexts: bool = True
):
    """One pass of the model over the data, every probe point of ``group`` reduced on the way (``contexts``: with
    their context ranks): (what the pass fed, the reducers by variant, the notes of reading the data)."""
    info = pm.info
    ra = None
    if any(p.random_attention for p in group):
        ra = RandomAttention(info.d, seed=settings.weights_seed_used, device=pm.device)
    rule = settings.rule(torch.float32)  # features that feed a rank decision are float32
    reducers = {p.variant: StreamingReducer(qi, rule, contexts) for p in group}
    data_notes: list[str] = []
    fed = pipeline.stream(
        pm,
        data,
        {p.layer for p in group},
        [_reducer_consumer(group, reducers, ra)],
        settings,
        data_notes,
        label=f"{init} weights: capture",
        need=info.n,
    )
    return fed, reducers, data_notes


def _take_pass(
    out: Captured,
    fed,
    data_notes: list[str],
    init: str,
    data: DataRequest,
    on_note: Callable[[str], None] | None,
) -> DataRequest:
    """Keep what the pass of the ``init`` weights over the data found in ``out`` (notes, batch,
    skips, duplicates); the data request of the next pass (an automatic batch size, once
    found, kept)."""
    for text in data_notes:
        out.note(text, NoteKind.DATA)
    out.batch = out.batch or fed.batch
    if data.batch_size == "auto" and fed.batch is not None:  # the other weights have the same shapes: the same batch
        data = replace(data, batch_size=fed.batch.size)
    out.data, out.skipped, out.duplicates = (
        fed.name,
        max(out.skipped, fed.skipped),
        DuplicateInputs.of(fed.duplicates),
    )
    out.skips, out.image_policy = SkipCounts.of(fed.skips) or out.skips, fed.policy or out.image_policy
    short = _short_of_limit_note(fed, data.limit)
    if short:
        out.note(short, NoteKind.SHORT_OF_LIMIT, on_note)
    if fed.duplicates.get("repeats"):
        out.note(
            f"duplicate inputs: {fed.duplicates_line} (identical inputs give identical vectors at "
            "every layer, a dependence that is about the data, not the model)",
            NoteKind.DUPLICATE_INPUTS,
        )
    return data


def _feature_meta(request: ModelRequest, p: Probe, info, fed) -> dict[str, Any]:
    """The meta of one probe point's reduced features: what was read, with which weights, how."""
    return {
        "model": request.model,
        "variant": p.variant,
        "layer": p.layer,
        "weights": p.init,
        "weights_source": info.weights_source,
        "weights_read": info.weights_read,
        "batch": meta_value(fed.batch),
        "data": fed.name,
        "resolved": info.resolved,
        "random_attention": p.random_attention,
    }


def _load_or_unavailable(
    request: ModelRequest, init: str, settings: Settings, max_layer: int, group: Sequence[Probe], out: Captured
):
    """The model for ``group``, or None with the group marked unavailable when trained weights
    cannot be had offline. Under torchrun every rank must come to the same outcome.

    Raises:
        OfflineError: when random weights (the model's configuration) cannot be had offline.
        RankFailed: when the ranks of a torchrun job disagree about whether the weights can be loaded, or
            built other models (:func:`mhaaudit.readings.refuse_other_models`).
    """
    pm, reason = None, None
    try:
        pm = pipeline.load(request, init, settings, max_layer)
    except OfflineError as exc:
        if init != "trained":
            raise
        reason = exc.message
    distributed.current().same(reason is None, f"whether the {init} weights of {request.model} can be loaded")
    if pm is not None:  # each rank built it from its own node's files
        readings.refuse_other_models(pm, init, settings.weights_seed_used, max_layer)
    if reason is not None:
        out.unavailable.update({p.variant: reason for p in group})
    return pm


@shared
def capture_probe(
    request: ModelRequest,
    data: DataRequest,
    variant: str,
    *,
    settings: Settings,
    layer: int = 1,
    contexts: bool = True,
    needs_n: bool = True,
) -> FeatureSet:
    """Reduced features of one probe point (``variant`` at depth ``layer``, see :func:`probe_for_variant`)
    from checked request objects; :func:`capture_features` with the objects built (``contexts=False``: without
    the context ranks, for the vectors alone; ``needs_n=False``: a limit below the model's n is not refused,
    for a caller that draws other sizes and checks them itself). Its ``meta`` holds, beside what was read, the
    inputs skipped (``skips``, by cause) and the capture's ``notes``. Trained weights that cannot be had offline raise
    :class:`~mhaaudit.errors.OfflineError`."""
    return _capture_one(Requests(request, data, settings), probe_for_variant(variant, layer), contexts, needs_n)


def _capture_one(req: Requests, probe: Probe, contexts: bool = True, needs_n: bool = True) -> FeatureSet:
    refuse_weights_without_trained(req.model.weights_path, probe)
    got = collect_features(req.model, [probe], req.data, req.settings, contexts=contexts, needs_n=needs_n)
    if probe.variant in got.unavailable:
        raise OfflineError(got.unavailable[probe.variant])
    fs = got.features[probe.variant]
    # what reading the data found: the inputs skipped, by cause, and the notes (a T short of the limit, ...)
    fs.meta.update(skips=got.skips.as_dict(), notes=list(got.notes))
    return fs
