"""Bounds on the Kruskal rank that hold for every subset: proofs, not estimates.

* ``set_stats``: the singular values and row norms of the whole set. The numerical rank of the
  whole set bounds the rank of every subset, so ``SetStats.ceiling`` is a certified ceiling.
* ``babel_floor``: the Babel-function (cumulative coherence) bound, a certified floor: every
  subset up to that size is independent under the rule.
* ``exact_kruskal_rank``: the Kruskal rank by enumerating every subset (small cases only; the
  brute-force oracle the tests check the estimator and the bounds against).

Each works on the data divided by an exact power of two (``numerics.scale``) and squares no norm
it does not have to, so the bounds do not depend on the data's scale.
"""

from __future__ import annotations

import itertools
import math

import torch

from ..errors import InputError
from ..numerics import EPS64, RankRule, rounding_margin, row_norms, scaled, svd_rank, with_numerics
from .results import Bound, SetStats
from .sampling import as_matrix

__all__ = ["babel_floor", "exact_kruskal_rank", "fixed_rule", "set_stats"]


def fixed_rule(X: torch.Tensor, rule: RankRule, stats: SetStats | None = None,
               need_stats: bool = True) -> tuple[RankRule, SetStats | None]:
    """``rule`` fixed on the whole set X, and X's ``SetStats``: the one tolerance every result about X
    and its subsets is decided under, ``max(atol, rtol * sigma_max(X))`` with ``rtol = max(T, d) *
    eps`` by default (``RankRule.for_set``). The whole set's rank under it is ``stats.rank``, and
    no subset's rank exceeds it (sigma_i(X_S) <= sigma_i(X)). ``stats`` are computed when not given
    (for a rule already fixed, only when ``need_stats``)."""
    if rule.fixed and (stats is not None or not need_stats):
        return rule, stats
    T, d = X.shape
    if not rule.fixed and rule.formula_rtol(T, d) >= 1 and not rule.atol:
        raise InputError(f"the rank rule's tolerance {rule.formula_rtol(T, d):.3g} * sigma_max (max(T, d) = {max(T, d)} "
                         f"times eps({rule.dtype}) = {rule.eps:.3g}, or --rtol) is at least sigma_max, so no vector "
                         f"could count as independent: give a smaller --rtol or an --atol, or features in a finer dtype")
    stats = stats if stats is not None else set_stats(X, rule)
    if rule.fixed:
        return rule, stats
    s1 = stats.unit_singular_values[0] if stats.unit_singular_values else 0.0
    return rule.for_set(s1, stats.T, stats.d, stats.exponent), stats


@with_numerics(threads=1)
def set_stats(X: torch.Tensor, rule: RankRule) -> SetStats:
    """Singular values and row norms of the whole set (eigenvalues of the smaller Gram matrix;
    an SVD when one of them sits within rounding error of the tolerance), computed on the data
    divided by an exact power of two (``numerics.scale``) and kept in those units. Always on the
    CPU: one dense eigenvalue problem (or SVD) of this size is faster through LAPACK than on a
    GPU, where it would also be the only unbatched step of a test."""
    unit = scaled(X.cpu(), rule)
    X64, rule = unit.X, unit.rule
    T, d = X64.shape
    norms = torch.sort(row_norms(X64)).values
    G = X64.T @ X64 if d <= T else X64 @ X64.T
    lam_asc, vecs = torch.linalg.eigh(G)
    lam = lam_asc.flip(0).clamp_min(0)
    lmax = float(lam[0])
    top = vecs[:, -1]
    v1 = top if d <= T else X64.T @ top
    v1 = v1 / v1.norm().clamp_min(1e-300)
    proj_norms = torch.cumsum(torch.sort((X64 @ v1) ** 2).values, 0).sqrt()
    err = float(rounding_margin(max(T, d), min(T, d), torch.tensor(lmax)))
    # The smallest tolerance any subset can get; the Gram route is used only when its rounding
    # error is far below that, and otherwise the SVD of the rows.
    tol_floor = rule.tol(float(norms[0]), 1, d)
    if err * 1e4 < tol_floor**2:
        s = lam.sqrt()
        sv_error = math.sqrt(err * 1e4) / 100.0
    else:
        s = torch.linalg.svdvals(X64)
        sv_error = 8.0 * max(T, d) * EPS64 * float(s[0]) if s.numel() else 0.0
    s_list = tuple(float(v) for v in s.cpu())
    tol = rule.tol(s_list[0] if s_list else 0.0, T, d)
    return SetStats(
        T=T,
        d=d,
        rank=int(sum(1 for v in s_list if v > tol)),
        unit_singular_values=s_list,
        unit_row_norms=tuple(float(v) for v in norms.cpu()),
        zero_rows=int((norms == 0).sum()),
        unit_sv_error=sv_error,
        unit_proj_norms=tuple(float(v) for v in proj_norms.cpu()),
        exponent=unit.exponent,
    )


