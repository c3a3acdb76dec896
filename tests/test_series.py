"""A series of checkpoints audited in one run (``check MODEL --checkpoints SPEC``, ``audit_series``).

A tiny ViT and a tiny GPT-2 are trained here for a few steps and saved as checkpoints: one repeats
the one before it byte for byte, and in one the embedding is collapsed on purpose, so that every
example gives the same query and General Position fails. Each checkpoint's records must equal those
of a single ``check --weights`` run of it; the series must name the identical checkpoint (and not
audit it again) and every checkpoint at which General Position changes. The hub-revision path
runs on a hub cache folder laid out as the hub client lays it out; a bad series is one line, exit 2,
before any work.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
from clitools import assert_one_error, run
from conftest import TINY_VIT, pipe_writer, strict_json, tiny, tmp_leftovers
from hubtools import byte_tokenizer, hub_cache, use_hub_cache

from mhaaudit import pipeline
from mhaaudit.check_words import CHECK_TITLES, fraction_text
from mhaaudit.errors import InputError, OutputError
from mhaaudit.request import ModelRequest
from mhaaudit.series import SeriesResult, audit_series, step_of
from mhaaudit.series import run as series_run
from mhaaudit.series.spec import resolve_series

transformers = pytest.importorskip("transformers")

VIT_RUN = ("--limit", 40, "--samples", 64, "--batch-size", 16, "--device", "cpu")
GPT_RUN = dict(context_length=8, limit=48, samples=64, batch_size=16, device="cpu")
SERIES_FIELDS = ("checkpoint", "step", "order", "identical_to")


def _own(records: list[dict], name: str | None) -> list[dict]:
    """The records of one checkpoint (None: the reference), less the series' fields."""
    return [{k: v for k, v in r.items() if k not in SERIES_FIELDS} for r in records if r["checkpoint"] == name]


def _save_series(folder, model, steps, step, collapse, tokenizer=None) -> list[str]:
    """Save ``model`` at each of ``steps`` (training one ``step()`` between saves); the name ``"same"``
    saves again without training, ``"collapsed"`` a copy whose embedding ``collapse`` collapses."""
    names = []
    for i, what in enumerate(steps):
        name = folder / f"ckpt-{100 * (i + 1)}"
        if what == "train":
            step()
        if what == "collapsed":
            broken = type(model)(model.config)
            broken.load_state_dict(model.state_dict())
            collapse(broken)
            broken.save_pretrained(str(name))
        else:
            model.save_pretrained(str(name))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(name))
        names.append(str(name))
    return names


STEPS = ("first", "train", "same", "collapsed", "train")  # checkpoints 100 .. 500


