"""The loading flags of check, capacity and kruskal --model: --revision, --trust-remote-code, --batch-size auto,
and what the JSON meta says about the weights read (bytes, stored dtype) and the batch size chosen."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from clitools import assert_one_error, run
from hubtools import FakeHub, byte_tokenizer

from mhaaudit.batching import AUTO_MAX_BATCH, choose_batch_size, example_bytes, halve_until_fits, parse_batch_size
from mhaaudit.errors import InputError, ModelError
from mhaaudit.models import load_model

transformers = pytest.importorskip("transformers")

SMALL = ("--limit", "40", "--context-length", "16", "--samples", "30", "--format", "json")


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A 4-block Llama stored in bfloat16, in shards of about two blocks, with a byte-level tokenizer."""
    cfg = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=300,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("llama")
    transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(str(folder), max_shard_size="100KB")
    byte_tokenizer().save_pretrained(str(folder))
    return folder


def test_check_meta_names_bytes_read_stored_dtype_and_auto_batch(capsys, llama_dir):
    rc, out, err = run(
        capsys, "check", llama_dir, "--variants", "trained", "--layers", "0,1", "--batch-size", "auto", *SMALL
    )
    assert rc == 0, err
    meta = json.loads(out)["meta"]
    read = meta["model_info"]["trained_weights_read"]
    assert read["method"] == "partial" and read["stored_dtype"] == "bfloat16"
    assert 0 < read["bytes_read"] < read["bytes_total"] and read["files_read"] < read["files_total"]
    assert meta["columns"]["trained-L1"]["weights_read"] == read
    assert isinstance(meta["batch_size"], int) and 1 <= meta["batch_size"] <= 40
    # the rule of the device the run used: halving on a GPU, the memory available on the CPU
    assert ("halving" if meta["device"].startswith("cuda") else "memory available") in meta["batch_size_choice"]


@pytest.mark.parametrize("command", ["check", "capacity"])
def test_auto_batch_is_chosen_once_for_both_sets_of_weights(capsys, llama_dir, monkeypatch, command):
    import mhaaudit.batching as batching

    asked = []
    real = batching.choose_batch_size
    monkeypatch.setattr(
        batching,
        "choose_batch_size",
        lambda pm, layers, a, limit, **kw: asked.append(a) or real(pm, layers, a, limit, **kw),
    )
    extra = ("--attention", "random") if command == "capacity" else ("--layers", "1")
    rc, out, err = run(
        capsys,
        command,
        llama_dir,
        "--variants",
        "random,trained",
        "--weights",
        llama_dir,
        "--batch-size",
        "auto",
        *extra,
        *SMALL,
    )
    assert rc == 0, err
    meta = json.loads(out)["meta"]
    assert asked[0] == "auto" and asked[1:] == [meta["batch_size"]]  # the second set of weights reuses the choice
    assert ("halving" if meta["device"].startswith("cuda") else "memory available") in meta["batch_size_choice"]


def test_capacity_meta_names_bytes_read(capsys, llama_dir):
    rc, out, err = run(
        capsys, "capacity", llama_dir, "--variants", "trained", "--attention", "random", "--batch-size", "8", *SMALL
    )
    assert rc == 0, err
    meta = json.loads(out)["meta"]
    assert meta["batch_size"] == 8 and meta["batch_size_choice"] == "given"
    assert meta["columns"]["trained"]["weights_read"]["stored_dtype"] == "bfloat16"


def test_kruskal_model_meta_names_capture(capsys, llama_dir):
    rc, out, err = run(
        capsys,
        "kruskal",
        "--model",
        llama_dir,
        "--variants",
        "trained-L1",
        "--batch-size",
        "auto",
        "--limit",
        "40",
        "--n",
        "16",
        "--samples",
        "30",
        "--format",
        "json",
    )
    assert rc == 0, err
    capture = json.loads(out)["meta"]["capture"]
    assert capture["weights_read"]["stored_dtype"] == "bfloat16" and capture["batch"]["asked"] == "auto"


@pytest.mark.parametrize(
    "args, match",
    [
        (("--batch-size", "many"), "--batch-size takes a positive integer or auto"),
        (("--batch-size", "0"), "--batch-size takes a positive integer or auto"),
        (("--revision", "main"), "is a local folder"),
    ],
)
def test_bad_flags_are_one_line(capsys, llama_dir, args, match):
    rc, _out, err = run(capsys, "check", llama_dir, "--variants", "trained", *args, *SMALL)
    assert_one_error(rc, err, match)


