"""Torch certificates of numerical rank: exact decisions, and the rounding bounds behind them.

``svd_rank`` is the reference: the float64 SVD that ``torch.linalg.matrix_rank`` uses, under a
``RankRule``. Everything else here decides the same question faster and provably the same way.

``decide_full_rank`` answers "is this k x d subset of rows of full rank k under the rule?" for
many subsets at once. It works on k x k Gram matrices in float64: a Cholesky factorisation of
``G - s I`` succeeds exactly when every eigenvalue of ``G`` exceeds ``s`` (up to a rounding error
we bound, ``cholesky_margins``, and keep away from), and ``sigma_min^2 = lambda_min(G)``. Two
shifted factorisations, at the largest and smallest tolerance compatible with bounds on
``sigma_max`` (``lambda_max_bounds``), decide almost every draw; the few whose smallest singular
value lies near the tolerance are re-checked from eigenvalues (``rounding_margin``) or with the
same SVD that ``torch.linalg.matrix_rank`` uses. The decision therefore equals
``matrix_rank(rows.double(), rtol=..., atol=...) == k`` for every draw: these are proofs under
the rule, not estimates. ``decide_prefix_full_rank`` does the same for leading blocks of
different sizes at once, and ``gram_rank`` gives the rank itself.

Callers hand in Gram matrices of rows rescaled by ``numerics.scale`` (largest entry in
[0.5, 1)), so nothing squared overflows. A Gram matrix that is still too small for its squares
and products to be trusted (``TINY_GRAM``: rows some 2^-200 smaller than the largest) is never
decided by a certificate but by ``svd_rank``, which rescales each matrix by its own power of two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..errors import InputError, Param
from ..workers import worker_pool
from . import checked
from .pow2 import data_tolerance, exponent_of, ldexp
from .subnormals import _flushing, subnormals_kept
from .threads import intra_op_threads

if TYPE_CHECKING:
    from .rule import RankRule

__all__ = [
    "EPS64",
    "TINY_GRAM",
    "Decision",
    "cholesky_margins",
    "decide_full_rank",
    "decide_prefix_full_rank",
    "decision_margin",
    "eigvalsh",
    "gram_rank",
    "lambda_max_bounds",
    "rounding_band",
    "rounding_margin",
    "svd_rank",
    "svd_rank_where_usable",
]

EPS64 = float(torch.finfo(torch.float64).eps)
TINY_GRAM = 2.0**-400
"""A Gram matrix whose largest diagonal entry is below this is decided by the SVD of its rows,
never by a certificate. Above it, squares of its entries (Frobenius norms) lose at most a
relative k^2 2^-222 to underflow, and flushed products in forming and factorising it stay far
below the rounding margins; below it, neither is true. Data rescaled by ``numerics.scale`` have
Gram diagonals near 1, so only rows some 2^-200 smaller than the largest ever get here."""


def svd_rank(
    rows: torch.Tensor, rule: RankRule
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Compute the exact numerical rank of ``(..., m, c)`` matrices under ``rule`` (float64 SVD).

    Each matrix is divided by its own power of two first (``scale.exponent_of``: exact), and the
    absolute tolerance with it, so the rank does not depend on the matrix's scale. It always runs on
    the CPU (LAPACK), so the reference decision is the same bits on every device. Only the few
    matrices whose decision sits near the tolerance get here. The singular values are checked
    before they decide anything (``numerics.checked.svdvals``).

    Args:
        rows: the matrices, of shape ``(..., m, c)``.
        rule: the rank rule.

    Returns:
        ``(rank, sigma_min, sigma_max, tol, singular_values)``: in the units of ``rows``, on its device;
            ``sigma_min`` is the ``min(m, c)``-th singular value.

    Raises:
        InputError: when ``rows`` is not a dense tensor of real values, has fewer than 2 dimensions or an empty
            matrix dimension, or holds NaN or infinite values.
        ArithmeticError: (``numerics.checked.NumericalFailure``) when no LAPACK route gives usable singular values.
    """
    return _svd_rank(rows, rule, None)


