"""A series' results file held to itself: the rows it holds against the rows its stored result gives.

A run that resumes reads the stored result from the file's metadata (:meth:`.result.SeriesResult.from_parquet`),
and its next save writes the rows again from that result; ``capacity --from`` reads the rows. A row edited by hand
(a verdict and its fraction changed together, which no stored record contradicts) would be rewritten silently from
the metadata by the resume, and the edit lost: such a file is refused instead (:func:`rows_unlike_result`; the
comparison is :func:`mhaaudit.as_stored.held_rows_unlike`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..as_stored import held_rows_unlike
from ..errors import InputError, Param
from ..files import read_parquet

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
    hint = "move it away or pick another " + Param("out")
    try:  # read whole, as Python values: what its footer declares, decoded, must fit first
        held = read_parquet(path, InputError, Param("out") + f" {os.fspath(path)}", python=True, hint=hint)
        stored, columns = held.to_pylist(), held.column_names
        del held  # the rows are held as Python values alone
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a file that cannot be read is the user's bad input
        raise InputError(
            Param("out") + f" {os.fspath(path)}: cannot read its rows ({' '.join(str(exc).split())[:160]}); " + hint
        ) from None
    return held_rows_unlike(stored, columns, result, result.meta(), names, series=True)