def test_missing_shard_is_one_line(capsys, llama_dir, tmp_path):
    folder = tmp_path / "broken"
    shutil.copytree(llama_dir, folder)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    os.unlink(folder / index["weight_map"]["model.embed_tokens.weight"])
    rc, _out, err = run(capsys, "check", folder, "--variants", "trained", *SMALL)
    assert_one_error(rc, err, "is incomplete")


def test_kruskal_file_refuses_capture_flags(capsys, tmp_path):
    import numpy as np

    np.save(tmp_path / "m.npy", np.random.default_rng(0).standard_normal((20, 6)))
    rc, _out, err = run(capsys, "kruskal", tmp_path / "m.npy", "--revision", "v1")
    assert_one_error(rc, err, "--revision has no effect when FEATURES")


# ------------------------------------------------------------------ --revision (the hub served from a folder)


def test_revision_reaches_every_hub_read(llama_dir, tmp_path, monkeypatch):
    hub = FakeHub("org/tiny-llama", llama_dir, tmp_path / "cache", revisions=("main", "v1")).install(monkeypatch)
    calls = []
    served = hub.__call__

    def recording(repo_id, filename, *args, revision=None, **kwargs):
        calls.append((filename, revision))
        return served(repo_id, filename, *args, revision=revision, **kwargs)

    monkeypatch.setattr("huggingface_hub.hf_hub_download", recording)
    load_model("org/tiny-llama", weights="trained", max_layer=1, context_length=8, device="cpu", revision="main")
    assert calls and all(rev == "main" for _f, rev in calls)


def test_revision_that_does_not_exist(capsys, llama_dir, tmp_path, monkeypatch):
    FakeHub("org/tiny-llama", llama_dir, tmp_path / "cache").install(monkeypatch)
    monkeypatch.setattr("mhaaudit.models.hf.is_offline", lambda: False)  # the hub answers: the revision is unknown
    with pytest.raises(InputError, match=r"^revision nope: no such branch, tag or commit of org/tiny-llama"):
        load_model("org/tiny-llama", weights="trained", max_layer=1, context_length=8, device="cpu", revision="nope")
    rc, _out, err = run(capsys, "check", "org/tiny-llama", "--variants", "trained", "--revision", "nope", *SMALL)
    assert_one_error(rc, err, "--revision nope: no such branch")


def test_revision_refused_for_timm(timm_dir):
    with pytest.raises(InputError, match=r"^revision applies to transformers models"):
        load_model(str(timm_dir), backend="timm", weights="trained", device="cpu", revision="v1")


# ------------------------------------------------------------------ --trust-remote-code


@pytest.fixture(scope="module")
def custom_dir(tmp_path_factory, llama_dir):
    """A model whose repository carries its own code (a renamed Llama)."""
    folder = tmp_path_factory.mktemp("custom")
    for f in llama_dir.iterdir():
        shutil.copy(f, folder / f.name)
    (folder / "configuration_tiny.py").write_text(
        "from transformers import LlamaConfig\n\n\nclass TinyConfig(LlamaConfig):\n    model_type = 'tinycustom'\n"
    )
    (folder / "modeling_tiny.py").write_text(
        "from transformers import LlamaModel\n\nfrom .configuration_tiny import TinyConfig\n\n\n"
        "class TinyModel(LlamaModel):\n    config_class = TinyConfig\n"
    )
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(
        model_type="tinycustom",
        auto_map={"AutoConfig": "configuration_tiny.TinyConfig", "AutoModel": "modeling_tiny.TinyModel"},
    )
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_remote_code_needs_the_flag(capsys, custom_dir):
    with pytest.raises(ModelError, match="pass trust_remote_code "):
        load_model(str(custom_dir), weights="trained", max_layer=1, context_length=8, device="cpu")
    rc, _out, err = run(capsys, "check", custom_dir, "--variants", "trained", *SMALL)
    assert_one_error(rc, err, "--trust-remote-code")


def test_remote_code_runs_with_the_flag(custom_dir, llama_dir):
    pm = load_model(
        str(custom_dir), weights="trained", max_layer=1, context_length=8, device="cpu", trust_remote_code=True
    )
    assert type(pm.module).__name__ == "TinyModel" and pm.info.weights_read["method"] == "partial"
    ref = load_model(str(llama_dir), weights="trained", max_layer=1, context_length=8, device="cpu")
    ids = torch.randint(0, 250, (2, 8), generator=torch.Generator().manual_seed(0))
    assert torch.equal(pm.capture({"input_ids": ids}, [1])[1], ref.capture({"input_ids": ids}, [1])[1])


