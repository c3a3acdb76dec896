"""Result files of the benchmark scripts: the figures the docs' Benchmarks page is generated from.

A script given ``--json PATH`` writes one small JSON document there when it ends:

    {"script": "bench_kruskal.py", "command": "python benchmarks/bench_kruskal.py ...",
     "stamp": {"commit": ..., "date": ..., "machine": {...}, "load_average": [start, end], ...},
     "rows": [{"what": ..., "naive": ..., "mhaaudit": ..., "ratio": ..., "checked": ...}, ...],
     "details": {...}}

``rows`` are the cells of the page's table, already worded (each script knows what it measured);
``details`` keep the raw numbers. The files of runs that were made are committed under
``benchmarks/results/``; ``markdown(read_all())`` is the table the page shows, each row stamped
with its script's command, commit and machine.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ROW_KEYS = ("what", "naive", "mhaaudit", "ratio", "checked")


def commit() -> str:
    """The commit measured (short), marked when the package's files differ from it; ``unknown`` without git."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "mhaaudit"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + (" (with uncommitted changes to mhaaudit/)" if dirty else "")


def machine() -> dict:
    """The machine: CPU model, cores, memory, GPU, OS, and the Python and torch versions."""
    import torch

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = None
    with contextlib.suppress(OSError, ValueError, StopIteration):
        kb = next(ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal"))
        mem = round(int(kb.split()[1]) / 2**20, 1)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "os": platform.platform(terse=True),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def describe(m: dict) -> str:
    """A machine in a few words: ``2 cores (AMD EPYC ...), 23.4 GiB, no GPU, torch 2.14.1``."""
    gpu = m.get("gpu") or "no GPU"
    return f"{m.get('cores')} cores ({m.get('cpu')}), {m.get('memory_gib')} GiB, {gpu}, torch {m.get('torch')}"


class Run:
    """One measured run: started when made (the load average then), written by :meth:`write`."""

    def __init__(self, script: str, argv: list[str]) -> None:
        self.script, self.argv = script, list(argv)
        self.load_start = os.getloadavg()[0]

    def write(self, path: str | os.PathLike, rows: list[dict], details: dict) -> Path:
        """Write the result file (atomically) and return its path."""
        for row in rows:
            missing = [k for k in ROW_KEYS if k not in row]
            if missing:
                raise ValueError(f"a result row needs {missing}")
        doc = {
            "script": self.script,
            "command": " ".join(["python", f"benchmarks/{self.script}", *self.argv]),
            "stamp": {
                "commit": commit(),
                "date": datetime.date.today().isoformat(),
                "machine": machine(),
                "load_average": [round(self.load_start, 1), round(os.getloadavg()[0], 1)],
            },
            "rows": rows,
            "details": details,
        }
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2, default=float) + "\n")
        os.replace(tmp, out)
        return out


def read_all(folder: str | os.PathLike = RESULTS) -> list[dict]:
    """Every result file of ``folder`` (``*.json``), in name order."""
    return [json.loads(p.read_text()) for p in sorted(Path(folder).glob("*.json"))]


def _command(doc: dict) -> str:
    """The command without its ``--json PATH`` (where the file went is not part of what was measured)."""
    words = doc["command"].split()
    if "--json" in words:
        i = words.index("--json")
        del words[i : i + 2]
    return " ".join(words)


def markdown(docs: list[dict]) -> str:
    """The page's table: one row per measured row, with the command, commit, machine and load that made it."""
    lines = [
        "| what | naive | mhaaudit | ratio | checked | measured by |",
        "|---|---|---|---|---|---|",
    ]
    for doc in docs:
        s = doc["stamp"]
        load = s.get("load_average") or [None, None]
        by = (
            f"`{_command(doc)}`, commit {s['commit']}, {s['date']}, {describe(s['machine'])}, "
            f"load average {load[0]} at the start, {load[1]} at the end"
        )
        for row in doc["rows"]:
            cells = [str(row[k]).replace("|", "\\|") for k in ROW_KEYS]
            lines.append("| " + " | ".join(cells) + f" | {by} |")
    return "\n".join(lines)


def seconds(x: float) -> str:
    """A time as the tables show it (ms below 0.1 s)."""
    return f"{x * 1e3:.1f} ms" if x < 0.1 else f"{x:.2f} s"
