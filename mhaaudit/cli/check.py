"""``mhaaudit check MODEL``: the full audit, in the layout of the paper's Table 1 / Table 3."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_DEVICE,
    DEFAULT_LIMIT,
    DEFAULT_SAMPLES,
    DEFAULT_SEED,
    DEFAULT_SEEDS_VARY,
    DEFAULT_SPLIT,
    DEFAULT_THRESHOLD,
)
from ..stdio import say
from .given import named_list, refuse_data_options, refuse_seed, refuse_unused
from .library import run_requests, run_settings
from .names import flagged
from .options import (
    AllDraws,
    Atol,
    BackendOpt,
    BatchSize,
    ContextLength,
    ConvertRgb,
    Data,
    DataSeed,
    Device,
    Format,
    FormatOpt,
    ImageColumn,
    KeepDuplicates,
    ModelArg,
    Out,
    Plot,
    Quiet,
    Revision,
    Rtol,
    Samples,
    Seed,
    SeedsOpt,
    Split,
    TextColumn,
    Threshold,
    TrustRemoteCode,
    Vary,
    VaryOpt,
    Weights,
    WeightsSeed,
    integer_option,
    named_path,
)
from .output import CommandClock, emit_result, emit_seeds, prepare_outputs
from .series import check_series, is_series


def check(
    ctx: typer.Context,
    model: ModelArg,
    variants: Annotated[
        list[str] | None,
        typer.Option(
            "--variants",
            help="Columns: embedding, random-attention, random, trained (images; default all); random and/or "
            "trained with --layers or for text.",
        ),
    ] = None,
    layer: Annotated[
        int | None,
        integer_option(
            "--layer",
            help="Depth K of the random and trained image columns: the tokens read are the output of block K "
            "(default 1 = after the first block; --layers 0 reads the embedding output).",
            show_default=False,
        ),
    ] = None,
    layers: Annotated[
        str | None,
        typer.Option(
            "--layers",
            help="Audit several depths in one pass, e.g. 0-6 or 0,1: the output of each block K (0 = embedding "
            "output). Text default: 0,1.",
        ),
    ] = None,
    backend: BackendOpt = None,
    weights: Weights = None,
    checkpoints: Annotated[
        str | None,
        typer.Option(
            "--checkpoints",
            help="Audit a series of checkpoints, each as --weights would: a comma list of folders or weights "
            "files, or a glob ('runs/ckpt-*', ordered by the step number in each name). A comma list in "
            "--revision audits hub revisions the same way.",
            show_default=False,
        ),
    ] = None,
    data: Data = None,
    split: Split = DEFAULT_SPLIT,
    text_column: TextColumn = None,
    image_column: ImageColumn = None,
    convert_rgb: ConvertRgb = False,
    limit: Annotated[int, integer_option("--limit", help="Number of examples T.")] = DEFAULT_LIMIT,
    batch_size: BatchSize = str(DEFAULT_BATCH_SIZE),
    keep_duplicates: KeepDuplicates = False,
    context_length: ContextLength = None,
    revision: Revision = None,
    trust_remote_code: TrustRemoteCode = False,
    query_index: Annotated[
        int | None,
        integer_option(
            "--query-index", help="Token used as the query (default: 0 = [CLS] for encoders, last for decoders)."
        ),
    ] = None,
    samples: Samples = DEFAULT_SAMPLES,
    threshold: Threshold = DEFAULT_THRESHOLD,
    seed: Seed = DEFAULT_SEED,
    seeds: SeedsOpt = None,
    vary: VaryOpt = Vary[DEFAULT_SEEDS_VARY],
    weights_seed: WeightsSeed = None,
    data_seed: DataSeed = None,
    rtol: Rtol = None,
    atol: Atol = None,
    device: Device = DEFAULT_DEVICE,
    sweep: Annotated[
        bool, typer.Option("--sweep", help="Also compute the Kruskal-rank curve (Figure 1) of each column.")
    ] = False,
    all_draws: AllDraws = False,
    fmt: FormatOpt = Format.table,
    out: Out = None,
    plot: Plot = None,
    save_features: Annotated[
        Path | None,
        typer.Option(
            "--save-features",
            parser=named_path,
            metavar="<path>",
            help="Write each column's reduced features here, for mhaaudit kruskal.",
        ),
    ] = None,
    fail_on: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-on",
            help="Exit 1 when this check fails in any column: general_position, assumption_1, assumption_2, "
            "assumption_3 or any.",
        ),
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Audit a transformer: Assumptions 1-3 and General Position at each probe point."""
    series = is_series(checkpoints, revision)  # --checkpoints, or several revisions: a series of checkpoints
    clock = CommandClock()
    with clock.importing(quiet):  # the library, torch with it: seconds
        from ..auditing import audit
        from ..render import render_audit
        from ..validate import int_ranges

    settings = run_settings(
        device=device,
        samples=samples,
        threshold=threshold,
        seed=seed,
        weights_seed=weights_seed,
        data_seed=data_seed,
        rtol=rtol,
        atol=atol,
        stop_when_decided=not all_draws,
        quiet=quiet,
    )
    refuse_data_options(ctx, data)
    refuse_seed(ctx, seeds)
    if series:
        refuse_unused(ctx, ("weights",), "with a series: each checkpoint gives the trained weights")
        refuse_unused(ctx, ("save_features",), "with a series: a series keeps no features")
    elif seeds is not None:
        refuse_unused(
            ctx,
            ("save_features", "plot"),
            "with --seeds: they write one run's features or curves; run that seed alone with --seed",
        )
    fails = _fail_checks(fail_on)
    columns = named_list(variants, "--variants", "columns")
    if not series:  # a series checks its outputs once its checkpoints are known
        _check_output_paths(out, plot, save_features, [model, weights, data])
        prepare_outputs(out, plot, fmt)
    layer_list = None if layers is None else int_ranges(layers, "--layers", what="layers", minimum=0)
    req = run_requests(
        model,
        data,
        settings,
        backend=backend,
        weights=weights,
        revision=revision,
        trust_remote_code=trust_remote_code,
        context_length=context_length,
        query_index=query_index,
        split=split,
        limit=limit,
        batch_size=batch_size,
        keep_duplicates=keep_duplicates,
        text_column=text_column,
        image_column=image_column,
        convert_rgb=convert_rgb,
    )
    audited = {
        "variants": columns,
        "layer": layer,
        "layers": layer_list,
        "seeds": seeds,
        "vary": vary.value,
    }
    if series:
        sweeps = sweep or plot is not None  # the figure draws the Kruskal-rank estimate too
        records = check_series(model, data, req, checkpoints, audited | {"sweep": sweeps}, fmt=fmt, out=out, plot=plot)
        _fail_on(fails, records)
        return
    result = audit(
        req.model,
        data=req.data,
        settings=req.settings,
        sweep=sweep or (plot is not None and layer_list is None),  # the sweep curve, or the depth profile
        on_note=lambda m: say(f"Note: {flagged(m)}"),
        **audited,
    )
    if seeds is None:
        clock.render_begins()
        plot = _save_features_and_plot(result, save_features, plot)
        emit_result(
            fmt,
            result,
            out,
            lambda: render_audit(result, save_features=save_features, out=out, plot=plot),
            clock=clock,
        )
    else:
        emit_seeds(fmt, result, out)
    _fail_on(fails, result.records())


def _fail_checks(fail_on: list[str] | None) -> list[str]:
    """The checks named by --fail-on (comma lists and repeats alike), each a registered check or any."""
    from ..checks import REGISTRY
    from ..validate import choice

    return [choice("--fail-on", f, (*REGISTRY, "any")) for f in named_list(fail_on, "--fail-on", "check") or []]


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
        typer.Exit: with code 1 when a check named in ``fails`` (or any check, for ``any``) fails in ``records``:
            its verdict (the estimate) is ``fails``, or its exact status is (a proven failure, such as a
            dependent subset found, fails the check even where the estimate holds).
    """
    failed = {r["check"] for r in records if "fails" in (r.get("verdict"), r.get("exact_status"))}
    if ("any" in fails and failed) or failed.intersection(fails):
        raise typer.Exit(1)
