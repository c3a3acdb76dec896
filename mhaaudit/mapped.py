"""A feature array read where it lies: ``MappedArray``, a read-only memory map of a ``.npy`` or ``.safetensors``
file that pickles as its description and the SHA-256 of its bytes (a torchrun rank maps its own node's file and
holds it to rank 0's)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from .errors import InputError

_DIGEST_BLOCK = 16 << 20  # bytes read at a time for a mapped file's digest
_DIGESTS: dict[tuple, str] = {}  # mapped files' digests, by their region and the file's identity and time


class MappedArray:
    """A floating-point feature array read where it lies: a read-only memory map of a ``.npy`` or
    ``.safetensors`` file, by path, byte offset, dtype and shape, with the token ``index`` chosen
    (``to_query_matrix``) for a T x n x d array. Only the pages a computation touches are read;
    nothing is copied. Pickling sends the description, not the data (a torchrun rank maps the same
    file), with the SHA-256 of the mapped bytes: where it is unpickled, the file is held to it before it
    is mapped (another node's file of that name may differ, or be missing). ``array`` is the NumPy view;
    ``shape``, ``ndim`` and ``dtype`` (a torch dtype) describe it."""

    def __init__(self, path, offset: int, dtype, shape, order: Literal["C", "F"] = "C", index: int | None = None):
        self.path, self.offset, self.order, self.index = Path(path), int(offset), order, index
        self.np_dtype = np.dtype(dtype)
        self.file_shape = tuple(int(v) for v in shape)
        self._array: np.ndarray | None = None
        self._digest: str | None = None  # the mapped bytes' SHA-256, once worked out
        self._sent: str | None = None  # unpickled: the digest the sender's bytes had, which this file's must have

    @property
    def array(self) -> np.ndarray:
        """The read-only NumPy view: the file's memory map, or token ``index``'s T x d rows of it (mapped once).

        Raises:
            InputError: unpickled, when the file cannot be read here, or its mapped bytes differ from the sender's.
        """
        if self._array is None:
            if self._sent is not None:
                self._hold_to_sent()
            mm = np.memmap(
                self.path, dtype=self.np_dtype, mode="r", offset=self.offset, shape=self.file_shape, order=self.order
            )
            self._array = mm if self.index is None else mm[:, self.index, :]
        return self._array

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the view: the file's, or (T, d) when a token ``index`` is chosen."""
        if self.index is None:
            return self.file_shape
        return (self.file_shape[0], self.file_shape[2])

    @property
    def ndim(self) -> int:
        """The number of dimensions of the view (2, or 3 for T x n x d tokens with no ``index``)."""
        return len(self.shape)

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype of the elements (the file's NumPy dtype in the machine's byte order)."""
        return torch.from_numpy(np.empty(0, dtype=self.np_dtype.newbyteorder("="))).dtype

    @property
    def nbytes(self) -> int:
        """The size of the view in bytes (its elements times the item size; not the whole file's)."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.np_dtype.itemsize

    def numpy(self) -> np.ndarray:
        """The read-only NumPy view of the mapped rows (as ``torch.Tensor.numpy``)."""
        return self.array

    def token(self, index: int) -> MappedArray:
        """The T x d rows of token ``index`` of a T x n x d array (a strided view of the same map)."""
        n = self.file_shape[1]
        return MappedArray(self.path, self.offset, self.np_dtype, self.file_shape, self.order, index % n)

    def digest(self) -> str:
        """The SHA-256 of the file's mapped bytes (the whole array, whatever ``index``), read a block at a time.

        Raises:
            InputError: when the file ends before the array it declares (OSError where it cannot be read).
        """
        if self._digest is None:
            st = os.stat(self.path)  # a file sent again (each shared call) is read once while it is unchanged
            key: tuple = (self.path, self.offset, self.file_shape, self.np_dtype.str, st.st_dev, st.st_ino)
            key += (st.st_size, st.st_mtime_ns)
            if key in _DIGESTS:
                self._digest = _DIGESTS[key]
                return self._digest
            h = hashlib.sha256()
            left = int(np.prod(self.file_shape, dtype=np.int64)) * self.np_dtype.itemsize
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                while left > 0 and (block := fh.read(min(left, _DIGEST_BLOCK))):
                    h.update(block)
                    left -= len(block)
            if left > 0:
                raise InputError(f"{self.path}: the file ends before the {self.file_shape} array it declares")
            self._digest = _DIGESTS[key] = h.hexdigest()
        return self._digest

    def _hold_to_sent(self) -> None:
        sent = self._sent or ""
        try:
            here = self.digest()
        except OSError as exc:
            raise InputError(
                f"cannot read {self.path} on this node ({exc.strerror or exc}): the features file must be there, "
                "the same as rank 0's"
            ) from None
        if here != sent:
            raise InputError(
                f"{self.path} on this node differs from rank 0's (SHA-256 of its {self.file_shape} array "
                f"{here[:12]}..., rank 0's {sent[:12]}...); give every node the same file"
            )
        self._sent = None

    def __getstate__(self):
        state = {k: v for k, v in self.__dict__.items() if k not in ("_array", "_sent")}
        state["_digest"] = self._sent or self.digest()  # what the receiver's file must hold
        return state

    def __setstate__(self, state):
        self.__dict__.update(state, _array=None, _sent=state["_digest"], _digest=None)

    def __repr__(self) -> str:
        return f"MappedArray({str(self.path)!r}, shape={self.shape}, dtype={self.np_dtype})"
