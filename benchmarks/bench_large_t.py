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

Two more modes work on ``.npy`` files written (a chunk at a time) to ``--dir``, which the audit
memory-maps:

- ``--sizes T1 T2 ...``: a draw costs the same at any T. For each T, in its own process: the
  streaming pass (``set_stats``: one read of the file, a second only where the d x d Gram is too
  coarse for the rank) timed beside a cold read of the same file (its pages dropped from the page
  cache first), a warm read, and the float64 arithmetic floor (T d^2 multiply-adds at the dgemm
  rate measured in that process),
  then ``--samples`` draws of ``--k`` rows (``subset_test`` with the statistics given), their time,
  and the peak resident memory beside the file's size; then the ratio of each T's draw time to the
  first T's. ``python benchmarks/bench_large_t.py --sizes 20000 1000000 --d 768 --k 128 --samples 2000``
- ``--audit-rows T``: the command line on a T x d file, ``mhaaudit kruskal FILE --k K --samples N``
  and ``mhaaudit kruskal FILE --sweep --samples M``, each in its own process: wall time, peak
  resident memory (the record's ``peak_rss_bytes``), the route and what was found; with
  ``--compare-in-memory`` the same library calls on the file read into memory, and whether the
  verdicts, fractions and witnesses agree (only for files that fit in memory twice over).
  ``python benchmarks/bench_large_t.py --audit-rows 4000000 --d 768 --k 197 --samples 5000 --sweep-samples 5000``

Files are removed afterwards unless ``--keep`` is given.
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
    return {
        "stats_s": t_stats,
        "test_s": t_test,
        "sweep_s": t_sweep,
        "floor_s": t_floor,
        "test": test,
        "sweep": list(sweep.fractions) if sweep else None,
        "held_mb": held,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def write_npy(path: Path, T: int, d: int, seed: int = 0) -> None:
    """The rows of :func:`features` for T x d, written to a ``.npy`` file a chunk at a time."""
    import numpy as np
    import torch

    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(T, d))
    g = torch.Generator().manual_seed(seed)
    spectrum = torch.logspace(0, -3, d)
    common = 5.0 * torch.randn(d, generator=g) / d**0.5
    for s in range(0, T, 65536):
        n = min(65536, T - s)
        mm[s : s + n] = (torch.randn(n, d, generator=g) * spectrum + common).numpy()
    mm.flush()
    del mm


def _plain_read_s(path: Path) -> float:
    """Seconds to read the file once a chunk at a time (the speed the streaming pass can reach)."""
    import numpy as np

    arr = np.load(path, mmap_mode="r")
    t0 = time.perf_counter()
    step = max(1, (32 << 20) // (arr.shape[1] * arr.itemsize))
    total = 0.0
    for s in range(0, arr.shape[0], step):
        total += float(np.asarray(arr[s : s + step]).sum(dtype=np.float64))
    return time.perf_counter() - t0


def _drop_from_cache(path: Path) -> bool:
    """Write the benchmark's own file out and ask the kernel to drop its pages from the page cache
    (fsync, then POSIX_FADV_DONTNEED), so the next read comes from the disk. False where the
    system has no posix_fadvise."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def _dgemm_rate(d: int) -> float:
    """Float64 multiply-adds a second of this process's BLAS on the streaming pass's shape (the
    d x d product of a chunk of ``chunk_rows(d)`` rows with itself, as a general product), the best
    of three at NumPy's own thread count and three on one thread."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    from mhaaudit.numerics.stream import chunk_rows

    n = chunk_rows(d)
    A = np.random.default_rng(0).standard_normal((n, d))
    B = A.copy()  # another buffer: a general product, not the symmetric one
    best = float("inf")
    for threads in (None, 1):
        with threadpool_limits(limits=threads, user_api="blas"):
            for _ in range(3):
                t0 = time.perf_counter()
                A.T @ B
                best = min(best, time.perf_counter() - t0)
    return n * d * d / best


def _tsqr_ran(stats) -> bool | None:
    """Whether the statistics needed the TSQR pass (at once, or for a ceiling since); None where
    this version of the statistics does not say."""
    brackets = getattr(stats, "gram_brackets", False)
    if brackets is False:
        return None
    return brackets is None or brackets.refined is not None


def one_size(a) -> dict:
    """In this process: the streaming pass and the draws on the mapped file ``a.file``."""
    import torch

    from mhaaudit.io import read_array
    from mhaaudit.kruskal import set_stats, subset_test
    from mhaaudit.numerics import RankRule
    from mhaaudit.numerics.stream import peak_rss_bytes

    if a.threads:
        torch.set_num_threads(a.threads)
    path = Path(a.file)
    cold_s = _plain_read_s(path) if _drop_from_cache(path) else float("nan")
    read_s = _plain_read_s(path)  # the pages are cached now: a warm read
    X, _ = read_array(path)
    rule = RankRule.for_dtype(X.dtype)
    rate = _dgemm_rate(X.shape[1])
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    stats = set_stats(X, rule)
    stats_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    test = subset_test(X, a.k, samples=a.samples, seed=0, rule=rule, stats=stats).record()
    draws_s = time.perf_counter() - t0
    return {
        "T": X.shape[0],
        "file_bytes": path.stat().st_size,
        "read_s": read_s,
        "cold_s": cold_s,
        "floor_s": X.shape[0] * X.shape[1] ** 2 / rate,
        "gflops": 2 * rate / 1e9,
        "load": load,
        "tsqr": _tsqr_ran(stats),
        "stats_s": stats_s,
        "draws_s": draws_s,
        "peak_bytes": peak_rss_bytes(),
        "route": test["gram"],
        "satisfied": test["satisfied"],
        "rank": test["set_rank_ceiling"],
        "storage": type(X).__name__,
    }


def _child(args: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def sizes_main(a) -> None:
    folder = Path(a.dir)
    folder.mkdir(parents=True, exist_ok=True)
    print(
        f"d = {a.d}, k = {a.k}, {a.samples} draws at each T; load average {os.getloadavg()[0]:.2f} on "
        f"{os.cpu_count()} cores"
    )
    print(
        f"{'T':>10}{'file MB':>10}{'read s':>9}{'cold s':>9}{'floor s':>9}{'stats s':>9}{'MB/s':>8}{'draws s':>9}"
        f"{'x first':>9}{'peak MB':>9}{'above file':>11}{'load':>6}  route"
    )
    first = None
    for T in a.sizes:
        path = folder / f"bench_large_t_{T}x{a.d}.npy"
        if not path.exists():
            write_npy(path, T, a.d)
        try:
            r = _child(
                ["--one-size", "--file", str(path), f"--k={a.k}", f"--samples={a.samples}", f"--threads={a.threads}"]
            )
        finally:
            if not a.keep:
                path.unlink(missing_ok=True)
        first = first or r["draws_s"]
        mb = r["file_bytes"] / 2**20
        print(
            f"{T:>10}{mb:>10.0f}{r['read_s']:>9.2f}{r['cold_s']:>9.2f}{r['floor_s']:>9.2f}{r['stats_s']:>9.2f}"
            f"{mb / r['stats_s']:>8.0f}{r['draws_s']:>9.2f}{r['draws_s'] / first:>9.2f}{r['peak_bytes'] / 2**20:>9.0f}"
            f"{(r['peak_bytes'] / 2**20) - mb:>11.0f}{r['load']:>6.1f}  "
            f"{r['route']} (whole-set rank at k: {r['rank']}, {r['satisfied']}/{a.samples} independent; "
            f"{ {True: 'a TSQR pass ran', False: 'the Gram decided', None: 'TSQR pass not reported'}[r['tsqr']] }; "
            f"dgemm {r['gflops']:.1f} GFLOP/s)"
        )
    print(
        f"(read s: one plain read of the file from the page cache (warm); cold s: the same read after the file's "
        f"pages were dropped from the cache (fsync, POSIX_FADV_DONTNEED), from the disk; floor s: T d^2 float64 "
        f"multiply-adds at the best dgemm rate measured in the same process (the Gram as a general product; a "
        f"symmetric one does half); stats s: the streaming pass (set_stats): the same read plus the float64 Gram "
        f"(and a TSQR pass where the Gram's brackets do not decide the rank); MB/s: file MB over stats s; draws s: "
        f"the draws alone; x first: draws s over the first T's; above file: peak resident memory less the file; "
        f"load: the 1-minute load average before the pass; load average after {os.getloadavg()[0]:.2f})"
    )


def _strip(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in ("gram", "exact_rechecks", "timings_s")}


def one_audit(a) -> dict:
    """In this process: the library calls of the audit on the file read into memory (``--compare-in-memory``)."""
    import numpy as np
    import torch

    from mhaaudit.kruskal import kruskal_sweep, set_stats, subset_test
    from mhaaudit.numerics import RankRule
    from mhaaudit.numerics.stream import peak_rss_bytes

    X = torch.from_numpy(np.load(a.file))
    rule = RankRule.for_dtype(X.dtype)
    stats = set_stats(X, rule)
    test = subset_test(X, a.k, samples=a.samples, seed=0, rule=rule, stats=stats).record()
    sw = kruskal_sweep(X, samples=a.sweep_samples, seed=0, rule=rule, stats=stats) if a.sweep_samples else None
    return {
        "test": _strip(test),
        "sweep": sw.rows() if sw else None,
        "rank": stats.rank,
        "peak_bytes": peak_rss_bytes(),
    }


def _cli(args: list[str]) -> tuple[float, dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "mhaaudit", *args, "--format", "json"], env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        raise SystemExit(p.stderr)
    return wall, json.loads(p.stdout)


def audit_main(a) -> None:
    folder = Path(a.dir)
    folder.mkdir(parents=True, exist_ok=True)
    T = a.audit_rows
    path = folder / f"bench_large_t_{T}x{a.d}.npy"
    if not path.exists():
        write_npy(path, T, a.d)
    print(
        f"{T} x {a.d} float32 ({path.stat().st_size / 1e9:.2f} GB, memory-mapped); load average "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    try:
        runs = {"test": _cli(["kruskal", str(path), "--k", str(a.k), "--samples", str(a.samples)])}
        if a.sweep_samples:
            runs["sweep"] = _cli(["kruskal", str(path), "--sweep", "--samples", str(a.sweep_samples)])
        for name, (wall, doc) in runs.items():
            meta = doc["meta"]
            how = f"k {a.k} --samples {a.samples}" if name == "test" else f"sweep --samples {a.sweep_samples}"
            print(
                f"kruskal --{how}: "
                f"wall {wall:.1f} s, peak RSS {meta['peak_rss_bytes'] / 1e9:.2f} GB ({meta['storage']}), "
                f"the set's own rank (its own tolerance) {meta['set_rank']}, timings {meta['timings_s']}"
            )
            if name == "test":
                r = doc["records"][0]
                w = r.get("witness_indices")
                print(
                    f"  route {r['gram']}: {r['satisfied']}/{r['samples']} independent, verdict {r['verdict']}, "
                    f"witness {w if w else 'none'}"
                )
            else:
                sm = meta.get("sweep_summary") or {}
                w, ceiling = sm.get("witness") or {}, sm.get("ceiling", {})
                print(
                    f"  route {sm.get('gram')}: estimate {sm.get('estimate')}, ceiling {ceiling.get('value')} "
                    f"({ceiling.get('kind')}), floor {sm.get('floor', {}).get('value')}, witness of "
                    f"{len(w.get('indices', []))} rows"
                )
        if a.compare_in_memory:
            mem = _child(
                [
                    "--one-audit",
                    "--file",
                    str(path),
                    f"--k={a.k}",
                    f"--samples={a.samples}",
                    f"--sweep-samples={a.sweep_samples}",
                ]
            )
            same_test = mem["test"] == _strip(runs["test"][1]["records"][0])
            same_sweep = (mem["sweep"] == runs["sweep"][1].get("sweep")) if a.sweep_samples else None
            print(
                f"in memory: peak RSS {mem['peak_bytes'] / 1e9:.2f} GB; whole-set rank "
                f"{mem['rank']}; test record agrees: {same_test}; sweep rows agree: {same_sweep}"
            )
    finally:
        if not a.keep:
            path.unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=50_000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--k", type=int, default=197)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--sweep-samples", type=int, default=32)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--variant", choices=("ours", "torch"), help=argparse.SUPPRESS)
    ap.add_argument("--sizes", type=int, nargs="+", help="draws at each of these T, on memory-mapped files")
    ap.add_argument("--audit-rows", type=int, help="the command line on a memory-mapped file of this many rows")
    ap.add_argument(
        "--compare-in-memory", action="store_true", help="with --audit-rows: the same on the data in memory"
    )
    ap.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"), help="folder for the .npy files")
    ap.add_argument("--keep", action="store_true", help="keep the .npy files")
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--one-size", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--one-audit", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.variant:
        print(json.dumps(one(a.variant, a)))
        return
    if a.one_size:
        print(json.dumps(one_size(a)))
        return
    if a.one_audit:
        print(json.dumps(one_audit(a)))
        return
    if a.sizes:
        sizes_main(a)
        return
    if a.audit_rows:
        audit_main(a)
        return
    from mhaaudit.kruskal.sampling import FULL_GRAM_MAX_BYTES, full_gram_bytes

    print(
        f"T = {a.T}, d = {a.d}, k = {a.k}, {a.samples} draws (sweep: {a.sweep_samples}); the full Gram would take "
        f"{full_gram_bytes(a.T) / 1e9:.1f} GB (formed up to {FULL_GRAM_MAX_BYTES / 2**20:.0f} MiB); "
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = {}
    for variant in ("ours", "torch"):
        args = [sys.executable, __file__, "--variant", variant] + [
            f"--{k.replace('_', '-')}={v}" for k, v in vars(a).items() if k != "variant"
        ]
        p = subprocess.run(args, env=env, capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(p.stderr)
        out[variant] = json.loads(p.stdout.strip().splitlines()[-1])
    o, t = out["ours"], out["torch"]
    print(f"{'':<28}{'test s':>9}{'sweep s':>9}{'floor s':>9}{'peak MB':>9}{'above X':>9}")
    for variant, label in (("ours", "ours (LAPACK, per draw)"), ("torch", "batched torch")):
        r = out[variant]
        print(
            f"{label:<28}{r['test_s']:>9.2f}{r['sweep_s']:>9.2f}{r['floor_s']:>9.2f}{r['peak_mb']:>9.0f}"
            f"{r['peak_mb'] - r['held_mb']:>9.0f}"
        )
    print(
        f"(sweep s: its draws; floor s: its Babel floor, the same code in both, O(T^2 d); above X: peak less the "
        f"process holding its float32 features, {o['held_mb']:.0f} MB)"
    )
    print(
        f"speed-up: {t['test_s'] / o['test_s']:.2f}x on the test"
        + (f", {t['sweep_s'] / o['sweep_s']:.2f}x on the sweep's draws" if o["sweep_s"] else "")
    )
    same = {k: v for k, v in o["test"].items() if k != "exact_rechecks"} == {
        k: v for k, v in t["test"].items() if k != "exact_rechecks"
    }
    print(
        f"test records agree: {same} (satisfied {o['test']['satisfied']}/{o['test']['samples']}, route "
        f"{o['test']['gram']}); sweep fractions agree: {o['sweep'] == t['sweep']}; "
        f"load average after {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
