"""Kruskal-rank estimator: the paper's procedure beside ours, in one process.

The paper's procedure is a Python loop that draws k distinct rows and calls
``torch.linalg.matrix_rank(rows).item()`` on the float32 features, once per draw. Ours is
``mhaaudit.kruskal.subset_test`` (one candidate size) and ``kruskal_sweep`` (every size from one
set of nested draws). Both sides make every draw asked for; the test as ``check`` and ``kruskal``
run it, stopped once its verdict is settled, is timed beside them with the draws it made. Both use
the same tolerance rule (sigma_max * max(k, d) * eps(float32)); ours decides in float64 and is
checked draw by draw against ``matrix_rank`` on the same draws.

    python benchmarks/bench_kruskal.py                 # 2000 x 768 features, k = 197, 5000 draws
    python benchmarks/bench_kruskal.py --features DIR  # features saved by `mhaaudit check --save-features`
    python benchmarks/bench_kruskal.py --device cuda   # both on the GPU; ours checked against the CPU draw by draw
    MHAAUDIT_KERNELS=torch python benchmarks/bench_kruskal.py   # the GPU's batched kernels, run on the CPU

Both sides run on the device given: the loop's ``matrix_rank`` calls and our kernels. For a
quick run, ``--naive-draws`` times the loop on fewer draws and scales its time to ``--samples``
(printed as extrapolated).

Without --features the matrix is synthetic but shaped like transformer features: a dominant
common direction (as [CLS] vectors have) plus a decaying spectrum, so that numerical rank,
Kruskal rank and near-tolerance draws all occur.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import torch

from mhaaudit.kruskal import draw_decisions, kruskal_sweep, set_stats, subset_test
from mhaaudit.kruskal.sampling import device_kernels
from mhaaudit.numerics import RankRule
from mhaaudit.settings import resolve_device


def synthetic(T: int, d: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    U = torch.randn(T, d, generator=g, dtype=torch.float64)
    spectrum = torch.logspace(0, -5, d, dtype=torch.float64)
    V = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0]
    common = 5.0 * torch.randn(d, generator=g, dtype=torch.float64)
    return ((U * spectrum) @ V.T + common).float()


def paper_loop(X: torch.Tensor, k: int, draws: int, seed: int = 0) -> tuple[float, list[bool]]:
    """The paper's procedure: one matrix_rank call per draw (float32 features), on X's device."""
    gen = torch.Generator(device=X.device).manual_seed(seed)
    out = []
    _sync(X.device)
    t = time.perf_counter()
    for _ in range(draws):
        idx = torch.randperm(X.shape[0], generator=gen, device=X.device)[:k]
        out.append(torch.linalg.matrix_rank(X[idx]).item() == k)
    return time.perf_counter() - t, out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device):
    """``(seconds, fn())`` with the device synchronised on both sides."""
    _sync(device)
    t = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - t, out


def measure_test(
    X: torch.Tensor,
    k: int,
    samples: int,
    dev: torch.device,
    *,
    naive_draws: int | None = None,
    check_draws: int = 1000,
    repeats: int = 1,
    stats=None,
) -> dict:
    """Time the paper's loop and ``subset_test`` at one candidate size on ``dev``, and check ours.

    Both sides make ``samples`` draws: ``ours_s`` is ``subset_test`` with every draw made
    (``stop_when_decided=False``), the median of ``repeats`` timed runs after a warm-up, and
    ``fraction`` is over all of them. The test as ``check`` and ``kruskal`` run it by default stops once
    its verdict is settled: ``stopped_s`` (one run) and ``stopped_draws``, the draws it made. The
    decisions of ``check_draws`` of our draws are compared with ``matrix_rank`` (float64 with the same
    rule, and the paper's float32 call); on a GPU also with the CPU's draws and decisions for the same seed.
    """
    T, d = X.shape
    rule = RankRule.for_dtype(X.dtype)
    stats = stats if stats is not None else set_stats(X, rule)
    N = samples
    Xd = X.to(dev)
    subset_test(X, k, samples=64, rule=rule, device=dev, stats=stats)  # warm-up
    paper_loop(Xd, k, 3)

    def test(all_draws: bool):
        return subset_test(X, k, samples=N, rule=rule, device=dev, stats=stats, stop_when_decided=not all_draws)

    runs = [timed(lambda: test(True), dev) for _ in range(repeats)]
    ours, res = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
    stopped, early = timed(lambda: test(False), dev)
    n_naive = min(N, naive_draws or N)
    naive, naive_dec = paper_loop(Xd, k, n_naive)
    out = {
        "T": T,
        "d": d,
        "k": k,
        "samples": N,
        "naive_s": naive * N / n_naive,
        "naive_draws": n_naive,
        "naive_fraction": sum(naive_dec) / n_naive,
        "ours_s": ours,
        "ours_runs_s": [r[0] for r in runs],
        "all_draws": True,
        "draws": res.samples,
        "fraction": res.fraction,
        "stopped_s": stopped,
        "stopped_draws": early.samples,
        "exact_rechecks": res.exact_rechecks,
        "gram": res.gram,
    }
    # same decisions: ours against matrix_rank (float64, same rule) on our own draws, and the CPU's draws
    check_n = min(N, check_draws)
    idx, full = draw_decisions(X, k, samples=check_n, rule=rule, device=dev)
    ref = torch.tensor([int(torch.linalg.matrix_rank(X[i].double(), rtol=rule.rtol_for(k, d))) == k for i in idx])
    ref32 = torch.tensor([int(torch.linalg.matrix_rank(X[i])) == k for i in idx])
    out |= {
        "check_draws": check_n,
        "equal_float64": int((full == ref).sum()),
        "equal_float32": int((full == ref32).sum()),
    }
    if dev.type != "cpu":
        idx_c, full_c = draw_decisions(X, k, samples=check_n, rule=rule, device="cpu")
        out["equal_cpu"] = int(((idx_c == idx).all(1) & (full_c == full)).sum())
    return out


def measure_sweep(X: torch.Tensor, samples: int, dev: torch.device, *, loop_draws: int = 100, stats=None) -> dict:
    """Time ``kruskal_sweep`` (every k) on ``dev`` beside the paper's loop at every 10th k.

    The loop is timed at five sizes (``loop_draws`` draws each) and its cost over every 10th k
    interpolated and scaled to ``samples`` draws (``naive_s``, extrapolated).
    """
    T, d = X.shape
    rule = RankRule.for_dtype(X.dtype)
    stats = stats if stats is not None else set_stats(X, rule)
    N, Xd = samples, X.to(dev)
    K = min(T, d)
    paper_ks = sorted({*range(1, K + 1, 10), K})
    probe_ks = sorted(set([1, K // 4, K // 2, 3 * K // 4, K]) - {0})
    per_call = {}
    for kk in probe_ks:
        secs, _ = paper_loop(Xd, kk, loop_draws, seed=1)
        per_call[kk] = secs / loop_draws

    def cost(kk: int) -> float:  # piecewise-linear interpolation of the per-call cost over k
        ks = sorted(per_call)
        for a, b in itertools.pairwise(ks):
            if a <= kk <= b:
                w = (kk - a) / max(1, b - a)
                return per_call[a] * (1 - w) + per_call[b] * w
        return per_call[ks[-1]]

    ours, sw = timed(lambda: kruskal_sweep(X, samples=N, rule=rule, device=dev, stats=stats), dev)
    return {
        "T": T,
        "d": d,
        "samples": N,
        "naive_s": sum(cost(kk) for kk in paper_ks) * N,
        "naive_sizes": len(paper_ks),
        "loop_per_call_s": {str(kk): v for kk, v in per_call.items()},
        "loop_draws": loop_draws,
        "ours_s": ours,
        "exact_rechecks": sw.exact_rechecks,
        "kmax_sampled": sw.kmax_sampled,
        "estimate": sw.estimate,
        "ceiling": sw.ceiling.value,
        "ceiling_kind": sw.ceiling.kind,
        "floor": sw.floor.value,
        "fractions": [float(f) for f in sw.fractions],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--features", help="a folder written by --save-features (uses its query vectors)")
    ap.add_argument("--T", type=int, default=2000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--k", type=int, default=197)
    ap.add_argument("--samples", type=int, default=5000)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N: where both sides run")
    ap.add_argument("--naive-draws", type=int, help="time the loop on this many draws and scale to --samples")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--loop-draws", type=int, default=100, help="draws per size when timing the loop for the sweep")
    ap.add_argument("--json", help="also write the figures to this result file (the docs' Benchmarks page)")
    args = ap.parse_args()
    from resultfiles import Run, seconds

    run = Run("bench_kruskal.py", sys.argv[1:])

    if args.features:
        from mhaaudit.features import FeatureSet

        fs = FeatureSet.load(args.features)
        X, what = fs.queries, f"{args.features} ({fs.meta.get('model')} {fs.meta.get('variant')})"
    else:
        X, what = synthetic(args.T, args.d), "synthetic transformer-like features"
    T, d = X.shape
    rule = RankRule.for_dtype(X.dtype)
    dev = resolve_device(args.device)
    kernels = "batched torch kernels" if device_kernels(dev) else "CPU LAPACK kernels"
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(
        f"features: {T} x {d} {X.dtype} ({what}); torch {torch.__version__} (CUDA {torch.version.cuda}); "
        f"device {dev} ({where}); ours on the {kernels}"
    )
    stats = set_stats(X, rule)
    print(f"whole-set numerical rank {stats.rank}")

    # ---- one candidate size -------------------------------------------------------------
    k, N = args.k, args.samples
    r = measure_test(X, k, N, dev, naive_draws=args.naive_draws, stats=stats)
    scaled_note = f" (timed on {r['naive_draws']} draws, scaled to {N})" if r["naive_draws"] < N else ""
    print(f"\n[k = {k}, {N} draws on each side, both on {dev}]")
    print(
        f"  paper's loop (matrix_rank per draw, float32): {r['naive_s']:8.3f} s{scaled_note}   fraction "
        f"{r['naive_fraction']:.4f}"
    )
    print(
        f"  mhaaudit subset_test:                          {r['ours_s']:8.3f} s   fraction {r['fraction']:.4f}  "
        f"({r['exact_rechecks']} exact re-checks, Gram {r['gram']})"
    )
    print(f"  ratio (loop / ours): {r['naive_s'] / r['ours_s']:.1f}x")
    print(
        f"  the same test stopped once its verdict is settled (as check and kruskal run it): {r['stopped_s']:.3f} s, "
        f"{r['stopped_draws']} draws"
    )
    check_n = r["check_draws"]
    print(f"  decisions equal to matrix_rank (float64, same rule) on {check_n} draws: {r['equal_float64']}/{check_n}")
    print(f"  decisions equal to matrix_rank on the float32 rows (the paper's call):  {r['equal_float32']}/{check_n}")
    if "equal_cpu" in r:
        print(f"  same draws and decisions as on the CPU: {r['equal_cpu']}/{check_n}")

    source = f"{what}" if args.features else "synthetic transformer-like features"
    rows = [
        {
            "what": f"Monte-Carlo test, k = {k}, {T} x {d} {str(X.dtype).removeprefix('torch.')} ({source}), {N} draws",
            "naive": f"{seconds(r['naive_s'])} (`matrix_rank` loop{scaled_note})",
            "mhaaudit": f"{seconds(r['ours_s'])} (every draw; {seconds(r['stopped_s'])} stopped once decided, "
            f"after {r['stopped_draws']} draws)",
            "ratio": f"{r['naive_s'] / r['ours_s']:.1f}x",
            "checked": f"{r['equal_float64']}/{check_n} decisions equal to `matrix_rank`",
        }
    ]
    if args.skip_sweep:
        if args.json:
            run.write(args.json, rows, {"test": r})
        return
    # ---- the sweep over every k ---------------------------------------------------------
    s = measure_sweep(X, N, dev, loop_draws=args.loop_draws, stats=stats)
    K = min(T, d)
    print(f"\n[sweep, {N} draws, both on {dev}]")
    print(
        f"  paper's loop per call (measured, {args.loop_draws} draws each): "
        + ", ".join(f"k={kk}: {v * 1e3:.1f} ms" for kk, v in s["loop_per_call_s"].items())
    )
    print(
        f"  paper's loop at every 10th k ({s['naive_sizes']} sizes x {N} draws), extrapolated from those timings: "
        f"{s['naive_s']:9.1f} s"
    )
    print(
        f"  mhaaudit kruskal_sweep, every k from 1 to {K}, measured:                                   "
        f"{s['ours_s']:9.1f} s "
        f"({s['exact_rechecks']} exact re-checks; sizes above {s['kmax_sampled']} certified by the set rank)"
    )
    print(
        f"  ratio (loop / ours): {s['naive_s'] / s['ours_s']:.0f}x; estimate {s['estimate']}, ceiling {s['ceiling']} "
        f"({s['ceiling_kind']}), floor {s['floor']}"
    )
    if args.json:
        rows.append(
            {
                "what": f"Sweep over every k up to {K}, {N} draws ({source})",
                "naive": f"{seconds(s['naive_s'])} (loop at every 10th k, extrapolated)",
                "mhaaudit": seconds(s["ours_s"]),
                "ratio": f"{s['naive_s'] / s['ours_s']:.0f}x",
                "checked": f"estimate {s['estimate']}, ceiling {s['ceiling']} ({s['ceiling_kind']})",
            }
        )
        run.write(args.json, rows, {"test": r, "sweep": s})


if __name__ == "__main__":
    main()
