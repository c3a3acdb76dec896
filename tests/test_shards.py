"""Only the weights an audit needs: sharded safetensors checkpoints read tensor by tensor, local and from the hub.

Tiny random models are saved with ``save_pretrained`` and a small ``max_shard_size`` so that the
blocks spread over several shard files; the loading code of mhaaudit reads them back.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from clitools import assert_one_error, run
from hubtools import FakeHub, byte_tokenizer

from mhaaudit.errors import ModelError
from mhaaudit.models import load_model
from mhaaudit.models.shards import INDEX_FILE, WeightsRead, human_bytes, used_parameters

transformers = pytest.importorskip("transformers")


def _llama_config(layers=6):
    return transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=300,
        max_position_embeddings=64,
    )


def _save(model, folder, shard="60KB"):
    model.save_pretrained(str(folder), max_shard_size=shard)
    return folder


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(_llama_config()).to(torch.bfloat16)
    folder = _save(model, tmp_path_factory.mktemp("llama"))
    byte_tokenizer().save_pretrained(str(folder))
    return folder


def _weight_map(folder):
    return json.loads((folder / INDEX_FILE).read_text())["weight_map"]


def _block_of(key):
    parts = key.split(".")
    for i, p in enumerate(parts[:-1]):
        if p in ("layers", "h", "layer") and parts[i + 1].isdigit():
            return int(parts[i + 1])
    return None


def _files_needed(folder, depth):
    """The shard files holding tensors of the embeddings or of blocks < depth."""
    out = set()
    for key, fn in _weight_map(folder).items():
        b = _block_of(key)
        if (b is not None and b < depth) or "embed" in key or "wte" in key or "wpe" in key or "embeddings" in key:
            out.add(fn)
    return out


def _reference(folder, ids):
    ref = transformers.AutoModel.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():
        return ref(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True).hidden_states


def _ids(n=12, b=2):
    return torch.randint(0, 100, (b, n), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("depth", [1, 3])
def test_partial_load_equals_full_model(llama_dir, depth):
    pm = load_model(str(llama_dir), weights="trained", max_layer=depth, context_length=12, device="cpu")
    ids = _ids()
    got = pm.capture({"input_ids": ids}, [0, depth])
    ref = _reference(llama_dir, ids)
    for k in (0, depth):
        assert torch.equal(got[k], ref[k].to(got[k].dtype)), k
    read = pm.info.weights_read
    total = json.loads((llama_dir / INDEX_FILE).read_text())["metadata"]["total_size"]
    assert read["method"] == "partial" and read["stored_dtype"] == "bfloat16"
    assert read["bytes_total"] == total and 0 < read["bytes_read"] < total
    assert read["files_read"] == len(_files_needed(llama_dir, depth)) < read["files_total"]
    assert got[0].dtype == torch.float32  # stored in bfloat16, computed in float32


def test_shards_of_deeper_blocks_are_never_opened(llama_dir, tmp_path, monkeypatch):
    import safetensors

    needed = _files_needed(llama_dir, 1)
    folder = tmp_path / "partial"
    shutil.copytree(llama_dir, folder)
    removed = [f for f in set(_weight_map(folder).values()) if f not in needed]
    assert removed
    for f in removed:  # a file that is not there cannot have been read
        os.unlink(folder / f)
    opened = []
    real = safetensors.safe_open

    def recording(path, *a, **kw):
        opened.append(os.path.basename(str(path)))
        return real(path, *a, **kw)

    monkeypatch.setattr(safetensors, "safe_open", recording)
    pm = load_model(str(folder), weights="trained", max_layer=1, context_length=12, device="cpu")
    assert set(opened) == needed
    ids = _ids()
    assert torch.equal(pm.capture({"input_ids": ids}, [1])[1], _reference(llama_dir, ids)[1])


def test_final_norm_and_head_are_not_used(llama_dir):
    pm = load_model(str(llama_dir), weights="trained", max_layer=1, context_length=12, device="cpu")
    used = used_parameters(pm.module, lambda: pm.capture({"input_ids": _ids()}, [1]))
    assert "embed_tokens.weight" in used and "layers.0.self_attn.q_proj.weight" in used
    assert "norm.weight" not in used


def test_a_weight_used_through_its_transpose_counts():
    """``x @ self.weight.T`` (Falcon's Linear) uses the weight; reading its shape does not use it."""

    class TLinear(torch.nn.Linear):
        def forward(self, x):
            return x @ self.weight.T

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = TLinear(4, 4, bias=False), torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.a(x) + self.b.weight.shape[0]

    model = Model()
    assert used_parameters(model, lambda: model(torch.ones(1, 4))) == {"a.weight"}


@pytest.mark.parametrize("kind", ["gpt2", "bert"])
def test_partial_load_of_other_layouts(tmp_path, kind):
    """Checkpoints saved from task models (prefixed names, tied heads, pooler) read in part."""
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_embd=32, n_layer=4, n_head=2, vocab_size=100, n_positions=64)
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.BertConfig(
            hidden_size=32,
            num_hidden_layers=4,
            num_attention_heads=2,
            intermediate_size=64,
            vocab_size=100,
            max_position_embeddings=64,
        )
        model = transformers.BertForMaskedLM(cfg)
    folder = _save(model.eval(), tmp_path / kind, shard="30KB")
    assert (folder / INDEX_FILE).exists()
    pm = load_model(str(folder), weights="trained", max_layer=2, context_length=12, device="cpu")
    ids = _ids()
    got = pm.capture({"input_ids": ids}, [0, 2])
    ref = _reference(folder, ids)
    for k in (0, 2):
        torch.testing.assert_close(got[k], ref[k], rtol=0, atol=1e-6)
    assert pm.info.weights_read["method"] == "partial"
    assert pm.info.weights_read["bytes_read"] < pm.info.weights_read["bytes_total"]


