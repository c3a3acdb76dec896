"""Options shared by several commands, so they read and behave the same everywhere."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..settings import DEFAULT_SAMPLES, DEFAULT_THRESHOLD


class Backend(str, Enum):
    hf = "hf"
    timm = "timm"


class Format(str, Enum):
    table = "table"
    json = "json"
    parquet = "parquet"


Samples = Annotated[int, typer.Option("--samples", "-N", help="Monte-Carlo draws per candidate size.")]
Threshold = Annotated[float, typer.Option("--threshold", help="Satisfied fraction at which a size counts as independent (0.99 reproduces the paper).")]
Seed = Annotated[int, typer.Option("--seed", help="Seed from which all sampling derives (the same seed gives the same results).")]
Rtol = Annotated[Optional[float], typer.Option("--rtol", help="Relative rank tolerance (default: max(rows, cols) * eps of the features' dtype).")]
Atol = Annotated[Optional[float], typer.Option("--atol", help="Absolute rank tolerance (default 0).")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")]
Out = Annotated[Optional[Path], typer.Option("--out", help="Write the records to this parquet file (atomically).")]
Plot = Annotated[Optional[Path], typer.Option("--plot", help="Draw the sweep curve(s) to this .png/.pdf/.svg file.")]

# Options of the commands that run a model over data (check, capacity).
BackendOpt = Annotated[Optional[Backend], typer.Option("--backend", help="Force transformers (hf) or timm.")]
Weights = Annotated[Optional[str], typer.Option("--weights", help="Local folder (transformers) or file (timm) with trained weights for the trained column.")]
Data = Annotated[Optional[str], typer.Option("--data", help="Image folder, parquet file, text/jsonl file, Hugging Face dataset id (wikipedia, imagenet-1k, ...). Default: built-in offline data.")]
Split = Annotated[str, typer.Option("--split", help="Dataset split for Hugging Face datasets.")]
BatchSize = Annotated[int, typer.Option("--batch-size", help="Examples per forward pass.")]
ContextLength = Annotated[Optional[int], typer.Option("--context-length", help="Text models: tokens per example n.")]
FormatOpt = Annotated[Format, typer.Option("--format", help="table (people), json or parquet (stdout).")]

DEFAULTS = dict(samples=DEFAULT_SAMPLES, threshold=DEFAULT_THRESHOLD, seed=0, device="auto")


def validate_common(samples: int, threshold: float, rtol, atol) -> None:
    from .. import validate

    validate.integer("--samples", samples)
    validate.fraction("--threshold", threshold)
    validate.tolerance("--rtol", rtol)
    validate.tolerance("--atol", atol)


def prepare_outputs(out: Path | None, plot: Path | None, fmt: "Format") -> None:
    """Check every output path before any work, so a bad path costs nothing and writes nothing."""
    import sys

    from ..errors import InputError
    from ..io import check_writable
    from ..plot import check_plot_path

    if out is not None:
        if out.suffix.lower() != ".parquet":
            raise InputError(f"--out {out}: the records are written as parquet; use a .parquet file name")
        check_writable(out)
    if plot is not None:
        check_plot_path(plot)
    if fmt == Format.parquet and sys.stdout.isatty():
        raise InputError("--format parquet writes binary data to stdout; redirect it to a file or pipe, or use --out FILE.parquet")


def parquet_rows(records: list[dict], sweep_rows: list[dict]) -> list[dict]:
    """The rows of a parquet output: the records, then the sweep rows tagged ``check = "sweep"``."""
    return records + [{"check": "sweep", **r} for r in sweep_rows]


def write_out(out: Path | None, meta: dict, records: list[dict], sweep_rows: list[dict]) -> None:
    if out is not None:
        from ..io import write_parquet

        write_parquet(parquet_rows(records, sweep_rows), out, meta)


def emit_data(fmt: "Format", meta: dict, records: list[dict], sweep_rows: list[dict]) -> bool:
    """Print JSON or parquet to stdout; False when the format is the table (the caller renders)."""
    import sys

    if fmt == Format.json:
        from ..report import print_json

        print_json({"meta": meta, "records": records, "sweep": sweep_rows})
        return True
    if fmt == Format.parquet:
        from ..io import parquet_bytes

        sys.stdout.buffer.write(parquet_bytes(parquet_rows(records, sweep_rows), meta))
        sys.stdout.flush()
        return True
    return False
