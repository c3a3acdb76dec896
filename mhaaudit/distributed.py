"""Data-parallel runs under ``torchrun`` or ``accelerate launch``: N processes, one audit.

Launching
---------
``torchrun --nproc-per-node N -m mhaaudit check MODEL ...`` (also ``accelerate launch -m
mhaaudit ...``, and several nodes with ``torchrun --nnodes M --rdzv-endpoint HOST:PORT``) starts N
processes with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set.
A process started without ``WORLD_SIZE`` above 1 runs as one process, exactly as before:
:func:`session` returns None and ``torch.distributed`` is never imported.

The process group is gloo on the CPU; with CUDA it is ``cpu:gloo,cuda:nccl`` and each process
takes ``cuda:LOCAL_RANK`` as its device. Every message mhaaudit sends is a small CPU object (raw
batches, reduced rows, counts), so gloo carries them all. Collectives time out after
``MHAAUDIT_DIST_TIMEOUT`` seconds (default 300, not torch's 30 minutes).

Who runs what
-------------
Under :func:`run_cli` (``python -m mhaaudit``) rank 0 runs the command line; the other ranks
never parse, print or write: they follow rank 0, making each :func:`shared` library call
(``audit``, ``capacity_audit``, ``capture_features``, ``subset_test``, ``kruskal_sweep``) that
rank 0 makes, with its arguments. A user's own script run by torchrun instead makes those calls
on every rank itself. Either way only rank 0's command line prints and writes, and the JSON
``meta`` of ``check`` and ``capacity`` names the world size and backend (:func:`describe`); work
outside the shared calls runs on rank 0 alone.

What is split and what is gathered
----------------------------------
- Rank 0 alone reads the data source, so it alone fixes the examples (unreadable and non-RGB
  items skipped, ``--limit`` applied) and the batches, exactly as one process would; it deals
  batch b to rank b mod N (:meth:`Session.deal`). Reading and decoding stay on rank 0.
- Several seeds (``--seeds``) with at least one seed per rank are spread over the ranks instead:
  rank r runs the seeds r, r + N, ... whole, as one process (:func:`alone`: it reads the data
  itself), and the per-seed results are gathered into seed order on rank 0; the other ranks
  receive them without their feature sets (:func:`mhaaudit.seeds.over_seeds`).
- Each rank loads the model itself (the same seed gives the same random weights), prepares and
  runs the batches dealt to it and reduces them: each batch is computed whole, by one process, as
  one process computes it.
- The reduced rows (query and Assumption 3 vectors, per-example context statistics, rows of Z)
  are all-gathered back into single-process order (:meth:`Session.gather_rows`): every rank then
  holds exactly the arrays one process would hold. Exact duplicate images are found from input
  keys the ranks exchange each round, in batch order, so the same ones are dropped.
- The Monte-Carlo draws of every test and sweep come in seeded blocks; inside a shared call
  (:func:`lockstep`) rank r decides groups of blocks r, r + N, ... and each round's results are
  gathered (``kruskal.sampling.blocks_in_order``), so counts, histograms, witnesses and the block
  where a test stops early are those of one process.

Nothing here decides a verdict: this module only moves data. Under the same seed, data, batch
size and thread settings the records equal a single-process run's (``torchrun`` sets
``OMP_NUM_THREADS=1`` when it is unset: give the single process the same to compare).

Failures
--------
A rank that fails leaves a one-line note in the job's key-value store and exits; the others meet
the closed connection at their next collective (gloo notices at once), read the note, and raise
:class:`RankFailed` (the failing rank's error was a user error: exit 2) or :class:`RankCrashed`
(a bug: exit 3). A rank killed outright leaves no note; the others say which rank stopped when it
ran on their host. Each shared call ends with an agreement of all ranks, so a rank that fails
late still stops the job before rank 0 writes any file.

torch is imported where it is used: ``python -m mhaaudit`` imports this module before it knows the
command, and ``mhaaudit --help`` answers without torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import io
import os
import pickle
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .errors import InputError, MhaauditError, current_names, one_line, param, parameter_names
from .stdio import command_streams, say

__all__ = [
    "RankCrashed",
    "RankFailed",
    "Session",
    "SingleProcess",
    "alone",
    "current",
    "describe",
    "launched",
    "leave",
    "lockstep",
    "lost_rank_line",
    "run_cli",
    "session",
    "shared",
]

TIMEOUT_ENV = "MHAAUDIT_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week: the longest collective timeout accepted
_PREFIX = "mhaaudit/"
LEAVE_WAIT_S = 10.0  # how long rank 0 waits for the other ranks to end before it ends


class RankFailed(MhaauditError):
    """Another process of the job failed with a user error, or stopped (killed): exit 2."""


class RankCrashed(RuntimeError):
    """Another process of the job hit an internal error (a bug): exit 3."""


def launched() -> bool:
    """True when ``torchrun`` (or ``accelerate launch``) started this process as one of several."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def _env_int(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if default is not None and not (value or "").strip():
        return default
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(
            f"launched with WORLD_SIZE = {os.environ.get('WORLD_SIZE')} but {name} is "
            f"{'unset' if value is None else repr(value)}; start the job with torchrun or accelerate launch"
        ) from None


