"""Shared helpers for the CLI tests: run a command in-process, check the one-line error rule."""

from mhaaudit.cli.app import main
from mhaaudit.settings import device_name, resolve_device


def auto_device() -> str:
    """The device ``--device auto`` (the default) resolves to here, as outputs name it in their meta."""
    return device_name(resolve_device("auto"))


def run(capsys, *args):
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_error(rc, err, match=None):
    """Exit 2, exactly one line on stderr starting 'Error: ', no traceback."""
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("Error: "), err
    assert "Traceback" not in err and "internal error" not in err
    if match is not None:
        assert match.lower() in lines[0].lower(), lines[0]
    return lines[0]


def help_text(capsys, command: str) -> str:
    """``mhaaudit COMMAND --help`` rendered (exit 0, on stdout), as one line of words without the box drawing."""
    import re

    rc, out, err = run(capsys, command, "--help")
    assert rc == 0, err
    assert "Usage" in out and command in out
    return " ".join(re.sub(r"[\u2500-\u257f]", " ", out).split())
