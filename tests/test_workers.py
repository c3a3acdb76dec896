"""mhaaudit.workers.worker_pool: waits for its tasks when left normally or by an error, never when a
signal's exception unwinds the block, or a signal is ending the run (a helper may wait for ever on a lock
the interrupted main thread holds); and what mhaaudit.ending notes of such a signal."""

from __future__ import annotations

import contextlib
import signal
import threading
import time

import pytest

from mhaaudit import ending
from mhaaudit.workers import worker_pool


def test_left_normally_it_waits_for_every_task():
    done = []
    with worker_pool(2, "t") as pool:
        for i in range(6):
            pool.submit(lambda i=i: (time.sleep(0.02), done.append(i)))
    assert sorted(done) == list(range(6))


def test_its_threads_carry_the_name():
    with worker_pool(1, "mhaaudit-test") as pool:
        name = pool.submit(lambda: threading.current_thread().name).result()
    assert name.startswith("mhaaudit-test")


class Terminated(BaseException):
    """Stands for the command line's SIGTERM exception (not an Exception, as KeyboardInterrupt is not)."""


def test_left_by_an_error_it_cancels_what_waits_and_waits_for_what_runs():
    finished = []

    def slow():
        time.sleep(0.3)
        finished.append(True)

    with pytest.raises(RuntimeError), worker_pool(1, "t") as pool:
        running = pool.submit(slow)
        queued = pool.submit(lambda: "never")
        time.sleep(0.05)
        raise RuntimeError("boom")
    assert finished == [True] and running.done()  # the block was left once its running task ended
    assert queued.cancelled()


@pytest.mark.parametrize("signal_error", [KeyboardInterrupt(), Terminated()])
def test_left_by_a_signal_it_cancels_what_waits_and_does_not_wait_for_what_runs(signal_error):
    release, started = threading.Event(), threading.Event()

    def blocked():
        started.set()
        release.wait(30)
        return "late"

    try:
        with pytest.raises(type(signal_error)), worker_pool(1, "t") as pool:
            running = pool.submit(blocked)
            queued = pool.submit(lambda: "never")
            assert started.wait(10)
            raise signal_error
        assert running.running()  # the block was left with its task still running
        assert queued.cancelled()
    finally:
        release.set()
    assert running.result(10) == "late"


def test_a_lock_the_interrupted_main_thread_kept_does_not_hang_it():
    """Ctrl-C can stop the main thread inside ``Future.result`` after it took the task's lock and before
    the block that releases it: the worker finishing that task then waits for the lock for ever. Here
    the worker waits on a lock the test keeps (a ThreadPoolExecutor's own exit, which waits, would hang),
    released at the end so that no thread outlives the test."""
    kept = threading.Lock()
    kept.acquire()
    left = threading.Event()

    def run():
        with contextlib.suppress(KeyboardInterrupt), worker_pool(1, "t") as pool:
            pool.submit(kept.acquire)
            raise KeyboardInterrupt
        left.set()

    main = threading.Thread(target=run, daemon=True)
    main.start()
    try:
        main.join(20)
        assert left.is_set(), "the pool waited for a worker that waits on the lock"
    finally:
        kept.release()


def _results(task, n: int):
    """``task(0)`` to ``task(n - 1)`` on a pool of one thread, their results in order: a generator whose
    consumer may close it early."""
    with worker_pool(1, "t") as pool:
        futures = [pool.submit(task, i) for i in range(n)]
        for f in futures:
            yield f.result()


def test_a_generator_closed_early_waits_for_the_running_task_and_cancels_the_rest():
    finished = []

    def slow(i):
        time.sleep(0.2)
        finished.append(i)
        return i

    gen = _results(slow, 5)
    assert next(gen) == 0
    gen.close()  # while task 1 runs: it finishes, 2 to 4 never start
    assert finished == [0, 1]


@pytest.fixture
def signal_noted():
    """A signal is ending the run (as the command line's handlers note it), for the test's length."""
    ending.note(signal.SIGINT)
    try:
        yield
    finally:
        ending.clear()


def test_a_generator_closed_while_a_signal_ends_the_run_does_not_wait(signal_noted):
    gates, started, finished = [threading.Event() for _ in range(3)], [threading.Event() for _ in range(3)], []

    def blocked(i):
        started[i].set()
        gates[i].wait(30)
        finished.append(i)
        return i

    gen = _results(blocked, 3)
    try:
        gates[0].set()
        assert next(gen) == 0
        assert started[1].wait(10)
        gen.close()  # task 1 runs, blocked: the pool is left without waiting for it
        assert finished == [0]
    finally:
        for gate in gates:
            gate.set()
    assert not started[2].is_set()  # cancelled before it started
