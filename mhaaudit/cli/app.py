"""The ``mhaaudit`` application: the commands registered on one Typer app, and what errors become.

The command modules define plain functions and know nothing of the app; this module imports
and registers them. :data:`ERRORS` maps exception types to an exit status and a one-line
message on stderr (known errors: status 2; anything else is a bug: status 3; Ctrl-C: status
130, SIGTERM: status 143 and SIGHUP: status 129, also while the libraries are still being
imported; stdout's reader gone: status 141, quietly). Set ``MHAAUDIT_DEBUG=1`` to see the
traceback too (the status is the same). A command's file outputs are staged and put in place only when it ends well
(:func:`mhaaudit.staging.staged_outputs`). While it runs, stdout carries its data alone, whatever
native libraries write to file descriptor 1, and a stderr that cannot be written changes no exit
status (:mod:`mhaaudit.stdio`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import traceback
import warnings

from .. import ending
from ..stdio import debugging, flush_streams, say

INTERRUPTED = "interrupted"
COMPLETE_VAR = "_MHAAUDIT_COMPLETE"  # set by the completion script of --install-completion / --show-completion
INTERRUPTED_STATUS = 130
TERMINATED = "terminated (SIGTERM)"
TERMINATED_STATUS = 143  # 128 + SIGTERM, as a shell reports a process SIGTERM ended
HUNG_UP = "hung up (SIGHUP)"
HUNG_UP_STATUS = 129  # 128 + SIGHUP: the terminal closed (or `kill -HUP`)
#: After Ctrl-C, SIGTERM or SIGHUP, the seconds from the signal within which the process ends, whatever its
#: main thread still waits on (:mod:`mhaaudit.ending`); more than a launched job's rank 0 waits for the others
#: to leave (``mhaaudit.distributed.LEAVE_WAIT_S``) and the end's own flush, less than schedulers allow after
#: SIGTERM (30 s for Slurm and Kubernetes by default)
SIGNAL_END_LIMIT_S = 20.0
#: Of those, the seconds kept for the end itself: removing the outputs (a second at most to wait for the
#: registry of what is under way, and one for the run's own), then flushing the streams (one)
_END_CLEANUP_S = 3.0
PIPE_CLOSED_STATUS = 141  # 128 + SIGPIPE: the reader of stdout went away (as `yes | head` ends `yes`)
STDOUT_CLOSED = "stdout is closed, so the data has nowhere to go; redirect it (> FILE, or > /dev/null to discard it)"


class Terminated(BaseException):
    """SIGTERM arrived (``timeout``, a cluster scheduler, ``kill``): raised in the main thread, so the run
    unwinds (its staged outputs removed) and ends with one line and status 143."""

    line, status = TERMINATED, TERMINATED_STATUS


class HungUp(Terminated):
    """SIGHUP arrived (the terminal closed): ended as SIGTERM is, with one line and status 129."""

    line, status = HUNG_UP, HUNG_UP_STATUS


# The signals that end a run as Terminated does (SIGHUP is absent on Windows).
_ENDING = {signal.SIGTERM: Terminated, **({signal.SIGHUP: HungUp} if hasattr(signal, "SIGHUP") else {})}


def _on_signal(signum, frame) -> None:
    for sig in _ENDING:  # a second one does not interrupt the cleanup
        signal.signal(sig, signal.SIG_IGN)
    ending.note(signum)
    raise _ENDING[signal.Signals(signum)]()


def _on_interrupt(signum, frame) -> None:
    """Ctrl-C: Python's own answer, the run noted as ending first (:mod:`mhaaudit.ending`).

    Raises:
        KeyboardInterrupt: always.
    """
    ending.note(signum)
    raise KeyboardInterrupt


def _handle_signals() -> dict:
    """Install :func:`_on_signal` for SIGTERM and SIGHUP where they have the default disposition (an ignored
    one, as under ``nohup``, stays ignored), and :func:`_on_interrupt` for Ctrl-C where it has Python's
    default handler, when this is the main thread; returns what to restore."""
    previous: dict = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    wanted: list[tuple[signal.Signals, object, Callable]] = [(sig, signal.SIG_DFL, _on_signal) for sig in _ENDING]
    wanted.append((signal.SIGINT, signal.default_int_handler, _on_interrupt))
    for sig, default, handler in wanted:
        try:
            if signal.getsignal(sig) is default:
                previous[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):  # pragma: no cover - no signals here
            pass
    return previous


def _restore_signals(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def _signal_behind(exc: BaseException) -> BaseException:
    """The signal's exception (KeyboardInterrupt, :class:`Terminated`) behind ``exc`` when it caused it, else
    ``exc``. A signal's exception raised where Python wraps what is raised (Python before 3.12 turns one raised
    while a class is created, in a ``__set_name__``, into a RuntimeError), or one that a cleanup's error
    then replaced, is still the signal's: the run ends with its line and status, not as a bug."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, (KeyboardInterrupt, Terminated)):
            return link
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return exc


