"""The memorisation certificate for head prefixes of Z: rank, chosen rows, solved weights.

For each head count h, ``Z_h = Z[:, : h d]``: its numerical rank r under the stated rule (as
``torch.linalg.matrix_rank`` counts it, in float64), r independent rows, and value/output weights
solved for random ``N(0, 1)`` labels on those rows, with the largest residual measured on ``Z``
itself. The rank of r rows of full row rank is a proof by construction: one attention layer with
these key/query weights memorises those r examples for ANY labels.

How the rank is decided: a QR factorisation of the tall orientation gives a triangular R with
the same singular values; full rank is certified by ``1 / ||R^-1||_F <= sigma_min`` clearing the
tolerance (with a rounding margin), else the singular values of R decide; once a prefix has full
row rank, larger prefixes inherit it when its sigma_min clears their largest possible tolerance
(adding columns never lowers sigma_min). Rows are chosen and value/output weights solved through
the T x T Gram matrix, accumulated head by head; ill-conditioned rows fall back to a
column-pivoted QR.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..numerics import RankRule, scaled
from ..runtime import derive_seed
from ..validate import head_counts, integer
from .z import real_matrix

__all__ = ["HeadCertificate", "certify_head_prefixes"]


@dataclass(frozen=True)
class HeadCertificate:
    """The certificate for the first ``heads`` heads: Z_h = Z[:, : heads * d].

    Fields:
        heads: h.
        rank: numerical rank r of Z_h under the rule (equals matrix_rank on Z_h).
        rank_cap: min(T, h d), the largest rank Z_h can have.
        rows: the r example indices chosen (independent rows of Z_h).
        residual: max |Z_S w - y| / max |y| for random labels y ~ N(0, 1) and the solved w.
        tolerance: the singular-value cut-off; sigma_max: largest singular value of Z_h.
        method: how the rank was decided (singular values; a QR certificate of full rank; or
            full row rank inherited from fewer heads) and how the weights were solved (gram or qr).
        seconds: time spent on this prefix.
    """

    heads: int
    rank: int
    rank_cap: int
    rows: tuple[int, ...]
    residual: float
    tolerance: float
    sigma_max: float
    method: str
    seconds: float

    def to_dict(self) -> dict:
        """The fields under their own names for the JSON output, without ``rows`` (as many as the rank)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "rows"}


def _r_factor(Zh: torch.Tensor) -> torch.Tensor:
    """The k x k triangular factor of a QR factorisation of Zh's tall orientation, k = min(T, m).
    Its singular values are those of Zh (this is how LAPACK treats a wide matrix, and much faster
    than ``torch.linalg.svdvals`` on a 2000 x 9216 matrix)."""
    A = Zh if Zh.shape[0] >= Zh.shape[1] else Zh.T
    return torch.linalg.qr(A, mode="r").R


def _rounding(T: int, m: int, fro: float) -> float:
    # Rounding in the QR factorisation, bounded generously (a decision is taken only when it
    # survives this much); undecided cases are settled by the singular values themselves.
    return 8.0 * math.sqrt(T * m) * float(torch.finfo(torch.float64).eps) * fro


def _sigma_min_lower(R: torch.Tensor) -> float:
    """A lower bound on the smallest singular value of triangular R: 1 / ||R^-1||_F (0 if singular)."""
    k = R.shape[0]
    if k == 0 or bool((R.diagonal() == 0).any()):
        return 0.0
    Rinv = torch.linalg.solve_triangular(R, torch.eye(k, dtype=R.dtype), upper=True)
    f = float(torch.linalg.matrix_norm(Rinv))
    return 1.0 / f if math.isfinite(f) and f > 0 else 0.0


def _sigma_max(R: torch.Tensor, iters: int = 30) -> float:
    """The largest singular value of R by power iteration (a lower bound, accurate after a few steps)."""
    v = torch.ones(R.shape[1], dtype=R.dtype)
    for _ in range(iters):
        v = R.T @ (R @ v)
        nv = float(v.norm())
        if nv == 0:
            return 0.0
        v = v / nv
    return float((R @ v).norm())