# ------------------------------------------------------------------ --batch-size auto


def test_parse_batch_size():
    assert parse_batch_size("auto") == "auto" and parse_batch_size(" AUTO ") == "auto"
    assert parse_batch_size("16") == 16 and parse_batch_size(16) == 16
    for bad in ("0", "-3", "x", 1.5):
        with pytest.raises(InputError):
            parse_batch_size(bad)


def test_halving_until_it_fits():
    tried = []

    def run_batch(b):
        tried.append(b)
        if b > 37:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")

    assert halve_until_fits(run_batch, 512) == (32, [512, 256, 128, 64, 32])
    with pytest.raises(ModelError, match="batch of one"):
        halve_until_fits(lambda b: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("oom")), 4)


def test_gpu_rule_halves_on_out_of_memory(llama_dir, monkeypatch):
    """The GPU path, run on this machine's device with out-of-memory simulated above 100 examples."""
    pm = load_model(str(llama_dir), weights="trained", max_layer=1, context_length=8, device="cpu")
    real, sizes = pm.capture, []

    def capture(inputs, layers):
        b = int(inputs["input_ids"].shape[0])
        sizes.append(b)
        if b > 100:
            raise torch.cuda.OutOfMemoryError("simulated")
        return real(inputs, layers)

    monkeypatch.setattr(pm, "capture", capture)
    choice = choose_batch_size(pm, [0, 1], "auto", limit=5000, halving=True)
    assert choice.size == 64 and sizes == [AUTO_MAX_BATCH, 256, 128, 64]
    assert f"on {pm.device}" in choice.how and "512 -> 256 -> 128 -> 64" in choice.how
    assert choose_batch_size(pm, [1], "auto", limit=40, halving=True).size == 40  # never more than the examples
    assert choose_batch_size(pm, [1], 7, limit=40).as_dict() == {"size": 7, "asked": 7, "how": "given"}


def test_cpu_rule_from_memory(llama_dir):
    pm = load_model(str(llama_dir), weights="trained", max_layer=1, context_length=16, device="cpu")
    per = example_bytes(pm, [0, 1])
    assert per > 4 * 16 * 64 * 2  # at least the two captured token matrices
    assert choose_batch_size(pm, [0, 1], "auto", limit=5000, halving=False, memory=20 * per).size == 10
    assert choose_batch_size(pm, [0, 1], "auto", limit=5000, halving=False, memory=per).size == 1
    assert choose_batch_size(pm, [0, 1], "auto", limit=30, halving=False, memory=10**12).size == 30


# ------------------------------------------------------------------ no code runs without the flag


def _planted(folder, marker, where: str):
    """A copy of a BERT folder whose ``where`` (config, model or tokenizer) maps to code that leaves ``marker``
    when imported."""
    leave = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
    (folder / "configuration_planted.py").write_text(
        leave
        + "from transformers import BertConfig\n\n\nclass PlantedConfig(BertConfig):\n    model_type = 'planted'\n"
    )
    (folder / "modeling_planted.py").write_text(
        leave + "from transformers import BertModel\n\nfrom .configuration_planted import PlantedConfig\n\n\n"
        "class PlantedModel(BertModel):\n    config_class = PlantedConfig\n"
    )
    (folder / "tokenization_planted.py").write_text(
        leave + "from transformers import BertTokenizer\n\n\nclass PlantedTokenizer(BertTokenizer):\n    pass\n"
    )
    if where == "tokenizer":
        tok = json.loads((folder / "tokenizer_config.json").read_text())
        tok["auto_map"] = {"AutoTokenizer": ["tokenization_planted.PlantedTokenizer", None]}
        (folder / "tokenizer_config.json").write_text(json.dumps(tok))
        return folder
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = (
        {"AutoConfig": "configuration_planted.PlantedConfig", "AutoModel": "modeling_planted.PlantedModel"}
        if where == "config"
        else {"AutoModel": "modeling_planted.PlantedModel"}
    )
    if where == "config":
        cfg["model_type"] = "planted"
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize("where", ["config", "model", "tokenizer"])
def test_planted_code_never_runs_without_the_flag(capsys, bert_dir, tmp_path, where):
    folder, marker = tmp_path / "model", tmp_path / "MARKER"
    shutil.copytree(bert_dir, folder)
    _planted(folder, marker, where)
    for command in ("check", "capacity"):
        rc, out, err = run(
            capsys, command, folder, "--limit", "20", "--context-length", "8", "--samples", "20", "--format", "json"
        )
        line = assert_one_error(rc, err, "pass --trust-remote-code")
        assert "auto_map" in line and out == ""
    rc, out, err = run(
        capsys, "kruskal", "--model", folder, "--limit", "20", "--n", "8", "--samples", "20", "--format", "json"
    )
    assert_one_error(rc, err, "pass --trust-remote-code")
    with pytest.raises(ModelError, match="needs code from its own folder"):
        load_model(str(folder), weights="trained", max_layer=1, context_length=8, device="cpu")
    assert not marker.exists()


