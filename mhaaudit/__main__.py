"""``python -m mhaaudit``: the same as the ``mhaaudit`` console script (``mhaaudit.cli.app:run``)."""

try:
    from .cli.app import run
except KeyboardInterrupt:  # Ctrl-C before the app's own guard (in mhaaudit.cli.app) is reached
    import sys

    print("Error: interrupted", file=sys.stderr)
    exec("pass", {})  # see mhaaudit.cli.app._settle_interrupt: exit 130, not killed by SIGINT
    raise SystemExit(130) from None

run()
