"""``mhaaudit capacity``: the command end to end on a tiny random ViT, in every format, and its bad input.

The library it calls is tested in ``test_capacity_*.py`` (Z against brute force and the models' own
attention, Proposition 2, the certificate against ``matrix_rank`` and the reference construction).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from clitools import assert_one_error, auto_device, help_text, run, time_line
from conftest import FIXTURES, tmp_leftovers

from mhaaudit import __version__
from mhaaudit.cli.app import main
from mhaaudit.cli.capacity import LAYER_DEPRECATED
from mhaaudit.io import read_parquet_metadata

transformers = pytest.importorskip("transformers")

N, D, H = 17, 32, 4  # tiny ViT: 1 + (32 / 8)^2 tokens, width 32, 4 heads of d_h = 8
FAST = ["--limit", "40", "--samples", "100", "--batch-size", "16"]
FROM = ["--limit", "40", "--batch-size", "16"]  # with --from nothing is sampled: --samples would be refused
RECORD_FIELDS = {
    "model",
    "variant",
    "heads",
    "rank",
    "bound",
    "bound_kind",
    "shared_context",
    "residual",
    "T",
    "n",
    "d",
    "d_h",
    "H",
    "tolerance",
    "seed",
}


def json_run(capsys, *args):
    rc, out, err = run(capsys, "capacity", *args, "--format", "json")
    assert rc == 0, err
    return json.loads(out)


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def test_table_format(capsys, vit4, image_dir):
    rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FAST)
    assert rc == 0, err
    assert "rank(Z)" in out and "reconstructed from the paper's proof" in out
    assert "random" in out and "trained" in out
    assert "The certificate" in out and "residual" in out
    assert "Remark 1" in out or "remark-1" in out


def test_json_document(capsys, vit4, image_dir):
    doc = json_run(capsys, vit4, "--data", image_dir, *FAST, "--seed", "3")
    meta, recs = doc["meta"], doc["records"]
    assert meta["command"] == "capacity" and meta["version"] == __version__ and meta["seed"] == 3
    assert meta["device"] == auto_device()
    assert meta["heads"] == [H] and meta["head_dim"] == 8
    assert {r["variant"] for r in recs} == {"random", "trained"}
    for r in recs:
        assert RECORD_FIELDS <= set(r)
        assert r["heads"] == H and r["H"] == H and r["n"] == N and r["d"] == D and r["d_h"] == 8 and r["T"] == 40
        assert r["rank"] <= min(40, H * D) and r["residual"] < 1e-6 and r["seed"] == 3
        assert r["shared_context"] is False and r["prop2_verdict"] is None
        assert r["bound_kind"] in ("theorem-1", "remark-1", "not-applicable")
    assert meta["columns"]["random"]["assumptions"]["assumption_2"] == "holds"


def test_fewer_examples_than_n_fail_assumption_1_by_proof(capsys, vit4, image_dir):
    """T = 10 < n = 17 examples: no n of them can be independent, so Assumption 1 fails by proof (it was "not
    checked"), and the 10 independent queries have Kruskal rank 10, proven, which Remark 1's count uses."""
    doc = json_run(
        capsys,
        vit4,
        "--data",
        image_dir,
        "--limit",
        "10",
        "--samples",
        "50",
        "--batch-size",
        "16",
        "--variants",
        "random",
    )
    a = doc["meta"]["columns"]["random"]["assumptions"]
    assert a["assumption_1"] == "fails" and "k = 17 > T = 10" in a["assumption_1_reason"]
    assert "not checked" not in a["assumption_1_reason"]
    assert a["kruskal_estimate"] == 10 and "the Kruskal rank itself (a proof)" in a["kruskal_estimate_note"]
    (rec,) = doc["records"]
    assert rec["bound_kind"] == "remark-1" and rec["bound"] == H * (min(10, 8) - 1) + 1


def test_footer_and_meta_name_the_same_phases(capsys, vit4, image_dir, tmp_path):
    """One truth: the report's ``time:`` line and ``meta.timings_s`` of the same run (its parquet file) list the same
    phases with the same seconds, the capture's among them, adding up to the total."""
    from mhaaudit.io import read_parquet_metadata
    from mhaaudit.phases import OTHER, PHASES

    out_file = tmp_path / "c.parquet"
    rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FAST, "--out", out_file)
    assert rc == 0, err
    spent = read_parquet_metadata(out_file)["timings_s"]
    assert time_line(out) == [(k, round(v, 1)) for k, v in spent.items()]
    for phase in ("imports", "model build", "forward", "whole-set statistics", "draws", "render"):
        assert phase in spent, phase  # Assumption 1's draws are the draws phase, as check's are
    assert set(spent) <= {*PHASES, OTHER, "total"}
    assert sum(v for k, v in spent.items() if k != "total") == pytest.approx(spent["total"], abs=0.01)


def test_heads_sweep_and_plot(capsys, vit4, image_dir, tmp_path):
    plot = tmp_path / "cap.png"
    out = tmp_path / "cap.parquet"
    doc = json_run(
        capsys, vit4, "--data", image_dir, *FAST, "--heads", "1-4", "--variants", "random", "--plot", plot, "--out", out
    )
    ranks = [r["rank"] for r in doc["records"]]
    assert [r["heads"] for r in doc["records"]] == [1, 2, 3, 4]
    assert ranks == sorted(ranks) and ranks[0] == min(40, D)
    assert plot.stat().st_size > 1000 and plot.read_bytes()[:4] == b"\x89PNG"
    t = pq.read_table(out)
    assert t.column("rank").to_pylist() == ranks
    assert read_parquet_metadata(out)["command"] == "capacity"
    assert tmp_leftovers(tmp_path) == []


