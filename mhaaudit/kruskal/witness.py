"""Witnesses: small dependent subsets of rows, each proven under the rule.

A witness is a proof that the Kruskal rank is below its size: its rows' singular values (one
checked float64 SVD, ``svd_rank``) show a rank below the number of rows at the rule's tolerance
for that matrix. Finding a small one costs a bounded number of factorisations, none of the whole
T x d set:

* ``prove``: the SVD of the rows asked for; a ``Witness`` when they are dependent, else None.
* ``shrink``: a small witness inside a dependent subset S of m rows. A zero row is a 1-row
  witness and two equal rows a 2-row witness (found by reading the rows). Otherwise one pivoted
  QR of the rows (``pivoted_basis``: LAPACK's ``dgeqp3`` on the host, read as if stopped once
  every row lies within the tolerance of the span of the pivots) offers candidates:
  a row within the tolerance of its pivots' span, and the fewest leading pivots whose triangular
  factor has a smallest singular value below their tolerance (inverse iteration, bisection: no
  further factorisation). The rows of each candidate that take part in its dependence (its
  support), then all of them, are proven by SVDs of at most (r + 1) x d, r the rank found. At
  most ``MAX_FACTORISATIONS`` factorisations (the QR and the SVDs together) in all; where none of
  them proves a smaller subset, S itself is proven.
* ``set_witness``: a witness for a whole set known to be dependent at size k (its rank ceiling
  there is below k, so every k rows are dependent): a zero row, two equal rows (one pass over the
  rows, hashing each), or ``shrink`` of the first k rows.

Every candidate is decided under the exact rule, so the result is always a proof; the heuristics
only choose what to prove. A candidate whose SVD no LAPACK route can give (``numerics.checked``)
is not a proof: the search moves on to the next one, and ``prove`` and ``shrink`` raise
``NumericalFailure`` only when the rows asked for themselves cannot be proven. The singular values
and tolerance a witness keeps are in the data's own units.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from ..numerics import RankRule, decision_margin, exponent_of, ldexp, subnormals_kept, svd_rank_where_usable
from ..numerics.checked import NumericalFailure
from ..numerics.lapack import blas_single_thread
from ..numerics.stream import Unit, chunk_rows
from ..numerics.threads import intra_op_threads
from .results import Bound, SetStats, Witness, every_rows_independent

__all__ = ["MAX_FACTORISATIONS", "pivoted_basis", "prove", "repeated_pair", "residuals", "set_witness", "shrink"]

#: The most factorisations (the pivoted QR and the SVDs that prove candidates) one witness is found with.
MAX_FACTORISATIONS = 8


class _Budget:
    """Factorisations left to spend on one witness."""

    def __init__(self, n: int = MAX_FACTORISATIONS) -> None:
        self.left = n

    def take(self) -> bool:
        """Spend one; False when none is left."""
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def prove(unit: Unit, idx: Sequence[int]) -> Witness | None:
    """A Witness (in the data's units) when the rows ``idx`` are dependent under the rule, else None.

    Raises:
        NumericalFailure: when no LAPACK route gives usable singular values for the rows (nothing is proven).
    """
    idx = [int(i) for i in idx]
    (rank, _, _, tol, s), usable = svd_rank_where_usable(unit.rows(idx), unit.rule, "not a proof")
    if not bool(usable):
        raise NumericalFailure(f"singular values of {len(idx)} x {unit.shape[1]} rows", ("gesdd", "gesvd", "gejsv"))
    if int(rank) >= len(idx):
        return None
    return Witness(tuple(idx), tuple(float(v) for v in unit.to_data(s).cpu()), float(unit.tol_to_data(tol)), int(rank))


def _prove_within(unit: Unit, idx: Sequence[int], budget: _Budget) -> Witness | None:
    """:func:`prove` of the rows ``idx`` within ``budget``; None when none is left, or when LAPACK cannot give
    their singular values (not a proof: the search moves on)."""
    if not budget.take():
        return None
    try:
        return prove(unit, sorted(int(i) for i in idx))
    except NumericalFailure:
        return None


def _first_equal_pair(rows: torch.Tensor) -> tuple[int, int] | None:
    """The first pair (i, j), i < j, of equal non-zero rows of ``rows`` (by position of j, then i), or None."""
    if rows.shape[0] < 2:
        return None
    _, inverse = torch.unique(_bits(rows), dim=0, return_inverse=True)
    inverse = inverse.cpu()
    first: dict[int, int] = {}
    for j, g in enumerate(inverse.tolist()):
        if g in first:
            return first[g], j
        first[g] = j
    return None


def _top_projections(R: torch.Tensor, iters: int = 8) -> torch.Tensor:
    """The rows' projections on one unit vector near their top right singular direction (power
    iteration, no factorisation): for any rows S of R, ``sigma_max(R_S) >= ||proj_S||``."""
    v = R[int(torch.argmax(torch.linalg.vector_norm(R, dim=1)))].clone()
    for _ in range(iters):
        n = torch.linalg.vector_norm(v)
        if not float(n) > 0:
            return torch.zeros(R.shape[0], dtype=R.dtype, device=R.device)
        v = R.T @ (R @ (v / n))
    n = torch.linalg.vector_norm(v)
    return R @ (v / n) if float(n) > 0 else torch.zeros(R.shape[0], dtype=R.dtype, device=R.device)


def _smallest_singular(L: torch.Tensor, iters: int = 6) -> tuple[float, torch.Tensor]:
    """An upper bound on sigma_min of the lower-triangular ``L`` and the unit vector v giving it:
    ``||L^T v||`` after inverse iteration with triangular solves (no factorisation)."""
    n = L.shape[0]
    v = torch.ones(n, 1, dtype=L.dtype, device=L.device) / math.sqrt(n)
    for _ in range(iters):
        y = torch.linalg.solve_triangular(L, v, upper=False)
        z = torch.linalg.solve_triangular(L.T, y, upper=True)
        nz = torch.linalg.vector_norm(z)
        if not bool(torch.isfinite(nz)) or not float(nz) > 0:
            break
        v = z / nz
    return float(torch.linalg.vector_norm(L.T @ v)), v[:, 0]


def residuals(F: torch.Tensor) -> torch.Tensor:
    """``res[b, p]``: the residual, after b pivots, of the row at pivot position p of a pivoted QR with
    triangular factor ``F`` (min(m, d) x m; column p holds that row's coordinates on the directions),
    for b = 0 .. min(m, d) at most (m rows at most): the norm of the column below row b, each a sum
    of squares (no cancellation), zero past the last direction."""
    nb, m = F.shape
    suffix = torch.flip(torch.cumsum(torch.flip(F * F, (0,)), 0), (0,))
    return torch.sqrt(torch.cat([suffix, F.new_zeros(1, m)])[: min(nb, m - 1) + 1])


def pivoted_basis(R: torch.Tensor, rule: RankRule, d: int, hint: int | None = None) -> Iterator[tuple]:
    """One pivoted QR of the rows of ``R`` (m x d, float64, largest entry at most 1 in magnitude):
    LAPACK's ``dgeqp3`` (Householder QR with column pivoting, the largest remaining norm first) of
    ``R^T`` on the host, one thread, as the SVDs that prove its candidates are, so a witness is the
    same on every device. It yields candidates ``(rows, weights)``: positions of rows of ``R``
    believed dependent, and how much each takes part in the dependence (the support is the rows of
    weight above 1e-6 of the largest). The caller proves them (SVD) and stops taking them at the
    first proven. The residual of a row after b pivots, the norm of its part orthogonal to their
    span, is read from the triangular factor (the norm of its column below row b), for every b at
    once. Candidates come, in the order of the pivots:

    * while the basis grows, when some row j lies within a lower bound on the tolerance of the b
      pivot rows plus j (the rule at b + 1 rows, sigma_max at least their largest row norm and the
      norm of their projections on one direction) of the span of the pivots: j's residual is at
      least sigma_min of those rows, so they are dependent (to rounding, which the SVD settles);
      the first two such steps offer one each;
    * once every row lies within the tolerance of all m rows of the span of the pivots (so their
      number is about the rank of ``R``), or every row is a pivot: the fewest leading pivots that
      are dependent by an upper bound on their sigma_min (``_smallest_singular`` on the leading
      block of the triangular factor, by bisection: sigma_min of leading blocks only falls);
    * with ``hint`` (a rank known from elsewhere, such as the whole set's): the first ``hint``
      pivots and the row nearest their span.

    Nothing is offered where LAPACK cannot factorise the rows (the caller then proves them whole)."""
    from scipy.linalg import qr

    R = R.detach().to("cpu", torch.float64)
    m = R.shape[0]
    if m == 0:
        return
    norms = torch.linalg.vector_norm(R, dim=1)
    proj2 = _top_projections(R) ** 2
    tol_all = rule.tol(math.sqrt(float(proj2.sum())), m, d)  # of all m rows: sigma_max >= ||proj||
    try:
        with blas_single_thread():
            F, perm = qr(R.T.numpy(), mode="r", pivoting=True, check_finite=False)
    except (ValueError, np.linalg.LinAlgError):
        return
    F = torch.from_numpy(np.ascontiguousarray(F))  # min(m, d) x m, upper trapezoidal; column p is row perm[p]
    piv = torch.from_numpy(perm.astype(np.int64))
    res = residuals(F)
    steps = res.shape[0]
    pn, pp = norms[piv], proj2[piv]
    top = torch.cat([pn.new_zeros(1), torch.cummax(pn, 0).values])[:steps, None]  # the pivots' largest norm
    along = torch.cat([pp.new_zeros(1), torch.cumsum(pp, 0)])[:steps, None]  # their squared projections, summed
    smax_lo = torch.maximum(torch.maximum(pn[None, :], top), torch.sqrt(along + pp[None, :]))
    rel = torch.tensor([rule.rtol_for(b + 1, d) for b in range(steps)], dtype=torch.float64)[:, None]
    tol = torch.clamp(smax_lo * (1 - 1e-12) * rel, min=rule.atol_value)
    position = torch.arange(m)
    free = position[None, :] >= torch.arange(steps)[:, None]  # not yet a pivot at step b
    near = free & (res <= tol * (1 - 1e-9))
    any_near = near.any(dim=1).tolist()
    top_free = torch.where(free, res, torch.zeros_like(res)).max(dim=1).values.tolist()
    diagonal = res[torch.arange(steps), torch.arange(steps)].tolist()  # the next pivot's residual

    def candidate(b: int, pick: torch.Tensor):  # the pivots before b and the row of ``pick`` nearest their span
        ratio = torch.where(pick, res[b] / torch.clamp(tol[b], min=1e-300), torch.full_like(res[b], torch.inf))
        q = int(torch.argmin(ratio))
        a = torch.linalg.solve_triangular(F[:b, :b], F[:b, q : q + 1], upper=True)[:, 0]
        return [*piv[:b].tolist(), int(piv[q])], torch.cat([a.abs() * pn[:b], pn[q : q + 1]])

    at_hint, nears, n = None, 0, m
    for b in range(steps):
        if b > 0:
            if (any_near[b] and nears < 2) or b == hint:
                cand = candidate(b, near[b] if any_near[b] else free[b])
                if any_near[b]:
                    nears += 1  # (two at most: when the SVD refuses them, the leading blocks come next)
                    yield cand
                else:
                    at_hint = cand  # offered after the leading blocks
            if top_free[b] <= tol_all:
                n = b  # every row within the tolerance of all of them: the rank is about b
                break
        if not diagonal[b] > 0:
            n = b
            break
    if n >= 2:
        L = F[:n, :n].T  # the pivots' coordinates: lower triangular
        pnorm = pn[:n]
        pproj = torch.cumsum(pp[:n], 0)
        pmax = torch.cummax(pnorm, 0).values

        def dependent(b: int):  # the leading b pivots: dependent by the bound, and the vector that shows it
            smin, v = _smallest_singular(L[:b, :b])
            smax_lo = max(float(pmax[b - 1]), math.sqrt(float(pproj[b - 1])))
            return smin <= rule.tol(smax_lo * (1 - 1e-12), b, d) * (1 - 1e-9), v

        lo, hi, found = 1, n + 1, None  # the leading lo pivots are independent by the bound
        while hi - lo > 1:
            mid = (lo + hi) // 2
            dep, v = dependent(mid)
            if dep:
                hi, found = mid, v
            else:
                lo = mid
        if found is not None:
            yield piv[:hi].tolist(), found.abs() * pnorm[:hi]
    if at_hint is not None:
        yield at_hint


def shrink(
    unit: Unit,
    indices: Sequence[int],
    proven: Witness | None = None,
    budget: _Budget | None = None,
    hint: int | None = None,
) -> Witness:
    """A small dependent subset inside the dependent rows ``indices``, proven (module docstring).
    ``proven``: their proof when it is already at hand (spares one SVD); ``budget``: the
    factorisations left (``MAX_FACTORISATIONS`` when not given), one of them kept for proving
    ``indices`` themselves when nothing smaller is proven; ``hint``: a rank at which the pivoted QR
    offers a candidate too (``pivoted_basis``).

    Raises:
        ValueError: when the rows ``indices`` are not dependent under the rule.
        NumericalFailure: when nothing smaller is proven and no LAPACK route gives usable singular values for the
            rows ``indices`` themselves (nothing is proven).
    """
    budget = budget or _Budget()
    if proven is None:
        budget.left -= 1  # kept for the proof of the rows themselves
    idx = [int(i) for i in indices]
    best = _smaller(unit, idx, budget, hint)
    if best is not None and best.rank < len(best.indices) - 1 and len(best.indices) > 2:
        better = _smaller(unit, list(best.indices), budget)  # a second round on the smaller set
        if better is not None and len(better.indices) < len(best.indices):
            best = better
    if best is None:
        best = proven if proven is not None else prove(unit, sorted(idx))  # a set's proof: its rows in index order
    if best is None:
        raise ValueError("shrink_witness needs a dependent subset")
    return best


def _smaller(unit: Unit, idx: list[int], budget: _Budget, hint: int | None = None) -> Witness | None:
    """A proven dependent subset of the rows ``idx`` smaller than all of them, or None. ``hint``: a
    rank at which to try a candidate (``pivoted_basis``)."""
    m = len(idx)
    if m < 2:
        return None
    R = unit.rows(idx)
    zero = (_bits(R) == 0).all(dim=1)
    if bool(zero.any()):
        w = _prove_within(unit, [idx[int(zero.nonzero()[0])]], budget)
        if w is not None:
            return w
    pair = _first_equal_pair(R)
    if pair is not None:
        w = _prove_within(unit, [idx[pair[0]], idx[pair[1]]], budget)
        if w is not None:
            return w
    if m < 3 or not budget.take():
        return None
    with subnormals_kept():
        e = exponent_of(R)
        Rs = ldexp(R, -e)
    seen: set[tuple[int, ...]] = set()
    # one intra-op thread: the reading of the factor is a few passes over m x m numbers, and a team of
    # threads per operation costs more than it gives (on shared cores, several times more)
    found = pivoted_basis(Rs, unit.rule.in_units(e), R.shape[1], hint)
    while True:
        with intra_op_threads(1):
            candidate = next(found, None)
        if candidate is None:
            return None
        rows, weight = candidate
        support = [rows[i] for i in (weight > 1e-6 * weight.max()).nonzero().reshape(-1).tolist()]
        for cand in (sorted(support), sorted(rows)):
            if len(cand) >= m or len(cand) < 1 or tuple(cand) in seen:
                continue
            seen.add(tuple(cand))
            if budget.left <= 0:
                return None
            w = _prove_within(unit, [idx[i] for i in cand], budget)
            if w is not None:
                return w


def _bits(c: torch.Tensor) -> torch.Tensor:
    """The float64 bits of ``c`` as int64, with -0.0 read as 0.0 (one value): equal bits, equal values
    (NaN aside, which no feature set holds); no floating-point operation, so no flushing mode matters."""
    bits = c.contiguous().view(torch.int64)
    return torch.where(bits == _NEG_ZERO, torch.zeros_like(bits), bits)


_NEG_ZERO = -(2**63)


def repeated_pair(unit: Unit) -> tuple[int, int] | None:
    """The first pair (i, j), i < j, of equal non-zero rows of the whole set (by j, then i), or None:
    one pass over the rows, a chunk at a time, hashing each row (a sum of its float64 bits times odd
    64-bit weights, wrapping: equal rows give equal hashes), then equal hashes compared row by row."""
    src = unit.src
    T, d = src.shape
    dev = src.device
    gen = torch.Generator().manual_seed(0x6D6861)
    weights = (torch.randint(-(2**62), 2**62, (d,), generator=gen, dtype=torch.int64) * 2 + 1).to(dev)
    keys = torch.empty(T, dtype=torch.int64, device=dev)
    nonzero = torch.empty(T, dtype=torch.bool, device=dev)
    step = chunk_rows(d)
    for s in range(0, T, step):
        bits = _bits(src.chunk(s, min(T, s + step)).to(dev))
        nonzero[s : s + bits.shape[0]] = (bits != 0).any(dim=1)
        keys[s : s + bits.shape[0]] = (bits * weights).sum(dim=1)
    keys = torch.where(nonzero, keys, torch.zeros_like(keys))
    order = torch.argsort(keys, stable=True)
    sk = keys[order]
    same = (sk[1:] == sk[:-1]) & nonzero[order[1:]]
    if not bool(same.any()):
        return None
    # the first two rows of each run of equal hashes, best (smallest second index) first
    pos = same.nonzero().reshape(-1)
    starts = pos[torch.cat([torch.ones(1, dtype=torch.bool, device=dev), pos[1:] != pos[:-1] + 1])]
    pairs = torch.stack([order[starts], order[starts + 1]], dim=1).cpu()
    pairs = pairs[torch.argsort(pairs[:, 1] * T + pairs[:, 0])]
    for i, j in pairs.tolist():
        a, b = _bits(src.take([i, j]))
        if bool(torch.equal(a, b)):
            return int(i), int(j)
    return None


def set_witness(unit: Unit, k: int, first_zero: int | None = None, hint: int | None = None) -> Witness | None:
    """A small dependent subset of a set whose rank ceiling at size k is below k (so every k of its
    rows are dependent): a zero row (``first_zero``), two equal rows, or one found inside the first
    k rows (``shrink``, offered a candidate at ``hint`` pivots too: the whole set's rank); None when
    none of them is proven (every candidate is decided under the rule at its own tolerance)."""
    budget = _Budget()
    if first_zero is not None:
        w = _prove_within(unit, [first_zero], budget)
        if w is not None:
            return w
    pair = repeated_pair(unit)
    if pair is not None:
        w = _prove_within(unit, list(pair), budget)
        if w is not None:
            return w
    try:
        return shrink(unit, range(min(k, unit.shape[0])), budget=budget, hint=hint)
    except (ValueError, NumericalFailure):
        return None


def independent_set_floor(unit: Unit) -> Bound | None:
    """The floor T when the whole set of T <= d rows is independent under the rule by a clear margin, else None.

    Every subset is then independent: a k-subset's Gram matrix is a principal submatrix of the set's, so its
    smallest singular value is at least the set's (Cauchy interlacing), while its largest, and so its tolerance,
    is at most the set's (the rule's tolerance does not grow as rows are removed: ``RankRule.tol``). Each
    subset's decision is computed on its own rows, so the set's smallest singular value must clear its
    tolerance by ``numerics.decision_margin``: at a tie, the set and a subset could be computed otherwise.
    """
    T, d = unit.shape
    if T > d or T == 0:
        return None
    (rank, smin, smax, tol, _), usable = svd_rank_where_usable(unit.rows(range(T)), unit.rule, "not a proof")
    if not bool(usable) or int(rank) < T:  # no LAPACK route decides it, or the set is dependent: nothing proven
        return None
    if float(smin) - float(tol) <= decision_margin(float(smax), T, d):
        return None
    return Bound(
        T,
        "whole-set",
        f"the whole set of {T} rows is independent under the rule (its smallest singular value clears the "
        f"tolerance beyond rounding), and removing rows keeps it so, so {every_rows_independent(T)} and every "
        "smaller subset too (a proof)",
    )


def nonzero_rows_floor(stats: SetStats, rule: RankRule) -> Bound | None:
    """The floor 1 when every row is independent (non-zero) under ``rule`` (the data's) by a clear margin, from the
    whole set's statistics, else None.

    One row is decided on its own: its singular value is its norm r, and its tolerance is ``rule.tol(r, 1, d)``.
    The row clears it by ``decision_margin`` when r (1 - rtol) - margin(r) exceeds the absolute tolerance; that
    quantity grows with r (where rtol + margin(1) < 1), so the smallest row norm decides for every row.
    """
    if stats.zero_rows or not stats.unit_row_norms:
        return None
    rule, d = rule.in_units(stats.exponent), stats.d
    if rule.rtol_for(1, d) + decision_margin(1.0, 1, d) >= 1:
        return None
    r = stats.unit_row_norms[0]  # the smallest row norm, in the units the rule is now in
    if r - rule.tol(r, 1, d) <= decision_margin(r, 1, d):
        return None
    return Bound(
        1,
        "babel",
        f"{every_rows_independent(1)} under the tolerance rule: the smallest row norm clears its tolerance "
        "beyond rounding (a proof)",
    )
