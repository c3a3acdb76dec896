"""The CPU LAPACK kernels: the shifted-Cholesky certificates of ``numerics.certificates`` per draw.

On the CPU the certificates dominate the cost of a Monte-Carlo test, once per draw. Two
things make them cheaper than batched ``torch.linalg`` calls: the LAPACK ``dpotrf`` that SciPy
ships, called through ctypes so that worker threads run it in parallel (ctypes releases the
GIL), and a gather of only the lower triangle of each draw's Gram submatrix from the full
T x T Gram (dpotrf reads nothing else) or, when that Gram would not fit in memory, the same
entries computed per draw from the rows (``RowGramEntries``).

* ``decide_draws``: the fixed-size test, one k-row draw at a time. The certificates are those of
  ``decide_full_rank``, with the rounding bounds of ``cholesky_margins``; a draw they do not
  settle is left undecided for ``decide_full_rank``, which falls back to eigenvalues or the SVD.
* ``SweepKernel``: the sweep, k* (the largest independent leading block) of one nested draw.

So every decision still equals ``matrix_rank`` on the same rows with the same tolerance: these
kernels prove, they do not estimate. Like the torch certificates they take Gram matrices of
rescaled rows (``numerics.scale``) and leave those below ``TINY_GRAM`` to the SVD.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
from typing import TYPE_CHECKING

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from .certificates import TINY_GRAM, cholesky_margins, decide_full_rank

if TYPE_CHECKING:
    from .rule import RankRule

__all__ = [
    "FullGramEntries",
    "Potrf",
    "RowGramEntries",
    "SweepKernel",
    "available",
    "blas_single_thread",
    "cython_lapack_function",
    "decide_draws",
    "gather_lower",
    "lapack_dpotrf",
    "lower_layout",
    "power_bounds",
]


def cython_lapack_function(name: str, *argtypes):
    """The LAPACK routine ``name`` of SciPy (``scipy.linalg.cython_lapack``) as a ctypes function taking
    ``argtypes`` and returning nothing, which releases the GIL while it runs; None where SciPy has no
    such routine. The caller self-tests what it gets before anything relies on it."""
    try:
        from scipy.linalg import cython_lapack

        capsule = cython_lapack.__pyx_capi__[name]
        api = ctypes.pythonapi
        api.PyCapsule_GetName.restype = ctypes.c_char_p
        api.PyCapsule_GetName.argtypes = [ctypes.py_object]
        api.PyCapsule_GetPointer.restype = ctypes.c_void_p
        api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
        ptr = api.PyCapsule_GetPointer(capsule, api.PyCapsule_GetName(capsule))
        return ctypes.CFUNCTYPE(None, *argtypes)(ptr)
    except Exception:  # noqa: BLE001  # pragma: no cover - a SciPy without its Cython LAPACK API
        return None


@functools.lru_cache(maxsize=1)
def lapack_dpotrf():
    """LAPACK ``dpotrf`` as a ctypes function that releases the GIL, or None where unavailable."""
    c_int_p = ctypes.POINTER(ctypes.c_int)
    fn = cython_lapack_function("dpotrf", ctypes.c_char_p, c_int_p, ctypes.c_void_p, c_int_p, c_int_p)
    if fn is None:  # pragma: no cover - a SciPy without its Cython LAPACK API
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
    the order of the first leading block that is not positive definite; a negative ``info`` (an
    argument LAPACK calls illegal) is neither, and every caller reads only ``== 0`` (certified
    independent) and ``> 0`` (certified dependent), so such a factorisation certifies nothing and
    the draw goes to the exact decision (``decide_full_rank``).
    """

    def __init__(self, lda: int):
        self.fn = lapack_dpotrf()
        self.n, self.lda, self.info = ctypes.c_int(0), ctypes.c_int(lda), ctypes.c_int(0)
        self.refs = (ctypes.byref(self.n), ctypes.byref(self.lda), ctypes.byref(self.info))

    def __call__(self, buf: np.ndarray, m: int) -> int:
        """Factor the leading ``m x m`` block of ``buf`` in place; LAPACK's ``info`` (0 when positive definite)."""
        self.n.value = m
        self.fn(b"U", self.refs[0], buf.ctypes.data, self.refs[1], self.refs[2])
        return int(self.info.value)


