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
                out.append((line.strip(), tokens[i + 1:]))
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
    except click.exceptions.Exit:
        pass  # --help / --version
    except click.UsageError as exc:  # an unknown or renamed flag, a bad choice or type
        pytest.fail(f"README: {line!r}: {exc.format_message()}")


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
