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


def test_user_tolerances_follow_matrix_rank():
    only_atol = RankRule.for_dtype(torch.float32, atol=0.5)
    assert only_atol.rtol_for(5, 12) == 0.0 and only_atol.tol(10.0, 5, 12) == 0.5
    both = RankRule.for_dtype(torch.float32, rtol=0.1, atol=0.5)
    assert both.tol(10.0, 5, 12) == 1.0 and both.tol(1.0, 5, 12) == 0.5
    t = both.tol(torch.tensor([10.0, 1.0]), 5, 12)
    assert torch.equal(t, torch.tensor([1.0, 0.5]))
    assert both.as_dict()["rtol"] == 0.1 and "atol = 0.5" in both.describe()


@pytest.mark.parametrize("kw, match", [({"rtol": -1.0}, "--rtol"), ({"atol": float("inf")}, "--atol"),
                                       ({"atol": float("nan")}, "--atol")])
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


# ------------------------------------------------------------------ the rule fixed on a whole set


def test_a_rule_fixed_on_a_set_is_one_absolute_tolerance():
    rule = RankRule.for_dtype(torch.float32).for_set(3.0, 100, 20)
    tol = 3.0 * 100 * rule.eps  # sigma_max(whole set) * max(T, d) * eps
    assert rule.fixed and rule.set_tol == tol and rule.atol_value == tol and rule.rtol_for(7, 20) == 0.0
    assert rule.tol(1e9, 7, 20) == tol and rule.tol(0.0, 1, 1) == tol  # whatever the subset
    assert torch.equal(rule.tol(torch.tensor([1.0, 5.0], dtype=torch.float64), 2, 20),
                       torch.full((2,), tol, dtype=torch.float64))
    assert rule.for_set(100.0, 5, 5) is rule  # fixed once
    d = rule.as_dict()
    assert (d["tol"], d["set_sigma_max"], d["set_size"], d["scope"]) == (tol, 3.0, 100, "whole set")
    assert "every subset" in rule.describe() and f"{tol:.6g}" in rule.describe()


def test_user_tolerances_stay_meaningful_on_a_set():
    rtol = RankRule.for_dtype(torch.float32, rtol=1e-3).for_set(4.0, 10, 10)
    assert rtol.set_tol == pytest.approx(4e-3)  # rtol * sigma_max(whole set)
    atol = RankRule.for_dtype(torch.float32, atol=0.5).for_set(4.0, 10, 10)
    assert atol.set_tol == 0.5
    both = RankRule.for_dtype(torch.float32, rtol=0.1, atol=0.5).for_set(10.0, 10, 10)
    assert both.set_tol == 1.0 and RankRule.for_dtype(torch.float32, rtol=0.1, atol=0.5).for_set(1.0, 10, 10).set_tol == 0.5


@pytest.mark.parametrize("e", [-1070, -600, 0, 600, 1000])
def test_a_fixed_rule_moves_between_units_exactly(e):
    """The set's sigma_max is kept with its own exponent: in the units of the data divided by
    2**e the tolerance is the same number, however small or large the data are."""
    unit = RankRule.for_dtype(torch.float32).for_set(0.75, 64, 8)
    in_data = RankRule.for_dtype(torch.float32).for_set(0.75, 64, 8, exponent=e)
    assert in_data.in_units(e).set_tol == unit.set_tol
    atol = RankRule.for_dtype(torch.float32, atol=2.0**-3).for_set(0.75, 64, 8, exponent=0)
    assert atol.in_units(-4).set_tol == 2.0
