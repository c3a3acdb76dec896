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
from typing import Literal, overload

import numpy as np
import torch

from .. import distributed
from ..errors import InputError
from ..numerics import EPS64, RankRule, rounding_margin, row_norms, svd_rank, with_numerics
from ..numerics.stream import tsqr, unit_of
from .results import Bound, SetStats, every_rows_independent
from .sampling import as_matrix, rows_of

__all__ = ["BABEL_MAX_WORK", "babel_floor", "exact_kruskal_rank", "fixed_rule", "set_stats"]

BABEL_MAX_WORK = 2e12  # the Babel floor is computed when T^2 d is at most this (T = 51 000 at d = 768)


@overload
def fixed_rule(
    X, rule: RankRule, stats: SetStats | None = None, need_stats: Literal[True] = True
) -> tuple[RankRule, SetStats]: ...


@overload
def fixed_rule(
    X, rule: RankRule, stats: SetStats | None = None, need_stats: bool = True
) -> tuple[RankRule, SetStats | None]: ...


def fixed_rule(
    X, rule: RankRule, stats: SetStats | None = None, need_stats: bool = True
) -> tuple[RankRule, SetStats | None]:
    """The rule every rank decision about X and its subsets is taken under, and X's ``SetStats``.

    The rule is the paper's, per matrix: a matrix M (a draw, a witness, the whole set) has the
    singular values above ``max(atol, rtol * sigma_max(M))`` as its rank, with ``rtol = max(rows,
    cols) * eps`` by default, so ``rule`` is returned as it is. The whole set's rank that is
    reported beside a test at size k is ``stats.ceiling(k, rule)``: its rank at the smallest
    tolerance any k-subset can have under the rule. Since sigma_i(X_S) <= sigma_i(X), no k-subset's
    rank exceeds it. ``stats`` are computed when not given and ``need_stats``.

    A rule under which no vector of any subset could count as independent (its tolerance at
    ``d`` columns, the smallest any subset has, is at least sigma_max) is refused."""
    _T, d = X.shape
    if rule.rtol_for(1, d) >= 1 and not rule.atol:
        raise InputError(
            f"the rank rule's tolerance {rule.rtol_for(1, d):.3g} * sigma_max (at least d = {d} times "
            f"eps({rule.dtype}) = {rule.eps:.3g}, or {{param:rtol}}) is at least sigma_max, so no vector could "
            "count as independent: give a smaller {param:rtol} or an {param:atol}, or features in a finer dtype"
        )
    if stats is None and need_stats:
        stats = set_stats(X, rule)
    return rule, stats


@with_numerics(threads=1)
def set_stats(X, rule: RankRule) -> SetStats:
    """Singular values and row norms of the whole set, from the one streaming pass over its rows
    (``numerics.stream.scan``, O(d^2) memory, on the data divided by an exact power of two) and
    kept in those units. The singular values are the square roots of the eigenvalues of the
    streamed d x d Gram matrix when every one of them lies farther than the Gram's rounding
    bound from every tolerance a subset can have (then each comparison with a tolerance comes out
    as it would from the exact values); otherwise those of the TSQR factor R (``stream.tsqr``, a
    second pass: the accuracy of an SVD of the rows). This is the one place the whole-set
    statistics are derived: the rank rule is applied here and in ``SetStats.ceiling``."""
    X = as_matrix(X)
    rows = rows_of(X)
    unit, sc = unit_of(rows, rule)
    rule = unit.rule
    T, d = sc.T, sc.d
    m = min(T, d)
    lam = torch.linalg.eigvalsh(torch.from_numpy(sc.gram)).flip(0).clamp_min(0)[:m]
    s = lam.sqrt()
    s0 = float(s[0]) if m else 0.0
    sv_error = math.sqrt(float(rounding_margin(max(T, d), m, torch.tensor(float(lam[0]) if m else 0.0))))
    # every tolerance a subset can get lies between the smallest row's (one row) and the whole set's
    tol_lo = rule.tol(float(sc.small_norms[0]), 1, d)
    tol_hi = rule.tol(s0 + sv_error, T, d)
    if not bool(((s + sv_error < tol_lo) | (s - sv_error > tol_hi)).all()):
        s = torch.linalg.svdvals(torch.from_numpy(tsqr(rows, sc.exponent)))[:m]
        s0 = float(s[0]) if m else 0.0
        sv_error = 8.0 * (max(T, d) + d * sc.chunks) * EPS64 * s0
    s_list = tuple(float(v) for v in s)
    sq = sc.proj * sc.proj
    smallest = np.sort(np.partition(sq, m - 1)[:m]) if m < T else np.sort(sq)
    proj_norms = np.sqrt(np.cumsum(smallest))
    tol = rule.tol(s0, T, d)
    return SetStats(
        T=T,
        d=d,
        rank=int(sum(1 for v in s_list if v > tol)),
        unit_singular_values=s_list,
        unit_row_norms=tuple(float(v) for v in sc.small_norms),  # the smallest min(T, d), all a ceiling reads
        zero_rows=sc.zero_rows,
        unit_sv_error=sv_error,
        unit_proj_norms=tuple(float(v) for v in proj_norms),
        exponent=sc.exponent,
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
    T, d = X.shape
    if float(T) * T * d > BABEL_MAX_WORK:
        return Bound(
            0,
            "babel",
            f"not computed: the Babel function of T = {T} rows takes O(T^2 d) time "
            f"(computed up to T^2 d = {BABEL_MAX_WORK:.0e}); no floor above 0 is claimed",
        )
    rule, _ = fixed_rule(X, rule, need_stats=False)
    unit, _ = unit_of(rows_of(X), rule)
    X64, rule = unit.materialize(), unit.rule  # T x d float64: T is small here
    kmax = min(kmax or min(T, d), T, d)
    norms = row_norms(X64)
    nmin, nmax = float(norms.min()), float(norms.max())
    what = "{every} under the tolerance rule (Babel-function bound; a proof)"
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
    return Bound(best, "babel", what.format(every=every_rows_independent(best)))


def _babel(Xn: torch.Tensor, m: int, row_block: int | None) -> torch.Tensor:
    """mu1(0..m): the largest sum of the j largest |coherences| of one unit row with the others."""
    T = Xn.shape[0]
    mu1 = torch.zeros(m + 1, dtype=torch.float64, device=Xn.device)
    if m == 0:
        return mu1
    row_block = row_block or max(1, min(1024, (64 << 20) // (8 * T)))
    starts = list(range(0, T, row_block))
    shard = distributed.lockstep()
    starts = starts[shard.rank :: shard.world_size]
    for s in starts:
        C = (Xn[s : s + row_block] @ Xn.T).abs_()
        r = torch.arange(s, min(s + row_block, T), device=Xn.device)
        C[torch.arange(len(r)), r] = 0.0
        top = C.topk(min(m, T - 1), dim=1).values
        del C
        cums = torch.cumsum(top, dim=1).amax(0)
        mu1[1 : cums.numel() + 1] = torch.maximum(mu1[1 : cums.numel() + 1], cums)
    # each rank took every N-th row block: the largest sums over all of them (one process: its own)
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
