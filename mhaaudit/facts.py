"""The facts a result records about its run, as typed records: the model (:class:`ModelFacts`, a
view of :class:`~mhaaudit.models.ModelInfo` with the weights each column read), the settings
(:class:`AuditSettings` for ``check``, :class:`CapacitySettings` for ``capacity``), the data read
(:class:`DuplicateInputs`, :class:`SkipCounts`), the batch a capture used (:class:`BatchChoice`)
and a Kruskal capture (:class:`CaptureFacts`).

Each is a frozen dataclass whose fields are the keys the JSON ``meta`` has always given, in the
same order: ``as_dict()`` is that ``meta`` entry and the result document stores the same data, so
the outputs read the same and ``from_json`` / ``from_parquet`` rebuild these records exactly.
A field that the ``meta`` leaves out when it does not apply (the seeds set apart, the torchrun
job) is declared with :data:`OMITTED_WHEN_NONE`. Their fields are read as attributes
(``info.n``, ``settings.batch_size``); ``as_dict()`` gives the ``meta``'s entry.

Nothing here computes a result: the records are filled where the run learns the facts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .documents import OMITTED_WHEN_NONE, Stored, decode_fields
from .sizes import human_bytes

if TYPE_CHECKING:
    from typing_extensions import Self

    from .settings import Settings

__all__ = [
    "NO_POSITIONS_AT_LAYER_0",
    "AuditSettings",
    "BatchChoice",
    "CapacitySettings",
    "CaptureFacts",
    "DuplicateInputs",
    "JobFacts",
    "ModelFacts",
    "ReadFacts",
    "RuleFacts",
    "SettingsFacts",
    "SkipCause",
    "SkipCounts",
    "WeightsUsed",
    "meta_fields",
    "meta_value",
    "positions_note",
    "weights_read_text",
]


def meta_value(value):
    """``value`` as the plain data a ``meta`` holds: records as dicts of their fields (those
    :data:`OMITTED_WHEN_NONE` left out when None), tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if hasattr(value, "as_dict"):
            return value.as_dict()
        return {
            f.name: meta_value(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not (f.metadata.get("omit_none") and getattr(value, f.name) is None)
        }
    if isinstance(value, (list, tuple)):
        return [meta_value(v) for v in value]
    if isinstance(value, dict):
        return {k: meta_value(v) for k, v in value.items()}
    return value


def meta_fields(record) -> dict:
    """A record's fields as the ``meta`` gives them (:func:`meta_value` of each, in order; those
    :data:`OMITTED_WHEN_NONE` left out when None): what a record's ``as_dict()`` returns."""
    return {
        f.name: meta_value(getattr(record, f.name))
        for f in dataclasses.fields(record)
        if not (f.metadata.get("omit_none") and getattr(record, f.name) is None)
    }


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class ReadFacts:
    """What loading trained weights read (``models.shards.WeightsRead`` adds the loader's dict):
    bytes of tensor data read of the bytes the checkpoint stores, files opened of the files it has,
    tensors read of the tensors it has, and the dtype(s) they are stored in."""

    method: str  # partial | whole
    stored_dtype: str
    bytes_read: int
    bytes_total: int | None
    files_read: int
    files_total: int
    tensors_read: int | None  # None: a whole load, which reads every tensor without counting them
    tensors_total: int | None

    @classmethod
    def of(cls, read) -> ReadFacts | None:
        """From a ``WeightsRead`` or its dict (None: nothing was read)."""
        if read is None:
            return None
        return cls(**(read if isinstance(read, dict) else read.as_dict()))

    def describe(self) -> str:
        """One line for the report, e.g. ``read 1.1 GiB of 140 GiB (0.8 %) of the weights, stored in bfloat16,
        from 1 of 30 files``."""
        total = f" of {human_bytes(self.bytes_total)}" if self.bytes_total else ""
        share = f" ({100.0 * self.bytes_read / self.bytes_total:.3g} %)" if self.bytes_total else ""
        files = f"{self.files_read} of {self.files_total} file{'s' if self.files_total != 1 else ''}"
        how = "" if self.method == "partial" else " (whole checkpoint: not in safetensors form)"
        return (
            f"read {human_bytes(self.bytes_read)}{total}{share} of the weights, stored in {self.stored_dtype}, "
            f"from {files}{how}"
        )


def weights_read_text(read: dict | None) -> str:
    """:meth:`ReadFacts.describe` of a ``models.shards.WeightsRead`` stored as a dict ("" for None: none read)."""
    return ReadFacts(**read).describe() if read else ""


@dataclass(frozen=True)
class WeightsUsed:
    """One set of weights a run built its model with: ``init`` (random or trained), where they came
    from, and what loading read (None for random weights)."""

    init: str
    source: str
    read: ReadFacts | None = None


@dataclass(frozen=True)
class ModelFacts(Stored):
    """The model a result audited: the fields of its :class:`~mhaaudit.models.ModelInfo` (the
    ``meta``'s ``model_info``), and for ``check`` the weights of each initialisation the columns
    read (``weights_used``: in ``model_info`` as ``<init>_weights_source`` and
    ``<init>_weights_read``)."""

    name: str
    resolved: str
    backend: str
    family: str
    modality: str
    d: int
    n: int
    query_index: int | None
    num_layers: int
    num_heads: int
    head_dim: int
    weights: str
    weights_source: str
    positions: str = "learned"
    query_token: str = ""
    weights_read: ReadFacts | None = None
    weights_used: tuple[WeightsUsed, ...] = ()

    @classmethod
    def of(cls, info) -> ModelFacts:
        """The facts of a loaded model's :class:`~mhaaudit.models.ModelInfo`."""
        facts = info.to_dict()
        return cls(**{**facts, "weights_read": ReadFacts.of(facts.get("weights_read"))})

    def with_weights(self, init: str, source: str, read) -> ModelFacts:
        """These facts with the weights of ``init`` recorded (the random weights first, the others after them in
        the order recorded); ``read``: what loading them read (a ``WeightsRead`` or its dict), None for random
        weights."""
        used = WeightsUsed(init, source, ReadFacts.of(read))
        # random first, whatever the order they were loaded in: one run's facts are the same in every order
        ordered = sorted((*self.weights_used, used), key=lambda w: w.init != "random")
        return dataclasses.replace(self, weights_used=tuple(ordered))

    def as_dict(self) -> dict:
        """``model_info`` as the ``meta`` gives it."""
        out = {f.name: meta_value(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "weights_used"}
        for w in self.weights_used:
            out[f"{w.init}_weights_source"] = w.source
            if w.read is not None:
                out[f"{w.init}_weights_read"] = meta_value(w.read)
        return out

    @classmethod
    def from_document(cls, data) -> ModelFacts:
        """The facts :meth:`document` wrote.

        Raises:
            ValueError: ``data`` is not an object, has a key that is neither a field nor
                ``<init>_weights_source`` / ``<init>_weights_read``, or a value of the wrong type.
        """
        if not isinstance(data, dict):
            raise ValueError(f"model facts are an object, got {type(data).__name__}")
        own = {f.name for f in dataclasses.fields(cls)} - {"weights_used"}
        used: dict[str, dict] = {}
        for key, value in data.items():
            if key in own:
                continue
            init, sep, what = key.partition("_weights_")
            if not sep or what not in ("source", "read"):
                raise ValueError(f"ModelFacts has no field {key}")
            used.setdefault(init, {})[what] = value
        base = decode_fields(cls, {k: v for k, v in data.items() if k in own}, "model_info")
        weights = tuple(
            decode_fields(WeightsUsed, {"init": init, **parts}, f"model_info.{init}_weights")
            for init, parts in used.items()
        )
        return dataclasses.replace(base, weights_used=weights)


# --------------------------------------------------------------------------- the settings


#: Position kinds that leave the embedding output without any position information.
NO_POSITIONS_AT_LAYER_0 = frozenset({"rotary", "relative", "alibi", "none"})


def positions_note(info: dict, layer: int) -> str:
    """What an Assumption 2 verdict at layer 0 owes to a model whose positions act only inside the
    attention (rotary, relative, ALiBi) or that has none: its embedding output has no position term.
    ``info``: the model's :class:`~mhaaudit.models.ModelInfo` as a dict. Empty where it does not apply."""
    pos = info.get("positions")
    if layer != 0 or pos not in NO_POSITIONS_AT_LAYER_0:
        return ""
    how = "it has no position embedding" if pos == "none" else f"its positions are {pos}, applied inside the attention"
    return (
        f" At layer 0, {info.get('family')} adds no position embedding to its embedding output ({how}), so two "
        "equal tokens of one example are two equal rows there and its context matrix has rank < n."
    )


@dataclass(frozen=True)
class RuleFacts:
    """A rank rule as the ``meta`` gives it (:meth:`~mhaaudit.numerics.RankRule.as_dict`)."""

    rtol: float | None
    atol: float | None
    eps: float
    dtype: str
    rule: str


@dataclass(frozen=True)
class JobFacts:
    """The torchrun job a run was part of: its world size and backend."""

    world_size: int
    backend: str | None

    @classmethod
    def of(cls, described: dict) -> JobFacts | None:
        """From :func:`mhaaudit.distributed.describe` (``{}`` in one process: None)."""
        job = described.get("distributed")
        return None if job is None else cls(**job)


@dataclass(frozen=True, kw_only=True)
class SettingsFacts:
    """A run's :class:`~mhaaudit.settings.Settings` as its ``meta`` gives them (in that order, from
    :meth:`~mhaaudit.settings.Settings.as_dict`): the device, the draws, threshold, seeds and rank
    rule. The settings records of the commands that audit (:class:`AuditSettings`, the reproduced
    tables' ``reproduce.targets.TargetSettings``) extend it with their run's own facts."""

    device: str
    samples: int
    threshold: float
    seed: int
    tolerance: RuleFacts
    stop_when_decided: bool
    weights_seed: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    data_seed: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    @classmethod
    def of(cls, settings: Settings | dict, **run) -> Self:
        """From the run's :class:`~mhaaudit.settings.Settings` (or its :meth:`~mhaaudit.settings.Settings.as_dict`)
        and the run's own facts (``run``)."""
        given = settings if isinstance(settings, dict) else settings.as_dict()
        return cls(**{**given, "tolerance": RuleFacts(**given["tolerance"])}, **run)

    def as_dict(self) -> dict:
        """The settings as the ``meta`` gives them."""
        return meta_fields(self)


@dataclass(frozen=True, kw_only=True)
class AuditSettings(SettingsFacts):
    """The settings of a ``check`` run, as its ``meta`` gives them (in that order): the
    :class:`SettingsFacts`, the data's limit and batch, the depth(s) asked for, and the torchrun job."""

    limit: int
    batch_size: int | str
    batch_size_choice: str | None
    layer: int
    layers: tuple[int, ...] | None
    distributed: JobFacts | None = field(default=None, metadata=OMITTED_WHEN_NONE)


@dataclass(frozen=True, kw_only=True)
class CapacitySettings:
    """The settings of a ``capacity`` run, as its ``meta`` gives them (in that order)."""

    layer: int  # the attention block K
    attention: str  # model | random
    shared_context: bool
    heads: tuple[int, ...] | None
    head_dim: int | None
    samples: int
    threshold: float
    seed: int
    weights_seed: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    data_seed: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    device: str
    limit: int
    batch_size: int | str
    batch_size_choice: str | None
    from_path: str | None
    z_tolerance: str
    assumption_tolerance: str
    tokens: str
    distributed: JobFacts | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    def as_dict(self) -> dict:
        """The settings as the ``meta`` gives them."""
        return meta_fields(self)


# --------------------------------------------------------------------------- the data


@dataclass(frozen=True)
class DuplicateInputs:
    """Exact duplicate inputs a run found: ``total`` inputs seen, ``repeats`` that repeat an earlier
    one, ``dropped`` of them, and one pair ``(earlier, repeat)`` (None when there is none, and for
    text, which redraws a repeat)."""

    total: int
    repeats: int
    dropped: int
    example: tuple[int, int] | None = None

    @classmethod
    def of(cls, found: dict) -> DuplicateInputs | None:
        """From the data pass's dict (:meth:`mhaaudit.sources.Duplicates.as_dict`); None when empty."""
        if not found:
            return None
        example = found.get("example")
        return cls(found["total"], found["repeats"], found["dropped"], None if example is None else tuple(example))

    def as_dict(self) -> dict:
        """``{"total", "repeats", "dropped", "example"}``, as the ``meta`` gives them."""
        return meta_fields(self)


@dataclass(frozen=True)
class SkipCause:
    """Inputs skipped for one cause: how many, and the first one, with why."""

    cause: str
    count: int
    example: str


@dataclass(frozen=True)
class SkipCounts:
    """The inputs a run skipped, by cause, in report order (``skips["unreadable"].count``). Stored
    as the ``meta`` gives it: ``{cause: {"count": n, "example": "..."}}``."""

    causes: tuple[SkipCause, ...] = ()

    @classmethod
    def of(cls, skips: dict) -> SkipCounts:
        """From ``{cause: {"count", "example"}}`` (:meth:`mhaaudit.sources.Skips.as_dict`)."""
        return cls(tuple(SkipCause(c, int(v["count"]), str(v["example"])) for c, v in (skips or {}).items()))

    def __bool__(self) -> bool:
        return bool(self.causes)

    def __contains__(self, cause: object) -> bool:
        return any(c.cause == cause for c in self.causes)

    def __getitem__(self, cause: str) -> SkipCause:
        """The inputs skipped for ``cause``.

        Raises:
            KeyError: none was skipped for that cause.
        """
        for c in self.causes:
            if c.cause == cause:
                return c
        raise KeyError(cause)

    @property
    def total(self) -> int:
        """The inputs skipped, all causes together."""
        return sum(c.count for c in self.causes)

    def as_dict(self) -> dict:
        """``{cause: {"count": n, "example": "..."}}``, as the ``meta`` gives it."""
        return {c.cause: {"count": c.count, "example": c.example} for c in self.causes}

    def describe(self) -> str:
        """The skips in words, as the reports say them: ``1 unreadable (e.g. x.png: ...), 2 not RGB (e.g. ...)``."""
        return ", ".join(f"{c.count} {c.cause} (e.g. {c.example})" for c in self.causes)

    def document(self) -> dict:
        """As the result document stores it: :meth:`as_dict`."""
        return self.as_dict()

    @classmethod
    def from_document(cls, data) -> SkipCounts:
        """The causes :meth:`document` wrote.

        Raises:
            ValueError: ``data`` is not an object of causes, each with a count and an example.
        """
        if not isinstance(data, dict):
            raise ValueError(f"skipped inputs are an object of causes, got {type(data).__name__}")
        causes = []
        for cause, v in data.items():
            if not isinstance(v, dict) or set(v) != {"count", "example"}:
                raise ValueError(f"skipped inputs: {cause!r} is not an object with count and example")
            causes.append(decode_fields(SkipCause, {"cause": cause, **v}, f"skips.{cause}"))
        return cls(tuple(causes))


# --------------------------------------------------------------------------- a capture


@dataclass(frozen=True)
class BatchChoice:
    """The batch size a capture used and how it was chosen (``asked``: the integer given, or
    ``"auto"``): :func:`mhaaudit.batching.choose_batch_size` makes it."""

    size: int
    asked: int | str
    how: str

    @classmethod
    def of(cls, batch) -> BatchChoice | None:
        """From a ``BatchChoice`` or the ``meta``'s dict of one (:meth:`as_dict`); None or empty: None."""
        if not batch:
            return None
        return batch if isinstance(batch, BatchChoice) else cls(**batch)

    def as_dict(self) -> dict:
        """``{"size", "asked", "how"}``, as the ``meta`` gives them."""
        return meta_fields(self)


@dataclass(frozen=True)
class CaptureFacts:
    """How ``kruskal --model`` captured its vectors: the batch, and what loading trained weights
    read (each None when it does not apply: then the ``meta`` leaves it out, and a run on a file
    has no capture at all)."""

    batch: BatchChoice | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    weights_read: ReadFacts | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    @classmethod
    def of(cls, batch, weights_read) -> CaptureFacts:
        """From the capture's batch (a :class:`BatchChoice` or its dict; None or empty: none) and
        what loading the weights read (a ``WeightsRead`` or its dict; None: nothing)."""
        return cls(BatchChoice.of(batch), ReadFacts.of(weights_read))

    def __bool__(self) -> bool:
        return self.batch is not None or self.weights_read is not None

    def as_dict(self) -> dict:
        """The ``meta``'s ``capture``: what applies of the batch and the weights read."""
        return meta_fields(self)
