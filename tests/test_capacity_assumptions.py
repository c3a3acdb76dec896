"""What the capacity bound rests on: Assumption 1 itself, not the paper's estimate of it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mhaaudit.capacity.assumptions import a1_status, assumptions_from_file
from mhaaudit.theory import theorem1_bound


@pytest.mark.parametrize(
    "verdict, exact, expected",
    [
        ("holds", "fails", "fails"),  # a witness beside a holding estimate: the assumption fails, proven
        ("holds", "undecided", "holds"),  # nothing proven: the estimate, as the paper uses it
        ("fails", "undecided", "fails"),
        ("fails", "fails", "fails"),
        ("holds", "holds", "holds"),
        ("unavailable", "undecided", None),
        (None, None, None),  # a results file written before the exact status existed: its verdict
    ],
)
def test_the_exact_status_decides_where_it_is_decided(verdict, exact, expected):
    assert a1_status(verdict, exact) == expected
    assert a1_status("holds", None) == "holds"


def test_a_proven_failure_read_from_a_results_file_moves_theorem_1_to_remark_1(tmp_path):
    from mhaaudit.io import METADATA_KEY

    rows = [
        {
            "variant": "random",
            "check": "assumption_1",
            "verdict": "holds",
            "exact_status": "fails",
            "reason": "1999/2000 draws independent, but a dependent 3-subset was found",
            "fraction": 0.9995,
            "sampled": True,
        },
        {
            "variant": "random",
            "check": "assumption_2",
            "verdict": "holds",
            "exact_status": "holds",
            "reason": "all 40 context matrices have rank n",
            "fraction": 1.0,
            "sampled": False,
        },
    ]
    meta = {"command": "check", "columns": {"random": {"weights": "random", "layer": 1, "status": "ok"}}}
    import json

    table = pa.Table.from_pylist(rows).replace_schema_metadata({METADATA_KEY: json.dumps(meta)})
    pq.write_table(table, tmp_path / "r.parquet")
    got, column, _ = assumptions_from_file(tmp_path / "r.parquet", init="random", layer=1)
    assert column == "random" and got.a1 == "fails" and got.a2 == "holds"
    assert "exact status is fails" in got.a1_reason
    bound = theorem1_bound(heads=4, head_dim=8, n=6, d=16, a1_holds=got.holds(got.a1), a2_holds=got.holds(got.a2))
    assert bound.which != "theorem-1"  # the theorem needs A1 to hold; without an estimate k < n it does not apply


def test_every_field_of_the_assumptions_has_one_json_name():
    """``to_dict`` writes each field once, under its JSON name, and nothing else."""
    from dataclasses import fields

    from mhaaudit.capacity.assumptions import JSON_NAMES, Assumptions

    assert set(JSON_NAMES) == {f.name for f in fields(Assumptions)}
    a = Assumptions(a1="holds", a2="fails", a1_reason="r1", a2_reason="r2", a1_fraction=0.5, kruskal_estimate=7)
    assert a.to_dict() == {
        "assumption_1": "holds",
        "assumption_1_reason": "r1",
        "assumption_1_fraction": 0.5,
        "assumption_1_proven": None,
        "assumption_2": "fails",
        "assumption_2_reason": "r2",
        "kruskal_estimate": 7,
        "kruskal_estimate_note": "",
        "source": "",
    }


def test_a_results_file_of_several_seeds_is_refused_as_such(tmp_path):
    """A file of check --seeds (per-seed rows and summaries, no verdict in a summary) was refused as "malformed
    (the assumption_1 row's verdict is None)"; it is a file of several seeds, and the refusal says so."""
    import json

    from mhaaudit.errors import InputError
    from mhaaudit.io import METADATA_KEY

    rows = [
        {"aggregate": "seed", "seed": 0, "variant": "random", "check": "assumption_1", "verdict": "holds"},
        {"aggregate": "summary", "seed": None, "variant": "random", "check": "assumption_1", "verdict": None},
    ]
    meta = {"command": "check", "seed_plan": {"seeds": [0, 1]}, "columns": {"random": {"weights": "random"}}}
    table = pa.Table.from_pylist(rows).replace_schema_metadata({METADATA_KEY: json.dumps(meta)})
    pq.write_table(table, tmp_path / "seeds.parquet")
    with pytest.raises(
        InputError, match=r"holds the records of several seeds \(audit\(\.\.\., seeds=\.\.\.\)\)"
    ) as got:
        assumptions_from_file(tmp_path / "seeds.parquet", init="random", layer=1)
    assert "malformed" not in str(got.value)


@pytest.mark.parametrize(
    "column, match",
    [
        (
            {"sweep": {"estimate": 10**30}},
            r"Kruskal-rank estimate is 1000000000000000000000000000000, not a whole number ",
        ),
        ({"sweep": {"estimate": 1e300}}, r"Kruskal-rank estimate is 1e\+300, not a whole number from 0 to 16"),
        ({"sweep": {"estimate": "7"}}, r"Kruskal-rank estimate is '7', not a whole number"),
        ({"sweep": {"estimate": True}}, r"Kruskal-rank estimate is True, not a whole number"),
        ({"layer": 1.7}, r"the layer of column 'random' is 1.7, not a whole number"),
        ({"layer": "1"}, r"the layer of column 'random' is '1', not a whole number"),
    ],
)
def test_an_estimate_or_layer_that_no_check_writes_is_refused(tmp_path, column, match):
    """A Kruskal-rank estimate is a whole number of at most d (here 16), and a layer a whole number: 10^30, 1e300,
    "7" or true were read as estimates (int() of each), 1.7 or "1" as layer 1, and the capacity run went on with
    them (exit 0)."""
    import json

    from mhaaudit.errors import InputError
    from mhaaudit.io import METADATA_KEY

    rows = [
        {"variant": "random", "check": "assumption_1", "verdict": "fails", "exact_status": None, "fraction": 0.5},
        {"variant": "random", "check": "assumption_2", "verdict": "holds", "exact_status": None, "fraction": 1.0},
    ]
    meta = {"command": "check", "columns": {"random": {"weights": "random", "layer": 1, "status": "ok", **column}}}
    table = pa.Table.from_pylist(rows).replace_schema_metadata({METADATA_KEY: json.dumps(meta)})
    pq.write_table(table, tmp_path / "r.parquet")
    with pytest.raises(InputError, match="metadata or rows are malformed .*" + match):
        assumptions_from_file(tmp_path / "r.parquet", init="random", layer=1, n=6, d=16)
    meta["columns"]["random"].update(layer=1, sweep={"estimate": 5})  # a whole number of at most d: read
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(meta)})
    pq.write_table(table, tmp_path / "r.parquet")
    got, chosen, _ = assumptions_from_file(tmp_path / "r.parquet", init="random", layer=1, n=6, d=16)
    assert chosen == "random" and got.kruskal_estimate == 5


