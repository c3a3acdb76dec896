"""Writing outputs atomically; the provenance they are stamped with is :mod:`mhaaudit.provenance` and
the reading of feature files :mod:`mhaaudit.feature_files`, whose names this module re-exports."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .documents import METADATA_KEY
from .errors import MhaauditError, OutputError, Param
from .feature_files import FEATURE_EXTENSIONS as FEATURE_EXTENSIONS
from .feature_files import MAX_HEADER_BYTES as MAX_HEADER_BYTES
from .feature_files import MappedArray as MappedArray
from .feature_files import dense_values as dense_values
from .feature_files import parquet_declared_bytes as parquet_declared_bytes
from .feature_files import read_array as read_array
from .feature_files import refuse_results_file as refuse_results_file
from .feature_files import safetensors_header as safetensors_header
from .feature_files import to_query_matrix as to_query_matrix
from .feature_files import torch_declared_bytes as torch_declared_bytes
from .feature_files import torch_load_reason as torch_load_reason
from .files import kind_of, same_place, special_kind, within
from .provenance import library_versions as library_versions
from .provenance import stamp as stamp
from .staging import _STAGED, StagedOutputs, _reason, make_output_folder, staged_outputs  # noqa: F401 - re-exported
from .tables import records_table

# --------------------------------------------------------------------------- atomic writes


def _refuse_unnamable(p: Path, what: str | Param) -> None:
    """Refuse a path the system cannot name (a name longer than its file system takes, a loop of links).

    Raises:
        OutputError: when looking ``p`` up fails for another reason than its absence; ``what`` begins the message.
    """
    try:
        os.lstat(p)
    except (FileNotFoundError, NotADirectoryError):  # absent, or under a file: said with the folder's checks
        pass
    except OSError as exc:
        raise OutputError(what + f": {_reason(exc)}") from None


def _refuse_symlink(p: Path, what: str | Param) -> None:
    """Refuse a dangling symbolic link at an output path (writing would create a file wherever it points).

    Raises:
        OutputError: when ``p`` is a symbolic link whose target does not exist; ``what`` begins the message.
    """
    if p.is_symlink() and not p.exists():
        raise OutputError(
            what + f": it is a symbolic link to {os.readlink(p)}, which does not exist; "
            "remove the link or choose another path"
        )


def _refuse_special(p: Path, what: str | Param, expected: str) -> None:
    """Refuse an output path at which a device node, a named pipe or a socket stands (or a symbolic link to one):
    the output, renamed into place, would replace the node (as root, ``/dev/null`` itself).

    Raises:
        OutputError: when :func:`mhaaudit.files.special_kind` names what stands at ``p``; ``what`` begins the
            message, ``expected`` ("a regular file", "a folder") says what an output there must be.
    """
    kind = special_kind(p)
    if kind is not None:
        raise OutputError(what + f": it is {kind}, not {expected}; an output never replaces it: choose another path")


# What ``tempfile`` adds to a prefix: 8 random characters (and ``.tmp``, the suffix given here).
_RANDOM_CHARS = 8
_TMP_SUFFIX = ".tmp"


def temp_prefix(name: str, folder: Path, suffix: str = _TMP_SUFFIX) -> str:
    """``.NAME.``: the prefix of a temporary made beside ``NAME`` in ``folder`` (with ``suffix``), ``NAME``
    shortened (by its bytes) so that the temporary's whole name fits the longest name the folder's file
    system takes: a legal 255-byte output name has a legal temporary."""
    try:
        longest = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # not asked (no pathconf, or no such folder yet): the usual
        longest = 255
    room = max(1, longest - len(os.fsencode(f"..{suffix}")) - _RANDOM_CHARS)
    return f".{os.fsdecode(os.fsencode(name)[:room])}."


def check_writable(path: str | os.PathLike) -> Path:
    """Fail early, before any work, when ``path`` cannot be written; return it as a ``Path``.

    The file is replaced by a rename, so a symbolic link at ``path`` is replaced, never followed;
    a dangling one is refused.

    Raises:
        OutputError: when ``path`` is a folder, a dangling symbolic link, a device node, a named pipe or a socket
            (or a symbolic link to one), its folder is missing, is a file or is not writable (tried, not only read
            from the permission bits), or the file itself is not writable.
    """
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    _refuse_unnamable(p, f"cannot write {p}")
    _refuse_special(p, f"cannot write {p}", "a regular file")
    if p.exists() and p.is_dir():
        raise OutputError(f"cannot write {p}: it is a directory")
    _refuse_symlink(p, f"cannot write {p}")
    if not parent.exists():
        raise OutputError(f"cannot write {p}: folder {parent} does not exist")
    if not parent.is_dir():
        raise OutputError(f"cannot write {p}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"cannot write {p}: folder {parent} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise OutputError(f"cannot write {p}: file is not writable")
    try:  # the permission bits do not tell everything (/proc, a read-only mount, root): try it
        fd, probe = tempfile.mkstemp(prefix=temp_prefix(p.name, parent), suffix=_TMP_SUFFIX, dir=parent)
    except OSError as exc:
        raise OutputError(f"cannot write {p}: folder {parent} is not writable ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)
    return p


def check_folder_writable(folder: str | os.PathLike, option: str | Param) -> Path:
    """Fail early, before any work, when the folder ``option`` names cannot be made or written into; return it.

    Raises:
        OutputError: when ``folder`` is a dangling symbolic link, a file, a device node, a named pipe or a socket
            (or a symbolic link to one), its parent is missing or a file, or the folder (or its parent, when it does
            not exist yet) is not writable.
    """
    folder = Path(folder)
    parent = folder.parent if str(folder.parent) else Path(".")
    _refuse_unnamable(folder, option + f" {folder}")
    _refuse_special(folder, option + f" {folder}", "a folder")
    _refuse_symlink(folder, option + f" {folder}")
    if folder.exists() and not folder.is_dir():
        raise OutputError(option + f" {folder}: exists and is {kind_of(os.stat(folder).st_mode)}, not a folder")
    if not parent.exists():
        raise OutputError(option + f" {folder}: folder {parent} does not exist")
    if not parent.is_dir():
        raise OutputError(option + f" {folder}: {parent} is a file, not a folder")
    target = folder if folder.exists() else parent
    try:  # the permission bits do not tell everything (/proc, a read-only mount, root): try it
        probe = tempfile.mkdtemp(prefix=temp_prefix(folder.name, target, suffix=""), dir=target)
    except OSError as exc:
        raise OutputError(option + f" {folder}: folder {target} is not writable ({exc.strerror or exc})") from None
    os.rmdir(probe)
    return folder


def refuse_inputs(outputs: dict[str, str | os.PathLike | None], inputs: list[str | os.PathLike | None]) -> None:
    """An output error, before any work, when an output path (``{option: path}``) would write over an input,
    or two outputs name the same path.

    An output is refused when it is an input file (the same file: a symbolic link followed, a hard
    link or another mount of it counts), or is, or lies inside, an input folder: a folder is
    compared by device and inode (:func:`mhaaudit.files.within`), so reaching it by another path
    (a symbolic link, a bind mount) changes nothing. Two outputs that name the same place are
    refused too (``--out`` and ``--save-features`` the same path). Inputs that do not exist and
    outputs that are None are passed over.

    Raises:
        OutputError: when an output is, or lies inside, an existing input, or names the same place as another output.
    """
    given = [(option, out) for option, out in outputs.items() if out is not None]
    named = [_local_part(i) for i in inputs if i is not None]
    ins = [i for i in named if os.path.lexists(os.path.expanduser(str(i)))]
    for option, out in given:
        for i in ins:
            where = os.path.expanduser(str(i))
            if same_place(out, where) or real_path(out) == real_path(where):
                raise OutputError(option + f" {out} is an input of this run ({i}); write the output elsewhere")
            if os.path.isdir(where) and within(out, where):
                raise OutputError(
                    option + f" {out} lies inside {i}, an input folder of this run; write the output elsewhere"
                )
    for n, (option, out) in enumerate(given):
        for other, path in given[n + 1 :]:
            if same_place(out, path):
                raise OutputError(
                    option + f" {out} and {other} {path} name the same path; give each output a path of its own"
                )


def _local_part(data: str | os.PathLike) -> str | os.PathLike:
    """An input as a path: a data argument that names a local dataset folder behind the hub prefix
    (``hf:``, ``hub:``) is that folder; anything else as it is."""
    text = str(data)
    for prefix in ("hf:", "hub:"):
        if text.lower().startswith(prefix) and os.path.exists(os.path.expanduser(text[len(prefix) :].strip())):
            return text[len(prefix) :].strip()
    return data


def real_path(path: str | os.PathLike) -> Path:
    """``path`` with ``~``, symbolic links and relative parts resolved (for comparing paths)."""
    return Path(os.path.realpath(os.path.expanduser(str(path))))


def ordinary_mode(p: Path) -> int:
    """The permissions a plain ``open(p, "w")`` would give: the existing file's, else 0o666 less the umask.

    ``mkstemp`` (and some writers, such as safetensors') create files private (0o600); a file
    renamed into place gets this mode first. A symbolic link's target is not asked.
    """
    try:
        if not p.is_symlink():
            return p.stat().st_mode & 0o7777
    except OSError:
        pass
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, now: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it into place only on success.

    Inside :func:`staged_outputs` the rename waits for the end of the run (all outputs or none),
    unless ``now`` (a cache, or a results file kept up to date for resuming). On any failure the
    temporary file is removed and ``path`` is left as it was.

    Raises:
        OutputError: when ``path`` cannot be written (:func:`check_writable`), or when writing or renaming fails
            with an OSError (a full disk, a vanished folder).
        OSError: an mhaaudit error of the work inside (an OutputError, an OfflineError), re-raised as it is.
    """
    p = check_writable(path)
    parent = p.parent if str(p.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(p.name, parent), suffix=_TMP_SUFFIX, dir=parent)
    os.close(fd)
    tmp_p = Path(tmp)
    staged = None if now else _STAGED.get()
    try:
        yield tmp_p
        os.chmod(tmp_p, ordinary_mode(p))
        if staged is None:
            os.replace(tmp_p, p)
        else:
            staged.stage(tmp_p, p)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp_p.unlink()
        if isinstance(exc, MhaauditError):  # an OutputError or OfflineError of the work inside says itself
            raise
        # A full disk or a vanished folder is the user's to fix, not a bug: one line, exit 2.
        raise OutputError(f"cannot write {p}: {_reason(exc)}") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            tmp_p.unlink()
        raise


# --------------------------------------------------------------------------- parquet records


def write_parquet(records: list[dict], path: str | os.PathLike, metadata: dict, *, now: bool = False) -> None:
    """``records`` as a typed parquet file (:func:`mhaaudit.tables.records_table`), written atomically
    (``now``: see :func:`atomic_path`)."""
    import pyarrow.parquet as pq

    table = records_table(records, metadata)
    with atomic_path(path, now=now) as tmp:
        pq.write_table(table, tmp)


def parquet_bytes(records: list[dict], metadata: dict) -> bytes:
    """The same parquet file as :func:`write_parquet`, as bytes (for ``--format parquet`` on stdout)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(records_table(records, metadata), sink)
    return sink.getvalue().to_pybytes()


def read_parquet_metadata(path: str | os.PathLike) -> dict:
    """The mhaaudit metadata (provenance, command) stored in a parquet file's schema; empty when it has none."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(METADATA_KEY)
    return json.loads(raw) if raw else {}