def test_single_safetensors_file_read_in_part(tmp_path):
    torch.manual_seed(0)
    folder = tmp_path / "one"
    transformers.LlamaModel(_llama_config(4)).to(torch.float16).save_pretrained(str(folder))
    pm = load_model(str(folder), weights="trained", max_layer=1, context_length=12, device="cpu")
    read = pm.info.weights_read
    assert read["files_total"] == 1 and read["bytes_read"] < read["bytes_total"]
    assert read["stored_dtype"] == "float16" and next(pm.module.parameters()).dtype == torch.float32
    ids = _ids()
    assert torch.equal(pm.capture({"input_ids": ids}, [1])[1], _reference(folder, ids)[1])


def test_the_read_facts_of_a_checkpoint_are_those_its_tensors_give_when_read(tmp_path):
    """``Checkpoint.read_facts`` (what a load reads, from the headers alone: a series says it of a checkpoint it does
    not read again) names each dtype as the tensor safetensors reads is named, and gives for tensors of mixed
    dtypes, tied names included, the bytes, files and tensors the tensors themselves count."""
    from safetensors.torch import save_file

    from mhaaudit.feature_files import safetensors_header
    from mhaaudit.models.shards import SAFETENSORS_DTYPES, Checkpoint

    dtypes = [getattr(torch, name) for name in SAFETENSORS_DTYPES.values() if hasattr(torch, name)]
    tensors = {f"t{i}": torch.zeros(3, 2).to(dt) for i, dt in enumerate(dtypes)}
    save_file(tensors, tmp_path / "all.safetensors")
    header = safetensors_header(str(tmp_path / "all.safetensors"))
    named = {SAFETENSORS_DTYPES[header[k]["dtype"]] for k in tensors}
    assert named == {str(t.dtype).removeprefix("torch.") for t in tensors.values()} and len(named) == len(dtypes)
    parts = {"a.safetensors": {"x": torch.ones(4, 4, dtype=torch.bfloat16)}, "b.safetensors": {"y": torch.ones(2)}}
    for fn, part in parts.items():
        save_file(part, tmp_path / fn)
    weight_map = {"x": "a.safetensors", "y": "b.safetensors"}
    ck = Checkpoint(str(tmp_path), weight_map, 1000, lambda fn: str(tmp_path / fn))
    read = ck.read_facts({"p": "x", "q": "x", "r": "y"})  # two parameters tied to one tensor: read for each
    got = [t for fn, part in parts.items() for k, t in part.items() for _ in range(2 if k == "x" else 1)]
    assert (read.bytes_read, read.tensors_read) == (sum(t.numel() * t.element_size() for t in got), len(got))
    assert (read.method, read.stored_dtype, read.files_read, read.files_total) == ("partial", "bfloat16+float32", 2, 2)
    assert (read.bytes_total, read.tensors_total) == (1000, 2)
    assert ck.read_facts({"r": "y"}).files_read == 1


