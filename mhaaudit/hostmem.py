"""Handing freed host memory back to the system while a capture runs.

A capture allocates and frees the same large buffers batch after batch (the model's
activations, the preprocessed inputs) on several threads at once: the forward pass and its
intra-op threads, the thread that reads the source ahead, the thread that prepares the next
batch. glibc's allocator keeps what such threads free in per-thread arenas and returns it to the
system only when the free space sits at the top of a heap, so the resident memory of a process
can creep up batch after batch although what it holds does not grow (the docs' Benchmarks page,
``docs/benchmarks.md``, gives the peaks measured with and without this module).

:class:`Trimmer` calls ``malloc_trim(0)`` (every arena; free pages inside a heap are released
too) at most once per ``every`` seconds; :func:`release` calls it now. Where the C library has no
``malloc_trim`` (not glibc, not Linux) both do nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import time
from collections.abc import Callable

__all__ = ["Trimmer", "available_memory", "release", "supported"]


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None).malloc_trim  # the C library the process already runs on
    except (OSError, AttributeError):  # musl and others have no malloc_trim
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def supported() -> bool:
    """Whether the process's C library can hand freed memory back (glibc's ``malloc_trim``)."""
    return _malloc_trim() is not None


def release() -> bool:
    """Hand the memory freed so far back to the system now; False where that is not supported."""
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    return True


class Trimmer:
    """Calls :func:`release` when at least ``every`` seconds have passed since its last call
    (the first call of :meth:`maybe` always releases)."""

    def __init__(self, every: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = float(every)
        self.clock = clock
        self.last: float | None = None

    def maybe(self) -> bool:
        """Call :func:`release` when ``every`` seconds have passed since the last call (or on the first); its
        answer, or False when it is not yet time."""
        now = self.clock()
        if self.last is not None and now - self.last < self.every:
            return False
        self.last = now
        return release()


def available_memory() -> int:
    """Bytes of memory this process can still use: the system's available memory, or less under a
    cgroup limit."""
    avail = None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):  # pragma: no cover - not a POSIX system
            avail = 4 * 2**30
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
            used = int(f.read().strip())
        if limit != "max":
            avail = min(avail, max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    return int(avail)
