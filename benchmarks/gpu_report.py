"""The GPU figures in one command: the parts by value, each in its own process, within a time budget, resumable.

    python benchmarks/gpu_report.py --device cuda                   # the parts that fit 480 s, most valuable first
    python benchmarks/gpu_report.py --device cuda --budget 300      # ... that fit 300 s; run again to go on
    python benchmarks/gpu_report.py --device cuda --parts kruskal,sweep
    python benchmarks/gpu_report.py --device cuda --publish         # also keep the records for the docs
    python benchmarks/gpu_report.py --device cpu --smoke            # the same parts at tiny sizes (the suite runs it)
    python benchmarks/gpu_report.py --prepare                       # with a registry: wheels, commit into wheels/
    python benchmarks/gpu_report.py --device cuda --wheels wheels   # without one: install them offline first
    python benchmarks/gpu_report.py --report-only --results DIR     # the table of DIR/results.jsonl, nothing run

Parts, most valuable first (each a subprocess of this script, with a timeout of at most
``--part-timeout``, 540 s, and never past the budget):

- ``check-vit-base``: ``mhaaudit check vit-base`` as a user runs it, twice (the second run counts:
  byte-code caches are cold on a fresh machine), with its wall clock, peak resident memory (the
  child's ``ru_maxrss``), peak GPU memory (``torch.cuda.max_memory_allocated`` in that process),
  the time the GPU was busy (``nvidia-smi``'s ``utilization.gpu`` sampled every 100 ms, summed
  over the run) and the run's own phases (``meta.timings_s``, of both runs), and whether byte-code is
  cached for transformers' modules before and after the runs (the interpreter's settings, the folder
  writable, the modules with a ``.pyc``: where it is not, every run compiles them again). Where
  torch's or transformers' byte-code cannot be cached where they are installed (a read-only folder,
  ``PYTHONDONTWRITEBYTECODE``), both runs (and the ``profile`` part's) cache it in a folder of the
  report's own (``PYTHONPYCACHEPREFIX``), as a user's own install does; ``bytecode_env`` says what was set;
- ``kruskal``: ``bench_kruskal.measure_test`` at k = 197 on 2000 x 768 features, 5000 draws on each
  side (the paper's loop timed on 1000 draws and scaled; ours with every draw made, and beside it the
  test stopped once decided, as ``check`` runs it), ours checked against ``matrix_rank`` draw by draw,
  and the same draws and decisions (and the same test record) on the CPU; then one more test with every
  draw under ``torch.profiler`` (``kernels``: its phases, the 15 operations with the most self time on the
  host and on the device, and the host's waits for the device), so the next reader sees where its time goes;
- ``sweep``: ``bench_kruskal.measure_sweep`` over every k up to d = 768, 5000 draws, and the same
  fractions from the CPU; then one more sweep under ``torch.profiler`` (``kernels``, as for ``kruskal``);
- ``contexts``: ``bench_contexts.measure``: Assumption 2 over 256 context matrices of 197 x 768 in
  batches of 32, ours beside a ``matrix_rank`` loop, with ours' parts (one host thread, the device's
  Gram matrices, the host's eigenvalues) to show where a batch's time goes;
- ``routes``: ``bench_routes.measure``: singular values (197, 408 and 768 rows of 768; one matrix and
  64) on the device's routine beside mhaaudit's, on the host, and the eigenvalues of their Gram
  matrices on the device, on the host and where ``numerics.checked`` places them, the values
  compared: what that placement rests on;
- ``tests``: the test files that mention CUDA (``pytest -m "not slow"``; ``-n`` workers when
  pytest-xdist is there), counted from their JUnit XML;
- ``check-paper``: ``bench_check``'s side of ours at the paper's size (T = 2000, 5000 draws);
- ``capture``: ``bench_capture.measure`` (first block of a random ViT-Base, batch 16);
- ``profile``: ``check vit-base`` once more under cProfile; the 40 functions with the most
  cumulative time, the 40 of mhaaudit's own with the most, and the 25 costliest imports
  (``-X importtime``), go into the record and ``RESULTS/profile-check-vit-base.txt``;
- ``memorize``: the paper's Figure 2a grid (``--preset paper-fig2a``, one seed), its points kept
  in a parquet file so that a part cut off by its timeout or the budget resumes where it stopped;
  its time is the sum of its attempts;
- ``check-small`` / ``check-paper-naive``: ``bench_check``'s two sides at its defaults (T = 200,
  300 draws), and the paper's procedure at the paper's size (it may run out of time: the row then
  says so).

The budget (``--budget``, seconds, default 480: a 15-minute lease less the machine's start and a
margin) covers the whole call: a part starts only when the time it took before (in the results
file, else a figure measured on an H200) fits what is left, and its timeout ends it before the
budget does; parts that do not fit are left for the next call, which starts with them. Every
finished part appends one JSON line to ``RESULTS/results.jsonl`` (``--results``, default
``gpu-report/``) keyed by the commit, the device and the mode; a part already done for the same
key is skipped, so a lost machine loses one part. The report (``RESULTS/report.md``) is a
markdown table stamped with the GPU, its driver, the torch, CUDA, transformers and timm versions
and the commit, and each target beside its figure, PASS or MISS. ``--publish`` copies the run's
records to ``benchmarks/results/gpu/<gpu>-<commit>.jsonl``, from which the docs' Benchmarks page
renders this table at every build (never from a smoke run, never without a known GPU and commit;
``--update-readme`` is its former name); with ``--report-only`` it publishes the newest run of a
results file. Rows with nothing measured say ``unmeasured``.

The commit is the project's own: git's HEAD only when git's top level is this project's folder
(a copy inside another repository does not take that repository's HEAD) and its files are HEAD's;
else the ``COMMIT`` that ``--prepare`` writes beside the wheels, when every tracked file here is that
commit's (the ``TREE`` manifest beside it: a copy whose ``.git`` lags its files is measured as its
files); else git's HEAD with ``+dirty``, ``--commit`` or ``$MHAAUDIT_COMMIT``, or the ``COMMIT`` file.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
RESULT_TAG = "GPU-REPORT-RESULT "
PARTS = (  # most valuable first
    "check-vit-base",
    "kruskal",
    "sweep",
    "contexts",
    "routes",
    "tests",
    "check-paper",
    "capture",
    "profile",
    "memorize",
    "check-small",
    "check-paper-naive",
)
# Seconds a part took on one H200 (16 cores) at a9aba38, with a margin of about a fifth (memorize and
# check-paper-naive: what they may take): whether it fits what is left of the budget, until the results file
# holds the part's own time. memorize resumes, so any minute helps.
EXPECTED_S = {
    "check-vit-base": 70.0,
    "kruskal": 60.0,  # and, since then, every draw made, and one run under torch.profiler (CUPTI's start)
    "sweep": 45.0,  # and one run under torch.profiler
    "contexts": 30.0,  # not yet run on a GPU: about its imports and its smoke run's share of them
    "routes": 40.0,  # not yet run on a GPU: a guess (64 device SVDs of 197 x 768, four times)
    "tests": 120.0,
    "check-paper": 25.0,
    "capture": 16.0,
    "profile": 60.0,  # and, since d74bd69 (19.8 s there), the same run again with its stack sampled
    "memorize": 60.0,
    "check-small": 32.0,
    "check-paper-naive": 540.0,
}
RESUMABLE = {"memorize"}  # keeps its work when cut off, so it may take whatever is left
DEFAULT_BUDGET_S = 480.0
MARGIN_S = 15.0  # kept back from the budget: a part's process start and the report after it
PROFILE_TOP = 40
PROFILE_IMPORTS = 25  # the costliest imports the profile part keeps
KERNEL_TOP = 15  # the operations the kruskal part's profile keeps, by self time on the host and on the device

# The paper's sizes, and the tiny ones of --smoke (the same code at sizes a 2-core CPU runs in seconds).
SIZES = {
    False: dict(
        T=2000,
        d=768,
        k=197,
        samples=5000,
        naive_draws=1000,
        loop_draws=100,
        check_draws=1000,
        repeats=3,
        model="vit-base",
        batch=16,
        capture_repeats=3,
        contexts=dict(batch=32, batches=8, n=197, d=768, naive_examples=64),
        routes=dict(repeats=3),
        small_limit=200,
        small_samples=300,
        paper_limit=2000,
        paper_samples=5000,
        check_args=[],
        memorize=dict(preset="paper-fig2a"),
    ),
    True: dict(
        T=120,
        d=32,
        k=17,
        samples=64,
        naive_draws=32,
        loop_draws=4,
        check_draws=32,
        repeats=1,
        model=None,
        batch=2,
        capture_repeats=1,
        contexts=dict(batch=2, batches=2, n=6, d=10, naive_examples=4),
        routes=dict(repeats=1, svd_shapes=((1, 6, 10), (4, 6, 10)), eig_shapes=((1, 6), (4, 6))),
        small_limit=20,
        small_samples=8,
        paper_limit=24,
        paper_samples=16,
        check_args=["--limit", "20", "--samples", "8"],
        memorize=dict(vary="heads", values=[1, 2], sizes=[24], n=4, head_dim=4, max_steps=4, check_every=2),
    ),
}

# --prepare: what a GPU machine without a registry gets carried. The roots are what the project
# needs beyond the machine's own stack; their requirements are followed through the metadata of this
# environment (the versions installed and tested here). Left out: torch and what comes with it
# (gigabytes), and the large compiled packages that the lent machine had (the installer reports
# with `pip check` whether they are recent enough there).
WHEEL_ROOTS = ("transformers", "timm", "datasets", "huggingface_hub", "safetensors", "tokenizers")
NOT_CARRIED = (
    "torch",
    "torchvision",
    "triton",
    "numpy",
    "scipy",
    "pyarrow",
    "pandas",
    "pillow",
    "matplotlib",
    "scikit-image",
    "scikit-learn",
    "sympy",
    "networkx",
    "jinja2",
    "markupsafe",
    "setuptools",
    "pip",
)
CARRY_LIMIT_MB = 64.0


# --------------------------------------------------------------------------- stamp and results


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def git_commit() -> str | None:
    """This project's HEAD (``+dirty`` with tracked changes), only when git's top level is the
    project's own folder: a copy of the project inside another repository gets None, not that
    repository's HEAD."""
    try:
        if Path(_git("rev-parse", "--show-toplevel")).resolve() != ROOT.resolve():
            return None
        head = _git("rev-parse", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no", "--", ".")
        return head[:12] + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def stamped_commit(wheels: str | None = None) -> str | None:
    """The commit ``--prepare`` wrote beside the wheels (``COMMIT``), if any."""
    return next(filter(None, map(_stamp_in, _stamp_folders(wheels))), None)


def _stamp_in(folder: Path) -> str | None:
    """The commit in ``folder/COMMIT`` (with ``+dirty`` where it was stamped so), or None."""
    f = folder / "COMMIT"
    text = f.read_text().strip() if f.is_file() else ""
    return text if re.fullmatch(r"[0-9a-f]{7,40}(\+dirty)?", text) else None


def _stamp_folders(wheels: str | None) -> list[Path]:
    return [Path(f) for f in filter(None, [wheels, ROOT / "wheels"])]


def _blob_id(path: Path) -> str:
    """git's object name of the file (or link) at ``path``, as ``git hash-object`` gives it."""
    data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def tree_manifest() -> str | None:
    """``mode object path`` of each file git tracks here (``git ls-files -s``), written beside the wheels by
    ``--prepare`` from a clean tree; None where this is not the project's own clean repository."""
    here = git_commit()
    if not here or here.endswith("+dirty"):
        return None
    lines = []
    for line in _git("ls-files", "-s", "-z").split("\0"):
        if line:
            info, path = line.split("\t", 1)
            mode, obj, _stage = info.split()
            lines.append(f"{mode} {obj} {path}")
    return "\n".join(lines) + "\n"


def verified_stamp(wheels: str | None = None) -> str | None:
    """The commit ``--prepare`` stamped beside the wheels, when the files here are exactly that commit's
    tracked files: each file its ``TREE`` manifest lists (beside that ``COMMIT``) has the object name listed,
    and every file git tracks here that is present is listed. Then it is the commit measured, whatever git's
    HEAD here says (a copy whose ``.git`` lags its files is measured as its files)."""
    for folder in _stamp_folders(wheels):
        manifest, stamp_ = folder / "TREE", _stamp_in(folder)
        if not manifest.is_file() or not stamp_ or stamp_.endswith("+dirty"):
            continue
        return stamp_ if _files_match(manifest) else None
    return None


def _files_match(manifest: Path) -> bool:
    """Whether the files here are those of ``manifest`` (``mode object path`` lines, as :func:`tree_manifest`)."""
    root = os.path.realpath(ROOT)
    try:
        listed = set()
        for line in manifest.read_text().splitlines():
            mode, obj, path = line.split(" ", 2)
            f = ROOT / path
            real = os.path.realpath(f)
            if Path(path).is_absolute() or ".." in Path(path).parts or os.path.commonpath([root, real]) != root:
                return False
            listed.add(path)
            if mode == "160000":  # a submodule: its files are not this project's
                continue
            if not (f.is_symlink() or f.is_file()) or _blob_id(f) != obj:
                return False
        if not listed:
            return False
        try:  # what git tracks here (a lagging .git may list files since removed: those are absent)
            tracked = [p for p in _git("ls-files", "-z").split("\0") if p]
        except (OSError, subprocess.CalledProcessError):
            tracked = []
        return all(p in listed or not (ROOT / p).exists() for p in tracked)
    except (OSError, ValueError):
        return False


def commit(given: str | None = None, wheels: str | None = None) -> str | None:
    """The commit measured: git's HEAD of this project (:func:`git_commit`) where its files are HEAD's, else
    the stamp ``--prepare`` wrote when the files are that commit's (:func:`verified_stamp`), else git's HEAD
    with ``+dirty``, else ``--commit`` / ``$MHAAUDIT_COMMIT``, else the stamp, unverified
    (:func:`stamped_commit`)."""
    here = git_commit()
    if here and not here.endswith("+dirty"):
        return here
    return verified_stamp(wheels) or here or given or os.environ.get("MHAAUDIT_COMMIT") or stamped_commit(wheels)


def _nvidia_smi(*query: str) -> list[str]:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(query)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def stamp(device: str, given_commit: str | None, wheels: str | None = None) -> dict:
    """What a figure is not a figure without: the card, its driver, the versions, the commit."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    def ver(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    s = {
        "commit": commit(given_commit, wheels),
        "device": device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "transformers": ver("transformers"),
        "timm": ver("timm"),
        "cpu_cores": os.cpu_count(),
        "date": datetime.date.today().isoformat(),
    }
    if device.startswith("cuda"):
        idx = int(device.split(":")[1]) if ":" in device else 0
        s["gpu"] = torch.cuda.get_device_name(idx)
        lines = _nvidia_smi("driver_version")
        s["driver"] = lines[idx] if len(lines) > idx else None
    else:
        s["gpu"], s["driver"] = None, None
    return s


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut off by a lost machine
            continue
    return out


def key_of(s: dict, smoke: bool) -> dict:
    return {"commit": s["commit"], "device": s["device"], "gpu": s["gpu"], "smoke": smoke}


def append_record(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


# --------------------------------------------------------------------------- the parts (run in a subprocess)


def _bench(name: str):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return __import__(name)


def _tiny_vit(workdir: Path) -> str:
    """The smoke runs' model: the suite's tiny ViT (fixtures/tiny.py), saved once into the results folder."""
    folder = workdir / "tiny-vit"
    if not (folder / "config.json").exists():
        import importlib.util

        spec = importlib.util.spec_from_file_location("mhaaudit_fixtures_tiny", ROOT / "fixtures" / "tiny.py")
        tiny = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tiny)
        tiny.save_model("vit", folder)
    return str(folder)


def cuda_test_files() -> list[str]:
    """The test files with a CUDA path: those that mention CUDA (the list follows the suite)."""
    return sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").glob("test_*.py")
        if "cuda" in p.read_text() and p.name != "test_gpu_report.py"
    )


def part_tests(dev, sz, smoke, workdir):
    import xml.etree.ElementTree as ET

    files = ["tests/test_numerics_philox.py"] if smoke else cuda_test_files()
    xml = workdir / "tests.xml"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "not slow",
        f"--junitxml={xml}",
        *files,
    ]
    cmd += ["-k", "cuda"] if smoke else []  # smoke: the CUDA-only test, collected and skipped on a CPU
    try:
        import xdist  # noqa: F401

        cmd += ["-n", "0" if smoke else str(min(8, os.cpu_count() or 1)), "--dist", "loadfile"]
    except ImportError:
        pass
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    print(p.stdout[-4000:], p.stderr[-2000:], file=sys.stderr)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed = []
    if xml.exists():
        root = ET.parse(xml).getroot()
        for suite in root.iter("testsuite"):
            for k in counts:
                counts[k] += int(suite.get(k, 0))
        for case in root.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(f"{case.get('classname')}::{case.get('name')}")
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {
        "files": files,
        "returncode": p.returncode,
        "passed": passed,
        "failed": counts["failures"] + counts["errors"],
        "skipped": counts["skipped"],
        "failed_tests": failed[:20],
    }


def part_kruskal(dev, sz, smoke, workdir):
    import torch

    from mhaaudit.kruskal import set_stats, subset_test
    from mhaaudit.numerics import RankRule

    bk = _bench("bench_kruskal")
    X = bk.synthetic(sz["T"], sz["d"])
    rule = RankRule.for_dtype(X.dtype)
    stats = set_stats(X, rule)
    r = bk.measure_test(
        X,
        sz["k"],
        sz["samples"],
        dev,
        naive_draws=sz["naive_draws"],
        check_draws=sz["check_draws"],
        repeats=sz["repeats"],
        stats=stats,
    )
    # the whole test's record on the CPU for the same seed: only the work done (exact_rechecks) may differ
    here = subset_test(X, sz["k"], samples=sz["samples"], rule=rule, device=dev, stats=stats).record()
    cpu = subset_test(X, sz["k"], samples=sz["samples"], rule=rule, device=torch.device("cpu"), stats=stats).record()
    drop = {"exact_rechecks", "device", "gram"}
    r["record_equal_cpu"] = {k: v for k, v in here.items() if k not in drop} == {
        k: v for k, v in cpu.items() if k not in drop
    }
    r.setdefault("equal_cpu", r["check_draws"] if dev.type == "cpu" else None)
    every = dict(samples=sz["samples"], rule=rule, device=dev, stats=stats, stop_when_decided=False)
    r["kernels"] = kernel_profile(lambda: subset_test(X, sz["k"], **every), dev)
    return r


def kernel_profile(run, dev, top: int = KERNEL_TOP) -> dict:
    """One call of ``run`` under ``torch.profiler``, with the device synchronised after it: its wall time, the
    operations with the most self time on the host and (on a GPU) on the device, each with its calls, and how
    often the host waited for the device or copied to or from it (where a GPU sits idle, whatever the kernels
    take). A profiler that fails (no CUPTI, say) gives ``{"error": ...}`` and costs the part nothing else."""
    try:
        return _profiled(run, dev, top)
    except Exception as exc:  # noqa: BLE001 - whatever the profiler raises, the part's figures stand
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}


def _profiled(run, dev, top: int) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from mhaaudit import phases

    cuda = dev.type == "cuda"
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        t = time.perf_counter()
        _, spent = phases.recorded(run)
        if cuda:
            torch.cuda.synchronize(dev)
        wall = time.perf_counter() - t
    events = prof.key_averages()

    def on_device(e) -> float:  # microseconds (the attribute's name changed between torch releases)
        return float(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0) or 0)

    def rows(key) -> list[dict]:
        best = sorted(events, key=key, reverse=True)[:top]
        return [
            {"op": e.key, "calls": e.count, "host_ms": e.self_cpu_time_total / 1e3, "device_ms": on_device(e) / 1e3}
            for e in best
            if key(e) > 0
        ]

    waits = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpyAsync", "cudaMemcpy")
    return {
        "wall_s": wall,
        "phases_s": spent,
        "host_top": rows(lambda e: e.self_cpu_time_total),
        "device_top": rows(on_device) if cuda else [],
        "host_waits": {e.key: e.count for e in events if e.key in waits},
    }


def part_sweep(dev, sz, smoke, workdir):
    import torch

    from mhaaudit.kruskal import kruskal_sweep, set_stats
    from mhaaudit.numerics import RankRule

    bk = _bench("bench_kruskal")
    X = bk.synthetic(sz["T"], sz["d"])
    rule = RankRule.for_dtype(X.dtype)
    stats = set_stats(X, rule)
    kruskal_sweep(X, samples=64, rule=rule, device=dev, stats=stats)  # warm-up
    r = bk.measure_sweep(X, sz["samples"], dev, loop_draws=sz["loop_draws"], stats=stats)
    cpu = kruskal_sweep(X, samples=sz["samples"], rule=rule, device=torch.device("cpu"), stats=stats)
    r["fractions_equal_cpu"] = [float(f) for f in cpu.fractions] == r["fractions"]
    r.pop("fractions")
    again = dict(samples=sz["samples"], rule=rule, device=dev, stats=stats)
    r["kernels"] = kernel_profile(lambda: kruskal_sweep(X, **again), dev)
    return r


def part_contexts(dev, sz, smoke, workdir):
    return _bench("bench_contexts").measure(dev, **sz["contexts"])


def part_routes(dev, sz, smoke, workdir):
    return _bench("bench_routes").measure(dev, **sz["routes"])


def part_capture(dev, sz, smoke, workdir):
    model = _tiny_vit(workdir) if smoke else sz["model"]
    return _bench("bench_capture").measure(dev, model=model, batch=sz["batch"], repeats=sz["capture_repeats"])


def _check(dev, sz, smoke, workdir, limit, samples, sides):
    import transformers  # noqa: F401  - imports paid before either side is timed

    from mhaaudit.sources.mosaics import load_photos

    bc = _bench("bench_check")
    load_photos()
    model = _tiny_vit(workdir) if smoke else sz["model"]
    out = {"model": "vit-base" if not smoke else "tiny ViT", "T": limit, "samples": samples}
    args = (model, limit, 32, samples, 0.99, 0)
    if "ours" in sides:
        out["ours_s"], v_ours, timings = bc.ours(*args, dev)
        out["ours_verdicts"], out["ours_phases_s"] = v_ours, timings
    if "naive" in sides:
        out["naive_s"], out["naive_verdicts"] = bc.naive(*args, dev)
    if len(sides) == 2:
        out["same_verdicts"] = all(out["ours_verdicts"].get(c) == v for c, v in out["naive_verdicts"].items())
    return out


def part_check_small(dev, sz, smoke, workdir):
    return _check(dev, sz, smoke, workdir, sz["small_limit"], sz["small_samples"], ("ours", "naive"))


def part_check_paper(dev, sz, smoke, workdir):
    return _check(dev, sz, smoke, workdir, sz["paper_limit"], sz["paper_samples"], ("ours",))


def part_check_paper_naive(dev, sz, smoke, workdir):
    return _check(dev, sz, smoke, workdir, sz["paper_limit"], sz["paper_samples"], ("naive",))


class GpuSampler:
    """``nvidia-smi``'s ``utilization.gpu`` (percent of the last sample period in which a kernel ran),
    read every ``period_ms``; ``busy_s`` is the sum of utilisation x interval over the run."""

    def __init__(self, index: int = 0, period_ms: int = 100):
        self.cmd = [
            "nvidia-smi",
            "-i",
            str(index),
            "--query-gpu=utilization.gpu,memory.used",
            "--format=csv,noheader,nounits",
            "-lms",
            str(period_ms),
        ]
        self.samples: list[tuple[float, float, float]] = []  # (time, percent busy, MiB used)
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            parsed = parse_utilization(line)
            if parsed is not None:
                self.samples.append((time.perf_counter(), *parsed))

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait()
        self.thread.join(timeout=5)

    def busy_s(self, start: float, end: float) -> float:
        return busy_seconds(self.samples, start, end)


def parse_utilization(line: str) -> tuple[float, float] | None:
    """``"87, 1234"`` -> ``(87.0, 1234.0)``; None for anything else (a header, ``[N/A]``)."""
    parts = [p.strip() for p in line.split(",")]
    try:
        return float(parts[0]), float(parts[1])
    except (ValueError, IndexError):
        return None


def busy_seconds(samples, start: float, end: float) -> float:
    """Sum of utilisation x the interval since the previous sample, for the samples inside [start, end]."""
    busy, prev = 0.0, start
    for t, pct, _ in samples:
        if t <= start:
            continue
        t_end = min(t, end)
        busy += pct / 100.0 * max(0.0, t_end - prev)
        prev = t_end
        if t >= end:
            break
    return busy


_PEAK_WRAPPER = (
    "import atexit, json, os, runpy, sys\n"
    "def _peak():\n"
    "    torch = sys.modules.get('torch')\n"
    "    peak = {'allocated': None, 'reserved': None}\n"
    "    if torch is not None and torch.cuda.is_initialized():\n"
    "        peak = {'allocated': torch.cuda.max_memory_allocated(), 'reserved': torch.cuda.max_memory_reserved()}\n"
    "    open(os.environ['GPU_REPORT_PEAK'], 'w').write(json.dumps(peak))\n"
    "atexit.register(_peak)\n"
    "sys.argv = ['mhaaudit'] + sys.argv[1:]\n"
    "runpy.run_module('mhaaudit', run_name='__main__', alter_sys=True)\n"
)


def run_cli(args: list[str], workdir: Path, sample_gpu: bool, env_set: dict | None = None) -> dict:
    """``python -m mhaaudit ARGS`` as a user runs it: wall clock, the child's peak resident memory,
    its peak GPU memory (from inside it, at exit) and, on a GPU, the time the GPU was busy. ``env_set``:
    variables set (a value) or removed (None) for the child."""
    peak_file = workdir / "cli-peak.json"
    peak_file.unlink(missing_ok=True)
    env = child_env(env_set or {}, GPU_REPORT_PEAK=str(peak_file))
    out_file = workdir / "cli-out.json"
    sampler = GpuSampler() if sample_gpu else None
    with sampler if sampler is not None else _Null():
        t0 = time.perf_counter()
        with open(out_file, "w") as fh:
            proc = subprocess.Popen(
                [sys.executable, "-c", _PEAK_WRAPPER, *args],
                stdout=fh,
                stderr=subprocess.PIPE,
                text=True,
                cwd=workdir,
                env=env,
            )
            err = proc.stderr.read()
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        t1 = time.perf_counter()
        time.sleep(0.3 if sampler else 0)  # the sample that covers the run's last moments
    out = {
        "args": args,
        "returncode": proc.returncode,
        "wall_s": t1 - t0,
        "peak_rss_gb": usage.ru_maxrss / 2**20,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "stderr_tail": err[-500:],
    }
    if peak_file.exists():
        peak = json.loads(peak_file.read_text())
        out["peak_gpu_gb"] = peak["allocated"] / 2**30 if peak["allocated"] is not None else None
        out["peak_gpu_reserved_gb"] = peak["reserved"] / 2**30 if peak["reserved"] is not None else None
    if sampler is not None:
        out["gpu_busy_s"] = sampler.busy_s(t0, t1)
        out["gpu_busy_fraction"] = out["gpu_busy_s"] / out["wall_s"]
        out["gpu_samples"] = sum(t0 < t <= t1 for t, _, _ in sampler.samples)
    try:
        doc = json.loads(out_file.read_text())
        out["phases_s"] = doc["meta"].get("timings_s")
        out["verdicts"] = {f"{r['variant']}/{r['check']}": r["verdict"] for r in doc["records"]}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return out


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def bytecode_state(package: str = "transformers", prefix: str | None = None) -> dict:
    """Whether this interpreter caches byte-code for ``package`` (where a second run's imports come from): its
    settings, whether the package's folder is writable, and how many of its modules have a cached ``.pyc``
    (under ``prefix`` when the runs kept it in a folder of their own, ``PYTHONPYCACHEPREFIX``)."""
    import importlib.util

    out: dict = {
        "dont_write_bytecode": sys.dont_write_bytecode,
        "pycache_prefix": prefix or sys.pycache_prefix,
        "env": {k: os.environ.get(k) for k in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")},
    }
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.origin:
        folder = Path(spec.origin).parent
        sources = list(folder.rglob("*.py"))
        saved = sys.pycache_prefix
        sys.pycache_prefix = prefix or saved  # where the runs' interpreters look for it
        try:
            cached = sum(Path(importlib.util.cache_from_source(str(p))).exists() for p in sources)
        finally:
            sys.pycache_prefix = saved
        out.update(package=package, folder_writable=os.access(folder, os.W_OK), modules=len(sources), cached=cached)
    return out


#: The packages whose byte-code a run of ``check vit-base`` reads most of (the second run's imports)
BYTECODE_PACKAGES = ("torch", "transformers")


def caches_bytecode(state: dict) -> bool:
    """Whether an interpreter in ``state`` (:func:`bytecode_state`) reads the package's byte-code from a cache on its
    second run: every module of it has one already (an install compiled at install time, read-only or not), or
    writing is not turned off and a prefix folder is set or the package's folder is writable."""
    if state.get("modules") and state.get("cached") == state["modules"]:
        return True
    return not state["dont_write_bytecode"] and bool(state["pycache_prefix"] or state.get("folder_writable", True))


def bytecode_env(workdir: Path, states: list[dict] | None = None) -> dict:
    """The variables the report's runs of mhaaudit get so that their byte-code is cached, as on a machine whose
    packages were installed by the user: none where every package of ``states`` (default: this interpreter's
    state for each of :data:`BYTECODE_PACKAGES`) caches it already; else a
    folder of the report's own for it (``PYTHONPYCACHEPREFIX``) and ``PYTHONDONTWRITEBYTECODE`` removed (a
    read-only or compiled-without-cache install recompiles every module at every start, seconds that a user's
    second run does not pay). The record keeps what was set."""
    if states is None:
        states = [bytecode_state(p) for p in BYTECODE_PACKAGES]
    if all(caches_bytecode(s) for s in states):
        return {}
    return {"PYTHONPYCACHEPREFIX": str(workdir / "pycache"), "PYTHONDONTWRITEBYTECODE": None}


def child_env(env_set: dict, **more: str) -> dict:
    """This process's environment with ``env_set`` applied (a value sets a variable, None removes it) and ``more``."""
    env = dict(os.environ, **more)
    for k, v in env_set.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def part_check_vit_base(dev, sz, smoke, workdir):
    model = _tiny_vit(workdir) if smoke else "vit-base"
    args = ["check", model, "--device", str(dev), "--format", "json", *sz["check_args"]]
    before = bytecode_state()
    env_set = bytecode_env(workdir)
    runs = [run_cli(args, workdir, dev.type == "cuda", env_set) for _ in range(1 if smoke else 2)]
    out = dict(runs[-1])
    out["first_run_wall_s"] = runs[0]["wall_s"]
    out["first_run_phases_s"] = runs[0].get("phases_s")
    out["bytecode_before"], out["bytecode_after"] = before, bytecode_state(prefix=env_set.get("PYTHONPYCACHEPREFIX"))
    out["bytecode_env"] = env_set
    after = out["bytecode_after"]
    print(
        f"[check-vit-base] byte-code cached for {before.get('cached')} of {before.get('modules')} transformers modules "
        f"before the runs, {after.get('cached')} after (folder writable: {after.get('folder_writable')}, "
        f"dont_write_bytecode: {after['dont_write_bytecode']}); the runs' environment: {env_set or 'as it is'}",
        flush=True,
    )
    if out["returncode"] != 0:
        raise RuntimeError(f"mhaaudit check exited {out['returncode']}: {out['stderr_tail']}")
    return out


def profile_rows(stats_file: Path, top: int = PROFILE_TOP, within: str | None = None) -> list[dict]:
    """The ``top`` functions of a cProfile file by cumulative time: where, calls, own and cumulative seconds (with
    ``within``, only the functions whose file lies under that folder of the project, such as ``mhaaudit/``)."""
    import pstats

    st = pstats.Stats(str(stats_file))
    rows = []
    for (filename, line, name), (_cc, ncalls, tottime, cumtime, _callers) in st.stats.items():  # type: ignore[attr-defined]
        where = filename.split("site-packages/")[-1].replace(str(ROOT) + os.sep, "")
        if within is None or where.startswith(within):
            rows.append({"function": f"{where}:{line}({name})", "calls": ncalls, "own_s": tottime, "cum_s": cumtime})
    rows.sort(key=lambda r: -r["cum_s"])
    return rows[:top]


def part_profile(dev, sz, smoke, workdir):
    """``check vit-base`` under cProfile on the device: the top functions by cumulative time."""
    model = _tiny_vit(workdir) if smoke else "vit-base"
    args = ["check", model, "--device", str(dev), "--format", "json", *sz["check_args"]]
    stats_file, out_file = workdir / "profile-check-vit-base.out", workdir / "profile-out.json"
    t0 = time.perf_counter()
    env_set = bytecode_env(workdir)  # as check-vit-base's runs
    with open(out_file, "w") as fh:
        p = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "cProfile", "-o", str(stats_file), "-m", "mhaaudit", *args],
            stdout=fh,
            stderr=subprocess.PIPE,
            text=True,
            cwd=workdir,
            env=child_env(env_set),
        )
    wall = time.perf_counter() - t0
    imports, err = import_rows(p.stderr)
    if p.returncode != 0:
        raise RuntimeError(f"mhaaudit check under cProfile exited {p.returncode}: {err[-500:]}")
    rows, own = profile_rows(stats_file), profile_rows(stats_file, within="mhaaudit/")
    text = [f"mhaaudit {' '.join(args)}: {wall:.1f} s under cProfile; top {len(rows)} by cumulative time", ""]
    text += [f"{r['cum_s']:10.3f} {r['own_s']:10.3f} {r['calls']:>9}  {r['function']}" for r in rows]
    text += ["", f"the top {len(own)} functions of mhaaudit itself by cumulative time", ""]
    text += [f"{r['cum_s']:10.3f} {r['own_s']:10.3f} {r['calls']:>9}  {r['function']}" for r in own]
    text += [
        "",
        f"the {len(imports)} costliest imports (-X importtime, under cProfile), cumulative and own seconds",
        "",
    ]
    text += [f"{r['cum_s']:10.3f} {r['own_s']:10.3f}  {'  ' * r['depth']}{r['module']}" for r in imports]
    sampled = sampled_run(args, workdir, env_set)
    text += ["", "the run again, its main thread's stack sampled (stack_sampler.py): each phase's seconds, lines", ""]
    text += sampled_lines(sampled)
    (workdir / "profile-check-vit-base.txt").write_text("\n".join(text) + "\n")
    try:
        phases_s = json.loads(out_file.read_text())["meta"].get("timings_s")
    except (OSError, ValueError, KeyError, TypeError):
        phases_s = None
    return {
        "args": args,
        "wall_s": wall,
        "phases_s": phases_s,
        "top": rows,
        "top_mhaaudit": own,
        "imports": imports,
        "sampled": sampled,
        "bytecode_env": env_set,
    }


