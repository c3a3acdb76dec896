"""``mhaaudit check``: offline end to end on tiny random models, every output, and clean errors."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clitools import assert_one_error, auto_device, help_text, run, time_line
from conftest import TINY_VIT_D, TINY_VIT_N, save_tiny_vit, strict_json, tmp_leftovers

from mhaaudit import __version__
from mhaaudit.checks import CHECKS
from mhaaudit.cli.app import main
from mhaaudit.io import read_parquet_metadata

VARIANTS = ["embedding", "random-attention", "random", "trained"]
RUN = ["--limit", "40", "--samples", "100", "--batch-size", "8"]
RECORD_FIELDS = {
    "check",
    "k",
    "T",
    "d",
    "samples",
    "satisfied",
    "fraction",
    "ci_low",
    "ci_high",
    "threshold",
    "verdict",
    "reason",
    "tolerance",
    "seed",
    "witness",
    "model",
    "variant",
    "layer",
}


def run_captured(*args):
    """``main`` with stdout/stderr captured, for module-scoped fixtures (no capsys there)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def by_variant(records):
    out = {}
    for r in records:
        out.setdefault(r["variant"], {})[r["check"]] = r
    return out


# --------------------------------------------------------------------------- the full audit, once


@pytest.fixture(scope="module")
def hf_audit(vit_dir, image_dir, tmp_path_factory):
    """The tiny ViT folder as the model and as --weights, with every file output at once."""
    work = tmp_path_factory.mktemp("hf_audit")
    files = dict(out=work / "audit.parquet", plot=work / "sweep.png", features=work / "feat")
    rc, out, err = run_captured(
        "check",
        vit_dir,
        "--weights",
        vit_dir,
        "--data",
        image_dir,
        *RUN,
        "--seed",
        "3",
        "--format",
        "json",
        "--out",
        files["out"],
        "--plot",
        files["plot"],
        "--save-features",
        files["features"],
    )
    return dict(rc=rc, stdout=out, err=err, work=work, **files)


def test_hf_folder_end_to_end_json(hf_audit, vit_dir):
    assert hf_audit["rc"] == 0, hf_audit["err"]
    doc = json.loads(hf_audit["stdout"])
    assert set(doc) == {"meta", "records", "sweep"}
    meta = doc["meta"]
    assert meta["tool"] == "mhaaudit" and meta["version"] == __version__ and meta["versions"]["transformers"]
    assert meta["seed"] == 3 and meta["device"] == auto_device() and "rule" in meta["tolerance"]
    assert meta["model_info"]["n"] == TINY_VIT_N and meta["model_info"]["d"] == TINY_VIT_D
    assert list(meta["columns"]) == VARIANTS
    for v in VARIANTS:
        assert meta["columns"][v]["status"] == "ok", (v, meta["columns"][v])
    # the trained column went through the real loading path, from the folder given as --weights
    assert str(vit_dir) in meta["columns"]["trained"]["weights_source"]
    assert "random" in meta["columns"]["random"]["weights_source"]
    recs = by_variant(doc["records"])
    assert list(recs) == VARIANTS
    for v in VARIANTS:
        assert list(recs[v]) == list(CHECKS)
        for check, r in recs[v].items():
            assert RECORD_FIELDS <= set(r), (v, check)
            assert r["verdict"] in ("holds", "fails") and r["T"] == 40 and r["d"] == TINY_VIT_D
            assert r["model"] == str(vit_dir)
        assert recs[v]["assumption_1"]["k"] == TINY_VIT_N and recs[v]["assumption_3"]["k"] == TINY_VIT_N
        assert recs[v]["general_position"]["k"] == TINY_VIT_D
    # every [CLS] query of the embedding output is the same vector: A1 fails, proven without sampling
    emb = recs["embedding"]["assumption_1"]
    assert emb["verdict"] == "fails" and emb["samples"] == 0 and emb["proven"]
    assert recs["random"]["assumption_1"]["verdict"] == "holds"
    # every record answers both questions apart: the estimate (verdict) and the exact status
    for v in VARIANTS:
        for check, r in recs[v].items():
            assert r["exact_status"] in ("fails", "holds", "undecided") and r["proven"] == (
                r["exact_status"] != "undecided"
            )
            assert (r["exact_basis"] == "none") == (r["exact_status"] == "undecided")
            if r["witness"] and check != "assumption_2":
                assert (r["exact_status"], r["proven"]) == ("fails", True)
            assert r["scope"] == ("per-example" if check == "assumption_2" else "subsets")
    assert (emb["exact_status"], emb["exact_basis"]) == ("fails", "set-rank") and len(emb["witness"]) == 2  # two copies
    assert recs["random"]["assumption_2"]["exact_basis"] == "exhaustive"
    # --plot implies the sweep: one curve per column
    assert {r["variant"] for r in doc["sweep"]} == set(VARIANTS)
    assert all(set(r) >= {"k", "fraction", "ci_low", "ci_high"} for r in doc["sweep"])
    strict_json(hf_audit["stdout"])  # no NaN or Infinity tokens


