"""Exact duplicate inputs, found before the forward pass.

Two identical model inputs give identical vectors at every layer, so every query subset that
holds both is linearly dependent: Assumption 1 then fails for a reason that is about the data,
not the model. This module finds such inputs so that the audit can name them and drop them (the
first occurrence is kept). Equal vectors from *distinct* inputs (at the embedding layer every
[CLS] query is the same vector) are a finding about the model and are none of this module's
business.

An input's key is a 128-bit BLAKE2b digest of its exact bytes together with its dtype (or
image mode) and shape, so equal keys mean equal inputs up to a hash collision (probability
about T^2 / 2^129 for T inputs: negligible); nothing is rounded or compared approximately. Hash
what the model sees: the preprocessed batch (``pixel_values`` at the model's resolution,
``input_ids`` with ``token_type_ids``), so that two image files that differ only in ways the
resizing removes count as the duplicates they are for the model.

- :func:`find_duplicates` over a whole sequence of inputs (token-id lists, images, arrays);
- :class:`DuplicateFinder` for a stream of batches: :meth:`~DuplicateFinder.filter` drops the
  rows of a batch that repeat an earlier input and returns the rest;
- :class:`Duplicates`: the kept indices, the count dropped and one example pair;
  :meth:`~Duplicates.select` replays it on another pass over the same inputs, so that every
  column of an audit drops the same examples;
- :class:`Fingerprints`: the keys of a batch of model inputs computed where the batch lies (a
  GPU's batch is never copied to the host), one pass over its bits, for the capture loop.

A fingerprint reads each example's bits as 16-bit integers x (the bytes of any dtype, in memory
order; one-byte dtypes widened) and takes ``K = 8`` dot products with secret random weight vectors
w_k of integers in [0, 2^16), as one float64 matrix product. Every product and partial sum is an
integer below 2^53, so the float64 result is exact, whatever the order of the sums (any BLAS, any
device): equal inputs always get equal fingerprints. For two different inputs, x - y is non-zero
at some position j, and for any values of the other weights at most one value of w_k[j] makes
<w_k, x - y> = 0: the fingerprints collide with probability at most 2^-16 per dot product,
2^-128 for the eight, independently drawn with a secret fixed once per pass (the same on every
rank of a torchrun job) and never shown to the data. Rows of one batch whose fingerprints agree
are compared bit for bit as well; a collision found there keeps both rows as distinct inputs.

The text example builders (:mod:`.examples`) already redraw a candidate that repeats an earlier
example's tokens and count it; this module serves the inputs nobody draws: images and files.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..numerics.threads import intra_op_threads

__all__ = [
    "DuplicateFinder",
    "Duplicates",
    "Fingerprints",
    "batch_keys",
    "find_duplicates",
    "input_key",
    "sequence_key",
]


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


def sequence_key(ids: Sequence[int]) -> bytes:
    """The key of a token-id sequence (equal for equal ids, whatever their integer type)."""
    return _digest(b"ids", np.asarray(ids, dtype=np.int64).tobytes())


def _array_key(array: np.ndarray) -> bytes:
    array = np.ascontiguousarray(array)
    return _digest(b"array", array.dtype.str.encode(), repr(array.shape).encode(), array.tobytes())


def _as_numpy(value: Any) -> np.ndarray | None:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        tensor = value.detach().cpu().contiguous()
        try:
            return tensor.numpy()
        except TypeError:  # bfloat16 and other types numpy lacks: float32 holds them exactly
            return tensor.float().numpy()
    return None


def input_key(item: Any) -> bytes:
    """The key of one input: a PIL image (mode, size, pixels), a numpy array or torch tensor
    (dtype, shape, bytes), a string or bytes, a sequence of integers (token ids), or a mapping of
    such (one example's model inputs, keys sorted). Equal inputs, and only they, have equal keys.

    Raises:
        TypeError: when ``item`` is none of these.
    """
    if isinstance(item, Mapping):
        return _digest(b"map", *(part for name in sorted(item) for part in (str(name).encode(), input_key(item[name]))))
    array = _as_numpy(item)
    if array is not None:
        return _array_key(array)
    if hasattr(item, "tobytes") and hasattr(item, "mode") and hasattr(item, "size"):  # a PIL image
        return _digest(b"image", item.mode.encode(), repr(tuple(item.size)).encode(), item.tobytes())
    if isinstance(item, (str, bytes)):
        return _digest(b"str", item.encode() if isinstance(item, str) else item)
    if isinstance(item, Sequence):
        return sequence_key(item)
    raise TypeError(f"cannot key an input of type {type(item).__name__}")


def batch_keys(batch: Any) -> list[bytes]:
    """One key per example of a batch: a mapping of arrays/tensors with the examples along the
    first axis (a model's preprocessed inputs), one array/tensor, or a sequence of inputs.

    Raises:
        TypeError: when a mapping holds no array or tensor with a batch axis (or an input cannot be keyed).
        ValueError: when the arrays of a mapping differ in their first axis.
    """
    if isinstance(batch, Mapping):
        arrays = ((name, _as_numpy(value)) for name, value in batch.items())
        columns = {name: value for name, value in arrays if value is not None and value.ndim >= 1}
        if not columns:
            raise TypeError("a batch mapping needs at least one array or tensor with a batch axis")
        sizes = {len(value) for value in columns.values()}
        if len(sizes) != 1:
            raise ValueError(f"the arrays of a batch differ in their first axis: {sorted(sizes)}")
        return [input_key({name: value[i] for name, value in columns.items()}) for i in range(sizes.pop())]
    array = _as_numpy(batch)
    if array is not None:
        return [_array_key(row) for row in array]
    return [input_key(item) for item in batch]


def _batch_size(batch: Any) -> int:
    if isinstance(batch, Mapping):
        return next(len(v) for v in batch.values() if getattr(v, "ndim", 0) >= 1 and _as_numpy(v) is not None)
    return len(batch)


def _take_rows(batch: Any, rows: list[int]) -> Any:
    if isinstance(batch, Mapping):
        out = {
            name: value[rows] if getattr(value, "ndim", 0) >= 1 and _as_numpy(value) is not None else value
            for name, value in batch.items()
        }
        # a Mapping subclass that builds from a dict (transformers' BatchEncoding); Mapping itself declares
        # no constructor
        return out if type(batch) is dict else type(batch)(out)  # type: ignore[call-arg]
    if _as_numpy(batch) is not None:
        return batch[rows]
    return [batch[i] for i in rows]


@dataclass(frozen=True)
class Duplicates:
    """What :func:`find_duplicates` (or a :class:`DuplicateFinder`) found.

    ``kept``: the indices of the inputs kept, in order (the first occurrence of each distinct
    input; every input when duplicates are kept); ``total``: the inputs seen; ``repeats``: the
    inputs that repeat an earlier one exactly; ``example``: one such pair ``(earlier, repeat)``
    (the first repeat found), None when there is none; ``dropped``: ``total - len(kept)``.
    """

    kept: tuple[int, ...]
    total: int
    repeats: int
    example: tuple[int, int] | None

    @property
    def dropped(self) -> int:
        """The inputs dropped as repeats (``total - len(kept)``; 0 when duplicates are kept)."""
        return self.total - len(self.kept)

    def describe(self, what: str = "inputs") -> str:
        """One line for the report."""
        if not self.repeats:
            return f"no duplicate {what}: all {self.total} are distinct"
        assert self.example is not None, "a repeat was counted, so its first pair was kept"
        first, repeat = self.example
        fate = f"dropped, {len(self.kept)} kept" if self.dropped else "kept (asked for)"
        return (
            f"{self.repeats} of {self.total} {what} repeat an earlier one exactly (e.g. #{repeat} = #{first}); {fate}"
        )

    def as_dict(self) -> dict:
        """``total``, ``repeats``, ``dropped`` and ``example`` (a list, or None) for the JSON ``meta``."""
        return {
            "total": self.total,
            "repeats": self.repeats,
            "dropped": self.dropped,
            "example": list(self.example) if self.example else None,
        }

    @functools.cached_property
    def _kept_set(self) -> frozenset[int]:
        return frozenset(self.kept)

    def select(self, batch: Any, start: int) -> Any:
        """The rows of ``batch`` that were kept, when its first example is input number
        ``start``: replays this result on another pass over the same inputs (another model's
        weights), so that every pass drops the same examples."""
        size = _batch_size(batch)
        rows = [i for i in range(size) if start + i in self._kept_set]
        return batch if len(rows) == size else _take_rows(batch, rows)


class DuplicateFinder:
    """Finds exact duplicates in a stream of inputs, batch by batch; indices count inputs
    across all batches, in the order seen.

    :meth:`add` takes the keys of the next inputs and says which to keep; :meth:`filter` takes
    a batch, keys it with :func:`batch_keys` and returns the batch without its repeats (and
    the keep mask); :meth:`result` is the :class:`Duplicates` so far. With ``keep=True``
    nothing is dropped but repeats are still counted (``--keep-duplicates``).
    """

    def __init__(self, keep: bool = False) -> None:
        self.keep = keep
        self._first: dict[bytes, int] = {}
        self._kept: list[int] = []
        self._total = 0
        self._repeats = 0
        self._example: tuple[int, int] | None = None

    def add(self, keys: Iterable[bytes]) -> list[bool]:
        """Count the next inputs by their keys; one bool per key: keep it (a first occurrence, or ``keep``)."""
        mask = []
        for key in keys:
            index = self._total
            self._total += 1
            first = self._first.setdefault(key, index)
            new = first == index
            if not new:
                self._repeats += 1
                if self._example is None:
                    self._example = (first, index)
            if new or self.keep:
                self._kept.append(index)
            mask.append(new or self.keep)
        return mask

    def filter(self, batch: Any) -> tuple[Any, list[bool]]:
        """``batch`` without its repeats (the same object when nothing is dropped) and the keep mask.

        Raises:
            TypeError: when the batch cannot be keyed (:func:`batch_keys`).
            ValueError: when the arrays of a mapping batch differ in their first axis.
        """
        mask = self.add(batch_keys(batch))
        if all(mask):
            return batch, mask
        return _take_rows(batch, [i for i, keep in enumerate(mask) if keep]), mask

    def result(self) -> Duplicates:
        """The :class:`Duplicates` over every input added so far."""
        return Duplicates(tuple(self._kept), self._total, self._repeats, self._example)


def find_duplicates(inputs: Iterable[Any], key: Callable[[Any], bytes] = input_key) -> Duplicates:
    """The exact duplicates among ``inputs`` (token-id lists, PIL images, arrays, tensors, or
    mappings of them; ``key`` overrides how one input is keyed). The first occurrence of each
    distinct input is kept."""
    finder = DuplicateFinder()
    finder.add(key(item) for item in inputs)
    return finder.result()


class Fingerprints:
    """The keys of a batch of model inputs, computed where the batch lies (module docstring).

    ``secret`` seeds the weights (a random one by default): the passes whose keys are compared
    (every rank of a torchrun job) must share it. One instance keeps its weights, one float64
    matrix per input length and device.
    """

    K = 8  # dot products per column: collision probability at most 2^-16 each
    CHUNK = 1 << 15  # 16-bit words converted to float64 at once (per example), on a device
    HOST_CHUNK = 1 << 11  # on the CPU: a batch's float64 chunk then stays in the core's cache (0.5 MB for 32)
    SEGMENT = 1 << 21  # words summed into one dot product: |sum| < 2^21 x 2^15 x 2^16 = 2^52

    def __init__(self, secret: int | None = None) -> None:
        self.secret = secrets.randbits(63) if secret is None else int(secret)
        self._weights: dict[tuple[int, str], torch.Tensor] = {}

    def _w(self, length: int, device: torch.device) -> torch.Tensor:
        key = (length, str(device))
        if key not in self._weights:
            g = torch.Generator().manual_seed((self.secret * 1_000_003 + length) % (1 << 63))
            w = torch.randint(0, 1 << 16, (length, self.K), generator=g, dtype=torch.int64)
            self._weights[key] = w.to(torch.float64).to(device)
        return self._weights[key]

    def _fingerprint(self, words: torch.Tensor) -> torch.Tensor:
        """(B, K x segments) int64: the exact dot products of each row of 16-bit words with the
        weights, a segment of at most ``SEGMENT`` words at a time (so every sum stays below 2^53)."""
        L = words.shape[1]
        w = self._w(min(L, self.SEGMENT), words.device)  # every segment takes the same weights
        host = words.device.type == "cpu"
        dot, chunk = (_host_dot, self.HOST_CHUNK) if host else (_device_dot, self.CHUNK)
        segments = range(0, max(L, 1), self.SEGMENT)
        return torch.cat([dot(words[:, s : s + self.SEGMENT], w, chunk) for s in segments], dim=1)

    def keys(self, batch: Mapping[str, Any]) -> list[bytes]:
        """One key per example of ``batch`` (a mapping of tensors with the examples along the first
        axis, as a model's preprocessed inputs; other values are ignored, as :func:`batch_keys`
        ignores them). Equal examples, and only they (up to the collision probability of the module
        docstring; rows of the batch itself are also compared bit for bit), have equal keys.

        Raises:
            TypeError: when ``batch`` holds no tensor with a batch axis.
            ValueError: when its tensors differ in their first axis.
        """
        columns = {name: v for name, v in sorted(batch.items()) if isinstance(v, torch.Tensor) and v.ndim >= 1}
        if not columns:
            raise TypeError("a batch mapping needs at least one tensor with a batch axis")
        sizes = {int(v.shape[0]) for v in columns.values()}
        if len(sizes) != 1:
            raise ValueError(f"the tensors of a batch differ in their first axis: {sorted(sizes)}")
        B = sizes.pop()
        if B == 0:
            return []
        words = {name: _words(v) for name, v in columns.items()}
        # on the CPU one thread: thin products gain nothing from a team, which shared cores slow down
        cpu = next(iter(words.values())).device.type == "cpu"
        with intra_op_threads(1 if cpu else None):
            fp = torch.cat([self._fingerprint(w) for w in words.values()], dim=1).cpu().numpy()  # B x 8 words a column
        header = b"".join(
            part
            for name, v in columns.items()
            for part in (name.encode(), str(v.dtype).encode(), repr(tuple(v.shape[1:])).encode())
        )
        rows = [fp[i].tobytes() for i in range(B)]
        first: dict[bytes, int] = {}
        for i, row in enumerate(rows):
            j = first.setdefault(row, i)
            if j != i and not all(torch.equal(w[i], w[j]) for w in words.values()):  # a collision: distinct inputs
                rows[i] = row + secrets.token_bytes(16)
        return [_digest(b"fingerprint", header, row) for row in rows]


def _host_dot(words: torch.Tensor, w: torch.Tensor, chunk: int) -> torch.Tensor:
    """(B, K) int64: the dot products of the rows of CPU ``words`` with the leading rows of ``w``, ``chunk``
    words converted to float64 at a time, in NumPy (its BLAS: on some CPUs twice as fast as torch's for
    these thin products). Every partial sum is an integer below 2^53, so any order gives the same result."""
    x, wn = words.numpy(), w.numpy()
    out = np.zeros((x.shape[0], wn.shape[1]))
    for s in range(0, x.shape[1], chunk):
        part = x[:, s : s + chunk]
        out += part.astype(np.float64) @ wn[s : s + part.shape[1]]
    return torch.from_numpy(out.astype(np.int64))


def _device_dot(words: torch.Tensor, w: torch.Tensor, chunk: int) -> torch.Tensor:
    """:func:`_host_dot` on the device ``words`` lie on."""
    out = torch.zeros(words.shape[0], w.shape[1], dtype=torch.float64, device=words.device)
    for s in range(0, words.shape[1], chunk):
        part = words[:, s : s + chunk]
        out += part.to(torch.float64) @ w[s : s + part.shape[1]]
    return out.to(torch.int64)


def _words(v: torch.Tensor) -> torch.Tensor:
    """The bits of each example of ``v`` as 16-bit integers, (B, L) (one-byte dtypes widened)."""
    x = v.detach().contiguous()
    B = int(x.shape[0])
    if x.dtype == torch.bool:
        x = x.view(torch.uint8)
    flat = x.reshape(B, x.numel() // B if B else 0)  # (an example may hold no values at all)
    return flat.to(torch.int16) if x.element_size() == 1 else flat.view(torch.int16)