def test_shared_context(capsys, vit4, image_dir):
    doc = json_run(
        capsys,
        vit4,
        "--data",
        image_dir,
        "--limit",
        "60",
        "--samples",
        "100",
        "--heads",
        "1,2",
        "--variants",
        "random",
        "--shared-context",
    )
    for r in doc["records"]:
        assert r["shared_context"] is True
        assert r["prop2_bound"] == r["heads"] * (N - 1) + 1
        assert r["rank"] <= r["prop2_bound"] and r["prop2_verdict"] == "holds"
    # With one head, the ceiling (17) is far below T = 60 and the width 32: the check has teeth.
    assert doc["records"][0]["rank"] <= N


def test_random_attention(capsys, vit4, image_dir):
    a = json_run(capsys, vit4, "--data", image_dir, *FAST, "--variants", "random", "--attention", "random")
    b = json_run(capsys, vit4, "--data", image_dir, *FAST, "--variants", "random", "--attention", "random")
    assert a["records"] == b["records"]  # seeded
    assert a["meta"]["attention"] == "random"
    assert any("random heads" in n for n in a["meta"]["notes"])
    assert a["records"][0]["rank"] <= 40


def test_parquet_to_stdout(capsysbinary, vit4, image_dir, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    rc = main(["capacity", str(vit4), "--data", str(image_dir), *FAST, "--variants", "random", "--format", "parquet"])
    out, err = capsysbinary.readouterr()
    assert rc == 0, err
    t = pq.read_table(pa.BufferReader(out))
    rows = t.to_pylist()
    assert len(rows) == 1 and rows[0]["variant"] == "random" and rows[0]["heads"] == H
    assert json.loads(t.schema.metadata[b"mhaaudit"])["command"] == "capacity"


def test_from_check_results(capsys, vit4, image_dir, tmp_path):
    res = tmp_path / "results.parquet"
    rc, _, err = run(
        capsys,
        "check",
        vit4,
        "--data",
        image_dir,
        "--limit",
        "40",
        "--samples",
        "100",
        "--variants",
        "embedding",
        "--variants",
        "random",
        "--sweep",
        "--out",
        res,
    )
    assert rc == 0, err
    doc = json_run(
        capsys, vit4, "--data", image_dir, *FROM, "--from", res, "--variants", "random,trained", "--block", "1"
    )
    rec = {r["variant"]: r for r in doc["records"]}
    # The 'embedding' column of check is the random weights' layer 0: the input of block 1.
    col = doc["meta"]["columns"]["random"]["assumptions"]
    assert "embedding" in col["source"] and col["assumption_1"] == "fails" and col["assumption_2"] == "holds"
    assert rec["random"]["bound_kind"] == "remark-1" and rec["random"]["kruskal_estimate"] == 1
    # check audited no trained column at layer 0: no bound, but the certificate is still computed.
    assert rec["trained"]["bound_kind"] == "not-applicable" and rec["trained"]["bound"] is None
    assert rec["trained"]["rank"] >= 1
    # --layer 2: the input of block 2 is check's 'random' column (output of block 1).
    doc2 = json_run(capsys, vit4, "--data", image_dir, *FROM, "--from", res, "--variants", "random", "--layer", "2")
    assert "(column random)" in doc2["meta"]["columns"]["random"]["assumptions"]["source"]
    # --block 2 names the same block: the same records.
    doc3 = json_run(capsys, vit4, "--data", image_dir, *FROM, "--from", res, "--variants", "random", "--block", "2")
    assert doc3["records"] == doc2["records"] and doc3["meta"]["layer"] == 2
    # Options that sample Assumption 1 have no effect when it is read from the file: refused, not ignored.
    rc, _out, err = run(
        capsys, "capacity", vit4, "--data", image_dir, *FROM, "--from", res, "--samples", "100", "--threshold", "0.9"
    )
    assert_one_error(rc, err, "--samples, --threshold have no effect with --from")


def test_from_reads_files_written_before_typed_columns(capsys, vit4):
    """fixtures/results/check-v0.parquet (witness and rank_histogram as JSON text) still feeds capacity --from."""
    old = FIXTURES / "results" / "check-v0.parquet"
    assert pq.read_schema(old).field("witness").type == pa.string()
    doc = json_run(capsys, vit4, *FROM, "--from", old, "--variants", "random", "--block", "1")
    col = doc["meta"]["columns"]["random"]["assumptions"]
    assert "(column embedding)" in col["source"] and col["assumption_1"] == "fails" and col["assumption_2"] == "holds"
    assert doc["records"][0]["bound_kind"] == "remark-1" and doc["records"][0]["kruskal_estimate"] == 1


def test_default_block_is_the_one_the_paper_applies_theorem_1_to(capsys, vit4, image_dir):
    """With no --block, capacity certifies block 2 (its input, the output of block 1, is where the paper
    finds Assumptions 1 and 2), and the report says why; the library takes the same default."""
    from mhaaudit.capacity import capacity_audit
    from mhaaudit.cli.names import flag
    from mhaaudit.defaults import CAPACITY_BLOCK, CAPACITY_BLOCK_WHY

    assert CAPACITY_BLOCK == 2
    doc = json_run(capsys, vit4, "--data", image_dir, *FAST, "--variants", "random")
    assert doc["meta"]["layer"] == 2 and "input of block 2" in doc["meta"]["tokens"]
    # the command line names its flag where the library names its parameter
    assert doc["meta"]["notes"][0] == CAPACITY_BLOCK_WHY.named(flag)
    rec = doc["records"][0]
    assert rec["bound_kind"] == "theorem-1" and rec["bound"] > 1  # not the embedding output's single example
    rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FAST, "--variants", "random")
    assert rc == 0, err
    assert "attention of block 2" in out and "block 2 is the default: the paper applies Theorem 1" in " ".join(
        out.split()
    )
    lib = capacity_audit(str(vit4), data=str(image_dir), limit=40, samples=100, batch_size=16, variants=["random"])
    assert lib.settings.layer == 2 and lib.notes[0] == CAPACITY_BLOCK_WHY and "block 2" in lib.notes[0]
    assert "--" not in lib.notes[0]
    # a block given is no default: no such note
    given = json_run(capsys, vit4, "--data", image_dir, *FAST, "--variants", "random", "--block", "2")
    assert doc["meta"]["notes"][0] not in given["meta"]["notes"] and given["records"] == doc["records"]


