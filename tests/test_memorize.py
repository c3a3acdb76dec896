"""Tests of the ``mhaaudit memorize`` command end to end (tiny, fast runs).

The library's modules have their own files: tests/test_memorize_{data,model,training,saturation,results,grid}.py.
"""

from __future__ import annotations

import inspect
import json

import pytest

from mhaaudit.memorize import run_memorize_grid

#: Parameters of run_memorize_grid that the command may not have an option for yet (issue #15).
LIBRARY_ONLY = {"request", "seeds", "memory_budget"}


def _main():
    from mhaaudit.cli.app import main

    return main


# ------------------------------------------------------------------ CLI end to end


def test_cli_table_end_to_end(capsys, tmp_path):
    rc = _main()(
        [
            "memorize",
            "--vary",
            "heads",
            "--values",
            "1,2,3",
            "--n",
            "4",
            "--head-dim",
            "8",
            "--sizes",
            "24",
            "--max-steps",
            "20",
            "--device",
            "cpu",
            "--saturation",
            "--plot",
            str(tmp_path / "fig.png"),
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    flat = " ".join(captured.out.split())  # a caption may wrap at the report's width
    assert "Memorisation" in flat and "H=2 n=4 d_h=8" in flat
    assert "Linear fit" in flat
    assert ">=2 sat." in flat and ">=2 heads saturated" in flat
    assert (tmp_path / "fig.png").stat().st_size > 1000


def test_cli_json_parses(capsys):
    rc = _main()(
        [
            "memorize",
            "--vary",
            "n",
            "--values",
            "2,3",
            "--heads",
            "2",
            "--head-dim",
            "8",
            "--sizes",
            "16,24",
            "--max-steps",
            "10",
            "--device",
            "cpu",
            "--format",
            "json",
            "--saturation",
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    data = json.loads(captured.out)
    assert data["vary"] == "n" and data["values"] == [2, 3] and data["sizes"] == [16, 24]
    assert len(data["runs"]) == 4
    r = data["runs"][0]
    assert {"heads", "n", "head_dim", "size", "memorized", "epochs_run", "final_loss", "seconds"} <= set(r)
    assert r["saturation"]["heads"] == 2 and sum(r["saturation"]["histogram"]) == r["size"]
    assert data["fits"] == []  # fits only when H varies
    assert captured.err == ""  # no progress bars with --format json


def test_cli_regression_task(capsys):
    rc = _main()(
        [
            "memorize",
            "--heads",
            "2",
            "--n",
            "3",
            "--head-dim",
            "4",
            "--sizes",
            "12",
            "--task",
            "regression",
            "--context",
            "per-example",
            "--max-steps",
            "5",
            "--device",
            "cpu",
            "--format",
            "json",
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    run = json.loads(captured.out)["runs"][0]
    assert run["task"] == "regression" and run["context"] == "per-example" and run["tolerance"] == 0.01


def test_library_takes_cli_argument_names():
    import click
    import typer.main

    from mhaaudit.cli.app import app

    cmd = typer.main.get_command(app)
    ctx = click.Context(cmd)
    sub = cmd.get_command(ctx, "memorize")
    cli_names = {p.name for p in sub.params} - {"fmt", "quiet"}
    lib_names = set(inspect.signature(run_memorize_grid).parameters) - {"progress"}
    assert cli_names <= lib_names
    assert lib_names - cli_names <= LIBRARY_ONLY


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "args",
    [
        ["--sizes", ""],
        [],
        ["--sizes", "0"],
        ["--sizes", "10,-5"],
        ["--heads", "0", "--sizes", "10"],
        ["--n", "0", "--sizes", "10"],
        ["--preset", "nope"],
        ["--vary", "depth", "--values", "1", "--sizes", "10"],
        ["--vary", "heads", "--values", "1,x", "--sizes", "10"],
        ["--vary", "heads", "--values", "1.5", "--sizes", "10"],
        ["--vary", "heads", "--values", "", "--sizes", "10"],
        ["--vary", "heads", "--sizes", "10"],
        ["--values", "1,2", "--sizes", "10"],
        ["--sizes", "10", "--task", "ranking"],
        ["--sizes", "10", "--context", "global"],
        ["--sizes", "10", "--epochs", "0"],
        ["--sizes", "10", "--device", "tpu"],
        ["--sizes", "10", "--out", "/nonexistent-folder/x.parquet"],
    ],
)
def test_bad_input_exit_2_one_line(args, capsys):
    rc = _main()(["memorize", *args, "--max-steps", "1"])
    err = capsys.readouterr().err
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
