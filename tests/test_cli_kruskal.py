"""``mhaaudit kruskal``: every input kind and output format, and one clean error per bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from clitools import assert_one_error, auto_device, help_text, run, time_line
from conftest import strict_json, tmp_leftovers
from safetensors.torch import save_file

import mhaaudit
from mhaaudit import __version__
from mhaaudit.cli.app import main
from mhaaudit.cli.given import deprecation_line
from mhaaudit.errors import InputError
from mhaaudit.features import reduce_tokens
from mhaaudit.io import read_parquet_metadata
from mhaaudit.tables import COLUMNS

T, D = 30, 8
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
}
FAST = ["--samples", "60"]


def matrix(T=T, d=D, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal((T, d)).astype(dtype)


@pytest.fixture
def npy(tmp_path):
    p = tmp_path / "x.npy"
    np.save(p, matrix())
    return p


def json_run(capsys, *args):
    rc, out, err = run(capsys, *args, "--format", "json")
    assert rc == 0, err
    return json.loads(out)


# --------------------------------------------------------------------------- inputs


def _write(kind, folder, X):
    if kind == "npy":
        p = folder / "x.npy"
        np.save(p, X)
    elif kind == "pt":
        p = folder / "x.pt"
        torch.save(torch.from_numpy(X), p)
    elif kind == "safetensors":
        p = folder / "x.safetensors"
        save_file({"queries": torch.from_numpy(X), "other": torch.zeros(3)}, str(p))
    elif kind == "parquet-list":
        p = folder / "x.parquet"
        pq.write_table(pa.table({"id": np.arange(len(X)), "emb": pa.array(X.tolist(), type=pa.list_(pa.float64()))}), p)
    elif kind == "parquet-columns":
        p = folder / "x.parquet"
        pq.write_table(pa.table({f"f{j}": X[:, j] for j in range(X.shape[1])}), p)
    return p


def test_every_file_format_gives_the_same_records(capsys, tmp_path):
    X = matrix()
    ref = None
    for kind in ("npy", "pt", "safetensors", "parquet-list", "parquet-columns"):
        sub = tmp_path / kind
        sub.mkdir()
        key = ["--key", "queries"] if kind == "safetensors" else []  # a file of several tensors needs --key
        doc = json_run(capsys, "kruskal", _write(kind, sub, X), *key, "--k", 3, "--k", 8, *FAST)
        assert doc["meta"]["inputs"]["T"] == T and doc["meta"]["inputs"]["d"] == D, kind
        assert doc["meta"]["inputs"]["dtype"] == "float64", kind  # the tolerance depends on the dtype
        assert doc["meta"]["tolerance"]["dtype"] == "float64", kind
        if ref is None:
            ref = doc["records"]
        assert doc["records"] == ref, kind
    assert [r["k"] for r in ref] == [3, 8]
    assert [r["verdict"] for r in ref] == ["holds", "holds"]


def test_float32_file_uses_float32_tolerance(capsys, tmp_path):
    np.save(tmp_path / "f.npy", matrix(dtype=np.float32))
    doc = json_run(capsys, "kruskal", tmp_path / "f.npy", "--k", 2, *FAST)
    assert doc["meta"]["inputs"]["dtype"] == "float32"
    assert doc["meta"]["tolerance"]["eps"] == pytest.approx(float(np.finfo(np.float32).eps))


def test_tokens_with_query_index(capsys, tmp_path):
    tok = np.random.default_rng(1).standard_normal((T, 5, D))
    np.save(tmp_path / "tok.npy", tok)
    np.save(tmp_path / "q0.npy", tok[:, 0])
    np.save(tmp_path / "qlast.npy", tok[:, -1])
    for qi, ref in (("0", "q0.npy"), ("-1", "qlast.npy")):
        a = json_run(capsys, "kruskal", tmp_path / "tok.npy", "--query-index", qi, "--k", 4, *FAST)
        b = json_run(capsys, "kruskal", tmp_path / ref, "--k", 4, *FAST)
        assert a["records"] == b["records"]
        assert f"token {qi}" in a["meta"]["inputs"]["source"]


@pytest.mark.parametrize("n", [10**18, 2**63 - 1])
def test_a_saved_folder_whose_n_no_tensor_of_tokens_holds_is_refused(capsys, tmp_path, n):
    """meta.json's n within 2^63 - 1, but more tokens per example than a tensor holds: one line naming meta.json,
    whatever k is tested (with --k or --sweep it was read, and reported and plotted as the context length)."""
    reduce_tokens(torch.randn(T, 5, D), 0).save(tmp_path / "feat")
    meta = json.loads((tmp_path / "feat" / "meta.json").read_text())
    (tmp_path / "feat" / "meta.json").write_text(json.dumps(meta | {"n": n, "query_index": n - 1}))
    for extra in ((), ("--k", "2"), ("--sweep", "--plot", tmp_path / "sweep.png")):
        rc, out, err = run(capsys, "kruskal", tmp_path / "feat", *extra, *FAST)
        assert_one_error(rc, err, f"malformed: meta.json gives n = {n}: the n x d tokens of one example")
        assert out == "" and not (tmp_path / "sweep.png").exists()


def test_saved_feature_folder_queries_and_a3(capsys, tmp_path):
    tokens = torch.randn(T, 5, D, generator=torch.Generator().manual_seed(2))
    fs = reduce_tokens(tokens, 0, meta={"model": "m", "variant": "random", "layer": 1})
    fs.save(tmp_path / "feat")
    doc = json_run(capsys, "kruskal", tmp_path / "feat", *FAST)
    # n is known from the folder: the defaults test k = n (Assumption 1) and k = min(T, d)
    assert doc["meta"]["inputs"]["n"] == 5 and doc["meta"]["inputs"]["dtype"] == "float32"
    assert [(r["check"], r["k"]) for r in doc["records"]] == [("assumption_1", 5), ("general_position", D)]
    a3 = json_run(capsys, "kruskal", tmp_path / "feat", "--vectors", "a3", *FAST)
    assert [(r["check"], r["k"]) for r in a3["records"]] == [("assumption_3", 5), ("kruskal", D)]
    assert "a3" in a3["meta"]["inputs"]["source"]
    # the a3 vectors are read, not the queries
    np.save(tmp_path / "a3.npy", fs.a3.numpy())
    direct = json_run(capsys, "kruskal", tmp_path / "a3.npy", "--n", 5, *FAST)
    assert [{**r, "check": None} for r in direct["records"]] == [{**r, "check": None} for r in a3["records"]]
    # a single matrix has no query and A3 vectors to choose from: --vectors would be silently ignored
    rc, _out, err = run(capsys, "kruskal", tmp_path / "a3.npy", "--n", 5, "--vectors", "a3", *FAST)
    assert_one_error(rc, err, "--vectors has no effect on a single matrix")


def test_n_above_T_is_refused_when_it_sets_the_test_size(capsys, npy):
    rc, _out, err = run(capsys, "kruskal", npy, "--n", 31, *FAST, "--format", "json")
    assert_one_error(rc, err, "at least n")
    rc, _out, err = run(capsys, "kruskal", npy, "--n", 31, "--vectors", "a3", *FAST, "--format", "json")
    assert_one_error(rc, err, "Assumption 3")


def test_n_above_T_with_explicit_k(capsys, npy):
    doc = json_run(capsys, "kruskal", npy, "--n", 40, "--k", 2, *FAST)  # n only marks the plot here
    assert [r["k"] for r in doc["records"]] == [2] and doc["meta"]["inputs"]["n"] == 40


def test_integer_matrix_is_read_as_float64(capsys, tmp_path):
    np.save(tmp_path / "i.npy", np.random.default_rng(0).integers(-5, 5, size=(T, D)))
    doc = json_run(capsys, "kruskal", tmp_path / "i.npy", "--k", 2, *FAST)
    assert doc["meta"]["inputs"]["dtype"] == "float64"


# --------------------------------------------------------------------------- formats


def test_table_format(capsys, npy):
    rc, out, err = run(capsys, "kruskal", npy, "--k", 3, *FAST)
    assert rc == 0, err
    flat = " ".join(out.split())  # long lines wrap at the console width
    assert "Kruskal-rank tests" in flat and "holds" in flat and "float64" in flat
    assert "Rank rule" in flat and "seed 0" in flat
    assert "{" not in out.splitlines()[0]


def test_table_with_sweep(capsys, npy):
    rc, out, err = run(capsys, "kruskal", npy, "--sweep", *FAST)
    assert rc == 0, err
    assert "estimate" in out.lower()


def test_json_document(capsys, npy):
    doc = json_run(capsys, "kruskal", npy, "--k", 3, "--seed", 5, *FAST)
    assert set(doc) == {"meta", "records", "sweep"}
    meta = doc["meta"]
    assert meta["tool"] == "mhaaudit" and meta["version"] == __version__
    assert meta["versions"]["torch"] == torch.__version__ and "numpy" in meta["versions"]
    assert meta["seed"] == 5 and meta["device"] == auto_device()
    assert "rule" in meta["tolerance"] and meta["inputs"]["source"].startswith(str(npy))
    (rec,) = doc["records"]
    assert RECORD_FIELDS <= set(rec)
    assert rec["k"] == 3 and rec["T"] == T and rec["d"] == D and rec["samples"] == 60 and rec["seed"] == 5
    assert rec["ci_low"] <= rec["fraction"] <= rec["ci_high"] and rec["threshold"] == 0.99
    assert rec["witness"] == [] and rec["verdict"] == "holds"
    assert doc["sweep"] == []


def test_json_sweep_rows(capsys, npy):
    doc = json_run(capsys, "kruskal", npy, "--sweep", *FAST)
    assert doc["records"] == []  # no --k and no n: the sweep only
    assert [r["k"] for r in doc["sweep"]] == list(range(1, D + 1))
    for r in doc["sweep"]:
        assert set(r) == {"k", "fraction", "ci_low", "ci_high", "exact_status", "exact_basis"}
        assert 0 <= r["ci_low"] <= r["fraction"] <= r["ci_high"] <= 1
    summary = doc["meta"]["sweep_summary"]
    assert summary["estimate"] == D
    for r in doc["sweep"]:  # each size's exact status follows the certified floor and ceiling
        expected = (
            "holds"
            if r["k"] <= summary["floor"]["value"]
            else "fails"
            if r["k"] > summary["ceiling"]["value"]
            else "undecided"
        )
        assert r["exact_status"] == expected and (r["exact_basis"] == "none") == (expected == "undecided")


def test_json_proof_of_dependence_has_a_witness(capsys, tmp_path):
    X = matrix()
    X[7] = 3 * X[2]  # two parallel rows: every subset holding both is dependent
    np.save(tmp_path / "dup.npy", X)
    doc = json_run(capsys, "kruskal", tmp_path / "dup.npy", "--k", 2, "--samples", 2000)
    (rec,) = doc["records"]
    if rec["satisfied"] < rec["samples"]:
        assert sorted(rec["witness"]) == [2, 7]
    doc = json_run(capsys, "kruskal", tmp_path / "dup.npy", "--k", T, "--samples", 10)
    assert doc["records"][0]["verdict"] == "fails"  # k > d: proven without sampling


def test_same_seed_same_records(capsys, tmp_path):
    X = matrix(T=40, d=6)
    X[:10, :] = X[10:20, :] * 2  # dependent subsets exist, so the draws matter
    np.save(tmp_path / "x.npy", X)
    args = ("kruskal", tmp_path / "x.npy", "--k", 4, "--samples", 200, "--sweep")
    a = json_run(capsys, *args, "--seed", 11)
    b = json_run(capsys, *args, "--seed", 11)
    c = json_run(capsys, *args, "--seed", 12)
    assert a["records"] == b["records"] and a["sweep"] == b["sweep"]
    assert a["records"][0]["satisfied"] < 200
    assert (a["records"], a["sweep"]) != (c["records"], c["sweep"])


def test_parquet_to_stdout(capsysbinary, npy, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    rc = main(["kruskal", str(npy), "--k", "3", "--sweep", *FAST, "--seed", "3", "--format", "parquet"])
    out, err = capsysbinary.readouterr()
    assert rc == 0, err
    t = pq.read_table(pa.BufferReader(out))
    rows = t.to_pylist()
    assert rows[0]["check"] == "kruskal" and rows[0]["k"] == 3
    assert [r["k"] for r in rows if r["check"] == "sweep"] == list(range(1, D + 1))
    meta = json.loads(t.schema.metadata[b"mhaaudit"])
    assert meta["seed"] == 3 and meta["versions"]["mhaaudit"] == __version__
    assert err == b""  # nothing but data when the output is binary


def test_parquet_to_terminal_refused(capsys, npy, monkeypatch, tmp_path):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    rc, out, err = run(capsys, "kruskal", npy, "--k", 3, *FAST, "--format", "parquet")
    assert_one_error(rc, err, "--format parquet")
    assert out == ""


def test_the_whole_set_line_names_no_sweep_that_did_not_run(capsys, npy):
    """k above d is answered by the dimensions, so no whole-set ceiling was needed: the line said "the sweep
    certifies its ceiling with it" although no sweep ran."""
    rc, out, err = run(capsys, "kruskal", npy, "--k", D + 1, *FAST)
    assert rc == 0, err
    line = " ".join(out.split("Whole set as one matrix", 1)[1].split())
    assert "no size tested needed it" in line and "sweep" not in line.split("Rank rule")[0]
    rc, out, err = run(capsys, "kruskal", npy, "--sweep", *FAST)
    assert rc == 0, err
    assert "the sweep certifies its ceiling with it" in " ".join(out.split())


