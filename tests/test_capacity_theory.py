"""Theorem 1, Remark 1 and Proposition 2 counts."""

from __future__ import annotations

import pytest

from mhaaudit.capacity import shared_context_rank_bound, theorem1_bound
from mhaaudit.errors import InputError


def test_shared_context_rank_bound_values():
    assert shared_context_rank_bound(1, 1) == 1
    assert shared_context_rank_bound(20, 32) == 621
    with pytest.raises(InputError):
        shared_context_rank_bound(0, 5)
    with pytest.raises(InputError):
        shared_context_rank_bound(2, 0)


# ------------------------------------------------------------------ theorem1_bound


def test_theorem1_holds():
    b = theorem1_bound(heads=12, head_dim=64, n=197, d=768, a1_holds=True, a2_holds=True)
    assert b.applies and b.which == "theorem-1" and b.count == 12 * 63 + 1
    assert "12*(min(197, 64) - 1) + 1 = 757" in b.formula
    assert b.reconstructed and any("reconstructed" in note for note in b.notes)
    b2 = theorem1_bound(heads=3, head_dim=64, n=10, d=768, a1_holds=True, a2_holds=True)
    assert b2.count == 3 * 9 + 1


def test_theorem1_on_an_estimated_assumption_1_says_so():
    """Where A1 holds as an estimate only (the share of its draws, no proof), Theorem 1's count is given with a
    reason and a note that say so, as Remark 1's count says it inherits an estimate's status; proven or not said,
    as before."""
    kw = dict(heads=12, head_dim=64, n=197, d=768, a1_holds=True, a2_holds=True)
    est = theorem1_bound(**kw, a1_proven=False)
    assert est.count == 12 * 63 + 1 and est.reason == "A1 (an estimate) and A2 hold and n < d"
    assert any(n.startswith("A1 holds as an estimate") and "inherits" in n for n in est.notes)
    for proven in (True, None):
        b = theorem1_bound(**kw, a1_proven=proven)
        assert b.reason == "A1 and A2 hold and n < d" and not any("as an estimate" in n for n in b.notes)
        assert b.count == est.count


def test_remark1():
    b = theorem1_bound(heads=16, head_dim=64, n=512, d=1024, a1_holds=False, a2_holds=True, kruskal_estimate=349)
    assert b.applies and b.which == "remark-1" and b.count == 16 * 63 + 1
    b = theorem1_bound(heads=16, head_dim=512, n=512, d=1024, a1_holds=False, a2_holds=True, kruskal_estimate=349)
    assert b.count == 16 * 348 + 1 and "349" in b.formula


@pytest.mark.parametrize(
    "kw,fragment",
    [
        (dict(a1_holds=True, a2_holds=False), "A2 fails"),
        (dict(a1_holds=True, a2_holds=None), "A2"),
        (dict(a1_holds=True, a2_holds=True, n=1024, d=1024), "n >= d"),
        (dict(a1_holds=False, a2_holds=True), "no Kruskal"),
        (dict(a1_holds=False, a2_holds=True, kruskal_estimate=600), "inconsistent"),
    ],
)
def test_theorem1_not_applicable(kw, fragment):
    args = dict(heads=4, head_dim=64, n=512, d=1024)
    args.update(kw)
    b = theorem1_bound(**args)
    assert not b.applies and b.count is None and b.which == "not-applicable"
    assert fragment in b.reason


def test_theorem1_conflict_noted():
    b = theorem1_bound(heads=2, head_dim=64, n=100, d=768, a1_holds=True, a2_holds=True, kruskal_estimate=50)
    assert b.which == "theorem-1" and any("conflict" in x or "below n" in x for x in b.notes)
    d = b.to_dict()
    assert d["count"] == b.count and d["which"] == "theorem-1"


@pytest.mark.parametrize(
    "kw",
    [
        dict(heads=0),
        dict(head_dim=0),
        dict(n=0),
        dict(d=-1),
        dict(heads=2.5),
        dict(kruskal_estimate=0),
        dict(a1_holds="yes"),
        dict(a1_proven="no"),  # was counted as proven
    ],
)
def test_theorem1_bad_input(kw):
    args = dict(heads=4, head_dim=64, n=32, d=64, a1_holds=True, a2_holds=True)
    args.update(kw)
    with pytest.raises(InputError):
        theorem1_bound(**args)