def timeout_s() -> float:
    """The collective timeout in seconds: ``MHAAUDIT_DIST_TIMEOUT``, else 300.

    Raises:
        InputError: when ``MHAAUDIT_DIST_TIMEOUT`` is set to something other than a positive number of
            seconds up to :data:`MAX_TIMEOUT_S` (a week).
    """
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= MAX_TIMEOUT_S:  # also refuses nan and inf
        raise InputError(f"{TIMEOUT_ENV}={raw!r}: give a positive number of seconds, at most {MAX_TIMEOUT_S:g}")
    return value


@dataclass
class Session:
    """This process's place in the job and the collectives mhaaudit uses."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    group: Any = field(default=None, repr=False)  # the process group mhaaudit's collectives use
    store: Any = field(default=None, repr=False)  # the job's key-value store (failure notes, published values)
    leading: bool = False  # rank 0 under run_cli: its shared calls are sent to the other ranks
    depth: int = 0  # shared calls under way on this rank
    noted: bool = False  # this rank has left its failure note
    peer_failed: bool = False  # a collective found another rank gone
    solo: bool = False  # inside alone(): this rank works as one process (current() and lockstep() say so)
    waits: int = 0  # wait_for_all calls made (every rank makes the same ones)

    # ------------------------------------------------------------------ collectives

    def _call(self, fn: Callable, *args, **kwargs):
        try:
            return fn(*args, group=self.group, **kwargs)
        except RuntimeError as exc:  # gloo: connection closed by peer, or timed out
            raise self._lost(exc) from None

    def all_gather(self, obj) -> list:
        """Every rank's ``obj``, by rank."""
        import torch.distributed as dist

        out: list = [None] * self.world_size
        self._call(dist.all_gather_object, out, obj)
        return out

    def all_gather_tensors(self, obj) -> list:
        """Every rank's ``obj`` (anything ``torch.save`` writes: tensors inside tuples, lists,
        dataclasses), by rank, with each tensor on this rank's device of its kind (a CUDA tensor
        of another rank lands on this rank's GPU)."""
        return [_loaded(b) for b in self.all_gather(_saved(obj))]

    def gather_tensors(self, obj) -> list | None:
        """Every rank's ``obj``, by rank, on rank 0 only (its own ``obj`` itself, the others' as
        :meth:`all_gather_tensors` gives them); None on the other ranks, which receive nothing."""
        import torch.distributed as dist

        out: list | None = [None] * self.world_size if self.rank == 0 else None
        # rank 0 keeps its own obj: it sends only a placeholder, not a serialised copy it would discard
        self._call(dist.gather_object, _saved(obj) if self.rank else b"", out, dst=0)
        return None if out is None else [obj if r == self.rank else _loaded(b) for r, b in enumerate(out)]

    def broadcast(self, obj):
        """Rank 0's ``obj`` on every rank."""
        import torch.distributed as dist

        box = [obj if self.rank == 0 else None]
        self._call(dist.broadcast_object_list, box, src=0)
        return box[0]

    def same(self, value, what: str) -> None:
        """Refuse to go on when the ranks disagree about ``value`` (e.g. one node lacks the weights).

        Raises:
            RankFailed: when a rank's ``value`` differs from rank 0's (the message names ``what`` and both values),
                or another rank is gone (:class:`RankCrashed` where it ended with a bug).
        """
        values = self.all_gather(value)
        odd = [r for r, v in enumerate(values) if v != values[0]]
        if odd:
            raise RankFailed(
                f"the {self.world_size} processes disagree about {what}: rank 0 has {values[0]!r}, "
                f"rank {odd[0]} has {values[odd[0]]!r}; give every node the same files"
            )

    def deal(self, batches: Iterable | None) -> Iterator[tuple[int | None, Any]]:
        """This rank's ``(batch index, batch)`` of the batches rank 0 reads: batch b goes to rank b mod N.

        Rank 0 passes the batches; the other ranks pass None. One round deals N batches and each
        rank yields one item per round, ``(None, None)`` when the round has no batch for it, so
        every rank takes the same number of turns (and can take part in a per-round exchange).
        """
        import torch.distributed as dist

        source = iter(batches) if self.rank == 0 and batches is not None else None
        start = 0
        while True:
            msgs = None
            if source is not None:
                try:
                    items = [(start + i, b) for i, b in zip(range(self.world_size), source, strict=False)]
                except Exception as exc:  # the source failed on rank 0: tell the others, then raise here
                    self.note(exc)
                    self._scatter(dist, [("failed", None)] * self.world_size)
                    raise
                last = len(items) < self.world_size
                msgs = [(items[r] if r < len(items) else None, last) for r in range(self.world_size)]
            mine, last = self._scatter(dist, msgs)
            if mine == "failed":
                raise self._lost(None)
            yield mine if mine is not None else (None, None)
            if last:
                return
            start += self.world_size

    def _scatter(self, dist, msgs):
        box = [None]
        self._call(dist.scatter_object_list, box, msgs, src=0)
        return box[0]

    def gather_rows(
        self, rows: dict | None, header, fed: list[tuple[int, int]], parts: list[list[tuple[int, int]]]
    ) -> tuple[dict | None, Any]:
        """Row-stacked results of every rank, back in single-process order, on every rank.

        ``rows``: name -> tensor whose rows are this rank's batches ``fed`` ((index, size) in the
        order fed) stacked; None when this rank had no batch. ``parts``: every rank's ``fed``.
        ``header``: what describes the rows (shapes, dtype); the first rank with rows gives it.
        """
        import torch

        gathered = self.all_gather(({k: v.contiguous() for k, v in rows.items()}, header) if rows else None)
        chunks: list[tuple[int, dict]] = []
        for got, fed_r in zip(gathered, parts, strict=False):
            if not got or not fed_r:
                continue
            split = {k: torch.split(v, [s for _, s in fed_r]) for k, v in got[0].items()}
            chunks.extend((b, {k: split[k][i] for k in split}) for i, (b, _) in enumerate(fed_r))
        if not chunks:
            return None, header
        chunks.sort(key=lambda c: c[0])
        first = next(got[1] for got in gathered if got)
        return {k: torch.cat([c[k] for _, c in chunks]) for k in chunks[0][1]}, first

    def wait_for_all(self, what: str) -> None:
        """Return once every rank has reached this call, however long the others take: a rank that
        arrives early polls the job's store (no collective, so no timeout), and stops with the
        others' failure when one leaves a note or its process is gone.

        Raises:
            RankFailed: when another rank failed on bad input, or its process is gone.
            RankCrashed: when another rank failed on a bug.
        """
        self.waits += 1
        key = f"{_PREFIX}reached/{what}/{self.waits}/"
        self._store_call(self.store.set, key + str(self.rank), "1")
        everyone = [key + str(r) for r in range(self.world_size)]
        while not self._store_call(self.store.check, everyone):
            if self._notes() or self._dead_ranks():
                raise self._lost(None)
            time.sleep(0.2)

    # ------------------------------------------------------------------ values through the store

    def publish(self, key: str, obj) -> None:
        """Make ``obj`` readable by every rank under ``key`` (no collective: no rank waits)."""
        self._store_call(self.store.set, _PREFIX + "value/" + key, pickle.dumps(obj))

    def fetch(self, key: str):
        """The object published under ``key``, waiting for it up to the timeout."""
        return pickle.loads(self._store_call(self.store.get, _PREFIX + "value/" + key))

    def _store_call(self, fn, *args):
        if self.store is None:
            raise RankFailed("the job's key-value store is not available to mhaaudit")
        try:
            return fn(*args)
        except RuntimeError as exc:
            raise self._lost(exc) from None

    # ------------------------------------------------------------------ failures

    def note(self, exc: BaseException | None = None, *, code: int | None = None, line: str | None = None) -> None:
        """Leave this rank's failure (one line and exit code) where the other ranks will read it."""
        if self.noted or self.peer_failed or isinstance(exc, (RankFailed, RankCrashed)) or self.store is None:
            return
        if exc is not None:
            if isinstance(exc, MhaauditError):
                code, line = 2, one_line(Exception(exc.message_for(param)), 400)
            else:
                code, line = 3, f"{type(exc).__name__}: {one_line(exc, 400)}"
        self.noted = True
        with contextlib.suppress(Exception):
            self.store.set(f"{_PREFIX}failed/{self.rank}", f"{code}\t{line}")

    def _notes(self) -> dict[int, tuple[int, str]]:
        out = {}
        for r in range(self.world_size):
            key = f"{_PREFIX}failed/{r}"
            with contextlib.suppress(Exception):
                if r != self.rank and self.store.check([key]):
                    code, _, line = self.store.get(key).decode().partition("\t")
                    out[r] = (int(code), line)
        return out

    def _lost(self, exc: BaseException | None) -> Exception:
        """The error this rank raises when a collective finds another rank gone."""
        self.peer_failed = True
        notes: dict = {}
        for _ in range(10):  # a rank leaves its note before it exits and its connections close
            notes = self._notes() if self.store is not None else {}
            if notes:
                break
            time.sleep(0.1)
        if notes:
            r = min(notes)
            code, line = notes[r]
            msg = f"rank {r} of {self.world_size} failed: {line}"
            return RankFailed(msg) if code == 2 else RankCrashed(msg)
        detail = one_line(exc, 200, first_line=True) if exc is not None else "no detail"
        if "timed out" in detail.lower() or "timeout" in detail.lower():
            return RankFailed(
                f"no answer from the other processes within {timeout_s():g} s ({TIMEOUT_ENV}); the job is "
                f"ended ({detail})"
            )
        dead = self._dead_ranks()
        who = f"rank {', '.join(map(str, dead))} of {self.world_size}" if dead else "a process of the job"
        return RankFailed(f"{who} stopped without reporting an error (killed, or out of memory); the job is ended")

    def _dead_ranks(self) -> list[int]:
        """Ranks on this host whose process is gone (or a zombie), from the registry kept at start."""
        here, dead = socket.gethostname(), []
        for r in range(self.world_size):
            with contextlib.suppress(Exception):
                key = f"{_PREFIX}proc/{r}"
                if r == self.rank or not self.store.check([key]):
                    continue
                host, _, pid = self.store.get(key).decode().partition("\t")
                if host == here and not _alive(int(pid)):
                    dead.append(r)
        return dead

    def describe(self) -> dict:
        """``{"world_size": N, "backend": ...}`` for a run's meta."""
        return {"world_size": self.world_size, "backend": self.backend}


