"""Reading feature files: ``.npy``, ``.pt`` / ``.pth``, ``.safetensors`` and ``.parquet``, memory-mapped
where they allow, each checked (its declared size, its dtype, its header) before it is read.

:mod:`mhaaudit.io` re-exports these names.
"""

from __future__ import annotations

import json
import os
import pickle
import warnings
import zipfile
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.lib import format as npy_format

from . import hostmem
from .documents import METADATA_KEY
from .errors import InputError, Param
from .feature_parquet import feature_columns, feature_matrix
from .files import arrow_source, folder_files, native_name, parquet_need, read_parquet, regular_file, size_words
from .mapped import MappedArray
from .tensor_values import dense_values, stored_bytes

FEATURE_EXTENSIONS = (".npy", ".pt", ".pth", ".safetensors", ".parquet")
# The largest safetensors header read (the safetensors library refuses larger ones too).
MAX_HEADER_BYTES = 100_000_000


def safetensors_header(path: str | os.PathLike) -> dict:
    """The JSON header of a safetensors file, checked before it is read: its stated length must fit
    the file and :data:`MAX_HEADER_BYTES`, and every tensor's data must lie inside the file.
    Callers word the reason for their input; an OSError of opening or reading the file passes through.

    Raises:
        ValueError: when the file is shorter than the 8-byte length, the stated header length does not fit the
            file or :data:`MAX_HEADER_BYTES`, the header is not a JSON object, or a tensor's data offsets are
            missing or lie outside the file.
    """
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(8)
        if len(head) < 8:
            raise ValueError(f"not a safetensors file: {size} bytes, too short for the 8-byte header length")
        n = int.from_bytes(head, "little")
        if n > size - 8 or n > MAX_HEADER_BYTES:
            raise ValueError(
                f"not a safetensors file: its header claims {n} bytes, the file has {size - 8} after the "
                f"length" + (f" (at most {MAX_HEADER_BYTES} are read)" if n <= size - 8 else "")
            )
        raw = fh.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(
            f"not a safetensors file: its header is not JSON ({' '.join(str(exc).split())[:80]})"
        ) from None
    if not isinstance(header, dict):
        raise ValueError("not a safetensors file: its header is not a JSON object")
    body = size - 8 - n
    for k, v in header.items():
        if k == "__metadata__":
            continue
        offsets = v.get("data_offsets") if isinstance(v, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= body
        ):
            raise ValueError(f"not a safetensors file: tensor {k[:60]!r} has no valid data offsets within the file")
    return header


def _check_npy(p: Path) -> None:
    """Check that ``p`` starts as a .npy file whose header's shape and dtype account for exactly the
    bytes that follow it (checked before numpy allocates what the header claims).

    Raises:
        InputError: when ``p`` lacks the .npy magic bytes, its header is malformed, or the header's shape and
            dtype do not account for the bytes of data (an object dtype is left to ``np.load`` to refuse).
    """
    with open(p, "rb") as fh:
        if fh.read(6) != b"\x93NUMPY":  # else numpy calls any other file "pickled data"
            raise InputError(f"cannot read {p}: not a .npy file (it does not start with the .npy magic bytes)")
        fh.seek(0)
        try:
            version = npy_format.read_magic(fh)
            read_header = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
            shape, _fortran, dtype = read_header(fh)
        except (ValueError, TypeError, SyntaxError, OverflowError, MemoryError, UnicodeError) as exc:
            text = " ".join(str(exc).split())
            if text.startswith("shape is not valid: "):  # numpy's words for a shape of floats or strings
                raise InputError(_not_a_shape(p, text.removeprefix("shape is not valid: "))) from None
            if text.startswith("malformed node or string"):  # its words name an object's address, not the fault
                text = "it holds an expression or a name, not only literal values"
            raise InputError(f"cannot read {p}: its .npy header is malformed ({text[:120]})") from None
        body = os.fstat(fh.fileno()).st_size - fh.tell()
    if not all(type(v) is int and v >= 0 for v in shape):  # numpy takes True for 1 and leaves -1 to fail later
        raise InputError(_not_a_shape(p, repr(shape)))
    if dtype.hasobject:
        return  # np.load refuses it below, without unpickling
    need = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if need != body:
        raise InputError(
            f"cannot read {p}: its .npy header claims shape {tuple(shape)} of {dtype} ({need} bytes), "
            f"the file holds {body} bytes of data"
        )


