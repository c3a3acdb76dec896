"""The standard streams while the command line runs: stdout carries the data and nothing else, and
stderr, where the diagnostics go, never changes how a run ends.

Native libraries write to file descriptor 1, which ``sys.stdout`` cannot stop: MKL's error handler
(``Intel oneMKL ERROR: Parameter 4 was incorrect on entry to DLASCL.``), CUDA, NCCL, some BLAS
builds. While :func:`command_streams` is held, descriptor 1 is a copy of stderr's, so whatever is
written there goes to stderr; the data reaches the real stdout through ``sys.stdout``, meanwhile a
:class:`DataStdout` that writes to a private copy of the descriptor stdout had. Leaving restores
descriptor 1 and both ``sys`` streams. :func:`hold_for_the_process` makes the same arrangement for
the rest of the process (the console script: what native libraries print while the process ends
goes to stderr too).

Meanwhile ``sys.stderr`` drops what it cannot write (stderr closed, on a full device, or a pipe
whose reader left): the diagnostics are lost, the exit status is the one the run earned. A closed
stderr or stdout descriptor is filled (with ``/dev/null``, or stderr) for as long, so that no file the
run opens takes its number and receives what libraries print.

Kept free of torch, numpy and rich: the command line sets the streams up before it knows the command.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .errors import OutputError, one_line, printable

__all__ = [
    "DataStdout",
    "StdoutClosed",
    "command_streams",
    "debugging",
    "flush_c_stdio",
    "flush_streams",
    "hold_for_the_process",
    "native_output_dropped",
    "say",
    "stdout_closed",
]


class StdoutClosed(Exception):
    """The reader of stdout went away (a closed pipe: ``| head``, ``| true``): a quiet end, status 141."""


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _devnull_onto(fd: int) -> None:
    """Point descriptor ``fd`` at /dev/null (what was there is dropped)."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)


def debugging() -> bool:
    """Whether ``MHAAUDIT_DEBUG`` asks for what a run keeps quiet (set to anything but empty or 0): the
    traceback before an error's line, every rank's output, the native libraries' lines."""
    return os.environ.get("MHAAUDIT_DEBUG", "").strip() not in ("", "0")


@contextlib.contextmanager
def native_output_dropped() -> Iterator[None]:
    """Drop what native code writes to descriptors 1 and 2 while the block runs (c10d's log lines while a
    rank joins its job: its retries, the socket it waits on), then restore both; the block says what went
    wrong in its own words. ``MHAAUDIT_DEBUG=1`` keeps the native lines."""
    if debugging():
        yield
        return
    flush_streams()
    saved = {fd: os.dup(fd) for fd in (1, 2) if _is_open(fd)}
    try:
        for fd in saved:
            _devnull_onto(fd)
        yield
    finally:
        flush_c_stdio()
        for fd, copy in saved.items():
            with contextlib.suppress(OSError):
                os.dup2(copy, fd)
            os.close(copy)


def flush_c_stdio() -> None:
    """Flush the C library's buffered streams (a library's ``printf`` to a pipe waits there), so that
    what they hold goes where descriptor 1 points now."""
    with contextlib.suppress(Exception):  # no C library to ask (Windows): nothing held there
        ctypes.CDLL(None).fflush(None)


