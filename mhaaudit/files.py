"""What a run may read, and where it may write: regular files only, inside the folder named, within
bounds known before reading; outputs never over an input.

Every reader goes through these before it opens anything:

- :func:`regular_file`: a path a reader opens must be a regular file (symbolic links followed).
  A named pipe would block the reader forever (inside a C++ reader, deaf to Ctrl-C and SIGTERM),
  a character device such as ``/dev/zero`` never ends, a socket cannot be read: each is refused
  in one line before it is opened.
- :func:`read_json`: a JSON metadata file (a config, ``meta.json``, ``state.json``), a regular file
  of at most :data:`MAX_JSON_BYTES`, its nesting within what Python can parse.
- :func:`folder_files`: the files under a data or model folder, listed without recursion and at
  most :data:`MAX_FOLDER_DEPTH` folders deep; a symbolic link that leads outside the folder (and
  outside the extra ``roots`` the caller allows) and anything that is neither a regular file nor
  a folder is refused before anything is read.
- :func:`inside` and :func:`name_inside`: a path (or a file name a folder's metadata gives) that
  must resolve inside a folder.
- :func:`within` and :func:`same_place` (:mod:`mhaaudit.places`): where an output goes, compared with the
  inputs and the other outputs by device and inode, so that a second name of the same folder (a
  symbolic link, a bind mount) is the same folder.
- :func:`arrow_source` (:mod:`mhaaudit.native_names`): what the Arrow and parquet readers are given for a
  file, so that a name that is not UTF-8 can be read too.
- :func:`read_parquet` and :func:`stream_column`: a parquet file is small on disk and large in memory by
  design (a run of zeros declares millions of values in a few bytes; a dictionary-encoded text column
  holds each distinct string once, however many rows repeat it, and a read decodes one copy per row).
  Every parquet file a user names is read whole only once :func:`parquet_need` has counted what the
  read takes and found it within the memory available (:func:`memory_limit`), else refused in one line
  naming the file, what it needs and that limit; a streamed column is read with its text as
  dictionaries and each batch sized (:func:`decoded_bytes`) before it is decoded.

No torch here: the command line checks its outputs before the library is imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Callable, Collection
from pathlib import Path
from typing import IO, Any

from . import hostmem
from .errors import MhaauditError, one_line
from .native_names import arrow_source, native_name, utf8_name
from .places import first_name_under, same_place, within

__all__ = [
    "MAX_FOLDER_DEPTH",
    "MAX_JSON_BYTES",
    "PARQUET_BATCH_ROWS",
    "PYTHON_VALUE_BYTES",
    "arrow_source",
    "check_parquet",
    "decoded_bytes",
    "dictionary_reader",
    "first_name_under",
    "folder_files",
    "inside",
    "kind_of",
    "memory_limit",
    "name_inside",
    "native_name",
    "parquet_need",
    "read_json",
    "read_parquet",
    "regular_file",
    "same_place",
    "size_words",
    "special_kind",
    "stream_column",
    "utf8_name",
    "within",
]

# The largest JSON metadata file read (a model's config, a saved dataset's state.json, a feature
# folder's meta.json, a checkpoint index): real ones hold kilobytes, a large index a few megabytes.
MAX_JSON_BYTES = 64 << 20
# A compressed data file, or a webdataset member, is sized by decompressing it this many bytes at a time, never held.
SCAN_CHUNK = 1 << 20
# What the datasets library holds at once of a text data file's batch or of a webdataset example (the bytes, their
# decoded values, the Arrow table, the rows handed on) must fit this share of the memory available.
HELD_COPIES = 4
# How many folders deep a data or model folder is listed (class folders of an image collection are
# a level or two deep); deeper nesting is refused, not followed.
MAX_FOLDER_DEPTH = 64

_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def kind_of(mode: int) -> str:
    """What a file of ``mode`` (``st_mode``) is, in words: ``"a named pipe (FIFO)"``, ``"a regular file"``, ..."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def special_kind(path: str | os.PathLike) -> str | None:
    """What stands at ``path`` when it is neither a regular file nor a folder (nor a symbolic link to one), in
    words (``"a character device"``, ``"a symbolic link to a named pipe (FIFO) (/tmp/p)"``); None when nothing
    is there, or a regular file, a folder or a dangling link is.

    An output is written beside its path and renamed over it: at a device node, a named pipe or a
    socket that rename would put a regular file in the node's place (as root, ``/dev/null`` itself),
    and at a symbolic link to one it would replace the link (``/dev/stdout``). Outputs ask this
    first.
    """
    try:
        mode = os.lstat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISLNK(mode):
        try:
            target = os.stat(path).st_mode
        except (OSError, ValueError):
            return None  # dangling: the output's own checks say so
        if stat.S_ISREG(target) or stat.S_ISDIR(target):
            return None
        return f"a symbolic link to {kind_of(target)} ({os.path.realpath(path)})"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return kind_of(mode)


