"""A grid of memorisation points: the grid's points and seeds, resuming from a results file, and
:func:`run_memorize_grid`, the one entry point of the experiments (its request is
:class:`~.request.MemorizeRequest`; the presets are in :mod:`.request`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from ..errors import InputError, Message, MhaauditError, Param, one_line
from ..io import read_parquet_metadata, stamp, write_parquet
from ..keywords import request_of
from ..plot import plot_memorize
from ..progress import task as progress_task
from ..runtime import device_name, resolve_device
from ..workers import worker_pool
from .data import DIM
from .fits import flat_fit_notes
from .grouping import GroupPlan, device_memory, plan_groups, refuse_too_large
from .request import PRESETS, VARY, MemorizeRequest, grid_axes, resolve_grid
from .results import (
    GridSettings,
    GroupRecord,
    MemorizeGrid,
    MemorizeRun,
    config_dict,
    config_key,
    grid_notes,
    heads_fit_gaps,
    heads_fits,
    seed_summaries,
)
from .resume import read_results, row_to_run, run_to_row, stored_run_contradiction
from .training import Cancelled, Point, intra_op_threads, train_group

__all__ = [
    "PRESETS",
    "VARY",
    "GridUnfinished",
    "MemorizeRequest",
    "grid_axes",
    "memorize_grid",
    "points",
    "resolve_grid",
    "run_memorize_grid",
]

_PARAM = {"heads": "heads", "n": "n", "head-dim": "head_dim"}


def points(grid: dict) -> list[dict]:
    """The grid's points in grid order (values of the varied parameter, then sizes)."""
    pts = []
    param = _PARAM.get(grid["vary"] or "")
    for v in grid["values"] if grid["vary"] else (None,):
        for T in grid["sizes"]:
            p = dict(grid["fixed"])
            if param is not None:
                p[param] = v
            pts.append(p | {"size": T})
    return pts


# --------------------------------------------------------------------------- the grid


