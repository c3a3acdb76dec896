"""``mhaaudit memorize``: the paper's synthetic memorisation experiments (Section 5.2)."""

from __future__ import annotations

import json
import math
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..memorize import PRESETS, MemorizeGrid, run_memorize_grid
from .app import app


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


def _setting(grid: MemorizeGrid, run) -> str:
    return f"H={run.heads} n={run.n} d_h={run.head_dim}"


def _render_table(grid: MemorizeGrid) -> None:
    from rich.console import Console
    from rich.table import Table

    # Data on stdout: when piped, do not squeeze the table into 80 columns.
    console = Console() if sys.stdout.isatty() else Console(width=200)
    s = grid.settings
    metric = "training accuracy" if s.get("task") == "classification" else f"fraction with |error| < {s.get('tolerance')}"
    title = (
        f"Memorisation ({s.get('task')}, {s.get('context')} context, d = {s.get('d')}; memorised = {metric})"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("setting")
    table.add_column("size T", justify="right")
    table.add_column("memorised", justify="right")
    table.add_column("count", justify="right")
    table.add_column("epochs", justify="right")
    table.add_column("steps", justify="right")
    table.add_column("final loss", justify="right")
    table.add_column("time (s)", justify="right")
    sat = any(r.saturation is not None for r in grid.runs)
    if sat:
        table.add_column(">=2 heads saturated", justify="right")
        table.add_column(">=1 head unsaturated", justify="right")
    for r in grid.runs:
        cells = [
            _setting(grid, r),
            str(r.size),
            f"{r.memorized:.3f}",
            str(r.memorized_count),
            str(r.epochs_run) + (" (early)" if r.stopped_early else ""),
            str(r.steps_run),
            f"{r.final_loss:.4g}",
            f"{r.seconds:.1f}" + (" (file)" if r.reused else ""),
        ]
        if sat:
            if r.saturation is None:
                cells += ["-", "-"]
            else:
                cells += [f"{r.saturation.frac_at_least_two_saturated:.3f}", f"{r.saturation.frac_some_unsaturated:.3f}"]
        table.add_row(*cells)
    console.print(table)
    if grid.fits:
        ft = Table(title="Linear fit of the count memorised against H (points with memorised < 0.99)", title_justify="left")
        ft.add_column("size T")
        ft.add_column("slope (examples per head)", justify="right")
        ft.add_column("intercept", justify="right")
        ft.add_column("R^2", justify="right")
        ft.add_column("points", justify="right")
        ft.add_column("H values", justify="right")
        for f in grid.fits:
            ft.add_row(
                "all" if f.size is None else str(f.size), f"{f.slope:.2f}", f"{f.intercept:.2f}", f"{f.r2:.4f}",
                str(f.points), ",".join(str(x) for x in f.xs),
            )
        console.print(ft)
    elif grid.vary == "heads":
        console.print("Linear fit against H: fewer than two non-saturated values of H per size; none computed.")
    if sat:
        for r in grid.runs:
            if r.saturation is not None:
                h = r.saturation.histogram
                console.print(
                    f"saturated heads per example, {_setting(grid, r)} T={r.size}: "
                    + ", ".join(f"{k}: {c}" for k, c in enumerate(h) if c)
                )
    notes = []
    if grid.out:
        notes.append(f"results: {grid.out}")
    if grid.plot:
        notes.append(f"plot: {grid.plot}")
    for line in notes:
        console.print(line)


@app.command("memorize")
def memorize(
    vary: Annotated[Optional[str], typer.Option(help="Parameter to vary: heads, n or head-dim (omit for one setting).")] = None,
    values: Annotated[Optional[str], typer.Option(help="Values of the varied parameter, comma-separated integers, e.g. 1,2,4,8.")] = None,
    n: Annotated[Optional[int], typer.Option("--n", help="Context length n (default 32).")] = None,
    heads: Annotated[Optional[int], typer.Option(help="Number of heads H (default 4).")] = None,
    head_dim: Annotated[Optional[int], typer.Option("--head-dim", help="Key/query dimension d_h (default 64).")] = None,
    sizes: Annotated[Optional[str], typer.Option(help="Training-set sizes T, comma-separated, e.g. 500,1000.")] = None,
    preset: Annotated[
        Optional[str],
        typer.Option(help=f"A ready grid: {', '.join(PRESETS)}. Explicit options override it."),
    ] = None,
    task: Annotated[str, typer.Option(help="classification (100 classes) or regression (U[0,1] labels).")] = "classification",
    context: Annotated[str, typer.Option(help="shared (one context for all examples) or per-example.")] = "shared",
    classes: Annotated[int, typer.Option(help="Number of classes for classification.")] = 100,
    tolerance: Annotated[float, typer.Option(help="Regression: an example is memorised when |error| < tolerance.")] = 0.01,
    epochs: Annotated[Optional[int], typer.Option(help="Epochs per point (default: max(500 epochs, 50k steps), the paper's rule).")] = None,
    max_steps: Annotated[Optional[int], typer.Option("--max-steps", help="Cap on optimisation steps per point.")] = None,
    lr: Annotated[float, typer.Option(help="Adam learning rate (peak of the warm-up/cosine schedule).")] = 1e-3,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Batch size.")] = 256,
    check_every: Annotated[int, typer.Option("--check-every", help="Check for full memorisation (and stop) every this many steps.")] = 200,
    seed: Annotated[int, typer.Option(help="Seed of the one generator behind data, weights and batch order.")] = 0,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    saturation: Annotated[bool, typer.Option("--saturation", help="Count saturated heads (softmax weight > 0.99) per example.")] = False,
    out: Annotated[Optional[Path], typer.Option(help="Parquet file of results; existing points in it are not recomputed.")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Image of memorisation vs the varied parameter, one line per size.")] = None,
    format: Annotated[OutputFormat, typer.Option("--format", help="table or json (on stdout).")] = OutputFormat.table,
) -> None:
    """Train one-layer multi-head attention to memorise random labels (the paper's Section 5.2).

    Presets (explicit options override them; the sizes T are this tool's choice):

    paper-fig2a: H in 1,5,10,...,60; n=32; T in 1000,2000,5000,10000.

    paper-fig2b: n in 1,5,10,...,60; H=20; T in 1000,2000,5000.

    paper-fig2c: d_h in 10,16,...,64; H=30; n=32; T in 2000,5000,10000.

    cpu: H in 1,2,4,8; n=32; T in 500,1000; at most 6000 steps (a few minutes on 2 cores).

    Without --epochs/--max-steps each point trains max(500 epochs, 50k steps), as in the paper.
    Appendix H's saturation study: --heads 4 --n 32 --sizes 550 --saturation.
    """
    show_progress = format is OutputFormat.table and sys.stderr.isatty()
    grid = run_memorize_grid(
        vary=vary, values=values, n=n, heads=heads, head_dim=head_dim, sizes=sizes, preset=preset, task=task,
        context=context, classes=classes, tolerance=tolerance, epochs=epochs, max_steps=max_steps, lr=lr,
        batch_size=batch_size, check_every=check_every, seed=seed, device=device, saturation=saturation,
        out=out, plot=plot, progress=show_progress,
    )
    if grid.reused:
        print(
            f"{grid.reused} of {len(grid.runs)} points were already in {grid.out} with the same configuration; not recomputed",
            file=sys.stderr,
        )
    if format is OutputFormat.json:
        sys.stdout.write(json.dumps(_finite(grid.to_dict()), indent=2, default=str) + "\n")
    else:
        _render_table(grid)


def _finite(o):
    """NaN/inf become null so that stdout is strict JSON."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o