def test_hf_out_plot_and_saved_features(hf_audit):
    assert hf_audit["rc"] == 0, hf_audit["err"]
    meta = read_parquet_metadata(hf_audit["out"])
    assert meta["version"] == __version__ and meta["versions"]["torch"]
    assert meta["seed"] == 3 and meta["device"] == auto_device() and meta["tolerance"]["dtype"] == "float32"
    rows = pq.read_table(hf_audit["out"]).to_pylist()
    checks = [r for r in rows if r["check"] != "sweep"]
    assert len(checks) == 4 * 4 and {r["variant"] for r in checks} == set(VARIANTS)
    assert any(r["check"] == "sweep" for r in rows)
    assert hf_audit["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in hf_audit["features"].iterdir()) == sorted(VARIANTS)
    assert tmp_leftovers(hf_audit["work"]) == []


def test_saved_features_reaudited_by_kruskal(hf_audit, capsys):
    """``kruskal FOLDER`` on saved features repeats the check's A1 and A3 tests exactly."""
    doc = json.loads(hf_audit["stdout"])
    recs = by_variant(doc["records"])
    for variant in ("trained", "random-attention"):
        folder = hf_audit["features"] / variant
        for vectors, check in (("queries", "assumption_1"), ("a3", "assumption_3")):
            rc, out, err = run(
                capsys, "kruskal", folder, "--vectors", vectors, "--samples", "100", "--seed", "3", "--format", "json"
            )
            assert rc == 0, err
            k = json.loads(out)
            assert k["meta"]["inputs"]["n"] == TINY_VIT_N and k["meta"]["inputs"]["T"] == 40
            first = k["records"][0]
            assert first["check"] == check and first["k"] == TINY_VIT_N
            ref = {f: v for f, v in recs[variant][check].items() if f not in ("model", "variant", "layer")}
            assert first == ref, (variant, vectors)
    # the --save-features folder itself holds one folder per column: the error names them
    rc, out, err = run(capsys, "kruskal", hf_audit["features"], "--samples", "10")
    assert_one_error(rc, err, "embedding, random, random-attention, trained")


def test_table_format(capsys, vit_dir, image_dir):
    rc, out, err = run(capsys, "check", vit_dir, "--weights", vit_dir, "--data", image_dir, *RUN)
    assert rc == 0, err
    flat = " ".join(out.split())
    for word in (
        "embedding",
        "random-attention",
        "random (L1)",
        "trained (L1)",
        "General Position",
        "Assumption 1",
        "Assumption 2",
        "Assumption 3",
        "rank rule",
    ):
        assert word in flat, word
    assert not out.lstrip().startswith("{")


def test_parquet_to_stdout(capsysbinary, monkeypatch, vit_dir, image_dir):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    rc = main(["check", str(vit_dir), "--data", str(image_dir), *RUN, "--variants", "random", "--format", "parquet"])
    out, err = capsysbinary.readouterr()
    assert rc == 0, err
    t = pq.read_table(pa.BufferReader(out))
    assert [r["check"] for r in t.to_pylist()] == list(CHECKS)
    meta = json.loads(t.schema.metadata[b"mhaaudit"])
    assert meta["command"] == "check" and meta["versions"]["mhaaudit"] == __version__


def test_parquet_with_out_file(capsysbinary, monkeypatch, vit_dir, image_dir, tmp_path):
    """--format parquet and --out at once: the same rows, the same stamp, on stdout and in the file."""
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    res = tmp_path / "r.parquet"
    rc = main(
        [
            "check",
            str(vit_dir),
            "--data",
            str(image_dir),
            *RUN,
            "--variants",
            "random",
            "--sweep",
            "--format",
            "parquet",
            "--out",
            str(res),
        ]
    )
    out, err = capsysbinary.readouterr()
    assert rc == 0, err
    t = pq.read_table(pa.BufferReader(out))
    assert t.to_pylist() == pq.read_table(res).to_pylist()
    assert [r["check"] for r in t.to_pylist()][:4] == list(CHECKS) and t.to_pylist()[-1]["check"] == "sweep"
    meta = json.loads(t.schema.metadata[b"mhaaudit"])
    assert meta == read_parquet_metadata(res) and meta["device"] == auto_device()


def test_parquet_to_terminal_refused(capsys, monkeypatch, vit_dir, image_dir):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    rc, out, err = run(capsys, "check", vit_dir, "--data", image_dir, *RUN, "--format", "parquet")
    assert_one_error(rc, err, "--format parquet")
    assert out == ""


def test_builtin_data_default(capsys, vit_dir):
    rc, out, err = run(capsys, "check", vit_dir, *RUN, "--variants", "random", "--format", "json")
    assert rc == 0, err
    doc = json.loads(out)
    assert "built-in" in doc["meta"]["data"]
    assert all(r["T"] == 40 for r in doc["records"])


def test_same_seed_same_records(capsys, vit_dir, image_dir):
    args = (
        "check",
        vit_dir,
        "--data",
        image_dir,
        *RUN,
        "--variants",
        "random-attention",
        "--format",
        "json",
        "--seed",
        "5",
    )
    a = json.loads(run(capsys, *args)[1])
    b = json.loads(run(capsys, *args)[1])
    assert a["records"] == b["records"]


def _trained_records(capsys, vit_dir, image_dir, weights):
    rc, out, err = run(
        capsys,
        "check",
        vit_dir,
        "--variants",
        "trained",
        "--weights",
        weights,
        "--data",
        image_dir,
        *RUN,
        "--format",
        "json",
    )
    assert rc == 0, err
    doc = json.loads(out)
    return doc["records"], doc["meta"]["columns"]["trained"]["weights_source"]


def test_single_weights_files_in_checkpoint_format(capsys, vit_dir, image_dir, tmp_path):
    """A lone weights file as save_pretrained writes it (the hub's format) loads like its folder."""
    import torch
    import transformers
    from safetensors.torch import load_file

    ref, _ = _trained_records(capsys, vit_dir, image_dir, vit_dir)
    recs, source = _trained_records(capsys, vit_dir, image_dir, vit_dir / "model.safetensors")
    assert source == f"weights file {vit_dir / 'model.safetensors'}"
    assert recs == ref
    torch.save(load_file(str(vit_dir / "model.safetensors")), tmp_path / "weights.bin")
    assert _trained_records(capsys, vit_dir, image_dir, tmp_path / "weights.bin")[0] == ref
    # a classification checkpoint: the encoder under a task-head prefix, plus a head to ignore
    torch.manual_seed(0)
    head = transformers.ViTForImageClassification.from_pretrained(str(vit_dir), num_labels=3)
    head.save_pretrained(str(tmp_path / "clf"))
    assert _trained_records(capsys, vit_dir, image_dir, tmp_path / "clf" / "model.safetensors")[0] == ref


# --------------------------------------------------------------------------- --fail-on


@pytest.mark.parametrize(
    "variants, fail_on, expect",
    [
        ("embedding", "assumption_1", 1),  # every [CLS] query is identical
        ("random", "assumption_1", 0),
        ("random", "assumption_2,assumption_3", 0),
        ("embedding", "assumption_2", 0),
        ("embedding", "any", 1),
    ],
)
def test_fail_on(capsys, vit_dir, image_dir, variants, fail_on, expect):
    rc, out, err = run(
        capsys,
        "check",
        vit_dir,
        "--data",
        image_dir,
        *RUN,
        "--variants",
        variants,
        "--fail-on",
        fail_on,
        "--format",
        "json",
    )
    assert rc == expect, err
    doc = json.loads(out)  # the report is written either way
    failed = {r["check"] for r in doc["records"] if "fails" in (r["verdict"], r.get("exact_status"))}
    named = failed if fail_on == "any" else failed & set(fail_on.split(","))
    assert bool(named) == (expect == 1), failed


def test_fail_on_counts_a_proven_failure_beside_a_holding_estimate():
    """Assumption 1 held as an estimate (999/1000 draws) but a witness proved it fails: --fail-on exits 1."""
    import typer

    from mhaaudit.cli.check import _fail_on

    rec = {"check": "assumption_1", "verdict": "holds", "exact_status": "fails", "exact_basis": "witness"}
    for named in (["assumption_1"], ["any"]):
        with pytest.raises(typer.Exit) as got:
            _fail_on(named, [rec])
        assert got.value.exit_code == 1
    _fail_on(["assumption_3"], [rec])  # another check named: no exit
    _fail_on(["assumption_1"], [{**rec, "exact_status": "undecided", "exact_basis": "none"}])  # the estimate holds


# --------------------------------------------------------------------------- timm


def test_timm_checkpoint_file(capsys, timm_dir, image_dir):
    ckpt = timm_dir / "model.safetensors"
    rc, out, err = run(
        capsys, "check", ckpt, "--backend", "timm", "--weights", ckpt, "--data", image_dir, *RUN, "--format", "json"
    )
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["meta"]["model_info"]["n"] == TINY_VIT_N and doc["meta"]["model_info"]["d"] == 32
    assert list(doc["meta"]["columns"]) == VARIANTS
    assert all(c["status"] == "ok" for c in doc["meta"]["columns"].values())
    assert "model.safetensors" in doc["meta"]["columns"]["trained"]["weights_source"]
    assert {r["variant"] for r in doc["records"]} == set(VARIANTS)


def test_timm_folder_with_backend(capsys, timm_dir, image_dir):
    rc, out, err = run(
        capsys,
        "check",
        timm_dir,
        "--backend",
        "timm",
        "--data",
        image_dir,
        *RUN,
        "--variants",
        "random,trained",
        "--format",
        "json",
    )
    assert rc == 0, err
    doc = json.loads(out)
    assert list(doc["meta"]["columns"]) == ["random", "trained"]
    assert doc["meta"]["columns"]["trained"]["status"] == "ok"


def test_timm_folder_is_an_image_model(capsys, timm_dir, image_dir):
    rc, out, err = run(
        capsys,
        "check",
        timm_dir,
        "--weights",
        timm_dir / "model.safetensors",
        "--data",
        image_dir,
        *RUN,
        "--format",
        "json",
    )
    assert rc == 0, err
    assert list(json.loads(out)["meta"]["columns"]) == VARIANTS


@pytest.mark.slow
def test_timm_name_with_a_weights_file(capsys, tmp_path):
    """``timm:<name>`` plus a checkpoint of that architecture (vit_tiny: 224 px, n = 197 > d = 192)."""
    import numpy as np
    import timm
    import torch
    from PIL import Image
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0).eval()
    ckpt = tmp_path / "vit_tiny.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(ckpt))
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    for i in range(200):
        Image.fromarray(rng.integers(0, 256, size=(24, 24, 3), dtype=np.uint8)).save(images / f"{i:03d}.png")
    rc, out, err = run(
        capsys,
        "check",
        "timm:vit_tiny_patch16_224",
        "--weights",
        ckpt,
        "--variants",
        "trained",
        "--data",
        images,
        "--limit",
        "200",
        "--samples",
        "10",
        "--batch-size",
        "50",
        "--format",
        "json",
    )
    assert rc == 0, err
    doc = json.loads(out)
    col = doc["meta"]["columns"]["trained"]
    assert col["status"] == "ok" and str(ckpt) in col["weights_source"]
    assert doc["meta"]["model_info"]["n"] == 197 and doc["meta"]["model_info"]["d"] == 192
    recs = by_variant(doc["records"])["trained"]
    assert recs["assumption_1"]["verdict"] == "fails" and recs["assumption_2"]["verdict"] == "fails"  # n > d
    assert "n = 197 > d = 192" in err