def available() -> bool:
    """True when SciPy's LAPACK ``dpotrf`` can be called directly and passed its self-test."""
    return lapack_dpotrf() is not None


@functools.lru_cache(maxsize=8)
def lower_layout(k: int):
    """Row and column indices of the lower triangle of a k x k matrix (row by row), their flat
    positions, and the positions of the diagonal among them."""
    r, c = np.tril_indices(k)
    return r, c, r * k + c, np.flatnonzero(r == c)


def gather_lower(
    gram_flat: np.ndarray,
    T: int,
    s: np.ndarray,
    start: int,
    stop: int,
    lin: np.ndarray | None = None,
    vals: np.ndarray | None = None,
) -> np.ndarray:
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


class FullGramEntries:
    """Entries of the Gram matrix of the rows, read from the whole T x T Gram (row-major, flattened):
    fast per draw, 8 T^2 bytes in all."""

    route = "full"

    def __init__(self, gram_flat: np.ndarray, T: int):
        self.flat, self.T = gram_flat, T

    def diagonal(self) -> np.ndarray:
        """The squared row norms (the Gram's diagonal)."""
        return self.flat[:: self.T + 1]

    def lower(
        self, s: np.ndarray, start: int, stop: int, lin: np.ndarray | None = None, vals: np.ndarray | None = None
    ) -> np.ndarray:
        """Rows ``start:stop`` of the lower triangle of ``G[s][:, s]``, row by row (``gather_lower``)."""
        return gather_lower(self.flat, self.T, s, start, stop, lin, vals)


class RowGramEntries:
    """Entries of the Gram matrix of the rows, computed for each draw from the rows themselves
    (``R R^T`` of the draw's rows, one BLAS call): memory O(k d + k^2) per draw in flight, whatever
    T, besides the rows. Slower per draw than reading a full Gram, which for large T does not fit
    in memory. The rows: a float64 array ``X``, or ``take(s)`` giving the float64 rows ``s`` (of
    ``T``, gathered from wherever they lie), with ``sqn`` their squared norms (the diagonal).
    Constructing without ``X`` and without both ``take`` and ``T`` is refused (a TypeError: a caller's bug)."""

    route = "per-draw"

    def __init__(self, X: np.ndarray | None = None, *, take=None, T: int | None = None, sqn: np.ndarray | None = None):
        if X is not None:
            self.X = np.ascontiguousarray(X, dtype=np.float64)
            take, T = functools.partial(np.take, self.X, axis=0), self.X.shape[0]
        if take is None or T is None:
            raise TypeError("RowGramEntries needs X, or take and T")
        self.take, self.T, self.sqn = take, int(T), sqn

    def diagonal(self) -> np.ndarray:
        """The squared row norms (the Gram's diagonal): ``sqn``, or computed once from ``X``."""
        if self.sqn is None:
            self.sqn = np.einsum("ij,ij->i", self.X, self.X)
        return self.sqn

    def lower(
        self, s: np.ndarray, start: int, stop: int, lin: np.ndarray | None = None, vals: np.ndarray | None = None
    ) -> np.ndarray:
        """Rows ``start:stop`` of the lower triangle of ``G[s][:, s]``, row by row, from the rows ``s[:stop]``."""
        R = self.take(s[:stop])
        block = R @ R.T if start == 0 else R[start:stop] @ R.T  # the first: a symmetric update (syrk)
        r, c, _, _ = lower_layout(len(s))
        a, b = start * (start + 1) // 2, stop * (stop + 1) // 2
        if lin is None:
            lin = np.empty(b - a, dtype=np.intp)
        np.subtract(r[a:b], start, out=lin)
        lin *= stop
        lin += c[a:b]
        return np.take(block.reshape(-1), lin, out=vals)


def blas_single_thread():
    """A context in which BLAS/LAPACK libraries use one thread each (our workers parallelise)."""
    try:
        return threadpool_limits(limits=1, user_api="blas")
    except Exception:  # noqa: BLE001  # pragma: no cover - threadpoolctl missing or unable to inspect
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


