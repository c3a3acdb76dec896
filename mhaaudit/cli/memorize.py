"""``mhaaudit memorize``: the paper's synthetic memorisation experiments (Section 5.2)."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..defaults import MEMORIZE_PRESETS as PRESETS
from .options import Common, command_options, emit, importing, prepare_outputs, refuse_unused

if TYPE_CHECKING:  # the shared options, typed for mypy
    from typing_extensions import Unpack

# The members are the presets' names, built at import; mypy cannot list them.
Preset = Enum("Preset", {name: name for name in PRESETS}, type=str)  # type: ignore[misc]


class Task(str, Enum):
    """The labels ``--task`` names: random classes, or numbers in [0, 1] to regress."""

    classification = "classification"
    regression = "regression"


class Context(str, Enum):
    """The contexts ``--context`` names: one context for every example, or one per example."""

    shared = "shared"
    per_example = "per-example"


class Vary(str, Enum):
    """The parameter ``--vary`` names: the number of heads H, the context length n, or the head dimension d_h."""

    heads = "heads"
    n = "n"
    head_dim = "head-dim"


_RANGE = "one value, a range or a list: 4, 1-8 or 1,2,4,8; several values vary it"


@command_options(
    Common,
    "vary values n heads head_dim sizes preset task context classes tolerance epochs max_steps lr batch_size"
    " check_every seed seeds device saturation out plot fmt quiet",
)
def memorize(
    ctx: typer.Context,
    vary: Annotated[
        Vary | None,
        typer.Option(
            help="Parameter to vary (omit for one setting); the same as giving several values to --heads, --n or "
            "--head-dim.",
            show_default=False,
        ),
    ] = None,
    values: Annotated[
        str | None, typer.Option(help="Values of the varied parameter, comma-separated integers, e.g. 1,2,4,8.")
    ] = None,
    n: Annotated[
        str | None, typer.Option("--n", "--context-length", help=f"Context length n (default 32): {_RANGE}.")
    ] = None,
    heads: Annotated[str | None, typer.Option("--heads", help=f"Number of heads H (default 4): {_RANGE}.")] = None,
    head_dim: Annotated[
        str | None, typer.Option("--head-dim", help=f"Key/query dimension d_h (default 64): {_RANGE}.")
    ] = None,
    sizes: Annotated[str | None, typer.Option(help="Training-set sizes T, comma-separated, e.g. 500,1000.")] = None,
    preset: Annotated[
        Preset | None, typer.Option(help="A ready grid (see above). Explicit options override it.", show_default=False)
    ] = None,
    task: Annotated[
        Task, typer.Option(help="classification (random classes) or regression (U[0,1] labels).")
    ] = Task.classification,
    context: Annotated[
        Context, typer.Option(help="shared (one context for all examples) or per-example.")
    ] = Context.shared,
    classes: Annotated[int, typer.Option(help="Number of classes (classification only).")] = 100,
    tolerance: Annotated[
        float, typer.Option(help="Regression only: an example is memorised when |error| < tolerance.")
    ] = 0.01,
    epochs: Annotated[
        int | None, typer.Option(help="Epochs per point (default: max(500 epochs, 50k steps), the paper's rule).")
    ] = None,
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="Cap on optimisation steps per point.")] = None,
    lr: Annotated[float, typer.Option(help="Adam learning rate (peak of the warm-up/cosine schedule).")] = 1e-3,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Training batch size.")] = 256,
    check_every: Annotated[
        int, typer.Option("--check-every", help="Check for full memorisation (and stop) every this many steps.")
    ] = 200,
    seeds: Annotated[
        str | None,
        typer.Option(
            "--seeds",
            help="Train every point for several seeds (e.g. 0-5 or 0,3,7) and report the mean and spread; instead of "
            "--seed.",
        ),
    ] = None,
    saturation: Annotated[
        bool, typer.Option("--saturation", help="Count saturated heads (softmax weight > 0.99) per example.")
    ] = False,
    out: Annotated[
        Path | None, typer.Option(help="Parquet file of results; existing points in it are not recomputed.")
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(help="Memorisation vs the varied parameter, one line per size, to this .png/.pdf/.svg file."),
    ] = None,
    **options: Unpack[Common],
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
    with importing(options["quiet"]):  # the library, torch with it: seconds
        from ..io import refuse_inputs
        from ..memorize import MemorizeRequest, grid_axes, run_memorize_grid
        from ..progress import progress_enabled
        from ..render import render_memorize

    prepare_outputs(out, plot, options["fmt"])
    refuse_inputs({"--plot": plot}, [out])
    if task == Task.regression:
        refuse_unused(ctx, ("classes",), "with --task regression: the labels are numbers in [0, 1]")
    else:
        refuse_unused(ctx, ("tolerance",), "with --task classification: a class is right or wrong")
    if seeds is not None:
        refuse_unused(ctx, ("seed",), "with --seeds: every point is trained for each seed listed")
    name = preset.value if preset else None
    request = MemorizeRequest(
        **grid_axes(vary.value if vary else None, values, name, {"heads": heads, "n": n, "head_dim": head_dim}),
        sizes=sizes,
        preset=name,
        task=task.value,
        context=context.value,
        classes=classes,
        tolerance=tolerance,
        epochs=epochs,
        max_steps=max_steps,
        lr=lr,
        batch_size=batch_size,
        check_every=check_every,
        seed=options["seed"],
        seeds=seeds,
        device=options["device"],
        saturation=saturation,
        out=out,
        plot=plot,
        progress=progress_enabled(options["quiet"]),
    )
    grid = run_memorize_grid(request)
    if grid.reused:
        print(
            f"{grid.reused} of {len(grid.runs)} points were already in {grid.out} with the same configuration; "
            "not recomputed",
            file=sys.stderr,
        )
    # --out is the grid's own results file (written point by point, for resuming): not emit's to write.
    emit(
        options["fmt"],
        grid.meta(),
        grid.table_records(),
        document=grid.to_dict(),
        render=lambda: render_memorize(grid),
        out=out,
        write_out=False,
    )
