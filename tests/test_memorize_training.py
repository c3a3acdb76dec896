"""Tests for mhaaudit.memorize.training: the recipe, the schedule and the training of a point."""

from __future__ import annotations

import pytest

from mhaaudit.errors import InputError
from mhaaudit.memorize.training import lr_factor, planned_schedule, train_memorize

TINY = dict(n=4, head_dim=8, device="cpu")


def test_determinism_for_a_seed():
    a = train_memorize(heads=2, size=40, max_steps=15, seed=3, **TINY)
    b = train_memorize(heads=2, size=40, max_steps=15, seed=3, **TINY)
    c = train_memorize(heads=2, size=40, max_steps=15, seed=4, **TINY)
    assert a.final_loss == b.final_loss and a.memorized_count == b.memorized_count
    assert a.final_loss != c.final_loss


def test_early_stop_when_memorised():
    run = train_memorize(heads=4, size=8, epochs=3000, check_every=20, seed=0, classes=4, **TINY)
    assert run.memorized == 1.0 and run.memorized_count == 8
    assert run.stopped_early and run.steps_run < run.planned_steps == 3000
    assert run.steps_run % 20 == 0


def test_schedule_rules():
    assert planned_schedule(1000, 256, None, None) == (4, 12500, 50000)
    assert planned_schedule(256 * 200, 256, None, None) == (200, 500, 100000)
    assert planned_schedule(1000, 256, 10, None) == (4, 10, 40)
    assert planned_schedule(1000, 256, None, 6000) == (4, 1500, 6000)
    total = 1000
    lrs = [lr_factor(s, total) for s in range(total)]
    assert lrs[0] == pytest.approx(1 / 50) and lrs[49] == pytest.approx(1.0)
    assert max(lrs) == pytest.approx(1.0) and lrs[-1] < 1e-4
    assert all(x >= y for x, y in zip(lrs[50:], lrs[51:]))  # decays monotonically after warm-up


def test_bad_input_training():
    with pytest.raises(InputError):
        train_memorize(heads=0, n=4, size=10, device="cpu")
    with pytest.raises(InputError):
        train_memorize(heads=1, n=4, size=0, device="cpu")