def _settle_interrupt() -> None:
    """Let a handled Ctrl-C end the process with status 130, not as killed by SIGINT.

    Under ``python -m``, CPython kills the process with SIGINT at exit, whatever status it was
    given, when the last string-evaluated code (``exec``/``eval`` of a string, which libraries
    use) ended in a KeyboardInterrupt, even one handled since. Evaluating a string resets that.
    """
    exec("pass", {})


def _end_now(code: int, line: str | None = None) -> NoReturn:
    """End the process with status ``code`` now, from any thread, after ``line`` (when given) on stderr and the
    streams flushed, for a second at most (a pipe whose reader stopped reading would hold them for ever)."""

    def flush() -> None:
        if line:
            say(f"Error: {line}")
        flush_streams()

    flushing = threading.Thread(target=flush, name="mhaaudit-end-flush", daemon=True)
    flushing.start()
    flushing.join(1.0)
    os._exit(code)


def _end_signalled(code: int) -> NoReturn:
    """End the process with status ``code`` once a run that a signal ended has unwound (its staged outputs
    removed, its line said), without the interpreter's own end: that waits for every helper thread, and
    after a signal one may wait for ever on a lock the main thread was stopped holding
    (:mod:`mhaaudit.workers`); and a signal that stopped an import half way (torch's, which starts native
    threads) can leave native state whose teardown aborts the process ("terminate called without an
    active exception", status 134). Further signals are ignored meanwhile; what a helper thread is still
    writing is removed first (:func:`mhaaudit.staging.abandon`)."""
    for sig in (signal.SIGINT, *_ENDING):
        with contextlib.suppress(ValueError, OSError):  # (the main thread only)
            signal.signal(sig, signal.SIG_IGN)
    abandon()
    _end_now(code)


#: The line a signal's end says, by signal number (SIGHUP is absent on Windows)
_SIGNAL_LINES = {
    int(signal.SIGINT): INTERRUPTED,
    int(signal.SIGTERM): TERMINATED,
    **({int(signal.SIGHUP): HUNG_UP} if hasattr(signal, "SIGHUP") else {}),
}


def _end_after_signal(signum: int) -> NoReturn:
    """The end :func:`run` has :mod:`mhaaudit.ending` make after Ctrl-C, SIGTERM or SIGHUP when the process is
    still there (it ends within :data:`SIGNAL_END_LIMIT_S` seconds of the signal): the run's staged and
    half-written outputs removed (:func:`mhaaudit.staging.abandon`), then the status and the one line the
    run settled on (:func:`mhaaudit.ending.settle`) when it settled on a failure, or else the signal's line
    and status (128 + its number, as for the statuses above)."""
    abandon()
    status, said = ending.settled()
    if not status:  # never settled, or settled on success before its outputs were removed here
        status, said = 128 + int(signum), False
    _end_now(status, None if said else _SIGNAL_LINES.get(int(signum), INTERRUPTED))


