"""Results as tables: the columns of every command's records (their types and meanings, listed
in ``columns.json``, data shipped with the package), the typed Arrow table they make, and the
mixins that give a result object that table (:class:`ResultTable`: ``to_arrow()``,
``to_pandas()``) and read it back from its files (:class:`StoredResult`).

The same table is what ``--out FILE.parquet`` writes and ``--format parquet`` prints; its schema
metadata (key ``mhaaudit``) carries the run's provenance, the ``meta`` of the JSON document.
Nested evidence is nested data, not text: ``witness`` and ``witness_singular_values`` are list
columns, ``rank_histogram`` a map from rank to count, memorize's ``saturation`` a struct.
Integer and boolean columns may hold nulls (a value that does not apply to a row); the pandas
metadata written with the table makes pandas read them as its nullable ``Int64`` and
``boolean`` types, so integers stay integers. pyarrow, pandas, polars and duckdb read the file
as it is.

Nothing here computes a result: the columns are those the result objects' ``records()`` give.
How a result shows itself (``print``, ``repr``, a notebook) is :mod:`mhaaudit.display`; how it is
stored field by field in the meta's ``result`` and read back is :mod:`mhaaudit.documents`.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from importlib import resources
from typing import ClassVar

from .display import REDIRECTED_WIDTH as REDIRECTED_WIDTH
from .display import Report as Report
from .display import text_width as text_width
from .display import verdict_tally as verdict_tally
from .documents import EMPTY_WHEN_NONE as EMPTY_WHEN_NONE
from .documents import METADATA_KEY as METADATA_KEY
from .documents import OMITTED_WHEN_NONE as OMITTED_WHEN_NONE
from .documents import RESULT_KEY as RESULT_KEY
from .documents import Stored as Stored
from .documents import decode_fields as decode_fields
from .documents import decode_result as decode_result
from .documents import encode_result as encode_result
from .documents import null_as_nonfinite as null_as_nonfinite
from .documents import read_json_document as read_json_document
from .documents import result_from_meta
from .errors import InputError
from .files import arrow_source

# The names above that this module does not use are re-exported: code written against the
# earlier ``mhaaudit.tables`` imports them from here.


@dataclass(frozen=True)
class Column:
    """One column of a results table: its name, its Arrow type (in words) and what it holds."""

    name: str
    type: str  # int64, float64, string, bool, list<int64/float64/string>, map<int64, int64> or saturation
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

#: A swept column's Kruskal-rank estimate (``check = "sweep_estimate"``): ``check --checkpoints --sweep``, ``--seeds``.
ESTIMATE_COLUMNS = _SCHEMA["estimate"]
#: What a several-seed run (``--seeds``, any command) adds to its command's columns: the seeds, the
#: summaries and differences, and the sweep estimates (:mod:`mhaaudit.seeds.records`).
SEEDS_COLUMNS = ESTIMATE_COLUMNS + _SCHEMA["seeds"]

#: A published value beside ours (``reproduce``), then the rows of our Kruskal-rank curve (``check = "sweep"``).
REPRODUCE_COLUMNS = _SCHEMA["reproduce"]

#: The columns of each command's table, in the order a record gives them (``kruskal`` runs no Assumption 2,
#: so its rows have no ``min_margin``).
COLUMNS: dict[str, tuple[Column, ...]] = {
    "check": SERIES_COLUMNS + _WHERE + TEST_COLUMNS + ESTIMATE_COLUMNS,
    "kruskal": tuple(c for c in TEST_COLUMNS if c.name != "min_margin"),
    "capacity": CAPACITY_COLUMNS,
    "memorize": MEMORIZE_COLUMNS,
    "reproduce": REPRODUCE_COLUMNS,
}
#: How the schema's tables (:func:`schema_markdown`) name the columns of a several-seed run.
SEEDS = "several seeds"


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
        "list<string>": pa.list_(pa.string()),
        "map<int64, int64>": pa.map_(pa.int64(), pa.int64()),
    }
    if spec in simple:
        return simple[spec]
    if spec == "saturation":
        return pa.struct([pa.field(c.name, arrow_type(c.type)) for c in SATURATION_FIELDS])
    raise KeyError(f"no Arrow type for column type {spec!r}")


# --------------------------------------------------------------------------- records -> table


def _as_map(value, name: str = "histogram"):
    """A histogram {rank: count} (keys may be strings, as in JSON) as Arrow map entries."""
    if value is None:
        return None
    if isinstance(value, str):  # a JSON object, as older files stored it
        value = json.loads(value)
    return [(int(k), int(_whole(name, v))) for k, v in sorted(value.items(), key=lambda kv: int(kv[0]))]


def whole_number(value) -> bool:
    """Whether ``value`` is an integer (not a bool), or a float that is one (12.0)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _whole(name: str, value):
    """``value`` of a column of whole numbers, as given: a finite float that is no whole number there is a fault
    of the code that made the record, never rounded away (``pyarrow`` and ``int`` would cut it, 12.5 to 12).

    Raises:
        ValueError: when ``value`` is a finite float that is no whole number (a reader that checks a file's rows
            through :func:`records_table` refuses the file for it).
    """
    if isinstance(value, float) and math.isfinite(value) and not whole_number(value):
        raise ValueError(f"the record's {name} column holds {value!r}, which is no whole number")
    return value


