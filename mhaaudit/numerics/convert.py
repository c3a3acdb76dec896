"""The exact float64 value of every entry of a real floating (or integer) tensor, computed in the
calling thread.

Every dtype features may come in converts to float64 exactly: float32, float16 and bfloat16
widen, the 8-bit formats are a table of their 256 values, integers up to 2^53 are whole float64
numbers. On the CPU the conversion runs in the calling thread (NumPy, bit operations, a table),
never in torch's intra-op worker threads, with subnormals kept (``rule.subnormals_kept``): a
worker thread of torch's CPU pool keeps the flushing mode of the thread that started it, so a
conversion split across the pool could read half of a tensor's subnormal entries as zeros.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from .subnormals import subnormals_kept

__all__ = ["FLOAT8_DTYPES", "to_float64", "torch_dtype_of"]

#: The 8-bit floating formats torch has: every one of their 256 bit patterns is a float64 (or NaN),
#: decoded by table.
FLOAT8_DTYPES = frozenset(getattr(torch, name) for name in dir(torch) if name.startswith("float8_"))


def torch_dtype_of(dtype) -> torch.dtype:
    """The torch dtype of a NumPy dtype (or anything ``numpy.dtype`` takes), in the machine's byte order.

    Raises:
        TypeError: when NumPy reads no dtype from ``dtype``, or torch has none for it.
    """
    return torch.from_numpy(np.empty(0, dtype=np.dtype(dtype).newbyteorder("="))).dtype


@functools.cache
def _float8_table(dtype: torch.dtype) -> np.ndarray:
    """The float64 value of each of the 256 bit patterns of an 8-bit float format, by pattern."""
    with subnormals_kept():  # 256 entries: one thread, the caller's, with subnormals kept
        return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype).to(torch.float64).numpy().copy()


def to_float64(x: torch.Tensor) -> torch.Tensor:
    """The exact float64 value of every entry of a real floating (or integer) tensor, on its device.

    On the CPU the conversion runs in the calling thread: NumPy for float64, float32 and float16;
    bfloat16 by its bits (they are the top half of a float32's); the 8-bit formats by a table of
    their 256 values, with subnormals kept. Every one of these is exact, subnormal entries included."""
    if x.device.type != "cpu" or x.requires_grad:
        return x.to(torch.float64)
    with subnormals_kept():
        return _to_float64(x.detach())


def _to_float64(x: torch.Tensor) -> torch.Tensor:
    if x.dtype == torch.float64:
        return torch.from_numpy(x.numpy().copy())
    if x.dtype in (torch.float32, torch.float16):
        return torch.from_numpy(x.numpy().astype(np.float64))
    if x.dtype == torch.bfloat16:
        bits = (x.contiguous().view(torch.int16).to(torch.int32) << 16).view(torch.float32)
        return torch.from_numpy(bits.numpy().astype(np.float64))
    if x.dtype in FLOAT8_DTYPES:
        return torch.from_numpy(_float8_table(x.dtype)[x.contiguous().view(torch.uint8).numpy()])
    return x.to(torch.float64)
