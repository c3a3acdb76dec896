"""Exact powers of two: the exponent that brings data into [0.5, 1), and ``x * 2**e`` without rounding.

The arithmetic under the rescaling of :mod:`mhaaudit.numerics.scale` and under a rank rule's
absolute tolerance in the rescaled units (``RankRule.in_units``), and a tolerance taken back from
them (:func:`data_tolerance`); it knows nothing of either.

On the CPU these run in the calling thread (NumPy, or bit operations), never in torch's intra-op
worker threads: subnormal entries are kept exactly where the caller keeps them
(``rule.subnormals_kept``), which sets the calling thread only. A worker thread of torch's CPU
pool keeps the flushing mode of the thread that started it, so a torch kernel split across the
pool could read half of a tensor's subnormal entries as zeros.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["data_tolerance", "exponent_of", "ldexp", "max_abs"]


def _host(x: torch.Tensor) -> bool:
    """A CPU tensor whose arithmetic is done here in NumPy (in the calling thread)."""
    return x.device.type == "cpu" and not x.requires_grad and x.dtype in (torch.float64, torch.float32)


def exponent_of(x: torch.Tensor, dims=None):
    """The exponent e with ``max|x| / 2**e`` in [0.5, 1): an int, or a tensor of ints per slice
    when ``dims`` (the dimensions reduced over) is given. 0 for an all-zero (or empty) input."""
    if dims is None:
        if _host(x):
            m = float(np.max(np.abs(x.numpy()))) if x.numel() else 0.0
        else:
            m = float(x.abs().max()) if x.numel() else 0.0
        return math.frexp(m)[1] if math.isfinite(m) else 0
    if _host(x):
        axes = tuple(d % x.ndim for d in ((dims,) if isinstance(dims, int) else dims))
        mx = np.max(np.abs(x.numpy()), axis=axes) if x.numel() else np.zeros(())
        return torch.from_numpy(np.asarray(np.frexp(mx)[1], dtype=np.int64))
    mx = torch.maximum(x.amax(dim=dims), x.amin(dim=dims).neg())  # (no temporary of x's size)
    return torch.frexp(mx)[1].to(torch.int64)


def max_abs(x: torch.Tensor) -> float:
    """The largest absolute entry of ``x`` as a float, without a temporary of its size: NaN when any
    entry is NaN, infinite when one is infinite and none is NaN, 0 for an empty input. Exact (a
    maximum rounds nothing); a CPU tensor is read in the calling thread (module docstring)."""
    if x.numel() == 0:
        return 0.0
    if _host(x):
        xn = x.numpy()
        hi, lo = float(np.max(xn)), -float(np.min(xn))
        return hi if math.isnan(hi) or hi >= lo else lo
    if x.is_floating_point():
        return float(torch.linalg.vector_norm(x, ord=math.inf))
    return float(x.abs().amax())


def _pow2(e: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """2**e for integer tensors e in [-1022, 1023], exactly (built from the float64 bits)."""
    return ((e.to(torch.int64) + 1023) << 52).view(torch.float64).to(dtype)


def ldexp(x, e, inplace: bool = False):
    """``x * 2**e`` without rounding, also where ``2**e`` itself is not a float64 (|e| > 1023).

    ``x`` and ``e``: numbers or tensors (``e`` broadcasts against ``x``). For a whole-number ``e``
    with ``2**e`` a normal float64 (-1022 <= e <= 1023), a tensor is multiplied once by ``2**e``:
    exact wherever the result is a normal number (where it is subnormal, rounded once, as any
    product). Otherwise the factor is applied in two halves of the same sign, so an intermediate is
    never smaller than the result. The two give the same bits wherever the result is normal. A CPU
    tensor is multiplied in the calling thread (module docstring). ``inplace``: a floating tensor
    ``x`` is multiplied in place, by the same factors (the same bits), for a whole-number ``e`` or a tensor
    of them (which must broadcast to ``x``'s shape).
    """
    if isinstance(e, torch.Tensor):
        h = torch.div(e, 2, rounding_mode="floor")
        if isinstance(x, torch.Tensor) and _host(x):
            a, b = _pow2(h, torch.float64).numpy(), _pow2(e - h, torch.float64).numpy()
            with np.errstate(over="ignore", under="ignore"):  # as torch: inf or 0, without a warning
                if inplace:
                    xn = x.numpy()
                    np.multiply(xn, a, out=xn, casting="same_kind")
                    np.multiply(xn, b, out=xn, casting="same_kind")
                    return x
                return torch.from_numpy(np.asarray(x.numpy() * a * b, dtype=_np(x.dtype)))
        if inplace:
            return x.mul_(_pow2(h, x.dtype)).mul_(_pow2(e - h, x.dtype))
        return x * _pow2(h, x.dtype) * _pow2(e - h, x.dtype)
    e = int(e)
    if e == 0:
        return x
    h = e // 2
    if isinstance(x, torch.Tensor):
        factors = (math.ldexp(1.0, e),) if -1022 <= e <= 1023 else (math.ldexp(1.0, h), math.ldexp(1.0, e - h))
        if _host(x):
            xn = x.numpy()
            with np.errstate(over="ignore", under="ignore"):  # as torch: inf or 0, without a warning
                if inplace:
                    for f in factors:
                        np.multiply(xn, f, out=xn)
                    return x
                out = xn * factors[0] if len(factors) == 1 else xn * factors[0] * factors[1]
            return torch.from_numpy(np.asarray(out, dtype=_np(x.dtype)))
        if inplace:
            for f in factors:
                x.mul_(f)
            return x
        if -1022 <= e <= 1023:
            return x * math.ldexp(1.0, e)
        return x * math.ldexp(1.0, h) * math.ldexp(1.0, e - h)
    try:
        return math.ldexp(float(x), e)
    except OverflowError:
        return math.copysign(math.inf, x)


def _np(dtype: torch.dtype):
    return np.float64 if dtype == torch.float64 else np.float32


def data_tolerance(back, atol: float | None):
    """A tolerance taken back to the data's units (``back``, a number or tensor), never below the data's absolute
    tolerance ``atol`` when it is finite, and ``atol`` where ``back`` is infinite. The rule's tolerance is
    ``max(atol, rtol * sigma_max)``; ``atol`` divided by a power of two of the data (``RankRule.in_units``) overflows
    to infinity in the units of tiny data, where every singular value is below it, as it is below ``atol`` in the
    data's units (the rule's rank 0 either way), and underflows to 0 in the units of huge data, where every
    nonzero singular value is above it, as it is above ``atol`` in the data's units: in both the rank is the
    rule's and the tolerance ``atol``."""
    if atol is None or not math.isfinite(atol):
        return back
    if isinstance(back, torch.Tensor):
        return torch.where(torch.isinf(back), torch.full_like(back, float(atol)), back.clamp(min=float(atol)))
    return float(atol) if math.isinf(back) else max(back, float(atol))
