"""Where a command's wall time goes, phase by phase: its main thread's Python stack sampled every few ms.

    python benchmarks/stack_sampler.py --out samples.json -- check vit-base --device cuda --format json

runs ``mhaaudit`` with the arguments after ``--`` in this process (its stdout and stderr are the command's own)
while a helper thread reads the main thread's stack every ``--interval`` seconds (``sys._current_frames``) and
the phase the run is in, as its own ``timings_s`` name it: a phase of ``mhaaudit.phases`` (forward, reduction,
draws, ...), else the command line's own (``imports``: the start-up and the library's import, up to the library
imported; ``render``: from the outputs begun), else ``other``.
``--out`` gets, for each phase, the seconds sampled and the code lines the samples found running: the innermost
frame (``self``: where the time went, a library's line too) and the innermost line of mhaaudit's own
(``mhaaudit``: which of its lines was running or waiting on what it called: on a GPU, a wait for the device shows
as the line that read a result). Unlike cProfile, nothing is traced: the run is not slowed where Python is busy,
and a wait inside a C call is charged to the line that made it. The GPU report's ``profile`` part runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

#: Lines kept for each phase, of each kind
TOP = 8


class Sampler:
    """Samples of one thread's stack, each ``(phase, innermost line, innermost line of mhaaudit, seconds)``, taken
    every ``interval`` seconds by a helper thread until :meth:`stop`; a sample's seconds are those since the one
    before it (the helper waits for the interpreter's lock while the thread runs Python, so samples come less
    often then: each stands for the time it took to come)."""

    def __init__(self, thread_id: int, interval: float = 0.005) -> None:
        self.thread_id, self.interval = thread_id, interval
        self.samples: list[tuple[str, str, str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)
        self.started = self.stopped = 0.0

    def start(self) -> Sampler:
        self.started = time.perf_counter()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.stopped = time.perf_counter()

    def _run(self) -> None:
        last = self.started
        while not self._stop.wait(self.interval):
            frame = sys._current_frames().get(self.thread_id)
            now = time.perf_counter()
            if frame is not None:
                self.samples.append((_phase(self.thread_id, frame), _name(frame), _own(frame), now - last))
            last = now


#: The command line's clocks (``mhaaudit.cli.output.CommandClock``) made in this process, the newest last
_COMMANDS: list = []


def watch_commands() -> None:
    """Keep each command line's clock in :data:`_COMMANDS` as it is made: the command line times its own phases
    (``imports``, ``render``) outside any recording of ``mhaaudit.phases``, by that clock's marks."""
    from mhaaudit.cli import output

    made = output.CommandClock.__init__
    if getattr(made, "watched", False):
        return

    def init(self, *args, **kwargs) -> None:
        made(self, *args, **kwargs)
        _COMMANDS.append(self)

    init.watched = True  # type: ignore[attr-defined]
    output.CommandClock.__init__ = init  # type: ignore[method-assign]


def _phase(thread_id: int, frame=None) -> str:
    """The phase ``thread_id`` is in, as the run's ``timings_s`` count it: the innermost phase open on its clock,
    else the command line's own (:func:`_command_phase`), else ``other``."""
    phases = sys.modules.get("mhaaudit.phases")
    clocks = getattr(phases, "_CLOCKS", None) or []
    for clock in reversed(list(clocks)):
        stack = list(getattr(clock, "_stack", ()))
        if getattr(clock, "owner", None) == thread_id:
            if stack:
                return stack[-1]
            break
    return _command_phase(frame)


def _command_phase(frame) -> str:
    """Outside every phase of a recording, the command line's own as ``add_command_times`` counts them: with its
    clock made, ``render`` once the outputs begin, ``imports`` until the library is imported (the start-up with
    it), else ``other``; before any clock (or for a command that keeps none), ``imports`` where ``frame``'s stack
    is importing a module, else ``other``."""
    if _COMMANDS:
        command = _COMMANDS[-1]
        if getattr(command, "rendering", None) is not None:
            return "render"
        return "imports" if getattr(command, "imported", None) == getattr(command, "begun", None) else "other"
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return "imports"
        frame = frame.f_back
    return "other"


def _name(frame) -> str:
    """``path:line function`` of a frame, its path from the package folder (``torch/...``, ``mhaaudit/...``), else
    its last two parts (``python3.12/threading.py``)."""
    path = frame.f_code.co_filename.replace(os.sep, "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        path = "mhaaudit/" + path.rsplit("/mhaaudit/", 1)[1] if "/mhaaudit/" in path else "/".join(path.split("/")[-2:])
    return f"{path}:{frame.f_lineno} {frame.f_code.co_name}"


def _own(frame) -> str:
    """The innermost frame of mhaaudit's own code on the stack (its line), or ``-`` where there is none."""
    sep = os.sep + "mhaaudit" + os.sep
    while frame is not None:
        if sep in frame.f_code.co_filename:
            return _name(frame)
        frame = frame.f_back
    return "-"


def summary(samples: list[tuple[str, str, str, float]], top: int = TOP) -> dict:
    """For each phase (the most time first): its seconds sampled, and the ``top`` lines of each kind with theirs."""
    by_phase: dict[str, list[tuple[str, str, str, float]]] = {}
    for s in samples:
        by_phase.setdefault(s[0], []).append(s)

    def lines(got, kind: int) -> list[list]:
        spent: Counter[str] = Counter()
        for s in got:
            spent[s[kind]] += s[3]
        return [[line, round(t, 3)] for line, t in spent.most_common(top)]

    out = {}
    for phase, got in sorted(by_phase.items(), key=lambda kv: -sum(s[3] for s in kv[1])):
        out[phase] = {"seconds": round(sum(s[3] for s in got), 3), "self": lines(got, 1), "mhaaudit": lines(got, 2)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the JSON summary")
    ap.add_argument("--interval", type=float, default=0.005, help="seconds between samples (default 0.005)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- and mhaaudit's arguments")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    sampler = Sampler(threading.get_ident(), args.interval).start()
    code = 0
    try:
        from mhaaudit.__main__ import entry

        watch_commands()

        entry(command)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sampler.stop()
        result = {
            "command": command,
            "exit": code,
            "interval_s": args.interval,
            "wall_s": round(sampler.stopped - sampler.started, 3),
            "samples": len(sampler.samples),
            "phases": summary(sampler.samples),
        }
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
