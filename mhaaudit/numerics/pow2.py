"""Exact powers of two: the exponent that brings data into [0.5, 1), and ``x * 2**e`` without rounding.

The arithmetic under the rescaling of :mod:`mhaaudit.numerics.scale` and under a rank rule's
absolute tolerance in the rescaled units (``RankRule.in_units``); it knows nothing of either.
"""

from __future__ import annotations

import math

import torch

__all__ = ["exponent_of", "ldexp", "max_abs"]


def exponent_of(x: torch.Tensor, dims=None):
    """The exponent e with ``max|x| / 2**e`` in [0.5, 1): an int, or a tensor of ints per slice
    when ``dims`` (the dimensions reduced over) is given. 0 for an all-zero (or empty) input."""
    if dims is None:
        m = float(x.abs().max()) if x.numel() else 0.0
        return math.frexp(m)[1] if math.isfinite(m) else 0
    mx = x.abs().amax(dim=dims)
    return torch.frexp(mx)[1].to(torch.int64)


def max_abs(x: torch.Tensor) -> float:
    """The largest absolute entry of ``x`` as a float, in one pass without a temporary: NaN when
    any entry is NaN, infinite when one is infinite and none is NaN, 0 for an empty input. Exact
    (a maximum rounds nothing); under flushed subnormals an all-subnormal input reads 0."""
    if x.numel() == 0:
        return 0.0
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
    never smaller than the result. The two give the same bits wherever the result is normal.
    ``inplace``: a tensor ``x`` (floating) is multiplied in place, by the same factors (the same bits),
    for a whole-number ``e``.
    """
    if isinstance(e, torch.Tensor):
        h = torch.div(e, 2, rounding_mode="floor")
        return x * _pow2(h, x.dtype) * _pow2(e - h, x.dtype)
    e = int(e)
    if e == 0:
        return x
    h = e // 2
    if isinstance(x, torch.Tensor):
        if inplace:
            if -1022 <= e <= 1023:
                return x.mul_(math.ldexp(1.0, e))
            return x.mul_(math.ldexp(1.0, h)).mul_(math.ldexp(1.0, e - h))
        if -1022 <= e <= 1023:
            return x * math.ldexp(1.0, e)
        return x * math.ldexp(1.0, h) * math.ldexp(1.0, e - h)
    try:
        return math.ldexp(float(x), e)
    except OverflowError:
        return math.copysign(math.inf, x)
