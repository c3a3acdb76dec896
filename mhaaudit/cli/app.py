"""The ``mhaaudit`` application: the commands registered on one Typer app, and what errors become.

The command modules define plain functions and know nothing of the app; this module imports
and registers them. :data:`ERRORS` maps exception types to an exit status and a one-line
message on stderr (known errors: status 2; anything else is a bug: status 3; Ctrl-C: status
130, also while the libraries are still being imported). Set ``MHAAUDIT_DEBUG=1`` to see the
traceback instead.
"""

from __future__ import annotations

import sys

INTERRUPTED = "interrupted"
COMPLETE_VAR = "_MHAAUDIT_COMPLETE"  # set by the completion script of --install-completion / --show-completion
INTERRUPTED_STATUS = 130


def _settle_interrupt() -> None:
    """Let a handled Ctrl-C end the process with status 130, not as killed by SIGINT.

    Under ``python -m``, CPython kills the process with SIGINT at exit, whatever status it was
    given, when the last string-evaluated code (``exec``/``eval`` of a string, which libraries
    use) ended in a KeyboardInterrupt, even one handled since. Evaluating a string resets that.
    """
    exec("pass", {})


def _interrupted() -> None:
    """Ctrl-C: one line on stderr and status 130, whenever it comes."""
    print(f"Error: {INTERRUPTED}", file=sys.stderr)
    _settle_interrupt()
    raise SystemExit(INTERRUPTED_STATUS)


try:  # Ctrl-C while the libraries load (before main runs) gets the same one line as later on
    import contextlib
    import os
    import re
    from typing import Callable, NamedTuple

    import click
    import typer
    from typer.core import TyperCommand, TyperGroup

    from .. import __version__
    from ..errors import MhaauditError, one_line
    from .capacity import capacity
    from .check import check
    from .kruskal import kruskal
    from .memorize import memorize
    from .reproduce import reproduce
except KeyboardInterrupt:  # pragma: no cover - exercised by sending SIGINT to a subprocess
    _interrupted()


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


class _StandardHelp:
    """Help that reads like a standard CLI: a flag shows no ``<bool>`` value type, and a repeatable
    option the type of one value (``<int>``, not ``<list[int]>``; its help says it repeats)."""

    def get_params(self, ctx):
        params = super().get_params(ctx)  # type: ignore[misc]
        for p in params:
            if p.metavar is not None or p.param_type_name != "option":
                continue
            if getattr(p, "is_flag", False):
                p.metavar = ""  # rendered as no type at all
            elif len("|".join(_choices(p))) > _LONGEST_CHOICES:
                # A long list of choices would be broken inside a word in the narrow type column:
                # name the value, and list the choices in the help text, which wraps between words.
                p.metavar = f"<{p.name.replace('_', '-')}>"
                p.help = f"{(p.help or '').rstrip()} One of: {', '.join(_choices(p))}."
            elif getattr(p, "multiple", False) and hasattr(p, "display_type"):
                shown = re.fullmatch(r"<list\[(.+)\]>", str(p.display_type(ctx)))
                if shown:
                    p.metavar = f"<{shown.group(1)}>"
        return params


class Command(_StandardHelp, TyperCommand):
    pass


class Group(_StandardHelp, TyperGroup):
    pass


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
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."),
) -> None:
    """mhaaudit: audit the assumptions behind the memorisation capacity of multi-head attention."""


for _name, _command in (("check", check), ("kruskal", kruskal), ("capacity", capacity), ("memorize", memorize),
                        ("reproduce", reproduce)):
    app.command(_name, cls=Command)(_command)


# --------------------------------------------------------------------------- errors -> exit status


class ErrorRule(NamedTuple):
    """Exceptions of ``types`` exit with ``code`` after ``Error: <message(exc)>`` on stderr."""

    types: tuple[type[BaseException], ...]
    code: int
    message: Callable[[BaseException], str]
    traceback_in_debug: bool = True  # MHAAUDIT_DEBUG=1 re-raises instead


def _internal(exc: BaseException) -> str:
    return (f"internal error ({type(exc).__name__}: {one_line(exc)}); "
            "rerun with MHAAUDIT_DEBUG=1 for the traceback and please report it")


def _flag(param: str) -> str:
    """The CLI's name of a library parameter that an error names (``text_column`` -> ``--text-column``)."""
    return "--" + param.replace("_", "-")


def _known(exc: BaseException) -> str:
    return one_line(Exception(exc.message_for(_flag)))  # type: ignore[attr-defined]


def _usage(exc: BaseException) -> str:
    # click's message is format_message() ("Invalid value for '--limit': ..."), not str(exc).
    return one_line(Exception(exc.format_message()))  # type: ignore[attr-defined]


# Typer releases that vendor click raise their own usage-error and abort types besides click's.
_USAGE = tuple(dict.fromkeys(t for t in (click.exceptions.ClickException, getattr(typer, "TyperException", None)) if t))
_ABORTS = tuple(dict.fromkeys(t for t in (click.exceptions.Abort, getattr(typer, "Abort", None), KeyboardInterrupt) if t))

# First match wins: a problem the user can fix, a usage error, an interruption, a bug.
ERRORS: tuple[ErrorRule, ...] = (
    ErrorRule((MhaauditError,), 2, _known),
    ErrorRule(_USAGE, 2, _usage),
    ErrorRule(_ABORTS, INTERRUPTED_STATUS, lambda exc: INTERRUPTED, traceback_in_debug=False),
    ErrorRule((Exception,), 3, _internal),
)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app and map errors to exit codes.

    0: the command ran; 1: an assumption named in ``--fail-on`` failed; 2: a usage or input
    error (one line on stderr); 3: an internal error (a bug); 130: interrupted.
    """
    debug = os.environ.get("MHAAUDIT_DEBUG", "").strip() not in ("", "0")
    args = sys.argv[1:] if argv is None else [str(a) for a in argv]
    if COMPLETE_VAR in os.environ:
        # The shell asks for completions (--install-completion set this up): click answers and exits.
        return app(args=args, prog_name="mhaaudit")
    if not args:
        # No command: the help, on stderr (stdout carries data only), and status 2.
        with contextlib.redirect_stdout(sys.stderr):
            with contextlib.suppress(Exception):
                app(args=["--help"], prog_name="mhaaudit", standalone_mode=False)
        return 2
    try:
        rv = app(args=args, prog_name="mhaaudit", standalone_mode=False)
    except BaseException as exc:
        rule = next((r for r in ERRORS if isinstance(exc, r.types)), None)
        if rule is None or (debug and rule.traceback_in_debug):
            raise  # SystemExit and the like, or a traceback asked for
        print(f"Error: {rule.message(exc)}", file=sys.stderr)
        rv = rule.code
    else:
        if rv == INTERRUPTED_STATUS:  # newer Typer turns Ctrl-C into this status, silently: say it
            print(f"Error: {INTERRUPTED}", file=sys.stderr)
    if rv == INTERRUPTED_STATUS:
        _settle_interrupt()
    return rv if isinstance(rv, int) else 0


def run() -> None:  # pragma: no cover - the console script; tested through a subprocess
    try:
        code = main()
    except KeyboardInterrupt:  # between the commands' own handling and the exit
        _interrupted()
    sys.exit(code)
