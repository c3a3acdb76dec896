"""Tests for mhaaudit.memorize.model: the one-layer attention model of the experiments."""

from __future__ import annotations

import torch

from mhaaudit.memorize.model import MemorizeModel


def test_model_attends_over_context_only():
    g = torch.Generator().manual_seed(0)
    m = MemorizeModel(d=64, n=5, heads=3, head_dim=7, out_dim=10, generator=g)
    x = torch.rand(6, 64)
    shared = torch.rand(5, 64)
    out, p = m(x, shared, return_attention=True)
    assert out.shape == (6, 10) and p.shape == (6, 3, 5)
    torch.testing.assert_close(p.sum(-1), torch.ones(6, 3))
    # The per-example path agrees with the shared path on the same contexts.
    out2, p2 = m(x, shared.expand(6, 5, 64), return_attention=True)
    torch.testing.assert_close(out, out2)
    torch.testing.assert_close(p, p2)
    # d_v = 1 per head: W_V is (H, d), W_O maps H -> d; no biases anywhere.
    assert m.wv.shape == (3, 64) and m.wo.shape == (64, 3)
    assert all("bias" not in name for name, _ in m.named_parameters())
