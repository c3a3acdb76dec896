"""``python -m mhaaudit``: the command line, also as ``torchrun`` starts it.

The same as the ``mhaaudit`` console script (``mhaaudit.cli.app:run``, which calls :func:`entry`).
``torchrun --nproc-per-node N -m mhaaudit check MODEL ...`` runs this module in N processes; :func:`mhaaudit.distributed.run_cli`
joins them into one job in which rank 0 alone prints and writes. Started any other way, this is
the plain command line.
"""

import sys
from typing import NoReturn


def main(argv: list[str] | None = None) -> int:
    from .cli.app import main as cli_main
    from .distributed import launched, run_cli

    return run_cli(cli_main, argv) if launched() else cli_main(argv)


def entry(argv: list[str] | None = None) -> NoReturn:
    """Run the command line and end the process with its exit status: what ``python -m mhaaudit``
    does, also for a script that starts the command line itself. A rank of a launched job ends
    through :func:`mhaaudit.distributed.leave`, never through the interpreter's teardown."""
    try:
        from .cli.app import _interrupted  # loads the libraries; Ctrl-C there gets the app's own one line
    except KeyboardInterrupt:  # Ctrl-C before the app's own guard is reached
        print("Error: interrupted", file=sys.stderr)
        exec("pass", {})  # see mhaaudit.cli.app._settle_interrupt: exit 130, not killed by SIGINT
        raise SystemExit(130) from None
    try:
        code = main(argv)
    except KeyboardInterrupt:  # between the commands' own handling and the exit
        _interrupted()
    from .distributed import launched, leave

    if launched():  # a rank of a torchrun job: see mhaaudit.distributed.leave
        leave(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