@pytest.mark.parametrize(
    "change, match",
    [
        (
            {"model_info": {"n": "6", "d": 16}},
            r"the model's n is '6', not a whole number",
        ),  # said "n = 6, but ... n = 6"
        ({"threshold": -1}, r"its threshold is -1, not a fraction in \(0, 1\]"),  # every sweep row's k reached it
        ({"limit": 40.5}, r"its limit is 40.5, not a whole number"),  # int() read it as --limit 40
    ],
)
def test_a_number_of_the_file_that_no_check_writes_is_refused(tmp_path, change, match):
    import json

    from mhaaudit.capacity.assumptions import check_same_examples, read_check_results
    from mhaaudit.errors import InputError
    from mhaaudit.io import METADATA_KEY

    rows = [
        {"variant": "random", "check": "assumption_1", "verdict": "fails", "exact_status": None, "k": None},
        {"variant": "random", "check": "assumption_2", "verdict": "holds", "exact_status": None, "k": None},
        {"variant": "random", "check": "sweep", "verdict": None, "exact_status": None, "k": 5, "fraction": 0.2},
    ]
    meta = {"command": "check", "threshold": 0.99, "columns": {"random": {"weights": "random", "layer": 1}}, **change}
    table = pa.Table.from_pylist(rows).replace_schema_metadata({METADATA_KEY: json.dumps(meta)})
    pq.write_table(table, tmp_path / "r.parquet")
    with pytest.raises(InputError, match="metadata or rows are malformed .*" + match):
        assumptions_from_file(tmp_path / "r.parquet", init="random", layer=1, n=6, d=16)
        check_same_examples(tmp_path / "r.parquet", read_check_results(tmp_path / "r.parquet"), limit=40)


