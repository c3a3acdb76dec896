"""Tests for mhaaudit.memorize.resume: a results file (``out``) whose rows cannot be read back is refused in one
line naming the file, the row and the column, never trained again in silence; the one column an older layout of
the file lacks (``diverged``) is read from the final loss."""

from __future__ import annotations

import shutil

import pytest
from clitools import assert_one_error, run

from mhaaudit.errors import InputError
from mhaaudit.memorize import grid as grid_mod
from mhaaudit.memorize.grid import run_memorize_grid
from mhaaudit.memorize.resume import row_fault, row_to_run, run_to_row

TINY = dict(vary="heads", values="1,2", n=4, head_dim=8, sizes=[16], max_steps=8, saturation=True, device="cpu")
CLI = ["memorize", "--vary", "heads", "--values", "1,2", "--n", "4", "--head-dim", "8", "--sizes", "16"]
CLI += ["--max-steps", "8", "--saturation", "--device", "cpu"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A results file of two trained points (H = 1 and 2, saturation measured), trained once for the module."""
    out = tmp_path_factory.mktemp("trained") / "res.parquet"
    run_memorize_grid(**TINY, out=out)
    return out


def _edited(trained, tmp_path, edit):
    """A copy of the trained file with ``edit(table)`` written in its place; the copy's path."""
    import pyarrow.parquet as pq

    out = tmp_path / "res.parquet"
    shutil.copyfile(trained, out)
    pq.write_table(edit(pq.read_table(out)), out)
    return out


def _first_row(**values):
    """An edit setting ``values`` in the first row (H = 1), the columns' types kept."""
    import pyarrow as pa

    def edit(table):
        rows = table.to_pylist()
        rows[0] |= values
        return pa.Table.from_pylist(rows, schema=table.schema)

    return edit


def _refused(out, monkeypatch, says):
    """The grid refuses ``out`` in one line saying ``says`` (and naming the file), trains nothing, writes nothing."""
    before = out.read_bytes()
    monkeypatch.setattr(grid_mod, "train_group", lambda *a, **k: pytest.fail("trained a point of a refused file"))
    with pytest.raises(InputError, match="is not a results file as memorize writes it") as caught:
        run_memorize_grid(**TINY, out=out)
    message = str(caught.value)
    assert says in message and str(out) in message and "\n" not in message, message
    assert out.read_bytes() == before
    return message


def test_a_row_with_a_nan_learning_rate_is_refused_not_trained_again(trained, tmp_path, monkeypatch):
    """A row whose lr is NaN could not be read back: the point was trained again in silence and the row written over.
    It refuses the file, naming the row, its point and the column."""
    out = _edited(trained, tmp_path, _first_row(lr=float("nan")))
    message = _refused(out, monkeypatch, "its row 1 gives lr = nan, not a finite number")
    assert "(the point H = 1, n = 4, d_h = 8, T = 16)" in message


@pytest.mark.parametrize(
    "values, says",
    [
        (dict(seconds=None), "its row 1 gives seconds = null, where training writes a value"),
        (dict(task=None), "its row 1 gives task = null, where training writes a value"),
        (dict(heads=None), "its row 1 gives heads = null, where training writes a value"),
        (dict(config_key=None), "its row 1 gives config_key = null, where training writes a value"),
        (dict(sat_threshold=None), "its row 1 gives sat_threshold = null, where training writes a value (training "),
        (dict(diverged=None), "its row 1 gives diverged = null, where training writes a value"),
        (dict(tolerance=float("inf")), "its row 1 gives tolerance = inf, not a finite number"),
        (dict(stopped_early=None), "its row 1 gives stopped_early = null, where training writes a value"),
        (dict(lr=-1.0), "its row 1 gives a recipe no training runs (lr must be a positive number, got -1.0)"),
        (dict(task="ranking"), "its row 1 gives a recipe no training runs (unknown task 'ranking'"),
        (dict(classes=1), "its row 1 gives a recipe no training runs (classes must be at least 2, got 1)"),
    ],
)
def test_a_row_with_a_null_or_a_value_no_training_writes_is_refused(trained, tmp_path, monkeypatch, values, says):
    """A null where training writes a value, or a number no training writes in a column read before the point's
    plan is checked, made the point train again in silence (a null diverged was taken from the final loss)."""
    out = _edited(trained, tmp_path, _first_row(**values))
    _refused(out, monkeypatch, says)


def test_a_second_row_is_named_by_its_number(trained, tmp_path, monkeypatch):
    import pyarrow as pa

    def edit(table):
        rows = table.to_pylist()
        rows[1]["seconds"] = None
        return pa.Table.from_pylist(rows, schema=table.schema)

    out = _edited(trained, tmp_path, edit)
    _refused(out, monkeypatch, "its row 2 gives seconds = null, where training writes a value (the point H = 2,")


@pytest.mark.parametrize("column", ["seconds", "lr", "sat_mean"])
def test_a_file_without_a_column_every_layout_has_is_refused(trained, tmp_path, monkeypatch, column):
    """Every layout memorize has written has these columns: a file without one trained all its points again in
    silence, and was written over."""
    out = _edited(trained, tmp_path, lambda table: table.drop([column]))
    _refused(out, monkeypatch, f"its rows have no {column} column, which every layout of the file has; move it away")


def test_a_file_of_other_columns_is_refused_in_a_short_line(trained, tmp_path, monkeypatch):
    out = _edited(trained, tmp_path, lambda table: table.select(["config_key"]))
    message = _refused(out, monkeypatch, "its rows have no heads, n, head_dim or 26 other columns, which every layout")
    assert len(message) < 250 + len(str(out)), message


def test_a_file_written_before_diverged_was_recorded_is_read_back(trained, tmp_path, monkeypatch):
    """Files written before the diverged column have no such column: each row's is read from its final loss (the
    rule training records it by), the points are not trained again, and the file gains the column when it is next
    written. A null in the column, where it is, is refused."""
    import pyarrow.parquet as pq

    out = _edited(trained, tmp_path, lambda table: table.drop(["diverged"]))
    monkeypatch.setattr(grid_mod, "train_group", lambda *a, **k: pytest.fail("trained a stored point"))
    again = run_memorize_grid(**TINY, out=out)
    assert again.reused == 2 and [r.diverged for r in again.runs] == [False, False]
    monkeypatch.undo()
    bigger = run_memorize_grid(**{**TINY, "values": "1,2,3"}, out=out)
    assert [r.reused for r in bigger.runs] == [True, True, False]
    assert pq.read_table(out).column("diverged").to_pylist() == [False, False, False]
    _refused(_edited(trained, tmp_path, _first_row(diverged=None)), monkeypatch, "diverged = null")


def test_the_command_line_refuses_such_a_file_in_one_line(trained, tmp_path, capsys):
    out = _edited(trained, tmp_path, _first_row(lr=float("nan")))
    before = out.read_bytes()
    rc, stdout, err = run(capsys, *CLI, "--out", out)
    line = assert_one_error(rc, err, "its row 1 gives lr = nan, not a finite number")
    assert str(out) in line and line.endswith("move it away or pick another --out") and stdout == ""
    assert out.read_bytes() == before


def test_row_to_run_says_what_a_row_lacks(trained):
    """In Python, a row that cannot be read back is a ValueError naming the column, never a KeyError or TypeError."""
    import pyarrow.parquet as pq

    row = pq.read_table(trained).to_pylist()[0]
    assert row_fault(row) is None and row_to_run(row).reused
    written = run_to_row(row_to_run(row))  # (the file has every column of memorize's schema: the others null)
    assert written == {k: v for k, v in row.items() if k in written}
    assert all(row[k] is None for k in row.keys() - written)
    with pytest.raises(ValueError, match="the row gives no seconds column"):
        row_to_run({k: v for k, v in row.items() if k != "seconds"})
    with pytest.raises(ValueError, match="the row gives final_loss = null"):
        row_to_run(row | {"final_loss": None})
    with pytest.raises(ValueError, match="the row gives stopped_early = 1, not true or false"):
        row_to_run(row | {"stopped_early": 1})
    with pytest.raises(
        ValueError,
        match=r"sat_mean = 0.0 with sat_histogram null \(training writes all the saturation",
    ):
        row_to_run(row | {k: None for k in row if k.startswith("sat_") and k != "sat_mean"})
