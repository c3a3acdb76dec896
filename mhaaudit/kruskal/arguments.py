"""The checks of the arguments that the Monte-Carlo tests' public functions share (``subset_test``,
``kruskal_sweep``, ``draw_decisions``, ``draw_critical_sizes`` and ``Sampling``): a caller's value of the
wrong type or range is one ``InputError`` naming the parameter, never a draw made from it as it was.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import validate
from ..errors import InputError, Param
from ..runtime import MAX_SEED

__all__ = ["checked_progress", "checked_seed"]


def checked_seed(seed) -> int:
    """A draws' seed as a caller gave it: a whole number from 0 to :data:`~mhaaudit.runtime.MAX_SEED` (as
    ``Settings`` takes it; a larger or negative one would be taken modulo 2^64, two seeds giving one set of
    draws, and a fraction cut).

    Raises:
        InputError: when it is not.
    """
    return validate.integer(Param("seed"), seed, minimum=0, maximum=MAX_SEED)


def checked_progress(progress) -> Callable[[int], None] | None:
    """A progress callback as a caller gave it: None or a callable.

    Raises:
        InputError: when it is neither.
    """
    if progress is not None and not callable(progress):
        raise InputError(Param("progress") + f" must be a callable taking a number of draws, or None; got {progress!r}")
    return progress
