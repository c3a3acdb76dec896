"""Reading feature files and writing outputs atomically, stamped with provenance."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from ._version import __version__
from .errors import InputError, OutputError
from .tables import METADATA_KEY

FEATURE_EXTENSIONS = (".npy", ".pt", ".pth", ".safetensors", ".parquet")


# --------------------------------------------------------------------------- provenance


def library_versions() -> dict[str, str]:
    out = {"mhaaudit": __version__, "python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__}
    from importlib.metadata import PackageNotFoundError, version

    for name in ("transformers", "timm", "datasets", "pyarrow", "scipy"):
        try:
            out[name] = version(name)  # read from metadata: no slow imports
        except PackageNotFoundError:  # pragma: no cover
            pass
    return out


def stamp(**extra) -> dict:
    """The provenance every output carries: tool and library versions plus the caller's facts."""
    return {"tool": "mhaaudit", "version": __version__, "versions": library_versions(), **extra}


# --------------------------------------------------------------------------- atomic writes


def check_writable(path: str | os.PathLike) -> Path:
    """Fail early, before any work, when ``path`` cannot be written."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.exists() and p.is_dir():
        raise OutputError(f"cannot write {p}: it is a directory")
    if not parent.exists():
        raise OutputError(f"cannot write {p}: folder {parent} does not exist")
    if not parent.is_dir():
        raise OutputError(f"cannot write {p}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"cannot write {p}: folder {parent} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise OutputError(f"cannot write {p}: file is not writable")
    try:  # the permission bits do not tell everything (/proc, a read-only mount, root): try it
        fd, probe = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise OutputError(f"cannot write {p}: folder {parent} is not writable ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)
    return p


def check_folder_writable(folder: str | os.PathLike, option: str) -> Path:
    """Fail early, before any work, when the folder ``option`` names cannot be made or written into."""
    folder = Path(folder)
    parent = folder.parent if str(folder.parent) else Path(".")
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{option} {folder}: exists and is not a folder")
    if not parent.exists():
        raise OutputError(f"{option} {folder}: folder {parent} does not exist")
    if not parent.is_dir():
        raise OutputError(f"{option} {folder}: {parent} is a file, not a folder")
    target = folder if folder.exists() else parent
    try:  # the permission bits do not tell everything (/proc, a read-only mount, root): try it
        probe = tempfile.mkdtemp(prefix=f".{folder.name}.", dir=target)
    except OSError as exc:
        raise OutputError(f"{option} {folder}: folder {target} is not writable ({exc.strerror or exc})") from None
    os.rmdir(probe)
    return folder


def ordinary_mode(p: Path) -> int:
    """The permissions a plain ``open(p, "w")`` would give: the existing file's, else 0o666 less the umask.

    ``mkstemp`` (and some writers, such as safetensors') create files private (0o600); a file
    renamed into place gets this mode first.
    """
    try:
        return p.stat().st_mode & 0o7777
    except OSError:
        pass
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it into place only on success."""
    p = check_writable(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
    os.close(fd)
    tmp_p = Path(tmp)
    try:
        yield tmp_p
        os.chmod(tmp_p, ordinary_mode(p))
        os.replace(tmp_p, p)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp_p.unlink()
        # A full disk or a vanished folder is the user's to fix, not a bug: one line, exit 2.
        raise OutputError(f"cannot write {p}: {exc.strerror or ' '.join(str(exc).split())}") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            tmp_p.unlink()
        raise


# --------------------------------------------------------------------------- parquet records


def write_parquet(records: list[dict], path: str | os.PathLike, metadata: dict) -> None:
    """``records`` as a typed parquet file (:func:`mhaaudit.tables.records_table`), written atomically."""
    import pyarrow.parquet as pq

    from .tables import records_table

    table = records_table(records, metadata)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def parquet_bytes(records: list[dict], metadata: dict) -> bytes:
    """The same parquet file as :func:`write_parquet`, as bytes (for ``--format parquet`` on stdout)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .tables import records_table

    sink = pa.BufferOutputStream()
    pq.write_table(records_table(records, metadata), sink)
    return sink.getvalue().to_pybytes()


def read_parquet_metadata(path: str | os.PathLike) -> dict:
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(METADATA_KEY)
    return json.loads(raw) if raw else {}


# --------------------------------------------------------------------------- reading features


def _from_parquet(path: Path, key: str | None):
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    names = table.column_names
    if key is not None:
        if key not in names:
            raise InputError(f"{path}: no column {key!r} (columns: {', '.join(names[:10])})")
        names = [key]
    import pyarrow as pa

    def is_list(t) -> bool:
        return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)

    list_cols = [n for n in names if is_list(table.schema.field(n).type)]
    if list_cols:
        col = list_cols[0]
        value_type = table.schema.field(col).type.value_type
        # Floating vectors keep their dtype (the rank tolerance depends on it), and so do integers and
        # booleans, which the feature check converts to float64 exactly or refuses (``as_matrix``).
        exact = pa.types.is_floating(value_type) or pa.types.is_integer(value_type) or pa.types.is_boolean(value_type)
        dtype = value_type.to_pandas_dtype() if exact else np.float64
        rows = table.column(col).to_pylist()
        if any(r is None for r in rows):
            raise InputError(f"{path}: column {col!r} has missing vectors (nulls)")
        if len({len(r) for r in rows}) > 1:
            raise InputError(f"{path}: column {col!r} holds vectors of different lengths")
        try:
            arr = np.array(rows, dtype=dtype)
        except (TypeError, ValueError) as exc:
            raise InputError(f"{path}: column {col!r} does not hold numeric vectors") from exc
        if arr.ndim != 2:
            arr = arr.reshape(len(rows), -1)
        return arr, f"column {col!r}"
    num = [n for n in names if pa.types.is_floating(table.schema.field(n).type) or pa.types.is_integer(table.schema.field(n).type)]
    if not num:
        raise InputError(f"{path}: no numeric or list-of-number columns to read as a T x d matrix")
    arr = np.stack([table.column(n).to_numpy(zero_copy_only=False) for n in num], axis=1)
    return arr, f"{len(num)} numeric columns"


def read_array(path: str | os.PathLike, key: str | None = None) -> tuple[torch.Tensor, str]:
    """Read a tensor from ``.npy``, ``.pt``, ``.safetensors`` or ``.parquet``.

    Returns the tensor (dtype kept: the rank tolerance depends on it) and a description. A file
    holding several tensors (or columns) needs ``key``; ``key`` on a file with nothing to choose
    is refused, as is a results file written by mhaaudit (recognised by its ``mhaaudit`` parquet
    metadata). A folder written by ``--save-features`` reads its ``features.safetensors``
    (tensor ``queries`` unless ``key`` says otherwise).
    """
    p = Path(path)
    if p.is_dir():
        cand = p / "features.safetensors"
        if not cand.exists():
            raise InputError(f"{p} is a folder without features.safetensors (write one with --save-features)")
        p, key = cand, key or "queries"
    if not p.exists():
        raise InputError(f"no such file: {p}")
    ext = p.suffix.lower()
    if ext not in FEATURE_EXTENSIONS:
        raise InputError(f"unknown feature file type {ext or '(none)'!r} for {p}; use one of {', '.join(FEATURE_EXTENSIONS)}")
    if key is not None and ext == ".npy":
        raise InputError(f"--key has no effect on {p}: a .npy file holds one array")
    try:
        if ext == ".npy":
            arr = np.load(p, allow_pickle=False)
            if arr.dtype.kind == "c":
                raise InputError(f"{p}: complex features ({arr.dtype}) are not supported: linear independence is "
                                 "decided over the reals, and dropping the imaginary part would prove false things; "
                                 "give real features")
            if arr.dtype.kind not in "fiub":
                raise InputError(f"{p}: array of dtype {arr.dtype} is not numeric")
            return torch.from_numpy(np.ascontiguousarray(arr)), f"{p} (npy)"
        if ext in (".pt", ".pth"):
            import warnings

            with warnings.catch_warnings():  # a bad file is reported as one error, without warnings
                warnings.simplefilter("ignore")
                obj = torch.load(p, map_location="cpu", weights_only=True)
            if isinstance(obj, dict):
                return _pick(obj, key, p), f"{p} (torch{', ' + repr(key) if key else ''})"
            if not isinstance(obj, torch.Tensor):
                raise InputError(f"{p}: expected a tensor or a dict of tensors, found {type(obj).__name__}")
            if key is not None:
                raise InputError(f"--key has no effect on {p}: it holds one tensor, not a dict of them")
            return obj, f"{p} (torch)"
        if ext == ".safetensors":
            from safetensors.torch import load_file

            tensors = load_file(str(p))
            return _pick(tensors, key, p), f"{p} (safetensors{', ' + repr(key) if key else ''})"
        refuse_results_file(p)
        arr, what = _from_parquet(p, key)
        return torch.from_numpy(arr), f"{p} (parquet, {what})"
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"cannot read {p}: {' '.join(str(exc).split())[:200]}") from exc


def refuse_results_file(p: Path) -> None:
    """An input error when the parquet file ``p`` is a results file written by mhaaudit, not features."""
    import pyarrow.parquet as pq

    raw = (pq.read_schema(p).metadata or {}).get(METADATA_KEY)
    if raw is not None:
        try:
            command = json.loads(raw).get("command")
        except (ValueError, AttributeError):
            command = None
        what = f"'mhaaudit {command}'" if command else "mhaaudit"
        raise InputError(f"{p} is a results file written by {what} (its parquet metadata says so), not features: "
                         "give a T x d matrix, or the folder written by check --save-features")


def _pick(tensors: dict, key: str | None, p: Path) -> torch.Tensor:
    """The tensor named ``key``, or the only one; several without ``key`` is an input error."""
    if key is not None:
        if key not in tensors:
            raise InputError(f"{p}: no tensor named {key!r} (found: {', '.join(sorted(map(str, tensors)))})")
        return tensors[key]
    if len(tensors) == 1:
        return next(iter(tensors.values()))
    if not tensors:
        raise InputError(f"{p} holds no tensors")
    names = sorted(map(str, tensors))
    shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
    raise InputError(f"{p} holds several tensors ({shown}); choose one with --key")


def to_query_matrix(arr: torch.Tensor, query_index: int | None, source: str) -> tuple[torch.Tensor, str]:
    """A T x d matrix from a T x d array, or from T x n x d tokens with ``query_index``."""
    if arr.ndim == 2:
        if query_index is not None:
            raise InputError(f"{source}: --query-index applies to T x n x d token arrays, this one is {tuple(arr.shape)}")
        return arr, source
    if arr.ndim == 3:
        if query_index is None:
            raise InputError(f"{source}: a T x n x d array needs --query-index (0 for [CLS], -1 for the last token)")
        n = arr.shape[1]
        if not -n <= query_index < n:
            raise InputError(f"--query-index {query_index} is out of range for n = {n} tokens")
        return arr[:, query_index, :], f"{source}, token {query_index}"
    raise InputError(f"{source}: expected a T x d matrix or T x n x d tokens, got shape {tuple(arr.shape)}")
