"""Several seeds in one run (``mhaaudit.seeds``): the shared ``--seeds`` syntax, the weights and data
seeds, per-seed / summary / difference records, shared model loads, and the commands' outputs."""

from __future__ import annotations

import contextlib
import io
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from clitools import assert_one_error, run
from conftest import strict_json
from rich.table import Table

from mhaaudit import audit, load_sharing, pipeline
from mhaaudit.auditing import AuditResult, capture_features
from mhaaudit.check_words import CHECK_TITLES
from mhaaudit.documents import encode_result
from mhaaudit.errors import InputError
from mhaaudit.render import print_json
from mhaaudit.seeds import (
    Cell,
    DifferenceRecord,
    EstimateRecord,
    ExactOverSeeds,
    Holding,
    PaperValue,
    SeedPlan,
    SeedRecords,
    SeedRun,
    SeedsResult,
    SummaryRecord,
    SweepRow,
    difference_records,
    parse_seeds,
    plan_seeds,
    summary_records,
)
from mhaaudit.seeds.spread import Layout, spread, spread_phrase
from mhaaudit.settings import Settings

RUN = dict(limit=40, samples=60, batch_size=8)
CLI_RUN = ["--limit", "40", "--samples", "60", "--batch-size", "8"]


# --------------------------------------------------------------------------- the syntax and the plan


def test_seeds_syntax_is_memorize_s():
    from mhaaudit.memorize.request import _seeds

    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("7,0,3") == [0, 3, 7]
    assert parse_seeds([2, 1]) == [1, 2]
    assert _seeds(None, "0-2,9") == parse_seeds("0-2,9")
    for bad in ("a-b", "3-1", "", -1):
        with pytest.raises(InputError, match=r"^seeds"):  # the library's parameter (the command line says --seeds)
            parse_seeds(bad)
    for twice, seed in (("0,0", 0), ("0-2,1", 1), ([3, 3], 3)):  # one seed is one run: a repeat is refused
        with pytest.raises(InputError, match=rf"^seeds .*: seed {seed} is named twice; name each seed once"):
            parse_seeds(twice)


def test_every_command_refuses_a_seed_named_twice(capsys, vit_dir):
    """``--seeds 0,0`` is one line and exit 2 for each command that takes seeds, before any work."""
    for args in (
        ("check", str(vit_dir), "--seeds", "0,0"),
        ("check", str(vit_dir), "--checkpoints", str(vit_dir), "--seeds", "0,0"),
        ("kruskal", "--model", str(vit_dir), "--seeds", "1,0-1"),
        ("reproduce", "table1", "--seeds", "0,0"),
        ("memorize", "--preset", "cpu", "--seeds", "0-2,1"),
        ("capacity", str(vit_dir), "--seeds", "3,3"),
    ):
        rc, out, err = run(capsys, *args)
        assert out == "", args
        assert_one_error(rc, err, "--seeds")
        assert "is named twice; name each seed once" in err, (args, err)


def test_every_command_refuses_seed_beside_seeds_whatever_its_value(capsys, vit_dir):
    """``--seed`` beside ``--seeds`` is one line and exit 2 for each command that takes seeds, ``--seed 0`` (the
    default's value) too: it was silently ignored by all but memorize, as its value could not be told from the
    default's."""
    for args in (
        ("check", str(vit_dir)),
        ("check", str(vit_dir), "--checkpoints", str(vit_dir)),
        ("kruskal", "--model", str(vit_dir)),
        ("reproduce", "table1"),
        ("memorize", "--preset", "cpu"),
        ("capacity", str(vit_dir)),
    ):
        for seed in ("0", "5"):
            rc, out, err = run(capsys, *args, "--seeds", "0-1", "--seed", seed)
            assert out == "", args
            assert_one_error(rc, err, "--seed has no effect with --seeds")


def test_plan_holds_the_other_seed_fixed():
    assert [r.kwargs() for r in plan_seeds("0-1").runs()] == [
        {"seed": 0, "weights_seed": None, "data_seed": None},
        {"seed": 1, "weights_seed": None, "data_seed": None},
    ]
    w = plan_seeds("3-4", vary="weights")
    assert [(r.seed, *r.seeds_used()) for r in w.runs()] == [(3, 3, 3), (4, 4, 3)]
    d = plan_seeds("3-4", vary="data", weights_seed=9)
    assert [(r.seed, *r.seeds_used()) for r in d.runs()] == [(3, 9, 3), (4, 9, 4)]
    assert "data seed varies" in d.describe() and "held at 9" in d.describe()
    assert d.as_dict()["weights_seed"] == 9 and d.as_dict()["data_seed"] == "varied"


@pytest.mark.parametrize(
    "kwargs, match",
    [  # the library's parameters (the command line names its flags)
        (dict(seed=2), "either seed or seeds"),
        (dict(vary="weights", weights_seed=1), "weights_seed has no effect"),
        (dict(vary="data", data_seed=1), "data_seed has no effect"),
        (dict(weights_seed=1), "vary weights or vary data"),
        (dict(vary="model"), "^unknown vary|^vary"),
    ],
)
def test_plan_refuses_what_cannot_apply(kwargs, match):
    with pytest.raises(InputError, match=match):
        plan_seeds("0-1", **kwargs)


def test_settings_weights_and_data_seeds_default_to_the_seed():
    s = Settings.resolve(device="cpu", seed=5)
    assert (s.weights_seed_used, s.data_seed_used) == (5, 5)
    assert "weights_seed" not in s.as_dict() and "data_seed" not in s.as_dict()  # a --seed run's meta is unchanged
    t = Settings.resolve(device="cpu", seed=5, data_seed=2)
    assert (t.weights_seed_used, t.data_seed_used) == (5, 2)
    assert t.as_dict()["weights_seed"] == 5 and t.as_dict()["data_seed"] == 2
    with pytest.raises(InputError, match=r"^weights_seed"):  # the library names its parameter
        Settings.resolve(device="cpu", weights_seed=-1)


# --------------------------------------------------------------------------- summaries and differences


def _recs(seed: int, fraction: float, verdict: str, exact: str = "undecided") -> list[dict]:
    return [
        {
            "check": "assumption_1",
            "variant": "random",
            "k": 5,
            "fraction": fraction,
            "verdict": verdict,
            "exact_status": exact,
            "seed": seed,
        }
    ]


def test_summary_median_range_holding_and_exact_status():
    per = [
        (SeedRun(0), _recs(0, 0.99, "holds")),
        (SeedRun(1), _recs(1, 0.5, "fails", "fails")),
        (SeedRun(2), _recs(2, 1.0, "holds")),
    ]
    (s,) = summary_records(per, key=("variant", "check", "k"), value="fraction")
    assert isinstance(s, SummaryRecord) and s.cell == Cell(
        ("variant", "check", "k"), variant="random", check="assumption_1", k=5
    )
    assert s.seeds == (0, 1, 2) and s.values == (0.99, 0.5, 1.0) and s.runs == 3
    assert (s.median, s.low, s.high) == (0.99, 0.5, 1.0)
    assert s.holding == Holding(holding=2, decided=3)
    assert s.exact == ExactOverSeeds("fails", (1,)) and s.paper is None and s.against_paper is None
    expected = {
        "variant": "random",
        "check": "assumption_1",
        "k": 5,
        "aggregate": "summary",
        "seed": None,
        "value": "fraction",
        "seeds": [0, 1, 2],
        "runs": 3,
        "values": [0.99, 0.5, 1.0],
        "median": 0.99,
        "low": 0.5,
        "high": 1.0,
        "seeds_holding": 2,
        "seeds_decided": 3,
        "exact_status": "fails",
        "exact_seeds": [1],
        "spread": "median 0.99, range 0.5 to 1 over 3 seeds",
    }
    assert list(s.as_dict().items()) == list(expected.items())  # the fields in the order the outputs write them
    assert SummaryRecord.from_document(json.loads(json.dumps(encode_result(s)))) == s
    per[2] = (SeedRun(2), _recs(2, 1.0, "holds", "holds"))
    (s,) = summary_records(per, key=("variant", "check", "k"), value="fraction")
    assert s.exact == ExactOverSeeds("mixed", (1, 2))


