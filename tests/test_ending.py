"""mhaaudit.ending: a signal that ends the run, noted for the helpers, and the watch that ends the process
a bounded time after it (the command line's own use is tested in test_cli_app)."""

from __future__ import annotations

import os
import signal
import sys

import pytest
from clitools import run_python

from mhaaudit import ending


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


# What each script's watch calls: one line on stdout, and status 7.
_END = """
import os, sys
from mhaaudit import ending
def end(signum):
    sys.stdout.write(f"ended by {signum}\\n")
    sys.stdout.flush()
    os._exit(7)
"""


# The watch ends the process a while after the first signal, with its number, even once the signal is cleared.
_WATCHED = (
    _END
    + """
import time
ending.watch(1.0, end, {2, 15})
ending.watch(1.0, lambda signum: os._exit(8), {2, 15})  # started once: this one is not
print("the run goes on", flush=True)
ending.note(10)  # not one of the signals watched for: passed over
ending.note(15)
ending.note(2)
ending.clear()
time.sleep(30)
print("not reached", flush=True)
"""
)


def test_the_watch_ends_the_process_after_the_first_signal():
    proc = run_python(_WATCHED)
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == "the run goes on\nended by 15\n"


# What the watch does before its end runs once, in the order given; what it raises is passed over.
_LAST = (
    _END
    + """
import time
def last(signum):
    sys.stdout.write(f"last for {signum}\\n")
    sys.stdout.flush()
def broken(signum):
    raise RuntimeError("passed over")
ending.before_end(broken)
ending.before_end(last)
ending.before_end(last)  # given twice: called once
ending.watch(0.2, end, {2, 15})
ending.note(15)
time.sleep(30)
"""
)


def test_the_watch_does_what_was_asked_before_its_end():
    proc = run_python(_LAST)
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == "last for 15\nended by 15\n"


# A forked child inherits the watch's pipe (and the C-level wake-up) but not its thread: a signal that
# reaches it, or that it notes, does not end the parent.
_FORKED = (
    _END
    + """
import signal, time
signal.signal(signal.SIGTERM, lambda signum, frame: None)  # a Python handler: the C-level one writes the number
ending.watch(0.2, end, {2, 15})
child = os.fork()
if child == 0:
    os.kill(os.getpid(), signal.SIGTERM)
    ending.note(15)
    os._exit(0)
os.waitpid(child, 0)
time.sleep(1.0)
print("the parent goes on", flush=True)
ending.note(2)
time.sleep(30)
"""
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_does_not_start_the_parents_watch():
    proc = run_python(_FORKED)
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == "the parent goes on\nended by 2\n"


# The main thread is in native code that never returns to the interpreter (here a mutex locked twice by its
# owner, which signals do not interrupt; a hung collective or a blocked C++ reader in a real run, which
# likewise release the interpreter's lock): no Python handler runs, and the watch still ends the process,
# woken by the signal's C-level handler.
_NATIVE = (
    _END
    + """
import ctypes, signal, threading
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))  # never runs: the main thread is stuck
ending.watch(0.5, end, {15})
threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
libc = ctypes.CDLL(None)
mutex = ctypes.create_string_buffer(64)  # zeroed: a default mutex (PTHREAD_MUTEX_INITIALIZER on glibc)
libc.pthread_mutex_lock(mutex)
libc.pthread_mutex_lock(mutex)  # waits for ever, with the interpreter's lock released (ctypes)
print("not reached", flush=True)
"""
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a glibc mutex")
def test_the_watch_ends_a_process_whose_main_thread_never_returns_from_native_code():
    proc = run_python(_NATIVE)
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == "ended by 15\n"