def _ended_while_importing(line: str, status: int) -> NoReturn:
    """Ctrl-C, SIGTERM or SIGHUP, caught by this module's own handlers while the libraries load: one line on
    stderr and the signal's status. In the command line's own process (:func:`_is_the_command_line`) the process
    then ends without the interpreter's own end (:func:`_end_now`): an import stopped half way (torch's starts
    native threads) can leave a thread or native state that the interpreter's end waits on for ever, and
    nothing is written yet, so there is nothing to remove. In a host that imports the library (a notebook
    kernel, a test run) it raises ``SystemExit`` with that status, for the host to handle.

    Raises:
        SystemExit: outside the command line's own process.
    """
    if not _is_the_command_line():
        say(f"Error: {line}")
        ending.settle(status, said=True)
        if status == INTERRUPTED_STATUS:
            _settle_interrupt()
        raise SystemExit(status)
    for sig in (signal.SIGINT, *_ENDING):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, signal.SIG_IGN)
    _end_now(status, line)


def _is_the_command_line() -> bool:
    """Whether this process is the command line's own: one that ran ``mhaaudit.__main__.entry`` (``python -m
    mhaaudit``, torchrun's too, or a script that called it), or the ``mhaaudit`` console script (its name in
    ``sys.argv[0]``)."""
    if ending.owns_the_process():
        return True
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return os.path.splitext(script)[0] == "mhaaudit"


def _lost_signal_unsaid(unraisable) -> None:
    """``sys.unraisablehook`` of the command line's own process: a signal's exception that its handler raised where
    Python cannot raise it (in a finaliser, or the weakref callback an import's module lock has) is not printed
    ("Exception ignored ..." and a traceback), since the handler noted the signal and the run ends on it with its
    one line all the same: :func:`run` ends it when the signal came while the libraries loaded, and once the run
    is under way, which no exception now unwinds, the watch of :mod:`mhaaudit.ending` ends it at once
    (:func:`mhaaudit.ending.hasten`), its staged outputs removed. Any other goes to the hook there was before."""
    if isinstance(unraisable.exc_value, (Terminated, KeyboardInterrupt)) and ending.noted() is not None:
        ending.hasten()
        return
    _UNRAISABLE(unraisable)


_UNRAISABLE = sys.unraisablehook
if _is_the_command_line():
    sys.unraisablehook = _lost_signal_unsaid
_importing = _handle_signals()
try:  # Ctrl-C (or SIGTERM, SIGHUP) while the libraries load (before main runs) gets the same one line as later on
    import re
    from collections.abc import Callable
    from typing import NamedTuple, NoReturn

    import click
    import typer
    from typer.core import TyperCommand, TyperGroup

    from .. import __version__
    from ..errors import MhaauditError, one_line, path_problem
    from ..staging import abandon, staged_outputs
    from ..stdio import StdoutClosed, command_streams, hold_for_the_process, silence_data, stdout_closed
    from .capacity import capacity
    from .check import check
    from .kruskal import kruskal
    from .memorize import memorize
    from .names import flag
    from .reproduce import reproduce
except KeyboardInterrupt:  # pragma: no cover - exercised by sending SIGINT to a subprocess
    if signal.SIGINT not in _importing:  # raised by the handler of a host that handles SIGINT itself: the host's
        raise
    _ended_while_importing(INTERRUPTED, INTERRUPTED_STATUS)
except Terminated as _ended:  # pragma: no cover - exercised by sending SIGTERM to a subprocess
    _ended_while_importing(_ended.line, _ended.status)
except Exception as _failed:  # pragma: no cover - a signal's exception that an import wrapped (_signal_behind)
    _behind = _signal_behind(_failed)
    if isinstance(_behind, Terminated):
        _ended_while_importing(_behind.line, _behind.status)
    if isinstance(_behind, KeyboardInterrupt) and signal.SIGINT in _importing:
        _ended_while_importing(INTERRUPTED, INTERRUPTED_STATUS)
    raise
finally:
    _restore_signals(_importing)


# The longest list of choices shown as the value type (``<table|json|parquet>``); longer ones are
# listed in the option's help instead.
_LONGEST_CHOICES = 18


def _choices(param) -> list[str]:
    """The values an option accepts, when it is a choice (Typer keeps them on ``type_descriptor``
    in newer releases, click on ``type``)."""
    for holder in (getattr(param, "type_descriptor", None), getattr(param, "type", None)):
        choices = getattr(holder, "choices", None)
        if choices:
            return [str(getattr(c, "value", c)) for c in choices]
    return []


