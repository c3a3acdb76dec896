"""Tests for mhaaudit.models.timm_backend: timm ViTs by name, from a folder, or from a checkpoint file.

The tiny timm ViT (``timm_dir``) is a random one saved as a safetensors file with a timm-style
``config.json`` beside it, so the real loading code runs and nothing reaches the network.
"""

from __future__ import annotations

import json

import pytest
import torch
from modeltools import TIMM_ARGS, TOL, images, timm_reference

from mhaaudit.errors import InputError, ModelError
from mhaaudit.models import load_model

timm = pytest.importorskip("timm")


def test_timm_capture_matches_manual_blocks(timm_dir):
    file = timm_dir / "model.safetensors"
    pm = load_model(str(file), backend="timm", weights="trained", device="cpu")
    i = pm.info
    assert (i.backend, i.modality, i.d, i.n, i.query_index, i.num_layers, i.num_heads) == (
        "timm",
        "image",
        32,
        17,
        0,
        2,
        2,
    )
    assert str(file) in i.weights_source
    inputs = pm.preprocess(images())
    assert inputs["pixel_values"].shape == (3, 3, 32, 32)
    out = pm.capture(inputs, [0, 1, 2])
    ref = timm_reference(timm_dir, inputs["pixel_values"])
    for k in (0, 1, 2):
        torch.testing.assert_close(out[k], ref[k], atol=TOL, rtol=0)
    # the same file through the folder and through weights_path, truncated to one block
    pm2 = load_model(str(timm_dir), weights="trained", weights_path=str(file), device="cpu", max_layer=1)
    assert pm2.built_layers == 1 and pm2.info.num_layers == 2
    torch.testing.assert_close(pm2.capture(inputs, [1])[1], ref[1], atol=TOL, rtol=0)


def test_timm_folder_info(timm_dir):
    pm = load_model(str(timm_dir), weights="trained", device="cpu")
    assert (pm.info.family, pm.info.resolved) == ("vit", str(timm_dir))
    assert pm.info.weights_source == f"timm checkpoint {timm_dir / 'model.safetensors'}"
    random = load_model(str(timm_dir), device="cpu")
    assert random.info.weights_source.startswith("random init of timm vit_tiny_patch16_224 (config from ")


def test_timm_random_init_does_not_depend_on_max_layer(timm_dir):
    full = load_model(str(timm_dir), backend="timm", seed=2, device="cpu")
    one = load_model(str(timm_dir), backend="timm", seed=2, device="cpu", max_layer=1)
    other = load_model(str(timm_dir), backend="timm", seed=3, device="cpu", max_layer=1)
    x = full.preprocess(images(2))
    a, b = full.capture(x, [0, 1]), one.capture(x, [0, 1])
    for k in (0, 1):
        torch.testing.assert_close(a[k], b[k], atol=0, rtol=0)
    assert not torch.allclose(other.capture(x, [1])[1], b[1])
    assert abs(one.module.blocks[0].attn.qkv.weight.std().item() - 0.02) < 0.004


def test_timm_random_by_name_and_prefix():
    pm = load_model("timm:vit_tiny_patch16_224", max_layer=1, device="cpu")
    assert (pm.info.backend, pm.info.n, pm.info.d, pm.info.num_layers, pm.built_layers) == ("timm", 197, 192, 12, 1)
    pm2 = load_model("vit_tiny_patch16_224", max_layer=1, device="cpu")
    x = pm.preprocess(images(1))
    assert x["pixel_values"].shape == (1, 3, 224, 224)
    torch.testing.assert_close(pm.capture(x, [1])[1], pm2.capture(x, [1])[1])


@pytest.mark.parametrize("name", ["resnet18", "convnext_atto", "timm:swin_tiny_patch4_window7_224"])
def test_non_token_models_rejected(name):
    with pytest.raises(ModelError, match="cannot be probed"):
        load_model(name, device="cpu")


def test_timm_without_class_token_needs_a_query_index(tmp_path):
    from mhaaudit.pipeline import ModelRequest, query_index

    args = dict(TIMM_ARGS, class_token=False, global_pool="avg")
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "vit_tiny_patch16_224", "model_args": args}))
    pm = load_model(str(tmp_path), backend="timm", device="cpu")
    assert (pm.info.query_index, pm.info.n) == (None, 16)
    assert pm.info.query_token == "none: vit_tiny_patch16_224 has no class token (global_pool='avg')"
    with pytest.raises(ModelError, match=r"no query token of its own \(.*no class token.*query_index K \(0 to 15\)"):
        query_index(pm, ModelRequest(str(tmp_path)))
    assert query_index(pm, ModelRequest(str(tmp_path), query_index=-1)) == 15


