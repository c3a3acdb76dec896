"""The check of a local webdataset folder's shards before the ``datasets`` library reads them (:func:`size_shards`):
its reader holds each example's members whole, so what each example declares (a tar or zip member's size, read from
its header; a compressed member's size, decompressed) must fit a share of the memory available.
"""

from __future__ import annotations

import os
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from typing import Any

from .. import files as file_checks
from ..errors import DataError, one_line
from ..files import size_words

__all__ = ["size_shards"]

# A compressed member is decompressed this many bytes at a time while it is sized, never held.
_SCAN_CHUNK = 1 << 20
# What the reader holds of an example (its members' bytes, their decoded values, its Arrow form, the row handed on)
# must fit this share of the memory available, as a text data file's batch must (folder_checks).
_HELD_COPIES = 4
# The examples the reader reads at once from a split's first shard to find the features, where none are declared.
_FIRST_EXAMPLES = 5


def size_shards(folder: str, builder, split: str) -> None:
    """Check that what the ``datasets`` library's webdataset reader holds at once of a local dataset folder's shards
    fits a quarter of the memory available (:data:`_HELD_COPIES`), before it reads them. The reader reads a ``.tar``
    shard (gzip, bzip2 or xz compressed too, as ``tarfile`` finds it) or a ``.zip`` one member by member, each
    whole, and holds an example whole (consecutive members of one key: ``k1.jpg``, ``k1.json``), a member whose name
    ends with a compression suffix (``k1.json.gz``) decompressed; to find the features, when the folder's metadata
    declares none, it first holds the first :data:`_FIRST_EXAMPLES` examples of a shard at once. The split's shards
    are sized through, the first shard of every other split over its first examples. Only the headers are read (a
    plain tar's members are skipped over, a compressed tar is decompressed through, never held) and compressed
    members decompressed, never held; a member that is no regular file (a link, a device) or whose name is hidden
    is one the reader skips (it never follows a link nor writes a file by a member's name), and is not counted.

    Raises:
        DataError: naming the shard and the example (or the first examples), what they hold and the limit; or when a
            shard or a compressed member cannot be read as the reader reads it.
    """
    try:
        from datasets.packaged_modules.webdataset.webdataset import WebDataset, base_plus_ext
    except ImportError:  # a datasets version without a webdataset reader
        return
    if not isinstance(builder, WebDataset):
        return
    memory = file_checks.memory_limit()
    limit = memory // _HELD_COPIES
    infer = not builder.info.features
    for named, names in (getattr(builder.config, "data_files", None) or {}).items():
        for index, name in enumerate(map(str, names)):
            first = _FIRST_EXAMPLES if infer and index == 0 else 0
            if str(named) != split and not first:
                continue
            label = f"dataset folder {folder}: its data file {name} (split {named})"
            examples = _examples(_members(name, label, limit, _reads_as_zip(name)), base_plus_ext)
            _size_examples(examples, label, first, str(named) == split, limit, memory)


def _size_examples(
    examples: Iterator[tuple[int, str, int, int]], label: str, first: int, through: bool, limit: int, memory: int
) -> None:
    """Refuse the shard ``label`` names when an example of ``examples`` (:func:`_examples`) holds more than ``limit``,
    or its first ``first`` examples do, together; ``through``: all its examples are read, else only the first
    ``first``.

    Raises:
        DataError: naming the example (or the first examples), what they hold and the limit.
    """
    tail = f"more than the {size_words(limit)} allowed (a quarter of the {size_words(memory)} available)"
    before, last, held = 0, 0, 0  # the bytes of the first examples before this one; this one's number and bytes
    for index, key, members, now in examples:
        if index != last:
            before, last = before + held, index
            if not through and index >= first:
                return
        held = now
        if held > limit:
            raise DataError(
                label
                + f": its example {key[:200]!r} holds at least {size_words(held)} at once ("
                + (f"its {members} members" if members > 1 else "its member")
                + " as the shard's headers declare them, decompressed where compressed), "
                + tail
                + "; the datasets library reads an example's members whole"
            )
        if index < first and before + held > limit:
            raise DataError(
                label + f": its first {index + 1} examples hold at least {size_words(before + held)} at once (their "
                "members as the shard's headers declare them, decompressed where compressed), " + tail + "; the "
                f"datasets library reads the first {first} examples of a shard at once to find the features"
            )


