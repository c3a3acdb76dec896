"""A native library that writes to file descriptor 1 in the middle of a run, as MKL's error handler
(``Intel oneMKL ERROR: Parameter 4 was incorrect on entry to DLASCL.``), CUDA and NCCL do.

:func:`install` makes the C library's ``write(1, ...)`` and ``printf`` run, through ``ctypes``, every
:data:`EVERY` calls the work makes into the package's library modules (a profile hook: it fires
wherever the work goes, whichever function a release calls). :data:`DRIVER` is a ``python -c``
program that runs the command line with it installed (``sys.argv[1:]``: the arguments).
"""

from __future__ import annotations

import ctypes
import sys
import threading
from pathlib import Path

WRITE = b"chatter: write(1) from native code\n"
PRINTF = b"chatter: printf from native code\n"
# The library modules the work runs in (the command line itself, and what runs before it, are left out).
WORK = (
    "mhaaudit.auditing",
    "mhaaudit.audit_result",
    "mhaaudit.capture",
    "mhaaudit.probes",
    "mhaaudit.capacity",
    "mhaaudit.estimation",
    "mhaaudit.features",
    "mhaaudit.kruskal",
    "mhaaudit.memorize",
    "mhaaudit.numerics",
    "mhaaudit.pipeline",
    "mhaaudit.render",
    "mhaaudit.reproduce",
)
EVERY = 40


def install(every: int = EVERY) -> list[int]:
    """Chatter on descriptor 1 from native code at the first and every ``every``-th call into :data:`WORK`
    (in every thread); returns a one-item list counting the calls seen."""
    libc = ctypes.CDLL(None)
    calls = [0]

    def hook(frame, event, arg) -> None:
        if event != "call" or not (frame.f_globals.get("__name__") or "").startswith(WORK):
            return
        calls[0] += 1
        if calls[0] % every == 1:
            libc.write(1, WRITE, len(WRITE))
            libc.printf(PRINTF)
            libc.fflush(None)

    sys.setprofile(hook)
    threading.setprofile(hook)
    return calls


def uninstall() -> None:
    """Remove the hook of :func:`install`."""
    sys.setprofile(None)
    threading.setprofile(None)  # type: ignore[arg-type]


DRIVER = (
    f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import chatter; "
    "chatter.install(); from mhaaudit.__main__ import entry; entry(sys.argv[1:])"
)
