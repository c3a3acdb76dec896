"""Writing outputs: their paths checked before any work (a folder to write into, an output that would
overwrite an input) and records as parquet, each file put in place atomically (:func:`atomic_path` and
:func:`check_writable` sit in :mod:`mhaaudit.staging`, which stages a run's outputs, and are re-exported
here). The provenance they are stamped with is :mod:`mhaaudit.provenance` and the reading of feature
files :mod:`mhaaudit.feature_files`, whose names this module re-exports."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from .documents import METADATA_KEY
from .errors import InputError, OutputError, Param
from .feature_files import FEATURE_EXTENSIONS as FEATURE_EXTENSIONS
from .feature_files import MAX_HEADER_BYTES as MAX_HEADER_BYTES
from .feature_files import parquet_declared_bytes as parquet_declared_bytes
from .feature_files import read_array as read_array
from .feature_files import refuse_results_file as refuse_results_file
from .feature_files import safetensors_header as safetensors_header
from .feature_files import to_query_matrix as to_query_matrix
from .feature_files import torch_declared_bytes as torch_declared_bytes
from .feature_files import torch_load_reason as torch_load_reason
from .files import arrow_source, kind_of, same_place, within
from .mapped import MappedArray as MappedArray
from .provenance import library_versions as library_versions
from .provenance import stamp as stamp
from .staging import (  # noqa: F401 - re-exported
    _STAGED,
    StagedOutputs,
    _reason,
    _refuse_special,
    _refuse_symlink,
    _refuse_unnamable,
    make_output_folder,
    staged_outputs,
    temp_prefix,
)
from .staging import atomic_path as atomic_path
from .staging import check_writable as check_writable
from .staging import ordinary_mode as ordinary_mode
from .tables import records_table
from .tensor_values import dense_values as dense_values

# --------------------------------------------------------------------------- output paths


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
    named = [local_part(i) for i in inputs if i is not None]
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


def check_parquet_out(out: object, option: str, *, writable: bool = True) -> Path:
    """The parquet results file ``out`` as a path, checked before any work: a path (a ``str`` or
    ``os.PathLike``) whose name ends in ``.parquet`` (the records are written as parquet), in a folder
    that can be written (:func:`check_writable`; not asked when not ``writable``: a process that never
    writes it, such as a rank other than 0 of a job). The command line's ``--out`` and the library's ``out``
    share it; ``option`` names it in the messages.

    Raises:
        InputError: when ``out`` is not a path, or its name does not end in ``.parquet``.
        OutputError: when it cannot be written there (see :func:`check_writable`).
    """
    if not isinstance(out, (str, os.PathLike)) or isinstance(os.fspath(out), bytes):
        raise InputError(option + f" {out!r}: give the results file's path (a str or os.PathLike)")
    path = Path(out)
    if path.suffix.lower() != ".parquet":
        raise InputError(option + f" {out}: the records are written as parquet; use a .parquet file name")
    if writable:
        check_writable(path)
    return path


def check_results_out(out: object, option: str, inputs: list, *, writer: bool) -> Path:
    """A results file ``out`` of the library (a series' resume file) as a path, checked as the command line
    checks ``--out``: :func:`check_parquet_out`, then :func:`refuse_inputs` against ``inputs``. The file's
    folder is asked about only where the file is written (``writer``): under torchrun, rank 0 alone writes
    it, and another node need not hold its folder.

    Raises:
        InputError: when ``out`` is not a path, or its name does not end in ``.parquet``.
        OutputError: (``writer`` only) when it cannot be written there, or would write over an input.
    """
    path = check_parquet_out(out, option, writable=writer)
    if writer:
        refuse_inputs({option: path}, inputs)
    return path


def local_part(data: str | os.PathLike) -> str | os.PathLike:
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


# --------------------------------------------------------------------------- parquet records


def write_parquet(records: list[dict], path: str | os.PathLike, metadata: dict, *, now: bool = False) -> None:
    """``records`` as a typed parquet file (:func:`mhaaudit.tables.records_table`), written atomically
    (``now``: see :func:`atomic_path`)."""
    import pyarrow.parquet as pq

    table = records_table(records, metadata)
    with atomic_path(path, now=now) as tmp, open(tmp, "wb") as sink:
        # through Python's file: pyarrow takes a name only as UTF-8, and a name on disk may be any bytes
        pq.write_table(table, sink)


def parquet_bytes(records: list[dict], metadata: dict) -> bytes:
    """The same parquet file as :func:`write_parquet`, as bytes (for ``--format parquet`` on stdout)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(records_table(records, metadata), sink)
    return sink.getvalue().to_pybytes()


def read_parquet_metadata(path: str | os.PathLike) -> dict:
    """The mhaaudit metadata (provenance, command) stored in a parquet file's schema; empty when it has none.

    Raises:
        ValueError: when the metadata is not JSON, nested too deeply to be read (Python's parser recurses), or not
            UTF-8.
        OSError: when the file cannot be read.
    """
    import pyarrow.parquet as pq

    with arrow_source(path) as source:
        meta = pq.read_schema(source).metadata or {}
    raw = meta.get(METADATA_KEY)
    try:
        return json.loads(raw) if raw else {}
    except RecursionError:  # a hand-made file: [[[[...]]]] a hundred thousand deep
        raise ValueError("its JSON is nested too deeply to be read") from None
