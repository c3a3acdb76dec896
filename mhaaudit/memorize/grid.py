"""A grid of memorisation points: the paper's presets, the grid's points and seeds, resuming from a
results file, and :func:`run_memorize_grid`, the one entry point of the experiments.

``pyarrow`` is imported where it is used: it takes a second or more to import, and a run that never
needs it does not load it.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import torch

from .. import validate
from ..defaults import MEMORIZE_PRESETS
from ..errors import InputError, param
from ..io import check_writable, stamp, write_parquet
from ..plot import check_plot_path, plot_memorize
from ..progress import task as progress_task
from ..settings import MAX_SEED, device_name, resolve_device
from .data import DIM
from .grouping import default_budget, device_memory, plan_groups
from .results import (
    GroupRecord,
    MemorizeGrid,
    MemorizeRun,
    config_dict,
    config_key,
    heads_fits,
    row_to_run,
    run_to_row,
    seed_summaries,
)
from .training import Point, Recipe, intra_op_threads, train_group

__all__ = ["PRESETS", "VARY", "points", "resolve_grid", "run_memorize_grid"]

VARY = ("heads", "n", "head-dim")
_VARY_ALIASES = {"h": "heads", "head_dim": "head-dim", "dh": "head-dim"}
_PARAM = {"heads": "heads", "n": "n", "head-dim": "head_dim"}

#: The paper's grids (Figure 2) and the small ``cpu`` grid: see :data:`mhaaudit.defaults.MEMORIZE_PRESETS`.
PRESETS: dict[str, dict] = MEMORIZE_PRESETS

_DEFAULTS = dict(n=32, heads=4, head_dim=64)


def resolve_grid(
    *, vary=None, values=None, n=None, heads=None, head_dim=None, sizes=None, preset=None, epochs=None, max_steps=None
) -> dict:
    """Merge a preset with explicit options (explicit wins) and validate the grid."""
    base: dict = {}
    if preset is not None:
        preset = validate.choice(param("preset"), preset, tuple(PRESETS))
        base = dict(PRESETS[preset])
    explicit = dict(
        vary=vary, values=values, n=n, heads=heads, head_dim=head_dim, sizes=sizes, epochs=epochs, max_steps=max_steps
    )
    if vary is not None and values is None and base and _vary(vary) != base.get("vary"):
        base.pop("values", None)  # the preset's values belong to another parameter
    merged = {**base, **{k: v for k, v in explicit.items() if v is not None}}

    vary_v = _vary(merged["vary"]) if merged.get("vary") is not None else None
    vals = validate.int_list(param("values"), merged.get("values"))
    if vary_v is not None and not vals:
        raise InputError(f"{{param:vary}} {vary_v} needs {{param:values}} (e.g. {{param:values}} 1,2,4,8)")
    if vary_v is None and merged.get("values") is not None:
        raise InputError("{param:values} needs {param:vary} (heads, n or head-dim)")
    sizes_v = validate.int_list(param("sizes"), merged.get("sizes"))
    if not sizes_v:
        raise InputError("the grid is empty: give {param:sizes} (e.g. {param:sizes} 500,1000) or a {param:preset}")
    fixed = {
        "n": validate.integer(param("n"), merged.get("n", _DEFAULTS["n"])),
        "heads": validate.integer(param("heads"), merged.get("heads", _DEFAULTS["heads"])),
        "head_dim": validate.integer(param("head_dim"), merged.get("head_dim", _DEFAULTS["head_dim"])),
    }
    ep, ms = merged.get("epochs"), merged.get("max_steps")
    return dict(
        vary=vary_v,
        values=vals,
        sizes=sizes_v,
        preset=preset,
        fixed=fixed,
        epochs=validate.integer(param("epochs"), ep) if ep is not None else None,
        max_steps=validate.integer(param("max_steps"), ms) if ms is not None else None,
    )


def _vary(value) -> str:
    return validate.choice(param("vary"), value, VARY, aliases=_VARY_ALIASES)


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


# --------------------------------------------------------------------------- results file


def _read_results(path: Path) -> dict[str, dict]:
    """The rows of an existing results file by configuration key."""
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:
        raise InputError(
            f"cannot read the existing results file {path} ({exc.__class__.__name__}); move it away or pick another {{param:out}}"
        ) from exc
    if rows and "config_key" not in rows[0]:
        raise InputError(
            f"{path} is not a results file of 'mhaaudit memorize' (no config_key column); pick another {{param:out}}"
        )
    return {r["config_key"]: r for r in rows}


# --------------------------------------------------------------------------- the grid


def run_memorize_grid(
    *,
    vary: str | None = None,
    values: str | Sequence[int] | None = None,
    n: int | None = None,
    heads: int | None = None,
    head_dim: int | None = None,
    sizes: str | Sequence[int] | None = None,
    preset: str | None = None,
    task: str = "classification",
    context: str = "shared",
    classes: int = 100,
    tolerance: float = 0.01,
    epochs: int | None = None,
    max_steps: int | None = None,
    lr: float = 1e-3,
    batch_size: int = 256,
    check_every: int = 200,
    seed: int = 0,
    device: str | torch.device = "auto",
    saturation: bool = False,
    out: str | os.PathLike | None = None,
    plot: str | os.PathLike | None = None,
    progress: bool = False,
    seeds: str | Sequence[int] | None = None,
    memory_budget: float | None = None,
    max_group: int | None = None,
) -> MemorizeGrid:
    """Train every point of a grid (values of the varied parameter x sizes T x seeds).

    ``seeds``: several seeds (``"0-5"``, ``"0,3,7"`` or a list), every point trained once per
    seed; the result's ``summary`` gives the mean and spread of the memorised fraction over them
    (``seed`` is then left at 0). Each point's generator is seeded with
    ``derive_seed(seed, "memorize")``.

    The points are trained in stacked groups (:mod:`.grouping`): as many per group as fit in
    ``memory_budget`` GiB (default: 80% of the free GPU memory, or half the available host
    memory) and at most ``max_group`` (1: each point alone); ``groups`` says how.

    ``out``: a parquet file, written atomically after every group; when it exists, points
    already in it with the same full configuration (including seed and device type) are read
    back instead of recomputed (``MemorizeRun.reused``; a point asked for with ``saturation`` is
    recomputed when the stored one has none). ``plot``: memorisation vs the varied parameter,
    one line per size (the mean over seeds, the band between the lowest and highest seed).
    The linear fits against H take every seed's run as a point.
    """
    grid = resolve_grid(
        vary=vary,
        values=values,
        n=n,
        heads=heads,
        head_dim=head_dim,
        sizes=sizes,
        preset=preset,
        epochs=epochs,
        max_steps=max_steps,
    )
    recipe = Recipe.resolve(
        task=task,
        context=context,
        classes=classes,
        tolerance=tolerance,
        epochs=grid["epochs"],
        max_steps=grid["max_steps"],
        lr=lr,
        batch_size=batch_size,
        check_every=check_every,
    )
    seed_list = _seeds(seed, seeds)
    dev = resolve_device(device)
    budget = _budget(memory_budget, dev)
    max_group = validate.integer(param("max_group"), max_group) if max_group is not None else None
    out_path = check_writable(out) if out is not None else None
    plot_path = check_plot_path(plot) if plot is not None else None

    pts = [Point(**p, seed=s) for p in points(grid) for s in seed_list]
    store = _Store(
        out_path,
        meta=stamp(
            command="memorize", seed=seed_list[0], seeds=seed_list, device=device_name(dev), preset=grid["preset"]
        ),
    )
    keys = [config_key(config_dict(**p.__dict__, **recipe.as_dict(), device=device_name(dev))) for p in pts]
    runs: list[MemorizeRun | None] = [store.run(k, saturation) for k in keys]
    todo = [i for i, r in enumerate(runs) if r is None]
    groups = _train(
        pts,
        todo,
        runs,
        keys,
        recipe,
        dev,
        store,
        saturation=saturation,
        budget=budget,
        max_group=max_group,
        progress=progress,
    )

    done: tuple[MemorizeRun, ...] = tuple(runs)  # type: ignore[arg-type]
    settings = (
        dict(grid["fixed"])
        | recipe.as_dict()
        | {"seed": seed_list[0], "seeds": list(seed_list), "device": device_name(dev), "d": DIM}
    )
    result = MemorizeGrid(
        vary=grid["vary"],
        values=grid["values"],
        sizes=grid["sizes"],
        preset=grid["preset"],
        runs=done,
        fits=heads_fits(done, grid["sizes"]) if grid["vary"] == "heads" else (),
        reused=len(pts) - len(todo),
        out=str(out_path) if out_path is not None else None,
        plot=str(plot_path) if plot_path is not None else None,
        settings=settings,
        seeds=tuple(seed_list),
        summary=seed_summaries(done),
        groups=tuple(groups),
        memory_budget=budget,
    )
    if plot_path is not None:
        plot_memorize(result, plot_path)
    return result


def _seeds(seed, seeds) -> list[int]:
    seed = validate.integer(param("seed"), 0 if seed is None else seed, minimum=0, maximum=MAX_SEED)
    if seeds is None:
        return [seed]
    if seed != 0:
        raise InputError("give either {param:seed} or {param:seeds}, not both")
    return validate.int_ranges(seeds, param("seeds"), what="seeds", example="0-5 or 0,1,4", minimum=0, maximum=MAX_SEED)


def _budget(gib, device: torch.device) -> int:
    if gib is None:
        return default_budget(device)
    if isinstance(gib, bool) or not isinstance(gib, (int, float)) or not (gib > 0 and math.isfinite(gib)):
        raise InputError(f"{{param:memory_budget}} must be a positive number of GiB, got {gib!r}")
    return int(gib * (1 << 30))


def _train(
    pts: list[Point],
    todo: list[int],
    runs: list,
    keys: list[str],
    recipe: Recipe,
    dev: torch.device,
    store: _Store,
    *,
    saturation: bool,
    budget: int,
    max_group: int | None,
    progress: bool,
) -> list[GroupRecord]:
    """Train the points ``todo`` group by group, filling ``runs`` and the results file; the groups' records.

    On the CPU the groups run side by side, one per core, each on one intra-op thread; on a GPU
    one after the other.
    """
    totals = [pts[i].plan(recipe).total for i in todo]
    plans = plan_groups(
        [pts[i] for i in todo],
        totals=totals,
        out_dim=recipe.out_dim,
        batch=recipe.batch_size,
        shared=recipe.context == "shared",
        device=dev,
        budget=budget,
        max_points=max_group,
        ceiling=max(budget, device_memory(dev)),
    )
    records: list = [None] * len(plans)
    stop = threading.Event()

    def job(g) -> tuple[list[MemorizeRun], float]:
        t0 = time.perf_counter()
        members = [pts[todo[k]] for k in g.members]
        trained = train_group(
            members,
            recipe,
            dev,
            saturation=saturation,
            advance=advance,
            eval_chunk=g.eval_chunk,
            cancelled=stop.is_set,
            cpu_threads=None,
        )
        return trained, time.perf_counter() - t0

    steps = sum(max(totals[k] for k in g.members) for g in plans)
    with (
        progress_task(f"memorize: {len(todo)} points in {len(plans)} groups", steps, progress) as advance,
        intra_op_threads(dev, 1),
        ThreadPoolExecutor(_workers(dev, len(plans))) as pool,
    ):
        # The longest groups first, so that the last to finish is a short one.
        futures = {pool.submit(job, plans[k]): k for k in sorted(range(len(plans)), key=lambda k: -plans[k].work)}
        try:
            for future in as_completed(futures):
                g = plans[futures[future]]
                trained, seconds = future.result()
                members = [todo[k] for k in g.members]
                for i, run in zip(members, trained, strict=False):
                    runs[i] = run
                store.add({keys[i]: runs[i] for i in members})
                records[futures[future]] = GroupRecord(
                    runs=tuple(members),
                    heads=g.shape.heads,
                    head_dim=g.shape.head_dim,
                    n=g.shape.n,
                    size=g.shape.size,
                    bytes=g.bytes,
                    seconds=seconds,
                )
        except BaseException:
            stop.set()
            raise
    return records


def _workers(device: torch.device, groups: int) -> int:
    if device.type != "cpu":
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, groups))


class _Store:
    """The results file (when there is one): rows by configuration key, rewritten after every group."""

    def __init__(self, path: Path | None, meta: dict):
        self.path, self.meta = path, meta
        self.rows = _read_results(path) if path is not None and path.exists() else {}

    def run(self, key: str, saturation: bool) -> MemorizeRun | None:
        """The stored run of ``key``, or None when it must be (re)computed."""
        row = self.rows.get(key)
        if row is None or (saturation and row.get("sat_histogram") is None):
            return None
        try:
            return row_to_run(row)
        except (KeyError, TypeError, ValueError):
            return None  # a row from another version of the file layout: recompute it

    def add(self, runs: dict[str, MemorizeRun]) -> None:
        if self.path is None:
            return
        self.rows.update({k: run_to_row(r) for k, r in runs.items()})
        # Written now, not with the run's other outputs: it keeps the points done if the run stops.
        write_parquet(list(self.rows.values()), self.path, self.meta, now=True)