def _not_a_shape(p: Path, shape: str) -> str:
    """The refusal of a .npy file whose header's shape (``shape``, as the header writes it) is not a shape."""
    return f"cannot read {p}: its .npy header's shape {shape[:80]} is not a tuple of non-negative integers"


def torch_load_reason(exc: BaseException) -> str:
    """Why ``torch.load(..., weights_only=True)`` refused a file, in words for a user (torch's own
    message for a refused pickle suggests loading it unsafely, which mhaaudit never does)."""
    if isinstance(exc, EOFError):
        return "the file is empty or truncated"
    if isinstance(exc, pickle.UnpicklingError):
        return "not a torch file of plain tensors (corrupt, or a pickle that would run code, which is never loaded)"
    text = " ".join(str(exc).split())
    return text[:200] if text else type(exc).__name__


_MAPPED_SAFETENSORS = {"F16": np.float16, "F32": np.float32, "F64": np.float64}  # dtypes NumPy can map


def _refuse_unless_readable(p: Path, need: int | None = None, declared: str = "") -> None:
    """Check, before reading, that a file that is read whole (not memory-mapped) fits the memory available:
    ``need`` bytes, what its metadata declares once decoded (``declared`` says so in words), else its size.

    Raises:
        InputError: when the file (decoded, as declared) is larger than the memory available.
    """
    size, avail = p.stat().st_size, hostmem.available_memory()
    need = max(size, need or 0)
    if need > avail:
        raise InputError(
            f"{p}: reading this {p.suffix} file whole needs at least {_size(need)}{declared}, but "
            f"{_size(avail)} are available; save the features as a float32 .npy or .safetensors "
            "file, which is memory-mapped instead of read"
        )


_size = size_words
MAPPED_HINT = "save the features as a float32 .npy or .safetensors file, which is memory-mapped instead of read"


def parquet_declared_bytes(path: str | os.PathLike, columns: Collection[str] | None = None) -> tuple[int, str]:
    """What the parquet file ``path`` decodes to once read whole (only the top-level ``columns`` when given), and
    that in words: :func:`mhaaudit.files.parquet_need`, which counts every value its footer declares and the
    rows of its dictionary-encoded text and binary columns decoded."""
    return parquet_need(path, columns)


