"""The end of the process after Ctrl-C, SIGTERM or SIGHUP, bounded from the signal on.

The command line's handlers call :func:`note` in the main thread when such a signal arrives, before
they raise the exception that unwinds the run. From then on :func:`ending` is true, and helpers stop
waiting for work whose results will go unused (:mod:`mhaaudit.workers`, the data's reader in
:mod:`mhaaudit.pipeline`). Once :func:`watch` has started (the console script starts it), a daemon
thread calls its ``end`` a bounded time after the first signal if the process is still there,
whatever its main thread waits on: a lock left taken by the interruption, a helper, a full pipe. The
first signal reaches that thread through a pipe (a handler only writes its number there). Nothing here
imports torch.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

__all__ = ["clear", "ending", "note", "noted", "said", "was_said", "watch"]

_NOTED: int | None = None  # the number of the first signal that is ending the run
_SAID = False  # its line is said
_WRITE: int | None = None  # the write end of the watch's pipe, once it watches
_WATCHER = 0  # the process whose watch that is (a forked child inherits the pipe, not the thread)


def note(signum: int) -> None:
    """A signal that ends the run arrived: from now on :func:`ending` is true, and the watch (when this process
    started one) counts down. Called from a signal handler, in the main thread: it takes no lock."""
    global _NOTED
    if _NOTED is None:
        _NOTED = int(signum)
    if _WRITE is not None and os.getpid() == _WATCHER:
        with contextlib.suppress(OSError):  # full (a byte per signal, 64 KB of them) or closed: it is counting
            os.write(_WRITE, bytes([int(signum) & 0xFF]))


def ending() -> bool:
    """Whether a signal is ending the run (:func:`note`): work whose results go unused need not be waited for."""
    return _NOTED is not None


def noted() -> int | None:
    """The number of the signal that is ending the run, or None."""
    return _NOTED


def said() -> None:
    """The signal's one line is said: the end the watch makes does not say it again."""
    global _SAID
    _SAID = True


def was_said() -> bool:
    """Whether the signal's line is said (:func:`said`)."""
    return _SAID


def clear() -> None:
    """The run the signal ended is over (its status is known): a later run of this process (a library user's
    or a test's) is not ending. A watch already counting goes on, and a line said stays said."""
    global _NOTED
    _NOTED = None


def watch(limit: float, end: Callable[[int], object]) -> None:
    """Start the watch: ``limit`` seconds after the first signal :func:`note` is given, ``end(signum)`` runs
    on a daemon thread (it ends the process; if it returns, the thread ends). Nothing when already watching."""
    global _WRITE, _WATCHER
    if _WRITE is not None and os.getpid() == _WATCHER:
        return
    read, write = os.pipe()
    os.set_blocking(write, False)  # a handler never waits

    def wait() -> None:
        try:
            got = os.read(read, 1)  # the first signal's number
        except OSError:  # pragma: no cover - the pipe is the process's own
            return
        if got:
            time.sleep(limit)
            end(got[0])

    threading.Thread(target=wait, name="mhaaudit-signal-watch", daemon=True).start()
    _WRITE, _WATCHER = write, os.getpid()