def test_planted_code_in_the_weights_folder_is_named_as_the_weights_folder(capsys, bert_dir, tmp_path):
    """The model is clean and its trained weights' folder asks for code: the line names the weights folder
    (it named the model, which has none)."""
    weights, marker = tmp_path / "weights", tmp_path / "MARKER"
    shutil.copytree(bert_dir, weights)
    _planted(weights, marker, "model")
    args = ("check", bert_dir, "--weights", weights, "--limit", "20", "--context-length", "16", "--samples", "20")
    rc, out, err = run(capsys, *args)
    line = assert_one_error(rc, err, f"the weights folder {weights} needs code from its own folder")
    assert f"{bert_dir} needs" not in line and out == "" and not marker.exists()


def test_weights_whose_config_computes_otherwise_than_the_local_model_are_refused(capsys, bert_dir, tmp_path):
    """A local model and trained weights whose own config.json says another activation: the trained column is
    built from the model's config, so it would not compute what the weights do. Refused before any work; a
    config that differs only in what a save rewrites (its labels, the dtype stored) is read."""
    weights = tmp_path / "weights"
    shutil.copytree(bert_dir, weights)
    cfg = json.loads((weights / "config.json").read_text())
    args = ("check", bert_dir, "--weights", weights, "--limit", "20", "--context-length", "16", "--samples", "20")
    (weights / "config.json").write_text(json.dumps({**cfg, "id2label": {"0": "a"}, "torch_dtype": "bfloat16"}))
    rc, _, err = run(capsys, *args, "--variants", "trained", "--format", "json")
    assert rc == 0, err
    (weights / "config.json").write_text(json.dumps({**cfg, "hidden_act": "relu"}))
    rc, out, err = run(capsys, *args)
    line = assert_one_error(rc, err, f"--weights {weights} computes otherwise than the model {bert_dir}")
    assert 'hidden_act = "relu"' in line and out == ""


@pytest.mark.parametrize(
    "text, says",
    [
        ('{"model_type": "bert",', "its config.json is not JSON"),
        ("[1, 2]", "its config.json is not a JSON object"),
        (b"\xff{}", "its config.json is not JSON"),
        ("", "its config.json is not JSON"),
    ],
)
def test_a_weights_folder_whose_config_cannot_be_read_is_refused(capsys, bert_dir, tmp_path, text, says):
    """A trained weights folder holding a config.json that is no JSON object is refused before any work, the line
    naming the folder (it was read as a folder without a config, and the run went on with the model's)."""
    weights = tmp_path / "weights"
    shutil.copytree(bert_dir, weights)
    config = weights / "config.json"
    config.write_bytes(text) if isinstance(text, bytes) else config.write_text(text)
    args = ("check", bert_dir, "--weights", weights, "--limit", "20", "--context-length", "16", "--samples", "20")
    for command in (args, ("capacity", *args[1:], "--heads", "1")):
        rc, out, err = run(capsys, *command, "--variants", "trained", "--format", "json")
        assert_one_error(rc, err, f"--weights {weights}: {says}")
        assert out == ""
    (weights / "config.json").unlink()  # a folder of weights alone is read with the model's config
    rc, _, err = run(capsys, *args, "--variants", "trained", "--format", "json")
    assert rc == 0, err


def test_a_weights_folder_whose_config_has_a_bad_size_is_named(capsys, bert_dir, tmp_path):
    """A malformed size in the weights folder's config is said of that folder, not of the model (whose is fine)."""
    weights = tmp_path / "weights"
    shutil.copytree(bert_dir, weights)
    cfg = json.loads((weights / "config.json").read_text())
    (weights / "config.json").write_text(json.dumps({**cfg, "hidden_size": str(cfg["hidden_size"])}))
    args = ("check", bert_dir, "--weights", weights, "--limit", "20", "--context-length", "16", "--samples", "20")
    rc, out, err = run(capsys, *args)
    line = assert_one_error(rc, err, f"the config of the weights folder {weights} is malformed: hidden_size is")
    assert f"the config of {bert_dir} " not in line and out == ""