def regular_file(path: str | os.PathLike, error: type[MhaauditError], what: str = "") -> Path:
    """``path`` as a ``Path``, checked to be a regular file (symbolic links followed) before it is opened.

    ``what`` starts the message (default: the path itself).

    Raises:
        MhaauditError: of type ``error``, when ``path`` does not exist, or is a named pipe, a device, a socket or a
            folder.
    """
    p = Path(path)
    label = what or str(p)
    try:
        mode = os.stat(p).st_mode
    except OSError as exc:
        raise error(f"cannot read {label}: {exc.strerror or one_line(exc)}") from None
    if stat.S_ISDIR(mode):
        raise error(f"{label} is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise error(
            f"{label} is {kind_of(mode)}, not a regular file: refused (a pipe or device could block the run or "
            "never end); copy the data into a file"
        )
    return p


def read_json(path: str | os.PathLike, error: type[MhaauditError], what: str = "", *, lenient: bool = False) -> Any:
    """The JSON value of the regular file ``path``, of at most :data:`MAX_JSON_BYTES`; with ``lenient``, None
    for a file that is missing or not JSON (what is hostile is refused all the same).

    Raises:
        MhaauditError: of type ``error``, when the file is not a regular file (:func:`regular_file`), larger than
            :data:`MAX_JSON_BYTES`, or nested deeper than Python can parse; unless ``lenient``, also when it is
            missing or unreadable, not UTF-8 or not JSON.
    """
    if lenient and not os.path.exists(path):
        return None
    p = regular_file(path, error, what)
    label = what or str(p)
    try:
        with open(p, "rb") as fh:
            raw = fh.read(MAX_JSON_BYTES + 1)
    except OSError as exc:
        if lenient:
            return None
        raise error(f"cannot read {label}: {exc.strerror or one_line(exc)}") from None
    if len(raw) > MAX_JSON_BYTES:
        raise error(f"{label} holds more than {MAX_JSON_BYTES >> 20} MiB, more than a JSON metadata file is read")
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise error(f"{label} is nested too deeply to be read as JSON") from None
    except (UnicodeDecodeError, ValueError) as exc:
        if lenient:
            return None
        raise error(f"{label} is not JSON ({one_line(exc, 120)})") from None


def inside(path: str | os.PathLike, roots: list[str]) -> bool:
    """Whether the real path ``path`` (links resolved by the caller) lies in one of the real folders ``roots``."""
    p = str(path)
    return any(os.path.commonpath([r, p]) == r for r in roots)


def name_inside(folder: str | os.PathLike, name: str, error: type[MhaauditError], what: str) -> Path:
    """The real path of the file ``name`` that the metadata ``what`` of ``folder`` gives, which must be a relative
    name resolving inside ``folder`` (symbolic links followed).

    Raises:
        MhaauditError: of type ``error``, when ``name`` is not a string, is empty, absolute, a URL, or resolves to
            ``folder`` itself or outside it.
    """
    if not isinstance(name, str) or not name.strip() or "\0" in name:
        raise error(f"{what} names {name!r}, not a file name inside {folder}: refused")
    root = os.path.realpath(folder)
    if os.path.isabs(name) or "://" in name or (len(name) > 1 and name[1] == ":"):
        raise error(f"{what} names {name[:120]!r}, outside {root}: only files inside the folder are read")
    real = os.path.realpath(os.path.join(root, name))
    if real == root or not inside(real, [root]):
        raise error(
            f"{what} names {name[:120]!r}, which resolves to {real}, outside {root}: only files inside the folder "
            "are read"
        )
    return Path(real)


