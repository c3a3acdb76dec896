"""``mhaaudit memorize``: the paper's synthetic memorisation experiments (Section 5.2)."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

import typer

from ..stdio import say
from . import options as shared
from .flags import MemorizeOptions

if TYPE_CHECKING:  # the options, typed for mypy
    from typing_extensions import Unpack


@shared.command_options(
    MemorizeOptions,
    "vary values n heads head_dim sizes preset task context classes tolerance epochs max_steps lr batch_size"
    " check_every seed seeds device saturation out plot max_minutes max_group fmt quiet",
)
def memorize(ctx: typer.Context, **options: Unpack[MemorizeOptions]) -> None:
    """Train one-layer multi-head attention to memorise random labels (the paper's Section 5.2).

    Presets (explicit options override them; the sizes T are this tool's choice):

    paper-fig2a: H in 1,5,10,...,60; n=32; T in 1000,2000,5000,10000.

    paper-fig2b: n in 1,5,10,...,60; H=20; T in 1000,2000,5000.

    paper-fig2c: d_h in 10,16,...,64; H=30; n=32; T in 2000,5000,10000.

    cpu: H in 1,2,4,8; n=32; T in 500,1000; at most 6000 steps (a few minutes on 2 cores).

    Without --epochs/--max-steps each point trains max(500 epochs, 50k steps), as in the paper.
    Appendix H's saturation study: --heads 4 --n 32 --sizes 550 --saturation.

    In parts of bounded time: --out FILE --max-minutes 8 (with --max-group to keep groups short) trains
    whole groups until the time is up and keeps them; the same command again trains the rest.
    """
    with shared.importing(options["quiet"]):  # the library, torch with it: seconds
        from ..io import refuse_inputs
        from ..memorize import MemorizeRequest, grid_axes, run_memorize_grid
        from ..progress import progress_enabled
        from ..render import render_memorize

    out, plot = options["out"], options["plot"]
    refuse_inputs({"--out": out, "--plot": plot}, [])  # --out is the resume file: read and written
    shared.prepare_outputs(out, plot, options["fmt"])
    if options["task"].value == "regression":
        shared.refuse_unused(ctx, ("classes",), "with --task regression: the labels are numbers in [0, 1]")
    else:
        shared.refuse_unused(ctx, ("tolerance",), "with --task classification: a class is right or wrong")
    if options["seeds"] is not None:
        shared.refuse_unused(ctx, ("seed",), "with --seeds: every point is trained for each seed listed")
    # The request's fields from the options of the same name; several values of heads, n or head_dim vary it.
    given = shared.library_values(options, {f.name for f in fields(MemorizeRequest)})
    axes = grid_axes(given["vary"], given["values"], given["preset"], given)
    request = MemorizeRequest(**(given | axes), progress=progress_enabled(options["quiet"]))
    grid = run_memorize_grid(request)
    if grid.reused:
        say(
            f"{grid.reused} of {len(grid.runs)} points were already in {grid.out} with the same configuration; "
            "not recomputed"
        )
    # --out is the grid's own results file (written point by point, for resuming): not emit's to write.
    shared.emit(
        options["fmt"],
        grid.meta(),
        grid.table_records(),
        document=grid.to_dict(),
        render=lambda: render_memorize(grid),
        out=out,
        write_out=False,
    )
