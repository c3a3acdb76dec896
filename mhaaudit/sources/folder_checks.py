"""The checks of a local dataset folder before the ``datasets`` library reads it (:func:`check_dataset_folder`): its
data files lie inside it, and what the library holds at once of each data file of the split read fits the memory
available: a parquet file's row groups, sized from its footer, and a JSON, text or CSV file's longest line
(paragraph, batch of rows, or the whole file where the library reads one whole, as every XML file), scanned once,
decompressed; an image (audio, video...) folder's metadata files, of every split, alike (in its ``.zip`` archives
too, the only archives the library opens there: it reads no metadata inside a ``.tar`` one).
"""

from __future__ import annotations

import os
import zipfile
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from .. import files as file_checks
from ..errors import DataError, one_line
from ..files import HELD_COPIES, SCAN_CHUNK, check_parquet, inside, regular_file, size_words

__all__ = ["check_dataset_folder", "data_suffix"]


def check_dataset_folder(folder: str, builder, split: str) -> None:
    """Check the local dataset folder ``folder`` whose ``datasets`` builder is ``builder`` before ``split`` is read:
    :func:`_confine_data_files`, :func:`_size_row_groups`, :func:`_size_lines`, :func:`_size_metadata`.

    Raises:
        DataError: when a data file lies outside the folder or is not a regular file, or what the library would
            hold at once of a data file of ``split`` does not fit the memory available (the checks' own lines).
    """
    _confine_data_files(folder, builder)
    _size_row_groups(folder, builder, split)
    _size_lines(folder, builder, split)
    _size_metadata(folder, builder, split)


def _confine_data_files(folder: str, builder) -> None:
    """Check that every data file a local dataset folder's metadata resolves to (its ``README.md``'s
    ``data_files``, or the files found by the library's patterns) lies inside the folder, real paths
    compared, and is a regular file.

    Raises:
        DataError: when a data file lies outside ``folder`` (``..``, an absolute path, a URL, a link leading out)
            or is not a regular file.
    """
    root = os.path.realpath(folder)
    files = getattr(builder.config, "data_files", None) or {}
    for split, names in files.items():
        for name in names:
            real = os.path.realpath(str(name)) if "://" not in str(name) else str(name)
            if not inside(real, [root]):
                raise DataError(
                    f"dataset folder {folder}: its metadata names the data file {str(name)[:200]} (split {split}), "
                    f"outside the folder: only files inside the folder named are read"
                )
            regular_file(real, DataError, f"the data file {name} of dataset folder {folder}")


def _split_files(folder: str, builder, split: str) -> Generator[tuple[str, str], None, None]:
    """The data files a local dataset folder's metadata names for ``split`` (the other splits are never read),
    each with the words that name it in a refusal."""
    files = getattr(builder.config, "data_files", None) or {}
    for named, names in files.items():
        for name in names if str(named) == split else ():
            yield str(name), f"dataset folder {folder}: its data file {name} (split {split})"


#: Why a parquet file's row group is sized twice, in its refusal.
_PARQUET_HINT = "the datasets library decodes a row group whole, and holds one while it decodes the next"


def _size_row_groups(folder: str, builder, split: str) -> None:
    """Check that each row group of each parquet file a local dataset folder's metadata names for ``split`` (its
    data files for the parquet reader; a ``metadata.parquet`` for an image or audio folder) fits the memory
    available, twice: the ``datasets`` library reads such a file a row group at a time (its batches are as long as
    the first row group), decodes each whole (a few KB of dictionary-encoded text can decode to gigabytes), and
    still holds one while it decodes the next. A file larger than memory is read all the same, a row group at a
    time. Counting reads the dictionary-encoded text of each row group as dictionaries: about what reading it once
    takes, in time.

    Raises:
        DataError: naming the file and its row group, when a row group needs more than half the memory available,
            or a file cannot be read as parquet.
    """
    from datasets.packaged_modules.parquet.parquet import Parquet

    columns = getattr(builder.config, "columns", None) if isinstance(builder, Parquet) else None
    for name, label in _split_files(folder, builder, split):
        if isinstance(builder, Parquet) or name.lower().endswith(".parquet"):
            check_parquet(
                name,
                DataError,
                label,
                columns,
                factor=2,
                largest_group=True,
                hint=_PARQUET_HINT,
            )


