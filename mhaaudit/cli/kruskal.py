"""``mhaaudit kruskal``: the Kruskal-rank estimator on a matrix, saved features or a model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from . import options as shared
from .flags import FeaturesArg, KruskalOptions

if TYPE_CHECKING:  # the options, typed for mypy
    from typing_extensions import Unpack

# The options that say what is estimated, as estimation.kruskal_request takes them.
_REQUEST = ("k", "n", "vectors", "key", "query_index")


@shared.command_options(
    KruskalOptions,
    "features k sweep samples threshold seed seeds vary weights_seed data_seed rtol atol device all_draws fmt out plot"
    " query_index key vectors n model backend variants variant weights data split limit batch_size revision"
    " trust_remote_code keep_duplicates text_column image_column convert_rgb quiet",
)
def kruskal(ctx: typer.Context, features: FeaturesArg = None, **options: Unpack[KruskalOptions]) -> None:
    """Estimate the Kruskal rank of a set of vectors: Monte-Carlo tests at candidate sizes, or a sweep."""
    with shared.importing(options["quiet"]):  # the library, torch with it: seconds
        from ..estimation import build_capture, estimate_kruskal_rank, kruskal_request
        from ..io import refuse_inputs
        from ..progress import log
        from ..render import render_kruskal
        from ..seeds import SeedsResult

    fmt, out, plot, seeds, data = options["fmt"], options["out"], options["plot"], options["seeds"], options["data"]
    settings = shared.run_settings(options, stop_when_decided=not options["all_draws"])
    if features is not None:
        shared.refuse_unused(
            ctx,
            ("seeds", "vary", "weights_seed", "data_seed"),
            f"when FEATURES ({features}) is given: "
            "they seed the capture from --model (a file's vectors are fixed; --seed seeds the draws)",
        )
    if seeds is not None:
        shared.refuse_unused(ctx, ("plot",), "with --seeds: it draws one run's curve; run that seed alone with --seed")
    refuse_inputs({"--out": out, "--plot": plot}, [features, options["weights"], data])
    shared.prepare_outputs(out, plot, fmt)
    sweep = options["sweep"] or plot is not None
    request = kruskal_request(features, sweep=sweep, **shared.library_values(options, _REQUEST))
    _refuse_unused(ctx, features, data)
    capture = None
    if features is None:
        variant = shared.renamed("--variant", options["variant"], "--variants", options["variants"])
        capture_options = {
            "model": options["model"],
            "variant": variant,
            "data": data,
            **shared.request_keywords(options),
        }
        capture = build_capture(request, settings, {k: v for k, v in capture_options.items() if k != "query_index"})
    # The table's first line describes the data; the JSON and parquet outputs have it in their meta.
    result = estimate_kruskal_rank(
        request=request,
        capture=capture,
        settings=settings,
        on_note=lambda line: log(line, settings.progress and fmt != shared.Format.table),
        seeds=seeds,
        vary=options["vary"].value,
    )
    if isinstance(result, SeedsResult):
        shared.emit_seeds(fmt, result, out)
        return
    if plot is not None and result.sweep is not None:
        _plot_sweep(result, plot)
    shared.emit_result(fmt, result, out, lambda: render_kruskal(result))


def _plot_sweep(result, plot: Path) -> None:
    from ..plot import plot_sweeps

    plot_sweeps(
        [(Path(result.source).name[:40] or "features", result.sweep)],
        plot,
        n=result.n,
        d=result.d,
        title=f"Kruskal-rank sweep: {result.T} vectors in R^{result.d}",
    )


def _refuse_unused(ctx: typer.Context, features: Path | None, data: str | None) -> None:
    """Options that have no effect with what was given: the capture's with FEATURES, the file's without."""
    if features is not None:
        shared.refuse_unused(
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
        shared.refuse_unused(ctx, ("key",), "without FEATURES: --key chooses a tensor or column in a feature file")
        shared.refuse_data_options(ctx, data)
