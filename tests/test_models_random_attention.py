"""Tests for mhaaudit.models.random_attention: the paper's frozen random attention layer."""

from __future__ import annotations

import math

import pytest
import torch

from mhaaudit.errors import InputError
from mhaaudit.models import RandomAttention
from mhaaudit.settings import derive_seed


def test_random_attention_formula():
    ra = RandomAttention(6, seed=5)
    x = torch.randn(2, 4, 6, generator=torch.Generator().manual_seed(0))
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    h = (x - mu) / torch.sqrt(var + 1e-5)
    out = torch.empty_like(x)
    probs = torch.empty(2, 4, 4)
    for b in range(2):
        q, k, v = h[b] @ ra.W_Q, h[b] @ ra.W_K, h[b] @ ra.W_V
        logits = q @ k.T / math.sqrt(6)
        a = torch.exp(logits - logits.max(1, keepdim=True).values)
        a = a / a.sum(1, keepdim=True)
        probs[b] = a
        out[b] = x[b] + a @ v @ ra.W_O
    torch.testing.assert_close(ra(x), out, atol=1e-6, rtol=0)
    torch.testing.assert_close(ra.attention(x), probs, atol=1e-6, rtol=0)
    bound = math.sqrt(6 / 12)
    for w in (ra.W_Q, ra.W_K, ra.W_V, ra.W_O):
        assert w.shape == (6, 6) and float(w.abs().max()) <= bound
    assert not any(p.requires_grad for p in ra.parameters())
    assert list(ra.parameters()) == []


def test_random_attention_deterministic_per_seed():
    a, b, c = RandomAttention(16, seed=1), RandomAttention(16, seed=1), RandomAttention(16, seed=2)
    x = torch.randn(1, 5, 16)
    assert torch.equal(a(x), b(x))
    assert not torch.allclose(a.W_Q, c.W_Q)
    assert not torch.allclose(a.W_Q, a.W_K)
    with pytest.raises(InputError):
        a(torch.randn(1, 5, 8))
    with pytest.raises(InputError, match="positive"):
        RandomAttention(0)


def test_random_attention_seed_rule():
    """The weights come from the "random-attention" stream of the user's seed, drawn W_Q, W_K, W_V, W_O."""
    ra = RandomAttention(5, seed=11)
    g = torch.Generator().manual_seed(derive_seed(11, "random-attention"))
    for w in (ra.W_Q, ra.W_K, ra.W_V, ra.W_O):
        torch.testing.assert_close(w, torch.nn.init.xavier_uniform_(torch.empty(5, 5), generator=g), atol=0, rtol=0)
    assert ra.seed == 11 and "seed=11" in repr(ra)
