"""Handing freed host memory back: glibc's malloc_trim, called at most once per interval."""

from __future__ import annotations

import platform
import sys

import pytest

from mhaaudit import hostmem


def test_supported_where_the_c_library_is_glibc_on_linux():
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert hostmem.supported() is glibc
    assert hostmem.release() is glibc


def test_release_lowers_resident_memory_after_a_large_free():
    if not hostmem.supported():
        pytest.skip("needs glibc's malloc_trim")
    import ctypes

    def rss_kb() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    # Many 64 KiB blocks (below the mmap threshold, so they live in the heap), all touched, then
    # all but the last freed: the last one pins the top of the heap, so only malloc_trim's release
    # of the free pages inside the heap can give the memory back.
    blocks = [libc.malloc(64 << 10) for _ in range(1600)]
    for b in blocks:
        libc.memset(b, 1, 64 << 10)
    for b in blocks[:-1]:
        libc.free(b)
    before = rss_kb()
    assert hostmem.release() is True
    after = rss_kb()
    libc.free(blocks[-1])
    assert before - after > 50_000, (before, after)  # of the 100 MiB freed, most goes back


def test_trimmer_releases_at_most_once_per_interval(monkeypatch):
    calls = []
    monkeypatch.setattr(hostmem, "release", lambda: calls.append(1) or True)
    now = [100.0]
    trim = hostmem.Trimmer(every=1.0, clock=lambda: now[0])
    done = []
    for t in (100.0, 100.4, 100.99, 101.0, 101.5, 103.0):
        now[0] = t
        done.append(trim.maybe())
    assert done == [True, False, False, True, False, True]
    assert len(calls) == 3


def test_trimmer_says_when_release_is_unsupported(monkeypatch):
    monkeypatch.setattr(hostmem, "release", lambda: False)
    trim = hostmem.Trimmer(every=0.0)
    assert trim.maybe() is False and trim.maybe() is False
