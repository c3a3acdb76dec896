"""``mhaaudit kruskal``: the Kruskal-rank estimator on a matrix, saved features or a model."""

from __future__ import annotations

import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from .options import (
    DEFAULTS,
    Atol,
    BackendOpt,
    ConvertRgb,
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
    emit,
    importing,
    prepare_outputs,
    refuse_data_options,
    refuse_unused,
    renamed,
)


class Vectors(str, Enum):
    queries = "queries"
    a3 = "a3"


def kruskal(
    ctx: typer.Context,
    features: Annotated[Optional[Path], typer.Argument(help="A T x d matrix (.npy, .pt, .safetensors, .parquet), T x n x d tokens with --query-index, or a folder written by --save-features. Omit it to capture query vectors from --model.", show_default=False)] = None,
    k: Annotated[Optional[list[int]], typer.Option("--k", help="Candidate size (repeatable). Default: n and min(T, d) when n is known, else --sweep.")] = None,
    sweep: Annotated[bool, typer.Option("--sweep", help="Satisfied fraction for every k from 1 to min(T, d) (the paper's Figure 1).")] = False,
    samples: Samples = DEFAULTS["samples"],
    threshold: Threshold = DEFAULTS["threshold"],
    seed: Seed = DEFAULTS["seed"],
    rtol: Rtol = None,
    atol: Atol = None,
    device: Device = DEFAULTS["device"],
    all_draws: Annotated[bool, typer.Option("--all-draws", help="Always make every draw (by default a test stops once its verdict can no longer change).")] = False,
    fmt: FormatOpt = Format.table,
    out: Out = None,
    plot: Plot = None,
    query_index: Annotated[Optional[int], typer.Option("--query-index", help="Token used as the query: its row in a T x n x d array, or, with --model, in the model's tokens (0 = [CLS], -1 = last).")] = None,
    key: Annotated[Optional[str], typer.Option("--key", help="Tensor name (.pt/.safetensors holding several) or column (.parquet) to read.")] = None,
    vectors: Annotated[Optional[Vectors], typer.Option("--vectors", help="With a saved feature folder or --model: the query vectors or the Assumption 3 vectors (default: queries).", show_default=False)] = None,
    n: Annotated[Optional[int], typer.Option("--n", "--context-length", help="Context length n: tested by default and marked on the plot. With --model it sets a text model's n (as check --context-length); a saved feature folder knows its n.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="With no FEATURES: the model to capture query vectors from (default: vit-base).", show_default=False)] = None,
    backend: BackendOpt = None,
    variants: Annotated[Optional[str], typer.Option("--variants", help="With no FEATURES: the one column to capture: embedding, random-attention, random, trained, random-L<k> or trained-L<k> (default: random).", show_default=False)] = None,
    variant: Annotated[Optional[str], typer.Option("--variant", hidden=True, help="Deprecated name of --variants.")] = None,
    weights: Annotated[Optional[str], typer.Option("--weights", help="With no FEATURES and a trained column: local folder (transformers) or file (timm) with the trained weights.")] = None,
    data: Annotated[Optional[str], typer.Option("--data", help="With no FEATURES: data source (default: the built-in offline data).")] = None,
    split: Annotated[str, typer.Option("--split", help="With no FEATURES: dataset split for Hugging Face datasets.")] = "train",
    limit: Annotated[int, typer.Option("--limit", help="With no FEATURES: number of examples T.")] = 2000,
    batch_size: Annotated[str, typer.Option("--batch-size", help="With no FEATURES: examples per forward pass, an integer or auto.")] = "32",
    revision: Revision = None,
    trust_remote_code: TrustRemoteCode = False,
    keep_duplicates: Annotated[bool, typer.Option("--keep-duplicates", help="With no FEATURES: keep exact duplicate inputs (by default they are found before the forward pass, reported and dropped).")] = False,
    text_column: TextColumn = None,
    image_column: ImageColumn = None,
    convert_rgb: ConvertRgb = False,
    quiet: Quiet = False,
) -> None:
    """Estimate the Kruskal rank of a set of vectors: Monte-Carlo tests at candidate sizes, or a sweep."""
    with importing(quiet):  # the library, torch with it: seconds
        from .. import validate
        from ..errors import InputError
        from ..io import MappedArray, refuse_inputs, stamp
        from ..kruskal import as_matrix, fixed_rule
        from ..numerics.stream import peak_rss_bytes
        from ..progress import log, progress_enabled
        from ..render import render_kruskal
        from ..settings import Settings

    t0 = time.perf_counter()
    settings = Settings.resolve(device=device, samples=samples, threshold=threshold, seed=seed, rtol=rtol, atol=atol,
                                stop_when_decided=not all_draws, progress=progress_enabled(quiet))
    prepare_outputs(out, plot, fmt)
    refuse_inputs({"--out": out, "--plot": plot}, [features, weights, data])
    ks = [validate.integer("--k", kk) for kk in dict.fromkeys(k or [])]
    n = None if n is None else validate.integer("--n", n)
    _refuse_unused(ctx, features, data)
    variant = renamed("--variant", variant, "--variants", variants)
    if variant is not None and len(validate.split_list(variant) or []) > 1:
        raise InputError(f"--variants {variant}: kruskal captures one column at a time; give one (check audits several)")
    capture = dict(model=model or "vit-base", variant=variant or "random", weights_path=weights, data=data,
                   split=split, limit=limit, batch_size=batch_size, keep_duplicates=keep_duplicates,
                   backend=backend.value if backend else None, context_length=n, query_index=query_index,
                   revision=revision, trust_remote_code=trust_remote_code, text_column=text_column,
                   image_column=image_column, convert_rgb=convert_rgb)
    X, n, source, vectors, captured = _vectors(features, capture, key, vectors, settings)
    X = as_matrix(X)
    T, d = X.shape
    ks, sweep = _sizes(ks, n, T, d, sweep=sweep or plot is not None, vectors=vectors, watched=settings.progress)
    rule, stats = fixed_rule(X, settings.rule(X.dtype))
    # The table's first line describes the data; the JSON and parquet outputs have it in their meta.
    log(f"{T} vectors in R^{d} from {source}; rank rule: {rule.describe()}", settings.progress and fmt != Format.table)
    tests, sw, timings = _estimate(X, ks, sweep, n, vectors, settings, rule, stats)
    meta = stamp(
        command="kruskal", seed=settings.seed, device=settings.device_name, tolerance=rule.as_dict(),
        threshold=settings.threshold, samples=settings.samples,
        inputs={"source": source, "T": T, "d": d, "n": n, "dtype": str(X.dtype).replace("torch.", "")},
        set_rank=stats.rank, set_rank_ceilings={str(t.k): t.set_rank for t in tests if t.set_rank is not None},
        timings_s=timings, total_s=round(time.perf_counter() - t0, 3),
        storage="memory-mapped" if isinstance(X, MappedArray) else "memory", peak_rss_bytes=peak_rss_bytes(),
    )
    if captured:
        meta["capture"] = captured
    if sw is not None:
        meta["sweep_summary"] = sw.summary()
    if plot is not None and sw is not None:
        from ..plot import plot_sweeps

        plot_sweeps([(Path(str(source)).name[:40] or "features", sw)], plot, n=n, d=d, title=f"Kruskal-rank sweep: {T} vectors in R^{d}")
    emit(fmt, meta, [t.record() for t in tests], sweep=sw.rows() if sw else [], out=out,
         render=lambda: render_kruskal(tests, sw, meta, n, d))


def _refuse_unused(ctx: typer.Context, features: Path | None, data: str | None) -> None:
    """Options that have no effect with what was given: the capture's with FEATURES, the file's without."""
    if features is not None:
        refuse_unused(ctx, ("model", "variants", "variant", "weights", "backend", "data", "split", "limit", "batch_size",
                            "keep_duplicates", "revision", "trust_remote_code", "text_column", "image_column", "convert_rgb"),
                      f"when FEATURES ({features}) is given: the capture options apply only without a file")
    else:
        refuse_unused(ctx, ("key",), "without FEATURES: --key chooses a tensor or column in a feature file")
        refuse_data_options(ctx, data)


def _vectors(features: Path | None, capture: dict, key, vectors: Vectors | None, settings):
    """The vectors to test, from FEATURES or captured from ``--model``: (matrix, n, source, which vectors,
    how the capture ran: batch size and weights read, empty for a file).

    ``capture["context_length"]`` is ``--n``: a captured text model's n, or the n of the file's
    vectors; a saved feature folder knows its own.
    """
    from ..errors import InputError

    n = capture["context_length"]
    if features is None:
        vectors = vectors or Vectors.queries
        fs = _capture(capture, settings)
        source = f"{fs.meta.get('model')} [{fs.meta.get('variant')}] {vectors.value} on {fs.meta.get('data')}"
        captured = {k: fs.meta.get(k) for k in ("batch", "weights_read") if fs.meta.get(k) is not None}
        return (fs.a3 if vectors == Vectors.a3 else fs.queries), fs.n, source, vectors, captured
    X, n_known, source, vectors = _read(features, key, capture["query_index"], vectors)
    if n is not None and n_known is not None and n != n_known:
        raise InputError(f"--n {n}: the saved features in {features} were captured with n = {n_known}")
    return X, n or n_known, source, vectors, {}


def _capture(capture: dict, settings):
    """The reduced features captured from ``--model``."""
    from ..auditing import capture_features

    return capture_features(**capture, device=settings.device, seed=settings.seed, progress=settings.progress)


def _read(features: Path, key, query_index, vectors: Vectors | None):
    """Vectors from a file or a ``--save-features`` folder: (matrix, n or None, source, which vectors)."""
    from ..errors import InputError
    from ..io import read_array, to_query_matrix

    if features.is_dir():
        from ..features import FeatureSet

        for name, value in (("--key", key), ("--query-index", query_index)):
            if value is not None:
                raise InputError(f"{name} has no effect on a saved feature folder ({features}): it holds the query "
                                 "and Assumption 3 vectors already; choose them with --vectors")
        vectors = vectors or Vectors.queries
        fs = FeatureSet.load(features)
        m = fs.meta
        source = f"{features} ({vectors.value}; {m.get('model', '?')} {m.get('variant', '')} layer {m.get('layer', '?')})"
        return (fs.a3 if vectors == Vectors.a3 else fs.queries), fs.n, source, vectors
    if vectors is not None:
        raise InputError(f"--vectors has no effect on a single matrix ({features}): it chooses between the query and "
                         "Assumption 3 vectors of a saved feature folder or of --model")
    arr, desc = read_array(features, key=key)
    X, source = to_query_matrix(arr, query_index, desc)
    return X, None, source, Vectors.queries


def _sizes(ks: list[int], n: int | None, T: int, d: int, *, sweep: bool, vectors: Vectors, watched: bool):
    """The sizes to test and whether to sweep: ``--k``, else n and min(T, d) when n is known, else the sweep."""
    from ..errors import InputError
    from ..progress import log

    for kk in ks:
        if kk > T:
            raise InputError(f"--k {kk} is larger than the number of vectors T = {T}")
    if ks or sweep:
        return ks, sweep
    if n is None:
        log("No --k given and n unknown: running the full sweep.", watched)
        return ks, True
    if n > T:
        a = "3" if vectors == Vectors.a3 else "1"
        raise InputError(f"only T = {T} vectors, but Assumption {a} at n = {n} needs at least n of them; "
                         "supply more vectors or choose sizes with --k")
    return list(dict.fromkeys([n, min(T, d)])), False


def _estimate(X, ks, sweep: bool, n, vectors: Vectors, settings, rule, stats):
    """The subset test at each size and the sweep when asked: (tests, sweep or None, timings in s)."""
    from ..checks import CHECK_TITLES
    from ..kruskal import kruskal_sweep, subset_test
    from ..progress import task

    T, d = X.shape
    common = dict(samples=settings.samples, threshold=settings.threshold, seed=settings.seed, rule=rule,
                  device=settings.device, stats=stats)
    tests, timings, sw = [], {}, None
    for kk in ks:
        check = "kruskal"
        if n is not None and kk == n:
            check = "assumption_3" if vectors == Vectors.a3 else "assumption_1"
        elif kk == min(T, d) and vectors == Vectors.queries:
            check = "general_position"
        s = time.perf_counter()
        with task(f"k = {kk}", settings.samples, settings.progress) as adv:
            title = None if check == "kruskal" else CHECK_TITLES[check]  # None: the estimator's own title
            tests.append(subset_test(X, kk, check=check, title=title, progress=adv,
                                     stop_when_decided=settings.stop_when_decided, **common))
        timings[f"k={kk}"] = round(time.perf_counter() - s, 3)
    if sweep:
        s = time.perf_counter()
        with task("sweep", settings.samples, settings.progress) as adv:
            sw = kruskal_sweep(X, progress=adv, **common)
        timings["sweep"] = round(time.perf_counter() - s, 3)
    return tests, sw, timings