def torch_declared_bytes(path: str | os.PathLike) -> tuple[int, str]:
    """What a ``torch.save`` file inflates to, from its zip directory alone: the uncompressed sizes its
    records declare (a deflated record of zeros is a thousandth of its size), and that in words; the
    file's own size for a file that is not a zip archive (the legacy format, read as it lies)."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return os.path.getsize(path), ""
    total = sum(int(i.file_size) for i in infos)
    packed = [i for i in infos if i.compress_type != zipfile.ZIP_STORED]
    words = f" (its {len(infos)} records declare {_size(total)}"
    return total, words + (f", {len(packed)} of them compressed)" if packed else ")")


# The floating dtypes a .npy file is memory-mapped in (torch has no long double: such a file is
# read, and refused there in one line).
_MAPPED_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _load_npy(p: Path):
    """A ``.npy`` array memory-mapped (read-only), or read when it cannot be mapped (an empty one)."""
    try:
        return np.load(p, allow_pickle=False, mmap_mode="r")
    except ValueError:
        return np.load(p, allow_pickle=False)


def _map_safetensors(p: Path, key: str | None) -> MappedArray | None:
    """The tensor ``key`` (or the only one) of a safetensors file as a memory map, or None when its
    dtype cannot be mapped (bfloat16, integers: read into memory instead). The library's own reader
    checks the header first; the data offset is the header's."""
    from safetensors import safe_open

    with native_name(p) as name, safe_open(name, framework="np") as f:  # a name it takes, whatever bytes p holds
        names = list(f.keys())
    if key is None and len(names) == 1:
        key = names[0]
    if key is None or key not in names:
        return None  # _pick says what is wrong
    with open(p, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    info = header[key]
    dtype = _MAPPED_SAFETENSORS.get(info["dtype"])
    shape = tuple(int(v) for v in info["shape"])
    if dtype is None or len(shape) not in (2, 3):
        return None
    begin, end = (int(v) for v in info["data_offsets"])
    if end - begin != int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize or 0 in shape:
        return None
    return MappedArray(p, 8 + n + begin, np.dtype(dtype).newbyteorder("<"), shape)


def read_array(path: str | os.PathLike, key: str | None = None) -> tuple[torch.Tensor | MappedArray, str]:
    """Read a tensor from ``.npy``, ``.pt``, ``.safetensors`` or ``.parquet``.

    Returns the tensor (dtype kept: the rank tolerance depends on it) and a description. A floating-point
    ``.npy`` or ``.safetensors`` matrix (or T x n x d array) is not read but memory-mapped (``MappedArray``): its
    pages are read as the computation touches them. An expanded ``.pt`` tensor (a stride of 0) is returned as it
    lies, uncopied (what it declares must fit). A file holding several tensors (or columns) needs ``key``; ``key`` on a
    file with nothing to choose is refused, as is a results file written by mhaaudit (recognised by its ``mhaaudit``
    parquet metadata). A folder written by ``--save-features`` reads its ``features.safetensors`` (tensor
    ``queries`` unless ``key`` says otherwise).

    Raises:
        InputError: when the path does not exist, is a folder without ``features.safetensors``, has an unknown
            extension, is given ``key`` as a .npy file, or cannot be read as features (any error of its reader,
            worded in one line).
    """
    p = Path(path)
    if p.is_dir():
        cand = p / "features.safetensors"
        if not cand.exists():
            raise InputError(
                f"{p} is a folder without features.safetensors (write one with " + Param("save_features") + ")"
            )
        # a link leading out of the folder is refused, as FeatureSet.load refuses it
        folder_files(p, InputError, "saved feature folder", keep={cand.name}.__contains__, depth=0)
        p, key = cand, key or "queries"
    if not p.exists():
        raise InputError(f"no such file: {p}")
    regular_file(p, InputError)  # a named pipe would block the reader for good, a device never end
    ext = p.suffix.lower()
    if ext not in FEATURE_EXTENSIONS:
        raise InputError(
            f"unknown feature file type {ext or '(none)'!r} for {p}; use one of {', '.join(FEATURE_EXTENSIONS)}"
        )
    if key is not None and ext == ".npy":
        raise InputError(Param("key") + f" has no effect on {p}: a .npy file holds one array")
    readers: dict[str, Callable[[Path, Any], tuple[torch.Tensor | MappedArray, str]]] = {
        ".npy": _read_npy,
        ".pt": _read_torch,
        ".pth": _read_torch,
        ".safetensors": _read_safetensors,
        ".parquet": _read_parquet,
    }
    reader = readers[ext]
    try:
        return reader(p, key)
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"cannot read {p}: {' '.join(str(exc).split())[:200]}") from exc


