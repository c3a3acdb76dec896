"""Tests for mhaaudit.models: loading, probing, random attention, key/query weights.

Every model here is a tiny random one built from a config and saved to a temporary folder,
so the real loading code runs and nothing reaches the network.
"""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
import torch

from mhaaudit import hub
from mhaaudit.errors import InputError, ModelError, OfflineError
from mhaaudit.models import (
    ALIASES,
    AttentionWeights,
    ModelInfo,
    ProbedModel,
    RandomAttention,
    first_attention,
    load_model,
)

transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")
from PIL import Image  # noqa: E402

TOL = 1e-5


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.is_offline.cache_clear()
    yield
    hub.is_offline.cache_clear()


def _vit_config(**kw):
    base = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8)
    base.update(kw)
    return transformers.ViTConfig(**base)


def _bert_config(**kw):
    base = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=100, max_position_embeddings=64)
    base.update(kw)
    return transformers.BertConfig(**base)


def _gpt2_config(**kw):
    base = dict(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64)
    base.update(kw)
    return transformers.GPT2Config(**base)


def _save_hf(cls, cfg, folder, seed=0):
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    model.save_pretrained(str(folder))
    return model


@pytest.fixture(scope="module")
def tiny_vit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vit")
    _save_hf(transformers.ViTModel, _vit_config(), folder)
    return folder


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    _save_hf(transformers.BertModel, _bert_config(), folder)
    return folder


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    _save_hf(transformers.GPT2Model, _gpt2_config(), folder)
    return folder


TIMM_ARGS = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2)


@pytest.fixture(scope="module")
def tiny_timm(tmp_path_factory):
    """A tiny timm ViT saved as a safetensors file, with a timm-style config.json beside it."""
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp("timm")
    torch.manual_seed(1)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, **TIMM_ARGS).eval()
    path = folder / "model.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    (folder / "config.json").write_text(json.dumps({"architecture": "vit_tiny_patch16_224", "model_args": TIMM_ARGS}))
    return folder


def _images(k=3, seed=0):
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, size=(40 + 3 * i, 48, 3), dtype=np.uint8)) for i in range(k)]


def _ids(pm, b=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 100, (b, pm.info.n), generator=g).tolist()


# ---------------------------------------------------------------------------------- aliases


def test_alias_table():
    assert ALIASES["vit-base"]["hf"] == "google/vit-base-patch16-224-in21k"
    assert ALIASES["vit-base"]["timm"] == "vit_base_patch16_224"
    assert ALIASES["bert-base"]["hf"] == "bert-base-uncased"
    assert ALIASES["bert-large"]["hf"] == "bert-large-uncased"
    assert ALIASES["gpt2"]["hf"] == "gpt2"
    assert ALIASES["gpt2-large"]["hf"] == "gpt2-large"


def test_alias_random_offline_truncated():
    pm = load_model("gpt2-large", max_layer=1, device="cpu", context_length=8)
    i = pm.info
    assert (i.d, i.num_layers, i.num_heads, i.head_dim) == (1280, 36, 20, 64)
    assert pm.built_layers == 1
    assert (i.n, i.query_index, i.family, i.modality, i.weights) == (8, 7, "gpt2", "text", "random")
    assert "built-in" in i.weights_source
    out = pm.capture(pm.preprocess([[1] * 8]), [0, 1])
    assert out[1].shape == (1, 8, 1280) and out[1].dtype == torch.float32
    with pytest.raises(InputError, match="max_layer"):
        pm.capture(pm.preprocess([[1] * 8]), [2])


def test_alias_bert_large_config():
    pm = load_model("bert-large", max_layer=1, device="cpu", context_length=4)
    assert (pm.info.d, pm.info.num_layers, pm.info.num_heads, pm.info.query_index) == (1024, 24, 16, 0)
    with pytest.raises(InputError, match="position"):
        load_model("bert-base", max_layer=1, device="cpu", context_length=513)
    assert load_model("bert-base", max_layer=1, device="cpu").info.n == 512


# ---------------------------------------------------------------------------------- capture vs reference


