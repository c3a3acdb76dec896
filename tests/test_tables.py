"""mhaaudit.tables: typed results tables that pyarrow, pandas, polars and duckdb read as data."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mhaaudit.io import stamp, write_parquet
from mhaaudit.tables import COLUMNS, arrow_type, records_table, schema_markdown, to_pandas

RECORDS = [
    {
        "check": "assumption_1",
        "k": 3,
        "T": 10,
        "samples": 10,
        "fraction": 1.0,
        "witness": [0, 4],
        "witness_singular_values": [2.0, 1e-17],
        "rank_histogram": {"3": 9, "2": 1},
        "sampled": True,
        "planned_samples": 10,
        "set_rank_ceiling": 3,
    },
    {
        "check": "assumption_2",
        "k": 3,
        "T": 10,
        "samples": 10,
        "fraction": 0.5,
        "witness": [],
        "witness_singular_values": [],
        "rank_histogram": {},
        "sampled": False,
        "planned_samples": None,
        "set_rank_ceiling": None,
        "min_margin": 0.25,
    },
    {"check": "sweep", "k": 1, "fraction": 1.0},
]


def test_records_table_empty():
    t = records_table([], {"x": 1})
    assert t.num_rows == 0 and json.loads(t.schema.metadata[b"mhaaudit"]) == {"x": 1}


def test_columns_are_typed_by_the_schema():
    t = records_table(RECORDS, {"command": "kruskal"})
    types = {f.name: f.type for f in t.schema}
    assert types["witness"] == pa.list_(pa.int64())
    assert types["witness_singular_values"] == pa.list_(pa.float64())
    assert types["rank_histogram"] == pa.map_(pa.int64(), pa.int64())
    assert (
        types["planned_samples"] == pa.int64() and types["set_rank_ceiling"] == pa.int64()
    )  # typed, though null in some rows
    assert types["sampled"] == pa.bool_() and types["min_margin"] == pa.float64()
    rows = t.to_pylist()
    assert rows[0]["rank_histogram"] == [(2, 1), (3, 9)] and rows[1]["rank_histogram"] == []
    assert rows[2]["witness"] is None and rows[2]["planned_samples"] is None


def test_nested_values_stored_as_json_text_are_read_back_as_data():
    """Rows read from a file written before the typed columns (JSON text) are written typed."""
    t = records_table(
        [{"witness": "[1, 2]", "rank_histogram": '{"3": 4}', "sat_histogram": "[5, 0]"}], {"command": "check"}
    )
    (row,) = t.to_pylist()
    assert {k: v for k, v in row.items() if v is not None} == {
        "witness": [1, 2], "rank_histogram": [(3, 4)], "sat_histogram": "[5, 0]"
    }  # fmt: skip
    m = records_table(
        [{"sat_histogram": "[5, 0]", "saturation": json.dumps({"heads": 2, "histogram": [1, 1]})}],
        {"command": "memorize"},
    )
    row = m.to_pylist()[0]
    assert row["sat_histogram"] == [5, 0] and row["saturation"]["histogram"] == [1, 1]


@pytest.mark.parametrize(
    "command, row, column",
    [
        ("kruskal", {"k": 12.5}, "k"),
        ("check", {"witness": [1, 2.5]}, "witness"),
        ("check", {"rank_histogram": {"3": 4.5}}, "rank_histogram"),
        ("memorize", {"sat_histogram": [5, 0.5]}, "sat_histogram"),
        ("memorize", {"saturation": {"heads": 2, "histogram": [1.5, 0.5]}}, "saturation.histogram"),
    ],
)
def test_a_whole_number_column_never_cuts_a_fraction(command, row, column):
    """pyarrow writes 12.5 into an int64 column as 12 and int() cuts it alike: a record that holds a fraction
    where whole numbers are kept is a fault of the code that made it, said, never written rounded."""
    with pytest.raises(ValueError, match=f"{column} column holds .*, which is no whole number"):
        records_table([row], {"command": command})
    whole = records_table([{"k": 12.0, "witness": [1.0, 2]}], {"command": "kruskal"}).to_pylist()[0]
    assert whole["k"] == 12 and whole["witness"] == [1, 2]  # a whole float is the number it writes


def test_unknown_columns_are_inferred_or_json():
    t = records_table([{"extra": 1.5, "odd": [1, "a"]}], {"command": "kruskal"})
    assert t.schema.field("extra").type == pa.float64()
    assert t.column("odd").to_pylist() == ['[1, "a"]']


def test_every_schema_type_exists():
    for cols in COLUMNS.values():
        for c in cols:
            arrow_type(c.type)
            assert c.meaning


def test_four_readers_read_the_same_file(tmp_path):
    """pyarrow, pandas, polars and duckdb read one results file as data: lists, maps, integers."""
    polars = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "r.parquet"
    write_parquet(RECORDS, path, stamp(command="kruskal", seed=0))

    t = pq.read_table(path)
    assert t.column("witness").to_pylist() == [[0, 4], [], None]

    import pandas as pd

    df = pd.read_parquet(path)
    assert str(df["k"].dtype) == "Int64" and str(df["planned_samples"].dtype) == "Int64"  # integers stay integers
    assert str(df["sampled"].dtype) == "boolean"
    assert df["planned_samples"].isna().tolist() == [False, True, True] and int(df["set_rank_ceiling"][0]) == 3
    assert list(df["witness"][0]) == [0, 4]
    assert to_pandas(t)["rank_histogram"][0] == {2: 1, 3: 9}

    pl = polars.read_parquet(path)
    assert pl["k"].dtype == polars.Int64 and pl["witness"].to_list() == [[0, 4], [], None]
    assert pl["planned_samples"].to_list() == [10, None, None]

    con = duckdb.connect()
    got = con.execute(
        f"SELECT k, witness, rank_histogram[3], planned_samples FROM '{path}' ORDER BY fraction DESC, k"
    ).fetchall()
    assert got[0][1] == [0, 4] or got[1][1] == [0, 4]
    assert dict((r[0], r[3]) for r in got if r[3] is not None) == {3: 10}
    types = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM '{path}')").fetchall())
    assert types["witness"] == "BIGINT[]" and types["rank_histogram"] == "MAP(BIGINT, BIGINT)"
    assert types["planned_samples"] == "BIGINT"


def test_the_columns_are_the_data_file_shipped_with_the_package():
    """``columns.json`` (package data) is the schema: each command's columns are its tables, in
    order, and memorize's are the fields a run writes (flat) and those of its results file."""
    import dataclasses
    from importlib import resources

    from mhaaudit.memorize.results import MemorizeRun, flat_names
    from mhaaudit.memorize.saturation import SaturationSummary
    from mhaaudit.tables import SATURATION_FIELDS, SEEDS_COLUMNS, Column

    data = json.loads(resources.files("mhaaudit").joinpath("columns.json").read_text(encoding="utf-8"))
    tables = {name: tuple(Column(**c) for c in cols) for name, cols in data.items()}
    assert COLUMNS == {
        "check": tables["series"] + tables["where"] + tables["test"] + tables["estimate"],
        "kruskal": tuple(c for c in tables["test"] if c.name != "min_margin"),  # no Assumption 2
        "capacity": tables["where"] + tables["capacity"],
        "memorize": tables["memorize"],
        "reproduce": tables["reproduce"],
    }
    assert SEEDS_COLUMNS == tables["estimate"] + tables["seeds"]
    for cols in (*COLUMNS.values(), SEEDS_COLUMNS, SATURATION_FIELDS):
        assert len({c.name for c in cols}) == len(cols)
    written = [c.name for c in COLUMNS["memorize"] if not c.meaning.startswith("output file only")]
    assert written == list(flat_names(MemorizeRun))
    assert [c.name for c in SATURATION_FIELDS] == [f.name for f in dataclasses.fields(SaturationSummary)]


