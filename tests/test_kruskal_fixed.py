"""The test at one size k against brute force and against torch.linalg.matrix_rank."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import full_gram_limit
from matrices import (
    SCALES32,
    SCALES64,
    dominant,
    gen,
    matrix_rank_decisions,
    mixed_range,
    near_tolerance_matrix,
    structured,
)

from mhaaudit.errors import InputError
from mhaaudit.kruskal import draw_decisions, set_stats, subset_test
from mhaaudit.kruskal.sampling import KERNELS_ENV
from mhaaudit.numerics import RankRule, lapack

# ------------------------------------------------------------------ planted structures


def test_identical_rows_fail_without_sampling():
    X = torch.ones(50, 16)  # every query identical, as at the embedding layer
    r = subset_test(X, 5, samples=100)
    assert r.verdict == "fails" and not r.sampled and r.proven
    assert r.set_rank_ceiling == 1
    assert "no sampling" in r.reason


def test_duplicated_rows_give_expected_fraction():
    # 40 rows in general position in R^64 plus 10 exact duplicates: a k-draw fails exactly when
    # it contains both members of a duplicated pair.
    g = gen(1)
    base = torch.randn(40, 64, generator=g)
    X = torch.cat([base, base[:10]])
    k, N = 8, 4000
    r = subset_test(X, k, samples=N, seed=3)
    # P(no pair fully included) by inclusion-exclusion over the 10 pairs
    T = 50
    p_ok = sum(
        (-1) ** j * math.comb(10, j) * math.comb(T - 2 * j, k - 2 * j) / math.comb(T, k) for j in range(0, k // 2 + 1)
    )
    assert r.ci_low <= p_ok <= r.ci_high
    assert r.witness is not None and len(r.witness.indices) == 2  # shrunk to the duplicated pair
    a, b = r.witness.indices
    assert torch.equal(X[a], X[b])


def test_known_answers_k_above_d_or_T():
    X = torch.randn(10, 4)
    r = subset_test(X, 5, samples=10)
    assert r.verdict == "fails" and not r.sampled and "R^4" in r.reason
    X = torch.randn(4, 10)
    r = subset_test(X, 5, samples=10)
    assert r.verdict == "fails" and not r.sampled and "T = 4" in r.reason


# ------------------------------------------------------------------ agreement with matrix_rank


@pytest.mark.parametrize("seed", [0, 1])
def test_every_draw_agrees_with_matrix_rank_near_tolerance(seed):
    X = near_tolerance_matrix(60, 12, seed)
    rule = RankRule.for_dtype(X.dtype)
    for k in (6, 11, 12):
        idx, full = draw_decisions(X, k, samples=300, seed=seed, rule=rule)
        ref = matrix_rank_decisions(X, idx, rule)
        assert torch.equal(full, ref)
        # the matrix really sits near the tolerance: both outcomes occur at the largest k
    idx, full = draw_decisions(X, 12, samples=300, seed=seed, rule=rule)
    assert 0 < int(full.sum()) < 300


def test_every_draw_agrees_with_matrix_rank_user_tolerances():
    X = structured(40, 10, 10, seed=5)
    for rule in (
        RankRule.for_dtype(X.dtype, rtol=1e-3),
        RankRule.for_dtype(X.dtype, atol=0.5),
        RankRule.for_dtype(X.dtype, rtol=0.05, atol=0.1),
    ):
        idx, full = draw_decisions(X, 7, samples=200, seed=1, rule=rule)
        assert torch.equal(full, matrix_rank_decisions(X, idx, rule))


@pytest.mark.skipif(not lapack.available(), reason="SciPy's Cython LAPACK API is not available")
def test_subset_test_same_with_and_without_the_fast_path(monkeypatch):
    X = dominant(300, 64, 1)
    rule = RankRule.for_dtype(X.dtype)
    st_ = set_stats(X, rule)
    k = st_.rank - 2
    fast = subset_test(X, k, samples=600, seed=2, rule=rule, stats=st_)
    monkeypatch.setenv(KERNELS_ENV, "torch")  # the batched (GPU) kernels, on the CPU
    slow = subset_test(X, k, samples=600, seed=2, rule=rule, stats=st_)
    assert 0 < fast.satisfied < fast.samples  # both outcomes occur
    assert fast.record() == slow.record() and fast.rank_histogram == slow.rank_histogram


@pytest.mark.skipif(not lapack.available(), reason="SciPy's Cython LAPACK API is not available")
def test_subset_test_same_whether_the_full_gram_fits_or_not(monkeypatch):
    """Past FULL_GRAM_MAX_BYTES each draw's Gram is computed from its rows, still through LAPACK:
    the same decisions, witness and histogram; the record says which route was taken."""
    from mhaaudit.kruskal import sampling

    X = dominant(300, 64, 1)
    rule = RankRule.for_dtype(X.dtype)
    st_ = set_stats(X, rule)
    k = st_.rank - 2
    full = subset_test(X, k, samples=600, seed=2, rule=rule, stats=st_, device="cpu").record()  # through LAPACK
    full_gram_limit(monkeypatch, sampling.full_gram_bytes(299))
    rows = subset_test(X, k, samples=600, seed=2, rule=rule, stats=st_, device="cpu").record()
    assert (full.pop("gram"), rows.pop("gram")) == ("full", "per-draw")
    assert 0 < full["satisfied"] < full["samples"] and full == rows


# ------------------------------------------------------------------ the data's scale never changes a verdict


def _same_test(a, b, scale: float) -> None:
    """Two SubsetTests on the same data at scales 1 and ``scale``: equal but for the units of the
    witness's singular values and tolerance, which are the data's own."""
    ra, rb = a.record(), b.record()
    sa, sb = ra.pop("witness_singular_values"), rb.pop("witness_singular_values")
    ta, tb = ra.pop("witness_tol"), rb.pop("witness_tol")  # the witness's tolerance, also in the data's units
    assert ra == rb and (ta is None) == (tb is None)
    assert np.allclose(np.array(sb) / scale, sa, rtol=1e-9, atol=1e-300)
    if a.witness is not None:
        assert b.witness.indices == a.witness.indices and b.witness.rank == a.witness.rank
        assert b.witness.tol / scale == pytest.approx(a.witness.tol, rel=1e-9)
    assert a.rank_histogram == b.rank_histogram


@pytest.mark.parametrize("dtype, scales", [(torch.float64, SCALES64), (torch.float32, SCALES32)])
def test_subset_test_and_its_draws_are_the_same_at_every_scale(dtype, scales):
    X = near_tolerance_matrix(60, 12, 0).to(dtype)
    rule = RankRule.for_dtype(torch.float32)
    base = subset_test(X, 12, samples=300, seed=0, rule=rule)
    idx0, full0 = draw_decisions(X, 12, samples=300, seed=0, rule=rule)
    assert 0 < base.satisfied < 300 and base.witness is not None  # both outcomes, and a proof
    for scale in scales:
        _same_test(base, subset_test(X * scale, 12, samples=300, seed=0, rule=rule), scale)
        idx, full = draw_decisions(X * scale, 12, samples=300, seed=0, rule=rule)
        assert torch.equal(idx, idx0) and torch.equal(full, full0)


@pytest.mark.parametrize("scale", SCALES64)
def test_an_absolute_tolerance_scaled_with_the_data_gives_the_same_test(scale):
    X = structured(40, 10, 10, seed=5).double()
    base = subset_test(X, 7, samples=200, seed=1, rule=RankRule.for_dtype(X.dtype, atol=0.5))
    r = subset_test(X * scale, 7, samples=200, seed=1, rule=RankRule.for_dtype(X.dtype, atol=0.5 * scale))
    assert 0 < base.satisfied < 200
    assert (r.satisfied, r.verdict, r.witness.indices) == (base.satisfied, base.verdict, base.witness.indices)


@pytest.mark.parametrize("fast", [True, False])
def test_draws_of_rows_of_very_different_sizes_agree_with_matrix_rank(fast, monkeypatch):
    if not fast:
        monkeypatch.setenv(KERNELS_ENV, "torch")  # the batched (GPU) kernels, on the CPU
    X = mixed_range()
    rule = RankRule.for_dtype(torch.float32)
    idx, full = draw_decisions(X, 3, samples=400, seed=0, rule=rule)
    assert (idx < 30).all(1).sum() > 10  # draws of three tiny rows: Gram entries whose squares underflow
    assert torch.equal(full, matrix_rank_decisions(X, idx, rule))


# ------------------------------------------------------------------ determinism and validation


def test_determinism_for_a_seed():
    X = near_tolerance_matrix(60, 12, 0)
    a = subset_test(X, 12, samples=300, seed=7)
    b = subset_test(X, 12, samples=300, seed=7)
    c = subset_test(X, 12, samples=300, seed=8)
    assert a.record() == b.record()
    assert a.satisfied != c.satisfied or a.witness != c.witness


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(k=0), "^k must"),
        (dict(k=2, samples=0), "^samples must"),
        (dict(k=2, threshold=0.0), "^threshold must"),
        (dict(k=2, threshold=1.5), "^threshold must"),
        (dict(k=2, rule="paper"), "^rule 'paper': not a RankRule"),
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


def test_a_test_at_k_1_proves_every_row_independent_from_the_smallest_norm():
    """At k = 1 each draw is one row, decided on its own: every row clearing its tolerance beyond rounding proves
    the test holds (the sweep's floor proved it; the test was undecided). A row at the tolerance proves nothing,
    and a zero row is never called independent; each answer agrees with matrix_rank row by row."""
    import torch

    from mhaaudit.kruskal import subset_test
    from mhaaudit.numerics import RankRule

    g = torch.Generator().manual_seed(3)
    cases = [
        (torch.randn(30, 6, generator=g, dtype=torch.float64), None, "holds"),
        (torch.ones(20, 5) * 1e-30, None, "holds"),  # tiny but non-zero: the rule is relative
        (torch.full((20, 1), 1 + 1e-9, dtype=torch.float64), RankRule(atol=1.0), "holds"),
        (torch.full((20, 1), 1 + 1e-15, dtype=torch.float64), RankRule(atol=1.0), "undecided"),  # at a tie
        (torch.full((20, 1), 1.0, dtype=torch.float64), RankRule(atol=1.0), "fails"),
    ]
    for X, rule, expected in cases:
        t = subset_test(X, 1, samples=40, rule=rule)
        assert t.exact_status == expected, (X[0], rule, t.reason)
        if expected == "holds":
            assert t.exact_basis == "certified-floor" and "a proof" in t.reason and t.verdict == "holds"
            atol = 0.0 if rule is None else rule.atol
            ranks = [
                int(torch.linalg.matrix_rank(row[None].double(), atol=atol, rtol=None if rule is None else 0.0))
                for row in X
            ]
            assert ranks == [1] * X.shape[0]
