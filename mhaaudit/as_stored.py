"""A results file's rows held to the result its metadata stores: where they differ, in words.

``--out`` writes a run's rows and, in the file's metadata, the result they were written from (``meta.result``,
:mod:`.documents`). A row edited by hand (a verdict and its fraction changed together, which no stored record
contradicts) shows only against the rows that result gives: a series' resume, which writes the rows again from its
stored result (:mod:`.series.stored_rows`), and ``capacity --from``, which reads the rows of a check run
(:func:`stored_rows_unlike`) or those of one checkpoint of a series (:mod:`.capacity.series_file`), refuse such a
file in the same words (:func:`edited`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ._version import __version__
from .documents import RESULT_KEY, result_from_meta
from .errors import InputError, Message, clipped, one_line, with_names
from .tables import StoredSweepResult, records_table, table_rows

__all__ = ["Rows", "edited", "held_rows_unlike", "stored_rows_unlike", "unlike_stored"]

#: The metadata that types a result's rows as its file's writer types them (:func:`~mhaaudit.tables.records_table`)
_TYPING = ("command", "seed_plan")


def edited(file: Message, unlike: str) -> Message:
    """The refusal of ``file`` (its parameter and path, as a message names them) that holds ``unlike`` (rows unlike its
    stored result, or a stored record that contradicts itself), up to what to do instead."""
    return file + f" holds {unlike}: no run writes that (the file was edited or damaged)"


class Rows(Protocol):
    """What gives a results file's rows: a result's records, and its sweep rows (None: it has none)."""

    def records(self) -> list[dict]:
        """The records, a row each."""
        ...

    def sweep_rows(self) -> list[dict] | None:
        """The sweep rows, written after the records."""
        ...


def held_rows_unlike(
    stored: list[dict],
    columns: Sequence[str],
    result: Rows,
    meta: dict,
    names: Callable[[str], str] | None = None,
    numbers: Sequence[int] | None = None,
    series: bool = False,
) -> str | None:
    """Where ``stored``, a results file's rows read as Python values (``columns``: its columns), differ from the rows
    its stored ``result`` gives, in words (the first difference, its row numbered as ``numbers`` gives, one a row,
    else counted from 0); None when they are the same.

    The rows ``result`` gives are those a save writes for it (its records and sweep rows, the messages in them named
    by ``names``), typed as the file's writer types them for ``meta`` (its command and seed plan): every column the
    same, every value equal (a float exactly, as the same writer wrote it; NaN equal to NaN), the rows in order.
    ``series``: the rows are a series' (a row of no checkpoint is then the reference's).
    """
    rows = table_rows(result.records(), result.sweep_rows())
    if names is not None:
        rows = with_names(rows, names)
    try:  # not stamped with the whole result
        want = records_table(rows, {k: meta[k] for k in _TYPING if k in meta})
    except OverflowError as exc:  # a stored integer past its column's 64 bits: no run writes that row
        return f"a stored result whose rows cannot be written ({one_line(exc, 160)})"
    del rows
    missing = [c for c in want.column_names if c not in columns]
    extra = [c for c in columns if c not in want.column_names]
    if missing or extra:
        said = [f"no column {clipped(', '.join(missing), 120)}"] if missing else []
        said += [f"a column {clipped(', '.join(extra), 120)} it does not write"] if extra else []
        return "rows unlike those of the result its metadata stores (" + " and ".join(said) + ")"
    expected = want.to_pylist()
    del want
    if len(stored) != len(expected):
        return f"{len(stored)} rows where the result its metadata stores gives {len(expected)}"
    for i, (got, row) in enumerate(zip(stored, expected, strict=True)):
        for column, value in row.items():
            if not _same(got[column], value):
                shown = i if numbers is None else numbers[i]
                return (
                    f"a row unlike the result its metadata stores (row {shown}{_row_label(row, series)}: {column} is "
                    f"{clipped(repr(got[column]), 80)} where the stored result gives {clipped(repr(value), 80)})"
                )
    return None


def stored_rows_unlike(meta: dict, rows: list[dict], kind: type[StoredSweepResult]) -> str | None:
    """Where ``rows``, all the rows of a results file read whole as Python values, differ from those of the ``kind``
    result its metadata ``meta`` stores (see :func:`held_rows_unlike`), or that result cannot be read back, in words.

    None when they are the same, and when nothing says what they should be: ``meta`` stores no result (a file
    written before results were stored), or another release wrote the file (its rows may be other than those this
    release writes for the same result). The stored result holds its messages as the file's writer named them, as
    its rows do: it is compared unnamed. Its rows are counted from 1, as ``capacity --from`` counts them.
    """
    columns, numbers = list(rows[0]) if rows else [], range(1, len(rows) + 1)
    read = lambda: result_from_meta(kind, meta, "its metadata")  # noqa: E731
    return unlike_stored(meta, lambda: held_rows_unlike(rows, columns, read(), meta, numbers=numbers))


def unlike_stored(meta: dict, compare: Callable[[], str | None]) -> str | None:
    """What ``compare`` finds unlike the result a results file's metadata ``meta`` stores (it reads that result back
    and compares the file's rows with it), or that the result cannot be read back, in words; None when nothing says
    what the rows should be: ``meta`` stores no result, or another release wrote the file."""
    if not isinstance(meta.get(RESULT_KEY), dict) or meta.get("version") != __version__:
        return None
    try:  # a result edited so that it reads back as no result, or as one whose rows cannot be made, is no run's
        return compare()
    except (InputError, TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        return f"a stored result that cannot be read back ({one_line(exc, 160)})"


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


def _row_label(row: dict, series: bool) -> str:
    """A row named by its checkpoint (or the reference, in a ``series``), column and check, as far as it has them."""
    where = (
        []
        if not series  # a single run's rows: of no checkpoint
        else ["the reference" if row["checkpoint"] is None else f"checkpoint {clipped(str(row['checkpoint']), 80)}"]
    )
    where += [f"{k} {clipped(str(row[k]), 40)}" for k in ("variant", "layer", "check") if row.get(k) is not None]
    return ", " + ", ".join(where)