def test_vit_capture_matches_hidden_states(tiny_vit):
    pm = load_model(str(tiny_vit), weights="trained", weights_path=str(tiny_vit), device="cpu")
    i = pm.info
    assert (i.backend, i.family, i.modality, i.d, i.n, i.query_index) == ("hf", "vit", "image", 32, 17, 0)
    assert (i.num_layers, i.num_heads, i.head_dim, i.weights) == (2, 2, 16, "trained")
    assert str(tiny_vit) in i.weights_source
    inputs = pm.preprocess(_images())
    assert inputs["pixel_values"].shape == (3, 3, 32, 32)
    out = pm.capture(inputs, [0, 1])
    ref = transformers.ViTModel.from_pretrained(str(tiny_vit)).eval()
    with torch.no_grad():
        hs = ref(pixel_values=inputs["pixel_values"], output_hidden_states=True).hidden_states
    for k in (0, 1):
        assert out[k].shape == (3, 17, 32)
        torch.testing.assert_close(out[k], hs[k], atol=TOL, rtol=0)


def test_vit_uses_saved_image_processor(tmp_path):
    _save_hf(transformers.ViTModel, _vit_config(), tmp_path)
    proc = transformers.ViTImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.1, 0.2, 0.3], image_std=[0.4, 0.5, 0.6])
    proc.save_pretrained(str(tmp_path))
    pm = load_model(str(tmp_path), weights="trained", device="cpu")
    imgs = _images(2)
    torch.testing.assert_close(pm.preprocess(imgs)["pixel_values"], proc(images=imgs, return_tensors="pt")["pixel_values"])


def test_hf_single_weights_file(tiny_vit, tiny_timm, tmp_path):
    """A bare weights file (here with a task-head prefix) loads into the architecture the name gives."""
    from safetensors.torch import save_file

    ref = transformers.ViTModel.from_pretrained(str(tiny_vit)).eval()
    file = tmp_path / "weights.safetensors"
    save_file({f"vit.{k}": v.contiguous() for k, v in ref.state_dict().items()}, str(file))
    pm = load_model(str(tiny_vit), weights="trained", weights_path=str(file), device="cpu", max_layer=1)
    assert str(file) in pm.info.weights_source
    x = pm.preprocess(_images(2))
    with torch.no_grad():
        hs = ref(**x, output_hidden_states=True).hidden_states
    torch.testing.assert_close(pm.capture(x, [1])[1], hs[1], atol=TOL, rtol=0)
    # a timm checkpoint given with the vit-base alias goes to timm (and is too small for ViT-Base)
    with pytest.raises(ModelError, match="timm|does not fit"):
        load_model("vit-base", weights="trained", weights_path=str(tiny_timm / "model.safetensors"), device="cpu")


def test_bert_capture_matches_hidden_states(tiny_bert):
    pm = load_model("bert-base-uncased", weights="trained", weights_path=str(tiny_bert), device="cpu", context_length=12)
    assert (pm.info.family, pm.info.modality, pm.info.n, pm.info.query_index, pm.info.d) == ("bert", "text", 12, 0, 32)
    assert pm.tokenizer is None
    inputs = pm.preprocess(_ids(pm))
    assert torch.equal(inputs["attention_mask"], torch.ones(2, 12, dtype=torch.long))
    out = pm.capture(inputs, [0, 1])
    ref = transformers.BertModel.from_pretrained(str(tiny_bert)).eval()
    with torch.no_grad():
        hs = ref(**inputs, output_hidden_states=True).hidden_states
    for k in (0, 1):
        torch.testing.assert_close(out[k], hs[k], atol=TOL, rtol=0)
    with pytest.raises(InputError, match="exactly n = 12"):
        pm.preprocess([[1] * 11])
    with pytest.raises(InputError, match="token ids"):
        pm.preprocess([[1000] * 12])


def test_tokenizer_from_folder(tmp_path):
    _save_hf(transformers.BertModel, _bert_config(), tmp_path)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(95)]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
    pm = load_model(str(tmp_path), weights="trained", device="cpu", context_length=4)
    assert pm.tokenizer is not None and len(pm.tokenizer) == 100
    assert pm.tokenizer.convert_tokens_to_ids("w7") == 12