@pytest.fixture(scope="module")
def vit_series(tmp_path_factory):
    """A tiny ViT (d = 16) trained for a few steps (its CLS output pulled towards random targets), saved at 5 steps."""
    root = tmp_path_factory.mktemp("vit_series")
    torch.manual_seed(0)  # d = 16 < n = 17: General Position (k = 16) is the question, Assumption 1 fails anyway
    cfg = transformers.ViTConfig(**{**TINY_VIT, "hidden_size": 16, "intermediate_size": 32}, initializer_range=0.2)
    model = transformers.ViTModel(cfg)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, target = torch.randn(8, 3, 32, 32), torch.randn(8, 16)

    def step():
        loss = ((model(pixel_values=x).last_hidden_state[:, 0] - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    def collapse(m):  # every patch the same token: every image gives the same query
        with torch.no_grad():
            m.embeddings.patch_embeddings.projection.weight.zero_()

    (root / "runs").mkdir()
    _save_series(root / "runs", model, STEPS, step, collapse)
    model.save_pretrained(str(root / "model"))
    return root


@pytest.fixture(scope="module")
def gpt_series(tmp_path_factory):
    """A tiny GPT-2 (d = 16, byte tokenizer) trained for a few steps, saved at 5 steps with its tokenizer,
    and a small text file to read."""
    root = tmp_path_factory.mktemp("gpt_series")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=257, n_positions=64, initializer_range=0.2)
    model = transformers.GPT2Model(cfg)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ids, target = torch.randint(0, 257, (8, 12)), torch.randn(8, 16)

    def step():
        loss = ((model(input_ids=ids).last_hidden_state[:, -1] - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    def collapse(m):  # every token the same vector: every window gives the same query
        with torch.no_grad():
            m.wte.weight.copy_(m.wte.weight[:1].expand_as(m.wte.weight))

    (root / "runs").mkdir()
    names = _save_series(root / "runs", model, STEPS, step, collapse, tokenizer=byte_tokenizer())
    g = torch.Generator().manual_seed(1)
    words = ["model", "token", "layer", "weights", "data", "rank", "query", "head", "value", "key", "train"]
    docs = [" ".join(words[int(i)] for i in torch.randint(0, len(words), (30,), generator=g)) for _ in range(80)]
    (root / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    return root, names


# --------------------------------------------------------------------------- the names


@pytest.mark.parametrize(
    "name, step",
    [
        ("runs/checkpoint-1000", 1000),
        ("ckpt-0300", 300),
        ("step143000", 143000),
        ("epoch2-step500", 500),
        ("run3/model_0042.safetensors", 42),
        ("global_step20", 20),
        ("final", None),
        ("v2-epoch3", None),
        ("step9223372036854775807", 2**63 - 1),
        ("step99999999999999999999", None),  # no 64-bit record holds it: no step
        ("run-99999999999999999999", None),
    ],
)
def test_a_checkpoint_s_step_is_the_number_its_name_carries(name, step):
    assert step_of(name)[0] == step


def test_a_name_without_a_step_says_why():
    """The reason names every mark a step number follows, not only ``step``, and that only the name itself counts."""
    assert step_of("v2-epoch3") == (
        None,
        "it carries several numbers (2, 3) and none follows step, checkpoint, ckpt or iter",
    )
    assert step_of("runs/ckpt-100/model.safetensors") == (None, "it carries no number")


# --------------------------------------------------------------------------- the series, one checkpoint at a time


def test_each_checkpoint_gives_the_records_of_its_own_check_run(vit_series, image_dir, capsys, monkeypatch):
    """``check --checkpoints 'runs/ckpt-*'``: every checkpoint's records equal a single ``check --weights``
    run's, the reference's equal that run's random columns; the data is read once for the trained
    passes, the repeated checkpoint is named and not audited again, and the collapsed embedding is the
    first change of General Position."""
    monkeypatch.chdir(vit_series)
    reads = []
    real = pipeline.example_batches
    monkeypatch.setattr(pipeline, "example_batches", lambda *a, **k: reads.append(1) or real(*a, **k))
    audited = []
    real_audit = series_run._Trained.audit
    monkeypatch.setattr(
        series_run._Trained, "audit", lambda self, ref, *a: audited.append(ref.name) or real_audit(self, ref, *a)
    )
    args = ("check", "model", "--data", image_dir, *VIT_RUN, "--sweep", "--format", "json")
    rc, out, err = run(capsys, *args, "--checkpoints", "runs/ckpt-*")
    assert rc == 0, err
    records = strict_json(out)["records"]
    names = [f"runs/ckpt-{s}" for s in (100, 200, 300, 400, 500)]
    assert audited == [n for n in names if n != "runs/ckpt-300"]  # the repeat is not audited
    assert len(reads) == 1  # the reference's pass: every checkpoint is fed the inputs it prepared
    assert {(r["checkpoint"], r["step"], r["order"]) for r in records} == {(None, None, None)} | {
        (n, 100 * (i + 1), i) for i, n in enumerate(names)
    }
    for name in names:
        rc, single, err = run(capsys, *args, "--weights", name)
        assert rc == 0, err
        single = strict_json(single)["records"]
        mine = [r for r in single if r["variant"] == "trained"]
        theirs = [r for r in _own(records, name) if r["check"] != "sweep_estimate"]
        assert theirs == mine, name
        assert [r for r in _own(records, None) if r["check"] != "sweep_estimate"] == [
            r for r in single if r["variant"] != "trained"
        ]
    same = [r for r in records if r["checkpoint"] == "runs/ckpt-300"]
    assert same and {r["identical_to"] for r in same} == {"runs/ckpt-200"}
    assert {r["identical_to"] for r in records if r["checkpoint"] != "runs/ckpt-300"} == {None}
    gp = {r["checkpoint"]: r for r in records if r["check"] == "general_position" and r["variant"] == "trained"}
    assert gp["runs/ckpt-200"]["verdict"] == "holds" and gp["runs/ckpt-400"]["verdict"] == "fails"
    assert gp["runs/ckpt-400"]["exact_status"] == "fails"  # every image gives the same query: a proof
    estimates = [r for r in records if r["check"] == "sweep_estimate" and r["checkpoint"] is not None]
    assert len(estimates) == 5 and all(r["floor"] <= r["estimate"] <= r["ceiling"] for r in estimates)


def test_torch_files_of_the_same_bytes_under_other_names_are_one_checkpoint(vit_series, image_dir, tmp_path, capsys):
    """Weights files named by themselves and loaded whole are compared by their bytes, not by their names: a copy
    of the file before is reported identical to it and not audited again, and its records are that file's."""
    from safetensors.torch import load_file

    for i, step in ((1, 100), (2, 200)):
        sd = load_file(str(vit_series / "runs" / f"ckpt-{step}" / "model.safetensors"))
        torch.save(sd, tmp_path / f"b-step{i}.bin")
    shutil.copyfile(tmp_path / "b-step2.bin", tmp_path / "b-step3.bin")
    args = ("check", vit_series / "model", "--data", image_dir, *VIT_RUN, "--variants", "trained", "--format", "json")
    rc, out, err = run(capsys, *args, "--checkpoints", tmp_path / "b-step*.bin")
    assert rc == 0, err
    doc = strict_json(out)
    names = [str(tmp_path / f"b-step{i}.bin") for i in (1, 2, 3)]
    ck = {c["name"]: c for c in doc["meta"]["series"]["checkpoints"]}
    assert [ck[n]["status"] for n in names] == ["audited", "audited", "identical"]
    assert ck[names[2]]["identical_to"] == names[1] and ck[names[2]]["digest"] == ck[names[1]]["digest"]
    assert ck[names[0]]["digest"]["sha256"] != ck[names[1]]["digest"]["sha256"]
    assert _own(doc["records"], names[2]) == _own(doc["records"], names[1])


def test_inputs_over_the_memory_kept_are_read_again_and_said_so(vit_series, image_dir, capsys, monkeypatch):
    """When the prepared inputs outgrow the memory kept for them, each later checkpoint reads the data again,
    one line on stderr says so once, and the records are those of the run that kept them."""
    monkeypatch.chdir(vit_series)
    args = ("check", "model", "--data", image_dir, *VIT_RUN, "--variants", "trained", "--format", "json")
    spec = ("--checkpoints", "runs/ckpt-100,runs/ckpt-200,runs/ckpt-400")
    rc, kept, err = run(capsys, *args, *spec)
    assert rc == 0 and "read and prepare" not in err, err
    reads = []
    real = pipeline.example_batches
    monkeypatch.setattr(pipeline, "example_batches", lambda *a, **k: reads.append(1) or real(*a, **k))
    monkeypatch.setattr(pipeline.hostmem, "available_memory", lambda: 4096)  # a 1 KiB budget: nothing fits
    rc, out, err = run(capsys, *args, *spec)
    assert rc == 0, err
    assert len(reads) == 3  # every checkpoint's pass read the data
    said = [line for line in err.splitlines() if "reads and prepares the data again" in line]
    assert len(said) == 1 and said[0].startswith("Note: the prepared model inputs exceed the 1 KiB"), err
    assert strict_json(out)["records"] == strict_json(kept)["records"]
    reads.clear()  # with the reference: its pass keeps nothing either, and every pass reads the data
    rc, out, err = run(capsys, *[a for a in args if a not in ("--variants", "trained")], *spec)
    assert rc == 0 and len(reads) == 4, err
    assert len([line for line in err.splitlines() if "reads and prepares the data again" in line]) == 1, err


def test_checkpoints_with_preprocessing_of_their_own_prepare_the_data_again(
    vit_series, image_dir, tmp_path, capsys, monkeypatch
):
    """Checkpoints that carry an image preprocessing the model has not are not fed the reference's inputs:
    the first checkpoint's pass prepares the data again (2 reads, the notes say why), and every record
    still equals a single ``check --weights`` run's."""
    monkeypatch.chdir(vit_series)
    size = TINY_VIT["image_size"]
    processor = transformers.ViTImageProcessor(
        size={"height": size, "width": size}, image_mean=[0.1, 0.7, 0.3], image_std=[0.2, 0.4, 0.9]
    )
    names = []
    for step in (100, 200, 400):
        folder = tmp_path / f"ckpt-{step}"
        shutil.copytree(vit_series / "runs" / f"ckpt-{step}", folder)
        processor.save_pretrained(str(folder))
        names.append(str(folder))
    reads = []
    real = pipeline.example_batches
    monkeypatch.setattr(pipeline, "example_batches", lambda *a, **k: reads.append(1) or real(*a, **k))
    args = ("check", "model", "--data", image_dir, *VIT_RUN, "--format", "json")
    rc, out, err = run(capsys, *args, "--checkpoints", ",".join(names))
    assert rc == 0, err
    assert len(reads) == 2  # the reference's pass and the first checkpoint's: the later checkpoints are fed
    doc = strict_json(out)
    said = [n for n in doc["meta"]["notes"] if n.startswith("the data was prepared again for the trained weights")]
    assert len(said) == 1 and "preprocessor_config.json" in said[0], doc["meta"]["notes"]
    records = doc["records"]
    for name in names:
        rc, single, err = run(capsys, *args, "--weights", name)
        assert rc == 0, err
        single = strict_json(single)["records"]
        assert _own(records, name) == [r for r in single if r["variant"] == "trained"], name
        assert _own(records, None) == [r for r in single if r["variant"] != "trained"]


def test_the_report_names_the_changes_and_the_repeated_checkpoint(vit_series, image_dir, capsys, monkeypatch):
    monkeypatch.chdir(vit_series)
    monkeypatch.setenv("COLUMNS", "200")
    args = ("check", "model", "--data", image_dir, *VIT_RUN, "--variants", "trained", "--checkpoints", "runs/ckpt-*")
    rc, out, err = run(capsys, *args, "--fail-on", "general_position")
    assert rc == 1, err  # General Position fails at the collapsed checkpoint
    lines = out.splitlines()
    change = [x for x in lines if x.strip().startswith("General Position (trained, layer 1): the verdict changes")]
    assert len(change) == 2, lines  # it fails at the collapsed checkpoint and holds again at the next: both said
    assert "from holds to fails at checkpoint runs/ckpt-400 (order 3, step 400)" in change[0]
    assert "after runs/ckpt-300" in change[0]
    assert "from fails to holds at checkpoint runs/ckpt-500 (order 4, step 500), after runs/ckpt-400" in change[1]
    exact = [x for x in lines if "General Position (trained, layer 1): the exact status changes" in x]
    assert len(exact) == 2 and "to fails at checkpoint runs/ckpt-400" in exact[0]
    assert "from fails to undecided at checkpoint runs/ckpt-500" in exact[1]  # no proof either way once recovered
    repeated = [x for x in lines if x.strip().startswith("runs/ckpt-300 (step 300): the")]
    assert len(repeated) == 1 and "byte-identical to those of runs/ckpt-200" in repeated[0]
    assert "not audited again" in repeated[0]
    assert "Reference" not in out  # no random column asked for: nothing audited once


def test_checkpoint_names_with_line_breaks_cannot_forge_report_lines(
    vit_series, image_dir, capsys, monkeypatch, tmp_path
):
    """A checkpoint folder's name is shown escaped wherever the report names it: a line break (or ESC) in it
    cannot start a line of its own, in the table, the changes, the identical checkpoints or the series."""
    forged = "ckpt\nGeneral Position (trained, layer 1): holds everywhere\x1b[2J"
    runs = tmp_path / "runs"
    runs.mkdir()
    for src in ("ckpt-100", "ckpt-200", "ckpt-300"):  # 300 repeats 200
        shutil.copytree(vit_series / "runs" / src, runs / f"{forged}-step-{src[5:]}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "400")
    args = ("check", vit_series / "model", "--data", image_dir, *VIT_RUN, "--variants", "trained")
    rc, out, err = run(capsys, *args, "--checkpoints", "runs/*", "--out", f"{forged}.parquet")
    assert rc == 0, err
    assert "\x1b" not in out and "\x1b" not in err
    for text in (out, err):
        starts = [x.lstrip(" │|") for x in text.splitlines()]
        assert not [x for x in starts if x.startswith("General Position (trained, layer 1): holds everywhere")]
    assert "runs/ckpt\\x0aGeneral Position" in out  # shown as what it is
    assert "byte-identical to those of runs/ckpt\\x0aGeneral" in out  # the repeated checkpoint's line too
    assert "Wrote ckpt\\x0aGeneral Position" in out  # and the results file written


def test_model_and_checkpoint_folders_with_names_of_any_bytes_are_read(
    vit_series, image_dir, capsys, monkeypatch, tmp_path
):
    """safetensors takes only UTF-8 names: a model folder and a series of checkpoints in a folder whose name is not
    UTF-8 give the records of the same folders under a UTF-8 name."""
    odd = os.fsdecode(b"\xff")
    monkeypatch.chdir(tmp_path)
    got = {}
    for name in ("plain", f"odd{odd}"):
        for src in ("ckpt-100", "ckpt-400"):
            shutil.copytree(vit_series / "runs" / src, tmp_path / name / "runs" / src)
        shutil.copytree(vit_series / "model", tmp_path / name / "model")
        base = ("--data", image_dir, *VIT_RUN, "--variants", "trained", "--format", "json")
        rc, out, err = run(capsys, "check", f"{name}/model", *base)
        assert rc == 0, err
        rc, series, err = run(capsys, "check", f"{name}/model", *base, "--checkpoints", f"{name}/runs/ckpt-*")
        assert rc == 0, err
        got[name] = (
            json.loads(out)["records"],
            [_own(json.loads(series)["records"], c) for c in (f"{name}/runs/ckpt-100", f"{name}/runs/ckpt-400")],
        )
    for single, steps in [got["plain"], got[f"odd{odd}"]]:
        assert single and all(steps)
    strip = lambda rs: [{k: v for k, v in r.items() if k != "model"} for r in rs]  # noqa: E731
    assert strip(got["plain"][0]) == strip(got[f"odd{odd}"][0])
    assert [strip(x) for x in got["plain"][1]] == [strip(x) for x in got[f"odd{odd}"][1]]


def test_two_checkpoints_written_under_one_name_are_refused(vit_series, image_dir, capsys, monkeypatch, tmp_path):
    """A name that is not UTF-8 is written in the results with its bytes' escapes: a checkpoint named with the byte
    0xff and one named with the four characters of its escape would be one name there, so the series is refused in
    one line before any work, naming both, where each alone is audited."""
    odd = os.fsdecode(b"\xff")
    monkeypatch.chdir(tmp_path)
    shutil.copytree(vit_series / "runs" / "ckpt-100", tmp_path / f"a{odd}")
    shutil.copytree(vit_series / "runs" / "ckpt-400", tmp_path / "a\\xff")
    base = ("check", vit_series / "model", "--data", image_dir, *VIT_RUN, "--variants", "trained", "--out", "s.parquet")
    rc, out, err = run(capsys, *base, "--checkpoints", f"a{odd},a\\xff")
    assert rc == 2 and out == "" and not (tmp_path / "s.parquet").exists(), err
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line, err
    assert line.endswith(
        "checkpoints: a\\udcff and a\\xff would be written as one name, a\\xff, in the results (a name that is not "
        "UTF-8 is written with its bytes' escapes); rename one"
    ), line
    rc, out, err = run(capsys, *base[:-2], "--format", "json", "--checkpoints", f"a{odd},{vit_series}/runs/ckpt-400")
    assert rc == 0, err
    assert {r["checkpoint"] for r in json.loads(out)["records"]} == {f"a{odd}", f"{vit_series}/runs/ckpt-400"}


def test_a_series_says_each_note_once(vit_series, image_dir, capsys, monkeypatch):
    """Every audit of a series (the reference, each checkpoint) gives the model's and the data's notes again: the
    command line says each once, where a single run says it too, and the results keep them."""
    monkeypatch.chdir(vit_series)
    base = ("--data", image_dir, *VIT_RUN)
    rc, _, single = run(capsys, "check", "model", *base, "--weights", "runs/ckpt-100")
    assert rc == 0, single
    rc, out, err = run(capsys, "check", "model", *base, "--checkpoints", "runs/ckpt-[123]00", "--format", "json")
    assert rc == 0, err
    notes = [line for line in err.splitlines() if line.startswith("Note: ")]
    assert notes and len(notes) == len(set(notes)), err
    assert {line for line in single.splitlines() if line.startswith("Note: ")} <= set(notes)
    assert any(n in out for n in (json.dumps(line[len("Note: ") :])[1:-1] for line in notes))  # the file keeps them


def test_a_text_model_folder_whose_name_is_not_utf8_is_fed_its_own_tokenizer(gpt_series, tmp_path):
    """The tokenizers library takes only UTF-8 names: a trained GPT-2 folder whose name is not UTF-8 is read with
    its own tokenizer, and gives the records of the same folder under a UTF-8 name."""
    from mhaaudit import audit

    root, names = gpt_series
    odd = tmp_path / os.fsdecode(b"gpt\xfd")
    shutil.copytree(names[1], odd)
    run_kw = dict(data=str(root / "docs.jsonl"), variants=["trained"], **GPT_RUN)
    plain, other = audit(names[1], **run_kw), audit(str(odd), **run_kw)
    assert not [n for n in other.notes if "tokenizer" in str(n)]  # its own, not the offline fallback
    assert plain.records() and [r | {"model": ""} for r in plain.records()] == [
        r | {"model": ""} for r in other.records()
    ]


def test_a_text_series_without_a_tokenizer_is_refused_as_a_single_run_is(tmp_path, capsys, monkeypatch):
    """A trained BERT whose model folder and checkpoints hold no tokenizer files: ``check --weights CKPT``
    refuses it (it would be fed a vocabulary it was not trained on), and so does the series, which would
    otherwise feed its checkpoints the inputs its random reference made with the offline vocabulary."""
    for seed, folder in enumerate(("model", "runs/ckpt-100", "runs/ckpt-200")):
        tiny.save_model("bert", tmp_path / folder, seed=seed, tokenizer=False)
    text = tmp_path / "docs.txt"
    text.write_text("\n\n".join(" ".join(f"word{i}x{j}" for j in range(60)) for i in range(30)))
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()  # the library's own lines as it saved the folders
    common = ("--data", text, "--context-length", 16, "--limit", 20, "--samples", 32, "--device", "cpu")
    rc, out, err = run(capsys, "check", "model", *common, "--weights", "runs/ckpt-100", "--variants", "trained")
    line = assert_one_error(rc, err, "has trained weights but no tokenizer files")
    rc, out, err = run(capsys, "check", "model", *common, "--checkpoints", "runs/ckpt-*", "--out", "s.parquet")
    assert assert_one_error(rc, err) == line and out == ""
    assert not (tmp_path / "s.parquet").exists()


def test_a_text_series_from_a_list_in_python(gpt_series, monkeypatch):
    """``audit_series`` with a list of folders (GPT-2, depths 0 and 1): the library's result, its trend,
    its changes, and each checkpoint equal to ``audit(weights=...)``; read back from JSON and parquet.
    The checkpoints' tokenizer files are the model's byte for byte: the data is read once."""
    from mhaaudit import audit

    root, names = gpt_series
    data = str(root / "docs.jsonl")
    reads = []
    real = pipeline.example_batches
    monkeypatch.setattr(pipeline, "example_batches", lambda *a, **k: reads.append(1) or real(*a, **k))
    result = audit_series(str(root / "runs" / "ckpt-100"), checkpoints=names, data=data, layers=[0, 1], **GPT_RUN)
    assert len(reads) == 1 and not any("prepared again" in n for n in result.notes), result.notes
    assert [c.name for c in result.checkpoints] == names and [c.step for c in result.checkpoints] == [
        100,
        200,
        300,
        400,
        500,
    ]
    assert [c.checkpoint.name for c in result.identical()] == [names[2]]
    for name in names:
        single = audit(str(root / "runs" / "ckpt-100"), weights=name, data=data, layers=[0, 1], **GPT_RUN)
        assert result.audit(name).records() == single.records(), name
        # the model and the weights each column read, as the single run gives them (the identical checkpoint
        # names its own files, not those of the one it repeats)
        assert result.audit(name).info == single.info, name
        untimed = lambda cols: {k: {f: v for f, v in c.items() if f != "timings_s"} for k, c in cols.items()}  # noqa: E731
        assert untimed(result.audit(name).columns_meta()) == untimed(single.columns_meta()), name
    points = {(p.checkpoint, p.check): p for p in result.trend() if p.layer == 1}
    assert points[(names[1], "general_position")].verdict == "holds"
    assert points[(names[3], "general_position")].verdict == "fails"
    assert points[(names[2], "general_position")].identical_to == names[1]
    changes = [c for c in result.changes() if c.check == "general_position" and c.layer == 1]
    assert {(c.what, c.checkpoint, c.step) for c in changes} == {
        ("verdict", names[3], 400),
        ("exact_status", names[3], 400),
        ("verdict", names[4], 500),  # the recovery after the collapsed checkpoint is a change too
        ("exact_status", names[4], 500),
    }
    doc = {"meta": result.meta(), "records": result.records()}
    again = SeriesResult.from_json(json.loads(json.dumps(doc)))
    assert again == result and str(again) == str(result) and again.records() == result.records()


def test_an_identical_checkpoint_split_otherwise_gives_what_its_own_files_read(gpt_series, tmp_path):
    """A checkpoint whose tensors equal the one before it but are split into other files (two shards and an index,
    beside one file) is not audited again, yet its audit gives what a single run of it reads of its own files (the
    bytes, files and tensors of its checkpoint), in ``info``, in its columns and in the series' meta, as that run
    does; the repeated checkpoint's read was given before."""
    from safetensors.torch import load_file, save_file

    from mhaaudit import audit

    root, names = gpt_series
    model, data = str(root / "runs" / "ckpt-100"), str(root / "docs.jsonl")
    split = tmp_path / "ckpt-300"
    shutil.copytree(names[1], split, ignore=shutil.ignore_patterns("model.safetensors"))
    tensors = load_file(os.path.join(names[1], "model.safetensors"))
    keys = sorted(tensors)
    parts = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for fn, part in parts.items():
        save_file({k: tensors[k] for k in part}, split / fn, metadata={"format": "pt"})
    weight_map = {k: fn for fn, part in parts.items() for k in part}
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (split / "model.safetensors.index.json").write_text(json.dumps(index))
    series = audit_series(model, checkpoints=[names[1], str(split)], data=data, **GPT_RUN)
    assert [c.checkpoint.name for c in series.identical()] == [str(split)]
    single = audit(model, weights=str(split), data=data, **GPT_RUN)
    before = audit(model, weights=names[1], data=data, **GPT_RUN)
    read = single.info.as_dict()["trained_weights_read"]
    assert read != before.info.as_dict()["trained_weights_read"] and read["files_total"] == 2, read
    mine = series.audit(str(split))
    assert mine.info == single.info and mine.records() == single.records()
    untimed = lambda cols: {k: {f: v for f, v in c.items() if f != "timings_s"} for k, c in cols.items()}  # noqa: E731
    assert untimed(mine.columns_meta()) == untimed(single.columns_meta())
    (entry,) = [e for e in series.meta()["series"]["checkpoints"] if e["name"] == str(split)]
    assert entry["weights_read"] == read and entry["columns"], entry
    assert all(col["weights_read"] == read for col in entry["columns"].values()), entry["columns"]
    doc = {"meta": series.meta(), "records": series.records()}
    assert SeriesResult.from_json(json.loads(json.dumps(doc))).audit(str(split)).info == single.info


def test_the_trained_column_first_keeps_its_weights_in_the_model_s_facts(gpt_series):
    """A run given the trained column before the random one kept only the random weights in its model's facts (the
    trained weights' source and what was read of them were lost from ``model_info``): both are recorded, in one
    order, whichever order the columns are given in, and a series' audit of a checkpoint gives the same facts."""
    from mhaaudit import audit

    root, names = gpt_series
    model, data = str(root / "runs" / "ckpt-100"), str(root / "docs.jsonl")
    given = audit(model, weights=names[1], data=data, variants=["trained", "random"], **GPT_RUN)
    usual = audit(model, weights=names[1], data=data, variants=["random", "trained"], **GPT_RUN)
    assert [w.init for w in given.info.weights_used] == ["random", "trained"] and given.info == usual.info
    assert given.info.as_dict()["trained_weights_source"] == f"local folder {names[1]}"
    series = audit_series(model, checkpoints=names[:2], data=data, variants=["trained", "random"], **GPT_RUN)
    assert series.audit(names[1]).info == given.info


def test_a_task_model_s_save_and_a_base_model_s_are_one_series(gpt_series, tmp_path):
    """A checkpoint saved from GPT2LMHeadModel names its tensors ``transformer.h.0...``, one saved from GPT2Model
    ``h.0...``: both load into the audited model, so a series mixing them is of one model (it was refused as of
    another architecture, *lacking* the tensors it holds under the prefix), and each checkpoint's records equal a
    single run's, whichever kind comes first."""
    from mhaaudit import audit

    root, names = gpt_series
    base = transformers.GPT2Model.from_pretrained(names[1])
    task = transformers.GPT2LMHeadModel(base.config)
    task.transformer.load_state_dict(base.state_dict())
    lm = tmp_path / "lm-250"
    task.save_pretrained(str(lm))
    byte_tokenizer().save_pretrained(str(lm))
    model, data = str(root / "runs" / "ckpt-100"), str(root / "docs.jsonl")
    for series in ([names[0], str(lm)], [str(lm), names[3]]):
        result = audit_series(model, checkpoints=series, data=data, variants=["trained"], **GPT_RUN)
        for name in series:
            single = audit(model, weights=name, data=data, variants=["trained"], **GPT_RUN)
            assert result.audit(name).records() == single.records(), name


def test_the_library_takes_the_command_line_s_forms_and_paths(vit_series, image_dir, monkeypatch):
    """``layers="0,1"`` and ``variants="trained"`` are read as ``--layers 0,1`` and ``--variants trained`` are,
    and a checkpoint is found by its path (a ``Path``, relative or absolute) as well as by its name."""
    monkeypatch.chdir(vit_series)
    result = audit_series(
        "model",
        checkpoints="runs/ckpt-100,runs/ckpt-200",
        variants="trained",
        layers="0,1",
        data=str(image_dir),
        limit=40,
        samples=64,
        batch_size=16,
        device="cpu",
    )
    assert result.variants == ("trained-L0", "trained-L1")
    one = result.audit("runs/ckpt-200")
    assert [c.probe.variant for c in one.columns] == ["trained-L0", "trained-L1"]
    for other in (Path("runs/ckpt-200"), vit_series / "runs" / "ckpt-200", str(vit_series / "runs" / "ckpt-200")):
        assert result.audit(other).records() == one.records(), other
        assert result.run_of(other).checkpoint.name == "runs/ckpt-200"
    with pytest.raises(KeyError, match="no checkpoint of the series is named"):
        result.audit(Path("runs/ckpt-300"))


def test_parquet_holds_the_series_and_reads_back(vit_series, image_dir, capsys, monkeypatch, tmp_path):
    import pyarrow.parquet as pq

    monkeypatch.chdir(vit_series)
    out = tmp_path / "series.parquet"
    rc, text, err = run(
        capsys,
        "check",
        "model",
        "--data",
        image_dir,
        *VIT_RUN,
        "--variants",
        "random,trained",
        "--checkpoints",
        "runs/ckpt-100,runs/ckpt-200",
        "--format",
        "json",
        "--out",
        out,
        "--plot",
        tmp_path / "trend.png",
    )
    assert rc == 0, err
    doc = strict_json(text)
    table = pq.read_table(out)
    assert table.column_names[:4] == ["checkpoint", "step", "order", "identical_to"]
    assert str(table.schema.field("step").type) == "int64"
    rows, records = table.to_pylist(), doc["records"]
    shown = ("checkpoint", "step", "order", "identical_to", "variant", "check", "fraction", "verdict", "exact_status")
    assert [{k: r.get(k) for k in shown} for r in rows[: len(records)]] == [
        {k: r.get(k) for k in shown} for r in records
    ]
    sweep = rows[len(records) :]  # --plot draws the Kruskal-rank estimate: the columns were swept
    assert sweep and len(sweep) == len(doc["sweep"]) and {r["check"] for r in sweep} == {"sweep"}
    assert {r["checkpoint"] for r in sweep} == {None, "runs/ckpt-100", "runs/ckpt-200"}
    back = SeriesResult.from_parquet(out)
    assert back == SeriesResult.from_json(doc) and back.complete
    assert json.loads(json.dumps(back.records())) == json.loads(json.dumps(SeriesResult.from_json(doc).records()))
    assert (tmp_path / "trend.png").stat().st_size > 1000 and tmp_leftovers(tmp_path) == []


def test_the_trend_is_drawn_in_step_order_whatever_the_series_order(vit_series, image_dir, monkeypatch, tmp_path):
    """Checkpoints named out of step order (``--checkpoints ckpt-500,ckpt-100,ckpt-200``) are drawn left to
    right by step: a line is not joined back across the figure, and the floor-to-ceiling band covers every
    step (matplotlib fills between points in the order given)."""
    from mhaaudit.series import plot as series_plot

    monkeypatch.chdir(vit_series)
    result = audit_series(
        "model",
        checkpoints="runs/ckpt-500,runs/ckpt-100,runs/ckpt-200",
        variants="trained",
        sweep=True,
        data=str(image_dir),
        limit=40,
        samples=64,
        batch_size=16,
        device="cpu",
    )
    drawn = []
    monkeypatch.setattr(series_plot, "save_figure", lambda fig, path: drawn.append(fig) or Path(path))
    assert series_plot.plot_series(result, tmp_path / "trend.png") == tmp_path / "trend.png"
    (fig,) = drawn
    lines = [ln for ax in fig.axes for ln in ax.get_lines() if len(ln.get_xdata()) == 3]
    assert len(lines) == 5  # each check's fraction, and the estimate
    for ln in lines:
        assert list(ln.get_xdata()) == [100.0, 200.0, 500.0], ln.get_label()
    bands = [c for c in fig.axes[1].collections if len(c.get_paths())]
    spans = [(v[:, 0].min(), v[:, 0].max()) for c in bands for v in (c.get_paths()[0].vertices,)]
    assert spans and all(span == (100.0, 500.0) for span in spans), spans


def test_several_seeds_give_each_checkpoint_its_range(vit_series, image_dir, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(vit_series)
    rc, out, err = run(
        capsys,
        "check",
        "model",
        "--data",
        image_dir,
        *VIT_RUN,
        "--variants",
        "trained",
        "--checkpoints",
        "runs/ckpt-300,runs/ckpt-400",
        "--seeds",
        "0-1",
        "--vary",
        "data",
        "--format",
        "json",
        "--plot",
        tmp_path / "trend.png",
    )
    assert rc == 0, err
    records = strict_json(out)["records"]
    summaries = [r for r in records if r.get("aggregate") == "summary" and r["check"] == "general_position"]
    assert [(r["checkpoint"], r["seeds"]) for r in summaries] == [("runs/ckpt-300", [0, 1]), ("runs/ckpt-400", [0, 1])]
    assert {r["seed"] for r in records if r.get("aggregate") == "seed"} == {0, 1}
    back = SeriesResult.from_json(strict_json(out))
    point = next(p for p in back.trend() if p.checkpoint == "runs/ckpt-300" and p.check == "general_position")
    assert point.seeds == 2 and point.low is not None and point.low <= point.value <= point.high
    assert (tmp_path / "trend.png").is_file()


def test_with_several_seeds_the_reference_table_gives_the_range_over_the_seeds(
    vit_series, image_dir, capsys, monkeypatch
):
    """The reference columns of a series over seeds were printed as seed 0's single run (its fraction and interval),
    while the records and the trend figure gave their median over the seeds: the table now gives each cell's
    median and range over the seeds, as ``check --seeds`` does, the same as the reference's summary records."""
    monkeypatch.chdir(vit_series)
    args = ("check", "model", "--data", image_dir, *VIT_RUN, "--variants", "random,trained")
    args += ("--checkpoints", "runs/ckpt-300", "--seeds", "0-1", "--vary", "weights")
    rc, out, err = run(capsys, *args, "--format", "json")
    assert rc == 0, err
    records = strict_json(out)["records"]
    ref = [r for r in records if r["checkpoint"] is None and r.get("aggregate") == "summary"]
    per_seed = [r for r in records if r["checkpoint"] is None and r.get("aggregate") == "seed"]
    assert {r["seed"] for r in per_seed} == {0, 1} and {r["variant"] for r in ref} == {"random"}
    monkeypatch.setenv("COLUMNS", "300")  # one line a row: each cell reads whole
    rc, text, err = run(capsys, *args)
    assert rc == 0, err
    reference = text.split("Reference", 1)[1].split("at each checkpoint", 1)[0]
    assert "Over 2 seeds: median [lowest, highest] of the fraction" in reference

    def number(v):
        return str(int(v)) if float(v).is_integer() else fraction_text(v)

    rows = [" ".join(line.replace("│", " ").split()) for line in reference.splitlines()]
    for r in ref:  # each reference cell's median, and its range where the seeds differ, as the records give them
        spread = "(every seed)" if r["low"] == r["high"] else f"[{number(r['low'])}, {number(r['high'])}]"
        what = f"{r['variant']} {r['layer']} {CHECK_TITLES[r['check']]} {r['k']} {number(r['median'])} {spread}"
        assert any(row.startswith(what) for row in rows), (what, rows)


def test_an_interrupted_series_resumes_from_the_checkpoints_done(vit_series, image_dir, capsys, monkeypatch, tmp_path):
    """``--out``: the results file is rewritten after each checkpoint; a run stopped after two finds
    them there and audits only the rest, and its records are those of a run never stopped."""
    monkeypatch.chdir(vit_series)
    out = tmp_path / "series.parquet"
    args = ("check", "model", "--data", image_dir, *VIT_RUN, "--variants", "trained", "--format", "json")
    args += ("--checkpoints", "runs/ckpt-*", "--out", out)
    audited = []
    real_audit = series_run._Trained.audit

    def stopping(self, ref, *a):
        if len(audited) == 2:
            raise KeyboardInterrupt
        audited.append(ref.name)
        return real_audit(self, ref, *a)

    monkeypatch.setattr(series_run._Trained, "audit", stopping)
    rc, _, err = run(capsys, *args)
    assert rc == 130 and out.is_file(), err
    partial = SeriesResult.from_parquet(out)
    assert not partial.complete and [c.name for c in partial.done()] == [
        "runs/ckpt-100",
        "runs/ckpt-200",
        "runs/ckpt-300",
    ]
    audited.clear()
    monkeypatch.setattr(
        series_run._Trained, "audit", lambda self, ref, *a: audited.append(ref.name) or real_audit(self, ref, *a)
    )
    rc, resumed, err = run(capsys, *args)
    assert rc == 0, err
    assert audited == ["runs/ckpt-400", "runs/ckpt-500"]
    result = SeriesResult.from_parquet(out)
    assert result.complete and [c.resumed for c in result.runs[0].checkpoints] == [True, True, False, False, False]
    rc, whole, err = run(capsys, *args[:-2], "--checkpoints", "runs/ckpt-*")
    assert strict_json(resumed)["records"] == strict_json(whole)["records"]
    # a results file of other settings is not taken for this run's
    rc, _, err = run(capsys, *args[:-4], "--seed", 3, "--checkpoints", "runs/ckpt-*", "--out", out)
    assert_one_error(rc, err, "holds a series run with other settings")


def test_a_results_file_of_other_files_under_the_same_names_is_not_resumed(
    vit_series, image_dir, capsys, monkeypatch, tmp_path
):
    """The model and data named alike (``model``, ``images``) in another folder, or a data folder whose files
    changed since the results file was written, are other settings: the file is refused, never resumed with
    records of other data; the same files resume (a model folder's weights and folders are not its files here)."""
    for place, count in (("here", 48), ("there", 40)):
        shutil.copytree(vit_series / "model", tmp_path / place / "model")
        for step in (100, 200):
            shutil.copytree(vit_series / "runs" / f"ckpt-{step}", tmp_path / place / "runs" / f"ckpt-{step}")
        (tmp_path / place / "images").mkdir()
        for p in sorted(image_dir.iterdir())[:count]:
            shutil.copyfile(p, tmp_path / place / "images" / p.name)
    out = tmp_path / "series.parquet"
    args = ("check", "model", "--data", "images", *VIT_RUN, "--variants", "trained", "--format", "json")
    args += ("--checkpoints", "runs/ckpt-100,runs/ckpt-200", "--out", out)
    monkeypatch.chdir(tmp_path / "here")
    rc, first, err = run(capsys, *args)
    assert rc == 0, err
    assert set(strict_json(first)["meta"]["series"]["key"]["local"]) == {"model", "data"}
    walked: list = []  # without --out nothing is resumed: no folder is walked for it
    real = series_run.local_state
    monkeypatch.setattr(series_run, "local_state", lambda *a, **k: walked.append(a))
    rc, alone, err = run(capsys, *args[: args.index("--out")])
    assert rc == 0 and walked == [] and strict_json(alone)["meta"]["series"]["key"]["local"] is None, err
    monkeypatch.setattr(series_run, "local_state", real)
    # the same files: resumed, a training run's later checkpoints saved in the model's folder notwithstanding (its
    # weights files and folders, which a series never reads of it)
    shutil.copytree(vit_series / "runs" / "ckpt-400", tmp_path / "here" / "model" / "checkpoint-400")
    shutil.copyfile(
        vit_series / "runs" / "ckpt-400" / "model.safetensors", tmp_path / "here" / "model" / "s4.safetensors"
    )
    rc, again, err = run(capsys, *args)
    assert rc == 0 and strict_json(again)["records"] == strict_json(first)["records"], err
    assert all(c["resumed"] for c in strict_json(again)["meta"]["series"]["checkpoints"])
    monkeypatch.chdir(tmp_path / "there")
    before = out.read_bytes()
    rc, text, err = run(capsys, *args)
    assert text == "" and out.read_bytes() == before
    assert_one_error(rc, err, "holds a series run with other settings")
    monkeypatch.chdir(tmp_path / "here")
    next(iter(sorted((tmp_path / "here" / "images").iterdir()))).unlink()  # the data folder changed in place
    rc, text, err = run(capsys, *args)
    assert text == "" and out.read_bytes() == before
    assert_one_error(rc, err, "holds a series run with other settings")


def _forge(path, edit) -> None:
    """Rewrite the results file ``path`` with ``edit`` applied to its stored result (its rows kept)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[b"mhaaudit"])
    edit(meta["result"])
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"mhaaudit": json.dumps(meta)}), path)


def test_a_results_file_that_contradicts_itself_is_refused(vit_series, image_dir, capsys, monkeypatch, tmp_path):
    """A resume file whose stored test is proven to fail by a witness it does not hold (its fraction 1.0
    and its counts left as they were), or whose verdict or fraction contradicts its counts, is refused in
    one line naming the file and the record: never resumed, reported or read back; the file is left as it was."""
    monkeypatch.chdir(vit_series)
    out = tmp_path / "series.parquet"
    args = ("check", "model", "--data", image_dir, *VIT_RUN, "--variants", "trained")
    args += ("--checkpoints", "runs/ckpt-100,runs/ckpt-200", "--out", out, "--format", "json")
    rc, _, err = run(capsys, *args)
    assert rc == 0, err
    test = SeriesResult.from_parquet(out).runs[0].checkpoints[1].audit.columns[0].tests["general_position"]
    assert test.fraction == 1.0 and test.verdict == "holds" and test.witness is None

    def forged(result):
        stored = result["runs"][0]["checkpoints"][1]["audit"]["columns"][0]["tests"]["general_position"]
        stored.update(exact_status="fails", exact_basis="witness")

    _forge(out, forged)
    before = out.read_bytes()
    says = (
        "the record of checkpoint runs/ckpt-200, column trained (layer 1), check general_position: exact status fails "
        "by a witness, and the record holds no witness"
    )
    with pytest.raises(InputError, match=re.escape(f"{out}: {says}; no run writes that")):
        SeriesResult.from_parquet(out)
    rc, text, err = run(capsys, *args)
    assert text == "" and out.read_bytes() == before
    assert_one_error(rc, err, f"--out {out} holds {says}: no run writes that")
    for edit, wrong in (  # a verdict against its fraction, a fraction against its count: refused alike
        (dict(verdict="fails"), "verdict fails with fraction 1.0 against threshold"),
        (dict(fraction=0.5), "fraction = 0.5, not its count"),
    ):
        out.unlink()
        rc, _, err = run(capsys, *args)  # the file as the run writes it
        assert rc == 0, err

        def changed(result, edit=edit):
            result["runs"][0]["checkpoints"][1]["audit"]["columns"][0]["tests"]["general_position"].update(edit)

        _forge(out, changed)
        with pytest.raises(InputError, match=re.escape(wrong)):
            SeriesResult.from_parquet(out)
        rc, _, err = run(capsys, *args)
        assert_one_error(rc, err, wrong)


def _edit_row(path, edit) -> None:
    """Rewrite the results file ``path`` with ``edit`` applied to its rows (a list of dicts), its schema and
    metadata kept."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    rows = table.to_pylist()
    edit(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)


def test_a_results_file_whose_rows_were_edited_is_refused(vit_series, image_dir, capsys, monkeypatch, tmp_path):
    """A resume reads the stored result from the file's metadata and writes the rows again from it: a row edited
    by hand (a verdict and its fraction changed together, which no stored record contradicts), of a series
    complete or interrupted, is refused in one line naming the file, the row and the cell; the file is left as it
    was. A file whose rows are those it was written with resumes, NaN cells and all."""
    monkeypatch.chdir(vit_series)
    out = tmp_path / "series.parquet"
    args = ("check", "model", "--data", image_dir, *VIT_RUN, "--variants", "random,trained")
    args += ("--checkpoints", "runs/ckpt-100,runs/ckpt-200", "--out", out, "--format", "json")
    rc, _, err = run(capsys, *args)
    assert rc == 0, err
    written = SeriesResult.from_parquet(out).records()
    assert any(v != v for r in written for v in r.values() if isinstance(v, float))  # NaN cells: each equal to itself
    rc, again, err = run(capsys, *args)  # as written: resumed
    assert rc == 0, err
    assert all(c["resumed"] for c in json.loads(again)["meta"]["series"]["checkpoints"])

    edited = []

    def flipped(rows):
        (i,) = [
            i for i, r in enumerate(rows) if r["checkpoint"] == "runs/ckpt-200" and r["check"] == "general_position"
        ]
        assert rows[i]["verdict"] == "holds" and rows[i]["fraction"] == 1.0
        rows[i].update(verdict="fails", fraction=0.5)
        edited.append(i)

    audited = []
    real_audit = series_run._Trained.audit
    monkeypatch.setattr(
        series_run._Trained, "audit", lambda self, ref, *a: audited.append(ref.name) or real_audit(self, ref, *a)
    )
    _edit_row(out, flipped)
    before = out.read_bytes()
    SeriesResult.from_parquet(out)  # its metadata alone says nothing wrong
    rc, text, err = run(capsys, *args)
    assert text == "" and out.read_bytes() == before and audited == []
    line = assert_one_error(rc, err, f"--out {out} holds a row unlike the result its metadata stores (row ")
    cell = f"row {edited[0]}, checkpoint runs/ckpt-200, variant trained, layer 1, check general_position: fraction"
    assert f"({cell} is 0.5 where the stored result gives 1.0): no run writes that (the file was edited" in line
    out.unlink()  # an interrupted series alike: stopped after its first checkpoint, a row of it dropped
    audited.clear()

    def stopping(self, ref, *a):
        if audited:
            raise KeyboardInterrupt
        audited.append(ref.name)
        return real_audit(self, ref, *a)

    monkeypatch.setattr(series_run._Trained, "audit", stopping)
    rc, _, err = run(capsys, *args)
    assert rc == 130 and not SeriesResult.from_parquet(out).complete, err
    held = len(SeriesResult.from_parquet(out).records())
    _edit_row(out, lambda rows: rows.pop())
    before = out.read_bytes()
    rc, text, err = run(capsys, *args)
    assert text == "" and out.read_bytes() == before and audited == ["runs/ckpt-100"]
    assert_one_error(rc, err, f"--out {out} holds {held - 1} rows where the result its metadata stores gives {held}")
    _edit_meta(out, version="0.0.1")  # the same file as another release's: named as such, not as edited
    rc, text, err = run(capsys, *args)
    assert text == "" and audited == ["runs/ckpt-100"]
    line = assert_one_error(rc, err, f"--out {out} was written by mhaaudit 0.0.1 and holds {held - 1} rows where ")
    assert "which this release (" in line and "edited" not in line


def _edit_meta(path, **values) -> None:
    """Rewrite the results file ``path`` with ``values`` set in its mhaaudit metadata, its rows kept."""
    import pyarrow.parquet as pq

    from mhaaudit.documents import METADATA_KEY

    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[METADATA_KEY]) | values
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta)}), path)


def test_a_rerun_resumes_with_its_outputs_in_the_glob_s_folder(vit_series, image_dir, capsys, monkeypatch, tmp_path):
    """``--checkpoints 'rr/*' --out rr/audit.parquet --plot rr/trend.png``: the rerun that resumes (or repeats)
    the run finds the same checkpoints, its own outputs left out of the glob's matches."""
    monkeypatch.chdir(tmp_path)
    for name in ("ckpt-100", "ckpt-200"):
        shutil.copytree(vit_series / "runs" / name, tmp_path / "rr" / name)
    args = ("check", str(vit_series / "model"), "--data", image_dir, *VIT_RUN, "--variants", "trained")
    args += ("--checkpoints", "rr/*", "--out", "rr/audit.parquet", "--plot", "rr/trend.png", "--format", "json")
    rc, first, err = run(capsys, *args)
    assert rc == 0, err
    assert (tmp_path / "rr" / "audit.parquet").exists() and (tmp_path / "rr" / "trend.png").exists()
    rc, again, err = run(capsys, *args)
    assert rc == 0, err
    ran, reran = json.loads(first), json.loads(again)
    assert [c["name"] for c in reran["meta"]["series"]["checkpoints"]] == ["rr/ckpt-100", "rr/ckpt-200"]
    assert all(c["resumed"] for c in reran["meta"]["series"]["checkpoints"])  # read back from the results file
    assert reran["records"] == ran["records"]


def test_a_timm_series(timm_dir, image_dir, tmp_path, capsys, monkeypatch):
    """A series of tiny timm ViT checkpoint folders (loaded whole): each checkpoint's records equal a single
    ``check --weights`` run's, the folder that repeats the one before is found by its files and not audited
    again, and the collapsed patch embedding makes General Position fail."""
    from safetensors.torch import load_file, save_file

    runs = tmp_path / "runs"
    tiny.save_model("timm-vit", runs / "ckpt-100", seed=2)
    tiny.save_model("timm-vit", runs / "ckpt-200", seed=3)
    shutil.copytree(runs / "ckpt-200", runs / "ckpt-300")
    shutil.copytree(runs / "ckpt-200", runs / "ckpt-400")
    state = load_file(str(runs / "ckpt-400" / "model.safetensors"))
    state["patch_embed.proj.weight"] = torch.zeros_like(state["patch_embed.proj.weight"])  # one query for all
    save_file(state, str(runs / "ckpt-400" / "model.safetensors"))
    audited = []
    real_audit = series_run._Trained.audit
    monkeypatch.setattr(
        series_run._Trained, "audit", lambda self, ref, *a: audited.append(ref.name) or real_audit(self, ref, *a)
    )
    args = ("check", timm_dir, "--data", image_dir, *VIT_RUN, "--format", "json")
    rc, out, err = run(capsys, *args, "--checkpoints", f"{runs}/ckpt-*")
    assert rc == 0, err
    doc = strict_json(out)
    names = [str(runs / f"ckpt-{s}") for s in (100, 200, 300, 400)]
    assert audited == [names[0], names[1], names[3]]
    ck = {c["name"]: c for c in doc["meta"]["series"]["checkpoints"]}
    assert ck[names[2]]["status"] == "identical" and ck[names[2]]["identical_to"] == names[1]
    records = doc["records"]
    for name in (names[0], names[1], names[3]):
        rc, single, err = run(capsys, *args, "--weights", name)
        assert rc == 0, err
        single = strict_json(single)["records"]
        assert _own(records, name) == [r for r in single if r["variant"] == "trained"], name
        assert _own(records, None) == [r for r in single if r["variant"] != "trained"]
    assert _own(records, names[2]) == _own(records, names[1])
    gp = {r["checkpoint"]: r for r in records if r["check"] == "general_position" and r["variant"] == "trained"}
    assert gp[names[3]]["verdict"] == "fails" and gp[names[3]]["exact_status"] == "fails"
    assert 1 <= len(gp[names[3]]["witness"]) <= 2  # every image gives the same query: two of them are a proof


def test_a_timm_series_of_torch_checkpoints_is_read_as_timm_reads_them(timm_dir, tmp_path):
    """timm's loader reads a training checkpoint its own way: its EMA weights first (a file may hold no other), a
    parallel run's ``module.`` prefix dropped, names and shapes remapped by the model's filter. A series of such
    ``.pth`` files is not refused before any work by the names a transformers load would read (an EMA-only file was
    refused as holding no state dict of tensors, a ``module.`` one beside a plain one as of another architecture):
    each is read before any work as timm's load reads it (with fake tensors: no data read), and the state it picks
    is held to the model, so one of another width is refused before any work, in either torch form."""
    from safetensors.torch import load_file

    sd = load_file(str(timm_dir / "model.safetensors"))
    ema, ddp, plain = tmp_path / "ema-step1.pth", tmp_path / "ddp-step2.pth", tmp_path / "plain-step3.pth"
    torch.save({"state_dict_ema": sd, "epoch": 1}, ema)
    torch.save({"state_dict": {f"module.{k}": v for k, v in sd.items()}, "epoch": 2}, ddp)
    torch.save(sd, plain)
    for spec in (f"{ema},{plain}", f"{plain},{ddp}"):
        series = resolve_series(spec, None, ModelRequest(str(timm_dir)))
        assert len(series.checkpoints) == 2
    tiny.save_model("timm-vit", tmp_path / "wide", seed=3, embed_dim=48)
    wide = load_file(str(tmp_path / "wide" / "model.safetensors"))
    for form, zipped in (("zip", True), ("legacy", False)):
        other = tmp_path / f"wide-{form}-step4.pth"
        torch.save({"state_dict_ema": wide, "state_dict": sd, "epoch": 4}, other, _use_new_zipfile_serialization=zipped)
        with pytest.raises(
            InputError, match=f"{other.name} does not fit the model .*blocks.0.attn.proj.bias has shape"
        ):
            resolve_series(f"{ema},{other}", None, ModelRequest(str(timm_dir)))


def test_a_timm_series_reads_each_torch_checkpoint_once_before_its_load(timm_dir, tmp_path, capsys, monkeypatch):
    """A timm series of torch checkpoints reads each one with fake tensors once (for the series' checks before any
    work; the check before its load takes the state kept), then loads it once. The first was read three times so."""
    import timm.models
    from safetensors.torch import load_file

    sd = load_file(str(timm_dir / "model.safetensors"))
    names = [f"ema-step{i}.pth" for i in (1, 2)]
    for i, name in enumerate(names):
        torch.save({"state_dict_ema": sd, "epoch": i}, tmp_path / name)
    seen: list[tuple[str, str | None]] = []
    real = timm.models.load_state_dict

    def spy(path, *args, **kwargs):
        seen.append((os.path.basename(path), kwargs.get("device")))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(timm.models, "load_state_dict", spy)
    spec = ",".join(str(tmp_path / name) for name in names)
    args = ("--limit", 40, "--samples", 32, "--device", "cpu", "--format", "json")
    rc, out, err = run(capsys, "check", timm_dir, "--checkpoints", spec, *args)
    assert rc == 0, err
    assert {r["checkpoint"] for r in strict_json(out)["records"]} == {None, *(str(tmp_path / n) for n in names)}
    assert Counter(seen) == {(name, device): 1 for name in names for device in ("meta", None)}, seen  # None: the load


# --------------------------------------------------------------------------- hub revisions


@pytest.fixture()
def gpt_hub(gpt_series, tmp_path, monkeypatch):
    """The GPT-2 checkpoints as revisions step100 .. step500 of org/tiny-gpt2 in a hub cache folder."""
    root, names = gpt_series
    revisions = {"main": names[0]} | {f"step{100 * (i + 1)}": n for i, n in enumerate(names)}
    hub_cache(tmp_path / "cache", "org/tiny-gpt2", revisions)
    use_hub_cache(monkeypatch, tmp_path / "cache")
    return root


def test_hub_revisions_are_a_series(gpt_hub, capsys):
    """``--revision step100,step300,step400`` reads each revision from the hub cache: the records of each
    equal ``check --revision REV``'s, tagged with the revision and the step its name carries."""
    args = ("check", "org/tiny-gpt2", "--data", gpt_hub / "docs.jsonl", "--context-length", 8, "--limit", 48)
    args += ("--samples", 64, "--batch-size", 16, "--device", "cpu", "--layers", 1, "--format", "json")
    rc, out, err = run(capsys, *args, "--revision", "step100,step300,step400")
    assert rc == 0, err
    records = strict_json(out)["records"]
    assert [(r["checkpoint"], r["step"]) for r in records if r["check"] == "assumption_2"] == [
        (None, None),
        ("step100", 100),
        ("step300", 300),
        ("step400", 400),
    ]
    for rev in ("step300", "step400"):
        rc, single, err = run(capsys, *args, "--revision", rev)
        assert rc == 0, err
        single = strict_json(single)["records"]
        assert _own(records, rev) == [r for r in single if r["variant"].startswith("trained")]
        assert _own(records, None) == [r for r in single if r["variant"].startswith("random")]
    meta = strict_json(out)["meta"]["series"]
    assert [c["revision"] for c in meta["checkpoints"]] == ["step100", "step300", "step400"]
    rc, _, err = run(capsys, *args, "--revision", "step100,step999")
    assert_one_error(rc, err, "--revision step999")


def test_the_revision_read_is_named_and_capacity_notes_verdicts_of_another(gpt_hub, tmp_path, capsys):
    """A hub model read at a revision says which, in its weights source, alike in a single run and in a series;
    ``capacity --from`` notes the verdicts of another revision of the same model (none for the same revision)."""
    args = ("org/tiny-gpt2", "--data", gpt_hub / "docs.jsonl", "--context-length", 8, "--limit", 48)
    args += ("--batch-size", 16, "--device", "cpu", "--format", "json")
    res = tmp_path / "step100.parquet"
    rc, out, err = run(capsys, "check", *args, "--samples", 64, "--layers", 1, "--revision", "step100", "--out", res)
    assert rc == 0, err
    words = "hub org/tiny-gpt2 at revision step100 (local cache)"
    trained = [c for c in strict_json(out)["meta"]["columns"].values() if c["weights"] == "trained"]
    assert trained and all(c["weights_source"] == words for c in trained)
    series = tmp_path / "series.parquet"
    rc, out, err = run(
        capsys, "check", *args, "--samples", 64, "--layers", 1, "--revision", "step100,step300", "--out", series
    )
    assert rc == 0, err
    said = json.dumps(strict_json(out)["meta"])
    assert words in said and "hub org/tiny-gpt2 at revision step300 (local cache)" in said

    def capacity(revision, file):
        rc, out, err = run(capsys, "capacity", *args, "--revision", revision, "--from", file, "--variants", "trained")
        assert rc == 0, err
        doc = strict_json(out)
        return doc["records"], [x for x in doc["meta"]["notes"] if "were audited on" in x]

    for revision, noted in (("step100", False), ("step300", True)):
        _, notes = capacity(revision, res)
        assert len(notes) == noted, notes
        if noted:
            assert words in notes[0] and "at revision step300 (local cache)" in notes[0]
    # the series' file is read for the revision named: step100's verdicts are those of its single run
    drop = lambda records: [{k: v for k, v in r.items() if "source" not in k} for r in records]  # noqa: E731
    from_series, notes = capacity("step100", series)
    assert not notes and drop(from_series) == drop(capacity("step100", res)[0])


def test_capacity_reads_the_random_columns_of_a_series_of_revisions_for_each_revision_of_its_config(
    gpt_series, gpt_hub, tmp_path, monkeypatch, capsys
):
    """A series of revisions audits its random columns once, from the first revision's config; every revision of
    the series has that config, so ``capacity --revision REV --from`` reads them for any of its revisions as its
    own: no note of other weights, the verdicts of the first revision's. A revision whose config draws other
    random weights (another initialiser scale, which the trained weights do not read), and a series' file
    written before its revisions listed their random weights, are read as before: noted."""
    args = ("org/tiny-gpt2", "--data", gpt_hub / "docs.jsonl", "--context-length", 8, "--limit", 48)
    args += ("--batch-size", 16, "--device", "cpu", "--format", "json")
    series = tmp_path / "series.parquet"
    rc, _, err = run(
        capsys, "check", *args, "--samples", 64, "--layers", 1, "--revision", "step100,step300", "--out", series
    )
    assert rc == 0, err

    def capacity(revision, file, *more):
        rc, out, err = run(capsys, "capacity", *args, "--revision", revision, "--from", file, *more)
        assert rc == 0, err
        doc = strict_json(out)
        random = [{k: v for k, v in r.items() if "source" not in k} for r in doc["records"] if r["variant"] == "random"]
        return random, [x for x in doc["meta"]["notes"] if "were audited on" in x]

    first, notes = capacity("step100", series)
    assert first and not notes
    assert capacity("step300", series) == (first, [])
    assert capacity("step300", series, "--variants", "random") == (first, [])  # no trained column: read by revision
    # a series' file of an earlier version lists no revision's random weights: the first revision's are noted
    import pyarrow.parquet as pq

    from mhaaudit.io import METADATA_KEY, read_parquet_metadata

    meta = read_parquet_metadata(series)
    for c in meta["series"]["checkpoints"]:
        del c["random_weights_source"]
    older = tmp_path / "older.parquet"
    pq.write_table(pq.read_table(series).replace_schema_metadata({METADATA_KEY: json.dumps(meta)}), older)
    random, notes = capacity("step300", older)
    assert random == first and len(notes) == 1
    assert "the config of hub org/tiny-gpt2 at revision step100" in notes[0] and "revision step300" in notes[0]
    # another initialiser scale: the same series, but not the same random weights
    names = gpt_series[1]
    other = tmp_path / "other-scale"
    shutil.copytree(names[2], other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(config | {"initializer_range": 0.02}))
    hub_cache(tmp_path / "cache2", "org/tiny-gpt2", {"main": names[0], "step100": names[0], "step300": other})
    use_hub_cache(monkeypatch, tmp_path / "cache2")
    scaled = tmp_path / "scaled.parquet"
    rc, _, err = run(
        capsys, "check", *args, "--samples", 64, "--layers", 1, "--revision", "step100,step300", "--out", scaled
    )
    assert rc == 0, err
    _, notes = capacity("step300", scaled)
    assert len(notes) == 1 and "at revision step100" in notes[0], notes


def test_a_revision_s_audit_read_from_a_series_names_its_own_random_weights(gpt_hub, tmp_path, capsys):
    """``SeriesResult.audit(REV)`` gives the random columns the words a single run of REV gives them, those the
    series' file lists for REV (``random_weights_source``, which ``capacity --from`` reads), not the first
    revision's, from whose config the series drew them."""
    args = ("org/tiny-gpt2", "--data", gpt_hub / "docs.jsonl", "--context-length", 8, "--limit", 48, "--samples", 64)
    args += ("--batch-size", 16, "--device", "cpu", "--layers", 1, "--format", "json")
    series = tmp_path / "series.parquet"
    rc, _, err = run(capsys, "check", *args, "--revision", "step100,step300", "--out", series)
    assert rc == 0, err
    from mhaaudit.io import read_parquet_metadata

    listed = {c["name"]: c["random_weights_source"] for c in read_parquet_metadata(series)["series"]["checkpoints"]}
    assert "revision step300" in listed["step300"] and listed["step300"] != listed["step100"]
    rc, out, err = run(capsys, "check", *args, "--revision", "step300")
    assert rc == 0, err
    single, single_info = strict_json(out)["meta"]["columns"], strict_json(out)["meta"]["model_info"]
    rc, printed, err = run(capsys, "check", *args, "--revision", "step100,step300")
    assert rc == 0, err
    for result in (SeriesResult.from_parquet(series), SeriesResult.from_json(strict_json(printed))):
        for revision in ("step100", "step300"):
            audit = result.audit(revision)
            random = [c for c in audit.columns if c.probe.init == "random"]
            assert random and all(c.weights_source == listed[revision] for c in random), revision
        columns = result.audit("step300").columns_meta()
        assert {k: c["weights_source"] for k, c in columns.items()} == {
            k: c["weights_source"] for k, c in single.items()
        }
        assert result.audit("step300").info.as_dict() == single_info  # the model's facts, as its single run's
    reference = SeriesResult.from_parquet(series).runs[0].reference
    assert all(c.weights_source == listed["step100"] for c in reference.columns if c.probe.init == "random")


def test_a_revision_whose_config_builds_in_another_dtype_draws_other_random_weights():
    """transformers builds a config's model in the dtype the config writes (``dtype``, or the older ``torch_dtype``;
    float32 when it writes none), so the random weights drawn from a revision saved in bfloat16 are not those drawn
    from the first revision's float32 config: such a revision's random columns are not the reference's."""
    from transformers import AutoConfig, AutoModel

    from mhaaudit.models.hf_config import draws_alike
    from mhaaudit.models.hf_weights import find_blocks
    from mhaaudit.models.random_init import build_random, reinit_hf

    first = {"model_type": "gpt2", "n_embd": 16, "n_head": 2, "n_layer": 1, "vocab_size": 40, "torch_dtype": "float32"}
    assert draws_alike(first, first | {"dtype": "float32"})
    assert draws_alike(first, {k: v for k, v in first.items() if k != "torch_dtype"})  # none written: float32
    for other in (first | {"torch_dtype": "bfloat16"}, first | {"dtype": "float16"}):
        assert not draws_alike(first, other) and not draws_alike(other, first)

    def drawn(config: dict) -> torch.Tensor:
        kw = {k: v for k, v in config.items() if k != "model_type"}
        cfg = AutoConfig.for_model(config["model_type"], **kw)
        module = build_random(lambda: AutoModel.from_config(cfg), lambda m: reinit_hf(m, find_blocks(m), 0, 1), 0)
        return next(p for n, p in module.named_parameters() if "attn.c_attn.weight" in n).detach().float()

    assert torch.equal(drawn(first), drawn(first | {"dtype": "float32"}))
    assert not torch.equal(drawn(first), drawn(first | {"torch_dtype": "bfloat16"}))


def test_a_revision_missing_or_without_cached_weights_is_refused_before_any_work(
    gpt_series, tmp_path, monkeypatch, capsys
):
    """Offline, a revision the cache does not hold, or whose config it holds but not its weights (or not every
    shard of them), is one line and exit 2 before the reference columns are audited."""
    root, names = gpt_series
    bare = tmp_path / "bare"  # the config and tokenizer of a revision, not its weights
    shutil.copytree(names[1], bare, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    sharded = tmp_path / "sharded"  # an index naming a shard the cache does not hold
    shutil.copytree(bare, sharded)
    (sharded / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {"wte.weight": "model-00001-of-00002.safetensors"}})
    )
    hub_cache(
        tmp_path / "cache",
        "org/tiny-gpt2",
        {"main": names[0], "step100": names[0], "step200": bare, "step300": sharded},
    )
    use_hub_cache(monkeypatch, tmp_path / "cache")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def refuse(*a, **k):
        raise AssertionError("a model was loaded before the series was refused")

    monkeypatch.setattr(pipeline, "load", refuse)
    args = ("check", "org/tiny-gpt2", "--data", root / "docs.jsonl", "--context-length", 8, "--limit", 48)
    for revisions, says in (
        ("step100,step999", "--revision step999"),
        ("step100,step200", "--revision step200: the weights of org/tiny-gpt2 at this revision are not in the local"),
        ("step100,step300", "--revision step300: the shard model-00001-of-00002.safetensors"),
    ):
        out = tmp_path / "out.parquet"
        rc, text, err = run(capsys, *args, "--revision", revisions, "--out", out)
        assert_one_error(rc, err, says)
        assert text == "" and not out.exists()


