"""CPU fast paths for the shifted-Cholesky certificates of ``mhaaudit.rank``.

On the CPU the certificates dominate the cost of a Monte-Carlo test, once per draw. Two
things make them cheaper than batched ``torch.linalg`` calls: the LAPACK ``dpotrf`` that SciPy
ships, called through ctypes so that worker threads run it in parallel (ctypes releases the
GIL), and a gather of only the lower triangle of each draw's Gram submatrix from the full
T x T Gram (dpotrf reads nothing else). The certificates are those of ``decide_full_rank``, with
the rounding bounds of ``cholesky_margins``; a draw they do not settle is left undecided for
``decide_full_rank``, which falls back to eigenvalues or the SVD. So every decision still equals
``matrix_rank`` on the same rows with the same tolerance.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math

import numpy as np

from .rank import RankRule, cholesky_margins


@functools.lru_cache(maxsize=1)
def lapack_dpotrf():
    """LAPACK ``dpotrf`` as a ctypes function that releases the GIL, or None where unavailable."""
    try:
        from scipy.linalg import cython_lapack

        capsule = cython_lapack.__pyx_capi__["dpotrf"]
        api = ctypes.pythonapi
        api.PyCapsule_GetName.restype = ctypes.c_char_p
        api.PyCapsule_GetName.argtypes = [ctypes.py_object]
        api.PyCapsule_GetPointer.restype = ctypes.c_void_p
        api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
        ptr = api.PyCapsule_GetPointer(capsule, api.PyCapsule_GetName(capsule))
        c_int_p = ctypes.POINTER(ctypes.c_int)
        fn = ctypes.CFUNCTYPE(None, ctypes.c_char_p, c_int_p, ctypes.c_void_p, c_int_p, c_int_p)(ptr)
    except Exception:  # pragma: no cover - a SciPy without its Cython LAPACK API
        return None
    # self-test: a wrong binding must never decide anything
    a = np.array([[4.0, 2.0], [2.0, 3.0]])
    n, info = ctypes.c_int(2), ctypes.c_int(-1)
    fn(b"U", ctypes.byref(n), a.ctypes.data, ctypes.byref(n), ctypes.byref(info))
    if info.value != 0 or a[0, 0] != 2.0 or abs(a[1, 1] - math.sqrt(2.0)) > 1e-15 or a[1, 0] != 1.0:
        return None  # pragma: no cover
    return fn


class Potrf:
    """Cholesky of the leading ``m x m`` block of a C-ordered square buffer, in place.

    The buffer's lower triangle holds the matrix (the Fortran routine sees the transpose, so
    its "upper" is our lower); ``lda`` is the buffer's side. Returns LAPACK's ``info``: 0, or
    the order of the first leading block that is not positive definite.
    """

    def __init__(self, lda: int):
        self.fn = lapack_dpotrf()
        self.n, self.lda, self.info = ctypes.c_int(0), ctypes.c_int(lda), ctypes.c_int(0)
        self.refs = (ctypes.byref(self.n), ctypes.byref(self.lda), ctypes.byref(self.info))

    def __call__(self, buf: np.ndarray, m: int) -> int:
        self.n.value = m
        self.fn(b"U", self.refs[0], buf.ctypes.data, self.refs[1], self.refs[2])
        return int(self.info.value)


def available() -> bool:
    return lapack_dpotrf() is not None


@functools.lru_cache(maxsize=8)
def lower_layout(k: int):
    """Row and column indices of the lower triangle of a k x k matrix (row by row), their flat
    positions, and the positions of the diagonal among them."""
    r, c = np.tril_indices(k)
    return r, c, r * k + c, np.flatnonzero(r == c)


def gather_lower(gram_flat: np.ndarray, T: int, s: np.ndarray, start: int, stop: int,
                 lin: np.ndarray | None = None, vals: np.ndarray | None = None) -> np.ndarray:
    """Rows ``start:stop`` of the lower triangle of ``G[s][:, s]``, row by row, from the flat
    row-major T x T Gram matrix. ``lin`` and ``vals`` are optional buffers of the right length
    (fresh 150 kB arrays per draw cost page faults on a hot path)."""
    _, c, _, _ = lower_layout(len(s))
    a, b = start * (start + 1) // 2, stop * (stop + 1) // 2
    if lin is None:
        lin = np.empty(b - a, dtype=np.intp)
    np.take(s, c[a:b], out=lin)
    lin += np.repeat(s[start:stop] * T, np.arange(start + 1, stop + 1))  # row offsets
    return np.take(gram_flat, lin, out=vals)


def blas_single_thread():
    """A context in which BLAS/LAPACK libraries use one thread each (our workers parallelise)."""
    try:
        from threadpoolctl import threadpool_limits

        return threadpool_limits(limits=1, user_api="blas")
    except Exception:  # pragma: no cover - threadpoolctl missing or unable to inspect
        return contextlib.nullcontext()


def power_bounds(L: np.ndarray, v: np.ndarray, trace: float, iters: int = 12) -> tuple[float, float]:
    """Bounds on lambda_max of the PSD matrix whose lower triangle is ``L`` (upper part zero).

    Lower: the Rayleigh quotient of a power-iteration vector (started at ``v``). Upper: the
    quotient plus the residual norm, valid once the quotient minus the residual exceeds half the
    trace (some eigenvalue lies within the residual of the quotient, and no second one can
    exceed half the trace); else inf.
    """
    dg = np.diagonal(L)

    def matvec(x):
        return L @ x + L.T @ x - dg * x

    nv = float(np.linalg.norm(v))
    v = v / nv if nv > 0 else np.full(len(v), 1 / math.sqrt(len(v)))
    rq, upper = 0.0, math.inf
    for _ in range(iters):
        w = matvec(v)
        q = float(v @ w)
        rq = max(rq, q)
        res = float(np.linalg.norm(w - q * v))
        if 2 * (q - res) > trace * (1 + 1e-9):
            upper = min(upper, (q + res) * (1 + 1e-12))
            if res < 1e-9 * q:
                break
        nw = float(np.linalg.norm(w))
        if nw == 0:
            break
        v = w / nw
    return rq * (1 - 1e-12), upper


def decide_draws(gram_flat: np.ndarray, T: int, subsets: np.ndarray, d: int, rule: RankRule, proj: np.ndarray,
                 delta: float = 1e-6, deficient_first: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Shifted-Cholesky decisions for k-row draws: ``(full, decided)`` boolean arrays.

    ``gram_flat`` is the row-major float64 T x T Gram matrix, flattened; ``subsets`` a ``(B, k)``
    integer array of row indices; ``proj`` the rows' projections on one unit vector (the top
    direction of the whole set makes the lower bound on sigma_max tight). Each draw is tested
    against the largest squared tolerance its sigma_max allows (Frobenius bound) and the smallest
    (largest row norm, projections), then against tighter power-iteration bounds; a draw neither
    certificate settles has ``decided`` False.
    """
    B, k = subsets.shape
    full = np.zeros(B, dtype=bool)
    decided = np.zeros(B, dtype=bool)
    _, c, pos, diag = lower_layout(k)
    r_tol = rule.rtol_for(k, d)
    a = rule.atol_value
    buf = np.zeros((k, k))
    flat_buf = buf.reshape(-1)
    lin, vals = np.empty(len(c), dtype=np.intp), np.empty(len(c))
    potrf = Potrf(k)

    def shift_for(lam: float, sign: int, margin: float) -> float:
        return max(r_tol * math.sqrt(lam), a) ** 2 * (1 + sign * delta) + sign * margin

    for b in range(B):
        s = subsets[b]
        gather_lower(gram_flat, T, s, 0, k, lin, vals)
        dg = vals[diag]
        trace, maxdiag = float(dg.sum()), float(dg.max())
        m_full, m_def = cholesky_margins(k, d, trace, maxdiag)
        fro = math.sqrt(max(2.0 * float(vals @ vals) - float(dg @ dg), 0.0))  # >= lambda_max
        lam_lo = max(maxdiag, float(proj[s] @ proj[s]))  # <= lambda_max

        def independent(lam_hi: float) -> bool:  # lambda_min > the largest squared tolerance
            flat_buf[pos] = vals
            flat_buf[:: k + 1] -= shift_for(lam_hi, 1, m_full)
            return potrf(buf, k) == 0

        def dependent(lam_lo: float) -> bool:  # lambda_min < the smallest squared tolerance
            shift = shift_for(lam_lo, -1, m_def)
            if shift <= 0:
                return False
            flat_buf[pos] = vals
            flat_buf[:: k + 1] -= shift
            return potrf(buf, k) > 0

        if deficient_first and dependent(lam_lo):
            decided[b] = True
        elif independent(fro):
            full[b] = decided[b] = True
        elif not deficient_first and dependent(lam_lo):
            decided[b] = True
        else:  # tighter bounds on lambda_max, then the two certificates once more
            flat_buf[pos] = vals
            lo2, hi2 = power_bounds(buf, proj[s], trace)
            if hi2 < fro and independent(hi2):
                full[b] = decided[b] = True
            elif lo2 > lam_lo and dependent(lo2):
                decided[b] = True
    return full, decided