class DataStdout:
    """``sys.stdout`` during a command: the data's writer, to the descriptor stdout had when the command
    began (``fd``; None: the stream is not a file, such as a test's capture, and writes to itself).

    A failed write is a known error, not a bug: a closed pipe raises :class:`StdoutClosed`; a full disk
    or any other failure an ``OutputError``; a stdout closed from the start (``>&-``) an ``OutputError`` too.
    Writes go to the descriptor at once, whole (``os.write`` until every byte is taken): a buffered writer
    can take a large write that the pipe takes only in part and report success, so a reader that left
    early (``| head -c 10``) would go unnoticed.
    """

    def __init__(self, stream, fd: int | None, *, closed: bool = False, binary: bool = False):
        self._stream, self._fd, self._closed, self._binary = stream, fd, closed, binary

    def __getattr__(self, name):
        return getattr(self._stream, name)

    @property
    def closed(self) -> bool:
        """Whether stdout was closed when the command began."""
        return self._closed

    def fileno(self) -> int:
        """The descriptor the data goes to (not descriptor 1, which is stderr's meanwhile).

        Raises:
            io.UnsupportedOperation: when the data does not go to a descriptor (closed, or a capture).
        """
        if self._fd is None:
            if self._closed:
                raise io.UnsupportedOperation("stdout is closed")
            return self._stream.fileno()
        return self._fd

    def isatty(self) -> bool:
        """Whether the data goes to a terminal."""
        if self._closed:
            return False
        if self._fd is not None:
            return os.isatty(self._fd)
        return self._stream.isatty()

    def _guard(self, call, *args):
        try:
            return call(*args)
        except BrokenPipeError as exc:
            raise StdoutClosed() from exc
        except OSError as exc:
            raise OutputError(f"cannot write to stdout: {exc.strerror or one_line(exc)}") from exc

    def _write_fd(self, data) -> None:
        raw = data if self._binary else data.encode(self._stream.encoding or "utf-8", self._stream.errors or "strict")
        view = memoryview(raw)
        while view:
            view = view[os.write(self._fd, view) :]  # type: ignore[arg-type]

    def write(self, data):
        """Write ``data`` (text, or bytes through :attr:`buffer`) to stdout at once, whole.

        Raises:
            StdoutClosed: when stdout's reader went away.
            OutputError: when stdout was closed from the start, or the write fails otherwise (a full disk).
        """
        if self._closed:
            raise OutputError("cannot write to stdout: it is closed")
        if self._fd is None:
            return self._guard(self._stream.write, data)
        self._guard(self._write_fd, data)
        return len(data)

    def writelines(self, lines):
        """Write each of ``lines``."""
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Nothing to do for the data, which is never buffered; a capture's stream is flushed."""
        if self._fd is None and not self._closed:
            self._guard(self._stream.flush)
        elif self._fd is not None:  # the stream's own descriptor is stderr's meanwhile: what it holds is not data
            with contextlib.suppress(OSError, ValueError):
                self._stream.flush()

    @property
    def buffer(self):
        """The same writer for bytes (``--format parquet``)."""
        return DataStdout(getattr(self._stream, "buffer", None), self._fd, closed=self._closed, binary=True)