def test_summary_without_verdicts_or_numbers_and_with_the_paper():
    per = [
        (SeedRun(s), [{"model": "vit", "kind": "rank", "our_value": None, "paper_value": 3, "source": "T1"}])
        for s in (0, 1)
    ]
    (s,) = summary_records(per, key=("model", "kind"), value="our_value", paper=True)
    assert s.holding is None and s.exact is None and (s.median, s.low, s.high) == (None, None, None)
    assert s.paper == PaperValue(3, None, "T1") and s.spread == "no value"
    assert list(s.as_dict())[:5] == ["model", "kind", "paper_value", "paper_verdict", "source"]
    assert SummaryRecord.from_document(encode_result(s)) == s
    with pytest.raises(TypeError, match="no cell field"):
        summary_records(per, key=("model", "target"), value="our_value")
    with pytest.raises(ValueError, match="not those of a SummaryRecord"):
        SummaryRecord.from_document(encode_result(s) | {"extra": 1})


def test_a_sweep_row_without_a_column_reads_back_as_written():
    row = {"k": 3, "fraction": 1.0, "ci_low": 0.9, "ci_high": 1.0, "exact_status": "holds", "exact_basis": "witness"}
    typed = SweepRow.from_document(row | {"aggregate": "seed", "seed": 4})  # kruskal's rows: one capture, no column
    assert typed.cell == Cell(()) and (typed.k, typed.seed, typed.exact_basis) == (3, 4, "witness")
    assert list(typed.as_dict().items()) == list((row | {"aggregate": "seed", "seed": 4}).items())
    assert SweepRow.from_document(json.loads(json.dumps(encode_result(typed)))) == typed
    with pytest.raises(ValueError, match="k"):
        SweepRow.from_document({"aggregate": "seed", "seed": 4})


def test_a_single_run_is_labelled_and_never_a_difference():
    assert "single run" in spread_phrase([0.5], 1)
    per = [(SeedRun(0), [{"check": "e", "variant": "a", "v": 10}, {"check": "e", "variant": "b", "v": 3}])]
    sums = summary_records(per, key=("variant", "check"), value="v")
    (d,) = difference_records(sums, per, key=("variant", "check"), value="v", check="e")
    assert isinstance(d, DifferenceRecord) and (d.a, d.b, d.seeds, d.values, d.runs) == ("a", "b", (0,), (7,), 1)
    assert d.excludes_zero is False and "not distinguishable with 1 seed" in d.conclusion
    assert d.as_dict()["aggregate"] == "difference" and d.as_dict()["runs"] == 1
    assert DifferenceRecord.from_document(json.loads(json.dumps(encode_result(d)))) == d


def test_difference_excludes_zero_only_when_every_seed_agrees():
    def per(b_values):
        return [
            (SeedRun(s), [{"check": "e", "variant": "a", "v": 10}, {"check": "e", "variant": "b", "v": bv}])
            for s, bv in enumerate(b_values)
        ]

    for b_values, excludes in (([3, 4, 9], True), ([3, 12, 9], False), ([11, 12, 13], True)):
        p = per(b_values)
        (d,) = difference_records(
            summary_records(p, key=("variant", "check"), value="v"), p, key=("variant", "check"), value="v", check="e"
        )
        assert d.excludes_zero is excludes
        assert d.values == tuple(10 - b for b in b_values) and (d.low, d.high) == (min(d.values), max(d.values))
        assert ("not distinguishable with 3 seeds" in d.conclusion) is (not excludes)


# --------------------------------------------------------------------------- the weights and data seeds


def test_weights_and_data_seeds_derive_from_the_seed_and_move_separately(vit_dir):
    def q(**kw):
        return capture_features(str(vit_dir), variant="random", device="cpu", limit=24, batch_size=8, **kw).queries

    base = q(seed=3)
    assert torch.equal(base, q(seed=9, weights_seed=3, data_seed=3))  # the default is the seed itself
    w, d = q(seed=3, weights_seed=4), q(seed=3, data_seed=4)
    assert not torch.equal(base, w) and not torch.equal(base, d) and not torch.equal(w, d)
    emb = capture_features(str(vit_dir), variant="embedding", device="cpu", limit=24, batch_size=8, seed=3).queries
    emb_w = capture_features(
        str(vit_dir), variant="embedding", device="cpu", limit=24, batch_size=8, seed=3, weights_seed=4
    ).queries
    assert not torch.equal(emb, emb_w)  # the random embedding is weights, not data


def test_each_seed_s_records_are_those_of_seed_s_alone(vit_dir):
    many = audit(str(vit_dir), variants=["random"], seeds="1-2", device="cpu", **RUN)
    one = audit(str(vit_dir), variants=["random"], seed=2, device="cpu", **RUN)
    got = [r for r in many.records() if r["aggregate"] == "seed" and r["seed"] == 2]
    drop = ("aggregate", "weights_seed", "data_seed")
    assert [{k: v for k, v in r.items() if k not in drop} for r in got] == one.records()
    assert all(r["weights_seed"] == 2 and r["data_seed"] == 2 for r in got)


def test_model_loads_are_shared_across_seeds(vit_dir, monkeypatch):
    loads = []
    real = pipeline._load

    def counting(request, init, settings, max_layer):
        loads.append((init, settings.weights_seed_used))
        return real(request, init, settings, max_layer)

    monkeypatch.setattr(pipeline, "_load", counting)
    res = audit(
        str(vit_dir),
        variants=["random", "trained"],
        weights=str(vit_dir),
        seeds="0-2",
        vary="data",
        device="cpu",
        **RUN,
    )
    assert sorted(loads) == [("random", 0), ("trained", 0)]  # only the data moved: each model built once
    assert {r["weights_seed"] for r in res.records() if r["aggregate"] == "seed" and r["variant"] == "trained"} == {
        None
    }
    loads.clear()
    res = audit(
        str(vit_dir),
        variants=["random", "trained"],
        weights=str(vit_dir),
        seeds="0-2",
        vary="weights",
        device="cpu",
        **RUN,
    )
    assert sorted(loads) == [("random", 0), ("random", 1), ("random", 2), ("trained", 0)]
    assert any("trained weights have no weights seed" in n and "only the Monte-Carlo draws" in n for n in res.notes)
    assert load_sharing.current() is None  # nothing is held after the run


# --------------------------------------------------------------------------- the commands


