"""The results file of a grid (``out``, its resume file): a run as one row, the file's rows read back by
configuration key and held to what memorize writes, a stored run to what training writes.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from ..errors import InputError, Param, clipped, one_line
from ..files import read_parquet
from ..tables import MEMORIZE_COLUMNS, records_table, whole_number
from .results import MemorizeRun, config_key, flat_fields, flat_names, run_contradiction
from .saturation import SaturationSummary

__all__ = ["read_results", "read_whole_numbers", "row_to_run", "run_to_row", "stored_run_contradiction"]


_STORED = tuple(k for k in flat_names(MemorizeRun) if k not in ("saturation", "reused"))


def run_to_row(run: MemorizeRun) -> dict:
    """A run as one flat row of the results file (saturation as ``sat_*`` columns)."""
    row = {k: v for k, v in flat_fields(run).items() if k in _STORED}
    row["config_key"] = config_key(run.config())
    s = run.saturation
    row.update(
        sat_threshold=s.threshold if s else None,
        sat_histogram=list(s.histogram) if s else None,
        sat_frac_ge2=s.frac_at_least_two_saturated if s else None,
        sat_frac_some_unsaturated=s.frac_some_unsaturated if s else None,
        sat_frac_any=s.frac_any_saturated if s else None,
        sat_mean=s.mean_saturated if s else None,
    )
    return row


#: The columns of a results file that hold whole numbers (the point's shape and T, the recipe's, the seed, the
#: counts of examples and steps), by whether each holds a list of them (the histogram of saturated heads).
_WHOLE = {c.name: c.type.startswith("list<") for c in MEMORIZE_COLUMNS if c.type in ("int64", "list<int64>")}


def read_whole_numbers(row: dict) -> str | None:
    """Read the whole-number columns of a results file's row (:data:`_WHOLE`) exactly, in place; what one holds
    that is no whole number, in words, or None.

    Training writes each as an integer; a float that is one (12.0, a file rewritten through floats) is read as
    that integer. Any other value (12.5) is said, never cut to an integer as a typed column would cut it
    (pyarrow takes 12.5 into an int64 column as 12). A list may be JSON text, as older files store it.
    """
    for name, listed in _WHOLE.items():
        value = row.get(name)
        if value is None:
            continue
        try:
            items = (json.loads(value) if isinstance(value, str) else value) if listed else [value]
        except ValueError:  # JSON text that is no JSON
            items = None
        if not isinstance(items, list) or not all(whole_number(v) for v in items):
            shown = clipped(repr(value) if items is None or not listed else str(items), 60)
            return f"{name} = {shown}, not " + ("a list of whole numbers" if listed else "a whole number")
        exact = [int(v) for v in items]
        row[name] = exact if listed else exact[0]
    return None


def row_to_run(row: dict) -> MemorizeRun:
    """The run a row stores, marked ``reused``; KeyError/TypeError/ValueError on a foreign layout."""
    sat = None
    if row.get("sat_histogram") is not None:
        hist = row["sat_histogram"]
        hist = tuple(int(v) for v in (json.loads(hist) if isinstance(hist, str) else hist))
        sat = SaturationSummary(
            threshold=float(row["sat_threshold"]),
            heads=int(row["heads"]),
            examples=int(sum(hist)),
            histogram=hist,
            frac_at_least_two_saturated=float(row["sat_frac_ge2"]),
            frac_some_unsaturated=float(row["sat_frac_some_unsaturated"]),
            frac_any_saturated=float(row["sat_frac_any"]),
            mean_saturated=float(row["sat_mean"]),
        )
    data = {k: row[k] for k in _STORED if k != "diverged"}
    diverged = row.get("diverged")  # absent from files written before it was recorded: their loss says it
    data["diverged"] = not math.isfinite(float(row["final_loss"])) if diverged is None else diverged
    return replace(MemorizeRun.from_document(data), saturation=sat, reused=True)


def stored_run_contradiction(run: MemorizeRun, key: str) -> str | None:
    """What a run read back from a results file under ``key`` says that no training writes, in words, or None:
    its columns give another configuration than its ``key``, or :func:`run_contradiction`."""
    if config_key(run.config()) != key:
        return "its columns give another configuration than its config_key"
    return run_contradiction(run)


def read_results(path: Path, meta: dict) -> dict[str, dict]:
    """The rows of an existing results file by configuration key, checked to be what memorize writes: a
    regular file whose rows take the types of memorize's columns again (they are written back with the
    new ones under ``meta``).

    Raises:
        InputError: the file is not a regular file or cannot be read, or is not a results file of memorize (no
            text config_key column, a column memorize writes holds values of another type, a whole-number column
            holds another number (:func:`read_whole_numbers`), or two rows have the same configuration key).
    """
    import pyarrow as pa

    what = f"the existing results file {path}"
    hint = "move it away or pick another " + Param("out")
    try:  # a named pipe would block the reader; what its footer declares, decoded, must fit first
        table = read_parquet(path, InputError, what, python=True, hint=hint)
        rows = table.to_pylist()
    except InputError:
        raise
    except Exception as exc:
        raise InputError(
            f"cannot read the existing results file {path} ({exc.__class__.__name__}); move it away or pick another "
            + Param("out")
        ) from exc
    if not rows:
        return {}
    key_type = table.schema.field("config_key").type if "config_key" in table.column_names else None
    if key_type is None or not (pa.types.is_string(key_type) or pa.types.is_large_string(key_type)):
        what = "no config_key column" if key_type is None else f"its config_key column holds {key_type}, not text"
        raise InputError(f"{path} is not a results file of 'mhaaudit memorize' ({what}); pick another " + Param("out"))
    for i, r in enumerate(rows, 1):
        wrong = read_whole_numbers(r)
        if wrong is not None:  # a count cut to an integer would be a count no training wrote
            raise InputError(
                f"{path} is not a results file as memorize writes it: its row {i} gives {wrong}; move it away or "
                "pick another " + Param("out")
            )
    try:
        records_table(rows, meta)  # the rows are written back under memorize's column types
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise InputError(
            f"{path} is not a results file of 'mhaaudit memorize' (its columns do not hold the types memorize "
            f"writes: {one_line(exc, 120)}); pick another " + Param("out")
        ) from None
    by_key: dict[str, dict] = {}
    for r in rows:
        if r.get("diverged") is None and isinstance(r.get("final_loss"), float):  # written before the column
            r["diverged"] = not math.isfinite(r["final_loss"])
        if r["config_key"] in by_key:  # memorize writes one row a point: which of the two holds could not be said
            raise InputError(
                f"{path} is not a results file of 'mhaaudit memorize' (two rows for the configuration "
                f"{r['config_key']!r}); pick another " + Param("out")
            )
        by_key[r["config_key"]] = r
    return by_key