class Diagnostics:
    """``sys.stderr`` during a command: what it cannot write is dropped. Once a write fails (stderr on a full
    device, a pipe whose reader left), stderr's descriptor (and descriptor 1, its copy) is pointed at
    /dev/null, so that neither libraries nor the interpreter's last flush meet the failure again."""

    def __init__(self, stream, arrangement: _Arrangement | None = None):
        self._stream, self._arrangement = stream, arrangement
        self._lost = stream is None

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def fileno(self) -> int:
        """stderr's descriptor.

        Raises:
            io.UnsupportedOperation: when stderr was closed from the start.
        """
        if self._stream is None:
            raise io.UnsupportedOperation("stderr is closed")
        return self._stream.fileno()

    def isatty(self) -> bool:
        """Whether stderr is a terminal that still takes what is written."""
        if self._lost:
            return False
        try:
            return bool(self._stream.isatty())
        except (OSError, ValueError, AttributeError):
            return False

    def _lose(self) -> None:
        self._lost = True
        try:
            fd = self._stream.fileno()
        except (OSError, ValueError, AttributeError):
            return
        if fd == 2:
            _devnull_onto(2)
            if self._arrangement is not None and self._arrangement is _ACTIVE:  # descriptor 1 is stderr's copy
                _devnull_onto(1)
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()  # what the stream still holds goes to /dev/null now

    def write(self, text):
        """Write ``text`` to stderr, or drop it when stderr cannot take it."""
        if not self._lost:
            try:
                self._stream.write(text)
            except (OSError, ValueError):
                self._lose()
        return len(text)

    def writelines(self, lines):
        """Write each of ``lines``."""
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Flush stderr, or drop what it holds when it cannot take it."""
        if not self._lost:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._lose()


def say(line: str) -> None:
    """``line`` on stderr, its control characters shown escaped (:func:`mhaaudit.errors.printable`);
    nothing when stderr is closed or cannot take it. What a message to the person running a command
    goes through (an ``Error:`` line, a note)."""
    stream = sys.stderr
    if stream is None:  # closed: print(file=None) would write to stdout, which is for the data
        return
    with contextlib.suppress(OSError, ValueError):
        stream.write(printable(line) + "\n")
        stream.flush()


@dataclass
class _Arrangement:
    stdout: Any  # sys.stdout and sys.stderr as they were
    stderr: Any
    saved: int | None  # a copy of descriptor 1 as it was (None: it was closed)
    stderr_filled: bool  # descriptor 2 was closed and holds /dev/null meanwhile
    data: DataStdout | None = field(default=None)


_ACTIVE: _Arrangement | None = None
_FOR_THE_PROCESS = False


def _data_descriptor(stream, saved: int | None) -> tuple[int | None, bool]:
    """Where the data goes: (descriptor, closed). A stream without a descriptor (a capture) writes itself."""
    if stream is None:
        return None, True
    try:
        fd = stream.fileno()
    except io.UnsupportedOperation:  # not a file: a test's capture, a notebook's stream
        return None, False
    except AttributeError:
        return None, False
    except (OSError, ValueError):  # a closed file
        return None, True
    if fd == 1:
        return saved, saved is None
    return fd, not _is_open(fd)


def _start() -> _Arrangement:
    out, err = sys.stdout, sys.stderr
    for stream in (out, err):  # what Python holds for the streams goes where it was written to
        with contextlib.suppress(Exception):
            stream.flush()
    filled = not _is_open(2)  # first: a copy made while 2 is free would take its number
    if filled:
        _devnull_onto(2)
    saved = os.dup(1) if _is_open(1) else None  # os.dup: not inherited by child processes
    fd, closed = _data_descriptor(out, saved)
    os.dup2(2, 1)
    flush_c_stdio()  # what a library printed before and the C library still holds: not data either
    arrangement = _Arrangement(out, err, saved, filled)
    arrangement.data = DataStdout(out, fd, closed=closed)
    sys.stdout = arrangement.data
    sys.stderr = Diagnostics(err, arrangement)
    return arrangement


def flush_streams() -> None:
    """Flush ``sys.stdout`` and ``sys.stderr`` (a closed stream or a full disk: nothing more to say), then the C
    library's buffered streams (:func:`flush_c_stdio`)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    flush_c_stdio()


def _stop(arrangement: _Arrangement) -> None:
    flush_streams()  # what a library printed meanwhile goes to stderr, not later to stdout
    with contextlib.suppress(OSError):
        if arrangement.saved is not None:
            os.dup2(arrangement.saved, 1)
            os.close(arrangement.saved)
        else:
            os.close(1)
        if arrangement.stderr_filled:
            os.close(2)
    sys.stdout, sys.stderr = arrangement.stdout, arrangement.stderr


@contextlib.contextmanager
def command_streams() -> Iterator[None]:
    """Within, descriptor 1 is stderr's and ``sys.stdout`` the data's writer (see the module); restored on
    leaving, however the block ends. Nested, or after :func:`hold_for_the_process`, it changes nothing."""
    global _ACTIVE
    if _ACTIVE is not None:
        yield
        return
    _ACTIVE = _start()
    try:
        yield
    finally:
        if not _FOR_THE_PROCESS:
            arrangement, _ACTIVE = _ACTIVE, None
            _stop(arrangement)


def hold_for_the_process() -> None:
    """Make the arrangement of :func:`command_streams` for the rest of the process, never undone: what
    native libraries print while the process ends (CUDA, NCCL) goes to stderr too."""
    global _ACTIVE, _FOR_THE_PROCESS
    if _ACTIVE is None:
        _ACTIVE = _start()
    _FOR_THE_PROCESS = True


def stdout_closed() -> bool:
    """Whether the data has nowhere to go: stdout was closed (``>&-``) when the streams were arranged,
    or is closed now."""
    data = _ACTIVE.data if _ACTIVE is not None else None
    if data is not None:
        return data.closed
    return _data_descriptor(sys.stdout, 1 if _is_open(1) else None)[1]


def silence_data() -> None:
    """After a closed pipe: point the data's descriptor at /dev/null, so that the interpreter's last flush
    finds no pipe to complain about (Python's recommended handling of a closed pipe)."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        _devnull_onto(sys.stdout.fileno())
