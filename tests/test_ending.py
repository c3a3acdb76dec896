"""mhaaudit.ending: a signal that ends the run, noted for the helpers, and the watch that ends the process
a bounded time after it (the command line's own use is tested in test_cli_app)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mhaaudit import ending

ROOT = Path(__file__).resolve().parents[1]


def test_a_signal_is_noted_once_and_cleared():
    assert not ending.ending() and ending.noted() is None and ending.settled() == (None, False)
    assert not ending.watching()  # only the console script watches
    try:
        ending.note(signal.SIGTERM)
        ending.note(signal.SIGINT)  # a second signal: the first one is what ends the run
        assert ending.ending() and ending.noted() == signal.SIGTERM
        ending.settle(143, said=True)
        assert ending.settled() == (143, True)
    finally:
        ending.clear()
    assert not ending.ending() and ending.noted() is None and ending.settled() == (None, False)


def _run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
    )


# The watch ends the process a while after the first signal, with its number, even once the signal is cleared.
_WATCHED = """
import os, sys, time
from mhaaudit import ending
def end(signum):
    sys.stdout.write(f"ended by {signum}\\n")
    sys.stdout.flush()
    os._exit(7)
ending.watch(1.0, end)
ending.watch(1.0, lambda signum: os._exit(8))  # started once: this one is not
print("the run goes on", flush=True)
ending.note(15)
ending.note(2)
ending.clear()
time.sleep(30)
print("not reached", flush=True)
"""


def test_the_watch_ends_the_process_after_the_first_signal():
    proc = _run(_WATCHED)
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == "the run goes on\nended by 15\n"


# A forked child inherits the watch's pipe but not its thread: a signal it notes does not end the parent.
_FORKED = """
import os, sys, time
from mhaaudit import ending
def end(signum):
    sys.stdout.write(f"ended by {signum}\\n")
    sys.stdout.flush()
    os._exit(7)
ending.watch(0.2, end)
child = os.fork()
if child == 0:
    ending.note(15)
    os._exit(0)
os.waitpid(child, 0)
time.sleep(1.0)
print("the parent goes on", flush=True)
ending.note(2)
time.sleep(30)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_does_not_start_the_parents_watch():
    proc = _run(_FORKED)
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == "the parent goes on\nended by 2\n"
