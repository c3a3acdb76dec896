"""The reference certificate: rank of Z by a full SVD, rows by pivoted QR, a QR solve.

:func:`memorization_certificate` is the slow, simple construction that the fast head-prefix
certificate of :mod:`mhaaudit.capacity.certificate` is tested against; it is not part of the
public API (``mhaaudit.memorization_certificate`` remains as a deprecated alias for one release).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import InputError
from ..runtime import derive_seed
from .z import real_matrix

__all__ = ["Certificate", "memorization_certificate"]


@dataclass(frozen=True, eq=False)
class Certificate:
    """Proof-by-construction that an MHA layer memorises ``rank`` examples.

    With the key/query weights that produced ``Z`` fixed, the value/output weights ``w`` (one
    output, ``d_v = d`` per head, read-out collapsed into one linear map on ``Z``) solve
    ``Z_S w = y`` for random labels ``y`` on the chosen rows ``S``.

    Fields:
        rank: numerical rank r of Z under ``tolerance_rule``.
        rows: the r chosen example indices (linearly independent rows of Z).
        weights: w, (H*d,) float64.
        labels: y, (r,) float64, iid N(0, 1) from ``seed``.
        residual: max |Z_S w - y| / max |y| (relative, float64).
        cond: condition number of Z_S (largest / smallest singular value); nan when r = 0.
        tolerance: the singular-value cut-off used.
        tolerance_rule: the rule, in words and numbers.
        singular_values: all singular values of Z, descending (float64).
        shape: (T, H*d).
        seed: the label seed.
    """

    rank: int
    rows: tuple[int, ...]
    weights: torch.Tensor
    labels: torch.Tensor
    residual: float
    cond: float
    tolerance: float
    tolerance_rule: str
    singular_values: torch.Tensor
    shape: tuple[int, int]
    seed: int
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        """The fields for the JSON output, without the tensors (weights, labels, singular values)."""
        return {
            "rank": self.rank,
            "rows": list(self.rows),
            "residual": self.residual,
            "cond": self.cond,
            "tolerance": self.tolerance,
            "tolerance_rule": self.tolerance_rule,
            "shape": list(self.shape),
            "seed": self.seed,
            "notes": list(self.notes),
        }


def _rank_tolerance(sv: np.ndarray, shape: tuple[int, int], rtol: float | None) -> tuple[float, str]:
    smax = float(sv[0]) if sv.size else 0.0
    if rtol is None:
        eps = float(np.finfo(np.float64).eps)
        m = max(shape)
        tol = smax * m * eps
        rule = f"sigma > sigma_max * max(rows, cols) * eps(float64) = {smax:.6g} * {m} * {eps:.3g} = {tol:.3g}"
    else:
        tol = smax * float(rtol)
        rule = f"sigma > sigma_max * rtol = {smax:.6g} * {float(rtol):.3g} = {tol:.3g}"
    return tol, rule


def _checked_matrix(Z: torch.Tensor, seed: int, rtol: float | None) -> np.ndarray:
    """``Z`` as a float64 NumPy matrix on the CPU, once it, ``seed`` and ``rtol`` are checked.

    Raises:
        InputError: when ``seed`` is not an integer, ``rtol`` is not a number >= 0, or ``Z`` is not a real,
            finite, non-empty matrix.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InputError(f"seed must be an integer, got {seed!r}")
    if rtol is not None and (isinstance(rtol, bool) or not isinstance(rtol, (int, float)) or not (rtol >= 0)):
        raise InputError(f"rtol must be a non-negative number, got {rtol!r}")
    return real_matrix("Z", Z).numpy()


def _min_norm_solve(ZS: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float, float]:
    """``(w, residual, cond)``: the minimum-norm solution of ``Z_S w = y`` through a QR of ``Z_S^T`` (m x r, full
    column rank), its residual ``max |Z_S w - y| / max |y|`` and the condition number of ``Z_S``."""
    import scipy.linalg

    Qs, Rs = np.linalg.qr(ZS.T, mode="reduced")
    c = scipy.linalg.solve_triangular(Rs, y, trans="T", lower=False)
    w = Qs @ c
    residual = float(np.max(np.abs(ZS @ w - y)) / max(np.max(np.abs(y)), np.finfo(np.float64).tiny))
    svS = np.linalg.svd(ZS, compute_uv=False)
    cond = float(svS[0] / svS[-1]) if svS[-1] > 0 else float("inf")
    return w, residual, cond


def memorization_certificate(Z: torch.Tensor, *, seed: int = 0, rtol: float | None = None) -> Certificate:
    """Certify that the MHA layer behind ``Z`` memorises ``rank(Z)`` examples.

    1. Numerical rank r of ``Z`` (float64 SVD; default cut-off
       ``sigma_max * max(rows, cols) * eps(float64)``, or ``sigma_max * rtol``).
    2. r linearly independent rows ``S`` by column-pivoted QR of ``Z^T`` (greedy, well
       conditioned: each pivot is the row farthest from the span of those already chosen).
    3. Random labels ``y ~ N(0, 1)`` (seeded) and the minimum-norm ``w`` with ``Z_S w = y``,
       solved through the same QR factors.
    4. The residual ``max |Z_S w - y| / max |y|`` recomputed from ``Z`` itself.

    Raises:
        InputError: when ``seed`` is not an integer, ``rtol`` is not a number >= 0, or ``Z`` is not a real,
            finite, non-empty matrix.
    """
    import scipy.linalg

    A = _checked_matrix(Z, seed, rtol)
    T, m = A.shape
    sv = np.linalg.svd(A, compute_uv=False)
    tol, rule = _rank_tolerance(sv, (T, m), rtol)
    r = int(np.sum(sv > tol))
    notes: list[str] = []

    gen = torch.Generator(device="cpu")
    gen.manual_seed(derive_seed(int(seed), "labels"))
    if r == 0:
        return Certificate(
            rank=0,
            rows=(),
            weights=torch.zeros(m, dtype=torch.float64),
            labels=torch.zeros(0, dtype=torch.float64),
            residual=0.0,
            cond=float("nan"),
            tolerance=tol,
            tolerance_rule=rule,
            singular_values=torch.from_numpy(sv.copy()),
            shape=(T, m),
            seed=int(seed),
            notes=("Z is numerically zero: nothing is certified",),
        )

    # Column-pivoted QR of Z^T (m x T): the first r pivots are r well-separated rows of Z.
    _Q, _R, piv = scipy.linalg.qr(A.T, mode="economic", pivoting=True)
    rows = np.sort(piv[:r])
    ZS = A[rows]
    y = torch.randn(r, generator=gen, dtype=torch.float64).numpy()
    w, residual, cond = _min_norm_solve(ZS, y)
    if r < T:
        notes.append(f"Z has {T} rows but rank {r}: only the {r} chosen examples are certified")
    return Certificate(
        rank=r,
        rows=tuple(int(i) for i in rows),
        weights=torch.from_numpy(w),
        labels=torch.from_numpy(y),
        residual=residual,
        cond=cond,
        tolerance=tol,
        tolerance_rule=rule,
        singular_values=torch.from_numpy(sv.copy()),
        shape=(T, m),
        seed=int(seed),
        notes=tuple(notes),
    )
