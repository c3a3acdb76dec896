"""Results as tables: the columns of every command's records (their types and meanings, listed
in ``columns.json``, data shipped with the package), the typed Arrow table they make, and
:class:`ResultTable`, the mixin that gives a result object that table (``to_arrow()``,
``to_pandas()``) and shows it as the CLI prints it: ``print(result)`` as text, a notebook with
colours; ``repr(result)`` is one short line (:class:`Report`).

The same table is what ``--out FILE.parquet`` writes and ``--format parquet`` prints; its schema
metadata (key ``mhaaudit``) carries the run's provenance, the ``meta`` of the JSON document.
Nested evidence is nested data, not text: ``witness`` and ``witness_singular_values`` are list
columns, ``rank_histogram`` a map from rank to count, memorize's ``saturation`` a struct.
Integer and boolean columns may hold nulls (a value that does not apply to a row); the pandas
metadata written with the table makes pandas read them as its nullable ``Int64`` and
``boolean`` types, so integers stay integers. pyarrow, pandas, polars and duckdb read the file
as it is.

Nothing here computes a result: the columns are those the result objects' ``records()`` give.

Each command's outputs also carry the whole result object, field by field, in the meta's
``result`` (:func:`encode_result`): :class:`StoredResult` gives ``from_json`` / ``from_parquet``,
which read it back (:func:`decode_result`, driven by the fields' type hints) equal to the object
written, so a saved run can be rendered again, byte for byte, without running it.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import enum
import io as _io
import json
import math
import os
import shutil
import sys
import types
import typing
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, fields
from importlib import resources
from typing import Any, ClassVar

from rich.table import Table

from .console import TextConsole
from .errors import InputError

METADATA_KEY = b"mhaaudit"  # schema metadata of every results file: the run's meta, as JSON


@dataclass(frozen=True)
class Column:
    """One column of a results table: its name, its Arrow type (in words) and what it holds."""

    name: str
    type: str  # int64 | float64 | string | bool | list<int64> | list<float64> | map<int64, int64> | saturation
    meaning: str


def _load_columns() -> dict[str, tuple[Column, ...]]:
    """The columns of every table, as ``columns.json`` (data shipped with the package) lists them."""
    text = resources.files(__package__).joinpath("columns.json").read_text(encoding="utf-8")
    return {table: tuple(Column(**c) for c in cols) for table, cols in json.loads(text).items()}


_SCHEMA = _load_columns()
#: Where a row of ``check`` and ``capacity`` was read: the model, the column, the layer.
_WHERE = _SCHEMA["where"]
#: Which checkpoint of a series a row of ``check --checkpoints`` belongs to (first in its records).
SERIES_COLUMNS = _SCHEMA["series"]
#: A Monte-Carlo or exact test at one size k (``kruskal``; ``check`` adds model, variant, layer),
#: and the sweep rows (``check = "sweep"``: k, fraction, ci_low, ci_high).
TEST_COLUMNS = _SCHEMA["test"]
#: A capacity column's row at h heads (after model, variant, layer).
CAPACITY_COLUMNS = _WHERE + _SCHEMA["capacity"]
#: The fields of memorize's ``saturation`` struct.
SATURATION_FIELDS = _SCHEMA["saturation"]
#: A memorize run's row; the ``--out`` file of memorize (the grid's own results, for resuming)
#: stores saturation flat, in the last columns (``config_key``, ``sat_*``).
MEMORIZE_COLUMNS = _SCHEMA["memorize"]

#: The columns of each command's table, in the order a record gives them.
COLUMNS: dict[str, tuple[Column, ...]] = {
    "check": SERIES_COLUMNS + _WHERE + TEST_COLUMNS,
    "kruskal": TEST_COLUMNS,
    "capacity": CAPACITY_COLUMNS,
    "memorize": MEMORIZE_COLUMNS,
}


def arrow_type(spec: str):
    """The pyarrow type a :class:`Column` names.

    Raises:
        KeyError: when ``spec`` names no known column type.
    """
    import pyarrow as pa

    simple = {
        "int64": pa.int64(),
        "float64": pa.float64(),
        "string": pa.string(),
        "bool": pa.bool_(),
        "list<int64>": pa.list_(pa.int64()),
        "list<float64>": pa.list_(pa.float64()),
        "map<int64, int64>": pa.map_(pa.int64(), pa.int64()),
    }
    if spec in simple:
        return simple[spec]
    if spec == "saturation":
        return pa.struct([pa.field(c.name, arrow_type(c.type)) for c in SATURATION_FIELDS])
    raise KeyError(f"no Arrow type for column type {spec!r}")


# --------------------------------------------------------------------------- records -> table


def _as_map(value):
    """A histogram {rank: count} (keys may be strings, as in JSON) as Arrow map entries."""
    if value is None:
        return None
    if isinstance(value, str):  # a JSON object, as older files stored it
        value = json.loads(value)
    return [(int(k), int(v)) for k, v in sorted(value.items(), key=lambda kv: int(kv[0]))]


def _column_array(name: str, values: list, spec: str | None):
    import pyarrow as pa

    if spec is not None:
        if spec.startswith("map<"):
            values = [_as_map(v) for v in values]
        elif spec.startswith("list<") or spec == "saturation":  # nested values older files stored as JSON text
            values = [json.loads(v) if isinstance(v, str) else v for v in values]
        return pa.array(values, type=arrow_type(spec))
    try:  # a column no schema names: as pyarrow infers it, else as JSON text
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([None if v is None else json.dumps(v, default=str) for v in values], type=pa.string())


def _pandas_metadata(schema) -> bytes:
    """pandas metadata that makes integer and boolean columns nullable ``Int64`` / ``boolean`` in pandas."""
    import pyarrow as pa

    cols = []
    for f in schema:
        if pa.types.is_integer(f.type):
            cols.append(
                {"name": f.name, "field_name": f.name, "pandas_type": "int64", "numpy_type": "Int64", "metadata": None}
            )
        elif pa.types.is_boolean(f.type):
            cols.append(
                {"name": f.name, "field_name": f.name, "pandas_type": "bool", "numpy_type": "boolean", "metadata": None}
            )
    return json.dumps({"index_columns": [], "column_indexes": [], "columns": cols}).encode()


def records_table(records: list[dict], metadata: dict):
    """The typed pyarrow table of ``records`` (rows of one command), stamped with ``metadata``.

    Columns come in the order the records first give them, typed as :data:`COLUMNS` says for
    ``metadata["command"]``; a column no schema names is typed as pyarrow infers it. A value
    missing from a row is null.
    """
    import pyarrow as pa

    known = {c.name: c.type for c in COLUMNS.get(str(metadata.get("command")), ())}
    keys: list[str] = list(dict.fromkeys(k for r in records for k in r))
    arrays = [_column_array(k, [r.get(k) for r in records], known.get(k)) for k in keys]
    table = pa.table(dict(zip(keys, arrays, strict=False))) if keys else pa.table({})
    meta = {b"pandas": _pandas_metadata(table.schema), METADATA_KEY: json.dumps(metadata, default=str).encode()}
    return table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})


def table_rows(records: list[dict], sweep: list[dict] | None = None) -> list[dict]:
    """The rows of a results table: the records, then any sweep rows, tagged ``check = "sweep"``."""
    return records if sweep is None else records + [{"check": "sweep", **r} for r in sweep]


def to_pandas(table):
    """``table`` as a pandas DataFrame: integers as ``Int64``, booleans as ``boolean``, maps as dicts."""
    try:
        return table.to_pandas(maps_as_pydicts="strict")
    except TypeError:  # pragma: no cover - pyarrow before 13
        return table.to_pandas()


def schema_markdown(command: str | None = None) -> str:
    """The output schema's table (``docs/reference/schema.md``): one row per column (of one command, or of
    all; saturation's fields too)."""
    rows = ["| column | type | commands | meaning |", "|---|---|---|---|"]
    seen: dict[tuple[str, str, str], list[str]] = {}
    for cmd, cols in COLUMNS.items():
        if command is None or cmd == command:
            for c in cols:
                seen.setdefault((c.name, c.type, c.meaning), []).append(cmd)
                if c.type == "saturation":
                    for f in SATURATION_FIELDS:
                        seen.setdefault((f"{c.name}.{f.name}", f.type, f.meaning), []).append(cmd)
    for (name, typ, meaning), cmds in seen.items():
        shown = "struct" if typ == "saturation" else typ
        rows.append(f"| `{name}` | {shown} | {', '.join(cmds)} | {meaning.replace('|', chr(92) + '|')} |")
    return "\n".join(rows)


