"""The Kruskal-rank estimator against brute force and against torch.linalg.matrix_rank."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mhaaudit.errors import InputError
from mhaaudit.kruskal import (
    babel_floor,
    clopper_pearson,
    draw_decisions,
    exact_kruskal_rank,
    kruskal_sweep,
    set_stats,
    subset_test,
)
from mhaaudit.rank import RankRule


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _matrix_rank_decisions(X, idx, rule):
    out = []
    for row in idx:
        S = X[row].double()
        r = torch.linalg.matrix_rank(S, rtol=rule.rtol_for(S.shape[0], S.shape[1]), atol=rule.atol_value)
        out.append(int(r) == S.shape[0])
    return torch.tensor(out)


def _structured(T, d, rank, seed, dup=0):
    g = _gen(seed)
    B = torch.randn(T, rank, generator=g, dtype=torch.float64) @ torch.randn(rank, d, generator=g, dtype=torch.float64)
    if dup:
        B[:dup] = B[dup : 2 * dup]
    return B.float()


# ------------------------------------------------------------------ statistics


def test_clopper_pearson_known_values():
    lo, hi = clopper_pearson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 10), rel=1e-9)
    lo, hi = clopper_pearson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** (1 / 10), rel=1e-9)
    lo, hi = clopper_pearson(50, 100)
    assert lo < 0.5 < hi and hi - lo < 0.21


# ------------------------------------------------------------------ brute force: floor <= exact <= ceiling


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    T=st.integers(3, 8),
    d=st.integers(2, 5),
    rank=st.integers(1, 5),
    dup=st.integers(0, 2),
    seed=st.integers(0, 10_000),
)
def test_floor_exact_ceiling_ordering(T, d, rank, dup, seed):
    rank = min(rank, d)
    dup = min(dup, T // 2)
    X = _structured(T, d, rank, seed, dup)
    rule = RankRule.for_dtype(X.dtype)
    exact = exact_kruskal_rank(X, rule)
    sw = kruskal_sweep(X, samples=200, seed=seed, rule=rule)
    assert sw.floor.value <= exact <= sw.ceiling.value
    # the estimate can never exceed the certified ceiling
    assert sw.estimate <= sw.ceiling.value
    if sw.witness is not None:
        S = X[list(sw.witness.indices)].double()
        assert int(torch.linalg.matrix_rank(S, rtol=rule.rtol_for(*S.shape))) < S.shape[0]


def test_exact_kruskal_rank_small_cases():
    I = torch.eye(4)
    assert exact_kruskal_rank(I) == 4
    X = torch.cat([I, I[:1]])  # a duplicated row: two equal rows are dependent
    assert exact_kruskal_rank(X) == 1
    X = torch.cat([I, torch.ones(1, 4)])  # 5 vectors in general position in R^4
    assert exact_kruskal_rank(X) == 4
    X = torch.tensor([[1.0, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]])  # rows 0,1,2 dependent
    assert exact_kruskal_rank(X) == 2


def test_babel_floor_is_a_proof_on_orthogonal_rows():
    X = torch.eye(6, dtype=torch.float64)
    fl = babel_floor(X, RankRule.for_dtype(torch.float64))
    assert fl.value == 6
    X = torch.cat([torch.eye(3), torch.eye(3)[:1]])  # coherence 1: nothing beyond 1 provable
    assert babel_floor(X, RankRule.for_dtype(torch.float32)).value == 1


# ------------------------------------------------------------------ planted structures


def test_identical_rows_fail_without_sampling():
    X = torch.ones(50, 16)  # every query identical, as at the embedding layer
    r = subset_test(X, 5, samples=100)
    assert r.verdict == "fails" and not r.sampled and r.proven
    assert r.set_rank == 1
    assert "no sampling" in r.reason


def test_duplicated_rows_give_expected_fraction():
    # 40 rows in general position in R^64 plus 10 exact duplicates: a k-draw fails exactly when
    # it contains both members of a duplicated pair.
    g = _gen(1)
    base = torch.randn(40, 64, generator=g)
    X = torch.cat([base, base[:10]])
    k, N = 8, 4000
    r = subset_test(X, k, samples=N, seed=3)
    # P(no pair fully included) by inclusion-exclusion over the 10 pairs
    T = 50
    p_ok = sum((-1) ** j * math.comb(10, j) * math.comb(T - 2 * j, k - 2 * j) / math.comb(T, k) for j in range(0, k // 2 + 1))
    assert r.ci_low <= p_ok <= r.ci_high
    assert r.witness is not None and len(r.witness.indices) == 2  # shrunk to the duplicated pair
    a, b = r.witness.indices
    assert torch.equal(X[a], X[b])


def test_subspace_rows_cap_the_rank():
    # 30 rows confined to a 5-dimensional subspace of R^20: every 5 independent, no 6.
    X = _structured(30, 20, 5, seed=2)
    assert subset_test(X, 5, samples=500).verdict == "holds"
    r6 = subset_test(X, 6, samples=500)
    assert r6.verdict == "fails" and not r6.sampled  # decided by the whole-set rank
    sw = kruskal_sweep(X, samples=300)
    assert sw.estimate == 5 and sw.ceiling.value == 5
    assert sw.fraction_at(5) == 1.0 and sw.fraction_at(6) == 0.0


def test_known_answers_k_above_d_or_T():
    X = torch.randn(10, 4)
    r = subset_test(X, 5, samples=10)
    assert r.verdict == "fails" and not r.sampled and "R^4" in r.reason
    X = torch.randn(4, 10)
    r = subset_test(X, 5, samples=10)
    assert r.verdict == "fails" and not r.sampled and "T = 4" in r.reason


# ------------------------------------------------------------------ agreement with matrix_rank


def _near_tolerance_matrix(T, d, seed):
    """Rows whose d-subsets have a smallest singular value scattered around the float32 tolerance.

    A rank d-1 part plus a small component along the last direction; the size of that component
    is chosen (by matrix_rank itself) so that about half of random d-subsets are full rank.
    """
    g = _gen(seed)
    Q = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0]
    coef = torch.randn(T, d, generator=g, dtype=torch.float64)
    rule = RankRule.for_dtype(torch.float32)
    probe = torch.rand(100, T, generator=g).topk(d, dim=1).indices
    best, best_gap = None, 2.0
    for eps in torch.logspace(-7, -3, 41, dtype=torch.float64):
        scale = torch.ones(d, dtype=torch.float64)
        scale[-1] = eps
        X = ((coef * scale) @ Q.T).float()
        frac = float(_matrix_rank_decisions(X, probe, rule).float().mean())
        if abs(frac - 0.5) < best_gap:
            best, best_gap = X, abs(frac - 0.5)
    return best


@pytest.mark.parametrize("seed", [0, 1])
def test_every_draw_agrees_with_matrix_rank_near_tolerance(seed):
    X = _near_tolerance_matrix(60, 12, seed)
    rule = RankRule.for_dtype(X.dtype)
    for k in (6, 11, 12):
        idx, full = draw_decisions(X, k, samples=300, seed=seed, rule=rule)
        ref = _matrix_rank_decisions(X, idx, rule)
        assert torch.equal(full, ref)
        # the matrix really sits near the tolerance: both outcomes occur at the largest k
    idx, full = draw_decisions(X, 12, samples=300, seed=seed, rule=rule)
    assert 0 < int(full.sum()) < 300


def test_every_draw_agrees_with_matrix_rank_user_tolerances():
    X = _structured(40, 10, 10, seed=5)
    for rule in (RankRule.for_dtype(X.dtype, rtol=1e-3), RankRule.for_dtype(X.dtype, atol=0.5), RankRule.for_dtype(X.dtype, rtol=0.05, atol=0.1)):
        idx, full = draw_decisions(X, 7, samples=200, seed=1, rule=rule)
        assert torch.equal(full, _matrix_rank_decisions(X, idx, rule))


def test_sweep_matches_single_k_tests():
    X = _near_tolerance_matrix(80, 10, 3)
    rule = RankRule.for_dtype(X.dtype)
    sw = kruskal_sweep(X, samples=400, seed=0, rule=rule)
    # every prefix decision of every draw equals matrix_rank on that prefix
    from mhaaudit.kruskal import _draw_blocks

    perms = torch.cat([idx for _, idx in _draw_blocks(80, sw.kmax_sampled, 400, 0)])
    assert 0.0 < sw.fractions[9] < 1.0  # the draws really straddle the tolerance
    for k in range(1, sw.kmax_sampled + 1):
        ref = _matrix_rank_decisions(X, perms[:, :k], rule)
        assert sw.fractions[k - 1] == pytest.approx(float(ref.float().mean()))


# ------------------------------------------------------------------ determinism and validation


def test_determinism_for_a_seed():
    X = _near_tolerance_matrix(60, 12, 0)
    a = subset_test(X, 12, samples=300, seed=7)
    b = subset_test(X, 12, samples=300, seed=7)
    c = subset_test(X, 12, samples=300, seed=8)
    assert a.record() == b.record()
    assert a.satisfied != c.satisfied or a.witness != c.witness
    s1 = kruskal_sweep(X, samples=200, seed=4)
    s2 = kruskal_sweep(X, samples=200, seed=4)
    assert s1.fractions == s2.fractions and s1.estimate == s2.estimate


def test_set_stats_matches_svd():
    X = _structured(70, 30, 12, seed=9)
    rule = RankRule.for_dtype(X.dtype)
    st_ = set_stats(X, rule)
    assert st_.rank == int(torch.linalg.matrix_rank(X.double(), rtol=rule.rtol_for(70, 30)))
    ref = torch.linalg.svdvals(X.double())
    assert np.allclose(st_.singular_values[:12], ref[:12].numpy(), rtol=1e-9)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(k=0), "--k"),
        (dict(k=2, samples=0), "--samples"),
        (dict(k=2, threshold=0.0), "--threshold"),
        (dict(k=2, threshold=1.5), "--threshold"),
    ],
)
def test_bad_parameters(kwargs, match):
    with pytest.raises(InputError, match=match):
        subset_test(torch.randn(10, 5), **kwargs)


def test_nan_rejected():
    X = torch.randn(10, 5)
    X[3, 2] = float("nan")
    with pytest.raises(InputError, match="NaN"):
        subset_test(X, 2)