def test_hub_revisions_loaded_whole_are_compared_by_their_cached_files(gpt_series, tmp_path, monkeypatch, capsys):
    """Revisions whose weights are a pytorch_model.bin (loaded whole, not read tensor by tensor): the files in
    the local cache are hashed, so a revision that repeats the one before is reported and not audited again,
    and one that differs is audited."""
    from safetensors.torch import load_file

    root, names = gpt_series
    revisions = {}
    for i, name in enumerate(names[:3]):  # step100, step200 (trained), step300 (the same weights as step200)
        folder = tmp_path / f"bin-{i}"
        shutil.copytree(name, folder, ignore=shutil.ignore_patterns("*.safetensors"))
        torch.save(load_file(str(Path(name) / "model.safetensors")), folder / "pytorch_model.bin")
        revisions[f"step{100 * (i + 1)}"] = folder
    hub_cache(tmp_path / "cache", "org/tiny-gpt2", {"main": revisions["step100"], **revisions})
    use_hub_cache(monkeypatch, tmp_path / "cache")
    args = ("check", "org/tiny-gpt2", "--data", root / "docs.jsonl", "--context-length", 8, "--limit", 48)
    args += ("--samples", 64, "--batch-size", 16, "--device", "cpu", "--layers", 1, "--format", "json")
    rc, out, err = run(capsys, *args, "--revision", "step100,step200,step300")
    assert rc == 0, err
    doc = strict_json(out)
    ck = {c["name"]: c for c in doc["meta"]["series"]["checkpoints"]}
    assert [ck[n]["status"] for n in ("step100", "step200", "step300")] == ["audited", "audited", "identical"]
    assert ck["step300"]["identical_to"] == "step200" and ck["step300"]["digest"]["files"] == 2  # config, weights
    assert ck["step100"]["digest"]["sha256"] != ck["step200"]["digest"]["sha256"]
    assert _own(doc["records"], "step300") == _own(doc["records"], "step200")
    rc, table, err = run(capsys, *args[:-2], "--revision", "step100,step200,step300")
    assert rc == 0 and "step300 (step 300): its 2 weights and config files" in " ".join(table.split()), table