def reads_back(text: str, out=None) -> SeedsResult:
    """The SeedsResult a command's ``--format json`` output (and ``--out`` file) holds, checked to give
    back exactly what was written: the result document, the meta, the records, the sweep rows."""
    doc = strict_json(text)
    back = SeedsResult.from_json(doc)
    assert isinstance(back, SeedsResult) and back.runs == []  # the per-seed objects are not in the file
    assert SeedsResult.from_json(text) == back and encode_result(back) == doc["meta"]["result"]
    assert json.loads(json.dumps(back.meta())) == doc["meta"]
    assert json.loads(json.dumps(back.records())) == doc["records"]
    assert back.sweep_rows() == doc.get("sweep", [])
    assert all(isinstance(s, SummaryRecord) for s in back.summaries)
    assert all(isinstance(d, DifferenceRecord) for d in back.differences)
    assert all(isinstance(r, SweepRow) for r in back.sweeps)
    assert all(
        isinstance(seed, SeedRecords) and isinstance(e, EstimateRecord)
        for seed in back.per_seed
        for e in seed.estimates
    )
    per_seed_rows = [r for r in doc["records"] if r["aggregate"] == "seed"]
    assert json.loads(json.dumps([r for seed in back.per_seed for r in seed.rows()])) == per_seed_rows
    rows = [r for r in doc["records"] if r["aggregate"] != "seed"]
    assert json.loads(json.dumps([s.as_dict() for s in back.summaries + back.differences])) == rows
    if out is not None:
        assert SeedsResult.from_parquet(out) == back
    return back


