"""Benchmark: a memorisation grid trained point by point beside the stacked grid, on one device.

1. plain loop: each point alone in the plain training loop (``mhaaudit.memorize.reference``: one
   ``MemorizeModel``, ``torch.optim.Adam``, one batch after another; on the CPU one intra-op
   thread), one point after the other: the procedure before points were stacked.
2. stacked, one point per group: ``run_memorize_grid(max_group=1)`` (on the CPU the groups run
   side by side, one per core).
3. stacked grid: ``run_memorize_grid`` as shipped.

Prints the wall time of each (and, on the CPU, the CPU time of the process, which other
processes on the machine disturb less), the ratios to the plain loop, and how far the memorised
counts of 1 and 3 lie apart. Nothing is asserted. Run:

    python benchmarks/bench_memorize.py [--preset cpu] [--max-steps 1000] [--device cpu|cuda] [--skip-plain]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from mhaaudit.memorize import run_memorize_grid
from mhaaudit.memorize.grid import MemorizeRequest, points, resolve_grid
from mhaaudit.memorize.reference import train_plain
from mhaaudit.memorize.training import Point, intra_op_threads
from mhaaudit.settings import device_name, resolve_device


def _timed(fn):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu", help="a preset of run_memorize_grid (default cpu)")
    ap.add_argument("--max-steps", type=int, default=None, help="cap on steps per point (default: the preset's)")
    ap.add_argument("--seeds", default=None, help="seeds, e.g. 0-5 (default: seed 0)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--skip-plain", action="store_true", help="skip the plain loop (slow on large grids)")
    args = ap.parse_args()
    dev = resolve_device(args.device)
    request = MemorizeRequest(preset=args.preset, max_steps=args.max_steps)
    grid, recipe = resolve_grid(request), request.recipe
    kw = dict(preset=args.preset, max_steps=args.max_steps, seeds=args.seeds, device=dev)
    stacked, w3, c3 = _timed(lambda: run_memorize_grid(**kw))
    pts = [Point(**p, seed=s) for p in points(grid) for s in stacked.seeds]
    print(
        f"grid {args.preset}: {len(pts)} points, {max(r.planned_steps for r in stacked.runs)} steps at most, "
        f"on {device_name(dev)}, torch {torch.__version__}, {os.cpu_count()} CPU cores, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    rows = []
    if not args.skip_plain:
        with intra_op_threads(dev, 1):
            plain, w1, c1 = _timed(lambda: [train_plain(p, recipe, dev) for p in pts])
        rows.append(("plain loop, point by point", w1, c1))
    _, w2, c2 = _timed(lambda: run_memorize_grid(**kw, max_group=1))
    rows.append(("stacked, one point per group", w2, c2))
    rows.append((f"stacked grid ({len(stacked.groups)} groups)", w3, c3))
    base = rows[0][1] if rows else w3
    for name, w, c in rows:
        cpu = f"  cpu {c:8.1f} s" if dev.type == "cpu" else ""
        print(f"  {name:<34} wall {w:8.1f} s{cpu}  ratio {base / w:5.2f}x")
    if not args.skip_plain:
        diff = max(abs(r.memorized_count - p["memorized_count"]) for r, p in zip(stacked.runs, plain, strict=False))
        print(
            f"  largest difference in memorised count, plain vs stacked: {diff} "
            f"(counts {[p['memorized_count'] for p in plain]} vs {[r.memorized_count for r in stacked.runs]})"
        )


if __name__ == "__main__":
    main()
