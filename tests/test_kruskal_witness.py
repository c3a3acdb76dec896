"""Witnesses are found with a bounded number of small factorisations and are always proofs.

``witness.shrink`` and ``witness.set_witness`` make at most ``MAX_FACTORISATIONS`` factorisations
(SVDs and the pivoted QR), none of a matrix larger than (rank + 1) x d but the one pivoted QR of
the subset being shrunk, and never one of the whole T x d set; the counts are taken by wrapping
``torch.linalg.svdvals`` and ``witness.pivoted_basis``. Every witness is checked with
``torch.linalg.matrix_rank`` on its rows.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from matrices import gen, structured

from mhaaudit.kruskal import subset_test
from mhaaudit.kruskal import witness as witnesses
from mhaaudit.kruskal.sampling import rows_of
from mhaaudit.numerics import RankRule
from mhaaudit.numerics.stream import unit_of


class Counted:
    """The shapes of every ``torch.linalg.svdvals`` call and the sizes of every pivoted QR while active."""

    def __init__(self, monkeypatch):
        self.svd: list[tuple[int, ...]] = []
        self.qr: list[tuple[int, ...]] = []
        real_svd, real_qr = torch.linalg.svdvals, witnesses.pivoted_basis

        def svdvals(a, *args, **kw):
            self.svd.append(tuple(a.shape))
            return real_svd(a, *args, **kw)

        def qr(R, *args, **kw):
            self.qr.append(tuple(R.shape))
            return real_qr(R, *args, **kw)

        monkeypatch.setattr(torch.linalg, "svdvals", svdvals)
        monkeypatch.setattr(witnesses, "pivoted_basis", qr)

    @property
    def total(self) -> int:
        return len(self.svd) + len(self.qr)


def _unit(X, rule=None):
    rule = rule or RankRule.for_dtype(X.dtype)
    return unit_of(rows_of(X), rule)[0]


def _dependent(X, idx, rule) -> bool:
    S = X[list(idx)].double()
    return int(torch.linalg.matrix_rank(S, rtol=rule.rtol_for(*S.shape), atol=rule.atol_value)) < S.shape[0]


def _minimal_size(X, idx, rule) -> int:
    """The size of the smallest dependent subset of the rows idx (brute force)."""
    for m in range(1, len(idx) + 1):
        if any(_dependent(X, c, rule) for c in itertools.combinations(idx, m)):
            return m
    raise AssertionError("independent")


@pytest.mark.parametrize("rank, k", [(3, 6), (7, 12), (19, 20)])
def test_shrink_is_bounded_small_and_a_proof(monkeypatch, rank, k):
    X = structured(60, 32, rank, seed=rank)
    rule = RankRule.for_dtype(X.dtype)
    idx = list(range(5, 5 + k))
    assert _dependent(X, idx, rule)
    c = Counted(monkeypatch)
    w = witnesses.shrink(_unit(X), idx)
    assert c.total <= witnesses.MAX_FACTORISATIONS and len(c.qr) <= 2
    assert all(m <= rank + 1 and n == 32 for _, m, n in c.svd), c.svd  # (batch, rows, d): at most (rank + 1) x d
    assert set(w.indices) <= set(idx) and _dependent(X, w.indices, rule)
    assert len(w.indices) == rank + 1 == _minimal_size(X, idx, rule) if k <= 12 else len(w.indices) == rank + 1


def test_shrink_finds_the_support_of_the_dependence(monkeypatch):
    """Row 9 = row 2 - row 5 among generic rows: the witness is those three."""
    X = torch.randn(12, 16, generator=gen(0), dtype=torch.float64)
    X[9] = X[2] - X[5]
    c = Counted(monkeypatch)
    w = witnesses.shrink(_unit(X), range(12))
    assert w.indices == (2, 5, 9) and w.rank == 2 and c.total <= witnesses.MAX_FACTORISATIONS
    assert all(m <= 3 for _, m, _ in c.svd)


def test_zero_and_repeated_rows_need_no_qr(monkeypatch):
    X = torch.randn(10, 8, generator=gen(1), dtype=torch.float64)
    X[6] = X[3]
    c = Counted(monkeypatch)
    assert witnesses.shrink(_unit(X), range(10)).indices == (3, 6)
    X[4] = 0
    w = witnesses.shrink(_unit(X), range(10))
    assert w.indices == (4,) and w.singular_values == (0.0,) and w.rank == 0
    assert c.qr == [] and c.svd == [(1, 2, 8), (1, 1, 8)]


def test_set_witness_of_equal_rows_reads_them_and_factorises_two(monkeypatch):
    """2000 equal rows of d = 768 (the embedding layer's [CLS] queries): two rows, one 2 x d SVD."""
    v = torch.randn(768, generator=gen(2))
    X = v.expand(2000, 768).contiguous()
    c = Counted(monkeypatch)
    w = witnesses.set_witness(_unit(X), 197)
    assert w.indices == (0, 1) and w.rank == 1
    assert c.qr == [] and c.svd == [(1, 2, 768)]


def test_set_witness_of_a_low_rank_set_never_factorises_the_set(monkeypatch):
    X = structured(400, 64, 5, seed=3)
    c = Counted(monkeypatch)
    w = witnesses.set_witness(_unit(X), 20)
    rule = RankRule.for_dtype(X.dtype)
    assert w is not None and len(w.indices) == 6 and _dependent(X, w.indices, rule)
    assert c.total <= witnesses.MAX_FACTORISATIONS
    assert all(r <= 20 for r, _ in c.qr) and all(m <= 6 for _, m, _ in c.svd)


def test_repeated_pair_is_the_first_and_values_not_bits_decide():
    X = torch.randn(50, 6, generator=gen(4), dtype=torch.float64)
    X[40] = X[7]
    X[30] = X[20]
    X[12] = 0.0
    X[13] = -0.0  # two zero rows are not a repeated pair (a zero row is a witness alone)
    X[45] = X[44]
    X[44, 0], X[45, 0] = 0.0, -0.0  # equal values, different bits
    assert witnesses.repeated_pair(_unit(X)) == (20, 30)
    X[30] = torch.randn(6, generator=gen(5), dtype=torch.float64)
    assert witnesses.repeated_pair(_unit(X)) == (7, 40)
    X[40] = X[41]
    assert witnesses.repeated_pair(_unit(X)) == (40, 41)
    X[41] = 1.0
    assert witnesses.repeated_pair(_unit(X)) == (44, 45)


def test_a_sampled_test_shrinks_its_first_dependent_draw_within_the_bound(monkeypatch):
    X = structured(300, 48, 40, seed=5)
    calls = []
    real = witnesses.shrink

    def shrink(*a, **kw):
        c = Counted(monkeypatch)
        out = real(*a, **kw)
        calls.append(c.total)
        monkeypatch.undo()
        return out

    monkeypatch.setattr(witnesses, "shrink", shrink)
    r = subset_test(X, 45, samples=64, seed=0)
    assert r.witness is not None and len(r.witness.indices) == 41 and calls and max(calls) <= 8
    assert _dependent(X, r.witness.indices, RankRule.for_dtype(X.dtype))


def test_the_factor_s_residuals_are_the_rows_distances_to_the_pivots_span():
    """``residuals`` of the pivoted QR's factor against each row's distance to the span of the pivots before it,
    by least squares (rows 4 and 9 depend on others, so the last residuals are at rounding level)."""
    from scipy.linalg import qr

    R = torch.randn(12, 7, generator=gen(7), dtype=torch.float64)
    R[9] = R[0] - 2 * R[3]
    R[4] = 0.5 * R[1]
    F, perm = qr(R.T.numpy(), mode="r", pivoting=True)
    res = witnesses.residuals(torch.from_numpy(F))
    assert res.shape == (8, 12)  # steps b = 0 .. 7: past the 7 directions every residual is zero
    for b in range(res.shape[0]):
        span = R[perm[:b]]
        for p in range(b, 12):
            row = R[perm[p]]
            if b:
                coef = torch.linalg.lstsq(span.T, row[:, None]).solution
                row = row - (span.T @ coef)[:, 0]
            assert float(res[b, p]) == pytest.approx(float(torch.linalg.vector_norm(row)), abs=1e-12)
    assert float(res[-1].abs().max()) == 0.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_witness_on_cuda_is_the_cpu_s():
    """The pivoted QR and the SVDs run on the host's LAPACK from the same rows, so the witness is the same."""
    X = structured(60, 32, 6, seed=6)
    w_cpu = witnesses.shrink(_unit(X), range(20))
    w_gpu = witnesses.shrink(_unit(X.cuda()), range(20))
    rule = RankRule.for_dtype(X.dtype)
    assert _dependent(X, w_gpu.indices, rule) and w_gpu == w_cpu
