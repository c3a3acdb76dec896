"""Each shared default is stated once: in :mod:`mhaaudit.defaults`, read everywhere else by name."""

from __future__ import annotations

import ast
from pathlib import Path

import mhaaudit
from mhaaudit import defaults

# parameter or field name -> the default it takes. A seed of 0 is left out: many parts (a certificate's
# draws, a memorize point, a random attention head) have a seed of their own that is 0 by default.
SHARED = {
    "samples": defaults.DEFAULT_SAMPLES,
    "threshold": defaults.DEFAULT_THRESHOLD,
    "split": defaults.DEFAULT_SPLIT,
    "limit": defaults.DEFAULT_LIMIT,
    "batch_size": defaults.DEFAULT_BATCH_SIZE,
    "device": defaults.DEFAULT_DEVICE,
    "stop_when_decided": defaults.DEFAULT_STOP_WHEN_DECIDED,
}


def _stated_again(tree: ast.AST) -> list[tuple[str, int]]:
    """(name, line) of every parameter default or class field that writes a shared default as a literal."""
    found = []
    for node in ast.walk(tree):
        pairs: list[tuple[str, ast.expr | None]] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            positional = a.posonlyargs + a.args
            pairs += zip([p.arg for p in positional[len(positional) - len(a.defaults) :]], a.defaults, strict=True)
            pairs += [(p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
        elif isinstance(node, ast.ClassDef):
            pairs += [
                (s.target.id, s.value)
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            ]
        for name, value in pairs:
            literal = isinstance(value, ast.Constant) and name in SHARED
            if literal and type(value.value) is type(SHARED[name]) and value.value == SHARED[name]:
                found.append((name, value.lineno))
    return found


def test_no_library_module_states_a_shared_default_again():
    root = Path(mhaaudit.__file__).parent
    found = [
        f"{path.relative_to(root)}:{line} {name}"
        for path in sorted(root.rglob("*.py"))
        if path.relative_to(root).parts[0] != "cli" and path.name != "defaults.py"
        for name, line in _stated_again(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert found == [], found


def test_the_finder_finds_a_default_stated_again():
    code = (
        "def f(x, samples=5000, *, threshold=0.5, device='cpu'):\n    pass\n"
        "class C:\n    limit: int = 2000\n    split: str = 'test'\n"
    )
    assert _stated_again(ast.parse(code)) == [("samples", 1), ("limit", 4)]
