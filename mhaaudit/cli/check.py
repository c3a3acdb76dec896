"""``mhaaudit check MODEL``: the full audit, in the layout of the paper's Table 1 / Table 3."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from .options import (
    DEFAULTS,
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
    emit,
    importing,
    prepare_outputs,
    refuse_data_options,
    refuse_unused,
)


def check(
    ctx: typer.Context,
    model: ModelArg,
    variants: Annotated[
        list[str] | None,
        typer.Option(
            "--variants",
            help="Columns: embedding, random-attention, random, trained (images; default all); random and/or trained with --layers or for text.",
        ),
    ] = None,
    layer: Annotated[
        int | None,
        typer.Option(
            "--layer",
            help="Depth K of the random and trained image columns: the tokens read are the output of block K (default 1 = after the first block; --layers 0 reads the embedding output).",
            show_default=False,
        ),
    ] = None,
    layers: Annotated[
        str | None,
        typer.Option(
            "--layers",
            help="Audit several depths in one pass, e.g. 0-6 or 0,1: the output of each block K (0 = embedding output). Text default: 0,1.",
        ),
    ] = None,
    backend: BackendOpt = None,
    weights: Weights = None,
    data: Data = None,
    split: Split = "train",
    text_column: TextColumn = None,
    image_column: ImageColumn = None,
    convert_rgb: ConvertRgb = False,
    limit: Annotated[int, typer.Option("--limit", help="Number of examples T.")] = 2000,
    batch_size: BatchSize = "32",
    keep_duplicates: KeepDuplicates = False,
    context_length: ContextLength = None,
    revision: Revision = None,
    trust_remote_code: TrustRemoteCode = False,
    query_index: Annotated[
        int | None,
        typer.Option(
            "--query-index", help="Token used as the query (default: 0 = [CLS] for encoders, last for decoders)."
        ),
    ] = None,
    samples: Samples = DEFAULTS["samples"],
    threshold: Threshold = DEFAULTS["threshold"],
    seed: Seed = DEFAULTS["seed"],
    seeds: SeedsOpt = None,
    vary: VaryOpt = Vary.both,
    weights_seed: WeightsSeed = None,
    data_seed: DataSeed = None,
    rtol: Rtol = None,
    atol: Atol = None,
    device: Device = DEFAULTS["device"],
    sweep: Annotated[
        bool, typer.Option("--sweep", help="Also compute the Kruskal-rank curve (Figure 1) of each column.")
    ] = False,
    all_draws: Annotated[
        bool,
        typer.Option(
            "--all-draws",
            help="Always make every draw (by default a test stops once its verdict can no longer change).",
        ),
    ] = False,
    fmt: FormatOpt = Format.table,
    out: Out = None,
    plot: Plot = None,
    save_features: Annotated[
        Path | None,
        typer.Option("--save-features", help="Write each column's reduced features here, for mhaaudit kruskal."),
    ] = None,
    fail_on: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-on",
            help="Exit 1 when this check fails in any column: general_position, assumption_1, assumption_2, assumption_3 or any.",
        ),
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Audit a transformer: Assumptions 1-3 and General Position at each probe point."""
    with importing(quiet):  # the library, torch with it: seconds
        from .. import validate
        from ..auditing import audit, check_features_folder
        from ..checks import REGISTRY
        from ..io import refuse_inputs
        from ..plot import plot_audit
        from ..progress import progress_enabled
        from ..render import render_audit
        from ..request import build_requests
        from ..settings import Settings

    settings = Settings.resolve(
        device=device,
        samples=samples,
        threshold=threshold,
        seed=seed,
        rtol=rtol,
        atol=atol,
        stop_when_decided=not all_draws,
        progress=progress_enabled(quiet),
        weights_seed=weights_seed,
        data_seed=data_seed,
    )
    prepare_outputs(out, plot, fmt)
    refuse_data_options(ctx, data)
    if seeds is not None:
        refuse_unused(
            ctx,
            ("save_features", "plot"),
            "with --seeds: they write one run's features or curves; run that seed alone with --seed",
        )
    fails = [validate.choice("--fail-on", f, (*REGISTRY, "any")) for f in validate.split_list(fail_on) or []]
    if save_features is not None:
        check_features_folder(save_features, [model, weights, data])
    refuse_inputs({"--out": out, "--plot": plot, "--save-features": save_features}, [model, weights, data])
    layer_list = None if layers is None else validate.int_ranges(layers, "--layers", what="layers", minimum=0)
    if plot is not None and layer_list is None:
        sweep = True  # the plot is the sweep curve; with --layers it is the depth profile
    request, examples, settings = build_requests(
        model,
        data,
        settings,
        dict(
            backend=backend.value if backend else None,
            weights=weights,
            context_length=context_length,
            query_index=query_index,
            revision=revision,
            trust_remote_code=trust_remote_code,
            split=split,
            limit=limit,
            batch_size=batch_size,
            keep_duplicates=keep_duplicates,
            text_column=text_column,
            image_column=image_column,
            convert_rgb=convert_rgb,
        ),
    )
    result = audit(
        request,
        data=examples,
        settings=settings,
        variants=validate.split_list(variants),
        layer=layer,
        layers=layer_list,
        sweep=sweep,
        on_note=lambda m: print(f"Note: {m}", file=sys.stderr),
        seeds=seeds,
        vary=vary.value,
    )
    if seeds is not None:
        from ..render_seeds import render_seeds

        records = result.records()
        emit(
            fmt, result.meta(), records, sweep=result.sweep_rows() or None, out=out, render=lambda: render_seeds(result)
        )
        _fail_on(fails, records)
        return
    if save_features is not None:
        result.save_features(save_features)
    if plot is not None and plot_audit(result, plot) is None:
        # Nothing was measured (every column unavailable): say so rather than claim a plot.
        print(f"Note: no column could be audited, so no plot was written to {plot}", file=sys.stderr)
        plot = None
    records = result.records()
    emit(
        fmt,
        result.meta(),
        records,
        sweep=result.sweep_rows(),
        out=out,
        render=lambda: render_audit(result, save_features=save_features, out=out, plot=plot),
    )
    _fail_on(fails, records)


def _fail_on(fails: list[str], records: list[dict]) -> None:
    """Exit 1 when a check named by ``--fail-on`` fails (with --seeds: in any seed)."""
    failed = {r["check"] for r in records if r.get("verdict") == "fails"}
    if ("any" in fails and failed) or failed.intersection(fails):
        raise typer.Exit(1)