def test_timm_name_with_weights_that_do_not_fit(capsys, timm_dir, image_dir, tmp_path):
    # timm:vit_tiny_patch16_224 is 224 px / d = 192; the tiny checkpoint is d = 32
    rc, out, err = run(
        capsys,
        "check",
        "timm:vit_tiny_patch16_224",
        "--weights",
        timm_dir / "model.safetensors",
        "--variants",
        "trained",
        "--data",
        image_dir,
        *RUN,
        "--out",
        tmp_path / "r.parquet",
    )
    assert rc == 2 and out == ""
    last = err.strip().splitlines()[-1]
    assert last.startswith("Error: ") and "does not fit" in last and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- the vit-base alias offline


@pytest.mark.slow
def test_vit_base_alias_offline_trained_unavailable(capsys):
    # n = 197 for vit-base, so T >= 197 examples are needed
    rc, out, err = run(
        capsys,
        "check",
        "vit-base",
        "--variants",
        "trained,embedding",
        "--limit",
        "200",
        "--samples",
        "20",
        "--batch-size",
        "50",
        "--format",
        "json",
    )
    assert rc == 0, err
    doc = json.loads(out)
    cols = doc["meta"]["columns"]
    assert cols["trained"]["status"] == "unavailable" and "--weights" in cols["trained"]["reason"]
    assert cols["embedding"]["status"] == "ok"
    recs = by_variant(doc["records"])
    assert all(r["verdict"] == "unavailable" and "--weights" in r["reason"] for r in recs["trained"].values())
    assert recs["embedding"]["assumption_2"]["verdict"] in ("holds", "fails")
    assert recs["embedding"]["assumption_2"]["T"] == 200