def svd_rank_where_usable(rows: torch.Tensor, rule: RankRule, left: str = "left undecided"):
    """:func:`svd_rank`, and a mask (``rows.shape[:-2]``, on the device of ``rows``) of the matrices some LAPACK
    route gave usable singular values for; where none did, the rank is -1 and the other values are not to be
    read, and the one line on stderr that says so ends with ``left`` (``numerics.checked.svdvals_where_usable``).

    Returns:
        ``((rank, sigma_min, sigma_max, tol, singular_values), usable)``.

    Raises:
        InputError: when ``rows`` has fewer than 2 dimensions or holds NaN or infinite values.
    """
    usable: list[torch.Tensor] = []
    out = _svd_rank(rows, rule, (left, usable))
    ok = usable[0].to(rows.device)
    return (torch.where(ok, out[0], torch.full_like(out[0], -1)), *out[1:]), ok


def _svd_rank(rows: torch.Tensor, rule: RankRule, lenient: tuple[str, list] | None):
    """:func:`svd_rank`; with ``lenient`` (what the line says, a list given the mask of usable matrices) no
    failure raises.

    Raises:
        InputError: when ``rows`` has fewer than 2 dimensions or holds NaN or infinite values.
    """
    if not isinstance(rows, torch.Tensor):
        raise InputError(f"svd_rank takes a tensor of (..., m, c) matrices, not {type(rows).__name__}")
    if rows.is_meta or rows.layout != torch.strided or rows.is_nested or rows.is_quantized:
        raise InputError("svd_rank takes a dense tensor of values, not a meta, sparse, nested or quantized one")
    if rows.ndim < 2 or rows.shape[-1] < 1 or rows.shape[-2] < 1:
        raise InputError(f"svd_rank takes (..., m, c) matrices of at least one entry, got shape {tuple(rows.shape)}")
    if rows.dtype.is_complex:
        raise InputError("svd_rank decides rank over the reals: complex matrices are refused, not cast")
    if not callable(getattr(rule, "rtol_for", None)):  # (the rule's module is not imported here: a longer chain)
        raise InputError(Param("rule") + f" {rule!r}: not a RankRule (give RankRule.for_dtype(...))")
    dev = rows.device
    lead, (m, c) = tuple(rows.shape[:-2]), rows.shape[-2:]
    if math.prod(lead) == 0:  # no matrices: nothing to decide
        empty = torch.zeros(lead, dtype=torch.float64, device=dev)
        if lenient is not None:
            lenient[1].append(torch.zeros(lead, dtype=torch.bool))
        s = torch.zeros((*lead, min(m, c)), dtype=torch.float64, device=dev)
        return torch.zeros(lead, dtype=torch.long, device=dev), empty, empty.clone(), empty.clone(), s
    with subnormals_kept():  # subnormal entries converted and rescaled as they are, not flushed
        x = rows.detach().to(device="cpu", dtype=torch.float64)  # exact for every real dtype (8-bit floats included)
        if not bool(torch.isfinite(x).all()):
            raise InputError("the matrices hold NaN or infinite values")
        m, c = x.shape[-2], x.shape[-1]
        e = exponent_of(x, dims=(-2, -1))
        x = ldexp(x, -e[..., None, None])
    if lenient is None:
        s = checked.svdvals(x)
    else:
        s, usable = checked.svdvals_where_usable(x, lenient[0])
        lenient[1].append(usable)
    smax = s[..., 0] if s.shape[-1] else torch.zeros(s.shape[:-1], dtype=s.dtype)
    with subnormals_kept():  # the tolerance and the values back in the data's units, subnormal ones too
        atol = ldexp(torch.full_like(smax, rule.atol_value), -e)
        tol = torch.maximum(smax * rule.rtol_for(m, c), atol)
        rank = (s > tol.unsqueeze(-1)).sum(-1)
        tol = data_tolerance(ldexp(tol, e), rule.atol)  # (an atol far above tiny data overflows in the units)
        out = rank, ldexp(s[..., -1], e), ldexp(smax, e), tol, ldexp(s, e[..., None])
    return tuple(t.to(dev) for t in out)


