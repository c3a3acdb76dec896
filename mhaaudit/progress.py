"""Progress on stderr for every phase a person waits for; silent when nobody watches.

A person watches when stderr is a terminal: then the loops show a bar and the phases without a
count (loading a model, building the built-in corpus) a spinner with a line saying what is being
done, whatever the output format (stdout carries the data; stderr is the person's). With stderr
redirected, or with ``--quiet``, nothing is shown. Colours follow rich's rules: none when
``NO_COLOR`` is set or the stream is not a terminal.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from . import notebook
from .console import TextConsole, shown
from .errors import printable

_stderr = TextConsole(stderr=True)  # writes to sys.stderr as it is at each call; names shown escaped


def progress_enabled(quiet: bool = False) -> bool:
    """Whether to show progress: stderr is a terminal and ``quiet`` (``--quiet``) was not asked for."""
    if quiet:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


@contextlib.contextmanager
def task(description: str, total: int | None, enabled: bool) -> Iterator[Callable[[int], None]]:
    """Yield an ``advance(n)`` callback driving one bar (a no-op when disabled)."""
    if not enabled:

        def nothing(n: int = 1) -> None:
            pass

        yield nothing
        return

    if notebook.in_notebook():  # a Jupyter kernel: one finished bar per phase (mhaaudit.notebook)
        with notebook.notebook_task(printable(description), total) as advance:
            yield advance
        return

    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=_stderr,
        transient=True,
    ) as prog:
        tid = prog.add_task(shown(description), total=total)  # a name in it is shown, never markup

        def advance(n: int = 1) -> None:
            prog.advance(tid, n)

        yield advance


@contextlib.contextmanager
def status(description: str, enabled: bool) -> Iterator[None]:
    """A spinner with ``description`` while a phase without a count runs (nothing when disabled)."""
    if not enabled or notebook.in_notebook():  # a notebook shows the phases' bars only (a spinner would be a widget)
        yield
        return
    with _stderr.status(shown(description), spinner="dots"):
        yield


def log(message: str, enabled: bool) -> None:
    """A status line on stderr for a person watching (``enabled``: see :func:`progress_enabled`): plain text, a
    name in it shown on one line as written (:func:`~mhaaudit.console.shown`), never read as markup."""
    if enabled:
        if notebook.in_notebook():  # plain text on the cell's stderr stream, not a rich display
            print(printable(message), file=sys.stderr)
        else:
            _stderr.print(shown(message), highlight=False)
