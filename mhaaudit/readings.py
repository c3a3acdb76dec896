"""What the runs of a process read, as digests that the ranks of a torchrun job compare.

Seeds spread over the ranks of a job (:func:`mhaaudit.seeds.over_seeds`) are run by each rank as
one process: each rank reads the data and loads the model itself, from its own node's files. The
seeds' results are then combined as if one process had run them all, which means something only
when every rank read what rank 0 read and was asked what rank 0 was asked.

While :func:`recording` is open, each pass over data (:func:`mhaaudit.pipeline.stream`) notes the
SHA-256 of the model inputs it fed (after exact duplicates are dropped: the bytes of each input in
order, whatever the batch sizes), and each model built (:func:`mhaaudit.pipeline.load`) the SHA-256 of
its tensors and that of its layout (its configuration in what the audit computes with, and the names,
shapes and dtypes of its tensors), each under a label that names what decides it: the data seed where
the examples depend on it (the built-in data and text), the weights seed where the weights do (random
weights). Text also notes the digest of the documents its examples were drawn from (the token ids of each
qualifying document of a source read whole, or the built-in corpus's text), under a label with no seed, so
that ranks running other data seeds compare it too. The digests cover what the model was given, not file
names, sizes or times: a single byte that reaches the model makes them differ, and the bytes hashed are
those the run holds anyway.
:func:`disagreement` names the first label whose digests differ between rank 0 and another rank, and
:func:`asked_difference` the first option the ranks were given differently.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from . import distributed
from .errors import clipped
from .models.hf_config import computes

__all__ = [
    "InputsDigest",
    "asked_difference",
    "asked_fields",
    "disagreement",
    "model_digests",
    "note",
    "recorded",
    "recording",
    "refuse_other_models",
]

_LOG: dict[str, set[str]] | None = None  # while recording() is open: label -> the digests noted under it

# Fields of a request that differ between ranks without changing a result: where each rank runs, its bars.
_RANK_OWN = frozenset({"device", "progress"})


@contextmanager
def recording() -> Iterator[dict[str, set[str]]]:
    """While open, the passes over data and the model loads of this process note their digests in the
    dict it yields (label -> digests)."""
    global _LOG
    outer, _LOG = _LOG, {}
    try:
        yield _LOG
    finally:
        _LOG = outer


def recorded() -> bool:
    """Whether digests are noted now (inside :func:`recording`): else nothing is hashed."""
    return _LOG is not None


def note(label: str, digest: str) -> None:
    """Note ``digest`` under ``label`` (nothing outside :func:`recording`)."""
    if _LOG is not None:
        _LOG.setdefault(label, set()).add(digest)


def _tensor_bytes(t: torch.Tensor):
    """The bytes of ``t`` as it is laid out in memory, on the CPU (any dtype: viewed as bytes)."""
    return t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy()


class InputsDigest:
    """The SHA-256 of the model inputs fed batch by batch: per input name, its dtype, the shape of one
    example and the bytes of every example in order, so that the batch sizes do not change it."""

    def __init__(self) -> None:
        self._each: dict[str, Any] = {}

    def add(self, inputs: Mapping[str, Any]) -> None:
        """Take one batch of model inputs (name -> tensor, examples along the first axis)."""
        for name in sorted(inputs):
            v = inputs[name]
            if not isinstance(v, torch.Tensor):
                continue
            h = self._each.get(name)
            if h is None:
                h = self._each[name] = hashlib.sha256(f"{name}\0{v.dtype}\0{tuple(v.shape[1:])}\0".encode())
            h.update(_tensor_bytes(v))

    def hexdigest(self) -> str:
        """The digest of every batch taken."""
        combined = hashlib.sha256(b"inputs\0")
        for name in sorted(self._each):
            combined.update(self._each[name].digest())
        return combined.hexdigest()


def note_inputs(pm, data: str | None, data_seed: int | None, digest: InputsDigest) -> None:
    """Note the digest of the model inputs a pass of ``pm`` fed from ``data`` (None: the built-in data), under
    ``data_seed`` where the examples depend on it (None where they do not: images from a folder, file or
    data set keep their own order)."""
    where = "the built-in data" if data is None else str(data)
    seeded = data_seed is not None
    note(
        f"the model inputs of {pm.info.name} read from {where}" + (f" with data seed {data_seed}" if seeded else ""),
        digest.hexdigest(),
    )


def note_documents(pm, data: str | None, digest: str) -> None:
    """Note the digest of the text documents the examples for ``pm`` were drawn from (``TextExamples.corpus_sha256``:
    the same whatever the data seed, so ranks running other data seeds compare it too)."""
    where = "the built-in text" if data is None else str(data)
    note(f"the documents {pm.info.name} drew its examples from ({where})", digest)


def model_digests(pm, init: str, weights_seed: int, max_layer: int) -> dict[str, str]:
    """The digests of the model ``pm`` as built (``init`` weights, blocks up to ``max_layer``), by label: its
    layout (configuration, tensor names, shapes and dtypes, and what its preprocessing makes of a fixed
    image), and its tensors (under the weights seed for random weights, which are drawn from it)."""
    layout = hashlib.sha256(b"layout\0")
    weights = hashlib.sha256(b"weights\0")
    for name, t in sorted(pm.module.state_dict().items()):
        head = f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode()
        layout.update(head)
        weights.update(head)
        weights.update(_tensor_bytes(t))
    config = pm.config.to_dict() if hasattr(pm.config, "to_dict") else pm.config
    if isinstance(config, Mapping):
        kept = {k: v for k, v in config.items() if computes(str(k))}
        layout.update(json.dumps(kept, sort_keys=True, default=str).encode())
    where = ("resolved", "weights_read", "weights_source")  # where this node found the model, not what it is
    info = {k: v for k, v in dataclasses.asdict(pm.info).items() if k not in where}
    layout.update(json.dumps(info, sort_keys=True, default=str).encode())
    if pm.info.modality == "image":  # the preprocessing's own files (sizes, means) count where data is dealt
        layout.update(_tensor_bytes(pm.preprocess([_fixed_image()], device="cpu")["pixel_values"]))
    what = f"{pm.info.name} ({init} weights, blocks up to {max(1, int(max_layer))})"
    seeded = f" with weights seed {weights_seed}" if init != "trained" else ""
    return {
        f"the configuration, tensor shapes and preprocessing of {what}": layout.hexdigest(),
        f"the weights of {what}{seeded}": weights.hexdigest(),
    }


def _fixed_image():
    """A small RGB image of fixed pixels, neither square nor of any model's size."""
    from PIL import Image

    pixels = (np.arange(29 * 37 * 3) * 7 % 251).astype(np.uint8).reshape(29, 37, 3)
    return Image.fromarray(pixels, "RGB")