def sampled_run(args: list[str], workdir: Path, env_set: dict) -> dict:
    """``mhaaudit`` with ``args`` once more, its main thread's stack sampled every 5 ms (``stack_sampler.py``): its
    wall time and, for each phase, the seconds and the lines they went to; ``{"error": ...}`` where it failed."""
    out = workdir / "profile-sampled.json"
    out.unlink(missing_ok=True)
    p = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("stack_sampler.py")), "--out", str(out), "--", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=workdir,
        env=child_env(env_set),
    )
    try:
        got = json.loads(out.read_text())
    except (OSError, ValueError):
        return {"error": f"exit {p.returncode}: {p.stderr[-300:]}"}
    return {k: got[k] for k in ("wall_s", "samples", "exit", "phases")}


def sampled_lines(sampled: dict, top: int = 4) -> list[str]:
    """The text of a sampled run: each phase's seconds, then its ``top`` lines of mhaaudit and innermost lines."""
    if "error" in sampled:
        return [f"not sampled: {sampled['error']}"]
    lines = [f"wall {sampled['wall_s']:.2f} s, {sampled['samples']} samples, exit {sampled['exit']}"]
    for phase, v in sampled["phases"].items():
        lines.append(f"{v['seconds']:8.3f}  {phase}")
        lines += [f"          {t:8.3f}  mhaaudit  {line}" for line, t in v["mhaaudit"][:top]]
        lines += [f"          {t:8.3f}  self      {line}" for line, t in v["self"][:top]]
    return lines


