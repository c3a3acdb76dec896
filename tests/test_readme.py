"""The README is checked by the tool it describes: every Python block runs as written, every
``mhaaudit ...`` command line is parsed by the real CLI (an example with a renamed flag fails),
every flag and library call named in running text exists, the output schema is the one the code
documents, and the results the README states agree with the recorded run they came from (and, in
the slow tests, with a fresh run)."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import shlex
from pathlib import Path

import click
import pytest
import typer

import mhaaudit
from mhaaudit.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULTS = ROOT / "fixtures" / "readme_results.json"

_FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.M | re.S)


def fenced(lang: str | None = None) -> list[str]:
    """The README's fenced blocks (of one language; ``None``: all)."""
    return [body for tag, body in _FENCE.findall(README) if lang is None or tag == lang]


def inline_spans() -> list[str]:
    """The inline code spans of the running text (fenced blocks removed)."""
    return [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", _FENCE.sub("", README))]


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


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
                args = tokens[i + 1:]
                cut = next((j for j, a in enumerate(args) if a in _SHELL_OPERATORS), len(args))
                out.append((line.strip(), args[:cut]))
                break
    return out


# --------------------------------------------------------------------------- the examples run


PY_BLOCKS = fenced("python")


def test_the_readme_has_python_and_command_examples():
    assert PY_BLOCKS and len(command_lines()) >= 20


@pytest.mark.parametrize("index", range(len(PY_BLOCKS)))
def test_python_block_runs_as_written(index, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # files the block writes land here
    code = compile(PY_BLOCKS[index], f"README.md (python block {index + 1})", "exec")
    exec(code, {"__name__": "__readme__"})  # noqa: S102 - the README's own example
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


def test_the_schema_table_is_the_documented_columns():
    from mhaaudit.tables import schema_markdown

    start = README.index("| column | type | commands | meaning |")
    end = README.index("\n\n", start)
    assert README[start:end] == schema_markdown()


# --------------------------------------------------------------------------- one truth: the results


TABLE1_COLUMNS = {"embedding": "embedding", "random attention": "random-attention", "random ViT (L1)": "random"}
TABLE1_ROWS = {"General Position": "general_position", "Assumption 1": "assumption_1", "Assumption 2": "assumption_2",
               "Assumption 3": "assumption_3"}


def table1_cells() -> dict[tuple[str, str], str]:
    """The README's Table 1: (variant, check) -> the cell's text."""
    text = section("Reproducing the paper's Table 1 offline")
    rows = [ln for ln in text.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    cells = {}
    for row in rows[2:]:
        parts = [c.strip() for c in row.strip("|").split("|")]
        check = TABLE1_ROWS[parts[0].split(" (")[0]]
        for name, cell in zip(header[1:], parts[1:]):
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
    if m and int(m[1]) != rec["set_rank"]:
        wrong.append(f"whole-set rank {rec['set_rank']}")
    m = re.search(r"at most (\d+) for any (\d+) rows", cell)
    if m and f"at most {m[1]} for any {m[2]}-subset" not in rec["reason"]:
        wrong.append(f"reason: {rec['reason']}")
    m = re.search(r"dependent (\d+)-row subset", cell)
    if m and int(m[1]) != rec["witness_size"]:
        wrong.append(f"witness of {rec['witness_size']} rows")
    if "every [CLS] query is the same vector" in cell and rec["set_rank"] != 1:
        wrong.append(f"whole-set rank {rec['set_rank']}")
    if "proven" in cell and not rec["proven"]:
        wrong.append("not proven")
    return wrong


def _by_cell(records: list[dict]) -> dict:
    return {(r["variant"], r["check"]): {**r, "witness_size": r.get("witness_size", len(r.get("witness") or []))}
            for r in records}


def _check_table1(records: list[dict]) -> None:
    got = _by_cell(records)
    cells = table1_cells()
    assert len(cells) == 12
    wrong = {key: (cell, claim_problems(cell, got[key])) for key, cell in cells.items() if claim_problems(cell, got[key])}
    assert not wrong, f"README Table 1 cells the run contradicts: {wrong}"


def _recorded(run: str) -> dict:
    return json.loads(RESULTS.read_text())["runs"][run]


def test_table1_states_the_recorded_run():
    run = _recorded("check vit-base")
    assert run["commit"] in section("Benchmarks") and run["commit"] in section("Reproducing the paper's Table 1 offline")
    _check_table1(run["records"])


def test_a_contradicting_cell_is_caught():
    rec = {"verdict": "fails", "satisfied": 0, "samples": 64, "set_rank": 627, "reason": "", "witness_size": 570,
           "proven": True}
    assert not claim_problems("fails (0/64 draws, a dependent 570-row subset found)", rec)
    assert claim_problems("fails (0/64 draws, a dependent 571-row subset found)", rec)
    assert claim_problems("holds (0/64 draws)", rec) and claim_problems("fails (1/64 draws)", rec)
    assert claim_problems("fails (proven: whole-set rank 432)", rec)


@pytest.mark.slow
def test_table1_states_what_check_vit_base_gives():
    """The README's Table 1 against a fresh audit with the CLI's defaults (a few minutes of CPU)."""
    result = mhaaudit.audit("vit-base", variants=["embedding", "random-attention", "random"])
    _check_table1(result.records())