@pytest.mark.parametrize("fraction", [float("inf"), float("nan"), -3.0, 1.5])
def test_a_satisfied_fraction_outside_0_to_1_is_refused_in_a_file_of_any_version(tmp_path, fraction):
    """An A1 row's satisfied fraction no run writes (infinite, NaN, negative, above 1) was read as it stood where
    the row held no exact basis (a file of an earlier version is not held to its rows): the bound said
    "holds (satisfied fraction inf)"; it is refused."""
    import json

    from mhaaudit.errors import InputError
    from mhaaudit.io import METADATA_KEY

    rows = [
        {"variant": "random", "check": "assumption_1", "verdict": "holds", "exact_status": None, "k": 6},
        {"variant": "random", "check": "assumption_2", "verdict": "holds", "exact_status": None, "k": None},
    ]
    rows[0] |= {"fraction": fraction, "sampled": True, "exact_basis": None}
    meta = {"command": "check", "version": "0.0.1", "columns": {"random": {"weights": "random", "layer": 1}}}
    table = pa.Table.from_pylist(rows).replace_schema_metadata({METADATA_KEY: json.dumps(meta)})
    pq.write_table(table, tmp_path / "r.parquet")
    with pytest.raises(InputError, match=r"the assumption_1 row's fraction is .*, not one in \[0, 1\]"):
        assumptions_from_file(tmp_path / "r.parquet", init="random", layer=1, n=6, d=16)


V0 = Path(__file__).resolve().parents[1] / "fixtures" / "results" / "check-v0.parquet"  # rows 6, 7: random's A1, A2


def _edited(tmp_path, edit, schema=True) -> Path:
    """check-v0.parquet with its rows edited by ``edit`` (rows counted from 1), under its own metadata."""
    table = pq.read_table(V0)
    rows = edit(table.to_pylist())
    out = tmp_path / "edited.parquet"
    edited = pa.Table.from_pylist(rows, schema=table.schema) if schema else pa.Table.from_pylist(rows)
    pq.write_table(edited.replace_schema_metadata(table.schema.metadata), out)
    return out


def _set(i: int, **values):
    return lambda rows: [{**r, **values} if n == i else r for n, r in enumerate(rows, start=1)]


def _again(i: int, **values):
    return lambda rows: [*rows, {**rows[i - 1], **values}]


@pytest.mark.parametrize(
    "edit, schema, says",
    [
        (_set(6, variant=None), True, "row 6's variant is null, not a name; every row of a results file of "),
        (_set(6, check=None), True, "row 6's check is null, not a name"),
        (_set(7, variant=""), True, "row 7's variant is '' (str), not a name"),
        (lambda rows: [{**r, "variant": 1} for r in rows], False, "row 1's variant is 1 (int), not a name"),
        (_set(6, check="assumption_9"), True, "row 6's check is 'assumption_9' (str), not one that a results file"),
        (_set(13, k=None), True, "row 13, a sweep row of column 'embedding', has k null, not a whole number"),
        (_set(13, k=0), True, "row 13, a sweep row of column 'embedding', has k 0 (int), not a whole number"),
        (
            lambda rows: [{**r, "checkpoint": 3} for r in rows],
            False,
            "row 1's checkpoint is 3 (int), not a name",
        ),
        (
            _again(6, verdict="fails", reason="edited"),
            True,
            "rows 6 and 73 are both the assumption_1 row of column 'random'; a results file of ",
        ),
        (_again(13, fraction=0.5), True, "rows 13 and 73 are both the sweep row of column 'embedding' at k = 5;"),
        (
            lambda rows: [{**r, "checkpoint": "ckpt-1"} for r in rows] + [{**rows[6], "checkpoint": "ckpt-1"}],
            False,
            "rows 7 and 73 are both the assumption_2 row of column 'random' of checkpoint 'ckpt-1';",
        ),
        (
            lambda rows: [*rows, *({**rows[5], "variant": "v" * 10_000} for _ in range(2))],
            True,
            "rows 73 and 74 are both the assumption_1 row of column '" + "v" * 56 + "...; a results file",
        ),
    ],
    ids=[
        "null-variant",
        "null-check",
        "empty-variant",
        "int-variant",
        "unknown-check",
        "sweep-null-k",
        "sweep-k-0",
        "int-checkpoint",
        "a1-twice",
        "sweep-k-twice",
        "a2-twice-in-a-checkpoint",
        "a-long-name-twice",
    ],
)
def test_a_row_that_no_check_writes_is_refused_naming_it(tmp_path, edit, schema, says):
    """A row with no column or check was read as no verdict (a bound of another kind, exit 0), and a key held twice
    as its last row: the file is refused, naming it and the row (both rows, and their key, for a key held twice)."""
    from mhaaudit.capacity.assumptions import read_check_results
    from mhaaudit.errors import InputError

    path = _edited(tmp_path, edit, schema)
    with pytest.raises(InputError) as got:
        read_check_results(path)
    assert str(got.value).startswith(f"from_path {path}: ") and says in str(got.value)
    assert len(str(got.value)) < 300 + len(str(path)), "a row's name is shown clipped"