def _examples(members: Iterator[tuple[str, int]], key_of: Callable[[str], tuple[Any, Any]]):
    """(number, key, members, bytes) of each example of a shard's ``members`` (name, bytes) as the reader groups
    them (consecutive members of one key, ``key_of`` the reader's ``base_plus_ext``; a member without a key is never
    read), yielded after each of its members, its bytes so far."""
    index, key, count, held = -1, None, 0, 0
    for name, size in members:
        now, _ = key_of(name)
        if now is None:
            continue
        if now != key:
            index, key, count, held = index + 1, now, 0, 0
        count, held = count + 1, held + size
        yield index, now, count, held


def _members(name: str, label: str, limit: int, is_zip: bool) -> Iterator[tuple[str, int]]:
    """(name, bytes) of each member of the shard ``name`` that the reader reads: a regular file whose name is not
    hidden, its bytes as its header declares them, decompressed where its name has a compression suffix (the count
    stopping past ``limit``); ``is_zip``: a zip shard, else a tar one.

    Raises:
        DataError: when the shard or a compressed member cannot be read.
    """
    decompressors = _member_decompressors()
    try:
        if is_zip:
            with zipfile.ZipFile(name) as archive:
                for info in archive.infolist():
                    if not info.is_dir() and not _hidden(info.filename):
                        opener = decompressors.get(_suffix(info.filename))
                        size = info.file_size  # what the reader can get out of it: zipfile stops there
                        yield info.filename, size if opener is None else _size_of(archive.open(info), opener, limit)
            return
        with _open_tar(name) as tar:
            while (entry := tar.next()) is not None:
                tar.members = []  # type: ignore[attr-defined]  # (the reader keeps none either: no list of them)
                if entry.isreg() and not _hidden(entry.name):
                    opener = decompressors.get(_suffix(entry.name))
                    stream = tar.extractfile(entry) if opener is not None else None
                    yield entry.name, entry.size if stream is None else _size_of(stream, opener, limit)
    except DataError:
        raise
    except (OSError, EOFError, ValueError, tarfile.TarError, zipfile.BadZipFile) as exc:
        raise DataError(
            label + f": cannot read it as the datasets library's webdataset reader does ({one_line(exc, 160)})"
        ) from None


def _open_tar(name: str) -> tarfile.TarFile:
    """The tar shard ``name`` as the reader reads it (``tarfile``'s ``r|*``: plain, gzip, bzip2 or xz), opened so
    that a plain one's members are skipped over, not read.

    Raises:
        tarfile.TarError, OSError: when it is no tar archive.
    """
    try:
        return tarfile.open(name, "r:")
    except tarfile.ReadError:  # compressed (or no tar archive at all: the stream says so)
        return tarfile.open(name, "r|*")


def _size_of(stream, opener, limit: int) -> int:
    """The bytes of the compressed member ``stream`` once decompressed with ``opener``, read
    :data:`_SCAN_CHUNK` bytes at a time, never held; the count stops past ``limit``."""
    total = 0
    with opener(stream, mode="rb") as inner:
        while total <= limit and (chunk := inner.read(_SCAN_CHUNK)):
            total += len(chunk)
    return total


def _member_decompressors() -> dict[str, Any]:
    """The member name suffixes the reader decompresses a member by (``.gz``...), and their decompressors."""
    try:
        from datasets.filesystems import EXTENSION_TO_COMPRESSION_FS_FILE_CLS
    except ImportError:  # a datasets version that decompresses no member
        return {}
    return dict(EXTENSION_TO_COMPRESSION_FS_FILE_CLS)


def _suffix(name: str) -> str:
    """The last suffix of a member name, lower case, as the reader finds it (``a.JSON.GZ``: ``.gz``)."""
    return "." + name.split(".")[-1].lower()


def _hidden(name: str) -> bool:
    """Whether the reader skips a member by its name (hidden: ``.a``, ``__MACOSX``...)."""
    return os.path.basename(name).startswith((".", "__"))


def _reads_as_zip(name: str) -> bool:
    """Whether the reader reads the shard ``name`` as a zip archive, not a tar one: the ``datasets`` library's rule for
    a file's compression (its suffix, else its magic number), else the suffix's."""
    try:
        from datasets.utils.file_utils import _get_extraction_protocol
    except ImportError:  # an older datasets version
        return name.lower().endswith(".zip")
    return _get_extraction_protocol(name) == "zip"
