"""The rich console every report and progress line is written through: what reaches a terminal
shows control characters escaped, so a name read from a file (a file name, a column name, a model's
name holding ``ESC]0;...`` or ``ESC[2J``) is shown, never acted on by the terminal.
"""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import Console
from rich.markup import escape
from rich.segment import Segment
from rich.text import Text

from .errors import printable

__all__ = ["TextConsole", "shown"]


class TextConsole(Console):
    """A rich console that shows control characters escaped (:func:`mhaaudit.errors.printable`): a name
    read from a file (a file or column name holding ``ESC]0;...`` or ``ESC[2J``) is shown, never acted on
    by the terminal. Markup strings are cleaned before they are laid out, and every segment of text
    before it is written (rich's own controls, such as a progress bar's cursor moves, pass)."""

    def render_str(self, text: str, **kwargs) -> Text:
        """Rich's ``render_str`` of ``text`` with its control characters shown escaped (line breaks kept)."""
        return super().render_str(printable(text, keep=_KEPT), **kwargs)

    def render(self, renderable, options=None) -> Iterator[Segment]:
        """Rich's segments of ``renderable``, their text's control characters shown escaped."""
        for segment in super().render(renderable, options):
            shown = segment.text if segment.control else printable(segment.text, keep=_KEPT)
            yield segment if shown == segment.text else Segment(shown, segment.style)


_KEPT = "\n\t"  # what a report's own lines hold: line breaks, and tabs rich expands


def shown(text: object) -> str:
    r"""A name from outside (a model, a folder, a file, a checkpoint) as report markup for one line: its
    control characters escaped, line breaks too (``\x0a``: a name cannot start a line of its own), and its
    square brackets escaped (a name holding ``[bold]`` shows as written, not styled)."""
    return escape(printable(str(text)))