def test_schema_markdown_names_every_column():
    text = schema_markdown()
    for cols in COLUMNS.values():
        for c in cols:
            assert f"`{c.name}`" in text
    assert "min_margin" in schema_markdown("check") and "min_margin" not in schema_markdown("kruskal")


def test_result_objects_give_their_table_and_their_report(vit_dir, image_dir, tmp_path):
    """AuditResult and CapacityResult: to_arrow() is the --out file's table; a notebook shows the CLI's report."""
    from mhaaudit.auditing import audit
    from mhaaudit.capacity import capacity_audit
    from mhaaudit.cli.app import main

    small = dict(data=str(image_dir), limit=40, samples=50, batch_size=16)
    for result, command, words in (
        (audit(str(vit_dir), variants=["embedding", "random"], sweep=True, **small), "check", "What the checks mean"),
        (capacity_audit(str(vit_dir), variants=["random"], heads="1-2", **small), "capacity", "The certificate"),
    ):
        t = result.to_arrow()
        assert json.loads(t.schema.metadata[b"mhaaudit"])["command"] == command
        assert t.num_rows == len(result.table_records()) > 0
        known = {c.name: arrow_type(c.type) for c in COLUMNS[command]}
        assert all(f.type == known[f.name] for f in t.schema if f.name in known)
        assert set(t.column_names) <= set(known)  # every column is documented
        df = result.to_pandas()
        assert len(df) == t.num_rows and str(df["T"].dtype) == "Int64"
        bundle = result._repr_mimebundle_()
        assert words in bundle["text/plain"] and "<pre" in bundle["text/html"] and words in result._repr_html_()
    # the same rows as the CLI writes with --out
    out = tmp_path / "c.parquet"
    assert (
        main(
            [
                "check",
                str(vit_dir),
                "--data",
                str(image_dir),
                "--limit",
                "40",
                "--samples",
                "50",
                "--batch-size",
                "16",
                "--variants",
                "embedding",
                "--variants",
                "random",
                "--sweep",
                "--out",
                str(out),
                "--format",
                "json",
            ]
        )
        == 0
    )
    written = pq.read_table(out)
    first = audit(str(vit_dir), variants=["embedding", "random"], sweep=True, **small).to_arrow()
    assert written.schema.remove_metadata() == first.schema.remove_metadata()
    assert written.to_pylist() == first.to_pylist()


