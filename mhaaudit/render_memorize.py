"""The report of ``memorize`` (:class:`mhaaudit.memorize.MemorizeGrid`): the trained grid, its fits
and its seed summary, laid out by attribute; :mod:`mhaaudit.render` prints it."""

from __future__ import annotations

from rich.table import Table

from .check_words import fraction_text
from .console import shown

__all__ = ["fit_table", "memorize_report", "memorize_table", "seed_summary_table"]


def _setting(run) -> str:
    return f"H={run.heads} n={run.n} d_h={run.head_dim}"


def memorize_table(grid) -> Table:
    """One row per trained point of the grid (with the saturation columns when counted)."""
    s, recipe = grid.settings, grid.settings.recipe
    metric = (
        "training accuracy"
        if recipe.task == "classification"
        else f"fraction with |error| < {recipe.tolerance}, this tool's criterion; the final loss is the MSE"
    )
    table = Table(
        title=f"Memorisation ({recipe.task}, {recipe.context} context, d = {s.d}; memorised = {metric})",
        title_justify="left",
    )
    sat = any(r.saturation is not None for r in grid.runs)
    if sat:
        table.caption = ">=2 sat.: examples with >=2 heads saturated; >=1 unsat.: with >=1 head unsaturated"
        table.caption_justify = "left"
    table.add_column("setting", justify="left", no_wrap=True)
    for col in ("size T", "memorised", "count", "epochs", "steps", "final loss", "time (s)"):
        table.add_column(col, justify="right")
    if sat:
        table.add_column(">=2 sat.", justify="right")
        table.add_column(">=1 unsat.", justify="right")
    for r in grid.runs:
        cells = [
            _setting(r),
            str(r.size),
            fraction_text(r.memorized, 3),
            str(r.memorized_count),
            str(r.epochs_run) + (" (early)" if r.stopped_early else ""),
            str(r.steps_run),
            f"{r.final_loss:.4g}" + (" (diverged)" if r.diverged else ""),
            f"{r.seconds:.1f}" + (" (file)" if r.reused else ""),
        ]
        if sat and r.saturation is None:
            cells += ["-", "-"]
        elif sat:
            cells += [fraction_text(r.saturation.frac_at_least_two_saturated, 3)]
            cells += [fraction_text(r.saturation.frac_some_unsaturated, 3)]
        table.add_row(*cells)
    return table


def fit_table(grid) -> Table:
    """The linear fits of the count memorised against H, and the sizes with none (``fit_gaps``), each with why."""
    ft = Table(
        title="Linear fit of the count memorised against H (points with memorised < 0.99, not diverged; "
        "a line through 3 or more values of H)",
        title_justify="left",
    )
    for col in ("size T", "slope (examples per head)", "intercept", "R^2", "points", "H values"):
        ft.add_column(col, justify="left" if col == "size T" else "right")
    for f in grid.fits:
        ft.add_row(
            "all" if f.size is None else str(f.size),
            f"{f.slope:.2f}",
            f"{f.intercept:.2f}",
            f"{f.r2:.4f}" if f.r2 == f.r2 else "undefined (equal counts)",
            str(f.points),
            ",".join(str(x) for x in f.xs),
        )
    if grid.fit_gaps:
        ft.caption = "none: no line; through 2 values of H a line fits exactly (R^2 = 1 by construction): no test"
        ft.caption_justify = "left"
    for g in grid.fit_gaps:
        ft.add_row(
            "all" if g.size is None else str(g.size),
            "-",
            "-",
            f"none: {g.reason}",
            str(g.points),
            ",".join(str(x) for x in g.xs) or "-",
        )
    return ft


def seed_summary_table(grid) -> Table:
    """The memorised fraction of each setting over the seeds: mean, standard deviation, range (each share as
    :func:`~.check_words.fraction_text` writes it: a lowest fraction below 1 never reads 1.000)."""
    t = Table(title=f"Over {len(grid.seeds)} seeds ({', '.join(map(str, grid.seeds))})", title_justify="left")
    for col in ("setting", "size T", "seeds", "mean", "std", "lowest", "highest", "mean count"):
        t.add_column(col, justify="left" if col == "setting" else "right")
    for m in grid.summary:
        t.add_row(
            _setting(m),
            str(m.size),
            str(m.seeds),
            fraction_text(m.mean, 3),
            "-" if m.std is None else f"{m.std:.3f}",
            fraction_text(m.low, 3),
            fraction_text(m.high, 3),
            f"{m.mean_count:.1f}",
        )
    return t


def memorize_report(grid) -> list:
    """``mhaaudit memorize``: the points, the fits against H, the saturation histograms, the files."""
    items: list = [memorize_table(grid), *(f"note: {note}" for note in grid.notes)]
    if len(grid.seeds) > 1 and grid.summary:
        items.append(seed_summary_table(grid))
    if grid.fits or grid.fit_gaps:
        items.append(fit_table(grid))
    for r in grid.runs:
        if r.saturation is not None:
            items.append(
                f"saturated heads per example, {_setting(r)} T={r.size}: "
                + ", ".join(f"{k}: {c}" for k, c in enumerate(r.saturation.histogram) if c)
            )
    for what, path in (("results", grid.out), ("plot", grid.plot)):
        if path:
            items.append(shown(f"{what}: {path}"))
    return items
