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

import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from . import distributed, phases, pipeline
from .batching import available_memory
from .checks import REGISTRY, ContextRankResult
from .distributed import describe, shared
from .errors import DataError, InputError, OfflineError, OutputError, param, plain
from .facts import AuditSettings, BatchChoice, DuplicateInputs, JobFacts, ModelFacts, ReadFacts, SkipCounts, meta_value
from .features import FeatureSet, StreamingReducer
from .files import first_name_under
from .io import check_folder_writable, make_output_folder, stamp
from .kruskal import SubsetTest, Sweep, kruskal_sweep, set_stats
from .models import RandomAttention, modality_of
from .models.shards import weights_read_text
from .progress import task
from .render import audit_report
from .request import (
    KEYWORDS,
    Conveniences,
    DataRequest,
    ModelRequest,
    Requests,
    build_requests,
    build_settings,
    keyword_conveniences,
)
from .seeds import SeedsResult, plan_for
from .seeds.check import audit_seeds
from .settings import DEFAULT_SAMPLES, DEFAULT_THRESHOLD, Settings
from .sources import describe_skips
from .tables import StoredSweepResult, verdict_tally
from .theory import CapacityBound, theorem1_bound

if TYPE_CHECKING:  # the convenience keywords, typed for mypy
    from typing_extensions import Unpack

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
        """What the column reads, in words: its weights and the layer whose output it takes."""
        if self.random_attention:
            return VARIANT_HELP["random-attention"]
        if self.layer == 0:
            return f"{self.init} weights, embedding output (layer 0)"
        return f"{self.init} weights, output of block {self.layer}"


def plan_probes(
    modality: str, variants: Sequence[str] | None = None, layers: Sequence[int] | None = None, layer: int | None = None
) -> list[Probe]:
    """The columns to audit.

    Images: the paper's Table 1 columns (``variants``; ``layer`` sets the depth of ``random`` and
    ``trained``, default 1). Text, or any model with ``layers`` given: random/trained x each layer
    (the paper's Table 3 uses layers 0 and 1); ``layer`` has no effect there and is refused.

    Returns:
        The probe points (one a column), in the table's order.

    Raises:
        InputError: when ``layer`` is given beside ``layers`` or for a text model, or is below 1; a layer is
            negative; or a variant is unknown or has no column at the depth asked.
    """
    _check_layer(modality, layer, layers)
    if layers is not None or modality == "text":
        return _depth_probes(variants, layers)
    return _image_probes(variants, layer)


def _check_layer(modality: str, layer: int | None, layers: Sequence[int] | None) -> None:
    """``layer`` is refused beside ``layers`` and for a text model, and must be a block (at least 1).

    Raises:
        InputError: when ``layer`` is given beside ``layers`` or for a text model, or is below 1.
    """
    if layer is not None and layers is not None:
        raise InputError(
            "{param:layer} has no effect with {param:layers}: {param:layers} names every depth to audit; "
            "give one of them"
        )
    if layer is not None and modality == "text":
        raise InputError(
            "{param:layer} has no effect on a text model (it sets the depth of the image columns); "
            "give {param:layers} instead (default 0,1)"
        )
    if layer is not None and layer < 1:
        raise InputError(f"{{param:layer}} must be at least 1 (block index; 0 is the embedding output), got {layer}")


def _depth_probes(variants: Sequence[str] | None, layers: Sequence[int] | None) -> list[Probe]:
    """random and/or trained weights at each depth (default 0 and 1, the paper's Table 3).

    Raises:
        InputError: when a layer is negative, or a variant is not random or trained.
    """
    ls = sorted(set(layers if layers is not None else (0, 1)))
    if any(v < 0 for v in ls):
        raise InputError(f"layers must be >= 0, got {ls}")
    inits = _inits_from_variants(variants)
    return [Probe(f"{w}-L{depth}", w, depth) for w in inits for depth in ls]


