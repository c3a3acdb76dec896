"""The sweep over every size against brute force, the fixed-size test and matrix_rank."""

from __future__ import annotations

import pytest
import torch
from conftest import full_gram_limit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from matrices import (
    SCALES32,
    SCALES64,
    all_draws,
    dominant,
    kstar_brute,
    matrix_rank_decisions,
    mixed_range,
    near_tolerance_matrix,
    structured,
)

from mhaaudit.kruskal import exact_kruskal_rank, kruskal_sweep, subset_test
from mhaaudit.kruskal.sampling import KERNELS_ENV
from mhaaudit.numerics import RankRule, lapack

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
    X = structured(T, d, rank, seed, dup)
    rule = RankRule.for_dtype(X.dtype)
    exact = exact_kruskal_rank(X, rule)
    sw = kruskal_sweep(X, samples=200, seed=seed, rule=rule)
    assert sw.floor.value <= exact <= sw.ceiling.value
    # the estimate can never exceed the certified ceiling
    assert sw.estimate <= sw.ceiling.value
    if sw.witness is not None:
        S = X[list(sw.witness.indices)].double()
        assert int(torch.linalg.matrix_rank(S, rtol=rule.rtol_for(*S.shape))) < S.shape[0]


def test_subspace_rows_cap_the_rank():
    # 30 rows confined to a 5-dimensional subspace of R^20: every 5 independent, no 6.
    X = structured(30, 20, 5, seed=2)
    assert subset_test(X, 5, samples=500).verdict == "holds"
    r6 = subset_test(X, 6, samples=500)
    assert r6.verdict == "fails" and not r6.sampled  # decided by the whole-set rank
    sw = kruskal_sweep(X, samples=300)
    assert sw.estimate == 5 and sw.ceiling.value == 5
    assert sw.fractions[4] == 1.0 and sw.fractions[5] == 0.0  # k = 5 and k = 6


# ------------------------------------------------------------------ agreement with matrix_rank


def test_sweep_matches_single_k_tests():
    X = near_tolerance_matrix(80, 10, 3)
    rule = RankRule.for_dtype(X.dtype)
    sw = kruskal_sweep(X, samples=400, seed=0, rule=rule)
    # every prefix decision of every draw equals matrix_rank on that prefix
    perms = all_draws(80, sw.kmax_sampled, 400, 0)
    assert 0.0 < sw.fractions[9] < 1.0  # the draws really straddle the tolerance
    for k in range(1, sw.kmax_sampled + 1):
        ref = matrix_rank_decisions(X, perms[:, :k], rule)
        assert sw.fractions[k - 1] == pytest.approx(float(ref.float().mean()))


# three rows whose smallest singular value (3.65e-15 to 50 digits) is within rounding of the tolerance (3.34e-15):
# the computed one is 3.33e-15 for the rows in the order (4, 1, 5) and above the tolerance in the order (1, 4, 5)
NEAR_TRIPLE = [
    [-1.2103896500415234, 0.9161064222661041, -0.6831892754807607, -0.07147118211444801],
    [0.6290963556756982, 0.8132240720912229, -0.33702012879276, 0.04411747865460111],
    [-0.8254059893947533, 1.7473796964590198, 0.6499498177631488, -1.1032397799260316],
    [0.00405796885634217, 0.7135516873594568, 0.4794109665687367, 1.8291701180403968],
    [0.8785493385651431, 0.964245131637551, 2.366462733826274, 0.14169258286421219],
    [0.24945298288944406, 0.15102105954633643, 2.7034828626190395, 0.09757510420961348],
]


@pytest.mark.parametrize("kernels", ["lapack", "torch"])
def test_a_set_is_decided_alike_whatever_order_it_was_drawn_in(monkeypatch, kernels):
    """The sweep draws its rows in random order, the fixed-size test and the exhaustive search in index order:
    a set within rounding of the tolerance is decided on its rows in index order by all of them, so the sweep
    proves no ceiling below the exact Kruskal rank and its fraction at k = 3 is the fixed-size test's."""
    if kernels == "torch":
        monkeypatch.setenv(KERNELS_ENV, "torch")
    X = torch.tensor(NEAR_TRIPLE, dtype=torch.float64)
    exact = exact_kruskal_rank(X)
    assert exact == 3
    sw = kruskal_sweep(X, samples=200, seed=0)
    assert sw.ceiling.value >= exact and (sw.floor is None or sw.floor.value <= exact)
    assert sw.witness is None or len(sw.witness.indices) > exact
    assert sw.exact_kruskal_rank in (None, exact)
    test = subset_test(X, 3, samples=200)
    assert sw.fractions[2] == test.fraction == 1.0