# --------------------------------------------------------------------------- result documents

#: The key of a results file's meta (JSON ``meta``, parquet schema metadata) that holds the whole
#: result object, field by field, so that ``from_json`` / ``from_parquet`` give it back exactly.
RESULT_KEY = "result"
_NONFINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
# Within :func:`null_as_nonfinite`, a null where a float is due reads as NaN (see there).
_NULL_FLOAT: contextvars.ContextVar[bool] = contextvars.ContextVar("null_float", default=False)
#: The metadata of a field that a document (and a ``meta``) leaves out while it is None; it reads
#: back as None, its default.
OMITTED_WHEN_NONE = {"omit_none": True}
#: The metadata of a field that a document stores as an empty object ``{}`` while it is None (a
#: record that a run may lack, stored as its fields when present); ``{}`` reads back as None.
EMPTY_WHEN_NONE = {"empty_none": True}


def _document_fields(obj) -> list:

    return [f for f in fields(obj) if f.metadata.get("document", True)]


class Stored:
    """A record that a result document stores as its :meth:`as_dict` (the form the outputs write),
    as JSON data (:meth:`document`); its class reads that back (``from_document``)."""

    def as_dict(self) -> dict:
        """The record as the outputs write it (each record its own)."""
        raise NotImplementedError

    def document(self) -> dict:
        """The record in a result document: :meth:`as_dict` as JSON data."""
        return encode_result(self.as_dict())