def test_out_file_is_stamped(capsys, npy, tmp_path):
    out = tmp_path / "res.parquet"
    rc, stdout, err = run(
        capsys, "kruskal", npy, "--k", 3, "--k", 5, *FAST, "--seed", 9, "--out", out, "--rtol", "1e-10"
    )
    assert rc == 0, err
    meta = read_parquet_metadata(out)
    assert meta["tool"] == "mhaaudit" and meta["version"] == __version__
    for lib in ("torch", "numpy", "pyarrow", "transformers", "timm"):
        assert meta["versions"][lib]
    assert meta["seed"] == 9 and meta["device"] == auto_device()
    assert meta["tolerance"]["rtol"] == 1e-10 and "1e-10" in meta["tolerance"]["rule"]
    rows = pq.read_table(out).to_pylist()
    assert [r["k"] for r in rows] == [3, 5]
    assert RECORD_FIELDS <= set(rows[0])
    # the file's columns are those the schema page gives kruskal: no Assumption 2 margin
    assert pq.read_schema(out).names == [c.name for c in COLUMNS["kruskal"]]
    assert "min_margin" not in pq.read_schema(out).names
    assert tmp_leftovers(tmp_path) == []
    assert "Kruskal-rank tests" in stdout  # --out adds a file; the table is still printed