def test_kruskal_results_give_their_table_and_their_report():
    """SubsetTest and Sweep: the rows kruskal --out writes for them, and the CLI's report in a notebook."""
    import torch

    from mhaaudit.kruskal import kruskal_sweep, subset_test

    X = torch.randn(30, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    X[7] = X[3] * 2.0  # a dependent pair: a witness
    test = subset_test(X, 3, samples=200, seed=1)
    sweep = kruskal_sweep(X, samples=100, seed=1)
    t = test.to_arrow()
    assert t.num_rows == 1 and t.schema.field("witness").type == pa.list_(pa.int64())
    assert t.to_pylist()[0]["k"] == 3 and json.loads(t.schema.metadata[b"mhaaudit"])["command"] == "kruskal"
    df = sweep.to_pandas()
    assert list(df["k"]) == list(range(1, 7)) and set(df["check"]) == {"sweep"} and str(df["k"].dtype) == "Int64"
    assert json.loads(sweep.to_arrow().schema.metadata[b"mhaaudit"])["sweep_summary"]["estimate"] == sweep.estimate
    assert "Kruskal-rank tests" in test._repr_mimebundle_()["text/plain"]
    assert "Kruskal-rank estimate" in sweep._repr_html_()


def test_memorize_grid_gives_its_table_and_its_report():
    from mhaaudit.memorize import run_memorize_grid

    grid = run_memorize_grid(
        heads=2, n=4, head_dim=8, sizes="12", max_steps=3, seeds="0-1", device="cpu", saturation=True
    )
    t = grid.to_arrow()
    assert t.num_rows == 2 and t.schema.field("saturation").type == arrow_type("saturation")
    assert json.loads(t.schema.metadata[b"mhaaudit"])["command"] == "memorize"
    assert {f.name for f in t.schema} <= {c.name for c in COLUMNS["memorize"]}
    df = grid.to_pandas()
    assert str(df["heads"].dtype) == "Int64" and list(df["seed"]) == [0, 1]
    text = grid._repr_mimebundle_()["text/plain"]
    assert "Memorisation" in text and "Over 2 seeds" in text
