"""Results know everything they show: each command's JSON and parquet outputs give back the result
object they were made from (``from_json`` / ``from_parquet``), equal field by field, whose report
is the same bytes the command printed; and ``--format json`` carries every number the table prints.

The lossless encoding itself (:func:`mhaaudit.documents.encode_result` / ``decode_result``) is
checked on the kinds of value results hold.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass, field
from enum import Enum

import pytest
from clitools import run
from conftest import FIXTURES, strict_json

from mhaaudit.auditing import AuditResult, Note, NoteKind, add_note
from mhaaudit.capacity import CapacityColumn, CapacityResult
from mhaaudit.cli.names import with_flags
from mhaaudit.documents import decode_result, encode_result
from mhaaudit.errors import InputError
from mhaaudit.facts import BatchChoice
from mhaaudit.kruskal import KruskalResult
from mhaaudit.render import capacity_report, print_report, render_audit, render_kruskal

CHECK = ["--limit", "40", "--samples", "50", "--batch-size", "8", "--device", "cpu"]
CAPACITY = ["--limit", "30", "--samples", "50", "--batch-size", "8", "--device", "cpu"]
KRUSKAL = ["--samples", "300", "--device", "cpu"]

# command -> (its result class, how the command renders a result it wrote to --out)
COMMANDS = {
    "check": (AuditResult, lambda r, out: render_audit(r, out=out)),
    # as the command renders it: its flags where a line it makes names a parameter
    "capacity": (CapacityResult, lambda r, out: print_report(with_flags(capacity_report(r, out=out)))),
    "kruskal": (KruskalResult, lambda r, out: render_kruskal(r)),
}


@pytest.fixture
def argv(request, vit_dir, bert_dir, image_dir):
    """The command lines of each case, with the tiny fixtures put in."""
    matrices = FIXTURES / "matrices" / "subspaces.npy"
    cases = {
        "check-image": ["check", vit_dir, "--data", image_dir, "--sweep", *CHECK],
        "check-text": [
            "check",
            bert_dir,
            "--context-length",
            "16",
            "--limit",
            "30",
            "--samples",
            "50",
            "--batch-size",
            "8",
            "--device",
            "cpu",
        ],
        "check-depth": [
            "check",
            bert_dir,
            "--context-length",
            "16",
            "--layers",
            "0-2",
            "--limit",
            "30",
            "--samples",
            "50",
            "--batch-size",
            "8",
            "--device",
            "cpu",
        ],
        "capacity-image": ["capacity", vit_dir, "--data", image_dir, *CAPACITY],
        "kruskal-k": ["kruskal", matrices, "--k", "3", "--k", "4", "--n", "4", *KRUSKAL],
        "kruskal-sweep": ["kruskal", matrices, "--sweep", "--n", "4", *KRUSKAL],
    }
    return [str(a) for a in cases[request.param]]


CASES = ["check-image", "check-text", "check-depth", "capacity-image", "kruskal-k", "kruskal-sweep"]


def rendered(capsys, render) -> str:
    capsys.readouterr()
    render()
    return capsys.readouterr().out


@pytest.mark.parametrize("argv", CASES, indirect=True)
def test_the_table_is_rendered_again_from_the_parquet_file(argv, tmp_path, capsys):
    cls, render = COMMANDS[argv[0]]
    out = tmp_path / "r.parquet"
    rc, table, err = run(capsys, *argv, "--out", out)
    assert rc == 0, err
    back = cls.from_parquet(out)
    assert isinstance(back, cls)
    again = rendered(capsys, lambda: render(back, out))
    assert again == table  # the same bytes as the command printed


@pytest.mark.parametrize("argv", CASES, indirect=True)
def test_json_and_parquet_give_back_the_same_result(argv, tmp_path, capsys):
    cls, render = COMMANDS[argv[0]]
    out = tmp_path / "r.parquet"
    rc, text, err = run(capsys, *argv, "--format", "json", "--out", out)
    assert rc == 0, err
    doc = strict_json(text)
    a, b = cls.from_json(doc), cls.from_parquet(out)
    assert a == b and encode_result(a) == encode_result(b) == doc["meta"]["result"]
    assert cls.from_json(text) == a  # the JSON text, as well as the parsed document
    if cls is CapacityResult:  # the batch of each column reads back as the record it was
        assert all(c.batch == BatchChoice(8, 8, "given") for c in a.columns)
    # The object read back writes the same records and result again.
    assert json.loads(json.dumps(a.records() if hasattr(a, "records") else a.table_records())) == doc["records"]
    assert rendered(capsys, lambda: render(a, None)) == rendered(capsys, lambda: render(b, None))


def test_the_audit_result_is_equal_after_the_round_trip(vit_dir, image_dir, tmp_path, capsys):
    from mhaaudit.auditing import audit
    from mhaaudit.io import write_parquet
    from mhaaudit.render import print_json

    r = audit(str(vit_dir), data=str(image_dir), limit=40, samples=50, batch_size=8, device="cpu", sweep=True)
    capsys.readouterr()
    print_json({"meta": r.meta(), "records": r.records(), "sweep": r.sweep_rows()})
    back = AuditResult.from_json(capsys.readouterr().out)
    assert back == r and encode_result(back) == encode_result(r)
    assert back.columns[0].features is None and r.columns[0].features is not None  # the tensors are not stored
    write_parquet(r.table_records(), tmp_path / "a.parquet", r.meta())
    assert AuditResult.from_parquet(tmp_path / "a.parquet") == r
    assert str(back) == str(r) and back.records() == r.records()
    # The bound the report prints is the column's own, and in the JSON meta.
    col = next(c for c in r.columns if c.bound is not None)
    assert col.bound.count is None or f"{col.probe.variant}: {col.bound.count} examples" in str(r)
    assert r.meta()["columns"][col.probe.variant]["bound"] == col.bound.to_dict()


def test_a_file_of_another_command_or_without_a_result_is_refused(tmp_path, capsys):
    matrices = FIXTURES / "matrices" / "subspaces.npy"
    rc, text, err = run(capsys, "kruskal", matrices, "--k", "3", *KRUSKAL, "--format", "json")
    assert rc == 0, err
    doc = json.loads(text)
    with pytest.raises(InputError, match="not of 'check'"):
        AuditResult.from_json(doc)
    del doc["meta"]["result"]
    with pytest.raises(InputError, match="holds no KruskalResult"):
        KruskalResult.from_json(doc)
    with pytest.raises(InputError, match="not a JSON document"):
        KruskalResult.from_json("{not json")
    with pytest.raises(InputError, match="cannot read it"):
        KruskalResult.from_json(tmp_path / "missing.json")
    (tmp_path / "x.parquet").write_bytes(b"not parquet")
    with pytest.raises(InputError, match="not a readable parquet file"):
        KruskalResult.from_parquet(tmp_path / "x.parquet")
    with pytest.raises(InputError, match="holds no AuditResult"):  # a file of an older version
        AuditResult.from_parquet(FIXTURES / "results" / "check-v0.parquet")
    doc = json.loads(text)
    doc["meta"]["result"]["tests"][0]["k"] = "three"
    with pytest.raises(InputError, match=r"result\.tests\[\]\.k: expected an integer"):
        KruskalResult.from_json(doc)
    doc = json.loads(text)
    doc["meta"]["result"]["planted"] = 1
    with pytest.raises(InputError, match="has no field planted"):
        KruskalResult.from_json(doc)


# --------------------------------------------------------------------------- every number the table prints

NUMBER = re.compile(r"(?<![A-Za-z_.\d])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")
# The one number of the report's wording that is no fact of the run: the level of the intervals
# ("95% CI", "95% Clopper-Pearson intervals"), fixed for every run and named by the columns' meanings.
WORDING = re.compile(r"95%")


def json_numbers(doc) -> list[float]:
    """Every number of a JSON document: its values, and the numbers written in its strings and keys."""
    out: list[float] = []

    def walk(v):
        if isinstance(v, bool) or v is None:
            return
        if isinstance(v, (int, float)):
            out.append(float(v))
        elif isinstance(v, str):
            out.extend(float(x) for x in NUMBER.findall(v))
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(k)
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(doc)
    return out


def shown_as(token: str, value: float) -> bool:
    """Whether ``value`` prints as ``token`` in a report (to the token's decimals or significant digits)."""
    x = float(token)
    if "e" in token:
        digits = len(token.split("e")[0].replace("-", "").replace(".", "").lstrip("0")) or 1
        return math.isclose(float(f"{value:.{digits}g}"), x, rel_tol=1e-9)
    decimals = len(token.split(".")[1]) if "." in token else 0
    return math.isclose(round(value, decimals), x, rel_tol=1e-12, abs_tol=10 ** -(decimals + 3))


@pytest.mark.parametrize(
    "argv", ["check-image", "check-text", "capacity-image", "kruskal-k", "kruskal-sweep"], indirect=True
)
def test_json_carries_every_number_the_table_prints(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # wide enough that no cell folds a number in two
    cls, render = COMMANDS[argv[0]]
    out = tmp_path / "r.parquet"
    rc, text, err = run(capsys, *argv, "--format", "json", "--out", out)
    assert rc == 0, err
    doc = strict_json(text)
    visible = {k: v for k, v in doc["meta"].items() if k != "result"}  # not the stored object: what readers read
    numbers = json_numbers({"meta": visible, "records": doc["records"], "sweep": doc.get("sweep")})
    table = rendered(capsys, lambda: render(cls.from_json(doc), None))  # the table of this very run (see above)
    missing = sorted(
        {t for t in NUMBER.findall(WORDING.sub("", table)) if not any(shown_as(t, v) for v in numbers)}, key=float
    )
    assert missing == [], f"numbers the table prints that the JSON lacks: {missing}"


def test_the_memorisation_bound_the_check_table_prints_is_in_the_json(vit_dir, image_dir, capsys):
    rc, text, err = run(capsys, "check", vit_dir, "--data", image_dir, "--sweep", *CHECK, "--format", "json")
    assert rc == 0, err
    doc = strict_json(text)
    table = rendered(capsys, lambda: render_audit(AuditResult.from_json(doc)))
    lines = table[table.index("Memorisation bound") :]
    for variant, col in doc["meta"]["columns"].items():
        b = col["bound"]
        assert b is not None and b["heads"] == doc["meta"]["model_info"]["num_heads"]
        if b["applies"]:
            assert f"{variant}: {b['count']} examples" in " ".join(lines.split())
            assert b["formula"].split(" = ")[-1] == str(b["count"])


# --------------------------------------------------------------------------- the encoding, and notes


class Colour(str, Enum):
    red = "red"


@dataclass(frozen=True)
class Inner:
    xs: tuple[int, ...]
    pair: tuple[str, float]


@dataclass
class Outer:
    hist: dict[int, int]
    inner: Inner | None
    items: list[Inner]
    colour: Colour
    value: float
    maybe: int | None = None
    notes: list[Note] = field(default_factory=list)
    hidden: object = field(default=None, compare=False, metadata={"document": False})


def test_encoding_is_lossless_and_strict_json():
    o = Outer(
        {3: 10, 1: 2},
        Inner((1, 2), ("a", 0.1 + 0.2)),
        [Inner((), ("b", -0.0))],
        Colour.red,
        float("inf"),
        notes=[Note("n > d", NoteKind.N_ABOVE_D)],
        hidden=object(),
    )
    data = encode_result(o)
    text = json.dumps(data, allow_nan=False)  # strict JSON: the infinity is a string
    back = decode_result(Outer, json.loads(text))
    assert back == o and back.hidden is None and back.value == float("inf")
    assert back.inner.pair[1] == 0.1 + 0.2 and back.notes[0].kind is NoteKind.N_ABOVE_D
    nan = decode_result(Outer, {**data, "value": "nan"})
    assert math.isnan(nan.value)
    with pytest.raises(ValueError, match=r"result\.inner\.xs\[\]: expected an integer"):
        decode_result(Outer, {**data, "inner": {"xs": [1.5], "pair": ["a", 1.0]}})
    with pytest.raises(ValueError, match="lacks colour"):
        decode_result(Outer, {k: v for k, v in data.items() if k != "colour"})


def test_a_capacity_column_stores_its_batch_as_its_fields_and_none_as_an_empty_object():
    ran = CapacityColumn("random", batch=BatchChoice(16, "auto", "largest that fits"))
    off = CapacityColumn("trained", status="unavailable", reason="offline")
    assert encode_result(ran)["batch"] == {"size": 16, "asked": "auto", "how": "largest that fits"}
    assert encode_result(off)["batch"] == {}  # as the column's dict was when it did not run
    assert decode_result(CapacityColumn, encode_result(ran)) == ran
    assert decode_result(CapacityColumn, encode_result(off)) == off and off.batch is None
    given = CapacityColumn("random", batch=BatchChoice(8, 8, "given"))
    assert decode_result(CapacityColumn, json.loads(json.dumps(encode_result(given)))).batch.asked == 8


def test_notes_are_kept_once_by_kind_and_text():
    notes: list = []
    assert add_note(notes, "n = 20 > d = 16: Assumption 1 cannot hold", NoteKind.N_ABOVE_D) is not None
    assert add_note(notes, "n = 24 > d = 16: Assumption 1 cannot hold (trained)", NoteKind.N_ABOVE_D) is None
    assert add_note(notes, "tokenizer: x") is not None and add_note(notes, "tokenizer: x") is None
    assert add_note(notes, "duplicate inputs: 2", NoteKind.DUPLICATE_INPUTS) is not None
    assert add_note(notes, "duplicate inputs: 2", NoteKind.DUPLICATE_INPUTS) is None
    assert [n.kind for n in notes] == [NoteKind.N_ABOVE_D, NoteKind.DATA, NoteKind.DUPLICATE_INPUTS]
    assert notes[1] == "tokenizer: x" and json.dumps(notes[1]) == '"tokenizer: x"'  # a note is its text


def test_every_result_has_one_record_shape():
    """Both kinds of check result answer ``record()`` with no argument and the same table's columns."""
    import inspect

    from mhaaudit.checks import ContextRankResult
    from mhaaudit.kruskal import SubsetTest
    from mhaaudit.tables import TEST_COLUMNS

    names = {c.name for c in TEST_COLUMNS}
    for cls in (SubsetTest, ContextRankResult):
        assert list(inspect.signature(cls.record).parameters) == ["self"]
    import torch

    from mhaaudit.checks import assumption_2
    from mhaaudit.kruskal import subset_test

    for r in (assumption_2(torch.randn(6, 3, 5, dtype=torch.float64)), subset_test(torch.randn(8, 4), 3, samples=20)):
        assert set(r.record()) <= names


def test_the_memorize_grid_is_equal_after_the_round_trip(tmp_path, capsys):
    from mhaaudit.io import parquet_bytes
    from mhaaudit.memorize import run_memorize_grid
    from mhaaudit.memorize.results import GridSettings, MemorizeGrid
    from mhaaudit.render import print_json, render_memorize

    grid = run_memorize_grid(
        vary="heads", values=[1, 2], n=3, head_dim=4, sizes=[12], max_steps=5, saturation=True, device="cpu"
    )
    capsys.readouterr()
    print_json(grid.to_dict())  # what --format json prints
    text = capsys.readouterr().out
    (tmp_path / "g.parquet").write_bytes(parquet_bytes(grid.table_records(), grid.meta()))  # --format parquet
    for back in (
        MemorizeGrid.from_json(text),
        MemorizeGrid.from_json(json.loads(text)),
        MemorizeGrid.from_parquet(tmp_path / "g.parquet"),
    ):
        assert back == grid and back.runs[0].saturation == grid.runs[0].saturation is not None
        assert isinstance(back.settings, GridSettings) and back.settings.seeds == (0,) and back.settings.n == 3
        assert rendered(capsys, lambda b=back: render_memorize(b)) == rendered(capsys, lambda: render_memorize(grid))
    with pytest.raises(InputError, match="not of 'kruskal'"):
        KruskalResult.from_json({"meta": {"command": "memorize", "result": {}}})
    with pytest.raises(InputError, match="not a memorize grid"):
        MemorizeGrid.from_json({"meta": {"command": "check"}, "records": []})


@functools.cache
def _saturation_grid():
    """A tiny grid of two points with their saturation, trained once for the tests that edit its documents."""
    from mhaaudit.memorize import run_memorize_grid

    return run_memorize_grid(
        vary="heads", values=[1, 2], n=3, head_dim=4, sizes=[12], max_steps=5, saturation=True, device="cpu"
    )


@pytest.mark.parametrize(
    "edit, says",
    [
        (dict(memorized_count=13), "memorized_count = 13 of T = 12 examples"),
        (dict(memorized=1.5), "memorized = 1.5, not its count"),
        (dict(final_loss=None), "diverged = False with final_loss = nan"),
        (dict(final_loss=-1.0), "final_loss = -1.0, below 0"),
        (dict(steps_run=999), "steps_run = 999, above its 5 planned steps"),
        (dict(seconds=-1.0), "seconds = -1.0"),
        (dict(size=0), "size = 0, below 1"),
        (dict(saturation={"histogram": [12, 1]}), "does not count its T = 12 examples once each"),
        (dict(saturation={"examples": 99}), "a saturation summary of H = 1 heads over 99 examples, not its H and T"),
        (dict(memorized_count="12.5"), "expected an integer, got '12.5'"),
        (dict(memorized_count=12.5), "expected an integer, got 12.5"),
        (dict(stray=1), "has no field stray"),
    ],
)
def test_a_memorize_grid_is_held_to_what_training_writes_as_its_results_file_is(tmp_path, capsys, edit, says):
    """A grid's JSON (or parquet) output whose run says what no training writes (a count above T, a fraction other
    than the count over T, a loss not finite without diverged, steps beyond its plan, a saturation histogram of
    other than its T examples) was read back as it stood, where the results file of ``--out`` refuses such a row:
    from_json and from_parquet refuse it with the same words, naming the run."""
    from mhaaudit.io import parquet_bytes
    from mhaaudit.memorize.results import MemorizeGrid
    from mhaaudit.render import print_json

    grid = _saturation_grid()
    capsys.readouterr()
    print_json(grid.to_dict())
    doc = json.loads(capsys.readouterr().out)
    run = doc["runs"][0]
    assert (run["heads"], run["size"], run["planned_steps"], run["diverged"]) == (1, 12, 5, False)
    for key, value in edit.items():
        run[key] = run[key] | value if key == "saturation" else value
    with pytest.raises(InputError, match="the JSON document: ") as caught:
        MemorizeGrid.from_json(doc)
    assert says in str(caught.value)
    if "expected" not in says and "no field" not in says:  # the words of the run, as the results file says them
        assert "not a grid as memorize writes it: its run of H = 1, n = 3, d_h = 4, T = " in str(caught.value)
    if "expected" not in says and set(edit) <= {"memorized_count", "memorized", "steps_run", "seconds"}:
        rows = grid.table_records()  # as --format parquet holds them
        (tmp_path / "g.parquet").write_bytes(parquet_bytes([rows[0] | edit, *rows[1:]], grid.meta()))
        with pytest.raises(
            InputError, match=r"g\.parquet: not a grid as memorize writes it: its run of H = 1"
        ) as caught:
            MemorizeGrid.from_parquet(tmp_path / "g.parquet")
        assert says in str(caught.value)


def test_a_memorize_grid_with_non_finite_numbers_reads_back_from_its_json(capsys):
    """r2 is NaN when every count fitted is the same, and a diverged run's loss is not finite;
    --format json writes them as null, and the grid still reads back, with NaN in their place.
    Elsewhere a null where a number is due is still refused."""
    import dataclasses
    import math

    from mhaaudit.documents import decode_result
    from mhaaudit.memorize import run_memorize_grid
    from mhaaudit.memorize.results import LinearFit, MemorizeGrid, fit_line
    from mhaaudit.render import print_json

    fit = fit_line([1, 2, 4], [5.0, 5.0, 5.0], size=8)
    assert fit is not None and math.isnan(fit.r2)
    grid = run_memorize_grid(vary="heads", values=[1, 2], n=3, head_dim=4, sizes=[12], max_steps=2, device="cpu")
    diverged = dataclasses.replace(grid.runs[0], final_loss=float("inf"), diverged=True)
    grid = dataclasses.replace(grid, fits=(fit,), runs=(diverged, *grid.runs[1:]))
    capsys.readouterr()
    print_json(grid.to_dict())
    text = capsys.readouterr().out
    written = json.loads(text)
    assert written["fits"][0]["r2"] is None and written["runs"][0]["final_loss"] is None
    back = MemorizeGrid.from_json(text)
    assert math.isnan(back.fits[0].r2) and math.isnan(back.runs[0].final_loss)
    assert (back.fits[0].slope, back.fits[0].xs) == (fit.slope, fit.xs) and back.runs[1:] == grid.runs[1:]
    with pytest.raises(ValueError, match="r2"):
        decode_result(LinearFit, written["fits"][0] | {"r2": "high"})
    with pytest.raises(ValueError, match="r2"):
        decode_result(LinearFit, written["fits"][0])


def _old_names(value):
    """A result document as an older version wrote it: each test's set_rank_ceiling named set_rank."""
    if isinstance(value, dict):
        return {("set_rank" if k == "set_rank_ceiling" else k): _old_names(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_old_names(v) for v in value]
    return value


def test_a_document_with_the_old_name_of_the_rank_ceiling_reads_back(tmp_path, capsys, vit_dir, image_dir):
    """Files written before the record's whole-set rank ceiling was named set_rank_ceiling (it was
    set_rank, the name the meta gives the whole set's own rank) read back as the same result."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mhaaudit.io import METADATA_KEY

    matrices = FIXTURES / "matrices" / "subspaces.npy"
    for cls, argv in (
        (KruskalResult, ["kruskal", matrices, "--k", "3", "--k", "7", *KRUSKAL]),
        (AuditResult, ["check", vit_dir, "--data", image_dir, *CHECK]),
    ):
        rc, text, err = run(capsys, *argv, "--format", "json")
        assert rc == 0, err
        doc = json.loads(text)
        new = cls.from_json(doc)
        old = {"meta": _old_names(doc["meta"]), "records": _old_names(doc["records"])}
        assert '"set_rank_ceiling"' not in json.dumps(old) and '"set_rank"' in json.dumps(old["meta"]["result"])
        assert cls.from_json(old) == new
        path = tmp_path / f"{argv[0]}-old.parquet"  # the rows and the metadata as the older version wrote them
        table = pa.Table.from_pylist(old["records"]).replace_schema_metadata({METADATA_KEY: json.dumps(old["meta"])})
        pq.write_table(table, path)
        assert cls.from_parquet(path) == new
    both = json.loads(text)
    both["meta"]["result"]["columns"][0]["tests"] = _renamed_too(both["meta"]["result"]["columns"][0]["tests"])
    with pytest.raises(InputError, match="set_rank and its new name both"):
        AuditResult.from_json(both)


def _renamed_too(tests):
    """Each test holding its rank ceiling under the old name and the new one both."""

    def both(t):
        return {**t, "set_rank": t["set_rank_ceiling"]} if "set_rank_ceiling" in t else t

    return {k: both(t) for k, t in tests.items()} if isinstance(tests, dict) else [both(t) for t in tests]