def _size_lines(folder: str, builder, split: str) -> None:
    """Check that what the ``datasets`` library holds at once of each JSON, text, CSV or XML data file a local dataset
    folder's metadata names for ``split`` fits a quarter of the memory available. The library reads such a file a
    batch at a time (``chunksize`` bytes, then the rest of the line; ``chunksize`` rows of a CSV file) and so holds
    one line whole, however long (text ``sample_by: paragraph``: one paragraph, lines up to a blank one), and a whole
    file where it reads one whole (a JSON file that starts with ``[`` or a ``field`` of it, text
    ``sample_by: document``, every XML file); it decompresses a ``.gz``, ``.bz2``, ``.xz``, ``.zst``, ``.lz4`` or
    ``.zip`` file as it streams, so a few KB can hold a line of gigabytes. A compressed file, or a plain one larger
    than that share, is scanned once, decompressed :data:`SCAN_CHUNK` bytes at a time and never held, until what
    the library would hold is found to exceed the share. A large file of short lines is read as before.

    Raises:
        DataError: naming the file, what the library would hold (at least) and the limit; or when a compressed file
            cannot be decompressed.
    """
    reading = _text_reading(builder)
    if reading is None:
        return
    memory = file_checks.memory_limit()
    for name, label in _split_files(folder, builder, split):
        try:
            protocol = _extraction_protocol(name)
        except Exception as exc:  # noqa: BLE001 - an archive the library cannot read either (rar)
            raise DataError(label + f": cannot read it ({one_line(exc, 160)})") from None
        if protocol is None and os.path.getsize(name) + reading.batch <= memory // HELD_COPIES:
            continue  # a plain file: the library never holds more than the file
        for member, stream in _decompressed(name, protocol, label):
            _size_stream(stream, label + (f" (its member {member})" if member else ""), reading, protocol, memory)


@dataclass(frozen=True)
class _Reading:
    """How a ``datasets`` reader reads a text file, as far as what it holds at once goes (:func:`_most_held`'s
    arguments)."""

    rows: int = 1
    whole: bool = False
    batch: int = 0
    paragraphs: bool = False
    quote: bytes = b""
    json_batches: bool = False
    universal: bool = False

    @property
    def unit(self) -> str:
        """What the library's message says it holds whole, where it holds a part of the file."""
        if self.rows > 1:
            return f"{self.rows} rows at once"
        return "a row whole" if self.quote else "a paragraph whole" if self.paragraphs else "a line whole"


def _text_reading(builder) -> _Reading | None:
    """How the JSON, text, CSV or XML reader ``builder`` reads its data files (None: another reader)."""
    from datasets.packaged_modules.csv.csv import Csv
    from datasets.packaged_modules.json.json import Json
    from datasets.packaged_modules.text.text import Text

    try:
        from datasets.packaged_modules.xml.xml import Xml
    except ImportError:  # a datasets version without an XML reader
        Xml = None
    if Xml is not None and isinstance(builder, Xml):
        return _Reading(whole=True, universal=True)  # read whole, in text mode (universal newlines)
    if not isinstance(builder, (Json, Text, Csv)):
        return None
    config = builder.config
    csv = isinstance(builder, Csv)
    return _Reading(
        rows=int(config.chunksize) if csv else 1,
        whole=(isinstance(builder, Json) and config.field is not None)
        or (isinstance(builder, Text) and config.sample_by == "document"),
        batch=0 if csv else max(0, int(config.chunksize)),
        paragraphs=isinstance(builder, Text) and config.sample_by == "paragraph",
        # a CSV row's quoted field may hold newlines (QUOTE_NONE, 3: quotes are plain characters)
        quote=str(config.quotechar or "").encode() if csv and config.quoting != 3 else b"",
        json_batches=isinstance(builder, Json),
        universal=isinstance(builder, Text),
    )


def _size_stream(stream, what: str, reading: _Reading, protocol: str | None, memory: int) -> None:
    """Check that what the library holds at once of the (decompressed) ``stream`` read as ``reading`` says fits a
    quarter of ``memory``; ``what`` names it, ``protocol`` its compression (None: plain).

    Raises:
        DataError: naming it, what the library would hold (at least) and the limit; or when it cannot be
            decompressed.
    """
    limit = memory // HELD_COPIES
    r = reading
    try:
        with stream:
            held, words, read_whole = _most_held(
                stream, r.rows, r.whole, limit, r.batch, r.paragraphs, r.quote, r.json_batches, r.universal
            )
    except (OSError, EOFError, ValueError) as exc:  # a corrupt stream: the library would fail on it too
        raise DataError(what + f": cannot decompress it ({one_line(exc, 160)})") from None
    if held > limit:
        how = f", decompressed ({protocol})," if protocol else ""
        raise DataError(
            what
            + f": reading it{how} holds at least {size_words(held)} at once ({words} "
            + ("decompressed" if protocol else "read")
            + ("" if read_whole or not r.batch else f", after a batch of {size_words(r.batch)}")
            + f"), more than the {size_words(limit)} allowed (a quarter of the {size_words(memory)} "
            "available); the datasets library reads " + (read_whole or r.unit)
        )