def run_memorize_grid(
    request: MemorizeRequest | None = None,
    *,
    vary: str | None = None,
    values: str | Sequence[int] | None = None,
    n: int | None = None,
    heads: int | None = None,
    head_dim: int | None = None,
    sizes: str | Sequence[int] | None = None,
    preset: str | None = None,
    task: str | None = None,
    context: str | None = None,
    classes: int | None = None,
    tolerance: float | None = None,
    epochs: int | None = None,
    max_steps: int | None = None,
    lr: float | None = None,
    batch_size: int | None = None,
    check_every: int | None = None,
    seed: int | None = None,
    device: str | torch.device | None = None,
    saturation: bool | None = None,
    out: str | os.PathLike | None = None,
    plot: str | os.PathLike | None = None,
    progress: bool | None = None,
    seeds: str | Sequence[int] | None = None,
    memory_budget: float | None = None,
    max_group: int | None = None,
    max_minutes: float | None = None,
) -> MemorizeGrid:
    """Train every point of a grid: values of the varied parameter x sizes T x seeds.

    The points train in stacked groups (:mod:`.grouping`), as many as fit ``memory_budget``.
    With ``out``, points already in the file with the same full configuration are read back, not
    trained again. With ``max_minutes`` the grid runs in parts: no group starts after that time, and
    :class:`GridUnfinished` says how many points are left. The same call again goes on with them.
    A keyword left at None is not given: :class:`~.request.MemorizeRequest` and :class:`~.recipe.Recipe`
    state the defaults. See :mod:`mhaaudit.request` for a keyword given beside ``request``.

    Args:
        request: the run as a :class:`~.request.MemorizeRequest` (None: built from the keywords).
        vary: the varied parameter: ``heads``, ``n`` or ``head-dim``.
        values: the varied parameter's values (``"1,2,4,8"`` or a list of ints).
        n: the context length, when not varied.
        heads: the number of heads H, when not varied.
        head_dim: the head dimension d_h, when not varied.
        sizes: the dataset sizes T (``"500,1000"`` or a list of ints).
        preset: a named grid (``cpu``, ``paper-fig2a``, ...); explicit values override it.
        task: the task, one of :data:`~.data.TASKS` (default ``classification``).
        context: the context, one of :data:`~.data.CONTEXTS` (default ``shared``).
        classes: the number of classes (default 100; classification only, refused otherwise).
        tolerance: regression only (refused otherwise): memorised when ``|prediction - label| < tolerance`` (0.01).
        epochs: the epochs to train (None: the recipe's rule, at least 500 epochs or 50k steps).
        max_steps: the most optimisation steps to train.
        lr: Adam's learning rate (default 1e-3).
        batch_size: examples per step (default 256).
        check_every: steps between checks of the memorised fraction (default 200).
        seed: the seed of every point (default 0), through ``derive_seed(seed, "memorize")``.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        saturation: also record each example's head saturation.
        out: a parquet results file, written atomically after every group and read back when it exists.
        plot: a picture of memorisation against the varied parameter, one line per size.
        progress: show progress bars on stderr.
        seeds: train every point once per seed (``"0-5"``, ``"0,3,7"`` or a list of ints).
        memory_budget: GiB a group may use (None: 80% of free GPU memory, or half the host's).
        max_group: the most points a group stacks (1: each point alone).
        max_minutes: with ``out``, start no group after this many minutes.

    Returns:
        The :class:`~.results.MemorizeGrid`: one run per point and seed, the summary over seeds and
        the linear fits.

    Raises:
        InputError: for a bad grid (``vary`` without ``values`` or the other way round, no sizes, an
            unknown preset, task, context or device, a number out of range, ``seed`` beside ``seeds``, ``classes``
            with regression or ``tolerance`` with classification, a
            group that cannot fit ``memory_budget``), a keyword that disagrees with ``request``, or an
            existing ``out`` that is not a results file of memorize, or ``max_minutes`` without ``out``.
        OutputError: when ``out`` or ``plot`` cannot be written.
        MhaauditError: a :class:`GridUnfinished` when ``max_minutes`` ran out before every point was trained
            (those trained are in ``out``).
    """
    keywords = dict(
        vary=vary,
        values=values,
        n=n,
        heads=heads,
        head_dim=head_dim,
        sizes=sizes,
        preset=preset,
        task=task,
        context=context,
        classes=classes,
        tolerance=tolerance,
        epochs=epochs,
        max_steps=max_steps,
        lr=lr,
        batch_size=batch_size,
        check_every=check_every,
        seed=seed,
        device=device,
        saturation=saturation,
        out=out,
        plot=plot,
        progress=progress,
        seeds=seeds,
        memory_budget=memory_budget,
        max_group=max_group,
        max_minutes=max_minutes,
    )
    return memorize_grid(request_of(MemorizeRequest, request, "request", keywords))


def memorize_grid(request: MemorizeRequest) -> MemorizeGrid:
    """:func:`run_memorize_grid` of a checked request.

    Raises:
        GridUnfinished: when ``max_minutes`` ran out before every point was trained.
    """
    grid, recipe, dev = request.grid, request.recipe, resolve_device(request.device)
    seed_list = request.seed_list
    pts = [Point(**p, seed=s) for p in points(grid) for s in seed_list]
    store = _Store(Path(request.out) if request.out is not None else None, grid["preset"], request.saturation)
    keys = [config_key(config_dict(**p.__dict__, **recipe.as_dict(), device=device_name(dev))) for p in pts]
    runs: list[MemorizeRun | None] = [store.run(k) for k in keys]
    todo = [i for i, r in enumerate(runs) if r is None]
    groups = _Training(request, pts, todo, runs, store, keys).run()
    left = sum(r is None for r in runs)
    if left:
        raise GridUnfinished(
            _unfinished(request, len(runs), left, trained=len(todo) - left), left=left, total=len(runs)
        )
    done: tuple[MemorizeRun, ...] = tuple(runs)  # type: ignore[arg-type]
    varied = _PARAM.get(grid["vary"] or "")
    settings = GridSettings(
        **{k: None if k == varied else v for k, v in grid["fixed"].items()},  # the varied one: each run's own
        recipe=recipe,
        seed=seed_list[0],
        seeds=tuple(seed_list),
        device=device_name(dev),
        d=DIM,
    )
    fits = heads_fits(done, grid["sizes"]) if grid["vary"] == "heads" else ()
    result = MemorizeGrid(
        vary=grid["vary"],
        values=grid["values"],
        sizes=grid["sizes"],
        preset=grid["preset"],
        runs=done,
        fits=fits,
        fit_gaps=heads_fit_gaps(done, grid["sizes"]) if grid["vary"] == "heads" else (),
        reused=sum(r.reused for r in done),
        out=str(request.out) if request.out is not None else None,
        plot=str(request.plot) if request.plot is not None else None,
        settings=settings,
        seeds=tuple(seed_list),
        summary=seed_summaries(done),
        groups=tuple(groups),
        memory_budget=request.budget(),
        notes=grid_notes(done, fitted=grid["vary"] == "heads") + flat_fit_notes(fits),
    )
    if request.plot is not None:
        plot_memorize(result, Path(request.plot))
    return result


