"""Each command's ``--format json`` output keeps the keys and JSON types pinned in ``fixtures/golden``.

A golden document holds a command line and the structure of its output (the format is described
in ``fixtures/make_fixtures.py``). The command is run on the tiny models and data of
``conftest.py`` and its output is compared recursively: object keys exactly, JSON types per value
(``null`` only where the golden says so), list elements against the golden's element structures,
values of data-keyed maps against one structure. Values are not compared. A change that adds or
renames a field fails here until ``python fixtures/make_fixtures.py --golden`` is re-run.
"""

from __future__ import annotations

import json
import re

import pytest
from clitools import run
from conftest import FIXTURES, fixture_module

GOLDEN = sorted((FIXTURES / "golden").glob("*.json"))
MAKE = fixture_module("make_fixtures")
json_type = MAKE.json_type
# placeholder in a golden command line -> the conftest fixture that builds it
PLACES = {"vit": "vit_dir", "bert": "bert_dir", "images": "image_dir"}


def _short(golden) -> str:
    if isinstance(golden, str):
        return golden
    if isinstance(golden, list):
        return "list"
    if "$anyOf" in golden:
        return " or ".join(_short(g) for g in golden["$anyOf"])
    return "map" if set(golden) == {"*"} else "object"


def _best(alternatives: list, value, path: str) -> list[str]:
    """No mismatch when one alternative fits; else the mismatches of the closest one (of the
    value's own kind first: an object is compared with an object rather than with null)."""
    kind = json_type(value) if json_type(value) in ("list", "object") else "leaf"

    def distance(alt):
        lines = mismatches(alt, value, path)
        same = ("list" if isinstance(alt, list) else "leaf" if isinstance(alt, str) else "object") == kind
        return (bool(lines), not same, len(lines)), lines

    return min((distance(alt) for alt in alternatives), key=lambda t: t[0])[1]


def mismatches(golden, value, path: str = "") -> list[str]:
    """Where ``value`` (parsed JSON) departs from the golden structure, one line per difference."""
    where = path or "(top level)"
    if isinstance(golden, str):
        allowed = set(golden.split("|"))
        got = json_type(value)
        if "any" in allowed or got in allowed or (got == "integer" and "number" in allowed):
            return []
        return [f"{where}: expected {golden}, got {got}"]
    if isinstance(golden, list):
        if not isinstance(value, list):
            return [f"{where}: expected a list, got {json_type(value)}"]
        counts: dict[str, int] = {}
        for item in value:
            for line in _best(golden, item, f"{path}[]"):
                counts[line] = counts.get(line, 0) + 1
        return [line if n == 1 else f"{line} (in {n} elements)" for line, n in counts.items()]
    if "$anyOf" in golden:
        return _best(golden["$anyOf"], value, path)
    if not isinstance(value, dict):
        return [f"{where}: expected an object, got {json_type(value)}"]
    prefix = f"{path}." if path else ""
    if set(golden) == {"*"}:
        return [line for k, v in value.items() for line in mismatches(golden["*"], v, f"{prefix}{k}")]
    out = [f"{prefix}{k}: missing (the golden has {_short(golden[k])})" for k in golden if k not in value]
    out += [f"{prefix}{k}: not in the golden document (got {json_type(value[k])})" for k in value if k not in golden]
    for k in golden:
        if k in value:
            out += mismatches(golden[k], value[k], f"{prefix}{k}")
    return out


# --------------------------------------------------------------------------- the commands


def test_every_command_has_a_golden_document():
    assert {p.stem.split("-")[0] for p in GOLDEN} >= {"check", "kruskal", "capacity", "memorize"}


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_json_output_has_the_golden_structure(path, request, capsys):
    golden = json.loads(path.read_text())
    argv = golden["argv"]
    names = set(re.findall(r"\{(\w+)\}", " ".join(argv)))
    places = {name: str(request.getfixturevalue(PLACES[name])) for name in names - {"matrices"}}
    places["matrices"] = str(FIXTURES / "matrices")
    rc, out, err = run(capsys, *[a.format(**places) for a in argv])
    assert rc == 0, err
    problems = mismatches(golden["structure"], json.loads(out))
    if problems:
        pytest.fail(
            f"`mhaaudit {' '.join(argv)}` no longer has the structure in fixtures/golden/{path.name}:\n  "
            + "\n  ".join(problems)
            + "\nIf the change is intended, regenerate: python fixtures/make_fixtures.py --golden",
            pytrace=False,
        )