# --------------------------------------------------------------------------- bad series: one line, before any work


@pytest.fixture()
def no_work(monkeypatch):
    """Fail the test if a model is loaded: a bad series is refused first."""

    def refuse(*a, **k):
        raise AssertionError("a model was loaded before the series was refused")

    monkeypatch.setattr(pipeline, "load", refuse)


def _bad(capsys, tmp_path, spec, *more):
    out = tmp_path / "out.parquet"
    rc, text, err = run(capsys, "check", "model", *VIT_RUN, "--checkpoints", spec, "--out", out, *more)
    assert text == "" and not out.exists()
    return rc, err


def test_bad_series_are_refused_with_one_line(vit_series, vit_dir_wide, tmp_path, capsys, monkeypatch, no_work):
    monkeypatch.chdir(vit_series)
    runs = vit_series / "runs"
    cases = [
        ("nothing-*", "the glob matches no file or folder"),
        (f"runs/ckpt-100,{vit_dir_wide}", "is of another width than the model model: its config.json has hidden_size"),
        (str(vit_dir_wide), "is of another width than the model model"),  # refused before the reference runs
        ("runs/ckpt-100,runs/missing", "runs/missing: no such file or folder"),
        ("runs/ckpt-100,runs/../runs/ckpt-100", "name the same file"),
    ]
    (tmp_path / "linked").symlink_to(runs / "ckpt-200")
    cases.append((f"runs/ckpt-200,{tmp_path / 'linked'}", "name the same file"))
    ambiguous = tmp_path / "amb"
    ambiguous.mkdir()
    for name in ("ckpt-100", "ckpt-0100"):
        shutil.copytree(runs / "ckpt-100", ambiguous / name)
    cases.append((f"{ambiguous}/ckpt-*", "the step numbers are ambiguous"))
    shutil.copytree(runs / "ckpt-100", ambiguous / "final")
    cases.append((f"{ambiguous}/*", "the step numbers are ambiguous"))
    huge = tmp_path / "huge"  # a step beyond int64 orders nothing: refused, not an internal error when written
    for name, source in (("step99999999999999999999", "ckpt-100"), ("step100", "ckpt-200")):
        shutil.copytree(runs / source, huge / name)
    cases.append((f"{huge}/step*", "is larger than a step number can be"))
    broken = tmp_path / "broken"
    shutil.copytree(runs / "ckpt-100", broken)
    (broken / "model.safetensors").write_bytes(b"\x00" * 4)
    cases.append((f"runs/ckpt-100,{broken}", "cannot read model.safetensors"))
    deep = tmp_path / "deep"  # a config nested deeper than Python parses: an input error, not a bug
    shutil.copytree(runs / "ckpt-200", deep)
    (deep / "config.json").write_text('{"deep": ' + "[" * 100_000 + "]" * 100_000 + "}")
    cases.append((f"runs/ckpt-100,{deep}", "its config.json is nested too deeply"))
    relabelled = tmp_path / "dtype-200"  # a header that says F64 for the F32 data it holds: refused before any work
    shutil.copytree(runs / "ckpt-200", relabelled)
    raw = (relabelled / "model.safetensors").read_bytes()
    length = int.from_bytes(raw[:8], "little")
    head = raw[8 : 8 + length].replace(b'"F32"', b'"F64"', 1)
    (relabelled / "model.safetensors").write_bytes(raw[:8] + head + raw[8 + length :])
    cases.append((f"runs/ckpt-100,{relabelled}", "of dtype F64 and shape"))
    for name, change in (("relu-1", {"hidden_act": "relu", "layer_norm_eps": 0.5}), ("code-1", {"auto_map": {}})):
        shutil.copytree(runs / "ckpt-100", tmp_path / name)  # a config of its own: not audited as the model's
        config = json.loads((tmp_path / name / "config.json").read_text())
        if name == "code-1":
            change = {"auto_map": {"AutoModel": "evil.ViTModel"}}
            (tmp_path / name / "evil.py").write_text("raise SystemExit('ran')\n")
        (tmp_path / name / "config.json").write_text(json.dumps(config | change))
    cases.append(
        (
            str(tmp_path / "relu-1"),
            f"{tmp_path / 'relu-1'} computes otherwise than the model model: its config.json has "
            'hidden_act = "relu" (model: "gelu"), layer_norm_eps = 0.5 (model: 1e-12)',
        )
    )
    cases.append((f"runs/ckpt-100,{tmp_path / 'code-1'}", f"{tmp_path / 'code-1'} needs code from its own folder"))
    pipe = tmp_path / "pipe.safetensors"  # a weights file named itself that is a named pipe: refused, not read
    os.mkfifo(pipe)
    cases.append((f"runs/ckpt-100,{pipe}", "pipe.safetensors is a named pipe"))
    with pipe_writer(pipe):
        for spec, says in cases:
            rc, err = _bad(capsys, tmp_path, spec)
            assert_one_error(rc, err, says)
    rc, err = _bad(capsys, tmp_path, "runs/ckpt-100", "--weights", "runs/ckpt-200")
    line = assert_one_error(rc, err, "--weights has no effect with a series: each checkpoint gives the trained weights")
    assert "features" not in line  # the reason of --save-features' refusal is not this one's
    rc, err = _bad(capsys, tmp_path, "runs/ckpt-100", "--save-features", str(tmp_path / "f"))
    assert_one_error(rc, err, "--save-features has no effect with a series: a series keeps no features")
    if os.geteuid() != 0:  # root reads whatever the permissions say
        locked = tmp_path / "locked"
        shutil.copytree(runs / "ckpt-100", locked)
        (locked / "model.safetensors").chmod(0)
        rc, err = _bad(capsys, tmp_path, f"runs/ckpt-100,{locked}")
        assert_one_error(rc, err, "cannot read")


