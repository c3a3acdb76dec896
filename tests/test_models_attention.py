"""Tests for mhaaudit.models.attention: each block layout's adapter against the library's own attention."""

from __future__ import annotations

import pytest
import torch
from modeltools import TOL, eager_attentions, ids, images, tiny_bert, tiny_gpt2  # noqa: F401
from torch import nn

from mhaaudit.errors import InputError, ModelError
from mhaaudit.models import AttentionWeights, attention, first_attention, load_model

transformers = pytest.importorskip("transformers")


def test_first_attention_vit(vit_dir):
    pm = load_model(str(vit_dir), weights="trained", device="cpu")
    aw = first_attention(pm, 1)
    assert isinstance(aw, AttentionWeights)
    assert aw.W_q.shape == (2, 32, 16) and aw.W_k.shape == (2, 32, 16) and aw.b_q.shape == (2, 16)
    assert not aw.causal
    assert (aw.num_heads, aw.head_dim) == (2, 16)
    x = pm.preprocess(images(2))
    hs, att = eager_attentions(transformers.ViTModel, vit_dir, **x)
    torch.testing.assert_close(aw.probs(hs[0]), att[0], atol=TOL, rtol=0)
    # head 1 by hand from the raw weights
    h = aw.pre(hs[0])
    q, k = h @ aw.W_q[1] + aw.b_q[1], h @ aw.W_k[1] + aw.b_k[1]
    torch.testing.assert_close(torch.softmax(q @ k.transpose(1, 2) / 4.0, -1), att[0][:, 1], atol=TOL, rtol=0)
    torch.testing.assert_close(first_attention(pm, 2).probs(hs[1]), att[1], atol=TOL, rtol=0)


def test_first_attention_bert(tiny_bert):
    pm = load_model(str(tiny_bert), weights="trained", device="cpu", context_length=9)
    aw = first_attention(pm)
    x = pm.preprocess(ids(pm))
    hs, att = eager_attentions(transformers.BertModel, tiny_bert, **x)
    assert torch.equal(aw.pre(hs[0]), hs[0])  # post-LN: the attention sees the block input
    torch.testing.assert_close(aw.probs(hs[0]), att[0], atol=TOL, rtol=0)


def test_first_attention_gpt2(tiny_gpt2):
    pm = load_model(str(tiny_gpt2), weights="trained", device="cpu", context_length=7)
    aw = first_attention(pm, 1)
    assert aw.causal
    x = pm.preprocess(ids(pm))
    hs, att = eager_attentions(transformers.GPT2Model, tiny_gpt2, **x)
    torch.testing.assert_close(aw.probs(hs[0]), att[0], atol=TOL, rtol=0)
    with pytest.raises(InputError):
        first_attention(pm, 3)
    with pytest.raises(InputError, match="must be an integer"):
        first_attention(pm, "one")


def test_first_attention_timm(timm_dir):
    pm = load_model(str(timm_dir), backend="timm", weights="trained", device="cpu")
    aw = first_attention(pm, 1)
    x = pm.capture(pm.preprocess(images(2)), [0])[0]
    blk = pm.module.blocks[0]
    attn = blk.attn
    with torch.no_grad():
        qkv = attn.qkv(blk.norm1(x)).reshape(2, 17, 3, 2, 16).permute(2, 0, 3, 1, 4)
        ref = torch.softmax(qkv[0] @ qkv[1].transpose(-1, -2) * attn.scale, -1)
    torch.testing.assert_close(aw.probs(x), ref, atol=TOL, rtol=0)


@pytest.mark.parametrize(
    "model_type, extra",
    [("deit", {"intermediate_size": 64}), ("dinov2", {}), ("dinov2_with_registers", {"num_register_tokens": 4})],
)
def test_first_attention_other_vit_families(tmp_path, model_type, extra):
    if model_type == "dinov2_with_registers" and not hasattr(transformers, "Dinov2WithRegistersModel"):
        pytest.skip(f"transformers {transformers.__version__} has no Dinov2WithRegistersModel: the family is newer")
    cfg = transformers.AutoConfig.for_model(
        model_type, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8, **extra
    )
    torch.manual_seed(0)
    transformers.AutoModel.from_config(cfg).save_pretrained(str(tmp_path))
    pm = load_model(str(tmp_path), weights="trained", device="cpu")
    x = pm.preprocess(images(2))
    hs, att = eager_attentions(transformers.AutoModel, tmp_path, **x)
    torch.testing.assert_close(first_attention(pm, 1).probs(hs[0]), att[0], atol=TOL, rtol=0)


def test_adapters_are_keyed_by_block_layout(vit_dir, timm_dir, tiny_bert, tiny_gpt2):
    names = {a.name for a in attention.ADAPTERS}
    assert {"timm-vit", "gpt2", "hf-vit", "bert"} <= names
    cases = [
        (load_model(str(vit_dir), weights="trained", device="cpu"), "hf-vit"),
        (load_model(str(timm_dir), weights="trained", device="cpu"), "timm-vit"),
        (load_model(str(tiny_bert), weights="trained", device="cpu", context_length=4), "bert"),
        (load_model(str(tiny_gpt2), weights="trained", device="cpu", context_length=4), "gpt2"),
    ]
    for pm, expected in cases:
        assert attention.adapter_for(pm.blocks[0]).name == expected
    assert attention.adapter_for(nn.Linear(2, 2)) is None


class _TwoLinears(nn.Module):
    """A made-up block layout: separate ``wq`` / ``wk`` Linears, no normalisation."""

    def __init__(self, d=8):
        super().__init__()
        self.wq, self.wk = nn.Linear(d, d), nn.Linear(d, d, bias=False)


def test_unknown_layout_and_a_new_adapter(vit_dir, monkeypatch):
    pm = load_model(str(vit_dir), weights="trained", device="cpu")
    monkeypatch.setattr(pm, "_blocks", nn.ModuleList([_TwoLinears(32)]))
    with pytest.raises(ModelError, match="does not know the attention layout of _TwoLinears"):
        first_attention(pm, 1)
    monkeypatch.setattr(attention.registry, "ADAPTERS", list(attention.ADAPTERS))

    @attention.register_adapter("two-linears", lambda b: isinstance(b, _TwoLinears))
    def read(block, ctx):
        return AttentionWeights.from_linears(
            block.wq, block.wk, ctx.num_heads, pre=nn.Identity(), scale=ctx.head_dim**-0.5, causal=ctx.causal
        )

    aw = first_attention(pm, 1)
    assert aw.W_q.shape == (2, 32, 16) and aw.b_k is None and aw.b_q.shape == (2, 16)
    x = torch.randn(1, 5, 32)
    blk = pm.blocks[0]
    q = blk.wq(x).reshape(1, 5, 2, 16).transpose(1, 2)
    k = blk.wk(x).reshape(1, 5, 2, 16).transpose(1, 2)
    torch.testing.assert_close(aw.probs(x), torch.softmax(q @ k.transpose(-1, -2) / 4.0, -1), atol=TOL, rtol=0)