def eigvalsh(G: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Ascending eigenvalues of symmetric float64 matrices (NumPy's LAPACK on the CPU, faster than
    torch's on many machines; torch elsewhere), checked, and a mask of the matrices whose values
    are usable: where no eigenvalue routine gives usable ones it is False, and the caller decides
    those matrices by the SVD (``numerics.checked.eigvalsh_where_usable``). A stack of small matrices
    whose values the host computes (each on one thread: ``checked.ONE_THREAD_ORDER``) is dealt in parts of
    consecutive matrices, at least ``_HOST_PART_LEAST`` each, among the caller's intra-op threads (one within a
    worker thread), each flushing subnormals as the caller does: the same values, on more of the host's cores
    (a GPU run leaves them idle while it decides the draws whose rank histogram these are)."""
    n = G.shape[-1]
    B = math.prod(G.shape[:-2])
    host = G.device.type == "cpu" or checked.on_host(G.device, n)
    parts = min(torch.get_num_threads(), B // _HOST_PART_LEAST) if host and n <= checked.ONE_THREAD_ORDER else 1
    if parts <= 1:
        return checked.eigvalsh_where_usable(G)
    flush = _flushing()

    def part(chunk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        torch.set_flush_denormal(flush)  # a thread of this pool only: it ends with the pool
        return checked.eigvalsh_where_usable(chunk)

    with intra_op_threads(1), worker_pool(parts, "mhaaudit-eigenvalues") as pool:
        got = list(pool.map(part, G.reshape(B, n, n).cpu().tensor_split(parts)))
    lam = torch.cat([g[0] for g in got]).reshape(G.shape[:-1])
    usable = torch.cat([g[1] for g in got]).reshape(G.shape[:-2])
    return lam.to(G.device), usable.to(G.device)


#: The fewest matrices one host thread takes when :func:`eigvalsh` deals a stack among them
_HOST_PART_LEAST = 4


def gram_rank(
    G: torch.Tensor,
    rows_fn,
    d: int,
    rule: RankRule,
    left: str | None = None,
    eigen: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Numerical rank of k x d row subsets from their k x k float64 Gram matrices.

    Eigenvalues of G are the squared singular values of the rows, accurate to a rounding error
    we bound; a subset with an eigenvalue within that error of the tolerance is recomputed with
    the SVD, so the result equals ``svd_rank`` on the rows. So is a Gram matrix too small to
    trust (``TINY_GRAM``). With ``left`` (what the caller does with such a subset, in the one
    line on stderr), a subset whose SVD no LAPACK route can give has rank -1 instead of raising.
    ``eigen``: ``eigvalsh(G)`` (the values and the mask of the usable ones) when the caller has it.

    Raises:
        ArithmeticError: (``numerics.checked.NumericalFailure``) without ``left``, when no LAPACK route gives
            usable singular values for a subset the SVD decides.
    """
    return gram_rank_and_sigmas(G, rows_fn, d, rule, left, eigen)[0]


def gram_rank_and_sigmas(
    G: torch.Tensor,
    rows_fn,
    d: int,
    rule: RankRule,
    left: str | None = None,
    eigen: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`gram_rank`, with each subset's smallest and largest singular value ``(rank, sigma_min, sigma_max)``
    (on ``G``'s device, in the rows' units): the SVD's where the SVD decided, else the square roots of the
    extreme eigenvalues (clamped at 0; for k <= d, where sigma_min is the k-th singular value either way). A
    singular value near the tolerance is the SVD's, never the root of an eigenvalue smaller than that
    eigenvalue's rounding error (about eps lambda_max). NaN where the SVD gave no usable values (rank -1, with
    ``left``).

    Raises:
        ArithmeticError: (``numerics.checked.NumericalFailure``) without ``left``, when no LAPACK route gives
            usable singular values for a subset the SVD decides.
    """
    k = G.shape[-1]
    lam, usable = eigvalsh(G) if eigen is None else eigen
    lam = lam.clamp_min(0)  # ascending
    lmax = lam[..., -1]
    tol2 = rule.tol(lmax.sqrt(), k, d) ** 2
    band = rounding_band(k, d, lmax, tol2)
    rank = (lam > tol2[:, None]).sum(-1)
    smin, smax = lam[..., 0].sqrt(), lmax.sqrt()
    ambiguous = ((lam - tol2[:, None]).abs() <= band[:, None]).any(-1)
    ambiguous |= G.diagonal(dim1=-2, dim2=-1).amax(-1) < TINY_GRAM
    ambiguous |= ~usable  # no eigenvalue routine gave usable values: the SVD decides
    if bool(ambiguous.any()):
        idx = ambiguous.nonzero().squeeze(-1)
        for chunk in idx.split(64):
            if left is None:
                r, lo, hi, *_ = svd_rank(rows_fn(chunk), rule)
            else:
                (r, lo, hi, *_), ok = svd_rank_where_usable(rows_fn(chunk), rule, left)
                lo, hi = (torch.where(ok, x, torch.full_like(x, math.nan)) for x in (lo, hi))
            rank[chunk] = r.to(rank.device)
            smin[chunk], smax[chunk] = lo.to(smin), hi.to(smax)
    return rank, smin, smax


def lambda_max_bounds(G: torch.Tensor, iters: int = 8):
    """Lower and upper bounds on the largest eigenvalue of PSD ``(B, k, k)`` matrices.

    Lower: the larger of the largest diagonal entry and a power-iteration Rayleigh quotient rho.
    Upper: the Frobenius norm, or, when the top eigenvalue dominates, rho + ||G v - rho v||:
    some eigenvalue lies within the residual norm of rho, and when rho - ||r|| exceeds half the
    trace no other eigenvalue can be that large, so it is the largest one.
    """
    diag = torch.diagonal(G, dim1=-2, dim2=-1)
    lo = diag.amax(-1)
    v = torch.ones((*G.shape[:-1], 1), dtype=G.dtype, device=G.device)
    for _ in range(iters):
        v = G @ v
        v = v / v.norm(dim=-2, keepdim=True).clamp_min(1e-300)
    Gv = G @ v
    rq = (v.transpose(-1, -2) @ Gv).squeeze(-1).squeeze(-1)
    res = (Gv - rq[..., None, None] * v).norm(dim=-2).squeeze(-1)
    lo = torch.maximum(lo, rq)
    hi = torch.linalg.matrix_norm(G)  # Frobenius >= spectral norm
    trace = diag.sum(-1)
    dominant = 2 * (rq - res) > trace * (1 + 1e-9)
    hi = torch.where(dominant, torch.minimum(hi, (rq + res) * (1 + 1e-12)), hi)
    hi = torch.maximum(hi, lo)
    return lo, hi


def rounding_band(k: int, d: int, lam_max: torch.Tensor, tol2: torch.Tensor) -> torch.Tensor:
    """How near the squared tolerance ``tol2`` an eigenvalue of a k x k Gram matrix of rows of length d
    (largest eigenvalue ``lam_max``) may lie and still be decided from the eigenvalues: the rounding margin
    (:func:`rounding_margin`) plus a relative 1e-6 of ``tol2``. Within it, the SVD decides."""
    return rounding_margin(k, d, lam_max) + 1e-6 * tol2


#: The rounding of a computed singular value of an m x d matrix is taken to be at most
#: ``DECISION_ROUNDING * max(m, d) * eps64 * sigma_max`` (an assumed constant, as :func:`rounding_margin`'s).
DECISION_ROUNDING = 16


def decision_margin(sigma_max: float, rows: int, cols: int) -> float:
    """How far a rows x cols matrix's smallest singular value must clear its tolerance for the decision to hold
    for every matrix whose exact singular values bound it (its row subsets: Cauchy interlacing), each decided on
    its own rows: three times the rounding :data:`DECISION_ROUNDING` allows, for the set's computed value, a
    subset's and its tolerance's. Near a tie, two such computations may answer otherwise."""
    return 3 * DECISION_ROUNDING * max(rows, cols) * EPS64 * sigma_max


def rounding_margin(k: int, d: int, lam_hi: torch.Tensor) -> torch.Tensor:
    """How far eigenvalues of a k x k Gram matrix of rows of length d, computed in float64, may
    lie from the squared singular values of the rows, given ``lam_hi`` >= the largest one.

    Rounding in forming G (d-term dot products) and in the factorisation (k-term sums), bounded
    generously: a decision is only taken when it survives this much perturbation.
    """
    return 8.0 * (k + d) * math.sqrt(k) * EPS64 * lam_hi


def cholesky_margins(k, d: int, trace, maxdiag):
    """Rounding bounds ``(full, deficient)`` for the shifted-Cholesky certificates on a k x k Gram.

    ``G`` is formed from rows of length d in float64 (error at most gamma_d trace(G) in the
    2-norm: each entry is a d-term dot product, bounded by Cauchy-Schwarz). Then, with
    gamma_n = n u / (1 - n u) and u the unit roundoff (Higham, *Accuracy and Stability of
    Numerical Algorithms*, Thms 10.3 and 10.7):

    * a completed floating-point Cholesky of ``G - s I`` means L L^T = G - s I + E with
      ||E|| <= gamma_{k+1} trace(|L| |L|^T) <= gamma_{k+1} trace(G)(1 + gamma_{k+1}), so
      lambda_min(G) > s - full;
    * a failed one means the diagonally scaled ``G - s I`` has an eigenvalue at most
      k gamma_{k+1} / (1 - k gamma_{k+1}) (Demmel's condition), so lambda_min(G) < s + deficient
      with the largest diagonal entry as the scale.

    ``k`` may be a number or an array (one value per leading block), as may trace and maxdiag.
    """
    u = EPS64 / 2

    def gamma(n):
        return n * u / (1 - n * u)

    form = gamma(d) * trace
    g = gamma(k + 1)
    full = g * (1 + g) * trace + form
    deficient = k * g / (1 - k * g) * maxdiag + form
    return full, deficient


@dataclass
class Decision:
    """What :func:`decide_full_rank` decided for each subset of the batch: ``full`` (rank k under the rule),
    ``exact`` (decided from eigenvalues or by SVD, not by a Cholesky certificate) and ``undecided`` (no LAPACK
    route gave usable singular values: neither full nor deficient). Constructing checks nothing."""

    full: torch.Tensor  # bool (B,)
    exact: torch.Tensor  # bool (B,): decided from eigenvalues or by SVD, not by the Cholesky certificates
    # bool (B,): no LAPACK route gave usable singular values, so nothing is decided (full is False there);
    # None: every subset decided
    undecided: torch.Tensor | None = None

    def left_open(self) -> torch.Tensor:
        """The subsets left undecided (bool (B,), on the device of ``full``): none when ``undecided`` is None."""
        return torch.zeros_like(self.full) if self.undecided is None else self.undecided.to(self.full.device)


class _CholeskyCertificates:
    """The two shifted-Cholesky certificates of :func:`decide_full_rank` on one batch of Gram matrices.

    After :meth:`run`, ``full`` marks the subsets certified independent and ``undecided`` those that neither
    certificate settled; a Gram matrix below ``TINY_GRAM`` (``tiny``) is never tried and is not in ``undecided``.
    """

    def __init__(
        self, G: torch.Tensor, k: int, d: int, rule: RankRule, delta: float, lam_lo: torch.Tensor | None
    ) -> None:
        B = G.shape[0]
        dev = G.device
        self.G, self.B, self.delta, self.lam_lo = G, B, delta, lam_lo
        self.full = torch.zeros(B, dtype=torch.bool, device=dev)
        self.r = rule.rtol_for(k, d)
        self.a = rule.atol_value
        self.hi = torch.linalg.matrix_norm(G)  # Frobenius norm >= lambda_max: one pass over G
        gdiag = G.diagonal(dim1=-2, dim2=-1)
        maxdiag = gdiag.amax(-1)
        self.m_full, self.m_def = cholesky_margins(k, d, gdiag.sum(-1), maxdiag)
        self.tiny = maxdiag < TINY_GRAM
        self.undecided = ~self.tiny
        self.tightened = torch.zeros(B, dtype=torch.bool, device=dev)

    def shifted_info(self, idx: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        """Cholesky of G - shift I for the subsets idx; info > 0 where it is not positive definite."""
        G = self.G
        if idx.numel() == self.B:  # all of them: shift in place and restore the diagonal exactly
            diag = G.diagonal(dim1=-2, dim2=-1)
            saved = diag.clone()
            diag.sub_(shift[:, None])
            try:
                return torch.linalg.cholesky_ex(G)[1]
            finally:
                diag.copy_(saved)
        Gi = G[idx]
        Gi.diagonal(dim1=-2, dim2=-1).sub_(shift[:, None])
        return torch.linalg.cholesky_ex(Gi)[1]

    def test_full(self, idx: torch.Tensor) -> None:
        """Mark as full the subsets idx whose lambda_min(G) > s_hi >= the squared tolerance: independent."""
        s_hi = torch.clamp(self.r * self.hi[idx].sqrt(), min=self.a) ** 2 * (1 + self.delta) + self.m_full[idx]
        sure = idx[self.shifted_info(idx, s_hi) == 0]
        self.full[sure] = True
        self.undecided[sure] = False

    def test_deficient(self, idx: torch.Tensor) -> None:
        """Settle the subsets idx whose lambda_min(G) < s_lo <= the squared tolerance: dependent; and keep the
        power-iteration bound on lambda_max where it beats the Frobenius norm (``tightened``)."""
        G, hi = self.G, self.hi
        lo, hi2 = lambda_max_bounds(G[idx] if idx.numel() < self.B else G)
        if self.lam_lo is not None:
            lo = torch.maximum(lo, self.lam_lo[idx] * (1 - 1e-12))
        s_lo = torch.clamp(self.r * lo.sqrt(), min=self.a) ** 2 * (1 - self.delta) - self.m_def[idx]
        info = self.shifted_info(idx, s_lo)
        self.undecided[idx[(info > 0) & (s_lo > 0)]] = False  # a non-positive shift certifies nothing
        better = hi2 < hi[idx]  # the power-iteration bound beats the Frobenius norm
        hi[idx] = torch.minimum(hi[idx], hi2)
        self.tightened[idx] = better

    def run(self, deficient_first: bool) -> None:
        """Return nothing: both certificates on every subset they may decide, in the order asked, and the one of
        independence once more where the other found a tighter lambda_max."""
        tests = (self.test_deficient, self.test_full) if deficient_first else (self.test_full, self.test_deficient)
        for test in tests:
            idx = self.undecided.nonzero().squeeze(-1)
            if idx.numel():
                test(idx)
        if not deficient_first:  # test_full once more where test_deficient found a tighter lambda_max
            idx = (self.undecided & self.tightened).nonzero().squeeze(-1)
            if idx.numel():
                self.test_full(idx)


def decide_full_rank(
    G: torch.Tensor,
    rows_fn,
    k: int,
    d: int,
    rule: RankRule,
    delta: float = 1e-3,
    deficient_first: bool = False,
    lam_lo: torch.Tensor | None = None,
    what: str = "the subset",
) -> Decision:
    """Is each of a batch of k-row subsets of full rank k under ``rule``?

    ``G`` is the ``(B, k, k)`` float64 Gram matrix of each subset (it is used as scratch space
    and is left as it was on return); ``rows_fn(idx)`` returns the ``(len(idx), k, d)`` rows of
    the subsets at batch positions ``idx`` for exact re-checks. ``deficient_first`` runs the
    test that certifies dependence first (cheaper when most subsets are dependent); the
    decisions do not depend on the order. ``lam_lo`` (optional, ``(B,)``) are known lower bounds
    on each lambda_max (e.g. from projections on the top direction of the whole set): they
    sharpen the certificate of dependence. A Gram matrix below ``TINY_GRAM`` goes to the SVD.
    A subset whose SVD no LAPACK route can give is left undecided (``Decision.undecided``; one line
    on stderr with the call's size says so, ending "``what`` left undecided").
    """
    B = G.shape[0]
    dev = G.device
    exact = torch.zeros(B, dtype=torch.bool, device=dev)
    if B == 0:
        return Decision(torch.zeros(B, dtype=torch.bool, device=dev), exact, exact.clone())
    certificates = _CholeskyCertificates(G, k, d, rule, delta, lam_lo)
    certificates.run(deficient_first)
    full, undecided = certificates.full, certificates.undecided
    if bool(undecided.any()):
        # Eigenvalues of G are sigma^2 to within a rounding error far below the tolerance band;
        # only a subset whose smallest one sits within that error of the tolerance needs the SVD.
        idx = undecided.nonzero().squeeze(-1)
        lam, usable = eigvalsh(G[idx])
        lmin, lmax = lam[:, 0], lam[:, -1].clamp_min(0)
        tau = torch.clamp(certificates.r * lmax.sqrt(), min=certificates.a) ** 2
        clear = ((lmin - tau).abs() > rounding_band(k, d, lmax, tau)) & usable  # unusable: the SVD decides
        full[idx[clear]] = lmin[clear] > tau[clear]
        exact[idx[clear]] = True
        undecided[idx[clear]] = False
    undecided |= certificates.tiny
    left = torch.zeros(B, dtype=torch.bool, device=dev)
    if bool(undecided.any()):
        idx = undecided.nonzero().squeeze(-1)
        for chunk in idx.split(64):
            (rank, *_), usable = svd_rank_where_usable(rows_fn(chunk), rule, f"{what} left undecided")
            usable = usable.to(dev)
            full[chunk] = (rank.to(dev) == k) & usable
            exact[chunk] = usable
            left[chunk] = ~usable
    return Decision(full, exact, left)


def decide_prefix_full_rank(
    G: torch.Tensor, ks: torch.Tensor, rows_fn, d: int, rule: RankRule, delta: float = 1e-3, what: str = "the subset"
) -> Decision:
    """``decide_full_rank`` for the leading ``ks[b] x ks[b]`` block of each ``G[b]`` at once.

    The blocks have different sizes; each is padded to a block-diagonal matrix whose padding
    cannot change positive-definiteness, so one batched factorisation serves all of them.
    ``rows_fn(b, k)`` returns the ``(k, d)`` rows behind block ``b`` for exact re-checks.
    """
    B, M, _ = G.shape
    dev = G.device
    ks = ks.to(dev)
    full = torch.zeros(B, dtype=torch.bool, device=dev)
    exact = torch.zeros(B, dtype=torch.bool, device=dev)
    open_ = torch.zeros(B, dtype=torch.bool, device=dev)  # no LAPACK route decided it
    if B == 0:
        return Decision(full, exact, open_)
    pad = torch.arange(M, device=dev)[None, :] >= ks[:, None]  # (B, M)
    Gm = G.masked_fill(pad[:, :, None] | pad[:, None, :], 0.0)
    lo, hi = lambda_max_bounds(Gm)
    kf = ks.to(G.dtype)
    if rule.rtol is not None:
        r = torch.full_like(kf, float(rule.rtol))
    elif rule.atol is not None and rule.atol > 0:
        r = torch.zeros_like(kf)
    else:
        r = torch.clamp(kf, min=float(d)) * rule.eps
    a = rule.atol_value
    gdiag = Gm.diagonal(dim1=-2, dim2=-1)
    maxdiag = gdiag.amax(-1)
    m_full, m_def = cholesky_margins(kf, d, gdiag.sum(-1), maxdiag)
    s_hi = torch.clamp(r * hi.sqrt(), min=a) ** 2 * (1 + delta) + m_full
    s_lo = torch.clamp(r * lo.sqrt(), min=a) ** 2 * (1 - delta) - m_def
    undecided = torch.ones(B, dtype=torch.bool, device=dev)
    trusted = maxdiag >= TINY_GRAM  # the others go to decide_full_rank, hence to the SVD
    for shift, certifies_full in ((s_hi, True), (s_lo, False)):
        idx = (undecided & trusted).nonzero().squeeze(-1)
        if idx.numel() == 0:
            break
        Gi = Gm[idx]
        dg = Gi.diagonal(dim1=-2, dim2=-1)
        dg.sub_(shift[idx, None])
        dg.masked_fill_(pad[idx], 1.0)  # padding: positive and decoupled
        _, info = torch.linalg.cholesky_ex(Gi)
        if certifies_full:
            sure = idx[info == 0]
            full[sure] = True
        else:
            sure = idx[(info > 0) & (s_lo[idx] > 0)]
        undecided[sure] = False
    left = undecided.nonzero().squeeze(-1)
    if left.numel():  # the rest: decide_full_rank, batched over the blocks of each size
        left_ks = ks[left]
        for k in torch.unique(left_ks).tolist():
            bs = left[left_ks == k]
            sub = decide_full_rank(
                G[bs, :k, :k],
                lambda j, bs=bs, k=k: torch.stack([rows_fn(int(b), k) for b in bs[j]]),
                k,
                d,
                rule,
                delta,
                what=what,
            )
            full[bs], exact[bs], open_[bs] = sub.full, sub.exact, sub.left_open()
    return Decision(full, exact, open_)