def _unfinished(request: MemorizeRequest, total: int, left: int, trained: int) -> Message:
    """What :class:`GridUnfinished` says: the points kept and how to go on. When no group finished in the time, the
    same command again would stop the same way: more minutes (or smaller groups) are what go on."""
    stopped = "stopped at " + Param("max_minutes") + f" {request.max_minutes:g}"
    if trained:
        return stopped + (
            f": {total - left} of {total} points are trained and kept in {request.out}; run the same command again "
            f"to train the other {left}"
        )
    have = (
        f"{total - left} of {total} points are trained (read from {request.out})"
        if total > left
        else f"none of the {total} points is trained"
    )
    smaller = "" if request.max_group == 1 else Message(" or a smaller ", Param("max_group"))
    return (
        stopped
        + f" before any group of points finished training: {have}; the same command again would stop the same way: "
        "give more " + Param("max_minutes") + smaller
    )


class GridUnfinished(MhaauditError):
    """``max_minutes`` ran out before every point of the grid was trained; ``left`` of ``total`` are
    still to train, and the points trained are in the results file, so the same call goes on."""

    def __init__(self, message: str, *, left: int, total: int):
        super().__init__(message)
        self.left, self.total = left, total


class _Training:
    """The points ``todo`` of a grid trained group by group, filling ``runs`` and the results file.

    On the CPU the groups run side by side, one per core, each on one intra-op thread; on a GPU
    one after the other. With ``max_minutes``, no group starts once the time is up, and a group
    still training then is stopped (its points stay None).
    """

    def __init__(
        self,
        request: MemorizeRequest,
        pts: list[Point],
        todo: list[int],
        runs: list,
        store: _Store,
        keys: list[str],
    ):
        self.request, self.pts, self.todo, self.runs, self.store, self.keys = request, pts, todo, runs, store, keys
        self.recipe, self.dev = request.recipe, resolve_device(request.device)
        self.totals = [pts[i].plan(self.recipe).total for i in todo]
        budget = request.budget()
        varied = _PARAM.get(request.grid["vary"] or "")  # a refusal names its values as they were given: values
        refuse_too_large(
            [pts[i] for i in todo], self.recipe, self.dev, budget, max(budget, device_memory(self.dev)), varied
        )
        self.plans = plan_groups(
            [pts[i] for i in todo],
            self.totals,
            self.recipe,
            self.dev,
            budget,
            max_points=request.max_group,
            # against a clock, groups estimated to train in half the time each, so that every part finishes some
            max_seconds=None if request.max_minutes is None else 30.0 * request.max_minutes,
        )
        self.stop = threading.Event()
        self.deadline = None if request.max_minutes is None else time.monotonic() + 60.0 * request.max_minutes

    def out_of_time(self) -> bool:
        """Whether ``max_minutes`` has run out."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def run(self) -> list[GroupRecord]:
        """Train every group; the groups' records, in plan order."""
        plans = self.plans
        records: list = [None] * len(plans)
        steps = sum(max(self.totals[k] for k in g.members) for g in plans)
        with (
            progress_task(
                f"memorize: {len(self.todo)} points in {len(plans)} groups", steps, self.request.progress
            ) as advance,
            intra_op_threads(self.dev, 1),
            worker_pool(_workers(self.dev, len(plans)), "mhaaudit-memorize") as pool,
        ):
            # The longest groups first, so that the last to finish is a short one; against a clock, the
            # shortest first, so that as many points as possible are trained in the time.
            order = sorted(range(len(plans)), key=lambda k: plans[k].work if self.deadline else -plans[k].work)
            futures = {pool.submit(self._job, plans[k], advance): k for k in order}
            # Each future puts itself in a queue when done (as_completed's own waiting takes the futures'
            # locks on the way out, where Ctrl-C may have left one taken: mhaaudit.workers).
            finished: queue.SimpleQueue = queue.SimpleQueue()
            for future in futures:
                future.add_done_callback(finished.put)
            try:
                for _ in range(len(futures)):
                    future = finished.get()
                    trained, seconds = future.result()
                    if trained is not None:  # None: the time ran out before or while it trained
                        records[futures[future]] = self._keep(plans[futures[future]], trained, seconds)
            except BaseException:
                self.stop.set()
                raise
        return records

    def _job(self, g: GroupPlan, advance) -> tuple[list[MemorizeRun] | None, float]:
        t0 = time.perf_counter()
        if self.out_of_time():
            return None, 0.0
        try:
            trained = train_group(
                [self.pts[self.todo[k]] for k in g.members],
                self.recipe,
                self.dev,
                saturation=self.request.saturation,
                advance=advance,
                eval_chunk=g.eval_chunk,
                cancelled=lambda: self.stop.is_set() or self.out_of_time(),
                cpu_threads=None,
            )
        except Cancelled:
            if self.stop.is_set():  # stopped because another group failed: that failure is raised
                raise
            return None, time.perf_counter() - t0
        return trained, time.perf_counter() - t0

    def _keep(self, g: GroupPlan, trained: list[MemorizeRun], seconds: float) -> GroupRecord:
        """Put a group's runs in place and in the results file; the group's record."""
        members = [self.todo[k] for k in g.members]
        for i, run in zip(members, trained, strict=False):
            self.runs[i] = run
        kept = self.store.add({self.keys[i]: self.runs[i] for i in members})
        for i in members:  # trained meanwhile by another run writing the same file: its row is the result
            self.runs[i] = kept.get(self.keys[i], self.runs[i])
        return GroupRecord(
            runs=tuple(members),
            heads=g.shape.heads,
            head_dim=g.shape.head_dim,
            n=g.shape.n,
            size=g.shape.size,
            bytes=g.bytes,
            seconds=seconds,
        )


