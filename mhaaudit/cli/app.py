"""The ``mhaaudit`` application: one screen that wires the commands together.

Every command module registers itself on ``app``. Known errors become one line on stderr and
exit status 2; set ``MHAAUDIT_DEBUG=1`` to see the traceback instead.
"""

from __future__ import annotations

import contextlib
import os
import sys

import typer

from .. import __version__
from ..errors import MhaauditError

app = typer.Typer(
    name="mhaaudit",
    help=(
        "Audit transformer features against the linear-independence assumptions behind the "
        "memorisation capacity of multi-head attention (Mahdavi, Liao, Thrampoulidis, ICLR 2024)."
    ),
    no_args_is_help=True,
    add_completion=False,
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


def _register() -> None:
    # Imported for their side effect of adding commands to ``app``.
    from . import capacity  # noqa: F401
    from . import check  # noqa: F401
    from . import kruskal  # noqa: F401
    from . import memorize  # noqa: F401


_register()


def error_line(exc: BaseException) -> str:
    """The one line printed for a known error."""
    msg = " ".join(str(exc).split()) or exc.__class__.__name__
    return f"Error: {msg}"


def _click_exception_types() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(usage-error bases, abort types) of click and, in Typer releases that vendor click, Typer's own."""
    import click

    usage: list[type] = [click.exceptions.ClickException]
    aborts: list[type] = [click.exceptions.Abort, KeyboardInterrupt]
    if getattr(typer, "TyperException", None) is not None:
        usage.append(typer.TyperException)
    if getattr(typer, "Abort", None) is not None:
        aborts.append(typer.Abort)
    return tuple(dict.fromkeys(usage)), tuple(dict.fromkeys(aborts))


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app and map errors to exit codes.

    0: the command ran; 1: an assumption named in ``--fail-on`` failed; 2: a usage or input
    error (one line on stderr); 3: an internal error (a bug).
    """
    debug = os.environ.get("MHAAUDIT_DEBUG", "").strip() not in ("", "0")
    args = sys.argv[1:] if argv is None else [str(a) for a in argv]
    if not args:
        # No command: the help, on stderr (stdout carries data only), and status 2.
        with contextlib.redirect_stdout(sys.stderr):
            with contextlib.suppress(Exception):
                app(args=["--help"], prog_name="mhaaudit", standalone_mode=False)
        return 2
    usage_errors, aborts = _click_exception_types()
    try:
        rv = app(args=args, prog_name="mhaaudit", standalone_mode=False)
    except MhaauditError as exc:
        if debug:
            raise
        print(error_line(exc), file=sys.stderr)
        return 2
    except usage_errors as exc:
        if debug:
            raise
        msg = " ".join(str(exc.format_message()).split()) or exc.__class__.__name__
        print(f"Error: {msg}", file=sys.stderr)
        return 2
    except aborts:
        print("Error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        print(
            f"Error: internal error ({exc.__class__.__name__}: {' '.join(str(exc).split())}); "
            "rerun with MHAAUDIT_DEBUG=1 for the traceback and please report it",
            file=sys.stderr,
        )
        return 3
    return rv if isinstance(rv, int) else 0


def run() -> None:  # pragma: no cover - thin wrapper
    sys.exit(main())