def test_a_checkpoint_with_other_data_files_is_refused_naming_which_one_holds_them(
    vit_series, tmp_path, capsys, monkeypatch, no_work
):
    """The line says which of the two checkpoints holds the preprocessing file the other lacks."""
    monkeypatch.chdir(vit_series)
    with_file, without, other = tmp_path / "with-100", tmp_path / "without-200", tmp_path / "other-300"
    for folder, source in ((with_file, "ckpt-100"), (without, "ckpt-200"), (other, "ckpt-400")):
        shutil.copytree(vit_series / "runs" / source, folder)
    (with_file / "preprocessor_config.json").write_text('{"image_mean": [0.5, 0.5, 0.5]}')
    (other / "preprocessor_config.json").write_text('{"image_mean": [0.1, 0.2, 0.3]}')
    cases = [
        (
            f"{with_file},{without}",
            f"{without}: it has no preprocessor_config.json, the first checkpoint {with_file} has one",
        ),
        (
            f"{without},{with_file}",
            f"{with_file}: it has a preprocessor_config.json, the first checkpoint {without} has none",
        ),
        (
            f"{with_file},{other}",
            f"{other}: its preprocessor_config.json differs from the first checkpoint {with_file}'s",
        ),
    ]
    for spec, says in cases:
        rc, err = _bad(capsys, tmp_path, spec)
        assert_one_error(rc, err, says)