def printed(result) -> str:
    """What ``--format json`` prints for ``result``."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_json({"meta": result.meta(), "records": result.records(), "sweep": result.sweep_rows()})
    return buf.getvalue()


def test_check_seeds_json_parquet_and_table(capsys, vit_dir, tmp_path):
    out = tmp_path / "seeds.parquet"
    rc, stdout, err = run(
        capsys,
        "check",
        vit_dir,
        "--variants",
        "embedding,random",
        *CLI_RUN,
        "--seeds",
        "0-1",
        "--sweep",
        "--format",
        "json",
        "--out",
        out,
        "--device",
        "cpu",
    )
    assert rc == 0, err
    doc = json.loads(stdout)
    back = reads_back(stdout, out)
    assert back.command == "check" and back.plan == SeedPlan((0, 1))
    with pytest.raises(InputError, match=r"a run with seeds, which mhaaudit\.seeds\.SeedsResult reads"):
        AuditResult.from_json(doc)  # a several-seed file holds no one run
    recs = doc["records"]
    kinds = {r["aggregate"] for r in recs}
    assert kinds == {"seed", "summary", "difference"}
    assert {r["seed"] for r in recs if r["aggregate"] == "seed"} == {0, 1}
    assert all(r["seed"] is None for r in recs if r["aggregate"] != "seed")
    est = [r for r in recs if r["aggregate"] == "summary" and r["check"] == "sweep_estimate"]
    assert {r["variant"] for r in est} == {"embedding", "random"}
    (diff,) = [r for r in recs if r["aggregate"] == "difference"]
    assert diff["a"] == "embedding" and diff["b"] == "random" and len(diff["values"]) == 2
    assert diff["excludes_zero"] == (diff["low"] > 0 or diff["high"] < 0)
    assert doc["meta"]["seeds"] == [0, 1] and doc["meta"]["seed_plan"]["vary"] == "both"
    assert {r["seed"] for r in doc["sweep"]} == {0, 1}
    for seed in back.per_seed:  # each seed's sweep estimates, typed: one per column
        assert [(e.cell.variant, e.seed, e.data_seed) for e in seed.estimates] == [
            ("embedding", seed.run.seed, seed.run.seed),
            ("random", seed.run.seed, seed.run.seed),
        ]
        assert all(
            e.estimate == min(e.raw_estimate, e.ceiling) and e.cell.key == ("model", "variant", "layer")
            for e in seed.estimates
        )
    assert {(r.seed, r.cell.variant) for r in back.sweeps} == {(s, v) for s in (0, 1) for v in ("embedding", "random")}
    assert all(r.cell.key == ("model", "variant", "layer") and 0 <= r.fraction <= 1 for r in back.sweeps)
    run0 = back.per_seed[0]
    with pytest.raises(ValueError, match="estimates are not after"):
        SeedRecords.from_document([encode_result(run0.run), [run0.estimates[0].as_dict(), *run0.records]])
    table = pq.read_table(out).to_pylist()
    assert {r["aggregate"] for r in table} == {"seed", "summary", "difference"}
    rc, stdout, err = run(
        capsys,
        "check",
        vit_dir,
        "--variants",
        "embedding,random",
        *CLI_RUN,
        "--seeds",
        "0-1",
        "--sweep",
        "--device",
        "cpu",
    )
    assert rc == 0, err
    assert "Over 2 seeds" in stdout and "holding" in stdout and "exact" in stdout and "Differences" in stdout
    # at a terminal's 80 columns the words wrap: no cell is cut short and no table is cropped
    tops = [ln.rstrip() for ln in stdout.splitlines() if ln.startswith("\u250f")]
    assert "\u2026" not in stdout and tops and all(ln.endswith("\u2513") for ln in tops), stdout
    assert ("excludes zero" in stdout) or ("not distinguishable with 2 seeds" in stdout)


def test_two_runs_files_concatenate_whatever_their_records_hold(capsys, vit_dir, tmp_path):
    """Every column of the command (and, with --seeds, of the seeds) is in every file, typed the same, in one
    order: files of runs with and without a sweep, of one column or two, concatenate (the schema page's promise).
    Before, a file had only the columns its records gave, in the order they gave them."""
    import pyarrow as pa

    files = {}
    for name, extra in {
        "seeds_sweep": ["--variants", "random", "--seeds", "0-1", "--sweep"],
        "seeds_two": ["--variants", "embedding,random", "--seeds", "0-1"],
        "one_sweep": ["--variants", "random", "--sweep"],
        "one": ["--variants", "embedding"],
    }.items():
        files[name] = tmp_path / f"{name}.parquet"
        rc, _, err = run(capsys, "check", vit_dir, *CLI_RUN, *extra, "--device", "cpu", "-q", "--out", files[name])
        assert rc == 0, err
    tables = {k: pq.read_table(f) for k, f in files.items()}
    for group in (("seeds_sweep", "seeds_two"), ("one_sweep", "one")):
        a, b = (tables[k] for k in group)
        assert a.schema.remove_metadata() == b.schema.remove_metadata(), group
        assert pa.concat_tables([a, b]).num_rows == a.num_rows + b.num_rows
    one = tables["one"].to_pylist()
    assert {"estimate", "checkpoint", "step"} <= set(one[0]) and all(r["estimate"] is None for r in one)


@pytest.mark.parametrize(
    "args, match",
    [
        (["--seeds", "0-1", "--seed", "3"], "either --seed or --seeds"),
        (["--vary", "weights"], "--vary has no effect without --seeds"),
        (["--seeds", "0-1", "--vary", "weights", "--weights-seed", "2"], "--weights-seed has no effect"),
        (["--seeds", "0-x"], "--seeds"),
        (["--weights-seed", "-3"], "--weights-seed"),
    ],
)
def test_check_seed_options_refused_in_one_line(capsys, vit_dir, args, match):
    rc, _, err = run(capsys, "check", vit_dir, *CLI_RUN, "--device", "cpu", *args)
    assert_one_error(rc, err, match)


def test_check_seeds_refuses_save_features(capsys, vit_dir, tmp_path):
    rc, _, err = run(capsys, "check", vit_dir, *CLI_RUN, "--seeds", "0-1", "--save-features", tmp_path / "f")
    assert_one_error(rc, err, "--save-features")


def test_kruskal_model_seeds_vary_data(capsys, vit_dir):
    rc, stdout, err = run(
        capsys,
        "kruskal",
        "--model",
        vit_dir,
        *CLI_RUN,
        "--seeds",
        "0-1",
        "--vary",
        "data",
        "--weights-seed",
        "4",
        "--format",
        "json",
        "--device",
        "cpu",
    )
    assert rc == 0, err
    recs = json.loads(stdout)["records"]
    assert reads_back(stdout).command == "kruskal"
    meta = json.loads(stdout)["meta"]  # each seed's phases beside its tests' seconds
    assert list(meta["phases_s"]) == list(meta["timings_s"]) == ["0", "1"]
    assert list(meta["inputs"]) == ["source", "T", "d", "n", "dtype"] and meta["inputs"]["dtype"] == "float32"
    assert all("forward" in p and "draws" in p and p["total"] > 0 for p in meta["phases_s"].values())
    per = [r for r in recs if r["aggregate"] == "seed"]
    assert {(r["seed"], r["weights_seed"], r["data_seed"]) for r in per} == {(0, 4, 0), (1, 4, 1)}
    assert any(r["aggregate"] == "summary" and r["check"] == "assumption_1" for r in recs)


def test_the_data_seed_note_names_images_read_in_order_and_not_text(capsys, vit_dir, image_dir, bert_dir, tmp_path):
    """The images of a folder keep their order, which a data seed cannot move, and the report says so; text read
    from a file is drawn from with the data seed (cuts, documents), so no such note is given for it."""
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]
    text = tmp_path / "docs.txt"
    text.write_text("\n\n".join(" ".join(words[(i + j) % 12] for j in range(30)) for i in range(12)) + "\n")
    note = "keep their own order, so the data seed does not change them"
    args = ["--limit", "24", "--samples", "20", "--batch-size", "8", "--seeds", "0-1"]
    args += ["--format", "json", "--device", "cpu"]
    for model, data, extra in (
        (vit_dir, image_dir, ["--vary", "data"]),
        (vit_dir, image_dir, []),  # the default --vary both moves the data seed too
        (bert_dir, text, ["--context-length", "16", "--vary", "data"]),
    ):
        for command in ("check", "kruskal"):
            where = ["--model"] if command == "kruskal" else []
            rc, stdout, err = run(capsys, command, *where, model, "--data", data, *extra, *args)
            assert rc == 0, err
            meta = json.loads(stdout)["meta"]
            notes = meta["seed_notes"] + meta.get("notes", [])
            said = [n for n in notes if note in n]
            assert said == (
                [
                    f"--data {data}: images read from a folder or file {note}: only the built-in images, "
                    "text examples and samples of data depend on it"
                ]
                if model == vit_dir
                else []
            ), (command, notes)


def test_capacity_seeds(capsys, vit4):
    rc, stdout, err = run(
        capsys,
        "capacity",
        vit4,
        "--variants",
        "random",
        "--limit",
        "40",
        "--batch-size",
        "8",
        "--seeds",
        "0-1",
        "--format",
        "json",
        "--device",
        "cpu",
    )
    assert rc == 0, err
    recs = json.loads(stdout)["records"]
    assert reads_back(stdout).command == "capacity"
    sums = [r for r in recs if r["aggregate"] == "summary"]
    assert sums and all(r["value"] == "rank" and r["low"] <= r["median"] <= r["high"] for r in sums)
    # the table heads the record's layer field as the report calls it: the block whose attention builds Z
    rc, table, err = run(capsys, "capacity", vit4, "--variants", "random", "--limit", "40", "--seeds", "0-1")
    assert rc == 0, err
    header = next(line for line in table.splitlines() if "heads h" in line)
    assert "block" in header and "layer" not in header
    blocks = {r["layer"] for r in sums}
    assert len(blocks) == 1 and f"│ random │ {blocks.pop()} " in table.replace("  ", " ")


def test_reproduce_seeds_table_says_what_each_row_is_at_100_columns(capsys, monkeypatch, vit_dir):
    """At 100 columns the several-seed table of reproduce gave its "what" column no width and cut k to "1…":
    Assumption 1 and Assumption 2 rows of a column could not be told apart. Every row now names its check and
    its k whole, and the one model is not repeated on every row."""
    from rich.cells import cell_len

    monkeypatch.setenv("COLUMNS", "100")
    args = ["reproduce", "table1", "--model", f"vit={vit_dir}", "--limit", "40", "--samples", "60", "--seeds", "0-1"]
    rc, out, err = run(capsys, *args, "--device", "cpu")
    assert rc == 0, err
    lines = out.splitlines()
    assert max(cell_len(line) for line in lines) <= 100
    rows = " ".join(ln for ln in lines if ln.startswith("│"))
    for what in ("General", "Assumption 1", "Assumption 2", "ranks"):
        assert what in rows
    assert "…" not in rows and "│ vit " not in rows


def test_reproduce_seeds_table_gives_our_k_and_our_ranks_as_the_records_do(capsys, monkeypatch, vit_dir, tmp_path):
    """The several-seed table gave the paper's k alone where ours was the audited model's n or d, and "-" for our
    ranks of d-subsets, a published value with no number. Each row now gives k as the one-seed table does (the
    paper's / ours) and each seed's ranks, as the records written beside it hold them."""
    monkeypatch.setenv("COLUMNS", "160")
    out = tmp_path / "r.parquet"
    args = ["reproduce", "table1", "--model", f"vit={vit_dir}", "--limit", "40", "--samples", "60", "--seeds", "0-1"]
    rc, table, err = run(capsys, *args, "--device", "cpu", "--out", out)
    assert rc == 0, err
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("│").split("│")]
        if line.startswith("│") and len(cells) == 7:
            rows[(cells[0], cells[1])] = cells
    per_seed = [r for r in pq.read_table(out).to_pylist() if r["aggregate"] == "seed"]
    assert {r["kind"] for r in per_seed} >= {"check", "ranks"}
    for r in per_seed:
        what = "ranks of d-subsets" if r["kind"] == "ranks" else CHECK_TITLES[r["check"]]
        row = rows[(r["column"], what)]
        assert r["our_k"] is not None and r["our_k"] != r["k"]  # a tiny model: n = 17, d = 32
        assert row[2] == f"{r['k']} / {r['our_k']}"
        if r["kind"] == "ranks":
            same = [x["our_verdict"] for x in per_seed if (x["column"], x["kind"]) == (r["column"], "ranks")]
            assert r["our_verdict"] and row[4] == (
                f"{r['our_verdict']} (every seed)" if len(set(same)) == 1 else row[4]
            )
            assert r["our_verdict"] in row[4]
    assert "k: the paper's / ours where they differ." in table


def test_reproduce_seeds_marks_whether_the_published_value_is_inside(capsys, vit_dir):
    rc, stdout, err = run(
        capsys,
        "reproduce",
        "table1",
        "--model",
        f"vit={vit_dir}",
        "--limit",
        "40",
        "--samples",
        "60",
        "--seeds",
        "0-1",
        "--format",
        "json",
        "--device",
        "cpu",
    )
    assert rc == 0, err
    back = reads_back(stdout)
    assert back.command == "reproduce" and back.title
    sums = [r for r in json.loads(stdout)["records"] if r["aggregate"] == "summary" and r["value"] == "our_value"]
    assert sums
    for r in sums:
        if r["paper_inside"] is not None:
            assert r["paper_value"] is not None and r["low"] is not None
            assert r["paper_inside"] == (r["low"] <= r["paper_value"] <= r["high"])
        assert 0 <= r["seeds_matching"] <= r["runs"] == 2
    rc, _, err = run(capsys, "reproduce", "figure2", "--seeds", "0-1")
    assert_one_error(rc, err, "--seeds does not apply to figure2")


def test_reproduce_seeds_hold_the_paper_against_no_seed_that_cannot_answer_it(capsys, vit_dir):
    """With T = 24 < d = 32 every seed tests the whole set at k = d, which the one-seed report calls
    undetermined; the several-seed summary said the published value lay "outside" the seeds' range (the whole
    set's fraction being 1) where no seed was held against it. It says nothing now (paper_inside null)."""
    args = ["reproduce", "table1", "--model", f"vit={vit_dir}", "--limit", "24", "--samples", "40", "--seeds", "0-1"]
    rc, stdout, err = run(capsys, *args, "--format", "json", "--device", "cpu")
    assert rc == 0, err
    recs = json.loads(stdout)["records"]
    sums = [r for r in recs if r["aggregate"] == "summary" and r["value"] == "our_value"]
    key = ("model", "column", "kind", "check", "k")
    undetermined = 0
    for r in sums:
        statuses = {s["status"] for s in recs if s["aggregate"] == "seed" and all(s[k] == r[k] for k in key)}
        if not statuses & {"match", "differs"}:
            undetermined += "undetermined" in statuses
            assert r["paper_inside"] is None and r["seeds_matching"] == 0
        elif r["paper_value"] is not None and r["low"] is not None:
            assert r["paper_inside"] == (r["low"] <= r["paper_value"] <= r["high"])
    assert undetermined >= 3  # General Position of the three random columns, at least


def test_seeds_result_repr_and_text(vit_dir):
    res = audit(str(vit_dir), variants=["embedding"], seeds=[0, 1], device="cpu", **RUN)
    assert repr(res).startswith("<SeedsResult check: 2 seeds")
    assert "Over 2 seeds" in str(res)
    assert np.isfinite([r.median for r in res.summaries if r.median is not None]).all()
    assert isinstance(res.plan, SeedPlan)
    back = SeedsResult.from_json(printed(res))  # the object itself, read back: equal field by field
    assert back == res and str(back) == str(res) and back.records() == res.records() and back.meta() == res.meta()


@pytest.mark.slow
def test_two_ranks_give_the_seeds_records_of_one_process(vit_dir, image_dir, tmp_path):
    """Under torchrun with a seed per rank, each rank runs its seeds whole and rank 0 gathers them:
    the per-seed, summary and difference records are those of one process, and only rank 0 writes."""
    from test_distributed import _check_args, launch, single

    cwds = [tmp_path / "rank0", tmp_path / "rank1"]
    for c in cwds:
        c.mkdir()
    args = _check_args(
        vit_dir, image_dir, "--variants", "embedding,random", "--sweep", "--seeds", "0-1", "--vary", "weights"
    )
    rc, one, err = single(args, cwd=tmp_path)
    assert rc == 0, err
    (r0, out0, err0), (r1, out1, err1) = launch(args, cwds=cwds)
    assert (r0, r1) == (0, 0), err0 + err1
    a, b = json.loads(one), json.loads(out0)
    assert b["records"] == a["records"] and b["sweep"] == a["sweep"]
    assert {r["aggregate"] for r in a["records"]} == {"seed", "summary", "difference"}
    assert b["meta"]["distributed"] == {"world_size": 2, "backend": "gloo", "seeds_by_rank": {"0": [0], "1": [1]}}
    assert "distributed" not in a["meta"]
    assert any("spread over 2 processes" in n for n in b["meta"]["seed_notes"])
    assert out1 == "" and os.listdir(cwds[1]) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "command, seeds, by_rank",
    [
        ("kruskal", "0-2", {"0": [0, 2], "1": [1]}),  # more seeds than ranks: rank 0 runs two
        ("reproduce", "0-1", {"0": [0], "1": [1]}),
        ("capacity", "0-1", {"0": [0], "1": [1]}),
        ("kruskal", "0", None),  # fewer seeds than ranks: the seed's batches are dealt, as without --seeds
    ],
)
def test_two_ranks_give_each_command_s_seeds_records_of_one_process(
    command, seeds, by_rank, vit_dir, image_dir, tmp_path
):
    from test_distributed import launch, single

    common = ["--limit", 30, "--batch-size", 4, "--samples", 100, "--device", "cpu", "--format", "json"]
    if command == "kruskal":
        args = ["kruskal", "--model", vit_dir, "--data", image_dir, "--sweep", *common, "--seeds", seeds]
    elif command == "capacity":
        args = ["capacity", vit_dir, "--data", image_dir, "--variants", "random", *common, "--seeds", seeds]
    else:
        args = ["reproduce", "table1", "--model", f"vit={vit_dir}", "--data", image_dir, *common, "--seeds", seeds]
    rc, one, err = single(args, cwd=tmp_path)
    assert rc == 0, err
    (r0, out0, err0), (r1, out1, err1) = launch(args)
    assert (r0, r1) == (0, 0), err0 + err1
    a, b = json.loads(one), json.loads(out0)
    assert b["records"] == a["records"] and b.get("sweep") == a.get("sweep")
    assert b["meta"]["distributed"]["seeds_by_rank"] == by_rank and out1 == ""
    assert SeedsResult.from_json(b).per_seed == SeedsResult.from_json(a).per_seed


@pytest.mark.slow
def test_a_rank_that_fails_on_its_own_seeds_ends_the_job_with_one_line(vit_dir, image_dir, tmp_path):
    """The seeds spread over the ranks: rank 1 fails in its seed while rank 0 runs its own; rank 0
    says so in one line when it gathers, exit 2, and writes nothing."""
    from test_distributed import DRIVER, _check_args, launch

    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "out.parquet"
    args = _check_args(vit_dir, image_dir, "--variants", "random", "--seeds", "0-1", "--out", out)
    (r0, out0, err0), (r1, _, err1) = launch(args, driver=driver, FAIL_RANK=1, FAIL_MODE="data")
    lines = err0.strip().splitlines()
    assert r0 == 2 and len(lines) == 1 and "rank 1 of 2 failed: batch unreadable on purpose" in lines[0], err0
    assert out0 == "" and r1 != 0 and err1 == "" and not out.exists()


def _two_nodes(tmp_path, image_dir, differ: str) -> list:
    """A folder per rank, as the file systems of two nodes: each holds its own copy of the images
    (``images``) and of a tiny ViT's trained weights (``tiny``); ``differ`` says what the second
    node's copy changes (``pixel``: one channel of one pixel of one image, same name and time;
    ``weights``: weights drawn from another seed, same config)."""
    import shutil

    from conftest import save_tiny_vit
    from PIL import Image

    cwds = [tmp_path / "rank0", tmp_path / "rank1"]
    for r, c in enumerate(cwds):
        (c / "images").mkdir(parents=True)
        for src in sorted(image_dir.iterdir())[:20]:
            shutil.copy2(src, c / "images" / src.name)
        save_tiny_vit(c / "tiny", seed=1 if r == 1 and differ == "weights" else 0)
    if differ == "pixel":
        changed = sorted((cwds[1] / "images").iterdir())[7]
        stat = changed.stat()
        img = Image.open(changed).convert("RGB")
        r_, g, b = img.getpixel((3, 3))
        img.putpixel((3, 3), ((r_ + 1) % 256, g, b))
        img.save(changed)
        os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return cwds


@pytest.mark.parametrize(
    "differ, words",
    [
        ("pixel", "the model inputs of ./tiny read from images differ"),
        ("weights", "the weights of ./tiny (trained weights, blocks up to 1) differ"),
        pytest.param("nothing", None, marks=pytest.mark.slow),
    ],
)
def test_seeds_spread_over_nodes_that_read_other_files_are_refused_on_every_rank(image_dir, tmp_path, differ, words):
    """Seeds spread over the ranks: each rank reads ``--data`` and the model from its own node's files.
    A node whose copy differs from rank 0's (one pixel of one image, or the trained weights) makes every
    rank refuse, exit 2, before the results are combined: rank 0 says what differs in one line and writes
    nothing. Copies that agree give the run."""
    from test_distributed import launch

    cwds = _two_nodes(tmp_path, image_dir, differ)
    args = ["check", "./tiny", "--data", "images", "--variants", "trained", "--seeds", "0-1", "--out", "out.parquet"]
    args += ["--limit", 20, "--batch-size", 4, "--samples", 50, "--device", "cpu", "--format", "json"]
    _ran_or_refused_on_every_rank(launch(args, cwds=cwds), cwds, words)


def _ran_or_refused_on_every_rank(ends: list, cwds: list, words: str | None) -> None:
    """The two ranks' ends (``launch``) of a run that writes ``out.parquet``: both ran and rank 0 wrote it
    (``words`` None), or both refused with exit 2, rank 0 saying in one line that rank 1 read other inputs,
    ``words`` among them, and nothing written."""
    (r0, out0, err0), (r1, out1, err1) = ends
    if words is None:
        assert (r0, r1) == (0, 0), err0 + err1
        assert (cwds[0] / "out.parquet").is_file()
        return
    lines = err0.strip().splitlines()
    assert (r0, r1) == (2, 2), err0 + err1
    assert len(lines) == 1 and lines[0].startswith("Error: rank 1 of 2 read other inputs than rank 0: "), err0
    assert words in lines[0] and "every node must hold the same data and model files" in lines[0], err0
    assert "Traceback" not in err0 and out0 == out1 == err1 == ""
    assert not (cwds[0] / "out.parquet").exists() and not (cwds[1] / "out.parquet").exists()


def _docs(changed: bool = False) -> str:
    """Twelve documents of 30 words; ``changed``: one word of the eighth is another."""
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]
    docs = [[words[(i + j) % 12] for j in range(30)] for i in range(12)]
    if changed:
        docs[7][11] = "omega"
    return "\n\n".join(" ".join(d) for d in docs) + "\n"