def _workers(device: torch.device, groups: int) -> int:
    if device.type != "cpu":
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, groups))


class _Store:
    """The results file (when there is one): rows by configuration key, rewritten after every group.

    Its metadata describes the rows it holds (their seeds and devices), not only the last run's request.
    Another run may write the same file meanwhile: before each write the file is read again when it
    changed since this run last read or wrote it, and its rows are kept; a point both runs trained is
    the one already in the file (held to what training writes, as at the start). The folder is locked
    (``flock``) from that reading to the rename, so two mhaaudit runs never write over each other's
    points; another program writing the file in between is not.
    """

    def __init__(self, path: Path | None, preset: str | None, saturation: bool):
        self.path, self.saturation = path, saturation
        self.rows: dict[str, dict] = {}
        self.seen: tuple | None = None  # the file as this run last read or wrote it (inode, size, mtime)
        self.preset = preset
        if path is not None and os.path.lexists(path):
            self._read()  # checked to be a results file of memorize first
            if self.rows and _stored_meta(path).get("preset") != preset:
                self.preset = None  # rows of another grid (or of several): no one preset describes them

    def _read(self) -> dict[str, dict]:
        """The rows of the file now, read into ``rows`` (those it does not hold are kept); the rows read."""
        assert self.path is not None
        self.seen = _identity(self.path)
        fresh = read_results(self.path, self.meta())
        self.rows.update(fresh)
        return fresh

    def meta(self) -> dict:
        """The file's provenance stamp: the seeds and devices of its rows (one preset when all came from one)."""
        seeds = sorted({int(r["seed"]) for r in self.rows.values() if isinstance(r.get("seed"), int)})
        devices = sorted({str(r["device"]) for r in self.rows.values() if r.get("device") is not None})
        return stamp(
            command="memorize",
            seed=seeds[0] if seeds else None,
            seeds=seeds,
            device=", ".join(devices) or None,
            preset=self.preset,
        )

    def run(self, key: str) -> MemorizeRun | None:
        """The stored run of ``key``, or None when it must be (re)computed.

        Raises:
            InputError: when the stored row says what no training writes (``stored_run_contradiction``).
        """
        row = self.rows.get(key)
        if row is None or (self.saturation and row.get("sat_histogram") is None):
            return None
        run = row_to_run(row)  # read_results refused a row it cannot read back: none is trained again in silence
        wrong = stored_run_contradiction(run, key)
        if wrong is not None:  # what no training writes: the file is not what memorize wrote, so it is not read
            raise InputError(
                f"{self.path} is not a results file as memorize writes it: the row of H = {run.heads}, n = {run.n}, "
                f"d_h = {run.head_dim}, T = {run.size} says {wrong}; move it away or pick another " + Param("out")
            )
        return run

    def add(self, runs: dict[str, MemorizeRun]) -> dict[str, MemorizeRun]:
        """Write ``runs`` into the file with the rows it holds now; the runs of those keys another run wrote
        meanwhile, which the file keeps in their place.

        Raises:
            InputError: the file, changed meanwhile, is no longer a results file of memorize.
        """
        if self.path is None:
            return {}
        with _folder_lock(self.path.parent):
            before = dict(self.rows)
            fresh = self._read() if os.path.lexists(self.path) and _identity(self.path) != self.seen else {}
            theirs = {k: self.run(k) for k in runs if k in fresh and fresh[k] != before.get(k)}
            kept = {k: r for k, r in theirs.items() if r is not None}
            self.rows.update({k: run_to_row(r) for k, r in runs.items() if k not in kept})
            # Written now, not with the run's other outputs: it keeps the points done if the run stops.
            write_parquet(list(self.rows.values()), self.path, self.meta(), now=True)
            self.seen = _identity(self.path)
        return kept


def _stored_meta(path: Path) -> dict:
    """The mhaaudit metadata of a results file (empty when it has none).

    Raises:
        InputError: it is not the JSON object memorize writes there.
    """
    what = f"{path} is not a results file of 'mhaaudit memorize' (its mhaaudit metadata is not the JSON object "
    try:
        meta = read_parquet_metadata(path)
    except (ValueError, OSError) as exc:  # not JSON (or not UTF-8), or the footer unreadable since
        raise InputError(what + f"memorize writes: {one_line(exc, 120)}); pick another " + Param("out")) from None
    if not isinstance(meta, dict):
        kind = _JSON_KINDS.get(type(meta).__name__, "value")
        raise InputError(what + f"memorize writes, but a JSON {kind}); pick another " + Param("out"))
    return meta


_JSON_KINDS = {"list": "array", "str": "string", "int": "number", "float": "number", "bool": "boolean"}


def _identity(path: Path) -> tuple | None:
    """What tells one version of a file from another: a write renames a new file into place (a new inode)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``folder`` while the body runs (none where its file system refuses one)."""
    try:
        fd = os.open(folder if str(folder) else ".", os.O_RDONLY)
    except OSError:  # pragma: no cover - a folder that cannot be opened: its file is refused when written
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
