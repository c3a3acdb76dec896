"""The prose of a Python module's docstrings: read with ``ast`` (never imported), code removed.

:func:`module_docstrings` returns the docstrings of a module, its classes and its functions (at
any depth) in source order. :func:`prose_paragraphs` turns one docstring into paragraphs of
running text, each reflowed onto one line, and drops what is not prose:

- doctest blocks (a ``>>>`` line and what follows it up to the next blank line);
- reST literal blocks (the indented block after a paragraph ending in ``::``; the ``::`` becomes
  ``:``) and Markdown code fences (```` ``` ```` or ``~~~`` up to the closing fence);
- reST directives and their indented bodies (``.. code-block::``, ``.. math::``,
  ``.. autosummary::``, ...), except admonitions (``note``, ``warning``, ``seealso``, ...) and
  version notes, whose body is prose and is kept; reST comments and link targets;
- section underlines and table borders (lines of repeated ``=-~^*+#`` characters);
- paragraphs whose lines mostly look like Python (``import``, ``def``, assignments, calls,
  block headers ending in ``:``), and paragraphs of fewer than 3 words or with fewer than 40 %
  plain words (formulas, tables, lists of names).

The rules are heuristics on reST, NumPy, Google and Markdown docstring styles: they remove the
code that these styles mark, and indented code that looks like Python; prose that quotes code
inline (``x.sum()``) is kept, as it is part of the text.
"""

from __future__ import annotations

import ast
import re
import warnings

__all__ = ["module_docstrings", "prose_paragraphs"]

# Directives whose body is prose (kept); every other directive is dropped with its body.
_PROSE_DIRECTIVES = frozenset(
    {
        "note",
        "warning",
        "tip",
        "hint",
        "important",
        "caution",
        "attention",
        "danger",
        "error",
        "admonition",
        "seealso",
        "topic",
        "sidebar",
        "deprecated",
        "versionadded",
        "versionchanged",
        "versionremoved",
    }
)
# Of those, the ones whose argument (after ``::``) is a version number, not text.
_VERSION_DIRECTIVES = frozenset({"deprecated", "versionadded", "versionchanged", "versionremoved"})
# Directives that hold code (counted as code blocks when dropped).
_CODE_DIRECTIVES = frozenset(
    {
        "code",
        "code-block",
        "sourcecode",
        "testcode",
        "testsetup",
        "testcleanup",
        "testoutput",
        "doctest",
        "ipython",
        "plot",
        "literalinclude",
        "jupyter-execute",
        "highlight",
        "parsed-literal",
    }
)

