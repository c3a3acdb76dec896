"""Helpers shared by the sources: deciding what a ``data`` argument names, opening Hugging Face
datasets (hub ids or local dataset folders) with user-facing errors, the generator of the
sources' sampling (the seed rule's ``"data"`` purpose), and the cache folder.
"""

from __future__ import annotations

import os
import re
import tempfile
import zipfile
from collections import deque
from collections.abc import Callable, Generator, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .. import files as file_checks
from ..errors import DataError, InputError, MhaauditError, OfflineError, Param, one_line
from ..facts import SkipCounts
from ..files import check_parquet, folder_files, inside, regular_file, size_words
from ..hub import is_offline
from ..runtime import decode_workers_env, derive_seed
from ..staging import process_scratch_folder
from ..workers import worker_pool

BUILTIN_NAMES = {"builtin", "built-in", "default"}
HUB_PREFIXES = ("hf:", "hub:")

# Suffixes that mark a string as a file name rather than a hub dataset id.
_FILE_SUFFIXES = {
    ".parquet",
    ".arrow",
    ".jsonl",
    ".json",
    ".txt",
    ".csv",
    ".tsv",
    ".npy",
    ".npz",
    ".safetensors",
    ".jpg",
    ".jpeg",
    ".png",
    ".bmp",
    ".gif",
    ".tif",
    ".tiff",
    ".webp",
    ".zip",
    ".tar",
    ".gz",
    ".md",
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


def data_rng(seed: int, *index: int) -> np.random.Generator:
    """The generator of the sources' sampling under the user's ``seed``:
    ``numpy.random.default_rng(derive_seed(seed, "data", *index))``."""
    return np.random.default_rng(derive_seed(seed, "data", *index))


def decode_workers() -> int:
    """Threads that decode images: ``$MHAAUDIT_DECODE_WORKERS``, else the usable cores, at most 8."""
    value = decode_workers_env()
    if value is not None:
        return value
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def ordered_map(fn: Callable[[Any], Any], items: Iterable[Any], workers: int | None = None) -> Generator[Any]:
    """``fn(item)`` for every item, in the items' order, computed on a pool of ``workers`` threads
    (:func:`decode_workers` by default) that runs at most ``4 * workers`` items ahead. Image
    decoding (PIL) runs outside the interpreter lock, so the threads decode in parallel. The items
    are read on the calling thread; an error of ``fn`` is raised here, in order; leaving early
    cancels what was not started."""
    workers = decode_workers() if workers is None else max(1, int(workers))
    if workers == 1:
        yield from map(fn, items)
        return

    pending: deque = deque()
    with worker_pool(workers, "mhaaudit-decode") as pool:  # left early, it cancels what was not started
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= 4 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def cache_dir(sub: str) -> Path:
    """The folder ``sub`` of mhaaudit's cache, created when missing: ``$MHAAUDIT_CACHE``, else
    ``$XDG_CACHE_HOME/mhaaudit``, else ``~/.cache/mhaaudit``. When that cannot be written, the process's
    scratch folder for ``sub`` in the system's temporary folder, removed when the process ends (nothing is
    cached across runs then: ``staging.process_scratch_folder``)."""
    base = os.environ.get("MHAAUDIT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "mhaaudit"
    )
    path = Path(base) / sub
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=path)  # a new file: a planted link is not followed
        os.close(fd)
        os.unlink(probe)
        return path
    except OSError:
        return process_scratch_folder(f"mhaaudit-{sub.replace('/', '-')}-")


def is_builtin(data: str | None) -> bool:
    return data is None or data.strip().lower() in BUILTIN_NAMES


def looks_like_path(data: str) -> bool:
    """True when ``data`` is clearly meant as a local path (so a missing one is an error, not a hub id)."""
    if data.startswith(("/", "./", "../", "~", ".\\", "..\\")) or "\\" in data:
        return True
    if re.match(r"^[A-Za-z]:[\\/]", data):  # a Windows drive
        return True
    if Path(data).suffix.lower() in _FILE_SUFFIXES:
        return True
    return not _HUB_ID.match(data)


def classify(data: str) -> tuple[str, Any]:
    """Say what a non-built-in ``data`` argument names.

    Returns ``("hub", id_or_path)`` for a Hugging Face dataset (a hub id, or any string prefixed
    with ``hf:``/``hub:``, which may also be a local dataset folder), ``("file", Path)``,
    ``("dir", Path)``.

    Raises:
        InputError: when ``data`` is empty, or a hub prefix is followed by nothing.
        DataError: when ``data`` looks like a local path but does not exist, or names a file that is not a regular
            file (a named pipe, a device: refused before it is opened).
    """
    text = data.strip()
    if not text:
        raise InputError("empty data argument: give a path, a Hugging Face dataset id, or 'builtin'")
    for prefix in HUB_PREFIXES:
        if text.lower().startswith(prefix):
            rest = text[len(prefix) :].strip()
            if not rest:
                raise InputError(f"'{text}': nothing after '{prefix}'; give a Hugging Face dataset id")
            return "hub", rest
    path = Path(os.path.expanduser(text))
    if path.is_dir():
        return "dir", path
    if path.exists():
        return "file", regular_file(path, DataError)  # a named pipe would block the reader, a device never end
    if looks_like_path(text):
        raise DataError(f"{text}: no such file or folder")
    return "hub", text


