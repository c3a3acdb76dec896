"""Every model family mhaaudit supports, loaded through the real loading code from a tiny random
model saved with its library's own writer (transformers ``save_pretrained``; timm
``create_model`` + safetensors ``save_file``), offline.

For each family: the probe points (layer 0 = embedding output, layer 1 = output of block 1) equal
the library's own ``output_hidden_states`` (transformers) or ``forward_intermediates`` (timm) on
the same inputs; the query row is the right token (the class token before any distillation or
register tokens, [CLS] / <s>, the last token); ``first_attention`` either reproduces the
library's eager attention maps or refuses with the reason (rotary positions, grouped key/value
heads, query/key norms, soft-capping, relative attention). A family whose class the installed
transformers lacks is skipped, saying so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
import torch
from modeltools import TOL, images

from mhaaudit.errors import ModelError
from mhaaudit.models import first_attention, load_model

transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")

D, LAYERS, HEADS = 32, 2, 4
TEXT = dict(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=64, vocab_size=100,
            max_position_embeddings=64)
IMAGE = dict(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=64, image_size=32,
             patch_size=8)
SPECIAL = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
N_TEXT, PATCHES = 8, 16


@dataclass(frozen=True)
class HF:
    """A transformers family: its model type, the class that builds it, its tiny config, and what
    mhaaudit must find (query: first | last | none; prefix: tokens before the patches)."""

    model_type: str
    cls: str
    config: dict
    query: str
    positions: str = "learned"
    prefix: int = 1
    refused: tuple[str, ...] = ()  # first_attention's reasons; empty: it matches the eager attention
    extra: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.model_type + ("-" + "-".join(f"{k}" for k in self.extra) if self.extra else "")


HF_FAMILIES = [
    # decoders: the query is the last token
    HF("llama", "LlamaModel", dict(TEXT, num_key_value_heads=2), "last", "rotary",
       refused=("rotary positions", "grouped key/value heads")),
    HF("mistral", "MistralModel", dict(TEXT, num_key_value_heads=2), "last", "rotary",
       refused=("rotary positions", "grouped key/value heads")),
    HF("qwen2", "Qwen2Model", dict(TEXT, num_key_value_heads=2), "last", "rotary",
       refused=("rotary positions", "grouped key/value heads")),
    HF("qwen3", "Qwen3Model", dict(TEXT, num_key_value_heads=2, head_dim=8), "last", "rotary",
       refused=("rotary positions", "grouped key/value heads", "query/key norms")),
    HF("gemma2", "Gemma2Model", dict(TEXT, num_key_value_heads=2, head_dim=8), "last", "rotary",
       refused=("rotary positions", "grouped key/value heads", "logit soft-capping")),
    HF("phi3", "Phi3Model", dict(TEXT, num_key_value_heads=HEADS, **SPECIAL), "last", "rotary", refused=("rotary positions",)),
    HF("gpt_neox", "GPTNeoXModel", dict(TEXT), "last", "rotary", refused=("rotary positions",)),
    HF("opt", "OPTModel", dict(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, ffn_dim=64, vocab_size=100,
                               max_position_embeddings=64, word_embed_proj_dim=D, **SPECIAL), "last"),
    # encoders: the query is token 0 ([CLS] / <s>)
    HF("bert", "BertModel", dict(TEXT), "first"),
    HF("roberta", "RobertaModel", dict(TEXT, max_position_embeddings=66, **SPECIAL), "first"),
    HF("distilbert", "DistilBertModel", dict(dim=D, n_layers=LAYERS, n_heads=HEADS, hidden_dim=64, vocab_size=100,
                                             max_position_embeddings=64), "first"),
    HF("deberta-v2", "DebertaV2Model", dict(TEXT, relative_attention=True, position_biased_input=False,
                                            pos_att_type=["p2c", "c2p"], max_relative_positions=16), "first", "relative",
       refused=("relative attention",)),
    HF("electra", "ElectraModel", dict(TEXT, embedding_size=16), "first"),
    HF("modernbert", "ModernBertModel", dict(TEXT, global_attn_every_n_layers=2, local_attention=8, cls_token_id=1,
                                             sep_token_id=2, **SPECIAL), "first", "rotary", refused=("rotary positions",)),
    # vision: the query is the class token (token 0)
    HF("vit", "ViTModel", IMAGE, "first"),
    HF("deit", "DeiTModel", IMAGE, "first", prefix=2),  # class + distillation token
    HF("dinov2", "Dinov2Model", IMAGE, "first"),
    HF("dinov2_with_registers", "Dinov2WithRegistersModel", dict(IMAGE, num_register_tokens=3), "first", prefix=4),
    HF("beit", "BeitModel", dict(IMAGE, use_relative_position_bias=True), "first", "relative",
       refused=("relative attention",)),
    HF("beit", "BeitModel", IMAGE, "first", "none", extra={"no-relative-bias": True}),
    HF("data2vec-vision", "Data2VecVisionModel", dict(IMAGE, use_relative_position_bias=True), "first", "relative",
       refused=("relative attention",)),
    HF("clip_vision_model", "CLIPVisionModel", IMAGE, "first"),
    HF("clip", "CLIPModel", dict(vision_config=IMAGE, text_config=dict(TEXT, **SPECIAL)), "first"),
    HF("siglip_vision_model", "SiglipVisionModel", IMAGE, "none", prefix=0),
    HF("siglip", "SiglipModel", dict(vision_config=IMAGE, text_config=dict(TEXT, **SPECIAL)), "none", prefix=0),
]


def _needs(cls: str):
    if not hasattr(transformers, cls):
        pytest.skip(f"transformers {transformers.__version__} has no {cls}: the family is newer than this release")


def _save_hf(case: HF, folder):
    _needs(case.cls)
    cfg = transformers.AutoConfig.for_model(case.model_type, **case.config)
    torch.manual_seed(0)
    model = getattr(transformers, case.cls)(cfg).eval()
    model.save_pretrained(str(folder))
    return model


def _reference(model, inputs, attentions=False):
    """(hidden states, attention maps or None) of the model's own forward pass (the vision tower of
    a two-tower model); load it with ``attn_implementation="eager"`` for the maps."""
    module = model.vision_model if model.config.model_type in ("clip", "siglip") else model
    with torch.no_grad():
        out = module(**inputs, output_hidden_states=True, output_attentions=attentions)
    return out.hidden_states, (out.attentions if attentions else None)


def _text_ids(b=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 100, (b, N_TEXT), generator=g)


@pytest.mark.parametrize("case", HF_FAMILIES, ids=lambda c: c.id)
def test_transformers_family(case, tmp_path):
    model = _save_hf(case, tmp_path)
    text = case.query != "none" and "image_size" not in case.config and "vision_config" not in case.config
    pm = load_model(str(tmp_path), weights="trained", device="cpu", **({"context_length": N_TEXT} if text else {}))
    i = pm.info
    assert (i.backend, i.family, i.modality, i.d, i.positions) == ("hf", case.model_type, "text" if text else "image", D,
                                                                    case.positions)
    assert i.n == (N_TEXT if text else PATCHES + case.prefix)
    assert i.query_index == {"first": 0, "last": i.n - 1, "none": None}[case.query]
    x = pm.preprocess(_text_ids()) if text else pm.preprocess(images(3))
    out = pm.capture(x, [0, 1])
    hs, _ = _reference(model, x)
    for k in (0, 1):
        torch.testing.assert_close(out[k], hs[k], atol=TOL, rtol=0)
    _check_query_row(pm, case, x, out, text)
    _check_attention(pm, case, tmp_path, x)


def _check_query_row(pm, case, x, out, text):
    qi = pm.info.query_index
    if text:
        # at layer 0 the query row holds the query position's token alone: change that token, only that row moves
        ids = x["input_ids"].clone()
        ids[:, qi] = (ids[:, qi] + 1 - 3) % 97 + 3
        moved = (pm.capture({**x, "input_ids": ids}, [0])[0] - out[0]).abs().amax(dim=(0, 2))
        assert moved[qi] > 0 and torch.count_nonzero(moved) == 1
        if case.query == "last":  # causal: the last token's change leaves every earlier row of block 1 as it was
            after = pm.capture({**x, "input_ids": ids}, [1])[1]
            torch.testing.assert_close(after[:, :-1], out[1][:, :-1], atol=TOL, rtol=0)
        return
    # images: the prefix tokens (class, distillation, registers) do not depend on the pixels, the patches do
    prefix = case.prefix
    assert pm.info.query_token.startswith("none" if qi is None else "token 0 (class token")
    e = out[0]
    torch.testing.assert_close(e[1:, :prefix], e[:1, :prefix].expand(e.shape[0] - 1, -1, -1), atol=TOL, rtol=0)
    assert (e[1:, prefix:] - e[:1, prefix:]).abs().amax() > 1e-3
    cls = getattr(getattr(pm.module, "embeddings", None), "cls_token", None)
    if cls is not None:  # row 0 is the model's own class token (plus its position, where positions are added)
        pos = getattr(pm.module.embeddings, "position_embeddings", None)
        row = cls[0, 0] + (pos[0, 0] if isinstance(pos, torch.Tensor) else 0)
        torch.testing.assert_close(e[0, qi], row, atol=TOL, rtol=0)


def _check_attention(pm, case, folder, x):
    if case.refused:
        with pytest.raises(ModelError, match="not of the form capacity expresses") as err:
            first_attention(pm, 1)
        for reason in case.refused:
            assert reason in str(err.value)
        return
    eager = getattr(transformers, case.cls).from_pretrained(str(folder), attn_implementation="eager").eval()
    hs, att = _reference(eager, x, attentions=True)
    for k in (1, 2):
        torch.testing.assert_close(first_attention(pm, k).probs(hs[k - 1]), att[k - 1], atol=TOL, rtol=0)


# ---------------------------------------------------------------------------------------------- timm

TIMM_ARGS = dict(img_size=32, patch_size=8, embed_dim=D, depth=LAYERS, num_heads=HEADS)
TIMM_FAMILIES = [
    # (timm name, family, tokens before the patches, positions, capacity refusal reasons)
    ("vit_tiny_patch16_224", "vit", 1, "learned", ()),
    ("deit_tiny_distilled_patch16_224", "deit", 2, "learned", ()),
    ("eva02_tiny_patch14_224", "eva02", 1, "learned + rotary", ("rotary positions",)),
    ("beit_base_patch16_224", "beit", 1, "relative", ("relative attention",)),
    ("vit_small_patch14_dinov2", "dinov2", 1, "learned", ()),
    ("vit_small_patch14_reg4_dinov2", "dinov2", 5, "learned", ()),
    ("vit_base_patch16_siglip_224", "siglip", 0, "learned", ()),
]


def _save_timm(name, folder):
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=0, **TIMM_ARGS).eval()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architecture": name, "model_args": TIMM_ARGS}))
    return model


@pytest.mark.parametrize("name, family, prefix, positions, refused", TIMM_FAMILIES, ids=[t[0] for t in TIMM_FAMILIES])
def test_timm_family(name, family, prefix, positions, refused, tmp_path):
    model = _save_timm(name, tmp_path)
    pm = load_model(str(tmp_path), weights="trained", device="cpu")
    i = pm.info
    assert (i.backend, i.family, i.n, i.d, i.positions) == ("timm", family, PATCHES + prefix, D, positions)
    assert i.query_index == (0 if prefix else None)
    x = pm.preprocess(images(3))
    out = pm.capture(x, [0, 1, 2])
    with torch.no_grad():
        inter = model.forward_intermediates(x["pixel_values"], indices=[0, 1], return_prefix_tokens=True, norm=False,
                                            output_fmt="NLC", intermediates_only=True)
    for k, t in enumerate(inter, start=1):  # block k's output, prefix tokens first
        ref = torch.cat([t[1], t[0]], dim=1) if isinstance(t, tuple) else t
        torch.testing.assert_close(out[k], ref, atol=TOL, rtol=0)
    if family not in ("eva02", "beit"):  # layer 0 is what block 1 sees (EVA-02, BEiT: the test below)
        with torch.no_grad():
            torch.testing.assert_close(model.blocks[0](out[0]), out[1], atol=TOL, rtol=0)
    e = out[0]
    torch.testing.assert_close(e[1:, :prefix], e[:1, :prefix].expand(2, -1, -1), atol=TOL, rtol=0)
    assert (e[1:, prefix:] - e[:1, prefix:]).abs().amax() > 1e-3
    if refused:
        with pytest.raises(ModelError, match="not of the form capacity expresses") as err:
            first_attention(pm, 1)
        assert all(r in str(err.value) for r in refused)
    else:
        blk = model.blocks[0]
        h = blk.norm1(out[0])
        B, n, _ = h.shape
        qkv = blk.attn.qkv(h).reshape(B, n, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        ref = torch.softmax(qkv[0] @ qkv[1].transpose(-1, -2) * blk.attn.scale, -1)
        torch.testing.assert_close(first_attention(pm, 1).probs(out[0]), ref, atol=TOL, rtol=0)


def test_timm_eva_and_beit_layer0_is_the_input_of_block1(tmp_path):
    """EVA-02 and BEiT blocks take their position terms as arguments: layer 0 fed to block 1 with
    them gives block 1's output."""
    for name in ("eva02_tiny_patch14_224", "beit_base_patch16_224"):
        folder = tmp_path / name
        folder.mkdir()
        model = _save_timm(name, folder)
        pm = load_model(str(folder), weights="trained", device="cpu")
        out = pm.capture(pm.preprocess(images(2)), [0, 1])
        with torch.no_grad():
            if name.startswith("eva"):
                _, rope = model._pos_embed(model.patch_embed(pm.preprocess(images(2))["pixel_values"]))
                y = model.blocks[0](out[0], rope=rope)
            else:
                rel = model.rel_pos_bias() if model.rel_pos_bias is not None else None
                y = model.blocks[0](out[0], shared_rel_pos_bias=rel)
        torch.testing.assert_close(y, out[1], atol=TOL, rtol=0)


