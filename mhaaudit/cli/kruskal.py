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
    Device,
    Format,
    FormatOpt,
    Out,
    Plot,
    Rtol,
    Samples,
    Seed,
    Threshold,
    emit,
    prepare_outputs,
)


class Vectors(str, Enum):
    queries = "queries"
    a3 = "a3"


def kruskal(
    features: Annotated[Optional[Path], typer.Argument(help="A T x d matrix (.npy, .pt, .safetensors, .parquet), T x n x d tokens with --query-index, or a folder written by --save-features. Omit it to capture query vectors from --model.", show_default=False)] = None,
    k: Annotated[Optional[list[int]], typer.Option("--k", help="Candidate size (repeatable). Default: n and min(T, d) when n is known, else --sweep.")] = None,
    sweep: Annotated[bool, typer.Option("--sweep", help="Satisfied fraction for every k from 1 to min(T, d) (the paper's Figure 1).")] = False,
    samples: Samples = DEFAULTS["samples"],
    threshold: Threshold = DEFAULTS["threshold"],
    seed: Seed = DEFAULTS["seed"],
    rtol: Rtol = None,
    atol: Atol = None,
    device: Device = DEFAULTS["device"],
    fmt: FormatOpt = Format.table,
    out: Out = None,
    plot: Plot = None,
    query_index: Annotated[Optional[int], typer.Option("--query-index", help="Token row of the query in a T x n x d array (0 = [CLS], -1 = last).")] = None,
    key: Annotated[Optional[str], typer.Option("--key", help="Tensor name (safetensors/.pt) or column (parquet) to read.")] = None,
    vectors: Annotated[Vectors, typer.Option("--vectors", help="With saved features or a model: the query vectors or the Assumption 3 vectors.")] = Vectors.queries,
    n: Annotated[Optional[int], typer.Option("--n", help="Context length n, to mark it on the plot and test it by default.")] = None,
    model: Annotated[str, typer.Option("--model", help="With no FEATURES: the model to capture query vectors from.")] = "vit-base",
    variant: Annotated[str, typer.Option("--variant", help="With no FEATURES: embedding, random-attention, random or trained.")] = "random",
    weights: Annotated[Optional[str], typer.Option("--weights", help="With no FEATURES and --variant trained (or trained-L<k>): local folder (transformers) or file (timm) with the trained weights.")] = None,
    data: Annotated[Optional[str], typer.Option("--data", help="With no FEATURES: data source (default: the built-in offline data).")] = None,
    limit: Annotated[int, typer.Option("--limit", help="With no FEATURES: number of examples T.")] = 2000,
    batch_size: Annotated[int, typer.Option("--batch-size", help="With no FEATURES: examples per forward pass.")] = 32,
) -> None:
    """Estimate the Kruskal rank of a set of vectors: Monte-Carlo tests at candidate sizes, or a sweep."""
    from .. import validate
    from ..io import stamp
    from ..kruskal import as_matrix, set_stats
    from ..progress import log, progress_enabled
    from ..render import render_kruskal
    from ..settings import Settings

    t0 = time.perf_counter()
    settings = Settings.resolve(device=device, samples=samples, threshold=threshold, seed=seed, rtol=rtol, atol=atol,
                                progress=progress_enabled(fmt.value))
    prepare_outputs(out, plot, fmt)
    ks = [validate.integer("--k", kk) for kk in dict.fromkeys(k or [])]
    n = None if n is None else validate.integer("--n", n)
    if features is None:
        X, n_known, source = _capture(model, variant, weights, data, limit, batch_size, vectors, settings)
    else:
        X, n_known, source = _read(features, weights, key, query_index, vectors)
    n = n or n_known
    X = as_matrix(X)
    T, d = X.shape
    ks, sweep = _sizes(ks, n, T, d, sweep=sweep or plot is not None, vectors=vectors, fmt=fmt)
    rule = settings.rule(X.dtype)
    log(f"{T} vectors in R^{d} from {source}; rank rule: {rule.describe()}", fmt.value)
    stats = set_stats(X, rule)
    tests, sw, timings = _estimate(X, ks, sweep, n, vectors, settings, rule, stats)
    meta = stamp(
        command="kruskal", seed=settings.seed, device=settings.device_name, tolerance=rule.as_dict(),
        threshold=settings.threshold, samples=settings.samples,
        inputs={"source": source, "T": T, "d": d, "n": n, "dtype": str(X.dtype).replace("torch.", "")},
        set_rank=stats.rank, timings_s=timings, total_s=round(time.perf_counter() - t0, 3),
    )
    if sw is not None:
        meta["sweep_summary"] = sw.summary()
    if plot is not None and sw is not None:
        from ..plot import plot_sweeps

        plot_sweeps([(Path(str(source)).name[:40] or "features", sw)], plot, n=n, d=d, title=f"Kruskal-rank sweep: {T} vectors in R^{d}")
    emit(fmt, meta, [t.record() for t in tests], sweep=sw.rows() if sw else [], out=out,
         render=lambda: render_kruskal(tests, sw, meta, n, d))


