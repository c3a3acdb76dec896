"""Benchmark: one seed against several seeds in one process (``mhaaudit check --seeds``).

Both sides audit the same columns of the same model on the built-in images:

- one seed: :func:`mhaaudit.audit` with ``seed=0``;
- several seeds: :func:`mhaaudit.audit` with ``seeds="0-4"`` (``--seeds-count`` of them), which
  runs each seed through the same pipeline and shares what the seeds have in common: a trained
  model is loaded once for every seed, a random one once per weights seed (``--vary data`` holds
  the weights seed, so every run shares one model).

The naive procedure is the first side run once per seed, each loading its model again; the
several-seed run should cost at most that (the seeds times one seed) and less wherever the loads
are shared. Imports and one warm-up run are done before timing. Prints the wall-clock and CPU
times (this process's; the CPU time moves less with the machine's load), the ratio to one seed and
the ratio to the naive procedure; asserts nothing. Run:

    python benchmarks/bench_seeds.py [--model vit-base] [--limit 200] [--samples 300] [--seeds-count 5]
                                     [--vary both,weights,data] [--variants random] [--device cpu]

The defaults time one seed beside 5 seeds for each ``--vary`` mode. The smallest setting for
ViT-Base is ``--limit 197`` (T must reach n = 197 tokens) with few draws (``--samples 50``); a
model folder with a shorter context (the tests' tiny ViT, n = 17) runs in seconds.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from mhaaudit import audit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--model", default="vit-base", help="an alias, a folder or timm:<name> (random weights build offline)"
    )
    ap.add_argument("--variants", default="random", help="columns, comma-separated (default: random)")
    ap.add_argument("--limit", type=int, default=200, help="examples T")
    ap.add_argument("--samples", type=int, default=300, help="Monte-Carlo draws per test")
    ap.add_argument("--seeds-count", type=int, default=5, help="how many seeds the several-seed run has")
    ap.add_argument(
        "--vary",
        default="both,weights,data",
        help="what the seeds vary, one run each: both, weights, data (comma-separated; default all three)",
    )
    ap.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    args = ap.parse_args()

    common = dict(
        variants=args.variants.split(","), limit=args.limit, samples=args.samples, device=args.device, batch_size=32
    )
    audit(args.model, **{**common, "samples": 10})  # warm-up: imports, caches

    def timed(fn):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        return time.perf_counter() - t0, time.process_time() - c0, out

    print(f"model {args.model}, columns {args.variants}, T = {args.limit}, {args.samples} draws, device {args.device}")
    one, one_cpu, _ = timed(lambda: audit(args.model, seed=0, **common))
    # the naive procedure: one independent run per seed
    naive, naive_cpu, _ = timed(lambda: [audit(args.model, seed=s, **common) for s in range(args.seeds_count)])
    print(f"1 seed:                                {one:8.2f} s wall, {one_cpu:8.2f} s CPU")
    print(
        f"{args.seeds_count} independent runs (naive):            {naive:8.2f} s wall, {naive_cpu:8.2f} s CPU  "
        f"({naive / one:.2f}x / {naive_cpu / one_cpu:.2f}x one seed)"
    )
    for vary in [v.strip() for v in args.vary.split(",")]:
        many, many_cpu, res = timed(
            lambda v=vary: audit(args.model, seeds=f"0-{args.seeds_count - 1}", vary=v, **common)
        )
        print(
            f"--seeds 0-{args.seeds_count - 1} --vary {vary.strip():7s} in one run: {many:8.2f} s wall, "
            f"{many_cpu:8.2f} s CPU  "
            f"({many / one:.2f}x / {many_cpu / one_cpu:.2f}x one seed, {many_cpu / naive_cpu:.2f}x the naive runs' "
            "CPU; "
            f"{len(res.summaries)} cells)"
        )


if __name__ == "__main__":
    main()