def folder_files(
    folder: str | os.PathLike,
    error: type[MhaauditError],
    what: str,
    *,
    keep: Callable[[str], bool] | None = None,
    roots: list[str] | None = None,
    depth: int = MAX_FOLDER_DEPTH,
    hidden: bool = False,
) -> list[Path]:
    """The regular files under ``folder`` whose names ``keep`` accepts (all when None), in no set order,
    listed without recursion; every entry that a reader could open is checked first.

    Names starting with a dot are passed over (and such folders not entered) unless ``hidden``.
    ``depth`` is how many folders deep to list (0: the folder's own entries). A symbolic link is
    followed only to check where it leads: to a file inside ``folder`` (or inside one of the real
    folders ``roots``) it is listed; a link to a folder is not entered (what it holds is listed
    where it lies, and a loop cannot form); a dangling link is passed over. ``what`` names the
    folder in messages ("image folder", "model folder").

    Raises:
        MhaauditError: of type ``error``, when the folder cannot be listed, an entry kept is a symbolic link leading
            outside it (and outside ``roots``), a named pipe, device or socket, or folders nest deeper than
            ``depth``.
    """
    top = Path(folder)
    real_top = os.path.realpath(top)
    allowed = [real_top, *(roots or [])]
    found: list[Path] = []
    pending: list[tuple[Path, int]] = [(top, 0)]
    while pending:
        here, level = pending.pop()
        try:
            with os.scandir(here) as listing:
                entries = list(listing)
        except OSError as exc:
            raise error(f"cannot list {what} {top}: {exc.strerror or one_line(exc)} ({here})") from None
        for entry in entries:
            if not hidden and entry.name.startswith("."):
                continue
            try:
                if keep is not None and not keep(entry.name) and not entry.is_dir(follow_symlinks=False):
                    continue  # a file the caller does not read: not looked at
                mode = entry.stat(follow_symlinks=False).st_mode
                link = stat.S_ISLNK(mode)
                if link:
                    real = os.path.realpath(entry.path)
                    if not inside(real, allowed):
                        raise error(
                            f"{entry.path} is a symbolic link to {real}, outside the {what} {real_top}: refused "
                            "(copy the file into the folder to use it)"
                        )
                    mode = os.stat(entry.path).st_mode
            except FileNotFoundError:
                continue  # a dangling link, or an entry removed meanwhile: nothing to read there
            except OSError as exc:
                raise error(f"cannot read {entry.path}: {exc.strerror or one_line(exc)}") from None
            if stat.S_ISDIR(mode):
                if link:
                    continue
                if level >= depth:
                    if depth == 0:
                        continue
                    raise error(
                        f"{what} {top} is nested more than {depth} folders deep (at {entry.path[:200]}...): refused"
                    )
                pending.append((Path(entry.path), level + 1))
                continue
            if not stat.S_ISREG(mode):
                raise error(
                    f"{entry.path} in the {what} {top} is {kind_of(mode)}, not a regular file: refused (a pipe or "
                    "device could block the run or never end)"
                )
            found.append(Path(entry.path))
    return found


# --------------------------------------------------------------------------- parquet files

# Bytes of one decoded value of each fixed-width parquet physical type.
_PARQUET_WIDTHS = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}
_DICTIONARY_ENCODINGS = frozenset({"PLAIN_DICTIONARY", "RLE_DICTIONARY"})
# What one value takes as a Python object (its header, a list's slot) once a table is turned into Python
# values (``to_pylist``); its bytes (a string's) count again on top.
PYTHON_VALUE_BYTES = 100
# How many rows a streamed parquet column (``--data``'s text or image column) is read at once.
PARQUET_BATCH_ROWS = 256


def size_words(n: int) -> str:
    """``n`` bytes in words: ``"2.56 GB"``, ``"4.0 MB"``, ``"4.1 kB"``, ``"512 bytes"`` (a size below a tenth of a
    megabyte in kilobytes or bytes, never ``"0.0 MB"``). A size is written in the larger unit where its rounded
    figure would reach it: 99,999 bytes read ``"0.1 MB"``, never ``"100.0 kB"``."""
    if n < 1000:
        return f"{n} bytes"
    for scale, unit, below in ((1e3, "kB", 100.0), (1e6, "MB", 1000.0)):
        words = f"{n / scale:.1f}"
        if float(words) < below:
            return f"{words} {unit}"
    return f"{n / 1e9:.2f} GB"