def test_trained_unavailable_offline(capsys, image_dir):
    doc = json_run(
        capsys,
        "vit-base",
        "--data",
        image_dir,
        "--limit",
        "8",
        "--samples",
        "20",
        "--heads",
        "1",
        "--variants",
        "trained,random",
        "--attention",
        "random",
    )
    rec = {r["variant"]: r for r in doc["records"]}
    assert rec["trained"]["status"] == "unavailable" and rec["trained"]["rank"] is None
    assert "offline" in rec["trained"]["reason"].lower() or "hub" in rec["trained"]["reason"].lower()
    assert rec["random"]["status"] == "ok" and rec["random"]["n"] == 197 and rec["random"]["T"] == 8


# --------------------------------------------------------------------------------------------
# Bad input: one line on stderr, exit 2, nothing written
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,match",
    [
        (["--heads", "5"], "at most 4"),
        (["--heads", "1-9"], "at most 4"),
        (["--heads", "0"], "start at 1"),
        (["--heads", ""], "names no head"),
        (["--heads", "x"], "--heads"),
        (["--limit", "0"], "--limit"),
        (["--batch-size", "0"], "--batch-size"),
        (["--samples", "0"], "--samples"),
        (["--layer", "0"], "--layer"),
        (["--block", "0"], "--block"),
        (["--block", "3"], "--block 3"),
        (["--block", "2", "--layer", "2"], "--block only"),
        (["--threshold", "0"], "--threshold"),
        (["--variants", "embedding"], "unknown variant"),
        (["--attention", "other"], "--attention"),
        (["--from", "missing.parquet"], "no such file"),
        (["--from", "."], "a folder, not a parquet file of check results"),
        (["--rtol", "-1"], "rtol"),
    ],
)
def test_bad_input(capsys, vit4, image_dir, tmp_path, args, match):
    out = tmp_path / "o.parquet"
    plot = tmp_path / "p.png"
    rc, stdout, err = run(
        capsys, "capacity", vit4, "--data", image_dir, "--limit", "20", "--out", out, "--plot", plot, *args
    )
    assert_one_error(rc, err, match)
    assert stdout == ""
    assert not out.exists() and not plot.exists() and tmp_leftovers(tmp_path) == []


def test_layer_is_a_deprecated_alias_of_block(capsys, vit4, image_dir):
    """--layer K still works, means --block K, and says so in one warning line on stderr."""
    rc, out, err = run(
        capsys, "capacity", vit4, "--data", image_dir, *FAST, "--variants", "random", "--layer", "2", "--format", "json"
    )
    assert rc == 0, err
    assert err.splitlines() == [LAYER_DEPRECATED]
    assert err.startswith(
        "Warning: --layer is deprecated and will be removed in the next release; use --block (same meaning: "
    )
    via_block = json_run(capsys, vit4, "--data", image_dir, *FAST, "--variants", "random", "--block", "2")
    assert json.loads(out)["records"] == via_block["records"]
    assert via_block["meta"]["layer"] == 2 and "input of block 2" in via_block["meta"]["tokens"]
    # a block past the model's depth: the warning, then the one error line
    rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FAST, "--layer", "3")
    warning, error = err.strip().splitlines()
    assert warning == LAYER_DEPRECATED
    assert_one_error(rc, error, "2 blocks")
    assert out == ""


def test_a_column_named_in_another_case_is_recorded_by_its_name(capsys, vit4, image_dir):
    """--variants Trained ran the trained column but labelled its records, its metadata and its row "Trained":
    a filter on variant == "trained" found nothing. The names are now the columns' own."""
    out = json_run(capsys, vit4, "--data", image_dir, *FAST, "--variants", "Trained, RANDOM", "--heads", "1")
    assert list(out["meta"]["columns"]) == ["trained", "random"]
    assert {r["variant"] for r in out["records"]} == {"trained", "random"}


def test_help_says_what_block_reads(capsys):
    text = help_text(capsys, "capacity")
    assert "--block" in text and "--layer" in text and "table|json|parquet" in text
    assert "the output of block K-1" in text and "Deprecated alias of --block" in text


@pytest.mark.parametrize("field,value", [("verdict", "maybe"), ("verdict", None), ("exact_status", "perhaps")])
def test_from_a_file_whose_verdicts_are_not_check_s_words_is_refused(capsys, vit4, tmp_path, field, value):
    """A results file edited so that its A1 verdicts say something ``check`` never writes: refused, naming the row,
    where it was read as "not checked" and the run gave no bound without a word."""
    table = pq.read_table(FIXTURES / "results" / "check-v0.parquet")
    rows = [{**r, field: value if r["check"] == "assumption_1" else r.get(field)} for r in table.to_pylist()]
    edited = tmp_path / "edited.parquet"
    pq.write_table(pa.Table.from_pylist(rows).replace_schema_metadata(table.schema.metadata), edited)
    rc, _out, err = run(capsys, "capacity", vit4, *FROM, "--from", edited, "--variants", "random", "--block", "1")
    assert_one_error(rc, err, f"the assumption_1 row's {field} is {value!r}, not one of")


