"""Tests for mhaaudit.memorize.saturation: saturated heads per example (Appendix H)."""

from __future__ import annotations

import pytest
import torch

from mhaaudit.errors import InputError
from mhaaudit.memorize.saturation import saturation_summary


def test_saturation_counts_on_hand_built_attention():
    # T = 4 examples, H = 3 heads, n = 3 context rows.
    sat = [1.0, 0.0, 0.0]
    near = [0.995, 0.004, 0.001]
    edge = [0.99, 0.005, 0.005]  # exactly 0.99 is not saturated (strictly greater is)
    flat = [1 / 3, 1 / 3, 1 / 3]
    attn = torch.tensor(
        [
            [sat, near, sat],  # 3 saturated
            [sat, flat, near],  # 2 saturated
            [edge, flat, sat],  # 1 saturated
            [flat, edge, flat],  # 0 saturated
        ]
    )
    s = saturation_summary(attn)
    assert s.heads == 3 and s.examples == 4
    assert s.histogram == (1, 1, 1, 1)
    assert s.frac_at_least_two_saturated == pytest.approx(0.5)
    assert s.frac_some_unsaturated == pytest.approx(0.75)
    assert s.frac_any_saturated == pytest.approx(0.75)
    assert s.mean_saturated == pytest.approx(1.5)
    with pytest.raises(InputError):
        saturation_summary(torch.rand(3, 3))
