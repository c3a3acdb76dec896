"""Benchmark: one audit as N processes (torchrun's environment, gloo, CPU) against one process.

Runs the same ``mhaaudit check`` command three ways, each process with ``--threads`` threads:
one process; N processes started with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``
and ``MASTER_PORT`` set (what ``torchrun --nproc-per-node N -m mhaaudit`` does); and, for a fair
comparison on the same cores, one process with N x ``--threads`` threads. Prints wall time, the
CPU time of all its processes, the load and capture time from rank 0's JSON ``meta``, the
ratios, and whether the records equal the single-process run's with the same threads (they
must). The machine's load average is printed before and after: on a shared machine the wall
times say little, the CPU times more. Asserts nothing. Run:

    python benchmarks/bench_distributed.py [--model vit-base] [--limit 256] [--batch-size 16]
        [--samples 2000] [--nproc 2] [--threads 1] [--layer 1]

The default is a random-weight ViT-Base on the built-in images (no download).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _env(threads: int, **extra) -> dict:
    env = dict(
        os.environ,
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(args: list[str], nproc: int, threads: int) -> tuple[float, float, dict]:
    """Wall seconds, CPU seconds of all processes, and rank 0's JSON document."""
    cmd = [sys.executable, "-m", "mhaaudit", *args]
    t0, c0 = time.perf_counter(), _cpu_s()
    if nproc == 1:
        p = subprocess.run(cmd, env=_env(threads), capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(p.stderr)
        return time.perf_counter() - t0, _cpu_s() - c0, json.loads(p.stdout)
    port = _port()
    procs = [
        subprocess.Popen(
            cmd,
            env=_env(threads, RANK=r, LOCAL_RANK=r, WORLD_SIZE=nproc, MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(nproc)
    ]
    outs = [p.communicate() for p in procs]
    wall = time.perf_counter() - t0
    if any(p.returncode for p in procs):
        raise SystemExit(outs[0][1])
    return wall, _cpu_s() - c0, json.loads(outs[0][0])


# The phases of loading the model and passing the data through it (mhaaudit.phases).
_CAPTURE_PHASES = ("model build", "data", "duplicate keys", "forward", "reduction")


def _capture_s(doc: dict) -> float:
    return sum(v for k, v in doc["meta"]["timings_s"].items() if k in _CAPTURE_PHASES)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vit-base")
    ap.add_argument("--limit", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layer", type=int, default=1, help="depth of the probe: the forward pass runs blocks 1..K")
    a = ap.parse_args()
    args = [
        "check",
        a.model,
        "--variants",
        "random",
        "--layer",
        str(a.layer),
        "--limit",
        str(a.limit),
        "--batch-size",
        str(a.batch_size),
        "--samples",
        str(a.samples),
        "--device",
        "cpu",
        "--format",
        "json",
    ]
    print(f"mhaaudit {' '.join(args)}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    one_wall, one_cpu, one = run(args, 1, a.threads)
    many_wall, many_cpu, many = run(args, a.nproc, a.threads)
    wide_wall, wide_cpu, wide = run(args, 1, a.threads * a.nproc)
    same = many["records"] == one["records"]
    print(f"{'run':<34}{'wall s':>9}{'CPU s':>9}{'load+capture s':>16}")
    for label, wall, cpu_s, doc in (
        (f"1 process x {a.threads} thread(s)", one_wall, one_cpu, one),
        (f"{a.nproc} processes x {a.threads} thread(s)", many_wall, many_cpu, many),
        (f"1 process x {a.threads * a.nproc} thread(s)", wide_wall, wide_cpu, wide),
    ):
        print(f"{label:<34}{wall:>9.2f}{cpu_s:>9.2f}{_capture_s(doc):>16.2f}")
    print(
        f"speed-up of {a.nproc} processes: {one_wall / many_wall:.2f}x wall, "
        f"{_capture_s(one) / _capture_s(many):.2f}x load+capture (against 1 process x {a.threads} thread(s)); "
        f"{wide_wall / many_wall:.2f}x wall against 1 process x {a.threads * a.nproc} threads"
    )
    print(
        f"records equal to the single process's with the same threads: {same}; meta: {many['meta'].get('distributed')}"
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