def test_a_legal_long_out_name_is_written(capsys, npy, tmp_path):
    """A 250-character name is legal (its file system takes 255 bytes): the outputs are written, their
    temporaries shortened to fit beside them."""
    out, png = tmp_path / ("a" * 242 + ".parquet"), tmp_path / ("b" * 246 + ".png")
    rc, _stdout, err = run(capsys, "kruskal", npy, "--k", 3, *FAST, "--out", out, "--plot", png)
    assert rc == 0, err
    assert pq.read_table(out).to_pylist()[0]["k"] == 3
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert tmp_leftovers(tmp_path) == []


def test_the_report_shows_the_file_name_as_it_is(capsys, tmp_path, monkeypatch):
    """A file name is shown as written: neither rich markup nor a terminal's escape sequence acts."""
    name = "[bold]b\x1b[2J.npy"
    np.save(tmp_path / name, matrix())
    monkeypatch.chdir(tmp_path)  # a short name: a long path would be folded over two lines
    rc, out, err = run(capsys, "kruskal", name, "--k", 3, *FAST)
    assert rc == 0, err
    assert " [bold]b\\x1b[2J.npy (npy" in out and "\x1b" not in out


def test_plot_png(capsys, npy, tmp_path):
    png = tmp_path / "sweep.png"
    rc, _out, err = run(capsys, "kruskal", npy, *FAST, "--plot", png, "--n", 4)
    assert rc == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert tmp_leftovers(tmp_path) == []


def test_plot_svg_and_json(capsys, npy, tmp_path):
    svg = tmp_path / "sweep.svg"
    doc = json_run(capsys, "kruskal", npy, *FAST, "--plot", svg)
    assert b"<svg" in svg.read_bytes()[:2000]
    assert len(doc["sweep"]) == D  # --plot implies --sweep


@pytest.mark.parametrize("name", ["m$x^^$.npy", "m$\\frac{$.npy", "osc\x1b]0;t\x07\uffff.npy"])
def test_a_plot_shows_a_file_name_as_written(capsys, monkeypatch, tmp_path, name):
    """The legend names the file: matplotlib read ``$...$`` in it as math (and raised: status 3), and drew its
    control characters (a warning for each missing glyph on stderr, an SVG that is not well-formed XML)."""
    import warnings
    import xml.etree.ElementTree as ET

    np.save(tmp_path / name, matrix())
    monkeypatch.chdir(tmp_path)
    svg = tmp_path / "sweep.svg"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc, _out, err = run(capsys, "kruskal", name, *FAST, "--plot", svg)
    assert rc == 0, err
    assert not [w for w in caught if "Glyph" in str(w.message)], [str(w.message) for w in caught]
    text = svg.read_text(encoding="utf-8")
    ET.fromstring(text)  # well-formed
    assert not any(c in text for c in "\x1b\x07\uffff")
    from mhaaudit.errors import printable

    assert printable(name).replace("\uffff", "\\uffff") in text  # the name, as the report shows it


# --------------------------------------------------------------------------- bad input


def _bad_file(tmp_path, case):
    rng = np.random.default_rng(0)
    if case == "missing":
        return tmp_path / "nope.npy", "no such file"
    if case == "garbage":
        p = tmp_path / "g.npy"
        p.write_bytes(b"\x93NUMPY garbage" + bytes(range(256)))
        return p, "cannot read"
    if case == "extension":
        p = tmp_path / "x.csv"
        p.write_text("1,2\n")
        return p, "unknown feature file type"
    if case == "rank1":
        np.save(tmp_path / "r1.npy", rng.standard_normal(10))
        return tmp_path / "r1.npy", "shape (10,)"
    if case == "rank4":
        np.save(tmp_path / "r4.npy", rng.standard_normal((2, 3, 4, 5)))
        return tmp_path / "r4.npy", "shape (2, 3, 4, 5)"
    if case == "tokens":
        np.save(tmp_path / "t.npy", rng.standard_normal((10, 3, 4)))
        return tmp_path / "t.npy", "--query-index"
    if case in ("nan", "inf"):
        X = matrix()
        X[3, 2] = np.nan if case == "nan" else -np.inf
        np.save(tmp_path / "n.npy", X)
        return tmp_path / "n.npy", f"NaN or Inf values (the first at row 3, column 2: {X[3, 2]})"
    if case == "empty":
        np.save(tmp_path / "e.npy", np.zeros((0, 4)))
        return tmp_path / "e.npy", "empty"
    if case == "empty_folder":
        (tmp_path / "feat").mkdir()
        return tmp_path / "feat", "features"
    if case in NPY_SHAPES:  # a .npy header written by hand: 32 bytes of float32 data, which (True, 8) accounts for
        shape = NPY_SHAPES[case]
        header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }"
        raw = header.encode() + b" " * (-(10 + len(header) + 1) % 64) + b"\n"
        p = tmp_path / f"{case}.npy"
        p.write_bytes(b"\x93NUMPY\x01\x00" + len(raw).to_bytes(2, "little") + raw + bytes(32))
        if case == "shape_expression":
            return p, "its .npy header is malformed (it holds an expression or a name, not only literal values)"
        return p, f"its .npy header's shape {shape} is not a tuple of non-negative integers"
    if case == "command_object":  # feature columns under mhaaudit's results key, its command no command's name
        p = tmp_path / "c.parquet"
        table = pa.table({f"f{j}": matrix()[:, j] for j in range(D)})
        pq.write_table(table.replace_schema_metadata({"mhaaudit": json.dumps({"command": {"name": "kruskal"}})}), p)
        return p, (
            "c.parquet is not features: its parquet metadata carries mhaaudit's results key, "
            "whose command is a JSON object, not a command's name"
        )
    raise AssertionError(case)


# Shapes a .npy header may declare that are not shapes (numpy takes a bool as an int, and -1 fails only later).
NPY_SHAPES = {
    "shape_bool": "(True, 8)",
    "shape_float": "(8.0, 8)",
    "shape_negative": "(-1, 8)",
    "shape_expression": "(2**70, 8)",
}


@pytest.mark.parametrize(
    "case",
    [
        *("missing", "garbage", "extension", "rank1", "rank4", "tokens", "nan", "inf", "empty", "empty_folder"),
        *NPY_SHAPES,
        "command_object",
    ],
)
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_bad_feature_files(capsys, tmp_path, case, fmt):
    path, match = _bad_file(tmp_path, case)
    out = tmp_path / "out.parquet"
    before = set(os.listdir(tmp_path))
    rc, stdout, err = run(capsys, "kruskal", path, *FAST, "--out", out, "--format", fmt)
    assert_one_error(rc, err, match)
    assert stdout == ""
    assert set(os.listdir(tmp_path)) == before


@pytest.mark.parametrize(
    "args, match",
    [
        (["--k", "31"], "larger than the number of vectors"),
        (["--k", "0"], "at least 1"),
        (["--k", "-2"], "at least 1"),
        (["--samples", "0"], "--samples"),
        (["--samples", "-5"], "--samples"),
        (["--threshold", "0"], "--threshold"),
        (["--threshold", "1.5"], "--threshold"),
        (["--threshold", "nan"], "--threshold"),
        (["--rtol", "-1e-3"], "--rtol"),
        (["--atol", "-1"], "--atol"),
        (["--rtol", "inf"], "--rtol"),
        (["--n", "0"], "--n"),
        (["--query-index", "0"], "--query-index"),
        (["--device", "cuda"], "cuda"),
        (["--device", "tpu"], "device"),
        (["--format", "xml"], "--format"),
        (["--k", "abc"], "--k"),
        (["--vectors", "keys"], "--vectors"),
        (["--no-such-option"], "no-such-option"),
    ],
)
def test_bad_options(capsys, npy, args, match):
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    folder = npy.parent
    before = set(os.listdir(folder))
    rc, out, err = run(capsys, "kruskal", npy, *FAST, *args, "--out", folder / "o.parquet", "--plot", folder / "p.png")
    assert_one_error(rc, err, match)
    assert out == ""
    assert set(os.listdir(folder)) == before


