"""What a local checkpoint must be for a series to audit it as the model's, read cheaply before any work.

- :func:`header_shapes`: a safetensors file's header read alone, and refused when it cannot describe the
  tensors it holds (a dtype safetensors does not store, a shape that is not a list of sizes, a tensor whose
  bytes are not its shape times its dtype's width);

What cannot be read cheaply is checked when the checkpoint is read: a weights file in another form
than safetensors (``pytorch_model.bin``, ``.pt``) is loaded whole, and only then are its tensors known.
"""

from __future__ import annotations

import math

from ..errors import InputError, Param, one_line
from ..feature_files import safetensors_header

__all__ = ["DTYPE_BITS", "header_shapes"]

#: The width in bits of each dtype a safetensors header may name (as the safetensors format lists them).
DTYPE_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E4M3FN": 8,
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


def header_shapes(name: str, path: str) -> dict[str, tuple[int, ...]]:
    """The names and shapes of the tensors of the safetensors file ``path`` of the checkpoint ``name``,
    from its header alone, each tensor's entry checked: a dtype of :data:`DTYPE_BITS`, a shape of sizes
    (whole numbers of at least 0) and data offsets that span exactly its shape times its dtype's width.

    Raises:
        InputError: when the header cannot be read, is not a safetensors header, or an entry is malformed.
    """

    def refuse(why: str) -> str:
        return Param("checkpoints") + f" {name}: cannot read {_base(path)} ({why})"

    try:
        header = safetensors_header(path)
    except (ValueError, TypeError, AttributeError) as exc:
        raise InputError(refuse(one_line(exc, 160))) from exc
    shapes = {}
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        tensor = f"tensor {key[:60]!r}"
        dtype, shape = entry.get("dtype"), entry.get("shape")
        if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
            raise InputError(refuse(f"{tensor} has dtype {str(dtype)[:20]!r}, which safetensors does not store"))
        if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape):
            raise InputError(refuse(f"{tensor} has shape {str(shape)[:40]}, not a list of sizes"))
        if any(s < 0 for s in shape):
            raise InputError(refuse(f"{tensor} has shape {shape}, with a negative size"))
        begin, end = entry["data_offsets"]  # present and inside the file: safetensors_header checked them
        want = math.ceil(math.prod(shape) * DTYPE_BITS[dtype] / 8)
        if end - begin != want:
            span = end - begin
            raise InputError(
                refuse(f"{tensor} of dtype {dtype} and shape {shape} takes {want} bytes; its data offsets span {span}")
            )
        shapes[key] = tuple(shape)
    return shapes


def _base(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]