def decide_draws(
    entries: FullGramEntries | RowGramEntries,
    subsets: np.ndarray,
    d: int,
    rule: RankRule,
    proj: np.ndarray,
    delta: float = 1e-6,
    deficient_first: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Shifted-Cholesky decisions for k-row draws: ``(full, decided)`` boolean arrays.

    ``entries`` gives the float64 Gram entries of the rows (read from the full Gram or computed
    from the rows: the same decisions either way); ``subsets`` a ``(B, k)``
    integer array of row indices; ``proj`` the rows' projections on one unit vector (the top
    direction of the whole set makes the lower bound on sigma_max tight). Each draw is tested
    against the largest squared tolerance its sigma_max allows (Frobenius bound) and the smallest
    (largest row norm, projections), then against tighter power-iteration bounds; a draw neither
    certificate settles, or whose Gram is below ``TINY_GRAM``, has ``decided`` False.
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
        entries.lower(s, 0, k, lin, vals)
        dg = vals[diag]
        trace, maxdiag = float(dg.sum()), float(dg.max())
        if maxdiag < TINY_GRAM:
            continue
        m_full, m_def = cholesky_margins(k, d, trace, maxdiag)
        fro = math.sqrt(max(2.0 * float(vals @ vals) - float(dg @ dg), 0.0))  # >= lambda_max
        lam_lo = max(maxdiag, float(proj[s] @ proj[s]))  # <= lambda_max

        # m_full and m_def are bound at definition: both functions are called within this draw only
        def independent(lam_hi: float, m_full: float = m_full) -> bool:  # lambda_min > the largest squared tolerance
            flat_buf[pos] = vals
            flat_buf[:: k + 1] -= shift_for(lam_hi, 1, m_full)
            return potrf(buf, k) == 0

        def dependent(lam_lo: float, m_def: float = m_def) -> bool:  # lambda_min < the smallest squared tolerance
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