def test_timm_weights_that_do_not_fit(timm_dir, tmp_path):
    # a timm file for a different size of the architecture
    with pytest.raises(ModelError, match="does not fit vit_tiny_patch16_224"):  # the model named, not the file
        load_model(
            "vit_tiny_patch16_224", weights="trained", weights_path=str(timm_dir / "model.safetensors"), device="cpu"
        )
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(ModelError):
        load_model("vit_tiny_patch16_224", weights="trained", weights_path=str(garbage), device="cpu")


def test_timm_weights_are_held_against_the_model_before_it_is_built(timm_dir, tmp_path):
    """``check_weights`` (a run's check before its first column) refuses what the load refuses, in its words, and
    passes what it loads: a file of the model's own tensors, one of its first block only (a run that probes block 1
    builds no more), one saved with ``module.`` names, one whose position table the model's filter resamples."""
    from safetensors.torch import save_file

    from mhaaudit.models.plan import LoadPlan
    from mhaaudit.models.resolution import resolve
    from mhaaudit.models.timm_backend import check_weights

    args = json.loads((timm_dir / "config.json").read_text())["model_args"]
    state = timm.create_model("vit_tiny_patch16_224", num_classes=0, **args).state_dict()
    other = timm.create_model("vit_tiny_patch16_224", num_classes=0, **{**args, "img_size": 48}).state_dict()
    files = {
        "own": state,
        "first-block": {k: v for k, v in state.items() if not k.startswith("blocks.1.")},
        "module-names": {f"module.{k}": v for k, v in state.items()},
        "other-positions": other,
        "no-class-token": {k: v for k, v in state.items() if k != "cls_token"},
        "narrower": timm.create_model("vit_tiny_patch16_224", num_classes=0, **{**args, "embed_dim": 16}).state_dict(),
    }
    narrower = files["narrower"]
    torch_files = {  # a torch file: the state the load picks from it (EMA weights first), in either torch form
        "ema.pth": {"state_dict": narrower, "state_dict_ema": state, "epoch": 3},
        "parallel.pth": {"state_dict": {f"module.{k}": v for k, v in narrower.items()}, "epoch": 3},
        "plain.pth": state,
        "legacy.pth": narrower,
    }
    said = {}
    for name, sd in [*files.items(), *torch_files.items()]:
        path = str(tmp_path / (name if name.endswith(".pth") else f"{name}.safetensors"))
        if name.endswith(".pth"):
            torch.save(sd, path, _use_new_zipfile_serialization=name != "legacy.pth")
        else:
            save_file({k: v.contiguous() for k, v in sd.items()}, path)
        plan = dict(weights="trained", weights_path=path, device="cpu", max_layer=1)
        try:
            check_weights(resolve(str(timm_dir), weights_path=path), LoadPlan(**plan))
            said[name] = None
        except ModelError as exc:
            said[name] = str(exc)
        try:  # the load, as a run that probes block 1 makes it
            load_model(str(timm_dir), **plan)
            loaded = None
        except ModelError as exc:
            loaded = str(exc)
        assert said[name] == loaded, name  # refused in the same words, naming the same tensor, or passed by both
    assert [k for k, v in said.items() if v is not None] == ["no-class-token", "narrower", "parallel.pth", "legacy.pth"]
    assert said["legacy.pth"].endswith("blocks.0.attn.proj.bias has shape (16,), the model expects (32,)")
    assert said["no-class-token"].endswith(f"does not fit {timm_dir}: 1 parameter(s) missing (e.g. cls_token)")
    assert said["narrower"].endswith("blocks.0.attn.proj.bias has shape (16,), the model expects (32,)")
    # a header whose sizes no tensor has: refused in one line before any work, as unreadable
    negative = tmp_path / "negative.safetensors"
    header = json.dumps({"cls_token": {"dtype": "F32", "shape": [-1, 32], "data_offsets": [0, 0]}}).encode()
    negative.write_bytes(len(header).to_bytes(8, "little") + header)
    plan = LoadPlan(weights="trained", weights_path=str(negative), device="cpu")
    with pytest.raises(ModelError, match=r"cannot read the checkpoint .*negative.safetensors: tensor 'cls_token' "):
        check_weights(resolve(str(timm_dir), weights_path=str(negative)), plan)


def test_timm_folder_errors(tmp_path):
    with pytest.raises(InputError, match="no such timm model"):
        load_model(str(tmp_path / "missing"), backend="timm", device="cpu")
    (tmp_path / "config.json").write_text(json.dumps({"model_args": TIMM_ARGS}))
    with pytest.raises(InputError, match="cannot tell the timm architecture"):
        load_model(str(tmp_path), backend="timm", device="cpu")
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "vit_tiny_patch16_224", "model_args": TIMM_ARGS}))
    with pytest.raises(ModelError, match="no checkpoint file found"):
        load_model(str(tmp_path), weights="trained", device="cpu")
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "no_such_vit"}))
    with pytest.raises(ModelError, match="unknown timm model"):
        load_model(str(tmp_path), device="cpu")
    with pytest.raises(InputError, match="text models only"):
        load_model("vit_tiny_patch16_224", device="cpu", context_length=4)