def test_gpt2_capture_matches_hidden_states(tiny_gpt2):
    pm = load_model(str(tiny_gpt2), weights="trained", device="cpu")
    assert (pm.info.family, pm.info.n, pm.info.query_index) == ("gpt2", 64, 63)
    pm = load_model(str(tiny_gpt2), weights="trained", device="cpu", context_length=10)
    assert (pm.info.n, pm.info.query_index) == (10, 9)
    inputs = pm.preprocess(_ids(pm, b=3))
    out = pm.capture(inputs, [1, 0])
    ref = transformers.GPT2Model.from_pretrained(str(tiny_gpt2)).eval()
    with torch.no_grad():
        hs = ref(**inputs, output_hidden_states=True).hidden_states
    for k in (0, 1):
        torch.testing.assert_close(out[k], hs[k], atol=TOL, rtol=0)
    # causal: changing the last token leaves earlier positions of block 1's output unchanged
    ids2 = [list(s) for s in _ids(pm, b=3)]
    for s in ids2:
        s[-1] = (s[-1] + 1) % 100
    out2 = pm.capture(pm.preprocess(ids2), [1])
    torch.testing.assert_close(out2[1][:, :-1], out[1][:, :-1], atol=TOL, rtol=0)
    with pytest.raises(InputError, match="position"):
        load_model(str(tiny_gpt2), device="cpu", context_length=65)


def _timm_reference(folder, px):
    from safetensors.torch import load_file

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, **TIMM_ARGS).eval()
    model.load_state_dict(load_file(str(folder / "model.safetensors")))
    with torch.no_grad():
        x = model.norm_pre(model.patch_drop(model._pos_embed(model.patch_embed(px))))
        x1 = model.blocks[0](x)
        x2 = model.blocks[1](x1)
    return x, x1, x2


def test_timm_capture_matches_manual_blocks(tiny_timm):
    file = tiny_timm / "model.safetensors"
    pm = load_model(str(file), backend="timm", weights="trained", device="cpu")
    i = pm.info
    assert (i.backend, i.modality, i.d, i.n, i.query_index, i.num_layers, i.num_heads) == ("timm", "image", 32, 17, 0, 2, 2)
    assert str(file) in i.weights_source
    inputs = pm.preprocess(_images())
    assert inputs["pixel_values"].shape == (3, 3, 32, 32)
    out = pm.capture(inputs, [0, 1, 2])
    ref = _timm_reference(tiny_timm, inputs["pixel_values"])
    for k in (0, 1, 2):
        torch.testing.assert_close(out[k], ref[k], atol=TOL, rtol=0)
    # the same file through the folder and through weights_path, truncated to one block
    pm2 = load_model(str(tiny_timm), weights="trained", weights_path=str(file), device="cpu", max_layer=1)
    assert pm2.built_layers == 1 and pm2.info.num_layers == 2
    torch.testing.assert_close(pm2.capture(inputs, [1])[1], ref[1], atol=TOL, rtol=0)


# ---------------------------------------------------------------------------------- early stop and hooks


def _counter(module):
    calls = []
    handle = module.register_forward_hook(lambda *a: calls.append(1))
    return calls, handle


def test_capture_stops_early_hf(tiny_vit, tiny_gpt2):
    pm = load_model(str(tiny_vit), weights="trained", device="cpu")
    assert pm.built_layers == 2
    calls, h = _counter(pm.module.layers[1])
    pm.capture(pm.preprocess(_images(1)), [0, 1])
    assert calls == []
    pm.capture(pm.preprocess(_images(1)), [2])
    assert calls == [1]
    h.remove()
    gm = load_model(str(tiny_gpt2), weights="trained", device="cpu", context_length=5)
    calls, h = _counter(gm.module.h[1])
    final, h2 = _counter(gm.module.ln_f)
    gm.capture(gm.preprocess([[1] * 5]), [0, 1])
    assert calls == [] and final == []
    h.remove(), h2.remove()


def test_capture_stops_early_timm(tiny_timm):
    pm = load_model(str(tiny_timm), backend="timm", weights="trained", device="cpu")
    calls, h = _counter(pm.module.blocks[1])
    pm.capture(pm.preprocess(_images(1)), [0, 1])
    assert calls == []
    h.remove()


def _hook_count(module):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in module.modules())


