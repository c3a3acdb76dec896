"""LAPACK results that are checked before they decide anything.

A singular-value or eigenvalue routine can fail without raising: MKL reports an illegal parameter
(``Parameter 4 was incorrect on entry to DLASCL``) by printing, and torch then returns whatever
the routine left; a routine that does not converge may return NaN, values out of order or values
that no matrix with these entries can have. Nothing here trusts a result it has not checked.

* ``svdvals``: the singular values of ``(..., m, c)`` float64 matrices, descending. Each matrix's
  values are checked (``usable_singular_values``): finite, non-negative, in order, the largest no
  larger than the Frobenius norm and no smaller than the largest row or column norm, and their
  squares summing to the squared Frobenius norm (to a relative 1e-8, far above any rounding a
  backward-stable SVD makes and far below what a failed one returns). A matrix that fails is
  recomputed by the next route: torch's (``gesdd``), then SciPy's ``gesvd`` (another library,
  another driver, LAPACK's ``info`` checked), then SciPy's Jacobi ``gejsv`` (``info`` checked).
  When no route gives usable values, :class:`NumericalFailure` names the call and its size;
  ``svdvals_where_usable`` returns a mask instead, for callers that leave such a matrix undecided
  (a Monte-Carlo draw counted as undecided, a witness candidate that is not a proof).
* ``eigvalsh``: the eigenvalues of symmetric ``(..., n, n)`` float64 matrices, ascending, checked
  the same way (finite, in order, within the Frobenius norm, the largest no smaller than the
  largest diagonal entry, summing to the trace), with NumPy's, torch's and SciPy's ``syevr`` as
  routes; ``eigvalsh_where_usable`` returns a mask instead of raising, for callers that have a
  route of their own (the SVD) for the matrices no eigenvalue routine could give.

Every recomputation is said in one line on stderr with the call's size (once per routine, size and
kind of failure in a process), and counted (:func:`recomputations`). On the CPU the routes are
LAPACK's, and every singular value is computed there (``certificates.svd_rank`` copies the rows
to the host). On a GPU, the eigenvalues of symmetric matrices of order above
:data:`DEVICE_BATCHED_ORDER` (which torch's batched Jacobi routine takes together on the device) and
at most :data:`HOST_EIGVALSH_MAX` (the draws and context matrices of a ViT's 197 tokens) are computed
on the host too, by the CPU's routes, and copied back, so they are the values the CPU computes and a
draw is decided alike on both. That is for the values' sake, not for speed: the device's routine takes
such matrices one at a time, yet on one H200 (``bench_routes.py`` at d74bd69) 64 symmetric 197 x 197
eigenproblems took 99 ms there and 119 ms on the host's 16 threads, and one took 2.5 ms and 2.6 ms;
at orders 408 and 768 the device was five times faster. Matrices of other orders stay on the device,
where its first route runs and the others on the CPU. ``benchmarks/bench_routes.py`` times both
placements. On the host, NumPy's route computes each symmetric matrix of order at most
:data:`ONE_THREAD_ORDER` on one thread, its BLAS too: such a matrix's values are then the same on any
machine (``numerics.certificates.eigvalsh`` deals a stack of them among the host's threads).
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
from collections import Counter
from collections.abc import Callable

import numpy as np
import torch

from .threads import intra_op_threads

__all__ = [
    "DEVICE_BATCHED_ORDER",
    "HOST_EIGVALSH_MAX",
    "ONE_THREAD_ORDER",
    "NumericalFailure",
    "eigenvalue_slack",
    "eigvalsh",
    "eigvalsh_where_usable",
    "on_host",
    "recomputations",
    "svdvals",
    "svdvals_where_usable",
    "usable_eigenvalues",
    "usable_singular_values",
]

#: How far the squares of computed singular values (the computed eigenvalues) may sum from the
#: squared Frobenius norm (the trace), relative to it: a backward-stable routine is within
#: ~2 n^1.5 eps (4e-11 at n = 2000), one that failed is off by far more.
CHECK_RTOL = 1e-8

#: On a GPU, the largest order of a symmetric matrix whose eigenvalues the host computes (module docstring).
HOST_EIGVALSH_MAX = 256

#: Symmetric matrices of at most this order stay on a GPU: torch's batched Jacobi routine takes them together.
DEVICE_BATCHED_ORDER = 32

#: Symmetric matrices of at most this order get their eigenvalues on one host thread each (NumPy's route; module
#: docstring)
ONE_THREAD_ORDER = 256


def on_host(device: torch.device, order: int) -> bool:
    """Whether symmetric matrices of ``order`` on ``device``, a GPU, get their eigenvalues on the host instead
    (module docstring)."""
    return device.type == "cuda" and DEVICE_BATCHED_ORDER < order <= HOST_EIGVALSH_MAX


class NumericalFailure(ArithmeticError):
    """No LAPACK route gave usable singular values or eigenvalues for a matrix: nothing is decided from it.

    ``what``: the call and its size in words (``"singular values of a 2000 x 768 float64 matrix"``)."""

    def __init__(self, what: str, routes: tuple[str, ...]) -> None:
        self.what = what
        super().__init__(
            f"no LAPACK route gave usable {what} (tried {', '.join(routes)}); nothing was decided from them"
        )


_LOCK = threading.Lock()
_SAID: set[tuple] = set()
_COUNT: Counter = Counter()


def recomputations() -> dict[str, int]:
    """How many matrices were recomputed by another route in this process, by the route that failed."""
    with _LOCK:
        return dict(_COUNT)


def _say(routine: str, shape: tuple[int, ...], problem: str, action: str) -> None:
    """One line on stderr (once per routine, matrix size, problem and action in a process), and a count."""
    size = " x ".join(str(int(n)) for n in shape[-2:])
    batch = f" (one of {math.prod(shape[:-2])})" if len(shape) > 2 and math.prod(shape[:-2]) > 1 else ""
    key = (routine, tuple(shape[-2:]), problem, action)
    with _LOCK:
        _COUNT[routine] += 1
        if key in _SAID:
            return
        _SAID.add(key)
    with contextlib.suppress(OSError, ValueError, AttributeError):  # no stderr to write to: the count holds
        print(
            f"Note: LAPACK {routine} gave unusable results for a {size} float64 matrix{batch} ({problem}); {action}",
            file=sys.stderr,
            flush=True,
        )


# --------------------------------------------------------------------------- checks


def _problem(reasons: list[tuple[torch.Tensor, str]], n: int) -> tuple[torch.Tensor, list[str]]:
    """``ok`` (a (n,) mask) and, per matrix, the first reason it failed ("" where it did not)."""
    ok = torch.ones(n, dtype=torch.bool)
    why = [""] * n
    for bad, text in reasons:
        bad = bad.reshape(-1).cpu()
        for i in bad.nonzero().reshape(-1).tolist():
            if ok[i]:
                why[i] = text
        ok &= ~bad
    return ok, why


def usable_singular_values(x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
    """Whether ``s`` (``(..., min(m, c))``, descending) can be the singular values of the float64
    matrices ``x`` (``(..., m, c)``, entries at most 1 in magnitude, as the rescaled data are):
    a flat ``(B,)`` mask and, per matrix, why not ("" where usable)."""
    B = max(1, math.prod(x.shape[:-2]))
    x = x.reshape(B, *x.shape[-2:]).to(torch.float64)
    s = s.reshape(B, -1).to(device=x.device, dtype=torch.float64)
    if s.shape[-1] == 0:
        return torch.ones(B, dtype=torch.bool), [""] * B
    finite = torch.isfinite(s).all(-1)
    s0 = torch.where(torch.isfinite(s), s, torch.zeros_like(s))
    sq = x * x
    fro2 = sq.sum((-2, -1))
    line2 = torch.maximum(sq.sum(-1).amax(-1), sq.sum(-2).amax(-1))  # sigma_max >= every row and column norm
    top2 = s0[:, 0] * s0[:, 0]
    slack = CHECK_RTOL * fro2 + 1e-300
    reasons = [
        (~finite, "not finite"),
        ((s0 < 0).any(-1), "negative"),
        ((s0[:, 1:] > s0[:, :-1]).any(-1), "out of order"),
        (top2 > fro2 + slack, "the largest above the Frobenius norm"),
        (top2 < line2 - slack, "the largest below a row or column norm"),
        ((torch.sum(s0 * s0, -1) - fro2).abs() > slack, "their squares do not sum to the squared Frobenius norm"),
    ]
    return _problem(reasons, B)


def eigenvalue_slack(n: int, fro):
    """How far computed eigenvalues of an n x n symmetric matrix of Frobenius norm ``fro`` (a tensor or
    an array) may lie beyond the bounds they are checked against (``CHECK_RTOL`` relative to ``n fro``)."""
    return CHECK_RTOL * n * fro + 1e-300


def usable_eigenvalues(G: torch.Tensor, lam: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
    """Whether ``lam`` (``(..., n)``, ascending) can be the eigenvalues of the symmetric float64
    matrices ``G`` (``(..., n, n)``): a flat ``(B,)`` mask and, per matrix, why not."""
    B = max(1, math.prod(G.shape[:-2]))
    n = G.shape[-1]
    G = G.reshape(B, n, n).to(torch.float64)
    lam = lam.reshape(B, n).to(device=G.device, dtype=torch.float64)
    if n == 0:
        return torch.ones(B, dtype=torch.bool), [""] * B
    finite = torch.isfinite(lam).all(-1)
    l0 = torch.where(torch.isfinite(lam), lam, torch.zeros_like(lam))
    fro = torch.linalg.matrix_norm(G)
    slack = eigenvalue_slack(n, fro)
    diag = G.diagonal(dim1=-2, dim2=-1)
    reasons = [
        (~finite, "not finite"),
        ((l0[:, 1:] < l0[:, :-1]).any(-1), "out of order"),
        ((l0[:, -1] > fro + slack) | (l0[:, 0] < -fro - slack), "beyond the Frobenius norm"),
        (l0[:, -1] < diag.amax(-1) - slack, "the largest below a diagonal entry"),
        (l0[:, 0] > diag.amin(-1) + slack, "the smallest above a diagonal entry"),
        ((l0.sum(-1) - diag.sum(-1)).abs() > slack, "their sum is not the trace"),
    ]
    return _problem(reasons, B)


# --------------------------------------------------------------------------- routes


def _torch_svdvals(x: torch.Tensor) -> torch.Tensor:
    return torch.linalg.svdvals(x)


def _scipy_gesvd(a: np.ndarray) -> np.ndarray:
    from scipy.linalg import lapack

    _u, s, _vt, info = lapack.dgesvd(np.array(a, dtype=np.float64, order="F"), compute_uv=0)
    if info != 0:
        raise _RouteFailed(f"info = {info}")
    return s


def _scipy_gejsv(a: np.ndarray) -> np.ndarray:
    from scipy.linalg import lapack

    m, c = a.shape
    b = a if m >= c else a.T  # gejsv wants at least as many rows as columns
    if b.shape[1] == 0:
        return np.zeros(0)
    # no assumption on the rank (JOBA = 'G'), no U or V, no restriction of the range
    out = lapack.dgejsv(np.array(b, dtype=np.float64, order="F"), joba=3, jobu=3, jobv=3, jobr=0)
    s, work, info = out[0], out[3], out[-1]
    if info != 0:
        raise _RouteFailed(f"info = {info}")
    scale = work[1] / work[0] if work[0] != 0 else math.nan  # the singular values are SCALE * SVA
    return np.asarray(s, dtype=np.float64) * scale


class _RouteFailed(Exception):
    """A route reported failure (LAPACK's ``info``, an exception)."""


def _each(route: Callable[[np.ndarray], np.ndarray]) -> Callable[[torch.Tensor], torch.Tensor]:
    def run(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(route(x.cpu().numpy())))

    return run


_SVD_ROUTES: tuple[tuple[str, Callable[[torch.Tensor], torch.Tensor]], ...] = (
    ("gesdd", _torch_svdvals),
    ("gesvd", _each(_scipy_gesvd)),
    ("gejsv", _each(_scipy_gejsv)),
)


def svdvals(x: torch.Tensor) -> torch.Tensor:
    """Singular values of ``(..., m, c)`` float64 matrices (entries at most 1 in magnitude),
    descending, on ``x``'s device; every matrix's values checked, and recomputed by the next route
    where they are not usable (module docstring).

    Raises:
        NumericalFailure: when no route gives usable values for some matrix.
    """
    s, usable = _svdvals(x, "no route left")
    if not bool(usable.all()):
        raise NumericalFailure(
            f"singular values of a {' x '.join(map(str, x.shape[-2:]))} float64 matrix",
            tuple(name for name, _ in _SVD_ROUTES),
        )
    return s


def svdvals_where_usable(x: torch.Tensor, left: str = "left undecided") -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`svdvals`, and a mask (``x.shape[:-2]``, on the CPU) of the matrices whose values are usable: where
    no route gives usable values the mask is False (the values there are zeros, not to be read), and the one
    line on stderr ends with ``left`` (what the caller does with such a matrix: ``"left undecided"``)."""
    s, usable = _svdvals(x, f"no route left; {left}")
    return s, usable.reshape(x.shape[:-2])


def _svdvals(x: torch.Tensor, last: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Singular values of the matrices ``x`` and a flat mask of those some route gave usable values for;
    ``last``: what the line says when none did."""
    shape = tuple(x.shape)
    B = max(1, math.prod(shape[:-2]))
    flat = x.reshape(B, *shape[-2:])
    first_name, first = _SVD_ROUTES[0]
    try:
        s = first(flat)
        ok, why = usable_singular_values(flat, s)
    except RuntimeError as exc:  # torch raises on a LAPACK error it sees (convergence)
        s = torch.zeros(B, min(shape[-2:]), dtype=torch.float64, device=x.device)
        ok, why = torch.zeros(B, dtype=torch.bool), [f"raised: {' '.join(str(exc).split())[:80]}"] * B
    usable = torch.ones(B, dtype=torch.bool)
    if not bool(ok.all()):
        s = s.clone()
        for i in (~ok).nonzero().reshape(-1).tolist():
            got = _recompute(flat[i], first_name, why[i], shape, last)
            if got is None:
                s[i] = 0
                usable[i] = False
            else:
                s[i] = got.to(s.device)
    return s.reshape(*shape[:-2], -1), usable


def _recompute(a: torch.Tensor, failed: str, why: str, shape: tuple[int, ...], last: str) -> torch.Tensor | None:
    """One matrix's singular values by the routes after ``failed`` (which gave values unusable for ``why``);
    None when no route gives usable values (the line then ends with ``last``)."""
    tried = [failed]
    for name, route in _SVD_ROUTES[1:]:
        try:
            s = route(a.cpu())
            ok, why_now = usable_singular_values(a.cpu()[None], s[None])
        except (_RouteFailed, RuntimeError, ValueError) as exc:
            ok, why_now = torch.zeros(1, dtype=torch.bool), [str(exc) or type(exc).__name__]
        if bool(ok[0]):
            _say(tried[-1], shape, why, f"recomputed with {name}")
            return s
        _say(tried[-1], shape, why, f"trying {name}")
        tried.append(name)
        why = why_now[0]
    _say(tried[-1], shape, why, last)
    return None


def _numpy_eigvalsh(G: torch.Tensor) -> torch.Tensor:
    a = G.cpu().numpy()
    # each small matrix on one thread: its values the same on any machine (None: a large one as it is)
    with intra_op_threads(1 if a.shape[-1] <= ONE_THREAD_ORDER else None):
        return torch.from_numpy(np.linalg.eigvalsh(a))


def _torch_eigvalsh(G: torch.Tensor) -> torch.Tensor:
    return torch.linalg.eigvalsh(G)


def _torch_cpu_eigvalsh(G: torch.Tensor) -> torch.Tensor:
    return torch.linalg.eigvalsh(G.cpu())


def _scipy_syevr(G: torch.Tensor) -> torch.Tensor:
    from scipy.linalg import lapack

    out = []
    for a in G.cpu().numpy().reshape(-1, *G.shape[-2:]):
        w, _v, _m, _isuppz, info = lapack.dsyevr(np.array(a, order="F"), compute_v=0, lower=1)
        if info != 0:
            raise _RouteFailed(f"info = {info}")
        out.append(np.asarray(w[: a.shape[0]]))
    return torch.from_numpy(np.stack(out)).reshape(*G.shape[:-1])


_EIG_ROUTES: tuple[tuple[str, Callable[[torch.Tensor], torch.Tensor]], ...] = (
    ("syevd (NumPy)", _numpy_eigvalsh),
    ("syevd (torch)", _torch_eigvalsh),
    ("syevr", _scipy_syevr),
)


def eigvalsh_where_usable(G: torch.Tensor, torch_first: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues of symmetric ``(..., n, n)`` float64 matrices, ascending, on ``G``'s device, and a
    mask (``G.shape[:-2]``) of the matrices whose values are usable: each route's values checked,
    the matrices they fail recomputed by the next route; where none gives usable values the mask is
    False (the values there are not to be read). The first route is NumPy's on the CPU (faster for
    many small matrices), torch's with ``torch_first`` (its thread setting governs one large one); on a GPU, the
    device's own unless the matrices are small enough for the host (module docstring)."""
    if on_host(G.device, G.shape[-1]):
        lam, usable = eigvalsh_where_usable(G.cpu(), torch_first)
        return lam.to(G.device), usable.to(G.device)
    shape = tuple(G.shape)
    B = max(1, math.prod(shape[:-2]))
    flat = G.reshape(B, *shape[-2:])
    lam = torch.zeros(B, shape[-1], dtype=torch.float64, device=G.device)
    todo = torch.arange(B)
    failed, why = "", ""
    routes: tuple[tuple[str, Callable[[torch.Tensor], torch.Tensor]], ...]
    if G.device.type != "cpu":  # the device's own routine, then the CPU's
        routes = (("syevd (torch)", _torch_eigvalsh), ("syevd (torch, CPU)", _torch_cpu_eigvalsh), _EIG_ROUTES[2])
    else:
        routes = (_EIG_ROUTES[1], _EIG_ROUTES[0], _EIG_ROUTES[2]) if torch_first else _EIG_ROUTES
    for name, route in routes:
        if todo.numel() == 0:
            break
        if failed:
            _say(failed, shape, why, f"trying {name}")
        sub = flat[todo.to(flat.device)]
        try:
            got = route(sub)
            ok, whys = usable_eigenvalues(sub, got)
        except (_RouteFailed, RuntimeError, ValueError, np.linalg.LinAlgError) as exc:
            got, ok, whys = None, torch.zeros(todo.numel(), dtype=torch.bool), [str(exc) or "failed"] * todo.numel()
        if got is not None and bool(ok.any()):
            vals = got.to(lam)
            lam[todo[ok].to(lam.device)] = vals[ok.to(vals.device)]
            if failed:
                _say(failed, shape, why, f"recomputed with {name}")
        if not bool(ok.all()):
            first_bad = int((~ok).nonzero()[0])
            failed, why = name, whys[first_bad]
        todo = todo[~ok]
    usable = torch.ones(B, dtype=torch.bool)
    if todo.numel():
        _say(failed, shape, why, "left to the SVD")
        usable[todo] = False
    return lam.reshape(*shape[:-1]), usable.reshape(shape[:-2]).to(G.device)


def eigvalsh(G: torch.Tensor) -> torch.Tensor:
    """:func:`eigvalsh_where_usable`, for callers with no other route.

    Raises:
        NumericalFailure: when no route gives usable eigenvalues for some matrix.
    """
    lam, usable = eigvalsh_where_usable(G)
    if not bool(usable.all()):
        raise NumericalFailure(
            f"eigenvalues of a {' x '.join(map(str, G.shape[-2:]))} float64 matrix", tuple(n for n, _ in _EIG_ROUTES)
        )
    return lam
