"""The torch certificates against torch.linalg.matrix_rank, and their rounding bounds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from matrices import all_draws, matrix_rank_decisions, near_tolerance_matrix

from mhaaudit.numerics import (
    TINY_GRAM,
    RankRule,
    cholesky_margins,
    decide_full_rank,
    decide_prefix_full_rank,
    gram_rank,
    gram_rank_and_sigmas,
    lambda_max_bounds,
    rounding_margin,
    svd_rank,
)


def test_cholesky_margins_grow_with_the_block():
    ks = np.arange(1, 200, dtype=np.float64)
    trace, maxdiag = np.cumsum(np.ones(199)), np.ones(199)
    full, deficient = cholesky_margins(ks, 64, trace, maxdiag)
    assert np.all(np.diff(full) > 0) and np.all(np.diff(deficient) > 0)
    f1, d1 = cholesky_margins(10, 64, 10.0, 1.0)
    assert f1 == pytest.approx(full[9]) and d1 == pytest.approx(deficient[9])


def test_rounding_margin_scales_with_lambda_max():
    m1 = rounding_margin(10, 64, torch.tensor(1.0))
    assert 0 < float(m1) < 1e-10
    assert float(rounding_margin(10, 64, torch.tensor(8.0))) == pytest.approx(8 * float(m1))


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 12), st.floats(0.0, 20.0), st.integers(0, 10_000))
def test_lambda_max_bounds_bracket_lambda_max(k, common, seed):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(3, k, 10, generator=g, dtype=torch.float64) + common * torch.randn(
        10, generator=g, dtype=torch.float64
    )
    G = X @ X.transpose(1, 2)
    lam = torch.linalg.eigvalsh(G)[:, -1]
    lo, hi = lambda_max_bounds(G)
    assert bool((lo <= lam * (1 + 1e-12)).all()) and bool((hi >= lam * (1 - 1e-12)).all())


def _draws_and_grams(k: int, rule_kw: dict):
    X = near_tolerance_matrix(60, 12, 0)
    rule = RankRule.for_dtype(X.dtype, **rule_kw)
    idx = all_draws(60, k, 200, 1, sort=True)
    rows = X.double()[idx]
    return X, rule, idx, rows, rows @ rows.transpose(1, 2)


@pytest.mark.parametrize("deficient_first", [False, True])
@pytest.mark.parametrize("rule_kw", [{}, {"rtol": 1e-3}, {"atol": 0.5}])
def test_decide_full_rank_equals_matrix_rank(deficient_first, rule_kw):
    X, rule, idx, rows, G = _draws_and_grams(12, rule_kw)
    G0 = G.clone()
    dec = decide_full_rank(G, lambda j: rows[j], 12, 12, rule, deficient_first=deficient_first)
    assert torch.equal(dec.full, matrix_rank_decisions(X, idx, rule))
    assert torch.equal(G, G0)  # scratch space restored


def test_svd_rank_and_gram_rank_equal_matrix_rank():
    _X, rule, _idx, rows, G = _draws_and_grams(12, {})
    ref = torch.tensor([int(torch.linalg.matrix_rank(r, rtol=rule.rtol_for(12, 12))) for r in rows])
    rank, smin, smax, tol, s = svd_rank(rows, rule)
    assert torch.equal(rank, ref)
    assert (
        torch.equal(smax, s[:, 0]) and torch.equal(smin, s[:, -1]) and torch.allclose(tol, smax * rule.rtol_for(12, 12))
    )
    assert torch.equal(gram_rank(G, lambda j: rows[j], 12, rule), ref)


def test_gram_rank_s_sigmas_are_the_svd_s_where_it_decided(monkeypatch):
    """Where the SVD decides (an eigenvalue within the rounding band of the tolerance), the sigmas are its own;
    elsewhere the roots of the extreme eigenvalues; NaN where the SVD gave no usable values (rank -1)."""
    from mhaaudit.numerics import certificates

    _X, rule, _idx, rows, G = _draws_and_grams(12, {})
    rank, smin, smax = gram_rank_and_sigmas(G, lambda j: rows[j], 12, rule)
    ref = svd_rank(rows, rule)
    lam = torch.linalg.eigvalsh(G).clamp_min(0)
    near = (lam - ref[3][:, None] ** 2).abs() <= certificates.rounding_band(12, 12, lam[:, -1], ref[3] ** 2)[:, None]
    near = near.any(-1)
    assert torch.equal(rank, ref[0]) and near.any() and (~near).any()  # (both kinds among the draws)
    assert torch.equal(smin[near], ref[1][near]) and torch.equal(smax[near], ref[2][near])
    assert torch.allclose(smin[~near] ** 2, lam[~near, 0], rtol=0, atol=1e-9 * float(lam.max()))
    bad = lambda rows, rule, left: (  # noqa: E731  (no LAPACK route gives usable values)
        (torch.full((len(rows),), 2), *[torch.ones(len(rows))] * 3, None),
        torch.zeros(len(rows), dtype=torch.bool),
    )
    monkeypatch.setattr(certificates, "svd_rank_where_usable", bad)
    rank, smin, smax = gram_rank_and_sigmas(G, lambda j: rows[j], 12, rule, left="left undecided")
    assert torch.isnan(smin[near]).all() and torch.isnan(smax[near]).all() and not torch.isnan(smin[~near]).any()


def test_decide_prefix_full_rank_equals_matrix_rank_on_leading_blocks():
    _X, rule, idx, rows, G = _draws_and_grams(12, {})
    ks = torch.randint(1, 13, (idx.shape[0],), generator=torch.Generator().manual_seed(0))
    dec = decide_prefix_full_rank(G, ks, lambda b, k: rows[b, :k], 12, rule)
    ref = torch.tensor(
        [
            int(torch.linalg.matrix_rank(rows[b, : int(k)], rtol=rule.rtol_for(int(k), 12))) == int(k)
            for b, k in enumerate(ks)
        ]
    )
    assert torch.equal(dec.full, ref)


# ------------------------------------------------------------------ scale and underflow


@pytest.mark.parametrize("scale", [1e-300, 1e-150, 1.0, 1e150, 1e300])
def test_svd_rank_does_not_depend_on_the_scale(scale):
    _X, rule, _idx, rows, _G = _draws_and_grams(12, {})
    rank, _smin, _smax, tol, s = svd_rank(rows, rule)
    r2, _smin2, _smax2, tol2, s2 = svd_rank(rows * scale, rule)
    assert torch.equal(rank, r2)
    assert torch.allclose(s2 / scale, s, rtol=1e-12) and torch.allclose(tol2 / scale, tol, rtol=1e-12)
    atol_rule = RankRule.for_dtype(torch.float32, atol=0.01)  # an absolute tolerance scales with the data
    assert torch.equal(
        svd_rank(rows, atol_rule)[0], svd_rank(rows * scale, RankRule.for_dtype(torch.float32, atol=0.01 * scale))[0]
    )


def _tiny_near_dependent(k: int = 3, d: int = 8, ratio: float = 1e-7, scale: float = 2.0**-300):
    """k rows whose smallest singular value is ``ratio`` times the largest (dependent under the
    float32 rule, whose rtol is about 1e-6), multiplied by ``scale``: their Gram entries are
    about scale^2 = 2^-600, whose squares underflow."""
    g = torch.Generator().manual_seed(3)
    U = torch.linalg.qr(torch.randn(k, k, generator=g, dtype=torch.float64))[0]
    V = torch.linalg.qr(torch.randn(d, k, generator=g, dtype=torch.float64))[0]
    sv = torch.ones(k, dtype=torch.float64)
    sv[-1] = ratio
    return ((U * sv) @ V.T * scale)[None]


def test_a_gram_too_small_to_trust_goes_to_the_svd():
    rule = RankRule.for_dtype(torch.float32)
    for ratio, expected in ((1e-7, False), (1e-3, True)):
        rows = _tiny_near_dependent(ratio=ratio)
        assert int(torch.linalg.matrix_rank(rows[0], rtol=rule.rtol_for(3, 8))) == (3 if expected else 2)
        G = rows @ rows.transpose(1, 2)
        assert float(G.diagonal(dim1=-2, dim2=-1).max()) < TINY_GRAM
        for deficient_first in (False, True):
            dec = decide_full_rank(G.clone(), lambda j, r=rows: r[j], 3, 8, rule, deficient_first=deficient_first)
            assert bool(dec.full[0]) == expected and bool(dec.exact[0])
        assert int(gram_rank(G, lambda j, r=rows: r[j], 8, rule)[0]) == (3 if expected else 2)
        dec = decide_prefix_full_rank(G, torch.tensor([3]), lambda b, k, r=rows: r[b, :k], 8, rule)
        assert bool(dec.full[0]) == expected
