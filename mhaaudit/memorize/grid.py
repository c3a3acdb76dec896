"""A grid of memorisation points: the paper's presets, the grid's points, resuming from a results
file, the linear fits, and :func:`run_memorize_grid`, the one entry point of the experiments.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch

from .. import validate
from .._version import __version__
from ..errors import InputError
from ..settings import device_name, resolve_device
from .data import DIM
from .results import MemorizeGrid, MemorizeRun, config_dict, config_key, heads_fits, row_to_run, run_to_row
from .training import Point, Recipe, planned_schedule, train_point

__all__ = ["PRESETS", "VARY", "points", "resolve_grid", "run_memorize_grid"]

VARY = ("heads", "n", "head-dim")
_VARY_ALIASES = {"h": "heads", "head_dim": "head-dim", "dh": "head-dim"}
_PARAM = {"heads": "heads", "n": "n", "head-dim": "head_dim"}

_PAPER_VALUES = (1, 5, 10, 20, 30, 40, 50, 60)

#: The paper's grids (Figure 2). The label-set sizes T are this project's choice (the paper does
#: not list them in the text): they straddle the number of examples the model memorises at the
#: ends of each grid (about 140 per head at n = 32 on the paper's App. H numbers), so that each
#: curve rises before it saturates at 1.0. ``cpu`` is a small grid that finishes in a few
#: minutes on two CPU cores: it trains at most 6000 steps per point (the paper rule would be
#: 50k), which is enough for clear growth with H but under-trains the larger sizes (doubling to
#: 12000 steps moved the memorised fractions by less than 0.04 on this grid).
PRESETS: dict[str, dict] = {
    "paper-fig2a": dict(vary="heads", values=_PAPER_VALUES, n=32, head_dim=64, sizes=(1000, 2000, 5000, 10000)),
    "paper-fig2b": dict(vary="n", values=_PAPER_VALUES, heads=20, head_dim=64, sizes=(1000, 2000, 5000)),
    "paper-fig2c": dict(vary="head-dim", values=(10, 16, 24, 32, 40, 48, 56, 64), heads=30, n=32, sizes=(2000, 5000, 10000)),
    "cpu": dict(vary="heads", values=(1, 2, 4, 8), n=32, head_dim=64, sizes=(500, 1000), max_steps=6000),
}

_DEFAULTS = dict(n=32, heads=4, head_dim=64)


def resolve_grid(*, vary=None, values=None, n=None, heads=None, head_dim=None, sizes=None, preset=None, epochs=None,
                 max_steps=None) -> dict:
    """Merge a preset with explicit options (explicit wins) and validate the grid."""
    base: dict = {}
    if preset is not None:
        preset = validate.choice("--preset", preset, tuple(PRESETS))
        base = dict(PRESETS[preset])
    explicit = dict(vary=vary, values=values, n=n, heads=heads, head_dim=head_dim, sizes=sizes, epochs=epochs, max_steps=max_steps)
    if vary is not None and values is None and base and _vary(vary) != base.get("vary"):
        base.pop("values", None)  # the preset's values belong to another parameter
    merged = {**base, **{k: v for k, v in explicit.items() if v is not None}}

    vary_v = _vary(merged["vary"]) if merged.get("vary") is not None else None
    vals = validate.int_list("--values", merged.get("values"))
    if vary_v is not None and not vals:
        raise InputError(f"--vary {vary_v} needs --values (e.g. --values 1,2,4,8)")
    if vary_v is None and merged.get("values") is not None:
        raise InputError("--values needs --vary (heads, n or head-dim)")
    sizes_v = validate.int_list("--sizes", merged.get("sizes"))
    if not sizes_v:
        raise InputError("the grid is empty: give --sizes (e.g. --sizes 500,1000) or a --preset")
    fixed = {
        "n": validate.integer("--n", merged.get("n", _DEFAULTS["n"])),
        "heads": validate.integer("--heads", merged.get("heads", _DEFAULTS["heads"])),
        "head_dim": validate.integer("--head-dim", merged.get("head_dim", _DEFAULTS["head_dim"])),
    }
    ep, ms = merged.get("epochs"), merged.get("max_steps")
    return dict(
        vary=vary_v, values=vals, sizes=sizes_v, preset=preset, fixed=fixed,
        epochs=validate.integer("--epochs", ep) if ep is not None else None,
        max_steps=validate.integer("--max-steps", ms) if ms is not None else None,
    )


def _vary(value) -> str:
    return validate.choice("--vary", value, VARY, aliases=_VARY_ALIASES)


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
        raise InputError(f"cannot read the existing results file {path} ({exc.__class__.__name__}); move it away or pick another --out") from exc
    if rows and "config_key" not in rows[0]:
        raise InputError(f"{path} is not a results file of 'mhaaudit memorize' (no config_key column); pick another --out")
    return {r["config_key"]: r for r in rows}


def _stored_run(row: dict | None, saturation: bool) -> MemorizeRun | None:
    """The stored run of a row, or None when it must be (re)computed."""
    if row is None or (saturation and row.get("sat_histogram") is None):
        return None
    try:
        return row_to_run(row)
    except (KeyError, TypeError, ValueError):
        return None  # a row from another version of the file layout: recompute it


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
) -> MemorizeGrid:
    """Train every point of a grid (values of the varied parameter x sizes T).

    ``out``: a parquet file, written atomically after every point; when it exists, points
    already in it with the same full configuration (including the device type) are read back
    instead of recomputed (``MemorizeRun.reused``; a point asked for with ``saturation`` is
    recomputed when the stored one has none). ``plot``: memorisation vs the varied parameter,
    one line per size. Each point's generator is seeded with ``derive_seed(seed, "memorize")``.
    """
    from ..io import check_writable, stamp, write_parquet
    from ..plot import check_plot_path, plot_memorize
    from ..progress import task as progress_task

    grid = resolve_grid(vary=vary, values=values, n=n, heads=heads, head_dim=head_dim, sizes=sizes,
                        preset=preset, epochs=epochs, max_steps=max_steps)
    recipe = Recipe.resolve(task=task, context=context, classes=classes, tolerance=tolerance, epochs=grid["epochs"],
                            max_steps=grid["max_steps"], lr=lr, batch_size=batch_size, check_every=check_every)
    seed = validate.integer("--seed", seed, minimum=0)
    dev = resolve_device(device)
    out_path = check_writable(out) if out is not None else None
    plot_path = check_plot_path(plot) if plot is not None else None

    by_key = _read_results(out_path) if out_path is not None and out_path.exists() else {}
    meta = stamp(command="memorize", seed=seed, device=device_name(dev), preset=grid["preset"])
    pts = [Point(**p, seed=seed) for p in points(grid)]
    keys = [config_key(config_dict(**p.__dict__, **recipe.as_dict(), device=device_name(dev))) for p in pts]
    runs: list[MemorizeRun | None] = [_stored_run(by_key.get(k), saturation) for k in keys]
    todo = [i for i, r in enumerate(runs) if r is None]
    total = sum(planned_schedule(pts[i].size, recipe.batch_size, recipe.epochs, recipe.max_steps)[2] for i in todo)
    with progress_task(f"memorize: {len(todo)} points", total, progress) as advance:
        for i in todo:
            runs[i] = train_point(pts[i], recipe, dev, saturation=saturation, advance=advance)
            if out_path is not None:
                by_key[keys[i]] = run_to_row(runs[i])
                write_parquet(list(by_key.values()), out_path, meta)

    done: tuple[MemorizeRun, ...] = tuple(runs)  # type: ignore[arg-type]
    settings = dict(grid["fixed"]) | recipe.as_dict() | {"seed": seed, "device": device_name(dev), "d": DIM}
    result = MemorizeGrid(
        vary=grid["vary"], values=grid["values"], sizes=grid["sizes"], preset=grid["preset"], runs=done,
        fits=heads_fits(done, grid["sizes"]) if grid["vary"] == "heads" else (), reused=len(pts) - len(todo),
        out=str(out_path) if out_path is not None else None, plot=str(plot_path) if plot_path is not None else None,
        settings=settings,
    )
    if plot_path is not None:
        plot_memorize(result, plot_path)
    return result
