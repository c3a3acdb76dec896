"""``python -m mhaaudit``: the command line, also as ``torchrun`` starts it.

``torchrun --nproc-per-node N -m mhaaudit check MODEL ...`` runs this module in N processes;
:func:`mhaaudit.distributed.run_cli` joins them into one job in which rank 0 alone prints and
writes. Started any other way, this is the plain command line.
"""

import sys


def main(argv: list[str] | None = None) -> int:
    from .cli.app import main as cli_main
    from .distributed import launched, run_cli

    return run_cli(cli_main, argv) if launched() else cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