def test_vit_base_alias_offline_trained_only(capsys, tmp_path):
    """Only the trained column asked for, offline: nothing to audit is no success (exit 2, the reason, no file)."""
    rc, out, err = run(
        capsys,
        "check",
        "vit-base",
        "--variants",
        "trained",
        "--limit",
        "200",
        "--samples",
        "20",
        "--format",
        "json",
        "--out",
        tmp_path / "r.parquet",
        "--plot",
        tmp_path / "p.png",
    )
    assert_one_error(rc, err, "no column could be audited")
    assert "--weights" in err and out == ""
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- bad input


def _bad_case(case, vit_dir, vit_dir_wide, image_dir, tmp_path):
    """(arguments after ``check``, text the error line must contain)."""
    base = ["--data", str(image_dir), *RUN]
    npy = tmp_path / "afile.npy"
    npy.write_bytes(b"x")
    (tmp_path / "empty").mkdir()
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "features.safetensors").write_bytes(b"x")
    (saved / "meta.json").write_text("{}")
    return {
        "unknown_model": (["no-such-model-xyz", *base], "vit-base"),
        "npy_as_model": (
            [str(npy), *base],
            "afile.npy is a .npy file, which holds features, not a model: audit it with 'mhaaudit kruskal FEATURES'",
        ),
        "features_folder_as_model": (
            [str(saved), *base],
            "saved is a folder of saved features (features.safetensors), not a model: audit it with "
            "'mhaaudit kruskal FEATURES'",
        ),
        "conv_timm": (["timm:resnet18", *base], "not a ViT-style token transformer"),
        "missing_data": ([str(vit_dir), *RUN, "--data", str(tmp_path / "nope")], "no such file"),
        "empty_data": ([str(vit_dir), *RUN, "--data", str(tmp_path / "empty")], "no image files"),
        "file_as_data": ([str(vit_dir), *RUN, "--data", str(npy)], "not an image source"),
        "too_few": ([str(vit_dir), "--data", str(image_dir), "--samples", "50", "--limit", "5"], "n = 17"),
        "layer_0": ([str(vit_dir), *base, "--layer", "0"], "--layer"),
        "layer_deep": ([str(vit_dir), *base, "--layer", "3"], "2 blocks"),
        "layers_deep": ([str(vit_dir), *base, "--layers", "0-9"], "2 blocks"),
        "layers_bad": ([str(vit_dir), *base, "--layers", "a-b"], "--layers"),
        "layers_negative": ([str(vit_dir), *base, "--layers", "0,-1"], "start at 0"),
        "layers_empty": ([str(vit_dir), *base, "--layers", ","], "names no layers"),
        "weights_misfit": ([str(vit_dir), *base, "--weights", str(vit_dir_wide)], "is of another width than the model"),
        "weights_file_misfit": (
            [str(vit_dir), *base, "--weights", str(vit_dir_wide / "model.safetensors")],
            "do not fit",
        ),
        "weights_missing": ([str(vit_dir), *base, "--weights", str(tmp_path / "nope")], "does not exist"),
        "out_parent_file": ([str(vit_dir), *base, "--out", str(npy / "r.parquet")], "is a file"),
        "out_missing_folder": ([str(vit_dir), *base, "--out", str(tmp_path / "no" / "r.parquet")], "does not exist"),
        "out_not_parquet": ([str(vit_dir), *base, "--out", str(tmp_path / "r.json")], ".parquet"),
        "plot_ext": ([str(vit_dir), *base, "--plot", str(tmp_path / "p.gif")], ".png"),
        "save_features_file": ([str(vit_dir), *base, "--save-features", str(npy)], "not a folder"),
        "save_features_parent_file": ([str(vit_dir), *base, "--save-features", str(npy / "f")], "is a file"),
        "save_features_missing": (
            [str(vit_dir), *base, "--save-features", str(tmp_path / "no" / "f")],
            "does not exist",
        ),
        "fail_on": ([str(vit_dir), *base, "--fail-on", "assumption_9"], "--fail-on"),
        "variant": ([str(vit_dir), *base, "--variants", "bogus"], "bogus"),
        "query_index": ([str(vit_dir), *base, "--query-index", "17"], "--query-index"),
        "batch_size": ([str(vit_dir), *base, "--batch-size", "0"], "--batch-size"),
        "limit": ([str(vit_dir), *base, "--limit", "0"], "--limit"),
        "samples": ([str(vit_dir), *base, "--samples", "0"], "--samples"),
        "threshold": ([str(vit_dir), *base, "--threshold", "1.5"], "--threshold"),
        "rtol": ([str(vit_dir), *base, "--rtol", "-1"], "--rtol"),
        "device": ([str(vit_dir), *base, "--device", "cuda"], "cuda"),
        "context_length": ([str(vit_dir), *base, "--context-length", "5"], "text models"),
        "backend": ([str(vit_dir), *base, "--backend", "jax"], "--backend"),
    }[case]