def _read_npy(p: Path, key: None) -> tuple[torch.Tensor | MappedArray, str]:
    """A real numeric ``.npy`` array; a floating-point matrix (or T x n x d array) memory-mapped.

    Raises:
        InputError: when the file is not a well-formed .npy file, its dtype is complex, not numeric, or a
            floating format wider than float64 (whose values float64 cannot hold exactly), or an array that is read
            whole (not mapped) is larger than the memory available.
    """
    _check_npy(p)
    arr = _load_npy(p)
    if arr.dtype.kind == "c":
        raise InputError(
            f"{p}: complex features ({arr.dtype}) are not supported: linear independence is "
            "decided over the reals, and dropping the imaginary part would prove false things; "
            "give real features"
        )
    if arr.dtype.kind not in "fiub":
        raise InputError(f"{p}: array of dtype {arr.dtype} is not numeric")
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 8:
        raise InputError(
            f"{p}: features of dtype {arr.dtype} (extended precision) have values float64 cannot hold exactly, "
            "and every rank computation is in float64; save them as float64"
        )
    mapped = isinstance(arr, np.memmap) and arr.dtype.isnative and arr.dtype in _MAPPED_FLOATS and arr.ndim in (2, 3)
    if not mapped:  # read whole (integers, booleans, another byte order): what it holds must fit, as for a .pt file
        refuse_unless_fits(
            p, arr.nbytes, f"its {arr.dtype} array of shape {tuple(arr.shape)} is read whole, not mapped"
        )
    if not arr.dtype.isnative:  # big-endian data is read as numpy reads it, in the machine's order
        arr = np.asarray(arr).astype(arr.dtype.newbyteorder("="))
    if mapped and arr.size:
        refuse_if_sparse(p, arr.nbytes, f"its {arr.dtype} array of shape {tuple(arr.shape)}")
        return MappedArray(
            p,
            arr.offset,
            arr.dtype,
            arr.shape,
            "F" if arr.flags.f_contiguous and arr.ndim > 1 and not arr.flags.c_contiguous else "C",
        ), f"{p} (npy, memory-mapped)"
    return torch.from_numpy(np.array(arr)), f"{p} (npy)"


def _read_torch(p: Path, key: str | None) -> tuple[torch.Tensor, str]:
    """A tensor saved with ``torch.save`` (weights only), or the ``key`` entry of a saved dict of them.

    Raises:
        InputError: when the file is larger than the memory available, torch refuses to load it (corrupt, empty,
            or a pickle beyond plain tensors), it holds neither a tensor nor a dict of them, ``key`` is given for a
            single tensor or names an entry that is not a tensor, or the dict has no tensor to pick
            (:func:`_pick`: entries that are not tensors are not counted).
    """
    _refuse_unless_readable(p, *torch_declared_bytes(p))  # a deflated record inflates: counted as declared

    with warnings.catch_warnings():  # a bad file is reported as one error, without warnings
        warnings.simplefilter("ignore")
        try:
            obj = torch.load(p, map_location="cpu", weights_only=True)
        except Exception as exc:  # corrupt, empty, or a pickle that is refused
            raise InputError(f"cannot read {p}: {torch_load_reason(exc)}") from exc
    if isinstance(obj, dict):
        if key is not None and key in obj and not isinstance(obj[key], torch.Tensor):
            raise InputError(f"{p}: the entry {key!r} is not a tensor (its type: {type(obj[key]).__name__})")
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}  # other entries are not features
        picked = _stored_whole(p, dense_values(_pick(tensors, key, p), str(p)))
        return picked.detach(), f"{p} (torch{', ' + repr(key) if key else ''})"
    if not isinstance(obj, torch.Tensor):
        raise InputError(f"{p}: expected a tensor or a dict of tensors, found {type(obj).__name__}")
    if key is not None:
        raise InputError(Param("key") + f" has no effect on {p}: it holds one tensor, not a dict of them")
    # (a saved parameter is read as its values)
    return _stored_whole(p, dense_values(obj, str(p))).detach(), f"{p} (torch)"


def _stored_whole(p: Path, t: torch.Tensor) -> torch.Tensor:
    """``t`` as it lies, once the elements it declares (:func:`~mhaaudit.tensor_values.stored_bytes`) are known to fit
    the memory available: when they share storage (a stride of 0: an expanded tensor, whose 1.5 kB file can declare
    10^12 rows), :func:`~mhaaudit.tensor_values.own_storage` copies them.

    Raises:
        InputError: when the elements the tensor declares would not fit the memory available.
    """
    need, held = stored_bytes(t)
    if need > held:
        why = f"its tensor of shape {tuple(t.shape)} stores {held} bytes, repeated (a stride of 0) to fill that shape"
        refuse_unless_fits(p, need, why)
    return t


