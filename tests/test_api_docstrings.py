"""The public API's docstrings can be scanned: a summary line, then one ``Args:`` line a parameter.

Every function of ``mhaaudit.__all__`` and the reading and converting methods of the result classes
open with a one-line summary, list every parameter of their signature under ``Args:`` (one line
each, no parameter the signature lacks) and say under ``Returns:`` what comes back. The signature is
read from the function itself, so a parameter added without its line fails here.
"""

from __future__ import annotations

import inspect
import re

import pytest

import mhaaudit
from mhaaudit import capacity, memorize, reproduce, seeds

FUNCTIONS = [n for n in mhaaudit.__all__ if n != "__version__" and inspect.isfunction(getattr(mhaaudit, n))]
TARGETS = ["table1", "table3", "figure1", "figure2"]  # reproduce_paper's targets, public in mhaaudit.reproduce
RESULTS = [
    mhaaudit.AuditResult,
    mhaaudit.SeriesResult,
    mhaaudit.KruskalResult,
    capacity.CapacityResult,
    memorize.MemorizeGrid,
    seeds.SeedsResult,
]
METHODS = ["from_json", "from_parquet", "to_arrow", "to_pandas", "records", "meta", "column", "save_features"]
METHODS += ["audit", "trend", "changes"]
ENTRIES = (
    [(n, getattr(mhaaudit, n)) for n in FUNCTIONS]
    + [(n, getattr(reproduce, n)) for n in TARGETS]
    + [(f"{cls.__name__}.{m}", getattr(cls, m)) for cls in RESULTS for m in METHODS if hasattr(cls, m)]
)
SUMMARY_MAX = 100


def _section(doc: str, title: str) -> str | None:
    """The body of a Google-style section ``title:`` (None when absent)."""
    m = re.search(rf"^{title}:\n((?:[ \t]+\S.*\n?|\n)+)", doc, re.MULTILINE)
    return m.group(1) if m else None


def _parameters(fn) -> list[str]:
    """The parameters a caller passes (``self`` and ``cls`` left out), ``*args``/``**kw`` with their stars."""
    star = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return [
        star.get(p.kind, "") + p.name
        for p in inspect.signature(fn).parameters.values()
        if p.name not in ("self", "cls")
    ]


def test_the_entries_are_the_whole_front_door():
    assert len(FUNCTIONS) >= 20 and "audit" in FUNCTIONS and "reproduce_paper" in FUNCTIONS
    assert len(ENTRIES) >= len(FUNCTIONS) + 25


@pytest.mark.parametrize(("name", "fn"), ENTRIES, ids=[n for n, _ in ENTRIES])
def test_a_one_line_summary_opens_the_docstring(name, fn):
    lines = (inspect.getdoc(fn) or "").splitlines()
    assert lines and lines[0].strip(), f"{name}: no summary line"
    assert len(lines) == 1 or not lines[1].strip(), f"{name}: the summary runs over one line"
    assert len(lines[0]) <= SUMMARY_MAX, f"{name}: the summary is {len(lines[0])} characters"
    assert lines[0].rstrip().endswith("."), f"{name}: the summary is not a sentence"


@pytest.mark.parametrize(("name", "fn"), ENTRIES, ids=[n for n, _ in ENTRIES])
def test_args_name_every_parameter_on_one_line_each(name, fn):
    doc = inspect.getdoc(fn) or ""
    params = _parameters(fn)
    args = _section(doc, "Args")
    if not params:
        assert args is None, f"{name}: an Args section for a function without parameters"
        return
    assert args, f"{name}: no Args section"
    entries = re.findall(r"^    (\*{0,2}\w+)(?: \([^)]*\))?:", args, re.MULTILINE)
    assert entries == params, f"{name}: Args lists {entries}, the signature {params}"
    continued = [line for line in args.splitlines() if line.startswith("     ")]
    assert not continued, f"{name}: an Args entry runs over one line: {continued[0].strip()!r}"


@pytest.mark.parametrize(("name", "fn"), ENTRIES, ids=[n for n, _ in ENTRIES])
def test_returns_says_what_comes_back(name, fn):
    annotation = inspect.signature(fn).return_annotation
    if annotation in (None, "None"):
        return
    returns = _section(inspect.getdoc(fn) or "", "Returns")
    assert returns and returns.strip(), f"{name}: no Returns section"


def test_the_rule_for_a_keyword_beside_a_request_is_linked_not_restated():
    """An entry point taking a request object links to :mod:`mhaaudit.request` once; the rule is stated there."""
    takers = [(n, fn) for n, fn in ENTRIES if {"settings", "sampling", "request"} & set(_parameters(fn))]
    assert len(takers) >= 10
    for name, fn in takers:
        doc = inspect.getdoc(fn) or ""
        assert doc.count(":mod:`mhaaudit.request`") == 1, f"{name}: link the rule of mhaaudit.request once"
        assert "must say what the object says" not in doc, f"{name}: restates the rule of mhaaudit.request"
    assert "must say what the object says" in (mhaaudit.request.__doc__ or "")
