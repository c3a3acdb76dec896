"""``mhaaudit reproduce``: every target in every output format on tiny models, and clean errors.

Each target runs once for real (JSON, with ``--out`` and ``--plot`` where it has one); the table
and parquet outputs of the same result are then produced from that result, so every format of
every target is exercised without repeating the work.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clitools import assert_one_error, help_text, run
from conftest import strict_json, tiny

from mhaaudit.cli.app import main
from mhaaudit.io import read_parquet_metadata
from mhaaudit.reproduce import target_spec

SMALL = ["--samples", "40", "--device", "cpu"]
RECORD_KEYS = {
    "target",
    "model",
    "column",
    "kind",
    "check",
    "k",
    "our_k",
    "paper_verdict",
    "paper_value",
    "paper_detail",
    "source",
    "our_verdict",
    "our_value",
    "ci_low",
    "ci_high",
    "our_detail",
    "status",
    "match",
    "reason",
    "differences",
}


def run_captured(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory, bert_dir):
    """The tiny GPT-2, with the tiny BERT's 100-token vocabulary beside it (its trained column needs one)."""
    folder = tiny.save_model("gpt2", tmp_path_factory.mktemp("tiny_gpt2"))
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        shutil.copy(bert_dir / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def argv(vit_dir, bert_dir, gpt2_dir, image_dir):
    images = ["--model", f"vit={vit_dir}", "--data", image_dir, "--limit", "20", *SMALL]
    return {
        "table1": ["table1", *images, "--weights", vit_dir],
        "figure1": ["figure1", *images],
        "table3": [
            "table3",
            "--model",
            f"bert={bert_dir}",
            "--model",
            f"gpt2={gpt2_dir}",
            "--weights",
            f"bert={bert_dir}",
            "--context-length",
            "bert=14",
            "--context-length",
            "gpt2=8",
            "--limit",
            "20",
            *SMALL,
        ],
        "figure2": ["figure2", "--values", "1,2", "--sizes", "16", "--max-steps", "6", "--device", "cpu"],
    }


@pytest.fixture(scope="module")
def runs(argv, tmp_path_factory):
    """Each target once, as JSON, with --out and (except table1) --plot; the result object kept."""
    import mhaaudit.reproduce as rp

    work = tmp_path_factory.mktemp("reproduce")
    done = {}
    real = rp.reproduce_paper
    for target, args in argv.items():
        kept = {}

        def keep(*a, kept=kept, **kw):
            kept["result"] = real(*a, **kw)
            return kept["result"]

        files = {"out_file": work / f"{target}.parquet", "plot": work / f"{target}.png"}
        extra = ["--out", files["out_file"]] + ([] if target == "table1" else ["--plot", files["plot"]])
        rp.reproduce_paper = keep
        try:
            rc, out, err = run_captured("reproduce", *args, *extra, "--format", "json")
        finally:
            rp.reproduce_paper = real
        done[target] = dict(rc=rc, stdout=out, err=err, result=kept.get("result"), **files)
    return done


TARGETS = ["table1", "table3", "figure1", "figure2"]


@pytest.mark.parametrize("target", TARGETS)
def test_json(runs, target):
    r = runs[target]
    assert r["rc"] == 0, r["err"]
    doc = strict_json(r["stdout"])
    assert {"meta", "records"} <= set(doc)
    assert doc["meta"]["command"] == "reproduce" and doc["meta"]["target"] == target
    assert doc["meta"]["paper"]["arxiv"] == "2306.02010" and doc["meta"]["setting"]
    recs = doc["records"]
    assert all(set(x) == RECORD_KEYS for x in recs)
    assert sum(doc["meta"]["counts"].values()) == len(recs)
    for x in recs:
        assert x["match"] is {"match": True, "differs": False}.get(x["status"])
        assert bool(x["reason"]) == (x["status"] != "match"), x  # every difference has its reason
    if target != "figure2":
        assert len(recs) == len(target_spec(target)["values"])
    if target in ("table3", "figure1"):
        assert doc["sweep"] and {"model", "column", "k", "fraction", "ci_low", "ci_high"} <= set(doc["sweep"][0])
    if target == "figure2":
        assert [x["heads"] for x in doc["runs"]] == [1, 2]
        assert {x["kind"] for x in recs} == {"linear", "monotone", "theorem1"}
    assert r["err"] == ""  # no progress bars with --format json


@pytest.mark.parametrize("target", TARGETS)
def test_out_file_and_plot(runs, target):
    r = runs[target]
    rows = pq.read_table(r["out_file"]).to_pylist()  # the records of the run (and its sweep rows), stamped
    meta = read_parquet_metadata(r["out_file"])
    assert meta["target"] == target
    comps = [x for x in rows if x.get("check") != "sweep"]
    assert len(comps) == len(r["result"].comparisons)
    if target == "table1":
        assert not r["plot"].exists()
    else:
        assert r["plot"].stat().st_size > 1000


@pytest.mark.parametrize("target", TARGETS)
def test_table(runs, target, monkeypatch, capsys):
    import mhaaudit.reproduce as rp

    monkeypatch.setattr(rp, "reproduce_paper", lambda *a, **kw: runs[target]["result"])
    rc, out, err = run(capsys, "reproduce", target, "--format", "table")
    assert rc == 0, err
    flat = " ".join(out.split())
    assert "the paper's values beside this run's" in flat and "This run" in flat
    counts = runs[target]["result"].counts()
    assert f"{counts['match']} match, {counts['differs']} differ" in flat
    if counts["differs"]:
        assert "Why they differ" in flat


@pytest.mark.parametrize("target", TARGETS)
def test_parquet(runs, target, monkeypatch, capsysbinary):
    import mhaaudit.reproduce as rp

    monkeypatch.setattr(rp, "reproduce_paper", lambda *a, **kw: runs[target]["result"])
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    rc, out, err = run(capsysbinary, "reproduce", target, "--format", "parquet")
    assert rc == 0, err
    t = pq.read_table(pa.BufferReader(out))
    rows = [x for x in t.to_pylist() if x.get("check") != "sweep"]
    assert len(rows) == len(runs[target]["result"].comparisons)
    assert RECORD_KEYS <= set(rows[0])
    assert json.loads(t.schema.metadata[b"mhaaudit"])["target"] == target


def test_table1_facts(runs, vit_dir):
    doc = strict_json(runs["table1"]["stdout"])
    recs = {(x["column"], x["kind"], x["check"]): x for x in doc["records"]}
    emb = recs[("embedding", "check", "assumption_1")]
    assert (emb["k"], emb["our_k"], emb["paper_verdict"], emb["our_verdict"]) == (197, 17, "fails", "fails")
    trained = recs[("trained", "check", "assumption_1")]
    assert trained["paper_value"] == 0.9982
    assert any(f"trained weights from local folder {vit_dir}" in d for d in trained["differences"])


def test_table3_runs_both_models_and_the_bert_sweeps(runs):
    res = runs["table3"]["result"]
    assert set(res.facts) == {"bert", "gpt2"} and res.facts["bert"].n == 14 and res.facts["gpt2"].n == 8
    assert set(res.sweeps) == {("bert", "random-L1"), ("bert", "trained-L1")}
    est = [c for c in res.comparisons if c.kind == "estimate"]
    assert {c.paper_value for c in est} == {349.0, 291.0}
    gpt2_trained = [c for c in res.comparisons if c.model == "gpt2" and c.column.startswith("trained")]
    assert gpt2_trained and all(c.status != "unavailable" for c in gpt2_trained)  # the folder's own weights


def test_help(capsys):
    text = help_text(capsys, "reproduce")
    for word in ("table1", "table3", "figure1", "figure2", "--weights", "--limit", "--samples", "--format", "--plot"):
        assert word in text


@pytest.mark.parametrize(
    "args, match",
    [
        (["table2"], "unknown target 'table2'"),
        (["table1", "--preset", "cpu"], "--preset does not apply to table1"),
        (["figure1", "--weights", "x"], "--weights does not apply to figure1"),
        (["figure2", "--samples", "10"], "--samples does not apply to figure2"),
        (["table1", "--context-length", "8"], "--context-length does not apply to table1"),
        (["table1", "--plot", "x.png"], "--plot does not apply to table1"),
        (["table3", "--model", "vit=x"], "--model 'vit=x': name the model it is for (bert=... or gpt2=...)"),
        (["table3", "--weights", "/nowhere"], "--weights '/nowhere': name the model it is for"),
        (["table1", "--model", "bert=x"], "--model 'bert=x': bert is not a model of this target, whose model is vit"),
        (["figure1", "--model", "GPT2=x"], "--model 'GPT2=x': gpt2 is not a model of this target, whose model is vit"),
        (["table1", "--weights", "gpt2=/w"], "--weights 'gpt2=/w': gpt2 is not a model of this target"),
        (["table3", "--context-length", "bert=abc"], "--context-length"),
        (["table3", "--models", "roberta"], "unknown model key 'roberta'"),
        (["table1", "--model", "vit="], "no value after '='"),
        (["table1", "--model", ""], "--model is empty: give a value"),
        (["table3", "--weights", " "], "--weights is empty: give a value (bert=... or gpt2=...)"),
        (["table1", "--limit", "0"], "--limit"),
        (["table1", "--samples", "0"], "--samples"),
        (["table1", "--out", "x.csv"], "parquet"),
        (["figure2", "--preset", "nope"], "unknown --preset 'nope'"),
    ],
)
def test_bad_input_is_one_line(capsys, args, match):
    rc, out, err = run(capsys, "reproduce", *args)
    assert_one_error(rc, err, match)
    assert out == ""


def test_a_path_holding_another_targets_key_is_still_a_path(tmp_path, monkeypatch):
    """A folder named like ``bert=x`` that exists is the one model of table1, not a key of another target."""
    from mhaaudit.cli.reproduce import keyed

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bert=x").mkdir()
    assert keyed("--model", ["bert=x"], ("vit",), ("bert", "gpt2")) == {"vit": "bert=x"}
    assert keyed("--model", ["vit=bert=x"], ("vit",), ("bert", "gpt2")) == {"vit": "bert=x"}


def test_a_model_of_the_other_modality_is_refused_before_any_work(capsys, monkeypatch, vit_dir, bert_dir):
    """table1 and figure1 hold an image model's columns, table3 a text model's: a model put in place of the
    paper's that takes the other input would have none of them run (every row n/a, exit 0); refused first."""
    import mhaaudit.reproduce.targets as targets

    def no_work(*args, **kwargs):
        raise AssertionError("a model ran before the refusal")

    monkeypatch.setattr(targets, "audit", no_work)
    monkeypatch.setattr(targets, "capture_features", no_work)
    for args, says in (
        (["table1", "--model", f"vit={bert_dir}"], f"--model vit={bert_dir} is a text model, but table1"),
        (["figure1", "--model", str(bert_dir)], f"--model vit={bert_dir} is a text model, but figure1"),
        (["table3", "--model", f"gpt2={vit_dir}"], f"--model gpt2={vit_dir} is an image model, but table3"),
    ):
        rc, out, err = run(capsys, "reproduce", *args, "--limit", "40", "--samples", "20")
        line = assert_one_error(rc, err, says)
        assert "Use table" in line and out == ""


def test_the_modality_check_refuses_only_what_it_knows(monkeypatch, vit_dir, bert_dir, tmp_path):
    """A model given as a pathlib.Path is its path; a folder of a family the audit does not probe, or a hub id, is
    left to the run (which says what it finds), not called a text model; a value that is no name is one InputError."""
    from pathlib import Path

    import mhaaudit.reproduce.targets as targets
    from mhaaudit.errors import InputError
    from mhaaudit.reproduce import table1, table3

    ran = []

    def audit(name, **kw):
        ran.append(name)
        raise InputError("stop here")

    monkeypatch.setattr(targets, "audit", audit)
    swin = tmp_path / "swin"
    swin.mkdir()
    (swin / "config.json").write_text(json.dumps({"model_type": "swin", "image_size": 224}))
    for call, name in (
        (lambda: table1(model={"vit": Path(vit_dir)}, limit=40, samples=10), str(vit_dir)),
        (lambda: table1(model={"vit": str(swin)}, limit=40, samples=10), str(swin)),
        (lambda: table1(model={"vit": "someone/some-model"}, limit=40, samples=10), "someone/some-model"),
        (lambda: table3(model={"bert": Path(bert_dir)}, models=["bert"], limit=40, samples=10), str(bert_dir)),
    ):
        with pytest.raises(InputError, match="stop here"):
            call()
        assert ran[-1] == name
    with pytest.raises(InputError, match="is a text model, but table1"):
        table1(model={"vit": Path(bert_dir)}, limit=40, samples=10)
    for bad, says in (
        (dict(model="vit=x"), "model must map the paper's model keys to names, not 'vit=x'"),
        (dict(model={"vit": 5}), "model vit=5: must be a name or a path, not int"),
        (dict(data=5), "data must be a name or a path, not int"),
    ):
        with pytest.raises(InputError, match=re.escape(says)):
            table1(**bad, limit=40, samples=10)


def test_figure2_with_one_value_of_h_cannot_say_whether_the_count_rises():
    """One value of H shows no rise with H, nor its absence: the row is undetermined, as the line's fit beside it
    is, not a difference from the paper (it was "not increasing", counted among the differences)."""
    from mhaaudit.reproduce import figure2

    res = figure2(preset="cpu", values=[3], sizes=[12], max_steps=3)
    rises = [c for c in res.comparisons if "a rise with H takes two" in c.reason]
    assert len(rises) == 1 and rises[0].status == "undetermined" and rises[0].our_verdict is None


@pytest.mark.parametrize("preset, varied", [("paper-fig2b", "n"), ("paper-fig2c", "head-dim")])
def test_figure2_refuses_a_preset_that_does_not_vary_the_heads_before_training(capsys, monkeypatch, preset, varied):
    """paper-fig2b/2c vary n or d_h, not H: known from the grid alone, so refused before a point trains."""
    import mhaaudit.reproduce.targets as targets

    def no_training(*args, **kwargs):
        raise AssertionError("a grid was trained before its refusal")

    monkeypatch.setattr(targets, "run_memorize_grid", no_training)
    rc, out, err = run(capsys, "reproduce", "figure2", "--preset", preset, "--sizes", "8", "--max-steps", "2")
    assert_one_error(rc, err, f"preset '{preset}' varies {varied}")
    assert out == ""


@pytest.mark.parametrize("models", ["", ",", " , "])
def test_table3_refuses_a_models_list_that_names_none(capsys, monkeypatch, models):
    """An empty --models names no model: refused, not read as the default (both models, the whole table)."""
    import mhaaudit.reproduce as reproduce

    def no_run(*args, **kwargs):
        raise AssertionError("table3 ran")

    monkeypatch.setattr(reproduce, "reproduce_paper", no_run)
    rc, out, err = run(capsys, "reproduce", "table3", "--models", models)
    assert_one_error(rc, err, f"--models {models!r} names no model")
    assert out == ""


@pytest.mark.parametrize(
    "option, value, flag",
    [
        ("--context-length", "bert=8", "--context-length"),
        ("--weights", "bert=/nowhere", "--weights"),
        ("--model", "bert=bert-base", "--model"),
    ],
)
def test_table3_refuses_a_setting_for_a_model_it_does_not_run(capsys, monkeypatch, option, value, flag):
    """--models gpt2 runs GPT-2 alone: a setting for BERT would go unused, so it is refused before any model runs."""
    import mhaaudit.reproduce.targets as targets

    def no_audit(*args, **kwargs):
        raise AssertionError("a model ran")

    monkeypatch.setattr(targets, "audit", no_audit)
    rc, out, err = run(capsys, "reproduce", "table3", "--models", "gpt2", option, value, "--device", "cpu")
    assert_one_error(rc, err, f"{flag} bert=... has no effect: only gpt2 runs (--models)")
    assert out == ""


def test_missing_weights_path_is_refused_before_work(capsys, vit_dir):
    rc, _out, err = run(capsys, "reproduce", "table1", "--model", f"vit={vit_dir}", "--weights", "/no/such/folder")
    assert_one_error(rc, err, "does not exist")


def test_every_option_applies_to_a_target_whose_library_function_takes_it():
    import click
    import typer.main

    from mhaaudit.cli.app import app
    from mhaaudit.cli.reproduce import EVERY_TARGET, applies

    cmd = typer.main.get_command(app)
    sub = cmd.get_command(click.Context(cmd), "reproduce")
    assert applies("weights") == ("table1", "table3") and applies("max_steps") == ("figure2",)
    assert applies("all_draws") == ("table1", "table3")  # stop_when_decided
    for p in sub.params:
        if p.name not in EVERY_TARGET:
            assert applies(p.name), p.name


def _reproduce_options() -> set[str]:
    import click
    import typer.main

    from mhaaudit.cli.app import app

    cmd = typer.main.get_command(app)
    sub = cmd.get_command(click.Context(cmd), "reproduce")
    return {o for p in sub.params for o in p.opts if o.startswith("--")}


@pytest.mark.parametrize(
    "target, columns, match",
    [
        ("table1", {"a": [1, 2, 3]}, "has no image column; its columns: a (int64)"),
        ("figure1", {"a": [1, 2, 3]}, "has no image column; its columns: a (int64)"),
        ("table3", {"a": [1, 2, 3]}, "has no string column; its columns: a (int64)"),
        ("table3", {"a": ["x y"] * 3, "b": ["u v"] * 3}, "has 2 string columns (a, b) and none is named text"),
        ("table3", "jsonl", "has no string column; its columns: a (int)"),
    ],
)
def test_data_without_a_usable_column_is_refused_naming_only_reproduce_options(
    capsys, tmp_path, vit_dir, bert_dir, target, columns, match
):
    """reproduce has no --text-column or --image-column: its refusal says which column it reads instead of
    advising an option it lacks (check's advice, which names its own option, is unchanged)."""
    import re

    if columns == "jsonl":
        data = tmp_path / "records.jsonl"
        data.write_text('{"a": 1}\n{"a": 2}\n')
    else:
        data = tmp_path / "table.parquet"
        pq.write_table(pa.table(columns), data)
    bert = ["--models", "bert", "--model", f"bert={bert_dir}", "--context-length", "bert=8"]
    model = bert if target == "table3" else ["--model", f"vit={vit_dir}"]
    rc, out, err = run(capsys, "reproduce", target, *model, "--data", data, "--limit", "20", *SMALL)
    line = assert_one_error(rc, err, match)
    assert out == ""
    named = set(re.findall(r"--[a-z][a-z-]*", line))
    assert named <= _reproduce_options(), line
    kind = "image" if target in ("table1", "figure1") else "text"
    assert f"named {kind}" in line, line  # what it reads instead: the well-known names,
    assert line.count(f"named {kind}") == 1, line  # said once, where the reader's own words list them already
    assert line.endswith(f"else the only {'image' if kind == 'image' else 'string'} column"), line


def test_check_still_advises_its_own_column_option(capsys, tmp_path, bert_dir):
    """The reproduce wording is reproduce's alone: check, which has --text-column, still advises it."""
    data = tmp_path / "table.parquet"
    pq.write_table(pa.table({"a": [1, 2, 3]}), data)
    rc, out, err = run(capsys, "check", bert_dir, "--data", data, "--limit", "20", "--context-length", "8", *SMALL)
    assert_one_error(rc, err, "has no string column; its columns: a (int64); choose one with --text-column")
    assert out == ""