@pytest.mark.parametrize(
    "edit, says",
    [
        ({"verdict": "fails"}, "verdict fails with fraction"),  # its draws all independent
        (
            {"exact_status": "fails", "exact_basis": "witness"},
            "exact status fails by a witness, and the record holds no",
        ),
    ],
)
def test_from_a_file_whose_a1_row_contradicts_itself_is_refused(capsys, vit4, image_dir, tmp_path, edit, says):
    """A results file whose A1 row's words contradict its own counts: refused, where the forged verdict decided
    the bound. Its rows differ from the result its metadata stores, which names the row; without a stored result
    (a file written before results were stored) the row's own words refuse it."""
    res = tmp_path / "results.parquet"
    args = ("check", vit4, "--data", image_dir, "--limit", "40", "--samples", "100", "--batch-size", "16")
    rc, _, err = run(capsys, *args, "--variants", "random", "--out", res)
    assert rc == 0, err
    table = pq.read_table(res)
    rows = table.to_pylist()
    a1 = next(r for r in rows if r["check"] == "assumption_1")
    assert a1["verdict"] == "holds" and a1["exact_status"] != "fails" and not a1["witness"]
    a1.update(edit)
    edited = tmp_path / "edited.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), edited)
    rc, _out, err = run(capsys, "capacity", vit4, *FROM, "--from", edited, "--variants", "random", "--block", "2")
    assert_one_error(rc, err, f"--from {edited} holds a row unlike the result its metadata stores (row ")
    _rewritten(table, edited, rows, result=None)
    rc, _out, err = run(capsys, "capacity", vit4, *FROM, "--from", edited, "--variants", "random", "--block", "2")
    assert_one_error(rc, err, f"the assumption_1 row says what no run writes: {says}")


@pytest.mark.parametrize(
    "edit, says",
    [
        ({"variant": None}, "row 6's variant is null, not a name; every row of a results file of 'mhaaudit check"),
        ({"check": None}, "row 6's check is null, not a name"),
        ({"check": "assumption_9"}, "row 6's check is 'assumption_9' (str), not one that a results file of"),
        ("twice", "rows 6 and 73 are both the assumption_1 row of column 'random'; a results file of 'mhaaudit"),
    ],
)
def test_from_a_file_with_a_row_no_check_writes_is_refused(capsys, vit4, tmp_path, edit, says):
    """A row of check-v0.parquet without its column or check gave a bound read from nothing, and a second
    assumption_1 row of the column decided it (the last one read), with exit 0: now one line naming the file and
    the row(s), exit 2, nothing on stdout and no output written."""
    table = pq.read_table(FIXTURES / "results" / "check-v0.parquet")
    rows = table.to_pylist()
    assert (rows[5]["variant"], rows[5]["check"]) == ("random", "assumption_1") and rows[5]["verdict"] == "holds"
    if edit == "twice":
        rows.append({**rows[5], "verdict": "fails", "reason": "edited"})
    else:
        rows[5] = {**rows[5], **edit}
    edited = tmp_path / "edited.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), edited)
    out_file = tmp_path / "capacity.parquet"
    args = ("capacity", vit4, *FROM, "--from", edited, "--block", "1", "--out", out_file)  # check-v0's data
    rc, out, err = run(capsys, *args, "--format", "json")
    line = assert_one_error(rc, err, f"--from {edited}: {says}")
    assert out == "" and not out_file.exists() and tmp_leftovers(tmp_path) == [], line


@pytest.mark.parametrize("status, reason", [("weird", None), ("unavailable", ""), ("unavailable", "lost")])
def test_from_a_column_whose_status_check_never_writes_is_refused(capsys, vit4, tmp_path, status, reason):
    """A column's status in a results file's metadata other than ok or unavailable was read as unavailable, with an
    empty reason ("is unavailable: "); now refused. An unavailable column without a reason says the file gives none."""
    table = pq.read_table(FIXTURES / "results" / "check-v0.parquet")
    meta = json.loads(table.schema.metadata[b"mhaaudit"])
    meta["columns"]["random"] |= {"status": status, "reason": reason}
    edited = tmp_path / "edited.parquet"
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"mhaaudit": json.dumps(meta)}), edited)
    args = ("capacity", vit4, *FROM, "--from", edited, "--variants", "random", "--block", "2", "--format", "json")
    rc, out, err = run(capsys, *args)
    if status == "weird":
        assert_one_error(rc, err, f"--from {edited}: its 'mhaaudit' parquet metadata or rows are malformed")
        assert "column 'random' has status 'weird', not ok or unavailable" in err and out == ""
    else:
        assert rc == 0, err
        said = reason or "the file gives no reason"
        read = json.loads(out)["meta"]["columns"]["random"]["assumptions"]
        assert read["assumption_1_reason"] == f"column 'random' of {edited} is unavailable: {said}"


def test_from_a_series_of_checkpoints_reads_the_checkpoint_of_the_weights_given(
    capsys, vit4, vit_dir, image_dir, tmp_path
):
    """A series of checkpoints (with --sweep, at two layers) holds a trained column's verdicts once per checkpoint:
    capacity reads those of the checkpoint --weights names, as from the file of check run on it alone, and the
    reference columns for --variants random. Without --weights, or with weights not in the series, it is refused,
    naming the checkpoints (it used to be refused whatever the weights: "give a results file ... of one checkpoint").
    """
    import shutil

    ckpts = [shutil.copytree(vit4, tmp_path / f"ckpt-{i}") for i in (1, 2)]
    with torch.no_grad():  # the second checkpoint's weights differ from the first's
        folder = tmp_path / "ckpt-2"
        model = transformers.ViTModel.from_pretrained(folder)
        model.embeddings.patch_embeddings.projection.weight.mul_(1.5)
        model.save_pretrained(folder)
    series = tmp_path / "series.parquet"
    args = ("--data", image_dir, "--limit", "40", "--samples", "50", "--batch-size", "16", "--layers", "0,1")
    more = ("--variants", "random,trained", "--sweep", "--format", "json")
    rc, _, err = run(capsys, "check", vit4, *args, "--checkpoints", ",".join(map(str, ckpts)), *more, "--out", series)
    assert rc == 0, err
    single = tmp_path / "single.parquet"
    rc, _, err = run(capsys, "check", vit4, *args, "--weights", ckpts[1], *more, "--out", single)
    assert rc == 0, err

    def capacity(res, *extra):
        doc = json_run(capsys, vit4, "--data", image_dir, *FROM, "--from", res, *extra)
        return [{k: v for k, v in r.items() if "source" not in k} for r in doc["records"]], doc["meta"]["notes"]

    from_series, notes = capacity(series, "--weights", ckpts[1])
    assert from_series == capacity(single, "--weights", ckpts[1])[0] and from_series
    assert not [x for x in notes if "were audited on" in x]
    first, _ = capacity(series, "--weights", ckpts[0])
    assert first != from_series  # the other checkpoint's verdicts and bound
    assert capacity(series, "--variants", "random")[0] == capacity(single, "--variants", "random")[0]
    cap = tmp_path / "capacity.parquet"
    for extra, says in (
        (
            (),
            f"--from {series}: it holds a series of checkpoints ({ckpts[0]}, {ckpts[1]}), the verdicts of each: give",
        ),
        (("--weights", vit_dir), f"no checkpoint of its series is named {vit_dir} or lies there (it holds: {ckpts[0]}"),
    ):
        rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FROM, "--from", series, *extra, "--out", cap)
        assert_one_error(rc, err, says)
        assert out == "" and not cap.exists() and tmp_leftovers(tmp_path) == []