def _parsed_path(param) -> bool:
    """Whether an argument is a path read by a parser of ours (:func:`.options.named_path`): Typer names its type
    after the annotation (``<Path>``), where it shows ``<path>`` for a path it reads itself."""
    from pathlib import Path

    desc = getattr(param, "type_descriptor", None)
    info = getattr(desc, "parameter_info", None)
    return getattr(desc, "annotation", None) is Path and getattr(info, "parser", None) is not None


class _StandardHelp:
    """Help that reads like a standard CLI: a flag shows no ``<bool>`` value type, and a repeatable
    option the type of one value (``<int>``, not ``<list[int]>``; its help says it repeats)."""

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for p in params:
            if p.param_type_name == "argument" and _parsed_path(p):
                p.display_type = lambda ctx: "<path>"
            if p.metavar is not None or p.param_type_name != "option":
                continue
            if getattr(p, "is_flag", False):
                p.metavar = ""  # rendered as no type at all
            elif len("|".join(_choices(p))) > _LONGEST_CHOICES:
                # A long list of choices would be broken inside a word in the narrow type column:
                # name the value, and list the choices in the help text, which wraps between words.
                p.metavar = f"<{p.name.replace('_', '-')}>"
                p.help = f"{(p.help or '').rstrip()} One of: {', '.join(_choices(p))}."
            elif _choices(p):
                # Typer before 0.27 shows a choice as click does (``[table|json]``): the same brackets as
                # every other value type, from any release.
                p.metavar = f"<{'|'.join(_choices(p))}>"
            elif getattr(p, "multiple", False) and hasattr(p, "display_type"):
                shown = re.fullmatch(r"<list\[(.+)\]>", str(p.display_type(ctx)))
                if shown:
                    p.metavar = f"<{shown.group(1)}>"
        return params


class Command(_StandardHelp, TyperCommand):
    """A command whose help reads like a standard CLI's (see ``_StandardHelp``)."""


class Group(_StandardHelp, TyperGroup):
    """The group of commands, its help read like a standard CLI's (see ``_StandardHelp``)."""


