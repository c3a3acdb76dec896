"""``mhaaudit kruskal``: the Kruskal-rank estimator on a matrix, saved features or a model."""

from __future__ import annotations

import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ._common import (
    DEFAULTS,
    FormatOpt,
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


class Vectors(str, Enum):
    queries = "queries"
    a3 = "a3"


@app.command("kruskal")
def kruskal_cmd(
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
    from ..errors import InputError
    from ..io import read_array, stamp, to_query_matrix
    from ..kruskal import as_matrix, kruskal_sweep, set_stats, subset_test
    from ..progress import log, progress_enabled, task
    from ..settings import device_name, resolve_device
    from ..numerics import RankRule

    validate_common(samples, threshold, rtol, atol)
    dev = resolve_device(device)  # a device that is not there is an input error, found before any work
    prepare_outputs(out, plot, fmt)
    show = progress_enabled(fmt.value)
    t0 = time.perf_counter()
    if features is None:
        from ..audit import capture_features

        if weights is not None and not variant.startswith("trained"):
            raise InputError(f"--weights loads trained weights; use it with --variant trained (or trained-L<k>), not {variant!r}")

        fs = capture_features(model, variant=variant, data=data, limit=limit, batch_size=batch_size, device=device,
                              seed=seed, progress=show, weights_path=weights)
        X = fs.a3 if vectors == Vectors.a3 else fs.queries
        n = n or fs.n
        source = f"{fs.meta.get('model')} [{fs.meta.get('variant')}] {vectors.value} on {fs.meta.get('data')}"
    elif weights is not None:
        raise InputError("--weights applies when query vectors are captured from --model (no FEATURES given)")
    elif features.is_dir():
        from ..features import FeatureSet

        fs = FeatureSet.load(features)
        X = fs.a3 if vectors == Vectors.a3 else fs.queries
        n = n or fs.n
        source = f"{features} ({vectors.value}; {fs.meta.get('model', '?')} {fs.meta.get('variant', '')} layer {fs.meta.get('layer', '?')})"
    else:
        arr, desc = read_array(features, key=key)
        X, source = to_query_matrix(arr, query_index, desc)
    X = as_matrix(X)
    T, d = X.shape
    ks = list(dict.fromkeys(k or []))
    for kk in ks:
        if kk < 1:
            raise InputError(f"--k must be at least 1, got {kk}")
        if kk > T:
            raise InputError(f"--k {kk} is larger than the number of vectors T = {T}")
    if n is not None and n < 1:
        raise InputError(f"--n must be at least 1, got {n}")
    if plot is not None:
        sweep = True
    if not ks and not sweep:
        if n is not None:
            if n > T:
                a = "3" if vectors == Vectors.a3 else "1"
                raise InputError(f"only T = {T} vectors, but Assumption {a} at n = {n} needs at least n of them; "
                                 "supply more vectors or choose sizes with --k")
            ks = list(dict.fromkeys([n, min(T, d)]))
        else:
            sweep = True
            log("No --k given and n unknown: running the full sweep.", fmt.value)
    rule = RankRule.for_dtype(X.dtype, rtol=rtol, atol=atol)
    log(f"{T} vectors in R^{d} from {source}; rank rule: {rule.describe()}", fmt.value)
    stats = set_stats(X, rule)
    tests = []
    timings = {}
    for kk in ks:
        check = "kruskal"
        if n is not None and kk == n:
            check = "assumption_3" if vectors == Vectors.a3 else "assumption_1"
        elif kk == min(T, d) and vectors == Vectors.queries:
            check = "general_position"
        s = time.perf_counter()
        with task(f"k = {kk}", samples, show) as adv:
            tests.append(subset_test(X, kk, samples=samples, threshold=threshold, seed=seed, rule=rule, device=dev,
                                     check=check, stats=stats, progress=adv))
        timings[f"k={kk}"] = round(time.perf_counter() - s, 3)
    sw = None
    if sweep:
        s = time.perf_counter()
        with task("sweep", samples, show) as adv:
            sw = kruskal_sweep(X, samples=samples, threshold=threshold, seed=seed, rule=rule, device=dev, stats=stats, progress=adv)
        timings["sweep"] = round(time.perf_counter() - s, 3)
    meta = stamp(
        command="kruskal", seed=seed, device=device_name(dev), tolerance=rule.as_dict(), threshold=threshold,
        samples=samples, inputs={"source": source, "T": T, "d": d, "n": n, "dtype": str(X.dtype).replace("torch.", "")},
        set_rank=stats.rank, timings_s=timings, total_s=round(time.perf_counter() - t0, 3),
    )
    records = [t.record() for t in tests]
    sweep_rows = sw.rows() if sw else []
    if sw is not None:
        meta["sweep_summary"] = sw.summary()
    write_out(out, meta, records, sweep_rows)
    if plot is not None and sw is not None:
        from ..plot import plot_sweeps

        plot_sweeps([(Path(str(source)).name[:40] or "features", sw)], plot, n=n, d=d, title=f"Kruskal-rank sweep: {T} vectors in R^{d}")
    if not emit_data(fmt, meta, records, sweep_rows):
        _render(tests, sw, meta, n, d)


def _render(tests, sw, meta, n, d) -> None:
    from ..report import kruskal_table, stdout_console, sweep_lines, sweep_table, test_evidence_lines

    con = stdout_console()
    inp = meta["inputs"]
    con.print(f"[bold]mhaaudit kruskal[/bold]: {inp['T']} vectors in R^{inp['d']} ({inp['dtype']}) from {inp['source']}")
    if tests:
        con.print(kruskal_table(tests))
        for t in tests:
            for line in test_evidence_lines(t):
                con.print(line, highlight=False)
    if sw is not None:
        con.print(sweep_table(sw, marks=tuple(m for m in (n, d) if m)))
        for line in sweep_lines(sw):
            con.print(line, highlight=False)
    con.print(
        f"Whole-set numerical rank {meta['set_rank']}. Rank rule: {meta['tolerance']['rule']}. "
        f"Threshold {meta['threshold']}, {meta['samples']} draws, seed {meta['seed']}, device {meta['device']}, "
        f"{meta['total_s']} s.",
        highlight=False,
    )
