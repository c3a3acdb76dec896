"""The README and the docs site (``docs/``) are checked by the tool they describe: every Python block
runs as written, every ``mhaaudit ...`` command line is parsed by the real CLI (an example with a
renamed flag fails), every flag and library call named in running text exists, the output schema is
the one the code documents, and the results the pages state agree with the recorded run they came
from (and, in the slow tests, with a fresh run). ``tests/test_docs.py`` builds the site itself."""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import json
import re
import shlex
from pathlib import Path

import click
import pytest
import typer
from conftest import load_script

import mhaaudit
from mhaaudit.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
#: Every page of the documentation: the README (the front page) and the site's pages, but the release notes
#: (``docs/release-notes/``: the history as it was written, which names the options of its day).
PAGES = {
    p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
    for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    if "release-notes" not in p.parts
}
README = "\n\n".join(PAGES.values())  # the documentation's text, page after page
RESULTS = ROOT / "fixtures" / "readme_results.json"

_FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.M | re.S)


def fenced(lang: str | None = None) -> list[str]:
    """The documentation's fenced blocks (of one language; ``None``: all)."""
    return [body for tag, body in _FENCE.findall(README) if lang is None or tag == lang]


def page_blocks(lang: str) -> list[tuple[str, int, str]]:
    """(page, index on the page, body) of each fenced block of one language."""
    return [
        (page, i, body)
        for page, text in PAGES.items()
        for i, body in enumerate(body for tag, body in _FENCE.findall(text) if tag == lang)
    ]


