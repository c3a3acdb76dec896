"""Benchmark: shrinking a dependent draw to a small witness, by SVDs one row at a time (naive) and by mhaaudit.

A witness is a small subset of rows proven dependent under the rank rule. Two k-row draws of a
T x d set (Gaussian rows, ``--T 2000 --d 768``), each dependent:

* ``planted``: ``k`` generic rows among which one is a combination of ``r`` others: the smallest
  witness has r + 1 rows;
* ``low rank``: ``k`` rows of a set of rank ``r`` (a ViT embedding layer's [CLS] queries have
  about 186): every r + 1 of them are dependent.

Naive: greedy deletion, the textbook way to a minimal dependent subset. Each row in turn is dropped
when the rows left are still dependent, decided by ``torch.linalg.svdvals`` in float64 on the
device under the same rule: one SVD per row, k in all (about a minute for both draws on 2 cores).
``--naive-steps N`` times only its first N SVDs and multiplies their mean by k, an estimate the
output says it is (and too high: the rows left, and so the SVDs, shrink as it goes).
Ours: ``kruskal.witness.shrink`` on the same rows (one pivoted QR and a few SVDs, at most
``MAX_FACTORISATIONS``). Prints both times, the ratio, the witness sizes and factorisation counts,
and whether ``matrix_rank`` finds ours' rows dependent; asserts nothing (``--json PATH``: a result
file for the docs' Benchmarks page). Run:

    python benchmarks/bench_witness.py [--device cpu|cuda|auto] [--k 768] [--r 186] [--naive-steps N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from mhaaudit.kruskal import witness
from mhaaudit.kruskal.sampling import rows_of
from mhaaudit.numerics import RankRule
from mhaaudit.numerics.stream import unit_of
from mhaaudit.settings import device_name, resolve_device


def draws(T: int, d: int, k: int, r: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """The two dependent k-row sets (float32, as a model's features are): planted and low rank."""
    g = torch.Generator().manual_seed(seed)
    planted = torch.randn(T, d, generator=g)
    planted[k - 1] = planted[:r].sum(dim=0)  # row k - 1 = the sum of rows 0 .. r - 1
    low = torch.randn(T, r, generator=g) @ torch.randn(r, d, generator=g) / r**0.5
    return {"planted": planted, "low rank": low}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def dependent(rows: torch.Tensor, rule: RankRule) -> bool:
    """Whether the rows are dependent under the rule: one float64 SVD on their device (naive)."""
    s = torch.linalg.svdvals(rows.double())
    tol = rule.tol(s[0], *rows.shape) if s.numel() else 0.0
    return int((s > tol).sum()) < rows.shape[0]


def greedy_deletion(X: torch.Tensor, k: int, rule: RankRule, steps: int) -> tuple[float, int, int | None]:
    """``(seconds per SVD, SVDs timed, witness size or None)`` of greedy deletion over the first k rows, stopped
    after ``steps`` SVDs (0: run to the end, and the size is the witness's)."""
    keep = list(range(k))
    done = 0
    _sync(X.device)
    t = time.perf_counter()
    for i in range(k):
        if steps and done >= steps:
            break
        trial = [j for j in keep if j != i]
        if trial and dependent(X[trial], rule):
            keep = trial
        done += 1
    _sync(X.device)
    took = time.perf_counter() - t
    return took / max(done, 1), done, (len(keep) if done == k else None)


def timed_shrink(unit, k: int, device: torch.device):
    """``(seconds, witness, {"qr": pivoted QRs, "svd": SVDs})`` of ``witness.shrink`` on the first k rows."""
    counted = {"svd": 0, "qr": 0}
    real_prove, real_qr = witness.prove, witness.pivoted_basis

    def prove(*a, **kw):
        counted["svd"] += 1
        return real_prove(*a, **kw)

    def qr(*a, **kw):
        counted["qr"] += 1
        return real_qr(*a, **kw)

    witness.prove, witness.pivoted_basis = prove, qr
    try:
        _sync(device)
        t = time.perf_counter()
        w = witness.shrink(unit, range(k))
        _sync(device)
        return time.perf_counter() - t, w, counted
    finally:
        witness.prove, witness.pivoted_basis = real_prove, real_qr


def measure(device: torch.device, T: int, d: int, k: int, r: int, naive_steps: int) -> dict:
    """Both sides on each draw: seconds, witness sizes, factorisations, and ``matrix_rank`` on ours' rows."""
    out: dict = {"device": device_name(device), "T": T, "d": d, "k": k, "r": r, "sets": {}}
    for name, X in draws(T, d, k, r).items():
        X = X.to(device)
        rule = RankRule.for_dtype(X.dtype)
        unit = unit_of(rows_of(X), rule)[0]
        witness.shrink(unit, range(k))  # warm-up: imports, LAPACK, the device's kernels
        per, done, naive_size = greedy_deletion(X, k, rule, naive_steps)
        ours_s, w, counted = timed_shrink(unit, k, device)
        rows = X[list(w.indices)].double()
        rank = int(torch.linalg.matrix_rank(rows, rtol=rule.rtol_for(*rows.shape), atol=rule.atol_value))
        out["sets"][name] = {
            "naive_s": per * k,
            "naive_svds": done,
            "naive_size": naive_size,
            "ours_s": ours_s,
            "size": len(w.indices),
            "rank": w.rank,
            "pivoted_qr": counted["qr"],
            "svds": counted["svd"],
            "matrix_rank_dependent": rank < len(w.indices),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", help="cpu, cuda or auto (cuda when there is one)")
    ap.add_argument("--T", type=int, default=2000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--k", type=int, default=768, help="rows in the dependent draw")
    ap.add_argument("--r", type=int, default=186, help="rank of the low-rank set; rows in the planted combination")
    ap.add_argument("--naive-steps", type=int, default=0, help="SVDs of greedy deletion timed (0: all k)")
    ap.add_argument("--json", help="also write the figures to this result file (the docs' Benchmarks page)")
    args = ap.parse_args()
    if not 1 <= args.r < args.k <= args.T:
        ap.error("need 1 <= r < k <= T")
    from resultfiles import Run, seconds

    run = Run("bench_witness.py", sys.argv[1:])
    device = resolve_device(args.device)
    m = measure(device, args.T, args.d, args.k, args.r, args.naive_steps)
    print(f"witness of a dependent {args.k}-row draw of {args.T} x {args.d} rows on {m['device']} (seconds)")
    rows = []
    for name, r in m["sets"].items():
        how = "measured" if r["naive_size"] is not None else f"estimated from {r['naive_svds']} of {args.k} SVDs"
        found = f", witness of {r['naive_size']}" if r["naive_size"] is not None else ""
        proof = "proven by matrix_rank" if r["matrix_rank_dependent"] else "NOT DEPENDENT by matrix_rank"
        print(
            f"  {name:9s} naive {r['naive_s']:8.2f} s ({how}{found})   ours {r['ours_s']:6.3f} s, witness of "
            f"{r['size']} (rank {r['rank']}), {r['pivoted_qr']} pivoted QR + {_svds(r['svds'])} ({proof})   "
            f"ratio {r['naive_s'] / r['ours_s']:7.1f}x"
        )
        rows.append(
            {
                "what": f"Witness of a dependent {args.k}-row draw of {args.T} x {args.d} rows, {name} "
                f"(rank {args.r}; {m['device']})",
                "naive": f"{seconds(r['naive_s'])} (greedy deletion, one SVD a row; {how}{found})",
                "mhaaudit": f"{seconds(r['ours_s'])} (witness of {r['size']}: {r['pivoted_qr']} pivoted QR, "
                f"{_svds(r['svds'])})",
                "ratio": f"{r['naive_s'] / r['ours_s']:.1f}x",
                "checked": proof,
            }
        )
    if args.json:
        run.write(args.json, rows, m)


def _svds(n: int) -> str:
    return f"{n} SVD" + ("" if n == 1 else "s")


if __name__ == "__main__":
    main()
