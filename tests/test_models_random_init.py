"""Tests for mhaaudit.models.random_init: the seed rule of random weights, the caller's RNG left alone."""

from __future__ import annotations

import torch

from mhaaudit.models.random_init import init_seed, seeded
from mhaaudit.settings import derive_seed


def test_init_seeds_follow_the_seed_rule():
    assert init_seed(7) == derive_seed(7, "model-init")
    assert [init_seed(7, k) for k in (1, 2)] == [derive_seed(7, "model-init", 1), derive_seed(7, "model-init", 2)]
    seeds = {init_seed(7), init_seed(7, 1), init_seed(7, 2), init_seed(8), init_seed(8, 1)}
    assert len(seeds) == 5
    assert init_seed(7, 1) != derive_seed(7, "random-attention")


def test_seeded_leaves_the_callers_rng_alone():
    state = torch.random.get_rng_state()
    with seeded(init_seed(3)):
        a = torch.rand(4)
    assert torch.equal(torch.random.get_rng_state(), state)
    with seeded(init_seed(3)):
        b = torch.rand(4)
    assert torch.equal(a, b)