_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([A-Za-z][\w:.-]*)::(.*)$")
_COMMENT = re.compile(r"^(\s*)\.\.(\s|$)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_RULE = re.compile(r"^\s*([=\-~^*+#_`:.'\"|])(?:\1|[ +|=-]){2,}\s*$")
_CODE_LINE = re.compile(
    r"""^\s*(?:
        (?:import|from\s+[\w.]+\s+import|def|class|async\s+def|return|yield|raise|assert|del|pass|print\()\b
      | @[\w.]+\s*(?:\(.*)?$                                  # a decorator
      | (?:for|while|if|elif|else|try|except|finally|with)\b.*:\s*(?:\#.*)?$   # a block header
      | [\w.\[\]'"]+(?:\s*,\s*[\w.\[\]'"]+)*\s*[-+*/|&]?=\s*\S  # an assignment
      | [\w.]+\([^()]*(?:\(.*\))?[^()]*\)[\s;]*(?:\#.*)?$      # a call alone on its line
      | [\])}]+[\s,;]*$                                       # closing brackets
      | \#\s                                                  # a comment
    )""",
    re.VERBOSE,
)
_WORD = re.compile(r"^[(\"'`]*[A-Za-z][a-z]*(?:'[a-z]+)?[)\"'`]*[.,;:!?]*[)\"'`]*$")


def module_docstrings(source: str | bytes) -> list[str]:
    """The docstrings (cleaned as ``inspect.cleandoc`` does) of a module's source, in source
    order: the module's, then every class's and function's at any depth. Source that does not
    parse gives ``[]``; nothing is imported or executed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences in old docstrings
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return []
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=True)
            if text and text.strip():
                found.append((getattr(node, "lineno", 0), getattr(node, "col_offset", 0), text))
    found.sort(key=lambda item: item[:2])
    return [text for _, _, text in found]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _skip_block(lines: list[str], i: int, indent: int) -> int:
    """The index after the blank lines and the lines indented more than ``indent`` from ``i``."""
    while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > indent):
        i += 1
    return i


class _Paragraphs:
    """Lines collected into paragraphs."""

    def __init__(self) -> None:
        self.done: list[list[str]] = []
        self.current: list[str] = []

    def flush(self) -> int | None:
        """End the current paragraph; when it ended in ``::`` (a reST literal block follows),
        the ``::`` becomes ``:`` (or goes, after a space) and its indentation is returned."""
        if not self.current:
            return None
        literal = None
        last = self.current[-1].rstrip()
        if last.endswith("::"):
            literal = _indent(self.current[0])
            head = last[:-2]
            self.current[-1] = head.rstrip() + (":" if head and not head[-1].isspace() else "")
        self.done.append(self.current)
        self.current = []
        return literal


def _split(doc: str) -> tuple[list[list[str]], int]:
    """The docstring's lines grouped into paragraphs with the marked code removed; the number of
    code blocks removed."""
    lines = doc.expandtabs().splitlines()
    out = _Paragraphs()
    code = 0
    i = 0
    while i < len(lines):
        for step in _STEPS:
            took = step(lines, i, out)
            if took is not None:
                i, removed = took
                code += removed
                break
        else:
            out.current.append(lines[i])
            i += 1
    out.flush()
    return out.done, code


# Each step reads the line at ``i`` when it is of its kind: it returns (the next line to read, code
# blocks removed), or None when the line is not of its kind.


def _blank(lines: list[str], i: int, out: _Paragraphs) -> tuple[int, int] | None:
    if lines[i].strip():
        return None
    literal = out.flush()
    i += 1
    if literal is not None:  # the indented block after "::" is a literal (code) block
        j = i
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j < len(lines) and _indent(lines[j]) > literal:
            return _skip_block(lines, j, literal), 1
    return i, 0


def _fence(lines: list[str], i: int, out: _Paragraphs) -> tuple[int, int] | None:
    if not _FENCE.match(lines[i]):
        return None
    out.flush()
    fence = lines[i].strip()[:3]
    i += 1
    while i < len(lines) and not lines[i].strip().startswith(fence):
        i += 1
    return i + 1, 1


def _doctest(lines: list[str], i: int, out: _Paragraphs) -> tuple[int, int] | None:
    if not lines[i].strip().startswith(">>>"):
        return None
    out.flush()
    while i < len(lines) and lines[i].strip():
        i += 1
    return i, 1


def _directive(lines: list[str], i: int, out: _Paragraphs) -> tuple[int, int] | None:
    directive = _DIRECTIVE.match(lines[i])
    if not directive:
        return None
    out.flush()
    name = directive.group(2).lower().split(":")[-1]
    if name not in _PROSE_DIRECTIVES:
        return _skip_block(lines, i + 1, len(directive.group(1))), int(name in _CODE_DIRECTIVES)
    argument = directive.group(3).strip()
    if argument and name not in _VERSION_DIRECTIVES:
        out.current.append(argument)
    return i + 1, 0  # the body follows as ordinary (indented) lines


def _comment(lines: list[str], i: int, out: _Paragraphs) -> tuple[int, int] | None:
    if not _COMMENT.match(lines[i]):
        return None
    out.flush()
    return _skip_block(lines, i + 1, _indent(lines[i])), 0


def _rule(lines: list[str], i: int, out: _Paragraphs) -> tuple[int, int] | None:
    if not _RULE.match(lines[i]):
        return None
    # a section underline: the line above is a heading, a paragraph of its own
    heading = out.current.pop() if out.current else None
    out.flush()
    if heading is not None:
        out.current.append(heading)
        out.flush()
    return i + 1, 0


_STEPS = (_blank, _fence, _doctest, _directive, _comment, _rule)


def _is_prose(lines: list[str]) -> bool:
    if 2 * sum(bool(_CODE_LINE.match(ln)) for ln in lines) >= len(lines):
        return False
    words = " ".join(lines).split()
    if len(words) < 3:
        return False
    return 5 * sum(bool(_WORD.match(w)) for w in words) >= 2 * len(words)


def prose_paragraphs(doc: str) -> tuple[list[str], int]:
    """The prose paragraphs of one docstring, each reflowed onto one line, and the number of
    code blocks (doctest blocks, literal blocks, fences, code directives, code-like paragraphs)
    dropped. See the module docstring for the rules."""
    paragraphs, code = _split(doc)
    kept = []
    for lines in paragraphs:
        if _is_prose(lines):
            kept.append(" ".join(" ".join(lines).split()))
        elif 2 * sum(bool(_CODE_LINE.match(ln)) for ln in lines) >= len(lines):
            code += 1
    return kept, code