def test_a_checkpoint_folder_refused_by_the_model_folder_checks_is_named_as_a_checkpoint(
    vit_series, tmp_path, capsys, monkeypatch, no_work
):
    """A link leading out of a checkpoint folder, a pipe in it or an index naming a file outside it: the line
    names --checkpoints and the checkpoint as given, and calls it a checkpoint folder, not the model folder."""
    monkeypatch.chdir(vit_series)
    for name in ("piped-200", "linked-300", "indexed-400"):
        shutil.copytree(vit_series / "runs" / "ckpt-100", tmp_path / name)
    os.mkfifo(tmp_path / "piped-200" / "preprocessor_config.json")
    (tmp_path / "linked-300" / "vocab.txt").symlink_to(vit_series / "model" / "config.json")
    (tmp_path / "indexed-400" / "model.safetensors.index.json").write_text('{"weight_map": {"a": "../x.safetensors"}}')
    cases = [
        ("piped-200", "is a named pipe"),
        ("linked-300", "is a symbolic link to"),
        ("indexed-400", "is malformed"),
    ]
    for name, says in cases:
        rc, err = _bad(capsys, tmp_path, f"runs/ckpt-100,{tmp_path / name}")
        line = assert_one_error(rc, err, says)
        assert line.startswith(f"Error: --checkpoints {tmp_path / name}: "), line
        assert "model folder" not in line.split("malformed")[0], line
    rc, err = _bad(capsys, tmp_path, f"runs/ckpt-100,{tmp_path / 'piped-200'}")
    assert f"in the checkpoint folder {tmp_path / 'piped-200'}" in err, err


