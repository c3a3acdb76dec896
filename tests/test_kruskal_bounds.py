"""Floor, ceiling and brute force: the bounds that hold for every subset."""

from __future__ import annotations

import numpy as np
import torch
from matrices import structured

from mhaaudit.kruskal import babel_floor, exact_kruskal_rank, set_stats
from mhaaudit.numerics import RankRule


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


def test_set_stats_matches_svd():
    X = structured(70, 30, 12, seed=9)
    rule = RankRule.for_dtype(X.dtype)
    st_ = set_stats(X, rule)
    assert st_.rank == int(torch.linalg.matrix_rank(X.double(), rtol=rule.rtol_for(70, 30)))
    ref = torch.linalg.svdvals(X.double())
    assert np.allclose(st_.singular_values[:12], ref[:12].numpy(), rtol=1e-9)