#: How an image (audio, video...) folder's reader reads its metadata files, by suffix: a JSON lines file 10 MB at a
#: time, then the rest of the line, never decompressed; a CSV file 10000 rows at a time (pandas: ``"`` quotes).
#: Any other metadata file is read as parquet.
_METADATA_READING = {
    ".jsonl": _Reading(batch=10 << 20),
    ".csv": _Reading(rows=10_000, quote=b'"'),
}


def _size_metadata(folder: str, builder, split: str) -> None:
    """Check that what the ``datasets`` library holds at once of each metadata file of a local image (audio, video,
    ...) folder fits the memory available: ``metadata.jsonl`` and ``metadata.csv`` as :func:`_size_lines` sizes a JSON
    and a CSV data file (:data:`_METADATA_READING`), another metadata file as :func:`_size_row_groups` sizes a parquet
    one, and the metadata files inside each ``.zip`` archive of the folder, decompressed (the library opens no other
    archive there: a ``.tar`` one, plain or compressed, it leaves unread as it streams, metadata and all). The library
    reads the first batch of every split's metadata to find the features, so every split's metadata files are sized,
    whole.

    Raises:
        DataError: naming the metadata file (and its archive), what the library would hold (at least) and the limit;
            or when an archive or a compressed member cannot be read.
    """
    from datasets.packaged_modules.folder_based_builder.folder_based_builder import FolderBasedBuilder

    if not isinstance(builder, FolderBasedBuilder) or getattr(builder.config, "drop_metadata", None):
        return  # not a folder reader, or one told to read no metadata
    # (older datasets versions: no metadata_filenames option; only metadata.csv and metadata.jsonl)
    names = set(
        getattr(builder.config, "metadata_filenames", None)
        or getattr(builder, "METADATA_FILENAMES", ["metadata.csv", "metadata.jsonl"])
    )
    kinds = {e.lower() for e in builder.EXTENSIONS}
    memory = file_checks.memory_limit()
    for named, paths in (getattr(builder.config, "data_files", None) or {}).items():
        for path in map(str, paths):
            label = f"dataset folder {folder}: its data file {path} (split {named})"
            stem, suffix = os.path.splitext(path)
            if suffix.lower() in kinds or os.path.splitext(stem)[1].lower() in kinds:
                continue  # an image (audio...) file, even one named as metadata
            if os.path.basename(path) in names:
                reading = _METADATA_READING.get(suffix.lower())
                if reading is not None:
                    if os.path.getsize(path) + reading.batch > memory // HELD_COPIES:  # plain: it holds no more
                        with open(path, "rb") as stream:
                            _size_stream(stream, label, reading, None, memory)
                elif not (str(named) == split and path.lower().endswith(".parquet")):  # else sized already
                    check_parquet(path, DataError, label, factor=2, largest_group=True, hint=_PARQUET_HINT)
            elif suffix.lower() == ".zip":
                _size_archived_metadata(path, label, names, memory)


