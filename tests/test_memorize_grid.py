"""Tests for mhaaudit.memorize.grid: presets, the grid's points, resuming, run_memorize_grid."""

from __future__ import annotations

import pytest
import torch

from mhaaudit import __version__
from mhaaudit.errors import InputError
from mhaaudit.memorize import grid as grid_mod
from mhaaudit.memorize.grid import MemorizeRequest, points, resolve_grid, run_memorize_grid

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

    monkeypatch.setattr(grid_mod, "train_group", boom)
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
        [
            "memorize",
            "--vary",
            "heads",
            "--values",
            "1,2",
            "--n",
            "4",
            "--head-dim",
            "8",
            "--sizes",
            "16",
            "--max-steps",
            "8",
            "--device",
            "cpu",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 0 and "2 of 2 points" in err and "not recomputed" in err

    # A different configuration (another seed) is recomputed.
    fourth = run_memorize_grid(**{**kw, "seed": 1})
    assert fourth.reused == 0


def test_presets_resolve_and_override():
    g = resolve_grid(MemorizeRequest(preset="paper-fig2a"))
    assert g["vary"] == "heads" and g["values"] == (1, 5, 10, 20, 30, 40, 50, 60) and g["fixed"]["n"] == 32
    g = resolve_grid(MemorizeRequest(preset="paper-fig2b"))
    assert g["vary"] == "n" and g["fixed"]["heads"] == 20
    g = resolve_grid(MemorizeRequest(preset="paper-fig2c"))
    assert g["vary"] == "head-dim" and g["fixed"]["heads"] == 30 and g["fixed"]["n"] == 32
    g = resolve_grid(MemorizeRequest(preset="cpu", sizes="100"))
    assert g["sizes"] == (100,) and g["values"] == (1, 2, 4, 8) and g["max_steps"] == 6000
    assert len(points(resolve_grid(MemorizeRequest(preset="cpu")))) == 8
    # --epochs replaces the preset's training length: cpu's cap of 6000 steps trained 3000 of 7000 epochs at T = 500
    assert MemorizeRequest(preset="cpu", epochs=7000).recipe.max_steps is None
    assert (MemorizeRequest(preset="cpu", epochs=7000, max_steps=9000).recipe.max_steps) == 9000
    assert MemorizeRequest(preset="cpu", max_steps=9000).recipe.epochs is None


def test_bad_input_library():
    with pytest.raises(InputError):
        run_memorize_grid(sizes=[])
    with pytest.raises(InputError):
        run_memorize_grid(vary="heads", values=[1, 2.5], sizes=[10])


@pytest.mark.parametrize(
    "kw, says",
    [
        (dict(tolerance=0.5), "tolerance 0.5 has no effect with task classification"),
        (dict(task="regression", classes=5), "classes 5 has no effect with task regression"),
    ],
)
def test_a_recipe_field_its_task_does_not_use_is_refused(kw, says):
    """The command line refuses --tolerance with classification and --classes with regression; the library took
    them and trained as if they were not given (its settings and results file stating a tolerance no point used)."""
    with pytest.raises(InputError, match=says):
        run_memorize_grid(sizes=[16], max_steps=1, **TINY, **kw)
    with pytest.raises(InputError, match=says):
        MemorizeRequest(sizes=[16], **kw)
    assert MemorizeRequest(sizes=[16], task="regression", tolerance=0.5).tolerance == 0.5


def test_results_file_that_is_not_ours(tmp_path):
    bad = tmp_path / "x.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(InputError):
        run_memorize_grid(sizes=[8], max_steps=1, out=bad, **TINY)


@pytest.mark.parametrize(
    "raw, says",
    [
        (b"not json", "not the JSON object memorize writes: Expecting value"),
        (b"\xff\xfe", "not the JSON object memorize writes: "),
        (b"[1, 2]", "not the JSON object memorize writes, but a JSON array"),
        (b'"text"', "not the JSON object memorize writes, but a JSON string"),
    ],
)
def test_a_results_file_whose_metadata_is_not_memorizes_is_refused(tmp_path, raw, says):
    """A results file whose rows are memorize's but whose mhaaudit metadata is not a JSON object was an internal
    error (exit 3: JSONDecodeError, or "'list' object has no attribute 'get'"); it is refused in one line."""
    import pyarrow.parquet as pq

    out = tmp_path / "res.parquet"
    kw = dict(sizes=[16], max_steps=2, out=out, **TINY)
    run_memorize_grid(**kw)
    table = pq.read_table(out)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"mhaaudit": raw}), out)
    with pytest.raises(InputError, match="is not a results file of 'mhaaudit memorize'") as caught:
        run_memorize_grid(**kw)
    assert says in str(caught.value) and str(out) in str(caught.value)


