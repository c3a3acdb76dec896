"""``mhaaudit check MODEL``: the full audit, in the layout of the paper's Table 1 / Table 3."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .options import (
    DEFAULTS,
    Atol,
    BackendOpt,
    BatchSize,
    ContextLength,
    ConvertRgb,
    Data,
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
    Split,
    TextColumn,
    Threshold,
    TrustRemoteCode,
    Weights,
    emit,
    importing,
    prepare_outputs,
    refuse_data_options,
)

FAIL_ON = ("general_position", "assumption_1", "assumption_2", "assumption_3", "any")


def check(
    ctx: typer.Context,
    model: ModelArg,
    variants: Annotated[Optional[list[str]], typer.Option("--variants", help="Columns: embedding, random-attention, random, trained (images; default all); random and/or trained with --layers or for text.")] = None,
    layer: Annotated[Optional[int], typer.Option("--layer", help="Depth K of the random and trained image columns: the tokens read are the output of block K (default 1 = after the first block; --layers 0 reads the embedding output).", show_default=False)] = None,
    layers: Annotated[Optional[str], typer.Option("--layers", help="Audit several depths in one pass, e.g. 0-6 or 0,1: the output of each block K (0 = embedding output). Text default: 0,1.")] = None,
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
    query_index: Annotated[Optional[int], typer.Option("--query-index", help="Token used as the query (default: 0 = [CLS] for encoders, last for decoders).")] = None,
    samples: Samples = DEFAULTS["samples"],
    threshold: Threshold = DEFAULTS["threshold"],
    seed: Seed = DEFAULTS["seed"],
    rtol: Rtol = None,
    atol: Atol = None,
    device: Device = DEFAULTS["device"],
    sweep: Annotated[bool, typer.Option("--sweep", help="Also compute the Kruskal-rank curve (Figure 1) of each column.")] = False,
    all_draws: Annotated[bool, typer.Option("--all-draws", help="Always make every draw (by default a test stops once its verdict can no longer change).")] = False,
    fmt: FormatOpt = Format.table,
    out: Out = None,
    plot: Plot = None,
    save_features: Annotated[Optional[Path], typer.Option("--save-features", help="Write each column's reduced features here, for mhaaudit kruskal.")] = None,
    fail_on: Annotated[Optional[list[str]], typer.Option("--fail-on", help="Exit 1 when this check fails in any column: general_position, assumption_1, assumption_2, assumption_3 or any.")] = None,
    quiet: Quiet = False,
) -> None:
    """Audit a transformer: Assumptions 1-3 and General Position at each probe point."""
    with importing(quiet):  # the library, torch with it: seconds
        from .. import validate
        from ..auditing import audit
        from ..io import check_folder_writable, refuse_inputs
        from ..progress import progress_enabled
        from ..render import render_audit
        from ..settings import Settings

    settings = Settings.resolve(device=device, samples=samples, threshold=threshold, seed=seed, rtol=rtol, atol=atol)
    prepare_outputs(out, plot, fmt)
    refuse_data_options(ctx, data)
    fails = [validate.choice("--fail-on", f, FAIL_ON) for f in validate.split_list(fail_on) or []]
    if save_features is not None:
        check_folder_writable(save_features, "--save-features")
        refuse_planted_columns(save_features, [model, weights, data])
    refuse_inputs({"--out": out, "--plot": plot, "--save-features": save_features}, [model, weights, data])
    layer_list = None if layers is None else validate.int_ranges(layers, "--layers", what="layers", minimum=0)
    if plot is not None and layer_list is None:
        sweep = True  # the plot is the sweep curve; with --layers it is the depth profile
    result = audit(
        model, variants=validate.split_list(variants), layer=layer, layers=layer_list, data=data, split=split,
        limit=limit, batch_size=batch_size, samples=settings.samples, threshold=settings.threshold, seed=settings.seed,
        rtol=settings.rtol, atol=settings.atol, device=settings.device, backend=backend.value if backend else None,
        weights=weights, context_length=context_length, query_index=query_index, sweep=sweep,
        progress=progress_enabled(quiet), stop_when_decided=not all_draws, keep_duplicates=keep_duplicates,
        on_note=lambda m: print(f"Note: {m}", file=sys.stderr), revision=revision, trust_remote_code=trust_remote_code,
        text_column=text_column, image_column=image_column, convert_rgb=convert_rgb,
    )
    if save_features is not None:
        _save_features(result, save_features)
    plot = _plot(result, plot, depth=layer_list is not None, model=model)
    records = result.records()
    emit(fmt, result.meta(), records, sweep=result.sweep_rows(), out=out,
         render=lambda: render_audit(result, save_features=save_features, out=out, plot=plot))
    failed = {r["check"] for r in records if r.get("verdict") == "fails"}
    if ("any" in fails and failed) or failed.intersection(fails):
        raise typer.Exit(1)


def _save_features(result, folder: Path) -> None:
    """One subfolder per column, staged with the run's other outputs (all are written, or none)."""
    from ..errors import OutputError
    from ..io import make_output_folder

    try:
        make_output_folder(folder)
    except OutputError:
        raise
    except OSError as exc:
        raise OutputError(f"--save-features {folder}: cannot create the folder ({exc.strerror or exc})") from exc
    for c in result.columns:
        if c.features is not None:
            c.features.save(folder / c.probe.variant)


COLUMN_FOLDER = r"(embedding|random-attention|random|trained)(-L\d+)?"  # the subfolders --save-features writes


def refuse_planted_columns(folder: Path, inputs: list) -> None:
    """Before any work: where a column's subfolder of ``--save-features`` goes, a symbolic link (the
    features would be written wherever it points) or an input of the run is refused."""
    import re

    from ..errors import OutputError
    from ..io import real_path

    if folder.is_dir():
        for entry in sorted(folder.iterdir()):
            if entry.is_symlink() and re.fullmatch(COLUMN_FOLDER, entry.name):
                raise OutputError(f"--save-features {folder}: {entry.name} is a symbolic link (to {os.readlink(entry)}); "
                                  "the features are written into real folders only: remove it or choose another folder")
    top = real_path(folder)
    for i in inputs:
        if i is None or not os.path.lexists(os.path.expanduser(str(i))):
            continue
        inside = real_path(i)
        if top in inside.parents and re.fullmatch(COLUMN_FOLDER, inside.relative_to(top).parts[0]):
            raise OutputError(f"--save-features {folder}: the input {i} lies where the features would be written; "
                              "write them elsewhere")


def _plot(result, plot: Path | None, *, depth: bool, model: str) -> Path | None:
    """Draw the depth profile (``--layers``) or the sweep curves; the path written, or None."""
    if plot is None:
        return None
    if not any(c.status == "ok" for c in result.columns):
        # Nothing was measured (every column unavailable): say so rather than claim a plot.
        print(f"Note: no column could be audited, so no plot was written to {plot}", file=sys.stderr)
        return None
    if depth:
        from ..plot import plot_depth

        plot_depth(result, plot)
    else:
        from ..plot import plot_sweeps

        curves = [(c.probe.variant, c.sweep) for c in result.columns if c.sweep is not None]
        plot_sweeps(curves, plot, n=result.info.get("n"), d=result.info.get("d"), title=f"Kruskal-rank sweep: {model}")
    return plot
