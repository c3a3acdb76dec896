"""Names the native readers can open: pyarrow, safetensors and the tokenizers library take a file's name only as
UTF-8, and a name on disk may be any bytes. :mod:`mhaaudit.files` re-exports these names.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["arrow_source", "native_name", "utf8_name"]


@contextlib.contextmanager
def arrow_source(path: str | os.PathLike) -> Iterator[Any]:
    """What pyarrow's readers take for the file ``path`` while open: its name, or the file opened
    through Python when the name is not UTF-8 (pyarrow takes names only as UTF-8, and a name on
    disk may be any bytes: Python holds those as lone surrogates). Opening raises what
    :func:`open` raises."""
    name = os.fspath(path)
    if utf8_name(name):
        yield name
        return
    with open(name, "rb") as f:
        yield f


@contextlib.contextmanager
def native_name(path: str | os.PathLike) -> Iterator[str]:
    """A name of the file or folder ``path`` that a native reader (safetensors' ``safe_open``, the tokenizers
    library: they take names only as UTF-8) can open while this context lasts: the name itself when it is UTF-8,
    else the name of the file or folder opened through Python in ``/proc/self/fd`` (or ``/dev/fd``), the same
    one, whatever bytes its name holds (a folder's files are found under it).
    Where neither exists, the name as it is (the reader then refuses it in its own words). Opening raises
    what :func:`open` raises."""
    name = os.fspath(path)
    if utf8_name(name):
        yield str(name)
        return
    folder = next((f for f in ("/proc/self/fd", "/dev/fd") if os.path.isdir(f)), None)
    if folder is None:  # pragma: no cover - every POSIX system this runs on has one of them
        yield str(name)
        return
    # O_PATH where there is one: a folder that may be searched but not listed opens, and a named pipe does not
    # block (the reader's own open of the name checks what reading needs, as it would by the name itself)
    fd = os.open(name, getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_CLOEXEC", 0))
    try:
        yield f"{folder}/{fd}"
    finally:
        os.close(fd)


def utf8_name(path: str | os.PathLike) -> bool:
    """Whether the name ``path`` is UTF-8, the only form in which the native readers (pyarrow, safetensors,
    the tokenizers library) take a name: one with undecodable bytes (which Python holds as lone surrogates)
    they cannot open by it."""
    name = os.fspath(path)
    try:
        if isinstance(name, str):
            name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