def _z_rank(Zh: torch.Tensor, rule, sigma_min_known: float = 0.0) -> tuple[int, float, float, float, str]:
    """Numerical rank of Zh (T, m) under ``rule``, as ``torch.linalg.matrix_rank`` counts it.

    Returns ``(rank, sigma_max, tol, sigma_min lower bound (0 unless full rank was certified),
    how)``. ``sigma_min_known`` is a lower bound on sigma_min(Zh) known from a smaller head
    prefix of full row rank (adding columns never lowers it): when it clears the largest
    possible tolerance, full row rank follows without a factorisation.
    """
    T, m = Zh.shape
    k = min(T, m)
    fro = float(torch.linalg.matrix_norm(Zh))
    if fro == 0.0:
        return 0, 0.0, float(rule.tol(0.0, T, m)), 0.0, "zero"
    if T <= m and sigma_min_known > 0:
        tol_hi = float(rule.tol(fro, T, m))  # ||Z||_F >= sigma_max
        if sigma_min_known > tol_hi + _rounding(T, m, fro):
            return T, fro, tol_hi, sigma_min_known, "full row rank inherited from fewer heads"
    R = _r_factor(Zh)
    smax = _sigma_max(R)
    tol = float(rule.tol(smax, T, m))
    lo = _sigma_min_lower(R)
    tol_hi = float(rule.tol(float(torch.linalg.matrix_norm(R)), T, m))
    if lo > tol_hi + _rounding(T, m, fro):
        return k, smax, tol, lo, "QR: sigma_min >= 1/||R^-1||_F clears the tolerance"
    s = torch.linalg.svdvals(R)
    smax = float(s[0])
    tol = float(rule.tol(smax, T, m))
    r = int((s > tol).sum())
    return r, smax, tol, (float(s[-1]) if r == k else 0.0), "singular values"


