"""Tests for mhaaudit.models.random_init: the seed rule of random weights, the caller's RNG left alone."""

from __future__ import annotations

import torch
from conftest import devices

from mhaaudit.models.random_init import init_seed, seeded
from mhaaudit.settings import derive_seed


def test_init_seeds_follow_the_seed_rule():
    assert init_seed(7) == derive_seed(7, "model-init")
    assert [init_seed(7, k) for k in (1, 2)] == [derive_seed(7, "model-init", 1), derive_seed(7, "model-init", 2)]
    seeds = {init_seed(7), init_seed(7, 1), init_seed(7, 2), init_seed(8), init_seed(8, 1)}
    assert len(seeds) == 5
    assert init_seed(7, 1) != derive_seed(7, "random-attention")


def test_seeded_leaves_the_callers_rng_alone():
    state = torch.random.get_rng_state()
    with seeded(init_seed(3)):
        a = torch.rand(4)
    assert torch.equal(torch.random.get_rng_state(), state)
    with seeded(init_seed(3)):
        b = torch.rand(4)
    assert torch.equal(a, b)


def _tiny_configs():
    import transformers

    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    return {
        "vit": transformers.ViTConfig(image_size=32, patch_size=8, **small),
        "bert": transformers.BertConfig(vocab_size=100, max_position_embeddings=32, **small),
        "gpt2": transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=2, n_head=4),
    }


def _ordinary(build, redraw, seed):
    with seeded(init_seed(seed)):
        module = build()
    redraw(module)
    return module


def test_build_random_draws_once_and_gives_the_ordinary_weights(monkeypatch):
    import pytest

    pytest.importorskip("transformers")
    from transformers import AutoModel

    from mhaaudit.models import random_init
    from mhaaudit.models.hf import find_blocks

    written = []
    check = random_init._all_written
    monkeypatch.setattr(random_init, "_all_written", lambda m: written.append(check(m)) or written[-1])
    for name, cfg in _tiny_configs().items():

        def redraw(module, cfg=cfg):
            random_init.reinit_hf(module, find_blocks(module), 5, cfg.num_hidden_layers)

        got = random_init.build_random(lambda cfg=cfg: AutoModel.from_config(cfg), redraw, 5).state_dict()
        want = _ordinary(lambda cfg=cfg: AutoModel.from_config(cfg), redraw, 5).state_dict()
        assert written[-1] is True, name  # the one-draw path ran
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in want), name
        assert all(t.device.type == "cpu" for t in got.values())


def test_build_random_falls_back_when_a_tensor_is_left_unwritten():
    from mhaaudit.models.random_init import build_random

    def build():
        return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))

    def redraw(module):  # writes the linear layer only: the layer norm keeps its sentinel on meta
        with torch.no_grad(), seeded(11):
            module[0].weight.normal_()
            module[0].bias.zero_()

    module = build_random(build, redraw, 3)
    assert torch.equal(module[1].weight, torch.ones(4)) and torch.equal(module[1].bias, torch.zeros(4))
    assert torch.equal(module[0].weight, _ordinary(build, redraw, 3)[0].weight)


def test_random_weights_are_the_same_on_every_device(vit_dir):
    import pytest

    pytest.importorskip("transformers")
    from mhaaudit import pipeline
    from mhaaudit.settings import Settings

    states = []
    for device in devices():
        pm = pipeline.load(pipeline.ModelRequest(str(vit_dir)), "random", Settings.resolve(device=device, seed=2), 1)
        assert all(p.device.type == torch.device(device).type for p in pm.module.parameters())
        states.append({k: v.cpu() for k, v in pm.module.state_dict().items()})
    for other in states[1:]:
        assert all(torch.equal(other[k], states[0][k]) for k in states[0])