def test_rows_of_one_key_at_other_k_are_read(tmp_path):
    """The key is the column, the check and a sweep row's k: sweep rows that differ in k are read."""
    from mhaaudit.capacity.assumptions import read_check_results

    meta, rows = read_check_results(V0)
    assert len(rows) == 72 and meta["command"] == "check"  # 32 sweep rows a column, one k each


def test_rows_of_several_checkpoints_are_refused_as_a_series(tmp_path):
    """Rows that name checkpoints are a series' (its metadata lost, or a file edited by hand): they were read, and
    each column's verdicts taken from its last checkpoint's rows. Without the series in its metadata, no checkpoint's
    audit can be read back: refused."""
    from mhaaudit.capacity.assumptions import read_check_results
    from mhaaudit.errors import InputError

    def two_checkpoints(rows):
        return [{**r, "checkpoint": c} for c in ("ckpt-1", "ckpt-2") for r in rows]

    path = _edited(tmp_path, two_checkpoints, schema=False)
    with pytest.raises(InputError, match=r"its rows name checkpoints of a series \(audit_series\(\.\.\.\)\), but its"):
        read_check_results(path)


def _with_meta(tmp_path, meta: dict) -> Path:
    """check-v0.parquet's rows under ``meta`` (its own metadata, changed)."""
    import json

    from mhaaudit.io import METADATA_KEY, read_parquet_metadata

    out = tmp_path / "meta.parquet"
    table = pq.read_table(V0)
    whole = {**read_parquet_metadata(V0), **meta}
    pq.write_table(
        table.replace_schema_metadata({METADATA_KEY: json.dumps({k: v for k, v in whole.items() if v is not None})}),
        out,
    )
    return out


@pytest.mark.parametrize(
    "meta, says",
    [
        (
            {"series": {"checkpoints": []}, "columns": None},
            "it holds a series of checkpoints (none audited yet), the verdicts of each: give weights CHECKPOINT or",
        ),
        (
            {"series": {"checkpoints": []}, "seed_plan": {"seeds": [0, 1]}, "columns": None},
            "it holds a series of checkpoints audited with several seeds (audit(..., seeds=...))",
        ),
        ({"columns": None}, "its 'mhaaudit' parquet metadata names no columns, which every results file of"),
        ({"columns": {}}, "its 'mhaaudit' parquet metadata names no columns"),
        ({"command": "capacity"}, "it holds the results of 'mhaaudit capacity' (its parquet metadata says so)"),
        ({"command": "memorize"}, "it holds the results of 'mhaaudit memorize'"),
        ({"command": "reproduce", "target": "figure1"}, "it holds the results of 'mhaaudit reproduce figure1'"),
        ({"command": ["check"]}, "its 'mhaaudit' parquet metadata is malformed (its command is ['check'] (list)"),
    ],
    ids=["series", "series-of-seeds", "no-columns", "empty-columns", "capacity", "memorize", "reproduce", "list"],
)
def test_a_file_that_is_not_one_check_run_is_refused_saying_what_it_is(tmp_path, meta, says):
    """A file without its column list (a series' file has none) was read as a file of no columns: each column's
    bound was "not applicable ... it has: none" (exit 0); one of another command had a note at best."""
    from mhaaudit.capacity.assumptions import read_check_results
    from mhaaudit.errors import InputError

    path = _with_meta(tmp_path, meta)
    with pytest.raises(InputError) as got:
        read_check_results(path)
    assert str(got.value).startswith(f"from_path {path}: ") and says in str(got.value)