def test_from_a_series_an_identical_checkpoint_reads_as_audited_on_its_own_weights(capsys, vit4, image_dir, tmp_path):
    """A checkpoint byte-identical to the one before it carries that one's verdicts, of the same tensors: read
    for it, they are noted as audited on its own weights, not on the other checkpoint's ("the verdicts of
    column 'trained-L1' ... were audited on local folder .../ckpt-1; this run's trained weights are ...")."""
    import shutil

    ckpts = [shutil.copytree(vit4, tmp_path / f"ckpt-{i}") for i in (1, 2)]
    series = tmp_path / "series.parquet"
    args = ("--data", image_dir, "--limit", "40", "--samples", "50", "--batch-size", "16", "--variants", "trained")
    rc, _, err = run(capsys, "check", vit4, *args, "--checkpoints", ",".join(map(str, ckpts)), "--out", series)
    assert rc == 0, err
    entry = read_parquet_metadata(series)["series"]["checkpoints"][1]
    assert entry["status"] == "identical"
    assert [c["weights_source"] for c in entry["columns"].values()] == [f"local folder {ckpts[1]}"]
    doc = json_run(capsys, vit4, "--data", image_dir, *FROM, "--from", series, "--weights", ckpts[1])
    assert doc["records"] and not [x for x in doc["meta"]["notes"] if "were audited on" in x]


def test_from_a_series_weights_read_where_they_lie_not_by_a_name_alike(capsys, vit4, image_dir, tmp_path, monkeypatch):
    """Relative --weights name the checkpoint that lies there from this run's folder, whose weights the run reads:
    a series run elsewhere whose other checkpoint was named so as given (here: ``a`` in ``one/``, beside
    ``two/a`` given as its path) read that other one's verdicts, with a note that they were audited on it."""
    import shutil

    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    ckpts = [shutil.copytree(vit4, tmp_path / where / "a") for where in ("one", "two")]
    with torch.no_grad():  # the second checkpoint's weights differ from the first's
        model = transformers.ViTModel.from_pretrained(ckpts[1])
        model.embeddings.patch_embeddings.projection.weight.mul_(1.5)
        model.save_pretrained(ckpts[1])
    series, single = tmp_path / "series.parquet", tmp_path / "single.parquet"
    args = ("--data", image_dir, "--limit", "40", "--samples", "50", "--batch-size", "16", "--variants", "trained")
    monkeypatch.chdir(tmp_path / "one")
    rc, _, err = run(capsys, "check", vit4, *args, "--checkpoints", f"a,{ckpts[1]}", "--out", series)
    assert rc == 0, err
    monkeypatch.chdir(tmp_path / "two")
    rc, _, err = run(capsys, "check", vit4, *args, "--weights", "a", "--out", single)
    assert rc == 0, err

    def capacity(res):
        doc = json_run(
            capsys, vit4, "--data", image_dir, *FROM, "--from", res, "--weights", "a", "--variants", "trained"
        )
        return [{k: v for k, v in r.items() if "source" not in k} for r in doc["records"]], doc["meta"]["notes"]

    (records, notes), (alone, _) = capacity(series), capacity(single)
    assert records == alone and not [x for x in notes if "were audited on" in x]


def test_from_the_file_of_another_command_is_refused_naming_it(capsys, vit4, image_dir, tmp_path):
    """The files of reproduce, capacity and kruskal were refused as "not a results file of 'mhaaudit check --out'
    (no check/variant columns)", which says what they are not; the refusal names the command that wrote each.
    The file of check --seeds is refused as holding several seeds."""
    files = {name: tmp_path / f"{name}.parquet" for name in ("reproduce", "capacity", "kruskal", "seeds")}
    small = ("--limit", "24", "--samples", "20", "--batch-size", "16", "--out")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((24, 8)).astype(np.float32))
    for args in (
        ("reproduce", "table1", "--model", f"vit={vit4}", "--data", image_dir, *small, files["reproduce"]),
        ("capacity", vit4, "--data", image_dir, *small, files["capacity"]),
        ("kruskal", tmp_path / "x.npy", "--samples", "20", "--out", files["kruskal"]),
        ("check", vit4, "--data", image_dir, "--variants", "random", "--seeds", "0-1", *small, files["seeds"]),
    ):
        rc, _, err = run(capsys, *args, "--format", "json")
        assert rc == 0, err
    said = {
        "reproduce": "it holds the results of 'mhaaudit reproduce table1' (its parquet metadata says so), not a "
        "check run's verdicts: give a results file of 'mhaaudit check --out'",
        "capacity": "it holds the results of 'mhaaudit capacity'",
        "kruskal": "it holds the results of 'mhaaudit kruskal'",
        "seeds": "it holds the records of several seeds (check --seeds)",
    }
    for name, path in files.items():
        rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FROM, "--from", path)
        assert_one_error(rc, err, f"--from {path}: " + said[name])
        assert out == ""


def test_from_a_file_that_is_not_check_results(capsys, vit4, image_dir, tmp_path):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), bad)
    rc, _out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FROM, "--from", bad)
    assert_one_error(rc, err, "not a results file")


