"""``mhaaudit capacity MODEL``: the Theorem 1 bound from the audit, and a memorisation certificate."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from ..defaults import (
    CAPACITY_ATTENTION,
    DEFAULT_ATTENTION,
    DEFAULT_BATCH_SIZE,
    DEFAULT_DEVICE,
    DEFAULT_LIMIT,
    DEFAULT_SAMPLES,
    DEFAULT_SEED,
    DEFAULT_SEEDS_VARY,
    DEFAULT_SPLIT,
    DEFAULT_THRESHOLD,
)
from .given import deprecation_line, named_list, refuse_data_options, refuse_seed, refuse_unused, renamed
from .library import run_requests, run_settings
from .names import with_flags
from .options import (
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
    output_option,
)
from .output import CommandClock, emit_result, emit_seeds, prepare_outputs

# The key/query weights of Z, each member named as its value, from the library's tuple of them.
Attention = Enum("Attention", {v: v for v in CAPACITY_ATTENTION}, type=str)  # type: ignore[misc]

_READS = "the attention of block K builds Z and the tokens read are its input, the output of block K-1"
LAYER_DEPRECATED = deprecation_line("--layer", "--block", f"same meaning: {_READS}")


def capacity(
    ctx: typer.Context,
    model: ModelArg,
    heads: Annotated[
        str | None,
        typer.Option(
            "--heads",
            help="Certificate with the first h heads for each h: 1-12, 3 or 1,2,4 (default: all heads of the block).",
        ),
    ] = None,
    attention: Annotated[
        Attention,
        typer.Option(
            "--attention",
            help="Key/query weights of Z: the model's own attention block, or random (Xavier, seeded).",
        ),
    ] = Attention[DEFAULT_ATTENTION],
    shared_context: Annotated[
        bool,
        typer.Option(
            "--shared-context",
            help="Proposition 2: every example uses the context of example 0 with its own query; checks rank(Z) <= "
            "H (n - 1) + 1.",
        ),
    ] = False,
    from_path: Annotated[
        Path | None,
        typer.Option(
            "--from",
            parser=named_path,
            metavar="<path>",
            help="Read the Assumption 1/2 verdicts from a parquet file written by 'mhaaudit check --out' instead "
            "of auditing.",
        ),
    ] = None,
    variants: Annotated[
        list[str] | None,
        typer.Option(
            "--variants",
            help="Columns: random and/or trained (default both; trained reads the model's own weights: a local "
            "folder's, the hub's or its cache's, or --weights).",
        ),
    ] = None,
    weights: Weights = None,
    block: Annotated[
        int | None,
        integer_option(
            "--block",
            help="Attention block K whose heads build Z (default 2: the paper applies Theorem 1 to the second "
            "attention layer, whose input satisfies Assumptions 1 and 2). The tokens read, audited and "
            "certified, are its input: the output of block K-1 (for K = 1, the embedding output).",
        ),
    ] = None,
    layer: Annotated[
        int | None,
        integer_option(
            "--layer",
            help="Deprecated alias of --block (same meaning: the tokens read are the input of block K, the output "
            "of block K-1).",
        ),
    ] = None,
    backend: BackendOpt = None,
    data: Data = None,
    split: Split = DEFAULT_SPLIT,
    limit: Annotated[int, integer_option("--limit", help="Number of examples T (rows of Z).")] = DEFAULT_LIMIT,
    batch_size: BatchSize = str(DEFAULT_BATCH_SIZE),
    keep_duplicates: KeepDuplicates = False,
    text_column: TextColumn = None,
    image_column: ImageColumn = None,
    convert_rgb: ConvertRgb = False,
    context_length: ContextLength = None,
    revision: Revision = None,
    trust_remote_code: TrustRemoteCode = False,
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
    fmt: FormatOpt = Format.table,
    out: Out = None,
    plot: Annotated[
        Path | None,
        output_option(
            "--plot",
            help="Draw rank(Z) against the number of heads, with the bound lines, to this .png/.pdf/.svg file.",
        ),
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Memorisation capacity: the Theorem 1 bound from the audited assumptions, and a certificate.

    The bound (reconstructed from the paper's proof) is H (min(n, d_h) - 1) + 1
    when Assumptions 1 and 2 hold on the tokens the attention block sees,
    H (min(k, d_h) - 1) + 1 (Remark 1) with an estimated Kruskal rank k < n,
    and nothing when Assumption 2 fails or n >= d. The certificate is the rank r
    of the matrix Z of per-head convex combinations: one attention layer with
    those key/query weights memorises r of the examples for any labels
    (value/output weights solved for random labels; the residual is printed).

    --block K reads the input of block K (the output of block K-1), where
    check --layer K reads the output of block K: capacity --block K+1 certifies
    the tokens check --layer K audits.
    """
    clock = CommandClock()
    with clock.importing(quiet):  # the library, torch with it: seconds
        from ..capacity import capacity_audit
        from ..io import refuse_inputs
        from ..plot import plot_capacity
        from ..render import capacity_report, print_report
        from ..validate import integer

    settings = run_settings(
        device=device,
        samples=samples,
        threshold=threshold,
        seed=seed,
        weights_seed=weights_seed,
        data_seed=data_seed,
        rtol=rtol,
        atol=atol,
        stop_when_decided=True,
        quiet=quiet,
    )
    refuse_seed(ctx, seeds)
    if seeds is not None:
        refuse_unused(ctx, ("plot",), "with --seeds: it draws one run's ranks; run that seed alone with --seed")
    refuse_inputs({"--out": out, "--plot": plot}, [model, weights, data, from_path])
    prepare_outputs(out, plot, fmt)
    refuse_data_options(ctx, data)
    columns = named_list(variants, "--variants", "columns")
    if from_path is not None:
        refuse_unused(ctx, ("samples", "threshold"), "with --from: Assumption 1 is read from the file, not sampled")
    K = renamed(
        "--layer",
        None if layer is None else integer("--layer", layer),
        "--block",
        block,
        note=f"same meaning: {_READS}",
    )
    req = run_requests(
        model,
        data,
        settings,
        backend=backend,
        weights=weights,
        revision=revision,
        trust_remote_code=trust_remote_code,
        context_length=context_length,
        split=split,
        limit=limit,
        batch_size=batch_size,
        keep_duplicates=keep_duplicates,
        text_column=text_column,
        image_column=image_column,
        convert_rgb=convert_rgb,
    )
    result = capacity_audit(
        req.model,
        data=req.data,
        settings=req.settings,
        block=K,
        heads=heads,
        attention=attention.value,
        shared_context=shared_context,
        from_path=from_path,
        variants=columns,
        seeds=seeds,
        vary=vary.value,
    )
    if seeds is not None:
        emit_seeds(fmt, result, out)
        return
    clock.render_begins()
    if plot is not None:
        plot_capacity(result, plot)

    def render() -> None:
        print_report(with_flags(capacity_report(result, out=out, plot=plot)))

    emit_result(fmt, result, out, render, sweep=False, clock=clock)
