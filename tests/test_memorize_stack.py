"""Tests for mhaaudit.memorize.stack: padded models stacked into one, exactly as each alone."""

from __future__ import annotations

import pytest
import torch

from mhaaudit.memorize.model import MemorizeModel
from mhaaudit.memorize.stack import StackedModel, StackShape
from mhaaudit.memorize.training import Point

SPECS = [Point(1, 4, 8, 10), Point(3, 6, 5, 10), Point(2, 5, 8, 10)]  # H, n, d_h differ


def _models(out_dim=7):
    return [
        MemorizeModel(
            d=64, n=p.n, heads=p.heads, head_dim=p.head_dim, out_dim=out_dim, generator=torch.Generator().manual_seed(i)
        )
        for i, p in enumerate(SPECS)
    ]


@pytest.mark.parametrize("per_example", [False, True])
def test_stack_computes_each_model_and_its_gradients(per_example):
    models = _models()
    shape = StackShape.of(SPECS, 7)
    assert (shape.heads, shape.head_dim, shape.n) == (3, 8, 6)
    stack = StackedModel(models, shape, torch.device("cpu"))
    B = 5
    x = torch.rand(3, B, 64)
    ctxs = [torch.rand(B, p.n, 64) if per_example else torch.rand(p.n, 64) for p in SPECS]
    ctx = torch.zeros(3, B, 6, 64) if per_example else torch.zeros(3, 6, 64)
    for i, c in enumerate(ctxs):
        ctx[i, ..., : c.shape[-2], :] = c
    theta = torch.stack(stack.rows)
    out, p = stack.forward(theta, stack.frame, x, ctx)
    out.square().sum().backward()
    for i, (m, spec) in enumerate(zip(models, SPECS, strict=False)):
        ref, ref_p = m(x[i], ctxs[i], return_attention=True)
        ref.square().sum().backward()
        h, n, e = spec.heads, spec.n, spec.head_dim
        torch.testing.assert_close(out[i], ref)
        torch.testing.assert_close(p[i, :, :h, :n], ref_p)
        assert (p[i, :, :, n:] == 0).all()  # padded context rows get no weight
        g = stack.params(stack.rows[i].grad[None])
        for name, padded in (
            ("embed", g["embed"][0]),
            ("wq", g["wq"][0, :h, :, :e]),
            ("wk", g["wk"][0, :h, :, :e]),
            ("wv", g["wv"][0, :h]),
            ("wo", g["wo"][0, :, :h]),
            ("readout", g["readout"][0]),
        ):
            torch.testing.assert_close(padded, getattr(m, name).grad, rtol=1e-4, atol=1e-5)
        # Padding receives exactly zero gradient, so it stays zero under Adam.
        assert (g["wq"][0, h:] == 0).all() and (g["wq"][0, :, :, e:] == 0).all() and (g["wk"][0, :, :, e:] == 0).all()
        assert (g["wv"][0, h:] == 0).all() and (g["wo"][0, :, h:] == 0).all()


def test_unpad_gives_back_each_model():
    models = _models()
    stack = StackedModel(models, StackShape.of(SPECS, 7), torch.device("cpu"))
    for i, (m, p) in enumerate(zip(models, SPECS, strict=False)):
        fresh = MemorizeModel(d=64, n=p.n, heads=p.heads, head_dim=p.head_dim, out_dim=7)
        back = stack.unpad(i, fresh)
        for name in ("embed", "wq", "wk", "wv", "wo", "readout"):
            assert torch.equal(getattr(back, name), getattr(m, name))
    assert stack.rows[0].numel() == StackShape.of(SPECS, 7).numel
