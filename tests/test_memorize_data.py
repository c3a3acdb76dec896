"""Tests for mhaaudit.memorize.data: the random data and the sinusoidal positions."""

from __future__ import annotations

import torch

from mhaaudit.memorize.data import make_dataset, sinusoidal_positions


def test_sinusoidal_positions():
    pe = sinusoidal_positions(6, 64)
    assert pe.shape == (6, 64) and torch.linalg.matrix_rank(pe) == 6
    torch.testing.assert_close(pe[0, 0::2], torch.zeros(32))


def test_dataset_shapes_and_ranges():
    g = torch.Generator().manual_seed(0)
    q, ctx, y = make_dataset(size=10, n=3, task="classification", context="shared", classes=5, generator=g)
    assert q.shape == (10, 64) and ctx.shape == (3, 64) and y.shape == (10,)
    assert 0 <= float(q.min()) and float(q.max()) <= 1 and set(y.tolist()) <= set(range(5))
    q, ctx, y = make_dataset(size=10, n=3, task="regression", context="per-example", classes=5, generator=g)
    assert ctx.shape == (10, 3, 64) and y.dtype == torch.float32 and 0 <= float(y.min()) and float(y.max()) <= 1