# ---------------------------------------------------------------------------------------------- the CLI, end to end

from clitools import assert_one_error, run  # noqa: E402

_CASES = {c.id: c for c in HF_FAMILIES}
N_CLI = 16  # BERT-style pairs need n >= 13
SMALL = ["--limit", "24", "--samples", "40", "--batch-size", "8", "--device", "cpu"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Saved tiny folders by family id, made on first use."""
    made = {}

    def get(key):
        if key not in made:
            folder = tmp_path_factory.mktemp(key)
            if key in _CASES:
                _save_hf(_CASES[key], folder)
            else:
                _save_timm(key, folder)
            made[key] = folder
        return made[key]

    return get


@pytest.fixture
def folder(capsys, folders):
    """A saved tiny folder by family id; the library's own save messages are not the command's output."""

    def get(key):
        path = folders(key)
        capsys.readouterr()
        return path

    return get


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    words = [f"word{i % 37}" for i in range(4000)]
    path = tmp_path_factory.mktemp("text") / "text.txt"
    path.write_text("\n\n".join(" ".join(words[i:i + 200]) for i in range(0, 4000, 200)))
    return path


def test_check_rotary_decoder_says_layer0_has_no_positions(capsys, folder, text_file):
    rc, out, err = run(capsys, "check", folder("llama"), "--variants", "random", "--context-length", N_CLI,
                       "--data", text_file, *SMALL)
    assert rc == 0, err
    flat = " ".join(out.split())
    assert "At layer 0, llama adds no position embedding to its embedding output (its positions are rotary" in flat
    rc, out, err = run(capsys, "check", folder("llama"), "--variants", "random", "--context-length", N_CLI,
                       "--data", text_file, "--format", "json", *SMALL)
    meta = json.loads(out)["meta"]["model_info"]
    assert (meta["positions"], meta["query_index"], meta["query_token"]) == ("rotary", N_CLI - 1, f"token {N_CLI - 1} (last token)")


@pytest.mark.parametrize("key", ["distilbert", "opt", "modernbert"])
def test_check_text_families(capsys, folder, text_file, key):
    rc, out, err = run(capsys, "check", folder(key), "--variants", "random", "--context-length", N_CLI,
                       "--data", text_file, "--format", "json", *SMALL)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["meta"]["model_info"]["family"] == key
    assert {r["layer"] for r in doc["records"]} == {0, 1}


@pytest.mark.parametrize("key", ["dinov2_with_registers", "clip", "eva02_tiny_patch14_224", "deit_tiny_distilled_patch16_224"])
def test_check_image_families(capsys, folder, image_dir, key):
    rc, out, err = run(capsys, "check", folder(key), "--data", image_dir, "--format", "json", *SMALL)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["meta"]["model_info"]["query_index"] == 0
    assert {r["variant"] for r in doc["records"]} == {"embedding", "random-attention", "random", "trained"}


@pytest.mark.parametrize("key", ["siglip_vision_model", "vit_base_patch16_siglip_224"])
def test_siglip_needs_a_query_index(capsys, folder, image_dir, key):
    """The one decision for both backends: no class token, so no query of its own; --query-index names one."""
    rc, out, err = run(capsys, "check", folder(key), "--data", image_dir, *SMALL)
    assert_one_error(rc, err, "has no query token of its own (SigLIP has no class token")
    assert "--query-index K (0 to 15)" in err
    rc, out, err = run(capsys, "check", folder(key), "--data", image_dir, "--query-index", "0", "--format", "json", *SMALL)
    assert rc == 0, err
    meta = json.loads(out)["meta"]["model_info"]
    assert (meta["query_index"], meta["query_token"]) == (0, "token 0 (--query-index)")
    rc, out, err = run(capsys, "capacity", folder(key), "--data", image_dir, *SMALL)
    assert_one_error(rc, err, "capacity reads the model's own query")


@pytest.mark.parametrize("key, reasons", [
    ("llama", "rotary positions, grouped key/value heads"),
    ("gemma2", "rotary positions, grouped key/value heads, logit soft-capping"),
    ("deberta-v2", "relative attention"),
    ("beit_base_patch16_224", "relative attention"),
])
def test_capacity_refuses_attention_it_cannot_express(capsys, folder, text_file, image_dir, key, reasons):
    data = image_dir if key.startswith("beit") else text_file
    extra = [] if key.startswith("beit") else ["--context-length", N_CLI]
    if key in _CASES:
        _needs(_CASES[key].cls)
    rc, _out, err = run(capsys, "capacity", folder(key), "--variants", "random", "--data", data, *extra, *SMALL)
    line = assert_one_error(rc, err, "is not of the form capacity expresses")
    assert f"it has {reasons};" in line and "--attention random" in line
    rc, _out, err = run(capsys, "capacity", folder(key), "--variants", "random", "--attention", "random", "--data", data,
                       *extra, "--format", "json", *SMALL)
    assert rc == 0, err


@pytest.mark.parametrize("key", ["opt", "distilbert", "clip_vision_model"])
def test_capacity_reads_supported_families(capsys, folder, text_file, image_dir, key):
    image = key.startswith("clip")
    extra = ["--data", image_dir] if image else ["--data", text_file, "--context-length", N_CLI]
    rc, out, err = run(capsys, "capacity", folder(key), "--variants", "random", *extra, "--format", "json", *SMALL)
    assert rc == 0, err
    doc = json.loads(out)
    assert any("the model's own block 2 attention" in n for n in doc["meta"]["notes"])  # the default block


@pytest.mark.parametrize("name", [t[0] for t in TIMM_FAMILIES])
def test_timm_random_weights_do_not_depend_on_the_depth_built(name, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architecture": name, "model_args": dict(TIMM_ARGS, depth=3)}))
    full = load_model(str(tmp_path), backend="timm", seed=1, device="cpu")
    one = load_model(str(tmp_path), backend="timm", seed=1, device="cpu", max_layer=1)
    assert (full.built_layers, one.built_layers, one.info.num_layers) == (3, 1, 3)
    x = full.preprocess(images(2))
    torch.testing.assert_close(one.capture(x, [0, 1])[1], full.capture(x, [0, 1])[1], atol=0, rtol=0)


def test_unsupported_families_are_one_line_naming_the_supported_ones(capsys, tmp_path, image_dir):
    swin = tmp_path / "swin"
    transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 1],
                            window_size=2).save_pretrained(str(swin))
    capsys.readouterr()
    rc, _out, err = run(capsys, "check", swin, "--data", image_dir, *SMALL)
    line = assert_one_error(rc, err, "cannot be probed: Swin merges patches")
    assert "supported: transformers gpt2, " in line and "llama" in line and "timm vit_*siglip*" in line
    rc, _out, err = run(capsys, "check", "timm:resnet18", "--data", image_dir, *SMALL)
    line = assert_one_error(rc, err, "is not a ViT-style token transformer")
    assert "eva02*" in line
