"""Tests for mhaaudit.memorize.grouping: a grid split into stacked groups within a memory budget."""

from __future__ import annotations

import pytest
import torch

from mhaaudit.errors import InputError
from mhaaudit.memorize.grid import MemorizeRequest, points, resolve_grid
from mhaaudit.memorize.grouping import default_budget, group_bytes, plan_groups, refuse_too_large
from mhaaudit.memorize.stack import StackShape
from mhaaudit.memorize.training import Point, Recipe

_RECIPE = Recipe()


def _plan(pts, device="cpu", budget=8 << 30, max_points=None, recipe=_RECIPE):
    return plan_groups(
        pts, [p.plan(recipe).total for p in pts], recipe, torch.device(device), budget, max_points=max_points
    )


def _cpu_points():
    g = resolve_grid(MemorizeRequest(preset="cpu"))
    return [Point(**p) for p in points(g)]


def test_every_point_in_exactly_one_group():
    pts = _cpu_points()
    for device in ("cpu", "cuda"):
        plans = _plan(pts, device)
        assert sorted(i for g in plans for i in g.members) == list(range(len(pts)))
        for g in plans:
            assert g.shape == StackShape.of([pts[i] for i in g.members], 100) and g.bytes > 0 and g.work > 0


def test_gpu_stacks_the_cpu_preset_in_one_group_the_cpu_splits_by_size():
    pts = _cpu_points()
    assert len(_plan(pts, "cuda")) == 1  # launch-bound: one group
    cpu = _plan(pts, "cpu")
    assert 1 < len(cpu) < len(pts)  # compute-bound: padding H = 1 to H = 8 would cost more than it saves
    for g in cpu:
        assert g.shape.heads <= 2 * min(pts[i].heads for i in g.members)


def test_budget_and_max_points_split_groups():
    pts = _cpu_points()
    whole = _plan(pts, "cuda")[0].bytes
    smaller = _plan(pts, "cuda", budget=whole // 2)
    assert len(smaller) > 1 and all(g.bytes <= whole // 2 for g in smaller)
    assert all(len(g.members) == 1 for g in _plan(pts, "cuda", max_points=1))
    assert all(len(g.members) <= 3 for g in _plan(pts, "cuda", max_points=3))
    # A point larger than the budget still trains, alone.
    assert [len(g.members) for g in _plan(pts[:2], "cuda", budget=1)] == [1, 1]


def test_memory_estimate_grows_with_the_group():
    s = StackShape(points=4, heads=8, head_dim=64, n=32, size=1000, out_dim=100)
    kw = dict(batch=256, eval_chunk=1000, chunk_steps=256)
    base = group_bytes(s, shared=True, **kw)
    assert group_bytes(StackShape(**{**s.__dict__, "points": 8}), shared=True, **kw) > base
    assert group_bytes(StackShape(**{**s.__dict__, "heads": 16}), shared=True, **kw) > base
    assert group_bytes(s, shared=False, **kw) > base  # a context per example is held on the device
    assert default_budget(torch.device("cpu")) > 0


def test_a_time_limit_splits_the_grid_into_groups_that_each_fit_it():
    """With ``max_seconds`` no group's estimated time (its cost at the device's RATE) exceeds it, unless
    one point alone does: the paper's Figure 2a grid, one group on a GPU, is split when the limit is below
    the whole group's estimate."""
    from mhaaudit.memorize.grouping import RATE

    g = resolve_grid(MemorizeRequest(preset="paper-fig2a"))
    pts = [Point(**p) for p in points(g)]
    totals = [p.plan(_RECIPE).total for p in pts]
    cuda = torch.device("cuda")
    whole = plan_groups(pts, totals, _RECIPE, cuda, 64 << 30)
    limit = whole[0].work / RATE["cuda"] / 4
    parts = plan_groups(pts, totals, _RECIPE, cuda, 64 << 30, max_seconds=limit)
    assert len(whole) == 1 and sorted(i for p in parts for i in p.members) == list(range(len(pts)))
    assert len(parts) >= 4
    assert all(p.work <= limit * RATE["cuda"] or len(p.members) == 1 for p in parts)


def test_a_point_too_large_names_values_for_the_varied_parameter():
    """heads is one value: a grid varying it was given its values as values, which the refusal names."""
    pts = [Point(heads=10**8, n=32, head_dim=64, size=16)]
    for varied, named in ((None, "heads"), ("n", "heads"), ("heads", "values")):
        with pytest.raises(InputError, match=f"the largest {named} that fits is") as err:
            refuse_too_large(pts, _RECIPE, torch.device("cpu"), 1 << 30, 1 << 30, varied)
        assert err.value.params == (named,)