def note_model(pm, init: str, weights_seed: int, max_layer: int) -> None:
    """Note the digests of the model ``pm`` (:func:`model_digests`; nothing outside :func:`recording`)."""
    if _LOG is not None:
        for label, digest in model_digests(pm, init, weights_seed, max_layer).items():
            note(label, digest)


def refuse_other_models(pm, init: str, weights_seed: int, max_layer: int) -> None:
    """Where the ranks of a job share a call's batches, each rank builds the model itself, from its own node's
    files: refuse when the model ``pm`` this rank built differs from rank 0's (:func:`model_digests`). Nothing
    in one process, nor inside :func:`mhaaudit.distributed.alone` (seeds spread over the ranks: their
    digests are noted and compared as the seeds end).

    Raises:
        RankFailed: on every rank, naming what differs, when a rank's model differs from rank 0's.
    """
    shard = distributed.current()
    if shard.world_size == 1:
        return
    mine = {label: [d] for label, d in model_digests(pm, init, weights_seed, max_layer).items()}
    if (why := disagreement(shard.all_gather(mine))) is not None:
        raise distributed.RankFailed(why)


def disagreement(logs: list[Mapping[str, Any]]) -> str | None:
    """The first label noted on rank 0 and on another rank whose digests differ between them, in words
    (None when every such label agrees); ``logs`` is every rank's log, by rank."""
    first = logs[0]
    for r, log in enumerate(logs[1:], start=1):
        for label in sorted(set(first) & set(log)):
            if sorted(first[label]) != sorted(log[label]):
                a, b = sorted(first[label])[0][:12], sorted(log[label])[0][:12]
                return (
                    f"rank {r} of {len(logs)} read other inputs than rank 0: {label} differ (SHA-256 {a}... on "
                    f"rank 0, {b}... on rank {r}); every node must hold the same data and model files"
                )
    return None


def asked_fields(asked: Mapping[str, Any]) -> dict[str, str]:
    """``asked`` (name -> a request object or a value) as ``name.field`` -> its value in JSON, what differs
    between ranks without changing a result left out: the device, the bars, the callbacks (the ranks that
    follow rank 0 get None for them)."""
    out: dict[str, str] = {}
    for name, value in asked.items():
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            items = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.name not in _RANK_OWN}
            out.update({f"{name}.{k}": json.dumps(v, sort_keys=True, default=str) for k, v in items.items()})
        elif name not in _RANK_OWN and value is not None and not callable(value):  # None: a callback not sent
            out[name] = json.dumps(value, sort_keys=True, default=str)
    return out


def asked_difference(every: list[dict[str, str]]) -> str | None:
    """The first field (of :func:`asked_fields`) given otherwise on another rank than on rank 0, in words;
    None when every rank was asked the same."""
    first = every[0]
    for r, fields in enumerate(every[1:], start=1):
        for name in sorted(set(first) | set(fields)):
            if first.get(name) != fields.get(name):
                a, b = (clipped(x.get(name, "not given"), 60) for x in (first, fields))
                return (
                    f"rank {r} of {len(every)} was asked another run than rank 0: {name} is {a} on rank 0, "
                    f"{b} on rank {r}"
                )
    return None