@pytest.mark.parametrize(
    "column, value, says",
    [
        ("memorized", float("nan"), "memorized = nan"),
        ("memorized", -5.0, "memorized = -5.0"),
        ("memorized", 0.9, "not its count"),
        ("memorized_count", -1, "memorized_count = -1"),
        ("memorized_count", 2**40, "of T = 16 examples"),
        ("heads", 0, "another configuration than its config_key"),
        ("size", 999, "another configuration than its config_key"),
        ("steps_run", -3, "steps_run = -3"),
        ("seconds", float("inf"), "seconds = inf"),
        ("final_loss", float("nan"), "diverged = False with final_loss = nan"),
        ("diverged", True, "diverged = True with final_loss = "),
        ("steps_run", 999999, "steps_run = 999999, above its 8 planned steps"),
        ("planned_steps", 7, "planned_steps = 7, where its configuration plans 8"),
        ("planned_steps", 50000, "planned_steps = 50000, where its configuration plans 8"),
        ("epochs_run", 3, "epochs_run = 3, where 8 steps of its plan are 8 epochs"),
        ("steps_run", 5, "steps_run = 5, at no check of its plan (every 200 epochs of 1 steps, and at step 8)"),
        ("final_loss", -5.0, "final_loss = -5.0, below 0"),
        ("final_loss", float("-inf"), "final_loss = -inf, below 0"),
        ("stopped_early", True, "stopped_early = True at step 8 of 8 planned"),
    ],
)
def test_a_stored_row_that_no_training_writes_is_refused_not_reported(tmp_path, column, value, says):
    """A results file whose row of a point says what no training writes (another point than its key, a
    fraction outside [0, 1] or other than its count over T) is refused in one line, never reported as a result."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "res.parquet"
    kw = dict(vary="heads", values="1,2", sizes=[16], max_steps=8, out=out, **TINY)
    run_memorize_grid(**kw)
    table = pq.read_table(out)
    rows = table.to_pylist()
    rows[0][column] = value
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), out)
    with pytest.raises(InputError, match="not a results file as memorize writes it") as caught:
        run_memorize_grid(**kw)
    assert says in str(caught.value) and "H = " in str(caught.value)


@pytest.mark.parametrize(
    "edit, says",
    [
        (dict(sat_frac_ge2=7.5), "sat"),
        (dict(sat_histogram=[-5, 21]), "does not count its T = 16 examples once each"),
        (dict(sat_histogram=[8, 0]), "does not count its T = 16 examples once each"),
        (dict(sat_histogram=[16, 0, 0]), "a saturation histogram of 3 counts, not H + 1 = 2"),
        (dict(sat_histogram=[6, 10], sat_frac_any=0.625), "frac_some_unsaturated = "),
        (dict(sat_mean=-2.0), "mean_saturated = -2.0"),
        (dict(sat_frac_some_unsaturated=float("nan")), "frac_some_unsaturated = nan"),
        (dict(sat_threshold=3.0), "a saturation threshold of 3.0, not 0.99"),
    ],
)
def test_a_stored_saturation_that_no_training_writes_is_refused(tmp_path, edit, says):
    """Saturation columns that no count of the point's T examples over 0..H saturated heads gives (a fraction
    of 7.5, a histogram of negative counts or of other than T examples, fractions that are not the
    histogram's) refuse the file, as its other columns do: they are never reported as a result."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "res.parquet"
    kw = dict(vary="heads", values="1,2", sizes=[16], max_steps=8, out=out, saturation=True, **TINY)
    run_memorize_grid(**kw)
    table = pq.read_table(out)
    rows = table.to_pylist()
    assert rows[0]["heads"] == 1 and sum(rows[0]["sat_histogram"]) == 16
    rows[0] |= edit
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), out)
    with pytest.raises(InputError, match="not a results file as memorize writes it") as caught:
        run_memorize_grid(**kw)
    assert says in str(caught.value) and "H = 1" in str(caught.value)
    rows[0] |= {k: table.column(k)[0].as_py() for k in edit}  # as training wrote it: read back, not retrained
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), out)
    assert run_memorize_grid(**kw).reused == 2


