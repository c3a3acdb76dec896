"""``mhaaudit memorize``: the paper's synthetic memorisation experiments (Section 5.2)."""

from __future__ import annotations

import contextlib
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from ..defaults import (
    DEFAULT_CHECK_EVERY,
    DEFAULT_CLASSES,
    DEFAULT_DEVICE,
    DEFAULT_LR,
    DEFAULT_MEMORIZE_CONTEXT,
    DEFAULT_MEMORIZE_TASK,
    DEFAULT_SEED,
    DEFAULT_TOLERANCE,
    DEFAULT_TRAINING_BATCH_SIZE,
    MEMORIZE_CONTEXTS,
    MEMORIZE_PRESETS,
    MEMORIZE_TASKS,
    MEMORIZE_VARY,
)
from ..stdio import say
from .given import refuse_unused
from .library import importing, value_of
from .options import Device, Format, FormatOpt, Quiet, Seed, integer_option, output_option
from .output import emit, prepare_outputs

# The choices of the grid and of the recipe, each member named as its value, from the library's tuples
# (--vary is a word the library reads, with its aliases: MemorizeRequest and grid_axes).
Preset = Enum("Preset", {name: name for name in MEMORIZE_PRESETS}, type=str)  # type: ignore[misc]
Task = Enum("Task", {v: v for v in MEMORIZE_TASKS}, type=str)  # type: ignore[misc]
Context = Enum("Context", {v: v for v in MEMORIZE_CONTEXTS}, type=str)  # type: ignore[misc]

_RANGE = "one value, a range or a list: 4, 1-8 or 1,2,4,8; several values vary it"


