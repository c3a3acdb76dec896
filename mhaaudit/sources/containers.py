"""The containers researchers keep data in, read as columns: parquet and Arrow files, .csv and
.tsv files, and folders written by ``datasets``' ``save_to_disk`` (a single ``Dataset`` or a
``DatasetDict``, whose split ``split`` picks). Each is opened as a :class:`Table`: what it is
called in the report, the kind of each column, its number of rows, and the values of one column
in the stored order, read a batch at a time (a saved dataset is memory-mapped, not streamed, so
every row is reachable).

Columns are found or chosen, never guessed silently (:func:`choose_column`): the one the user
named; else a column with a well-known name (``text``, ``content``, ``body``, ... for text;
``image``, ``img``, ... for images) of the right kind; else the only column of the right kind.
Anything else is refused with the columns found and the parameter that chooses one.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..defaults import DEFAULT_SPLIT
from ..errors import DataError, InputError, MhaauditError, Param, one_line
from ..files import arrow_source, folder_files, name_inside, read_json, regular_file, stream_column, utf8_name

__all__ = ["IMAGE_NAMES", "TEXT_NAMES", "Table", "choose_column", "is_saved_dataset", "open_table"]

TEXT_NAMES = ("text", "content", "body", "sentence", "document", "article", "passage")
IMAGE_NAMES = ("image", "img", "images", "picture", "photo", "jpg", "jpeg", "png")
TABLE_SUFFIXES = {".parquet": "parquet", ".arrow": "arrow", ".csv": "csv", ".tsv": "tsv"}

_KINDS = {"text": ("text",), "image": ("image", "bytes")}
_WORDS = {"text": "string", "image": "image"}


class Table:
    """Columns of one container. ``label`` names it for reports (with the split of a
    ``DatasetDict``), ``kinds`` maps each column to ``"text"`` (strings), ``"image"`` (an image
    feature or ``{bytes, path}`` structs), ``"bytes"`` (raw binary) or its type, ``rows`` is the
    number of rows, ``base`` the folder relative image paths are read from."""

    def __init__(
        self,
        label: str,
        kinds: dict[str, str],
        rows: int | None,
        values: Callable[[str], Iterator[Any]],
        base: Path | None = None,
        split: str | None = None,
    ) -> None:
        self.label, self.kinds, self.rows, self._values, self.base, self.split = label, kinds, rows, values, base, split

    def values(self, column: str) -> Iterator[Any]:
        """The values of ``column`` in the stored order, as Python objects (``str``, ``bytes``, dicts for images).

        Raises:
            DataError: naming the file, when it turns out corrupt on the way (a bad page, invalid UTF-8, a
                malformed Arrow batch).
            MhaauditError: an mhaaudit error of the reader, re-raised as it is.
        """
        from pyarrow import ArrowException

        try:
            yield from self._values(column)
        except MhaauditError:
            raise
        except (OSError, ArrowException, UnicodeDecodeError, ValueError, TypeError, KeyError, IndexError) as exc:
            raise DataError(f"reading {self.label} failed: {one_line(exc, 300, first_line=True)}") from None

    def listing(self) -> str:
        """The columns and their kinds for a message, e.g. ``text (text), label (int64)``."""
        return ", ".join(f"{c} ({k})" for c, k in self.kinds.items())


def _arrow_kind(t) -> str:
    import pyarrow as pa

    if pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t):
        return "text"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes"
    if pa.types.is_struct(t) and any(t.field(i).name == "bytes" for i in range(t.num_fields)):
        return "image"
    if pa.types.is_dictionary(t):
        return _arrow_kind(t.value_type)
    return str(t)


def _kinds_of(schema, what: str) -> dict[str, str]:
    """Each column's kind (:func:`_arrow_kind`), by name.

    Raises:
        DataError: when two columns of ``what`` (the file, for the message) have the same name: which one a
            column name means could not be said.
    """
    repeated = sorted(name for name, times in Counter(schema.names).items() if times > 1)  # (a header may be wide)
    if repeated:
        raise DataError(
            f"{what} names more than one column {', '.join(map(repr, repeated))}: a column is read by its name, so "
            "each name must be one column's"
        )
    return {name: _arrow_kind(schema.field(name).type) for name in schema.names}


def _batches_of_table(table, column: str, size: int = 256) -> Iterator[Any]:
    for batch in table.select([column]).to_batches(max_chunksize=size):
        yield from batch.column(0).to_pylist()


def _parquet(path: Path) -> Table:
    import pyarrow.parquet as pq

    try:
        with arrow_source(path) as source:
            meta = pq.ParquetFile(source)
            kinds, rows = _kinds_of(meta.schema_arrow, f"parquet file {path}"), meta.metadata.num_rows
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types; all mean an unreadable file here
        raise DataError(f"cannot read parquet file {path}: {one_line(exc, 300, first_line=True)}") from None

    def values(column: str) -> Iterator[Any]:
        try:  # 256 rows at a time, each batch sized before it is decoded
            yield from stream_column(path, column, DataError, f"parquet file {path}")
        except OSError as exc:
            raise DataError(f"reading parquet file {path} failed: {one_line(exc, 300, first_line=True)}") from None

    return Table(f"parquet file {path}", kinds, rows, values, path.parent)


def _python_map(path: Path):
    """``path`` memory-mapped through Python, for a name pyarrow cannot take (not UTF-8). The map stays
    open as long as the buffers read from it: Arrow's tables point into it."""
    import pyarrow as pa

    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:  # an empty file cannot be mapped; its reader fails as on any empty file
            return pa.BufferReader(b"")
        return pa.BufferReader(pa.py_buffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)))