def test_missing_needed_shard_is_one_error(llama_dir, tmp_path):
    folder = tmp_path / "broken"
    shutil.copytree(llama_dir, folder)
    first = _weight_map(folder)["model.embed_tokens.weight"]
    os.unlink(folder / first)
    with pytest.raises(ModelError, match=f"index names {first}.*missing"):
        load_model(str(folder), weights="trained", max_layer=1, context_length=12, device="cpu")


def test_unreadable_needed_shard_is_one_error(llama_dir, tmp_path):
    folder = tmp_path / "corrupt"
    shutil.copytree(llama_dir, folder)
    first = _weight_map(folder)["model.embed_tokens.weight"]
    (folder / first).write_bytes(b"not a safetensors file")
    with pytest.raises(ModelError, match=f"cannot read {first}"):
        load_model(str(folder), weights="trained", max_layer=1, context_length=12, device="cpu")


def test_unreadable_index_is_one_error(llama_dir, tmp_path):
    folder = tmp_path / "index"
    shutil.copytree(llama_dir, folder)
    (folder / INDEX_FILE).write_text("{not json")
    with pytest.raises(ModelError, match=r"the checkpoint index .* is not JSON"):
        load_model(str(folder), weights="trained", max_layer=1, context_length=12, device="cpu")


# ------------------------------------------------------------------ the hub, served from a local folder


def test_hub_downloads_only_the_needed_shards(llama_dir, tmp_path, monkeypatch):
    hub = FakeHub("org/tiny-llama", llama_dir, tmp_path / "cache").install(monkeypatch)
    pm = load_model("org/tiny-llama", weights="trained", max_layer=1, context_length=12, device="cpu")
    shards = {f for f in hub.requested if f.startswith("model-")}
    assert hub.requested[0] == INDEX_FILE
    assert shards == _files_needed(llama_dir, 1)
    assert "model.safetensors" not in hub.requested
    ids = _ids()
    assert torch.equal(pm.capture({"input_ids": ids}, [1])[1], _reference(llama_dir, ids)[1])
    assert pm.info.weights_read["files_read"] == len(shards)
    assert pm.info.weights_source == "hub org/tiny-llama (local cache)"


def test_weights_read_describe():
    r = WeightsRead("partial", "bfloat16", 3 * 2**20, 2**30, 1, 4, 10, 100)
    assert r.describe() == "read 3 MiB of 1 GiB (0.293 %) of the weights, stored in bfloat16, from 1 of 4 files"
    assert human_bytes(512) == "512 B" and human_bytes(None) == "?"


def test_partial_load_of_an_image_model(vit_dir):
    """A ViT (whose modules some transformers releases renamed, writing checkpoints under the former names)."""
    from PIL import Image

    pm = load_model(str(vit_dir), weights="trained", max_layer=1, device="cpu")
    assert pm.info.weights_read["method"] == "partial"
    assert pm.info.weights_read["bytes_read"] < pm.info.weights_read["bytes_total"]
    x = pm.preprocess([Image.new("RGB", (40, 40), (10, 200, 30))])
    ref = transformers.AutoModel.from_pretrained(str(vit_dir)).eval()
    with torch.no_grad():
        hs = ref(**x, output_hidden_states=True).hidden_states
    got = pm.capture(x, [0, 1])
    for k in (0, 1):
        torch.testing.assert_close(got[k], hs[k], rtol=0, atol=1e-6)


def test_hub_shard_missing_is_one_error(llama_dir, tmp_path, monkeypatch):
    folder = tmp_path / "served"
    shutil.copytree(llama_dir, folder)
    first = _weight_map(folder)["model.embed_tokens.weight"]
    os.unlink(folder / first)
    FakeHub("org/tiny-llama", folder, tmp_path / "cache").install(monkeypatch)
    with pytest.raises(ModelError, match=f"index names {first}.*the hub has no such file"):
        load_model("org/tiny-llama", weights="trained", max_layer=1, context_length=12, device="cpu")