def test_a_shard_that_is_a_folder_is_not_said_to_be_missing(vit_series, tmp_path, capsys, monkeypatch, no_work):
    monkeypatch.chdir(vit_series)
    for name in ("folder-200", "gone-300"):
        shutil.copytree(vit_series / "runs" / "ckpt-100", tmp_path / name)
        (tmp_path / name / "model.safetensors").unlink()
        index = {"weight_map": {"embeddings.cls_token": "shard-1.safetensors"}}
        (tmp_path / name / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "folder-200" / "shard-1.safetensors").mkdir()
    for name, says in (("folder-200", "which is not a regular file"), ("gone-300", "which is missing")):
        rc, err = _bad(capsys, tmp_path, f"runs/ckpt-100,{tmp_path / name}")
        assert_one_error(rc, err, f"{tmp_path / name}: its index names shard-1.safetensors, {says}")


def test_a_checkpoint_whose_blocks_are_wider_is_refused_before_any_work(
    vit_series, tmp_path, capsys, monkeypatch, no_work
):
    """A block's tensor, which the library writes under another name than the model's module has for it, is held
    against the model's shape before any work, whether the checkpoint comes first or after one that fits (the line
    then names it, not the one that fits)."""
    from safetensors.torch import load_file, save_file

    monkeypatch.chdir(vit_series)
    sd = load_file(str(vit_series / "runs" / "ckpt-100" / "model.safetensors"))
    key = "encoder.layer.0.intermediate.dense.bias"
    wide = tmp_path / "ffn-step9.safetensors"
    save_file({**sd, key: torch.zeros(2 * sd[key].shape[0])}, str(wide))
    says = f"{wide} does not fit the model model: its tensor {key} has shape ({2 * sd[key].shape[0]},)"
    for spec in (str(wide), f"{wide},runs/ckpt-100", f"runs/ckpt-100,{wide}"):
        rc, err = _bad(capsys, tmp_path, spec)
        assert_one_error(rc, err, says)


def test_a_timm_checkpoint_of_another_width_is_refused_before_any_work(timm_dir, tmp_path, capsys, no_work):
    """A timm model's checkpoints in safetensors form are held to the model before any work, by their tensors' names
    and shapes as they load (put through the model's own checkpoint filter, on the meta device): a folder or file
    of another width is refused whether it comes first or after one that fits, where one saved with ``module.``
    names or at another image size (its position table resampled as it loads) is not."""
    import timm
    from safetensors.torch import load_file, save_file

    runs = tmp_path / "runs"
    tiny.save_model("timm-vit", runs / "ckpt-100", seed=2)
    tiny.save_model("timm-vit", runs / "ckpt-200", seed=3, embed_dim=48)
    args = json.loads((timm_dir / "config.json").read_text())["model_args"]
    sd = load_file(str(runs / "ckpt-100" / "model.safetensors"))
    save_file({f"module.{k}": v for k, v in sd.items()}, str(tmp_path / "ddp-step300.safetensors"))
    other = timm.create_model("vit_tiny_patch16_224", num_classes=0, **{**args, "img_size": 48}).state_dict()
    save_file({k: v.contiguous() for k, v in other.items()}, str(tmp_path / "big-step400.safetensors"))
    says = f"{runs / 'ckpt-200'} does not fit the model {timm_dir}: its tensor blocks.0.attn.proj.bias has shape (48,)"
    for spec in (f"{runs}/ckpt-*", str(runs / "ckpt-200")):
        rc, text, err = run(capsys, "check", timm_dir, *VIT_RUN, "--checkpoints", spec)
        assert_one_error(rc, err, says)
        assert text == ""
    fits = f"{runs / 'ckpt-100'},{tmp_path / 'ddp-step300.safetensors'},{tmp_path / 'big-step400.safetensors'}"
    assert len(resolve_series(fits, None, ModelRequest(str(timm_dir))).checkpoints) == 3


def test_a_torch_checkpoint_of_another_width_is_refused_before_any_work(
    vit_series, vit_dir_wide, tmp_path, capsys, monkeypatch, no_work
):
    """A torch checkpoint (``.bin``) carries no config: its tensors' shapes, read from its pickle without their
    data (in the zip form or the legacy one), are held against the model's before any checkpoint is audited (no
    model loaded), as a safetensors header's are, whether it follows a checkpoint that fits or comes alone."""
    from safetensors.torch import load_file

    monkeypatch.chdir(vit_series)
    good, wide = tmp_path / "good-step1.bin", tmp_path / "wide-step2.bin"
    torch.save(load_file(str(vit_series / "runs" / "ckpt-100" / "model.safetensors")), good)
    torch.save({"state_dict": load_file(str(vit_dir_wide / "model.safetensors")), "epoch": 2}, wide)
    says = f"{wide} does not fit the model model: its tensor embeddings.cls_token has shape (1, 1, 48), the model's"
    for spec in (f"{good},{wide}", f"runs/ckpt-100,{wide}", str(wide)):
        rc, err = _bad(capsys, tmp_path, spec)
        assert_one_error(rc, err, says)
    old = tmp_path / "old-step2.bin"  # torch's legacy form: its pickle read with fake tensors, its data not at all
    torch.save(torch.load(wide, weights_only=True), old, _use_new_zipfile_serialization=False)
    rc, err = _bad(capsys, tmp_path, f"{good},{old}")
    assert_one_error(rc, err, says.replace(str(wide), str(old)))
    torch.save({"weights": [1, 2, 3]}, tmp_path / "list-step4.bin")  # read as a state dict of tensors, or refused
    rc, err = _bad(capsys, tmp_path, f"{good},{tmp_path / 'list-step4.bin'}")
    assert_one_error(rc, err, "list-step4.bin does not hold a state dict of tensors")
    # one model's tensors in two forms: a torch file may hold a tensor its safetensors save leaves out (a tied one)
    extra = tmp_path / "extra-step3.bin"
    torch.save(torch.load(good, weights_only=True) | {"head.weight": torch.zeros(3, 16)}, extra)
    series = resolve_series(f"runs/ckpt-100,{good},{extra}", None, ModelRequest("model"))
    assert [c.step for c in series.checkpoints] == [100, 1, 3]
    # in one form too: a buffer one library version saved and another did not is no tensor the model loads
    buffer = tmp_path / "buffer-step5.bin"
    torch.save(torch.load(good, weights_only=True) | {"embeddings.position_ids": torch.arange(5)[None]}, buffer)
    series = resolve_series(f"{good},{buffer}", None, ModelRequest("model"))
    assert [c.step for c in series.checkpoints] == [1, 5]
    # a tensor the model loads, held by one and not the other, is another architecture
    lacking = tmp_path / "lacking-step6.bin"
    torch.save({k: v for k, v in torch.load(good, weights_only=True).items() if k != "embeddings.cls_token"}, lacking)
    for first in (good, "runs/ckpt-100"):  # in one form, and in another (a safetensors save) than the first's
        rc, err = _bad(capsys, tmp_path, f"{first},{lacking}")
        assert_one_error(rc, err, "lacking-step6.bin is of another architecture than the first checkpoint")
        assert "it lacks the tensor embeddings.cls_token" in err, err
    cut = tmp_path / "cut-step7.bin"  # a copy that stopped: no legacy file to read when loaded, refused now
    cut.write_bytes(good.read_bytes()[:-200])
    rc, err = _bad(capsys, tmp_path, f"{good},{cut}")
    assert_one_error(rc, err, "cut-step7.bin: the file begins as a zip archive (torch.save's form) but has no end")