@pytest.mark.parametrize(
    "column, value, says",
    [
        ("sat_histogram", "[16.5, -0.5]", "sat_histogram = [16.5, -0.5], not a list of whole numbers"),
        ("sat_histogram", "[15.5, 0.5]", "sat_histogram = [15.5, 0.5], not a list of whole numbers"),
        ("memorized_count", 12.5, "memorized_count = 12.5, not a whole number"),
        ("steps_run", 8.5, "steps_run = 8.5, not a whole number"),
    ],
)
def test_a_stored_count_that_is_no_whole_number_is_refused_not_cut(tmp_path, column, value, says):
    """A count stored as a float or as JSON text (12.5, a histogram [16.5, -0.5]) was cut to an integer: the
    histogram [16.5, -0.5] was read as [16, 0] and reported, a float count column made the point train again in
    silence. A value that is no whole number refuses the file in one line naming it and the column; a float that is
    one (16.0, a file rewritten through floats) is read as that integer, and the points are read back."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "res.parquet"
    kw = dict(vary="heads", values="1,2", sizes=[16], max_steps=8, out=out, saturation=True, **TINY)
    run_memorize_grid(**kw)
    table = pq.read_table(out)
    rows = table.to_pylist()
    assert rows[0]["sat_histogram"] == [16, 0]
    as_text = column == "sat_histogram"  # JSON text, as older files store it; a count, as floats
    kind = pa.string() if as_text else pa.float64()
    schema = pa.schema([pa.field(f.name, kind) if f.name == column else f for f in table.schema])
    written = [r | {column: json.dumps(r[column]) if as_text else float(r[column])} for r in rows]

    def write(first):
        pq.write_table(pa.Table.from_pylist([written[0] | {column: first}, *written[1:]], schema=schema), out)

    write(value)
    with pytest.raises(InputError, match="not a results file as memorize writes it: its row 1 gives") as caught:
        run_memorize_grid(**kw)
    assert says in str(caught.value) and str(out) in str(caught.value)
    write(written[0][column])  # the same counts as floats (or text): read back exactly, not trained again
    again = run_memorize_grid(**kw)
    assert again.reused == 2 and again.runs[0].saturation.histogram == (16, 0)


@pytest.mark.parametrize("text", ["[16, ", "[" * 200_000 + "]" * 200_000])
def test_a_stored_histogram_that_is_no_json_is_refused(tmp_path, text):
    """A histogram stored as text that is no JSON, or JSON nested deeper than Python parses, refuses the results
    file in one line (never a traceback, nor an internal error)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "res.parquet"
    kw = dict(vary="heads", values="1,2", sizes=[16], max_steps=8, out=out, saturation=True, **TINY)
    run_memorize_grid(**kw)
    table = pq.read_table(out)
    schema = pa.schema([pa.field(f.name, pa.string()) if f.name == "sat_histogram" else f for f in table.schema])
    rows = [r | {"sat_histogram": text} for r in table.to_pylist()]
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), out)
    with pytest.raises(InputError, match=r"its row 1 gives sat_histogram = '\[\[?.*, not a list of whole numbers"):
        run_memorize_grid(**kw)