def encode_result(value):
    """``value`` (a result dataclass, or what its fields hold) as JSON data, losslessly.

    Dataclasses become objects of their fields (a field declared with ``metadata={"document":
    False}``, such as the feature tensors, is left out, and one declared with
    :data:`OMITTED_WHEN_NONE` while it is None; one declared with :data:`EMPTY_WHEN_NONE` is ``{}``
    while it is None), enums their values, tuples lists, map
    keys strings, and non-finite floats the strings ``"nan"``, ``"inf"``, ``"-inf"`` (strict
    JSON has no such numbers). :func:`decode_result` reverses it from the fields' type hints.
    """

    if hasattr(value, "document") and hasattr(type(value), "from_document"):  # a value that says how it is stored
        return value.document()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _encode_field(f, getattr(value, f.name))
            for f in _document_fields(value)
            if not (f.metadata.get("omit_none") and getattr(value, f.name) is None)
        }
    if isinstance(value, enum.Enum):  # before str and int: an enum may be either
        return value.value
    if isinstance(value, dict):
        return {str(k): encode_result(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_result(v) for v in value]
    return _encode_scalar(value)


def _encode_field(f: dataclasses.Field, value):
    """The field ``f`` holding ``value`` as JSON data: ``{}`` for None under :data:`EMPTY_WHEN_NONE`."""
    if value is None and f.metadata.get("empty_none"):
        return {}
    return encode_result(value)


def _encode_scalar(value):
    """A number, string, boolean, None, path, or numpy/torch scalar as JSON data.

    Raises:
        TypeError: when ``value`` is none of these.
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _encode_float(float(value))
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # a numpy or torch scalar
        return encode_result(value.item())
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"cannot store a {type(value).__name__} in a result document")


def _encode_float(value: float) -> float | str:
    """A float as JSON data: itself when finite, else ``"nan"``, ``"inf"`` or ``"-inf"``."""
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def decode_result(tp, data):
    """The value of type ``tp`` that :func:`encode_result` wrote as ``data``.

    ``tp`` is a type hint: a dataclass (read from its fields' hints), ``X | None``, ``tuple[X, ...]``,
    ``list[X]``, ``dict[K, V]``, an enum, ``int``, ``float``, ``str``, ``bool`` or ``Any``. Data
    that does not fit the hint is refused with a ``ValueError`` naming where.
    """
    return _decode(tp, data, "result")


def _decode(tp, data, where: str):
    """The value of hint ``tp`` in ``data`` (at ``where``, for messages): dispatched to the
    reader of that kind of hint.

    Raises:
        TypeError: when no reader reads a ``tp`` (a bug in the result's type hints).
    """
    if tp is typing.Any or tp is object:
        return data
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _decode_union(tp, data, where)
    if isinstance(tp, type):
        if hasattr(tp, "from_document"):
            return tp.from_document(data)
        if dataclasses.is_dataclass(tp):
            return _decode_dataclass(tp, data, where)
        if issubclass(tp, enum.Enum):
            return tp(data)
        if tp in _SCALAR_READERS:
            return _SCALAR_READERS[tp](data, where)
    reader = _CONTAINER_READERS.get(origin or tp)
    if reader is None:
        raise TypeError(f"{where}: no rule to read a {tp}")
    return reader(typing.get_args(tp), data, where)


def _decode_union(tp, data, where: str):
    """``X | Y | None``: None when allowed, else the first option ``data`` fits.

    Raises:
        ValueError: when ``data`` fits none of the options, with each option's reason.
    """
    args = typing.get_args(tp)
    if data is None and type(None) in args:
        return None
    errors = []
    for option in (a for a in args if a is not type(None)):
        try:
            return _decode(option, data, where)
        except (TypeError, ValueError, KeyError) as exc:
            errors.append(str(exc))
    raise ValueError(f"{where}: {data!r} fits none of {tp}: {'; '.join(errors)}")


def decode_fields(tp, data, where: str):
    """The dataclass ``tp`` from the object of its stored fields, read field by field from their
    type hints (what a ``from_document`` that stores its fields under other keys reads them with)."""
    return _decode_dataclass(tp, data, where)


def _decode_dataclass(tp, data, where: str):
    """A dataclass from the object of its stored fields: each read from its type hint; a missing
    required field or an unknown one is refused.

    Raises:
        ValueError: when ``data`` is not an object, lacks a required field or has a field ``tp`` does not.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object for {tp.__name__}, got {type(data).__name__}")
    data = _renamed(tp, data, where)
    hints = typing.get_type_hints(tp)
    kept = [f for f in _document_fields(tp) if f.init]
    required = [f.name for f in kept if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [name for name in required if name not in data]
    if missing:
        raise ValueError(f"{where}: {tp.__name__} lacks {', '.join(missing)}")
    unknown = sorted(set(data) - {f.name for f in kept})
    if unknown:
        raise ValueError(f"{where}: {tp.__name__} has no field {', '.join(unknown)}")
    values = {
        f.name: None
        if f.metadata.get("empty_none") and data[f.name] == {}
        else _decode(hints[f.name], data[f.name], f"{where}.{f.name}")
        for f in kept
        if f.name in data
    }
    return tp(**values)


def _renamed(tp, data: dict, where: str) -> dict:
    """``data`` with the fields a document written by an older version stored under an old name
    (the class's ``RENAMED_FIELDS``: old name -> name) under their names.

    Raises:
        ValueError: when ``data`` holds a field under both its old name and its name.
    """
    renamed = getattr(tp, "RENAMED_FIELDS", {})
    both = [old for old, new in renamed.items() if old in data and new in data]
    if both:
        raise ValueError(f"{where}: {tp.__name__} holds {', '.join(both)} and its new name both")
    return {renamed.get(k, k): v for k, v in data.items()}


def _decode_tuple(args: tuple, data, where: str) -> tuple:
    """``tuple[X, ...]`` or ``tuple[X, Y]`` from a list.

    Raises:
        ValueError: when ``data`` is not a list, or not as long as a fixed-length tuple.
    """
    if not isinstance(data, list):
        raise ValueError(f"{where}: expected a list, got {type(data).__name__}")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_decode(args[0], v, f"{where}[]") for v in data)
    if not args:
        return tuple(data)
    if len(args) != len(data):
        raise ValueError(f"{where}: expected {len(args)} values, got {len(data)}")
    return tuple(_decode(a, v, f"{where}[]") for a, v in zip(args, data, strict=True))


def _decode_list(args: tuple, data, where: str) -> list:
    """``list[X]`` from a list.

    Raises:
        ValueError: when ``data`` is not a list.
    """
    if not isinstance(data, list):
        raise ValueError(f"{where}: expected a list, got {type(data).__name__}")
    return [_decode(args[0], v, f"{where}[]") for v in data] if args else list(data)


def _decode_dict(args: tuple, data, where: str) -> dict:
    """``dict[K, V]`` from an object (its keys strings, as JSON writes them).

    Raises:
        ValueError: when ``data`` is not an object.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
    kt, vt = args if args else (str, typing.Any)
    return {_decode_key(kt, k, where): _decode(vt, v, f"{where}.{k}") for k, v in data.items()}


def _decode_bool(data, where: str) -> bool:
    if not isinstance(data, bool):
        raise ValueError(f"{where}: expected true or false, got {data!r}")
    return data


def _decode_int(data, where: str) -> int:
    if isinstance(data, bool) or not isinstance(data, int):
        raise ValueError(f"{where}: expected an integer, got {data!r}")
    return data


@contextlib.contextmanager
def null_as_nonfinite():
    """Within it, :func:`decode_result` reads a null where a float (not ``float | None``) is due as NaN:
    for a document printed as strict JSON by ``render.print_json``, which writes each non-finite
    number as null (``memorize --format json``), rather than encoded by :func:`encode_result`."""
    token = _NULL_FLOAT.set(True)
    try:
        yield
    finally:
        _NULL_FLOAT.reset(token)


def _decode_float(data, where: str) -> float:
    if isinstance(data, str) and data in _NONFINITE:
        return _NONFINITE[data]
    if data is None and _NULL_FLOAT.get():
        return math.nan
    if isinstance(data, bool) or not isinstance(data, (int, float)):
        raise ValueError(f"{where}: expected a number, got {data!r}")
    return float(data)


def _decode_str(data, where: str) -> str:
    if not isinstance(data, str):
        raise ValueError(f"{where}: expected a string, got {data!r}")
    return data


#: The reader of each scalar hint, and of each container (by its origin: ``list[int]`` -> list).
_SCALAR_READERS: dict[type, typing.Callable] = {
    bool: _decode_bool,
    int: _decode_int,
    float: _decode_float,
    str: _decode_str,
}
_CONTAINER_READERS: dict[object, typing.Callable] = {tuple: _decode_tuple, list: _decode_list, dict: _decode_dict}


def _decode_key(tp, key: str, where: str):
    """A map key, which JSON writes as a string, as ``tp`` (str, int or float).

    Raises:
        ValueError: when ``key`` is not a ``tp``.
    """
    if tp is str or tp is object:
        return key
    try:
        return tp(key) if tp in (int, float) else _decode(tp, key, f"{where} key")
    except ValueError as exc:
        raise ValueError(f"{where}: the key {key!r} is not a {tp.__name__}") from exc


def result_from_meta(cls, meta: dict, source: str):
    """The ``cls`` result stored under :data:`RESULT_KEY` in a results file's ``meta``.

    Raises:
        InputError: when ``meta`` holds no result, one of another command, or one that cannot be read back as a
            ``cls``; ``source`` begins the message.
    """
    if not isinstance(meta, dict) or RESULT_KEY not in meta:
        raise InputError(
            f"{source}: holds no {cls.__name__} (its meta has no {RESULT_KEY!r}; it was written by "
            "another command or an older version)"
        )
    commands = cls.COMMANDS or (cls.COMMAND,)
    if meta.get("command") not in commands:
        raise InputError(
            f"{source}: holds the results of {meta.get('command')!r}, not of {' or '.join(map(repr, commands))}"
        )
    try:
        return decode_result(cls, meta[RESULT_KEY])
    except (TypeError, ValueError, KeyError) as exc:
        raise InputError(f"{source}: its {cls.__name__} cannot be read back: {exc}") from exc


# --------------------------------------------------------------------------- the mixins


# The width of reports sent to a file or a pipe when ``COLUMNS`` does not say: wide enough that
# the tables need not wrap their cells, narrow enough to read in an editor or a pager.
REDIRECTED_WIDTH = 100


def text_width() -> int:
    """The width a report is laid out in as text, as the commands lay out theirs: ``COLUMNS`` when
    set, else the terminal's when stdout is one, else :data:`REDIRECTED_WIDTH`."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stdout
        tty = False
    if not tty:
        return REDIRECTED_WIDTH
    try:  # the terminal the data goes to (while a command runs, descriptor 1 is stderr's: mhaaudit.stdio)
        return os.get_terminal_size(sys.stdout.fileno()).columns or REDIRECTED_WIDTH
    except (AttributeError, ValueError, OSError):
        return shutil.get_terminal_size((REDIRECTED_WIDTH, 24)).columns


class Report:
    """How a result shows itself: ``print(result)`` is the report its command prints (plain text),
    ``repr(result)`` one short line, and a notebook the same report with its colours.

    A class using it names the function that lays it out, ``REPORT`` (its rich tables and lines, as
    the CLI prints them: ``renderables()``), and defines ``summary_line()`` (what ``repr`` says after
    the class name).
    """

    #: The function that lays a result of the class out: its rich tables and lines, in order.
    REPORT: ClassVar[Callable[[Any], list]]

    def renderables(self) -> list:
        """The rich tables and lines (markup strings) of the report, in order (the class's ``REPORT``)."""
        return type(self).REPORT(self)

    def summary_line(self) -> str:  # pragma: no cover - defined by each result
        """One short line on the result, for ``repr``."""
        raise NotImplementedError

    def __rich_console__(self, console, options):
        for item in self.renderables():
            yield console.render_str(item, highlight=False) if isinstance(item, str) else item

    def __str__(self) -> str:
        buf = _io.StringIO()
        con = TextConsole(file=buf, width=text_width(), color_system=None, force_terminal=False, force_jupyter=False)
        for r in self.renderables():
            con.print(r, highlight=False)
        return buf.getvalue()

    def __repr__(self) -> str:
        try:
            summary = self.summary_line()
        except Exception as exc:  # noqa: BLE001 - a repr must not raise
            summary = f"(summary unavailable: {type(exc).__name__})"
        return f"<{type(self).__name__} {summary}>"

    def _blocks(self, width: int = 120) -> list:
        """The report as recorded consoles, one per run of tables (``"table"``) or of prose
        (``"prose"``). A table's title is printed as one line above it (rich wraps a title to
        its table's width, which breaks long titles over narrow tables); prose lines are never
        broken (``soft_wrap``): a notebook wraps them at its own width, between words."""
        blocks: list = []
        for r in self.renderables():
            kind = "prose" if isinstance(r, str) else "table"
            if not blocks or blocks[-1][0] != kind:
                blocks.append(
                    (
                        kind,
                        TextConsole(
                            record=True,
                            file=_io.StringIO(),
                            width=width,
                            color_system="truecolor",
                            force_jupyter=False,
                            force_terminal=True,
                        ),
                    )
                )
            con = blocks[-1][1]
            if isinstance(r, str):
                con.print(r, highlight=False, soft_wrap=True)
            elif isinstance(r, Table) and r.title:
                untitled = copy.copy(r)
                untitled.title = None
                title = (
                    r.title
                    if not isinstance(r.title, str)
                    else con.render_str(r.title, style=r.title_style or "table.title", highlight=False)
                )
                con.print(title, soft_wrap=True)
                con.print(untitled, highlight=False)
            else:
                con.print(r, highlight=False)
        return blocks

    def _repr_html_(self) -> str:
        return self._repr_mimebundle_()["text/html"]

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs) -> dict:
        blocks = self._blocks()
        text = "".join(con.export_text(clear=False) for _, con in blocks)
        html = "".join(
            con.export_html(inline_styles=True, code_format=_HTML if kind == "table" else _PROSE)
            for kind, con in blocks
        )
        return {"text/plain": text, "text/html": html}


def verdict_tally(records: list[dict]) -> str:
    """``8 holds, 4 fails`` over the records' verdicts (in that order: holds, fails, then any other)."""
    c = Counter(r["verdict"] for r in records if r.get("verdict"))
    order = ["holds", "fails", *sorted(v for v in c if v not in ("holds", "fails"))]
    return ", ".join(f"{c[v]} {v}" for v in order if c.get(v))


class ResultTable(Report):
    """What every result object gives: its table, its report as text and its notebook view.

    A class using it defines ``table_records()`` (the rows), ``table_meta()`` (the provenance
    stamp, with ``command``), ``REPORT`` (the function that lays out the rich tables and lines the
    CLI prints) and ``summary_line()`` (see :class:`Report`). Result dataclasses are declared with ``repr=False``
    so that ``repr`` is this one line, not every field (tensors included).
    """

    def table_records(self) -> list[dict]:  # pragma: no cover - defined by each result
        """The rows of the result's table, one dict per row (the columns of :data:`COLUMNS`)."""
        raise NotImplementedError

    def table_meta(self) -> dict:  # pragma: no cover - defined by each result
        """The provenance stamp of the table, with ``command``."""
        raise NotImplementedError

    def to_arrow(self):
        """The result as a pyarrow table: the rows ``--out`` writes, with the run's meta as schema metadata."""
        return records_table(self.table_records(), self.table_meta())

    def to_pandas(self):
        """The result as a pandas DataFrame (nullable integer and boolean columns)."""
        return to_pandas(self.to_arrow())


def read_json_document(source) -> tuple[object, str]:
    """The JSON value in ``source`` (the JSON text, or a path to a file holding it), and where it
    was read from, for messages. Unreadable or invalid input is an :class:`~mhaaudit.errors.InputError`.

    Raises:
        InputError: when the file cannot be read, or the text is not JSON.
    """
    if isinstance(source, str) and source.lstrip().startswith("{"):
        text, where = source, "the JSON document"
    else:
        where = os.fspath(source)
        try:
            with open(where, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise InputError(f"{where}: cannot read it ({exc.strerror or exc})") from exc
    try:
        return json.loads(text), where
    except ValueError as exc:
        raise InputError(f"{where}: not a JSON document ({exc})") from exc


class StoredResult(ResultTable):
    """A command's result that its output files give back: ``from_json`` / ``from_parquet`` read
    the object ``--format json`` printed or ``--out`` wrote (the meta's ``result``) and return it
    equal, field by field, to the one written (the reduced feature tensors, which those files do
    not hold, excepted). A file of another command, or without the ``result``, is refused with an
    :class:`~mhaaudit.errors.InputError`."""

    COMMAND: ClassVar[str] = ""
    COMMANDS: ClassVar[tuple[str, ...]] = ()  # a result several commands write: their names (else COMMAND)

    def result_document(self) -> dict:
        """The whole result as JSON data (the meta's ``result``): see :func:`encode_result`."""
        return encode_result(self)

    @classmethod
    def from_json(cls, source):
        """The result in a ``--format json`` document: a parsed dict, the JSON text or a path to it.

        Raises:
            InputError: when ``source`` cannot be read, is not JSON or not a results document, or holds no
                result of this class (see :func:`result_from_meta`).
        """
        doc, where = (source, "the JSON document") if isinstance(source, dict) else read_json_document(source)
        if not isinstance(doc, dict):
            raise InputError(f"{where}: not a results document (no meta)")
        return result_from_meta(cls, doc.get("meta"), where)

    @classmethod
    def from_parquet(cls, path):
        """The result a ``--out FILE.parquet`` (or ``--format parquet``) file holds in its metadata.

        Raises:
            InputError: when ``path`` is not a readable parquet file, its mhaaudit metadata is not JSON, or it
                holds no result of this class (see :func:`result_from_meta`).
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        where = os.fspath(path)
        try:
            meta = pq.read_schema(where).metadata or {}
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"{where}: not a readable parquet file ({exc})") from exc
        raw = meta.get(METADATA_KEY)
        try:
            doc = json.loads(raw) if raw else None
        except ValueError as exc:
            raise InputError(f"{where}: its mhaaudit metadata is not JSON ({exc})") from exc
        return result_from_meta(cls, doc, where)


class StoredSweepResult(StoredResult):
    """A stored result whose rows are its ``records()`` followed by its ``sweep_rows()`` (tagged
    ``check = "sweep"``, see :func:`table_rows`), stamped with its ``meta()``."""

    def records(self) -> list[dict]:  # pragma: no cover - defined by each result
        """The result's records, one dict per row."""
        raise NotImplementedError

    def sweep_rows(self) -> list[dict] | None:  # pragma: no cover - defined by each result
        """The sweep's rows, or None for a result without a sweep."""
        raise NotImplementedError

    def meta(self) -> dict:  # pragma: no cover - defined by each result
        """The run's meta (provenance stamp), with ``command``."""
        raise NotImplementedError

    def table_records(self) -> list[dict]:
        """The records, then the sweep rows tagged ``check = "sweep"``."""
        return table_rows(self.records(), self.sweep_rows())

    def table_meta(self) -> dict:
        """The result's ``meta()``."""
        return self.meta()


_HTML = (
    '<pre style="white-space: pre; overflow-x: auto; margin: 0; line-height: normal; '
    "font-family: Menlo, 'DejaVu Sans Mono', consolas, 'Courier New', monospace\">{code}</pre>"
)
_PROSE = (
    '<pre style="white-space: pre-wrap; overflow-wrap: break-word; margin: 0; line-height: normal; '
    "font-family: Menlo, 'DejaVu Sans Mono', consolas, 'Courier New', monospace\">{code}</pre>"
)
