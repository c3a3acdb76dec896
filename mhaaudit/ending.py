"""The end of the process after Ctrl-C, SIGTERM or SIGHUP, bounded from the signal on.

The command line's handlers call :func:`note` in the main thread when such a signal arrives, before
they raise the exception that unwinds the run. From then on :func:`ending` is true, and helpers stop
waiting for work whose results will go unused (:mod:`mhaaudit.workers`, the data's reader in
:mod:`mhaaudit.pipeline`). Once :func:`watch` has started (the console script starts it), a daemon
thread calls its ``end`` a bounded time after the first such signal if the process is still there,
whatever its main thread waits on: a lock left taken by the interruption, a helper, a full pipe, native
code that never returns to the interpreter (and releases its lock, as torch's operations and waits do).
The signal reaches that thread through a pipe: Python's own C-level handler writes its number there as
it arrives (``signal.set_wakeup_fd``), before any Python handler can run, and :func:`note` writes it
too. When the run has settled on a failure's status and line (:func:`settle`), that end keeps them.
:func:`deadline` says when that end comes, for work that ends the process itself and must do so first.
Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Collection

__all__ = [
    "before_end",
    "clear",
    "deadline",
    "ending",
    "hasten",
    "note",
    "noted",
    "own_the_process",
    "owns_the_process",
    "settle",
    "settled",
    "watch",
    "watching",
]

_NOTED: int | None = None  # the number of the first signal that is ending the run
_STATUS: int | None = None  # the status the run settled on after it (None: not yet)
_SAID = False  # the run's one line is said
_WRITE: int | None = None  # the write end of the watch's pipe, once it watches
_WATCHER = 0  # the process whose watch that is (a forked child inherits the pipe, not the thread)
_DEADLINE: float | None = None  # when the watch ends the process (time.monotonic()), once it counts
_DELAY = 0.0  # the watch's delay
_OURS = False  # the process is the command line's own: its end is the command line's to make
_HURRY = threading.Event()  # set by :func:`hasten`: the watch ends the process without waiting out its delay
_LAST: list[Callable[[int], object]] = []  # what the watch does before its end (:func:`before_end`)


def own_the_process() -> None:
    """This process runs the command line (``mhaaudit.__main__.entry``), not a host that imports the library: a
    signal while the command line loads ends it (``mhaaudit.cli.app``)."""
    global _OURS
    _OURS = True


def owns_the_process() -> bool:
    """Whether :func:`own_the_process` was called in this process."""
    return _OURS


def note(signum: int) -> None:
    """A signal that ends the run arrived: from now on :func:`ending` is true, and the watch (when this process
    started one) counts down. Called from a signal handler, in the main thread: it takes no lock."""
    global _NOTED
    if _NOTED is None:
        _NOTED = int(signum)
    fd = _WRITE
    if fd is not None and os.getpid() == _WATCHER:  # this process's own watch (:func:`watching`)
        _start_count()  # (before the watch's thread wakes, if it has not yet)
        with contextlib.suppress(OSError):  # full (a byte per signal, thousands) or closed: it is counting
            os.write(fd, bytes([int(signum) & 0xFF]))


def ending() -> bool:
    """Whether a signal is ending the run (:func:`note`): work whose results go unused need not be waited for."""
    return _NOTED is not None


def noted() -> int | None:
    """The number of the signal that is ending the run, or None."""
    return _NOTED


def settle(status: int, said: bool) -> None:
    """The run a signal is ending has unwound: it ends with ``status``, and its one line is ``said`` (a signal's
    line, or the error that took its place). The end the watch makes keeps both."""
    global _STATUS, _SAID
    _STATUS, _SAID = int(status), bool(said)


def settled() -> tuple[int | None, bool]:
    """``(status, said)`` as :func:`settle` gave them; ``(None, False)`` before."""
    return _STATUS, _SAID


def clear() -> None:
    """Forget the signal and what the run settled: a later run of this process (a library user's or a
    test's) is not ending. A process that watches (the console script: its run is its last) keeps them
    to its end, and a watch already counting goes on."""
    global _NOTED, _STATUS, _SAID
    _NOTED, _STATUS, _SAID = None, None, False


def _start_count() -> float:
    """The watch's deadline, set now unless a signal set it already."""
    global _DEADLINE
    if _DEADLINE is None:
        _DEADLINE = time.monotonic() + _DELAY
    return _DEADLINE


def before_end(last: Callable[[int], object]) -> None:
    """The watch calls ``last(signum)`` (the signal that ended the run) on its thread before its end, so that what
    the unwinding run would have done for the others still happens where nothing unwinds it (a torchrun rank's
    note of why it left: :mod:`mhaaudit.distributed`). What it raises is passed over; it must not wait long. Given
    twice, it is called once."""
    if last not in _LAST:
        _LAST.append(last)


def hasten() -> None:
    """The exception the signal's handler raised was lost (raised in a finaliser or a weakref callback, where
    Python cannot raise it): nothing unwinds the run, so this process's watch, once it counts, ends the process
    now instead of after its delay. Nothing before a signal is noted, or where the process has no watch."""
    global _DEADLINE
    if _NOTED is None or not watching():
        return
    _DEADLINE = min(_start_count(), time.monotonic())
    _HURRY.set()


def deadline() -> float | None:
    """When this process's watch will end it (on the ``time.monotonic()`` clock), once a signal started its
    count; None before, or where the process has no watch. Work that ends the process itself (a torchrun
    rank's wait for the others, ``mhaaudit.distributed.leave``) ends before it."""
    return _DEADLINE if watching() else None


def watching() -> bool:
    """Whether this process has started its watch (:func:`watch`)."""
    return _WRITE is not None and os.getpid() == _WATCHER


def watch(delay: float, end: Callable[[int], object], signals: Collection[int]) -> None:
    """Start the watch: ``delay`` seconds after the first of ``signals`` arrives (or is given to :func:`note`),
    ``end(signum)`` runs on a daemon thread (it ends the process; if it returns, the thread ends); other
    signals that have Python handlers are passed over. From the main thread, the signals' C-level handler
    wakes it as they arrive (``signal.set_wakeup_fd``; a forked child stops doing so). Nothing when already
    watching."""
    global _WRITE, _WATCHER, _DELAY
    if watching():
        return
    _DELAY = max(0.0, delay)
    read, write = os.pipe()
    wanted = {int(s) & 0xFF for s in signals}
    with contextlib.suppress(AttributeError, OSError):  # Windows before Python 3.12: a blocking pipe
        os.set_blocking(write, False)  # a handler never waits
    with contextlib.suppress(ValueError, OSError):  # not the main thread, or a pipe this system cannot take
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        os.register_at_fork(after_in_child=_forked)

    def wait() -> None:
        while True:
            try:
                got = os.read(read, 1)  # a signal's number
            except OSError:  # pragma: no cover - the pipe is the process's own
                return
            if not got:  # pragma: no cover - closed
                return
            if got[0] in wanted:
                break
        _HURRY.wait(max(0.0, _start_count() - time.monotonic()))  # (:func:`hasten` cuts the wait short)
        signum = _NOTED if _NOTED is not None else got[0]
        for last in list(_LAST):
            with contextlib.suppress(Exception):  # the end comes whatever it meets
                last(signum)
        end(got[0])

    threading.Thread(target=wait, name="mhaaudit-signal-watch", daemon=True).start()
    _WRITE, _WATCHER = write, os.getpid()
    if _NOTED is not None:  # a signal came before the watch: it counts from now
        note(_NOTED)


def _forked() -> None:
    """In a forked child: its signals no longer wake the parent's watch (the child has no watch of its own)."""
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
