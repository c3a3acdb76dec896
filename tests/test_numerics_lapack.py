"""The CPU LAPACK kernels (dpotrf through ctypes) against brute force."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from matrices import all_draws, dominant, kstar_brute, matrix_rank_full, mixed_range, near_tolerance_matrix

from mhaaudit.kruskal import set_stats
from mhaaudit.kruskal.sampling import Gram
from mhaaudit.numerics import RankRule, lapack

pytestmark = pytest.mark.skipif(not lapack.available(), reason="SciPy's Cython LAPACK API is not available")


# ------------------------------------------------------------------ LAPACK binding


@pytest.mark.parametrize("seed", range(5))
def test_potrf_reports_the_first_failing_leading_block(seed):
    rng = np.random.default_rng(seed)
    K, m = 40, 31
    A = rng.standard_normal((m, 25))
    G = A @ A.T  # rank 25: leading blocks beyond 25 are singular
    shift = rng.uniform(0.0, 2.0)
    lam = [np.linalg.eigvalsh(G[:j, :j])[0] - shift for j in range(1, m + 1)]
    if min(abs(v) for v in lam) < 1e-6:
        pytest.skip("a leading block sits at the shift")
    expected = next((j + 1 for j, v in enumerate(lam) if v < 0), 0)
    buf = np.full((K, K), np.nan)  # only the lower triangle of the leading block may be read
    buf[:m, :m] = np.tril(G)
    buf[np.triu_indices(m, 1)] = np.nan
    buf.reshape(-1)[: m * (K + 1) : K + 1] -= shift
    assert lapack.Potrf(K)(buf, m) == expected


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 30), st.floats(0.0, 20.0), st.integers(0, 10_000))
def test_power_bounds_bracket_lambda_max(k, common, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((k, 12)) * np.logspace(0, -3, 12) + common * rng.standard_normal(12)
    G = X @ X.T
    lam = np.linalg.eigvalsh(G)[-1]
    lo, hi = lapack.power_bounds(np.tril(G), X @ rng.standard_normal(12), float(np.trace(G)))
    assert lo <= lam * (1 + 1e-12)
    assert hi >= lam * (1 - 1e-12)
    if common >= 10:  # a dominant direction: the upper bound is finite and tight
        assert hi < lam * (1 + 1e-6)


def test_gather_lower_reads_the_lower_triangle_of_the_subset():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((9, 4))
    G = A @ A.T
    s = np.array([1, 4, 5, 8])
    vals = lapack.gather_lower(G.reshape(-1), 9, s, 0, 4)
    r, c, _, _ = lapack.lower_layout(4)
    assert np.array_equal(vals, G[np.ix_(s, s)][r, c])
    assert np.array_equal(lapack.gather_lower(G.reshape(-1), 9, s, 2, 4), vals[3:])


def _entries(gram: Gram, route: str):
    """The kernels' Gram entries: read from the full Gram, or computed per draw from the rows."""
    return gram.cpu_entries if route == "full" else lapack.RowGramEntries(gram.X.numpy())


def test_entries_from_the_rows_are_those_of_the_full_gram():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((30, 7))
    full, rows = lapack.FullGramEntries((A @ A.T).reshape(-1), 30), lapack.RowGramEntries(A)
    s = rng.permutation(30)[:9]
    for start, stop in ((0, 9), (0, 4), (4, 9), (8, 9)):
        np.testing.assert_allclose(rows.lower(s, start, stop), full.lower(s, start, stop), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(rows.diagonal(), full.diagonal(), rtol=1e-13)
    assert (full.route, rows.route) == ("full", "per-draw")


# ------------------------------------------------------------------ one candidate size


@pytest.mark.parametrize("route", ["full", "per-draw"])
@pytest.mark.parametrize("deficient_first", [False, True])
@pytest.mark.parametrize("rule_kw", [{}, {"rtol": 1e-3}, {"atol": 0.5}])
def test_decide_draws_agree_with_matrix_rank(deficient_first, rule_kw, route):
    X = near_tolerance_matrix(60, 12, 0)
    rule = RankRule.for_dtype(X.dtype, **rule_kw)
    gram = Gram(X, torch.device("cpu"))
    idx = all_draws(60, 12, 300, 1, sort=True).numpy()  # 85-92% settled, depending on the seed
    full, decided = lapack.decide_draws(
        _entries(gram, route), idx, 12, rule, gram.proj, deficient_first=deficient_first
    )
    for row, f, dcd in zip(idx, full, decided, strict=False):
        if dcd:
            assert bool(f) == matrix_rank_full(X, torch.from_numpy(row), rule)
    assert decided.mean() > 0.8  # the certificates settle almost every draw


def test_decide_draws_leave_grams_too_small_to_trust_undecided():
    X = mixed_range()
    rule = RankRule.for_dtype(torch.float32)
    gram = Gram(X, torch.device("cpu"))
    idx = all_draws(60, 3, 400, 0, sort=True).numpy()
    full, decided = lapack.decide_draws(gram.cpu_entries, idx, 12, rule, gram.proj)
    all_tiny = (idx < 30).all(1)
    assert all_tiny.sum() > 10 and not decided[all_tiny].any()
    for row, f, dcd in zip(idx, full, decided, strict=False):
        if dcd:
            assert bool(f) == matrix_rank_full(X, torch.from_numpy(row), rule)


# ------------------------------------------------------------------ the sweep


@pytest.mark.parametrize("route", ["full", "per-draw"])
@pytest.mark.parametrize("seed,decay,common", [(0, -5.0, 5.0), (1, -6.0, 0.0), (2, -4.0, 20.0)])
def test_sweep_kernel_matches_brute_force(seed, decay, common, route):
    X = dominant(240, 64, seed, decay, common)
    rule = RankRule.for_dtype(X.dtype)
    st_ = set_stats(X, rule)
    K = max(k for k in range(1, 65) if st_.ceiling(k, rule) >= k)
    gram = Gram(X, torch.device("cpu"))
    kernel = lapack.SweepKernel(_entries(gram, route), gram.proj, lambda s: gram.rows(torch.from_numpy(s)), K, 64, rule)
    order = all_draws(240, K, 60, seed).numpy()
    kstar, _ = kernel.draws(order)
    expected = [kstar_brute(X, torch.from_numpy(row), rule) for row in order]
    assert kstar.tolist() == expected
    assert len(set(expected)) > 1  # the boundary moves from draw to draw


def test_sweep_kernel_decides_tiny_leading_blocks_exactly():
    X = mixed_range(T=60, d=12, tiny=30, seed=1)
    rule = RankRule.for_dtype(torch.float32)
    gram = Gram(X, torch.device("cpu"))
    kernel = lapack.SweepKernel(gram.cpu_entries, gram.proj, lambda s: gram.rows(torch.from_numpy(s)), 12, 12, rule)
    order = all_draws(60, 12, 200, 2).numpy()
    kstar, exact = kernel.draws(order)
    assert kstar.tolist() == [kstar_brute(X, torch.from_numpy(row), rule) for row in order]
    assert exact > 0 and (order[:, :3] < 30).all(1).any()  # some draws open with three tiny rows
