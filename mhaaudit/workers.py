"""The one way mhaaudit runs a block with a pool of helper threads: :func:`worker_pool`; and the one way it
runs a helper thread of its own beside the main thread: :func:`helper_thread`, stopped and waited for at the
interpreter's exit.

Ctrl-C (Python's KeyboardInterrupt, raised in the main thread wherever it happens to be) can stop
the main thread between taking a lock and entering the block that releases it: in
``Future.result``, the task's own lock, which the helper that finishes the task then waits on for
ever. A pool that waited for its helpers while a signal unwinds the main thread would then hang the
run, so a pool left that way does not wait, and nor does the end of the process after a signal
(:mod:`mhaaudit.cli.app`). Nor does a pool wait that a signal's unwinding leaves another way
(a generator around it closed): from the signal on, :func:`mhaaudit.ending.ending` says so. An ordinary
error raises nothing between the main thread's bytecodes, so a pool it unwinds waits for its running
tasks as usual: the thread limits the block set stay in force until they end, and nothing of the failed
work runs on. Nothing here imports torch.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from .ending import ending

__all__ = ["helper_thread", "stop_helpers", "worker_pool"]

# The helper threads still running: their stop event and how long the exit waits for each
_HELPERS: dict[threading.Thread, tuple[threading.Event, float]] = {}
_HELPERS_LOCK = threading.Lock()


def helper_thread(target: Callable[[], None], name: str, stop: threading.Event, exit_wait: float) -> threading.Thread:
    """A daemon thread named ``name`` running ``target``, started. ``target`` ends soon after ``stop`` is set; at
    the interpreter's exit (:func:`stop_helpers`) one still running is stopped and waited for, ``exit_wait``
    seconds at most. A run that fails while a helper works (making images ahead, reading batches ahead) may
    leave it running, and a daemon thread still inside torch's native code when the interpreter is torn down
    ends the process with SIGABRT ("terminate called without an active exception") instead of the run's
    status."""

    def run() -> None:
        try:
            target()
        finally:
            with _HELPERS_LOCK:
                _HELPERS.pop(threading.current_thread(), None)

    thread = threading.Thread(target=run, name=name, daemon=True)
    with _HELPERS_LOCK:
        _HELPERS[thread] = (stop, exit_wait)
    try:
        thread.start()
    except BaseException:
        with _HELPERS_LOCK:
            _HELPERS.pop(thread, None)
        raise
    return thread


def stop_helpers() -> None:
    """Stop every :func:`helper_thread` still running and wait for each (its ``exit_wait`` at most): run at the
    interpreter's exit, while the helpers can still finish what they are doing."""
    with _HELPERS_LOCK:
        pending = list(_HELPERS.items())
    for _, (stop, _wait) in pending:
        stop.set()
    for thread, (_stop, wait) in pending:
        thread.join(wait)


atexit.register(stop_helpers)


@contextlib.contextmanager
def worker_pool(workers: int, name: str) -> Iterator[ThreadPoolExecutor]:
    """A pool of ``workers`` threads, named ``name`` and a number, for the block.

    Left normally, it waits for every task submitted, as ``with ThreadPoolExecutor()`` does. Left by
    an error (an ``Exception``), or because the generator around the block was closed (its consumer
    stopped early, or failed), it cancels the tasks not started and waits for the running ones. Left
    by a signal's exception (``KeyboardInterrupt`` for Ctrl-C, the command line's own for SIGTERM and
    SIGHUP: any ``BaseException`` that is not an ``Exception``), or left any way but normally while such a
    signal is ending the run (:func:`mhaaudit.ending.ending`), it cancels the tasks not started and does
    not wait: the running ones end on their own and their results go unused.

    Raises:
        GeneratorExit: and any other exception of the block, again, once the pool is shut down.
    """
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
    try:
        yield pool
    except (Exception, GeneratorExit):
        pool.shutdown(wait=not ending(), cancel_futures=True)
        raise
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