@pytest.mark.parametrize("differ", ["word", pytest.param("nothing", marks=pytest.mark.slow)])
def test_text_read_with_other_data_seeds_on_each_node_is_compared(bert_dir, tmp_path, differ):
    """Seeds spread over the ranks with ``--vary data``: each rank draws its examples from its own node's text
    file with its own data seeds, so no two ranks feed the same examples; the documents they are drawn from are
    compared all the same. One word changed on rank 1's node makes every rank refuse, exit 2, rank 0 naming the
    documents in one line and writing nothing; copies that agree give the run."""
    import shutil

    from test_distributed import launch

    cwds = [tmp_path / "rank0", tmp_path / "rank1"]
    for r, c in enumerate(cwds):
        shutil.copytree(bert_dir, c / "tiny")
        (c / "docs.txt").write_text(_docs(changed=r == 1 and differ == "word"))
    args = ["check", "./tiny", "--data", "docs.txt", "--context-length", 16, "--variants", "trained"]
    args += ["--seeds", "0-1", "--vary", "data", "--limit", 20, "--samples", 50, "--device", "cpu"]
    args += ["--out", "out.parquet", "--format", "json"]
    words = "the documents ./tiny drew its examples from (docs.txt) differ" if differ == "word" else None
    _ran_or_refused_on_every_rank(launch(args, cwds=cwds), cwds, words)