def _residual(ZS: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> float:
    denom = max(float(y.abs().max()), float(np.finfo(np.float64).tiny))
    return float((ZS @ w - y).abs().max()) / denom


def _solve_gram(ZS: torch.Tensor, GS: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
    """Min-norm w with Z_S w = y through the Gram matrix of the rows (None when it is not
    numerically positive definite); two steps of iterative refinement against Z_S itself."""
    L, info = torch.linalg.cholesky_ex(GS)
    if int(info) != 0:
        return None
    w = ZS.T @ torch.cholesky_solve(y.unsqueeze(1), L).squeeze(1)
    for _ in range(2):
        res = y - ZS @ w
        w = w + ZS.T @ torch.cholesky_solve(res.unsqueeze(1), L).squeeze(1)
    return w


def _solve_qr(ZS: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Min-norm w with Z_S w = y through a QR factorisation of Z_S^T (better conditioned than the Gram route)."""
    Q, R = torch.linalg.qr(ZS.T, mode="reduced")
    c = torch.linalg.solve_triangular(R.T, y.unsqueeze(1), upper=False).squeeze(1)
    return Q @ c


def _checked_z(Z: torch.Tensor, d: int) -> tuple[torch.Tensor, int]:
    """``Z`` as a float64 CPU tensor and ``d`` as an integer, once both are checked.

    Raises:
        InputError: when ``Z`` is not a real, non-empty T x (H d) matrix of finite values (see
            :func:`~.z.real_matrix`) or ``d`` is not a positive integer.
    """
    Z = real_matrix("Z", Z)
    T, m = Z.shape
    d = integer("d", d)
    if m % d:
        raise InputError(f"Z has shape {T} x {m}, which is not T x (H * {d})")
    return Z, d


def _solve_on_rows(Zh: torch.Tensor, G: torch.Tensor, r: int, gen: torch.Generator) -> tuple[np.ndarray, float, str]:
    """``(rows, residual, solver)``: r independent rows of Zh (T x m, rank r >= 1, Gram ``G``), the relative
    residual of the weights solved on them for ``N(0, 1)`` labels drawn from ``gen``, and how they were solved.

    The Gram route (rows by pivoted Cholesky, a Cholesky solve) comes first; when its residual shows the rows
    too ill-conditioned for it, rows by a column-pivoted QR of Zh^T and a QR solve replace it if they do better.
    """
    import scipy.linalg

    T = Zh.shape[0]
    if r == T:
        rows = np.arange(T)
    else:  # greedy choice of r rows: pivoted Cholesky of the Gram matrix
        _, piv, _, _ = scipy.linalg.lapack.dpstrf(G.numpy().copy(), lower=1)
        rows = np.sort(piv[:r] - 1)
    y = torch.randn(r, generator=gen, dtype=torch.float64)
    idx = torch.as_tensor(rows, dtype=torch.long)
    w = _solve_gram(Zh[idx], G[idx][:, idx], y)
    residual = _residual(Zh[idx], w, y) if w is not None else float("inf")
    if residual < 1e-8:
        return rows, residual, "gram"
    # Ill-conditioned rows: the Gram route squares the condition number. Choose the rows
    # by a column-pivoted QR of Z_h^T and solve through a QR factorisation instead.
    rows_q = rows
    if r < T:
        _, _, piv = scipy.linalg.qr(Zh.T.numpy(), mode="economic", pivoting=True)
        rows_q = np.sort(piv[:r])
    idx_q = torch.as_tensor(rows_q, dtype=torch.long)
    rq = _residual(Zh[idx_q], _solve_qr(Zh[idx_q], y), y)
    if rq < residual:
        return rows_q, rq, "qr"
    return rows, residual, "gram"


def certify_head_prefixes(
    Z: torch.Tensor,
    d: int,
    heads: Sequence[int],
    *,
    rule=None,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> list[HeadCertificate]:
    """The certificate of :func:`mhaaudit.capacity.oracle.memorization_certificate` for Z[:, : h d], each h.

    The rank of each prefix counts its float64 singular values above the rule. The T x T Gram
    matrix is accumulated head by head; rows are chosen by its pivoted Cholesky factorisation
    (the same greedy choice as a column-pivoted QR of Z^T) and the value/output weights solved
    through it, unless the residual shows the rows too ill-conditioned for that, in which case a
    column-pivoted QR of Z_h^T and a QR solve are used. Labels are ``N(0, 1)`` from ``derive_seed(seed, "labels")``;
    the residual is recomputed from ``Z``. Z is first divided by the power of two that brings its largest entry
    into [0.5, 1) (exact), so no square underflows or overflows at any scale; the tolerance and sigma_max are
    given in Z's units. Returns one certificate per head count in ``heads``, in
    increasing order; ``progress`` is called with each count as it is done.

    Raises:
        InputError: when ``Z`` is not a real, non-empty T x (H d) matrix of finite values, ``d`` is not a positive
            integer, or ``heads`` names a count outside 1..H.
    """
    Z, d = _checked_z(Z, d)
    T, m = Z.shape
    H = m // d
    hs = head_counts(list(heads), H)
    unit = scaled(Z, rule or RankRule.for_dtype(torch.float64))  # its squares neither underflow nor overflow
    Z, rule = unit.X, unit.rule
    G = torch.zeros(T, T, dtype=torch.float64)
    done = 0
    out = []
    smin_known = 0.0
    for h in hs:
        t0 = time.perf_counter()
        while done < h:
            Zj = Z[:, done * d : (done + 1) * d]
            G.addmm_(Zj, Zj.T)
            done += 1
        Zh = Z[:, : h * d]
        r, smax, tol, smin, how = _z_rank(Zh, rule, smin_known)
        if r == T and smin > 0:
            smin_known = max(smin_known, smin)
        gen = torch.Generator(device="cpu").manual_seed(derive_seed(int(seed), "labels"))
        if r == 0:
            rows, residual, solver = np.zeros(0, dtype=np.int64), 0.0, "gram"
        else:
            rows, residual, solver = _solve_on_rows(Zh, G, r, gen)
        out.append(
            HeadCertificate(
                heads=h,
                rank=r,
                rank_cap=min(T, h * d),
                rows=tuple(int(i) for i in rows),
                residual=residual,
                tolerance=float(unit.tol_to_data(tol)),  # in Z's own units
                sigma_max=float(unit.to_data(smax)),
                method=f"rank: {how}; weights: {solver} solve",
                seconds=round(time.perf_counter() - t0, 3),
            )
        )
        if progress:
            progress(1)
    return out
