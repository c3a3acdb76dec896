"""The streamed Z builder: against brute force, the shared context, and each model family's own attention."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from mhaaudit.capacity import Heads, ZBuilder, random_attention_weights

transformers = pytest.importorskip("transformers")


# --------------------------------------------------------------------------------------------
# Z against brute force
# --------------------------------------------------------------------------------------------


def _brute_z(E, x, Wq, Wk, bq, bk, pre, scale):
    """Row by row, head by head, with explicit softmax: z_h = E_t^T softmax(scale * K q)."""
    T = x.shape[0]
    Hh = Wq.shape[0]
    rows = []
    for t in range(T):
        parts = []
        for h in range(Hh):
            q = pre(x[t]) @ Wq[h] + (bq[h] if bq is not None else 0)
            K = pre(E[t]) @ Wk[h] + (bk[h] if bk is not None else 0)
            a = scale * (K @ q)
            p = torch.exp(a - a.max())
            p = p / p.sum()
            parts.append(E[t].T @ p)
        rows.append(torch.cat(parts))
    return torch.stack(rows)


@pytest.mark.parametrize("scale", [None, 0.07])
def test_zbuilder_matches_brute_force(scale):
    g = torch.Generator().manual_seed(0)
    T, n, d, Hh, dh = 7, 5, 6, 3, 2
    E = torch.randn(T, n, d, generator=g, dtype=torch.float64)
    Wq = torch.randn(Hh, d, dh, generator=g, dtype=torch.float64)
    Wk = torch.randn(Hh, d, dh, generator=g, dtype=torch.float64)
    bq = torch.randn(Hh, dh, generator=g, dtype=torch.float64)
    bk = torch.randn(Hh, dh, generator=g, dtype=torch.float64)
    ln = torch.nn.LayerNorm(d)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.3, 0.3)
    zb = ZBuilder(Heads(Wq, Wk, bq, bk, ln, scale), query_index=0)
    for part in E.float().split(3):  # streamed in batches of float32 tokens, like the model's output
        zb.update(part)
    Z = zb.result()
    ln64 = copy.deepcopy(ln).double()
    with torch.no_grad():
        want = _brute_z(
            E.float().double(),
            E.float().double()[:, 0],
            Wq,
            Wk,
            bq,
            bk,
            ln64,
            scale if scale is not None else 1 / math.sqrt(dh),
        )
    assert Z.shape == (T, Hh * d) and Z.dtype == torch.float64
    torch.testing.assert_close(Z, want, rtol=1e-10, atol=1e-12)
    assert ln.weight.dtype == torch.float32  # the model's module is not converted


def test_shared_context_uses_example_zero():
    g = torch.Generator().manual_seed(1)
    T, n, d = 6, 4, 5
    E = torch.randn(T, n, d, generator=g, dtype=torch.float64)
    Wq, Wk = random_attention_weights(d, 2, 3, seed=2)
    zb = ZBuilder(Heads(Wq, Wk), query_index=1, shared_context=True)
    zb.update(E[:2])
    zb.update(E[2:])  # later batches still use the context of the very first example
    shared = E[0:1].expand(T, n, d)
    want = _brute_z(shared, E[:, 1], Wq, Wk, None, None, lambda v: v, 1 / math.sqrt(3))
    torch.testing.assert_close(zb.result(), want, rtol=1e-10, atol=1e-12)


def _hf_probs(model, inputs):
    with torch.no_grad():
        out = model(**inputs, output_attentions=True)
    return out.attentions[0].double()  # (B, H, n, n) of block 1


def test_z_uses_the_models_own_attention_vit(vit4):
    """Row t of Z equals E_t^T (block 1's attention of the [CLS] query), head by head."""
    from mhaaudit.capacity import attention_for
    from mhaaudit.models import load_model

    pm = load_model(str(vit4), weights="trained", max_layer=1, device="cpu")
    g = torch.Generator().manual_seed(0)
    px = torch.randn(5, 3, 32, 32, generator=g)
    tokens = pm.capture({"pixel_values": px}, [0])[0]
    a = attention_for(pm, 1, "model", 0)
    causal = a.causal
    assert not causal
    zb = ZBuilder(a.heads, query_index=pm.info.query_index)
    zb.update(tokens)
    model = transformers.ViTModel.from_pretrained(str(vit4), attn_implementation="eager").eval()
    P = _hf_probs(model, {"pixel_values": px})[:, :, 0, :]  # (B, H, n): the [CLS] query's row
    want = torch.einsum("bhn,bnd->bhd", P, tokens.double()).reshape(5, -1)
    torch.testing.assert_close(zb.result(), want, rtol=1e-5, atol=1e-6)


def test_z_decoder_last_query_sees_every_token(tmp_path):
    """GPT-2: the causal mask leaves the last token's attention row over all n tokens."""
    from mhaaudit.capacity import attention_for
    from mhaaudit.models import load_model

    cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=64)
    torch.manual_seed(0)
    transformers.GPT2Model(cfg).eval().save_pretrained(str(tmp_path))
    pm = load_model(str(tmp_path), weights="trained", max_layer=1, device="cpu", context_length=12)
    ids = torch.randint(0, 100, (4, 12), generator=torch.Generator().manual_seed(1))
    tokens = pm.capture({"input_ids": ids}, [0])[0]
    a = attention_for(pm, 1, "model", 0)
    causal = a.causal
    assert causal and pm.info.query_index == 11
    zb = ZBuilder(a.heads, query_index=pm.info.query_index, causal=causal)
    zb.update(tokens)
    model = transformers.GPT2Model.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    P = _hf_probs(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    assert torch.all(P[:, :, 11, :] > 0)  # the last query attends to all tokens
    want = torch.einsum("bhn,bnd->bhd", P[:, :, 11, :], tokens.double()).reshape(4, -1)
    torch.testing.assert_close(zb.result(), want, rtol=1e-5, atol=1e-6)
    # An earlier query position: the context is cut after the query row, as the mask does.
    zb2 = ZBuilder(a.heads, query_index=5, causal=True)
    zb2.update(tokens)
    want2 = torch.einsum("bhn,bnd->bhd", P[:, :, 5, :6], tokens[:, :6].double()).reshape(4, -1)
    torch.testing.assert_close(zb2.result(), want2, rtol=1e-5, atol=1e-6)


def test_z_uses_the_models_own_attention_bert(tmp_path):
    """BERT (post-LN): the keys/queries read the block input directly; Z matches its attention."""
    from mhaaudit.capacity import attention_for
    from mhaaudit.models import load_model

    cfg = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=100,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    transformers.BertModel(cfg).eval().save_pretrained(str(tmp_path))
    pm = load_model(str(tmp_path), weights="trained", max_layer=1, device="cpu", context_length=10)
    ids = torch.randint(0, 100, (3, 10), generator=torch.Generator().manual_seed(2))
    tokens = pm.capture({"input_ids": ids}, [0])[0]
    a = attention_for(pm, 1, "model", 0)
    zb = ZBuilder(a.heads, query_index=0, causal=a.causal)
    zb.update(tokens)
    model = transformers.BertModel.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    P = _hf_probs(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})[:, :, 0, :]
    want = torch.einsum("bhn,bnd->bhd", P, tokens.double()).reshape(3, -1)
    torch.testing.assert_close(zb.result(), want, rtol=1e-5, atol=1e-6)


def test_z_matches_attention_weights_probs_timm(timm_dir):
    """timm ViT (fused qkv): Z equals E^T of the probabilities AttentionWeights computes."""
    from mhaaudit.capacity import attention_for
    from mhaaudit.models import first_attention, load_model

    pm = load_model(str(timm_dir), weights="trained", max_layer=1, device="cpu")
    assert pm.info.backend == "timm"
    px = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    tokens = pm.capture({"pixel_values": px}, [0])[0]
    a = attention_for(pm, 1, "model", 0)
    zb = ZBuilder(a.heads, query_index=0, causal=a.causal)
    zb.update(tokens)
    P = first_attention(pm, 1).probs(tokens).double()[:, :, 0, :]
    want = torch.einsum("bhn,bnd->bhd", P, tokens.double()).reshape(4, -1)
    torch.testing.assert_close(zb.result(), want, rtol=1e-5, atol=1e-6)
