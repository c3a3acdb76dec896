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
    assert plan.checks == _reference_checks(size, batch, epochs, max_steps, check_every)
    assert plan.total == planned_schedule(size, batch, epochs, max_steps)[2] and max(plan.checks) == plan.total


def test_batch_order_is_one_permutation_per_epoch():
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    order = BatchOrder(g1, size=10, batch_size=4)  # 3 steps per epoch: 4, 4, 2 examples
    rows = torch.cat([order.take(0, 2), order.take(2, 7), order.take(7, 9)])
    assert rows.shape == (9, 4)
    for e in range(3):
        epoch = rows[3 * e : 3 * e + 3].reshape(-1)
        assert (epoch[-2:] == -1).all() and sorted(epoch[:10].tolist()) == list(range(10))
        assert epoch[:10].tolist() == torch.randperm(10, generator=g2).tolist()  # the generator's own order
