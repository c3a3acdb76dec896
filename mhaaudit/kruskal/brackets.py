"""The bracketed spectrum of a streamed Gram matrix: where a whole-set rank comparison lands before any TSQR pass."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from ..errors import InputError, Param

__all__ = ["GramBrackets"]


class GramBrackets:
    """Where each comparison of ``SetStats.ceiling`` lands, known from the streamed Gram matrix
    before (and mostly instead of) the TSQR pass: ``lo[i] <= fl(s_i + sv_error) <= hi[i]`` for the
    singular values s_i and the error bound the TSQR pass would give (``kruskal.bounds.set_stats``
    derives them), and ``lo[i] <= sigma_i <= hi[i]`` for the exact ones. At a tolerance outside every
    bracket, the count above it is the TSQR pass's and the exact values' alike; at one inside a
    bracket, ``refine()`` runs the pass (once, then kept) and returns its (singular values, error).
    ``shape``: the (T, d) of the rows they describe, when known; rows of another shape are refused
    by ``attach``."""

    def __init__(
        self,
        lo: Sequence[float],
        hi: Sequence[float],
        refine: Callable[[], tuple[tuple[float, ...], float]] | None,
        error_factor: float = 0.0,
        shape: tuple[int, int] | None = None,
    ):
        self.lo, self.hi = tuple(lo), tuple(hi)
        self.error_factor = error_factor  # c: the TSQR pass's error relative to sigma_max
        self.shape = None if shape is None else (int(shape[0]), int(shape[1]))
        self._refine: Callable[[], tuple[tuple[float, ...], float]] | None = refine
        self._refined: tuple[tuple[float, ...], float] | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        """Pickled (a torchrun rank sends the statistics to the others): the brackets and the TSQR
        pass's values if it ran, never the rows; the receiver attaches its own (``attach``)."""
        return {"lo": self.lo, "hi": self.hi, "c": self.error_factor, "refined": self._refined, "shape": self.shape}

    def __setstate__(self, state: dict) -> None:
        """Rebuilt from ``__getstate__``'s state, with no rows attached."""
        self.lo, self.hi, self._refined = state["lo"], state["hi"], state["refined"]
        self.error_factor, self.shape = state["c"], state.get("shape")
        self._refine = None
        self._lock = threading.Lock()

    @property
    def refined(self) -> tuple[tuple[float, ...], float] | None:
        """The TSQR pass's (singular values, error) once it ran, else None."""
        return self._refined

    @property
    def attached(self) -> bool:
        """Whether ``refine()`` can run: the pass ran, or the rows it reads are attached."""
        return self._refined is not None or self._refine is not None

    def attach(self, refine: Callable[[], tuple[tuple[float, ...], float]], shape: tuple[int, int]) -> None:
        """Give brackets that were sent without their rows the TSQR pass over the same rows, of ``shape``
        (T, d) (where the pass already ran or rows are attached, nothing changes).

        Raises:
            InputError: when the brackets describe rows of another shape than ``shape``.
        """
        if self.shape is not None and (int(shape[0]), int(shape[1])) != self.shape:
            raise InputError(
                "the statistics "
                + Param("stats")
                + f" describe {self.shape[0]} x {self.shape[1]} rows, but the rows "
                + Param("X")
                + f" given with them are {shape[0]} x {shape[1]}"
            )
        with self._lock:
            if self._refined is None and self._refine is None:
                self._refine = refine

    def count_above(self, tol: float) -> int | None:
        """How many values lie above ``tol`` when no bracket holds it; None when one does."""
        if any(lo <= tol < hi for lo, hi in zip(self.lo, self.hi, strict=True)):
            return None
        return sum(1 for lo in self.lo if lo > tol)

    def refine(self) -> tuple[tuple[float, ...], float]:
        """The TSQR pass's (singular values, error), computed on the first call.

        Raises:
            RuntimeError: when the pass has not run and no rows are attached (brackets unpickled
                and used without ``attach``): a bug in the caller.
        """
        with self._lock:
            if self._refined is None:
                if self._refine is None:
                    raise RuntimeError("the Gram brackets need the TSQR pass but carry no rows: attach them first")
                self._refined = self._refine()
                self._refine = None  # the rows it read are no longer held
            return self._refined