def _image_probes(variants: Sequence[str] | None, layer: int | None) -> list[Probe]:
    """The paper's Table 1 columns, the random and trained ones at depth ``layer`` (default 1).

    Raises:
        InputError: when ``layer`` is given without a random or trained column, or a variant is unknown.
    """
    vs = list(dict.fromkeys(variants or IMAGE_VARIANTS))
    if layer is not None and not {"random", "trained"} & set(vs):
        raise InputError(
            f"{{param:layer}} has no effect on the columns {', '.join(vs)} (they read the embedding output); "
            "it sets the depth of the random and trained columns"
        )
    out = []
    for v in vs:
        if v not in IMAGE_VARIANTS:
            raise InputError(f"unknown variant {v!r}; choose from {', '.join(IMAGE_VARIANTS)}")
        if v == "embedding":
            out.append(Probe(v, "random", 0))
        elif v == "random-attention":
            out.append(Probe(v, "random", 0, random_attention=True))
        else:
            out.append(Probe(v, v, 1 if layer is None else layer))
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


#: What one check of a column returns: a Monte-Carlo / exact subset test, or Assumption 2's exact counts.
CheckResult = SubsetTest | ContextRankResult


class NoteKind(str, Enum):
    """What fact a note of an audit reports: the key notes are de-duplicated by."""

    N_ABOVE_D = "n-above-d"  # n > d: Assumption 1 cannot hold (said once per run)
    SHORT_OF_LIMIT = "short-of-limit"  # the data gave fewer examples than the limit
    DUPLICATE_INPUTS = "duplicate-inputs"  # exact duplicate inputs were found
    DATA = "data"  # what reading the data found (tokenizer, truncation, ...)


class Note(str):
    """One note of an audit: its text (a ``str``, as the report and the JSON ``notes`` give it)
    and its :class:`NoteKind`. Equal to its text."""

    kind: NoteKind

    def __new__(cls, text: str, kind: NoteKind | str = NoteKind.DATA) -> Note:
        """The note ``text`` of ``kind`` (a :class:`NoteKind` or its value).

        Raises:
            ValueError: when ``kind`` is not a :class:`NoteKind` value.
        """
        note = super().__new__(cls, text)
        note.kind = NoteKind(kind)
        return note

    def document(self) -> dict:
        """The note as JSON data: ``{"kind": ..., "text": ...}``."""
        return {"kind": self.kind.value, "text": str(self)}

    @classmethod
    def from_document(cls, data) -> Note:
        """The note :meth:`document` wrote (a bare string is read as a data note).

        Raises:
            ValueError: when ``data`` is neither a string nor an object of exactly ``kind`` and a text string.
        """
        if isinstance(data, str):
            return cls(data)
        if not isinstance(data, dict) or set(data) != {"kind", "text"} or not isinstance(data["text"], str):
            raise ValueError(f"a note is an object with kind and text, got {data!r}")
        return cls(data["text"], data["kind"])


#: Kinds of note one run says once, whatever their wording (the first one stays).
ONCE_PER_RUN = frozenset({NoteKind.N_ABOVE_D})


def add_note(notes: list, text: str, kind: NoteKind = NoteKind.DATA) -> Note | None:
    """Append ``text`` as a :class:`Note` of ``kind`` unless the run has it already (the same
    text, or any note of a kind said once per run); the note added, or None."""
    if any((kind in ONCE_PER_RUN and getattr(n, "kind", None) == kind) or n == text for n in notes):
        return None
    note = Note(text, kind)
    notes.append(note)
    return note


@dataclass(repr=False)
class Column:
    """The audit of one probe point.

    ``T`` is the number of examples its checks read and ``weights_read`` what loading its trained
    weights read (None for random weights). ``bound`` is what Theorem 1 / Remark 1 concludes from
    its verdicts with the model's heads (None when the model does not say its heads, or the column
    is unavailable), and ``bound_hint`` what would give a count when there is none.
    ``features`` are the reduced features themselves (not stored in the results files).
    """

    probe: Probe
    status: str = "ok"  # ok | unavailable
    reason: str = ""
    features: FeatureSet | None = field(default=None, compare=False, metadata={"document": False})
    tests: dict[str, CheckResult] = field(default_factory=dict)  # check -> its result
    sweep: Sweep | None = None
    timings: dict[str, float] = field(default_factory=dict)
    weights_source: str = ""
    T: int | None = None
    weights_read: ReadFacts | None = None
    bound: CapacityBound | None = None
    bound_hint: str = ""

    def records(self, model: str) -> list[dict]:
        """One record per registered check, tagged with ``model`` and the column; ``unavailable`` with the
        reason where the check did not run."""
        out = []
        for check in REGISTRY:
            r = self.tests.get(check)
            rec = (
                {"check": check, "verdict": "unavailable", "reason": self.reason or "not run"}
                if r is None
                else r.record()
            )
            out.append({"model": model, "variant": self.probe.variant, "layer": self.probe.layer, **rec})
        return out

    def __repr__(self) -> str:
        what = verdict_tally(self.records("")) if self.status == "ok" else f"unavailable: {self.reason}"
        T = f", T = {self.T}" if self.T is not None else ""
        return f"<Column {self.probe.variant} (layer {self.probe.layer}{T}): {what}>"