def _arrow_table(path: Path):
    """An Arrow IPC file (random-access format) or stream (what ``save_to_disk`` writes), memory-mapped.

    Raises:
        DataError: when the file cannot be mapped or read as either format.
    """
    import pyarrow as pa

    try:
        source = pa.memory_map(str(path)) if utf8_name(path) else _python_map(path)
        try:
            return pa.ipc.open_file(source).read_all()
        except pa.ArrowInvalid:
            source.seek(0)
            return pa.ipc.open_stream(source).read_all()
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"cannot read Arrow file {path}: {one_line(exc, 300, first_line=True)}") from None


def _arrow(path: Path) -> Table:
    table = _arrow_table(path)
    return Table(
        f"Arrow file {path}",
        _kinds_of(table.schema, f"Arrow file {path}"),
        table.num_rows,
        lambda column: _batches_of_table(table, column),
        path.parent,
    )


# pyarrow reads a CSV file in blocks, and the header must lie in the first (its default block, 1 MiB,
# reads a wider header as "Empty CSV file"): the block is made large enough for the header, and a
# header longer than this is refused for what it is.
MAX_CSV_HEADER = 64 << 20


# A row (a quoted value may hold line breaks) must lie in one block too: the block grows to this for a longer one.
MAX_CSV_ROW = 256 << 20


def _read_delimited(path: Path, parse, read):
    """The table of the delimited file ``path``, its columns typed as pyarrow infers them, or all as strings when a
    column whose type the first rows suggested holds other values.

    Raises:
        ArrowInvalid: when a row does not lie in one block of ``read`` (the caller reads again with a larger one),
            or the file is no delimited file pyarrow reads; other errors of pyarrow pass through as well.
    """
    import pyarrow as pa
    import pyarrow.csv as pcsv

    def source():  # a fresh reader each time; pyarrow cannot open a name that is not UTF-8
        return str(path) if utf8_name(path) else _python_map(path)

    try:
        return pcsv.read_csv(source(), parse_options=parse, read_options=read)
    except pa.ArrowInvalid as exc:
        if _straddles(exc):  # the block is too small for a row: not a matter of types
            raise
        with pcsv.open_csv(source(), parse_options=parse, read_options=read) as reader:  # the first block only
            names = reader.schema.names
        return pcsv.read_csv(
            source(),
            parse_options=parse,
            read_options=read,
            convert_options=pcsv.ConvertOptions(column_types={n: pa.string() for n in names}),
        )


def _straddles(exc: Exception) -> bool:
    """Whether pyarrow's error says a row does not lie in one block ("straddling object straddles two block
    boundaries"): a larger block reads it."""
    return "straddl" in str(exc)


def _csv_block(path: Path, what: str) -> int:
    """The block size that holds the header line of the delimited file ``path`` (at least 1 MiB).

    Raises:
        DataError: when the header line is longer than :data:`MAX_CSV_HEADER` bytes.
    """
    with open(path, "rb") as fh:
        head = fh.read(MAX_CSV_HEADER + 1)
    end = head.find(b"\n")
    if end < 0 and len(head) > MAX_CSV_HEADER:
        raise DataError(
            f"cannot read {what} file {path}: its first line (the header) is longer than {MAX_CSV_HEADER >> 20} MiB, "
            "the most read as one header"
        )
    line = len(head) if end < 0 else end + 1
    return max(1 << 20, 2 * line)


