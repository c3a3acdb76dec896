"""The extreme eigenvalues of many small symmetric matrices on the CPU: LAPACK ``dsytrd``, then ``dstebz``.

Assumption 2 (``mhaaudit.contexts``) needs only the smallest and the largest eigenvalue of most of
its Gram matrices: a matrix whose smallest eigenvalue lies clear of the squared tolerance has full
rank, whatever its other eigenvalues. ``numpy.linalg.eigvalsh`` (LAPACK ``syevd``) reduces each
matrix to tridiagonal form (``dsytrd``) and then finds all n eigenvalues (``dsterf``: a third of its
time for a 197 x 197 matrix). Here ``dstebz`` finds only the two extremes of the same tridiagonal
form, by bisection. The reduction's backward error (about eps ||G||) bounds the error of both
routes alike, so the two agree to rounding far below any tolerance.
A batch reduced to tridiagonal form elsewhere (on a GPU, by ``numerics.tridiagonal``) takes only the
``dstebz`` step (:func:`tridiagonal_extremes`), with the same checks.

The routines are SciPy's LAPACK (``scipy.linalg.cython_lapack``), called through ctypes, which
releases the GIL, so worker threads run them in parallel. Both are self-tested before first use.
Every result is checked before anything is decided from it: the routines reported no error, the
values are finite, the smallest is no larger than the mean of the diagonal and the largest no
smaller, the largest lies between the largest diagonal entry and the Frobenius norm, and the
smallest between minus the Frobenius norm and the smallest diagonal entry (each to the slack of
``numerics.checked.eigenvalue_slack``). A matrix that fails a check is marked so: its caller takes
its whole spectrum from the checked routes of ``numerics.checked``.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from .checked import eigenvalue_slack
from .lapack import cython_lapack_function

__all__ = ["available", "extreme_eigenvalues", "tridiagonal_extremes"]

_INT_P = ctypes.POINTER(ctypes.c_int)
_DOUBLE_P = ctypes.POINTER(ctypes.c_double)
_PTR = ctypes.c_void_p


@functools.lru_cache(maxsize=1)
def _routines():
    """``(dsytrd, dstebz)`` as ctypes functions, self-tested; None where unavailable or where either fails."""
    sytrd = cython_lapack_function(
        "dsytrd", ctypes.c_char_p, _INT_P, _PTR, _INT_P, _PTR, _PTR, _PTR, _PTR, _INT_P, _INT_P
    )
    stebz = cython_lapack_function(
        "dstebz",
        ctypes.c_char_p,
        ctypes.c_char_p,
        _INT_P,
        _DOUBLE_P,
        _DOUBLE_P,
        _INT_P,
        _INT_P,
        _DOUBLE_P,
        _PTR,
        _PTR,
        _INT_P,
        _INT_P,
        _PTR,
        _PTR,
        _PTR,
        _PTR,
        _PTR,
        _INT_P,
    )
    if sytrd is None or stebz is None:  # pragma: no cover - a SciPy without its Cython LAPACK API
        return None
    # self-test: a wrong binding must never decide anything. The eigenvalues of this matrix are
    # 2 - sqrt(2), 2 and 2 + sqrt(2).
    G = np.array([[[2.0, 1.0, 0.0], [1.0, 2.0, 1.0], [0.0, 1.0, 2.0]]])
    lo, hi, ok = _Extremes(sytrd, stebz, 3).run(G)
    if not (ok[0] and abs(lo[0] - (2 - 2**0.5)) <= 1e-14 and abs(hi[0] - (2 + 2**0.5)) <= 1e-14):
        return None  # pragma: no cover
    return sytrd, stebz


def available() -> bool:
    """True when SciPy's LAPACK ``dsytrd`` and ``dstebz`` can be called directly and passed their self-test."""
    return _routines() is not None