BAD_CASES = [
    "unknown_model",
    "npy_as_model",
    "features_folder_as_model",
    "conv_timm",
    "missing_data",
    "empty_data",
    "file_as_data",
    "too_few",
    "layer_0",
    "layer_deep",
    "layers_deep",
    "layers_bad",
    "layers_negative",
    "layers_empty",
    "weights_misfit",
    "weights_file_misfit",
    "weights_missing",
    "out_parent_file",
    "out_missing_folder",
    "out_not_parquet",
    "plot_ext",
    "save_features_file",
    "save_features_parent_file",
    "save_features_missing",
    "fail_on",
    "variant",
    "query_index",
    "batch_size",
    "limit",
    "samples",
    "threshold",
    "rtol",
    "device",
    "context_length",
    "backend",
]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input(capsys, vit_dir, vit_dir_wide, image_dir, tmp_path, case):
    import torch

    if case == "device" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    args, match = _bad_case(case, vit_dir, vit_dir_wide, image_dir, tmp_path)
    extra = [] if "--out" in args else ["--out", str(tmp_path / "out.parquet")]
    extra += [] if "--save-features" in args else ["--save-features", str(tmp_path / "feat")]
    before = set(os.listdir(tmp_path))
    rc, out, err = run(capsys, "check", *args, *extra, "--format", "json")
    assert_one_error(rc, err, match)
    assert out == ""
    assert set(os.listdir(tmp_path)) == before  # nothing written, no temporary files


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can write to any folder")
def test_unwritable_out_folder(capsys, vit_dir, image_dir, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        rc, _out, err = run(capsys, "check", vit_dir, "--data", image_dir, *RUN, "--out", ro / "r.parquet")
        assert_one_error(rc, err, "not writable")
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o700)