def test_an_alias_s_checkpoints_of_another_width_are_refused_before_any_work(gpt_series, tmp_path, capsys, no_work):
    """The alias gpt2 builds offline from its built-in config (d = 768, 12 blocks): each checkpoint is held against
    it before the reference is audited, as a single run of it holds its weights: a folder's config.json by the
    alias's width and depth (its own config builds it, so its vocabulary and positions are its own), a weights
    file's tensors by the shapes of the alias's model."""
    from safetensors.torch import load_file, save_file

    _root, names = gpt_series
    narrow = tmp_path / "narrow-step1.safetensors"
    save_file(load_file(str(Path(names[0]) / "model.safetensors")), str(narrow))
    cases = [
        (
            f"{names[0]},{names[1]}",
            f"{names[0]} is of another width than the model gpt2: its config.json has n_embd = 16 (gpt2: 768)",
        ),
        (str(narrow), f"{narrow} does not fit the model gpt2: its tensor h.0.attn.c_attn.bias has shape (48,), the"),
    ]
    for spec, says in cases:
        rc, text, err = run(capsys, "check", "gpt2", "--checkpoints", spec, "--context-length", 8, "--device", "cpu")
        assert text == ""
        assert_one_error(rc, err, says)
    own = tmp_path / "own-step2"  # the alias's width and depth, its own vocabulary and positions: no other model
    own.mkdir()
    config = json.loads((Path(names[0]) / "config.json").read_text()) | {"n_embd": 768, "n_layer": 12, "n_head": 12}
    (own / "config.json").write_text(json.dumps(config))
    save_file({"unused": torch.zeros(1)}, str(own / "model.safetensors"))
    assert [c.step for c in resolve_series(str(own), None, ModelRequest("gpt2")).checkpoints] == [2]


def test_an_alias_s_checkpoint_is_refused_for_what_a_single_run_of_it_refuses(vit_series, capsys, no_work):
    """An alias's checkpoint with a config of its own is built from that config, not the alias's: one of another
    width is refused because its weights do not fit the alias, as a single --weights run finds; the line said the
    series audits every checkpoint with the model's configuration, which it does not for an alias."""
    ckpt = vit_series / "runs" / "ckpt-100"
    rc, text, err = run(capsys, "check", "vit-base", "--checkpoints", ckpt, "--device", "cpu")
    line = assert_one_error(rc, err, f"{ckpt} is of another width than the model vit-base: its config.json has ")
    assert f"its weights do not fit vit-base, as a single run of vit-base with them (--weights {ckpt}) finds" in line
    assert "with the model's configuration" not in line and text == ""


def test_checkpoints_whose_configs_hold_the_same_nan_are_of_one_model(vit_series, tmp_path):
    """Two configs that both say NaN for a key say the same (NaN is not equal to itself as a float)."""
    names = []
    for name in ("ckpt-1", "ckpt-2"):
        shutil.copytree(vit_series / "runs" / "ckpt-100", tmp_path / name)
        config = tmp_path / name / "config.json"
        config.write_text(config.read_text().rstrip().removesuffix("}") + ', "threshold": NaN}')
        names.append(str(tmp_path / name))
    series = resolve_series(",".join(names), None, ModelRequest(str(vit_series / "model")))
    assert [c.step for c in series.checkpoints] == [1, 2]


def test_checkpoints_whose_configs_differ_only_in_dropout_are_of_one_model(vit_series, tmp_path):
    """A dropout rate or initialisation scale changed between two saves computes nothing else in an audit: as
    against the model, it does not make the checkpoints two architectures; a key that computes does."""
    names = []
    for name, change in (("ckpt-1", {}), ("ckpt-2", {"hidden_dropout_prob": 0.3, "initializer_range": 0.5})):
        shutil.copytree(vit_series / "runs" / "ckpt-100", tmp_path / name)
        config = tmp_path / name / "config.json"
        config.write_text(json.dumps(json.loads(config.read_text()) | change))
        names.append(str(tmp_path / name))
    series = resolve_series(",".join(names), None, ModelRequest(str(vit_series / "model")))
    assert [c.step for c in series.checkpoints] == [1, 2]
    shutil.copytree(vit_series / "runs" / "ckpt-100", tmp_path / "ckpt-3")
    config = tmp_path / "ckpt-3" / "config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | {"use_mask_token": True}))  # not the model's
    with pytest.raises(InputError, match=r"ckpt-3 is of another architecture than the first checkpoint .*use_mask"):
        resolve_series(f"{names[0]},{tmp_path / 'ckpt-3'}", None, ModelRequest(str(vit_series / "model")))


def test_checkpoints_whose_configs_write_one_value_two_ways_are_of_one_model(vit_series, tmp_path):
    """A config value written as 10000 by one writer and 10000.0 by another is the same value."""
    names = []
    for name, theta in (("ckpt-1", "10000"), ("ckpt-2", "10000.0")):
        shutil.copytree(vit_series / "runs" / "ckpt-100", tmp_path / name)
        config = tmp_path / name / "config.json"
        config.write_text(config.read_text().rstrip().removesuffix("}") + f', "rope_theta": {theta}}}')
        names.append(tmp_path / name)
    series = resolve_series(",".join(map(str, names)), None, ModelRequest(str(vit_series / "model")))
    assert [c.step for c in series.checkpoints] == [1, 2]
    # an iterator of paths (as Path.glob gives them) is a series too, in its order
    again = resolve_series(iter(sorted(tmp_path.glob("ckpt-*"))), None, ModelRequest(str(vit_series / "model")))
    assert [c.step for c in again.checkpoints] == [1, 2]


def test_the_library_refuses_a_series_it_cannot_run(vit_series, no_work):
    with pytest.raises(InputError, match="a series needs checkpoints"):
        audit_series(str(vit_series / "model"))
    with pytest.raises(InputError, match=r"^weights has no effect with a series"):  # audit's keyword, refused here
        audit_series(
            str(vit_series / "model"),
            checkpoints=str(vit_series / "runs" / "ckpt-100"),
            weights=str(vit_series / "runs" / "ckpt-200"),
        )
    with pytest.raises(InputError, match="add trained to variants"):
        audit_series(str(vit_series / "model"), checkpoints=str(vit_series / "runs" / "ckpt-100"), variants=["random"])


def test_a_series_resolves_its_checkpoints_once_and_reads_each_header_once(vit_series, image_dir, capsys, monkeypatch):
    """A run resolves its checkpoints once (the command line hands the series it checked its outputs against to
    audit_series) and reads each checkpoint's safetensors header once: for the checks before any work, then kept
    for the checkpoint's digest and for the read of its tensors."""
    import sys

    from mhaaudit import feature_files
    from mhaaudit.series import spec

    monkeypatch.chdir(vit_series)
    reads: list[str] = []
    real = feature_files.safetensors_header
    for module in list(sys.modules.values()):  # wherever the reader was imported into
        if getattr(module, "__name__", "").startswith("mhaaudit") and vars(module).get("safetensors_header") is real:
            monkeypatch.setattr(module, "safetensors_header", lambda p: reads.append(os.path.realpath(p)) or real(p))
    resolved: list[int] = []
    check = spec._check_local
    monkeypatch.setattr(spec, "_check_local", lambda refs, base: resolved.append(len(refs)) or check(refs, base))
    files = [os.path.realpath(vit_series / "runs" / c / "model.safetensors") for c in ("ckpt-100", "ckpt-200")]
    given = "runs/ckpt-100,runs/ckpt-200"
    rc, _out, err = run(
        capsys, "check", "model", "--data", image_dir, *VIT_RUN, "--checkpoints", given, "--format", "json"
    )
    assert rc == 0, err
    assert resolved == [2] and [reads.count(f) for f in files] == [1, 1], reads
    reads.clear()
    resolved.clear()
    audit_series("model", checkpoints=given, data=str(image_dir), limit=40, samples=64, batch_size=16, device="cpu")
    assert resolved == [2] and [reads.count(f) for f in files] == [1, 1], reads


def test_a_resolved_series_is_taken_for_its_own_model_alone(vit_series, vit_dir, monkeypatch, no_work):
    """``audit_series`` takes the Series ``resolve_series`` gave for the model it audits as it is, checked then;
    one resolved for another model, or built by hand (checked by no one), is refused before any work."""
    from mhaaudit.series import Series

    monkeypatch.chdir(vit_series)
    series = resolve_series("runs/ckpt-100,runs/ckpt-200", None, ModelRequest("model"))
    for model, given in ((str(vit_dir), series), ("model", Series(series.checkpoints, "local"))):
        with pytest.raises(InputError, match="a Series is taken as resolve_series gave it for the model audited"):
            audit_series(model, checkpoints=given, device="cpu")


def test_the_library_checks_out_as_the_command_line_does(vit_series, tmp_path, monkeypatch, no_work):
    """``audit_series(out=...)`` is refused before any work where ``--out`` is: inside the model's or a
    checkpoint's folder, a name other than .parquet, or no path at all; nothing is written."""
    monkeypatch.chdir(vit_series)
    cases = [
        ("model/x.parquet", OutputError, "out model/x.parquet lies inside model, an input folder of this run"),
        (
            "runs/ckpt-100/x.parquet",
            OutputError,
            "out runs/ckpt-100/x.parquet lies inside runs/ckpt-100, an input folder",
        ),
        (tmp_path / "x.json", InputError, "the records are written as parquet; use a .parquet file name"),
        (3, InputError, "out 3: give the results file's path"),
    ]
    for out, error, says in cases:
        with pytest.raises(error, match=re.escape(says)):
            audit_series("model", checkpoints="runs/ckpt-100", out=out, limit=40, samples=64, device="cpu")
    assert (
        not (vit_series / "model" / "x.parquet").exists()
        and not (vit_series / "runs" / "ckpt-100" / "x.parquet").exists()
    )
    assert not (tmp_path / "x.json").exists()


def test_an_output_inside_a_checkpoint_is_refused_naming_the_paths_as_given(vit_series, capsys, monkeypatch, no_work):
    """An output of a series refused for lying inside a checkpoint's folder names the output and the checkpoint as
    they were given (relative here), as every other refusal names its paths, not as the absolute path the series
    reads the checkpoint at; alike for a list of checkpoints and a glob's matches."""
    monkeypatch.chdir(vit_series)
    for spec in ("runs/ckpt-100,runs/ckpt-200", "runs/ckpt-*"):
        for option, path in (("--out", "runs/ckpt-100/x.parquet"), ("--plot", "runs/ckpt-100/trend.png")):
            rc, text, err = run(capsys, "check", "model", *VIT_RUN, "--checkpoints", spec, option, path)
            line = assert_one_error(rc, err, f"{option} {path} lies inside runs/ckpt-100, an input folder of this run")
            assert text == "" and str(vit_series) not in line
    assert not (vit_series / "runs" / "ckpt-100" / "x.parquet").exists()
    assert not (vit_series / "runs" / "ckpt-100" / "trend.png").exists()


def test_the_results_file_names_parameters_as_its_caller_does(tmp_path, monkeypatch):
    """The series writes its own --out file as it runs: the messages in it name the command line's
    flags when the command line runs it (``names``), as its stdout does, and the library's names otherwise."""
    from mhaaudit.cli.names import flag
    from mhaaudit.errors import Param
    from mhaaudit.series import run as series_run

    written = []
    monkeypatch.setattr(series_run, "write_parquet", lambda rows, path, meta, now: written.append((rows, meta)))

    class Result:  # what _Store.save reads of a SeriesResult
        def records(self):
            return [{"check": "assumption_1", "variant": "random", "reason": "raise " + Param("limit")}]

        def sweep_rows(self):
            return []

        def meta(self):
            return {"notes": ["pass " + Param("context_length") + " below 48"]}

    for names, reason, note in (
        (flag, "raise --limit", "pass --context-length below 48"),
        (None, "raise limit", "pass context_length below 48"),
    ):
        written.clear()
        series_run._Store(tmp_path / "s.parquet", {}, None, names).save(Result())
        ((rows, meta),) = written
        assert rows[0]["reason"] == reason and meta["notes"] == [note]
