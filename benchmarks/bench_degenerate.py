"""Degenerate sets cost no more than generic ones: ``kruskal`` on T equal rows beside T generic rows.

For each dtype, three T x d sets are written as ``.npy`` files and audited by
``mhaaudit.estimate_kruskal_rank`` (what ``mhaaudit kruskal FILE --k ...`` runs), in one process:
T copies of one random vector, T rows of ones, and T generic (Gaussian) rows. Equal rows are
decided from the whole set's statistics (its rank ceiling is 1) and their witness is two equal
rows, found by reading the rows; the generic set is sampled. Beside them, the cost of what a
witness of the equal rows used to take: one ``svdvals`` of the whole T x d set (float64). Also
printed: how many factorisations (SVDs and pivoted QRs) each run's witnesses took.

    python benchmarks/bench_degenerate.py                    # T = 2000, d = 768, k = 5 and 197
    python benchmarks/bench_degenerate.py --T 500 --d 128 --k 5
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import mhaaudit
from mhaaudit.kruskal import witness


class Counted:
    """Counts the calls of ``torch.linalg.svdvals`` and of the witness's pivoted QR while active."""

    def __init__(self) -> None:
        self.svd = self.qr = 0

    def __enter__(self) -> Counted:
        self._svdvals, self._qr = torch.linalg.svdvals, witness.pivoted_basis

        def svdvals(*a, **k):
            self.svd += 1
            return self._svdvals(*a, **k)

        def qr(*a, **k):
            self.qr += 1
            return self._qr(*a, **k)

        torch.linalg.svdvals, witness.pivoted_basis = svdvals, qr
        return self

    def __exit__(self, *exc) -> None:
        torch.linalg.svdvals, witness.pivoted_basis = self._svdvals, self._qr


def sets(T: int, d: int, dtype: np.dtype, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "equal (random vector)": np.tile(rng.standard_normal(d), (T, 1)).astype(dtype),
        "equal (ones)": np.ones((T, d), dtype=dtype),
        "generic": rng.standard_normal((T, d)).astype(dtype),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=2000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--k", default="5,197", help="the sizes tested, as kruskal's --k")
    ap.add_argument("--samples", type=int, default=5000)
    args = ap.parse_args()
    ks = [int(k) for k in args.k.split(",")]
    print(f"kruskal on {args.T} x {args.d} rows, k = {ks}, {args.samples} draws (one process, seconds)")
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in (np.float32, np.float64):
            times: dict[str, float] = {}
            for name, X in sets(args.T, args.d, dtype).items():
                path = Path(tmp) / f"{name.split()[0]}-{np.dtype(dtype).name}.npy"
                np.save(path, X)
                mhaaudit.estimate_kruskal_rank(path, k=ks[:1], samples=64)  # warm-up: imports, caches
                with Counted() as c:
                    t = time.perf_counter()
                    res = mhaaudit.estimate_kruskal_rank(path, k=ks, samples=args.samples)
                    times[name] = time.perf_counter() - t
                verdicts = ", ".join(
                    f"k={r.k}: {r.verdict}/{r.exact_basis}"
                    + (f" (witness of {len(r.witness.indices)})" if r.witness else "")
                    for r in res.tests
                )
                print(
                    f"  {np.dtype(dtype).name:8s} {name:22s} {times[name]:7.2f} s   {verdicts}; "
                    f"factorisations: {c.svd} svdvals, {c.qr} pivoted QR"
                )
            worst = max(times["equal (random vector)"], times["equal (ones)"])
            print(f"  {np.dtype(dtype).name:8s} equal / generic: {worst / times['generic']:.2f}x")
        X = torch.from_numpy(np.tile(np.random.default_rng(0).standard_normal(args.d), (args.T, 1)))
        t = time.perf_counter()
        torch.linalg.svdvals(X)
        took = time.perf_counter() - t
        print(f"  the whole-set SVD a witness of the equal rows used to take (float64): {took:.2f} s")


if __name__ == "__main__":
    main()
