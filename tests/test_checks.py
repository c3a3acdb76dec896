"""Assumption 2 and the check wrappers against brute force."""

from __future__ import annotations

import pytest
import torch

from mhaaudit.checks import (
    CHECK_MEANING,
    CHECK_TITLES,
    CHECKS,
    REGISTRY,
    assumption_1,
    assumption_2,
    assumption_3,
    context_ranks,
    general_position,
)
from mhaaudit.numerics import RankRule


def _ref_ranks(E, rule):
    out = []
    for e in E:
        e = e.double()
        out.append(int(torch.linalg.matrix_rank(e, rtol=rule.rtol_for(*e.shape), atol=rule.atol_value)))
    return torch.tensor(out)


def test_context_ranks_equal_matrix_rank_on_mixed_batch():
    g = torch.Generator().manual_seed(0)
    n, d = 6, 10
    E = torch.randn(40, n, d, generator=g)
    E[3, 5] = E[3, 1]  # a duplicated token: rank n - 1
    E[7] = torch.randn(n, 2, generator=g) @ torch.randn(2, d, generator=g)  # rank 2
    E[9, 4] = E[9, 0] + 1e-9 * torch.randn(d, generator=g)  # below the tolerance
    E[11, 2] = E[11, 0] + 1e-2 * torch.randn(d, generator=g)  # far above it
    rule = RankRule.for_dtype(E.dtype)
    rank, smin, smax, tol = context_ranks(E, rule)
    assert torch.equal(rank.cpu(), _ref_ranks(E, rule))
    assert rank[3] == n - 1 and rank[7] == 2 and rank[9] == n - 1 and rank[11] == n
    ref = torch.linalg.svdvals(E.double())
    full = rank == n
    # estimates for full-rank matrices: Rayleigh quotients, so on the safe side of the truth
    # (sigma_max never over-, sigma_min never under-estimated) and close to it
    assert bool((smax[full] <= ref[full, 0] * (1 + 1e-12)).all())
    assert bool((smin[full] >= ref[full, -1] * (1 - 1e-12)).all())
    assert torch.allclose(smax[full], ref[full, 0], rtol=0.1)
    assert torch.allclose(smin[full], ref[full, -1], rtol=0.1)


def test_assumption_2_counts_and_verdict():
    g = torch.Generator().manual_seed(1)
    E = torch.randn(30, 5, 12, generator=g)
    res = assumption_2(E)
    assert res.verdict == "holds" and res.full == 30 and res.deficient == 0 and res.min_margin > 1
    E[4, 1] = E[4, 0]
    E[17, 2] = 0
    res = assumption_2(E)
    assert res.verdict == "fails" and res.full == 28 and res.deficient_examples == (4, 17)
    assert res.rank_histogram == {4: 2, 5: 28}
    rec = res.record()
    assert rec["check"] == "assumption_2" and rec["satisfied"] == 28 and rec["witness"] == [4, 17]


def test_assumption_2_n_above_d_fails_at_once():
    res = assumption_2(torch.randn(4, 9, 6))
    assert res.verdict == "fails" and "n = 9 > d = 6" in res.reason


def test_wrappers_use_the_papers_sizes():
    g = torch.Generator().manual_seed(2)
    Q = torch.randn(80, 16, generator=g)
    r1 = assumption_1(Q, 10, samples=200)
    assert r1.check == "assumption_1" and r1.k == 10 and r1.verdict == "holds"
    gp = general_position(Q, samples=200)
    assert gp.check == "general_position" and gp.k == 16 and gp.verdict == "holds"
    r3 = assumption_3(torch.ones(80, 16), 10, samples=200)
    assert r3.check == "assumption_3" and r3.verdict == "fails" and not r3.sampled


def test_registry_names_each_check_and_its_size():
    assert CHECKS == tuple(REGISTRY) == ("general_position", "assumption_1", "assumption_2", "assumption_3")
    n, T, d = 5, 80, 16
    assert [REGISTRY[c].k(n, T, d) for c in CHECKS] == [16, 5, 5, 5]
    assert REGISTRY["general_position"].k(n, 10, d) == 10  # min(T, d)
    assert [REGISTRY[c].run for c in CHECKS] == [general_position, assumption_1, assumption_2, assumption_3]
    assert [REGISTRY[c].estimated for c in CHECKS] == [True, True, False, True]
    assert [REGISTRY[c].vectors for c in CHECKS] == ["queries", "queries", "contexts", "a3"]
    assert CHECK_TITLES["assumption_2"] == "Assumption 2" and CHECK_TITLES["kruskal"] == "Kruskal test"
    assert CHECK_MEANING["assumption_1"].startswith("every n query vectors")


@pytest.mark.parametrize("dtype, scales", [(torch.float64, (1e-300, 1e-150, 1e150, 1e300)),
                                           (torch.float32, (2.0**-100, 2.0**-50, 2.0**50, 2.0**100))])
def test_assumption_2_is_the_same_at_every_scale(dtype, scales):
    g = torch.Generator().manual_seed(1)
    E = torch.randn(30, 5, 12, generator=g).to(dtype)
    E[20, 3] = E[20, 0] + 1e-3 * torch.randn(12, generator=g).to(dtype)  # full rank, closer to the tolerance
    failing = E.clone()
    failing[4, 1] = failing[4, 0]
    failing[17, 2] = 0
    rule = RankRule.for_dtype(torch.float32)
    base, base_fail = assumption_2(E, rule), assumption_2(failing, rule)
    assert base.verdict == "holds" and base.worst_example == 20 and base_fail.verdict == "fails"
    r0, smin0, smax0, tol0 = context_ranks(failing, rule)
    full = r0 == 5
    for scale in scales:
        res, fail = assumption_2(E * scale, rule), assumption_2(failing * scale, rule)
        assert (res.verdict, res.reason, res.full, res.worst_example) == (base.verdict, base.reason, base.full,
                                                                          base.worst_example)
        assert res.min_margin == pytest.approx(base.min_margin, rel=1e-6)  # an inverse-iteration estimate
        assert (fail.verdict, fail.reason, fail.full, fail.deficient, fail.rank_histogram, fail.deficient_examples) == \
            (base_fail.verdict, base_fail.reason, base_fail.full, base_fail.deficient, base_fail.rank_histogram,
             base_fail.deficient_examples)
        r, smin, smax, tol = context_ranks(failing * scale, rule)
        assert torch.equal(r, r0)
        # in the data's own units (sigma_min of a deficient matrix is rounding noise: not compared)
        for a, b in ((smin[full], smin0[full]), (smax, smax0), (tol, tol0)):
            assert torch.allclose(a / scale, b, rtol=1e-6, atol=0)