app = typer.Typer(
    name="mhaaudit",
    help=(
        "Audit transformer features against the linear-independence assumptions behind the "
        "memorisation capacity of multi-head attention (Mahdavi, Liao, Thrampoulidis, ICLR 2024)."
    ),
    cls=Group,
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"mhaaudit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """mhaaudit: audit the assumptions behind the memorisation capacity of multi-head attention."""


for _name, _command in (
    ("check", check),
    ("kruskal", kruskal),
    ("capacity", capacity),
    ("memorize", memorize),
    ("reproduce", reproduce),
):
    app.command(_name, cls=Command)(_command)


# --------------------------------------------------------------------------- errors -> exit status


class ErrorRule(NamedTuple):
    """Exceptions of ``types`` (those ``applies`` accepts, when given) exit with ``code`` after
    ``Error: <message(exc)>`` on stderr."""

    types: tuple[type[BaseException], ...]
    code: int
    message: Callable[[BaseException], str]
    traceback_in_debug: bool = True  # MHAAUDIT_DEBUG=1 prints the traceback first
    applies: Callable[[BaseException], bool] | None = None

    def matches(self, exc: BaseException) -> bool:
        """Whether this rule maps ``exc``."""
        return isinstance(exc, self.types) and (self.applies is None or self.applies(exc))


def _path_problem(exc: BaseException) -> str:
    line = path_problem(exc)
    assert line is not None, "the rule maps only what path_problem describes"
    return line


def _internal(exc: BaseException) -> str:
    return (
        f"internal error ({type(exc).__name__}: {one_line(exc)}); "
        "rerun with MHAAUDIT_DEBUG=1 for the traceback and please report it"
    )


def _known(exc: BaseException) -> str:
    return one_line(Exception(exc.message_for(flag)))  # type: ignore[attr-defined]


def _usage(exc: BaseException) -> str:
    # click's message is format_message() ("Invalid value for '--limit': ..."), not str(exc). Typer checks a
    # choice through pydantic, whose ValueError reads "Value error, 'x' is not one of ...": the prefix is
    # pydantic's name for the exception, not a word for the user.
    text = exc.format_message()  # type: ignore[attr-defined]
    return one_line(Exception(text.replace(": Value error, ", ": ")))


# Typer releases that vendor click raise their own usage-error and abort types besides click's.
_USAGE = tuple(dict.fromkeys(t for t in (click.exceptions.ClickException, getattr(typer, "TyperException", None)) if t))
_ABORTS = tuple(
    dict.fromkeys(t for t in (click.exceptions.Abort, getattr(typer, "Abort", None), KeyboardInterrupt) if t)
)


def _lost_rank() -> str | None:
    """Under torchrun, the line naming a rank of the job that failed or is gone (None otherwise)."""
    if "torch.distributed" not in sys.modules:  # no job: nothing to ask (and nothing imported)
        return None
    from ..distributed import lost_rank_line

    return lost_rank_line()


# First match wins: a problem the user can fix, a usage error, an interruption, a bug.
ERRORS: tuple[ErrorRule, ...] = (
    ErrorRule((MhaauditError,), 2, _known),
    ErrorRule(_USAGE, 2, _usage),
    ErrorRule(_ABORTS, INTERRUPTED_STATUS, lambda exc: INTERRUPTED, traceback_in_debug=False),
    ErrorRule((HungUp,), HUNG_UP_STATUS, lambda exc: HUNG_UP, traceback_in_debug=False),
    ErrorRule((Terminated,), TERMINATED_STATUS, lambda exc: TERMINATED, traceback_in_debug=False),
    ErrorRule((StdoutClosed,), PIPE_CLOSED_STATUS, lambda exc: "", traceback_in_debug=False),  # quiet
    ErrorRule((OSError,), 2, _path_problem, applies=lambda exc: path_problem(exc) is not None),
    ErrorRule((Exception,), 3, _internal),
)


def _quiet_redundant_warnings() -> None:
    """Ignore PIL's warning for an image whose header declares more pixels than PIL decodes without question (its
    own ``Image.MAX_IMAGE_PIXELS``): a run decodes fewer (``sources.decoding.MAX_IMAGE_PIXELS``) and names each
    image it skipped in its own words, so on the command line the warning would only add a library's two lines
    on stderr."""
    warnings.filterwarnings(
        "ignore", message=r"Image size \(\d+ pixels\) exceeds limit", category=RuntimeWarning, module=r"PIL\.Image"
    )


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app and map errors to exit codes.

    0: the command ran; 1: an assumption named in ``--fail-on`` failed; 2: a usage or input
    error, an output that cannot be written, a path the system will not let it read or write (a
    folder's permissions, a full disk: :data:`mhaaudit.errors.PATH_ERRNOS`), or a closed stdout (one
    line on stderr); 3: an internal error (a bug); 130: interrupted (Ctrl-C); 143: terminated
    (SIGTERM); 129: hung up (SIGHUP); 141: stdout's reader went away (quiet). Every file output of
    the command is staged and put in place when it succeeds (:func:`mhaaudit.staging.staged_outputs`):
    whichever way it ends otherwise, none is written. While the command runs, descriptor 1 is stderr's and the data goes
    to stdout through ``sys.stdout`` (:func:`mhaaudit.stdio.command_streams`); a line stderr cannot
    take is dropped, the status kept. ``MHAAUDIT_DEBUG=1`` prints an error's traceback on stderr before its
    line; the status is the same.

    Returns:
        The exit status; errors are mapped to it, not raised.

    Raises:
        KeyboardInterrupt: only within, where Typer answers Ctrl-C with status 130: it is mapped as Ctrl-C is.
            An error no rule maps (a ``SystemExit``) passes through as it came.
    """
    debug = debugging()
    args = sys.argv[1:] if argv is None else [str(a) for a in argv]
    if COMPLETE_VAR in os.environ:
        # The shell asks for completions (--install-completion set this up): click answers and exits.
        return app(args=args, prog_name="mhaaudit")
    if not args:
        # No command: the help, on stderr (stdout carries data only), and status 2.
        with contextlib.redirect_stdout(sys.stderr), contextlib.suppress(Exception):
            app(args=["--help"], prog_name="mhaaudit", standalone_mode=False)
        return 2
    _quiet_redundant_warnings()
    with command_streams():
        if stdout_closed():  # refused before anything runs: the work would be for nothing
            say(f"Error: {STDOUT_CLOSED}")
            return 2
        rv = _run_command(args, debug)
    if rv == INTERRUPTED_STATUS:
        _settle_interrupt()
    return rv