def test_bad_output_paths(capsys, vit4, image_dir, tmp_path):
    rc, _out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FAST, "--plot", tmp_path / "p.txt")
    assert_one_error(rc, err, ".png")
    rc, _out, err = run(
        capsys, "capacity", vit4, "--data", image_dir, *FAST, "--out", tmp_path / "missing" / "o.parquet"
    )
    assert_one_error(rc, err, "does not exist")


def _check_out(capsys, model, image_dir, tmp_path, variant: str):
    """The --out file of a quick check of ``model``'s ``variant`` column on 40 images, for capacity --from."""
    res = tmp_path / "results.parquet"
    args = ["--data", image_dir, "--limit", "40", "--samples", "20", "--variants", variant, "--out", res]
    rc, _, err = run(capsys, "check", model, *args)
    assert rc == 0, err
    return res


def test_from_results_of_another_model_is_refused(capsys, vit4, vit_dir_wide, image_dir, tmp_path):
    res = _check_out(capsys, vit4, image_dir, tmp_path, "embedding")
    rc, out, err = run(capsys, "capacity", vit_dir_wide, "--data", image_dir, *FROM, "--from", res)
    assert_one_error(rc, err, "d = 32")
    assert out == ""


def test_from_results_of_other_weights_is_refused_and_of_a_moved_folder_noted(
    capsys, vit4, vit_dir, image_dir, tmp_path
):
    """The verdicts read must be those of this run's weights: a file audited on a model of another shape (2 heads
    against 4, the same n and d) or on random weights of another seed is refused; the same model read from another
    folder is read, and a note says where the file's weights came from."""
    import shutil

    res = _check_out(capsys, vit4, image_dir, tmp_path, "random")
    rc, out, err = run(capsys, "capacity", vit_dir, "--data", image_dir, *FROM, "--from", res, "--variants", "random")
    assert_one_error(rc, err, "audited on a model with num_heads = 4, but the model here has num_heads = 2")
    assert out == ""
    rc, out, err = run(
        capsys,
        "capacity",
        vit4,
        "--data",
        image_dir,
        *FROM,
        "--from",
        res,
        "--variants",
        "random",
        "--weights-seed",
        "5",
    )
    assert_one_error(rc, err, "its random weights were drawn with weights seed 0, this run's with 5")
    assert out == ""
    moved = tmp_path / "moved"
    shutil.copytree(vit4, moved)
    doc = json_run(capsys, moved, "--data", image_dir, *FROM, "--from", res, "--variants", "random")
    assert "(column random)" in doc["meta"]["columns"]["random"]["assumptions"]["source"]
    said = [x for x in doc["meta"]["notes"] if "were audited on" in x]
    assert len(said) == 1 and f"local folder {vit4}" in said[0] and f"local folder {moved}" in said[0]


def test_text_decoder_end_to_end(capsys, tmp_path):
    """A tiny GPT-2 on the built-in text: the last token is the query; the causal mask is noted."""
    cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=64)
    torch.manual_seed(0)
    transformers.GPT2Model(cfg).eval().save_pretrained(str(tmp_path / "gpt2"))
    doc = json_run(
        capsys,
        tmp_path / "gpt2",
        "--context-length",
        "8",
        "--limit",
        "30",
        "--samples",
        "50",
        "--variants",
        "random",
        "--heads",
        "1,4",
    )
    recs = doc["records"]
    assert [r["heads"] for r in recs] == [1, 4] and all(r["n"] == 8 and r["d"] == 32 for r in recs)
    assert all(r["rank"] <= min(r["T"], r["heads"] * 32) and r["residual"] < 1e-6 for r in recs)
    assert any("causal mask" in n and "changes nothing" in n for n in doc["meta"]["notes"])


def test_from_a_file_declaring_more_than_memory_holds_is_refused_before_it_is_read(capsys, vit4, tmp_path, monkeypatch):
    """--from is read whole into Python values: a small file whose footer declares a million rows (of zeros, a
    few KB) is refused from its footer before a value is decoded, as a features file is."""
    from mhaaudit import hostmem

    zeros = np.zeros(1_000_000, dtype=np.int32)
    pq.write_table(pa.table({"check": zeros, "variant": zeros}), tmp_path / "z.parquet")
    assert os.path.getsize(tmp_path / "z.parquet") < 100_000

    def trap(*a, **k):
        raise AssertionError("the file was read before its declared size was checked")

    monkeypatch.setattr(hostmem, "available_memory", lambda: 50_000_000)
    monkeypatch.setattr(pq, "read_table", trap)
    rc, out, err = run(capsys, "capacity", vit4, *FROM, "--from", tmp_path / "z.parquet")
    line = assert_one_error(rc, err, "its footer declares 1000000 rows of 2 columns")
    assert "more than the 50.0 MB available" in line and out == ""


def test_the_inputs_skipped_are_noted(capsys, vit4, image_dir, tmp_path):
    """docs/guides/your-data.md: skipped inputs are counted by cause in the report and the JSON. capacity
    read past an unreadable image without a word (check says it); it notes the skips, and a T short of --limit."""
    import shutil

    folder = tmp_path / "imgs"
    shutil.copytree(image_dir, folder)
    (folder / "aa-broken.png").write_bytes(b"not an image")  # read first, in sorted path order
    doc = json_run(capsys, vit4, "--data", folder, *FROM)
    assert "inputs skipped: 1 unreadable (e.g. aa-broken.png: not an image file" in " ".join(doc["meta"]["notes"])
    doc = json_run(capsys, vit4, "--data", folder, "--limit", "100")
    notes = " ".join(doc["meta"]["notes"])
    assert "100 examples were asked for (--limit) but the data gave only 60 usable ones (skipped: 1 unreadable" in notes


