"""Record the docs' pictures from real runs of the command line: never drawn or edited by hand.

    python docs/gen_figures.py                  # every picture at the offline defaults (minutes of CPU)
    python docs/gen_figures.py --only check     # one picture (and what it needs)
    python docs/gen_figures.py --quick --model DIR --out /tmp/figs   # small sizes (the test suite's run)

Each picture is one command of ``mhaaudit``, run in this process through the command line's own entry
point (``mhaaudit.cli.app.main``), so its options, defaults and report are the ones a user gets:

- ``check-vit-base.svg``: ``mhaaudit check vit-base``, the terminal report, exported by rich's own
  ``Console.save_svg`` (the console the report is printed on records it, laid out for 100 columns,
  as a report written to a file or a pipe is; the several-seed table for 160, a wide terminal);
- ``kruskal-sweep.svg`` and ``figure1-sweep.png``: ``mhaaudit kruskal FEATURES --sweep --plot ...``
  on the random-attention features the check above captured (the paper's Figure 1 column);
- ``capacity-vit-base.svg``: ``mhaaudit capacity vit-base``;
- ``depth.png``: ``mhaaudit check vit-base --variants random --layers 0-6 --plot ...`` (the depth profile);
- ``seeds.svg``: ``mhaaudit check vit-base --variants random-attention,random --seeds 0-2``, the
  several-seed summary.

Every picture's command line, wall time, commit and machine go to ``figures.json`` beside the
images; the docs print that stamp under each picture (``docs/hooks.py``). ``--quick`` runs the same
commands at small sizes (for a tiny model given with ``--model``: the test suite checks the
machinery this way); its stamps say so, and it refuses to write into the docs' own image folder.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
STAMPS = "figures.json"
WIDTH = 100  # the report's columns: what a redirected report is laid out for
# The several-seed table has more columns than 100 characters hold (rich would cut them short): it is
# recorded as a terminal of this width shows it.
WIDE = 160

# (name, the sizes at the defaults, the sizes of --quick). The full sizes are the offline defaults,
# except where a run at the defaults takes an hour of this machine's CPU (the depth profile: 7
# depths; the seeds: 3 whole audits): there the stamp's command line says the sizes used.
FULL = {
    "check": [],
    "kruskal": [],
    "capacity": [],
    "depth": ["--limit", "500", "--samples", "1000"],
    "seeds": ["--limit", "300", "--samples", "300"],
}
QUICK = {
    "check": ["--limit", "40", "--samples", "50"],
    "kruskal": ["--samples", "50"],
    "capacity": ["--limit", "40", "--samples", "50"],
    "depth": ["--limit", "40", "--samples", "50"],
    "seeds": ["--limit", "40", "--samples", "50"],
}
FIGURES = ("check", "kruskal", "capacity", "depth", "seeds")


def _resultfiles():
    """``benchmarks/resultfiles.py``, whose ``commit()`` and ``machine()`` stamp the benchmark results the same way."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mhaaudit_resultfiles", ROOT / "benchmarks" / "resultfiles.py")
    assert spec is not None and spec.loader is not None, "benchmarks/resultfiles.py is part of the repository"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Recorder:
    """The report console of ``mhaaudit.render`` swapped for one that records what is printed."""

    def __init__(self, width: int = WIDTH) -> None:
        from rich.console import Console

        self.console = Console(
            file=io.StringIO(), record=True, width=width, force_terminal=True, color_system="truecolor"
        )

    @contextlib.contextmanager
    def active(self):
        import mhaaudit.render.common as render  # where print_report finds its console

        real = render.stdout_console
        render.stdout_console = lambda: self.console
        try:
            yield self
        finally:
            render.stdout_console = real

    def save_svg(self, path: Path, title: str) -> None:
        self.console.save_svg(str(path), title=title)


@contextlib.contextmanager
def keeping_audits(kept: list):
    """The result objects ``check`` computes, kept as the command returns them (for the features)."""
    import mhaaudit.auditing as auditing

    real = auditing.audit

    def audit(*args, **kwargs):
        result = real(*args, **kwargs)
        kept.append(result)
        return result

    auditing.audit = audit
    try:
        yield kept
    finally:
        auditing.audit = real