def test_hooks_removed_after_error(tiny_bert):
    pm = load_model(str(tiny_bert), weights="trained", device="cpu", context_length=6)
    before = _hook_count(pm.module)
    pm.capture(pm.preprocess([[1] * 6]), [0, 2])
    assert _hook_count(pm.module) == before

    def boom(*_):
        raise RuntimeError("boom")

    h = pm.module.encoder.layer[0].attention.register_forward_hook(boom)
    with pytest.raises(RuntimeError, match="boom"):
        pm.capture(pm.preprocess([[1] * 6]), [0, 1])
    h.remove()
    assert _hook_count(pm.module) == before
    out = pm.capture(pm.preprocess([[1] * 6]), [1])  # still works afterwards
    assert out[1].shape == (1, 6, 32)


def test_layer_validation(tiny_vit):
    pm = load_model(str(tiny_vit), weights="trained", device="cpu")
    x = pm.preprocess(_images(1))
    with pytest.raises(InputError):
        pm.capture(x, [3])
    with pytest.raises(InputError):
        pm.capture(x, [-1])
    with pytest.raises(InputError):
        pm.capture(x, [])
    with pytest.raises(InputError, match="PIL"):
        pm.preprocess([np.zeros((4, 4, 3))])


# ---------------------------------------------------------------------------------- random init


def test_random_init_is_seeded(tiny_vit):
    state = torch.random.get_rng_state()
    a = load_model(str(tiny_vit), weights="random", seed=3, device="cpu")
    b = load_model(str(tiny_vit), weights="random", seed=3, device="cpu")
    c = load_model(str(tiny_vit), weights="random", seed=4, device="cpu")
    assert torch.equal(torch.random.get_rng_state(), state)  # caller's RNG untouched
    assert a.info.weights == "random" and "random init" in a.info.weights_source
    x = a.preprocess(_images(2))
    xa, xb, xc = a.capture(x, [1])[1], b.capture(x, [1])[1], c.capture(x, [1])[1]
    assert torch.equal(xa, xb)
    assert not torch.allclose(xa, xc)
    t = load_model(str(tiny_vit), weights="trained", device="cpu")
    assert not torch.allclose(t.capture(x, [1])[1], xa)


def test_random_init_does_not_depend_on_max_layer(tiny_gpt2):
    full = load_model(str(tiny_gpt2), seed=7, device="cpu", context_length=6)
    one = load_model(str(tiny_gpt2), seed=7, device="cpu", context_length=6, max_layer=1)
    assert one.built_layers == 1 and full.built_layers == 2
    x = full.preprocess([[3, 1, 4, 1, 5, 9]])
    torch.testing.assert_close(one.capture(x, [0, 1])[1], full.capture(x, [0, 1])[1], atol=0, rtol=0)
    # GPT-2 scales its residual projections by the full depth, also when fewer blocks are built
    std = one.module.h[0].attn.c_proj.weight.std().item()
    assert abs(std - 0.02 / math.sqrt(2 * 2)) < 0.004


def test_timm_random_init_does_not_depend_on_max_layer(tiny_timm):
    full = load_model(str(tiny_timm), backend="timm", seed=2, device="cpu")
    one = load_model(str(tiny_timm), backend="timm", seed=2, device="cpu", max_layer=1)
    other = load_model(str(tiny_timm), backend="timm", seed=3, device="cpu", max_layer=1)
    x = full.preprocess(_images(2))
    a, b = full.capture(x, [0, 1]), one.capture(x, [0, 1])
    for k in (0, 1):
        torch.testing.assert_close(a[k], b[k], atol=0, rtol=0)
    assert not torch.allclose(other.capture(x, [1])[1], b[1])
    assert abs(one.module.blocks[0].attn.qkv.weight.std().item() - 0.02) < 0.004


def test_timm_random_by_name_and_prefix():
    pm = load_model("timm:vit_tiny_patch16_224", max_layer=1, device="cpu")
    assert (pm.info.backend, pm.info.n, pm.info.d, pm.info.num_layers, pm.built_layers) == ("timm", 197, 192, 12, 1)
    pm2 = load_model("vit_tiny_patch16_224", max_layer=1, device="cpu")
    x = pm.preprocess(_images(1))
    assert x["pixel_values"].shape == (1, 3, 224, 224)
    torch.testing.assert_close(pm.capture(x, [1])[1], pm2.capture(x, [1])[1])


# ---------------------------------------------------------------------------------- errors