def _capture(model, variant, weights, data, limit, batch_size, vectors: Vectors, settings):
    """Query (or A3) vectors captured from ``--model``: (matrix, n, description of the source)."""
    from ..audit import capture_features
    from ..errors import InputError

    if weights is not None and not variant.startswith("trained"):
        raise InputError(f"--weights loads trained weights; use it with --variant trained (or trained-L<k>), not {variant!r}")
    fs = capture_features(model, variant=variant, data=data, limit=limit, batch_size=batch_size, device=settings.device,
                          seed=settings.seed, progress=settings.progress, weights_path=weights)
    source = f"{fs.meta.get('model')} [{fs.meta.get('variant')}] {vectors.value} on {fs.meta.get('data')}"
    return (fs.a3 if vectors == Vectors.a3 else fs.queries), fs.n, source


def _read(features: Path, weights, key, query_index, vectors: Vectors):
    """Vectors from a file or a ``--save-features`` folder: (matrix, n or None, description of the source)."""
    from ..errors import InputError
    from ..io import read_array, to_query_matrix

    if weights is not None:
        raise InputError("--weights applies when query vectors are captured from --model (no FEATURES given)")
    if features.is_dir():
        from ..features import FeatureSet

        fs = FeatureSet.load(features)
        m = fs.meta
        source = f"{features} ({vectors.value}; {m.get('model', '?')} {m.get('variant', '')} layer {m.get('layer', '?')})"
        return (fs.a3 if vectors == Vectors.a3 else fs.queries), fs.n, source
    arr, desc = read_array(features, key=key)
    X, source = to_query_matrix(arr, query_index, desc)
    return X, None, source


def _sizes(ks: list[int], n: int | None, T: int, d: int, *, sweep: bool, vectors: Vectors, fmt: Format):
    """The sizes to test and whether to sweep: ``--k``, else n and min(T, d) when n is known, else the sweep."""
    from ..errors import InputError
    from ..progress import log

    for kk in ks:
        if kk > T:
            raise InputError(f"--k {kk} is larger than the number of vectors T = {T}")
    if ks or sweep:
        return ks, sweep
    if n is None:
        log("No --k given and n unknown: running the full sweep.", fmt.value)
        return ks, True
    if n > T:
        a = "3" if vectors == Vectors.a3 else "1"
        raise InputError(f"only T = {T} vectors, but Assumption {a} at n = {n} needs at least n of them; "
                         "supply more vectors or choose sizes with --k")
    return list(dict.fromkeys([n, min(T, d)])), False


def _estimate(X, ks, sweep: bool, n, vectors: Vectors, settings, rule, stats):
    """The subset test at each size and the sweep when asked: (tests, sweep or None, timings in s)."""
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
            tests.append(subset_test(X, kk, check=check, progress=adv, **common))
        timings[f"k={kk}"] = round(time.perf_counter() - s, 3)
    if sweep:
        s = time.perf_counter()
        with task("sweep", settings.samples, settings.progress) as adv:
            sw = kruskal_sweep(X, progress=adv, **common)
        timings["sweep"] = round(time.perf_counter() - s, 3)
    return tests, sw, timings
