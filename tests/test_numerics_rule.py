"""The rank rule (torch.linalg.matrix_rank's semantics) and the numerics setting."""

from __future__ import annotations

import threading

import pytest
import torch

from mhaaudit.errors import InputError
from mhaaudit.numerics import RankRule, numerics, with_numerics


def test_default_rule_is_matrix_rank_default():
    rule = RankRule.for_dtype(torch.float32)
    assert rule.eps == torch.finfo(torch.float32).eps and rule.dtype == "float32"
    assert rule.rtol_for(5, 12) == 12 * rule.eps and rule.atol_value == 0.0
    assert rule.tol(2.0, 5, 12) == 2.0 * 12 * rule.eps
    assert "matrix_rank's default" in rule.describe()
    assert RankRule.for_dtype(torch.int64).dtype == "float64"  # integers are ranked in float64
    assert RankRule.for_dtype("float64").eps == torch.finfo(torch.float64).eps


def test_a_numpy_dtype_or_a_name_gives_the_rule_and_anything_else_is_refused():
    import numpy as np

    for dtype in (np.float32, np.dtype("float32"), np.zeros(2, np.float32).dtype, "float32", torch.float32):
        assert RankRule.for_dtype(dtype) == RankRule.for_dtype(torch.float32), dtype
    assert RankRule.for_dtype(np.int64).dtype == "float64"
    for bad in ("foo", "__class__", 3, None):
        with pytest.raises(InputError, match=r"^dtype .*: not a dtype"):
            RankRule.for_dtype(bad)


def test_user_tolerances_follow_matrix_rank():
    only_atol = RankRule.for_dtype(torch.float32, atol=0.5)
    assert only_atol.rtol_for(5, 12) == 0.0 and only_atol.tol(10.0, 5, 12) == 0.5
    both = RankRule.for_dtype(torch.float32, rtol=0.1, atol=0.5)
    assert both.tol(10.0, 5, 12) == 1.0 and both.tol(1.0, 5, 12) == 0.5
    t = both.tol(torch.tensor([10.0, 1.0]), 5, 12)
    assert torch.equal(t, torch.tensor([1.0, 0.5]))
    assert both.as_dict()["rtol"] == 0.1 and "atol = 0.5" in both.describe()


@pytest.mark.parametrize(
    "kw, match", [({"rtol": -1.0}, "^rtol"), ({"atol": float("inf")}, "^atol"), ({"atol": float("nan")}, "^atol")]
)
def test_bad_tolerances_are_refused(kw, match):
    with pytest.raises(InputError, match=f"{match} must be a finite number >= 0"):
        RankRule.for_dtype(torch.float32, **kw)


def test_numerics_restores_threads_and_nests():
    before = torch.get_num_threads()
    with numerics(threads=1):
        assert torch.get_num_threads() == 1
        with numerics():
            assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before

    @with_numerics(threads=1)
    def inside():
        return torch.get_num_threads()

    assert inside() == 1 and torch.get_num_threads() == before


def test_numerics_flushes_subnormals_in_its_thread_only():
    tiny = torch.tensor([1e-310], dtype=torch.float64)
    seen = {}
    go = threading.Event()

    def other():  # started before the setting, so it keeps its own (new threads inherit it)
        go.wait()
        seen["other"] = float(tiny * 1.0)

    t = threading.Thread(target=other)
    t.start()
    with numerics():
        flushes = float(tiny * 1.0) == 0.0
        go.set()
        t.join()
    if not flushes:
        pytest.skip("this CPU does not flush subnormals")
    assert seen["other"] == 1e-310  # another thread keeps its own setting
    assert float(tiny * 1.0) == 1e-310  # restored on exit


# ------------------------------------------------------------------ the per-matrix rule and the set's ceiling


def test_the_rule_of_a_set_is_the_per_matrix_rule():
    """Every rank decision about a set and its subsets is the paper's rule on that matrix:
    ``fixed_rule`` hands the kernels the rule as given, never an absolute tolerance of the set."""
    from mhaaudit.kruskal import fixed_rule

    X = torch.randn(50, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 1e3
    for rule in (
        RankRule.for_dtype(torch.float32),
        RankRule.for_dtype(torch.float32, rtol=1e-3),
        RankRule.for_dtype(torch.float32, atol=0.5),
    ):
        got, stats = fixed_rule(X, rule)
        assert got == rule and stats is not None
        for rows, cols in ((3, 8), (8, 8), (50, 8)):
            assert got.rtol_for(rows, cols) == rule.rtol_for(rows, cols)
    assert RankRule.for_dtype(torch.float32).tol(2.0, 5, 8) == 2.0 * 8 * RankRule.for_dtype(torch.float32).eps


def test_the_set_rank_reported_at_k_is_a_ceiling_for_every_k_subset():
    """A set whose own tolerance hides a direction that small subsets still see: their rank can
    exceed the set's rank as one matrix, never the ceiling reported at their size."""
    import itertools

    from mhaaudit.kruskal import set_stats
    from mhaaudit.numerics import svd_rank

    g = torch.Generator().manual_seed(1)
    T, d = 12, 4
    X = torch.randn(T, d, dtype=torch.float64, generator=g)
    X[:, -1] *= 1e-6  # below sigma_max * 12 * eps32 ~ 1.4e-5 * 4: hidden from the whole set
    X[0] *= 1e3  # one large row: the whole set's sigma_max is large, a subset without it is not
    rule = RankRule.for_dtype(torch.float32)
    stats = set_stats(X, rule)
    above = 0
    for k in range(1, d + 1):
        ceil = stats.ceiling(k, rule)
        for rows in itertools.combinations(range(T), k):
            r = int(svd_rank(X[list(rows)], rule)[0])
            assert r <= ceil, (k, rows, r, ceil)
            above += r > stats.rank
    assert above > 0  # the ceiling is needed: some subsets out-rank the set as one matrix
