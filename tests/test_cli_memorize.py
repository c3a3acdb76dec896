"""``mhaaudit memorize``: every output (table, JSON, parquet) from one tiny grid, and the help."""

from __future__ import annotations

import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clitools import assert_one_error, auto_device, help_text, run
from conftest import strict_json

from mhaaudit import __version__

# Two points, a few steps each: seconds on a CPU. The device is left at auto.
GRID = [
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
    "6",
    "--seed",
    "2",
]
RUN_FIELDS = {
    "heads",
    "n",
    "head_dim",
    "size",
    "memorized",
    "memorized_count",
    "epochs_run",
    "steps_run",
    "final_loss",
    "seconds",
    "device",
    "diverged",
    "saturation",
}


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_table(capsys):
    rc, out, err = run(capsys, *GRID)
    assert rc == 0, err
    flat = " ".join(out.split())
    assert "Memorisation (classification, shared context" in flat
    assert "H=1 n=4 d_h=8" in flat and "H=2 n=4 d_h=8" in flat
    assert "Linear fit" in flat
    assert not out.lstrip().startswith("{")


def test_json_document(capsys):
    rc, out, err = run(capsys, *GRID, "--format", "json")
    assert rc == 0, err
    doc = strict_json(out)  # the one strict printer: no NaN or Infinity tokens
    assert set(doc) == {
        "tool",
        "vary",
        "values",
        "sizes",
        "preset",
        "settings",
        "runs",
        "fits",
        "fit_gaps",
        "reused",
        "out",
        "plot",
        "seeds",
        "summary",
        "groups",
        "memory_budget",
        "notes",
    }
    assert doc["tool"] == f"mhaaudit {__version__}"
    assert doc["vary"] == "heads" and doc["values"] == [1, 2] and doc["sizes"] == [16]
    assert [r["heads"] for r in doc["runs"]] == [1, 2]
    assert all(RUN_FIELDS <= set(r) for r in doc["runs"])
    assert doc["settings"]["seed"] == 2 and doc["settings"]["device"] == auto_device()
    assert err == ""  # no progress bars with --format json


def test_the_settings_give_no_value_for_the_varied_parameter(capsys):
    """A grid of H = 1, 2 stated "heads": 4 in its settings (the default of a parameter it does not hold fixed),
    a number no point was trained with; the varied parameter's value is each run's, and the settings give null."""
    rc, out, err = run(capsys, *GRID, "--device", "cpu", "--format", "json")
    assert rc == 0, err
    settings = strict_json(out)["settings"]
    assert settings["heads"] is None and (settings["n"], settings["head_dim"]) == (4, 8)
    from mhaaudit.memorize import MemorizeGrid

    assert MemorizeGrid.from_json(out).settings.heads is None
    args = ["memorize", "--heads", "3", "--n", "4,5", "--head-dim", "8", "--sizes", "16", "--max-steps", "2"]
    rc, out, err = run(capsys, *args, "--device", "cpu", "--format", "json")
    settings = strict_json(out)["settings"]
    assert rc == 0 and (settings["heads"], settings["n"], settings["head_dim"]) == (3, None, 8), err


def test_parquet_to_stdout(capsysbinary, monkeypatch, tmp_path):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    rc, out, err = run(capsysbinary, *GRID, "--saturation", "--format", "parquet")
    assert rc == 0, err
    t = pq.read_table(pa.BufferReader(out))
    rows = t.to_pylist()
    assert [r["heads"] for r in rows] == [1, 2] and all(RUN_FIELDS <= set(r) for r in rows)
    assert all(r["size"] == 16 and r["steps_run"] <= 6 for r in rows)
    assert rows[1]["saturation"]["heads"] == 2  # nested values are nested data: a struct column
    assert t.schema.field("saturation").type.field("histogram").type == pa.list_(pa.int64())
    meta = json.loads(t.schema.metadata[b"mhaaudit"])
    assert meta["command"] == "memorize" and meta["versions"]["mhaaudit"] == __version__
    assert meta["seed"] == 2 and meta["device"] == auto_device() and meta["settings"]["device"] == meta["device"]
    assert meta["vary"] == "heads" and meta["values"] == [1, 2]
    assert err == b""


