"""How a result shows itself: ``print(result)`` as the text its command prints, ``repr`` one short
line, a notebook the same report in colour (:class:`Report`), laid out in the width of the
terminal or of :data:`REDIRECTED_WIDTH` (:func:`text_width`).
"""

from __future__ import annotations

import copy
import io as _io
import os
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

from rich.table import Table

from .check_words import decided_status
from .console import TextConsole
from .sizes import human_bytes as human_bytes

# The width of reports sent to a file or a pipe when ``COLUMNS`` does not say: wide enough that
# the tables need not wrap their cells, narrow enough to read in an editor or a pager.
REDIRECTED_WIDTH = 100


def text_width() -> int:
    """The width a report is laid out in as text, as the commands lay out theirs: ``COLUMNS`` when
    set, else the terminal's when stdout is one, else :data:`REDIRECTED_WIDTH`."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stdout
        tty = False
    if not tty:
        return REDIRECTED_WIDTH
    try:  # the terminal the data goes to (while a command runs, descriptor 1 is stderr's: mhaaudit.stdio)
        return os.get_terminal_size(sys.stdout.fileno()).columns or REDIRECTED_WIDTH
    except (AttributeError, ValueError, OSError):
        return shutil.get_terminal_size((REDIRECTED_WIDTH, 24)).columns


class Report:
    """How a result shows itself: ``print(result)`` is the report its command prints (plain text),
    ``repr(result)`` one short line, and a notebook the same report with its colours.

    A class using it names the function that lays it out, ``REPORT`` (its rich tables and lines, as
    the CLI prints them: ``renderables()``), and defines ``summary_line()`` (what ``repr`` says after
    the class name).
    """

    #: The function that lays a result of the class out: its rich tables and lines, in order.
    REPORT: ClassVar[Callable[[Any], list]]

    def renderables(self) -> list:
        """The rich tables and lines (markup strings) of the report, in order (the class's ``REPORT``)."""
        return type(self).REPORT(self)

    def summary_line(self) -> str:  # pragma: no cover - defined by each result
        """One short line on the result, for ``repr``."""
        raise NotImplementedError

    def __rich_console__(self, console, options):
        for item in self.renderables():
            yield console.render_str(item, highlight=False) if isinstance(item, str) else item

    def __str__(self) -> str:
        buf = _io.StringIO()
        con = TextConsole(file=buf, width=text_width(), color_system=None, force_terminal=False, force_jupyter=False)
        for r in self.renderables():
            con.print(r, highlight=False)
        return buf.getvalue()

    def __repr__(self) -> str:
        try:
            summary = self.summary_line()
        except Exception as exc:  # noqa: BLE001 - a repr must not raise
            summary = f"(summary unavailable: {type(exc).__name__})"
        return f"<{type(self).__name__} {summary}>"

    def _blocks(self, width: int = 120) -> list:
        """The report as recorded consoles, one per run of tables (``"table"``) or of prose
        (``"prose"``). A table's title is printed as one line above it (rich wraps a title to
        its table's width, which breaks long titles over narrow tables); prose lines are never
        broken (``soft_wrap``): a notebook wraps them at its own width, between words."""
        blocks: list = []
        for r in self.renderables():
            kind = "prose" if isinstance(r, str) else "table"
            if not blocks or blocks[-1][0] != kind:
                blocks.append(
                    (
                        kind,
                        TextConsole(
                            record=True,
                            file=_io.StringIO(),
                            width=width,
                            color_system="truecolor",
                            force_jupyter=False,
                            force_terminal=True,
                        ),
                    )
                )
            con = blocks[-1][1]
            if isinstance(r, str):
                con.print(r, highlight=False, soft_wrap=True)
            elif isinstance(r, Table) and r.title:
                untitled = copy.copy(r)
                untitled.title = None
                title = (
                    r.title
                    if not isinstance(r.title, str)
                    else con.render_str(r.title, style=r.title_style or "table.title", highlight=False)
                )
                con.print(title, soft_wrap=True)
                con.print(untitled, highlight=False)
            else:
                con.print(r, highlight=False)
        return blocks

    def _repr_html_(self) -> str:
        return self._repr_mimebundle_()["text/html"]

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs) -> dict:
        blocks = self._blocks()
        text = "".join(con.export_text(clear=False) for _, con in blocks)
        html = "".join(
            con.export_html(inline_styles=True, code_format=_HTML if kind == "table" else _PROSE)
            for kind, con in blocks
        )
        return {"text/plain": text, "text/html": html}


def verdict_tally(records: list[dict]) -> str:
    """``8 holds, 4 fails`` over the records' checks (in that order: holds, fails, then any other), each counted
    by its exact status where it is decided and by its verdict (the estimate) elsewhere, as the report's findings
    group them: a check proven to fail while its estimate holds counts as failing, and the tally says how many
    did (``1 fails (1 proven against a holding estimate)``)."""
    c: Counter[str] = Counter()
    against = 0
    for r in records:
        verdict = r.get("verdict")
        decided = decided_status(verdict, r.get("exact_status"))
        if decided:
            c[decided] += 1
            against += decided == "fails" and verdict == "holds"
    order = ["holds", "fails", *sorted(v for v in c if v not in ("holds", "fails"))]
    note = {"fails": f" ({against} proven against a holding estimate)"} if against else {}
    return ", ".join(f"{c[v]} {v}{note.get(v, '')}" for v in order if c.get(v))


_HTML = (
    '<pre style="white-space: pre; overflow-x: auto; margin: 0; line-height: normal; '
    "font-family: Menlo, 'DejaVu Sans Mono', consolas, 'Courier New', monospace\">{code}</pre>"
)
_PROSE = (
    '<pre style="white-space: pre-wrap; overflow-wrap: break-word; margin: 0; line-height: normal; '
    "font-family: Menlo, 'DejaVu Sans Mono', consolas, 'Courier New', monospace\">{code}</pre>"
)
