"""Tests for mhaaudit.models.hf: transformers models from aliases, folders, weights files and folders.

Every model is a tiny random one saved to a temporary folder (or an alias built from its
shipped config), so the real loading code runs and nothing reaches the network.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from modeltools import (  # noqa: F401
    TOL,
    bert_config,
    hidden_states,
    ids,
    images,
    save_hf,
    tiny_bert,
    tiny_gpt2,
    vit_config,
)

from mhaaudit.errors import InputError, ModelError
from mhaaudit.models import load_model

transformers = pytest.importorskip("transformers")


# ---------------------------------------------------------------------------------- aliases


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


def test_vit_capture_matches_hidden_states(vit_dir):
    pm = load_model(str(vit_dir), weights="trained", weights_path=str(vit_dir), device="cpu")
    i = pm.info
    assert (i.backend, i.family, i.modality, i.d, i.n, i.query_index) == ("hf", "vit", "image", 32, 17, 0)
    assert (i.num_layers, i.num_heads, i.head_dim, i.weights) == (2, 2, 16, "trained")
    assert str(vit_dir) in i.weights_source
    inputs = pm.preprocess(images())
    assert inputs["pixel_values"].shape == (3, 3, 32, 32)
    out = pm.capture(inputs, [0, 1])
    hs = hidden_states(transformers.ViTModel, vit_dir, pixel_values=inputs["pixel_values"])
    for k in (0, 1):
        assert out[k].shape == (3, 17, 32)
        torch.testing.assert_close(out[k], hs[k], atol=TOL, rtol=0)


def test_vit_uses_saved_image_processor(tmp_path):
    save_hf(transformers.ViTModel, vit_config(), tmp_path)
    proc = transformers.ViTImageProcessor(
        size={"height": 32, "width": 32}, image_mean=[0.1, 0.2, 0.3], image_std=[0.4, 0.5, 0.6]
    )
    proc.save_pretrained(str(tmp_path))
    pm = load_model(str(tmp_path), weights="trained", device="cpu")
    imgs = images(2)
    torch.testing.assert_close(
        pm.preprocess(imgs)["pixel_values"], proc(images=imgs, return_tensors="pt")["pixel_values"]
    )


def test_image_family_normalisation_without_processor(vit_dir, tmp_path):
    """Without a saved processor, the registry's normalisation of the family is used."""
    pm = load_model(str(vit_dir), weights="trained", device="cpu")
    img = images(1)
    ref = transformers.ViTImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    torch.testing.assert_close(pm.preprocess(img)["pixel_values"], ref(images=img, return_tensors="pt")["pixel_values"])
    cfg = transformers.AutoConfig.for_model(
        "deit",
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
    )
    torch.manual_seed(0)
    transformers.AutoModel.from_config(cfg).save_pretrained(str(tmp_path))
    deit = load_model(str(tmp_path), weights="trained", device="cpu")
    ref = transformers.ViTImageProcessor(
        size={"height": 32, "width": 32}, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]
    )
    torch.testing.assert_close(
        deit.preprocess(img)["pixel_values"], ref(images=img, return_tensors="pt")["pixel_values"]
    )


def test_hf_single_weights_file(vit_dir, timm_dir, tmp_path):
    """A bare weights file (here with a task-head prefix) loads into the architecture the name gives."""
    from safetensors.torch import save_file

    ref = transformers.ViTModel.from_pretrained(str(vit_dir)).eval()
    file = tmp_path / "weights.safetensors"
    save_file({f"vit.{k}": v.contiguous() for k, v in ref.state_dict().items()}, str(file))
    pm = load_model(str(vit_dir), weights="trained", weights_path=str(file), device="cpu", max_layer=1)
    assert str(file) in pm.info.weights_source
    x = pm.preprocess(images(2))
    with torch.no_grad():
        hs = ref(**x, output_hidden_states=True).hidden_states
    torch.testing.assert_close(pm.capture(x, [1])[1], hs[1], atol=TOL, rtol=0)
    # a timm checkpoint given with the vit-base alias goes to timm (and is too small for ViT-Base)
    with pytest.raises(ModelError, match=r"timm|does not fit"):
        load_model("vit-base", weights="trained", weights_path=str(timm_dir / "model.safetensors"), device="cpu")


