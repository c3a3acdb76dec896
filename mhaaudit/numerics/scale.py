"""Exact power-of-two rescaling: the data's scale never reaches a rank decision.

Kruskal rank does not change when every vector is multiplied by one number, and the default
rank rule is relative, so no verdict may either. Anything that squares entries (Gram matrices,
norms, power iteration) overflows for data near 1e155 and underflows for data near 1e-155, so
every computation first divides the data by ``2**exponent``, the power of two that brings the
largest absolute entry into [0.5, 1). Multiplying by a power of two is exact (no bit of any
normal number changes), so the rescaled problem is the same problem: its singular values are
the data's divided by ``2**exponent``, its decisions are the data's decisions, and an absolute
tolerance is divided with it (``RankRule.in_units``). Results are reported in the data's own
units (``Scaled.to_data``; a tolerance by ``Scaled.tol_to_data``: an absolute tolerance far above
tiny data overflows in the units, and is reported as given).

The rescaling happens before subnormals are flushed (``subnormals_kept``): data whose entries
are themselves subnormal (below 2.2e-308) are brought back to the normal range exactly. Entries
below 2**-1022 times the largest entry still count as zero inside ``numerics``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .convert import to_float64
from .pow2 import data_tolerance, exponent_of, ldexp
from .subnormals import subnormals_kept

if TYPE_CHECKING:
    from .rule import RankRule

__all__ = ["Scaled", "data_tolerance", "exponent_for", "row_norms", "scaled"]


@dataclass(frozen=True)
class Scaled:
    """Data divided by ``2**exponent`` (float64, largest absolute entry in [0.5, 1)), and the rank
    rule in those units. Nothing in it overflows or underflows when squared."""

    X: torch.Tensor
    exponent: int
    rule: RankRule
    atol: float | None = None  # the rule's absolute tolerance in the data's units (``rule`` has it in the units)

    def to_data(self, v):
        """A singular value or tolerance (number or tensor) back in the data's own units (kept as
        a subnormal where it is one there, even inside ``numerics``)."""
        with subnormals_kept():
            return ldexp(v, self.exponent)

    def tol_to_data(self, tol):
        """A tolerance (number or tensor) back in the data's own units (:func:`data_tolerance`)."""
        return data_tolerance(self.to_data(tol), self.atol)


def scaled(X: torch.Tensor, rule: RankRule, top: float | None = None, exponent: int | None = None) -> Scaled:
    """``X`` in float64, divided by the power of two that brings its largest entry into [0.5, 1).

    Done with subnormals kept, so that subnormal entries (of float32 or float64 data) are
    converted and rescaled exactly even inside ``numerics``. ``top``: the largest absolute entry
    of ``X`` (:func:`~.pow2.max_abs`) when the caller has it; it is used when it is a finite normal
    number of ``X``'s dtype (then no setting of subnormals can have changed it), else found here.
    ``exponent``: the power of two to divide by, when the caller has fixed it for a larger whole
    that ``X`` is a part of (:func:`exponent_for` of the whole), so that every part is in the same
    units. The converted copy is rescaled in place: one float64 tensor is made.
    """
    with subnormals_kept():
        X64 = to_float64(X)
        e = exponent if exponent is not None else _top_exponent(X, top)
        if e is None:
            e = exponent_of(X64)
        if e:
            X64 = ldexp(X64, -e, inplace=X64 is not X)  # a float64 X on a device is not copied by to_float64
    return Scaled(X64, e, rule.in_units(e), rule.atol)


def exponent_for(X: torch.Tensor, top: float | None = None) -> int:
    """The power of two :func:`scaled` divides ``X`` by (``top`` as there)."""
    e = _top_exponent(X, top)
    if e is None:
        with subnormals_kept():
            e = exponent_of(to_float64(X))
    return e


def _top_exponent(X: torch.Tensor, top: float | None) -> int | None:
    """The exponent of ``top`` when it can be trusted (a finite normal number of ``X``'s dtype), else None."""
    if top is not None and X.is_floating_point() and math.isfinite(top) and top >= torch.finfo(X.dtype).tiny:
        return math.frexp(top)[1]
    return None


def row_norms(X: torch.Tensor) -> torch.Tensor:
    """The 2-norms of the rows of a float64 matrix, each row rescaled by its own power of two
    first, so that a row of tiny entries does not underflow to norm 0 when its entries are squared."""
    if X.shape[-1] == 0:
        return torch.zeros(X.shape[:-1], dtype=X.dtype, device=X.device)
    e = exponent_of(X, dims=-1)
    return ldexp(ldexp(X, -e[..., None]).norm(dim=-1), e)