def test_unknown_model_suggests_aliases():
    with pytest.raises(ModelError, match="vit-base"):
        load_model("definitely-not-a-model", device="cpu")
    with pytest.raises(InputError):
        load_model("vit-base", weights="pretrained", device="cpu")
    with pytest.raises(InputError, match="does not exist"):
        load_model("vit-base", weights="trained", weights_path="/nonexistent/dir", device="cpu")


@pytest.mark.parametrize("name", ["resnet18", "convnext_atto", "timm:swin_tiny_patch4_window7_224"])
def test_non_token_models_rejected(name):
    with pytest.raises(ModelError, match="cannot be probed"):
        load_model(name, device="cpu")


def test_hf_hierarchical_model_rejected(tmp_path):
    cfg = transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 1], window_size=2)
    cfg.save_pretrained(str(tmp_path))
    with pytest.raises(ModelError, match="cannot be probed"):
        load_model(str(tmp_path), device="cpu")


def test_timm_without_class_token_rejected(tmp_path):
    args = dict(TIMM_ARGS, class_token=False, global_pool="avg")
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "vit_tiny_patch16_224", "model_args": args}))
    with pytest.raises(ModelError, match="no class token"):
        load_model(str(tmp_path), backend="timm", device="cpu")


def test_weights_that_do_not_fit(tiny_vit, tiny_bert, tiny_timm, tmp_path):
    with pytest.raises(ModelError, match="do not fit"):
        load_model("vit-base", weights="trained", weights_path=str(tiny_vit), device="cpu")
    with pytest.raises(ModelError, match="do not fit"):
        load_model("vit-base", weights="trained", weights_path=str(tiny_bert), device="cpu")
    # a folder whose config disagrees with its own weights
    bad = tmp_path / "bad"
    _save_hf(transformers.ViTModel, _vit_config(), bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["intermediate_size"] = 48
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError):
        load_model(str(bad), weights="trained", device="cpu")
    # a timm file for a different size of the architecture
    with pytest.raises(ModelError, match="does not fit"):
        load_model("vit_tiny_patch16_224", weights="trained", weights_path=str(tiny_timm / "model.safetensors"), device="cpu")
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(ModelError):
        load_model("vit_tiny_patch16_224", weights="trained", weights_path=str(garbage), device="cpu")


def test_offline_trained_hub_id_raises_offline_error():
    t0 = time.perf_counter()
    with pytest.raises(OfflineError, match="--weights"):
        load_model("google/vit-base-patch16-224-in21k", weights="trained", device="cpu")
    with pytest.raises(OfflineError, match="--weights"):
        load_model("vit-base", weights="trained", device="cpu", max_layer=1)
    with pytest.raises(OfflineError, match="--weights"):
        load_model("vit-base", backend="timm", weights="trained", device="cpu")
    with pytest.raises(OfflineError):
        load_model("some-org/some-model", device="cpu")
    assert time.perf_counter() - t0 < 20  # no hub retry loop


# ---------------------------------------------------------------------------------- RandomAttention


def test_random_attention_formula():
    ra = RandomAttention(6, seed=5)
    x = torch.randn(2, 4, 6, generator=torch.Generator().manual_seed(0))
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    h = (x - mu) / torch.sqrt(var + 1e-5)
    out = torch.empty_like(x)
    for b in range(2):
        q, k, v = h[b] @ ra.W_Q, h[b] @ ra.W_K, h[b] @ ra.W_V
        logits = q @ k.T / math.sqrt(6)
        a = torch.exp(logits - logits.max(1, keepdim=True).values)
        a = a / a.sum(1, keepdim=True)
        out[b] = x[b] + a @ v @ ra.W_O
    torch.testing.assert_close(ra(x), out, atol=1e-6, rtol=0)
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


# ---------------------------------------------------------------------------------- first_attention


def _eager_attentions(cls, folder, **inputs):
    ref = cls.from_pretrained(str(folder), attn_implementation="eager").eval()
    with torch.no_grad():
        o = ref(**inputs, output_hidden_states=True, output_attentions=True)
    return o.hidden_states, o.attentions