# --------------------------------------------------------------------------- the comparison itself

DOC = {
    "meta": {"seed": 0, "n": None, "versions": {"torch": "2.0", "numpy": "2.1"}, "notes": []},
    "records": [
        {"check": "assumption_1", "k": 3, "fraction": 1.0, "witness": [0, 4], "rank_histogram": {"3": 10}},
        {"check": "assumption_2", "k": 3, "fraction": 0.5, "witness": [], "rank_histogram": {}, "min_margin": 0.1},
    ],
    "sweep": {"estimate": 2, "witness": None},
}


def test_a_document_matches_its_own_structure():
    golden = MAKE.structure(DOC)
    assert mismatches(golden, DOC) == []
    assert golden["meta"]["versions"] == {"*": "string"} and golden["records"][0]["rank_histogram"] == {"*": "integer"}
    assert golden["records"][0]["witness"] == ["integer"]  # an empty list elsewhere pins nothing
    assert len(golden["records"]) == 2  # two element structures: the assumption 2 record has min_margin


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda d: d["meta"].update(extra=1), "meta.extra: not in the golden document (got integer)"),
        (lambda d: d["meta"].pop("seed"), "meta.seed: missing (the golden has integer)"),
        (lambda d: d["meta"].update(seed="0"), "meta.seed: expected integer, got string"),
        (lambda d: d["meta"].update(seed=None), "meta.seed: expected integer, got null"),
        (lambda d: d["meta"].update(n=3), "meta.n: expected null, got integer"),
        (lambda d: d["meta"]["versions"].update(timm=2), "meta.versions.timm: expected string, got integer"),
        (lambda d: d["records"][0].update(k=3.0), "records[].k: expected integer, got number"),
        (lambda d: d["records"][0]["witness"].append("x"), "records[].witness[]: expected integer, got string"),
        (lambda d: d["records"].append({"check": "x"}), "records[].k: missing (the golden has integer)"),
        (lambda d: d.update(sweep=[]), "sweep: expected an object, got list"),
    ],
)
def test_every_kind_of_change_is_reported(change, expected):
    golden = MAKE.structure(DOC)
    doc = json.loads(json.dumps(DOC))
    change(doc)
    assert expected in mismatches(golden, doc)


def test_unions_and_numbers():
    assert mismatches("integer|null", None) == [] and mismatches("integer|null", 3) == []
    assert mismatches("number", 3) == []  # JSON numbers include integers
    assert mismatches("integer", 3.5) == ["(top level): expected integer, got number"]
    assert mismatches({"$anyOf": ["null", {"a": "integer"}]}, {"a": 1}) == []
    assert mismatches({"$anyOf": ["null", {"a": "integer"}]}, {"a": "x"}) == ["a: expected integer, got string"]
    assert mismatches(["any"], [1, "x", None]) == [] and mismatches({"*": "any"}, {"a": [1]}) == []


def test_the_schema_page_names_the_columns_each_json_record_leaves_out():
    """``docs/reference/schema.md`` says which columns each kind of JSON record leaves out; the pinned records of
    ``check --format json`` leave out exactly those, and a file's rows (the columns of ``check``) hold them all."""
    from mhaaudit.tables import COLUMNS

    records = json.loads((FIXTURES / "golden" / "check-image.json").read_text())["structure"]["records"]
    a2 = next(r for r in records if "min_margin" in r)
    test = next(r for r in records if "min_margin" not in r)
    page = (FIXTURES.parent / "docs" / "reference" / "schema.md").read_text()
    said = " ".join(page.split("A JSON record holds the columns of its own kind:")[1].split("\n\n")[0].split())
    on_tests, on_a2 = said.split(", and Assumption 2's record leaves out")
    named = lambda text: set(re.findall(r"`(\w+)`", text))  # noqa: E731
    every = set(test) | set(a2)
    assert named(on_tests) == every - set(test) == {"min_margin"}
    assert named(on_a2) == every - set(a2)
    assert every <= {c.name for c in COLUMNS["check"]}