@pytest.mark.skipif(not lapack.available(), reason="SciPy's Cython LAPACK API is not available")
def test_sweep_same_with_and_without_the_fast_path(monkeypatch):
    X = dominant(200, 40, 7)
    rule = RankRule.for_dtype(X.dtype)
    fast = kruskal_sweep(X, samples=300, seed=1, rule=rule)
    monkeypatch.setenv(KERNELS_ENV, "torch")  # the batched (GPU) kernels, on the CPU
    slow = kruskal_sweep(X, samples=300, seed=1, rule=rule)
    assert fast.fractions == slow.fractions
    assert fast.estimate == slow.estimate and fast.witness == slow.witness
    assert 0 < fast.estimate < fast.kmax_sampled


@pytest.mark.skipif(not lapack.available(), reason="SciPy's Cython LAPACK API is not available")
def test_sweep_same_whether_the_full_gram_fits_or_not(monkeypatch):
    X = dominant(200, 40, 7)
    rule = RankRule.for_dtype(X.dtype)
    full = kruskal_sweep(X, samples=300, seed=1, rule=rule, device="cpu")  # the LAPACK kernels
    full_gram_limit(monkeypatch, 0)
    rows = kruskal_sweep(X, samples=300, seed=1, rule=rule, device="cpu")
    assert (full.gram, rows.gram) == ("full", "per-draw") and rows.summary()["gram"] == "per-draw"
    assert rows.fractions == full.fractions and rows.estimate == full.estimate and rows.witness == full.witness


@pytest.mark.parametrize("dtype, scales", [(torch.float64, SCALES64), (torch.float32, SCALES32)])
def test_sweep_is_the_same_at_every_scale(dtype, scales):
    X = near_tolerance_matrix(60, 12, 0).to(dtype)
    rule = RankRule.for_dtype(torch.float32)
    base = kruskal_sweep(X, samples=200, seed=2, rule=rule)
    assert base.witness is not None and 0 < base.fractions[11] < 1
    for scale in scales:
        sw = kruskal_sweep(X * scale, samples=200, seed=2, rule=rule)
        assert (sw.fractions, sw.ci_low, sw.ci_high, sw.estimate, sw.raw_estimate, sw.kmax_sampled) == (
            base.fractions,
            base.ci_low,
            base.ci_high,
            base.estimate,
            base.raw_estimate,
            base.kmax_sampled,
        )
        assert sw.ceiling == base.ceiling and sw.floor == base.floor
        assert sw.witness.indices == base.witness.indices
        assert sw.witness.singular_values[0] / scale == pytest.approx(base.witness.singular_values[0], rel=1e-9)


@pytest.mark.parametrize("fast", [True, False])
def test_sweep_over_rows_of_very_different_sizes_agrees_with_matrix_rank(fast, monkeypatch):
    if not fast:
        monkeypatch.setenv(KERNELS_ENV, "torch")  # the batched (GPU) kernels, on the CPU
    X = mixed_range(T=60, d=12, tiny=30, seed=1)
    rule = RankRule.for_dtype(torch.float32)
    sw = kruskal_sweep(X, samples=128, seed=3, rule=rule)
    perms = all_draws(60, sw.kmax_sampled, 128, 3)
    kstar = torch.tensor([kstar_brute(X, row, rule) for row in perms])
    for k in range(1, sw.kmax_sampled + 1):
        assert sw.fractions[k - 1] == pytest.approx(float((kstar >= k).float().mean()))


def test_determinism_for_a_seed():
    X = near_tolerance_matrix(60, 12, 0)
    s1 = kruskal_sweep(X, samples=200, seed=4)
    s2 = kruskal_sweep(X, samples=200, seed=4)
    assert s1.fractions == s2.fractions and s1.estimate == s2.estimate