def memorize(
    ctx: typer.Context,
    vary: Annotated[
        str | None,
        typer.Option(
            "--vary",
            metavar="<" + "|".join(MEMORIZE_VARY) + ">",
            help="Parameter to vary (omit for one setting; also h, dh or head_dim); the same as giving several "
            "values to --heads, --n or --head-dim.",
            show_default=False,
        ),
    ] = None,
    values: Annotated[
        str | None,
        typer.Option("--values", help="Values of the varied parameter, comma-separated integers, e.g. 1,2,4,8."),
    ] = None,
    n: Annotated[
        str | None, typer.Option("--n", "--context-length", help=f"Context length n (default 32): {_RANGE}.")
    ] = None,
    heads: Annotated[str | None, typer.Option("--heads", help=f"Number of heads H (default 4): {_RANGE}.")] = None,
    head_dim: Annotated[
        str | None, typer.Option("--head-dim", help=f"Key/query dimension d_h (default 64): {_RANGE}.")
    ] = None,
    sizes: Annotated[
        str | None, typer.Option("--sizes", help="Training-set sizes T, comma-separated, e.g. 500,1000.")
    ] = None,
    preset: Annotated[
        Preset | None,
        typer.Option(
            "--preset",
            help="A ready grid (see above). Explicit options override it; several values of a parameter it does "
            "not vary are refused unless --vary names that parameter.",
            show_default=False,
        ),
    ] = None,
    task: Annotated[
        Task, typer.Option("--task", help="classification (random classes) or regression (U[0,1] labels).")
    ] = Task[DEFAULT_MEMORIZE_TASK],
    context: Annotated[
        Context, typer.Option("--context", help="shared (one context for all examples) or per-example.")
    ] = Context[DEFAULT_MEMORIZE_CONTEXT],
    classes: Annotated[
        int, integer_option("--classes", help="Number of classes (classification only).")
    ] = DEFAULT_CLASSES,
    tolerance: Annotated[
        float,
        typer.Option(
            "--tolerance",
            help="Regression only: an example is memorised when |error| < tolerance (this tool's criterion; the "
            "paper compares regression by the mean squared error, the final loss).",
        ),
    ] = DEFAULT_TOLERANCE,
    epochs: Annotated[
        int | None,
        integer_option("--epochs", help="Epochs per point (default: max(500 epochs, 50k steps), the paper's rule)."),
    ] = None,
    max_steps: Annotated[int | None, integer_option("--max-steps", help="Cap on optimisation steps per point.")] = None,
    lr: Annotated[
        float, typer.Option("--lr", help="Adam learning rate (peak of the warm-up/cosine schedule).")
    ] = DEFAULT_LR,
    batch_size: Annotated[
        int, integer_option("--batch-size", help="Training batch size.")
    ] = DEFAULT_TRAINING_BATCH_SIZE,
    check_every: Annotated[
        int,
        integer_option("--check-every", help="Check for full memorisation (and stop) every this many steps."),
    ] = DEFAULT_CHECK_EVERY,
    seed: Seed = DEFAULT_SEED,
    seeds: Annotated[
        str | None,
        typer.Option(
            "--seeds",
            help="Train every point for several seeds (e.g. 0-5 or 0,3,7) and report the mean and spread; instead "
            "of --seed.",
        ),
    ] = None,
    device: Device = DEFAULT_DEVICE,
    saturation: Annotated[
        bool, typer.Option("--saturation", help="Count saturated heads (softmax weight > 0.99) per example.")
    ] = False,
    out: Annotated[
        Path | None,
        output_option("--out", help="Parquet file of results; existing points in it are not recomputed."),
    ] = None,
    plot: Annotated[
        Path | None,
        output_option(
            "--plot",
            help="Memorisation vs the varied parameter, one line per size (nothing varied: vs the sizes T), to "
            "this .png/.pdf/.svg file.",
        ),
    ] = None,
    max_minutes: Annotated[
        float | None,
        typer.Option(
            "--max-minutes",
            help="Run the grid in parts: start no group after this many minutes and stop the one still training "
            "then; the points trained are kept in --out (required), and the same command again trains the rest.",
        ),
    ] = None,
    max_group: Annotated[
        int | None,
        integer_option(
            "--max-group",
            help="At most this many points trained together in one stacked group (default: as many as fit in "
            "memory); smaller groups each finish sooner, for --max-minutes.",
        ),
    ] = None,
    fmt: FormatOpt = Format.table,
    quiet: Quiet = False,
) -> None:
    """Train one-layer multi-head attention to memorise random labels (the paper's Section 5.2).

    Presets (explicit options override them; the sizes T are this tool's choice):

    paper-fig2a: H in 1,5,10,...,60; n=32; T in 1000,2000,5000,10000.

    paper-fig2b: n in 1,5,10,...,60; H=20; T in 1000,2000,5000.

    paper-fig2c: d_h in 10,16,...,64; H=30; n=32; T in 2000,5000,10000.

    cpu: H in 1,2,4,8; n=32; T in 500,1000; at most 6000 steps
    (about a minute on 2 cores).

    Without --epochs/--max-steps each point trains max(500 epochs, 50k steps),
    as in the paper.

    Appendix H's saturation study: --heads 4 --n 32 --sizes 550 --saturation
    (the paper trained it, and Figure 2(c), for more steps than that rule, a
    number lost from its text: not comparable as it stands).

    In parts of bounded time: --out FILE --max-minutes 8 trains whole groups
    until the time is up and keeps them; the same command again trains the rest.
    --max-group keeps the groups short.
    """
    with importing(quiet):  # the library, torch with it: seconds
        from ..io import refuse_inputs
        from ..memorize import MemorizeRequest, grid_axes, run_memorize_grid
        from ..progress import progress_enabled
        from ..render import render_memorize

    refuse_inputs({"--out": out, "--plot": plot}, [])  # --out is the resume file: read and written
    prepare_outputs(out, plot, fmt)
    if task.value == "regression":
        refuse_unused(ctx, ("classes",), "with --task regression: the labels are numbers in [0, 1]")
    else:
        refuse_unused(ctx, ("tolerance",), "with --task classification: a class is right or wrong")
    if seeds is not None:
        refuse_unused(ctx, ("seed",), "with --seeds: every point is trained for each seed listed")
    # Several values of heads, n or head_dim vary that parameter (grid_axes: vary, values and the three).
    given = {"heads": heads, "n": n, "head_dim": head_dim}
    axes = grid_axes(vary, values, value_of(preset), given)
    # The values of the varied parameter given to --heads, --n or --head-dim are the library's values: its
    # messages name them values, and the command line the option they were given to.
    with _values_named(_values_option(values, axes["vary"], given)):
        request = MemorizeRequest(
            **axes,
            sizes=sizes,
            preset=value_of(preset),
            task=task.value,
            context=context.value,
            classes=classes,
            tolerance=tolerance,
            epochs=epochs,
            max_steps=max_steps,
            lr=lr,
            batch_size=batch_size,
            check_every=check_every,
            seed=seed,
            seeds=seeds,
            device=device,
            saturation=saturation,
            out=out,
            plot=plot,
            max_minutes=max_minutes,
            max_group=max_group,
            progress=progress_enabled(quiet),
        )
        grid = run_memorize_grid(request)
    if grid.reused:
        say(
            f"{grid.reused} of {len(grid.runs)} points were already in {grid.out} with the same configuration; "
            "not recomputed"
        )
    # --out is the grid's own results file (written point by point, for resuming): not emit's to write.
    emit(
        fmt,
        grid.meta(),
        grid.table_records(),
        document=grid.to_dict(),
        render=lambda: render_memorize(grid),
        out=out,
        write_out=False,
    )


def _values_option(values: str | None, vary: str | None, given: dict[str, str | None]) -> str | None:
    """The parameter (``heads``, ``n`` or ``head_dim``) the user gave the varied parameter's values to
    (``--heads 1,2,4``, or ``--vary heads --heads 8``); None where they came from --values or a preset."""
    if values is not None or vary is None:
        return None
    return next((name for name, spec in given.items() if spec is not None and name.replace("_", "-") == vary), None)


@contextlib.contextmanager
def _values_named(option: str | None):
    """An input error raised inside that names the library's ``values`` names ``option`` instead.

    Raises:
        InputError: the error raised inside, its ``values`` written as ``option``.
    """
    from ..errors import InputError, Message, Param

    try:
        yield
    except InputError as exc:
        message = exc.message
        if option is None or not isinstance(message, Message) or "values" not in message.params:
            raise
        parts = (Param(option) if isinstance(p, Param) and p.name == "values" else p for p in message.parts)
        raise InputError(Message(*parts), value=exc.value, allowed=exc.allowed) from exc
