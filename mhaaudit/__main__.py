"""``python -m mhaaudit``: the same as the ``mhaaudit`` console script (``mhaaudit.cli.app:run``)."""

from .cli.app import run

run()
