"""Every model family mhaaudit registers, loaded through the real loading code from a tiny random
model saved with its library's own writer (transformers ``save_pretrained``; timm
``create_model`` + safetensors ``save_file``), offline.

The families come from the registry itself (:data:`mhaaudit.models.families.FAMILIES` and
:data:`~mhaaudit.models.families.TIMM_FAMILIES`), and each has a hand-written tiny configuration
under ``fixtures/families/<backend>/<family>/``: ``config.json`` (a transformers config, or a timm
folder's ``{"architecture", "model_args"}``) and ``expected.json`` (what mhaaudit must find: the
query token, the positions at layer 0, the tokens before the patches, and the reasons capacity
refuses the attention, empty where it reads it). A registered family without a fixture, or a
fixture of no registered family, fails here. A folder ``<family>@<variant>`` is a further case of
the same family (another config of it).

For each family: the probe points (layer 0 = embedding output, layer 1 = output of block 1) equal
the library's own ``output_hidden_states`` (transformers) or ``forward_intermediates`` (timm) on
the same inputs; the query row is the right token (the class token before any distillation or
register tokens, [CLS] / <s>, the last token); ``first_attention`` either reproduces the
library's eager attention maps or refuses with the reason (rotary positions, grouped key/value
heads, query/key norms, soft-capping, relative attention, ALiBi, local windows). A family whose model type the
installed transformers lacks is skipped, saying so.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import FIXTURES
from modeltools import TOL, images

from mhaaudit.errors import ModelError
from mhaaudit.models import first_attention, load_model
from mhaaudit.models.families import FAMILIES, TIMM_FAMILIES

transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")

FAMILY_FIXTURES = FIXTURES / "families"
D, HEADS = 32, 4  # every fixture's width and heads
N_TEXT, PATCHES = 8, 16  # tokens of a text example; patches of a 32 x 32 image in 8 x 8 patches
TIMM_NAMES = sorted({name for _pattern, name, _fam in TIMM_FAMILIES})


@dataclass(frozen=True)
class Case:
    """One fixture folder ``fixtures/families/<backend>/<key>``: its config and what mhaaudit must find."""

    backend: str  # "transformers" | "timm"
    key: str  # the family, or "<family>@<variant>"
    config: dict
    query: str  # first | last | none
    positions: str
    prefix: int  # image tokens before the patches (class, distillation, registers)
    refused: tuple[str, ...]  # first_attention's reasons; empty: it matches the eager attention

    @property
    def family(self) -> str:
        return self.key.split("@")[0]

    @property
    def folder(self) -> Path:
        return FAMILY_FIXTURES / self.backend / self.key


def case(backend: str, key: str) -> Case:
    """The fixture of ``key``; a registered family without one fails the test that asks for it."""
    folder = FAMILY_FIXTURES / backend / key
    if not (folder / "config.json").is_file() or not (folder / "expected.json").is_file():
        pytest.fail(
            f"{backend} family {key!r} is registered but has no fixture: add {folder}/config.json and expected.json"
        )
    exp = json.loads((folder / "expected.json").read_text())
    return Case(
        backend,
        key,
        json.loads((folder / "config.json").read_text()),
        exp.get("query", "first"),
        exp["positions"],
        exp.get("prefix", 1),
        tuple(exp["attention"]),
    )


def variants(backend: str) -> list[str]:
    """The further cases of registered families: fixture folders named ``<family>@<variant>``."""
    return sorted(p.name for p in (FAMILY_FIXTURES / backend).iterdir() if "@" in p.name)


HF_KEYS = sorted(FAMILIES) + variants("transformers")
TIMM_KEYS = TIMM_NAMES + variants("timm")


@pytest.mark.parametrize("backend, registered", [("transformers", set(FAMILIES)), ("timm", set(TIMM_NAMES))])
def test_every_fixture_is_of_a_registered_family(backend, registered):
    folders = {p.name.split("@")[0] for p in (FAMILY_FIXTURES / backend).iterdir()}
    assert folders - registered == set(), f"fixtures of unregistered families in {FAMILY_FIXTURES / backend}"
    assert registered - folders == set(), "registered families without a fixture"


def test_every_fixture_is_tiny():
    for path in FAMILY_FIXTURES.rglob("config.json"):
        cfg = json.loads(path.read_text())
        cfg = cfg.get("model_args", cfg.get("vision_config", cfg))
        width = cfg.get("hidden_size", cfg.get("n_embd", cfg.get("dim", cfg.get("embed_dim"))))
        assert width == D, path


def _save_hf(case: Case, folder):
    try:
        cfg = transformers.AutoConfig.from_pretrained(str(case.folder))
    except (KeyError, ValueError) as err:
        pytest.skip(f"transformers {transformers.__version__} does not know model type {case.family!r}: {err}")
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(cfg).eval()
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


@pytest.mark.parametrize("key", HF_KEYS)
def test_transformers_family(key, tmp_path):
    case_ = case("transformers", key)
    registered = FAMILIES[case_.family]
    assert registered.query == case_.query
    model = _save_hf(case_, tmp_path)
    text = registered.modality == "text"
    pm = load_model(str(tmp_path), weights="trained", device="cpu", **({"context_length": N_TEXT} if text else {}))
    i = pm.info
    assert (i.backend, i.family, i.modality, i.d, i.positions) == (
        "hf",
        case_.family,
        registered.modality,
        D,
        case_.positions,
    )
    assert i.n == (N_TEXT if text else PATCHES + case_.prefix)
    assert i.query_index == {"first": 0, "last": i.n - 1, "none": None}[case_.query]
    x = pm.preprocess(_text_ids() if text else images(3))
    out = pm.capture(x, [0, 1])
    hs, _ = _reference(model, x)
    for k in (0, 1):
        torch.testing.assert_close(out[k], hs[k], atol=TOL, rtol=0)
    _check_query_row(pm, case_, x, out, text)
    _check_attention(pm, case_, tmp_path, x)


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
    eager = transformers.AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    hs, att = _reference(eager, x, attentions=True)
    for k in (1, 2):
        torch.testing.assert_close(first_attention(pm, k).probs(hs[k - 1]), att[k - 1], atol=TOL, rtol=0)


# ---------------------------------------------------------------------------------------------- timm


def _save_timm(case: Case, folder):
    """The fixture's model built with random weights, saved as a timm folder (its config.json and model.safetensors)."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = timm.create_model(
        case.config["architecture"], pretrained=False, num_classes=0, **case.config["model_args"]
    ).eval()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    shutil.copyfile(case.folder / "config.json", folder / "config.json")
    return model