@with_numerics()
def babel_floor(X: torch.Tensor, rule: RankRule, kmax: int | None = None, row_block: int | None = None) -> Bound:
    """Certified floor from the Babel function mu1(m) (cumulative coherence).

    Any k rows with mu1(k-1) < 1 have a normalised Gram matrix with smallest eigenvalue at least
    1 - mu1(k-1) (Gershgorin), so sigma_min(X_S)^2 >= min_norm^2 (1 - mu1) and
    sigma_max(X_S)^2 <= max_norm^2 (1 + mu1); the floor is the largest k for which that lower
    bound clears the tolerance. k = 1 needs only non-zero rows. Computed on the data divided by an
    exact power of two (``numerics.scale``), and without squaring norms.

    The coherences come ``row_block`` rows at a time (default: as many as fit in 64 MiB of
    coherences, at most 1024), so memory stays O(T d) for any T; the time is O(T^2 d). Under
    torchrun, inside a shared call, the ranks divide the row blocks and take the maximum of their
    cumulative coherences, which is exactly one process's.
    """
    X = as_matrix(X)
    rule, _ = fixed_rule(X, rule, need_stats=False)
    unit = scaled(X, rule)
    X64, rule = unit.X, unit.rule
    T, d = X64.shape
    kmax = min(kmax or min(T, d), T, d)
    norms = row_norms(X64)
    nmin, nmax = float(norms.min()), float(norms.max())
    what = "every {k} rows are independent under the tolerance rule (Babel-function bound; a proof)"
    if nmin == 0 or nmin <= rule.atol_value:
        return Bound(0, "babel", "a zero row exists, so no floor above 0 can be proven")
    mu1 = _babel(X64 / norms[:, None], max(0, kmax - 1), row_block) + 1e-12  # rounding slack
    best = 0
    for k in range(1, kmax + 1):
        mu = float(mu1[k - 1]) if k >= 2 else 0.0
        if mu >= 1:
            break
        tol = rule.tol(nmax * math.sqrt(1 + mu), k, d)
        if nmin * math.sqrt(1 - mu) > tol:
            best = k
        else:
            break
    return Bound(best, "babel", what.format(k=best))


def _babel(Xn: torch.Tensor, m: int, row_block: int | None) -> torch.Tensor:
    """mu1(0..m): the largest sum of the j largest |coherences| of one unit row with the others."""
    from ..distributed import lockstep

    T = Xn.shape[0]
    mu1 = torch.zeros(m + 1, dtype=torch.float64, device=Xn.device)
    if m == 0:
        return mu1
    row_block = row_block or max(1, min(1024, (64 << 20) // (8 * T)))
    starts = list(range(0, T, row_block))
    shard = lockstep()
    if shard is not None:
        starts = starts[shard.rank::shard.world_size]
    for s in starts:
        C = (Xn[s : s + row_block] @ Xn.T).abs_()
        r = torch.arange(s, min(s + row_block, T), device=Xn.device)
        C[torch.arange(len(r)), r] = 0.0
        top = C.topk(min(m, T - 1), dim=1).values
        del C
        cums = torch.cumsum(top, dim=1).amax(0)
        mu1[1 : cums.numel() + 1] = torch.maximum(mu1[1 : cums.numel() + 1], cums)
    if shard is not None:
        mu1 = torch.stack([p.to(mu1.device) for p in shard.all_gather_tensors(mu1.cpu())]).amax(0)
    return mu1


def exact_kruskal_rank(X, rule: RankRule | None = None, max_subsets: int = 2_000_000) -> int:
    """The Kruskal rank by enumerating every subset (small cases only; used to test the bounds)."""
    X = as_matrix(X)
    rule, _ = fixed_rule(X, rule or RankRule.for_dtype(X.dtype), need_stats=False)
    T, d = X.shape
    X64 = X.to(torch.float64)
    best = 0
    for k in range(1, min(T, d) + 1):
        if math.comb(T, k) > max_subsets:
            raise InputError(f"too many subsets to enumerate at k = {k} (C({T}, {k}) > {max_subsets})")
        combos = torch.tensor(list(itertools.combinations(range(T), k)), dtype=torch.long)
        ok = True
        for part in combos.split(4096):
            rank, *_ = svd_rank(X64[part], rule)
            if bool((rank < k).any()):
                ok = False
                break
        if not ok:
            break
        best = k
    return best
