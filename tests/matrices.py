"""Matrices with known structure, draws and brute-force oracles shared by the numerics and Kruskal tests."""

from __future__ import annotations

import torch

from mhaaudit.kruskal.sampling import block_specs, draw_block
from mhaaudit.numerics import RankRule


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def matrix_rank_full(X: torch.Tensor, rows, rule: RankRule) -> bool:
    """Are the rows ``rows`` of X independent under ``rule``? (torch.linalg.matrix_rank, float64, of the rows in
    increasing index order: a set's rank is decided on one order of its rows, whatever order they were drawn in)"""
    S = X[torch.as_tensor(rows).sort().values].double()
    r = torch.linalg.matrix_rank(S, rtol=rule.rtol_for(S.shape[0], S.shape[1]), atol=rule.atol_value)
    return int(r) == S.shape[0]


def matrix_rank_decisions(X: torch.Tensor, idx, rule: RankRule) -> torch.Tensor:
    """``matrix_rank_full`` for every row of ``idx``."""
    return torch.tensor([matrix_rank_full(X, row, rule) for row in idx])


def kstar_brute(X: torch.Tensor, order, rule: RankRule) -> int:
    """The largest k whose leading k rows of ``order`` are independent (bisection with matrix_rank)."""
    lo, hi = 0, len(order)  # independence of leading rows is monotone
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if matrix_rank_full(X, order[:mid], rule):
            lo = mid
        else:
            hi = mid - 1
    return lo


def all_draws(T: int, k: int, samples: int, seed: int, sort: bool = False) -> torch.Tensor:
    """Every seeded draw of ``samples`` k-subsets, as ``subset_test`` (sorted) or the sweep makes them."""
    return torch.cat([draw_block(T, k, seed, block, size, sort) for block, size in block_specs(samples)])


def structured(T: int, d: int, rank: int, seed: int, dup: int = 0) -> torch.Tensor:
    """T rows in a random rank-``rank`` subspace of R^d; the first ``dup`` rows repeat the next ``dup``."""
    g = gen(seed)
    B = torch.randn(T, rank, generator=g, dtype=torch.float64) @ torch.randn(rank, d, generator=g, dtype=torch.float64)
    if dup:
        B[:dup] = B[dup : 2 * dup]
    return B.float()


def near_tolerance_matrix(T: int, d: int, seed: int) -> torch.Tensor:
    """Rows whose d-subsets have a smallest singular value scattered around the float32 tolerance.

    A rank d-1 part plus a small component along the last direction; the size of that component
    is chosen (by matrix_rank itself) so that about half of random d-subsets are full rank.
    """
    g = gen(seed)
    Q = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0]
    coef = torch.randn(T, d, generator=g, dtype=torch.float64)
    rule = RankRule.for_dtype(torch.float32)
    probe = torch.rand(100, T, generator=g).topk(d, dim=1).indices
    best, best_gap = None, 2.0
    for eps in torch.logspace(-7, -3, 41, dtype=torch.float64):
        scale = torch.ones(d, dtype=torch.float64)
        scale[-1] = eps
        X = ((coef * scale) @ Q.T).float()
        frac = float(matrix_rank_decisions(X, probe, rule).float().mean())
        if abs(frac - 0.5) < best_gap:
            best, best_gap = X, abs(frac - 0.5)
    return best


def dominant(T: int, d: int, seed: int, decay: float = -5.0, common: float = 5.0) -> torch.Tensor:
    """Transformer-like rows: a dominant common direction plus a decaying spectrum."""
    g = gen(seed)
    U = torch.randn(T, d, generator=g, dtype=torch.float64)
    V = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0]
    spectrum = torch.logspace(0, decay, d, dtype=torch.float64)
    return ((U * spectrum) @ V.T + common * torch.randn(d, generator=g, dtype=torch.float64)).float()


# The same data at very different scales: the float64 scales, and exact powers of two
# across the float32 range (a float32 product with a power of two is exact; with 1e30 it is not).
SCALES64 = (1e-300, 1e-150, 1.0, 1e150, 1e300)
SCALES32 = (2.0**-100, 2.0**-50, 1.0, 2.0**50, 2.0**100)


def mixed_range(T: int = 60, d: int = 12, tiny: int = 30, seed: int = 0) -> torch.Tensor:
    """Float64 rows of two magnitudes: the first ``tiny`` rows are 2^-300 times rows near a plane
    (any three of them have sigma_min / sigma_max near 1e-7: dependent under the float32 rule),
    the others are Gaussian. Gram entries of the tiny rows are near 2^-600: their squares
    underflow, so only an underflow-safe path decides draws of tiny rows as matrix_rank does."""
    g = gen(seed)
    X = torch.randn(T, d, generator=g, dtype=torch.float64)
    plane = torch.randn(tiny, 2, generator=g, dtype=torch.float64) @ torch.randn(2, d, generator=g, dtype=torch.float64)
    X[:tiny] = (plane + 1e-7 * torch.randn(tiny, d, generator=g, dtype=torch.float64)) * 2.0**-300
    return X
