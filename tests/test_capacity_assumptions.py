"""What the capacity bound rests on: Assumption 1 itself, not the paper's estimate of it."""

from __future__ import annotations

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