def test_a_results_file_of_memorize_s_columns_and_no_row_is_refused(tmp_path):
    """memorize writes a results file once a point is trained: a file of its columns (or of any) and no row is
    none of its own, and is refused, never written over."""
    import pyarrow.parquet as pq

    out = tmp_path / "res.parquet"
    kw = dict(sizes=[16], max_steps=2, out=out, **TINY)
    run_memorize_grid(**kw)
    pq.write_table(pq.read_table(out).slice(0, 0), out)
    before = out.read_bytes()
    with pytest.raises(InputError, match="it holds no row, and memorize writes one for every point it trains"):
        run_memorize_grid(**kw)
    assert out.read_bytes() == before


@pytest.mark.parametrize(
    "edit, says",
    [
        (dict(steps_run=4, epochs_run=2, stopped_early=True), "it stopped early with "),
        (dict(steps_run=4, epochs_run=2), "stopped_early = False at step 4 of 8 planned"),
        (dict(steps_run=4, epochs_run=3), "epochs_run = 3, where 4 steps of its plan are 2 epochs"),
        (dict(steps_run=3, epochs_run=2), "steps_run = 3, at no check of its plan (every 1 epochs of 2 steps"),
    ],
)
def test_a_stored_row_off_its_plan_is_refused(tmp_path, edit, says):
    """A row whose steps, epochs and stop are not those of a check of its plan (T = 16, batch 8: 2 steps an
    epoch, a check every epoch, 8 steps) is refused: training writes a record only at a check, and stops
    before the planned steps only with every example memorised."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "res.parquet"
    kw = dict(sizes=[16], max_steps=8, batch_size=8, check_every=2, out=out, **TINY)
    (run,) = run_memorize_grid(**kw).runs
    assert (run.steps_run, run.epochs_run, run.stopped_early, run.memorized_count < 16) == (8, 4, False, True)
    table = pq.read_table(out)
    rows = [{**row, **edit} for row in table.to_pylist()]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), out)
    with pytest.raises(InputError, match="not a results file as memorize writes it") as caught:
        run_memorize_grid(**kw)
    assert says in str(caught.value)


def test_a_diverged_run_is_said_kept_and_read_back_as_written(tmp_path, monkeypatch):
    """A training that diverges (lr = 1e300) is a run that says so (diverged, a note, out of the fit); its row is
    kept and read back as training wrote it, and a row of a file written before the column is read the same."""
    import pyarrow.parquet as pq

    out = tmp_path / "res.parquet"
    kw = dict(vary="heads", values="1,2", sizes=[16], max_steps=8, lr=1e300, classes=2, out=out, **TINY)
    first = run_memorize_grid(**kw)
    assert all(r.diverged and r.memorized_count == 0 for r in first.runs) and first.fits == ()
    assert len(first.notes) == 2 and all("diverged" in n and "left out of the linear fit" in n for n in first.notes)
    assert first.to_dict()["notes"] == list(first.notes) and pq.read_table(out).column("diverged").to_pylist() == [
        True,
        True,
    ]
    monkeypatch.setattr(grid_mod, "train_group", lambda *a, **k: pytest.fail("recomputed a stored point"))
    second = run_memorize_grid(**kw)
    assert second.reused == 2 and all(r.diverged for r in second.runs) and second.notes == first.notes
    pq.write_table(pq.read_table(out).drop(["diverged"]), out)  # as written before the column was recorded
    third = run_memorize_grid(**kw)
    assert third.reused == 2 and all(r.diverged for r in third.runs)


def test_the_resume_files_metadata_describes_its_rows(tmp_path):
    """The file's stamp gives the seeds and devices of the rows it holds, not the last request's alone."""
    from mhaaudit.io import read_parquet_metadata

    out = tmp_path / "res.parquet"
    kw = dict(sizes=[16], max_steps=4, out=out, **TINY)
    run_memorize_grid(**kw)
    run_memorize_grid(**kw, seeds="1-2")
    meta = read_parquet_metadata(out)
    assert (meta["seeds"], meta["seed"], meta["device"], meta["preset"]) == ([0, 1, 2], 0, "cpu", None)
    run_memorize_grid(**{**kw, "sizes": None}, preset="cpu", heads=1)  # one point of the preset
    assert read_parquet_metadata(out)["preset"] is None  # rows of two grids: no one preset


def _meanwhile(monkeypatch, other):
    """Make ``other()`` (another run writing the same file) happen while the first group of this run trains."""
    train, done, started = grid_mod.train_group, [], []

    def first_lets_other_run(*a, **k):
        if not started:  # once: the other run trains through here too
            started.append(True)
            done.append(other())
        return train(*a, **k)

    monkeypatch.setattr(grid_mod, "train_group", first_lets_other_run)
    return done


def test_two_runs_writing_one_file_keep_each_others_points(tmp_path, monkeypatch):
    """Another run writes the same --out while this one trains: its points are kept (this run wrote the rows it
    read at its start, and lost them), and a point both trained is the one already in the file, which this run
    then reports, so that the file and both reports agree."""
    import pyarrow.parquet as pq

    out = tmp_path / "res.parquet"
    kw = dict(sizes=[16], max_steps=4, max_group=1, out=out, **TINY)
    other = _meanwhile(monkeypatch, lambda: run_memorize_grid(**kw, heads=2))
    mine = run_memorize_grid(**kw, heads=1)
    assert sorted(pq.read_table(out).column("heads").to_pylist()) == [1, 2] and other[0].runs[0].heads == 2
    assert not mine.runs[0].reused and mine.reused == 0
    monkeypatch.undo()

    both = tmp_path / "both.parquet"
    kw = {**kw, "out": both, "heads": 3}
    other = _meanwhile(monkeypatch, lambda: run_memorize_grid(**kw))
    mine = run_memorize_grid(**kw)
    (theirs,) = other[0].runs
    (stored,) = pq.read_table(both).to_pylist()
    assert mine.runs[0].reused and mine.reused == 1 and stored["seconds"] == theirs.seconds == mine.runs[0].seconds
    monkeypatch.undo()

    edited = tmp_path / "edited.parquet"
    kw = {**kw, "out": edited}

    def impossible():
        import pyarrow as pa

        run_memorize_grid(**kw)
        table = pq.read_table(edited)
        pq.write_table(pa.Table.from_pylist([{**table.to_pylist()[0], "steps_run": 99}], schema=table.schema), edited)

    _meanwhile(monkeypatch, impossible)
    with pytest.raises(InputError, match=r"not a results file as memorize writes it.*steps_run = 99, above its 4"):
        run_memorize_grid(**kw)


def test_two_rows_for_one_point_are_refused_not_one_of_them_chosen(tmp_path):
    """A results file with a second row for a point that says otherwise (its count raised, its fraction with it:
    each row alone is possible) cannot say which holds: refused, where the last row was reported as the result."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "res.parquet"
    kw = dict(sizes=[16], max_steps=8, out=out, **TINY)
    run_memorize_grid(**kw)
    table = pq.read_table(out)
    (row,) = table.to_pylist()
    other = {**row, "memorized_count": 16, "memorized": 1.0}
    pq.write_table(pa.Table.from_pylist([row, other], schema=table.schema), out)
    with pytest.raises(InputError, match=r"two rows for the configuration '.+'\); pick another out$"):
        run_memorize_grid(**kw)


