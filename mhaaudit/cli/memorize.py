"""``mhaaudit memorize``: the paper's synthetic memorisation experiments (Section 5.2)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..memorize import PRESETS
from .options import Format, FormatOpt, check_stdout, emit


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
    format: FormatOpt = Format.table,
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
    from ..io import stamp
    from ..memorize import run_memorize_grid
    from ..progress import progress_enabled
    from ..render import render_memorize

    check_stdout(format)
    grid = run_memorize_grid(
        vary=vary, values=values, n=n, heads=heads, head_dim=head_dim, sizes=sizes, preset=preset, task=task,
        context=context, classes=classes, tolerance=tolerance, epochs=epochs, max_steps=max_steps, lr=lr,
        batch_size=batch_size, check_every=check_every, seed=seed, device=device, saturation=saturation,
        out=out, plot=plot, progress=progress_enabled(format.value),
    )
    if grid.reused:
        print(
            f"{grid.reused} of {len(grid.runs)} points were already in {grid.out} with the same configuration; not recomputed",
            file=sys.stderr,
        )
    doc = grid.to_dict()
    meta = stamp(command="memorize", seed=grid.settings.get("seed"), device=grid.settings.get("device"),
                 **{k: v for k, v in doc.items() if k not in ("tool", "runs")})
    # --out is the grid's own results file (written point by point, for resuming): not emit's to write.
    emit(format, meta, doc["runs"], document=doc, render=lambda: render_memorize(grid))