@dataclass(repr=False)
class AuditResult(StoredSweepResult):
    """The audit of every column; ``to_arrow()`` / ``to_pandas()`` give the rows ``check --out`` writes,
    and a notebook shows it as the report ``check`` prints. ``AuditResult.from_json`` /
    ``from_parquet`` read it back from what ``check --format json`` printed or ``--out`` wrote."""

    COMMAND: ClassVar[str] = "check"

    model: str
    info: ModelFacts  # the model's ModelInfo, and the weights each column read
    data: str
    columns: list[Column]
    settings: AuditSettings  # the run's settings, as the JSON meta gives them
    timings: dict[str, float]
    skipped: int = 0
    notes: list[Note] = field(default_factory=list)
    duplicates: DuplicateInputs | None = None  # exact duplicate inputs found (None: none looked for)
    skips: SkipCounts = field(default_factory=SkipCounts)  # inputs skipped, by cause
    image_policy: str = ""  # images: the rule for modes other than RGB (skipped, or converted)

    @property
    def T(self) -> int | None:
        """The number of examples audited (that of the first column audited; None when none was)."""
        return next((c.T for c in self.columns if c.T is not None), None)

    def records(self) -> list[dict]:
        """Every column's records (:meth:`Column.records`), column by column."""
        return [r for c in self.columns for r in c.records(self.model)]

    REPORT = audit_report

    def summary_line(self) -> str:
        """The model, T, the columns (those unavailable said so) and the tally of verdicts."""
        T = self.T
        cols = ", ".join(c.probe.variant + ("" if c.status == "ok" else " (unavailable)") for c in self.columns)
        return (
            f"{self.model!r}"
            + ("" if T is None else f", T = {T}")
            + f"; columns {cols}: {verdict_tally(self.records())}"
        )

    def meta(self) -> dict:
        """The provenance stamp of the audit, with what each column read and how (the JSON ``meta``)."""
        meta = stamp(
            command="check",
            model=self.model,
            model_info=self.info.as_dict(),
            data=self.data,
            skipped=self.skipped,
            skips=self.skips.as_dict(),
            image_policy=self.image_policy or None,
            duplicates=self.duplicates.as_dict() if self.duplicates is not None else {},
            notes=self.notes,
            timings_s=self.timings,
            **self.settings.as_dict(),
        )
        meta["columns"] = {
            c.probe.variant: {
                "status": c.status,
                "reason": c.reason,
                "layer": c.probe.layer,
                "weights": c.probe.init,
                "describe": c.probe.describe(),
                "weights_source": c.weights_source,
                "timings_s": c.timings,
                "weights_read": meta_value(c.weights_read),
                "weights_read_text": weights_read_text(meta_value(c.weights_read)),
                "sweep": c.sweep.summary() if c.sweep else None,
                "bound": c.bound.to_dict() if c.bound is not None else None,
                "bound_hint": c.bound_hint,
            }
            for c in self.columns
        }
        meta["result"] = self.result_document()
        return meta

    def sweep_rows(self) -> list[dict]:
        """The sweep rows of every column swept, tagged with the model, the column and its layer."""
        rows: list[dict] = []
        for c in self.columns:
            if c.sweep is not None:
                rows.extend(
                    {"model": self.model, "variant": c.probe.variant, "layer": c.probe.layer, **r}
                    for r in c.sweep.rows()
                )
        return rows

    def column(self, variant: str) -> Column:
        """The column named ``variant``.

        Raises:
            KeyError: when no column is named ``variant``.
        """
        for c in self.columns:
            if c.probe.variant == variant:
                return c
        raise KeyError(variant)

    def save_features(self, folder: str | Path) -> Path:
        """Write each audited column's reduced features to ``folder/<variant>`` (what ``check
        --save-features`` writes, for ``mhaaudit kruskal`` or a later audit); staged with a run's
        other outputs, all written or none. Returns the folder.

        Raises:
            OutputError: when the folder cannot be made.
        """
        folder = Path(folder)
        try:
            make_output_folder(folder)
        except OutputError:
            raise
        except OSError as exc:
            raise OutputError(
                f"{{param:save_features}} {folder}: cannot create the folder ({exc.strerror or exc})"
            ) from exc
        for c in self.columns:
            if c.features is not None:
                c.features.save(folder / c.probe.variant)
        return folder