def _size_archived_metadata(path: str, label: str, names: set[str], memory: int) -> None:
    """:func:`_size_metadata` for the metadata files (basename in ``names``) of the ``.zip`` archive ``path``,
    decompressed (a member's declared size bounds what the library decompresses of it), a parquet one by its row
    groups (``files.check_parquet``).

    Raises:
        DataError: naming the archive and its member, what the library would hold (at least) and the limit; or
            when the archive cannot be read.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.is_dir() or os.path.basename(info.filename) not in names:
                    continue
                what = label + f" (its member {info.filename[:200]!r})"
                reading = _METADATA_READING.get(os.path.splitext(info.filename)[1].lower())
                if reading is None:  # read as parquet, a row group at a time
                    with archive.open(info) as member:
                        check_parquet(member, DataError, what, factor=2, largest_group=True, hint=_PARQUET_HINT)
                elif info.file_size + reading.batch > memory // HELD_COPIES:
                    _size_stream(archive.open(info), what, reading, "zip", memory)
    except DataError:
        raise
    except (OSError, EOFError, zipfile.BadZipFile, ValueError) as exc:
        raise DataError(label + f": cannot read it as a zip archive ({one_line(exc, 160)})") from None


#: Compressed files by suffix, where the ``datasets`` library in use keeps its own rule elsewhere.
_COMPRESSED_SUFFIXES = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd", ".lz4": "lz4", ".zip": "zip"}


def data_suffix(name: str) -> str:
    """The suffix of the data a file holds, under one compression suffix (``train.jsonl.gz``: ``.jsonl``;
    ``a.parquet``: ``.parquet``), lower case; the ``datasets`` library reads such files decompressed."""
    stem, suffix = os.path.splitext(name.lower())
    if suffix in _COMPRESSED_SUFFIXES:
        suffix = os.path.splitext(stem)[1]
    return suffix


def _extraction_protocol(name: str) -> str | None:
    """How the ``datasets`` library decompresses the data file ``name`` as it streams (None: a plain file): its own
    rule (by suffix, else by the file's magic number), found where the installed version keeps it, else the
    suffix's."""
    try:
        from datasets.utils.file_utils import _get_extraction_protocol
    except ImportError:
        try:
            from datasets.download.streaming_download_manager import _get_extraction_protocol
        except ImportError:
            return _COMPRESSED_SUFFIXES.get(os.path.splitext(name)[1].lower())
    return _get_extraction_protocol(name)


def _decompressed(name: str, protocol: str | None, label: str) -> Generator[tuple[str, Any], None, None]:
    """The decompressed streams of the data file ``name`` (``protocol`` as the ``datasets`` library infers it): one for
    a plain or single-file compressed file (member ``""``), one for each file of a zip archive.

    Raises:
        DataError: when no decompressor for ``protocol`` is installed, or the file cannot be opened as such.
    """
    from fsspec.compression import compr  # what the datasets library decompresses with (it imports fsspec)

    try:
        if protocol == "zip":
            with zipfile.ZipFile(name) as archive:
                for info in archive.infolist():
                    if not info.is_dir():
                        yield info.filename, archive.open(info)
            return
        if protocol not in compr:
            raise DataError(label + f": cannot check it: no {protocol} decompressor is installed")
        with open(name, "rb") as raw:
            yield "", compr[protocol](raw, mode="rb")
    except (OSError, EOFError, zipfile.BadZipFile, ValueError) as exc:
        raise DataError(label + f": cannot decompress it ({one_line(exc, 160)})") from None


def _most_held(
    stream,
    rows: int,
    whole: bool,
    limit: int,
    batch: int,
    paragraphs: bool = False,
    quote: bytes = b"",
    json_batches: bool = False,
    universal: bool = False,
) -> tuple[int, str, str]:
    """What the ``datasets`` library holds at once of the decompressed ``stream`` (read :data:`SCAN_CHUNK` bytes at a
    time, never more held): its longest line (with ``paragraphs``, its longest paragraph: the bytes up to a blank
    line; with ``rows`` > 1 or a ``quote``, the most bytes of ``rows`` consecutive rows, a CSV batch, a newline inside
    a field ``quote`` encloses not ending a row), after a ``batch`` of bytes, or all of it with ``whole``; with
    ``json_batches`` (the JSON reader's file), all of it where it starts with ``[`` (a JSON array, read whole), and
    the rest of it from any later batch that starts with ``[`` (the JSON reader's batches: ``batch`` bytes, then the
    rest of the line; it reads the rest of the file where one starts so); a text or CSV file's ``[`` is a character.
    With ``universal`` (the text reader's file, opened with universal newlines), CR LF and a lone CR end a
    line as LF does. The scan stops once that passes ``limit``. Returns the bytes, what they hold in words,
    and how it is read whole ("it whole", "the rest of it whole"; empty where it is not)."""
    total, line, longest, window, lengths = 0, 0, 0, 0, deque[int]()
    by_rows = rows > 1 or bool(quote)  # a CSV file's rows: one row may run over several lines
    what = (
        f"its most bytes in {rows} consecutive rows"
        if rows > 1
        else "its longest row"
        if by_rows
        else "its longest paragraph"
        if paragraphs
        else "its longest line"
    )
    sep = b"\n\n" if paragraphs else b"\n"
    pending = b""  # (paragraphs) a chunk's last newline, counted in ``line``: a blank line may begin there
    quoted = False  # (rows) inside a quoted field: a newline there does not end the row
    from_byte = 0 if whole else None  # where what is read whole begins
    starts = _BatchStarts(batch) if json_batches and batch > 0 else None
    cr = b""  # (universal) a chunk's last byte, a carriage return: the next chunk may begin with its \n
    while chunk := stream.read(SCAN_CHUNK):
        if universal:  # the lines as the reader sees them (its lengths; ``total`` stays the file's bytes)
            raw, chunk = len(chunk), cr + chunk
            cr = b"\r" if chunk.endswith(b"\r") else b""
            chunk = chunk[: len(chunk) - len(cr)].replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            total += raw - len(chunk)  # (``size`` below counts what is left)
        if total == 0 and json_batches and chunk.removeprefix(b"\xef\xbb\xbf").startswith(b"["):
            from_byte = 0
        size = len(chunk)
        if from_byte is None and starts is not None:
            from_byte = starts.array_at(chunk, total)
            if from_byte is not None:  # the lines before it, the last ones held a line at a time
                chunk = chunk[: from_byte - total]
        elif from_byte:  # what follows a later batch that starts with [ is held whole: no line of it counts apart
            chunk = b""
        total += size
        data, line = pending + chunk, line - len(pending)
        *ends, rest = data.split(sep)
        pending = b"\n" if paragraphs and rest.endswith(b"\n") else b""
        if by_rows:
            for piece in ends:
                quoted ^= bool(quote) and piece.count(quote) % 2 == 1
                if quoted:  # the row goes on past this newline
                    line += len(piece) + 1
                    continue
                lengths.append(line + len(piece) + 1)
                window, line = window + lengths[-1], 0
                if len(lengths) > rows:
                    window -= lengths.popleft()
                longest = max(longest, window)
            quoted ^= bool(quote) and rest.count(quote) % 2 == 1
        elif ends:
            longest = max(longest, line + len(ends[0]) + len(sep), max(map(len, ends[1:]), default=0) + len(sep))
            line = 0
        line += len(rest)
        if _held(total, from_byte, longest, line, window, batch) > limit:
            return _held_words(total, from_byte, longest, line, window, batch, what, stopped=True)
    if cr:  # a file that ends with a carriage return: its last line ends there
        longest, line = max(longest, line + 1), 0
    return _held_words(total, from_byte, longest, line, window, batch, what, stopped=False)


def _held(total: int, from_byte: int | None, longest: int, line: int, window: int, batch: int) -> int:
    """What the library holds at once, as far as the scan has read (:func:`_most_held`): all of it where it is read
    whole; else its longest line (or rows) after a batch, or, where a later batch starts with ``[``, the rest of it
    from there if that is more (a long line before that batch is held all the same)."""
    if from_byte == 0:
        return total
    by_lines = max(longest, line + window) + batch
    return by_lines if from_byte is None else max(total - from_byte, by_lines)


def _held_words(total, from_byte, longest, line, window, batch, what: str, stopped: bool) -> tuple[int, str, str]:
    """:func:`_most_held`'s answer: the bytes held, in words, and how it is read whole (empty where what is held
    most is a line)."""
    held = _held(total, from_byte, longest, line, window, batch)
    whole = ""
    if from_byte is not None and held == total - from_byte:
        what, whole = ("all of it", "it whole") if from_byte == 0 else ("the rest of it", "the rest of it whole")
        if from_byte:
            what += f" from byte {from_byte}, where a batch starts with '['"
        part = held
    else:
        part = held - batch
    said = f"at least {size_words(part)}: the scan stopped after" if stopped else f"{size_words(part)} of"
    return held, f"{what}, {said} {size_words(total)}", whole


class _BatchStarts:
    """Where the ``datasets`` library's JSON reader begins each batch of a file: it reads ``size`` bytes, then the
    rest of the line (up to and with the first newline at or after that point), and the next batch begins after it.
    Fed the file's bytes in order, chunk by chunk; the first batch (at byte 0) is not its concern."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.line_from = size  # where the current batch's last line is looked for (a newline at or after it)
        self.at_start = False  # the next byte begins a batch

    def array_at(self, chunk: bytes, offset: int) -> int | None:
        """The offset of a batch in ``chunk`` (its first byte at ``offset`` in the file) that begins with ``[``, else
        None (the state moves on to the chunk's end)."""
        i = 0
        while True:
            if self.at_start:
                if i >= len(chunk):
                    return None  # the batch begins with the next chunk
                if chunk[i : i + 1] == b"[":
                    return offset + i
                self.at_start, self.line_from = False, offset + i + self.size
            j = chunk.find(b"\n", max(self.line_from - offset, i))
            if self.line_from - offset >= len(chunk) or j == -1:
                self.line_from = max(self.line_from, offset + len(chunk))
                return None
            i, self.at_start = j + 1, True