def import_rows(stderr: str, top: int = PROFILE_IMPORTS) -> tuple[list[dict], str]:
    """The ``top`` imports with the most cumulative time in ``-X importtime``'s lines of ``stderr`` (module, its
    depth in the import chain, cumulative and own seconds), and the rest of ``stderr``."""
    found, rest = [], []
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)$", line)
        if m:
            found.append({"module": m[4], "depth": len(m[3]) // 2, "own_s": int(m[1]) / 1e6, "cum_s": int(m[2]) / 1e6})
        elif not line.startswith("import time:"):
            rest.append(line)
    found.sort(key=lambda r: -r["cum_s"])
    return found[:top], "\n".join(rest)


DEADLINE_ENV = "GPU_REPORT_DEADLINE"  # when a launched part will be stopped (seconds since the epoch)


def part_memorize(dev, sz, smoke, workdir):
    from mhaaudit.memorize import GridUnfinished, run_memorize_grid

    store = workdir / ("memorize-smoke.parquet" if smoke else "memorize-fig2a.parquet")
    spent_file = store.with_suffix(".seconds")
    spent = float(spent_file.read_text()) if spent_file.exists() else 0.0  # earlier attempts, cut off
    t0 = time.perf_counter()
    stop = threading.Event()

    def keep_time():  # the time spent so far survives this process being killed at its timeout
        while not stop.wait(5):
            spent_file.write_text(str(spent + time.perf_counter() - t0))

    threading.Thread(target=keep_time, daemon=True).start()
    # the part's own end (set by launch): the grid stops itself before it, its groups done kept
    deadline = os.environ.get(DEADLINE_ENV)
    minutes = None if not deadline else max(0.25, (float(deadline) - time.time() - 20.0) / 60.0)
    try:
        grid = run_memorize_grid(**sz["memorize"], device=dev, out=store, max_minutes=minutes)
    except GridUnfinished as exc:
        stop.set()
        seconds = spent + time.perf_counter() - t0
        spent_file.write_text(str(seconds))
        return {
            "preset": sz["memorize"].get("preset"),
            "finished": False,
            "points": exc.total,
            "points_left": exc.left,
            "seconds": seconds,
            "attempts_s_before": spent,
        }
    stop.set()
    seconds = spent + time.perf_counter() - t0
    spent_file.write_text(str(seconds))
    return {
        "preset": sz["memorize"].get("preset"),
        "points": len(grid.runs),
        "reused": grid.reused,
        "groups": len(grid.groups),
        "seconds": seconds,
        "attempts_s_before": spent,
        "steps_max": max(r.planned_steps for r in grid.runs),
        "memorized": [r.memorized for r in grid.runs],
    }


PART_FUNCS = {
    "tests": part_tests,
    "kruskal": part_kruskal,
    "sweep": part_sweep,
    "capture": part_capture,
    "contexts": part_contexts,
    "routes": part_routes,
    "check-small": part_check_small,
    "check-paper": part_check_paper,
    "check-paper-naive": part_check_paper_naive,
    "check-vit-base": part_check_vit_base,
    "profile": part_profile,
    "memorize": part_memorize,
}


def run_part(name: str, device: str, smoke: bool, workdir: Path) -> dict:
    """Run one part here and return its result (JSON-ready)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from mhaaudit.settings import resolve_device

    dev = resolve_device(device)
    return json.loads(json.dumps(PART_FUNCS[name](dev, SIZES[smoke], smoke, workdir), default=str))


def run_in_process(name: str, device: str, smoke: bool, workdir: Path) -> dict:
    """``--in-process``: the part in this process (no timeout, no isolation), recorded as :func:`launch` does."""
    import traceback

    t0 = time.perf_counter()
    try:
        result, status, tail = run_part(name, device, smoke, workdir), "done", ""
    except Exception:  # noqa: BLE001 - a failed part is recorded, not raised: the other parts still run
        result, status, tail = None, "failed", traceback.format_exc()[-1500:]
    if status == "done" and isinstance(result, dict) and result.get("finished") is False:
        status = "timeout"  # stopped itself in time, its work kept: the next call goes on
    return {
        "part": name,
        "status": status,
        "seconds": time.perf_counter() - t0,
        "timeout_s": None,
        "result": result,
        "log_tail": tail,
    }


def launch(name: str, device: str, smoke: bool, workdir: Path, timeout: float) -> dict:
    """Run one part in a subprocess (its own process group, killed whole at the timeout)."""
    log = workdir / f"{name}.log"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
    )
    env[DEADLINE_ENV] = str(time.time() + timeout)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--run-part",
        name,
        "--device",
        device,
        "--results",
        str(workdir),
    ]
    cmd += ["--smoke"] if smoke else []
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=fh, text=True, start_new_session=True
        )
        try:
            stdout, _ = proc.communicate(timeout=timeout)
            status = "done" if proc.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, _ = proc.communicate()
            status = "timeout"
    result = None
    for line in stdout.splitlines():
        if line.startswith(RESULT_TAG):
            result = json.loads(line[len(RESULT_TAG) :])
    if status == "done" and result is None:
        status = "failed"
    if status == "done" and isinstance(result, dict) and result.get("finished") is False:
        status = "timeout"  # stopped itself in time, its work kept: the next call goes on
    tail = log.read_text()[-1500:] if status != "done" else ""
    return {
        "part": name,
        "status": status,
        "seconds": time.perf_counter() - t0,
        "timeout_s": timeout,
        "result": result,
        "log_tail": tail,
    }


# --------------------------------------------------------------------------- wheels


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_closure(roots=WHEEL_ROOTS, skip=NOT_CARRIED, python="3.12") -> dict[str, str]:
    """{distribution: version installed here} for the roots and their requirements, less ``skip``."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement

    env = {
        "python_version": python,
        "python_full_version": python + ".0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }
    skip = {_norm(s) for s in skip}
    found: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = _norm(todo.pop())
        if name in found or name in skip or name.startswith("nvidia-"):
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        found[name] = dist.version
        for req in dist.requires or []:
            r = Requirement(req)
            if r.marker is None or r.marker.evaluate(env):
                todo.append(r.name)
    return dict(sorted(found.items()))


def prepare(folder: Path, python: str) -> None:
    pins = wheel_closure(python=python)
    folder.mkdir(parents=True, exist_ok=True)
    here = git_commit()
    if here:  # the commit travels with the wheels, for a copy without this project's git history
        (folder / "COMMIT").write_text(here + "\n")
        print(f"commit {here} stamped in {folder / 'COMMIT'}")
    manifest = tree_manifest()  # and its files' object names, so that the copy measured can be checked against it
    (folder / "TREE").unlink(missing_ok=True)
    if manifest:
        (folder / "TREE").write_text(manifest)
    abi = "cp" + python.replace(".", "")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "-d",
        str(folder),
        "--python-version",
        python,
        "--implementation",
        "cp",
        "--abi",
        abi,
        "--abi",
        "abi3",
        "--abi",
        "none",
        "--platform",
        "manylinux_2_28_x86_64",
        "--platform",
        "manylinux_2_17_x86_64",
        "--platform",
        "manylinux2014_x86_64",
        "--platform",
        "any",
        *[f"{k}=={v}" for k, v in pins.items()],
    ]
    subprocess.run(cmd, check=True)
    wheels = sorted(folder.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels) / 2**20
    for w in wheels:
        print(f"  {w.stat().st_size / 2**20:7.2f} MiB  {w.name}")
    print(
        f"{len(wheels)} wheels, {total:.1f} MiB in {folder} (carry limit {CARRY_LIMIT_MB:.0f} MiB; not carried: "
        f"{', '.join(NOT_CARRIED)})"
    )
    if total > CARRY_LIMIT_MB:
        raise SystemExit(
            f"Error: the wheels take {total:.1f} MiB, more than the {CARRY_LIMIT_MB:.0f} MiB that can be carried"
        )


def _wheel_name(path: Path) -> tuple[str, str]:
    name, ver = path.name.split("-")[:2]
    return _norm(name), ver


def install_wheels(folder: Path) -> dict:
    """Install, offline and without resolving, each wheel of ``folder`` that is missing here or newer
    than what is installed; say what was installed over what, what was kept, and ``pip check``."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    chosen, report = [], {"installed": {}, "kept": {}}
    for whl in sorted(folder.glob("*.whl")):
        name, ver = _wheel_name(whl)
        try:
            have = version(name)
        except PackageNotFoundError:
            have = None
        if have is None or Version(have) < Version(ver):
            chosen.append(str(whl))
            report["installed"][name] = [have, ver]
        else:
            report["kept"][name] = have
    if chosen:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", *chosen], check=True
        )
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    report["pip_check"] = check.stdout.strip().splitlines()[:30]
    for name, (was, now) in report["installed"].items():
        print(f"installed {name} {now}" + (f" (was {was})" if was else " (was missing)"))
    print(f"kept {len(report['kept'])} newer or equal; pip check: {report['pip_check'][:3] or 'ok'}")
    return report


# --------------------------------------------------------------------------- table and targets


def _s(x, digits=2):
    if x is None:
        return "unmeasured"
    if x < 0.1:
        return f"{x * 1e3:.1f} ms"
    if x >= 120:
        return f"{x / 60:.1f} min"
    return f"{x:.{digits}f} s"


def kernels_text(parts: dict, top: int = 5) -> str:
    """Where the profiled runs of ``kruskal`` and ``sweep`` spent their time (``kernels`` in their records), for
    the report after its table: their phases, their costliest operations (on the device where there is one),
    and the host's waits for the device; empty when neither part was profiled."""
    lines = []
    for name in ("kruskal", "sweep"):
        k = (_res(parts, name) or {}).get("kernels")
        if not k:
            continue
        if "error" in k:
            lines.append(f"- `{name}`: not profiled ({k['error']})")
            continue
        where = "device" if k["device_top"] else "host"
        ops = ", ".join(f"{r['op']} {r[where + '_ms']:.1f} ms ({r['calls']} calls)" for r in k[where + "_top"][:top])
        waits = ", ".join(f"{op} x{n}" for op, n in k["host_waits"].items()) or "none recorded"
        lines.append(
            f"- `{name}`, one run under torch.profiler: {_s(k['wall_s'])} ({phases_text(k['phases_s'])}); "
            f"most self time on the {where}: {ops}; the host's waits and copies: {waits}"
        )
    sampled = (_res(parts, "profile") or {}).get("sampled")
    if sampled and "error" not in sampled:
        said = []
        for phase, v in sampled["phases"].items():
            if v["seconds"] >= 0.2 and phase != "imports":
                top = "; ".join(f"{line} {t:.2f} s" for line, t in v["mhaaudit"][:2])
                said.append(f"{phase} {v['seconds']:.2f} s ({top})")
        lines.append(
            f"- `check vit-base` again, its main thread's stack sampled (`stack_sampler.py`, {sampled['wall_s']:.1f} s"
            " wall), the phases of at least 0.2 s but imports, each with the two lines of mhaaudit most of its time "
            "went to (running, or waiting on what they called): " + (", ".join(said) or "none")
        )
    return "\n## Where the kernels' time went\n\n" + "\n".join(lines) + "\n" if lines else ""


def phases_text(phases: dict) -> str:
    """A run's ``meta.timings_s`` in words (phases of at least 0.05 s, then the total)."""
    parts = [f"{k} {v:.1f} s" for k, v in phases.items() if k != "total" and isinstance(v, (int, float)) and v >= 0.05]
    return "phases: " + ", ".join(parts) + (f" (total {phases['total']:.1f} s)" if "total" in phases else "")


def _contexts_parts(r: dict) -> str:
    """Where the contexts part's time went: a GPU's tridiagonal forms and the host's extremes of them, or (records
    of the route before it, and the CPU's) the Gram matrices and their extreme eigenvalues."""
    if "forms_s" in r:
        return (
            f"Gram matrices and their tridiagonal forms on the device {_s(r['forms_s'])}, the extremes of the forms "
            f"on one thread {_s(r['form_extremes_one_thread_s'])}"
        )
    where = "" if str(r.get("device", "")).startswith("cpu") else " to the host"
    return (
        f"Gram matrices{where} {_s(r['gram_s'])}, their extreme eigenvalues on one thread "
        f"{_s(r['extremes_one_thread_s'])}"
    )


def _ratio(naive, ours):
    return f"{naive / ours:.1f}x" if naive and ours else "unmeasured"


def latest(records: list[dict], key: dict) -> dict[str, dict]:
    """The last record of each part for ``key`` (a done one wins over a later failure)."""
    out: dict[str, dict] = {}
    for r in records:
        if r.get("key") != key or r.get("part") not in PARTS:
            continue
        if r["status"] == "done" or out.get(r["part"], {}).get("status") != "done":
            out[r["part"]] = r
    return out


def _spent(record: dict) -> float:
    """The seconds a part spent: its attempts' sum where the part keeps it (memorize), else this attempt's."""
    return float((record.get("result") or {}).get("seconds") or record["seconds"])


def _res(parts, name):
    r = parts.get(name)
    return r["result"] if r and r["status"] == "done" and r.get("result") else None


CHECK_TARGET = "`check vit-base` (defaults) <= 8 s on an H100 or H200, GPU busy >= 40 %"


def targets(parts: dict, gpu: str | None) -> list[tuple[str, str, str]]:
    """(target, measured, PASS | MISS | unmeasured) for the four targets."""
    rows = []
    card = bool(gpu and ("H100" in gpu or "H200" in gpu))
    cv = _res(parts, "check-vit-base")
    if cv:
        busy = cv.get("gpu_busy_fraction")
        ok = cv["wall_s"] <= 8 and busy is not None and busy >= 0.4
        measured = (
            f"{cv['wall_s']:.1f} s, GPU busy {busy:.0%}"
            if busy is not None
            else f"{cv['wall_s']:.1f} s, GPU busy unmeasured"
        )
        rows.append((CHECK_TARGET, measured, ("PASS" if ok else "MISS") if card else "not an H100 or H200"))
    else:
        rows.append((CHECK_TARGET, "unmeasured", "unmeasured"))
    kr = _res(parts, "kruskal")
    rows.append(("k = 197 test, 5000 draws <= 50 ms", *_kruskal_target(kr)))
    sw = _res(parts, "sweep")
    rows.append(
        (
            "sweep to d = 768, 5000 draws <= 0.5 s",
            _s(sw["ours_s"]) if sw else "unmeasured",
            ("PASS" if sw["ours_s"] <= 0.5 else "MISS") if sw else "unmeasured",
        )
    )
    mz = _res(parts, "memorize")
    m = parts.get("memorize")
    if mz:
        rows.append(
            ("Figure 2a grid <= 10 min per seed", _s(mz["seconds"]), "PASS" if mz["seconds"] <= 600 else "MISS")
        )
    elif m and m["status"] == "timeout":
        rows.append(("Figure 2a grid <= 10 min per seed", f"unfinished after {_s(_spent(m))} (resumes)", "unmeasured"))
    else:
        rows.append(("Figure 2a grid <= 10 min per seed", "unmeasured", "unmeasured"))
    return rows


def _kruskal_time(r: dict) -> str:
    """The ``kruskal`` part's time: every draw made (``all_draws``), with the test stopped once decided beside
    it; a record from before ``all_draws`` timed the stopped test alone, and says so."""
    if r.get("all_draws"):
        return f"{_s(r['ours_s'])} (every draw; {_s(r['stopped_s'])} stopped once decided, after {r['stopped_draws']})"
    return f"{_s(r['ours_s'])} (stopped once decided, not every draw)"


def _kruskal_target(r: dict | None) -> tuple[str, str]:
    """(measured, status) of the k = 197 target: PASS only with every draw made; a stopped test over the target
    is a MISS (every draw takes at least as long), one under it measured nothing."""
    if not r:
        return "unmeasured", "unmeasured"
    if r["ours_s"] > 0.05:
        return _kruskal_time(r), "MISS"
    return _kruskal_time(r), "PASS" if r.get("all_draws") else "unmeasured"


def table(parts: dict, s: dict | None, smoke: bool = False) -> str:
    """The stamped markdown block (the docs' GPU rows): every row, ``unmeasured`` where nothing was."""
    lines = []
    if s and parts:
        lines.append(
            f"Measured{' (smoke sizes, not figures)' if smoke else ''} by `python benchmarks/gpu_report.py` on "
            f"{s.get('gpu') or 'the CPU'} (driver {s.get('driver') or 'n/a'}, {s.get('cpu_cores')} CPU cores), "
            f"torch {s['torch']} (CUDA {s['cuda']}), transformers {s.get('transformers')}, timm {s.get('timm')}, "
            f"Python {s['python']}, commit {s['commit']}, {s['date']}."
        )
    else:
        lines.append(
            "Nothing measured yet: every row says `unmeasured` until `python benchmarks/gpu_report.py "
            "--device cuda --publish` has run on a GPU."
        )
    lines += ["", "| what (GPU) | naive | mhaaudit | ratio | checked | script |", "|---|---|---|---|---|---|"]
    u = "unmeasured"

    def row(what: str, r: dict | None, cells, script: str) -> str:  # naive | mhaaudit | ratio | checked
        return f"| {what} | " + " | ".join(cells(r) if r else [u] * 4) + f" | {script} |"

    lines.append(
        row(
            "Monte-Carlo test, k = 197, 2000 x 768, 5000 draws",
            _res(parts, "kruskal"),
            lambda r: [
                f"{_s(r['naive_s'])} (`matrix_rank` loop, timed on {r['naive_draws']} draws)",
                _kruskal_time(r),
                _ratio(r["naive_s"], r["ours_s"]) if r.get("all_draws") else "not the same draws",
                f"{r['equal_float64']}/{r['check_draws']} decisions equal to `matrix_rank`; same draws and decisions "
                "as the CPU "
                f"{r['equal_cpu']}/{r['check_draws']}, same test record {'yes' if r['record_equal_cpu'] else 'NO'}",
            ],
            "`bench_kruskal.py --device cuda`",
        )
    )
    lines.append(
        row(
            "Sweep over every k up to d = 768, 5000 draws",
            _res(parts, "sweep"),
            lambda r: [
                f"{_s(r['naive_s'])} (extrapolated)",
                _s(r["ours_s"]),
                _ratio(r["naive_s"], r["ours_s"]),
                f"fractions equal to the CPU's: {'yes' if r['fractions_equal_cpu'] else 'NO'}",
            ],
            "`bench_kruskal.py --device cuda`",
        )
    )
    lines.append(
        row(
            "`check` end to end, embedding + random columns, T = 200, 300 draws (the script's defaults)",
            _res(parts, "check-small"),
            lambda r: [
                _s(r["naive_s"]),
                _s(r["ours_s"]),
                _ratio(r["naive_s"], r["ours_s"]),
                "same verdicts" if r.get("same_verdicts") else "verdicts DIFFER",
            ],
            "`bench_check.py --device cuda`",
        )
    )
    cp, cn = _res(parts, "check-paper"), _res(parts, "check-paper-naive")
    naive_row = parts.get("check-paper-naive")
    naive_cell = (
        _s(cn["naive_s"])
        if cn
        else f"over {_s(naive_row['timeout_s'])} (stopped)"
        if naive_row and naive_row["status"] == "timeout"
        else u
    )
    same = (
        (
            "same verdicts"
            if all(cp["ours_verdicts"].get(c) == v for c, v in cn["naive_verdicts"].items())
            else "verdicts DIFFER"
        )
        if cp and cn
        else u
    )
    lines.append(
        f"| same at the paper's size, T = 2000, 5000 draws | {naive_cell} | {_s(cp['ours_s']) if cp else u} | "
        f"{_ratio(cn['naive_s'], cp['ours_s']) if cp and cn else u} | {same} | "
        "`bench_check.py --device cuda --limit 2000 --samples 5000` |"
    )
    lines.append(
        row(
            "Assumption 2, 256 context matrices of 197 x 768 in batches of 32 (as `check` feeds them)",
            _res(parts, "contexts"),
            lambda r: [
                f"{_s(r['naive_s'])} (`matrix_rank` loop, timed on {r['naive_examples']} examples)",
                f"{_s(r['ours_s'])} ({r['per_call_ms']:.1f} ms a batch; one host thread {_s(r['one_thread_s'])}; "
                f"{_contexts_parts(r)})",
                _ratio(r["naive_s"], r["ours_s"]),
                "ranks equal to the loop's" if r["ranks_equal"] else "ranks DIFFER",
            ],
            "`bench_contexts.py --device cuda`",
        )
    )
    lines.append(
        row(
            "first-block capture, random ViT-Base, batch of 16",
            _res(parts, "capture"),
            lambda r: [
                _s(r["naive_s"]),
                _s(r["ours_s"]),
                _ratio(r["naive_s"], r["ours_s"]),
                f"max difference {max(r['diff_trunc'], r['diff_hooks']):.1e}",
            ],
            "`bench_capture.py --device cuda`",
        )
    )
    cv = _res(parts, "check-vit-base")
    if cv:
        busy = cv.get("gpu_busy_s")
        cell = (
            f"{cv['wall_s']:.1f} s wall (first run {cv['first_run_wall_s']:.1f} s), peak host memory "
            f"{cv['peak_rss_gb']:.2f} GB, peak GPU memory "
            + (f"{cv['peak_gpu_gb']:.2f} GB" if cv.get("peak_gpu_gb") is not None else "n/a")
            + (f", GPU busy {busy:.1f} s ({cv['gpu_busy_fraction']:.0%})" if busy is not None else "")
            + (f"; {phases_text(cv['phases_s'])}" if cv.get("phases_s") else "")
        )
    lines.append(
        "| `mhaaudit check vit-base` (defaults): wall clock, peak host and GPU memory, GPU busy | – | "
        + (cell if cv else u)
        + " | – | "
        + ("exit 0" if cv else u)
        + " | `gpu_report.py --parts check-vit-base` |"
    )
    mz = _res(parts, "memorize")
    m = parts.get("memorize")
    mcell = (
        f"{_s(mz['seconds'])} ({mz['points']} points, {mz['groups']} group{'s' * (mz['groups'] != 1)})"
        if mz
        else f"unfinished after {_s(_spent(m))}"
        if m and m["status"] == "timeout"
        else u
    )
    lines.append(
        f"| `mhaaudit memorize --preset paper-fig2a`, one seed | – | {mcell} | – | – | "
        "`gpu_report.py --parts memorize` |"
    )
    te = _res(parts, "tests")
    lines.append(
        "| the suite's CUDA test files (`-m 'not slow'`) | – | "
        + (f"{te['passed']} passed, {te['failed']} failed, {te['skipped']} skipped" if te else u)
        + " | – | – | `gpu_report.py --parts tests` |"
    )
    lines += ["", "| target | measured | |", "|---|---|---|"]
    lines += [f"| {t} | {m_} | {st} |" for t, m_, st in targets(parts, s.get("gpu") if s else None)]
    return "\n".join(lines)


def publish(records: list[dict], key: dict, folder: Path) -> Path:
    """Copy the records of ``key`` (this commit, device and GPU) to ``folder/<gpu>-<commit>.jsonl``, where
    the docs' Benchmarks page reads them; the path written."""
    mine = [r for r in records if r.get("key") == key]
    slug = re.sub(r"[^a-z0-9]+", "-", f"{key['gpu'] or key['device']}-{key['commit']}".lower()).strip("-")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{slug}.jsonl"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in mine))
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks that every part runs, measures nothing")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of: {', '.join(PARTS)}")
    ap.add_argument("--results", default=str(ROOT / "gpu-report"), help="folder of results.jsonl, logs and report.md")
    ap.add_argument("--part-timeout", type=float, default=540.0, help="seconds a part may run (default 540)")
    ap.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        help=f"seconds this call may take (default {DEFAULT_BUDGET_S:.0f}); parts that do not fit wait for the next",
    )
    ap.add_argument(
        "--report-only", action="store_true", help="run nothing: the table of the records in --results, as stamped"
    )
    ap.add_argument("--redo", action="store_true", help="run the parts again even if done for this commit and device")
    ap.add_argument(
        "--publish", action="store_true", help="copy the run's records to benchmarks/results/gpu/ for the docs"
    )
    ap.add_argument("--update-readme", action="store_true", dest="publish", help="former name of --publish")
    ap.add_argument("--published", default=str(ROOT / "benchmarks" / "results" / "gpu"), help=argparse.SUPPRESS)
    ap.add_argument("--commit", help="the commit measured, where the copy has no git history")
    ap.add_argument("--wheels", help="a folder of wheels (from --prepare) to install offline first")
    ap.add_argument(
        "--prepare", action="store_true", help="download the wheels to carry into --wheels (default wheels/)"
    )
    ap.add_argument("--python", default="3.12", help="--prepare: the GPU machine's Python (default 3.12)")
    ap.add_argument(
        "--in-process",
        action="store_true",
        help="run the parts in this process, without timeouts (the test suite's smoke run)",
    )
    ap.add_argument("--run-part", choices=PARTS, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    workdir = Path(a.results).resolve()
    if a.run_part:  # in the part's own process: its result on one tagged line
        print(RESULT_TAG + json.dumps(run_part(a.run_part, a.device, a.smoke, workdir)), flush=True)
        return 0
    if a.prepare:
        prepare(Path(a.wheels or ROOT / "wheels"), a.python)
        return 0
    if a.report_only:
        return report_only(workdir, a.publish, Path(a.published))
    parts = [p.strip() for p in a.parts.split(",") if p.strip()]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        print(f"Error: --parts: unknown part {bad[0]!r} (choose from {', '.join(PARTS)})", file=sys.stderr)
        return 2
    parts = [p for p in PARTS if p in parts]  # most valuable first, whatever order they were named in
    if a.publish and a.smoke:
        print(
            "Error: --publish: a smoke run measures nothing; the docs take only full-size GPU runs",
            file=sys.stderr,
        )
        return 2
    if a.device.startswith("cuda") and not shutil.which("nvidia-smi"):
        print(
            "Error: --device cuda: nvidia-smi is not on PATH (it reads the driver and how busy the GPU is)",
            file=sys.stderr,
        )
        return 2
    t_all = time.perf_counter()
    workdir.mkdir(parents=True, exist_ok=True)
    results = workdir / "results.jsonl"
    installed = install_wheels(Path(a.wheels)) if a.wheels else None
    s = stamp(a.device, a.commit, a.wheels)
    if a.device.startswith("cuda") and not s["gpu"]:
        print("Error: --device cuda: torch sees no CUDA device", file=sys.stderr)
        return 2
    key = key_of(s, a.smoke)
    if installed is not None:
        append_record(results, {"part": "install", "key": key, "status": "done", "result": installed, "stamp": s})
    records = read_records(results)
    done = latest(records, key)
    left_over = []
    for name in parts:
        if not a.redo and done.get(name, {}).get("status") == "done":
            print(f"[{name}] done earlier for commit {key['commit']} on {key['gpu'] or key['device']}: skipped")
            continue
        left = a.budget - (time.perf_counter() - t_all) - MARGIN_S
        need = expected_seconds(name, records, a.smoke)
        if left < need:
            print(f"[{name}] left for the next call: about {need:.0f} s, {max(left, 0):.0f} s of the budget remain")
            left_over.append(name)
            continue
        timeout = min(a.part_timeout, left)
        print(f"[{name}] running" + ("" if a.in_process else f" (timeout {timeout:.0f} s)") + " ...", flush=True)
        rec = (
            run_in_process(name, a.device, a.smoke, workdir)
            if a.in_process
            else launch(name, a.device, a.smoke, workdir, timeout)
        )
        rec |= {"key": key, "stamp": s}
        append_record(results, rec)
        records.append(rec)
        if rec["status"] == "timeout" and name in RESUMABLE:
            left_over.append(name)  # out of time, its work kept: the next call goes on with it
        print(
            f"[{name}] {rec['status']} in {rec['seconds']:.1f} s" + (f"\n{rec['log_tail']}" if rec["log_tail"] else ""),
            flush=True,
        )
    now = latest(read_records(results), key)
    block = table(now, s, smoke=a.smoke)
    (workdir / "report.md").write_text(block + "\n" + kernels_text(now))
    print(f"\n{block}\n\n({time.perf_counter() - t_all:.0f} s of a {a.budget:.0f} s budget; results in {results})")
    if left_over:
        print(f"left for the next call (the same command resumes): {', '.join(left_over)}")
    bad = [n for n in parts if n not in left_over and now.get(n, {}).get("status") != "done"]
    for n in bad:
        print(f"part {n}: {now.get(n, {}).get('status', 'not run')}", file=sys.stderr)
    if a.publish:
        if not s["commit"] or not s["gpu"]:
            print(
                "Error: --publish: a figure needs its GPU and its commit (give --commit where git is missing)",
                file=sys.stderr,
            )
            return 2
        print(f"wrote {publish(read_records(results), key, Path(a.published))} (commit it: the docs read it)")
    return 1 if bad else 0


def expected_seconds(name: str, records: list[dict], smoke: bool) -> float:
    """How long part ``name`` will take: its last finished attempt in ``records`` (any commit, not a
    smoke run), else :data:`EXPECTED_S` (or half as much again as an attempt that ran out of time);
    a resumable part needs only a minute (it goes on next time), a smoke part little."""
    if smoke:
        return 1.0
    if name in RESUMABLE:
        return EXPECTED_S[name]
    tries = [r for r in records if r.get("part") == name and r.get("seconds") and not (r.get("key") or {}).get("smoke")]
    done = [float(r["seconds"]) for r in tries if r.get("status") == "done"]
    if done:
        return 1.2 * done[-1]
    cut = [float(r["seconds"]) for r in tries if r.get("status") == "timeout"]  # it needs more than it had
    return max(EXPECTED_S[name], 1.5 * cut[-1]) if cut else EXPECTED_S[name]


def report_only(workdir: Path, publish_to: bool, published: Path) -> int:
    """The table of the newest key in ``workdir/results.jsonl``, as its records are stamped (their
    card, versions and commit, not this machine's); with ``publish_to``, its records copied into
    ``published`` for the docs."""
    records = read_records(workdir / "results.jsonl")
    stamped = [r for r in records if r.get("key") and r.get("stamp") and r.get("part") in PARTS]
    if not stamped:
        print(f"Error: --report-only: no records in {workdir / 'results.jsonl'}", file=sys.stderr)
        return 2
    key, s = stamped[-1]["key"], stamped[-1]["stamp"]
    block = table(latest(records, key), s, smoke=bool(key.get("smoke")))
    print(block)
    if publish_to:
        if key.get("smoke") or not s.get("commit") or not s.get("gpu"):
            print("Error: --publish: the docs take full-size GPU runs with their GPU and commit", file=sys.stderr)
            return 2
        print(f"wrote {publish(records, key, published)} (commit it: the docs read it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
