"""The check of a local webdataset folder's shards before the ``datasets`` library reads them (:func:`size_shards`):
its reader holds each example's members whole, each decoded by its name's extension, so what each example declares
(a tar or zip member's size, read from its header; a compressed member's size, decompressed; a decoded member's
size, decoded) must fit a share of the memory available.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import os
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from typing import IO, Any, NamedTuple

from numpy.lib import format as npy_format

from .. import files as file_checks
from ..errors import DataError, one_line
from ..files import HELD_COPIES, SCAN_CHUNK, size_words

__all__ = ["size_shards"]

# The examples the reader reads at once from a split's first shard to find the features, where none are declared.
_FIRST_EXAMPLES = 5
# What a member's Python objects may take per byte of it once the reader decodes it, measured with tracemalloc on
# Python 3.11: JSON text of nested one-element lists (``[[[...]]]``, 2 bytes a list) took 44 times its bytes,
# of nested one-entry maps (``{"":{"":...}}``) 37 times; msgpack or CBOR of nested one-entry maps (2 bytes a map) 92
# times, as a pickle's opcodes (``}``: an empty dict, 1 byte) can.
_JSON_GROWTH = 48
_BINARY_GROWTH = 96


class _Decoding(NamedTuple):
    """How a member the reader decodes is counted: its bytes times ``growth``, or what ``declared`` (its stream, its
    bytes) reads that it declares decoded; ``how`` says which, in a refusal."""

    growth: int
    declared: Callable[[IO[bytes], int], int] | None
    how: str


def size_shards(folder: str, builder, split: str, examples: int | None = None) -> None:
    """Check that what the ``datasets`` library's webdataset reader holds at once of a local dataset folder's shards
    fits a quarter of the memory available (:data:`HELD_COPIES`), before it reads them. The reader reads a ``.tar``
    shard (gzip, bzip2 or xz compressed too, as ``tarfile`` finds it) or a ``.zip`` one member by member, each
    whole, and holds an example whole (consecutive members of one key: ``k1.jpg``, ``k1.json``), a member whose name
    ends with a compression suffix (``k1.json.gz``) decompressed; to find the features, when the folder's metadata
    declares none, it first holds the first :data:`_FIRST_EXAMPLES` examples of a shard at once. The split's shards
    that hold its first ``examples`` examples (all where None) are sized through before the reader is made, each
    later one as the reader opens it, before it reads a member of it (:func:`_size_when_opened`: a run that reads a
    few examples of a large folder reads the headers of a few shards); the first shard of the split the reader
    finds the features from (the last of the folder's splits) is sized over its first examples, and so is the
    split read's. Only the headers are read (a
    plain tar's members are skipped over, a compressed tar is decompressed through, never held) and compressed
    members decompressed, never held; a member that is no regular file (a link, a device) or whose name is hidden
    is one the reader skips (it never follows a link nor writes a file by a member's name), and is not counted.
    The reader decodes a member by its extension (its ``DECODERS``), and a decoded value can take far more than the
    member's bytes: a ``.npy`` member is counted as the array its header declares, a ``.npz`` one as the arrays its
    zip directory declares, a ``.pth`` one as the records its zip directory declares (its pickles, or the whole
    member where it is no zip archive, at :data:`_BINARY_GROWTH` times their bytes), and a JSON, msgpack
    or CBOR one at :data:`_JSON_GROWTH` or :data:`_BINARY_GROWTH` times its bytes (their Python objects); only
    those members' zip directories or array headers are read (the member held where it is compressed or its shard
    a compressed tar, as it is no larger than the limit).

    Raises:
        DataError: naming the shard and the example (or the first examples), what they hold and the limit; or when a
            shard or a compressed member cannot be read as the reader reads it.
    """
    try:
        from datasets.packaged_modules.webdataset.webdataset import WebDataset
    except ImportError:  # a datasets version without a webdataset reader
        return
    if not isinstance(builder, WebDataset):
        return
    memory = file_checks.memory_limit()
    limit = memory // HELD_COPIES
    decoders = set(getattr(WebDataset, "DECODERS", None) or ())
    infer = not builder.info.features
    later: list[str] = []  # the split's shards past the first ``examples``, sized when the reader opens each
    count = 0  # the split's shards
    files = getattr(builder.config, "data_files", None) or {}
    # the split whose first shard the reader reads to find the features: the last one it was given (the one its loop
    # over the splits ends on), and the split read, should a version take that one
    inferred = {str(list(files)[-1]), split} if infer and files else set()
    for named, names in files.items():
        held = 0  # the examples of the split's shards sized so far
        count = len(names) if str(named) == split else count
        for index, name in enumerate(map(str, names)):
            first = _FIRST_EXAMPLES if index == 0 and str(named) in inferred else 0
            through = str(named) == split and (examples is None or held < examples)
            if str(named) == split and not through:
                later.append(name)
            if through or first:
                held += _size_shard(folder, name, str(named), decoders, limit, memory, first, through)
    if later:
        _size_when_opened(
            builder,
            split,
            count,
            later,
            functools.partial(_size_shard, folder, decoders=decoders, limit=limit, memory=memory),
        )


def _size_shard(
    folder: str, name: str, named: str, decoders: set[str], limit: int, memory: int, first: int = 0, through=True
) -> int:
    """:func:`size_shards` of the shard ``name`` of the split ``named``: its first ``first`` examples together, and
    each of them where ``through``; returns the examples sized.

    Raises:
        DataError: as :func:`size_shards`.
    """
    from datasets.packaged_modules.webdataset.webdataset import base_plus_ext

    label = f"dataset folder {folder}: its data file {name} (split {named})"
    members = _members(name, label, limit, _reads_as_zip(name), decoders)
    return _size_examples(_examples(members, base_plus_ext), label, first, through, limit, memory)


class _SizedWhenOpened:
    """One shard's members as the reader iterates them (its ``tar_iterators`` entry), the shard sized
    (``size()``) when the reader first opens it, before it reads a member."""

    def __init__(self, members, size: Callable[[], Any]) -> None:
        self.members, self.size, self.sized = members, size, False

    def __iter__(self):
        if not self.sized:
            self.size()
            self.sized = True
        return iter(self.members)


def _size_when_opened(builder, split: str, count: int, later: list[str], size: Callable[..., int]) -> None:
    """Have the last shards ``later`` of the ``count`` shards of the split ``split`` sized (``size(name, split)``) each
    when the reader opens it: the builder's split generators hand the reader each shard's members as
    :class:`_SizedWhenOpened`; where they do not hand them as this ``datasets`` version does (a list of ``count``
    beside as many ``tar_paths``, in the order of the folder's data files), those shards are all sized as the
    reader is made, before it reads any."""
    made = builder._split_generators

    def split_generators(dl_manager):
        generators = made(dl_manager)
        for generator in generators:
            kwargs = getattr(generator, "gen_kwargs", None)
            if str(getattr(generator, "name", "")) != split:
                continue
            shards = kwargs.get("tar_iterators") if isinstance(kwargs, dict) else None
            paths = kwargs.get("tar_paths") if isinstance(kwargs, dict) else None
            if not isinstance(shards, list) or not isinstance(paths, list) or not len(shards) == len(paths) == count:
                for name in later:
                    size(name, split)
                continue
            skip = len(shards) - len(later)  # (the first shards were sized before)
            kwargs["tar_iterators"] = shards[:skip] + [
                _SizedWhenOpened(members, functools.partial(size, name, split))
                for members, name in zip(shards[skip:], later, strict=False)
            ]
        return generators

    builder._split_generators = split_generators


def _size_examples(
    examples: Iterator[tuple[int, str, int, int, Any]], label: str, first: int, through: bool, limit: int, memory: int
) -> int:
    """Refuse the shard ``label`` names when an example of ``examples`` (:func:`_examples`) holds more than ``limit``,
    or its first ``first`` examples do, together; ``through``: all its examples are read, else only the first
    ``first``. Returns the number of examples read.

    Raises:
        DataError: naming the example (or the first examples), what they hold and the limit.
    """
    tail = f"more than the {size_words(limit)} allowed (a quarter of the {size_words(memory)} available)"
    before, last, held = 0, -1, 0  # the bytes of the first examples before this one; this one's number and bytes
    for index, key, members, now, decoded in examples:
        if index != last:
            before, last = before + held, index
            if not through and index >= first:
                return index
        held = now
        if held > limit:
            raise DataError(
                label
                + f": its example {key[:200]!r} holds at least {size_words(held)} at once ("
                + (f"its {members} members" if members > 1 else "its member")
                + " as the shard's headers declare them, decompressed where compressed"
                + _decoded_words(decoded)
                + "), "
                + tail
                + "; the datasets library reads an example's members whole"
            )
        if index < first and before + held > limit:
            raise DataError(
                label + f": its first {index + 1} examples hold at least {size_words(before + held)} at once (their "
                "members as the shard's headers declare them, decompressed where compressed, decoded as the datasets "
                "library decodes them" + _decoded_words(decoded) + "), " + tail + "; the "
                f"datasets library reads the first {first} examples of a shard at once to find the features"
            )
    return last + 1


def _decoded_words(decoded: tuple[str, int, str] | None) -> str:
    """The words naming an example's member counted decoded (name, bytes, how; None: none) in a refusal."""
    if decoded is None:
        return ""
    return f"; its member {decoded[0][:200]!r} counted at {size_words(decoded[1])} decoded: {decoded[2]}"


def _examples(members: Iterator[tuple[str, int, str]], key_of: Callable[[str], tuple[Any, Any]]):
    """(number, key, members, bytes, decoded) of each example of a shard's ``members`` (name, bytes, how a decoded
    one is counted) as the reader groups them (consecutive members of one key, ``key_of`` the reader's
    ``base_plus_ext``; a member without a key is never read), yielded after each of its members, its bytes so far;
    ``decoded``: (name, bytes, how) of its largest member counted decoded so far, else None."""
    index, key, count, held, decoded = -1, None, 0, 0, None
    for name, size, how in members:
        now, _ = key_of(name)
        if now is None:
            continue
        if now != key:
            index, key, count, held, decoded = index + 1, now, 0, 0, None
        count, held = count + 1, held + size
        if how and (decoded is None or size > decoded[1]):
            decoded = (name, size, how)
        yield index, now, count, held, decoded


def _members(name: str, label: str, limit: int, is_zip: bool, decoders: set[str]) -> Iterator[tuple[str, int, str]]:
    """(name, bytes, how) of each member of the shard ``name`` that the reader reads: a regular file whose name is not
    hidden, its bytes as its header declares them, decompressed where its name has a compression suffix (the count
    stopping past ``limit``), or as :func:`_member` counts it decoded (``how`` then says how, else it is empty);
    ``is_zip``: a zip shard, else a tar one; ``decoders``: the extensions the reader decodes.

    Raises:
        DataError: when the shard or a compressed member cannot be read.
    """
    decompressors = _member_decompressors()
    try:
        if is_zip:
            with zipfile.ZipFile(name) as archive:
                for info in archive.infolist():
                    if not info.is_dir() and not _hidden(info.filename):
                        size = info.file_size  # what the reader can get out of it: zipfile stops there
                        opened = functools.partial(archive.open, info)
                        yield _member(info.filename, size, opened, True, decompressors, decoders, limit)
            return
        tar, seekable = _open_tar(name)
        with tar:
            while (entry := tar.next()) is not None:
                tar.members = []  # type: ignore[attr-defined]  # (the reader keeps none either: no list of them)
                if entry.isreg() and not _hidden(entry.name):
                    extracted = functools.partial(tar.extractfile, entry)
                    yield _member(entry.name, entry.size, extracted, seekable, decompressors, decoders, limit)
    except DataError:
        raise
    except (OSError, EOFError, ValueError, tarfile.TarError, zipfile.BadZipFile) as exc:
        raise DataError(
            label + f": cannot read it as the datasets library's webdataset reader does ({one_line(exc, 160)})"
        ) from None


def _member(
    name: str,
    size: int,
    opened: Callable[[], Any],
    seekable: bool,
    decompressors: dict[str, Any],
    decoders: set[str],
    limit: int,
) -> tuple[str, int, str]:
    """(name, bytes, how) of the shard member ``name`` of ``size`` bytes (``opened``: its stream; ``seekable``:
    one that seeks, as a plain tar's or a zip's do): decompressed where its name has a compression suffix, and where
    the reader decodes it by a rule of :data:`_DECODINGS` counted as that rule says (the most of that and its bytes),
    ``how`` then saying how, else empty. A member whose bytes pass ``limit`` is refused as it is, and one that is not
    what its decoder reads (the reader fails on it) counted by its bytes."""
    opener = decompressors.get(_suffix(name))
    extension = _decoded_extension(name, opener is not None)
    rule = _DECODINGS.get(extension) if extension in decoders else None
    if rule is None:
        return name, size if opener is None else _size_of(opened(), opener, limit), ""
    if opener is None and size > limit:
        return name, size, ""
    if rule.declared is None:
        size = size if opener is None else _size_of(opened(), opener, limit)
        return name, size * rule.growth, rule.how
    if opener is None and seekable:
        with opened() as stream:
            return _declared(name, size, rule.declared, rule.how, stream)
    # held, no larger than the limit: a compressed one, or one of a compressed tar (read once, through)
    with opener(opened(), mode="rb") if opener is not None else contextlib.nullcontext(opened()) as inner:
        data = inner.read(limit + 1)
    return (
        (name, len(data), "")
        if len(data) > limit
        else _declared(name, len(data), rule.declared, rule.how, io.BytesIO(data))
    )


def _declared(
    name: str, size: int, declared: Callable[[IO[bytes], int], int], how: str, stream: IO[bytes]
) -> tuple[str, int, str]:
    """(name, bytes, ``how``) of the member ``name`` of ``size`` bytes (``stream``: its bytes, decompressed) as
    ``declared`` reads what it declares decoded, where that is more than its bytes, else (name, its bytes, ""); one
    that is not what its decoder reads (the reader fails on it) is counted by its bytes."""
    try:
        decoded = declared(stream, size)
    except (ValueError, EOFError, zipfile.BadZipFile):
        return name, size, ""
    return (name, decoded, how) if decoded > size else (name, size, "")


def _decoded_extension(name: str, compressed: bool) -> str:
    """The extension the reader picks a member's decoder by: its name's last, that of its name without the
    compression suffix where ``compressed`` (``k1.json.gz``: ``json``)."""
    if not compressed:
        return name.split(".")[-1].lower()
    try:
        from datasets.utils.file_utils import xbasename
    except ImportError:  # an older datasets version
        xbasename = os.path.basename
    return xbasename(".".join(name.split(".")[:-1])).split(".")[-1].lower()


def _npy_bytes(stream: IO[bytes], size: int) -> int:
    """The bytes of the array a ``.npy`` file declares in its header (its shape times its item size), which the
    reader's decoder allocates before it reads the data.

    Raises:
        ValueError: when it is no ``.npy`` file.
    """
    version = npy_format.read_magic(stream)
    reader = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
    shape, _, dtype = reader(stream)
    return math.prod(shape) * dtype.itemsize


def _zip_bytes(stream: IO[bytes], pickles: int = 1) -> int:
    """The uncompressed bytes a zip file's directory declares for its entries (what ``zipfile`` gets out of
    each), those of its ``.pkl`` entries times ``pickles``.

    Raises:
        zipfile.BadZipFile: when it is no zip file.
    """
    with zipfile.ZipFile(stream) as inner:
        return sum(i.file_size * (pickles if i.filename.endswith(".pkl") else 1) for i in inner.infolist())


def _npz_bytes(stream: IO[bytes], size: int) -> int:
    """What ``numpy.load`` holds of a ``.npz`` member: the arrays its zip directory declares (a deflated archive's
    arrays inflate), or the array a ``.npy`` file declares, as it loads either."""
    head = stream.read(len(npy_format.MAGIC_PREFIX))
    stream.seek(0)
    return _zip_bytes(stream) if head.startswith((b"PK\x03\x04", b"PK\x05\x06")) else _npy_bytes(stream, size)


def _pth_bytes(stream: IO[bytes], size: int) -> int:
    """What ``torch.load`` holds of a ``.pth`` member: a zip archive's records as its directory declares them, its
    pickles at :data:`_BINARY_GROWTH` times their bytes (their objects); a file of the older format (pickles and
    storages, not told apart without unpickling) all at :data:`_BINARY_GROWTH` times its bytes."""
    head = stream.read(4)
    stream.seek(0)
    return _zip_bytes(stream, _BINARY_GROWTH) if head == b"PK\x03\x04" else size * _BINARY_GROWTH


# The reader's decoders whose values can take far more than a member's bytes, by extension. A text member decodes to
# at most 4 times its bytes (one character beyond the BMP makes a str take 4 bytes a character), an integer or tenbin
# one to about its bytes: those are counted by their bytes, as the reader's other copies are (HELD_COPIES).
_PTH_HOW = (
    f"its zip records as declared, its pickles (or an older format's file whole) at {_BINARY_GROWTH} times their bytes"
)
_DECODINGS = {
    "json": _Decoding(_JSON_GROWTH, None, f"JSON at {_JSON_GROWTH} times its bytes"),
    "jsn": _Decoding(_JSON_GROWTH, None, f"JSON at {_JSON_GROWTH} times its bytes"),
    "mp": _Decoding(_BINARY_GROWTH, None, f"msgpack at {_BINARY_GROWTH} times its bytes"),
    "msg": _Decoding(_BINARY_GROWTH, None, f"msgpack at {_BINARY_GROWTH} times its bytes"),
    "cbor": _Decoding(_BINARY_GROWTH, None, f"CBOR at {_BINARY_GROWTH} times its bytes"),
    "npy": _Decoding(1, _npy_bytes, "the array its header declares"),
    "npz": _Decoding(1, _npz_bytes, "the arrays its zip directory declares"),
    "pth": _Decoding(1, _pth_bytes, _PTH_HOW),
    "pt": _Decoding(1, _pth_bytes, _PTH_HOW),  # (where a datasets version decodes it: torch.load too)
}


def _open_tar(name: str) -> tuple[tarfile.TarFile, bool]:
    """The tar shard ``name`` as the reader reads it (``tarfile``'s ``r|*``: plain, gzip, bzip2 or xz), opened so
    that a plain one's members are skipped over, not read; and whether its members seek (a plain one's do).

    Raises:
        tarfile.TarError, OSError: when it is no tar archive.
    """
    try:
        return tarfile.open(name, "r:"), True
    except tarfile.ReadError:  # compressed (or no tar archive at all: the stream says so)
        return tarfile.open(name, "r|*"), False


def _size_of(stream, opener, limit: int) -> int:
    """The bytes of the compressed member ``stream`` once decompressed with ``opener``, read
    :data:`SCAN_CHUNK` bytes at a time, never held; the count stops past ``limit``."""
    total = 0
    with opener(stream, mode="rb") as inner:
        while total <= limit and (chunk := inner.read(SCAN_CHUNK)):
            total += len(chunk)
    return total


def _member_decompressors() -> dict[str, Any]:
    """The member name suffixes the reader decompresses a member by (``.gz``...), and their decompressors."""
    try:
        from datasets.filesystems import EXTENSION_TO_COMPRESSION_FS_FILE_CLS
    except ImportError:
        pass
    else:
        return dict(EXTENSION_TO_COMPRESSION_FS_FILE_CLS)
    # Older releases (5.0 among them) decompress a member by the same suffixes through the library's compression
    # file systems, where the reader's module names their table of suffixes; one without it decompresses no member.
    try:
        from datasets.packaged_modules.webdataset import webdataset as reader
    except ImportError:  # a datasets version without a webdataset reader
        return {}
    protocols = getattr(reader, "SINGLE_FILE_COMPRESSION_EXTENSION_TO_PROTOCOL", {})  # gz: gzip
    from datasets.filesystems import COMPRESSION_FILESYSTEMS
    from fsspec.compression import compr  # what those releases decompress with (the datasets library imports fsspec)

    compressions = {fs.protocol: fs.compression for fs in COMPRESSION_FILESYSTEMS}
    return {f".{ext}": compr[compressions[p]] for ext, p in protocols.items() if compressions.get(p) in compr}


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
