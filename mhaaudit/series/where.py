"""What a series' results depend on of the local files its model and data name (:func:`local_state`): a results
file is resumed only for the same files, not for the same name typed in another folder, nor for a data folder
whose files changed since it was written.
"""

from __future__ import annotations

import hashlib
import os
import stat

from ..io import local_part

__all__ = ["MODEL_WEIGHTS", "local_state"]


#: What a model folder's state leaves out: its weights files, which a series never reads (its reference columns are
#: built from the configuration, and each checkpoint is compared by its own digest), and which the checkpoints of a
#: training run saved beside the configuration are
MODEL_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx", ".index.json")


def local_state(name: str | None, *, below: bool, skip: tuple[str, ...] = ()) -> dict | None:
    """The real place of the local file or folder ``name`` names (a local data set folder behind ``hf:`` too), how
    many files it holds and the SHA-256 of their names, sizes and modification times: a folder's own files, and
    with ``below`` those of its folders at any depth (symbolic links to folders not followed). None when ``name``
    names nothing here (an alias, a hub id, the built-in data). Files whose names end in one of ``skip`` are left
    out. A model folder's own files are what its load reads (its checkpoints' folders, which a training run adds to,
    are not); a data folder's images may lie below it."""
    if not name:
        return None
    path = os.path.expanduser(str(local_part(name)))
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    real = os.path.realpath(path)
    h = hashlib.sha256(b"files\0")
    count = 0
    if stat.S_ISDIR(st.st_mode):
        for top, folders, files in os.walk(real):
            folders[:] = sorted(folders) if below else []
            for fn in sorted(f for f in files if not f.lower().endswith(skip)):
                p = os.path.join(top, fn)
                try:
                    s = os.stat(p)
                except OSError:  # a dangling link: its name alone
                    s = None
                size, mtime = (s.st_size, s.st_mtime_ns) if s is not None else (-1, -1)
                h.update(os.fsencode(os.path.relpath(p, real)) + f"\0{size}\0{mtime}\0".encode())
                count += 1
    else:
        h.update(f"\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        count = 1
    return {"path": real, "files": count, "sha256": h.hexdigest()}