def test_from_a_series_of_checkpoints_whose_names_are_not_utf8(capsys, vit4, image_dir, tmp_path):
    """A checkpoint folder whose name holds a byte that is not UTF-8 is tagged in the series' rows with that byte
    as its escape (parquet's strings hold only UTF-8), its name itself in the metadata: capacity reads its rows by
    either, as from the file of check run on it alone."""
    import os
    import shutil

    ckpts = [shutil.copytree(vit4, tmp_path / os.fsdecode(b"ckpt-%d\xff" % i)) for i in (1, 2)]
    series, single = tmp_path / "series.parquet", tmp_path / "single.parquet"
    args = ("--data", image_dir, "--limit", "40", "--samples", "50", "--batch-size", "16", "--variants", "trained")
    rc, _, err = run(capsys, "check", vit4, *args, "--checkpoints", ",".join(map(str, ckpts)), "--out", series)
    assert rc == 0, err
    rc, _, err = run(capsys, "check", vit4, *args, "--weights", ckpts[1], "--out", single)
    assert rc == 0, err

    def capacity(res):
        doc = json_run(capsys, vit4, "--data", image_dir, *FROM, "--from", res, "--weights", ckpts[1])
        return [{k: v for k, v in r.items() if "source" not in k} for r in doc["records"]]

    got = capacity(series)
    assert got and got == capacity(single)


def test_from_a_series_whose_rows_of_the_checkpoint_were_removed_is_refused(capsys, vit4, image_dir, tmp_path):
    """A series file whose rows of the checkpoint read (or all its rows, for a trained column alone) were removed
    by hand: one line naming the file and the checkpoint, where capacity read a bound from the reference rows
    alone or stopped with exit 3 (an index past the rows)."""
    import shutil

    ckpts = [shutil.copytree(vit4, tmp_path / f"ckpt-{i}") for i in (1, 2)]
    series = tmp_path / "series.parquet"
    args = ("--data", image_dir, "--limit", "40", "--samples", "50", "--batch-size", "16")
    for variants in ("random,trained", "trained"):  # with reference rows, and without any (then exit 3)
        series.unlink(missing_ok=True)
        rc, _, err = run(capsys, "check", vit4, *args, "--checkpoints", ",".join(map(str, ckpts)), "--out", series,
                         "--variants", variants)  # fmt: skip
        assert rc == 0, err
        table = pq.read_table(series)
        kept = [r for r in table.to_pylist() if r["checkpoint"] != str(ckpts[1])]
        pq.write_table(pa.Table.from_pylist(kept, schema=table.schema), series)
        rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FROM, "--from", series, "--weights",
                           ckpts[1], "--format", "json")  # fmt: skip
        line = assert_one_error(rc, err, f"--from {series}: it holds no rows of checkpoint {ckpts[1]}, whose")
        assert out == "", line


def _rewritten(table, to, rows=None, **meta):
    """``table`` (a results file read whole) written to ``to`` with ``rows`` in place of its rows and ``meta`` set in
    its mhaaudit metadata (a value None: the key removed)."""
    whole = json.loads(table.schema.metadata[b"mhaaudit"]) | meta
    whole = {k: v for k, v in whole.items() if v is not None}
    rows = table.to_pylist() if rows is None else rows
    kept = {**table.schema.metadata, b"mhaaudit": json.dumps(whole).encode()}
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema).replace_schema_metadata(kept), to)
    return to


def test_from_a_file_whose_rows_differ_from_its_stored_result_is_refused(capsys, vit4, image_dir, tmp_path):
    """check --out stores its result in the file's metadata beside the rows that capacity reads: a row edited by hand
    (Assumption 2's verdict and fraction changed together, which no check of the row alone contradicts) gave another
    bound with exit 0. It is refused as a series' resume refuses such a file: one line naming the file, the row and
    the cell, in the command line's words and the library's. An unedited file gives what it gave before; a file that
    stores no result, or that another release wrote, is read as it stands."""
    from mhaaudit.capacity import capacity_audit
    from mhaaudit.errors import InputError

    res = tmp_path / "results.parquet"
    rc, _, err = run(capsys, "check", vit4, "--data", image_dir, *FROM, "--samples", "50", "--variants", "random",
                     "--out", res)  # fmt: skip
    assert rc == 0, err
    table = pq.read_table(res)
    meta = json.loads(table.schema.metadata[b"mhaaudit"])
    assert meta["version"] == __version__ and "result" in meta

    def bound(path):
        doc = json_run(capsys, vit4, "--data", image_dir, *FROM, "--from", path, "--variants", "random", "--block", "2")
        return doc["records"]

    unstored = _rewritten(table, tmp_path / "unstored.parquet", result=None)  # as a file written before results were
    assert bound(res) == bound(unstored)  # stored: read as it stands, as every file was
    rows = table.to_pylist()
    (a2,) = [i for i, r in enumerate(rows) if (r["variant"], r["check"]) == ("random", "assumption_2")]
    assert (rows[a2]["verdict"], rows[a2]["fraction"]) == ("holds", 1.0)
    rows[a2] |= {"verdict": "fails", "exact_status": "fails", "fraction": 0.5, "satisfied": 20}  # each context
    rows[a2] |= {"ci_low": 0.5, "ci_high": 0.5}  # decided exactly: half the examples said to be of lower rank
    assert bound(_rewritten(table, tmp_path / "before.parquet", rows, result=None)) != bound(res)  # what it gave
    edited = _rewritten(table, tmp_path / "edited.parquet", rows)
    cap = tmp_path / "capacity.parquet"
    rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FROM, "--from", edited, "--variants", "random",
                       "--block", "2", "--out", cap)  # fmt: skip
    line = assert_one_error(rc, err, f"--from {edited} holds a row unlike the result its metadata stores (row {a2 + 1}")
    assert f"row {a2 + 1}, variant random, layer 1, check assumption_2: satisfied is 20 where the stored result" in line
    assert "no run writes that (the file was edited or damaged); give the file as its run wrote it" in line
    assert out == "" and not cap.exists()
    with pytest.raises(InputError, match=f"from_path {edited} holds a row unlike the result its metadata stores"):
        capacity_audit(str(vit4), from_path=edited, data=str(image_dir), limit=40, variants=["random"], block=2)
    bad = _rewritten(table, tmp_path / "bad.parquet", result={**meta["result"], "columns": 5})
    rc, out, err = run(capsys, "capacity", vit4, *FROM, "--from", bad, "--variants", "random", "--block", "2")
    assert_one_error(rc, err, f"--from {bad} holds a stored result that cannot be read back (its metadata: ")
    for field, value, says in [
        ("satisfied", 10**30, "whose rows cannot be written"),  # past an int64 column
        ("fraction", 10**400, "that cannot be read back"),
    ]:  # past a float: exit 3 before
        stored = json.loads(json.dumps(meta["result"]))
        stored["columns"][0]["tests"]["general_position"][field] = value
        big = _rewritten(table, tmp_path / f"big-{field}.parquet", result=stored)
        rc, out, err = run(capsys, "capacity", vit4, *FROM, "--from", big, "--variants", "random", "--block", "2")
        assert_one_error(rc, err, f"--from {big} holds a stored result {says} (")
    for release in ("0.0.1", "0.1.0"):  # another release's rows may differ; 0.1.0's too (this code is not 0.1.0)
        other = _rewritten(table, tmp_path / f"other-{release}.parquet", rows, version=release)
        assert bound(other) == bound(tmp_path / "before.parquet")


