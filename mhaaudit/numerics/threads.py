"""The one way mhaaudit changes how many threads the CPU kernels use for a while.

:func:`intra_op_threads` sets, for the block it wraps, torch's own intra-op thread count (the
count threads started inside the block inherit) and, through threadpoolctl, every OpenMP runtime
and every BLAS library loaded in the process (NumPy's and SciPy's OpenBLAS run their own threads:
left alone, each of their calls would start a team on top of torch's); on exit all are restored,
also on error. Places that run many small
factorisations side by side (Monte-Carlo worker threads, stacked training groups, image synthesis
beside the forward pass) use it with one thread each: on shared cores, a team of threads per call
on top of the callers' own parallelism made them several times slower.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

import torch
from threadpoolctl import ThreadpoolController

__all__ = ["intra_op_threads"]

_LOCK = threading.Lock()
# found once, and again after more modules were imported (a library such as SciPy's LAPACK brings its
# own BLAS): inspecting the loaded libraries costs milliseconds
_CONTROLLER: dict[int, ThreadpoolController] = {}


def _controller() -> ThreadpoolController:
    with _LOCK:
        seen = len(sys.modules)
        if seen not in _CONTROLLER:
            _CONTROLLER.clear()
            _CONTROLLER[seen] = ThreadpoolController()
        return _CONTROLLER[seen]


@contextlib.contextmanager
def intra_op_threads(threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` intra-op CPU threads; restored afterwards.

    None, or a count torch already runs with, changes nothing.
    The setting belongs to the calling thread and to threads started inside the block.

    Raises:
        ValueError: when ``threads`` is not None and not a whole number of at least 1.
    """
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a whole number of at least 1, got {threads!r}")
    if threads is None or torch.get_num_threads() == threads:
        yield
        return
    before = torch.get_num_threads()
    controller = _controller()
    with controller.limit(limits=threads, user_api="openmp"), controller.limit(limits=threads, user_api="blas"):
        torch.set_num_threads(threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)
