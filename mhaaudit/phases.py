"""Where a run's time goes: the main thread's wall time, split into named phases.

A run (``audit``, ``capacity_audit``, ...) opens a :func:`recording`; the code that does the work
marks its phases with :func:`phase`: ``imports``, ``model build``, ``data`` (waiting for the next
prepared batch), ``duplicate keys``, ``forward``, ``reduction`` (the streaming reduction of each
batch), ``whole-set statistics``, ``draws``, ``witness`` and ``render`` (:data:`PHASES`). Phases
are exclusive: a phase opened inside another pauses the outer one, so the phases of a run add up
to at most its wall time, and ``other`` is what no phase claimed. Only the thread that opened the
recording is timed (the helper threads that read and prepare batches ahead show as the time the
main thread waits for them, ``data``), so a CPU run shows the same shares a GPU run would.

On a GPU, work is queued and runs later; a phase given a ``device`` waits for that device's
queued work at its end (``torch.cuda.synchronize``), so the forward pass is charged to
``forward`` and not to the first step that reads its result. The batch loop reads every batch's
result at once anyway, so this costs no overlap that the loop had.

Nothing here imports torch or the library: the command line imports this module before the
library, to time the imports themselves (:func:`process_seconds`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

__all__ = [
    "OTHER",
    "PHASES",
    "Clock",
    "described",
    "phase",
    "process_seconds",
    "recorded",
    "recording",
    "startup_seconds",
    "timings",
]

#: The phases, in the order a run goes through them (and the report lists them).
PHASES = (
    "imports",
    "model build",
    "data",
    "duplicate keys",
    "forward",
    "reduction",
    "whole-set statistics",
    "draws",
    "witness",
    "render",
)
#: What no phase claimed (the run's wall time less its phases).
OTHER = "other"

_LOADED = time.perf_counter()  # when this module was first imported (the fallback start of the process)


def process_seconds() -> float:
    """Seconds since this process started (Linux: from ``/proc``, interpreter start-up included),
    else since this module was first imported."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        start = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, after the command's name
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - start)
    except (OSError, ValueError, IndexError, AttributeError):
        return time.perf_counter() - _LOADED


_STARTUP_TAKEN = False


def startup_seconds() -> float:
    """The seconds this process took to reach its first command (the interpreter, the command line
    and its imports), when it was started to run the command line (``mhaaudit`` or ``python -m
    mhaaudit``); 0 for a later command, or for a command run inside another program."""
    global _STARTUP_TAKEN
    if _STARTUP_TAKEN:
        return 0.0
    _STARTUP_TAKEN = True
    argv0 = os.path.normpath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    name, parent = os.path.basename(argv0), os.path.basename(os.path.dirname(argv0))
    ours = name == "mhaaudit" or (name == "__main__.py" and parent == "mhaaudit")
    return process_seconds() if ours else 0.0


class Clock:
    """Exclusive phase times of one thread (the one that made the clock)."""

    def __init__(self) -> None:
        self.owner = threading.get_ident()
        self.spent: dict[str, float] = {}
        self._stack: list[str] = []
        self._mark = time.perf_counter()
        self.started = self._mark

    def _credit(self, now: float) -> None:
        if self._stack:
            name = self._stack[-1]
            self.spent[name] = self.spent.get(name, 0.0) + (now - self._mark)
        self._mark = now

    def enter(self, name: str) -> None:
        """Open phase ``name`` (the open one, if any, pauses)."""
        self._credit(time.perf_counter())
        self._stack.append(name)
        self.spent.setdefault(name, 0.0)

    def leave(self) -> None:
        """Close the innermost phase (the one it paused resumes); none open, nothing (a phase opened in a
        generator closed only after its recording ended, which closed every phase left open)."""
        self._credit(time.perf_counter())
        if self._stack:
            self._stack.pop()

    def add(self, other: Clock) -> None:
        """Charge ``other``'s phases to this clock too (a run inside a run)."""
        for name, seconds in other.spent.items():
            self.spent[name] = self.spent.get(name, 0.0) + seconds


_CLOCKS: list[Clock] = []  # the recordings open, innermost last
_LOCK = threading.Lock()


def _current() -> Clock | None:
    clock = _CLOCKS[-1] if _CLOCKS else None
    return clock if clock is not None and clock.owner == threading.get_ident() else None


@contextmanager
def recording() -> Iterator[Clock]:
    """Time the phases of the block on this thread; the clock's ``spent`` holds them after. A
    recording opened inside another (on its thread) pauses it and charges its phases to it when it
    ends, so nothing is counted twice."""
    outer = _current()
    if outer is not None:  # the outer clock stops while this one runs, and takes its phases after
        outer._credit(time.perf_counter())
    clock = Clock()
    with _LOCK:
        _CLOCKS.append(clock)
    try:
        yield clock
    finally:
        while clock._stack:  # a phase left open by an exception is closed here
            clock.leave()
        with _LOCK:
            _CLOCKS.remove(clock)
        if outer is not None:
            outer.add(clock)
            outer._mark = time.perf_counter()


def _synchronize(device) -> None:
    torch = sys.modules.get("torch")
    if torch is None or device is None:
        return
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_initialized():
        torch.cuda.synchronize(dev)


@contextmanager
def phase(name: str, device=None) -> Iterator[None]:
    """Charge the block's wall time to phase ``name`` of the current recording (nothing when none is
    open on this thread). With a CUDA ``device``, the device's queued work is waited for at the end."""
    clock = _current()
    if clock is None:
        yield
        return
    clock.enter(name)
    try:
        yield
        _synchronize(device)
    finally:
        clock.leave()


def timings(spent: dict[str, float], total: float, digits: int = 3) -> dict[str, float]:
    """The ``timings_s`` of a run: each phase recorded (in :data:`PHASES` order, then any other
    name), ``other`` (what no phase claimed; 0 when the rounding leaves nothing) and ``total``, rounded."""
    order = [p for p in PHASES if p in spent] + [p for p in spent if p not in PHASES and p != OTHER]
    out = {p: round(spent[p], digits) for p in order}
    out[OTHER] = round(max(0.0, total - sum(spent[p] for p in order)), digits)
    out["total"] = round(total, digits)
    return out


_T = TypeVar("_T")


def recorded(run: Callable[[], _T]) -> tuple[_T, dict[str, float]]:
    """``run()`` inside a :func:`recording`, and the :func:`timings` of its phases, with its wall time as the
    total: ``(result, timings)``."""
    with recording() as clock:
        start = time.perf_counter()
        out = run()
        return out, timings(clock.spent, time.perf_counter() - start)


def described(timings: dict[str, float]) -> str:
    """Timings as the reports print them, in their order: ``imports 3.6 s, forward 54.0 s, ...``."""
    return ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