def test_from_a_series_without_reference_columns_read_for_them_says_so(capsys, vit4, image_dir, tmp_path):
    """A series run with the trained column alone holds no reference rows: read for the random column alone, it is
    refused saying so (it was refused as a file whose rows were removed, and exit 3 before that)."""
    import shutil

    ckpts = [shutil.copytree(vit4, tmp_path / f"ckpt-{i}") for i in (1, 2)]
    series = tmp_path / "series.parquet"
    args = ("--data", image_dir, "--limit", "40", "--samples", "50", "--batch-size", "16", "--variants", "trained")
    rc, _, err = run(capsys, "check", vit4, *args, "--checkpoints", ",".join(map(str, ckpts)), "--out", series)
    assert rc == 0, err
    rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FROM, "--from", series, "--variants", "random")
    line = assert_one_error(rc, err, f"--from {series}: its series audited no reference (random) columns, only each")
    assert "trained in --variants, the checkpoint in --weights or --revision" in line and "removed" not in line
    assert out == ""
    rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FROM, "--from", series, "--variants", "trained",
                       "--weights", ckpts[1], "--format", "json")  # fmt: skip
    assert rc == 0, err
    assert {r["variant"] for r in json.loads(out)["records"]} == {"trained"}


def test_from_a_series_whose_rows_differ_from_its_stored_result_is_refused(capsys, vit4, image_dir, tmp_path):
    """The rows of a series file that capacity --from reads (the reference's and the checkpoint's, its sweep's too)
    are held to the audits its metadata stores, as a single run's file is: a row edited by hand is refused in one line
    naming its row in the file and the cell. The unedited file is read as before, for an audited checkpoint and for
    one identical to it (whose rows are the audited one's records), and so is a file whose edit lies in rows not
    read (another checkpoint's)."""
    import shutil

    from mhaaudit.capacity import capacity_audit
    from mhaaudit.errors import InputError

    ckpts = [str(shutil.copytree(vit4, tmp_path / f"ckpt-{i}")) for i in (1, 2)]
    series = tmp_path / "series.parquet"
    rc, _, err = run(capsys, "check", vit4, "--data", image_dir, *FROM, "--samples", "50", "--sweep",
                     "--variants", "random,trained", "--checkpoints", ",".join(ckpts), "--out", series)  # fmt: skip
    assert rc == 0, err
    table = pq.read_table(series)
    rows = table.to_pylist()
    assert {r["identical_to"] for r in rows if r["checkpoint"] == ckpts[1]} == {ckpts[0]}
    assert any(r["check"] == "sweep" for r in rows) and any(r["check"] == "sweep_estimate" for r in rows)

    def bound(path, ckpt):
        args = ("--data", image_dir, *FROM, "--from", path, "--weights", ckpt, "--block", "2")
        return json_run(capsys, vit4, *args)["records"]

    before = {c: bound(series, c) for c in ckpts}

    def edited(whose, name):  # Assumption 2 said to fail for half the examples: verdict, count and fraction alike
        edit = [dict(r) for r in rows]
        variant = "random" if whose is None else "trained"
        want = (whose, variant, "assumption_2")
        (i,) = [i for i, r in enumerate(edit) if (r["checkpoint"], r["variant"], r["check"]) == want]
        edit[i] |= {"verdict": "fails", "exact_status": "fails", "fraction": 0.5, "satisfied": 20}
        edit[i] |= {"ci_low": 0.5, "ci_high": 0.5}
        return _rewritten(table, tmp_path / name, edit), i + 1

    for whose, read, label in [(None, ckpts[0], "the reference, variant random"),
                               (ckpts[0], ckpts[0], f"checkpoint {ckpts[0]}, variant trained"),
                               (ckpts[1], ckpts[1], f"checkpoint {ckpts[1]}, variant trained")]:  # fmt: skip
        path, row = edited(whose, f"edited-{os.path.basename(whose or 'reference')}.parquet")
        cap = tmp_path / "capacity.parquet"
        rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FROM, "--from", path, "--weights", read,
                           "--block", "2", "--out", cap)  # fmt: skip
        line = assert_one_error(
            rc, err, f"--from {path} holds a row unlike the result its metadata stores (row {row}, "
        )
        assert f"(row {row}, {label}, layer 1, check assumption_2: satisfied is 20 where the stored result" in line
        assert line.endswith("no run writes that (the file was edited or damaged); give the file as its run wrote it")
        assert out == "" and not cap.exists()
    with pytest.raises(InputError, match=f"from_path {path} holds a row unlike the result its metadata stores"):
        capacity_audit(str(vit4), from_path=path, weights=ckpts[1], data=str(image_dir), limit=40, block=2)
    path, _ = edited(ckpts[1], "other.parquet")  # the identical checkpoint's rows edited, the audited one's read
    assert bound(path, ckpts[0]) == before[ckpts[0]]
