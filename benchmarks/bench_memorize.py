"""Benchmarks for the capacity and memorisation code: ours beside the naive procedure.

1. Z of Theorem 1's proof: ``attention_combinations`` (chunked; logits through Wk q, so no
   (T, H, n, d_h) key tensor) vs a per-example, per-head loop.
2. One training step of the memorisation model with a shared context: keys and values computed
   once per batch vs the same context expanded to every example of the batch.

Usage: python benchmarks/bench_memorize.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from mhaaudit.capacity import attention_combinations, random_attention_weights
from mhaaudit.memorize import DIM, MemorizeModel, make_dataset


def _timeit(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def naive_Z(E, x, Wq, Wk):
    T, n, d = E.shape
    H, _, dh = Wq.shape
    rows = []
    for t in range(T):
        parts = []
        for h in range(H):
            k = E[t] @ Wk[h]  # (n, dh)
            q = x[t] @ Wq[h]
            p = torch.softmax(k @ q / math.sqrt(dh), dim=0)
            parts.append(E[t].T @ p)
        rows.append(torch.cat(parts))
    return torch.stack(rows)


def bench_Z(T: int, n: int, d: int, H: int, dh: int) -> None:
    g = torch.Generator().manual_seed(0)
    E = torch.rand(T, n, d, generator=g, dtype=torch.float64)
    x = torch.rand(T, d, generator=g, dtype=torch.float64)
    Wq, Wk = random_attention_weights(d, H, dh, seed=0)
    ours = attention_combinations(E, x, Wq, Wk)
    ref = naive_Z(E, x, Wq, Wk)
    err = (ours - ref).abs().max().item()
    t_ours = _timeit(lambda: attention_combinations(E, x, Wq, Wk))
    t_naive = _timeit(lambda: naive_Z(E, x, Wq, Wk), repeat=1)
    print(f"Z  T={T} n={n} d={d} H={H} d_h={dh}: ours {t_ours:.3f}s  naive loop {t_naive:.3f}s  "
          f"ratio {t_naive / t_ours:.1f}x  max|diff| {err:.1e}")


def bench_step(H: int, n: int, batch: int, steps: int) -> None:
    g = torch.Generator().manual_seed(0)
    q, ctx, y = make_dataset(size=batch, n=n, task="classification", context="shared", classes=100, generator=g)
    model = MemorizeModel(d=DIM, n=n, heads=H, head_dim=64, out_dim=100, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def run(context):
        for _ in range(steps):
            loss = torch.nn.functional.cross_entropy(model(q, context), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    expanded = ctx.expand(batch, n, DIM).contiguous()
    t_shared = _timeit(lambda: run(ctx))
    t_expanded = _timeit(lambda: run(expanded))
    print(f"step H={H} n={n} batch={batch}: shared keys {1e3 * t_shared / steps:.2f} ms  "
          f"expanded context {1e3 * t_expanded / steps:.2f} ms  ratio {t_expanded / t_shared:.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.quick:
        bench_Z(T=200, n=16, d=64, H=4, dh=16)
        bench_step(H=4, n=32, batch=256, steps=20)
    else:
        bench_Z(T=1000, n=32, d=64, H=8, dh=64)
        bench_step(H=8, n=32, batch=256, steps=50)
        bench_step(H=30, n=32, batch=256, steps=20)


if __name__ == "__main__":
    main()
