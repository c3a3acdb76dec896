"""Benchmark: the certificate for every head prefix of Z, ours against the naive way.

Naive: ``memorization_certificate(Z[:, : h d])`` for each h (a full SVD of Z_h, a
column-pivoted QR of Z_h^T, a QR solve and an SVD of the chosen rows, each time).
Ours: ``certify_head_prefixes(Z, d, heads)``: a QR factor per prefix with a certificate of full
rank (inherited by larger prefixes once rows are full), the T x T Gram matrix accumulated head
by head for the row choice and the solve.

Z is random Gaussian here (well conditioned); the ranks of both methods are compared and the
times and ratio printed; nothing is asserted. Run:

    python benchmarks/bench_capacity.py [--T 1000] [--d 256] [--heads 1-12]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from mhaaudit.capacity import certify_head_prefixes
from mhaaudit.capacity.oracle import memorization_certificate
from mhaaudit.validate import head_counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=1000, help="rows of Z (examples)")
    ap.add_argument("--d", type=int, default=256, help="width per head")
    ap.add_argument("--heads", default="1-12", help="head prefixes, e.g. 1-12 or 12")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the figures to this result file (the docs' Benchmarks page)")
    args = ap.parse_args()
    from resultfiles import Run, seconds

    run = Run("bench_capacity.py", sys.argv[1:])
    hs = head_counts(args.heads)
    H = max(hs)
    g = torch.Generator().manual_seed(args.seed)
    Z = torch.randn(args.T, H * args.d, generator=g, dtype=torch.float64)
    print(f"Z: {args.T} x {H} * {args.d}, heads {hs}, torch threads {torch.get_num_threads()}")

    t0 = time.perf_counter()
    ours = certify_head_prefixes(Z, args.d, hs)
    t_ours = time.perf_counter() - t0

    t0 = time.perf_counter()
    naive = [memorization_certificate(Z[:, : h * args.d]) for h in hs]
    t_naive = time.perf_counter() - t0

    for h, a, b in zip(hs, ours, naive, strict=False):
        print(
            f"  h = {h:3d}: rank ours {a.rank:6d} naive {b.rank:6d}   residual ours {a.residual:.1e} naive "
            f"{b.residual:.1e}"
        )
    same = all(a.rank == b.rank for a, b in zip(ours, naive, strict=False))
    print(f"ours {t_ours:.2f} s, naive {t_naive:.2f} s, ratio {t_naive / max(t_ours, 1e-9):.1f}x; ranks agree: {same}")
    if args.json:
        row = {
            "what": f"Capacity certificate for the head prefixes {args.heads} of a Gaussian Z "
            f"({args.T} x {H} * {args.d})",
            "naive": f"{seconds(t_naive)} (SVD, pivoted QR and solve for each prefix)",
            "mhaaudit": seconds(t_ours),
            "ratio": f"{t_naive / max(t_ours, 1e-9):.1f}x",
            "checked": "ranks agree" if same else "ranks DIFFER",
        }
        run.write(args.json, [row], {"naive_s": t_naive, "ours_s": t_ours, "heads": hs})


if __name__ == "__main__":
    main()
