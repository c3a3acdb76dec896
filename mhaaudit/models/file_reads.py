"""What is read of a weights file without its tensors' data, read once a run: :func:`read_once`.

A run holds a single weights file's tensors' shapes against the model before any work
(``load.check_weights_fit``); its load holds them again before the model is built, then lists the
file's tensors to read only those the probed blocks use (``shards.Checkpoint.file``). Within
:func:`read_once` all three come from one read of the file; so does the state timm's load picks from a timm
model's torch checkpoint (``timm_backend.torch_state_shapes``), which a series checks before any work and again
before each load. The module imports nothing of the package: the readers (``checkpoints``, ``shards``,
``timm_backend``) hand it the read to make.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

__all__ = ["HEADER", "once", "read_once"]

#: what :func:`once` keeps of a safetensors file: its checked header (``feature_files.safetensors_header``)
HEADER = "safetensors header"

_Read = TypeVar("_Read")
# while read_once() is open in this thread: (what, the file's identity) -> what was read of it
_KEPT: ContextVar[dict | None] = ContextVar("mhaaudit_read_once", default=None)


@contextmanager
def read_once() -> Iterator[None]:
    """While open, what :func:`once` reads of a file is read from it once. Kept by the file's identity (device,
    inode, size, modification and change times), so that a file replaced or rewritten meanwhile is read anew (its
    change time, which a caller cannot set back as it can the modification time, moves with every write but for
    one within the file system's clock tick of the read); only what is read
    without the tensors' data is kept (a header, a map of names to shapes), never a tensor, and nothing outlives
    the outermost :func:`read_once`. Each thread has its own: one that opens none reads as if none were open."""
    if _KEPT.get() is not None:  # an outer one keeps the reads
        yield
        return
    token = _KEPT.set({})
    try:
        yield
    finally:
        _KEPT.reset(token)


def once(what: str, path: str, read: Callable[[], _Read]) -> _Read:
    """``read()`` of the file ``path`` (``what``: what it reads, as :data:`HEADER`), or within :func:`read_once`
    what it gave when this file was read so before; a read that raises keeps nothing.

    Raises:
        OSError: when the file cannot be looked up; what ``read()`` raises, as raised.
    """
    kept = _KEPT.get()
    if kept is None:
        return read()
    st = os.stat(path)
    key = (what, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in kept:
        kept[key] = read()
    return kept[key]