def _delimited(path: Path, delimiter: str) -> Table:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    what = "TSV" if delimiter == "\t" else "CSV"
    parse = pcsv.ParseOptions(delimiter=delimiter, newlines_in_values=True)
    block = _csv_block(path, what)
    while True:  # a row must lie in one block: a longer one (a book in one quoted value) reads with a larger block
        read = pcsv.ReadOptions(block_size=block)
        try:
            table = _read_delimited(path, parse, read)
            kinds = _kinds_of(table.schema, f"{what} file {path}")
            break
        except pa.ArrowInvalid as exc:
            if not _straddles(exc):
                raise DataError(f"cannot read {what} file {path}: {one_line(exc, 300, first_line=True)}") from None
            if block < MAX_CSV_ROW:
                block = min(4 * block, MAX_CSV_ROW)
                continue
            raise DataError(
                f"cannot read {what} file {path}: a row (a value with its line breaks) is longer than "
                f"{MAX_CSV_ROW >> 20} MiB, the most read whole"
            ) from None
        except (OSError, pa.ArrowException) as exc:
            raise DataError(f"cannot read {what} file {path}: {one_line(exc, 300, first_line=True)}") from None
        except UnicodeDecodeError as exc:  # pyarrow keeps the header's bytes, and decodes a column's name when asked
            raise DataError(
                f"cannot read {what} file {path}: a column name in its header is not UTF-8 (byte {exc.start + 1} of "
                f"the name: {exc.reason}); save it as UTF-8"
            ) from None
    # A delimited file holds text: pyarrow types a column binary when one of its values is not UTF-8. It is text
    # still, each value that is not UTF-8 given as bytes (TableText skips and counts it as such).
    binary = {name for name, kind in kinds.items() if kind == "bytes"}
    kinds.update(dict.fromkeys(binary, "text"))

    def values(column: str) -> Iterator[Any]:
        for value in _batches_of_table(table, column):
            if column in binary and isinstance(value, bytes):
                with contextlib.suppress(UnicodeDecodeError):
                    value = value.decode("utf-8")
            yield value

    return Table(f"{what} file {path}", kinds, table.num_rows, values, path.parent)


def is_saved_dataset(folder: Path) -> bool:
    """True for a folder written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``."""
    return (folder / "dataset_dict.json").is_file() or (
        (folder / "state.json").is_file() and (folder / "dataset_info.json").is_file()
    )


def _check_state(where: Path) -> None:
    """Check, before ``datasets`` reads anything, that a saved ``Dataset``'s ``state.json`` names only
    data files inside its folder ``where`` (the library reads whatever the names resolve to).

    Raises:
        DataError: when ``state.json`` is not a JSON object with a list of ``_data_files``, or a name in it is
            not a file name inside ``where`` (an absolute path, ``..``, a link leading out) or not a regular file.
    """
    state_file = where / "state.json"
    state = read_json(state_file, DataError)
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise DataError(f'{state_file} is malformed: it needs a list of "_data_files"')
    for entry in files:
        real = name_inside(where, entry.get("filename"), DataError, str(state_file))
        regular_file(real, DataError, f"the data file {entry.get('filename')!r} that {state_file} names")


def _saved(folder: Path, split: str) -> Table:
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise DataError(
            f"reading {folder} needs the 'datasets' package: {one_line(exc, 300, first_line=True)}"
        ) from None
    is_dict = (folder / "dataset_dict.json").is_file()
    folder_files(folder, DataError, "dataset folder")  # no link leading out of it, no pipe or device in it
    if is_dict:
        doc = read_json(folder / "dataset_dict.json", DataError)
        raw = doc.get("splits", []) if isinstance(doc, dict) else None
        if not isinstance(raw, list):
            raise DataError(f'{folder / "dataset_dict.json"} is malformed: it needs a list of "splits"')
        splits = [str(s) for s in raw]
        if split not in splits:
            raise DataError(
                f"dataset folder {folder} (a DatasetDict saved with save_to_disk) has no split '{split}'; "
                f"its splits: {', '.join(splits) or 'none'}; choose one with " + Param("split")
            )
        where = name_inside(folder, split, DataError, f"{folder / 'dataset_dict.json'} (split {split!r})")
    else:
        if split != "train":
            raise InputError(
                f"dataset folder {folder} holds a single Dataset saved with save_to_disk, which has no "
                "splits; leave out " + Param("split") + f" (it names a split of a DatasetDict), got '{split}'"
            )
        where = folder
    _check_state(where)
    try:
        ds = datasets.load_from_disk(str(where))
    except Exception as exc:  # noqa: BLE001 - the datasets library raises many types; all are data problems here
        raise DataError(f"cannot read dataset folder {where}: {one_line(exc, 300, first_line=True)}") from None
    kinds: dict[str, str] = {}
    for name, feature in ds.features.items():
        if isinstance(feature, datasets.Image):
            kinds[name] = "image"
        elif isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string"):
            kinds[name] = "text"
        elif isinstance(feature, datasets.Value) and feature.dtype in ("binary", "large_binary"):
            kinds[name] = "bytes"
        else:
            kinds[name] = getattr(feature, "dtype", None) or type(feature).__name__

    def values(column: str) -> Iterator[Any]:
        part = ds.select_columns([column])
        if isinstance(part.features[column], datasets.Image):
            part = part.cast_column(column, datasets.Image(decode=False))  # decoded by the source, per image
        for batch in part.iter(batch_size=256):
            yield from batch[column]

    label = (
        f"dataset folder {folder} (a DatasetDict saved with save_to_disk), split '{split}'"
        if is_dict
        else f"dataset folder {folder} (a Dataset saved with save_to_disk)"
    )
    return Table(label, kinds, len(ds), values, where, split if is_dict else None)