# ------------------------------------------------------------------ an independent whole set proves every subset


def test_an_independent_whole_set_proves_every_subset_near_the_tolerance():
    """T <= d rows whose smallest singular value crosses the float32 tolerance: wherever the whole set is proven
    independent, brute force finds every subset independent (the Kruskal rank is T), in the sweep's floor and in
    the exact status of a subset test alike; elsewhere nothing is claimed beyond brute force."""
    g = torch.Generator().manual_seed(0)
    T, d = 5, 7
    U = torch.linalg.qr(torch.randn(T, T, generator=g, dtype=torch.float64))[0]
    V = torch.linalg.qr(torch.randn(d, T, generator=g, dtype=torch.float64))[0]
    rule = RankRule.for_dtype(torch.float32)
    kinds = set()
    for eps in torch.logspace(-8, -5, 25, dtype=torch.float64):
        s = torch.ones(T, dtype=torch.float64)
        s[-1] = eps
        X = ((U * s) @ V.T).float()
        exact = exact_kruskal_rank(X, rule)
        sw = kruskal_sweep(X, samples=40, seed=1, rule=rule)
        assert sw.floor.value <= exact <= sw.ceiling.value
        kinds.add(sw.floor.kind)
        if sw.floor.kind == "whole-set":
            assert exact == T and sw.exact_kruskal_rank == T and sw.exact_at(T) == ("holds", "certified-floor")
        test = subset_test(X, T - 1, samples=40, seed=1, rule=rule)
        if test.exact_status == "holds":
            assert exact >= T - 1 and test.exact_basis == "certified-floor"
            assert f"the whole set of {T} rows is independent under the rule" in test.reason
            assert "an estimate, not a proof" not in test.reason
    assert "whole-set" in kinds and kinds - {"whole-set"}  # both sides of the tolerance were met


def test_more_rows_than_columns_prove_nothing_from_the_whole_set():
    X = torch.randn(12, 6, generator=torch.Generator().manual_seed(3))
    test = subset_test(X, 4, samples=60)
    assert test.verdict == "holds" and (test.exact_status, test.exact_basis) == ("undecided", "none")
    assert test.reason.endswith("an estimate, not a proof")
    assert kruskal_sweep(X, samples=60).floor.kind == "babel"


def test_a_sweep_cut_short_by_kmax_proves_nothing_above_it():
    """40 orthonormal rows swept to kmax = 5: every size up to 5 holds, and nothing is known above it. The
    ceiling was the set-rank bound at 5, "no subset of more than 5 rows can be independent (a proof)": false."""
    g = torch.Generator().manual_seed(4)
    X = torch.linalg.qr(torch.randn(64, 64, generator=g, dtype=torch.float64))[0][:40].float()
    sw = kruskal_sweep(X, kmax=5, samples=20)
    assert sw.ks == (1, 2, 3, 4, 5) and sw.estimate == 5
    assert (sw.ceiling.value, sw.ceiling.kind) == (40, "dimension") and sw.exact_kruskal_rank is None
    assert exact_kruskal_rank(X[:8]) == 8  # (brute force on a part: more than 5 rows are independent)


def test_a_whole_set_at_its_tolerance_proves_nothing_of_its_subsets():
    """T = d = 200 orthogonal rows of norms 1, c and 0.5: the whole set's smallest singular value c sits at the
    tolerance rtol * 1, as does the pair {0, 1}'s. Computed apart, the set and the pair may be decided otherwise
    (a tie), so no floor is carried from the set to its subsets (the whole set's, or the Babel function's, which
    had none of the margin); well clear of the tie, it is."""
    g = torch.Generator().manual_seed(1)
    d = 200
    rt = d * float(torch.finfo(torch.float32).eps)
    rule = RankRule(rtol=rt)
    Q = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0]
    for c, carried in ((rt * (1 + 1e-10), False), (rt * 2, True)):
        D = torch.full((d,), 0.5, dtype=torch.float64)
        D[0], D[1] = 1.0, c
        X = D[:, None] * Q
        t = subset_test(X, 2, samples=200, seed=0, rule=rule)
        sw = kruskal_sweep(X, samples=50, seed=0, rule=rule)
        assert (t.exact_status == "holds") == carried and (sw.floor.value == d) == carried, c