# ------------------------------------------------------------------ stacked groups and seeds


def test_grouped_grid_matches_the_grid_point_by_point():
    kw = dict(
        vary="heads", values="1,2,3", sizes="12,30", classes=4, max_steps=30, check_every=10, batch_size=8, **TINY
    )
    alone = run_memorize_grid(**kw, max_group=1)
    together = run_memorize_grid(**kw, memory_budget=1.0)
    assert len(alone.groups) == len(alone.runs) == 6 and all(len(g.runs) == 1 for g in alone.groups)
    assert sorted(i for g in together.groups for i in g.runs) == list(range(6)) and len(together.groups) < 6
    assert together.memory_budget == 1 << 30
    for a, b in zip(alone.runs, together.runs, strict=False):
        assert (a.heads, a.size, a.memorized_count, a.steps_run) == (b.heads, b.size, b.memorized_count, b.steps_run)
        assert a.final_loss == pytest.approx(b.final_loss, rel=1e-5)
    d = together.to_dict()
    assert d["memory_budget"] == 1 << 30 and {"runs", "heads", "head_dim", "n", "size", "bytes", "seconds"} <= set(
        d["groups"][0]
    )
    # each point's seconds is its share of its group's time, not the group's time repeated
    for g in together.groups:
        shares = [together.runs[i].seconds for i in g.runs]
        assert all(0 < t for t in shares) and sum(shares) <= g.seconds
        if len(shares) > 1:
            assert all(t < g.seconds for t in shares)
    for g in alone.groups:  # a group of one: its share is its whole training time
        assert 0 < alone.runs[g.runs[0]].seconds <= g.seconds


