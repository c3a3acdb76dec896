"""Tests for mhaaudit.memorize.grid: presets, the grid's points, resuming, run_memorize_grid."""

from __future__ import annotations

import pytest

from mhaaudit import __version__
from mhaaudit.errors import InputError
from mhaaudit.memorize import grid as grid_mod
from mhaaudit.memorize.grid import points, resolve_grid, run_memorize_grid

TINY = dict(n=4, head_dim=8, device="cpu")


def _main():
    from mhaaudit.cli.app import main

    return main


def test_resumable_parquet(tmp_path, monkeypatch, capsys):
    out = tmp_path / "res.parquet"
    kw = dict(vary="heads", values="1,2", sizes=[16], max_steps=8, out=out, **TINY)
    first = run_memorize_grid(**kw)
    assert first.reused == 0 and out.exists() and not any(r.reused for r in first.runs)

    def boom(*_, **__):
        raise AssertionError("recomputed a point that is in the results file")

    monkeypatch.setattr(grid_mod, "train_point", boom)
    second = run_memorize_grid(**kw)
    assert second.reused == 2 and all(r.reused for r in second.runs)
    assert [r.memorized_count for r in second.runs] == [r.memorized_count for r in first.runs]
    assert [r.final_loss for r in second.runs] == [r.final_loss for r in first.runs]
    monkeypatch.undo()

    # A bigger grid computes only the new point; the file keeps all three.
    third = run_memorize_grid(**{**kw, "values": "1,2,3"})
    assert third.reused == 2 and [r.reused for r in third.runs] == [True, True, False]
    import pyarrow.parquet as pq

    from mhaaudit.io import read_parquet_metadata

    table = pq.read_table(out)
    assert table.num_rows == 3
    meta = read_parquet_metadata(out)
    assert meta["version"] == __version__ and meta["command"] == "memorize"  # provenance stamp
    assert (out.stat().st_mode & 0o777) != 0o600  # ordinary permissions, not mkstemp's
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


def test_presets_resolve_and_override():
    g = resolve_grid(preset="paper-fig2a")
    assert g["vary"] == "heads" and g["values"] == (1, 5, 10, 20, 30, 40, 50, 60) and g["fixed"]["n"] == 32
    g = resolve_grid(preset="paper-fig2b")
    assert g["vary"] == "n" and g["fixed"]["heads"] == 20
    g = resolve_grid(preset="paper-fig2c")
    assert g["vary"] == "head-dim" and g["fixed"]["heads"] == 30 and g["fixed"]["n"] == 32
    g = resolve_grid(preset="cpu", sizes="100")
    assert g["sizes"] == (100,) and g["values"] == (1, 2, 4, 8) and g["max_steps"] == 6000
    assert len(points(resolve_grid(preset="cpu"))) == 8


def test_bad_input_library():
    with pytest.raises(InputError):
        run_memorize_grid(sizes=[])
    with pytest.raises(InputError):
        run_memorize_grid(vary="heads", values=[1, 2.5], sizes=[10])


def test_results_file_that_is_not_ours(tmp_path):
    bad = tmp_path / "x.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(InputError):
        run_memorize_grid(sizes=[8], max_steps=1, out=bad, **TINY)
