"""The features of a parquet file: its feature columns chosen from the schema alone (``--key``, else its one
list column, else its numeric columns, a pandas index excepted), and the T x d array made of them once read.
:mod:`mhaaudit.feature_files` sizes and reads the file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import InputError, Param


def _pandas_index_columns(schema) -> set[str]:
    """The columns in which pandas stored a DataFrame's index (``__index_level_0__``, or the index's own
    name): row labels, not features."""
    try:
        meta = schema.pandas_metadata or {}
    except (ValueError, TypeError):  # metadata under pandas' key that is not its JSON: no index is known
        return set()
    index = meta.get("index_columns") if isinstance(meta, dict) else None
    return {c for c in index if isinstance(c, str)} if isinstance(index, list) else set()


def feature_columns(path: Path, schema, key: str | None) -> tuple[list[str], str]:
    """The columns of the parquet file ``path`` (of arrow ``schema``) that hold the features, and their kind
    (``"list"`` or ``"numeric"``): ``key``, else the one list column, else every numeric column but a pandas
    index. Decided from the schema alone, so that only these columns are read (and sized).

    Raises:
        InputError: when two columns have one name, ``key`` names no column, several list columns leave the choice
            open, or no column is numeric or a list.
    """
    import pyarrow as pa

    names = schema.names
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:  # which of them a name means cannot be said
        raise InputError(
            f"{path} names more than one column {', '.join(map(repr, repeated[:10]))}: a column is read by its "
            "name, so each name must be one column's"
        )
    if key is not None:
        if key not in names:
            raise InputError(f"{path}: no column {key!r} (columns: {', '.join(names[:10])})")
        names = [key]
    else:
        index = _pandas_index_columns(schema)
        names = [n for n in names if n not in index]
    kinds = {n: schema.field(n).type for n in names}
    lists = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
    list_cols = [n for n, t in kinds.items() if any(is_kind(t) for is_kind in lists)]
    if len(list_cols) > 1:  # which one holds the features is the user's to say, as among a file's tensors
        shown = ", ".join(repr(n) for n in list_cols[:10]) + (", ..." if len(list_cols) > 10 else "")
        raise InputError(f"{path} has several list columns ({shown}); choose one with " + Param("key"))
    if list_cols:
        return list_cols, "list"
    num = [n for n, t in kinds.items() if pa.types.is_floating(t) or pa.types.is_integer(t)]
    if not num:
        raise InputError(f"{path}: no numeric or list-of-number columns to read as a T x d matrix")
    return num, "numeric"


def feature_matrix(path: Path, table, chosen: list[str], kind: str) -> tuple[np.ndarray, str]:
    """The T x d array of the ``chosen`` columns of ``table`` (read from the parquet file ``path``, of ``kind``
    as :func:`feature_columns` says), and what was read in words.

    Raises:
        InputError: when the columns hold nulls, vectors of different lengths or of no numbers, or integers beyond
            2^53 beside floats (float64 cannot hold them exactly).
    """
    import pyarrow as pa

    if kind == "list":
        col = chosen[0]
        value_type = table.schema.field(col).type.value_type
        # floating vectors keep their dtype (the rank tolerance depends on it), as do integers and booleans (as_matrix)
        exact = pa.types.is_floating(value_type) or pa.types.is_integer(value_type) or pa.types.is_boolean(value_type)
        dtype = value_type.to_pandas_dtype() if exact else np.float64
        column = table.column(col)
        if column.null_count:
            raise InputError(f"{path}: column {col!r} has missing vectors (nulls)")
        del table
        arr = _list_column_matrix(column, dtype, path, col)
        return arr, f"column {col!r}"
    num = chosen
    missing = [n for n in num if table.column(n).null_count]
    if missing:  # read as NaN, they would be called non-finite values
        raise InputError(f"{path}: column {missing[0]!r} has missing values (nulls)")
    cols = [table.column(n).to_numpy(zero_copy_only=False) for n in num]
    if np.result_type(*cols).kind == "f":  # 64-bit integers stacked with floats become float64: exact only to 2^53
        for name, col in zip(num, cols, strict=True):
            if col.dtype.kind in "iu" and col.dtype.itemsize == 8 and col.size and _beyond_2_53(col):
                raise InputError(
                    f"{path}: column {name!r} ({col.dtype}) holds integers beyond 2^53, which the float64 its "
                    "columns are read as cannot represent exactly; rescale them or give floating features"
                )
    arr = np.stack(cols, axis=1)
    shown = ", ".join(num) if len(num) <= 8 else f"{', '.join(num[:3])}, ..., {', '.join(num[-2:])}"
    return arr, f"{len(num)} numeric columns: {shown}"


def _beyond_2_53(col: np.ndarray) -> bool:
    """Whether the 64-bit integer column ``col`` holds a value of magnitude above 2^53."""
    if col.dtype.kind == "u":
        return bool(col.max() > np.uint64(2**53))
    return bool(col.max() > 2**53 or col.min() < -(2**53))


def _list_column_matrix(column, dtype, path: Path, col: str) -> np.ndarray:
    """A list column of equal-length numeric vectors as one T x d array of ``dtype``, filled a
    record batch at a time from Arrow's flat values (no Python list of the rows, no float64 copy
    of the whole set).

    Raises:
        InputError: when the vectors differ in length, are not numeric, or hold missing values.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    T = len(column)
    lengths = pc.list_value_length(column) if T else pa.array([], pa.int32())
    lo, hi = (pc.min(lengths).as_py(), pc.max(lengths).as_py()) if T else (0, 0)
    if lo != hi:
        raise InputError(f"{path}: column {col!r} holds vectors of different lengths")
    vt = column.type.value_type
    if not (pa.types.is_floating(vt) or pa.types.is_integer(vt) or pa.types.is_boolean(vt)):
        raise InputError(f"{path}: column {col!r} does not hold numeric vectors")
    d = int(lo or 0)
    out = np.empty((T, d), dtype=dtype)
    row = 0
    for chunk in column.chunks:
        n = len(chunk)
        if not n:
            continue
        values = chunk.flatten()  # the chunk's vectors, end to end (its offset applied)
        if values.null_count:
            raise InputError(f"{path}: column {col!r} has missing values inside its vectors")
        out[row : row + n] = values.to_numpy(zero_copy_only=False).reshape(n, d)
        row += n
    return out