@pytest.mark.parametrize("option, flag", [("--model", "--model"), ("--variants", "--variants")])
@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_capture_name_is_refused_not_the_default(capsys, monkeypatch, vit_dir, option, flag, value):
    """--model '' is no model and --variants '' no column: refused, not read as vit-base or random."""
    import mhaaudit.estimation as estimation

    def no_build(*args, **kwargs):
        raise AssertionError("a model was built")

    monkeypatch.setattr(estimation, "build_requests", no_build)
    model = [] if option == "--model" else ["--model", vit_dir]
    rc, out, err = run(capsys, "kruskal", *model, option, value, *FAST)
    assert_one_error(rc, err, f"{flag} is empty")
    assert out == ""


@pytest.mark.parametrize("case", ["missing_folder", "parent_is_file", "not_parquet", "is_folder", "name_too_long"])
def test_bad_out_path(capsys, npy, tmp_path, case):
    if case == "name_too_long":  # 256 bytes: more than the file system takes
        out = tmp_path / ("a" * 248 + ".parquet")
    elif case == "missing_folder":
        out = tmp_path / "missing" / "r.parquet"
    elif case == "parent_is_file":
        out = npy / "r.parquet"  # the parent is the .npy file
    elif case == "not_parquet":
        out = tmp_path / "r.csv"
    else:
        out = tmp_path / "d.parquet"
        out.mkdir()
    before = set(os.listdir(tmp_path))
    rc, stdout, err = run(capsys, "kruskal", npy, "--k", 3, *FAST, "--out", out)
    assert_one_error(rc, err, str(out.name))
    assert stdout == "" and set(os.listdir(tmp_path)) == before


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can write to any folder")
def test_unwritable_out_folder(capsys, npy, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        rc, _out, err = run(capsys, "kruskal", npy, "--k", 3, *FAST, "--out", ro / "r.parquet")
        assert_one_error(rc, err, "not writable")
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o700)


@pytest.mark.parametrize("case", ["extension", "no_extension", "missing_folder", "parent_is_file"])
def test_bad_plot_path(capsys, npy, tmp_path, case):
    plot = {
        "extension": tmp_path / "p.gif",
        "no_extension": tmp_path / "plot",
        "missing_folder": tmp_path / "no" / "p.png",
        "parent_is_file": npy / "p.png",
    }[case]
    before = set(os.listdir(tmp_path))
    rc, out, err = run(capsys, "kruskal", npy, *FAST, "--plot", plot, "--out", tmp_path / "r.parquet")
    assert_one_error(rc, err, "cannot")
    assert out == "" and set(os.listdir(tmp_path)) == before


def test_failure_while_writing_out_leaves_nothing(capsys, npy, tmp_path, monkeypatch):
    def broken(table, where, *a, **kw):
        where.write(b"PAR1")  # (an open file: parquet is written through one)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", broken)
    before = set(os.listdir(tmp_path))
    rc, _out, err = run(capsys, "kruskal", npy, "--k", 3, *FAST, "--out", tmp_path / "r.parquet", "--format", "json")
    assert_one_error(rc, err, "No space left on device")
    assert set(os.listdir(tmp_path)) == before


# --------------------------------------------------------------------------- the program itself


def test_no_arguments_prints_help(capsys):
    rc, out, err = run(capsys)
    assert rc == 2 and "kruskal" in err and "check" in err
    assert out == ""  # stdout carries data only


@pytest.mark.parametrize("command", ["check", "kruskal", "capacity", "memorize"])
def test_every_command_takes_the_one_format_option(capsys, command):
    text = help_text(capsys, command)
    assert "--format" in text and "table|json|parquet" in text


def test_help(capsys):
    text = help_text(capsys, "kruskal")
    for word in ("FEATURES", "--k", "--sweep", "--vectors", "--model", "--out", "--plot"):
        assert word in text, word


def test_version(capsys):
    rc, out, _err = run(capsys, "--version")
    assert rc == 0 and out.strip() == f"mhaaudit {__version__}"