@pytest.mark.parametrize("key", TIMM_KEYS)
def test_timm_family(key, tmp_path):
    case_ = case("timm", key)
    family, prefix, refused = case_.family, case_.prefix, case_.refused
    model = _save_timm(case_, tmp_path)
    pm = load_model(str(tmp_path), weights="trained", device="cpu")
    i = pm.info
    assert (i.backend, i.family, i.n, i.d, i.positions) == ("timm", family, PATCHES + prefix, D, case_.positions)
    assert i.query_index == (0 if prefix else None)
    x = pm.preprocess(images(3))
    out = pm.capture(x, [0, 1, 2])
    with torch.no_grad():
        inter = model.forward_intermediates(
            x["pixel_values"],
            indices=[0, 1],
            return_prefix_tokens=True,
            norm=False,
            output_fmt="NLC",
            intermediates_only=True,
        )
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
        torch.testing.assert_close(
            first_attention(pm, 1).probs(out[0]), _timm_attention(model.blocks[0], out[0]), atol=TOL, rtol=0
        )


def _timm_attention(blk, x):
    """The attention maps of a timm block on its input, from its own fused or separate projections."""
    h = blk.norm1(x)
    B, n, _ = h.shape
    att = blk.attn
    if getattr(att, "qkv", None) is not None:
        qkv = att.qkv(h)
        if getattr(att, "q_bias", None) is not None:  # EVA: the bias kept apart from the fused weight
            qkv = qkv + torch.cat([att.q_bias, att.k_bias, att.v_bias])
        q, k, _v = qkv.reshape(B, n, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
    else:
        q, k = (p(h).reshape(B, n, HEADS, D // HEADS).transpose(1, 2) for p in (att.q_proj, att.k_proj))
    return torch.softmax(q @ k.transpose(-1, -2) * att.scale, -1)


def test_timm_eva_and_beit_layer0_is_the_input_of_block1(tmp_path):
    """EVA-02 and BEiT blocks take their position terms as arguments: layer 0 fed to block 1 with
    them gives block 1's output."""
    for key in ("eva02", "beit"):
        folder = tmp_path / key
        folder.mkdir()
        model = _save_timm(case("timm", key), folder)
        pm = load_model(str(folder), weights="trained", device="cpu")
        out = pm.capture(pm.preprocess(images(2)), [0, 1])
        with torch.no_grad():
            if key == "eva02":
                _, rope = model._pos_embed(model.patch_embed(pm.preprocess(images(2))["pixel_values"]))
                y = model.blocks[0](out[0], rope=rope)
            else:
                rel = model.rel_pos_bias() if model.rel_pos_bias is not None else None
                y = model.blocks[0](out[0], shared_rel_pos_bias=rel)
        torch.testing.assert_close(y, out[1], atol=TOL, rtol=0)


# ---------------------------------------------------------------------------------------------- the CLI, end to end

from clitools import assert_one_error, run  # noqa: E402

N_CLI = 16  # BERT-style pairs need n >= 13
SMALL = ["--limit", "24", "--samples", "40", "--batch-size", "8", "--device", "cpu"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Saved tiny folders by fixture key (``timm/<key>`` for timm's), made on first use."""
    made = {}

    def get(key):
        if key not in made:
            folder = tmp_path_factory.mktemp(key.replace("/", "-"))
            if key.startswith("timm/"):
                _save_timm(case("timm", key[5:]), folder)
            else:
                _save_hf(case("transformers", key), folder)
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
    path.write_text("\n\n".join(" ".join(words[i : i + 200]) for i in range(0, 4000, 200)))
    return path


def test_check_rotary_decoder_says_layer0_has_no_positions(capsys, folder, text_file):
    rc, out, err = run(
        capsys, "check", folder("llama"), "--variants", "random", "--context-length", N_CLI, "--data", text_file, *SMALL
    )
    assert rc == 0, err
    flat = " ".join(out.split())
    assert "At layer 0, llama adds no position embedding to its embedding output (its positions are rotary" in flat
    rc, out, err = run(
        capsys,
        "check",
        folder("llama"),
        "--variants",
        "random",
        "--context-length",
        N_CLI,
        "--data",
        text_file,
        "--format",
        "json",
        *SMALL,
    )
    meta = json.loads(out)["meta"]["model_info"]
    assert (meta["positions"], meta["query_index"], meta["query_token"]) == (
        "rotary",
        N_CLI - 1,
        f"token {N_CLI - 1} (last token)",
    )


@pytest.mark.parametrize("key", ["distilbert", "opt", "modernbert"])
def test_check_text_families(capsys, folder, text_file, key):
    rc, out, err = run(
        capsys,
        "check",
        folder(key),
        "--variants",
        "random",
        "--context-length",
        N_CLI,
        "--data",
        text_file,
        "--format",
        "json",
        *SMALL,
    )
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["meta"]["model_info"]["family"] == key
    assert {r["layer"] for r in doc["records"]} == {0, 1}


@pytest.mark.parametrize("key", ["dinov2_with_registers", "clip", "timm/eva02", "timm/deit"])
def test_check_image_families(capsys, folder, image_dir, key):
    rc, out, err = run(capsys, "check", folder(key), "--data", image_dir, "--format", "json", *SMALL)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["meta"]["model_info"]["query_index"] == 0
    assert {r["variant"] for r in doc["records"]} == {"embedding", "random-attention", "random", "trained"}


@pytest.mark.parametrize("key", ["siglip_vision_model", "timm/siglip"])
def test_siglip_needs_a_query_index(capsys, folder, image_dir, key):
    """The one decision for both backends: no class token, so no query of its own; --query-index names one."""
    rc, out, err = run(capsys, "check", folder(key), "--data", image_dir, *SMALL)
    assert_one_error(rc, err, "has no query token of its own (SigLIP has no class token")
    assert "--query-index K (0 to 15)" in err
    rc, out, err = run(
        capsys, "check", folder(key), "--data", image_dir, "--query-index", "0", "--format", "json", *SMALL
    )
    assert rc == 0, err
    meta = json.loads(out)["meta"]["model_info"]
    assert (meta["query_index"], meta["query_token"]) == (0, "token 0 (--query-index)")
    rc, out, err = run(capsys, "capacity", folder(key), "--data", image_dir, *SMALL)
    assert_one_error(rc, err, "capacity reads the model's own query")


@pytest.mark.parametrize(
    "key, reasons",
    [
        ("llama", "rotary positions, grouped key/value heads"),
        ("gemma2", "rotary positions, grouped key/value heads, logit soft-capping"),
        ("deberta-v2", "relative attention"),
        ("gpt_neo@local", "local (windowed) attention"),
        ("gpt_bigcode", "grouped key/value heads"),
        ("timm/beit", "relative attention"),
    ],
)
def test_capacity_refuses_attention_it_cannot_express(capsys, folder, text_file, image_dir, key, reasons):
    data = image_dir if key.startswith("timm/") else text_file
    extra = [] if key.startswith("timm/") else ["--context-length", N_CLI]
    rc, _out, err = run(capsys, "capacity", folder(key), "--variants", "random", "--data", data, *extra, *SMALL)
    line = assert_one_error(rc, err, "is not of the form capacity expresses")
    assert f"it has {reasons};" in line and "--attention random" in line
    rc, _out, err = run(
        capsys,
        "capacity",
        folder(key),
        "--variants",
        "random",
        "--attention",
        "random",
        "--data",
        data,
        *extra,
        "--format",
        "json",
        *SMALL,
    )
    assert rc == 0, err


@pytest.mark.parametrize("key", ["opt", "distilbert", "clip_vision_model", "ctrl", "gpt_neo", "gpt_bigcode@multi-head"])
def test_capacity_reads_supported_families(capsys, folder, text_file, image_dir, key):
    image = key.startswith("clip")
    extra = ["--data", image_dir] if image else ["--data", text_file, "--context-length", N_CLI]
    rc, out, err = run(capsys, "capacity", folder(key), "--variants", "random", *extra, "--format", "json", *SMALL)
    assert rc == 0, err
    doc = json.loads(out)
    assert any("the model's own block 2 attention" in n for n in doc["meta"]["notes"])  # the default block


@pytest.mark.parametrize("key", TIMM_KEYS)
def test_timm_random_weights_do_not_depend_on_the_depth_built(key, tmp_path):
    cfg = case("timm", key).config
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "model_args": dict(cfg["model_args"], depth=3)}))
    full = load_model(str(tmp_path), backend="timm", seed=1, device="cpu")
    one = load_model(str(tmp_path), backend="timm", seed=1, device="cpu", max_layer=1)
    assert (full.built_layers, one.built_layers, one.info.num_layers) == (3, 1, 3)
    x = full.preprocess(images(2))
    torch.testing.assert_close(one.capture(x, [0, 1])[1], full.capture(x, [0, 1])[1], atol=0, rtol=0)


def test_unsupported_families_are_one_line_naming_the_supported_ones(capsys, tmp_path, image_dir):
    swin = tmp_path / "swin"
    transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 1], window_size=2
    ).save_pretrained(str(swin))
    capsys.readouterr()
    rc, _out, err = run(capsys, "check", swin, "--data", image_dir, *SMALL)
    line = assert_one_error(rc, err, "cannot be probed: Swin merges patches")
    assert "supported: transformers gpt2, " in line and "llama" in line and "timm vit_*siglip*" in line
    rc, _out, err = run(capsys, "check", "timm:resnet18", "--data", image_dir, *SMALL)
    line = assert_one_error(rc, err, "is not a ViT-style token transformer")
    assert "eva02*" in line
