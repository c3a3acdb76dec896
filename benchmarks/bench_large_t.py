"""Benchmark: the Kruskal estimator on a feature set too large for its full Gram matrix (T = 50 000).

The full T x T float64 Gram of T = 50 000 rows would take 20 GB, so past ``FULL_GRAM_MAX_BYTES``
each draw's Gram is computed from its rows. Two ways, each in its own process (so that its peak
memory is its own):

- **ours**: the CPU LAPACK kernels (``lapack.decide_draws``, ``lapack.SweepKernel``) on Gram
  entries computed per draw from the rows (``lapack.RowGramEntries``);
- **batched torch** (what ran past the old ``FULL_GRAM_MAX_T = 6000``): batched ``rows @ rows^T``
  and the torch certificates, without the LAPACK kernels.

Prints time, peak resident memory (ru_maxrss, and its excess over the process holding its
features), the ratio, and whether the records agree (they must; only ``exact_rechecks`` may
differ). The sweep's time is shown without its Babel floor, which both compute alike in
O(T^2 d) and which is timed apart. Asserts nothing. Run:

    python benchmarks/bench_large_t.py [--T 50000] [--d 768] [--k 197] [--samples 1000]
        [--sweep-samples 32] [--threads N]

The features are seeded transformer-like rows (a dominant common direction and a decaying
spectrum), float32 as the audit captures them; k = 197 is ViT-Base's n.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def features(T: int, d: int, seed: int = 0):
    """T x d float32 rows, made 4096 at a time (no float64 copy of the whole set)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    spectrum = torch.logspace(0, -3, d)
    common = 5.0 * torch.randn(d, generator=g) / d**0.5
    X = torch.empty(T, d)
    for s in range(0, T, 4096):
        X[s : s + 4096] = torch.randn(min(4096, T - s), d, generator=g) * spectrum + common
    return X


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def one(variant: str, a) -> dict:
    """Run one variant in this process; what it took and what it found."""
    import torch

    from mhaaudit.kruskal import kruskal_sweep, set_stats, subset_test
    from mhaaudit.kruskal import sweep as sweep_module
    from mhaaudit.kruskal.sampling import KERNELS_ENV
    from mhaaudit.numerics import RankRule

    if a.threads:
        torch.set_num_threads(a.threads)
    X = features(a.T, a.d)
    held = _rss_mb()  # the process and the features: what any method holds
    rule = RankRule.for_dtype(X.dtype)
    t0 = time.perf_counter()
    stats = set_stats(X, rule)
    t_stats = time.perf_counter() - t0
    if variant == "torch":
        os.environ[KERNELS_ENV] = "torch"  # the LAPACK kernels off: the batched torch (GPU) kernels
    t0 = time.perf_counter()
    test = subset_test(X, a.k, samples=a.samples, seed=0, rule=rule, stats=stats).record()
    t_test = time.perf_counter() - t0
    floor_s = [0.0]  # the sweep's Babel floor (the same code in both variants, O(T^2 d)), timed apart
    babel = sweep_module.babel_floor

    def timed_floor(*args, **kwargs):
        t = time.perf_counter()
        try:
            return babel(*args, **kwargs)
        finally:
            floor_s[0] += time.perf_counter() - t

    sweep_module.babel_floor = timed_floor
    t0 = time.perf_counter()
    sweep = kruskal_sweep(X, samples=a.sweep_samples, seed=0, rule=rule, stats=stats) if a.sweep_samples else None
    t_sweep = time.perf_counter() - t0 - floor_s[0]
    t_floor = floor_s[0]
    return {"stats_s": t_stats, "test_s": t_test, "sweep_s": t_sweep, "floor_s": t_floor, "test": test,
            "sweep": list(sweep.fractions) if sweep else None, "held_mb": held,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=50_000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--k", type=int, default=197)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--sweep-samples", type=int, default=32)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--variant", choices=("ours", "torch"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.variant:
        print(json.dumps(one(a.variant, a)))
        return
    from mhaaudit.kruskal.sampling import FULL_GRAM_MAX_BYTES, full_gram_bytes

    print(f"T = {a.T}, d = {a.d}, k = {a.k}, {a.samples} draws (sweep: {a.sweep_samples}); the full Gram would take "
          f"{full_gram_bytes(a.T) / 1e9:.1f} GB (formed up to {FULL_GRAM_MAX_BYTES / 2**20:.0f} MiB); "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = {}
    for variant in ("ours", "torch"):
        args = [sys.executable, __file__, "--variant", variant] + [f"--{k.replace('_', '-')}={v}" for k, v in vars(a).items()
                                                                   if k != "variant"]
        p = subprocess.run(args, env=env, capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(p.stderr)
        out[variant] = json.loads(p.stdout.strip().splitlines()[-1])
    o, t = out["ours"], out["torch"]
    print(f"{'':<28}{'test s':>9}{'sweep s':>9}{'floor s':>9}{'peak MB':>9}{'above X':>9}")
    for variant, label in (("ours", "ours (LAPACK, per draw)"), ("torch", "batched torch")):
        r = out[variant]
        print(f"{label:<28}{r['test_s']:>9.2f}{r['sweep_s']:>9.2f}{r['floor_s']:>9.2f}{r['peak_mb']:>9.0f}"
              f"{r['peak_mb'] - r['held_mb']:>9.0f}")
    print(f"(sweep s: its draws; floor s: its Babel floor, the same code in both, O(T^2 d); above X: peak less the "
          f"process holding its float32 features, {o['held_mb']:.0f} MB)")
    print(f"speed-up: {t['test_s'] / o['test_s']:.2f}x on the test"
          + (f", {t['sweep_s'] / o['sweep_s']:.2f}x on the sweep's draws" if o["sweep_s"] else ""))
    same = {k: v for k, v in o["test"].items() if k != "exact_rechecks"} == \
           {k: v for k, v in t["test"].items() if k != "exact_rechecks"}
    print(f"test records agree: {same} (satisfied {o['test']['satisfied']}/{o['test']['samples']}, route "
          f"{o['test']['gram']}); sweep fractions agree: {o['sweep'] == t['sweep']}; "
          f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
