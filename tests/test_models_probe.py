"""Tests for mhaaudit.models.probe: truncated depth, hooks always removed, inputs and probe points."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from modeltools import images, tiny_bert, tiny_gpt2  # noqa: F401

from mhaaudit.errors import InputError
from mhaaudit.models import ModelInfo, ProbedModel, load_model
from mhaaudit.models.probe import no_tf32, prepare_module


def _counter(module):
    calls = []
    handle = module.register_forward_hook(lambda *a: calls.append(1))
    return calls, handle


def test_capture_stops_early_hf(vit_dir, tiny_gpt2):
    pm = load_model(str(vit_dir), weights="trained", device="cpu")
    assert pm.built_layers == 2
    calls, h = _counter(pm.module.layers[1])
    pm.capture(pm.preprocess(images(1)), [0, 1])
    assert calls == []
    pm.capture(pm.preprocess(images(1)), [2])
    assert calls == [1]
    h.remove()
    gm = load_model(str(tiny_gpt2), weights="trained", device="cpu", context_length=5)
    calls, h = _counter(gm.module.h[1])
    final, h2 = _counter(gm.module.ln_f)
    gm.capture(gm.preprocess([[1] * 5]), [0, 1])
    assert calls == [] and final == []
    h.remove(), h2.remove()


def test_capture_stops_early_timm(timm_dir):
    pm = load_model(str(timm_dir), backend="timm", weights="trained", device="cpu")
    calls, h = _counter(pm.module.blocks[1])
    first, h0 = _counter(pm.module.blocks[0])
    pm.capture(pm.preprocess(images(1)), [0, 1])
    assert calls == [] and first == [1]
    pm.capture(pm.preprocess(images(1)), [0])  # the embedding output alone runs no block
    assert first == [1]
    h.remove(), h0.remove()


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


def test_layer_validation(vit_dir):
    pm = load_model(str(vit_dir), weights="trained", device="cpu")
    x = pm.preprocess(images(1))
    with pytest.raises(InputError):
        pm.capture(x, [3])
    with pytest.raises(InputError):
        pm.capture(x, [-1])
    with pytest.raises(InputError):
        pm.capture(x, [])
    with pytest.raises(InputError, match="integers"):
        pm.capture(x, ["one"])
    with pytest.raises(InputError, match="PIL"):
        pm.preprocess([np.zeros((4, 4, 3))])
    with pytest.raises(InputError, match="empty"):
        pm.preprocess([])


def test_capture_accepts_raw_batches(vit_dir):
    """A batch that is not yet model inputs is preprocessed first; the result is float32 and a copy."""
    pm = load_model(str(vit_dir), weights="trained", device="cpu")
    imgs = images(2)
    a = pm.capture(imgs, [0, 1])
    b = pm.capture(pm.preprocess(imgs), [0, 1])
    for k in (0, 1):
        assert a[k].dtype == torch.float32
        torch.testing.assert_close(a[k], b[k], atol=0, rtol=0)


def test_text_preprocess_checks(tiny_bert):
    pm = load_model(str(tiny_bert), weights="trained", device="cpu", context_length=4)
    x = pm.preprocess(torch.tensor([[1, 2, 3, 4]]))
    assert x["input_ids"].dtype == torch.long and torch.equal(x["attention_mask"], torch.ones(1, 4, dtype=torch.long))
    with pytest.raises(InputError, match="2-D"):
        pm.preprocess(torch.tensor([1, 2, 3, 4]))
    with pytest.raises(InputError, match="exactly n = 4"):
        pm.preprocess(torch.tensor([[1, 2, 3]]))
    with pytest.raises(InputError, match="integers"):
        pm.preprocess([["a", "b", "c", "d"]])
    with pytest.raises(InputError, match="token ids"):
        pm.preprocess([[-1, 0, 0, 0]])
    # without an attention mask, capture adds one of ones
    out = pm.capture({"input_ids": torch.tensor([[1, 2, 3, 4]])}, [1])
    torch.testing.assert_close(out[1], pm.capture(pm.preprocess([[1, 2, 3, 4]]), [1])[1], atol=0, rtol=0)


def test_public_types():
    assert {f for f in ModelInfo.__dataclass_fields__} >= {
        "name",
        "resolved",
        "backend",
        "family",
        "modality",
        "d",
        "n",
        "query_index",
        "num_layers",
        "num_heads",
        "head_dim",
        "weights",
        "weights_source",
    }
    assert callable(ProbedModel.capture) and callable(ProbedModel.preprocess)


def test_prepare_module_and_tf32():
    m = prepare_module(torch.nn.Linear(3, 2).double().train(), torch.device("cpu"))
    assert m.weight.dtype == torch.float32 and not m.training
    assert not any(p.requires_grad for p in m.parameters())
    from mhaaudit.numerics.rule import _precision_settings, tf32_is_off

    def state():  # the per-backend settings (reading the legacy flags can raise once they are set)
        return (torch.get_float32_matmul_precision(), *(o.fp32_precision for o in _precision_settings()))

    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # a user's setting: TF32 allowed
    before = state()
    try:
        assert not tf32_is_off()
        with no_tf32():  # runs with or without a GPU: the settings are made either way
            assert tf32_is_off() and torch.get_float32_matmul_precision() == "highest"
            assert all(o.fp32_precision == "ieee" for o in _precision_settings())
        assert state() == before
    finally:
        torch.set_float32_matmul_precision(saved)
