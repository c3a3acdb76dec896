"""The one way mhaaudit runs a block with a pool of helper threads: :func:`worker_pool`.

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

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from .ending import ending

__all__ = ["worker_pool"]


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