def no_split(split: str, what: str) -> None:
    """Refuse a ``split`` other than the default, ``"train"``, for data without splits (``what`` names it).

    Raises:
        InputError: when ``split`` is not ``"train"``.
    """
    if split != "train":
        raise InputError(
            Param("split") + f" '{split}' has no effect on {what}: it has no splits (a split is chosen "
            "in a Hugging Face dataset or a DatasetDict saved with save_to_disk)"
        )


def is_local(data: str) -> bool:
    """True when ``data`` (``~`` expanded) is an existing local file or folder."""
    return Path(os.path.expanduser(data)).exists()


def open_hf_dataset(data: str, *, split: str, config: str | None = None, what: str, instead: str):
    """``datasets.load_dataset(data, config, split=split, streaming=True)`` with user-facing errors.

    ``data`` is a hub id or a local dataset folder. For a hub id while offline this raises
    OfflineError at once, without touching the ``datasets`` library. ``what`` names the kind of
    data ("image", "text") and ``instead`` says what to use offline. Returns the streaming dataset.

    Raises:
        OfflineError: when ``data`` is not local and the hub is offline or cannot be reached.
        DataError: when the dataset has no such split, is not found, is gated or private, or cannot be opened
            for any other reason (the ``datasets`` package missing included); for a local folder, when it holds a
            link leading out of it or a named pipe or device, or its metadata names data files outside it, or a row
            group of a parquet data file would not fit the memory available, or a line (a whole file, where the
            library reads it whole) of a JSON, text or CSV data file, once decompressed, would not fit a quarter of it.
        MhaauditError: an mhaaudit error of the checks of a local folder, re-raised as it is.
    """
    local = is_local(data)
    if local:
        data = os.path.expanduser(data)
    elif is_offline():
        raise OfflineError(
            f"'{data}' is not a local file or folder, so it names a Hugging Face hub dataset, but the "
            "hub cannot be reached (offline); use " + instead
        )
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise DataError(
            f"reading '{data}' needs the 'datasets' package: {one_line(exc, 300, first_line=True)}"
        ) from None

    label = f"'{data}'" + (f" (config {config})" if config else "")
    try:
        if not local or not os.path.isdir(data):
            if local:
                regular_file(data, DataError)
            return datasets.load_dataset(data, config, split=split, streaming=True)
        # What load_dataset does, with the data files the folder's metadata names checked in between.
        folder_files(data, DataError, "dataset folder")  # no link leading out of it, no pipe or device in it
        builder = datasets.load_dataset_builder(data, config)
        _confine_data_files(data, builder)
        _size_row_groups(data, builder, split)
        _size_lines(data, builder, split)
        return builder.as_streaming_dataset(split=split)
    except MhaauditError:
        raise
    except ValueError as exc:
        msg = str(exc)
        if "split" in msg.lower():
            splits = _available_splits(msg, data, config)
            known = f"; available splits: {', '.join(splits)}" if splits else ""
            raise DataError(f"{what} dataset {label} has no split '{split}'{known}") from None
        raise DataError(f"cannot open {what} dataset {label}: {one_line(exc, 300, first_line=True)}") from None
    except (ConnectionError, TimeoutError) as exc:
        if not local:
            raise OfflineError(
                f"cannot reach the Hugging Face hub for '{data}' ({one_line(exc, 300, first_line=True)}); use "
                + instead
            ) from None
        raise DataError(f"cannot open {what} dataset {label}: {one_line(exc, 300, first_line=True)}") from None
    except Exception as exc:  # noqa: BLE001 - the datasets library raises many types; all are data problems here
        name = type(exc).__name__
        if "NotFound" in name or isinstance(exc, FileNotFoundError):
            hint = "" if local else " (check the id; gated or private datasets need `hf auth login`)"
            raise DataError(f"{what} dataset {label} not found or has no data files{hint}") from None
        if "Gated" in name or "Unauthorized" in name or "Authentication" in name:
            raise DataError(
                f"{what} dataset {label} is gated or private: accept its terms on the hub and log in "
                "with `hf auth login`"
            ) from None
        raise DataError(f"cannot open {what} dataset {label}: {one_line(exc, 300, first_line=True)}") from None


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
                hint="the datasets library decodes a row group whole, and holds one while it decodes the next",
            )