# the subfolders AuditResult.save_features writes: a column's variant, at a depth or not
COLUMN_FOLDER = rf"({'|'.join(re.escape(v) for v in IMAGE_VARIANTS)})(-L\d+)?"


def check_features_folder(folder: str | Path, inputs: Sequence) -> Path:
    """Before any work: the folder :meth:`AuditResult.save_features` will write must be writable, and
    where a column's subfolder goes, a symbolic link (the features would be written wherever it
    points) or one of ``inputs`` (paths the run reads) is refused with
    :class:`~mhaaudit.errors.OutputError`.

    Returns:
        The folder as a ``Path``.

    Raises:
        OutputError: when the folder cannot be made or written, a column's subfolder in it is a symbolic link, or
            an input lies where a column's features would be written.
    """
    folder = check_folder_writable(folder, param("save_features"))
    if folder.is_dir():
        for entry in sorted(folder.iterdir()):
            if entry.is_symlink() and re.fullmatch(COLUMN_FOLDER, entry.name):
                raise OutputError(
                    f"{{param:save_features}} {folder}: {entry.name} is a symbolic link (to "
                    f"{os.readlink(entry)}); the features are written into real folders only: remove it "
                    "or choose another folder"
                )
    for i in inputs:
        if i is None or not os.path.lexists(os.path.expanduser(str(i))):
            continue
        first = first_name_under(i, folder)  # by device and inode: a second name of the folder counts
        if first is not None and re.fullmatch(COLUMN_FOLDER, first):
            raise OutputError(
                f"{{param:save_features}} {folder}: the input {i} lies where the features would be written; "
                "write them elsewhere"
            )
    return folder


# --------------------------------------------------------------------------- capture


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
        f"pass {{param:context_length}} below {info.d} to audit a setting where it can"
        if info.modality == "text"
        else "use a wider model or a smaller input resolution (fewer patches) to audit a setting where it can"
    )
    return plain(
        f"n = {info.n} > d = {info.d}: Assumption 1 cannot hold (any n vectors in R^d are dependent) and no "
        f"context matrix can have rank n; {fix}"
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
            f"{{param:limit}} {data.limit}: the features of {info.name} (d = {info.d}, {probes} probe point(s)) "
            f"would need about {data.limit * per_example / 2**30:.3g} GiB; the largest {{param:limit}} that fits "
            f"in the memory available here is {most}"
        )


def _check_limit_reaches_n(data: DataRequest, info) -> None:
    """Assumptions 1 and 3 draw n of the T examples: T < n is refused before the data pass.

    Raises:
        InputError: when ``limit`` is below the model's n tokens per example.
    """
    if data.limit < info.n:
        way = (
            f"raise {{param:limit}} to at least {info.n} or lower {{param:context_length}}"
            if info.modality == "text"
            else f"raise {{param:limit}} to at least {info.n}"
        )
        raise InputError(
            f"{{param:limit}} {data.limit} is below n = {info.n} tokens per example of {info.name}: Assumptions 1 "
            f"and 3 draw n of the T examples, so T must be at least n; {way}"
        )


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
        f"{limit} examples were asked for (limit) but the data gave only {fed.count} usable ones{because}: "
        f"the audit uses T = {fed.count}"
    )


