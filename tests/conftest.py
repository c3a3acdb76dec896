"""Shared test setup: offline hub, tiny random models saved to temporary folders, small data.

Nothing here reaches the network. The models are built from configs with a fixed seed and
saved with their libraries' own writers, so the real loading code runs on them.
"""

from __future__ import annotations

import json
import os

# Set before any hub library is imported by a test module.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.pop("MHAAUDIT_DEBUG", None)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from mhaaudit import hub  # noqa: E402

TINY_VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8)
TINY_VIT_N = 17  # 1 + (32 / 8) ** 2 tokens
TINY_VIT_D = 32
TIMM_ARGS = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2)


@pytest.fixture(autouse=True)
def _offline_hub(monkeypatch):
    """Offline hub for every test; the cached offline decision is recomputed around each test."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv("MHAAUDIT_DEBUG", raising=False)
    hub.is_offline.cache_clear()
    yield
    hub.is_offline.cache_clear()


def save_tiny_vit(folder, seed: int = 0, **overrides):
    """A tiny random transformers ViT saved with ``save_pretrained`` (n = 17, d = 32 by default)."""
    import transformers

    cfg = transformers.ViTConfig(**{**TINY_VIT, **overrides})
    torch.manual_seed(seed)
    transformers.ViTModel(cfg).eval().save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def vit_dir(tmp_path_factory):
    """Tiny ViT folder: hidden size 32, 2 blocks, 32 x 32 images in 8 x 8 patches."""
    return save_tiny_vit(tmp_path_factory.mktemp("tiny_vit"))


@pytest.fixture(scope="session")
def vit_dir_wide(tmp_path_factory):
    """Same layout with hidden size 48: weights that do not fit ``vit_dir``."""
    return save_tiny_vit(tmp_path_factory.mktemp("tiny_vit_wide"), hidden_size=48, intermediate_size=96)


@pytest.fixture(scope="session")
def timm_dir(tmp_path_factory):
    """A tiny timm ViT: ``model.safetensors`` plus a timm-style ``config.json`` beside it."""
    import timm
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp("tiny_timm")
    torch.manual_seed(1)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, **TIMM_ARGS).eval()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architecture": "vit_tiny_patch16_224", "model_args": TIMM_ARGS}))
    return folder


@pytest.fixture(scope="session")
def image_dir(tmp_path_factory):
    """60 small RGB images of varied sizes, made with PIL from seeded noise and gradients."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for i in range(60):
        h, w = 24 + (i % 5) * 7, 28 + (i % 3) * 9
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([(xx * (i + 3)) % 256, (yy * (2 * i + 1)) % 256, ((xx + yy) * 5 + 17 * i) % 256], -1)
        noise = rng.integers(0, 96, size=(h, w, 3))
        arr = ((base + noise) % 256).astype(np.uint8)
        Image.fromarray(arr, "RGB").save(folder / f"img_{i:03d}.png")
    return folder


def tmp_leftovers(folder) -> list[str]:
    """Names of temporary files that an atomic write may have left in ``folder``."""
    return sorted(p.name for p in os.scandir(folder) if p.name.startswith(".") or p.name.endswith(".tmp"))


def strict_json(text: str):
    """Parse JSON as the standard defines it: NaN and Infinity are not JSON."""

    def refuse(const):
        raise ValueError(f"{const} is not valid JSON")

    return json.loads(text, parse_constant=refuse)