def test_a_training_checkpoint_that_wraps_its_state_dict_loads_as_the_bare_file(vit_dir, tmp_path):
    """A ``.pt`` training checkpoint (``{"state_dict": ..., "epoch": ...}``) whose names need the library's
    renaming loads the weights a bare file of the same state dict loads."""
    from safetensors.torch import load_file

    sd = load_file(str(vit_dir / "model.safetensors"))  # the checkpoint's names, not the modules'
    torch.save(sd, tmp_path / "bare.pt")
    torch.save({"state_dict": sd, "epoch": 3}, tmp_path / "wrapped.pt")
    bare, wrapped = (
        load_model(str(vit_dir), weights="trained", weights_path=str(tmp_path / f), device="cpu", max_layer=1)
        for f in ("bare.pt", "wrapped.pt")
    )
    x = bare.preprocess(images(2))
    torch.testing.assert_close(wrapped.capture(x, [0, 1]), bare.capture(x, [0, 1]), atol=0, rtol=0)


def test_a_weights_file_staged_for_from_pretrained_leaves_no_folder_behind(vit_dir, tmp_path, monkeypatch):
    """A bare weights file that needs the library's renaming is staged, as a link beside its config, in a
    scratch folder of the system's temporary folder: removed once loaded, and when the load fails."""
    import os
    import tempfile

    from safetensors.torch import save_file

    from mhaaudit.models.hf_weights import _load_file_as_checkpoint

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    ref = transformers.ViTModel.from_pretrained(str(vit_dir)).eval()
    file = tmp_path / "weights.safetensors"
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(file))
    module = _load_file_as_checkpoint(str(file), ref.config, seed=0)
    assert module is not None
    torch.testing.assert_close(module.state_dict(), ref.state_dict(), atol=0, rtol=0)
    assert os.listdir(scratch) == [] and file.is_file()
    (tmp_path / "broken.safetensors").write_bytes(b"not safetensors")
    assert _load_file_as_checkpoint(str(tmp_path / "broken.safetensors"), ref.config, seed=0) is None
    assert os.listdir(scratch) == []


def test_bert_capture_matches_hidden_states(tiny_bert):
    pm = load_model(
        "bert-base-uncased", weights="trained", weights_path=str(tiny_bert), device="cpu", context_length=12
    )
    assert (pm.info.family, pm.info.modality, pm.info.n, pm.info.query_index, pm.info.d) == ("bert", "text", 12, 0, 32)
    assert pm.tokenizer is None
    inputs = pm.preprocess(ids(pm))
    assert torch.equal(inputs["attention_mask"], torch.ones(2, 12, dtype=torch.long))
    out = pm.capture(inputs, [0, 1])
    hs = hidden_states(transformers.BertModel, tiny_bert, **inputs)
    for k in (0, 1):
        torch.testing.assert_close(out[k], hs[k], atol=TOL, rtol=0)
    with pytest.raises(InputError, match="exactly n = 12"):
        pm.preprocess([[1] * 11])
    with pytest.raises(InputError, match="token ids"):
        pm.preprocess([[1000] * 12])


def test_tokenizer_from_folder(tmp_path):
    save_hf(transformers.BertModel, bert_config(), tmp_path)
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
    inputs = pm.preprocess(ids(pm, b=3))
    out = pm.capture(inputs, [1, 0])
    hs = hidden_states(transformers.GPT2Model, tiny_gpt2, **inputs)
    for k in (0, 1):
        torch.testing.assert_close(out[k], hs[k], atol=TOL, rtol=0)
    # causal: changing the last token leaves earlier positions of block 1's output unchanged
    ids2 = [list(s) for s in ids(pm, b=3)]
    for s in ids2:
        s[-1] = (s[-1] + 1) % 100
    out2 = pm.capture(pm.preprocess(ids2), [1])
    torch.testing.assert_close(out2[1][:, :-1], out[1][:, :-1], atol=TOL, rtol=0)
    with pytest.raises(InputError, match="position"):
        load_model(str(tiny_gpt2), device="cpu", context_length=65)