def test_first_attention_vit(tiny_vit):
    pm = load_model(str(tiny_vit), weights="trained", device="cpu")
    aw = first_attention(pm, 1)
    assert isinstance(aw, AttentionWeights)
    assert aw.W_q.shape == (2, 32, 16) and aw.W_k.shape == (2, 32, 16) and aw.b_q.shape == (2, 16)
    assert not aw.causal
    x = pm.preprocess(_images(2))
    hs, att = _eager_attentions(transformers.ViTModel, tiny_vit, **x)
    torch.testing.assert_close(aw.probs(hs[0]), att[0], atol=TOL, rtol=0)
    # head 1 by hand from the raw weights
    h = aw.pre(hs[0])
    q, k = h @ aw.W_q[1] + aw.b_q[1], h @ aw.W_k[1] + aw.b_k[1]
    torch.testing.assert_close(torch.softmax(q @ k.transpose(1, 2) / 4.0, -1), att[0][:, 1], atol=TOL, rtol=0)
    torch.testing.assert_close(first_attention(pm, 2).probs(hs[1]), att[1], atol=TOL, rtol=0)


def test_first_attention_bert(tiny_bert):
    pm = load_model(str(tiny_bert), weights="trained", device="cpu", context_length=9)
    aw = first_attention(pm)
    x = pm.preprocess(_ids(pm))
    hs, att = _eager_attentions(transformers.BertModel, tiny_bert, **x)
    assert torch.equal(aw.pre(hs[0]), hs[0])  # post-LN: the attention sees the block input
    torch.testing.assert_close(aw.probs(hs[0]), att[0], atol=TOL, rtol=0)


def test_first_attention_gpt2(tiny_gpt2):
    pm = load_model(str(tiny_gpt2), weights="trained", device="cpu", context_length=7)
    aw = first_attention(pm, 1)
    assert aw.causal
    x = pm.preprocess(_ids(pm))
    hs, att = _eager_attentions(transformers.GPT2Model, tiny_gpt2, **x)
    torch.testing.assert_close(aw.probs(hs[0]), att[0], atol=TOL, rtol=0)
    with pytest.raises(InputError):
        first_attention(pm, 3)


def test_first_attention_timm(tiny_timm):
    pm = load_model(str(tiny_timm), backend="timm", weights="trained", device="cpu")
    aw = first_attention(pm, 1)
    x = pm.capture(pm.preprocess(_images(2)), [0])[0]
    blk = pm.module.blocks[0]
    attn = blk.attn
    with torch.no_grad():
        qkv = attn.qkv(blk.norm1(x)).reshape(2, 17, 3, 2, 16).permute(2, 0, 3, 1, 4)
        ref = torch.softmax(qkv[0] @ qkv[1].transpose(-1, -2) * attn.scale, -1)
    torch.testing.assert_close(aw.probs(x), ref, atol=TOL, rtol=0)


def test_public_types():
    assert {f for f in ModelInfo.__dataclass_fields__} >= {
        "name", "resolved", "backend", "family", "modality", "d", "n", "query_index",
        "num_layers", "num_heads", "head_dim", "weights", "weights_source",
    }
    assert callable(ProbedModel.capture) and callable(ProbedModel.preprocess)


@pytest.mark.parametrize(
    "model_type, extra, n",
    [
        ("deit", {"intermediate_size": 64}, 18),  # class + distillation token + 16 patches
        ("dinov2", {}, 17),
        ("dinov2_with_registers", {"num_register_tokens": 4}, 21),
    ],
)
def test_other_vit_families(tmp_path, model_type, extra, n):
    cfg = transformers.AutoConfig.for_model(
        model_type, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8, **extra
    )
    torch.manual_seed(0)
    transformers.AutoModel.from_config(cfg).save_pretrained(str(tmp_path))
    pm = load_model(str(tmp_path), weights="trained", device="cpu")
    assert (pm.info.family, pm.info.n, pm.info.query_index) == (model_type, n, 0)
    x = pm.preprocess(_images(2))
    out = pm.capture(x, [0, 1])
    ref = transformers.AutoModel.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    with torch.no_grad():
        o = ref(**x, output_hidden_states=True, output_attentions=True)
    for k in (0, 1):
        torch.testing.assert_close(out[k], o.hidden_states[k], atol=TOL, rtol=0)
    torch.testing.assert_close(first_attention(pm, 1).probs(o.hidden_states[0]), o.attentions[0], atol=TOL, rtol=0)
