"""``mhaaudit check MODEL``: the full audit, in the layout of the paper's Table 1 / Table 3."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from .. import phases
from ..stdio import say
from . import options as shared
from .flags import CheckOptions
from .series import check_series, is_series

if TYPE_CHECKING:  # the options, typed for mypy
    from typing_extensions import Unpack


@shared.command_options(
    CheckOptions,
    "model variants layer layers backend weights checkpoints data split text_column image_column convert_rgb limit"
    " batch_size keep_duplicates context_length revision trust_remote_code query_index samples threshold seed seeds"
    " vary weights_seed data_seed rtol atol device sweep all_draws fmt out plot save_features fail_on quiet",
)
def check(ctx: typer.Context, model: shared.ModelArg, **options: Unpack[CheckOptions]) -> None:
    """Audit a transformer: Assumptions 1-3 and General Position at each probe point."""
    if is_series(options):  # --checkpoints, or several revisions: a series of checkpoints
        _fail_on(*check_series(ctx, model, options, _fail_checks))
        return
    begun = time.perf_counter()
    startup = phases.startup_seconds()  # the interpreter and the command line, when this process runs it
    with shared.importing(options["quiet"]):  # the library, torch with it: seconds
        from ..auditing import audit
        from ..render import render_audit
        from ..validate import int_ranges, split_list
    imported = time.perf_counter()

    fmt, out, plot, data, seeds = options["fmt"], options["out"], options["plot"], options["data"], options["seeds"]
    save_features, layers = options["save_features"], options["layers"]
    settings = shared.run_settings(options, stop_when_decided=not options["all_draws"])
    shared.refuse_data_options(ctx, data)
    if seeds is not None:
        shared.refuse_unused(
            ctx,
            ("save_features", "plot"),
            "with --seeds: they write one run's features or curves; run that seed alone with --seed",
        )
    fails = _fail_checks(options["fail_on"])
    _check_output_paths(out, plot, save_features, [model, options["weights"], data])
    shared.prepare_outputs(out, plot, fmt)
    layer_list = None if layers is None else int_ranges(layers, "--layers", what="layers", minimum=0)
    sweep = options["sweep"] or (plot is not None and layer_list is None)  # the sweep curve, or the depth profile
    req = shared.run_requests(model, data, settings, options)
    result = audit(
        req.model,
        data=req.data,
        settings=req.settings,
        variants=split_list(options["variants"]),
        layer=options["layer"],
        layers=layer_list,
        sweep=sweep,
        on_note=lambda m: say(f"Note: {m}"),
        seeds=seeds,
        vary=options["vary"].value,
    )
    if seeds is None:
        rendering = time.perf_counter()
        plot = _save_features_and_plot(result, save_features, plot)
        shared.emit_result(
            fmt,
            result,
            out,
            lambda: render_audit(result, save_features=save_features, out=out, plot=plot),
            times=shared.CommandTimes(startup, begun, imported, rendering),
        )
    else:
        shared.emit_seeds(fmt, result, out)
    _fail_on(fails, result.records())


def _fail_checks(fail_on: list[str] | None) -> list[str]:
    """The checks named by --fail-on (comma lists and repeats alike), each a registered check or any."""
    from ..checks import REGISTRY
    from ..validate import choice, split_list

    return [choice("--fail-on", f, (*REGISTRY, "any")) for f in split_list(fail_on) or []]


def _check_output_paths(out: Path | None, plot: Path | None, save_features: Path | None, inputs: list) -> None:
    """Before any work: the --save-features folder is writable, and no output path is one of the inputs."""
    from ..auditing import check_features_folder
    from ..io import refuse_inputs

    refuse_inputs({"--out": out, "--plot": plot, "--save-features": save_features}, inputs)  # before any probe
    if save_features is not None:
        check_features_folder(save_features, inputs)


def _save_features_and_plot(result, save_features: Path | None, plot: Path | None) -> Path | None:
    """Write the features (--save-features) and the figure (--plot) of one audit; the figure written, or None."""
    from ..plot import plot_audit

    if save_features is not None:
        result.save_features(save_features)
    if plot is not None and plot_audit(result, plot) is None:
        # Nothing was measured (every column unavailable): say so rather than claim a plot.
        say(f"Note: no column could be audited, so no plot was written to {plot}")
        return None
    return plot


def _fail_on(fails: list[str], records: list[dict]) -> None:
    """Exit 1 when a check named by ``--fail-on`` fails (with --seeds: in any seed).

    Raises:
        typer.Exit: with code 1 when a check named in ``fails`` (or any check, for ``any``) has the verdict
            ``fails`` in ``records``.
    """
    failed = {r["check"] for r in records if r.get("verdict") == "fails"}
    if ("any" in fails and failed) or failed.intersection(fails):
        raise typer.Exit(1)