def _saved(obj) -> bytes:
    """``obj`` as ``torch.save`` writes it (what the tensor gathers send)."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _loaded(data: bytes):
    """What :func:`_saved` wrote, with each tensor on this rank's device of its kind."""
    import torch

    def here(storage, location: str):
        return storage.cuda() if location.startswith("cuda") else storage

    return torch.load(io.BytesIO(data), map_location=here, weights_only=False)


@dataclass
class SingleProcess:
    """One process as a job of one: the interface of :class:`Session`, with every collective the
    identity (the code that moves data between ranks runs unchanged, and moves nothing).

    Rank 0 of 1 reads the source and keeps every batch (:meth:`deal` numbers them); a gather returns
    the one part; a broadcast and an agreement return what they are given; no other rank reads
    what is published.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str = ""

    def all_gather(self, obj) -> list:
        """``[obj]``: this process's part is every part."""
        return [obj]

    def wait_for_all(self, what: str) -> None:
        """One process is every rank: nothing to wait for."""

    def all_gather_tensors(self, obj) -> list:
        """``[obj]``, the tensors where they are."""
        return [obj]

    def gather_tensors(self, obj) -> list:
        """``[obj]``: this process is rank 0."""
        return [obj]

    def broadcast(self, obj):
        """``obj`` itself: this process is rank 0."""
        return obj

    def same(self, value, what: str) -> None:
        """Nothing to refuse: one process agrees with itself."""

    def deal(self, batches: Iterable | None) -> Iterator[tuple[int, Any]]:
        """Every batch, numbered: ``(batch index, batch)``."""
        return enumerate(batches if batches is not None else ())

    def gather_rows(
        self, rows: dict | None, header, fed: list[tuple[int, int]], parts: list[list[tuple[int, int]]]
    ) -> tuple[dict | None, Any]:
        """``(rows, header)`` unchanged: the rows of one process are already in its order."""
        return rows, header

    def publish(self, key: str, obj) -> None:
        """Nothing to do: no other rank reads it."""

    def fetch(self, key: str):
        """Only a rank other than 0 fetches, and a job of one has none.

        Raises:
            LookupError: always, naming ``key``.
        """
        raise LookupError(f"nothing is published to fetch in a single process ({key!r})")

    def note(self, exc: BaseException | None = None, *, code: int | None = None, line: str | None = None) -> None:
        """No other rank to tell."""

    def describe(self) -> dict:
        """``{"world_size": 1, "backend": None}``."""
        return {"world_size": 1, "backend": None}


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
        notes = s._notes()
        if notes:
            r = min(notes)
            return f"rank {r} of {s.world_size} failed: {notes[r][1]}"
        dead = s._dead_ranks()
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
    holds the job's store, leaves last (after them, or after ``LEAVE_WAIT_S``), so that no rank
    meets a closed store and logs about it."""
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


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            pass
        return True


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
        InputError: when ``RANK`` or ``WORLD_SIZE`` is unset or not an integer, ``LOCAL_RANK`` is set to something
            other than an integer, or the timeout is refused.
        RankFailed: when the rendezvous or the process group cannot be made.
    """
    rank, world, local = _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK", default=0)
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
            # with how the messages name parameters (the command line's flags), so that a note or
            # reason made on another rank reads as one made on rank 0
            s.broadcast(("call", key, tuple(_on_cpu(a) for a in args), _portable(kwargs), current_names()))
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
    until rank 0 says it is done (exit 0). A failure ends the loop (exit 2, or 3 for a bug)."""
    while True:
        try:
            msg = s.broadcast(None)
        except RankFailed:  # rank 0 is gone: it has said why
            return 2
        if msg[0] == "done":
            return 0
        _, key, args, kwargs, names = msg
        try:
            with parameter_names(names) if names is not None else contextlib.nullcontext():
                _shared_call(key)(*args, **kwargs)
        except Exception as exc:
            if os.environ.get("MHAAUDIT_DEBUG", "").strip() not in ("", "0"):
                raise
            return 2 if isinstance(exc, MhaauditError) else 3


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


def _run_rank(main: Callable[[list[str] | None], int], argv: list[str] | None) -> int:
    try:
        s = session()
    except MhaauditError as exc:
        if os.environ.get("RANK", "0") == "0":
            say(f"Error: {one_line(exc)}")
        return 2
    if s is None:
        return main(argv)
    if s.rank == 0:
        s.leading = True
        try:
            code = main(argv)
        finally:
            if not (s.peer_failed or s.noted):  # else the others are mid-call: they meet the closed connection
                with contextlib.suppress(Exception):
                    s.broadcast(("done",))
    else:
        debug = os.environ.get("MHAAUDIT_DEBUG", "").strip() not in ("", "0")
        with open(os.devnull, "w") as devnull, contextlib.ExitStack() as stack:
            if not debug:
                stack.enter_context(contextlib.redirect_stdout(devnull))
                stack.enter_context(contextlib.redirect_stderr(devnull))
            code = _follow(s)
    sys.stdout.flush()
    sys.stderr.flush()
    if code in (0, 1):
        import torch.distributed as dist

        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    return code
