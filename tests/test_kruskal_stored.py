"""A stored test record or sweep that contradicts itself (``mhaaudit.kruskal.stored``): every record a run
writes passes, and each field changed against the others is named."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mhaaudit.contexts import assumption_2
from mhaaudit.kruskal import kruskal_sweep, subset_test
from mhaaudit.kruskal.stored import record_contradiction, sweep_contradiction


def _records():
    """Records of every kind a run writes: sampled, proven by the dimension or by a witness of a low-rank set,
    the whole set decided exactly, and Assumption 2's counts (holding, failing, and failing by dimension)."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(30, 8, generator=g, dtype=torch.float64)
    low = torch.randn(30, 2, generator=g, dtype=torch.float64) @ torch.randn(2, 8, generator=g, dtype=torch.float64)
    E = torch.randn(6, 3, 8, generator=g, dtype=torch.float64)
    E[2, 1] = E[2, 0]
    return {
        "sampled": subset_test(X, 5, samples=200).record(),
        "dimension": subset_test(X, 9, samples=200).record(),
        "set-rank": subset_test(low, 4, samples=200).record(),
        "whole set": subset_test(X[:6], 6, samples=200).record(),
        "assumption 2 holds": assumption_2(torch.randn(6, 3, 8, generator=g, dtype=torch.float64)).record(),
        "assumption 2 fails": assumption_2(E).record(),
        "assumption 2 by dimension": assumption_2(torch.randn(4, 9, 8, generator=g, dtype=torch.float64)).record(),
    }


def _counted(full: int, T: int) -> dict:
    """Assumption 2's count changed to ``full`` of ``T``, its fraction and interval with it."""
    return dict(satisfied=full, fraction=full / T, ci_low=full / T, ci_high=full / T)


def test_every_record_a_run_writes_is_consistent():
    records = _records()
    assert records["set-rank"]["exact_status"] == "fails" and records["set-rank"]["witness"]
    assert records["assumption 2 fails"]["verdict"] == "fails"
    for kind, rec in records.items():
        assert record_contradiction(rec) is None, kind


@pytest.mark.parametrize(
    "kind, edit, says",
    [
        ("sampled", dict(verdict="fails"), "verdict fails with fraction 1.0 against threshold 0.99"),
        ("sampled", dict(exact_status="fails", exact_basis="witness"), "holds no witness"),
        ("sampled", dict(fraction=0.5), "fraction = 0.5, not its count 200 over samples = 200"),
        ("sampled", dict(satisfied=201), "satisfied = 201 of samples = 200"),
        ("sampled", dict(exact_status="holds", exact_basis="witness"), "which proves the other answer"),
        ("sampled", dict(verdict="maybe"), "verdict 'maybe' is not one of"),
        ("sampled", dict(verdict="unavailable"), "verdict unavailable with 200 draws decided"),
        ("dimension", dict(verdict="holds"), "verdict holds with no draw decided"),
        ("dimension", dict(k=5), "exact status fails by the dimension at k = 5"),
        ("set-rank", dict(witness=[0, 99]), "is not rows among T = 30"),
        ("whole set", dict(exact_status="undecided"), "exact status undecided with basis exhaustive"),
        (
            "assumption 2 fails",
            dict(satisfied=6, fraction=1.0, ci_low=1.0, ci_high=1.0),
            "verdict fails with fraction 1.0",
        ),
        (
            "assumption 2 holds",
            dict(satisfied=5, fraction=5 / 6, ci_low=5 / 6, ci_high=5 / 6),
            "verdict holds with fraction 0.8333",
        ),
    ],
)
def test_a_record_changed_against_itself_is_named(kind, edit, says):
    rec = _records()[kind] | edit
    wrong = record_contradiction(rec)
    assert wrong is not None and says in wrong, wrong


def test_a_sweep_changed_against_itself_is_named():
    g = torch.Generator().manual_seed(1)
    sweep = kruskal_sweep(torch.randn(40, 6, generator=g, dtype=torch.float64), samples=100)
    assert sweep_contradiction(sweep) is None
    for edit, says in (
        (dict(estimate=sweep.estimate - 1), f"estimate {sweep.estimate - 1}, not its raw estimate"),
        (dict(raw_estimate=1), "raw estimate 1, where its fractions reach the threshold up to k = 6"),
        (dict(fractions=(*sweep.fractions[:-1], 1.5)), "are not one fraction per size"),
        (dict(floor=dataclasses.replace(sweep.floor, value=7)), "certified floor 7 and ceiling 6"),
        (dict(ceiling=dataclasses.replace(sweep.ceiling, kind="witness")), "the sweep holds no witness of 7 rows"),
    ):
        wrong = sweep_contradiction(dataclasses.replace(sweep, **edit))
        assert wrong is not None and says in wrong, (edit, wrong)