def test_the_documents_digest_is_the_same_for_every_data_seed(bert_dir, tmp_path):
    """The digest of the documents examples are drawn from: asked for only, the same whatever the data seed
    (the examples themselves differ), another for one word changed, and for the built-in corpus its own text's,
    the same whatever the seed."""
    from transformers import AutoTokenizer

    from mhaaudit.sources import BuiltinText, bert_pair_examples, gpt_window_examples, text_source

    tok = AutoTokenizer.from_pretrained(bert_dir)
    (tmp_path / "a.txt").write_text(_docs())
    (tmp_path / "b.txt").write_text(_docs(changed=True))

    def built(name, seed, build=bert_pair_examples, **kw):
        return build(text_source(str(tmp_path / name)), tok, 16, 20, seed=seed, **kw)

    a0, a1 = built("a.txt", 0, corpus_digest=True), built("a.txt", 1, corpus_digest=True)
    assert a0.ids != a1.ids and a0.corpus_sha256 is not None and a0.corpus_sha256 == a1.corpus_sha256
    assert built("b.txt", 0, corpus_digest=True).corpus_sha256 not in (None, a0.corpus_sha256)
    assert built("a.txt", 0).corpus_sha256 is None  # not asked: nothing hashed
    g0 = built("a.txt", 0, gpt_window_examples, corpus_digest=True)
    assert g0.corpus_sha256 == built("a.txt", 3, gpt_window_examples, corpus_digest=True).corpus_sha256
    b0, b1 = BuiltinText(seed=0), BuiltinText(seed=1)
    assert b0.whole_sha256() == b1.whole_sha256() and len(b0.whole_sha256()) == 64
    assert b0.corpus is b1.corpus and vars(b0.corpus)["sha256"] == b0.whole_sha256()  # hashed once per corpus
    assert text_source(str(tmp_path / "a.txt")).whole_sha256() is None


# A user's script run by torchrun: each rank makes the call itself, rank 1 with another --limit.
ASKED_DRIVER = """
import os, sys
from mhaaudit import audit
from mhaaudit.errors import MhaauditError

limit = 20 if os.environ["RANK"] == "0" else 24
try:
    audit(sys.argv[1], data=sys.argv[2], variants="embedding", seeds="0-1", limit=limit, samples=50, device="cpu")
except MhaauditError as exc:
    print(exc, flush=True)
    os._exit(2)
os._exit(0)
"""


def test_ranks_asked_other_runs_are_refused_before_any_work(vit_dir, image_dir, tmp_path):
    """The ranks of a user's script compare what each was asked before any work: another limit on rank 1
    makes both refuse, naming the option and both values, and no rank reads an example."""
    from test_distributed import launch

    driver = tmp_path / "asked.py"
    driver.write_text(ASKED_DRIVER)
    (r0, out0, err0), (r1, out1, err1) = launch([vit_dir, image_dir], driver=driver)
    said = "rank 1 of 2 was asked another run than rank 0: data.limit is 20 on rank 0, 24 on rank 1"
    assert (r0, r1) == (2, 2) and out0.strip() == said, out0 + err0
    assert out1.strip() in (said, f"rank 0 of 2 failed: {said}"), out1 + err1