# A compressed data file is scanned this many bytes at a time, once decompressed.
_SCAN_CHUNK = 1 << 20
# What the datasets library holds at once of a text data file (its batch, the batch decoded, its Arrow table, the
# rows handed on) must fit this share of the memory available.
_HELD_COPIES = 4


def _size_lines(folder: str, builder, split: str) -> None:
    """Check that what the ``datasets`` library holds at once of each JSON, text or CSV data file a local dataset
    folder's metadata names for ``split`` fits a quarter of the memory available. The library reads such a file a
    batch at a time (``chunksize`` bytes, then the rest of the line; ``chunksize`` rows of a CSV file) and so holds
    one line whole, however long (text ``sample_by: paragraph``: one paragraph, lines up to a blank one), and a whole
    file where it reads one whole (a JSON file that starts with ``[`` or a ``field`` of it, text
    ``sample_by: document``); it decompresses a ``.gz``, ``.bz2``, ``.xz``, ``.zst``, ``.lz4`` or
    ``.zip`` file as it streams, so a few KB can hold a line of gigabytes. A compressed file, or a plain one larger
    than that share, is scanned once, decompressed :data:`_SCAN_CHUNK` bytes at a time and never held, until what
    the library would hold is found to exceed the share. A large file of short lines is read as before.

    Raises:
        DataError: naming the file, what the library would hold (at least) and the limit; or when a compressed file
            cannot be decompressed.
    """
    from datasets.packaged_modules.csv.csv import Csv
    from datasets.packaged_modules.json.json import Json
    from datasets.packaged_modules.text.text import Text

    if not isinstance(builder, (Json, Text, Csv)):
        return
    config = builder.config
    whole = (isinstance(builder, Json) and config.field is not None) or (
        isinstance(builder, Text) and config.sample_by == "document"
    )
    paragraphs = isinstance(builder, Text) and config.sample_by == "paragraph"
    rows = int(config.chunksize) if isinstance(builder, Csv) else 1
    # a CSV row's quoted field may hold newlines (QUOTE_NONE, 3: quotes are plain characters)
    quote = str(config.quotechar or "").encode() if isinstance(builder, Csv) and config.quoting != 3 else b""
    batch = 0 if isinstance(builder, Csv) else max(0, int(config.chunksize))
    memory = file_checks.memory_limit()
    limit = memory // _HELD_COPIES
    for name, label in _split_files(folder, builder, split):
        try:
            protocol = _extraction_protocol(name)
        except Exception as exc:  # noqa: BLE001 - an archive the library cannot read either (rar)
            raise DataError(label + f": cannot read it ({one_line(exc, 160)})") from None
        if protocol is None and os.path.getsize(name) + batch <= limit:
            continue  # a plain file: the library never holds more than the file
        for member, stream in _decompressed(name, protocol, label):
            what = label + (f" (its member {member})" if member else "")
            try:
                with stream:
                    held, words, read_whole = _most_held(
                        stream, rows, whole, limit, batch, paragraphs, quote, isinstance(builder, Json)
                    )
            except (OSError, EOFError, ValueError) as exc:  # a corrupt stream: the library would fail on it too
                raise DataError(what + f": cannot decompress it ({one_line(exc, 160)})") from None
            if held > limit:
                how = f", decompressed ({protocol})," if protocol else ""
                raise DataError(
                    what
                    + f": reading it{how} holds at least {size_words(held)} at once ({words} "
                    + ("decompressed" if protocol else "read")
                    + ("" if read_whole or not batch else f", after a batch of {size_words(batch)}")
                    + f"), more than the {size_words(limit)} allowed (a quarter of the {size_words(memory)} "
                    "available); the datasets library reads "
                    + (read_whole or ("a paragraph whole" if paragraphs else "a line whole"))
                )


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
) -> tuple[int, str, str]:
    """What the ``datasets`` library holds at once of the decompressed ``stream`` (read :data:`_SCAN_CHUNK` bytes at a
    time, never more held): its longest line (with ``paragraphs``, its longest paragraph: the bytes up to a blank
    line; with ``rows`` > 1, the most bytes of ``rows`` consecutive rows, a CSV batch, a newline inside a field
    ``quote`` encloses not ending a row), after a ``batch`` of bytes, or all of it with ``whole`` or where it starts
    with ``[`` (a JSON array, read whole); with ``json_batches``, the rest of it from any batch that starts with ``[``
    (the JSON reader's batches: ``batch`` bytes, then the rest of the line; it reads the rest of the file where one
    starts so). The scan stops once that passes ``limit``. Returns the bytes, what they hold in words, and how it is
    read whole ("it whole", "the rest of it whole"; empty where it is not)."""
    total, line, longest, window, lengths = 0, 0, 0, 0, deque[int]()
    what = (
        f"its most bytes in {rows} consecutive rows"
        if rows > 1
        else "its longest paragraph"
        if paragraphs
        else "its longest line"
    )
    sep = b"\n\n" if paragraphs else b"\n"
    pending = b""  # (paragraphs) a chunk's last newline, counted in ``line``: a blank line may begin there
    quoted = False  # (rows) inside a quoted field: a newline there does not end the row
    from_byte = 0 if whole else None  # where what is read whole begins
    starts = _BatchStarts(batch) if json_batches and batch > 0 else None
    while chunk := stream.read(_SCAN_CHUNK):
        if total == 0 and chunk.removeprefix(b"\xef\xbb\xbf").startswith(b"["):
            from_byte = 0
        if from_byte is None and starts is not None:
            from_byte = starts.array_at(chunk, total)
        total += len(chunk)
        data, line = pending + chunk, line - len(pending)
        *ends, rest = data.split(sep)
        pending = b"\n" if paragraphs and rest.endswith(b"\n") else b""
        if rows > 1:
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
    return _held_words(total, from_byte, longest, line, window, batch, what, stopped=False)