def test_check_json_is_strict_when_n_exceeds_d(capsys, tmp_path, image_dir):
    narrow = save_tiny_vit(tmp_path / "narrow", hidden_size=16, intermediate_size=32)  # n = 17 > d = 16
    rc, out, err = run(capsys, "check", narrow, "--variants", "random", "--data", image_dir, *RUN, "--format", "json")
    assert rc == 0, err
    strict_json(out)


# --------------------------------------------------------------------------- help


def test_help_says_what_layer_reads(capsys):
    text = help_text(capsys, "check")
    for word in ("--layer", "--layers", "--format", "table|json|parquet", "--fail-on", "--save-features"):
        assert word in text, word
    assert "the tokens read are the output of block K" in text


# --------------------------------------------------------------------------- where the time went


def test_footer_and_meta_name_the_same_phases(capsys, vit_dir, image_dir, tmp_path):
    """One truth: the table's ``time:`` line and the ``meta.timings_s`` of the same run (its parquet
    file) list the same phases, in the same order, with the same seconds; the phases and ``other``
    add up to the total."""
    from mhaaudit.phases import OTHER, PHASES

    out_file = tmp_path / "r.parquet"
    rc, out, err = run(capsys, "check", vit_dir, "--data", image_dir, *RUN, "--out", out_file)
    assert rc == 0, err
    timings = read_parquet_metadata(out_file)["timings_s"]
    assert time_line(out) == [(k, round(v, 1)) for k, v in timings.items()]
    for phase in ("imports", "model build", "data", "duplicate keys", "forward", "reduction"):
        assert phase in timings, phase
    assert "whole-set statistics" in timings and "draws" in timings and "render" in timings
    assert set(timings) <= {*PHASES, OTHER, "total"}
    assert sum(v for k, v in timings.items() if k != "total") == pytest.approx(timings["total"], abs=0.01)