def test_inputs_digest_is_that_of_the_examples_whatever_the_batches():
    """The digest of model inputs covers each example's bytes in order: batches of other sizes give the
    same digest, and one changed value another."""
    from mhaaudit import readings

    x = torch.arange(6 * 3 * 4, dtype=torch.float32).reshape(6, 3, 4)

    def digest(*batches):
        d = readings.InputsDigest()
        for b in batches:
            d.add({"pixel_values": b})
        return d.hexdigest()

    y = x.clone()
    y[5, 2, 3] += 1
    assert digest(x[:2], x[2:]) == digest(x[:4], x[4:5], x[5:]) == digest(x)
    assert digest(y) != digest(x) and digest(x[:5]) != digest(x)
    assert digest(x.double()) != digest(x)  # the dtype counts, not only the bytes


def test_digests_are_noted_only_while_recording_and_compared_label_by_label():
    from mhaaudit import readings

    readings.note("the model inputs of m read from d", "a" * 64)  # outside recording: nothing kept
    with readings.recording() as log:
        readings.note("the model inputs of m read from d", "a" * 64)
        readings.note("the weights of m (random weights, blocks up to 1) with weights seed 0", "b" * 64)
    assert not readings.recorded() and sorted(log) == [
        "the model inputs of m read from d",
        "the weights of m (random weights, blocks up to 1) with weights seed 0",
    ]
    same = {"the model inputs of m read from d": ["a" * 64]}
    other_seed = {"the weights of m (random weights, blocks up to 1) with weights seed 1": ["c" * 64]}
    assert readings.disagreement([log, {**same, **other_seed}]) is None  # labels not both noted: no comparison
    why = readings.disagreement([log, {"the model inputs of m read from d": ["d" * 64]}])
    assert why == (
        "rank 1 of 2 read other inputs than rank 0: the model inputs of m read from d differ (SHA-256 "
        "aaaaaaaaaaaa... on rank 0, dddddddddddd... on rank 1); every node must hold the same data and model files"
    )


def test_what_the_ranks_compare_of_a_request_leaves_out_the_device_bars_and_callbacks():
    from mhaaudit import readings
    from mhaaudit.request import DataRequest

    a = readings.asked_fields({"settings": Settings.resolve(device="cpu", progress=True), "on_note": print})
    b = readings.asked_fields({"settings": Settings.resolve(device="cpu", samples=7), "on_note": None})
    assert "settings.device" not in a and "settings.progress" not in a and "on_note" not in a and "on_note" not in b
    assert readings.asked_difference([a, a]) is None
    assert readings.asked_difference([a, b]) == (
        "rank 1 of 2 was asked another run than rank 0: settings.samples is 5000 on rank 0, 7 on rank 1"
    )
    long = readings.asked_fields({"data": DataRequest(data="x" * 100)})
    said = readings.asked_difference([long, readings.asked_fields({"data": DataRequest(data="y")})])
    assert said is not None and len(said) < 200 and said.endswith('"y" on rank 1')


def test_trained_note_only_for_trained_columns_that_ran():
    from mhaaudit.seeds.spread import _trained_notes, is_trained

    plan = plan_seeds("0-1")
    ran = [{"variant": "trained", "verdict": "holds"}, {"variant": "random", "verdict": "holds"}]
    (note,) = _trained_notes(plan, ran, is_trained)
    assert "trained weights have no weights seed" in note and "trained" in note
    assert _trained_notes(plan, [{"variant": "trained", "verdict": "unavailable"}], is_trained) == []
    assert _trained_notes(plan, [{"column": "trained", "status": "unavailable"}], is_trained) == []


# --------------------------------------------------------------------------- the library's request objects


def test_estimate_kruskal_rank_takes_seeds_for_a_capture(vit_dir):
    from mhaaudit.estimation import estimate_kruskal_rank
    from mhaaudit.seeds import SeedsResult

    res = estimate_kruskal_rank(
        model=str(vit_dir), limit=40, batch_size=8, samples=60, device="cpu", seeds="0-1", vary="weights", data_seed=3
    )
    assert isinstance(res, SeedsResult)
    back = SeedsResult.from_json(printed(res))
    assert back == res and str(back) == str(res) and back.meta() == res.meta()
    per = [r for r in res.records() if r["aggregate"] == "seed"]
    assert {(r["seed"], r["weights_seed"], r["data_seed"]) for r in per} == {(0, 0, 3), (1, 1, 3)}
    assert any(r["aggregate"] == "summary" and r["check"] == "assumption_1" for r in res.records())


def test_estimate_kruskal_rank_refuses_seeds_with_a_file(tmp_path):
    from mhaaudit.estimation import estimate_kruskal_rank

    path = tmp_path / "x.npy"
    np.save(path, np.random.default_rng(0).standard_normal((12, 6)).astype(np.float32))
    for kw in (dict(seeds="0-1"), dict(weights_seed=2), dict(vary="data")):
        with pytest.raises(InputError, match="no effect when features"):
            estimate_kruskal_rank(path, k=3, samples=20, device="cpu", **kw)


def test_seeds_beside_request_objects(vit_dir):
    from mhaaudit.request import DataRequest, ModelRequest

    settings = Settings.resolve(device="cpu", samples=60, data_seed=5)
    res = audit(
        ModelRequest(str(vit_dir)),
        data=DataRequest(limit=40, batch_size=8),
        settings=settings,
        variants=["random"],
        seeds="0-1",
        vary="weights",
    )
    per = [r for r in res.records() if r["aggregate"] == "seed"]
    assert {(r["seed"], r["data_seed"]) for r in per} == {(0, 5), (1, 5)}  # the settings' data seed is held
    with pytest.raises(InputError, match="weights_seed"):  # a keyword beside the settings that says otherwise
        audit(
            ModelRequest(str(vit_dir)),
            data=DataRequest(limit=40, batch_size=8),
            settings=settings,
            variants=["random"],
            weights_seed=2,
        )


def _whole_set_rec(seed: int, T: int) -> dict:
    """A Kruskal test's record at k = 17 on T vectors: a test of one set where T = 17."""
    whole = T == 17
    return {
        "model": "vit",
        "variant": "random",
        "check": "assumption_1",
        "k": 17,
        "T": T,
        "fraction": 1.0,
        "verdict": "holds",
        "exact_status": "holds" if whole else "undecided",
        "scope": "whole-set" if whole else "subsets",
        "seed": seed,
    }


def _holding_cells(result) -> list[str]:
    """The cells of the column "seeds holding" of a several-seed report's table."""
    (table,) = [r for r in result.renderables() if isinstance(r, Table)]
    (column,) = [c for c in table.columns if str(c.header).startswith("seeds holding")]
    return [str(c) for c in column.cells]


def test_the_seeds_table_marks_a_test_of_one_set_as_one_run_s_table_does():
    """A test whose k reaches T is one set, not a sample of k-subsets: a run with --seed marks it "whole set" and
    says it does not answer the paper's question. Over seeds the table marks it the same way, naming the seeds
    where only some were (T may differ between seeds)."""
    layout = Layout("kruskal", lambda recs: recs, ("model", "variant", "check", "k"))
    every = spread(layout, plan_seeds("0-2"), [[_whole_set_rec(s, 17)] for s in range(3)])
    assert _holding_cells(every) == ["3 of 3 [yellow](whole set)[/yellow]"]
    assert "does not answer the paper's question" in " ".join(str(every).split())
    some = spread(layout, plan_seeds("0-2"), [[_whole_set_rec(s, 17 if s == 1 else 40)] for s in range(3)])
    assert _holding_cells(some) == ["3 of 3 [yellow](whole set in seed 1)[/yellow]"]
    none = spread(layout, plan_seeds("0-2"), [[_whole_set_rec(s, 40)] for s in range(3)])
    assert _holding_cells(none) == ["3 of 3"] and "whole set" not in str(none)