def test_a_tensor_the_partial_reader_cannot_map_falls_back_to_the_whole_checkpoint(tmp_path):
    """A needed tensor under a name nothing maps: the partial read gives up and from_pretrained reads
    the checkpoint whole, which names the missing parameters in one line."""
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        vocab_size=200,
        max_position_embeddings=64,
    )
    transformers.BertModel(cfg).save_pretrained(str(tmp_path))
    path = tmp_path / "model.safetensors"
    state = load_file(str(path))
    save_file(
        {("unmapped." + k if ".layer.0.attention.self.query." in k else k): v for k, v in state.items()},
        str(path),
        metadata={"format": "pt"},
    )
    with pytest.raises(
        ModelError, match=r"missing or of the wrong shape \(e\.g\. encoder\.layer\.0\.attention\.self\.query"
    ):
        load_model(
            str(tmp_path),
            weights="trained",
            weights_path=str(tmp_path),
            device="cpu",
            context_length=16,
            max_layer=1,
            seed=0,
        )


# ------------------------------------------------------------------ reads stay inside the folder named


def _with_shard_name(src, dest, new_name, index=INDEX_FILE):
    """A copy of ``src`` whose index names the shard of the embeddings ``new_name`` instead."""
    shutil.copytree(src, dest)
    doc = json.loads((dest / INDEX_FILE).read_text())
    first = doc["weight_map"]["model.embed_tokens.weight"]
    doc["weight_map"] = {k: (new_name if v == first else v) for k, v in doc["weight_map"].items()}
    (dest / index).write_text(json.dumps(doc))
    return dest, first


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink-out", "bin-index"])
def test_a_shard_outside_the_folder_is_refused_before_any_read(llama_dir, tmp_path, monkeypatch, capsys, how):
    import safetensors

    outside = tmp_path / "outside"
    outside.mkdir()
    first = _weight_map(llama_dir)["model.embed_tokens.weight"]
    shutil.copy(llama_dir / first, outside / "x.safetensors")  # a real shard: only the check can stop its read
    name = {
        "dotdot": "../outside/x.safetensors",
        "absolute": str(outside / "x.safetensors"),
        "symlink-out": "link.safetensors",
        "bin-index": "../../outside/x.bin",
    }[how]
    index = "pytorch_model.bin.index.json" if how == "bin-index" else INDEX_FILE
    folder, _ = _with_shard_name(llama_dir, tmp_path / "model", name, index)
    if how == "symlink-out":
        os.symlink(outside / "x.safetensors", folder / "link.safetensors")
    opened = []
    real = safetensors.safe_open
    monkeypatch.setattr(
        safetensors, "safe_open", lambda path, *a, **kw: opened.append(str(path)) or real(path, *a, **kw)
    )
    with pytest.raises(
        ModelError,
        match=rf"(checkpoint index .*{index}.* is malformed|is a symbolic link to).*(inside|outside) the model folder",
    ):
        load_model(str(folder), weights="trained", max_layer=1, context_length=12, device="cpu")
    assert opened == []
    rc, out, err = run(
        capsys,
        "check",
        folder,
        "--variants",
        "trained",
        "--layers",
        "1",
        "--limit",
        "20",
        "--context-length",
        "8",
        "--samples",
        "20",
        "--format",
        "json",
    )
    # a link leading out is refused first, as in any model folder; a name leading out, by the index check
    assert_one_error(rc, err, "is a symbolic link to" if how == "symlink-out" else "is malformed")
    assert out == ""


def test_a_symlinked_shard_inside_the_folder_is_read(llama_dir, tmp_path):
    folder, first = _with_shard_name(llama_dir, tmp_path / "model", "sub/link.safetensors")
    (folder / "sub").mkdir()
    os.symlink(folder / first, folder / "sub" / "link.safetensors")
    pm = load_model(str(folder), weights="trained", max_layer=1, context_length=12, device="cpu")
    ids = _ids()
    assert torch.equal(pm.capture({"input_ids": ids}, [1])[1], _reference(llama_dir, ids)[1])


