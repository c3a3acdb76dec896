"""Tests for mhaaudit.memorize.results: the run records, their rows, the linear fits."""

from __future__ import annotations

import json

import pytest

from mhaaudit.memorize.recipe import RECIPE_FIELDS
from mhaaudit.memorize.results import MemorizeRun, fit_line, row_to_run, run_to_row
from mhaaudit.memorize.training import Point, Recipe, train_memorize


def test_heads_fit():
    fit = fit_line([1, 2, 4, 8], [10, 20, 40, 80])
    assert fit.slope == pytest.approx(10) and fit.intercept == pytest.approx(0, abs=1e-9) and fit.r2 == pytest.approx(1)
    assert fit_line([1, 1], [3, 4]) is None


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
