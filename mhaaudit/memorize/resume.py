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
from .recipe import RECIPE_FIELDS, Recipe
from .results import MemorizeRun, config_key, flat_fields, flat_names, run_contradiction
from .saturation import SaturationSummary

__all__ = [
    "read_results",
    "read_whole_numbers",
    "row_fault",
    "row_to_run",
    "run_to_row",
    "stored_run_contradiction",
]


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
    (pyarrow takes 12.5 into an int64 column as 12). A list may be JSON text (a file rewritten through a CSV or
    JSON tool).
    """
    for name, listed in _WHOLE.items():
        value = row.get(name)
        if value is None:
            continue
        try:
            items = (json.loads(value) if isinstance(value, str) else value) if listed else [value]
        except (ValueError, RecursionError):  # JSON text that is no JSON, or nested deeper than Python parses
            items = None
        if not isinstance(items, list) or not all(whole_number(v) for v in items):
            shown = clipped(repr(value) if items is None or not listed else str(items), 60)
            return f"{name} = {shown}, not " + ("a list of whole numbers" if listed else "a whole number")
        exact = [int(v) for v in items]
        row[name] = exact if listed else exact[0]
    return None


#: The saturation columns of a row: all null where the point's saturation was not measured, none null where it was.
_SATURATION = (
    "sat_threshold",
    "sat_histogram",
    "sat_frac_ge2",
    "sat_frac_some_unsaturated",
    "sat_frac_any",
    "sat_mean",
)
#: The columns every row of a results file has, in every layout memorize has written: the run's fields but
#: ``diverged`` (files written before it was recorded lack it; their final loss says it), its key, its saturation.
REQUIRED_COLUMNS = (*(k for k in _STORED if k != "diverged"), "config_key", *_SATURATION)
#: The columns where training writes a null: a recipe's epochs and max_steps left to the paper's rule and no cap.
_NULLABLE = ("epochs", "max_steps")
#: Each column's type as memorize writes it, and what a value of another type is not, in words.
_TYPES = {c.name: c.type for c in MEMORIZE_COLUMNS}
_KINDS = {"int64": "a whole number", "float64": "a number", "string": "text", "bool": "true or false"}
_ALL_OR_NONE = " (training writes all the saturation columns or none)"


def _of_type(value, kind: str) -> bool:
    """Whether ``value`` (whole numbers read as integers, :func:`read_whole_numbers`) is of column type ``kind``."""
    if kind == "list<int64>":
        return isinstance(value, list) and all(_of_type(v, "int64") for v in value)
    if kind == "bool":
        return isinstance(value, bool)
    python: dict[str, type | tuple[type, ...]] = {"int64": int, "float64": (int, float), "string": str}
    return isinstance(value, python[kind]) and not isinstance(value, bool)


def row_fault(row: dict) -> str | None:
    """What a results file's row (its whole numbers read by :func:`read_whole_numbers`) holds that memorize never
    writes, in words naming the column, or None.

    Such a row is refused, never trained again in silence: it lacks a column of :data:`REQUIRED_COLUMNS`; a column
    is null where training writes a value (only epochs and max_steps may be null, and the saturation columns all
    together, of a point whose saturation was not measured; ``diverged`` may be absent, never null); a value is
    not of its column's type; a number other than the final loss (NaN or infinite where training diverged) is not
    finite; or its recipe is none training runs (:class:`~.recipe.Recipe`: a known task and context, a positive
    lr and tolerance, classes of at least 2, counts of at least 1).
    """
    missing = [name for name in REQUIRED_COLUMNS if name not in row]
    if missing:
        return f"no {', '.join(missing)} column"
    measured = row["sat_histogram"] is not None
    for name in (*REQUIRED_COLUMNS, *(("diverged",) if "diverged" in row else ())):
        value, kind = row[name], _TYPES[name]
        saturation = name in _SATURATION
        if value is None and (name in _NULLABLE or (saturation and not measured)):
            continue
        if value is None:
            return f"{name} = null, where training writes a value" + (_ALL_OR_NONE if saturation else "")
        if saturation and not measured:
            return f"{name} = {clipped(repr(value), 40)} with sat_histogram null" + _ALL_OR_NONE
        if not _of_type(value, kind):
            return f"{name} = {clipped(repr(value), 40)}, not " + _KINDS.get(kind, "a list of whole numbers")
        if kind == "float64" and name != "final_loss" and not math.isfinite(value):
            return f"{name} = {value!r}, not a finite number"
    try:
        Recipe(**{k: row[k] for k in RECIPE_FIELDS})
    except ValueError as exc:
        return f"a recipe no training runs ({exc})"
    return None


def row_to_run(row: dict) -> MemorizeRun:
    """The run a results file's row stores, marked ``reused``.

    Raises:
        ValueError: the row lacks a column or holds what memorize never writes (:func:`row_fault`).
    """
    row = dict(row)
    wrong = read_whole_numbers(row) or row_fault(row)
    if wrong is not None:
        raise ValueError(f"the row gives {wrong}")
    sat = None
    if row["sat_histogram"] is not None:
        hist = tuple(row["sat_histogram"])
        sat = SaturationSummary(
            threshold=float(row["sat_threshold"]),
            heads=row["heads"],
            examples=sum(hist),
            histogram=hist,
            frac_at_least_two_saturated=float(row["sat_frac_ge2"]),
            frac_some_unsaturated=float(row["sat_frac_some_unsaturated"]),
            frac_any_saturated=float(row["sat_frac_any"]),
            mean_saturated=float(row["sat_mean"]),
        )
    data = {k: row[k] for k in _STORED if k != "diverged"}
    # Absent from files written before it was recorded: training records it exactly when the loss is not finite.
    data["diverged"] = row["diverged"] if "diverged" in row else not math.isfinite(row["final_loss"])
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
    new ones under ``meta``), each of which a run can be read back from. A file written before ``diverged``
    was recorded gets each row's from its final loss.

    Raises:
        InputError: the file is not a regular file or cannot be read, or is not a results file of memorize (no
            text config_key column, no column of :data:`REQUIRED_COLUMNS`, a row memorize never writes
            (:func:`read_whole_numbers`, :func:`row_fault`), a column that holds values of another type, or two
            rows with the same configuration key), in one line naming the file, and the row and column at fault.
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
    key_type = table.schema.field("config_key").type if "config_key" in table.column_names else None
    if key_type is None or not (pa.types.is_string(key_type) or pa.types.is_large_string(key_type)):
        what = "no config_key column" if key_type is None else f"its config_key column holds {key_type}, not text"
        raise InputError(f"{path} is not a results file of 'mhaaudit memorize' ({what}); pick another " + Param("out"))
    refused = f"{path} is not a results file as memorize writes it: "
    missing = [name for name in REQUIRED_COLUMNS if name not in table.column_names]
    if missing:  # every layout memorize has written holds them: there is nothing to read a point back from
        named = ", ".join(missing[:3]) + (f" or {len(missing) - 3} other columns" if len(missing) > 3 else " column")
        raise InputError(refused + f"its rows have no {named}, which every layout of the file has; " + hint)
    if not rows:  # memorize writes a file once a point is trained: one of its columns and no row is none of its own
        raise InputError(refused + "it holds no row, and memorize writes one for every point it trains; " + hint)
    for i, r in enumerate(rows, 1):
        # A count cut to an integer would be a count no training wrote; a row that cannot be read is not trained
        # again in silence (the file would be written over without it).
        wrong = read_whole_numbers(r) or row_fault(r)
        if wrong is not None:
            raise InputError(refused + f"its row {i} gives {wrong}{_point(r)}; " + hint)
    try:
        records_table(rows, meta)  # the rows are written back under memorize's column types
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise InputError(
            f"{path} is not a results file of 'mhaaudit memorize' (its columns do not hold the types memorize "
            f"writes: {one_line(exc, 120)}); pick another " + Param("out")
        ) from None
    by_key: dict[str, dict] = {}
    for r in rows:
        if "diverged" not in r:  # a file written before the column: training records it as its loss says
            r["diverged"] = not math.isfinite(r["final_loss"])
        if r["config_key"] in by_key:  # memorize writes one row a point: which of the two holds could not be said
            raise InputError(
                f"{path} is not a results file of 'mhaaudit memorize' (two rows for the configuration "
                f"{r['config_key']!r}); pick another " + Param("out")
            )
        by_key[r["config_key"]] = r
    return by_key


def _point(row: dict) -> str:
    """The point a row is of, for a message (`` (the point H = 1, n = 4, d_h = 8, T = 16)``), or nothing when its
    shape columns do not give one."""
    shape = {"H": row.get("heads"), "n": row.get("n"), "d_h": row.get("head_dim"), "T": row.get("size")}
    if not all(_of_type(v, "int64") for v in shape.values()):
        return ""
    return " (the point " + ", ".join(f"{k} = {v}" for k, v in shape.items()) + ")"