def _whole_values(name: str, values: list, spec: str) -> None:
    """:func:`_whole` on each whole number that ``values`` of a column of type ``spec`` hold (a list's items, a
    saturation summary's whole-number fields)."""
    for v in values:
        if v is None:
            continue
        if spec == "int64":
            _whole(name, v)
        elif spec == "list<int64>" and isinstance(v, list | tuple):
            for item in v:
                _whole(name, item)
        elif spec == "saturation" and isinstance(v, dict):
            for f in SATURATION_FIELDS:
                if f.type in ("int64", "list<int64>"):
                    _whole_values(f"{name}.{f.name}", [v.get(f.name)], f.type)


def _column_array(name: str, values: list, spec: str | None):
    import pyarrow as pa

    if spec is not None:
        if spec.startswith("map<"):
            values = [_as_map(v, name) for v in values]
        elif spec.startswith("list<") or spec == "saturation":  # nested values older files stored as JSON text
            values = [json.loads(v) if isinstance(v, str) else v for v in values]
        _whole_values(name, values, spec)
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


def utf8_text(value):
    r"""``value`` with each text in it that is not UTF-8 written so that it is: a name read from disk may hold bytes
    that are not UTF-8 (Python holds them as lone surrogates), which parquet's strings cannot hold, and each such
    byte is written as its escape (``odd\xff``, as a message shows it); lists and dicts item by item."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            try:  # the bytes the name was read from, each that is not UTF-8 as its escape
                return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            except UnicodeEncodeError:  # a surrogate no byte stands for (from JSON's \ud800)
                return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, list):
        return [utf8_text(v) for v in value]
    if isinstance(value, dict):
        return {utf8_text(k): utf8_text(v) for k, v in value.items()}
    return value


def schema_columns(metadata: dict) -> dict[str, str]:
    """The type of each column every file of rows with ``metadata`` has, by name, in order: those :data:`COLUMNS`
    names for ``metadata["command"]``, then, where the metadata holds a ``seed_plan``, :data:`SEEDS_COLUMNS`."""
    seeds = SEEDS_COLUMNS if "seed_plan" in metadata else ()
    return {c.name: c.type for c in (*COLUMNS.get(str(metadata.get("command")), ()), *seeds)}


def records_table(records: list[dict], metadata: dict):
    """The typed pyarrow table of ``records`` (rows of one command), stamped with ``metadata``.

    Every column :data:`COLUMNS` names for ``metadata["command"]`` is there, in its order and typed as it says
    (and, for the records of several seeds, whose metadata holds their ``seed_plan``, every column of
    :data:`SEEDS_COLUMNS` after them), whether or not a record gives it, so that two runs' files have one schema
    and concatenate; then any column no schema names, in the order the records first give them, typed as
    pyarrow infers it. A value missing from a row is null.
    """
    import pyarrow as pa

    known = schema_columns(metadata)
    keys: list[str] = [*known, *(k for k in dict.fromkeys(k for r in records for k in r) if k not in known)]
    arrays = [_column_array(k, [utf8_text(r.get(k)) for r in records], known.get(k)) for k in keys]
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
    all; saturation's fields too; :data:`SEEDS` names the columns a several-seed run adds)."""
    rows = ["| column | type | commands | meaning |", "|---|---|---|---|"]
    seen: dict[tuple[str, str, str], list[str]] = {}
    for cmd, cols in {**COLUMNS, SEEDS: SEEDS_COLUMNS}.items():
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
        """The result as a pyarrow table: the rows ``--out`` writes.

        Returns:
            (pyarrow.Table): The records, with the run's meta as the schema metadata.
        """
        return records_table(self.table_records(), self.table_meta())

    def to_pandas(self):
        """The result as a pandas DataFrame: the rows of :meth:`to_arrow`.

        Returns:
            (pandas.DataFrame): The records, with nullable integer and boolean columns.
        """
        return to_pandas(self.to_arrow())


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
        """Read the result back from a ``--format json`` document.

        Args:
            source (dict | str | os.PathLike): the parsed document, its JSON text, or a path to it.

        Returns:
            (Self): The result, equal field by field to the one written (reduced feature tensors excepted).

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
        """Read the result back from the metadata of a ``--out FILE.parquet`` file.

        Args:
            path (str | os.PathLike): a parquet file written by ``--out`` or ``--format parquet``.

        Returns:
            (Self): The result, equal field by field to the one written (reduced feature tensors excepted).

        Raises:
            InputError: when ``path`` is not a readable parquet file, its mhaaudit metadata is not JSON, or it
                holds no result of this class (see :func:`result_from_meta`).
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        where = os.fspath(path)
        try:
            with arrow_source(where) as source:
                meta = pq.read_schema(source).metadata or {}
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
