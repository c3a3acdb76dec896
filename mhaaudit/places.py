"""Where an output goes, compared with the inputs and the other outputs by device and inode, so that a second
name of the same folder (a symbolic link, a bind mount) is the same folder. :mod:`mhaaudit.files` re-exports
these names.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

__all__ = ["first_name_under", "same_place", "within"]


def _identity(path: str | os.PathLike) -> tuple[int, int] | None:
    """(device, inode) of ``path`` (symbolic links followed), or None when it cannot be reached."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _place(path: str | os.PathLike) -> Path:
    """Where ``path`` (which need not exist) puts its last name: the real folder above it (symbolic links
    resolved, ``..`` as the system resolves it) joined with that name; the real path itself for a
    path ending in ``/``, ``.`` or ``..``."""
    head, name = os.path.split(os.path.expanduser(str(path)))
    if name in ("", ".", ".."):
        return Path(os.path.realpath(os.path.expanduser(str(path))))
    return Path(os.path.realpath(head or ".")) / name


def within(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether ``path`` (which need not exist) is the folder ``folder`` or lies inside it, decided by device
    and inode: the place ``path`` names (a symbolic link there followed) and each real folder above it
    are compared with ``folder``, and so are the place a symbolic link at ``path`` leads to and each
    folder above that, so a second name of the same folder (a symbolic link, a bind mount) counts, and
    so does a link at ``path`` that leads into ``folder``."""
    f = os.path.expanduser(str(folder))
    target = _identity(f)
    if target is None or not os.path.isdir(f):
        return False
    p = _place(path)
    real = Path(os.path.realpath(p))  # where a link at path leads (a dangling one too)
    return any(_identity(q) == target for q in (p, *p.parents, real, *real.parents))


def first_name_under(path: str | os.PathLike, folder: str | os.PathLike) -> str | None:
    """The name of the entry of ``folder`` on the way to ``path`` (``"random"`` for ``folder/random/x``), found
    by device and inode as :func:`within` finds it; None when ``path`` does not lie below ``folder``."""
    target = _identity(os.path.expanduser(str(folder)))
    if target is None:
        return None
    p = _place(path)
    chain = (p, *p.parents)
    for below, above in itertools.pairwise(chain):
        if _identity(above) == target:
            return below.name
    return None


def same_place(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether the paths ``a`` and ``b`` (which need not exist) name the same place: the same name in the
    same folder (the folder compared by device and inode), or, both existing, the same file (symbolic
    links followed; a hard link is the same file)."""
    pa, pb = _place(a), _place(b)
    if pa.name == pb.name:
        da, db = _identity(pa.parent), _identity(pb.parent)
        if da is not None and da == db:
            return True
    ia, ib = _identity(pa), _identity(pb)
    return ia is not None and ia == ib
