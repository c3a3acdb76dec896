"""The built-in images as uint8 tensors: what a model whose preprocessing takes tensors reads.

``BuiltinImages.tensor_batches`` gives the images iteration gives; ``hf_inputs.ImageTransform`` takes
them only where the pixels equal those of the PIL images (a torchvision-backed processor whose resizing,
cropping and padding leave the images' size as it is, proven on one image holding every value); a pass over
them captures the features the PIL route captures.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import devices, save_tiny_vit
from modeltools import images
from transformers import ViTImageProcessor

from mhaaudit import capture_features
from mhaaudit.errors import InputError
from mhaaudit.models import load_model
from mhaaudit.models.hf_inputs import ImageTransform
from mhaaudit.sources import BuiltinImages


@pytest.mark.parametrize("device", devices())
def test_tensor_batches_are_the_images_of_iteration(device):
    pil = [np.asarray(im) for im in BuiltinImages(limit=37, seed=3)]
    got = list(BuiltinImages(limit=37, seed=3, device=device).tensor_batches(16))
    assert [tuple(b.shape) for b in got] == [(16, 3, 224, 224), (16, 3, 224, 224), (5, 3, 224, 224)]
    assert all(b.dtype == torch.uint8 and b.device.type == device for b in got)
    assert np.array_equal(torch.cat(got).permute(0, 2, 3, 1).cpu().numpy(), np.stack(pil))
    assert list(BuiltinImages(limit=0).tensor_batches(4)) == []
    with pytest.raises(InputError, match="at least 1"):
        next(BuiltinImages(limit=3).tensor_batches(0))


@pytest.mark.parametrize("device", devices())
def test_a_processor_takes_tensors_only_where_the_pixels_are_the_same(device):
    t = ImageTransform(ViTImageProcessor(size={"height": 224, "width": 224}, image_mean=[0.5] * 3, image_std=[0.5] * 3))
    assert t.takes_tensors(224, 224, device)
    assert not t.takes_tensors(200, 224, device)  # resized: not per pixel value, so not tried
    # resized to 256 and cropped back to 224 (DeiT's): the same size, but resampled, so not tried either
    side = {"height": 224, "width": 224}
    deit = ViTImageProcessor(size={"height": 256, "width": 256}, do_center_crop=True, crop_size=side)
    image = next(iter(BuiltinImages(limit=1)))
    assert image.size == (224, 224) and deit(images=[image], return_tensors="pt")["pixel_values"].shape[-2:] == (
        224,
        224,
    )
    assert not ImageTransform(deit).takes_tensors(224, 224, device)
    shortest = ImageTransform(ViTImageProcessor(size={"shortest_edge": 224}, image_mean=[0.5] * 3, image_std=[0.5] * 3))
    assert shortest.takes_tensors(224, 224, device) and not shortest.takes_tensors(224, 256, device)
    batch = next(BuiltinImages(limit=8, seed=1, device=device).tensor_batches(8))
    pil = list(BuiltinImages(limit=8, seed=1))
    assert torch.equal(t.tensors(batch).cpu(), t(pil))


def test_timm_and_resizing_models_keep_pil_images(vit_dir, timm_dir):
    for pm in (
        load_model(str(vit_dir), weights="trained", device="cpu"),  # 32 x 32: the built-in images are resized
        load_model(str(timm_dir), backend="timm", weights="trained", device="cpu"),
    ):
        assert not pm.takes_image_tensors(224, 224)
        with pytest.raises(InputError, match="takes PIL images"):
            pm.preprocess(torch.zeros(1, 3, 224, 224, dtype=torch.uint8))
    pm = load_model(str(vit_dir), weights="trained", device="cpu")
    with pytest.raises(InputError, match=r"\(B, 3, H, W\) uint8"):
        pm.preprocess(torch.zeros(1, 3, 32, 32))
    assert pm.preprocess(images(1))["pixel_values"].shape == (1, 3, 32, 32)


@pytest.mark.parametrize("device", devices())
def test_a_pass_over_tensors_captures_what_pil_images_give(tmp_path, monkeypatch, device):
    """A tiny ViT of 224 x 224 images in 32 x 32 patches (n = 50, d = 64) reads the built-in images as tensors;
    with the tensor route refused it reads PIL images: the same features, context ranks and sigmas."""
    folder = save_tiny_vit(tmp_path / "vit224", image_size=224, patch_size=32, hidden_size=64, intermediate_size=128)
    pm = load_model(str(folder), weights="trained", device=device)
    assert pm.takes_image_tensors(224, 224)
    used = []
    real = BuiltinImages.tensor_batches

    def tensor_batches(self, *a, **kw):
        used.append(a)
        return real(self, *a, **kw)

    monkeypatch.setattr(BuiltinImages, "tensor_batches", tensor_batches)
    kw = dict(variant="trained", layer=1, limit=60, batch_size=16, progress=False, device=device)
    tensors = capture_features(str(folder), **kw)
    assert used == [(16,)]
    monkeypatch.setattr(type(pm), "takes_image_tensors", lambda self, h, w: False)  # the PIL route only
    pil = capture_features(str(folder), **kw)
    assert used == [(16,)] and tensors.T == pil.T == 60
    assert torch.equal(tensors.queries, pil.queries) and torch.equal(tensors.a3, pil.a3)
    assert tensors.context.keys() == pil.context.keys() and int((pil.context["context_rank"] == 50).sum()) > 0
    for k in pil.context:
        torch.testing.assert_close(tensors.context[k], pil.context[k], rtol=0, atol=0, equal_nan=True)
