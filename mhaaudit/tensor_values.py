"""A tensor read for its values: dense (no meta, sparse, nested or quantized tensor), and in storage of its own.

What a ``torch.save`` file or a caller hands over may declare more than it holds: a meta tensor has no values, an
expanded one (a stride of 0) repeats the values its storage holds to fill its shape. These are the checks of that,
shared by the readers of feature files (:mod:`mhaaudit.feature_files`), of checkpoints and of in-memory features.
"""

from __future__ import annotations

import torch

from .errors import InputError, MhaauditError


def stored_bytes(t: torch.Tensor) -> tuple[int, int]:
    """The bytes ``t``'s elements declare and the bytes its storage holds: more of the first when its elements share
    storage (an expanded tensor, a stride of 0, whose 1.5 kB file can declare 10^12 rows)."""
    return t.numel() * t.element_size(), t.untyped_storage().nbytes()


def own_storage(t):
    """``t``, or a copy of it in storage of its own when its elements share storage (an expanded tensor from a .pt
    file, that every pass would read row by row): made after the checks its shape and dtype decide, not before."""
    if isinstance(t, torch.Tensor):
        need, held = stored_bytes(t)
        if need > held:
            return t.contiguous()
    return t


def dense_values(t, where: str, error: type[MhaauditError] = InputError):
    """``t`` itself when it is a dense tensor holding values (what the linear algebra reads); anything else a
    ``torch.save`` file may hold is refused in one line.

    Raises:
        MhaauditError: of type ``error``, when ``t`` is a meta tensor (shapes without values), a sparse, nested
            or quantized tensor (another layout than torch.strided).
    """
    if not isinstance(t, torch.Tensor):
        return t
    if t.is_meta:
        raise error(f"{where}: the tensor is on the meta device: it has a shape but no values (save the real tensor)")
    if t.layout != torch.strided or t.is_nested or t.is_quantized:
        kind = "nested" if t.is_nested else "quantized" if t.is_quantized else str(t.layout).replace("torch.", "")
        how = {"quantized": "tensor.dequantize()", "nested": "one tensor of one shape"}.get(kind, "tensor.to_dense()")
        raise error(f"{where}: the tensor is {kind}, not a dense tensor; save it dense ({how})")
    return t