def collect_features(
    request: ModelRequest,
    probes: Sequence[Probe],
    data: DataRequest,
    settings: Settings,
    on_note: Callable[[str], None] | None = None,
) -> Captured:
    """Run the model over the data once per set of weights and reduce every probe point.

    A ``trained`` group whose weights cannot be had offline is reported unavailable, not raised.
    ``data.limit`` below the model's n is refused as soon as the model's n is known.
    """
    out = Captured()
    by_init: dict[str, list[Probe]] = {}
    for p in probes:
        by_init.setdefault(p.init, []).append(p)
    for init, group in by_init.items():
        pm = _load_or_unavailable(request, init, settings, max(p.layer for p in group), group, out)
        if pm is None:
            continue
        qi = _take_model(out, pm, request, init, data, len(group), on_note)
        fed, reducers, data_notes = _capture_group(pm, init, group, qi, data, settings)
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
) -> int:
    """Check the limit against the model loaded for ``probes`` probe points, keep what it says
    (its info, weights, the n > d note) in ``out``; the query token's index."""
    info = pm.info
    _check_limit_reaches_n(data, info)
    _check_limit_fits(data, info, probes)
    if info.n > info.d:
        out.note(_n_above_d_note(info), NoteKind.N_ABOVE_D, on_note)
    if out.info is None or init == "random":
        out.info = ModelFacts.of(info)
    out.info = out.info.with_weights(init, info.weights_source, info.weights_read)
    qi = pipeline.query_index(pm, request)
    if request.query_index is not None:  # the report and meta name the query the audit read
        out.info = replace(out.info, query_index=qi, query_token=plain(f"token {qi} ({{param:query_index}})"))
    return qi


