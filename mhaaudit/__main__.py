"""``python -m mhaaudit``: the command line, also as ``torchrun`` starts it.

The same as the ``mhaaudit`` console script (``mhaaudit.cli.app:run``, which :func:`entry` calls).
``torchrun --nproc-per-node N -m mhaaudit check MODEL ...`` runs this module in N processes;
:func:`mhaaudit.distributed.run_cli`
joins them into one job in which rank 0 alone prints and writes. Started any other way, this is
the plain command line.
"""

from typing import NoReturn


def entry(argv: list[str] | None = None) -> NoReturn:
    """Run the command line and end the process with its exit status: what ``python -m mhaaudit``
    does, also for a script that starts the command line itself (:func:`mhaaudit.cli.app.run`, with
    Ctrl-C while the command line is still being imported answered the same way).

    Raises:
        SystemExit: always: the command's exit status, or 130 for Ctrl-C before the app's own guard is reached
            (a signal after that, while the command line is imported, ends the process with its one line).
    """
    from . import ending

    ending.own_the_process()  # a signal while the libraries load ends this process (mhaaudit.cli.app)
    try:
        from .cli.app import run  # loads the libraries; Ctrl-C there gets the app's own one line
    except KeyboardInterrupt:  # Ctrl-C before the app's own guard is reached
        from .stdio import say

        say("Error: interrupted")
        exec("pass", {})  # see mhaaudit.cli.app._settle_interrupt: exit 130, not killed by SIGINT
        raise SystemExit(130) from None
    run(argv)


if __name__ == "__main__":
    entry()