@pytest.mark.parametrize(
    "model_type, extra, n",
    [
        ("deit", {"intermediate_size": 64}, 18),  # class + distillation token + 16 patches
        ("dinov2", {}, 17),
        ("dinov2_with_registers", {"num_register_tokens": 4}, 21),
    ],
)
def test_other_vit_families(tmp_path, model_type, extra, n):
    if model_type == "dinov2_with_registers" and not hasattr(transformers, "Dinov2WithRegistersModel"):
        pytest.skip(f"transformers {transformers.__version__} has no Dinov2WithRegistersModel: the family is newer")
    cfg = transformers.AutoConfig.for_model(
        model_type, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8, **extra
    )
    torch.manual_seed(0)
    transformers.AutoModel.from_config(cfg).save_pretrained(str(tmp_path))
    pm = load_model(str(tmp_path), weights="trained", device="cpu")
    assert (pm.info.family, pm.info.n, pm.info.query_index) == (model_type, n, 0)
    x = pm.preprocess(images(2))
    out = pm.capture(x, [0, 1])
    hs = hidden_states(transformers.AutoModel, tmp_path, **x)
    for k in (0, 1):
        torch.testing.assert_close(out[k], hs[k], atol=TOL, rtol=0)


# ---------------------------------------------------------------------------------- random init


def test_random_init_is_seeded(vit_dir):
    state = torch.random.get_rng_state()
    a = load_model(str(vit_dir), weights="random", seed=3, device="cpu")
    b = load_model(str(vit_dir), weights="random", seed=3, device="cpu")
    c = load_model(str(vit_dir), weights="random", seed=4, device="cpu")
    assert torch.equal(torch.random.get_rng_state(), state)  # caller's RNG untouched
    assert a.info.weights == "random" and "random init" in a.info.weights_source
    x = a.preprocess(images(2))
    xa, xb, xc = a.capture(x, [1])[1], b.capture(x, [1])[1], c.capture(x, [1])[1]
    assert torch.equal(xa, xb)
    assert not torch.allclose(xa, xc)
    t = load_model(str(vit_dir), weights="trained", device="cpu")
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


# ---------------------------------------------------------------------------------- errors


def test_hf_hierarchical_model_rejected(tmp_path):
    cfg = transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 1], window_size=2
    )
    cfg.save_pretrained(str(tmp_path))
    with pytest.raises(ModelError, match="cannot be probed"):
        load_model(str(tmp_path), device="cpu")


def test_hf_weights_that_do_not_fit(vit_dir, tiny_bert, tmp_path):
    with pytest.raises(ModelError, match="do not fit"):
        load_model("vit-base", weights="trained", weights_path=str(vit_dir), device="cpu")
    with pytest.raises(ModelError, match="do not fit"):
        load_model("vit-base", weights="trained", weights_path=str(tiny_bert), device="cpu")
    # a folder whose config disagrees with its own weights
    bad = tmp_path / "bad"
    save_hf(transformers.ViTModel, vit_config(), bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["intermediate_size"] = 48
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError):
        load_model(str(bad), weights="trained", device="cpu")


def test_hf_folder_errors(tmp_path, timm_dir):
    with pytest.raises(ModelError, match=r"no config.json"):
        load_model(str(tmp_path), device="cpu", backend="hf")
    with pytest.raises(ModelError, match="timm model folder"):
        load_model(str(timm_dir), device="cpu", backend="hf")
    with pytest.raises(InputError, match="is a file"):
        load_model(str(timm_dir / "model.safetensors"), device="cpu", backend="hf")
    with pytest.raises(InputError, match="no such model folder"):
        load_model(str(tmp_path / "missing"), device="cpu", backend="hf")
    with pytest.raises(InputError, match="text models only"):
        load_model("vit-base", device="cpu", max_layer=1, context_length=4)