class SweepKernel:
    """k* of one nested draw on the CPU, with LAPACK ``dpotrf`` and no batched padding.

    For a draw (an ordering of K rows) k* is the largest k whose leading k rows are independent;
    independence is monotone in k. A Cholesky factorisation of ``G - s I`` fails at the first
    leading block with an eigenvalue at or below ``s`` (LAPACK reports its order), so one
    factorisation settles every k at once against one shift:

    * with ``s`` at least the largest tolerance any k in the open range can have, every leading
      block before the failure is certified independent;
    * with ``s`` at most the smallest such tolerance, the block where it fails is certified
      dependent.

    Tolerances come from bounds on lambda_max of each leading block: below by the largest squared
    row norm and by the squared projections on the top direction of the whole set, above by the
    Frobenius norm. The range shrinks round by round; when a round proves little, bisection
    goes on with the shifts of one size at a time, and a size whose smallest eigenvalue sits
    within the bounds' slack of its tolerance is decided by ``decide_full_rank``. Rows of the
    Gram submatrix are gathered only as far as they are needed (lower triangle only: dpotrf
    reads nothing else).

    ``entries`` gives the float64 Gram entries of the rows (``FullGramEntries`` or
    ``RowGramEntries``); ``proj`` the rows' projections on one unit vector; ``rows_fn(s)`` returns
    the float64 rows with indices ``s`` (a NumPy array) as a tensor, for exact re-checks.
    """

    def __init__(
        self,
        entries: FullGramEntries | RowGramEntries,
        proj: np.ndarray,
        rows_fn,
        K: int,
        d: int,
        rule: RankRule,
        delta: float = 1e-6,
    ):
        self.entries, self.proj, self.rows_fn = entries, proj, rows_fn
        self.K, self.d, self.rule, self.delta = K, d, rule, delta
        self.sqn = entries.diagonal()  # squared row norms: the Gram's diagonal
        ks = np.arange(1, K + 1, dtype=np.float64)
        self.rt = np.array([rule.rtol_for(int(k), d) for k in range(1, K + 1)])
        self.a = rule.atol_value
        self.ks = ks
        _, _, self.pos, _ = lower_layout(K)
        self.row_start = np.concatenate([[0], np.cumsum(np.arange(1, K + 1))])
        self.hint = K  # rows to gather first and the size to aim at: only speed depends on them
        self.guess = K

    def draws(self, subs: np.ndarray) -> tuple[np.ndarray, int]:
        """k* for each row of ``subs`` (B, K) (-1 where a decision it needs cannot be computed), and how many sizes
        needed an exact decision."""
        K = self.K
        Gp = np.zeros((K, K))
        W = np.empty((K, K))
        potrf = Potrf(K)

        def factor(m: int, shift: float) -> int:
            """LAPACK info of Cholesky(G_m - shift I): 0, or the order of the first failing block."""
            W[:m, :m] = Gp[:m, :m]
            W.reshape(-1)[: m * (K + 1) : K + 1] -= shift
            return potrf(W, m)

        out = np.empty(subs.shape[0], dtype=np.int64)
        exact = 0
        for b in range(subs.shape[0]):
            try:
                out[b], e = self._one(subs[b], Gp, factor)
            except _Undecided:  # a decision no LAPACK route could give: the draw's k* is unknown
                out[b], e = -1, 0
                continue
            exact += e
            self.hint = min(K, int(out[b] * 1.1) + 8)  # k* of neighbouring draws cluster
        return out, exact

    def _one(self, s: np.ndarray, Gp: np.ndarray, factor) -> tuple[int, int]:
        """k* of the draw ``s`` (an ordering of K rows), and how many sizes needed an exact decision."""
        draw = _Draw(self, s, Gp)
        draw.grow(max(1, min(self.K, max(self.hint, draw.tiny))))
        lo, hi, exact = self._bisect_tiny(draw)
        lo, more = self._narrow(draw, factor, lo, hi)
        self.guess = max(1, lo)
        return lo, exact + more

    def _bisect_tiny(self, draw: _Draw) -> tuple[int, int, int]:
        """``(lo, hi, exact)`` after the leading blocks below ``TINY_GRAM``, which no certificate may decide, are
        bisected by exact decisions: every k <= lo is independent, every k > hi dependent, and ``exact`` sizes
        were decided exactly."""
        lo, hi, exact = 0, self.K, 0  # every k <= lo is independent, every k > hi dependent
        while lo < min(draw.tiny, hi):  # blocks below TINY_GRAM: exact decisions, by bisection
            mid = (lo + min(draw.tiny, hi) + 1) // 2
            full, was_exact = self._decide(draw.s, draw.Gp, mid)
            exact += was_exact
            lo, hi = (mid, hi) if full else (lo, mid - 1)
        return lo, hi, exact

    def _narrow(self, draw: _Draw, factor, lo: int, hi: int) -> tuple[int, int]:
        """k* of the draw, found from ``lo`` (every k <= lo independent) and ``hi`` (every k > hi dependent) by
        the shifted-Cholesky certificates of independence and dependence, and how many sizes among those needed
        an exact decision."""
        exact = 0
        j = self.guess  # where to aim the certificate of independence
        last_b = -1  # the lo at which the certificate of dependence last ran
        while lo < hi:
            if lo >= draw.m:  # every gathered size is independent: gather more rows
                draw.grow_more(hi)
                j = draw.m
            mm = min(hi, draw.m)
            j = max(lo + 1, min(j, mm))
            before = (lo, hi)
            # independence of every leading block up to j: the largest tolerance there is j's
            f = factor(j, draw.shifts(j)[0])
            lo = max(lo, j if f == 0 else f - 1)
            if lo >= hi:
                break
            if lo == draw.m:
                continue
            # dependence of the block where a factorisation at the smallest open tolerance (that
            # of lo + 1; tolerances grow with k) fails, less the margin of the largest block
            s_lo = draw.shifts(lo + 1)[1] - draw.m_def[mm - 1]
            if s_lo > 0 and lo != last_b:
                last_b = lo
                f = factor(mm, s_lo)
                if lo < f <= mm:
                    hi = min(hi, f - 1)
                elif f == 0 and draw.m < hi:
                    draw.grow_more(hi)
                    last_b = -1
                    continue
            if (lo, hi) == before and j == lo + 1:
                # lambda_min(G_{lo+1}) sits within rounding distance of its tolerance:
                # decide_full_rank falls back to eigenvalues or the SVD
                full, was_exact = self._decide(draw.s, draw.Gp, lo + 1)
                exact += was_exact
                if full:
                    lo += 1
                else:
                    hi = lo
            # aim next at the top of the range when it just shrank from above, else just past lo
            j = hi if hi != before[1] else lo + 1
        return lo, exact

    def _decide(self, s: np.ndarray, Gp: np.ndarray, k: int) -> tuple[bool, int]:
        """Whether the leading k rows of the draw ``s`` are independent, and whether that took an exact decision.

        Raises:
            _Undecided: when no LAPACK route gives the singular values the decision needs.
        """
        A = np.tril(Gp[:k, :k])
        A = A + np.tril(A, -1).T
        dec = decide_full_rank(
            torch.from_numpy(A)[None],
            lambda j: self.rows_fn(s[:k])[None],
            k,
            self.d,
            self.rule,
            self.delta,
            what="the draw",
        )
        if bool(dec.left_open()[0]):
            raise _Undecided
        return bool(dec.full[0]), int(dec.exact[0])


