"""``mhaaudit check MODEL``: the full audit, in the layout of the paper's Table 1 / Table 3."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ._common import (
    DEFAULTS,
    BackendOpt,
    BatchSize,
    ContextLength,
    Data,
    FormatOpt,
    Split,
    Weights,
    Atol,
    Device,
    Format,
    Out,
    Plot,
    Rtol,
    Samples,
    Seed,
    Threshold,
    emit_data,
    prepare_outputs,
    validate_common,
    write_out,
)
from .app import app

FAIL_ON = ("general_position", "assumption_1", "assumption_2", "assumption_3", "any")


def parse_layers(spec: str | None) -> list[int] | None:
    """``"0-6"``, ``"0,1,4"`` or ``"0-2,6"`` -> sorted layer list."""
    from ..errors import InputError
    from ..ranges import parse_int_ranges

    if spec is None:
        return None
    out = parse_int_ranges(spec, "--layers")
    if not out:
        raise InputError(f"--layers {spec!r} names no layer")
    if min(out) < 0:
        raise InputError(f"--layers {spec!r}: layers start at 0 (the embedding output)")
    return sorted(out)


def check_feature_folder(folder: Path) -> None:
    """Fail before any work when ``--save-features`` cannot be written."""
    import os

    from ..errors import InputError

    parent = folder.parent if str(folder.parent) else Path(".")
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--save-features {folder}: exists and is not a folder")
    if not parent.exists():
        raise InputError(f"--save-features {folder}: folder {parent} does not exist")
    if not parent.is_dir():
        raise InputError(f"--save-features {folder}: {parent} is a file, not a folder")
    target = folder if folder.exists() else parent
    if not os.access(target, os.W_OK):
        raise InputError(f"--save-features {folder}: folder {target} is not writable")


def split_list(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    out = [v.strip() for item in values for v in item.split(",") if v.strip()]
    return out or None


@app.command("check")
def check_cmd(
    model: Annotated[str, typer.Argument(help="An alias (vit-base, bert-base, bert-large, gpt2, gpt2-large), a Hugging Face id, a local folder, or timm:<name>.")],
    variants: Annotated[Optional[list[str]], typer.Option("--variants", help="Columns: embedding, random-attention, random, trained (images; default all); random and/or trained with --layers or for text.")] = None,
    layer: Annotated[int, typer.Option("--layer", help="Depth of the random/trained image columns: output of block K.")] = 1,
    layers: Annotated[Optional[str], typer.Option("--layers", help="Audit several depths in one pass, e.g. 0-6 or 0,1 (0 = embedding output). Text default: 0,1.")] = None,
    backend: BackendOpt = None,
    weights: Weights = None,
    data: Data = None,
    split: Split = "train",
    limit: Annotated[int, typer.Option("--limit", help="Number of examples T.")] = 2000,
    batch_size: BatchSize = 32,
    context_length: ContextLength = None,
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
) -> None:
    """Audit a transformer: Assumptions 1-3 and General Position at each probe point."""
    from ..audit import audit
    from ..errors import InputError, OutputError
    from ..io import stamp
    from ..progress import progress_enabled

    validate_common(samples, threshold, rtol, atol)
    prepare_outputs(out, plot, fmt)
    fails = split_list(fail_on) or []
    for f in fails:
        if f not in FAIL_ON:
            raise InputError(f"--fail-on {f!r}: choose from {', '.join(FAIL_ON)}")
    if save_features is not None:
        check_feature_folder(save_features)
    layer_list = parse_layers(layers)
    if plot is not None and layer_list is None:
        sweep = True  # the plot is the sweep curve; with --layers it is the depth profile
    show = progress_enabled(fmt.value)
    result = audit(
        model, variants=split_list(variants), layer=layer, layers=layer_list, data=data, split=split,
        limit=limit, batch_size=batch_size, samples=samples, threshold=threshold, seed=seed, rtol=rtol, atol=atol,
        device=device, backend=backend.value if backend else None, weights=weights, context_length=context_length,
        query_index=query_index, sweep=sweep, progress=show, stop_when_decided=not all_draws,
        on_note=lambda m: print(f"Note: {m}", file=sys.stderr),
    )
    records = result.records()
    sweep_rows = result.sweep_rows()
    meta = stamp(command="check", model=model, model_info=result.info, data=result.data, skipped=result.skipped,
                 notes=result.notes, timings_s=result.timings, **result.settings)
    meta["columns"] = {c.probe.variant: {"status": c.status, "reason": c.reason, "layer": c.probe.layer,
                                         "weights": c.probe.init, "describe": c.probe.describe(),
                                         "weights_source": c.weights_source, "timings_s": c.timings,
                                         "sweep": c.sweep.summary() if c.sweep else None}
                       for c in result.columns}
    if save_features is not None:
        try:
            save_features.mkdir(exist_ok=True)
        except OSError as exc:
            raise OutputError(f"--save-features {save_features}: cannot create the folder ({exc.strerror or exc})") from exc
        for c in result.columns:
            if c.features is not None:
                c.features.save(save_features / c.probe.variant)
    write_out(out, meta, records, sweep_rows)
    if plot is not None and not any(c.status == "ok" for c in result.columns):
        # Nothing was measured (every column unavailable): say so rather than claim a plot.
        print(f"Note: no column could be audited, so no plot was written to {plot}", file=sys.stderr)
        plot = None
    if plot is not None and layer_list is not None:
        from ..plot import plot_depth

        plot_depth(result, plot)
    elif plot is not None:
        from ..plot import plot_sweeps

        curves = [(c.probe.variant, c.sweep) for c in result.columns if c.sweep is not None]
        plot_sweeps(curves, plot, n=result.info.get("n"), d=result.info.get("d"), title=f"Kruskal-rank sweep: {model}")
    if not emit_data(fmt, meta, records, sweep_rows):
        from ..report import render_audit

        render_audit(result, save_features=save_features, out=out, plot=plot)
    if fails:
        failed = {r["check"] for r in records if r.get("verdict") == "fails"}
        if ("any" in fails and failed) or failed.intersection(fails):
            raise typer.Exit(1)
