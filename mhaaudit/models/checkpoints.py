"""Checkpoint files: reading a state dict, finding one in a folder, loading it only where it fits.

Both backends read single weights files (``.safetensors`` or a torch checkpoint, read with
``weights_only=True``) and load them into a built model. A checkpoint that does not fit (a
parameter of another shape, a parameter missing) is refused with a one-line
:class:`~mhaaudit.errors.ModelError` naming the first offending parameter; nothing is loaded
partially without saying so.
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import nn

from ..errors import ModelError
from ..feature_files import safetensors_header, torch_load_reason
from ..files import native_name
from ..tensor_values import dense_values
from .file_reads import HEADER, once
from .hub_reads import offline_weights_error as offline_weights_error
from .misfit import first_misfit, holds_complex, parameters_missing, shape_misfit

__all__ = [
    "CHECKPOINT_FILES",
    "DTYPE_BITS",
    "IGNORABLE_MISSING",
    "checkpoint_header",
    "fake_read",
    "find_checkpoint",
    "header_shapes",
    "load_fitting",
    "offline_weights_error",
    "read_state_file",
    "state_file_keys",
    "state_shapes",
]

# File names a checkpoint folder may hold, in the order they are tried.
CHECKPOINT_FILES = ("model.safetensors", "pytorch_model.bin", "model.pth", "checkpoint.pth")
# Parameters a headless model may lack in a checkpoint without harm (pooler, masked-image token).
IGNORABLE_MISSING = ("pooler", "mask_token")


#: The width in bits of each dtype a safetensors header may name (as the safetensors format lists them).
DTYPE_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E4M3FN": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "F8_E8M0": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
}


def checkpoint_header(path: str) -> dict:
    """The checked header of the safetensors weights file ``path`` (``feature_files.safetensors_header``), read
    once within ``file_reads.read_once``; its callers only read it.

    Raises:
        ValueError: as ``feature_files.safetensors_header``; OSError when the file cannot be opened or read.
    """
    return once(HEADER, path, lambda: safetensors_header(path))


def header_shapes(path: str) -> dict[str, tuple[int, ...]]:
    """The names and shapes of the tensors of the safetensors file ``path``, from its header alone
    (:func:`checkpoint_header`), each tensor's entry checked: a dtype of :data:`DTYPE_BITS`, a shape of sizes (whole
    numbers of at least 0) and data offsets that span exactly its shape times its dtype's width.

    Raises:
        ValueError: naming the first malformed entry, or as :func:`checkpoint_header`; OSError when the file
            cannot be opened or read.
    """
    shapes = {}
    for key, entry in checkpoint_header(path).items():
        if key == "__metadata__":
            continue
        tensor = f"tensor {key[:60]!r}"
        dtype, shape = entry.get("dtype"), entry.get("shape")
        if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
            raise ValueError(f"{tensor} has dtype {str(dtype)[:20]!r}, which safetensors does not store")
        if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape):
            raise ValueError(f"{tensor} has shape {str(shape)[:40]}, not a list of sizes")
        if any(s < 0 for s in shape):
            raise ValueError(f"{tensor} has shape {shape}, with a negative size")
        begin, end = entry["data_offsets"]  # present and inside the file: checkpoint_header checked them
        want = (math.prod(shape) * DTYPE_BITS[dtype] + 7) // 8  # whole bytes, in integers (exact at any size)
        if end - begin != want:
            raise ValueError(
                f"{tensor} of dtype {dtype} and shape {shape} takes {want} bytes; its data offsets span {end - begin}"
            )
        shapes[key] = tuple(shape)
    return shapes


def find_checkpoint(folder: str | os.PathLike) -> str | None:
    """The first checkpoint file of :data:`CHECKPOINT_FILES` in ``folder``, or None."""
    for fn in CHECKPOINT_FILES:
        path = os.path.join(folder, fn)
        if os.path.exists(path):
            return path
    return None


def read_state_file(path: str) -> dict[str, torch.Tensor]:
    """A state dict from a .safetensors file or a torch checkpoint (weights only).

    A checkpoint that wraps its state dict (``state_dict``, ``model``, ``module``) is unwrapped.

    Raises:
        ModelError: when the file cannot be read (unreadable, corrupt, or a pickle beyond plain tensors), or does
            not hold a dict of tensors. Complex values are the loader's to refuse where a real parameter would take
            them (:func:`load_fitting`): a tensor the model never loads may be anything.
    """
    return read_state(path)[0]


def read_state(path: str) -> tuple[dict[str, torch.Tensor], bool]:
    """The state dict of :func:`read_state_file`, and whether the file wrapped it (a training checkpoint's
    ``{"state_dict": ..., "epoch": ...}``): such a file is not one that ``from_pretrained`` reads.

    Raises:
        ModelError: as :func:`read_state_file`.
    """
    sd: Any  # whatever the file holds: checked below
    try:
        if path.endswith(".safetensors"):
            from safetensors.torch import load_file

            checkpoint_header(path)  # its stated length checked against the file before anything is read
            with native_name(path) as name:  # a name load_file takes, whatever bytes the file's own holds
                sd = load_file(name)
        else:
            _refuse_cut_zip(path)
            sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # unreadable or not a checkpoint
        raise ModelError(f"cannot read the checkpoint {path}: {torch_load_reason(exc)}") from exc
    sd, wrapped = _unwrapped(sd, path)
    for name, t in sd.items():
        dense_values(t, f"the checkpoint {path}, {str(name)[:80]}", ModelError)
    return sd, wrapped


def _refuse_cut_zip(path: str) -> None:
    """Refuse a torch file that begins as the zip archive ``torch.save`` writes but has no end (the list of
    its contents a zip archive ends with): a copy or download cut short. Torch reads a file that is no zip
    archive as its legacy form, and says no more of this one than ``[Errno 22] Invalid argument``.

    Raises:
        ValueError: saying so, when ``path`` is such a file (the callers turn it into their one line).
    """
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as fh:
            if fh.read(4) == b"PK\x03\x04":
                raise ValueError("the file begins as a zip archive (torch.save's form) but has no end: it is cut short")


def _unwrapped(sd: Any, path: str) -> tuple[dict[str, torch.Tensor], bool]:
    """The state dict a checkpoint's contents hold, and whether they wrapped it (``state_dict``, ``model``,
    ``module``).

    Raises:
        ModelError: when they hold no dict of tensors.
    """
    wrapped = False
    for key in ("state_dict", "model", "module"):
        if isinstance(sd, dict) and key in sd and isinstance(sd[key], dict):
            sd, wrapped = sd[key], True
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise ModelError(f"the checkpoint {path} does not hold a state dict of tensors")
    return sd, wrapped


def state_shapes(path: str) -> dict[str, tuple[int, ...]] | None:
    """The names and shapes of the tensors of the checkpoint file ``path`` (unwrapped as :func:`read_state`
    unwraps it), read without their data: a safetensors file's header (:func:`header_shapes`: each entry
    checked), or a torch checkpoint in the zip form
    ``torch.save`` writes, memory-mapped and unpickled with ``weights_only=True`` onto the meta device (its pickle
    is read, its tensors' bytes are not), or in the legacy form, unpickled the same way with fake tensors (its
    tensors' bytes follow its pickle, and are not read: :func:`_legacy_shapes`). None for a torch file that cannot
    be read so: its shapes are known when it is loaded.

    Raises:
        ModelError: when the file cannot be read, or does not hold a state dict of tensors.
    """
    try:
        if path.endswith(".safetensors"):
            return header_shapes(path)
        return once("torch shapes", path, lambda: _torch_shapes(path))
    except ModelError:
        raise
    except Exception as exc:  # unreadable or not a checkpoint
        raise ModelError(f"cannot read the checkpoint {path}: {torch_load_reason(exc)}") from exc


def _torch_shapes(path: str) -> dict[str, tuple[int, ...]] | None:
    """:func:`state_shapes` of a torch file: None for one in the legacy form that torch's fake tensors cannot read
    (:func:`_legacy_shapes`).

    Raises:
        ModelError: when the file holds no state dict of tensors; the reader's own errors pass through.
    """
    if not zipfile.is_zipfile(path):
        _refuse_cut_zip(path)
        sd = _legacy_shapes(path)
        return None if sd is None else {str(k): tuple(v.shape) for k, v in _unwrapped(sd, path)[0].items()}
    # memory-mapped: nothing of the tensors' bytes is read (a torch before 2.10 reads each storage it maps to
    # the meta device when the file is read as a stream); a name torch's own open takes, whatever its bytes
    with native_name(path) as name:
        sd = torch.load(name, map_location="meta", mmap=True, weights_only=True)
    return {str(k): tuple(v.shape) for k, v in _unwrapped(sd, path)[0].items()}


_Read = TypeVar("_Read")


def fake_read(read: Callable[[], _Read]) -> _Read | None:
    """``read()`` of a torch file with fake tensors (torch's ``FakeTensorMode``: each storage on the meta device,
    whatever size the file claims, and not one byte of its data read); None where it raises (a file that is not a
    torch checkpoint, or one that only the load reads): the load reads the file, and says what is wrong with it."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        with FakeTensorMode():
            return read()
    except Exception:  # noqa: BLE001 - the load reads the file and refuses it in words
        return None


def _legacy_shapes(path: str) -> Any:
    """What the torch file ``path`` in the legacy form (before torch 1.6, or saved with
    ``_use_new_zipfile_serialization=False``) holds, its tensors fake (:func:`fake_read`): its pickle alone,
    unpickled with ``weights_only=True``. None where torch cannot read it so."""

    def read() -> Any:
        with native_name(path) as name:
            return torch.load(name, map_location="meta", weights_only=True)

    return fake_read(read)


def state_file_keys(path: str) -> list[str]:
    """The parameter names in a checkpoint file; empty when it cannot be read."""
    if path.endswith(".safetensors"):
        try:
            from safetensors import safe_open

            with native_name(path) as name, safe_open(name, framework="pt") as fh:
                return list(fh.keys())
        except Exception:  # noqa: BLE001
            return []
    try:
        return list(read_state_file(path))
    except ModelError:
        return []


def load_fitting(module: nn.Module, sd: dict[str, torch.Tensor], misfit: str) -> None:
    """Load ``sd`` into ``module`` when it fits.

    Entries the module does not have are ignored.

    Raises:
        ModelError: ``"<misfit>: <first problem>"``, when an entry has another shape than the module's
            parameter or holds complex values where the module's are real, or the state lacks a parameter of the
            module (except :data:`IGNORABLE_MISSING`). The first is the first by name, in the words of
            :mod:`.misfit`, as the check of a file before any work names it.
    """
    own = module.state_dict()
    wrong = first_misfit({k: v.shape for k, v in sd.items()}, {k: v.shape for k, v in own.items()}, "")
    if wrong is not None:
        raise ModelError(f"{misfit}: {shape_misfit(*wrong)}")
    complex_ = sorted(k for k, v in sd.items() if k in own and v.is_complex() and not own[k].is_complex())
    if complex_:  # loading would drop the imaginary part
        raise ModelError(f"{misfit}: {holds_complex(complex_[0])}")
    result = module.load_state_dict({k: v for k, v in sd.items() if k in own}, strict=False)
    params = {k for k, _ in module.named_parameters()}
    missing = [k for k in result.missing_keys if k in params and not is_ignorable(k)]
    if missing:
        raise ModelError(f"{misfit}: {parameters_missing(missing)}")


def is_ignorable(key: str) -> bool:
    """True for a parameter a checkpoint may lack (see :data:`IGNORABLE_MISSING`)."""
    return any(s in key for s in IGNORABLE_MISSING)
