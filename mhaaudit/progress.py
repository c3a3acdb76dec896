"""Progress bars on stderr for loops a person waits for; silent when nobody watches."""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator

from rich.console import Console

_stderr = Console(stderr=True)


def progress_enabled(fmt: str = "table") -> bool:
    """Bars only when stderr is a terminal and the output format is meant for people."""
    return fmt == "table" and sys.stderr.isatty()


@contextlib.contextmanager
def task(description: str, total: int | None, enabled: bool) -> Iterator[Callable[[int], None]]:
    """Yield an ``advance(n)`` callback driving one bar (a no-op when disabled)."""
    if not enabled:
        yield lambda n=1: None
        return
    from .notebook import in_notebook

    if in_notebook():  # a Jupyter kernel: one finished bar per phase (mhaaudit.notebook)
        from .notebook import notebook_task

        with notebook_task(description, total) as advance:
            yield advance
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=_stderr,
        transient=True,
    ) as prog:
        tid = prog.add_task(description, total=total)
        yield lambda n=1: prog.advance(tid, n)


def log(message: str, fmt: str = "table") -> None:
    """A status line on stderr (kept out of JSON/parquet output streams' way)."""
    if fmt == "table" or sys.stderr.isatty():
        _stderr.print(message, highlight=False)