def run(args: list[str]) -> float:
    """``mhaaudit ARGS`` through the command line's own entry point; its wall time. A failure stops here."""
    from mhaaudit.cli.app import main

    print("$ mhaaudit " + " ".join(args), file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    rc = main(args)
    if rc != 0:
        raise SystemExit(f"Error: mhaaudit {' '.join(args)} ended with status {rc}")
    return time.perf_counter() - t0


class Stamps:
    """``figures.json``: for each picture, how it was made."""

    def __init__(self, folder: Path, quick: bool) -> None:
        self.path = folder / STAMPS
        self.quick = quick
        old = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.figures: dict = old.get("figures", {}) if old.get("quick", False) == quick else {}
        stamps = _resultfiles()
        self.commit, self.machine = stamps.commit(), stamps.machine()

    def add(self, files: list[str], command: str, wall_s: float) -> None:
        for name in files:
            self.figures[name] = {
                "command": command,
                "wall_s": round(wall_s, 1),
                "commit": self.commit,
                "date": datetime.date.today().isoformat(),
                "load_average": round(os.getloadavg()[0], 1),
                "machine": self.machine,
            }
        self.save()

    def save(self) -> None:
        doc = {"quick": self.quick, "generator": "docs/gen_figures.py", "figures": dict(sorted(self.figures.items()))}
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        os.replace(tmp, self.path)


def generate(out: Path, model: str, only: list[str], quick: bool) -> list[str]:
    """Run the commands for ``only`` and write their pictures and stamps into ``out``; the files written."""
    sizes = QUICK if quick else FULL
    stamps = Stamps(out, quick)
    written: list[str] = []
    name = "vit-base" if model == "vit-base" else "MODEL"  # the command line as the stamp shows it
    work = Path(tempfile.mkdtemp(prefix="mhaaudit-figures-"))
    cwd = Path.cwd()
    os.chdir(work)  # the relative paths of the commands (features/, the plots) land here
    try:
        features = None
        if "check" in only or "kruskal" in only:
            rec, kept = Recorder(), []
            args = ["check", model, *sizes["check"]]
            with rec.active(), keeping_audits(kept):
                wall = run(args)
            if "check" in only:
                rec.save_svg(out / "check-vit-base.svg", title=f"mhaaudit check {name}")
                stamps.add(["check-vit-base.svg"], "mhaaudit " + " ".join([*args[:1], name, *args[2:]]), wall)
                written.append("check-vit-base.svg")
            kept[-1].save_features("features")
            features = Path("features") / "random-attention"
        if "kruskal" in only:
            rec = Recorder()
            args = ["kruskal", str(features), "--sweep", *sizes["kruskal"], "--plot", "figure1-sweep.png"]
            with rec.active():
                wall = run(args)
            rec.save_svg(out / "kruskal-sweep.svg", title="mhaaudit kruskal --sweep")
            (out / "figure1-sweep.png").write_bytes(Path("figure1-sweep.png").read_bytes())
            shown = f"mhaaudit check {name} --save-features features && mhaaudit " + " ".join(args)
            stamps.add(["kruskal-sweep.svg", "figure1-sweep.png"], shown, wall)
            written += ["kruskal-sweep.svg", "figure1-sweep.png"]
        if "capacity" in only:
            rec = Recorder()
            args = ["capacity", model, *sizes["capacity"]]
            with rec.active():
                wall = run(args)
            rec.save_svg(out / "capacity-vit-base.svg", title=f"mhaaudit capacity {name}")
            stamps.add(["capacity-vit-base.svg"], "mhaaudit " + " ".join([args[0], name, *args[2:]]), wall)
            written.append("capacity-vit-base.svg")
        if "depth" in only:
            layers = "0-2" if quick else "0-6"
            args = ["check", model, "--variants", "random", "--layers", layers, *sizes["depth"], "--plot", "depth.png"]
            with Recorder().active():
                wall = run(args)
            (out / "depth.png").write_bytes(Path("depth.png").read_bytes())
            stamps.add(["depth.png"], "mhaaudit " + " ".join([args[0], name, *args[2:]]), wall)
            written.append("depth.png")
        if "seeds" in only:
            rec = Recorder(width=WIDE)
            args = ["check", model, "--variants", "random-attention,random", *sizes["seeds"], "--seeds", "0-2"]
            with rec.active():
                wall = run(args)
            rec.save_svg(out / "seeds.svg", title=f"mhaaudit check {name} --seeds 0-2")
            stamps.add(["seeds.svg"], "mhaaudit " + " ".join([args[0], name, *args[2:]]), wall)
            written.append("seeds.svg")
    finally:
        os.chdir(cwd)
        shutil.rmtree(work, ignore_errors=True)  # the commands' features and plots: what was kept is in out
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(IMAGES), help="folder of the pictures and figures.json (default docs/images)")
    ap.add_argument("--only", default=",".join(FIGURES), help=f"comma-separated, of: {', '.join(FIGURES)}")
    ap.add_argument("--quick", action="store_true", help="small sizes: checks the machinery, for the test suite")
    ap.add_argument("--model", default="vit-base", help="the model of every command (default vit-base)")
    a = ap.parse_args(argv)
    only = [p.strip() for p in a.only.split(",") if p.strip()]
    bad = [p for p in only if p not in FIGURES]
    if bad:
        print(f"Error: --only: unknown picture {bad[0]!r} (choose from {', '.join(FIGURES)})", file=sys.stderr)
        return 2
    out = Path(a.out).resolve()
    if a.quick and out == IMAGES.resolve():
        print("Error: --quick: small-size pictures never replace the docs' own; give --out", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    out.mkdir(parents=True, exist_ok=True)
    written = generate(out, a.model, only, a.quick)
    print(f"wrote {', '.join(written)} and {STAMPS} in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
