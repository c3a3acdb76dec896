"""A series' results file held to itself: the rows it holds against the rows its stored result gives.

A run that resumes reads the stored result from the file's metadata (:meth:`.result.SeriesResult.from_parquet`),
and its next save writes the rows again from that result; ``capacity --from`` reads the rows. A row edited by hand
(a verdict and its fraction changed together, which no stored record contradicts) would be rewritten silently from
the metadata by the resume, and the edit lost: such a file is refused instead (:func:`rows_unlike_result`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import InputError, Param, clipped, with_names
from ..files import read_parquet
from ..tables import records_table, table_rows

if TYPE_CHECKING:
    from .result import SeriesResult

__all__ = ["rows_unlike_result"]


def rows_unlike_result(
    path: str | os.PathLike, result: SeriesResult, names: Callable[[str], str] | None = None
) -> str | None:
    """Where the rows of the results file ``path`` differ from the rows its stored ``result`` gives, in words
    (the first difference); None when they are the same.

    The rows ``result`` gives are those a run's save writes for it (its records and sweep rows, the messages in them
    named by ``names``), typed as the file's writer types them: every column the same, every value equal (a float
    exactly, as the same writer wrote it; NaN equal to NaN), the rows in the same order.

    Raises:
        InputError: when the file's rows cannot be read, or would take more than the memory available.
    """
    rows = table_rows(result.records(), result.sweep_rows())
    if names is not None:
        rows = with_names(rows, names)
    meta = result.meta()
    hint = "move it away or pick another " + Param("out")
    try:  # read whole, as Python values: what its footer declares, decoded, must fit first
        held = read_parquet(path, InputError, Param("out") + f" {os.fspath(path)}", python=True, hint=hint)
        stored = held.to_pylist()
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a file that cannot be read is the user's bad input
        raise InputError(
            Param("out") + f" {os.fspath(path)}: cannot read its rows ({' '.join(str(exc).split())[:160]}); " + hint
        ) from None
    want = records_table(rows, meta)
    missing = [c for c in want.column_names if c not in held.column_names]
    extra = [c for c in held.column_names if c not in want.column_names]
    if missing or extra:
        said = [f"no column {clipped(', '.join(missing), 120)}"] if missing else []
        said += [f"a column {clipped(', '.join(extra), 120)} it does not write"] if extra else []
        return "rows unlike those of the result its metadata stores (" + " and ".join(said) + ")"
    expected = want.to_pylist()
    if len(stored) != len(expected):
        return f"{len(stored)} rows where the result its metadata stores gives {len(expected)}"
    for i, (got, row) in enumerate(zip(stored, expected, strict=True)):
        for column, value in row.items():
            if not _same(got[column], value):
                return (
                    f"a row unlike the result its metadata stores (row {i}{_row_label(row)}: {column} is "
                    f"{clipped(repr(got[column]), 80)} where the stored result gives {clipped(repr(value), 80)})"
                )
    return None


def _same(a: Any, b: Any) -> bool:
    """Whether two values read from parquet are the same: equal (a float exactly), NaN equal to NaN, lists, maps and
    structs item by item; a boolean never equal to a number."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if (
        isinstance(a, (dict, list, tuple))
        or isinstance(b, (dict, list, tuple))
        or isinstance(a, bool) != isinstance(b, bool)
    ):
        return False
    return bool(a == b)


def _row_label(row: dict) -> str:
    """A row named by its checkpoint (or the reference), column and check, as far as it has them."""
    where = [
        "the reference" if row.get("checkpoint") is None else f"checkpoint {clipped(str(row['checkpoint']), 80)}",
        *(f"{k} {clipped(str(row[k]), 40)}" for k in ("variant", "layer", "check") if row.get(k) is not None),
    ]
    return ", " + ", ".join(where)