def test_seeds_mean_and_spread_resumable_and_plotted(tmp_path, monkeypatch):
    out, fig = tmp_path / "seeds.parquet", tmp_path / "seeds.png"
    kw = dict(vary="heads", values="1,2", sizes=[16], max_steps=8, out=out, **TINY)
    grid = run_memorize_grid(**kw, seeds="0-2", plot=fig)
    assert grid.seeds == (0, 1, 2) and grid.settings.seeds == (0, 1, 2)
    assert [(r.heads, r.seed) for r in grid.runs] == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    assert len(grid.summary) == 2
    for m in grid.summary:
        fr = [r.memorized for r in grid.runs if r.heads == m.heads]
        assert m.seeds == 3 and m.mean == pytest.approx(sum(fr) / 3) and (m.low, m.high) == (min(fr), max(fr))
        assert m.std == pytest.approx(torch.tensor(fr, dtype=torch.float64).std().item())
    d = grid.to_dict()
    assert d["seeds"] == [0, 1, 2] and d["summary"][0]["seeds"] == 3 and fig.stat().st_size > 1000

    monkeypatch.setattr(grid_mod, "train_group", lambda *a, **k: pytest.fail("recomputed a stored point"))
    again = run_memorize_grid(**kw, seeds=[0, 1, 2])
    assert (
        again.reused == 6 and again.groups == () and [m.mean for m in again.summary] == [m.mean for m in grid.summary]
    )
    monkeypatch.undo()
    more = run_memorize_grid(**kw, seeds="0-3")  # one more seed: only its points are trained
    assert more.reused == 6 and len(more.runs) == 8 and sum(len(g.runs) for g in more.groups) == 2

    one = run_memorize_grid(**{**kw, "out": None})
    assert one.seeds == (0,) and one.summary[0].std is None and one.summary[0].seeds == 1


def test_bad_seeds_and_budgets():
    for bad in (
        dict(seeds="3-1"),
        dict(seeds="x"),
        dict(seeds="0-2", seed=4),
        dict(memory_budget=0),
        dict(memory_budget=-1.0),
        dict(max_group=0),
    ):
        with pytest.raises(InputError):
            run_memorize_grid(sizes=[8], max_steps=1, **TINY, **bad)


