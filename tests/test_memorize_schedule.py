"""Tests for mhaaudit.memorize.schedule: planned steps, learning rate, checks, batch order."""

from __future__ import annotations

import itertools

import pytest
import torch

from mhaaudit.memorize.schedule import BatchOrder, Plan, lr_factor, planned_schedule


def test_schedule_rules():
    assert planned_schedule(1000, 256, None, None) == (4, 12500, 50000)
    assert planned_schedule(256 * 200, 256, None, None) == (200, 500, 100000)
    assert planned_schedule(1000, 256, 10, None) == (4, 10, 40)
    assert planned_schedule(1000, 256, None, 6000) == (4, 1500, 6000)
    total = 1000
    lrs = [lr_factor(s, total) for s in range(total)]
    assert lrs[0] == pytest.approx(1 / 50) and lrs[49] == pytest.approx(1.0)
    assert max(lrs) == pytest.approx(1.0) and lrs[-1] < 1e-4
    assert all(x >= y for x, y in itertools.pairwise(lrs[50:]))  # decays monotonically after warm-up


def _reference_checks(size, batch, epochs, max_steps, check_every):
    """The checks of the plain training loop: (step, epochs) at the end of an epoch, as it runs."""
    spe, _, total = planned_schedule(size, batch, epochs, max_steps)
    step = epoch = since = 0
    out = {}
    while step < total:
        took = min(spe, total - step)
        step += took
        since += took
        epoch += 1
        if since >= check_every or step >= total:
            since = 0
            out[step] = epoch
    return out


@pytest.mark.parametrize(
    "size,batch,epochs,max_steps,check_every",
    [
        (8, 256, 3000, None, 20),
        (550, 256, None, None, 200),
        (1000, 256, None, 6000, 200),
        (500, 256, None, 6000, 200),
        (300, 7, 3, None, 5),
        (10, 3, None, 11, 4),
        (24, 256, None, 20, 200),
        (100, 10, 2, None, 1000),
    ],
)
def test_plan_checks_match_the_plain_loop(size, batch, epochs, max_steps, check_every):
    plan = Plan.of(size, batch, epochs, max_steps, check_every)
    reference = _reference_checks(size, batch, epochs, max_steps, check_every)
    assert dict(plan.checks()) == reference
    assert [s for s in range(plan.total + 3) if plan.is_check(s)] == list(reference)
    assert all(plan.epochs_at(s) == reference.get(s) for s in range(plan.total + 3))
    assert plan.total == planned_schedule(size, batch, epochs, max_steps)[2] and max(reference) == plan.total


def test_a_plan_of_any_length_costs_the_same_memory():
    """The checks are computed, not stored one by one: a plan of 10^6 checks (one every epoch) or of 10^14
    epochs is made in the memory of a plan of three, where one dict entry a check took hundreds of MB."""
    import tracemalloc

    tracemalloc.start()
    try:
        long = Plan.of(10, 256, 10**6, None, 1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024  # checked before the plan of 10^14 epochs, which the dict could never hold
    huge = Plan.of(10, 256, 10**14, None, 200)
    assert (long.total, long.epochs_at(10**6), long.epochs_at(999_999), long.epochs_at(5)) == (10**6, 10**6, 999_999, 5)
    assert huge.total == 10**14 and huge.epochs_at(10**14) == 10**14 and huge.epochs_at(400) == 400
    assert huge.epochs_at(401) is None and huge.epochs_at(0) is None


def test_batch_order_is_one_permutation_per_epoch():
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    order = BatchOrder(g1, size=10, batch_size=4)  # 3 steps per epoch: 4, 4, 2 examples
    rows = torch.cat([order.take(0, 2), order.take(2, 7), order.take(7, 9)])
    assert rows.shape == (9, 4)
    for e in range(3):
        epoch = rows[3 * e : 3 * e + 3].reshape(-1)
        assert (epoch[-2:] == -1).all() and sorted(epoch[:10].tolist()) == list(range(10))
        assert epoch[:10].tolist() == torch.randperm(10, generator=g2).tolist()  # the generator's own order
