"""Data-parallel runs under ``torchrun`` or ``accelerate launch``: N processes, one audit.

A process started without ``WORLD_SIZE`` above 1 runs as one process: :func:`session` returns None
and ``torch.distributed`` is never imported. Under :func:`run_cli` rank 0 runs the command line and
the other ranks follow it into each :func:`shared` library call. This module only moves data; it
decides no verdict. How the work is split, gathered and stopped on a failure: the Development page
of the documentation (``docs/development.md``, "Data-parallel runs").
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import timedelta

from . import ending
from .collectives import _PREFIX, _alive
from .collectives import DEFAULT_TIMEOUT_S as DEFAULT_TIMEOUT_S
from .collectives import MAX_TIMEOUT_S as MAX_TIMEOUT_S
from .collectives import TIMEOUT_ENV as TIMEOUT_ENV
from .collectives import RankCrashed as RankCrashed
from .collectives import RankFailed as RankFailed
from .collectives import Session as Session
from .collectives import SingleProcess as SingleProcess
from .collectives import timeout_s as timeout_s
from .errors import InputError, MhaauditError, one_line, users_to_fix
from .staging import remove_scratch_folders
from .stdio import command_streams, debugging, native_output_dropped, say

__all__ = [
    "RankCrashed",
    "RankFailed",
    "Session",
    "SingleProcess",
    "alone",
    "current",
    "describe",
    "following",
    "launched",
    "leave",
    "lockstep",
    "lost_rank_line",
    "run_cli",
    "session",
    "shared",
]

LEAVE_WAIT_S = 10.0  # how long rank 0 waits for the other ranks to end before it ends
LEAVE_BEFORE_WATCH_S = 0.5  # after a signal, rank 0 stops waiting this long before the watch would end it


def launched() -> bool:
    """True when ``torchrun`` (or ``accelerate launch``) started this process as one of several, or when
    ``WORLD_SIZE`` is set to something other than a number (joining the job then says so)."""
    value = os.environ.get("WORLD_SIZE", "").strip()
    try:
        return int(value or "1") > 1
    except ValueError:
        return True


def following() -> bool:
    """True in a rank of a job other than rank 0 (it follows rank 0's calls and says nothing itself)."""
    return _SESSION is not None and _SESSION.rank != 0


def _env_int(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if default is not None and not (value or "").strip():
        return default
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        said = "unset" if value is None else repr(value)
        raise InputError(
            f"WORLD_SIZE is {said}, not a number of processes; start the job with torchrun or accelerate launch"
            if name == "WORLD_SIZE"
            else f"launched with WORLD_SIZE = {os.environ.get('WORLD_SIZE')} but {name} is {said}; start the job "
            "with torchrun or accelerate launch"
        ) from None


def _a_rank_of_the_job() -> bool:
    """True when ``RANK`` names a rank of the job (0 to ``WORLD_SIZE`` - 1): when it does not, no rank 0 will say
    what went wrong with this process."""
    try:
        return 0 <= int(os.environ.get("RANK", "")) < int(os.environ.get("WORLD_SIZE", ""))
    except ValueError:
        return False


_ONE_PROCESS = SingleProcess()


def current() -> Session | SingleProcess:
    """The session the work of this process goes through: the :class:`Session` of a launched job
    (joined on first use), else the :class:`SingleProcess` one."""
    s = session()
    return _ONE_PROCESS if s is None or s.solo else s


@contextlib.contextmanager
def alone() -> Iterator[None]:
    """Within, this rank works as one process: :func:`current` and :func:`lockstep` give the
    :class:`SingleProcess` session, so it reads its own data and deals, gathers and agrees on
    nothing with the other ranks (several seeds spread over the ranks, one whole seed per rank:
    :func:`mhaaudit.seeds.over_seeds`). Nothing changes in one process."""
    s = _SESSION
    if s is None:
        yield
        return
    was, s.solo = s.solo, True
    try:
        yield
    finally:
        s.solo = was


def lost_rank_line() -> str | None:
    """Under a job, the one line naming the rank that failed or is gone, else None: what rank 0
    says when the launcher ends it (torchrun sends SIGTERM to the other processes once one has
    died) before a collective has told it."""
    s = _SESSION
    if s is None or s.store is None:
        return None
    with contextlib.suppress(Exception):
        gone = s._dead_ranks()  # before the notes: a rank leaves its note before it ends
        notes = s._notes()
        failed = {r: note for r, note in notes.items() if note[0] in (2, 3)}  # not a rank a signal ended as well
        if failed:
            r = min(failed)
            return f"rank {r} of {s.world_size} failed: {failed[r][1]}"
        dead = [r for r in gone if r not in notes]
        if dead:
            return (
                f"rank {', '.join(map(str, dead))} of {s.world_size} stopped without reporting an error "
                "(killed, or out of memory); the job is ended"
            )
    return None


def leave(code: int):
    """End this process of a launched job with ``code``, its output flushed, without the
    interpreter's teardown: there a process can abort ("terminate called without an active
    exception": a C++ thread of the process group destroyed while joinable), which would turn a
    finished job into a crashed one. The other ranks say they are leaving; rank 0, whose process
    holds the job's store, leaves last (after them, or after ``LEAVE_WAIT_S``; after a signal, before
    the watch of :mod:`mhaaudit.ending` would end it), so that no rank meets a closed store and logs
    about it. The process's scratch folders are removed first (its exit hooks, which would remove
    them, do not run)."""
    with contextlib.suppress(Exception):  # the end comes whatever a removal meets
        remove_scratch_folders()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # closed, or a full disk: nothing more to say
            stream.flush()
    s = _SESSION
    if s is not None:
        with contextlib.suppress(Exception):
            if s.rank != 0:
                s.store.set(f"{_PREFIX}left/{s.rank}", "1")
            else:
                here, deadline = socket.gethostname(), time.monotonic() + LEAVE_WAIT_S
                watch_ends = ending.deadline()  # after a signal: leave with this status before the watch ends it
                if watch_ends is not None:
                    deadline = min(deadline, watch_ends - LEAVE_BEFORE_WATCH_S)
                pending = set(range(1, s.world_size))
                while pending and time.monotonic() < deadline:
                    dead = set(s._dead_ranks())
                    for r in sorted(pending):
                        if r in dead:
                            pending.discard(r)
                        elif s.store.check([f"{_PREFIX}left/{r}"]):
                            host, _, pid = s.store.get(f"{_PREFIX}proc/{r}").decode().partition("\t")
                            if host != here or not _alive(int(pid)):
                                pending.discard(r)
                    if pending:
                        time.sleep(0.05)
    os._exit(code if isinstance(code, int) else 1)


_SESSION: Session | None = None


def session() -> Session | None:
    """This process's :class:`Session`, joining the job on first use; None when not launched."""
    global _SESSION
    if _SESSION is None and launched():
        _SESSION = _start()
    return _SESSION


def lockstep() -> Session | SingleProcess:
    """The session when this rank is inside a :func:`shared` call, which every rank makes together
    (so work may be divided among them); otherwise the :class:`SingleProcess` one (all work here)."""
    s = _SESSION
    return s if s is not None and s.depth > 0 and not s.solo else _ONE_PROCESS


def describe() -> dict:
    """``{"distributed": {"world_size": N, "backend": ...}}`` for a run's ``meta``; ``{}`` in one process."""
    s = session()
    return {"distributed": s.describe()} if s is not None else {}


def _start() -> Session:
    """Join the job from the torchrun environment: rendezvous, process group, device, registry.

    Raises:
        InputError: when ``RANK`` or ``WORLD_SIZE`` is unset or not an integer, ``RANK`` is not from 0 to
            ``WORLD_SIZE`` - 1, ``LOCAL_RANK`` is set to something other than an integer or is negative, or the
            timeout is refused.
        RankFailed: when the rendezvous or the process group cannot be made.
    """
    rank, world, local = _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK", default=0)
    if not 0 <= rank < world or local < 0:
        which = f"RANK is {rank}" if not 0 <= rank < world else f"LOCAL_RANK is {local}"
        raise InputError(
            f"launched with WORLD_SIZE = {world} but {which}: ranks run from 0 to WORLD_SIZE - 1 (local ranks from "
            "0); start the job with torchrun or accelerate launch"
        )
    timeout = timedelta(seconds=timeout_s())

    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available() and torch.cuda.device_count() > 0
    if cuda:
        torch.cuda.set_device(local % torch.cuda.device_count())
    store, group = None, None
    if dist.is_initialized():  # the caller's own group (e.g. accelerate's): a gloo group beside it for our objects
        with contextlib.suppress(Exception):
            store = dist.distributed_c10d._get_default_store()
        backend = str(dist.get_backend())
        group = None if "gloo" in backend else dist.new_group(backend="gloo", timeout=timeout)
    else:
        backend = "cpu:gloo,cuda:nccl" if cuda else "gloo"
        try:
            with native_output_dropped():  # c10d logs each retry on stderr: the line below says what went wrong
                store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
                store.set_timeout(timeout)
                dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
        except (RuntimeError, ValueError) as exc:
            where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
            raise RankFailed(
                f"cannot join the distributed job at {where} as rank {rank} of {world}: "
                f"{one_line(exc, 200, first_line=True)}"
            ) from None
    s = Session(rank=rank, world_size=world, local_rank=local, backend=backend, group=group, store=store)
    if store is not None:  # (no store: nothing to record)
        with contextlib.suppress(Exception):
            store.set(f"{_PREFIX}proc/{rank}", f"{socket.gethostname()}\t{os.getpid()}")
    return s


def shared(fn: Callable) -> Callable:
    """Mark a library entry point (``audit``, ``capacity_audit``, ``capture_features``) whose work
    every rank of a job shares.

    One process: a plain call. Under torchrun, every rank must make the call: either each rank
    calls it itself (a user's script run by torchrun), or, under :func:`run_cli`, rank 0 makes it
    and the others, which follow rank 0, receive it with its arguments and make it too. A failure
    on a rank leaves its note for the others; on success all ranks agree they finished before any
    returns, so a rank that fails late stops the job before rank 0 writes a file.
    """
    key = f"{fn.__module__}:{fn.__qualname__}"

    @functools.wraps(fn)
    def call(*args, **kwargs):
        s = session()
        if s is None or s.depth:  # one process, or inside a shared call already
            return fn(*args, **kwargs)
        if s.leading:
            s.send(("call", key, tuple(_on_cpu(a) for a in args), _portable(kwargs)))
        s.depth += 1
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            s.note(exc)
            raise
        finally:
            s.depth -= 1
        s.all_gather(True)
        return result

    return call


def _portable(kwargs: dict) -> dict:
    """Arguments for the ranks that follow rank 0: no callbacks (they belong to rank 0's screen),
    no progress bars (neither the ``progress`` keyword nor a request object's, such as the
    Settings'), tensors on the CPU (each rank moves them to its own device)."""
    out = {k: (None if callable(v) else _without_progress(_on_cpu(v))) for k, v in kwargs.items()}
    if isinstance(out.get("progress"), bool):
        out["progress"] = False
    settings = out.get("settings")
    if settings is not None and getattr(settings, "progress", False):  # a Settings object: its bars too
        out["settings"] = dataclasses.replace(settings, progress=False)
    return out


def _without_progress(value):
    """A frozen request object (a dataclass instance with ``progress``) with its bars off; anything else as is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and getattr(value, "progress", False) is True:
        return dataclasses.replace(value, progress=False)
    return value


def _on_cpu(value):
    import torch

    return value.detach().cpu() if isinstance(value, torch.Tensor) else value


def _shared_call(key: str) -> Callable:
    """The :func:`shared` function named ``module:name`` (its module imported when not yet).

    Raises:
        RankFailed: when ``key`` names a module outside mhaaudit.
    """
    module, _, name = key.partition(":")
    if not module.startswith("mhaaudit."):
        raise RankFailed(f"rank 0 asked for {key!r}, which is not an mhaaudit function")
    return getattr(importlib.import_module(module), name)


def _follow(s: Session) -> int:
    """The loop of a rank other than 0 under :func:`run_cli`: make each shared call rank 0 makes,
    until rank 0 says it is done, with its status (0, 1 where ``--fail-on`` failed, 2 where rank 0 refused
    something outside a shared call). Between them it waits as long as rank 0 works alone (``memorize``, which
    shares no call, for its whole run): no timeout applies (:meth:`Session.receive`). A failure ends the loop
    (exit 2, or 3 for a bug)."""
    while True:
        try:
            msg = s.receive()
        except RankFailed:  # rank 0 is gone: it has said why
            return 2
        if msg[0] == "done":
            code = msg[1] if len(msg) > 1 else None
            return code if isinstance(code, int) and not isinstance(code, bool) and 0 <= code <= 255 else 2
        _, key, args, kwargs = msg
        try:
            _shared_call(key)(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a follower's failure is its status; rank 0 says why
            if debugging():
                traceback.print_exception(exc, file=sys.stderr)  # asked for: the status is the same
            return 2 if users_to_fix(exc) else 3


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """The command line as one rank of a job: rank 0 runs ``main``; the others follow its shared
    calls and never parse, print or write anything.

    A failure on another rank reaches rank 0 as one error line of its own (exit 2, or 3 for a
    bug); set ``MHAAUDIT_DEBUG=1`` to see every rank's output and tracebacks. On every rank,
    what native libraries write to file descriptor 1 (NCCL, CUDA) goes to stderr
    (:func:`mhaaudit.stdio.command_streams`).
    """
    with command_streams():
        return _run_rank(main, argv)


def _note_the_signal(signum: int) -> int:
    """A rank other than 0 that signal ``signum`` ends leaves the note that it did, which tells rank 0 (where the
    signal did not reach it too) why this rank left: not that it "stopped without reporting an error". Its status."""
    code = 128 + signum
    s = _SESSION
    if s is not None and s.rank != 0:
        s.note(code=code, line=f"ended by {signal.Signals(signum).name}")
    return code


def _run_rank(main: Callable[[list[str] | None], int], argv: list[str] | None) -> int:
    try:
        s = session()
    except MhaauditError as exc:
        # a process that could not join says why itself (no job relays it); a bad environment, which every rank
        # shares, is said by rank 0, or by a rank whose RANK names no rank of the job (no rank 0 would)
        if isinstance(exc, RankFailed) or os.environ.get("RANK", "0") == "0" or not _a_rank_of_the_job():
            say(f"Error: {one_line(exc)}")
        return 2
    if s is None:
        return main(argv)
    if s.rank == 0:
        s.leading = True
        code: int | None = None  # stays None where main raises: the others end with 2
        try:
            code = main(argv)
        finally:
            if not (s.peer_failed or s.noted):  # else the others are mid-call: they meet the closed connection
                with contextlib.suppress(Exception):
                    s.send(("done", code))
    else:
        with open(os.devnull, "w") as devnull, contextlib.ExitStack() as stack:
            if not debugging():
                stack.enter_context(contextlib.redirect_stdout(devnull))
                stack.enter_context(contextlib.redirect_stderr(devnull))
            ending.before_end(_note_the_signal)  # where no exception unwinds the run, the watch ends it
            try:
                code = _follow(s)
            except BaseException:
                signum = ending.noted()
                if signum is None:  # not a signal's exception (Ctrl-C, SIGTERM, SIGHUP under the command line)
                    raise
                # ended by the signal, quietly: rank 0, signalled too as a rule, says its line
                code = _note_the_signal(signum)
                ending.settle(code, said=True)
    sys.stdout.flush()
    sys.stderr.flush()
    if code in (0, 1):
        import torch.distributed as dist

        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    return code