def test_parquet_to_terminal_refused(capsys, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    rc, out, err = run(capsys, *GRID, "--format", "parquet")
    assert_one_error(rc, err, "--format parquet")
    assert out == ""


def test_help(capsys):
    text = help_text(capsys, "memorize")
    for word in ("--vary", "--values", "--preset", "paper-fig2a", "--saturation", "--out", "--plot"):
        assert word in text, word


def test_heads_takes_a_range_as_in_capacity(capsys):
    """--heads 1-2 (capacity's syntax) varies H: the same grid as --vary heads --values 1,2."""
    rc, out, err = run(capsys, *GRID, "--format", "json")
    assert rc == 0, err
    ranged = [a for a in GRID if a not in ("--vary", "heads", "--values", "1,2")] + ["--heads", "1-2"]
    rc, out2, err = run(capsys, *ranged, "--format", "json")
    assert rc == 0, err
    a, b = json.loads(out), json.loads(out2)
    assert (b["vary"], b["values"]) == ("heads", [1, 2])
    drop = ("seconds",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in a["runs"]] == [
        {k: v for k, v in r.items() if k not in drop} for r in b["runs"]
    ]
    # --context-length is n, as in the other commands
    rc, out3, err = run(capsys, *[("--context-length" if x == "--n" else x) for x in GRID], "--format", "json")
    assert rc == 0, err
    assert [r["n"] for r in json.loads(out3)["runs"]] == [4, 4]


@pytest.mark.parametrize(
    "preset, given, varied",
    [
        ("paper-fig2a", ["--n", "3,4"], "heads"),
        ("cpu", ["--head-dim", "4,8"], "heads"),
        ("paper-fig2b", ["--heads", "1-2"], "n"),
    ],
)
def test_several_values_beside_a_preset_that_varies_another_parameter_are_refused(capsys, preset, given, varied):
    """--preset paper-fig2a --n 3,4 trained a grid of n in 3, 4 (heads fixed at its default) where the preset
    varies heads, and said nothing: what varied changed in silence. It is refused in one line naming both;
    --vary n beside them says n is meant, and the grid varies it; several values of the preset's own parameter
    still replace its values."""
    tiny = ["--sizes", "8", "--max-steps", "2", "--device", "cpu", "--format", "json"]
    rc, _out, err = run(capsys, "memorize", "--preset", preset, *given, *tiny)
    line = assert_one_error(
        rc, err, f"{given[0]} {given[1]} gives several values, but --preset {preset} varies {varied}"
    )
    name = given[0].removeprefix("--")
    assert f"add --vary {name} to vary {name} instead, or give {given[0]} one value" in line
    small = [] if name == "n" else ["--n", "3"]
    small += [] if name == "head-dim" else ["--head-dim", "4"]
    rc, out, err = run(capsys, "memorize", "--preset", preset, "--vary", name, *given, *small, *tiny)
    assert rc == 0, err
    doc = json.loads(out)
    assert (doc["vary"], doc["preset"], len(doc["runs"])) == (name, preset, 2)


def test_several_values_of_the_presets_own_parameter_replace_its_values(capsys):
    rc, out, err = run(
        capsys, "memorize", "--preset", "paper-fig2a", "--heads", "1,2", "--n", "3", "--head-dim", "4",
        "--sizes", "8", "--max-steps", "2", "--device", "cpu", "--format", "json",
    )  # fmt: skip
    assert rc == 0, err
    doc = json.loads(out)
    assert (doc["vary"], doc["values"], [r["n"] for r in doc["runs"]]) == ("heads", [1, 2], [3, 3])


def test_choices_are_choices(capsys):
    """--preset, --task and --context take one of their values, listed in the help, as does --vary (a word the
    library reads with its aliases); a wrong one is one line in the project's words, not pydantic's."""
    import typer.main

    from mhaaudit.cli.app import app
    from mhaaudit.memorize import PRESETS

    cmd = typer.main.get_command(app).commands["memorize"]

    def values(p) -> list[str]:  # click's Choice, or the newer Typer's own type descriptor
        found = getattr(getattr(p, "type", None), "choices", None) or getattr(
            getattr(p, "type_descriptor", None), "choices", None
        )
        return [str(getattr(c, "value", c)) for c in found or []]

    choices = {p.name: values(p) for p in cmd.params}
    assert choices["preset"] == list(PRESETS)
    assert choices["task"] == ["classification", "regression"] and choices["context"] == ["shared", "per-example"]
    text = help_text(capsys, "memorize")
    assert "<bool>" not in text and "1-8" in text and "--vary <heads|n|head-dim>" in text
    rc, _out, err = run(capsys, *GRID, "--task", "sorting")
    line = assert_one_error(rc, err, "Invalid value for '--task': 'sorting' is not one of 'classification'")
    assert "Value error" not in line
    rc, _out, err = run(capsys, *GRID[:2], "sorting", *GRID[3:])
    assert_one_error(rc, err, "unknown --vary 'sorting' (choose from heads, n, head-dim)")


@pytest.mark.parametrize("alias", ["dh", "head_dim", "DH"])
def test_vary_takes_the_librarys_aliases(capsys, alias):
    """--vary dh (the library's alias of head-dim) was refused by the command line, with pydantic's "Value error,"
    in its message: it now varies d_h, the same grid as --vary head-dim."""
    args = ["memorize", "--values", "4,8", "--n", "3", "--sizes", "12", "--max-steps", "3", "--device", "cpu"]
    rc, out, err = run(capsys, *args, "--vary", alias, "--format", "json")
    assert rc == 0, err
    rc, out2, err = run(capsys, *args, "--vary", "head-dim", "--format", "json")
    a, b = json.loads(out), json.loads(out2)
    assert (a["vary"], a["values"], [r["head_dim"] for r in a["runs"]]) == ("head-dim", [4, 8], [4, 8])
    assert [r["memorized_count"] for r in a["runs"]] == [r["memorized_count"] for r in b["runs"]]
    rc, out, err = run(capsys, *args, "--vary", "h", "--format", "json")
    assert rc == 0 and json.loads(out)["vary"] == "heads", err


def test_seeds_report_mean_and_spread(capsys):
    args = [a for a in GRID if a not in ("--seed", "2")]
    rc, out, err = run(capsys, *args, "--seeds", "0-2", "--format", "json")
    assert rc == 0, err
    doc = strict_json(out)
    assert doc["seeds"] == [0, 1, 2] and len(doc["runs"]) == 2 * 3
    for row in doc["summary"]:
        assert row["seeds"] == 3 and row["low"] <= row["mean"] <= row["high"]


def test_memorize_as_one_process_imports_no_distributed_training_packages():
    """torch's optimiser imports torch._dynamo on first use, and FSDP with it: ``mhaaudit memorize`` run as one
    process leaves FSDP and the distributed tensor package out, and imports no transformers."""
    import os
    import subprocess

    from mhaaudit.imports import BLOCKED

    script = (
        "import atexit, json, sys\n"
        "def _bye():\n"
        "    mods = sorted(m for m in sys.modules if m.startswith('torch.distributed.'))\n"
        "    print(json.dumps({'dist': mods, 'dynamo': 'torch._dynamo' in sys.modules,"
        " 'transformers': 'transformers' in sys.modules}), file=sys.stderr)\n"
        "atexit.register(_bye)\n"
        "from mhaaudit.cli.app import run\n"
        "run(sys.argv[1:])\n"
    )
    args = ["memorize", "--heads", "1", "--n", "4", "--head-dim", "4", "--sizes", "24", "--max-steps", "2"]
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    p = subprocess.run(
        [sys.executable, "-c", script, *args, "--format", "json"], capture_output=True, text=True, env=env, timeout=600
    )
    assert p.returncode == 0, p.stderr[-2000:]
    seen = json.loads(p.stderr.strip().splitlines()[-1])
    assert seen["dynamo"]  # the optimiser did import torch._dynamo
    assert not [m for m in seen["dist"] if m.startswith(BLOCKED)], seen["dist"]
    assert not seen["transformers"]


def test_windows_on_several_threads_block_until_the_last_closes(monkeypatch):
    """The light-imports windows of several threads at once (memorize's groups): the blocked packages cannot be
    imported while any is open, can be once all are closed, and the finder is never taken out of sys.meta_path
    (taking it out while another thread imports can make that import skip a finder)."""
    import importlib
    import threading

    from mhaaudit import imports

    monkeypatch.setattr(imports, "LIGHT", True)
    monkeypatch.setattr(imports, "_applies", lambda: True)
    name = imports.BLOCKED[0] + ".no_such_module_here"
    opened, release = threading.Event(), threading.Event()

    def other():
        with imports.light(transformers=False):
            opened.set()
            release.wait(30)

    t = threading.Thread(target=other)
    t.start()
    assert opened.wait(30)
    with (
        imports.light(transformers=False),
        pytest.raises(ModuleNotFoundError, match="not imported by a single-process run"),
    ):
        importlib.import_module(name)
    with pytest.raises(ModuleNotFoundError, match="not imported by a single-process run"):
        importlib.import_module(name)  # the other thread's window is still open
    release.set()
    t.join(30)
    with pytest.raises(ModuleNotFoundError) as err:
        importlib.import_module(name)  # not blocked now: the ordinary answer for a module that does not exist
    assert "single-process" not in str(err.value)
    assert sum(f is imports._FINDER for f in sys.meta_path) == 1


@pytest.mark.parametrize(
    "option, value, says",
    [
        ("--epochs", str(2**62), "the largest --epochs that fits is 2305843009213693951"),
        ("--epochs", str(10**30), "the largest --epochs that fits is 2305843009213693951"),
        ("--max-steps", str(2**63), "--max-steps must be at most 9223372036854775807"),
    ],
)
def test_steps_beyond_what_a_record_counts_are_refused_before_any_work(capsys, monkeypatch, option, value, says):
    """A plan of more steps than a record's 64-bit count is one line and exit 2, naming the largest value
    that fits, before any point is trained (T = 1000, batch 256: 4 steps an epoch)."""
    from mhaaudit.memorize import grid as grid_mod

    monkeypatch.setattr(grid_mod, "train_group", lambda *a, **k: pytest.fail("trained"))
    rc, out, err = run(capsys, "memorize", "--heads", "1", "--sizes", "1000", option, value, "--device", "cpu")
    assert_one_error(rc, err, says)
    assert out == ""


@pytest.mark.parametrize(
    "args, named",
    [
        ("memorize --heads 100000000", "--heads"),
        ("memorize --heads 1,100000000", "--heads"),
        ("memorize --vary heads --heads 100000000", "--heads"),
        ("memorize --vary heads --values 1,100000000", "--values"),
        ("memorize --vary h --values 100000000", "--values"),
        ("memorize --vary n --values 100000000", "--values"),
        ("memorize --n 1,100000000", "--n"),
        ("reproduce figure2 --values 100000000", "--values"),
    ],
)
def test_a_point_too_large_for_memory_names_the_option_its_value_was_given_to(capsys, monkeypatch, args, named):
    """The refusal of a point the device cannot hold names the largest value that fits of the option the
    user gave: --values where the varied parameter's values came from it (reproduce has no --heads)."""
    from mhaaudit.memorize import grid as grid_mod

    monkeypatch.setattr(grid_mod, "train_group", lambda *a, **k: pytest.fail("trained"))
    rc, out, err = run(capsys, *args.split(), "--sizes", "16", "--max-steps", "1", "--device", "cpu")
    line = assert_one_error(rc, err, f"the largest {named} that fits is ")
    assert line.count(" --") == 1 and out == ""


def test_a_diverged_training_is_said_in_the_table_and_the_json(capsys, monkeypatch):
    """--lr 1e300: the final loss is NaN; the table marks it and says why in a note, the JSON has the note and
    diverged = true on the run (its final_loss null), and no example counts as memorised."""
    monkeypatch.setenv("COLUMNS", "200")  # one line a row, whatever the terminal
    args = [*GRID, "--lr", "1e300", "--device", "cpu"]
    rc, out, err = run(capsys, *args)
    assert rc == 0, err
    flat = " ".join(out.split())
    assert flat.count("nan (diverged)") == 2 and flat.count("note: H=") == 2 and "the training diverged" in flat
    rc, out, err = run(capsys, *args, "--format", "json")
    doc = strict_json(out)
    assert [(r["diverged"], r["final_loss"], r["memorized_count"]) for r in doc["runs"]] == [(True, None, 0)] * 2
    assert len(doc["notes"]) == 2 and all("diverged" in n for n in doc["notes"])


def test_two_values_of_h_give_no_r2_and_say_why(capsys, monkeypatch):
    """A line through two values of H has R^2 = 1 whatever the counts: the fit table gives none, and says why,
    and so does the JSON (fits empty, fit_gaps with the reason), where R^2 1.0000 was printed as a fit."""
    monkeypatch.setenv("COLUMNS", "200")
    rc, out, err = run(capsys, *GRID, "--device", "cpu")
    assert rc == 0, err
    flat = " ".join(out.split())
    assert "│ none: 2 values of H: too few to test a line │ 2 │ 1,2 │" in flat
    assert "(R^2 = 1 by construction)" in flat and "1.0000" not in flat
    rc, out, err = run(capsys, *GRID, "--device", "cpu", "--format", "json")
    doc = strict_json(out)
    assert doc["fits"] == [] and doc["fit_gaps"] == [
        {"size": 16, "points": 2, "xs": [1, 2], "reason": "2 values of H: too few to test a line"}
    ]
    from mhaaudit.memorize import MemorizeGrid

    back = MemorizeGrid.from_json(out)
    assert back.fits == () and [g.to_dict() for g in back.fit_gaps] == doc["fit_gaps"]


def test_a_flat_fit_says_why_it_has_no_r2(capsys, monkeypatch):
    """Counts all equal (0 of 16 at H = 1, 2, 3): the line is flat and R^2 is 0/0. The table printed "nan" in the
    R^2 column and the JSON null, with no word of why; both now say it in a note, the table in the column too."""
    from dataclasses import replace

    from mhaaudit.memorize import grid as grid_mod

    train_group = grid_mod.train_group
    monkeypatch.setattr(
        grid_mod,
        "train_group",
        lambda *a, **k: [replace(r, memorized=0.0, memorized_count=0) for r in train_group(*a, **k)],
    )
    monkeypatch.setenv("COLUMNS", "250")
    args = [*GRID[:4], "1,2,3", *GRID[5:], "--device", "cpu"]
    rc, out, err = run(capsys, *args)
    assert rc == 0, err
    flat = " ".join(out.split())
    assert "│ 16 │ 0.00 │ 0.00 │ undefined (equal counts) │ 3 │ 1,2,3 │" in flat and "nan" not in flat
    note = "T=16: the count memorised is 0 at every point fitted (H in 1,2,3): the line is flat (slope 0) and R^2 is"
    assert f"note: {note}" in flat
    rc, out, err = run(capsys, *args, "--format", "json")
    doc = strict_json(out)
    assert [f["r2"] for f in doc["fits"]] == [None] and len(doc["notes"]) == 1 and doc["notes"][0].startswith(note)


def test_a_plot_of_a_grid_that_varies_nothing_is_against_the_sizes(capsys, monkeypatch, tmp_path):
    """With nothing varied, --plot put every size at x = 0 on an axis named "setting" with ticks from -0.04 to
    0.04; it is now one line of the memorised fraction against T, as the table gives it."""
    import mhaaudit.plot as plot_mod

    drawn = {}
    save = plot_mod.save_figure
    monkeypatch.setattr(
        plot_mod, "save_figure", lambda fig, path: drawn.setdefault("ax", fig.axes[0]) and save(fig, path)
    )
    args = ["memorize", "--n", "4", "--head-dim", "8", "--sizes", "16,8", "--max-steps", "3", "--device", "cpu"]
    rc, out, err = run(capsys, *args, "--plot", str(tmp_path / "p.png"), "--format", "json")
    assert rc == 0 and (tmp_path / "p.png").is_file(), err
    doc = strict_json(out)
    (line,) = drawn["ax"].get_lines()
    assert list(line.get_xdata()) == [8, 16] and drawn["ax"].get_xlabel() == "training-set size T"
    by_size = {r["size"]: r["memorized"] for r in doc["runs"]}
    assert list(line.get_ydata()) == [by_size[8], by_size[16]]


def test_what_is_this_tools_choice_is_said_where_it_is_used(capsys):
    """The regression criterion |error| < tolerance is this tool's (the paper compares regression by the MSE),
    said by --help and the table; the presets' T are this tool's choice and Figure 2(c) and Figure 3 were
    trained longer than the default rule, said by --help and the memorize guide."""
    from pathlib import Path

    text = help_text(capsys, "memorize")
    assert "this tool's criterion; the paper compares regression by the mean squared error" in text
    assert "the sizes T are this tool's choice" in text and "a number lost from its text" in text
    rc, out, err = run(capsys, *GRID, "--task", "regression", "--device", "cpu")
    assert rc == 0 and "this tool's criterion; the final loss is the MSE" in " ".join(out.split()), err
    guide = " ".join((Path(__file__).parents[1] / "docs" / "guides" / "memorize.md").read_text().split())
    for said in (
        "the presets' T are this tool's choice",
        "since the optimization is more challenging, we train for a total of [a number lost from the paper's text]",
        "not comparable with Figure 2(c) and Figure 3 as they stand",
        '("For regression, we use the mean squared error (MSE) loss to compare memorization abilities")',
    ):
        assert said in guide, said
