"""Witnesses: small dependent subsets of rows, each proven under the rule.

A witness is a proof that the Kruskal rank is below its size: its rows' singular values (one
checked float64 SVD, ``svd_rank``) show a rank below the number of rows at the rule's tolerance
for that matrix. Finding a small one costs a bounded number of factorisations, none of the whole
T x d set:

* ``prove``: the SVD of the rows asked for; a ``Witness`` when they are dependent, else None.
* ``shrink``: a small witness inside a dependent subset S of m rows. A zero row is a 1-row
  witness and two equal rows a 2-row witness (found by reading the rows). Otherwise one pivoted
  QR of the rows (``pivoted_basis``: Gram-Schmidt with column pivoting, re-orthogonalised, on the
  rows' device, stopped as soon as a row lies within the tolerance of the span of the pivots
  chosen before it) gives a basis B of r rows and a row j nearest its span; the rows B's
  combination for j uses (its support) plus j, then B plus j, are proven by SVDs of at most
  (r + 1) x d. At most ``MAX_FACTORISATIONS`` factorisations (QR and SVDs together) in all;
  where none of them proves a smaller subset, S itself is proven.
* ``set_witness``: a witness for a whole set known to be dependent at size k (its rank ceiling
  there is below k, so every k rows are dependent): a zero row, two equal rows (one pass over the
  rows, hashing each), or ``shrink`` of the first k rows.

Every candidate is decided under the exact rule, so the result is always a proof; the heuristics
only choose what to prove. The singular values and tolerance a witness keeps are in the data's
own units.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..numerics import RankRule, exponent_of, ldexp, subnormals_kept, svd_rank
from ..numerics.stream import Unit, chunk_rows
from .results import Witness

__all__ = ["MAX_FACTORISATIONS", "pivoted_basis", "prove", "repeated_pair", "set_witness", "shrink"]

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
    """A Witness (in the data's units) when the rows ``idx`` are dependent under the rule, else None."""
    idx = [int(i) for i in idx]
    rank, _, _, tol, s = svd_rank(unit.rows(idx), unit.rule)
    if int(rank) >= len(idx):
        return None
    return Witness(tuple(idx), tuple(float(v) for v in unit.to_data(s).cpu()), float(unit.to_data(tol)), int(rank))


def _prove_within(unit: Unit, idx: Sequence[int], budget: _Budget) -> Witness | None:
    return prove(unit, sorted(int(i) for i in idx)) if budget.take() else None


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


def pivoted_basis(R: torch.Tensor, rule: RankRule, d: int):
    """One pivoted QR of the rows of ``R`` (m x d, float64, largest entry at most 1 in magnitude), by
    Gram-Schmidt with column pivoting (each new direction orthogonalised twice against those
    before), stopped at the first step b >= 1 where some row j lies within a lower bound on the
    tolerance of the b pivot rows plus j of the span of the pivots (the rule at b + 1 rows, with
    sigma_max at least their largest row norm and at least the norm of their projections on one
    direction): then ``(pivots, j, a)`` with ``R[j] ~ a @ R[pivots]``, the residual of j being at
    least sigma_min of those rows, so they are dependent under the rule (to rounding, which the SVD
    that proves them settles). None when no such step comes (every row a pivot). All on ``R``'s device."""
    m = R.shape[0]
    norms = torch.linalg.vector_norm(R, dim=1)
    proj2 = _top_projections(R) ** 2
    W = R.clone()
    Q = R.new_zeros(m, R.shape[1])
    C = R.new_zeros(m, m)  # each row's coordinates on the directions chosen so far
    free = torch.ones(m, dtype=torch.bool, device=R.device)
    piv: list[int] = []
    top = torch.zeros((), dtype=R.dtype, device=R.device)  # the largest norm among the pivots
    along = torch.zeros((), dtype=R.dtype, device=R.device)  # their squared projections, summed
    for b in range(m):
        res = torch.linalg.vector_norm(W, dim=1)
        if b > 0:
            smax_lo = torch.maximum(torch.maximum(norms, top), torch.sqrt(along + proj2))
            tol = rule.tol(smax_lo * (1 - 1e-12), b + 1, d)
            near = free & (res <= tol * (1 - 1e-9))
            if bool(near.any()):
                ratio = torch.where(near, res / torch.clamp(tol, min=1e-300), torch.full_like(res, torch.inf))
                j = int(torch.argmin(ratio))
                L = C[piv][:, :b]  # the pivots' coordinates: lower triangular
                a = torch.linalg.solve_triangular(L.T, C[j, :b, None], upper=True)[:, 0]
                return piv, j, a
        p = int(torch.argmax(torch.where(free, res, torch.full_like(res, -1.0))))
        if not float(res[p]) > 0:
            return None
        q = W[p] / res[p]
        if b:  # once more against the directions before: orthogonal to rounding
            q = q - Q[:b].T @ (Q[:b] @ q)
            q = q / torch.linalg.vector_norm(q)
        Q[b] = q
        for _ in range(2):
            coef = W @ q
            W.addr_(coef, q, alpha=-1.0)
            C[:, b] += coef
        W[p] = 0
        free[p] = False
        piv.append(p)
        top = torch.maximum(top, norms[p])
        along = along + proj2[p]
    return None


def shrink(unit: Unit, indices: Sequence[int], proven: Witness | None = None, budget: _Budget | None = None) -> Witness:
    """A small dependent subset inside the dependent rows ``indices``, proven (module docstring).
    ``proven``: their proof when it is already at hand (spares one SVD); ``budget``: the
    factorisations left (``MAX_FACTORISATIONS`` when not given), one of them kept for proving
    ``indices`` themselves when nothing smaller is proven.

    Raises:
        ValueError: when the rows ``indices`` are not dependent under the rule.
    """
    budget = budget or _Budget()
    if proven is None:
        budget.left -= 1  # kept for the proof of the rows themselves
    idx = [int(i) for i in indices]
    best = _smaller(unit, idx, budget)
    if best is not None and best.rank < len(best.indices) - 1 and len(best.indices) > 2:
        better = _smaller(unit, list(best.indices), budget)  # a second round on the smaller set
        if better is not None and len(better.indices) < len(best.indices):
            best = better
    if best is None:
        best = proven if proven is not None else prove(unit, idx)
    if best is None:
        raise ValueError("shrink_witness needs a dependent subset")
    return best


def _smaller(unit: Unit, idx: list[int], budget: _Budget) -> Witness | None:
    """A proven dependent subset of the rows ``idx`` smaller than all of them, or None."""
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
    found = pivoted_basis(Rs, unit.rule.in_units(e), R.shape[1])
    if found is None:
        return None
    piv, j, a = found
    norms = torch.linalg.vector_norm(Rs[piv], dim=1)
    weight = a.abs() * norms
    scale = torch.maximum(weight.max(), torch.linalg.vector_norm(Rs[j]))
    support = [piv[i] for i in (weight > 1e-6 * scale).nonzero().reshape(-1).tolist()]
    if not support:  # j is all but zero: the largest pivot with it
        support = [piv[int(torch.argmax(weight))]]
    tries = [[*support, j], [*piv, j]]
    seen: set[tuple[int, ...]] = set()
    for cand in tries:
        key = tuple(sorted(cand))
        if key in seen or len(key) >= m:
            continue
        seen.add(key)
        w = _prove_within(unit, [idx[i] for i in key], budget)
        if w is not None:
            return w
    return None


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


def set_witness(unit: Unit, k: int, first_zero: int | None = None) -> Witness | None:
    """A small dependent subset of a set whose rank ceiling at size k is below k (so every k of its
    rows are dependent): a zero row (``first_zero``), two equal rows, or one found inside the first
    k rows (``shrink``); None when none of them is proven (every candidate is decided under the rule
    at its own tolerance)."""
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
        return shrink(unit, range(min(k, unit.shape[0])), budget=budget)
    except ValueError:
        return None