def _held(total: int, from_byte: int | None, longest: int, line: int, window: int, batch: int) -> int:
    """What the library holds at once, as far as the scan has read (:func:`_most_held`)."""
    return total - from_byte if from_byte is not None else max(longest, line + window) + batch


def _held_words(total, from_byte, longest, line, window, batch, what: str, stopped: bool) -> tuple[int, str, str]:
    """:func:`_most_held`'s answer: the bytes held, in words, and how it is read whole."""
    held = _held(total, from_byte, longest, line, window, batch)
    whole = ""
    if from_byte is not None:
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


def _available_splits(message: str, data: str, config: str | None) -> list[str]:
    found = re.search(r"(?:Available splits|Should be one of)\s*:?\s*\[([^\]]*)\]", message)
    if found:
        return [s.strip().strip("'\"") for s in found.group(1).split(",") if s.strip()]
    try:
        import datasets

        return list(datasets.get_dataset_split_names(data, config))
    except Exception:  # noqa: BLE001 - the split names only improve an error message
        return []


def stream_rows(dataset, data: str):
    """Rows of a streamed dataset, as it yields them.

    Raises:
        DataError: saying how many rows were read, when reading fails (an OSError, ValueError or KeyError of the
            reader).
    """
    iterator = iter(dataset)
    count = 0
    while True:
        try:
            row = next(iterator)
        except StopIteration:
            return
        except (OSError, ConnectionError, ValueError, KeyError) as exc:
            raise DataError(
                f"reading dataset '{data}' failed after {count} rows: {one_line(exc, 300, first_line=True)}"
            ) from None
        count += 1
        yield row


# Why an input was skipped, in the order reports list them.
SKIP_CAUSES = ("not RGB", "unreadable", "invalid JSON", "not UTF-8", "missing field", "empty", "too short")


class Skips:
    """The inputs a pass skipped, by cause (:data:`SKIP_CAUSES`), each with a count and its
    first example (a file name, a line number, the start of a document) and why."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.examples: dict[str, str] = {}

    def add(self, cause: str, example: str, count: int = 1) -> None:
        self.counts[cause] = self.counts.get(cause, 0) + count
        self.examples.setdefault(cause, example)

    def merge(self, other: Skips) -> None:
        for cause, count in other.counts.items():
            self.counts[cause] = self.counts.get(cause, 0) + count
            self.examples.setdefault(cause, other.examples[cause])

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def count(self, cause: str) -> int:
        return self.counts.get(cause, 0)

    def as_dict(self) -> dict:
        """``{cause: {"count": n, "example": "..."}}`` in report order."""
        order = sorted(self.counts, key=lambda c: SKIP_CAUSES.index(c) if c in SKIP_CAUSES else len(SKIP_CAUSES))
        return {c: {"count": self.counts[c], "example": self.examples[c]} for c in order}

    def describe(self) -> str:
        """``"3 not RGB (e.g. a.png: mode L), 2 unreadable (e.g. b.jpg: ...)"``, or ``""``."""
        return describe_skips(self.as_dict())

    def __bool__(self) -> bool:
        return bool(self.counts)


def describe_skips(skips: dict) -> str:
    """The words of :meth:`Skips.describe` for its ``as_dict()`` form (as results carry it)."""
    return SkipCounts.of(skips).describe()


def snippet(text: str, width: int = 40) -> str:
    """The start of a document, on one line, quoted, for an example in a report."""
    flat = " ".join(str(text).split())
    return repr(flat if len(flat) <= width else flat[: width - 3] + "...")