def _capture_group(pm, init: str, group: Sequence[Probe], qi: int, data: DataRequest, settings: Settings):
    """One pass of the model over the data, every probe point of ``group`` reduced on the way:
    (what the pass fed, the reducers by variant, the notes of reading the data)."""
    info = pm.info
    ra = None
    if any(p.random_attention for p in group):
        ra = RandomAttention(info.d, seed=settings.weights_seed_used, device=pm.device)
    rule = settings.rule(torch.float32)  # features that feed a rank decision are float32
    reducers = {p.variant: StreamingReducer(qi, rule) for p in group}
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
        RankFailed: when the ranks of a torchrun job disagree about whether the weights can be loaded.
    """
    pm, reason = None, None
    try:
        pm = pipeline.load(request, init, settings, max_layer)
    except OfflineError as exc:
        if init != "trained":
            raise
        reason = str(exc)
    distributed.current().same(reason is None, f"whether the {init} weights of {request.model} can be loaded")
    if reason is not None:
        out.unavailable.update({p.variant: reason for p in group})
    return pm


def probe_for_variant(variant: str, layer: int = 1) -> Probe:
    """The probe point a variant name stands for: a Table 1 column or ``random-L<k>`` / ``trained-L<k>``.

    Raises:
        InputError: when ``variant`` is neither.
    """
    if variant in IMAGE_VARIANTS:
        return plan_probes("image", [variant], layer=layer if variant in ("random", "trained") else None)[0]
    m = re.fullmatch(r"(random|trained)-L(\d+)", variant)
    if not m:
        raise InputError(
            f"unknown variant {variant!r}; choose from {', '.join(IMAGE_VARIANTS)} or random-L<k>/trained-L<k>"
        )
    return Probe(variant, m.group(1), int(m.group(2)))


@shared
@keyword_conveniences
def capture_features(
    model: str | ModelRequest,
    *,
    variant: str = "random",
    layer: int = 1,
    data: str | DataRequest | None = None,
    weights_path: str | None = None,
    query_index: int | None = None,
    settings: Settings | None = None,
    given: frozenset[str] = frozenset(),
    **conveniences: Unpack[Conveniences],
) -> FeatureSet:
    """Reduced features of one probe point (what ``mhaaudit kruskal`` uses with no file).

    ``weights_seed`` / ``data_seed`` draw the random weights / the data from a seed of their own
    (default: ``seed``; see :mod:`mhaaudit.settings`).

    ``model``, ``data`` and ``settings`` may be the request objects (:mod:`mhaaudit.request`);
    the other keywords are conveniences that build them (:func:`~mhaaudit.request.build_requests`:
    a keyword given beside an object that says otherwise is an InputError).

    Returns:
        The :class:`~mhaaudit.features.FeatureSet` of the column ``variant`` at depth ``layer``.

    Raises:
        InputError: for a bad argument (as :func:`audit`), or ``weights_path`` for a column that does not
            read trained weights.
        ModelError: when the model cannot be found, built or probed, or has no query token of its own.
        DataError: when the data cannot be read.
        OfflineError: when the model's configuration, its trained weights or a hub data set must be
            downloaded and the network cannot be reached.
    """
    keywords = {**{k: v for k, v in locals().items() if k in KEYWORDS}, **conveniences}
    req = build_requests(model, data, settings, keywords, given)
    return capture_probe(req.model, req.data, variant, settings=req.settings, layer=layer)


@shared
def capture_probe(
    request: ModelRequest, data: DataRequest, variant: str, *, settings: Settings, layer: int = 1
) -> FeatureSet:
    """Reduced features of one probe point (``variant`` at depth ``layer``, see :func:`probe_for_variant`)
    from checked request objects; :func:`capture_features` with the objects built. Trained weights
    that cannot be had offline raise :class:`~mhaaudit.errors.OfflineError`."""
    return _capture_one(Requests(request, data, settings), probe_for_variant(variant, layer))


def refuse_weights_without_trained(weights_path, probe: Probe, variants: str = "variants") -> None:
    """Trained weights given for a column that does not read them are refused;
    ``variants`` is the parameter that chose the column.

    Raises:
        InputError: when ``weights_path`` is given and ``probe`` does not read trained weights.
    """
    if weights_path is not None and probe.init != "trained":
        raise InputError(
            f"{{param:weights}} loads trained weights; use it with {{param:{variants}}} trained (or trained-L<k>), "
            f"not {probe.variant!r}"
        )


def _capture_one(req: Requests, probe: Probe) -> FeatureSet:
    refuse_weights_without_trained(req.model.weights_path, probe)
    got = collect_features(req.model, [probe], req.data, req.settings)
    if probe.variant in got.unavailable:
        raise OfflineError(got.unavailable[probe.variant])
    return got.features[probe.variant]


# --------------------------------------------------------------------------- checks


def run_checks(
    fs: FeatureSet, settings: Settings, *, sweep: bool = False, label: str = ""
) -> tuple[dict[str, CheckResult], Sweep | None, dict[str, float]]:
    """Every registered check (:data:`~mhaaudit.checks.REGISTRY`: GP, A1, A2, A3) and optionally the
    sweep on one reduced feature set, under ``settings``: (results by check, sweep or None, timings in s)."""

    rule = settings.rule(fs.dtype)
    timings: dict[str, float] = {}
    tests: dict[str, CheckResult] = {}
    t0 = time.perf_counter()
    exact = [c for c in REGISTRY.values() if not c.estimated]
    sampled = [c for c in REGISTRY.values() if c.estimated]
    for c in exact:
        tests[c.name] = _with_seed(c.decide(fs, rule=rule), settings.seed)
    swept = ["queries"] if sweep else []  # the sweep is the queries' Kruskal-rank curve (Figure 1)
    with phases.phase("whole-set statistics"):
        stats = {v: set_stats(getattr(fs, v), rule) for v in dict.fromkeys([*(c.vectors for c in sampled), *swept])}
    timings["set ranks"] = round(time.perf_counter() - t0, 3)
    common = dict(samples=settings.samples, threshold=settings.threshold, seed=settings.seed, device=settings.device)
    for c in sampled:
        t0 = time.perf_counter()
        with (
            task(f"{label} {c.name} (k = {c.k(fs.n, fs.T, fs.d)})", settings.samples, settings.progress) as adv,
            phases.phase("draws"),
        ):
            tests[c.name] = c.decide(
                fs,
                rule=rule,
                stats=stats[c.vectors],
                progress=adv,
                stop_when_decided=settings.stop_when_decided,
                **common,
            )
        timings[c.name] = round(time.perf_counter() - t0, 3)
    sw = None
    if sweep:
        t0 = time.perf_counter()
        with task(f"{label} sweep", settings.samples, settings.progress) as adv, phases.phase("draws"):
            sw = kruskal_sweep(fs.queries, stats=stats["queries"], progress=adv, rule=rule, **common)
        timings["sweep"] = round(time.perf_counter() - t0, 3)
    return tests, sw, timings


def _with_seed(result, seed: int):
    """An exact check's result with the audit's seed in its record (a sampled check has its own)."""
    return replace(result, seed=seed) if isinstance(result, ContextRankResult) else result


@keyword_conveniences
def check_features(
    fs: FeatureSet,
    *,
    samples: int = DEFAULT_SAMPLES,
    threshold: float = DEFAULT_THRESHOLD,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    device="auto",
    sweep: bool = False,
    progress: bool = False,
    label: str = "",
    stop_when_decided: bool = True,
    settings: Settings | None = None,
    given: frozenset[str] = frozenset(),
) -> tuple[dict[str, CheckResult], Sweep | None, dict[str, float]]:
    """GP, A1, A2, A3 (and optionally the sweep) on one reduced feature set (:func:`run_checks`
    under ``settings``, or the settings these keywords build; the defaults are :func:`audit`'s). A
    keyword given beside ``settings`` that says otherwise is an InputError.

    Returns:
        ``(tests, sweep, timings)``: the result of each check by name, the sweep (None without ``sweep``)
        and the time each step took in seconds.

    Raises:
        InputError: when a sample count, threshold, tolerance or device is out of range, or a keyword
            disagrees with ``settings``.
    """
    run = build_settings(settings, {k: v for k, v in locals().items() if k in KEYWORDS}, given)
    return run_checks(fs, run, sweep=sweep, label=label)


def _column(p: Probe, got: Captured, settings: Settings, sweep: bool) -> Column:
    col = Column(p)
    if p.variant in got.unavailable:
        col.status, col.reason = "unavailable", got.unavailable[p.variant]
        return col
    fs = got.features[p.variant]
    if fs.T < fs.n:
        # the limit is at least n (checked before the data pass), so the data ran out: raising it cannot help

        skipped = f"; skipped: {describe_skips(got.skips.as_dict())}" if got.skips else ""
        dups = got.duplicates.dropped if got.duplicates is not None else 0
        dropped = f"; {dups} exact duplicates dropped (keep them with {{param:keep_duplicates}})" if dups else ""
        hint = (
            "; convert the other modes to RGB with {param:convert_rgb} (as torchvision's ImageFolder does)"
            if "not RGB" in got.skips and got.image_policy.startswith("RGB only")
            else ""
        )
        raise DataError(
            f"the data gave only {fs.T} usable examples, but Assumptions 1 and 3 draw n = {fs.n} of the "
            f"T examples, so T must be at least {fs.n}{skipped}{dropped}{hint}; supply more data"
        )
    col.features, col.T = fs, fs.T
    col.weights_source = fs.meta.get("weights_source", "")
    col.weights_read = ReadFacts.of(fs.meta.get("weights_read"))
    col.tests, col.sweep, col.timings = run_checks(fs, settings, sweep=sweep, label=p.variant)
    assert got.info is not None, "a column with features has its model's facts"
    col.bound, col.bound_hint = memorisation_bound(got.info, col)
    return col


def memorisation_bound(info: ModelFacts, col: Column) -> tuple[CapacityBound | None, str]:
    """What Theorem 1 / Remark 1 concludes from one audited column's verdicts, with the model's
    heads: the bound (None when the model does not say its heads, width and length), and, when
    the theorem gives no count, what would give one (else "")."""
    H, dh, n, d = info.num_heads, info.head_dim, info.n, info.d
    if col.status != "ok" or not (
        isinstance(H, int)
        and isinstance(dh, int)
        and isinstance(n, int)
        and isinstance(d, int)
        and min(H, dh, n, d) > 0
    ):
        return None, ""
    a1, a2 = col.tests.get("assumption_1"), col.tests.get("assumption_2")
    est = col.sweep.estimate if col.sweep is not None and col.sweep.estimate >= 1 else None
    b = theorem1_bound(
        heads=H,
        head_dim=dh,
        n=n,
        d=d,
        a1_holds=a1.verdict == "holds" if a1 else None,
        a2_holds=a2.verdict == "holds" if a2 else None,
        kruskal_estimate=est,
    )
    hint = ""
    if not b.applies and est is None and not (a1 and a1.verdict == "holds"):
        hint = plain("run with {param:sweep} for a Remark 1 count from the estimated Kruskal rank")
    return b, hint


@shared
@keyword_conveniences
def audit(
    model: str | ModelRequest,
    *,
    variants: Sequence[str] | None = None,
    layer: int | None = None,
    layers: Sequence[int] | None = None,
    data: str | DataRequest | None = None,
    samples: int = DEFAULT_SAMPLES,
    threshold: float = DEFAULT_THRESHOLD,
    weights: str | None = None,
    query_index: int | None = None,
    sweep: bool = False,
    stop_when_decided: bool = True,
    on_note: Callable[[str], None] | None = None,
    seeds: str | Sequence[int] | None = None,
    vary: str = "both",
    settings: Settings | None = None,
    given: frozenset[str] = frozenset(),
    **conveniences: Unpack[Conveniences],
) -> AuditResult | SeedsResult:
    """Audit ``model`` on ``data``: the paper's Table 1 (images) or Table 3 (text) and more.

    ``model``, ``data`` and ``settings`` may be the request objects (:class:`~mhaaudit.request.ModelRequest`,
    :class:`~mhaaudit.request.DataRequest`, :class:`~mhaaudit.settings.Settings`); the loading,
    data and settings keywords are conveniences that build them in one place
    (:func:`~mhaaudit.request.build_requests`), and one given beside an object that says otherwise
    is an InputError.

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

    ``weights_seed`` / ``data_seed`` draw the random weights / the data from a seed of their own
    (default: ``seed``). ``seeds`` (``"0-4"``, ``"0,3,7"`` or a list) runs the audit once per seed
    and returns a :class:`mhaaudit.seeds.SeedsResult` (per-seed, summary and difference records);
    ``vary`` says what the seeds vary: ``"both"`` (as ``seed``), ``"weights"`` or ``"data"``
    (the other held at ``data_seed`` / ``weights_seed``, default the first seed).

    Returns:
        An :class:`AuditResult`, or a :class:`mhaaudit.seeds.SeedsResult` with ``seeds``.

    Raises:
        InputError: for a bad argument: an unknown variant, ``layer`` below 1 or given beside ``layers``
            or for a text model, ``weights`` with no trained column, a sample count, threshold, tolerance,
            device, limit or seed list out of range, or a keyword that disagrees with a request object beside it.
        ModelError: when the model cannot be found, built or probed, or has no query token of its own.
        DataError: when the data cannot be read or gives fewer than n usable examples.
        OfflineError: when what the run needs (the model's configuration, a hub data set) must be downloaded and
            the network cannot be reached; trained weights that cannot be had leave their column unavailable,
            with the reason, unless no column can be audited.
    """
    keywords = {**{k: v for k, v in locals().items() if k in KEYWORDS}, **conveniences}
    req = build_requests(model, data, settings, keywords, given)
    cols = _Columns(variants, layer, layers, sweep)
    plan = plan_for(req.settings, seeds, vary)
    if plan is None:
        return _audit(req, cols, on_note)
    return audit_seeds(
        lambda **run: _audit(req._replace(settings=req.settings.with_(**run)), cols, on_note), plan, req.data.data
    )


@dataclass(frozen=True)
class _Columns:
    """What the audit measures: the probe points (``plan_probes``) and whether each gets the sweep."""

    variants: Sequence[str] | None
    layer: int | None
    layers: Sequence[int] | None
    sweep: bool


def _audit(req: Requests, cols: _Columns, on_note: Callable[[str], None] | None) -> AuditResult:
    with phases.recording() as clock:
        t_start = time.perf_counter()
        result = _audit_timed(req, cols, on_note)
        result.timings = phases.timings(clock.spent, time.perf_counter() - t_start)
    return result


def _audit_timed(req: Requests, cols: _Columns, on_note: Callable[[str], None] | None) -> AuditResult:
    """The audit of :func:`_audit`, its phases timed by the recording open around it.

    Raises:
        InputError: when trained weights are given without a trained column.
        OfflineError: when no column can be audited offline.
    """
    request, data_req, settings = req
    probes = plan_probes(
        modality_of(request.model, backend=request.backend, weights_path=request.weights_path),
        cols.variants,
        cols.layers,
        cols.layer,
    )
    if request.weights_path is not None and not any(p.init == "trained" for p in probes):
        raise InputError("{param:weights} has no effect without a trained column; add trained to {param:variants}")
    got = collect_features(request, probes, data_req, settings, on_note=on_note)
    if not got.features:  # every column unavailable: there is nothing to audit, and that is no success
        raise OfflineError("no column could be audited: " + "; ".join(dict.fromkeys(got.unavailable.values())))
    columns = [_column(p, got, settings, cols.sweep) for p in probes]
    run = AuditSettings.of(
        settings.as_dict(),
        limit=data_req.limit,
        batch_size=got.batch.size if got.batch is not None else data_req.batch_size,
        batch_size_choice=got.batch.how if got.batch is not None else None,
        layer=1 if cols.layer is None else cols.layer,
        layers=tuple(cols.layers) if cols.layers is not None else None,
        distributed=JobFacts.of(describe()),
    )
    assert got.info is not None, "a run with features has its model's facts"
    return AuditResult(
        model=request.model,
        info=got.info,
        data=got.data,
        columns=columns,
        settings=run,
        timings={},
        skipped=got.skipped,
        notes=got.notes,
        duplicates=got.duplicates,
        skips=got.skips,
        image_policy=got.image_policy,
    )
