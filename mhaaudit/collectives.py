"""The collectives of a job: :class:`Session`, one rank's place in a launched job and the
collectives mhaaudit uses, and :class:`SingleProcess`, a job of one with the same interface.

How a job is launched and joined, and how the ranks share a call, is :mod:`mhaaudit.distributed`,
which re-exports these names. torch is imported where it is used.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import re
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .errors import InputError, Message, MhaauditError, one_line, path_problem

TIMEOUT_ENV = "MHAAUDIT_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week: the longest collective timeout accepted
_PREFIX = "mhaaudit/"


class RankFailed(MhaauditError):
    """Another process of the job failed with a user error, or stopped (killed): exit 2."""


class RankCrashed(RuntimeError):
    """Another process of the job hit an internal error (a bug): exit 3."""


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
    sent: int = 0  # what rank 0 has sent the others (send), or this rank received (receive)
    calls: int = 0  # collectives entered (every rank enters the same ones: _arrive counts them)

    # ------------------------------------------------------------------ collectives

    def _call(self, fn: Callable, *args, **kwargs):
        self._arrive()
        try:
            return fn(*args, group=self.group, **kwargs)
        except RuntimeError as exc:  # gloo: connection closed by peer, or timed out
            raise self._lost(exc) from None

    def _arrive(self) -> None:
        """Return once every rank has come to this collective: each counts itself in the job's store and waits
        there, reading the others' failure notes as it waits. A rank that failed before the collective (rank 0
        too, whose process holds the store and leaves last) is then heard at once, and no rank waits inside a
        collective that a failed rank will never join, until that rank's process ends.

        Raises:
            RankFailed: when another rank failed on bad input, its process is gone, or the others have not come
                within the collective timeout (:func:`timeout_s`).
            RankCrashed: when another rank failed on a bug.
        """
        if self.store is None:
            return
        self.calls += 1
        key = f"{_PREFIX}arrived/{self.calls}"
        if self._store_call(self.store.add, key, 1) >= self.world_size:
            return
        limit = timeout_s()
        self._poll(lambda: self._store_call(self.store.add, key, 0) >= self.world_size, 0.0005, 0.05, limit)

    def _poll(self, ready: Callable[[], bool], pause: float, longest: float, limit: float | None = None) -> None:
        """Return once ``ready()`` (a read of the job's store) is true, asking it again after ``pause`` seconds,
        doubled each time up to ``longest``; the other ranks' failure notes and processes are read at the first wait,
        then every 0.2 s.

        Raises:
            RankFailed: when another rank failed on bad input, or its process is gone; when ``limit`` seconds (the
                collective timeout) pass first.
            RankCrashed: when another rank failed on a bug.
        """
        start, looked = time.monotonic(), float("-inf")  # read at once, then every 0.2 s
        while not ready():
            now = time.monotonic()
            if now - looked >= 0.2:
                if self._notes() or self._dead_ranks():
                    raise self._lost(None)
                looked = now
            if limit is not None and now - start > limit:
                raise self._lost(RuntimeError(f"timed out after {limit:g} s at collective {self.calls}"))
            time.sleep(pause)
            pause = min(2 * pause, longest)

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

    def send(self, obj) -> None:
        """Rank 0's ``obj`` to every other rank, which waits for it in :meth:`receive`: it is announced in the
        job's store, then broadcast."""
        self.sent += 1
        self._store_call(self.store.set, f"{_PREFIX}sent/{self.sent}", "1")
        self.broadcast(obj)

    def receive(self):
        """The next object rank 0 sends (:meth:`send`), however long rank 0 works before it sends it: this rank
        polls the job's store until it is announced (no collective, so no timeout), then joins its broadcast.

        Raises:
            RankFailed: when another rank failed on bad input, or its process (or the job's store) is gone.
            RankCrashed: when another rank failed on a bug.
        """
        self.sent += 1
        key = [f"{_PREFIX}sent/{self.sent}"]
        self._poll(lambda: self._store_call(self.store.check, key), 0.005, 0.2)
        return self.broadcast(None)

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
        self._poll(lambda: self._store_call(self.store.check, everyone), 0.2, 0.2)

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
        text: str | None = line
        if exc is not None:
            if isinstance(exc, MhaauditError):
                code, text = 2, _one_line_message(exc.message, 400)
            elif (about_path := path_problem(exc)) is not None:  # a path the system will not let this rank open
                code, text = 2, about_path
            else:
                code, text = 3, f"{type(exc).__name__}: {one_line(exc, 400)}"
        self.noted = True
        parts = text.to_json() if isinstance(text, Message) else [text or ""]
        with contextlib.suppress(Exception):  # the message's parts, so that rank 0 names the parameters its way
            self.store.set(f"{_PREFIX}failed/{self.rank}", f"{code}\t{json.dumps(parts)}")

    def _notes(self) -> dict[int, tuple[int, Message]]:
        out = {}
        for r in range(self.world_size):
            key = f"{_PREFIX}failed/{r}"
            with contextlib.suppress(Exception):
                if r != self.rank and self.store.check([key]):
                    code, _, line = self.store.get(key).decode().partition("\t")
                    out[r] = (int(code), Message.from_json(json.loads(line)))
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
            msg = f"rank {r} of {self.world_size} failed: " + line
            return RankCrashed(msg) if code == 3 else RankFailed(msg)  # 2, or a signal's status
        detail = one_line(exc, 200, first_line=True) if exc is not None else "no detail"
        if "timed out" in detail.lower() or "timeout" in detail.lower():
            waited = RankFailed(
                f"no answer from the other processes within {timeout_s():g} s ({TIMEOUT_ENV}); the job is "
                f"ended ({detail})"
            )
            # this rank ends over it: the others (rank 0, which says why) read that it waited, not that it died
            if not self.noted and self.store is not None:
                with contextlib.suppress(Exception):
                    self.store.set(f"{_PREFIX}failed/{self.rank}", f"2\t{json.dumps([str(waited)])}")
                    self.noted = True
            return waited
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

    def send(self, obj) -> None:
        """Nothing to send: no other rank follows."""

    def receive(self):
        """Only a rank other than 0 receives, and a job of one has none.

        Raises:
            LookupError: always.
        """
        raise LookupError("nothing is sent to receive in a single process")

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


def _one_line_message(message: str, limit: int) -> str:
    """``message`` on one line (white space folded, ends stripped), its parameters kept; a message
    longer than ``limit`` or not a :class:`~mhaaudit.errors.Message` as :func:`one_line` gives it."""
    if not isinstance(message, Message) or not message.strip() or len(" ".join(message.split())) > limit:
        return one_line(Exception(message), limit)
    parts = [re.sub(r"\s+", " ", p) if isinstance(p, str) else p for p in message.parts]
    if isinstance(parts[0], str):
        parts[0] = parts[0].lstrip()
    if isinstance(parts[-1], str):
        parts[-1] = parts[-1].rstrip()
    return Message(*parts)


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
