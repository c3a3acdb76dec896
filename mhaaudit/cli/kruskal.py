"""``mhaaudit kruskal``: the Kruskal-rank estimator on a matrix, saved features or a model."""

from __future__ import annotations

from enum import Enum
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
    KRUSKAL_VECTORS,
)
from ..errors import Message
from .given import refuse_data_options, refuse_seed, refuse_unused, renamed
from .library import run_settings, value_of
from .names import flagged
from .options import (
    AllDraws,
    Atol,
    BackendOpt,
    ConvertRgb,
    DataSeed,
    Device,
    Format,
    FormatOpt,
    ImageColumn,
    Out,
    Plot,
    Quiet,
    Revision,
    Rtol,
    Samples,
    Seed,
    TextColumn,
    Threshold,
    TrustRemoteCode,
    Vary,
    VaryOpt,
    WeightsSeed,
    integer_option,
    named_path,
)
from .output import CommandClock, emit_result, emit_seeds, prepare_outputs

# The vectors estimated, each member named as its value, from the library's tuple of them.
Vectors = Enum("Vectors", {v: v for v in KRUSKAL_VECTORS}, type=str)  # type: ignore[misc]


def kruskal(
    ctx: typer.Context,
    features: Annotated[
        Path | None,
        typer.Argument(
            help="A T x d matrix (.npy, .pt, .safetensors, .parquet), T x n x d tokens with --query-index, or a "
            "folder written by --save-features. Omit it to capture query vectors from --model.",
            parser=named_path,
            show_default=False,
        ),
    ] = None,
    k: Annotated[
        list[int] | None,
        integer_option(
            "--k", help="Candidate size (repeatable). Default: n and min(T, d) when n is known, else --sweep."
        ),
    ] = None,
    sweep: Annotated[
        bool,
        typer.Option("--sweep", help="Satisfied fraction for every k from 1 to min(T, d) (the paper's Figure 1)."),
    ] = False,
    samples: Samples = DEFAULT_SAMPLES,
    threshold: Threshold = DEFAULT_THRESHOLD,
    seed: Seed = DEFAULT_SEED,
    seeds: Annotated[
        str | None,
        typer.Option(
            "--seeds",
            help="With --model: capture and estimate once per seed (e.g. 0-4 or 0,3,7; instead of --seed) and "
            "report the median and range over the seeds.",
        ),
    ] = None,
    vary: VaryOpt = Vary[DEFAULT_SEEDS_VARY],
    weights_seed: WeightsSeed = None,
    data_seed: DataSeed = None,
    rtol: Rtol = None,
    atol: Atol = None,
    device: Device = DEFAULT_DEVICE,
    all_draws: AllDraws = False,
    fmt: FormatOpt = Format.table,
    out: Out = None,
    plot: Plot = None,
    query_index: Annotated[
        int | None,
        integer_option(
            "--query-index",
            help="Token used as the query: its row in a T x n x d array, or, with --model, in the model's tokens "
            "(0 = [CLS], -1 = last).",
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--key", help="Tensor name (.pt/.safetensors holding several) or column (.parquet) to read."),
    ] = None,
    vectors: Annotated[
        Vectors | None,
        typer.Option(
            "--vectors",
            help="With a saved feature folder or --model: the query vectors or the Assumption 3 vectors (default: "
            "queries).",
            show_default=False,
        ),
    ] = None,
    n: Annotated[
        int | None,
        integer_option(
            "--n",
            "--context-length",
            help="Context length n: tested by default and marked on the plot. With --model it sets a text model's "
            "n (as check --context-length); a saved feature folder knows its n.",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="With no FEATURES: the model to capture query vectors from (default: vit-base).",
            show_default=False,
        ),
    ] = None,
    backend: BackendOpt = None,
    variants: Annotated[
        str | None,
        typer.Option(
            "--variants",
            help="With no FEATURES: the one column to capture: embedding, random-attention, random, trained, "
            "random-L<k> or trained-L<k> (default: random).",
            show_default=False,
        ),
    ] = None,
    variant: Annotated[
        str | None, typer.Option("--variant", hidden=True, help="Deprecated name of --variants.")
    ] = None,
    weights: Annotated[
        str | None,
        typer.Option(
            "--weights",
            help="With no FEATURES and a trained column: the trained weights, a local folder or a weights file "
            "(.safetensors, .bin, .pt, ...) whose tensors fit the model.",
        ),
    ] = None,
    data: Annotated[
        str | None,
        typer.Option("--data", help="With no FEATURES: data source (default: the built-in offline data)."),
    ] = None,
    split: Annotated[
        str, typer.Option("--split", help="With no FEATURES: dataset split for Hugging Face datasets.")
    ] = DEFAULT_SPLIT,
    limit: Annotated[int, integer_option("--limit", help="With no FEATURES: number of examples T.")] = DEFAULT_LIMIT,
    batch_size: Annotated[
        str, typer.Option("--batch-size", help="With no FEATURES: examples per forward pass, an integer or auto.")
    ] = str(DEFAULT_BATCH_SIZE),
    revision: Revision = None,
    trust_remote_code: TrustRemoteCode = False,
    keep_duplicates: Annotated[
        bool,
        typer.Option(
            "--keep-duplicates",
            help="With no FEATURES: keep exact duplicate inputs (by default they are found before the forward "
            "pass, reported and dropped).",
        ),
    ] = False,
    text_column: TextColumn = None,
    image_column: ImageColumn = None,
    convert_rgb: ConvertRgb = False,
    quiet: Quiet = False,
) -> None:
    """Estimate the Kruskal rank of a set of vectors: Monte-Carlo tests at candidate sizes, or a sweep."""
    clock = CommandClock()
    with clock.importing(quiet):  # the library, torch with it: seconds
        from ..estimation import build_capture, estimate_kruskal_rank, kruskal_request
        from ..io import refuse_inputs
        from ..render import render_kruskal
        from ..seeds import SeedsResult

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
    if features is not None:
        refuse_unused(
            ctx,
            ("seeds", "vary", "weights_seed", "data_seed"),
            f"when FEATURES ({features}) is given: "
            "they seed the capture from --model (a file's vectors are fixed; --seed seeds the draws)",
        )
    refuse_seed(ctx, seeds)
    if seeds is not None:
        refuse_unused(ctx, ("plot",), "with --seeds: it draws one run's curve; run that seed alone with --seed")
    refuse_inputs({"--out": out, "--plot": plot}, [features, model, weights, data])
    prepare_outputs(out, plot, fmt)
    request = kruskal_request(
        features,
        sweep=sweep or plot is not None,
        k=k,
        n=n,
        vectors=value_of(vectors),
        key=key,
        query_index=query_index,
    )
    _refuse_unused(ctx, features, data)
    capture = None
    if features is None:
        _refuse_empty_names(model=model, variants=variants if variant is None else variant)
        capture = build_capture(
            request,
            settings,
            {
                "model": model,
                "variant": renamed("--variant", variant, "--variants", variants),
                "data": data,
                "backend": value_of(backend),
                "weights": weights,
                "revision": revision,
                "trust_remote_code": trust_remote_code,
                "split": split,
                "limit": limit,
                "batch_size": batch_size,
                "keep_duplicates": keep_duplicates,
                "text_column": text_column,
                "image_column": image_column,
                "convert_rgb": convert_rgb,
            },
        )
    # The table's first line describes the data; the JSON and parquet outputs have it in their meta.
    result = estimate_kruskal_rank(
        request=request,
        capture=capture,
        settings=settings,
        on_note=lambda line: _note(line, settings.progress, fmt),
        seeds=seeds,
        vary=vary.value,
    )
    if isinstance(result, SeedsResult):
        emit_seeds(fmt, result, out)
        return
    clock.render_begins()
    if plot is not None and result.sweep is not None:
        label = (
            f"{Path(capture.model.model).name} {capture.variant}" if capture is not None else Path(features or "").name
        )
        _plot_sweep(result, plot, label)
    emit_result(fmt, result, out, lambda: render_kruskal(result), clock=clock)


def _note(line: str, progress: bool, fmt: Format) -> None:
    """A note of the estimate on stderr while ``progress`` is on. The vectors and the rank rule open
    the table, so the table's run logs only the notes that advise an option (the sweep run for want of ``--k``)."""
    from ..progress import log

    if fmt != Format.table or (isinstance(line, Message) and line.params):
        log(flagged(line), progress)


def _plot_sweep(result, plot: Path, label: str) -> None:
    """The sweep's curve in ``plot``, its line labelled ``label``: the file's name, or the model and column
    captured (the source's description is a sentence, whose last path part named neither)."""
    from ..plot import plot_sweeps

    plot_sweeps(
        [(label[:40] or "features", result.sweep)],
        plot,
        n=result.n,
        d=result.d,
        title=f"Kruskal-rank sweep: {result.T} vectors in R^{result.d}",
    )


def _refuse_empty_names(**values: str | None) -> None:
    """An empty --model or --variants names nothing: refused, not read as the default (vit-base, random).

    Raises:
        InputError: when a value is empty or blank.
    """
    from ..errors import InputError

    for name, value in values.items():
        if value is not None and not value.strip():
            raise InputError(f"--{name} is empty: name one, or leave it out for the default")


def _refuse_unused(ctx: typer.Context, features: Path | None, data: str | None) -> None:
    """Options that have no effect with what was given: the capture's with FEATURES, the file's without."""
    if features is not None:
        refuse_unused(
            ctx,
            (
                "model",
                "variants",
                "variant",
                "weights",
                "backend",
                "data",
                "split",
                "limit",
                "batch_size",
                "keep_duplicates",
                "revision",
                "trust_remote_code",
                "text_column",
                "image_column",
                "convert_rgb",
            ),
            f"when FEATURES ({features}) is given: the capture options apply only without a file",
        )
    else:
        refuse_unused(ctx, ("key",), "without FEATURES: --key chooses a tensor or column in a feature file")
        refuse_data_options(ctx, data)
