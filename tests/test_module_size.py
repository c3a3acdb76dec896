"""The package's modules stay small and say what they are: none over 600 lines, each with a
module docstring whose first line names its one concern.

Read from the source (``ast``), every ``.py`` file under ``mhaaudit/``, packages' ``__init__`` too.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mhaaudit"
MAX_LINES = 600


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_the_package_has_modules_to_check():
    assert len(_modules()) > 50


def test_no_module_is_over_600_lines():
    over = {p.relative_to(PACKAGE).as_posix(): _lines(p) for p in _modules() if _lines(p) > MAX_LINES}
    assert not over, f"split these modules, one concern a module ({MAX_LINES} lines at most): {over}"


def test_every_module_has_a_docstring_whose_first_line_says_what_it_is():
    lacking = []
    for p in _modules():
        doc = ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")))
        if not doc or not doc.splitlines()[0].strip():
            lacking.append(p.relative_to(PACKAGE).as_posix())
    assert not lacking, f"give these modules a docstring that opens with their concern: {lacking}"