def inline_spans() -> list[str]:
    """The inline code spans of the running text (fenced blocks removed)."""
    return [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", _FENCE.sub("", README))]


def section(title: str) -> str:
    """The page whose title is ``title`` (the README's former section of that name)."""
    pages = [text for text in PAGES.values() if text.startswith(f"# {title}\n")]
    assert len(pages) == 1, f"no single page titled {title!r}"
    return pages[0]


def _command() -> click.Group:
    return typer.main.get_command(app)


_SHELL_OPERATORS = {">", ">>", "2>", "<", "|", "||", "&&", ";", "&"}


def command_lines() -> list[tuple[str, list[str]]]:
    """Every ``mhaaudit COMMAND ...`` in a code block or an inline span: (the line, its arguments)."""
    commands = _command().commands
    lines = []
    for body in fenced():
        lines += [ln for ln in body.replace("\\\n", " ").splitlines()]
    lines += inline_spans()
    out = []
    for line in lines:
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            continue  # not a shell line (prose with a quote)
        for i, tok in enumerate(tokens[:-1]):
            if tok == "mhaaudit" and tokens[i + 1] in commands:
                args = tokens[i + 1 :]
                cut = next((j for j, a in enumerate(args) if a in _SHELL_OPERATORS), len(args))
                out.append((line.strip(), args[:cut]))
                break
    return out


# --------------------------------------------------------------------------- the examples run


PY_BLOCKS = fenced("python")
PY_PAGE_BLOCKS = page_blocks("python")


def test_the_readme_has_python_and_command_examples():
    assert PY_BLOCKS and len(command_lines()) >= 20
    assert len(PY_PAGE_BLOCKS) == len(PY_BLOCKS)


@pytest.mark.parametrize("page, index, block", PY_PAGE_BLOCKS, ids=[f"{page}-{i + 1}" for page, i, _ in PY_PAGE_BLOCKS])
def test_python_block_runs_as_written(page, index, block, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # files the block writes land here
    code = compile(block, f"{page} (python block {index + 1})", "exec")
    exec(code, {"__name__": "__readme__"})  # the page's own example
    out = capsys.readouterr().out
    assert out.strip(), "the block prints what it shows"


@pytest.mark.parametrize("line, args", command_lines(), ids=lambda v: v if isinstance(v, str) else None)
def test_command_line_parses(line, args):
    """Parsed by the real command (its options, types and choices), not run."""
    cmd = _command().commands[args[0]]
    try:
        with cmd.make_context(f"mhaaudit {args[0]}", list(args[1:]), resilient_parsing=False):
            pass
    except Exception as exc:  # noqa: BLE001 - click's (or typer's vendored click's) exceptions
        if type(exc).__name__ == "Exit":
            return  # --help / --version
        # an unknown or renamed flag, a bad choice or type
        pytest.fail(f"README: {line!r}: {exc.format_message() if hasattr(exc, 'format_message') else exc}")


def _all_options() -> set[str]:
    """The options of every command, and those of the scripts the README names (benchmarks, fixtures)."""
    group = _command()
    opts = {o for p in group.params for o in getattr(p, "opts", [])}
    for cmd in group.commands.values():
        for p in cmd.params:
            opts.update(o for o in p.opts + p.secondary_opts if o.startswith("-"))
    for script in [*(ROOT / "benchmarks").glob("*.py"), ROOT / "fixtures" / "make_fixtures.py"]:
        opts.update(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", script.read_text()))
    return opts


def test_every_flag_in_running_text_exists():
    """A span of running text that starts with a flag (``--all-draws``, ``--weights PATH``) names an
    option of some command; scripts' and other tools' flags are named with their tool."""
    known = _all_options()
    unknown = []
    for span in inline_spans():
        for flag in span.split()[0].split("=")[0].split("/"):  # --rtol/--atol names two
            if flag.startswith("--") and flag not in known:
                unknown.append(span)
    assert not unknown, f"flags in the README that no command has: {unknown}"


def test_library_calls_in_running_text_bind():
    """``audit(..., revision=..., ...)`` in the text: the function exists and takes those arguments."""
    calls = []
    for span in inline_spans():
        m = re.fullmatch(r"([\w.]+)\(.*\)", span)
        if m and (m.group(1) in mhaaudit.__all__ or m.group(1).startswith("mhaaudit.")):
            calls.append(span)
    assert any(c.startswith("audit(") for c in calls) and any("load_model(" in c for c in calls)
    for span in calls:
        call = ast.parse(span, mode="eval").body
        name = ast.unparse(call.func)
        if "." in name:
            module, _, attr = name.rpartition(".")
            func = getattr(importlib.import_module(module), attr)
        else:
            func = getattr(mhaaudit, name)
        assert callable(func) and not inspect.ismodule(func), span
        sig = inspect.signature(func)
        sig.bind(*[None] * len(call.args), **{k.arg: None for k in call.keywords})  # TypeError: not its arguments


def test_library_names_in_the_readme_are_public_functions():
    """Every name the Library section imports from mhaaudit is the function or class, not a module."""
    names = set()
    for block in PY_BLOCKS:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module == "mhaaudit":
                names.update(a.name for a in node.names)
    assert {"audit", "subset_test", "kruskal_sweep", "RankRule", "FeatureSet"} <= names
    for name in names:
        assert not inspect.ismodule(getattr(mhaaudit, name)), name


# --------------------------------------------------------------------------- one truth: the schema


def _hooks():
    """docs/hooks.py, the MkDocs hook that fills in the generated parts of the pages."""
    return load_script(ROOT / "docs" / "hooks.py", "mhaaudit_docs_hooks", fresh=True)


def test_the_schema_table_is_the_documented_columns():
    """The schema page's tables are generated from the documented columns, never written by hand:
    each section is the schema's rows of its commands, and together they are every row of it."""
    from mhaaudit.tables import schema_markdown

    page = PAGES["docs/reference/schema.md"]
    assert "| column | type |" not in page  # nothing hand-copied
    wanted = re.findall(r"^<!-- schema: (.+) -->$", page, re.M)
    assert wanted == ["check,kruskal", "capacity", "memorize", "reproduce", "several seeds"]
    built = _hooks().expand(page)
    head, rule, *rows = schema_markdown().splitlines()
    shown = []
    for commands in wanted:
        table = _hooks().schema_table(commands)
        assert f"\n{table}\n" in built and table.startswith(f"{head}\n{rule}\n")
        shown += table.splitlines()[2:]
    assert set(shown) == set(rows) and len(set(shown)) == len(rows)


# --------------------------------------------------------------------------- one truth: the results


TABLE1_COLUMNS = {"embedding": "embedding", "random attention": "random-attention", "random ViT (L1)": "random"}
TABLE1_ROWS = {
    "General Position": "general_position",
    "Assumption 1": "assumption_1",
    "Assumption 2": "assumption_2",
    "Assumption 3": "assumption_3",
}


def table1_cells() -> dict[tuple[str, str], str]:
    """The README's Table 1: (variant, check) -> the cell's text."""
    text = section("Reproducing the paper's Table 1 offline")
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    rows = list(itertools.takewhile(lambda ln: ln.startswith("|"), lines[start:]))  # the first table
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    cells = {}
    for row in rows[2:]:
        parts = [c.strip() for c in row.strip("|").split("|")]
        check = TABLE1_ROWS[parts[0].split(" (")[0]]
        for name, cell in zip(header[1:], parts[1:], strict=False):
            cells[(TABLE1_COLUMNS[name], check)] = cell
    return cells


def claim_problems(cell: str, rec: dict) -> list[str]:
    """What a README cell states that the record does not: the verdict, draws or examples counted
    (a/b), the whole-set rank and its ceiling, the witness size, a proof."""
    wrong = []
    if cell.split()[0] != rec["verdict"]:
        wrong.append(f"verdict {rec['verdict']}")
    m = re.search(r"\b(\d+)/(\d+)\b", cell)
    if m and (int(m[1]), int(m[2])) != (rec["satisfied"], rec["samples"]):
        wrong.append(f"{rec['satisfied']}/{rec['samples']}")
    m = re.search(r"whole-set rank (\d+)", cell)
    if m and int(m[1]) != rec["set_rank_ceiling"]:
        wrong.append(f"whole-set rank {rec['set_rank_ceiling']}")
    m = re.search(r"at most (\d+) for any (\d+) rows", cell)
    if m and f"at most {m[1]} for any {m[2]}-subset" not in rec["reason"]:
        wrong.append(f"reason: {rec['reason']}")
    m = re.search(r"dependent (\d+)-row subset", cell)
    if m and int(m[1]) != rec["witness_size"]:
        wrong.append(f"witness of {rec['witness_size']} rows")
    if "every [CLS] query is the same vector" in cell and rec["set_rank_ceiling"] != 1:
        wrong.append(f"whole-set rank {rec['set_rank_ceiling']}")
    if "proven" in cell and not rec["proven"]:
        wrong.append("not proven")
    return wrong


def _by_cell(records: list[dict]) -> dict:
    return {
        (r["variant"], r["check"]): {**r, "witness_size": r.get("witness_size", len(r.get("witness") or []))}
        for r in records
    }


def _check_table1(records: list[dict]) -> None:
    got = _by_cell(records)
    cells = table1_cells()
    assert len(cells) == 12
    wrong = {
        key: (cell, claim_problems(cell, got[key])) for key, cell in cells.items() if claim_problems(cell, got[key])
    }
    assert not wrong, f"README Table 1 cells the run contradicts: {wrong}"


def _recorded(run: str) -> dict:
    return json.loads(RESULTS.read_text())["runs"][run]


def test_table1_states_the_recorded_run():
    run = _recorded("check vit-base")
    assert run["commit"] in section("Benchmarks") and run["commit"] in section(
        "Reproducing the paper's Table 1 offline"
    )
    _check_table1(run["records"])


def test_a_contradicting_cell_is_caught():
    rec = {
        "verdict": "fails",
        "satisfied": 0,
        "samples": 64,
        "set_rank_ceiling": 627,
        "reason": "",
        "witness_size": 570,
        "proven": True,
    }
    assert not claim_problems("fails (0/64 draws, a dependent 570-row subset found)", rec)
    assert claim_problems("fails (0/64 draws, a dependent 571-row subset found)", rec)
    assert claim_problems("holds (0/64 draws)", rec) and claim_problems("fails (1/64 draws)", rec)
    assert claim_problems("fails (proven: whole-set rank 432)", rec)


@pytest.mark.slow
def test_table1_states_what_check_vit_base_gives():
    """The README's Table 1 against a fresh audit with the CLI's defaults (a few minutes of CPU)."""
    result = mhaaudit.audit("vit-base", variants=["embedding", "random-attention", "random"])
    _check_table1(result.records())


def bert_row() -> str:
    """The README's row for check bert-base without the optional packages (the stand-in tokenizer)."""
    rows = [
        ln
        for ln in section("Benchmarks").splitlines()
        if ln.startswith("| `mhaaudit check bert-base`") and "stand-in tokenizer" in ln
    ]
    assert len(rows) == 1
    return rows[0].split("|")[-2]


def bert_problems(row: str, records: list[dict]) -> list[str]:
    """What the bert-base row states (verdicts at L0 / L1, counts, ranks, witness) that the records do not."""
    got = _by_cell(records)
    L0, L1 = "random-L0", "random-L1"
    checks = {"A1": "assumption_1", "A2": "assumption_2", "A3": "assumption_3", "GP": "general_position"}
    wrong = []
    stated = re.findall(r"\b(A1|A2|A3|GP) (holds|fails) / (holds|fails)", row)
    assert {s[0] for s in stated} == set(checks), row
    for name, v0, v1 in stated:
        for variant, v in ((L0, v0), (L1, v1)):
            if got[(variant, checks[name])]["verdict"] != v:
                wrong.append(f"{name} {variant}: {got[(variant, checks[name])]['verdict']}")
        part = row[row.index(f"{name} {v0} / {v1}") :]
        part = part[: part.find(")") + 1]  # this check's parenthesis
        pairs = re.findall(r"\b(\d+)/(\d+)\b", part)
        if len(pairs) == 1 and "L1" not in part and "L0" not in part:  # one count for both layers
            pairs = pairs * 2
        for variant, (a, b) in zip((L0, L1), pairs if len(pairs) == 2 else [], strict=False):
            r = got[(variant, checks[name])]
            if (int(a), int(b)) != (r["satisfied"], r["samples"]):
                wrong.append(f"{name} {variant}: {r['satisfied']}/{r['samples']}")
        if len(pairs) == 1:  # stated for L1 only (L0 is proven without sampling)
            r = got[(L1, checks[name])]
            if (int(pairs[0][0]), int(pairs[0][1])) != (r["satisfied"], r["samples"]):
                wrong.append(f"{name} {L1}: {r['satisfied']}/{r['samples']}")
        m = re.search(r"L0 proven: whole-set rank (\d+)", part)
        if m and (got[(L0, checks[name])]["set_rank_ceiling"] != int(m[1]) or not got[(L0, checks[name])]["proven"]):
            wrong.append(f"{name} L0 whole-set rank {got[(L0, checks[name])]['set_rank_ceiling']}")
        m = re.search(r"dependent (\d+)-row subset", part)
        if m and got[(L1, checks[name])]["witness_size"] != int(m[1]):
            wrong.append(f"{name} L1 witness of {got[(L1, checks[name])]['witness_size']} rows")
        if part.endswith("(proven)") and not (got[(L0, checks[name])]["proven"] and got[(L1, checks[name])]["proven"]):
            wrong.append(f"{name}: not proven")
    return wrong


def test_bert_base_row_states_the_recorded_run():
    run = _recorded("check bert-base")
    assert "stand-in" in run["tokenizer"] and run["commit"] in bert_row() + section("Benchmarks")
    assert not bert_problems(bert_row(), run["records"])


def test_a_contradicting_bert_row_is_caught():
    records = _recorded("check bert-base")["records"]
    row = bert_row()
    assert not bert_problems(row, records)
    for true, false in (
        ("307-row", "308-row"),
        ("A3 fails / fails", "A3 holds / fails"),
        ("46/128", "47/128"),
        ("(2000/2000)", "(1999/2000)"),
        ("whole-set rank 1;", "whole-set rank 2;"),
    ):
        assert true in row
        assert bert_problems(row.replace(true, false), records), false


def test_the_bound_page_names_where_each_output_keeps_the_bound_s_kind():
    """``X = not-applicable`` on the bound page names the key each output keeps the kind in: ``bound_kind``
    in ``capacity``'s records, ``which`` in a ``check`` column's ``meta.columns.<variant>.bound`` (the
    ``to_dict`` of what ``theorem1_bound`` returns); the page once named only the first, which no ``check``
    document holds."""
    from mhaaudit.tables import COLUMNS
    from mhaaudit.theory import theorem1_bound

    page = PAGES["docs/concepts/bound.md"]
    named = set(re.findall(r"`(\w+) = not-applicable`", page))
    bound = theorem1_bound(heads=12, head_dim=64, n=197, d=768, a1_holds=False, a2_holds=True)
    assert bound.which == "not-applicable"
    kept = {"bound_kind": {c.name for c in COLUMNS["capacity"]}, "which": set(bound.to_dict())}
    assert named == set(kept), named
    for key, fields in kept.items():
        assert key in fields, key