def test_a_single_process_check_imports_no_distributed_training_packages(vit_dir, image_dir, tmp_path):
    """``mhaaudit check`` run as one process never imports FSDP or the distributed tensor package
    (transformers' modelling code and torch._dynamo would pull them in), nor ``datasets`` for a folder
    of images."""
    import subprocess

    from mhaaudit.imports import BLOCKED

    script = (
        "import atexit, json, sys\n"
        "def _bye():\n"
        "    mods = sorted(m for m in sys.modules if m.startswith('torch.distributed.'))\n"
        "    modeling = 'transformers.modeling_utils' in sys.modules\n"
        "    print(json.dumps({'dist': mods, 'modeling': modeling, 'datasets': 'datasets' in sys.modules}),"
        " file=sys.stderr)\n"
        "atexit.register(_bye)\n"
        "from mhaaudit.cli.app import run\n"
        "run(sys.argv[1:])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    p = subprocess.run(
        [sys.executable, "-c", script, "check", str(vit_dir), "--data", str(image_dir), *RUN],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    seen = json.loads(p.stderr.strip().splitlines()[-1])
    assert seen["modeling"]  # the model was built with transformers' modelling code
    assert not [m for m in seen["dist"] if m.startswith(BLOCKED)], seen["dist"]
    assert not seen["datasets"]  # an image folder needs no data-set library (offline mode is set without it)


def test_a_folder_of_saved_features_is_known_by_the_file_check_save_features_writes():
    from mhaaudit.features import FEATURES_FILE
    from mhaaudit.models import resolution

    assert resolution._SAVED_FEATURES == FEATURES_FILE
