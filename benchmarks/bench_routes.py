"""Benchmark: where the checked decompositions run, the device's routines against the host's LAPACK.

mhaaudit computes every checked singular value on the host (``numerics.certificates.svd_rank`` copies
the rows there) and, on a GPU, the eigenvalues of symmetric matrices of order 33 to
``numerics.checked.HOST_EIGVALSH_MAX`` there too (``numerics.checked.on_host``); others stay on the device. This
script times both placements for the sizes an audit meets, so that those choices rest on
measurements: 197, 408 and 768 rows of 768 columns (a draw or context matrix of a ViT's tokens,
witness candidates), one matrix and a batch of 64.

* Singular values: the device's routine (``torch.linalg.svdvals`` on the device: naive) beside
  ``svd_rank`` as mhaaudit calls it (ours, on the host).
* Eigenvalues of the rows' Gram matrices: the device's routine (the host limit 0: naive), the host's
  (the limit above every size) and ours (the limit as it is).

The values of the two placements are compared, relative to the largest. On the CPU every side is the
same computation: the ratios are about 1 there, and the script shows only that it runs. Prints the
times and the ratios; asserts nothing. Run:

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

from mhaaudit.numerics import RankRule, checked, svd_rank
from mhaaudit.settings import device_name, resolve_device

#: (batch, rows, columns) of the matrices whose singular values are timed, and (batch, order) of the eigenproblems
SVD_SHAPES = ((1, 197, 768), (64, 197, 768), (1, 408, 768), (1, 768, 768))
EIG_SHAPES = ((1, 197), (64, 197), (1, 408), (1, 768))


@contextlib.contextmanager
def host_limit(order: int):
    """Eigenproblems up to ``order`` on the host for the block (0: every one on the device)."""
    saved = checked.HOST_EIGVALSH_MAX
    checked.HOST_EIGVALSH_MAX = order
    try:
        yield
    finally:
        checked.HOST_EIGVALSH_MAX = saved


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


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.cpu() - b.cpu()).abs().max() / b.abs().max().cpu())


def measure(device: torch.device, *, repeats: int = 3, svd_shapes=SVD_SHAPES, eig_shapes=EIG_SHAPES) -> dict:
    """Each shape's seconds on the device's routine (naive), on the host's where it differs, and as mhaaudit places
    it (ours), with the largest difference of the values relative to the largest value."""
    g = torch.Generator().manual_seed(1)
    rule = RankRule.for_dtype(torch.float64)
    rows = []
    for b, m, c in svd_shapes:
        x = (torch.randn(b, m, c, generator=g, dtype=torch.float64) / c**0.5).to(device)
        naive, s0 = best_of(lambda x=x: torch.linalg.svdvals(x), device, repeats)
        ours, out = best_of(lambda x=x: svd_rank(x, rule), device, repeats)
        rows.append(dict(what="svdvals", shape=[b, m, c], naive_s=naive, ours_s=ours, rel_diff=_rel(s0, out[4])))
    for b, n in eig_shapes:
        x = torch.randn(b, n, 768, generator=g, dtype=torch.float64) / 768**0.5
        G = (x @ x.transpose(-1, -2)).to(device)
        with host_limit(0):
            naive, l0 = best_of(lambda G=G: checked.eigvalsh(G), device, repeats)
        with host_limit(n):
            host, l1 = best_of(lambda G=G: checked.eigvalsh(G), device, repeats)
        ours, _ = best_of(lambda G=G: checked.eigvalsh(G), device, repeats)
        rows.append(
            dict(what="eigvalsh", shape=[b, n, n], naive_s=naive, host_s=host, ours_s=ours, rel_diff=_rel(l0, l1))
        )
    return {
        "device": device_name(device),
        "threads": torch.get_num_threads(),
        "host_eigvalsh_max": checked.HOST_EIGVALSH_MAX,
        "calls": rows,
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
    print(f"singular values on the host; eigenvalues on the host from order 33 up to {r['host_eigvalsh_max']}")
    print(f"{'call':<10} {'shape':<16} {'device':>10} {'host':>10} {'ours':>10} {'ratio':>8} {'rel. diff':>10}")
    for c in r["calls"]:
        shape = " x ".join(map(str, c["shape"]))
        host = f"{c['host_s'] * 1e3:7.1f} ms" if "host_s" in c else f"{'':>10}"
        print(
            f"{c['what']:<10} {shape:<16} {c['naive_s'] * 1e3:7.1f} ms {host} {c['ours_s'] * 1e3:7.1f} ms "
            f"{c['naive_s'] / c['ours_s']:7.1f}x {c['rel_diff']:10.1e}"
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