def test_the_request_is_one_frozen_object_and_keywords_that_disagree_are_refused():
    import dataclasses

    request = MemorizeRequest(vary="h", values="2,1", sizes="8", max_steps="1", seed="3", **TINY)
    assert request == MemorizeRequest(vary="heads", values=[2, 1], sizes=[8], max_steps=1, seed=3, **TINY)
    assert request.seed_list == [3] and request.recipe.max_steps == 1 and request.device == torch.device("cpu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.seed = 4  # type: ignore[misc]
    # keywords that say what the request says are accepted; one that says otherwise is refused
    assert run_memorize_grid(request, seed=3, values="2,1").seeds == (3,)
    with pytest.raises(InputError, match=r"^seed = 0 disagrees with the MemorizeRequest given as request \(seed = 3\)"):
        run_memorize_grid(request, seed=0)
    with pytest.raises(TypeError, match="MemorizeRequest"):
        run_memorize_grid({"sizes": [8]})


def test_a_grid_runs_in_parts_of_bounded_time(tmp_path, monkeypatch, capsys):
    """With max_minutes the grid stops when the time is up (no group starts after it), keeps the
    groups finished in the results file and says how many points are left; the same call again
    trains only those, and the grid it ends with is the one a single call gives."""
    from mhaaudit.memorize import GridUnfinished

    out = tmp_path / "parts.parquet"
    kw = dict(vary="heads", values="1,2,3", sizes="12,16", max_steps=6, check_every=2, max_group=1, **TINY)
    whole = run_memorize_grid(**kw)
    clock = [0.0]
    monkeypatch.setattr(grid_mod.time, "monotonic", lambda: clock[0])
    real_keep = grid_mod._Training._keep

    def keep_then_time_up(self, *args):  # the clock runs out once the first group is kept
        clock[0] = 1e9
        return real_keep(self, *args)

    monkeypatch.setattr(grid_mod._Training, "_keep", keep_then_time_up)
    with pytest.raises(GridUnfinished, match=r"max_minutes 8: \d of 6 points are trained") as stopped:
        run_memorize_grid(**kw, out=out, max_minutes=8)
    kept = 6 - stopped.value.left
    assert 1 <= kept < 6 and stopped.value.total == 6
    import pyarrow.parquet as pq

    assert pq.read_table(out).num_rows == kept
    monkeypatch.undo()
    rest = run_memorize_grid(**kw, out=out, max_minutes=8)  # time enough now: the rest
    assert rest.reused == kept
    assert [(r.heads, r.size, r.memorized_count, r.final_loss) for r in rest.runs] == [
        (r.heads, r.size, r.memorized_count, r.final_loss) for r in whole.runs
    ]
    # the command line: one line that says so, exit 2; and the time limit needs a results file
    reads = iter([0.0])  # the deadline is set at 0; every later reading is long after it: nothing is trained
    monkeypatch.setattr(grid_mod.time, "monotonic", lambda: next(reads, 1e9))
    args = ["memorize", "--vary", "heads", "--values", "1,2", "--n", "4", "--head-dim", "8", "--sizes", "12"]
    args += ["--max-steps", "4", "--device", "cpu", "--max-group", "1"]
    rc = _main()([*args, "--out", str(tmp_path / "cli.parquet"), "--max-minutes", "0.5"])
    err = capsys.readouterr().err
    # nothing trained in the time: the same command again would stop the same way, so it is not what goes on
    assert rc == 2 and err.startswith("Error: stopped at --max-minutes 0.5 before any group of points finished")
    assert "none of the 2 points is trained; the same command again would stop the same way" in err
    assert err.rstrip().endswith("give more --max-minutes")  # each group is one point already (--max-group 1)
    reads = iter([0.0])
    rc = _main()([*args[:-2], "--out", str(tmp_path / "cli.parquet"), "--max-minutes", "0.5"])
    assert rc == 2 and capsys.readouterr().err.rstrip().endswith("give more --max-minutes or a smaller --max-group")
    run_memorize_grid(vary="heads", values="1", sizes="12", max_steps=4, out=tmp_path / "cli.parquet", **TINY)
    reads = iter([0.0])
    rc = _main()([*args, "--out", str(tmp_path / "cli.parquet"), "--max-minutes", "0.5"])
    assert "before any group of points finished training: 1 of 2 points are trained (read from " in (
        capsys.readouterr().err
    )
    rc = _main()([*args, "--max-minutes", "1"])
    assert rc == 2 and "--out" in capsys.readouterr().err
    with pytest.raises(InputError, match="max_minutes must be a positive number"):
        run_memorize_grid(**kw, out=out, max_minutes=0)