class _Extremes:
    """The buffers and arguments of ``dsytrd`` and ``dstebz`` for n x n matrices (one object per thread)."""

    def __init__(self, sytrd, stebz, n: int) -> None:
        self.sytrd, self.stebz, self.n = sytrd, stebz, n
        m = max(n, 1)
        self.a = np.empty((n, n))
        self.d, self.e, self.tau = np.empty(m), np.empty(m), np.empty(m)
        self.w = np.empty(m)
        self.iblock, self.isplit = np.empty(m, dtype=np.intc), np.empty(m, dtype=np.intc)
        self.swork, self.iwork = np.empty(4 * m), np.empty(3 * m, dtype=np.intc)
        self.N, self.info, self.found, self.nsplit = (ctypes.c_int(n) for _ in range(4))
        self.first, self.last = ctypes.c_int(1), ctypes.c_int(n)
        self.vl, self.vu, self.abstol = ctypes.c_double(0.0), ctypes.c_double(0.0), ctypes.c_double(0.0)
        # the workspace dsytrd asks for (a query: lwork = -1)
        query, self.lwork = np.empty(1), ctypes.c_int(-1)
        sytrd(b"U", self.N, self.a.ctypes.data, self.N, self.d.ctypes.data, self.e.ctypes.data,
              self.tau.ctypes.data, query.ctypes.data, self.lwork, self.info)  # fmt: skip
        self.lwork.value = max(1, int(query[0]) if self.info.value == 0 else n * 64)
        self.work = np.empty(self.lwork.value)

    def _nth(self, which: ctypes.c_int) -> float | None:
        """The ``which``-th smallest eigenvalue of the tridiagonal form in ``d``, ``e``; None on an error."""
        self.stebz(b"I", b"E", self.N, self.vl, self.vu, which, which, self.abstol, self.d.ctypes.data,
                   self.e.ctypes.data, self.found, self.nsplit, self.w.ctypes.data, self.iblock.ctypes.data,
                   self.isplit.ctypes.data, self.swork.ctypes.data, self.iwork.ctypes.data, self.info)  # fmt: skip
        return float(self.w[0]) if self.info.value == 0 and self.found.value == 1 else None

    def run(self, G: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(smallest, largest, done)`` of each matrix of the ``(B, n, n)`` float64 ``G`` (read, not written):
        ``done`` is False where a routine reported an error."""
        B = G.shape[0]
        lo, hi, done = np.zeros(B), np.zeros(B), np.zeros(B, dtype=bool)
        a = self.a
        for b in range(B):
            np.copyto(a, G[b])
            # the lower triangle of G (the Fortran routine sees the transpose: its upper is our lower)
            self.sytrd(b"U", self.N, a.ctypes.data, self.N, self.d.ctypes.data, self.e.ctypes.data,
                       self.tau.ctypes.data, self.work.ctypes.data, self.lwork, self.info)  # fmt: skip
            if self.info.value != 0:
                continue
            self._extremes(b, lo, hi, done)
        return lo, hi, done

    def _extremes(self, b: int, lo: np.ndarray, hi: np.ndarray, done: np.ndarray) -> None:
        """The extremes of the tridiagonal form in ``d``, ``e`` into ``lo[b]``, ``hi[b]`` (``done[b]``: found)."""
        small, large = self._nth(self.first), self._nth(self.last)
        if small is not None and large is not None:
            lo[b], hi[b], done[b] = small, large, True

    def run_tridiagonal(self, diagonal: np.ndarray, off: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(smallest, largest, done)`` of each tridiagonal matrix given by the rows of ``diagonal`` (B, n) and
        ``off`` (B, n - 1)."""
        B, n = diagonal.shape
        lo, hi, done = np.zeros(B), np.zeros(B), np.zeros(B, dtype=bool)
        for b in range(B):
            self.d[:n] = diagonal[b]
            self.e[: n - 1] = off[b]
            self._extremes(b, lo, hi, done)
        return lo, hi, done


def extreme_eigenvalues(G: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The smallest and largest eigenvalue of each symmetric matrix of the ``(B, n, n)`` float64 array ``G``
    (its lower triangle is read; Gram matrices, symmetric to rounding), computed in the calling thread, and
    a mask of the matrices whose values passed the checks of the module docstring (elsewhere the values are
    not to be read); None where SciPy's LAPACK routines are unavailable."""
    routines = _routines()
    if routines is None:  # pragma: no cover - a SciPy without its Cython LAPACK API
        return None
    B, n = G.shape[0], G.shape[-1]
    if n == 0 or B == 0:
        return np.zeros(B), np.zeros(B), np.zeros(B, dtype=bool)
    G = np.ascontiguousarray(G, dtype=np.float64)
    sytrd, stebz = routines
    lo, hi, ok = _Extremes(sytrd, stebz, n).run(G)
    fro = np.sqrt(np.einsum("bij,bij->b", G, G))  # (a rounding asymmetry of G lies far inside the slack)
    return _checked(lo, hi, ok, np.diagonal(G, axis1=-2, axis2=-1), fro)


def tridiagonal_extremes(
    diagonal: np.ndarray, off: np.ndarray, gram_diagonal: np.ndarray, fro: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`extreme_eigenvalues` of symmetric matrices already reduced to tridiagonal form
    (``numerics.tridiagonal``): ``diagonal`` (B, n) and ``off`` (B, n - 1) give the forms, ``gram_diagonal``
    (B, n) and ``fro`` (B,) the diagonals and Frobenius norms of the matrices themselves, for the checks of
    the module docstring; computed in the calling thread."""
    routines = _routines()
    if routines is None:  # pragma: no cover - a SciPy without its Cython LAPACK API
        return None
    B, n = diagonal.shape
    if n == 0 or B == 0:
        return np.zeros(B), np.zeros(B), np.zeros(B, dtype=bool)
    sytrd, stebz = routines
    lo, hi, ok = _Extremes(sytrd, stebz, n).run_tridiagonal(diagonal, off)
    return _checked(lo, hi, ok, gram_diagonal, fro)


def _checked(lo: np.ndarray, hi: np.ndarray, ok: np.ndarray, diag: np.ndarray, fro: np.ndarray):
    """``(lo, hi, ok)`` with ``ok`` cleared where the values fail the checks of the module docstring."""
    slack = eigenvalue_slack(diag.shape[-1], fro)
    mean = diag.mean(-1)
    with np.errstate(invalid="ignore"):
        ok &= np.isfinite(lo) & np.isfinite(hi)
        ok &= (lo <= mean + slack) & (hi >= mean - slack)
        ok &= (hi <= fro + slack) & (hi >= diag.max(-1) - slack)
        ok &= (lo >= -fro - slack) & (lo <= diag.min(-1) + slack)
    return lo, hi, ok