def _read_safetensors(p: Path, key: str | None) -> tuple[torch.Tensor | MappedArray, str]:
    """A ``.safetensors`` tensor (``key``, or the only one), memory-mapped where its dtype and shape allow; else
    that one tensor is read, once the bytes its header declares for it are known to fit the memory available.

    Raises:
        InputError: when ``key`` names no tensor, the file holds none or several and ``key`` is None, or the
            tensor to be read is larger than the memory available.
    """
    header = safetensors_header(p)  # its stated length checked against the file before anything is read
    mapped = _map_safetensors(p, key)
    if mapped is not None:
        refuse_if_sparse(p, mapped.nbytes, f"its {mapped.np_dtype.name} tensor of shape {mapped.shape}")
        return mapped, f"{p} (safetensors{', ' + repr(key) if key else ''}, memory-mapped)"
    from safetensors import safe_open

    name = _pick({k: k for k in header if k != "__metadata__"}, key, p)
    info = header[name]
    begin, end = info["data_offsets"]
    refuse_unless_fits(p, end - begin, f"its tensor {str(name)[:60]!r} ({info.get('dtype')}) is read, not mapped")
    with native_name(p) as native, safe_open(native, framework="pt") as f:
        tensor = f.get_tensor(name)
    return tensor, f"{p} (safetensors{', ' + repr(key) if key else ''})"


def refuse_unless_fits(p: Path, need: int, why: str, hint: str = MAPPED_HINT) -> None:
    """Check, before reading, that the ``need`` bytes a feature file ``p`` declares for what is read of it
    (``why`` says what, in words; ``hint`` the way out) fit the memory available: a sparse file declares bytes
    it does not hold, an expanded tensor rows it stores once, and any file more than this machine has.

    Raises:
        InputError: when ``need`` is larger than the memory available.
    """
    avail = hostmem.available_memory()
    if need > avail:
        raise InputError(
            f"{p}: {why}, which needs {_size(need)}, but {_size(avail)} are available" + (f"; {hint}" if hint else "")
        )


