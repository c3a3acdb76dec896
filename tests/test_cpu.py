"""The CPU fast paths (LAPACK through ctypes) against brute force and against the torch paths."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mhaaudit import cpu
from mhaaudit import kruskal as kr
from mhaaudit.kruskal import _draw_blocks, _Gram, _SweepKernel, kruskal_sweep, set_stats, subset_test
from mhaaudit.rank import RankRule, cholesky_margins

pytestmark = pytest.mark.skipif(not cpu.available(), reason="SciPy's Cython LAPACK API is not available")


def _matrix_rank_full(X: torch.Tensor, rows, rule: RankRule) -> bool:
    S = X[rows].double()
    r = torch.linalg.matrix_rank(S, rtol=rule.rtol_for(S.shape[0], S.shape[1]), atol=rule.atol_value)
    return int(r) == S.shape[0]


def _dominant(T: int, d: int, seed: int, decay: float = -5.0, common: float = 5.0) -> torch.Tensor:
    """Transformer-like rows: a dominant common direction plus a decaying spectrum."""
    g = torch.Generator().manual_seed(seed)
    U = torch.randn(T, d, generator=g, dtype=torch.float64)
    V = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0]
    spectrum = torch.logspace(0, decay, d, dtype=torch.float64)
    return ((U * spectrum) @ V.T + common * torch.randn(d, generator=g, dtype=torch.float64)).float()


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
    assert cpu.Potrf(K)(buf, m) == expected


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 30), st.floats(0.0, 20.0), st.integers(0, 10_000))
def test_power_bounds_bracket_lambda_max(k, common, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((k, 12)) * np.logspace(0, -3, 12) + common * rng.standard_normal(12)
    G = X @ X.T
    lam = np.linalg.eigvalsh(G)[-1]
    lo, hi = cpu.power_bounds(np.tril(G), X @ rng.standard_normal(12), float(np.trace(G)))
    assert lo <= lam * (1 + 1e-12)
    assert hi >= lam * (1 - 1e-12)
    if common >= 10:  # a dominant direction: the upper bound is finite and tight
        assert hi < lam * (1 + 1e-6)


def test_cholesky_margins_grow_with_the_block():
    ks = np.arange(1, 200, dtype=np.float64)
    trace, maxdiag = np.cumsum(np.ones(199)), np.ones(199)
    full, deficient = cholesky_margins(ks, 64, trace, maxdiag)
    assert np.all(np.diff(full) > 0) and np.all(np.diff(deficient) > 0)
    f1, d1 = cholesky_margins(10, 64, 10.0, 1.0)
    assert f1 == pytest.approx(full[9]) and d1 == pytest.approx(deficient[9])


# ------------------------------------------------------------------ one candidate size


@pytest.mark.parametrize("deficient_first", [False, True])
@pytest.mark.parametrize("rule_kw", [{}, {"rtol": 1e-3}, {"atol": 0.5}])
def test_decide_draws_agree_with_matrix_rank(deficient_first, rule_kw):
    from test_kruskal import _near_tolerance_matrix

    X = _near_tolerance_matrix(60, 12, 0)
    rule = RankRule.for_dtype(X.dtype, **rule_kw)
    gram = _Gram(X, torch.device("cpu"))
    idx = torch.cat([b for _, b in _draw_blocks(60, 12, 300, 3, sort=True)]).numpy()
    full, decided = cpu.decide_draws(gram.cpu_flat, 60, idx, 12, rule, gram.proj, deficient_first=deficient_first)
    for row, f, dcd in zip(idx, full, decided):
        if dcd:
            assert bool(f) == _matrix_rank_full(X, torch.from_numpy(row), rule)
    assert decided.mean() > 0.9  # the certificates settle almost every draw


def test_subset_test_same_with_and_without_the_fast_path(monkeypatch):
    X = _dominant(300, 64, 1)
    rule = RankRule.for_dtype(X.dtype)
    st_ = set_stats(X, rule)
    k = st_.rank - 2
    fast = subset_test(X, k, samples=600, seed=2, rule=rule, stats=st_)
    monkeypatch.setattr(kr._Gram, "cpu_flat", property(lambda self: None))
    slow = subset_test(X, k, samples=600, seed=2, rule=rule, stats=st_)
    assert 0 < fast.satisfied < fast.samples  # both outcomes occur
    assert fast.record() == slow.record() and fast.rank_histogram == slow.rank_histogram


def test_results_do_not_depend_on_the_number_of_threads():
    X = _dominant(200, 48, 4)
    rule = RankRule.for_dtype(X.dtype)
    before = torch.get_num_threads()
    out = []
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            out.append((subset_test(X, 30, samples=700, seed=5, rule=rule).record(),
                        kruskal_sweep(X, samples=300, seed=5, rule=rule).fractions))
    finally:
        torch.set_num_threads(before)
    assert out[0] == out[1]


def test_draw_blocks_do_not_depend_on_the_number_of_samples():
    a = torch.cat([b for _, b in _draw_blocks(500, 40, 300, 9)])
    b = torch.cat([b for _, b in _draw_blocks(500, 40, 700, 9)])
    assert torch.equal(a, b[:300])
    assert all(len(set(row.tolist())) == 40 for row in b)


# ------------------------------------------------------------------ the sweep


def _kstar_brute(X: torch.Tensor, order, rule: RankRule) -> int:
    lo, hi = 0, len(order)  # independence of leading rows is monotone: bisect with matrix_rank
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _matrix_rank_full(X, order[:mid], rule):
            lo = mid
        else:
            hi = mid - 1
    return lo


@pytest.mark.parametrize("seed,decay,common", [(0, -5.0, 5.0), (1, -6.0, 0.0), (2, -4.0, 20.0)])
def test_sweep_kernel_matches_brute_force(seed, decay, common):
    X = _dominant(240, 64, seed, decay, common)
    rule = RankRule.for_dtype(X.dtype)
    st_ = set_stats(X, rule)
    K = max(k for k in range(1, 65) if st_.ceiling(k, rule) >= k)
    gram = _Gram(X, torch.device("cpu"))
    kernel = _SweepKernel(gram, K, 64, rule)
    order = torch.cat([b for _, b in _draw_blocks(240, K, 60, seed)]).numpy()
    kstar, _ = kernel.draws(order)
    expected = [_kstar_brute(X, torch.from_numpy(row), rule) for row in order]
    assert kstar.tolist() == expected
    assert len(set(expected)) > 1  # the boundary moves from draw to draw


def test_sweep_same_with_and_without_the_fast_path(monkeypatch):
    X = _dominant(200, 40, 7)
    rule = RankRule.for_dtype(X.dtype)
    fast = kruskal_sweep(X, samples=300, seed=1, rule=rule)
    monkeypatch.setattr(kr._Gram, "cpu_flat", property(lambda self: None))
    slow = kruskal_sweep(X, samples=300, seed=1, rule=rule)
    assert fast.fractions == slow.fractions
    assert fast.estimate == slow.estimate and fast.witness == slow.witness
    assert 0 < fast.estimate < fast.kmax_sampled
