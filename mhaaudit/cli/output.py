"""What a command writes: its output paths checked before any work, then its one output path, :func:`emit`.

Every command ends in :func:`emit`: strict JSON or parquet on stdout, the records also written
to ``--out`` when asked, or the command's renderer for people. :func:`prepare_outputs` checks the
output paths first, so a bad path costs nothing and writes nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import phases
from ..stdio import say
from .library import importing
from .names import with_flags
from .options import Format


class CommandClock:
    """When a command ran what (``time.perf_counter()`` values, and seconds), for the command line's own
    phases (:func:`add_command_times`): ``startup_s``, the process's start-up before the command, when the
    process runs the command line (:func:`mhaaudit.phases.startup_seconds`); ``begun``, the command's start
    (the clock's making); ``imported``, the library imported (:meth:`importing`); ``rendering``, the outputs
    begun (:meth:`render_begins`)."""

    def __init__(self) -> None:
        self.begun = time.perf_counter()
        self.startup_s = phases.startup_seconds()  # the interpreter and the command line
        self.imported = self.begun
        self.rendering: float | None = None

    @contextmanager
    def importing(self, quiet: bool) -> Iterator[None]:
        """The library's import (torch with it: seconds), with its spinner (:func:`.library.importing`)."""
        with importing(quiet):
            yield
        self.imported = time.perf_counter()

    def render_begins(self) -> None:
        """The command's outputs begin: what follows counts as ``render``."""
        self.rendering = time.perf_counter()


def add_command_times(timings: dict[str, float], clock: CommandClock) -> None:
    """Put the command line's own phases into a result's ``timings`` (in place): ``imports`` (the
    start-up and the library's import, with the model libraries' own), ``render`` (the outputs
    written and the records made, up to the moment the timings themselves are written) and
    ``total``, the command's wall time with the start-up; ``other`` is what no phase claimed."""
    now = time.perf_counter()
    rendering = now if clock.rendering is None else clock.rendering
    spent = {k: v for k, v in timings.items() if k not in (phases.OTHER, "total")}
    spent["imports"] = spent.get("imports", 0.0) + clock.startup_s + (clock.imported - clock.begun)
    spent["render"] = spent.get("render", 0.0) + (now - rendering)
    timings.clear()
    timings.update(phases.timings(spent, clock.startup_s + (now - clock.begun)))


def emit_result(
    fmt: Format,
    result,
    out: Path | None,
    render: Callable[[], None],
    sweep: bool = True,
    clock: CommandClock | None = None,
) -> None:
    """:func:`emit` of a result object (an audit, a capacity audit, an estimate, or their seeds):
    its meta, its records and (``sweep``) its sweep rows. With ``clock``, the command line's own
    phases join the result's timings (:func:`add_command_times`) before they are written. The
    messages the result keeps name the command line's flags (:func:`~mhaaudit.cli.names.with_flags`)."""
    with_flags(result)
    rows = result.sweep_rows() if sweep else None
    records = result.records()
    if clock is not None:
        add_command_times(_phases_of(result), clock)
    emit(fmt, result.meta(), records, sweep=rows, out=out, render=render)


def _phases_of(result) -> dict[str, float]:
    """The dictionary of a result's phases, which the command line's own join: a Kruskal estimate's ``phases``
    (its ``timings`` are its tests'), else its ``timings``."""
    found = getattr(result, "phases", None)
    return found if isinstance(found, dict) else result.timings


def emit_seeds(fmt: Format, result, out: Path | None) -> None:
    """:func:`emit` of a :class:`~mhaaudit.seeds.SeedsResult`: its records, and its sweep rows when it has any."""
    from ..render import print_report, seeds_report

    with_flags(result)
    rows = result.sweep_rows() or None
    emit(
        fmt,
        result.meta(),
        result.records(),
        sweep=rows,
        out=out,
        render=lambda: print_report(with_flags(seeds_report(result))),
    )


def parquet_to_stdout(fmt: Format) -> bool:
    """Whether ``--format parquet`` sends its bytes to stdout: not to a terminal (``--out`` gets them)."""
    return fmt == Format.parquet and not sys.stdout.isatty()


def check_stdout(fmt: Format, out: Path | None = None) -> None:
    """Binary parquet is not for a terminal: refuse it before any work, unless ``--out`` takes the records.

    Raises:
        InputError: when ``fmt`` is parquet, stdout is a terminal and ``out`` is None.
    """
    from ..errors import InputError

    if fmt == Format.parquet and sys.stdout.isatty() and out is None:
        raise InputError(
            "--format parquet writes binary data to stdout; redirect it to a file or pipe, or use --out FILE.parquet"
        )


def prepare_outputs(out: Path | None, plot: Path | None, fmt: Format) -> None:
    """Check every output path (``--out`` parquet, ``--plot`` figure, stdout) before any work.

    Raises:
        InputError: when ``out`` is not a ``.parquet`` file name, or parquet would go to a terminal.
        OutputError: when ``out`` or ``plot`` cannot be written, or ``plot`` is not a figure file name.
    """
    from ..io import check_parquet_out
    from ..plot import check_plot_path

    if out is not None:
        check_parquet_out(out, "--out")
    if plot is not None:
        check_plot_path(plot)
    check_stdout(fmt, out)


def emit(
    fmt: Format,
    meta: dict,
    records: list[dict],
    *,
    render: Callable[[], None],
    sweep: list[dict] | None = None,
    document: dict | None = None,
    out: Path | None = None,
    write_out: bool = True,
) -> None:
    """The one output path of every command.

    ``records`` (and the ``sweep`` rows, which follow them in parquet tagged ``check = "sweep"``)
    go to the ``out`` parquet file when one is given, stamped with ``meta``. Then stdout gets the
    JSON ``document`` (default ``{"meta", "records"[, "sweep"]}``) as strict JSON, the same rows
    as parquet (not to a terminal: there ``--out`` has them, and stderr says so), or, for the
    table, whatever ``render()`` prints. Every message in them names the command line's flags.
    """
    from ..tables import table_rows

    meta, records, sweep, document = with_flags((meta, records, sweep, document))

    rows = table_rows(records, sweep)
    if out is not None and write_out:  # write_out=False: the command wrote its --out file itself
        from ..io import write_parquet

        write_parquet(rows, out, meta)
    if fmt == Format.json:
        from ..render import print_json

        if document is None:
            document = {"meta": meta, "records": records} | ({} if sweep is None else {"sweep": sweep})
        print_json(document)
    elif parquet_to_stdout(fmt):
        from ..io import parquet_bytes

        sys.stdout.buffer.write(parquet_bytes(rows, meta))
        sys.stdout.flush()
    elif fmt == Format.parquet:  # stdout is a terminal: the records are in the --out file (prepare_outputs)
        say(f"Wrote {out} (parquet is not printed to a terminal)")
    else:
        render()