def refuse_if_sparse(p: Path, need: int, what: str) -> None:
    """Check, before ``p`` is memory-mapped, that it stores the ``need`` bytes of ``what`` it declares, else that
    they fit the memory available: a sparse file (lengthened by truncate) stores a sixteenth of its size or less
    on disk (real values, compressed, store more), its holes read as zeros that every pass would stream.

    Raises:
        InputError: when ``p`` is sparse and ``need`` is larger than the memory available.
    """
    st = p.stat()
    stored = getattr(st, "st_blocks", st.st_size // 512) * 512  # a system without st_blocks tells no holes
    if 16 * stored <= st.st_size:
        holes = f"of its {_size(st.st_size)}, {_size(stored)} are stored on disk, the rest are holes read as zeros"
        why = f"it is a sparse file ({holes}), so {what} is held to the memory available as if read whole"
        refuse_unless_fits(p, need, why, hint="a feature file stores its values: save them again in full")


def _from_parquet(path: Path, key: str | None) -> tuple[np.ndarray, str]:
    """The T x d matrix of the parquet file ``path`` and what was read in words: only its feature columns
    (:func:`~mhaaudit.feature_parquet.feature_columns`) are sized against the memory available
    (:func:`mhaaudit.files.read_parquet`) and read.

    Raises:
        InputError: when no feature column is found, they would not fit the memory available, or their values
            make no matrix (:func:`~mhaaudit.feature_parquet.feature_matrix`).
    """
    import pyarrow.parquet as pq

    with arrow_source(path) as source:
        schema = pq.read_schema(source)
    chosen, kind = feature_columns(path, schema, key)
    hint = "save the features as a float32 .npy or .safetensors file, which is memory-mapped instead of read"
    table = read_parquet(path, InputError, str(path), chosen, factor=2, hint=hint)  # the table, then the matrix
    return feature_matrix(path, table, chosen, kind)


def _read_parquet(p: Path, key: str | None) -> tuple[torch.Tensor, str]:
    """A T x d matrix from a parquet file's feature column(s); a results file of mhaaudit is refused."""
    refuse_results_file(p)
    arr, what = _from_parquet(p, key)
    return torch.from_numpy(arr), f"{p} (parquet, {what})"


def refuse_results_file(p: Path) -> None:
    """Check that the parquet file ``p`` is not a results file written by mhaaudit.

    Raises:
        InputError: when ``p``'s parquet metadata carries mhaaudit's key (a results file, not features), saying
            the command that wrote it, or that its command is no command's name (a JSON object, array, number).
    """
    import pyarrow.parquet as pq

    with arrow_source(p) as source:
        raw = (pq.read_schema(source).metadata or {}).get(METADATA_KEY)
    if raw is not None:
        try:
            command = json.loads(raw).get("command")
        except (ValueError, AttributeError):
            command = None
        if command is not None and not isinstance(command, str):  # not a command's name: the key alone tells
            kind = {"dict": "object", "list": "array", "bool": "boolean"}.get(type(command).__name__, "number")
            raise InputError(
                f"{p} is not features: its parquet metadata carries mhaaudit's results key, whose command is a "
                f"JSON {kind}, not a command's name; give a T x d matrix, or the folder written by "
                + Param("check_save_features")
            )
        what = f"'mhaaudit {command}'" if command else "mhaaudit"
        raise InputError(
            f"{p} is a results file written by {what} (its parquet metadata says so), not features: "
            "give a T x d matrix, or the folder written by " + Param("check_save_features")
        )


def _pick(tensors: dict, key: str | None, p: Path) -> torch.Tensor:
    """The tensor named ``key`` (a key that is no text, such as the integer 1, by its text, ``"1"``), or the only one.

    Raises:
        InputError: when the dict is empty, ``key`` names no tensor, or it holds several and ``key`` is None.
    """
    if not tensors:
        raise InputError(f"{p} holds no tensors")
    if key is not None:
        named = [key] if key in tensors else [k for k in tensors if not isinstance(k, str) and str(k) == key]
        if not named:
            raise InputError(f"{p}: no tensor named {key!r} (found: {', '.join(sorted(map(str, tensors)))})")
        return tensors[named[0]]
    if len(tensors) == 1:
        return next(iter(tensors.values()))
    names = sorted(map(str, tensors))
    shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
    raise InputError(f"{p} holds several tensors ({shown}); choose one with " + Param("key"))


def to_query_matrix(
    arr: torch.Tensor | MappedArray, query_index: int | None, source: str
) -> tuple[torch.Tensor | MappedArray, str]:
    """A T x d matrix from a T x d array, or from T x n x d tokens with ``query_index``, and its description.

    Raises:
        InputError: when ``query_index`` is given for a T x d array, missing for a T x n x d one, or out of range
            for its n tokens, or when the array is neither 2-D nor 3-D.
    """
    if arr.ndim == 2:
        if query_index is not None:
            raise InputError(
                f"{source}: "
                + Param("query_index")
                + f" applies to T x n x d token arrays, this one is {tuple(arr.shape)}"
            )
        return arr, source
    if arr.ndim == 3:
        if query_index is None:
            raise InputError(
                f"{source}: a T x n x d array needs " + Param("query_index") + " (0 for [CLS], -1 for the last token)"
            )
        n = arr.shape[1]
        if not -n <= query_index < n:
            raise InputError(Param("query_index") + f" {query_index} is out of range for n = {n} tokens")
        if isinstance(arr, MappedArray):
            return arr.token(query_index), f"{source}, token {query_index}"
        return arr[:, query_index, :], f"{source}, token {query_index}"
    raise InputError(f"{source}: expected a T x d matrix or T x n x d tokens, got shape {tuple(arr.shape)}")
