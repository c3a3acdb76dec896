"""Tests for mhaaudit.memorize.results: the run records, their rows, the linear fits."""

from __future__ import annotations

import json

import pytest

from mhaaudit.memorize.recipe import RECIPE_FIELDS
from mhaaudit.memorize.results import MemorizeRun, fit_line
from mhaaudit.memorize.resume import row_to_run, run_to_row
from mhaaudit.memorize.training import Point, Recipe, train_memorize


def test_heads_fit():
    fit = fit_line([1, 2, 4, 8], [10, 20, 40, 80])
    assert fit.slope == pytest.approx(10) and fit.intercept == pytest.approx(0, abs=1e-9) and fit.r2 == pytest.approx(1)
    assert fit_line([1, 1], [3, 4]) is None
    # through two values of x any counts lie on a line (R^2 = 1): no fit, however many points
    assert fit_line([1, 2], [3, 40]) is None and fit_line([1, 2, 2, 1], [3, 40, 41, 2]) is None
    assert fit_line([1, 2, 3], [3, 40, 5]).r2 < 0.2


def _run(heads, size, count, diverged=False):
    loss = float("nan") if diverged else 1.0
    return MemorizeRun(
        heads=heads, n=32, head_dim=64, size=size, recipe=Recipe(), seed=0, memorized=count / size,
        memorized_count=count, epochs_run=1, steps_run=1, planned_steps=1, final_loss=loss, seconds=0.0,
        stopped_early=False, device="cpu", diverged=diverged,
    )  # fmt: skip


def test_a_size_with_two_values_of_h_has_no_line_and_says_why():
    """H = 4 saturates and H = 8 diverged: at T = 200 two values of H are left, which any line fits
    (R^2 = 1): no fit there, a gap that says so; T = 400 keeps three and is fitted; the pool too."""
    from mhaaudit.memorize.results import heads_fit_gaps, heads_fits

    runs = [_run(1, 200, 30), _run(2, 200, 60), _run(4, 200, 198), _run(8, 200, 0, diverged=True)]
    runs += [_run(1, 400, 30), _run(2, 400, 61), _run(4, 400, 120)]
    fits, gaps = heads_fits(runs, [200, 400]), heads_fit_gaps(runs, [200, 400])
    assert [(f.size, f.xs) for f in fits] == [(400, (1, 2, 4)), (None, (1, 2, 4))]
    assert [(g.size, g.points, g.xs, g.reason) for g in gaps] == [
        (200, 2, (1, 2), "2 values of H: too few to test a line (1 run(s) diverged, 1 saturated)")
    ]
    assert heads_fit_gaps(runs[2:3], [200])[0].reason == "no point below saturation to fit"
    assert heads_fit_gaps(runs[3:4], [200])[0].reason == "no point to fit: every run diverged"
    assert heads_fit_gaps(runs[2:4], [200])[0].reason == "no point to fit: 1 run(s) diverged, 1 saturated"
    assert (
        heads_fit_gaps(runs[:2] + runs[3:4], [200])[0].reason
        == "2 values of H: too few to test a line (1 run(s) diverged)"
    )


def test_row_round_trip():
    run = train_memorize(Point(2, 3, 4, 12), Recipe(max_steps=3), device="cpu", saturation=True)
    row = run_to_row(run)
    back = row_to_run(row)
    assert back.reused and back.saturation == run.saturation
    assert {k: v for k, v in back.to_dict().items() if k != "reused"} == {
        k: v for k, v in run.to_dict().items() if k != "reused"
    }
    # The shared parquet writer stores lists as JSON text: read back the same.
    assert row_to_run(row | {"sat_histogram": json.dumps(row["sat_histogram"])}).saturation == run.saturation
    assert "seed_rule" in json.loads(row["config_key"])


def test_a_run_holds_its_recipe_and_gives_it_flat():
    recipe = Recipe(max_steps=3, lr=2e-3)
    run = train_memorize(Point(2, 3, 4, 12), recipe, device="cpu")
    assert run.recipe == recipe
    doc = run.to_dict()
    keys = list(doc)
    assert keys[keys.index("size") + 1 : keys.index("seed")] == list(RECIPE_FIELDS)
    assert [doc[k] for k in RECIPE_FIELDS] == list(recipe.as_dict().values())
    assert MemorizeRun.from_document(json.loads(json.dumps(doc))) == run
    with pytest.raises(ValueError, match="lacks lr"):
        MemorizeRun.from_document({k: v for k, v in doc.items() if k != "lr"})
    with pytest.raises(ValueError, match="no field recipe"):
        MemorizeRun.from_document(doc | {"recipe": recipe.as_dict()})
    with pytest.raises(ValueError, match="lr"):
        MemorizeRun.from_document(doc | {"lr": -1.0})  # the recipe is checked as it is read back
