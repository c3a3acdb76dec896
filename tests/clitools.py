"""Shared helpers for the CLI tests: run a command in-process or a script in a child, check the one-line error rule."""

import os
import subprocess
import sys
from pathlib import Path

from mhaaudit.cli.app import main
from mhaaudit.settings import device_name, resolve_device

ROOT = Path(__file__).resolve().parents[1]


def auto_device() -> str:
    """The device ``--device auto`` (the default) resolves to here, as outputs name it in their meta."""
    return device_name(resolve_device("auto"))


def run(capsys, *args):
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def run_python(script: str, cwd=None, preexec_fn=None) -> subprocess.CompletedProcess:
    """``python -c script`` with this checkout's mhaaudit (in ``cwd``; ``preexec_fn`` run in the child before
    it starts), its output captured as text, within 60 s (a hang fails the test)."""
    return subprocess.run(
        [sys.executable, "-c", script],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=preexec_fn,
    )


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


def time_line(out: str) -> list[tuple[str, float]]:
    """The phases and seconds of a report's ``time:`` line (its lines wrapped by the terminal's width joined; the
    columns' own lines after it are indented)."""
    import re

    lines = out.splitlines()
    at = next(i for i, x in enumerate(lines) if x.strip().startswith("time:"))
    line = lines[at]
    for more in lines[at + 1 :]:
        if not more or more.startswith(" "):
            break
        line += " " + more
    return [(n.strip(), float(v)) for n, v in re.findall(r"(\w[\w -]*?)\s+(\d+\.\d)\s+s\b", line.split("time:", 1)[1])]
