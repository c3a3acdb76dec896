"""The ``mhaaudit`` application: one screen that wires the commands together.

Every command module registers itself on ``app``. Known errors become one line on stderr and
exit status 2; set ``MHAAUDIT_DEBUG=1`` to see the traceback instead.
"""

from __future__ import annotations

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
    from . import check  # noqa: F401
    from . import kruskal  # noqa: F401
    from . import memorize  # noqa: F401


_register()


def error_line(exc: BaseException) -> str:
    """The one line printed for a known error."""
    msg = " ".join(str(exc).split()) or exc.__class__.__name__
    return f"Error: {msg}"


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app and map errors to exit codes.

    0: the command ran; 1: an assumption named in ``--fail-on`` failed; 2: a usage or input
    error (one line on stderr); 3: an internal error (a bug).
    """
    import click

    debug = os.environ.get("MHAAUDIT_DEBUG", "").strip() not in ("", "0")
    try:
        rv = app(args=argv, prog_name="mhaaudit", standalone_mode=False)
    except MhaauditError as exc:
        if debug:
            raise
        print(error_line(exc), file=sys.stderr)
        return 2
    except click.exceptions.NoArgsIsHelpError as exc:
        print(exc.ctx.get_help() if exc.ctx else str(exc), file=sys.stderr)
        return 2
    except click.ClickException as exc:
        if debug:
            raise
        print(f"Error: {' '.join(exc.format_message().split())}", file=sys.stderr)
        return 2
    except (click.exceptions.Abort, KeyboardInterrupt):
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
