"""Tests for mhaaudit.models.registry: aliases, families, backend and modality detection.

Resolution builds nothing and calls no hub: these tests run on names, config files and
checkpoint files only.
"""

from __future__ import annotations

import json
import os

import pytest
import transformers

from mhaaudit.errors import ModelError
from mhaaudit.models import ALIASES, ModelSpec, modality_of, registry, resolve


def test_alias_table():
    assert ALIASES["vit-base"]["hf"] == "google/vit-base-patch16-224-in21k"
    assert ALIASES["vit-base"]["timm"] == "vit_base_patch16_224"
    assert ALIASES["bert-base"]["hf"] == "bert-base-uncased"
    assert ALIASES["bert-large"]["hf"] == "bert-large-uncased"
    assert ALIASES["gpt2"]["hf"] == "gpt2"
    assert ALIASES["gpt2-large"]["hf"] == "gpt2-large"
    for entry in ALIASES.values():
        assert entry["modality"] in ("image", "text") and "model_type" in entry["config"]


def test_resolve_aliases(timm_dir, vit_dir):
    spec = resolve(" ViT-Base ")
    assert spec == ModelSpec("ViT-Base", "hf", "google/vit-base-patch16-224-in21k", "vit", "image")
    assert spec.alias is ALIASES["vit-base"] and not spec.local
    assert resolve("vit-base", backend="timm").resolved == "vit_base_patch16_224"
    # a timm checkpoint file given as the weights of an alias with a timm version goes to timm
    assert resolve("vit-base", weights_path=str(timm_dir / "model.safetensors")).backend == "timm"
    assert resolve("vit-base", weights_path=str(vit_dir / "model.safetensors")).backend == "hf"
    assert resolve("vit-base", backend="hf", weights_path=str(timm_dir / "model.safetensors")).backend == "hf"
    with pytest.raises(ModelError, match="no timm version"):
        resolve("bert-base", backend="timm")


def test_resolve_timm_names():
    assert resolve("timm:vit_tiny_patch16_224") == ModelSpec(
        "timm:vit_tiny_patch16_224", "timm", "vit_tiny_patch16_224", "vit", "image"
    )
    assert resolve("vit_small_patch16_224.augreg_in21k").family == "vit"
    assert resolve("deit_tiny_patch16_224").backend == "timm"
    assert resolve("some_name", backend="timm").resolved == "some_name"
    # a name timm knows goes to transformers when that backend is asked for
    assert resolve("vit_tiny_patch16_224", backend="hf").backend == "hf"


def test_resolve_local_paths(vit_dir, timm_dir, tmp_path):
    spec = resolve(str(vit_dir))
    assert (spec.backend, spec.resolved, spec.family, spec.modality, spec.local) == (
        "hf",
        str(vit_dir),
        "vit",
        "image",
        True,
    )
    assert resolve(str(timm_dir)) == ModelSpec(str(timm_dir), "timm", str(timm_dir), None, "image", local=True)
    assert resolve(str(timm_dir / "model.safetensors")).backend == "timm"
    assert resolve(str(timm_dir), backend="hf").backend == "hf"
    bert = tmp_path / "bert"
    transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(str(bert))
    assert (resolve(str(bert)).family, resolve(str(bert)).modality) == ("bert", "text")
    missing = resolve(str(tmp_path / "nothing-here"))
    assert (missing.backend, missing.family, missing.modality, missing.local) == ("hf", None, None, True)
    home = os.path.expanduser("~")
    assert resolve("~/x-model").resolved == os.path.join(home, "x-model")


def test_resolve_hub_ids(vit_dir, timm_dir):
    assert resolve("some-org/some-model") == ModelSpec("some-org/some-model", "hf", "some-org/some-model")
    # a weights folder with a transformers config tells the family of a hub id
    assert resolve("some-org/some-model", weights_path=str(vit_dir)).modality == "image"
    assert resolve("some-org/some-model", weights_path=str(timm_dir)).family is None


def test_modality_of(vit_dir, timm_dir, tmp_path):
    assert modality_of("vit-base") == "image"
    assert modality_of("bert-base", backend="timm") == "text"  # the alias decides
    assert modality_of("gpt2-large") == "text"
    assert modality_of("timm:anything") == "image"
    assert modality_of("vit_tiny_patch16_224") == "image"
    assert modality_of(str(vit_dir)) == "image"
    assert modality_of(str(timm_dir)) == "image"
    assert modality_of(str(timm_dir / "model.safetensors")) == "image"
    gpt = tmp_path / "gpt"
    transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2).save_pretrained(str(gpt))
    assert modality_of(str(gpt)) == "text"
    assert modality_of("bert-base-uncased", weights_path=str(gpt)) == "text"
    # names nothing can tell about give "image": loading then reports the real problem
    assert modality_of("some-org/not-cached-anywhere") == "image"
    assert modality_of(str(tmp_path / "missing")) == "image"


