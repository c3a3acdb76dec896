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
- :func:`arrow_source`: what the Arrow and parquet readers are given for a file, so that a name
  that is not UTF-8 can be read too.

No torch here: the command line checks its outputs before the library is imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .errors import MhaauditError, one_line
from .places import first_name_under, same_place, within

__all__ = [
    "MAX_FOLDER_DEPTH",
    "MAX_JSON_BYTES",
    "first_name_under",
    "folder_files",
    "inside",
    "kind_of",
    "name_inside",
    "read_json",
    "regular_file",
    "same_place",
    "special_kind",
    "within",
]

# The largest JSON metadata file read (a model's config, a saved dataset's state.json, a feature
# folder's meta.json, a checkpoint index): real ones hold kilobytes, a large index a few megabytes.
MAX_JSON_BYTES = 64 << 20
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


@contextlib.contextmanager
def arrow_source(path: str | os.PathLike) -> Iterator[Any]:
    """What pyarrow's readers take for the file ``path`` while open: its name, or the file opened
    through Python when the name is not UTF-8 (pyarrow takes names only as UTF-8, and a name on
    disk may be any bytes: Python holds those as lone surrogates). Opening raises what
    :func:`open` raises."""
    name = os.fspath(path)
    if utf8_name(name):
        yield name
        return
    with open(name, "rb") as f:
        yield f


@contextlib.contextmanager
def native_name(path: str | os.PathLike) -> Iterator[str]:
    """A name of the file or folder ``path`` that a native reader (safetensors' ``safe_open``, the tokenizers
    library: they take names only as UTF-8) can open while this context lasts: the name itself when it is UTF-8,
    else the name of the file or folder opened through Python in ``/proc/self/fd`` (or ``/dev/fd``), the same
    one, whatever bytes its name holds (a folder's files are found under it).
    Where neither exists, the name as it is (the reader then refuses it in its own words). Opening raises
    what :func:`open` raises."""
    name = os.fspath(path)
    if utf8_name(name):
        yield str(name)
        return
    folder = next((f for f in ("/proc/self/fd", "/dev/fd") if os.path.isdir(f)), None)
    if folder is None:  # pragma: no cover - every POSIX system this runs on has one of them
        yield str(name)
        return
    # O_PATH where there is one: a folder that may be searched but not listed opens, and a named pipe does not
    # block (the reader's own open of the name checks what reading needs, as it would by the name itself)
    fd = os.open(name, getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_CLOEXEC", 0))
    try:
        yield f"{folder}/{fd}"
    finally:
        os.close(fd)


def utf8_name(path: str | os.PathLike) -> bool:
    """Whether the name ``path`` is UTF-8, the only form in which the native readers (pyarrow, safetensors,
    the tokenizers library) take a name: one with undecodable bytes (which Python holds as lone surrogates)
    they cannot open by it."""
    name = os.fspath(path)
    try:
        if isinstance(name, str):
            name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