def open_table(target: Path, split: str = DEFAULT_SPLIT) -> Table | None:
    """The :class:`Table` of a container file or saved-dataset folder; None for anything else.

    A container file must be a regular file, and a saved-dataset folder may hold no link leading out
    of it, no named pipe or device, and a ``state.json`` naming only files inside it; anything else
    is a DataError before the file is opened.
    """
    if target.is_dir():
        return _saved(target, split) if is_saved_dataset(target) else None
    kind = TABLE_SUFFIXES.get(target.suffix.lower())
    if kind is not None:
        regular_file(target, DataError)  # a named pipe would block the C++ reader, deaf to Ctrl-C and SIGTERM
    if kind == "parquet":
        return _parquet(target)
    if kind == "arrow":
        return _arrow(target)
    if kind in ("csv", "tsv"):
        return _delimited(target, "\t" if kind == "tsv" else ",")
    return None


def table_of(target: Path, split: str = DEFAULT_SPLIT) -> Table:
    """:func:`open_table` of a target already known to be a container (a saved-dataset folder,
    ``.parquet``, ``.arrow``, ``.csv`` or ``.tsv``).

    Raises:
        DataError: when ``target`` is none of these, or cannot be read as the container it claims to be.
    """
    table = open_table(target, split)
    if table is None:
        raise DataError(f"{target} is not a parquet, arrow, csv or tsv file or a folder written by save_to_disk")
    return table


def _kind_words(kind: str) -> str:
    """A column's kind for a message: Arrow's ``null`` type (a column with no value) said in words."""
    return "no values" if kind == "null" else kind


def choose_column(label: str, kinds: dict[str, str], wanted: str | None, kind: str) -> tuple[str, str]:
    """The column of ``kind`` (``"text"`` or ``"image"``) to read, and how it was chosen.

    ``wanted`` (the user's ``text_column`` / ``image_column``) must exist and hold that kind.
    Otherwise a column with a well-known name, else the only column of that kind.

    Raises:
        InputError: when ``wanted`` is not a column, or holds another kind.
        DataError: listing the columns found and naming the parameter that chooses one, when ``wanted`` is None
            and there is no column of ``kind``, or several and none with a well-known name.
    """
    param = f"{kind}_column"
    good = [c for c, k in kinds.items() if k in _KINDS[kind]]
    listing = ", ".join(f"{c} ({_kind_words(k)})" for c, k in kinds.items()) or "none"
    if kinds and all(k == "null" for k in kinds.values()):  # a header and no row, or only empty values
        raise DataError(f"{label} holds no values, only the names of its columns ({', '.join(kinds)})")
    if wanted is not None:
        if wanted not in kinds:
            raise InputError(f"{label} has no column '{wanted}'; its columns: {listing}")
        if kinds[wanted] not in _KINDS[kind]:
            others = f"; its {_WORDS[kind]} columns: {', '.join(good)}" if good else ""
            raise InputError(f"column '{wanted}' of {label} holds {_kind_words(kinds[wanted])}, not {kind}{others}")
        return wanted, "as asked"
    names = TEXT_NAMES if kind == "text" else IMAGE_NAMES
    for name in names:
        if name in good:
            return name, "found by its name"
    lowered = {c.lower(): c for c in good}
    for name in names:
        if name in lowered:
            return lowered[name], "found by its name"
    if len(good) == 1:
        return good[0], f"the only {_WORDS[kind]} column"
    known = ", ".join(names)
    if good:
        raise DataError(
            f"{label} has {len(good)} {_WORDS[kind]} columns ({', '.join(good)}) and none is named "
            f"{known}; choose one with " + Param(param)
        )
    raise DataError(f"{label} has no {_WORDS[kind]} column; its columns: {listing}; choose one with " + Param(param))