def _run_command(args: list[str], debug: bool) -> int:
    """The command of ``args``, its outputs staged and its errors mapped to a status (see :func:`main`).

    Raises:
        KeyboardInterrupt: only within, as :func:`main` says; what main lets pass passes through here.
    """
    previous, said = _handle_signals(), False
    try:
        try:
            with staged_outputs():
                rv = app(args=args, prog_name="mhaaudit", standalone_mode=False)
                if rv == INTERRUPTED_STATUS:  # newer Typer turns Ctrl-C into this status: no output is kept
                    raise KeyboardInterrupt
                sys.stdout.flush()  # a full disk or a closed pipe shows here, not in the interpreter's last flush
        except BaseException as caught:
            exc = _signal_behind(caught)
            rule = next((r for r in ERRORS if r.matches(exc)), None)
            if rule is None:
                raise  # SystemExit and the like
            if debug and (rule.traceback_in_debug or exc is not caught):  # (a bug's, that replaced the signal's)
                traceback.print_exception(caught, file=sys.stderr)  # asked for: the status is kept
            message, rv = rule.message(exc), rule.code
            if isinstance(exc, Terminated):  # under torchrun: the launcher ends rank 0 once another rank has died
                lost = _lost_rank()
                if lost:
                    message, rv = lost, 2
            if message:
                say(f"Error: {message}")
                said = True
            if isinstance(exc, StdoutClosed):
                silence_data()
        status = rv if isinstance(rv, int) else 0
        if ending.ending():  # a signal ended the run (or came while it ended): the end after it keeps this
            ending.settle(status, said)
        return status
    finally:
        _restore_signals(previous)
        if not ending.watching():  # called in-process: a later run of this process starts afresh
            ending.clear()


def run(argv: list[str] | None = None) -> NoReturn:  # pragma: no cover - tested through a subprocess
    """The console script, and ``python -m mhaaudit`` once this module is imported: run the command
    line and end the process with its exit status. A rank of a torchrun job (started either way)
    joins the job, and ends through :func:`mhaaudit.distributed.leave`, never through the
    interpreter's teardown. From the start, stdout carries the data alone
    (:func:`mhaaudit.stdio.hold_for_the_process`). After Ctrl-C, SIGTERM or SIGHUP the process ends as soon
    as the run has unwound and its streams are flushed (a second at most), whatever a helper thread still
    waits on (:func:`_end_signalled`), and within :data:`SIGNAL_END_LIMIT_S` seconds of the signal,
    whatever its main thread waits on (:func:`_end_after_signal`)."""
    from ..distributed import following, launched, leave, run_cli

    hold_for_the_process()  # what native libraries print, to the process's end (CUDA, NCCL), goes to stderr
    ending.watch(SIGNAL_END_LIMIT_S - _END_CLEANUP_S, _end_after_signal, _SIGNAL_LINES)
    early = ending.noted()
    if early is not None:  # a signal came while the libraries loaded, and a library swallowed what its handler raised
        _end_after_signal(early)
    # a rank of a job handles the signals as main does from its start: the ranks other than 0 never run main
    previous = _handle_signals() if launched() else {}
    try:
        code = run_cli(main, argv) if launched() else main(argv)
    except (KeyboardInterrupt, Terminated) as exc:  # between the commands' own handling and the exit
        code = exc.status if isinstance(exc, Terminated) else INTERRUPTED_STATUS
        if not following():  # only rank 0 speaks for a job
            say(f"Error: {exc.line if isinstance(exc, Terminated) else INTERRUPTED}")
        ending.settle(code, said=True)
    finally:
        _restore_signals(previous)
    if launched():  # a rank of a torchrun job: see mhaaudit.distributed.leave
        leave(code)
    if code in (INTERRUPTED_STATUS, TERMINATED_STATUS, HUNG_UP_STATUS) or ending.ending():
        _end_signalled(code)
    sys.exit(code)