def test_python_dash_m_help():
    r = subprocess.run(
        [sys.executable, "-m", "mhaaudit", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert r.returncode == 0, r.stderr
    for cmd in ("kruskal", "check", "memorize"):
        assert cmd in r.stdout


def test_console_script_version():
    exe = shutil.which("mhaaudit") or os.path.join(os.path.dirname(sys.executable), "mhaaudit")
    if not os.path.exists(exe):
        pytest.skip("the mhaaudit console script is not installed")
    r = subprocess.run(
        [exe, "--version"], capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"mhaaudit {__version__}"


def test_console_script_error_exit_code(tmp_path):
    exe = shutil.which("mhaaudit") or os.path.join(os.path.dirname(sys.executable), "mhaaudit")
    if not os.path.exists(exe):
        pytest.skip("the mhaaudit console script is not installed")
    r = subprocess.run(
        [exe, "kruskal", str(tmp_path / "missing.npy")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"Error: no such file: {tmp_path / 'missing.npy'}"]
    assert r.stdout == ""


def test_debug_variable_shows_the_traceback_and_keeps_the_status(npy, monkeypatch, capsys):
    monkeypatch.setenv("MHAAUDIT_DEBUG", "1")
    assert main(["kruskal", str(npy), "--samples", "0"]) == 2  # bad input: 2 still, never 1 (--fail-on's)
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "InputError" in err
    assert err.strip().splitlines()[-1] == "Error: --samples must be at least 1, got 0"


def test_a_path_the_system_will_not_open_is_bad_input(npy, monkeypatch, capsys):
    """A folder on the path that cannot be searched (``Path.is_dir`` raises PermissionError for a non-root user):
    one line naming the path, exit 2, not an internal error. Made here by the same exception, whoever runs it."""
    import pathlib

    real = pathlib.Path.is_dir

    def refused(self):
        if self.name == npy.name:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(pathlib.Path, "is_dir", refused)
    assert main(["kruskal", str(npy), "--samples", "50"]) == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [f"Error: {npy}: Permission denied"] and out == ""


# --------------------------------------------------------------------------- query vectors captured from a model


CAPTURE = ["--limit", "40", "--batch-size", "8", "--samples", "100"]


def test_capture_from_model_matches_check(capsys, vit_dir, image_dir):
    """``kruskal --model`` runs the same capture as ``check``: the same A1 and A3 records."""
    rc, out, err = run(
        capsys,
        "check",
        vit_dir,
        "--variants",
        "trained",
        "--weights",
        vit_dir,
        "--data",
        image_dir,
        *CAPTURE,
        "--format",
        "json",
    )
    assert rc == 0, err
    ref = {r["check"]: r for r in json.loads(out)["records"]}
    for vectors, check in (("queries", "assumption_1"), ("a3", "assumption_3")):
        doc = json_run(
            capsys,
            "kruskal",
            "--model",
            vit_dir,
            "--variants",
            "trained",
            "--weights",
            vit_dir,
            "--data",
            image_dir,
            "--vectors",
            vectors,
            *CAPTURE,
        )
        assert doc["meta"]["inputs"]["n"] == 17 and doc["meta"]["inputs"]["T"] == 40
        assert doc["meta"]["inputs"]["dtype"] == "float32"
        first = doc["records"][0]
        assert first == {k: v for k, v in ref[check].items() if k not in ("model", "variant", "layer")}


def test_a_capture_for_kruskal_decides_no_context_ranks(capsys, monkeypatch, vit_dir, image_dir):
    """``kruskal --model`` tests the vectors alone: no context matrix's rank is computed while it captures them."""
    from mhaaudit.contexts import ContextRanks

    real, batches = ContextRanks.update, []
    monkeypatch.setattr(ContextRanks, "update", lambda self, E, **kw: batches.append(E.shape[0]) or real(self, E, **kw))
    doc = json_run(capsys, "kruskal", "--model", vit_dir, "--variants", "random", "--data", image_dir, *CAPTURE)
    assert doc["meta"]["inputs"]["T"] == 40 and not batches
    rc, _, err = run(
        capsys, "check", vit_dir, "--variants", "random", "--data", image_dir, *CAPTURE, "--format", "json"
    )
    assert rc == 0, err
    assert sum(batches) == 40  # check does decide them: the spy sees what it is meant to


def test_a_capture_below_n_is_refused_only_where_the_sizes_test_n(capsys, vit_dir, image_dir):
    """``kruskal --model`` with sizes of its own (``--k``) or the sweep alone draws what T allows: a limit below
    the model's n (17) is refused only for the default sizes, which test n; a size above the limit is refused
    before the model is loaded."""
    small = ["--limit", "10", "--batch-size", "8", "--samples", "50"]
    model = ["--model", vit_dir, "--variants", "random", "--data", image_dir, *small]
    doc = json_run(capsys, "kruskal", *model, "--k", "5")
    assert [(r["k"], r["T"]) for r in doc["records"]] == [(5, 10)] and doc["meta"]["inputs"]["T"] == 10
    swept = json_run(capsys, "kruskal", *model, "--sweep")
    assert swept["sweep"] is not None and swept["meta"]["inputs"]["T"] == 10
    rc, out, err = run(capsys, "kruskal", *model, "--format", "json")
    assert rc == 2 and not out and "--limit 10 is below n = 17" in err
    rc, out, err = run(capsys, "kruskal", *model, "--k", "12", "--format", "json")
    assert (rc, out, err.strip()) == (
        2,
        "",
        "Error: --k 12 is larger than --limit 10, the most examples the capture reads",
    )


def test_capture_from_model_variants(capsys, vit_dir, image_dir):
    emb = json_run(capsys, "kruskal", "--model", vit_dir, "--variants", "embedding", "--data", image_dir, *CAPTURE)
    assert emb["records"][0]["check"] == "assumption_1" and emb["records"][0]["verdict"] == "fails"
    l0 = json_run(capsys, "kruskal", "--model", vit_dir, "--variants", "random-L0", "--data", image_dir, *CAPTURE)
    assert l0["records"] == emb["records"]  # the embedding column is random weights at layer 0
    assert "[random-L0]" in l0["meta"]["inputs"]["source"]


def test_a_capture_says_the_inputs_it_skipped_and_a_T_short_of_limit(capsys, vit_dir, image_dir, tmp_path):
    """docs/guides/your-data.md: the inputs skipped are counted by cause in the report and the JSON. kruskal --model
    read past an unreadable image, and ran on fewer examples than --limit, without a word (check says both); it
    says them in the table, the JSON meta and the parquet metadata, and KruskalResult reads them back."""
    from mhaaudit.kruskal import KruskalResult

    folder = tmp_path / "imgs"
    shutil.copytree(image_dir, folder)
    (folder / "aa-broken.png").write_bytes(b"not an image")  # read first, in sorted path order
    model = ["--model", vit_dir, "--variants", "random", "--data", folder, *CAPTURE]
    doc = json_run(capsys, "kruskal", *model)
    assert doc["meta"]["inputs"]["T"] == 40 and doc["meta"]["skips"]["unreadable"]["count"] == 1
    assert doc["meta"]["skips"]["unreadable"]["example"].startswith("aa-broken.png: not an image file")
    doc = json_run(capsys, "kruskal", *model, "--limit", "100")
    short = "100 examples were asked for (--limit) but the data gave only 60 usable ones (skipped: 1 unreadable"
    assert doc["meta"]["inputs"]["T"] == 60 and [n for n in doc["meta"]["notes"] if n.startswith(short)]
    rc, out, err = run(capsys, "kruskal", *model, "--limit", "100", "--out", tmp_path / "r.parquet")
    assert rc == 0, err
    flat = " ".join(out.split())
    assert "skipped inputs: 1 unreadable (e.g. aa-broken.png: not an image file" in flat and short in flat
    meta = read_parquet_metadata(tmp_path / "r.parquet")
    assert meta["skips"] == doc["meta"]["skips"] and meta["notes"] == doc["meta"]["notes"]
    stored, printed = KruskalResult.from_parquet(tmp_path / "r.parquet"), KruskalResult.from_json(doc)
    assert stored.skips == printed.skips and stored.skips["unreadable"].count == 1
    assert list(stored.notes) == list(printed.notes) == doc["meta"]["notes"]


def test_variant_is_a_deprecated_alias_of_variants(capsys, vit_dir, image_dir):
    rc, out, err = run(
        capsys,
        "kruskal",
        "--model",
        vit_dir,
        "--variant",
        "embedding",
        "--data",
        image_dir,
        *CAPTURE,
        "--format",
        "json",
    )
    assert rc == 0 and err.strip() == deprecation_line("--variant", "--variants")
    new = json_run(capsys, "kruskal", "--model", vit_dir, "--variants", "embedding", "--data", image_dir, *CAPTURE)
    assert json.loads(out)["records"] == new["records"]
    rc, out, err = run(capsys, "kruskal", "--model", vit_dir, "--variant", "random", "--variants", "random", *CAPTURE)
    assert_one_error(rc, err, "--variant is the deprecated name of --variants; give --variants only")


@pytest.mark.parametrize(
    "args, match",
    [
        (["--variants", "bogus"], "unknown variant"),
        (["--variants", "random", "--weights", "{vit}"], "--variants trained"),
        (["--variants", "trained", "--weights", "{missing}"], "does not exist"),
        (["--variants", "random", "--limit", "0"], "--limit"),
        (["--variants", "random", "--data", "{missing}"], "no such file"),
    ],
)
def test_capture_errors(capsys, vit_dir, image_dir, tmp_path, args, match):
    args = [a.format(vit=vit_dir, missing=tmp_path / "nope") for a in args]
    rc, out, err = run(
        capsys, "kruskal", "--model", vit_dir, *CAPTURE, "--data", image_dir, *args, "--out", tmp_path / "o.parquet"
    )
    assert_one_error(rc, err, match)
    assert out == "" and list(tmp_path.iterdir()) == []


def test_weights_without_model_capture_refused(capsys, npy):
    rc, _out, err = run(capsys, "kruskal", npy, "--weights", npy.parent)
    assert_one_error(rc, err, "--weights")


def test_capture_trained_alias_offline_points_to_weights(capsys):
    rc, _out, err = run(capsys, "kruskal", "--model", "vit-base", "--variants", "trained", *CAPTURE)
    line = assert_one_error(rc, err, "--weights")
    assert "vit-base" in line


# --------------------------------------------------------------------------- strict JSON


def test_json_is_strict_json(capsys, npy):
    rc, out, err = run(capsys, "kruskal", npy, "--k", 3, "--sweep", *FAST, "--format", "json")
    assert rc == 0, err
    strict_json(out)


def test_stops_once_decided_unless_all_draws(capsys, tmp_path):
    """As check does: a test stops once its verdict can no longer change; --all-draws takes every draw."""
    rng = np.random.default_rng(0)
    low = rng.standard_normal((50, 4)) @ rng.standard_normal((4, 12))  # 50 rows in a 4-dimensional subspace
    path = tmp_path / "dep.npy"
    np.save(path, np.vstack([low, rng.standard_normal((10, 12))]))  # whole set of rank 12: sampling is needed
    rc, out, err = run(capsys, "kruskal", path, "--k", 12, "--samples", 1000, "--format", "json")
    assert rc == 0, err
    (rec,) = json.loads(out)["records"]
    assert rec["verdict"] == "fails" and rec["planned_samples"] == 1000 and rec["samples"] < 1000
    assert "sampling stopped after" in rec["reason"]
    rc, out, err = run(capsys, "kruskal", path, "--k", 12, "--samples", 1000, "--format", "json", "--all-draws")
    assert rc == 0, err
    (every,) = json.loads(out)["records"]
    assert every["verdict"] == "fails" and every["samples"] == 1000 and every["planned_samples"] is None


# --------------------------------------------------------------------------- estimate and exact status, never mixed


def test_a_witness_beside_a_holding_estimate_is_a_proven_failure(capsys, tmp_path, monkeypatch):
    """400 x 64 Gaussian rows with row 3 = row 1 + row 2: the paper's rule says holds (the dependent
    triple is rarely drawn), the exact status is fails, proven by the witness [1, 2, 3]."""
    X = np.random.default_rng(0).standard_normal((400, 64))
    X[3] = X[1] + X[2]
    np.save(tmp_path / "x.npy", X)
    args = ("kruskal", tmp_path / "x.npy", "--k", "32", "--n", "32", "--samples", "2000")
    doc = json_run(capsys, *args)
    (r,) = doc["records"]
    assert (r["verdict"], r["exact_status"], r["exact_basis"], r["proven"], r["witness"], r["scope"]) == (
        "holds",
        "fails",
        "witness",
        True,
        [1, 2, 3],
        "subsets",
    )
    assert "dependent 3-subset was found, so the exact Kruskal rank is below 3" in r["reason"]
    monkeypatch.setenv("COLUMNS", "200")  # one line per table row
    rc, out, err = run(capsys, *args)
    assert rc == 0, err
    row = next(line for line in out.splitlines() if "Assumption 1" in line and "│" in line)
    assert "holds (estimate)" in row and "fails (witness)" in row  # never a bare holds beside the proof


def test_k_reaching_T_is_marked_whole_set_and_names_the_run_that_answers(capsys, tmp_path, monkeypatch):
    np.save(tmp_path / "x.npy", matrix(T=6, d=D))  # T = 6 < d = 8: General Position is k = T
    doc = json_run(capsys, "kruskal", tmp_path / "x.npy", "--k", "6", *FAST)
    (at_t,) = doc["records"]
    assert (at_t["check"], at_t["verdict"], at_t["scope"], at_t["exact_status"], at_t["exact_basis"]) == (
        "general_position",
        "holds",
        "whole-set",
        "holds",
        "exhaustive",
    )
    assert (
        "does not answer the paper's question" in at_t["reason"]
        and "raise --limit above d = 8; from a file, give more than 8 rows" in at_t["reason"]
    )
    from mhaaudit.kruskal import subset_test

    above_t = subset_test(matrix(T=6, d=D), 7, samples=60, check="assumption_1").record()  # k > T: no 7 rows exist
    assert (above_t["scope"], above_t["exact_status"], above_t["exact_basis"]) == ("whole-set", "fails", "dimension")
    assert "raise limit above k = 7" in above_t["reason"]  # the library names its parameter, not the flag
    monkeypatch.setenv("COLUMNS", "200")  # one line per table row
    rc, out, err = run(capsys, "kruskal", tmp_path / "x.npy", "--k", "6", *FAST)
    assert rc == 0, err
    row = next(line for line in out.splitlines() if "General Position" in line and "│" in line)
    assert "holds (whole set)" in row
    assert "does not answer the paper's question" in out


def test_k_above_d_and_reaching_T_never_sends_the_user_to_a_larger_run(capsys, tmp_path):
    """k = T = 5 vectors in R^3: one set, but any 5 vectors in R^3 are dependent, so the 5-subsets of any larger
    set fail too. The reason said "a run with more than 5 vectors does (raise --limit above k = 5 ...)", a run that
    can only fail the same way; it says so now, and a k reaching T within d still names the run that answers."""
    np.save(tmp_path / "x.npy", matrix(T=5, d=3))
    (r,) = json_run(capsys, "kruskal", tmp_path / "x.npy", "--k", "5", *FAST)["records"]
    assert (r["scope"], r["verdict"], r["exact_status"], r["exact_basis"]) == (
        "whole-set",
        "fails",
        "fails",
        "dimension",
    )
    assert "raise --limit" not in r["reason"] and "a run with more vectors fails as well" in r["reason"]
    np.save(tmp_path / "y.npy", matrix(T=5, d=8))
    (r,) = json_run(capsys, "kruskal", tmp_path / "y.npy", "--k", "5", *FAST)["records"]
    assert r["scope"] == "whole-set" and "raise --limit above d = 8" in r["reason"]


def test_a_proven_failure_without_sampling_reads_proven(capsys, tmp_path):
    X = matrix(T=30, d=D, dtype=np.float32)
    X[:, -1] = X[:, 0]  # whole-set rank 7 < k = 8
    np.save(tmp_path / "x.npy", X)
    (r,) = json_run(capsys, "kruskal", tmp_path / "x.npy", "--k", "8", *FAST)["records"]
    assert (r["verdict"], r["exact_status"], r["exact_basis"], r["proven"], r["sampled"]) == (
        "fails",
        "fails",
        "set-rank",
        True,
        False,
    )
    (r,) = json_run(capsys, "kruskal", tmp_path / "x.npy", "--k", "3", *FAST)["records"]
    assert (r["exact_status"], r["exact_basis"], r["proven"]) == ("undecided", "none", False)


# --------------------------------------------------------------------------- the dtype policy: exact or refused


def _save(kind: str, folder, X: torch.Tensor):
    p = folder / f"x.{kind}"
    if kind == "npy":
        np.save(p, X.numpy())
    elif kind == "pt":
        torch.save(X, p)
    else:
        save_file({"x": X.contiguous()}, str(p))
    return p


def _complex_kinds():
    kinds = ["npy", "pt"]
    # safetensors stores complex64 from 0.6 on. The probe file goes to a temporary folder: save_file writes a
    # temporary and renames it over its target, so a device such as /dev/null would be replaced by a file.
    with tempfile.TemporaryDirectory() as folder:
        try:
            save_file({"x": torch.zeros(1, dtype=torch.complex64)}, os.path.join(folder, "probe.safetensors"))
            kinds.append("safetensors")
        except Exception:  # noqa: BLE001 - any refusal means this safetensors cannot store complex64
            pass
    return kinds


@pytest.mark.parametrize("kind", _complex_kinds())
def test_complex_features_are_refused_in_one_line(capsys, tmp_path, kind):
    """A purely imaginary 6 x 4 matrix of rank 4 would read as rank 0 if cast to its real part."""
    X = (torch.randn(6, 4, dtype=torch.float64) * 1j).to(torch.complex64)
    rc, out, err = run(capsys, "kruskal", _save(kind, tmp_path, X), "--k", "2", *FAST)
    assert_one_error(rc, err, "complex features")
    assert out == ""


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool])
def test_integer_and_boolean_features_are_converted_exactly(capsys, tmp_path, dtype):
    X = torch.randint(0 if dtype in (torch.uint8, torch.bool) else -20, 2 if dtype == torch.bool else 20, (30, 6))
    got = json_run(capsys, "kruskal", _save("pt", tmp_path, X.to(dtype)), "--k", "3", *FAST)
    ref = json_run(capsys, "kruskal", _save("npy", tmp_path, X.to(dtype).to(torch.float64)), "--k", "3", *FAST)
    assert got["meta"]["tolerance"]["dtype"] == "float64" and got["meta"]["inputs"]["dtype"] == "float64"
    for key in ("satisfied", "verdict", "exact_status", "witness", "set_rank_ceiling"):
        assert got["records"][0][key] == ref["records"][0][key]


def test_int64_beyond_two_to_the_53_is_refused(capsys, tmp_path):
    X = torch.randint(-20, 20, (30, 6))
    X[3, 2] = 2**53 + 1  # float64 would round it to 2^53
    rc, _, err = run(capsys, "kruskal", _save("pt", tmp_path, X), "--k", "3", *FAST)
    assert_one_error(rc, err, "beyond 2^53")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["pt", "safetensors"])
def test_reduced_precision_features_are_upcast_exactly_with_their_own_eps(capsys, tmp_path, dtype, kind):
    X = torch.randn(3, 3).to(dtype)
    doc = json_run(capsys, "kruskal", _save(kind, tmp_path, X), "--k", "2", *FAST)
    name = str(dtype).replace("torch.", "")
    tol = doc["meta"]["tolerance"]
    assert doc["meta"]["inputs"]["dtype"] == name and tol["dtype"] == name
    assert tol["eps"] == torch.finfo(dtype).eps
    s = torch.linalg.svdvals(X.to(torch.float64))  # the exact values: the conversion loses nothing
    own = float(s[0]) * 3 * torch.finfo(dtype).eps  # the whole set's own tolerance under the paper's rule
    assert doc["meta"]["set_rank"] == int((s > own).sum())
    assert doc["records"][0]["set_rank_ceiling"] >= doc["meta"]["set_rank"]  # the ceiling at k = 2: a smaller tolerance


FLOAT8 = sorted((getattr(torch, n) for n in dir(torch) if n.startswith("float8_")), key=str)


@pytest.mark.parametrize("dtype", FLOAT8)
def test_the_default_rule_is_refused_for_8_bit_floats_and_a_given_tolerance_reads_them_exactly(capsys, tmp_path, dtype):
    """Small integers are exact in float8: a rank-4 matrix of them was called rank 0 by the default
    rule (eps(float8_e4m3fn) = 0.125 puts the tolerance of 8 rows at sigma_max) and its draws rank 1.
    The default rule is refused in one line; with a tolerance the file reads as its float64 twin."""
    g = torch.Generator().manual_seed(0)
    if dtype == torch.float8_e8m0fnu:  # powers of two only, no sign, no zero
        X = torch.pow(2.0, torch.randint(-6, 7, (10, 4), generator=g).double())
    else:
        X = torch.randint(-4, 5, (10, 4), generator=g).double()
    assert torch.equal(X.to(dtype).double(), X) and int(torch.linalg.matrix_rank(X)) == 4
    for kind in ("pt", "safetensors"):
        path = _save(kind, tmp_path, X.to(dtype))
        rc, out, err = run(capsys, "kruskal", path, "--k", "3", *FAST)
        assert_one_error(rc, err, "give --rtol or --atol")
        assert out == ""
        got = json_run(capsys, "kruskal", path, "--k", "3", "--rtol", "1e-6", *FAST)
        ref = json_run(capsys, "kruskal", _save("npy", tmp_path, X), "--k", "3", "--rtol", "1e-6", *FAST)
        assert got["meta"]["set_rank"] == ref["meta"]["set_rank"] == 4
        assert got["meta"]["inputs"]["dtype"] == str(dtype).replace("torch.", "")
        assert got["records"] == ref["records"]


def test_a_dtype_too_coarse_for_the_default_rule_is_refused(capsys, tmp_path):
    X = torch.randn(40, 8).to(torch.float8_e4m3fn)  # 40 * eps(float8_e4m3fn) = 5: nothing could be independent
    rc, _, err = run(capsys, "kruskal", _save("safetensors", tmp_path, X), "--k", "2", *FAST)
    assert_one_error(rc, err, "features of dtype float8_e4m3fn have eps = 0.125")
    doc = json_run(capsys, "kruskal", _save("safetensors", tmp_path, X), "--k", "2", "--rtol", "1e-3", *FAST)
    assert doc["records"][0]["verdict"] in ("holds", "fails")
    Y = torch.randn(40, 200).to(torch.bfloat16)  # 200 * eps(bfloat16) > 1: no vector of any subset could count
    rc, _, err = run(capsys, "kruskal", _save("safetensors", tmp_path, Y), "--k", "2", *FAST)
    assert_one_error(rc, err, "no vector could count as independent")


READABLE = [
    torch.float64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    *FLOAT8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.bool,
]


@pytest.mark.parametrize("dtype", READABLE, ids=str)
@pytest.mark.parametrize("kind", ["pt", "safetensors"])
def test_every_dtype_the_readers_accept_is_decoded_to_its_exact_values(capsys, tmp_path, dtype, kind):
    """Each dtype a .pt or .safetensors file may hold: its values (subnormals of the floating formats
    among them) decode to the float64 matrix they are, and the audit of the file under one given rule
    is the audit of that float64 matrix."""
    from mhaaudit.io import read_array
    from mhaaudit.kruskal.sampling import as_matrix, rows_of

    g = torch.Generator().manual_seed(1)
    if dtype == torch.bool:
        X = torch.randint(0, 2, (12, 5), generator=g).double()
    elif dtype == torch.float8_e8m0fnu:
        X = torch.pow(2.0, torch.randint(-127, 128, (12, 5), generator=g).double())
    elif dtype.is_floating_point:  # every bit pattern of the 8-bit formats; random ones otherwise, subnormals too
        bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
        X = (
            bits.view(dtype)[:240].reshape(48, 5).double()
            if dtype in FLOAT8
            else torch.randn(12, 5, generator=g, dtype=torch.float64).to(dtype).double()
        )
        X = X[torch.isfinite(X).all(1)]
        if dtype not in FLOAT8:
            X[0] = torch.finfo(dtype).tiny * torch.tensor([0.5, 0.25, 1.0, -0.5, 0.0], dtype=torch.float64)
    else:
        lo = 0 if not dtype.is_signed else -100
        X = torch.randint(lo, 100, (12, 5), generator=g).double()
    assert torch.equal(X.to(dtype).double(), X)
    arr, _ = read_array(_save(kind, tmp_path, X.to(dtype)))
    M = as_matrix(arr)
    assert torch.equal(rows_of(M).chunk(0, M.shape[0]), X)  # bit for bit, in the calling thread
    rule = ["--rtol", "1e-6"] if X.abs().max() > 0 else ["--atol", "1e-300"]
    if dtype == torch.float64:  # subnormal row 0 beside rows near 1: no one scale holds both, in either file
        for path in (_save(kind, tmp_path, X.to(dtype)), _save("npy", tmp_path, X)):
            rc, _, err = run(capsys, "kruskal", path, "--k", "2", *rule, *FAST)
            assert_one_error(rc, err, f"row 0 of the features is not zero but its largest entry ({X[0].max():.3g})")
        return
    got = json_run(capsys, "kruskal", _save(kind, tmp_path, X.to(dtype)), "--k", "2", *rule, *FAST)
    ref = json_run(capsys, "kruskal", _save("npy", tmp_path, X), "--k", "2", *rule, *FAST)
    assert got["records"] == ref["records"] and got["meta"]["set_rank"] == ref["meta"]["set_rank"]


def test_a_float_wider_than_float64_is_refused(capsys, tmp_path):
    p = tmp_path / "x.npy"
    np.save(p, np.ones((5, 3), dtype=np.longdouble))
    rc, out, err = run(capsys, "kruskal", p, "--k", "2", *FAST)
    if np.dtype(np.longdouble).itemsize > 8:
        assert_one_error(rc, err, "cannot hold exactly")
        assert out == ""
    else:  # pragma: no cover - a platform whose long double is float64
        assert rc == 0, err


def test_no_draw_out_ranks_the_whole_set_rank_reported_at_its_size(capsys, tmp_path):
    """A small direction hidden from the whole set by its own tolerance but seen by small subsets:
    the draws keep the paper's per-matrix rule, and the whole-set rank reported at k is the ceiling
    at the smallest tolerance a k-subset can have, which no draw exceeds."""
    g = np.random.default_rng(3)
    X = g.standard_normal((40, 6))
    X[:, -1] *= 3e-6  # below the set's own tolerance, sigma_max * 40 * eps32, above a 3-subset's
    X[0] *= 1e3
    np.save(tmp_path / "x.npy", X.astype(np.float32))
    doc = json_run(capsys, "kruskal", tmp_path / "x.npy", "--k", "6", "--k", "3", "--samples", "200", "--all-draws")
    own = doc["meta"]["set_rank"]
    for r in doc["records"]:
        top = max(int(k) for k in r["rank_histogram"])
        assert top <= r["set_rank_ceiling"] == doc["meta"]["set_rank_ceilings"][str(r["k"])]
        assert r["set_rank_ceiling"] >= own
    assert any(max(int(k) for k in r["rank_histogram"]) > own for r in doc["records"])  # the ceiling is needed


def test_the_default_rule_is_refused_where_the_whole_sets_tolerance_reaches_sigma_max(capsys, tmp_path):
    """float16 at T = 2000 rows: max(T, d) * eps = 1.95, so the default rule would call the whole set rank 0
    whatever its values. One line, exit 2, nothing on stdout; with a tolerance, or at T = 1000, it runs."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(2000, 16, generator=g).to(torch.float16)
    path = _save("npy", tmp_path, X)
    rc, out, err = run(capsys, "kruskal", path, "--k", "3", *FAST)
    assert_one_error(rc, err, "give --rtol or --atol, or features in a wider dtype")
    assert "T = 2000" in err and out == ""
    with pytest.raises(InputError, match="max\\(T, d\\) \\* eps"):
        mhaaudit.kruskal.subset_test(X, 3, samples=50)
    doc = json_run(capsys, "kruskal", path, "--k", "3", "--rtol", "1e-3", *FAST)
    assert doc["records"][0]["verdict"] == "holds" and doc["meta"]["set_rank"] == 16
    doc = json_run(capsys, "kruskal", _save("npy", tmp_path, X[:1000]), "--k", "3", *FAST)  # 1000 * eps < 1
    own = 1000 * torch.finfo(torch.float16).eps  # the rule's answer, by brute force on the exact values
    assert doc["meta"]["set_rank"] == int(torch.linalg.matrix_rank(X[:1000].double(), rtol=own)) > 0


def test_footer_and_meta_name_the_same_phases(capsys, vit_dir, image_dir, tmp_path):
    """One truth: the table's ``time:`` line and ``meta.phases_s`` of the same run (its parquet file) list the same
    phases with the same seconds, the capture's among them, adding up to the total; ``timings_s`` keeps each test's
    seconds, and a file's vectors are read in ``data``."""
    from mhaaudit.kruskal import KruskalResult
    from mhaaudit.phases import OTHER, PHASES

    out_file = tmp_path / "k.parquet"
    rc, out, err = run(
        capsys, "kruskal", "--model", vit_dir, "--variants", "random", "--data", image_dir, *CAPTURE, "--out", out_file
    )
    assert rc == 0, err
    meta = read_parquet_metadata(out_file)
    spent = meta["phases_s"]
    assert time_line(out) == [(k, round(v, 1)) for k, v in spent.items()]
    for phase in ("imports", "model build", "forward", "whole-set statistics", "draws", "render"):
        assert phase in spent, phase
    assert set(spent) <= {*PHASES, OTHER, "total"} and list(meta["timings_s"]) == ["k=17", "k=32"]  # n and d
    assert sum(v for k, v in spent.items() if k != "total") == pytest.approx(spent["total"], abs=0.01)
    assert KruskalResult.from_parquet(out_file).phases == spent
    torch.save(torch.randn(60, 8), tmp_path / "x.pt")
    doc = json_run(capsys, "kruskal", tmp_path / "x.pt", "--k", "4", "--samples", "64")
    assert "data" in doc["meta"]["phases_s"] and "forward" not in doc["meta"]["phases_s"]


def test_a_plot_without_matplotlib_is_refused_before_the_work(capsys, npy, tmp_path, monkeypatch):
    """matplotlib draws --plot: where it cannot be imported, the run stops before the work with one line (it raised
    once the work was done: an internal error, status 3, and no --out file)."""
    import mhaaudit.estimation

    def never(*args, **kwargs):
        raise AssertionError("the estimate ran")

    monkeypatch.setattr(mhaaudit.estimation, "estimate_kruskal_rank", never)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    before = set(os.listdir(tmp_path))
    rc, out, err = run(capsys, "kruskal", npy, *FAST, "--plot", tmp_path / "p.png", "--out", tmp_path / "r.parquet")
    assert_one_error(rc, err, "matplotlib")
    assert out == "" and set(os.listdir(tmp_path)) == before


def test_a_captured_sweep_s_plot_names_the_model_and_column(capsys, vit_dir, image_dir, tmp_path):
    """The legend of ``kruskal --model ... --plot`` took the last path part of the source's description: with
    ``--data FOLDER`` it read "images (60 files, RGB only; the first 40 u", naming neither model nor column."""
    svg = tmp_path / "sweep.svg"
    rc, _out, err = run(
        capsys, "kruskal", "--model", vit_dir, "--variants", "random", "--data", image_dir, *CAPTURE, "--plot", svg
    )
    assert rc == 0, err
    text = svg.read_text(encoding="utf-8")
    assert f"<!-- {vit_dir.name} random (estimate " in text and "files" not in text


def test_an_existing_output_file_is_replaced_and_a_folder_in_its_place_refused(capsys, tmp_path):
    """docs/security.md: an existing file at an output's path is replaced when the run ends well; a folder
    standing at a file's path is refused before any work, and nothing is written; a folder on the way is never made."""
    np.save(tmp_path / "f.npy", matrix(dtype=np.float32))
    (tmp_path / "r.parquet").write_text("an older file")
    (tmp_path / "c.png").write_text("an older picture")
    rc, _, err = run(
        capsys,
        "kruskal",
        tmp_path / "f.npy",
        "--sweep",
        *FAST,
        "--out",
        tmp_path / "r.parquet",
        "--plot",
        tmp_path / "c.png",
        "-q",
    )
    assert rc == 0, err
    assert pq.read_table(tmp_path / "r.parquet").num_rows > 0
    assert (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")
    (tmp_path / "d.parquet").mkdir()
    rc, stdout, err = run(
        capsys, "kruskal", tmp_path / "f.npy", *FAST, "--out", tmp_path / "d.parquet", "--plot", tmp_path / "n.png"
    )
    assert_one_error(rc, err, "d.parquet: it is a directory")
    assert stdout == "" and not (tmp_path / "n.png").exists() and os.listdir(tmp_path / "d.parquet") == []
    rc, stdout, err = run(capsys, "kruskal", tmp_path / "f.npy", *FAST, "--out", tmp_path / "new" / "r.parquet")
    assert_one_error(rc, err, "folder " + str(tmp_path / "new") + " does not exist")
    assert stdout == "" and not (tmp_path / "new").exists()