def test_bytes_total_counts_only_the_files_in_the_folder(llama_dir, tmp_path):
    """A stated total_size larger than the shard files hold is not believed: the files' own sizes count."""
    folder = tmp_path / "model"
    shutil.copytree(llama_dir, folder)
    doc = json.loads((folder / INDEX_FILE).read_text())
    doc["metadata"]["total_size"] = 10**15
    (folder / INDEX_FILE).write_text(json.dumps(doc))
    pm = load_model(str(folder), weights="trained", max_layer=1, context_length=12, device="cpu")
    stored = sum(os.path.getsize(folder / f) for f in set(doc["weight_map"].values()))
    assert pm.info.weights_read["bytes_total"] == stored


def test_a_hub_index_naming_a_path_is_refused(llama_dir, tmp_path, monkeypatch):
    folder, _ = _with_shard_name(llama_dir, tmp_path / "served", "../../outside/x.safetensors")
    hub = FakeHub("org/tiny-llama", folder, tmp_path / "cache").install(monkeypatch)
    with pytest.raises(
        ModelError, match=r"is malformed: the shard name '../../outside/x.safetensors' is not a file name"
    ):
        load_model("org/tiny-llama", weights="trained", max_layer=1, context_length=12, device="cpu")
    assert not any(f.startswith("..") for f in hub.requested)


def test_a_snapshot_folder_of_the_hub_cache_reads_its_blobs(llama_dir, tmp_path):
    """The hub cache keeps a snapshot's files as links into the repository's blobs folder: those are inside."""
    repo = tmp_path / "models--org--tiny"
    snap, blobs = repo / "snapshots" / "abc123", repo / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    for i, f in enumerate(sorted(llama_dir.iterdir())):
        shutil.copy(f, blobs / f"blob{i}")
        os.symlink(os.path.join("..", "..", "blobs", f"blob{i}"), snap / f.name)
    pm = load_model(str(snap), weights="trained", max_layer=1, context_length=12, device="cpu")
    ids = _ids()
    assert torch.equal(pm.capture({"input_ids": ids}, [1])[1], _reference(llama_dir, ids)[1])
    assert pm.info.weights_read["method"] == "partial"


def test_a_file_linked_out_of_the_model_folder_is_refused(llama_dir, tmp_path):
    """A model folder whose weights (or config, or tokenizer) file is a link to a file elsewhere is
    refused before anything is read; a link inside the folder is fine."""
    from mhaaudit.errors import ModelError

    outside = tmp_path / "outside"
    outside.mkdir()
    folder = tmp_path / "model"
    shutil.copytree(llama_dir, folder)
    weights = next(folder.glob("*.safetensors"))
    shutil.move(weights, outside / weights.name)
    os.symlink(outside / weights.name, weights)
    with pytest.raises(ModelError, match="outside the model folder"):
        load_model(str(folder), weights="trained", max_layer=1, context_length=12, device="cpu")
    config = folder / "config.json"  # an unsharded file read by transformers, linked out
    shutil.move(config, outside / "config.json")
    os.symlink(outside / "config.json", config)
    with pytest.raises(ModelError, match=r"symbolic link .* outside the model folder"):
        from mhaaudit.models.shards import check_links_inside

        check_links_inside(str(folder))
    os.unlink(config)
    shutil.move(outside / "config.json", config)
    os.unlink(weights)
    shutil.move(outside / weights.name, folder / "stored.bin")
    os.symlink("stored.bin", weights)  # a link inside the folder
    pm = load_model(str(folder), weights="trained", max_layer=1, context_length=12, device="cpu")
    assert pm.info.n == 12


def test_a_folder_named_snapshots_outside_the_hub_cache_gets_no_blobs_exception(llama_dir, tmp_path):
    snap, blobs = tmp_path / "x" / "snapshots" / "m", tmp_path / "x" / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    for i, f in enumerate(sorted(llama_dir.iterdir())):
        shutil.copy(f, blobs / f"blob{i}")
        os.symlink(os.path.join("..", "..", "blobs", f"blob{i}"), snap / f.name)
    from mhaaudit.errors import ModelError

    with pytest.raises(ModelError, match="outside the model folder"):
        load_model(str(snap), weights="trained", max_layer=1, context_length=12, device="cpu")