class _Cfg:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_classify_config():
    assert registry.classify_config(_Cfg(model_type="vit", image_size=224), "m") == ("vit", "image", False)
    assert registry.classify_config(_Cfg(model_type="bert", vocab_size=10), "m") == ("bert", "text", False)
    assert registry.classify_config(_Cfg(model_type="gpt2", vocab_size=10), "m") == ("gpt2", "text", True)
    assert registry.classify_config(_Cfg(model_type="x", vocab_size=10, is_decoder=True), "m")[2]
    assert registry.classify_config(_Cfg(model_type="x", vocab_size=10, architectures=["XForCausalLM"]), "m")[2]
    with pytest.raises(ModelError, match="m cannot be probed: Swin merges"):
        registry.classify_config(_Cfg(model_type="swin"), "m")
    with pytest.raises(
        ModelError, match=r"image family 'mystery' is not one mhaaudit knows \(supported: transformers vit, "
    ):
        registry.classify_config(_Cfg(model_type="mystery", image_size=224), "m")
    assert registry.classify_config(_Cfg(model_type="beit", image_size=224, vocab_size=8192), "m") == (
        "beit",
        "image",
        False,
    )
    with pytest.raises(ModelError, match="encoder-decoder"):
        registry.classify_config(_Cfg(model_type="t5", vocab_size=10, is_encoder_decoder=True), "m")
    with pytest.raises(ModelError, match="neither"):
        registry.classify_config(_Cfg(model_type="odd"), "m")


def test_a_family_is_one_registry_entry(monkeypatch):
    cfg = _Cfg(model_type="newvit", image_size=224)
    with pytest.raises(ModelError, match="not one mhaaudit knows"):
        registry.classify_config(cfg, "m")
    monkeypatch.setitem(registry.FAMILIES, "newvit", registry.Family("NewViT", "image"))
    assert registry.classify_config(cfg, "m") == ("newvit", "image", False)
    assert registry.classify_config(_Cfg(model_type="newlm", vocab_size=10), "m") == ("newlm", "text", False)
    monkeypatch.setitem(registry.FAMILIES, "newlm", registry.Family("NewLM", "text", query="last"))
    assert registry.classify_config(_Cfg(model_type="newlm", vocab_size=10), "m") == ("newlm", "text", True)


def test_unsupported_families_name_the_supported_ones():
    with pytest.raises(
        ModelError, match=r"Swin merges .*\(supported: transformers gpt2, .*llama.*; timm vit_\*siglip\*"
    ):
        registry.classify_config(_Cfg(model_type="swin"), "m")
    assert registry.timm_family("vit_small_patch14_reg4_dinov2.lvd142m") == "dinov2"
    assert registry.timm_family("vit_base_patch16_siglip_224") == "siglip"
    assert registry.timm_family("deit_tiny_distilled_patch16_224") == "deit"
    assert registry.timm_family("eva02_tiny_patch14_224") == "eva02"
    assert registry.timm_family("vit_tiny_patch16_224") == "vit"


def test_timm_folder_config_detection(tmp_path):
    assert registry.is_timm_folder_config({"architecture": "vit_tiny_patch16_224"})
    assert not registry.is_timm_folder_config({"architecture": "x", "model_type": "vit"})
    assert not registry.is_timm_folder_config(None)
    (tmp_path / "config.json").write_text(json.dumps([1, 2]))
    assert registry.read_json(tmp_path / "config.json") is None
    assert registry.read_json(tmp_path / "missing.json") is None


@pytest.mark.parametrize("model_type", [[0], {"a": 1}, 7])
def test_a_model_type_that_is_not_a_string_is_refused(tmp_path, model_type):
    """A folder's (or a weights folder's) config.json naming a model_type that is not a string is a ModelError
    naming the folder, not a TypeError from the family table."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    with pytest.raises(ModelError, match="model_type must be a string"):
        resolve(str(tmp_path))
    with pytest.raises(ModelError, match="model_type must be a string"):
        resolve("org/some-model", weights_path=str(tmp_path))
