"""Shared helpers for the tests of mhaaudit.models: tiny random models saved to temporary folders,
inputs for them, and references computed by the libraries themselves.

Every model is built from a config with a fixed seed and saved with its library's own writer,
so the real loading code runs on it and nothing reaches the network. The tiny ViT and timm
models are the session fixtures ``vit_dir`` and ``timm_dir`` of ``conftest.py``; BERT and
GPT-2 are the fixtures ``tiny_bert`` and ``tiny_gpt2`` here (import them into a test module).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import TIMM_ARGS, TINY_VIT

transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")

TOL = 1e-5

__all__ = [
    "TIMM_ARGS",
    "TOL",
    "bert_config",
    "eager_attentions",
    "gpt2_config",
    "hidden_states",
    "ids",
    "images",
    "save_hf",
    "timm_reference",
    "tiny_bert",
    "tiny_gpt2",
    "vit_config",
]


def vit_config(**kw):
    return transformers.ViTConfig(**{**TINY_VIT, **kw})


def bert_config(**kw):
    base = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=100,
        max_position_embeddings=64,
    )
    return transformers.BertConfig(**{**base, **kw})


def gpt2_config(**kw):
    base = dict(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64)
    return transformers.GPT2Config(**{**base, **kw})


def save_hf(cls, cfg, folder, seed=0):
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    model.save_pretrained(str(folder))
    return model


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    save_hf(transformers.BertModel, bert_config(), folder)
    return folder


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    save_hf(transformers.GPT2Model, gpt2_config(), folder)
    return folder


def images(k=3, seed=0):
    """``k`` PIL images of slightly different sizes, from seeded noise."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, size=(40 + 3 * i, 48, 3), dtype=np.uint8)) for i in range(k)]


def ids(pm, b=2, seed=0):
    """``b`` random token-id sequences of the model's length n."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 100, (b, pm.info.n), generator=g).tolist()


def hidden_states(cls, folder, **inputs):
    """The hidden states of a saved transformers model, from its own forward pass."""
    ref = cls.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        return ref(**inputs, output_hidden_states=True).hidden_states


def eager_attentions(cls, folder, **inputs):
    """(hidden states, attention maps) of a saved transformers model, from its own eager attention."""
    ref = cls.from_pretrained(str(folder), attn_implementation="eager").eval()
    with torch.no_grad():
        o = ref(**inputs, output_hidden_states=True, output_attentions=True)
    return o.hidden_states, o.attentions


def timm_reference(folder, px):
    """(embedding output, block 1 output, block 2 output) of the saved tiny timm ViT, block by block."""
    from safetensors.torch import load_file

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, **TIMM_ARGS).eval()
    model.load_state_dict(load_file(str(folder / "model.safetensors")))
    with torch.no_grad():
        x = model.norm_pre(model.patch_drop(model._pos_embed(model.patch_embed(px))))
        x1 = model.blocks[0](x)
        x2 = model.blocks[1](x1)
    return x, x1, x2
