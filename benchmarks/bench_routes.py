"""Benchmark: where the checked decompositions run, the device's routines against the host's LAPACK.

On a GPU, ``mhaaudit.numerics.checked`` computes the singular values of matrices of at most
``HOST_SVD_MAX`` rows or columns, and the eigenvalues of symmetric matrices of order at most
``HOST_EIGVALSH_MAX``, on the host (the CPU's routes), and copies them back; larger ones stay on the
device. This script times both placements for the sizes an audit meets, so that the limits rest on
measurements: a draw or context matrix of 197 rows, witness candidates of 408 and 768 rows, all of
768 columns, one matrix and a batch of 64; and one witness (``shrink_witness``) of a dependent
768 x 768 set, whose pivoted QR stays on the rows' device either way.

Naive: every matrix left on the device (both limits 0: the device's own routines, as before the
limits). Ours: the checked call as it is. The values of the two are compared (relative to the
largest) and the two witnesses too. On the CPU both sides are the same calls: the ratios are about 1
there, and the script shows only that it runs. Prints the times and the ratios; asserts nothing. Run:

    python benchmarks/bench_routes.py [--device cpu|cuda|auto] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from mhaaudit.kruskal import shrink_witness
from mhaaudit.numerics import RankRule, checked
from mhaaudit.settings import device_name, resolve_device

#: (batch, rows, columns) of the matrices whose singular values are timed, and (batch, order) of the eigenproblems
SVD_SHAPES = ((1, 197, 768), (64, 197, 768), (1, 408, 768), (1, 768, 768))
EIG_SHAPES = ((1, 197), (64, 197), (1, 408), (1, 768))


@contextlib.contextmanager
def on_device_only():
    """Every checked decomposition where its matrices lie (the naive side): both host limits 0."""
    saved = checked.HOST_SVD_MAX, checked.HOST_EIGVALSH_MAX
    checked.HOST_SVD_MAX = checked.HOST_EIGVALSH_MAX = 0
    try:
        yield
    finally:
        checked.HOST_SVD_MAX, checked.HOST_EIGVALSH_MAX = saved


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_of(fn, device: torch.device, repeats: int):
    """``(seconds, fn())``: the fastest of ``repeats`` timed calls after one untimed call, the device synchronised."""
    out = fn()
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        t = time.perf_counter()
        out = fn()
        _sync(device)
        best = min(best, time.perf_counter() - t)
    return best, out


def dependent_set(rows: int, d: int, device: torch.device, seed: int = 0) -> torch.Tensor:
    """``rows`` float32 rows of length ``d`` with a decaying spectrum and a common direction (as transformer
    features have), the last one the sum of the first ten: a dependent set."""
    g = torch.Generator().manual_seed(seed)
    U = torch.randn(rows, d, generator=g, dtype=torch.float64)
    V = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0]
    X = (U * torch.logspace(0, -3, d, dtype=torch.float64)) @ V.T + 2.0 * torch.randn(
        d, generator=g, dtype=torch.float64
    )
    X[-1] = X[:10].sum(0)
    return X.float().to(device)


def measure(
    device: torch.device, *, repeats: int = 3, svd_shapes=SVD_SHAPES, eig_shapes=EIG_SHAPES, witness=(768, 768)
):
    """Each shape's seconds on the device's routines (naive) and as the checked calls place them (ours), the
    largest difference of their values relative to the largest value, and the witness both ways."""
    g = torch.Generator().manual_seed(1)
    rows = []
    for b, m, c in svd_shapes:
        x = (torch.randn(b, m, c, generator=g, dtype=torch.float64) / c**0.5).to(device)
        with on_device_only():
            naive, s0 = best_of(lambda x=x: checked.svdvals(x), device, repeats)
        ours, s1 = best_of(lambda x=x: checked.svdvals(x), device, repeats)
        diff = float((s0 - s1).abs().max() / s1.abs().max())
        rows.append(dict(what="svdvals", shape=[b, m, c], naive_s=naive, ours_s=ours, rel_diff=diff))
    for b, n in eig_shapes:
        x = torch.randn(b, n, 768, generator=g, dtype=torch.float64) / 768**0.5
        G = (x @ x.transpose(-1, -2)).to(device)
        with on_device_only():
            naive, l0 = best_of(lambda G=G: checked.eigvalsh(G), device, repeats)
        ours, l1 = best_of(lambda G=G: checked.eigvalsh(G), device, repeats)
        diff = float((l0 - l1).abs().max() / l1.abs().max())
        rows.append(dict(what="eigvalsh", shape=[b, n, n], naive_s=naive, ours_s=ours, rel_diff=diff))
    X = dependent_set(*witness, device)
    rule = RankRule.for_dtype(X.dtype)
    every = range(X.shape[0])
    with on_device_only():
        naive, w0 = best_of(lambda: shrink_witness(X, every, rule), device, 1)
    ours, w1 = best_of(lambda: shrink_witness(X, every, rule), device, 1)
    return {
        "device": device_name(device),
        "threads": torch.get_num_threads(),
        "host_svd_max": checked.HOST_SVD_MAX,
        "host_eigvalsh_max": checked.HOST_EIGVALSH_MAX,
        "calls": rows,
        "witness": dict(
            shape=list(witness),
            naive_s=naive,
            ours_s=ours,
            rows=[len(w0.indices), len(w1.indices)],
            same=w0.indices == w1.indices,
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", help="cpu, cuda (or cuda:N) or auto")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls of each shape (the fastest is kept)")
    ap.add_argument("--json", help="also write the figures to this result file")
    args = ap.parse_args()
    from resultfiles import Run, seconds

    run = Run("bench_routes.py", sys.argv[1:])
    device = resolve_device(args.device)
    r = measure(device, repeats=args.repeats)
    gpu = f" ({torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda})" if device.type == "cuda" else ""
    print(f"device: {r['device']}{gpu}, torch {torch.__version__}, host threads {r['threads']}")
    print(f"on the host: SVDs up to {r['host_svd_max']} a side, eigenproblems up to order {r['host_eigvalsh_max']}")
    print(f"{'call':<10} {'shape':<16} {'device (naive)':>15} {'ours':>10} {'ratio':>8} {'rel. diff':>10}")
    for c in r["calls"]:
        shape = " x ".join(map(str, c["shape"]))
        ratio = c["naive_s"] / c["ours_s"]
        print(
            f"{c['what']:<10} {shape:<16} {c['naive_s'] * 1e3:12.1f} ms {c['ours_s'] * 1e3:7.1f} ms "
            f"{ratio:7.1f}x {c['rel_diff']:10.1e}"
        )
    w = r["witness"]
    print(
        f"witness of a dependent {w['shape'][0]} x {w['shape'][1]} set: {w['naive_s']:.3f} s on the device's routines, "
        f"{w['ours_s']:.3f} s ours ({w['naive_s'] / w['ours_s']:.1f}x); rows {w['rows'][0]} and {w['rows'][1]}, "
        f"{'the same' if w['same'] else 'DIFFERENT'} witness"
    )
    if args.json:
        out = [
            {
                "what": f"{c['what']} {' x '.join(map(str, c['shape']))} ({r['device']})",
                "naive": f"{seconds(c['naive_s'])} (the device's routine)",
                "mhaaudit": seconds(c["ours_s"]),
                "ratio": f"{c['naive_s'] / c['ours_s']:.1f}x",
                "checked": f"values equal to {c['rel_diff']:.0e} of the largest",
            }
            for c in r["calls"]
        ]
        run.write(args.json, out, r)


if __name__ == "__main__":
    main()