class _Undecided(Exception):
    """A draw's decision that no LAPACK route could compute: its k* is unknown."""


class _Draw:
    """One nested draw of :class:`SweepKernel` as it is decided: the indices ``s`` of its rows, the first ``m``
    rows of its Gram matrix gathered into ``Gp`` (lower triangle), and per leading block the bounds, rounding
    margins and (once asked for) shifts of the certificates. ``tiny``: how many leading blocks lie below
    ``TINY_GRAM``, where no certificate may decide."""

    def __init__(self, kernel: SweepKernel, s: np.ndarray, Gp: np.ndarray) -> None:
        self.kernel, self.s, self.Gp = kernel, s, Gp
        self.rowsq = np.zeros(kernel.K)
        self.dg = kernel.sqn[s]
        maxdiag = np.maximum.accumulate(self.dg)
        self.tiny = int(np.searchsorted(maxdiag, TINY_GRAM))  # leading blocks no certificate may decide
        self.trace = np.cumsum(self.dg)
        self.lam_lo = np.maximum(maxdiag, np.cumsum(kernel.proj[s] ** 2))
        self.m_full, self.m_def = cholesky_margins(kernel.ks, kernel.d, self.trace, maxdiag)
        self.m = 0
        self.cache: dict[int, tuple[float, float]] = {}

    def grow(self, new_m: int) -> None:
        """Return nothing: gather the Gram rows ``m`` to ``new_m`` into ``Gp`` and their squared row sums."""
        kernel, m = self.kernel, self.m
        a0, b0 = kernel.row_start[m], kernel.row_start[new_m]
        vals = kernel.entries.lower(self.s, m, new_m)
        self.Gp.reshape(-1)[kernel.pos[a0:b0]] = vals
        sq = np.add.reduceat(vals * vals, kernel.row_start[m:new_m] - a0)
        d0 = self.dg[m:new_m]
        self.rowsq[m:new_m] = 2.0 * sq - d0 * d0
        self.m = new_m

    def grow_more(self, hi: int) -> None:
        """Return nothing: gather a quarter more rows (16 at least), never beyond ``hi``."""
        m = self.m
        self.grow(min(hi, max(m + 16, int(m * 1.25))))

    def shifts(self, k: int) -> tuple[float, float]:
        """At size k: the shift that certifies independence (the largest squared tolerance plus the rounding
        margin), and the smallest squared tolerance (before any margin), from power-iteration bounds on
        lambda_max(G_k); computed once per size."""
        if k not in self.cache:
            self.cache[k] = self._tight(k)
        return self.cache[k]

    def _tight(self, k: int) -> tuple[float, float]:
        """The two values of :meth:`shifts` at size k, computed."""
        kernel, rt, a, delta = self.kernel, self.kernel.rt, self.kernel.a, self.kernel.delta
        lo_k, hi_k = power_bounds(self.Gp[:k, :k], kernel.proj[self.s[:k]], float(self.trace[k - 1]))
        hi_k = min(hi_k, math.sqrt(max(float(self.rowsq[:k].sum()), 0.0)))
        lo_k = max(lo_k, float(self.lam_lo[k - 1]))
        s_hi = max(rt[k - 1] * math.sqrt(hi_k), a) ** 2 * (1 + delta) + self.m_full[k - 1]
        t_lo = max(rt[k - 1] * math.sqrt(lo_k), a) ** 2 * (1 - delta)
        return s_hi, t_lo
