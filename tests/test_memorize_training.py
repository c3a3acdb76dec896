"""Tests for mhaaudit.memorize.training: the recipe, the schedule and the training of a point."""

from __future__ import annotations

import pytest
import torch

from mhaaudit.errors import InputError
from mhaaudit.memorize.training import Point, Recipe, train_memorize


def _point(heads, size, seed=0, n=4, head_dim=8):
    return Point.resolve(heads=heads, n=n, head_dim=head_dim, size=size, seed=seed)


def test_determinism_for_a_seed():
    a = train_memorize(_point(2, 40, seed=3), Recipe(max_steps=15), device="cpu")
    b = train_memorize(_point(2, 40, seed=3), Recipe(max_steps=15), device="cpu")
    c = train_memorize(_point(2, 40, seed=4), Recipe(max_steps=15), device="cpu")
    assert a.final_loss == b.final_loss and a.memorized_count == b.memorized_count
    assert a.final_loss != c.final_loss


def test_early_stop_when_memorised():
    run = train_memorize(_point(4, 8), Recipe(epochs=3000, check_every=20, classes=4), device="cpu")
    assert run.memorized == 1.0 and run.memorized_count == 8
    assert run.stopped_early and run.steps_run < run.planned_steps == 3000
    assert run.steps_run % 20 == 0


def test_bad_input_training():
    with pytest.raises(InputError):
        _point(0, 10)
    with pytest.raises(InputError):
        _point(1, 0)
    with pytest.raises(InputError, match=r"^classes must be at least 2"):
        Recipe(classes=1)
    assert Recipe(classes="4", lr=1) == Recipe(classes=4, lr=1.0)


# ------------------------------------------------------------------ a group trains each point as if alone

from mhaaudit.memorize.training import intra_op_threads, train_group  # noqa: E402

CPU = torch.device("cpu")
# Different H, n, d_h, T and seeds; the last memorises its 6 examples and stops early.
MIXED = [Point(1, 4, 8, 24, 0), Point(3, 5, 6, 40, 1), Point(2, 3, 8, 70, 2), Point(4, 2, 4, 6, 0)]


def _same_record(a, b):
    assert (a.memorized_count, a.steps_run, a.epochs_run, a.stopped_early) == (
        b.memorized_count,
        b.steps_run,
        b.epochs_run,
        b.stopped_early,
    )
    assert a.final_loss == pytest.approx(b.final_loss, rel=1e-5, abs=1e-7)
    assert a.saturation == b.saturation


@pytest.mark.parametrize(
    "task,context",
    [
        ("classification", "shared"),
        ("classification", "per-example"),
        ("regression", "shared"),
        ("regression", "per-example"),
    ],
)
def test_a_stacked_group_matches_its_points_trained_one_by_one(task, context):
    recipe = Recipe(
        task=task,
        context=context,
        classes=3,
        epochs=80,
        max_steps=80,
        check_every=10,
        batch_size=16,
        lr=1e-2,
        tolerance=0.2,
    )
    together = train_group(MIXED, recipe, CPU, saturation=True)
    alone = [train_group([p], recipe, CPU, saturation=True)[0] for p in MIXED]
    for a, b in zip(together, alone, strict=False):
        _same_record(a, b)
    if task == "classification":
        assert together[-1].stopped_early and together[-1].memorized == 1.0  # one point left the stack early
    assert {r.planned_steps for r in together} == {80} and any(r.steps_run == 80 for r in together)


def test_points_with_different_schedules_in_one_group():
    recipe = Recipe(classes=4, check_every=7, batch_size=8)  # the paper rule: epochs differ by T
    pts = [Point(2, 3, 4, 8, 0), Point(2, 3, 4, 20, 0)]  # 1 and 3 steps per epoch
    recipe = Recipe(**{**recipe.as_dict(), "epochs": 40})
    together = train_group(pts, recipe, CPU)
    assert [r.planned_steps for r in together] == [40, 120]
    for a, b in zip(together, [train_group([p], recipe, CPU)[0] for p in pts], strict=False):
        _same_record(a, b)


@pytest.mark.parametrize("task,context", [("classification", "shared"), ("regression", "per-example")])
def test_the_stacked_training_is_the_plain_loop(task, context):
    from mhaaudit.memorize.reference import train_plain

    recipe = Recipe(
        task=task, context=context, classes=5, max_steps=40, check_every=15, batch_size=16, lr=3e-3, tolerance=0.2
    )
    pts = [Point(2, 4, 8, 40, 0), Point(3, 3, 5, 30, 1)]
    for run, p in zip(train_group(pts, recipe, CPU), pts, strict=False):
        with intra_op_threads(CPU, 1):
            plain = train_plain(p, recipe, CPU)
        assert {k: getattr(run, k) for k in plain if k != "final_loss"} == {
            k: v for k, v in plain.items() if k != "final_loss"
        }
        assert run.final_loss == pytest.approx(plain["final_loss"], rel=1e-4)


def test_an_example_with_non_finite_outputs_is_never_memorised():
    """argmax of NaN logits is a class (0): an example labelled 0 was counted memorised by a model that
    diverged. Non-finite outputs memorise nothing, in either task."""
    from mhaaudit.memorize.training import memorised

    nan, inf = float("nan"), float("inf")
    out = torch.tensor([[nan, nan, nan], [nan, 0.0, 1.0], [inf, 0.0, 0.0], [5.0, 0.0, 1.0]])
    labels = torch.tensor([0, 2, 0, 0])
    assert memorised(Recipe(classes=3), out, labels).tolist() == [False, False, False, True]
    reg = Recipe(task="regression", tolerance=0.5)
    got = memorised(reg, torch.tensor([[nan], [inf], [0.3]]), torch.tensor([0.2, 0.2, 0.2]))
    assert got.tolist() == [False, False, True]


def test_a_diverged_training_says_so_and_counts_nothing():
    """lr = 1e300 sends the weights to NaN: the run says it diverged, its loss is NaN, and none of its examples
    (half of them labelled 0, the argmax of NaN logits) counts as memorised, stacked or alone."""
    recipe = Recipe(classes=2, max_steps=10, check_every=5, batch_size=8, lr=1e300)
    pts = [Point(1, 4, 8, 20, 0), Point(2, 3, 8, 12, 1)]
    for run in [*train_group(pts, recipe, CPU), train_group(pts[:1], recipe, CPU)[0]]:
        assert run.diverged and run.final_loss != run.final_loss
        assert run.memorized_count == 0 and run.steps_run == run.planned_steps == 10 and not run.stopped_early
    calm = train_group(pts[:1], Recipe(**{**recipe.as_dict(), "lr": 1e-3}), CPU)[0]
    assert not calm.diverged and calm.final_loss > 0
