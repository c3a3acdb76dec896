"""Floor, ceiling and brute force: the bounds that hold for every subset."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matrices import SCALES32, SCALES64, dominant, structured
from threadranks import as_ranks

from mhaaudit.kruskal import babel_floor, exact_kruskal_rank, set_stats
from mhaaudit.numerics import RankRule


def test_exact_kruskal_rank_small_cases():
    eye = torch.eye(4)
    assert exact_kruskal_rank(eye) == 4
    X = torch.cat([eye, eye[:1]])  # a duplicated row: two equal rows are dependent
    assert exact_kruskal_rank(X) == 1
    X = torch.cat([eye, torch.ones(1, 4)])  # 5 vectors in general position in R^4
    assert exact_kruskal_rank(X) == 4
    X = torch.tensor([[1.0, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]])  # rows 0,1,2 dependent
    assert exact_kruskal_rank(X) == 2


def test_babel_floor_is_a_proof_on_orthogonal_rows():
    X = torch.eye(6, dtype=torch.float64)
    fl = babel_floor(X, RankRule.for_dtype(torch.float64))
    assert fl.value == 6
    X = torch.cat([torch.eye(3), torch.eye(3)[:1]])  # coherence 1: nothing beyond 1 provable
    assert babel_floor(X, RankRule.for_dtype(torch.float32)).value == 1


def test_set_stats_matches_svd():
    X = structured(70, 30, 12, seed=9)
    rule = RankRule.for_dtype(X.dtype)
    st_ = set_stats(X, rule)
    assert st_.rank == int(torch.linalg.matrix_rank(X.double(), rtol=rule.rtol_for(70, 30)))
    ref = torch.linalg.svdvals(X.double())
    assert np.allclose(st_.singular_values[:12], ref[:12].numpy(), rtol=1e-9)


@pytest.mark.parametrize("dtype, scales", [(torch.float64, SCALES64), (torch.float32, SCALES32)])
def test_set_stats_and_babel_floor_are_the_same_at_every_scale(dtype, scales):
    X = structured(70, 30, 12, seed=9).to(dtype)
    X[5] = 0.0
    rule = RankRule.for_dtype(torch.float32)
    g = torch.Generator().manual_seed(0)
    Y = torch.randn(20, 400, generator=g).to(dtype)  # nearly orthogonal rows: a floor above 1
    base, floor = set_stats(X, rule), babel_floor(Y, rule)
    assert base.rank == 12 and base.zero_rows == 1 and floor.value > 2
    for scale in scales:
        st_ = set_stats(X * scale, rule)
        assert (st_.rank, st_.zero_rows) == (base.rank, base.zero_rows)
        assert [st_.ceiling(k, rule) for k in range(1, 31)] == [base.ceiling(k, rule) for k in range(1, 31)]
        assert np.allclose(np.array(st_.singular_values[:12]) / scale, base.singular_values[:12], rtol=1e-9)
        assert np.allclose(np.array(st_.row_norms_sorted) / scale, base.row_norms_sorted, rtol=1e-12)
        assert babel_floor(Y * scale, rule) == floor


def test_subnormal_data_keep_their_rank():
    X = structured(70, 30, 12, seed=9).double()
    rule = RankRule.for_dtype(torch.float32)
    for scale in (1e-310, 1e-315):
        st_ = set_stats(X * scale, rule)
        assert st_.rank == 12 and st_.zero_rows == 0


def test_babel_floor_in_row_blocks_and_among_ranks_is_the_same(monkeypatch):
    """Any row block (memory O(block x T)) and the row blocks divided among 3 ranks give one floor."""
    X = dominant(150, 20, 3, common=0.0)
    rule = RankRule.for_dtype(torch.float64)
    floor = babel_floor(X, rule)
    assert floor.value >= 2
    assert babel_floor(X, rule, row_block=7) == floor
    assert as_ranks(monkeypatch, 3, lambda: babel_floor(X, rule, row_block=11)) == [floor] * 3


def test_babel_floor_says_its_count_in_english():
    rule = RankRule.for_dtype(torch.float64)
    near = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]], dtype=torch.float64)  # two parallel rows
    one = babel_floor(near, rule)
    assert one.value == 1 and "every row is independent (non-zero)" in one.proves and "1 rows" not in one.proves
    many = babel_floor(torch.eye(4, dtype=torch.float64), rule)
    assert many.value == 4 and many.proves.startswith("every 4 rows are independent")
