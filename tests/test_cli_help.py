"""Every ``--help`` keeps its bytes: the root's and every command's, at 80 and 200 columns.

The texts in ``fixtures/help`` are what the console script printed to a pipe
(``fixtures/make_fixtures.py --help-texts``); each is compared here through the console script
(a subprocess) and in-process (:func:`mhaaudit.cli.app.main`). typer, click and rich draw the
help, so the texts hold for the releases that drew them (``fixtures/help/versions.json``); under
others the comparison is skipped and says so.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer.rich_utils
from clitools import run
from conftest import FIXTURES, fixture_module

MAKE = fixture_module("make_fixtures")
CASES = [(command, columns) for command in MAKE.HELP_COMMANDS for columns in MAKE.HELP_COLUMNS]
IDS = [f"{command or 'mhaaudit'}-{columns}" for command, columns in CASES]
REGENERATE = "if the change is intended, regenerate: python fixtures/make_fixtures.py --help-texts"


@pytest.fixture(scope="module", autouse=True)
def _same_releases():
    made_with = json.loads((FIXTURES / "help" / "versions.json").read_text())
    if MAKE.help_versions() != made_with:
        pytest.skip(f"the help texts were drawn by {made_with}; these are {MAKE.help_versions()}")


def _expected(command: str, columns: int) -> str:
    return (FIXTURES / MAKE.help_name(command, columns)).read_bytes().decode()


@pytest.mark.parametrize(("command", "columns"), CASES, ids=IDS)
def test_the_console_script_prints_the_same_help(command, columns):
    args = [*([command] if command else []), "--help"]
    proc = subprocess.run(
        [sys.executable, "-c", MAKE.CONSOLE_SCRIPT, *args],
        env=MAKE.help_env(columns),
        capture_output=True,
        cwd=MAKE.ROOT,
        check=False,
    )
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr.decode()
    assert proc.stdout.decode() == _expected(command, columns), REGENERATE


@pytest.mark.parametrize(("command", "columns"), CASES, ids=IDS)
def test_the_help_in_process_is_the_same(capsys, monkeypatch, command, columns):
    for name in MAKE.HELP_ENV_DROPPED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setenv("NO_COLOR", "1")
    # typer reads the variables that force a terminal or a width once, at its import: as unset.
    monkeypatch.setattr(typer.rich_utils, "FORCE_TERMINAL", None)
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", None)
    rc, out, err = run(capsys, *([command] if command else []), "--help")
    assert rc == 0 and err == "", err
    assert out == _expected(command, columns), REGENERATE
