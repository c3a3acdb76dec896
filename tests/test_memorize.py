"""Tests for mhaaudit.memorize and the ``mhaaudit memorize`` command (tiny, fast runs)."""

from __future__ import annotations

import inspect
import json

import pytest
import torch

from mhaaudit import memorize as mem
from mhaaudit.errors import InputError
from mhaaudit.memorize import (
    MemorizeModel,
    planned_schedule,
    run_memorize_grid,
    saturation_summary,
    sinusoidal_positions,
    train_memorize,
)

TINY = dict(n=4, head_dim=8, device="cpu")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _main():
    from mhaaudit.cli.app import main

    return main


# ------------------------------------------------------------------ CLI end to end


def test_cli_table_end_to_end(capsys, tmp_path):
    rc = _main()(
        ["memorize", "--vary", "heads", "--values", "1,2,3", "--n", "4", "--head-dim", "8", "--sizes", "24",
         "--max-steps", "20", "--device", "cpu", "--saturation", "--plot", str(tmp_path / "fig.png")]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "Memorisation" in captured.out and "H=2 n=4 d_h=8" in captured.out
    assert "Linear fit" in captured.out
    assert ">=2 heads saturated" in captured.out
    assert (tmp_path / "fig.png").stat().st_size > 1000


def test_cli_json_parses(capsys):
    rc = _main()(
        ["memorize", "--vary", "n", "--values", "2,3", "--heads", "2", "--head-dim", "8", "--sizes", "16,24",
         "--max-steps", "10", "--device", "cpu", "--format", "json", "--saturation"]
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
        ["memorize", "--heads", "2", "--n", "3", "--head-dim", "4", "--sizes", "12", "--task", "regression",
         "--context", "per-example", "--max-steps", "5", "--device", "cpu", "--format", "json"]
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
    cli_names = {p.name for p in sub.params} - {"format"}
    lib_names = set(inspect.signature(run_memorize_grid).parameters) - {"progress"}
    assert cli_names == lib_names


# ------------------------------------------------------------------ library


def test_determinism_for_a_seed():
    a = train_memorize(heads=2, size=40, max_steps=15, seed=3, **TINY)
    b = train_memorize(heads=2, size=40, max_steps=15, seed=3, **TINY)
    c = train_memorize(heads=2, size=40, max_steps=15, seed=4, **TINY)
    assert a.final_loss == b.final_loss and a.memorized_count == b.memorized_count
    assert a.final_loss != c.final_loss


def test_early_stop_when_memorised():
    run = train_memorize(heads=4, size=8, epochs=3000, check_every=20, seed=0, classes=4, **TINY)
    assert run.memorized == 1.0 and run.memorized_count == 8
    assert run.stopped_early and run.steps_run < run.planned_steps == 3000
    assert run.steps_run % 20 == 0


def test_schedule_rules():
    assert planned_schedule(1000, 256, None, None) == (4, 12500, 50000)
    assert planned_schedule(256 * 200, 256, None, None) == (200, 500, 100000)
    assert planned_schedule(1000, 256, 10, None) == (4, 10, 40)
    assert planned_schedule(1000, 256, None, 6000) == (4, 1500, 6000)
    total = 1000
    lrs = [mem._lr_factor(s, total) for s in range(total)]
    assert lrs[0] == pytest.approx(1 / 50) and lrs[49] == pytest.approx(1.0)
    assert max(lrs) == pytest.approx(1.0) and lrs[-1] < 1e-4
    assert all(x >= y for x, y in zip(lrs[50:], lrs[51:]))  # decays monotonically after warm-up


def test_model_attends_over_context_only():
    g = torch.Generator().manual_seed(0)
    m = MemorizeModel(d=64, n=5, heads=3, head_dim=7, out_dim=10, generator=g)
    x = torch.rand(6, 64)
    shared = torch.rand(5, 64)
    out, p = m(x, shared, return_attention=True)
    assert out.shape == (6, 10) and p.shape == (6, 3, 5)
    torch.testing.assert_close(p.sum(-1), torch.ones(6, 3))
    # The per-example path agrees with the shared path on the same contexts.
    out2, p2 = m(x, shared.expand(6, 5, 64), return_attention=True)
    torch.testing.assert_close(out, out2)
    torch.testing.assert_close(p, p2)
    # d_v = 1 per head: W_V is (H, d), W_O maps H -> d; no biases anywhere.
    assert m.wv.shape == (3, 64) and m.wo.shape == (64, 3)
    assert all("bias" not in name for name, _ in m.named_parameters())
    pe = sinusoidal_positions(6, 64)
    assert pe.shape == (6, 64) and torch.linalg.matrix_rank(pe) == 6
    torch.testing.assert_close(pe[0, 0::2], torch.zeros(32))


def test_saturation_counts_on_hand_built_attention():
    # T = 4 examples, H = 3 heads, n = 3 context rows.
    sat = [1.0, 0.0, 0.0]
    near = [0.995, 0.004, 0.001]
    edge = [0.99, 0.005, 0.005]  # exactly 0.99 is not saturated (strictly greater is)
    flat = [1 / 3, 1 / 3, 1 / 3]
    attn = torch.tensor(
        [
            [sat, near, sat],  # 3 saturated
            [sat, flat, near],  # 2 saturated
            [edge, flat, sat],  # 1 saturated
            [flat, edge, flat],  # 0 saturated
        ]
    )
    s = saturation_summary(attn)
    assert s.heads == 3 and s.examples == 4
    assert s.histogram == (1, 1, 1, 1)
    assert s.frac_at_least_two_saturated == pytest.approx(0.5)
    assert s.frac_some_unsaturated == pytest.approx(0.75)
    assert s.frac_any_saturated == pytest.approx(0.75)
    assert s.mean_saturated == pytest.approx(1.5)
    with pytest.raises(InputError):
        saturation_summary(torch.rand(3, 3))


def test_resumable_parquet(tmp_path, monkeypatch, capsys):
    out = tmp_path / "res.parquet"
    kw = dict(vary="heads", values="1,2", sizes=[16], max_steps=8, out=out, **TINY)
    first = run_memorize_grid(**kw)
    assert first.reused == 0 and out.exists() and not any(r.reused for r in first.runs)

    def boom(**_):
        raise AssertionError("recomputed a point that is in the results file")

    monkeypatch.setattr(mem, "train_memorize", boom)
    second = run_memorize_grid(**kw)
    assert second.reused == 2 and all(r.reused for r in second.runs)
    assert [r.memorized_count for r in second.runs] == [r.memorized_count for r in first.runs]
    assert [r.final_loss for r in second.runs] == [r.final_loss for r in first.runs]
    monkeypatch.undo()

    # A bigger grid computes only the new point; the file keeps all three.
    third = run_memorize_grid(**{**kw, "values": "1,2,3"})
    assert third.reused == 2 and [r.reused for r in third.runs] == [True, True, False]
    import pyarrow.parquet as pq

    table = pq.read_table(out)
    assert table.num_rows == 3
    assert b"mhaaudit_version" in table.schema.metadata
    assert not list(tmp_path.glob(".*tmp"))  # no temporary files left behind

    # The CLI says so.
    rc = _main()(
        ["memorize", "--vary", "heads", "--values", "1,2", "--n", "4", "--head-dim", "8", "--sizes", "16",
         "--max-steps", "8", "--device", "cpu", "--out", str(out)]
    )
    err = capsys.readouterr().err
    assert rc == 0 and "2 of 2 points" in err and "not recomputed" in err

    # A different configuration (another seed) is recomputed.
    fourth = run_memorize_grid(**{**kw, "seed": 1})
    assert fourth.reused == 0


def test_heads_fit():
    fit = mem.fit_line([1, 2, 4, 8], [10, 20, 40, 80])
    assert fit.slope == pytest.approx(10) and fit.intercept == pytest.approx(0, abs=1e-9) and fit.r2 == pytest.approx(1)
    assert mem.fit_line([1, 1], [3, 4]) is None


def test_presets_resolve_and_override():
    g = mem.resolve_grid(preset="paper-fig2a")
    assert g["vary"] == "heads" and g["values"] == (1, 5, 10, 20, 30, 40, 50, 60) and g["fixed"]["n"] == 32
    g = mem.resolve_grid(preset="paper-fig2b")
    assert g["vary"] == "n" and g["fixed"]["heads"] == 20
    g = mem.resolve_grid(preset="paper-fig2c")
    assert g["vary"] == "head-dim" and g["fixed"]["heads"] == 30 and g["fixed"]["n"] == 32
    g = mem.resolve_grid(preset="cpu", sizes="100")
    assert g["sizes"] == (100,) and g["values"] == (1, 2, 4, 8) and g["max_steps"] == 6000
    assert len(mem._points(mem.resolve_grid(preset="cpu"))) == 8


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


def test_bad_input_library():
    with pytest.raises(InputError):
        run_memorize_grid(sizes=[])
    with pytest.raises(InputError):
        run_memorize_grid(vary="heads", values=[1, 2.5], sizes=[10])
    with pytest.raises(InputError):
        train_memorize(heads=0, n=4, size=10, device="cpu")
    with pytest.raises(InputError):
        train_memorize(heads=1, n=4, size=0, device="cpu")


def test_results_file_that_is_not_ours(tmp_path):
    bad = tmp_path / "x.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(InputError):
        run_memorize_grid(sizes=[8], max_steps=1, out=bad, **TINY)