def test_one_run_s_result_class_refuses_several_seeds_and_says_which_reads_them(tmp_path):
    """``kruskal --seeds 0-2 --format json`` read with ``KruskalResult.from_json`` listed every field it lacked
    (inputs, tests, sweep, ...); it names the several-seed result instead, and the other way round."""
    from mhaaudit import KruskalResult, estimate_kruskal_rank

    layout = Layout("kruskal", lambda recs: recs, ("model", "variant", "check", "k"))
    several = spread(
        layout, plan_seeds("0-2"), [[_whole_set_rec(s, 40)] for s in range(3)], meta={"command": "kruskal"}
    )
    doc = {"meta": several.meta(), "records": several.records()}
    assert SeedsResult.from_json(doc) == several
    with pytest.raises(
        InputError,
        match=r"a run with seeds, which mhaaudit.seeds.SeedsResult reads, not of one run \(KruskalResult\)",
    ):
        KruskalResult.from_json(doc)
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((12, 4)))
    one = estimate_kruskal_rank(tmp_path / "x.npy", k=[2], samples=20)
    assert KruskalResult.from_json({"meta": one.meta()}) == one
    with pytest.raises(InputError, match=r"a run without seeds, not of several seeds \(SeedsResult\)"):
        SeedsResult.from_json({"meta": one.meta()})


def test_a_seed_without_a_fraction_is_left_out_of_the_spread_and_said():
    """A test no draw of which could be decided is "unavailable", its record's fraction 0.0 only a placeholder
    (0 of 0): the summary left it in (median 1, range 0 to 1, as if a seed had measured 0), and one run's table
    printed 0.0000. The spread is over the seeds that gave a value, and the table says how many did."""
    recs = [_recs(0, 1.0, "holds"), _recs(1, 0.0, "unavailable"), _recs(2, 1.0, "holds")]
    per = [(SeedRun(s), r) for s, r in enumerate(recs)]
    (s,) = summary_records(per, key=("variant", "check", "k"), value="fraction")
    assert s.values == (1.0, 1.0) and (s.median, s.low, s.high) == (1.0, 1.0, 1.0) and s.runs == 3
    assert s.holding == Holding(holding=2, decided=2)
    assert s.spread == "median 1, range 1 to 1 over 2 seeds of 3 (the others gave no value)"
    assert "one of 3 seeds gave a value" in spread_phrase([0.5], 3) and "single run" not in spread_phrase([0.5], 3)
    layout = Layout("kruskal", lambda r: r, ("variant", "check", "k"))
    result = spread(layout, plan_seeds("0-2"), recs)
    (table,) = [r for r in result.renderables() if isinstance(r, Table)]
    (column,) = [c for c in table.columns if str(c.header).startswith("fraction")]
    assert [str(c) for c in column.cells] == ["1 (2 of 3 seeds gave a value)"]


def test_an_exact_status_proven_both_ways_says_which_seed_proved_what():
    """Seed 1's data fail a test (a witness) that seed 2's data hold (a certified floor): the table said "mixed
    (proven in seeds 1, 2)", hiding which seed proved what; it names them."""
    recs = [_recs(0, 0.99, "holds"), _recs(1, 0.5, "fails", "fails"), _recs(2, 1.0, "holds", "holds")]
    result = spread(Layout("kruskal", lambda r: r, ("variant", "check", "k")), plan_seeds("0-2"), recs)
    assert result.summaries[0].exact == ExactOverSeeds("mixed", (1, 2))
    (table,) = [r for r in result.renderables() if isinstance(r, Table)]
    (column,) = [c for c in table.columns if str(c.header) == "exact status"]
    assert [str(c) for c in column.cells] == ["mixed: fails in seed 1; holds in seed 2"]


def _seed_run(seed: int, exact: int | None, rank: int | None) -> dict:
    """One seed's records, as :func:`spread` reads them from a run: two columns' Kruskal-rank estimates
    (``kruskal --model --sweep``: the only records) and two columns' ranks of Z (``capacity``; the second's
    ``rank``, None when unavailable)."""
    estimates = [
        {"check": "sweep_estimate", "model": "vit", "variant": v, "estimate": 4 + seed + i, "raw_estimate": 4 + seed}
        | {"exact_kruskal_rank": exact, "floor": 1, "ceiling": 9}
        for i, v in enumerate(("random", "trained"))
    ]
    ranks = [
        {"model": "vit", "variant": v, "layer": 1, "heads": 2, "rank": 10 + seed if v == "random" else rank}
        for v in ("random", "trained")
    ]
    return {"estimates": estimates, "ranks": ranks}


def test_several_seed_files_of_two_runs_have_one_schema(tmp_path):
    """The columns of several seeds were typed from their values: median, low and high int64 in one run's file
    (integer values, an odd number of seeds) and float64 (or null where no seed gave a value) in another's,
    exact_kruskal_rank a null column where no seed proved it. Files of two runs did not concatenate; their
    columns have the types columns.json gives them, and each file still reads back as the result written."""
    import pyarrow as pa

    from mhaaudit.io import write_parquet
    from mhaaudit.seeds.records import CELL_FIELDS
    from mhaaudit.tables import COLUMNS, SEEDS_COLUMNS

    kruskal = Layout(
        "kruskal",
        lambda r: [],
        ("model", "variant", "check", "k"),
        estimates=lambda r: r["estimates"],
        estimate_key=("model", "variant", "check"),
    )
    capacity = Layout("capacity", lambda r: r["ranks"], ("model", "variant", "layer", "heads"), value="rank")
    for layout in (kruskal, capacity):
        meta = {"command": layout.command}
        ints = spread(layout, plan_seeds("0-2"), [_seed_run(s, None, 3) for s in range(3)], meta=meta)
        floats = spread(layout, plan_seeds("0-1"), [_seed_run(s, 7, None) for s in range(2)], meta=meta)
        assert isinstance(ints.summaries[0].median, int) and isinstance(floats.summaries[0].median, float)
        schemas = []
        for name, result in (("ints", ints), ("floats", floats)):
            path = tmp_path / f"{layout.command}-{name}.parquet"
            write_parquet(result.records(), path, result.meta())
            schemas.append(pq.read_schema(path).remove_metadata())
            assert SeedsResult.from_parquet(path) == result
        assert schemas[0] == schemas[1]
        types = {f.name: f.type for f in schemas[0]}
        assert set(types) <= {c.name for c in (*COLUMNS[layout.command], *SEEDS_COLUMNS)} | set(CELL_FIELDS)
        assert types["median"] == types["low"] == types["high"] == pa.float64()
        assert types["values"] == pa.list_(pa.float64()) and types["weights_seed"] == pa.int64()
        both = pa.concat_tables([pq.read_table(tmp_path / f"{layout.command}-{n}.parquet") for n in ("ints", "floats")])
        assert both.num_rows == len(ints.records()) + len(floats.records())
    assert floats.summaries[1].median is None  # capacity's second column: no seed gave a rank
    assert types["rank"] == pa.int64()
    kruskal_types = {f.name: f.type for f in pq.read_schema(tmp_path / "kruskal-ints.parquet")}
    assert kruskal_types["exact_kruskal_rank"] == pa.int64()