@pytest.mark.parametrize(
    "series, checkpoint, trained, says",
    [
        ({"checkpoints": [{"name": "a", "path": None}]}, "a", True, "its series lists no columns of checkpoint a (a"),
        ({"checkpoints": [{"name": "a", "path": None}]}, None, False, "its series lists no columns of its reference"),
        ({"checkpoints": "a"}, "a", True, "its 'mhaaudit' parquet metadata lists no checkpoints of its series"),
        (
            {"checkpoints": [{"name": "a", "columns": {}}], "reference_columns": {}},
            "b",
            True,
            "no checkpoint of its series is named b or lies there (it holds: a)",
        ),
        (
            {"checkpoints": [{"name": "a", "columns": {}}], "reference_columns": {}, "complete": False},
            "b",
            True,
            "or lies there (it holds: a; it was interrupted, and lists only those audited before: run it again",
        ),
        (
            {"checkpoints": [{"name": "a", "columns": {}}], "reference_columns": [1]},
            "a",
            True,
            "its series lists no columns of its reference (a",
        ),
        (
            {"checkpoints": [{"name": 5, "path": "/x/a", "columns": {}}], "reference_columns": {}},
            "/x/a",
            True,
            "its series lists a checkpoint whose name is 5 (int), not a name",
        ),
    ],
    ids=[
        "earlier-version",
        "earlier-version-reference",
        "malformed",
        "other-checkpoint",
        "interrupted",
        "malformed-reference",
        "name-no-text",
    ],
)
def test_a_series_read_for_a_checkpoint_it_cannot_give_is_refused(tmp_path, series, checkpoint, trained, says):
    """A series file is read for one checkpoint from the columns its metadata lists for it: a file that lists none
    (written before they were listed), a malformed list or a checkpoint not in it is refused in one line."""
    from mhaaudit.capacity.assumptions import read_check_results
    from mhaaudit.errors import InputError

    path = _with_meta(tmp_path, {"series": series, "columns": None})
    with pytest.raises(InputError) as got:
        read_check_results(path, checkpoint, trained=trained)
    assert str(got.value).startswith(f"from_path {path}: ") and says in str(got.value)


@pytest.mark.parametrize("check", ["assumption_1", "assumption_2"])
def test_a_column_without_its_a1_or_a2_row_is_refused(tmp_path, check):
    """check writes a row of each check for each column: a column without its A1 row was read as A1 not checked."""
    from mhaaudit.errors import InputError

    path = _edited(tmp_path, lambda rows: [r for r in rows if (r["variant"], r["check"]) != ("random", check)])
    with pytest.raises(InputError, match=f"malformed .*column 'random' has no {check} row"):
        assumptions_from_file(path, init="random", layer=1)
    assert assumptions_from_file(V0, init="random", layer=1)[1] == "random"


@pytest.mark.parametrize(
    "theirs, ours, noted",
    [
        ("hub google/vit-base-patch16-224", "hub google/vit-base-patch16-224 (local cache)", False),
        (
            "random init from the config of hub google/vit-base-patch16-224 (local cache)",
            "random init from the config of hub google/vit-base-patch16-224",
            False,
        ),
        ("local folder /a/vit", "local folder /b/vit", True),
        ("hub org/m at revision v1", "hub org/m at revision v1 (local cache)", False),
        ("hub org/m at revision v1 (local cache)", "hub org/m at revision v2 (local cache)", True),
        ("hub org/m (local cache)", "hub org/m at revision v1 (local cache)", True),
    ],
    ids=["trained-offline", "random-online", "moved-folder", "revision-offline", "other-revision", "revision-given"],
)
def test_the_hub_and_its_local_cache_are_one_source_of_weights(tmp_path, theirs, ours, noted):
    """A file checked online and read by capacity offline (or the other way round) holds the verdicts of the same
    weights: no note says they came from elsewhere; a model in another folder is still noted."""
    import json
    from types import SimpleNamespace

    from mhaaudit.io import METADATA_KEY

    rows = [
        {"variant": "random", "check": c, "verdict": "holds", "exact_status": "undecided", "reason": ""}
        for c in ("assumption_1", "assumption_2")
    ]
    col = {"weights": "random", "layer": 1, "status": "ok", "weights_source": theirs}
    meta = {"command": "check", "seed": 0, "columns": {"random": col}}
    table = pa.Table.from_pylist(rows).replace_schema_metadata({METADATA_KEY: json.dumps(meta)})
    pq.write_table(table, tmp_path / "r.parquet")
    model = SimpleNamespace(weights_source=ours)
    _, column, notes = assumptions_from_file(
        tmp_path / "r.parquet", init="random", layer=1, model=model, weights_seed=0
    )
    assert column == "random"
    said = [n for n in notes if "were audited on" in n]
    want = f"were audited on {theirs}; this run's random weights are {ours}, of the same shape"
    assert [n.endswith(want) for n in said] == ([True] if noted else [])