def test_a_config_value_its_class_refuses_is_said_whole(capsys, bert_dir, tmp_path):
    """A config field of the wrong type, refused by transformers' config class: the line says what is wrong
    with the value, not only which field (the class's message is two lines; the first ended in a colon)."""
    from transformers import AutoConfig

    folder = tmp_path / "model"
    shutil.copytree(bert_dir, folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "layer_norm_eps": "x"}))
    try:
        AutoConfig.from_pretrained(folder)
    except Exception:  # noqa: BLE001 - whatever this transformers raises for it
        pass
    else:
        pytest.skip("this transformers' config class takes a string for a float field")
    rc, out, err = run(capsys, "check", folder, "--limit", "20", "--context-length", "16", "--samples", "20")
    line = assert_one_error(rc, err, f"the config of {folder} is malformed: ")
    assert "layer_norm_eps" in line and "'x'" in line and not line.rstrip().endswith(":") and out == ""


def test_planted_code_never_runs_when_stdin_says_yes(bert_dir, tmp_path):
    """transformers would ask [y/N] on stdin and run the code on 'y': mhaaudit never lets it ask."""
    import subprocess
    import sys
    from pathlib import Path

    folder, marker = tmp_path / "model", tmp_path / "MARKER"
    shutil.copytree(bert_dir, folder)
    _planted(folder, marker, "config")
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mhaaudit",
            "check",
            str(folder),
            "--limit",
            "20",
            "--context-length",
            "8",
            "--format",
            "json",
        ],
        input="y\ny\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "[y/N]" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("Error: ")
    assert "--trust-remote-code" in proc.stderr
    assert not marker.exists()


def test_planted_code_of_a_hub_repository_never_runs_without_the_flag(bert_dir, tmp_path, monkeypatch, capsys):
    """From the hub (here served from a folder), trust_remote_code=False reaches transformers, which refuses at once."""
    folder, marker = tmp_path / "served", tmp_path / "MARKER"
    shutil.copytree(bert_dir, folder)
    _planted(folder, marker, "config")
    FakeHub("org/planted", folder, tmp_path / "cache").install(monkeypatch)
    with pytest.raises(ModelError, match="pass trust_remote_code "):
        load_model("org/planted", weights="trained", max_layer=1, context_length=8, device="cpu")
    rc, out, err = run(
        capsys,
        "check",
        "org/planted",
        "--variants",
        "trained",
        "--limit",
        "20",
        "--context-length",
        "8",
        "--format",
        "json",
    )
    assert_one_error(rc, err, "--trust-remote-code")
    assert out == "" and not marker.exists()


def test_planted_code_runs_with_the_flag(bert_dir, tmp_path):
    """The flag is the user's consent: the folder's code is imported (and the model it defines is used)."""
    folder, marker = tmp_path / "model", tmp_path / "MARKER"
    shutil.copytree(bert_dir, folder)
    _planted(folder, marker, "config")
    pm = load_model(str(folder), weights="trained", max_layer=1, context_length=8, device="cpu", trust_remote_code=True)
    assert marker.read_text() == "imported" and type(pm.module).__name__ == "PlantedModel"


def test_every_loading_call_says_whether_code_may_run(bert_dir, vit_dir, monkeypatch):
    """trust_remote_code is passed, True or False, to every transformers loading call: never left to a prompt."""
    calls = []

    def recording(owner, name):
        real = getattr(owner, name)

        def wrapper(*a, **kw):
            calls.append((f"{owner.__name__}.{name}", kw.get("trust_remote_code")))
            return real(*a, **kw)

        monkeypatch.setattr(owner, name, wrapper)

    for owner in (
        transformers.AutoConfig,
        transformers.AutoModel,
        transformers.AutoTokenizer,
        transformers.AutoImageProcessor,
    ):
        for name in ("from_pretrained", "from_config"):
            if hasattr(owner, name):
                recording(owner, name)
    for flag in (False, True):
        calls.clear()
        load_model(
            str(bert_dir), weights="trained", max_layer=1, context_length=8, device="cpu", trust_remote_code=flag
        )
        load_model(str(vit_dir), weights="random", max_layer=1, device="cpu", trust_remote_code=flag)
        assert {c for c, _ in calls} >= {
            "AutoConfig.from_pretrained",
            "AutoModel.from_config",
            "AutoTokenizer.from_pretrained",
        }
        assert all(v is flag for _c, v in calls), calls