def memory_limit() -> int:
    """The bytes a file read into memory may take: the memory this process can still use
    (:func:`mhaaudit.hostmem.available_memory`, cgroup-aware)."""
    return hostmem.available_memory()


def _leaf_counts(t) -> int:
    """The parquet leaf columns an arrow type is stored in (a struct's and a map's fields each their own)."""
    import pyarrow as pa

    if pa.types.is_struct(t):
        return sum(_leaf_counts(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaf_counts(t.key_type) + _leaf_counts(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaf_counts(t.value_type)
    return 1


def decoded_bytes(arr) -> int:
    """The bytes an Arrow array read with dictionary-encoded leaves (``read_dictionary``) takes once its
    dictionaries are decoded, as a plain read makes them: every row's value bytes (a value repeated
    a million times through one dictionary entry counts a million times) and 8 bytes of offsets
    each; other leaves as they lie. Nothing is decoded to count it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(arr, pa.ChunkedArray):
        return sum(decoded_bytes(c) for c in arr.chunks)
    if isinstance(arr, pa.DictionaryArray):
        lengths = pc.binary_length(arr.dictionary).cast(pa.int64())
        total = pc.sum(pc.take(lengths, arr.indices)).as_py() or 0
        return int(total) + 8 * len(arr)
    if isinstance(arr, pa.MapArray):
        return decoded_bytes(arr.keys) + decoded_bytes(arr.items) + 8 * len(arr)
    if isinstance(arr, pa.StructArray):
        return sum(decoded_bytes(child) for child in arr.flatten()) + len(arr)
    if isinstance(arr, pa.ListArray | pa.LargeListArray | pa.FixedSizeListArray):
        return decoded_bytes(arr.flatten()) + 8 * len(arr)
    return int(arr.nbytes)


def _plain_bytes(t) -> bool:
    """Whether the arrow type ``t`` holds a text or binary leaf that is not dictionary-encoded."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        return False
    if pa.types.is_struct(t):
        return any(_plain_bytes(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _plain_bytes(t.key_type) or _plain_bytes(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _plain_bytes(t.value_type)
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _column_owners(arrow) -> list[str]:
    """The top-level column of each leaf column of the Arrow schema ``arrow``, in the parquet file's leaf order."""
    return [n for n, t in zip(arrow.names, arrow.types, strict=True) for _ in range(_leaf_counts(t))]


def dictionary_reader(source, top: str):
    """A ``pq.ParquetFile`` of ``source`` that reads every text and binary leaf of the top-level column ``top`` as a
    dictionary (nothing decoded row by row), or None when ``read_dictionary`` cannot name them all (a name
    holding a dot is ambiguous there)."""
    import pyarrow.parquet as pq

    schema = pq.ParquetFile(source).schema
    leaves = [schema.column(c).path for c in range(len(schema)) if schema.column(c).physical_type == "BYTE_ARRAY"]
    mine = [leaf for leaf in leaves if leaf == top or leaf.startswith(top + ".")]
    reader = pq.ParquetFile(source, read_dictionary=mine)
    index = reader.schema_arrow.get_field_index(top)
    return None if index < 0 or _plain_bytes(reader.schema_arrow.field(index).type) else reader


def parquet_need(
    path: str | os.PathLike | IO[bytes],
    columns: Collection[str] | None = None,
    *,
    python: bool = False,
    limit: int | None = None,
    largest_group: bool = False,
) -> tuple[int, str]:
    """What reading the parquet file ``path`` (a name, or a seekable binary file: an archive's member) whole
    (``pq.read_table``, then ``to_pylist`` with ``python``) takes in memory, and that in words; with ``columns``,
    only those top-level columns are counted (the others are not read); with ``largest_group``, what its largest
    row group takes read alone (a reader that reads a row group at a time, as the ``datasets`` library does), the
    words naming that row group.

    Counted from the footer: every value of every column chunk (a run of zeros declares millions of
    values in a few bytes), 8 bytes of offsets per text or binary value and per list, and at least each
    chunk's uncompressed size. A dictionary-encoded text or binary chunk decodes to one copy of its entry
    per row (a few KB holding one string and ten million indices decode to ten million copies): once what
    the footer declares fits ``limit``, those chunks are read as dictionaries, one row group at a time (what
    that takes is in the footer's count), and their rows' value bytes counted exactly (:func:`decoded_bytes`;
    past ``limit`` the count stops, a floor). A column that ``read_dictionary`` cannot name apart from another
    (``a.b`` beside a struct ``a`` with a field ``b``) counts each entry as long as its chunk's uncompressed
    size. Each Python value adds :data:`PYTHON_VALUE_BYTES`, and its bytes again.

    Raises:
        OSError, pyarrow.ArrowException: when the footer or a dictionary cannot be read.
    """
    import pyarrow.parquet as pq

    with contextlib.nullcontext(path) if hasattr(path, "read") else arrow_source(path) as source:
        parquet = pq.ParquetFile(source)
        meta, arrow = parquet.metadata, parquet.schema_arrow
        owners = _column_owners(arrow)
        wanted = set(arrow.names if columns is None else columns)
        counted = [c for c in range(meta.num_columns) if c < len(owners) and owners[c] in wanted]
        sizes = [0] * meta.num_row_groups  # what reading each row group takes
        grown = [0] * meta.num_row_groups  # of which its dictionary-encoded text, decoded
        pending = dict[tuple[int, str], int]()
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in counted:
                chunk, leaf = group.column(c), parquet.schema.column(c)
                n, kind, packed = int(chunk.num_values), chunk.physical_type, int(chunk.total_uncompressed_size)
                width = leaf.length if kind == "FIXED_LEN_BYTE_ARRAY" else _PARQUET_WIDTHS.get(kind, 8)
                fixed = n * (width + 8 * leaf.max_repetition_level) + n // 8 + 1  # values, list offsets, validity
                dictionary = chunk.has_dictionary_page or bool(_DICTIONARY_ENCODINGS & set(chunk.encodings))
                sizes[g] += n * PYTHON_VALUE_BYTES if python else 0
                if kind == "BYTE_ARRAY" and dictionary:
                    sizes[g] += fixed + packed  # the indices and the dictionary; its rows' bytes are counted below
                    pending.setdefault((g, owners[c]), 0)
                else:
                    sizes[g] += max(fixed + (packed if kind == "BYTE_ARRAY" else 0), packed)
        total = sum(sizes)
        if pending and (limit is None or (max(sizes) if largest_group else total) <= limit):
            readers: dict[str, Any] = {}
            for g, top in pending:
                if top not in readers:
                    readers[top] = dictionary_reader(source, top)
                if readers[top] is None:  # each entry at most its chunk's size, on every row
                    chunks = [meta.row_group(g).column(c) for c in counted if owners[c] == top]
                    more = sum(int(k.num_values) * int(k.total_uncompressed_size) for k in chunks)
                else:
                    more = decoded_bytes(readers[top].read_row_group(g, columns=[top], use_threads=False).column(0))
                grown[g] += more
                more *= 2 if python else 1  # Arrow's bytes, then Python's
                sizes[g], total = sizes[g] + more, total + more
                if limit is not None and (sizes[g] if largest_group else total) > limit:
                    break  # enough to refuse
    g = max(range(meta.num_row_groups), key=sizes.__getitem__, default=-1) if largest_group else -1
    if g >= 0:
        total, expanded = sizes[g], grown[g]
        words = f"its row group {g} (of {meta.num_row_groups}) declares {meta.row_group(g).num_rows} rows"
    else:
        expanded, words = sum(grown), f"its footer declares {meta.num_rows} rows"
    words += f" of {len(counted)} columns"
    if expanded:
        words += f", its dictionary-encoded text decodes to at least {size_words(expanded)}"
    return total, words


def check_parquet(
    path: str | os.PathLike | IO[bytes],
    error: type[MhaauditError],
    what: str = "",
    columns: Collection[str] | None = None,
    *,
    python: bool = False,
    factor: int = 1,
    hint: str = "",
    largest_group: bool = False,
) -> None:
    """Check, before it is read, that reading the parquet file ``path`` (a name, or with ``largest_group`` a
    seekable binary file: an archive's member) whole fits :func:`memory_limit`: ``factor`` times what
    :func:`parquet_need` counts (2 where the table is copied once more). ``what`` starts the message (default:
    the path), ``hint`` ends it. With ``largest_group``, for a reader that reads a row group at a time, what its
    largest row group takes must fit, however large the file.

    Raises:
        MhaauditError: of type ``error``, when ``path`` is not a regular file (:func:`regular_file`), its
            footer cannot be read, or reading it needs more than the memory available.
    """
    p = path if hasattr(path, "read") else regular_file(path, error, what)
    size = p.stat().st_size if isinstance(p, Path) else 0  # (a member: its row groups alone are counted)
    label = what or str(p)
    limit = memory_limit()
    try:
        need, words = parquet_need(
            p, columns, python=python, limit=limit // max(1, factor), largest_group=largest_group
        )
    except MhaauditError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types; all mean an unreadable file here
        raise error(label + f": cannot read it as a parquet file ({one_line(exc, 160)})") from None
    need = need * factor if largest_group else max(need * factor, size)
    if need > limit:
        how = "it a row group at a time" if largest_group else "it"
        raise error(
            label + f": reading {how} needs at least {size_words(need)} in memory ({words}), more than the "
            f"{size_words(limit)} available" + ("; " + hint if hint else "")
        )


def read_parquet(
    path: str | os.PathLike,
    error: type[MhaauditError],
    what: str = "",
    columns: Collection[str] | None = None,
    *,
    python: bool = False,
    factor: int = 1,
    hint: str = "",
):
    """The parquet file ``path`` read whole as an Arrow table (only ``columns`` when given), once
    :func:`check_parquet` has found that it fits the memory available: every read of a whole parquet
    file a user names goes through here.

    Raises:
        MhaauditError: of type ``error``, as :func:`check_parquet` raises.
        OSError, pyarrow.ArrowException: when the file cannot be read (the caller words it).
    """
    import pyarrow.parquet as pq

    check_parquet(path, error, what, columns, python=python, factor=factor, hint=hint)
    with arrow_source(path) as source:
        return pq.read_table(source, columns=None if columns is None else list(columns))


def stream_column(
    path: str | os.PathLike, column: str, error: type[MhaauditError], what: str = "", rows: int = PARQUET_BATCH_ROWS
):
    """The Python values of the top-level column ``column`` of the parquet file ``path``, read ``rows`` at a
    time: its text and binary leaves as dictionaries, and each batch sized (:func:`decoded_bytes`, and
    :data:`PYTHON_VALUE_BYTES` a value) before it is decoded, so that a batch of a string repeated
    through one dictionary entry never expands past the memory available. Each row group's chunks of
    the column must fit first (a page is decompressed whole).

    Raises:
        MhaauditError: of type ``error``, when a row group's chunks of the column, or a batch decoded, would
            take more than the memory available.
        OSError, pyarrow.ArrowException: when the file cannot be read (the caller words it).
    """
    import pyarrow.parquet as pq

    label = what or os.fspath(path)
    with arrow_source(path) as source:
        parquet = pq.ParquetFile(source)
        meta, arrow = parquet.metadata, parquet.schema_arrow
        owners = _column_owners(arrow)
        mine = [c for c in range(meta.num_columns) if c < len(owners) and owners[c] == column]
        groups = [[meta.row_group(g).column(c) for c in mine] for g in range(meta.num_row_groups)]
        packed = max((sum(int(k.total_uncompressed_size) for k in chunks) for chunks in groups), default=0)
        reader = dictionary_reader(source, column)
        if reader is None:  # a name read_dictionary cannot take: each entry at most its chunk's size, on every row
            packed += rows * max((int(k.total_uncompressed_size) for chunks in groups for k in chunks), default=0)
        limit = memory_limit()
        if packed > limit:
            raise error(
                label + f": reading its column {column!r} needs at least {size_words(packed)} in memory (a row "
                f"group's chunks of it, as its footer declares), more than the {size_words(limit)} available"
            )
        batches = (  # a row group at a time: a nested column's dictionaries change between them
            batch
            for g in range(meta.num_row_groups)
            for batch in (reader or parquet).iter_batches(rows, row_groups=[g], columns=[column], use_threads=False)
        )
        for batch in batches:
            values = batch.column(0)
            need = 2 * decoded_bytes(values) + len(values) * PYTHON_VALUE_BYTES  # Arrow's copy, then Python's
            if need > limit:
                raise error(
                    label + f": {len(values)} rows of its column {column!r} decode to {size_words(need)} in memory "
                    f"(a value a row, as Arrow's and then as Python's), more than the {size_words(limit)} available"
                )
            yield from values.to_pylist()
