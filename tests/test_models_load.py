"""Tests for mhaaudit.models.load: argument checks, error mapping, offline behaviour."""

from __future__ import annotations

import re

import pytest

from mhaaudit.errors import InputError, ModelError, OfflineError
from mhaaudit.models import load_model


def test_unknown_model_suggests_aliases():
    with pytest.raises(ModelError, match="vit-base"):
        load_model("definitely-not-a-model", device="cpu")
    with pytest.raises(InputError):
        load_model("vit-base", weights="pretrained", device="cpu")
    with pytest.raises(InputError, match="does not exist"):
        load_model("vit-base", weights="trained", weights_path="/nonexistent/dir", device="cpu")


def test_argument_checks(vit_dir):
    with pytest.raises(InputError, match="model name is required"):
        load_model("  ", device="cpu")
    with pytest.raises(InputError, match="backend"):
        load_model("vit-base", backend="onnx", device="cpu")
    with pytest.raises(InputError, match="together with random weights"):
        load_model("vit-base", weights_path=str(vit_dir), device="cpu")
    with pytest.raises(InputError, match="max_layer must be at least 0"):
        load_model("vit-base", max_layer=-1, device="cpu")
    with pytest.raises(InputError, match="max_layer must be an integer"):
        load_model("vit-base", max_layer="x", device="cpu")
    with pytest.raises(InputError, match="context length must be at least 1"):
        load_model("gpt2", context_length=0, device="cpu")
    with pytest.raises(InputError, match="context length must be an integer"):
        load_model("gpt2", context_length="long", device="cpu")
    # case and spaces do not matter in the choices
    pm = load_model(" vit-base ", weights=" Random ", backend="HF", max_layer=1, device="cpu")
    assert (pm.info.name, pm.info.weights, pm.info.backend) == ("vit-base", "random", "hf")


def test_offline_trained_hub_id_raises_offline_error(monkeypatch):
    """Offline, trained hub weights are refused at once: no connection is even tried (so no retry loop)."""
    import socket

    tried: list = []

    def no_network(_sock, address, *_a):
        tried.append(address)
        raise OSError("the network is not used offline")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket.socket, "connect_ex", no_network)
    with pytest.raises(OfflineError, match="pass weights PATH"):
        load_model("google/vit-base-patch16-224-in21k", weights="trained", device="cpu")
    with pytest.raises(OfflineError, match="pass weights PATH"):
        load_model("vit-base", weights="trained", device="cpu", max_layer=1)
    with pytest.raises(OfflineError, match="pass weights PATH"):
        load_model("vit-base", backend="timm", weights="trained", device="cpu")
    with pytest.raises(OfflineError):
        load_model("some-org/some-model", device="cpu")
    assert tried == []  # nothing reached for the hub, so nothing retried


def test_an_offline_revision_is_named_in_the_line_that_refuses_it():
    """Offline, trained weights at a revision not on this machine are refused naming that revision (an alias's, a
    hub id's): a report whose trained column says the weights are missing says which weights it looked for."""
    for name in ("vit-base", "google/vit-base-patch16-224-in21k"):
        with pytest.raises(OfflineError, match="at revision 'no-such-branch'"):
            load_model(name, weights="trained", revision="no-such-branch", device="cpu", max_layer=1)
    with pytest.raises(OfflineError) as got:
        load_model("vit-base", weights="trained", device="cpu", max_layer=1)
    assert "revision" not in str(got.value)


def test_library_errors_become_model_errors(monkeypatch):
    from mhaaudit.models import hf

    def broken(*_a, **_k):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(hf, "load", broken)
    with pytest.raises(ModelError, match="cannot load vit-base: boom second line"):
        load_model("vit-base", device="cpu")


def test_non_finite_weights_are_named_after_one_read_of_all():
    """The first parameter holding NaN or infinite values is named (NaN said as NaN, an infinity as
    infinite), from one pass over each tensor; finite weights pass."""
    from types import SimpleNamespace

    import torch
    from torch import nn

    from mhaaudit.models.load import check_finite_weights

    m = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2))
    pm = SimpleNamespace(module=m)
    check_finite_weights(pm, "tiny")
    with torch.no_grad():
        m[1].weight[0, 1] = float("inf")
    with pytest.raises(ModelError, match=r"hold infinite values \(e\.g\. 1\.weight\)"):
        check_finite_weights(pm, "tiny")
    with torch.no_grad():
        m[0].bias[2] = float("nan")
    with pytest.raises(ModelError, match=r"hold NaN values \(e\.g\. 0\.bias\)"):
        check_finite_weights(pm, "tiny")


def test_non_finite_weights_name_the_weights_given(vit_dir, tmp_path):
    """NaN weights read from ``--weights PATH`` name that path, not the model whose architecture they
    fill (the model's own weights are not the corrupt ones)."""
    import shutil

    from safetensors.torch import load_file, save_file

    bad = tmp_path / "checkpoint-200"
    shutil.copytree(vit_dir, bad)
    weights = load_file(str(bad / "model.safetensors"))
    weights["embeddings.cls_token"][..., 0] = float("nan")
    save_file(weights, str(bad / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ModelError, match=rf"^the weights of {re.escape(str(bad))} hold NaN values"):
        load_model(str(vit_dir), weights="trained", weights_path=str(bad), device="cpu")


def test_non_finite_weights_are_named_as_the_checkpoint_stores_them(vit_dir, tmp_path):
    """The offending tensor is named as the checkpoint holds it, so that it can be found there: a NaN in ViT's
    query weights was named ``layers.0.attention.q_proj.weight``, the name recent transformers releases give the
    module, which the file does not hold (it stores ``encoder.layer.0.attention.attention.query.weight``)."""
    import shutil

    from safetensors.torch import load_file, save_file

    bad = tmp_path / "nan"
    shutil.copytree(vit_dir, bad)
    weights = load_file(str(bad / "model.safetensors"))
    key = "encoder.layer.0.attention.attention.query.weight"
    weights[key][0, 0] = float("nan")
    save_file(weights, str(bad / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ModelError, match=rf"hold NaN values \(e\.g\. {re.escape(key)}\)"):
        load_model(str(bad), weights="trained", device="cpu")
    assert key in load_file(str(bad / "model.safetensors"))  # the name given is one the file holds