def test_a_hub_cache_link_leading_out_of_its_repository_is_refused(tmp_path, monkeypatch):
    """A snapshot of the hub cache whose weights file links outside the cache's copy of the repository (a file
    planted elsewhere on the machine): refused when the model is named by its hub id, as when its snapshot
    folder is named by its path; a snapshot linking into the repository's blobs is read."""
    from hubtools import hub_cache, use_hub_cache

    from mhaaudit.models.shards import hub_download

    good = tmp_path / "good"
    good.mkdir()
    (good / "config.json").write_text("{}")
    (good / "model.safetensors").write_bytes(b"weights")
    commits = hub_cache(tmp_path / "cache", "org/x", {"main": good, "evil": good})
    secret = tmp_path / "secret.safetensors"
    secret.write_bytes(b"someone else's")
    planted = tmp_path / "cache" / "models--org--x" / "snapshots" / commits["evil"] / "model.safetensors"
    planted.unlink()
    planted.symlink_to(secret)
    use_hub_cache(monkeypatch, tmp_path / "cache")
    path = hub_download("org/x", "model.safetensors", "main", True)
    assert Path(path).read_bytes() == b"weights"
    with pytest.raises(ModelError, match=r"model.safetensors of org/x in the hub cache .* is a link to .*secret"):
        hub_download("org/x", "model.safetensors", "evil", True)
    # the snapshot folder itself a link to a folder elsewhere: refused too (the files in it are regular files)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "model.safetensors").write_bytes(b"someone else's")
    folder = planted.parent
    shutil.rmtree(folder)
    folder.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ModelError, match=r"is a link to .*elsewhere/model.safetensors, outside the cache's copy"):
        hub_download("org/x", "model.safetensors", "evil", True)


def test_a_whole_load_counts_no_tensors_rather_than_none_read(vit_dir, tmp_path):
    """A checkpoint loaded whole (a ``pytorch_model.bin``) says every byte was read and leaves the tensor counts
    unknown: its ``tensors_read`` was 0, as if no tensor had been read."""
    from safetensors.torch import load_file

    shutil.copy(vit_dir / "config.json", tmp_path / "config.json")
    torch.save(load_file(str(vit_dir / "model.safetensors")), tmp_path / "pytorch_model.bin")
    read = load_model(str(tmp_path), weights="trained", device="cpu", max_layer=1).info.weights_read
    assert read["method"] == "whole" and read["bytes_read"] == read["bytes_total"] > 0
    assert read["tensors_read"] is None and read["tensors_total"] is None


def test_a_whole_load_counts_the_weight_files_only(vit_dir, tmp_path):
    """A training checkpoint loaded whole keeps its optimizer, scheduler and random states beside the weights:
    ``from_pretrained`` reads ``pytorch_model.bin`` only, and the report counted every ``.bin``/``.pt``/``.pth``
    file as weights read (here 4 files, the optimizer state 4 times the weights)."""
    from safetensors.torch import load_file

    shutil.copy(vit_dir / "config.json", tmp_path / "config.json")
    torch.save(load_file(str(vit_dir / "model.safetensors")), tmp_path / "pytorch_model.bin")
    weights = (tmp_path / "pytorch_model.bin").stat().st_size
    torch.save({"state": torch.zeros(weights)}, tmp_path / "optimizer.pt")
    torch.save({"step": 1}, tmp_path / "rng_state.pth")
    (tmp_path / "training_args.bin").write_bytes(b"\0" * 1000)
    read = load_model(str(tmp_path), weights="trained", device="cpu", max_layer=1).info.weights_read
    counted = (read["bytes_read"], read["bytes_total"], read["files_read"], read["files_total"])
    assert counted == (weights, weights, 1, 1)


def test_a_whole_load_reports_the_dtype_the_checkpoint_stores(vit_dir, tmp_path):
    """A ``pytorch_model.bin`` stored in bfloat16 beside a config that says float32 was reported "stored in float32"
    (the config's dtype): a whole load now reads the stored dtype from the file, mapped, without its data."""
    from safetensors.torch import load_file

    shutil.copy(vit_dir / "config.json", tmp_path / "config.json")
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "float32"
    state = {k: v.to(torch.bfloat16) for k, v in load_file(str(vit_dir / "model.safetensors")).items()}
    torch.save(state, tmp_path / "pytorch_model.bin")
    read = load_model(str(tmp_path), weights="trained", device="cpu", max_layer=1).info.weights_read
    assert (read["method"], read["stored_dtype"]) == ("whole", "bfloat16")
