"""Shared helpers for the CLI tests: run a command in-process, check the one-line error rule."""

from mhaaudit.cli.app import main


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
