"""``mhaaudit check MODEL --checkpoints SPEC`` (or ``--revision A,B,C``): a series of checkpoints audited in one run.

``check`` hands a series here: the same options, checked the same way, with the series' own
output (a table per trained column over the checkpoints, the changes, the trend figure). The
``--out`` file is the series' results file, rewritten as it runs so that an interrupted series
resumes from the checkpoints done.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import typer

from ..stdio import say
from . import options as shared


def is_series(options: Mapping[str, Any]) -> bool:
    """Whether ``check``'s options ask for a series: ``--checkpoints``, or a comma list in ``--revision``."""
    return options.get("checkpoints") is not None or "," in (options.get("revision") or "")


def check_series(
    ctx: typer.Context, model: str, options: Mapping[str, Any], fail_checks: Callable[[Any], list[str]]
) -> tuple[list[str], list[dict]]:
    """Audit the series ``--checkpoints`` (or ``--revision A,B,C``) names and write its outputs;
    ``fail_checks`` reads ``--fail-on`` (before any work).

    Returns:
        The checks ``--fail-on`` names, and the series' records (``check`` exits 1 when one of those fails).
    """
    with shared.importing(options["quiet"]):  # the library, torch with it: seconds
        from rich.markup import escape

        from ..io import refuse_inputs
        from ..render import print_report
        from ..series import audit_series, plot_series, resolve_series, series_revisions
        from ..validate import int_ranges, split_list

    fmt, out, plot, data, seeds = options["fmt"], options["out"], options["plot"], options["data"], options["seeds"]
    settings = shared.run_settings(options, stop_when_decided=not options["all_draws"])
    shared.refuse_data_options(ctx, data)
    shared.refuse_unused(
        ctx,
        ("save_features", "weights"),
        "with a series: each checkpoint gives the trained weights, and a series keeps no features",
    )
    fails = fail_checks(options["fail_on"])
    layers = options["layers"]
    layer_list = None if layers is None else int_ranges(layers, "--layers", what="layers", minimum=0)
    req = shared.run_requests(model, data, settings, options)
    revisions = series_revisions(req.model.revision)
    series = resolve_series(options["checkpoints"], revisions, req.model)  # checked again by the library: cheap
    refuse_inputs({"--out": out, "--plot": plot}, [model, data, *series.paths])
    shared.prepare_outputs(out, plot, fmt)
    result = audit_series(
        req.model,
        checkpoints=options["checkpoints"],
        data=req.data,
        settings=req.settings,
        variants=split_list(options["variants"]),
        layer=options["layer"],
        layers=layer_list,
        sweep=options["sweep"] or plot is not None,  # the figure draws the Kruskal-rank estimate too
        on_note=lambda m: say(f"Note: {m}"),
        seeds=seeds,
        vary=options["vary"].value,
        out=out,
    )
    if plot is not None and plot_series(result, plot) is None:
        say(f"Note: no checkpoint could be audited, so no plot was written to {plot}")
        plot = None
    written = [str(p) for p in (out, plot) if p is not None]

    def render() -> None:
        print_report([*result.renderables(), *([escape(f"Wrote {', '.join(written)}")] if written else [])])

    # --out is the series' own results file (rewritten as it runs, for resuming): not emit's to write.
    shared.emit(
        fmt, result.meta(), result.records(), sweep=result.sweep_rows() or None, out=out, render=render, write_out=False
    )
    return fails, result.records()
