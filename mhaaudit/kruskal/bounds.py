"""Bounds on the Kruskal rank that hold for every subset: proofs, not estimates.

* ``set_stats``: the singular values and row norms of the whole set. The numerical rank of the
  whole set bounds the rank of every subset, so ``SetStats.ceiling`` is a certified ceiling.
* ``babel_floor``: the Babel-function (cumulative coherence) bound, a certified floor: every
  subset up to that size is independent under the rule.
* ``exact_kruskal_rank``: the Kruskal rank by enumerating every subset (small cases only; the
  brute-force oracle the tests check the estimator and the bounds against).

Each works on the data divided by an exact power of two (``numerics.scale``) and squares no norm
it does not have to, so the bounds do not depend on the data's scale.

Which singular values the whole set's rank uses
-----------------------------------------------
The singular values are used in two kinds of comparison only: the whole set's rank counts those
above its own tolerance ``tol(s_0)``, and ``SetStats.ceiling(k)`` counts those with
``s_i + sv_error`` above one tolerance ``tol_min(k)`` per size k. The values may come from the
streamed Gram matrix (square roots of its eigenvalues) or from the TSQR factor R of the rows
(``stream.tsqr``, a second pass, accurate to an SVD of the rows). The Gram's are used whenever
every comparison made comes out as it would with the TSQR pass's values, and as with the exact
ones; so the rank and every ceiling are the same numbers whichever is used. The argument:

* The Gram ``G^ = G + E1`` of the rescaled rows (entries at most 1) is a sum of T products per
  entry in some order, so ``|E1| <= gamma_T |X|^T |X|`` entrywise and
  ``||E1|| <= gamma_T trace(G)`` (a non-negative matrix's norm is at most that of a larger one,
  and a Gram's at most its trace); products flushed or rounded in the subnormal range add at
  most ``2 d T 2**-1022``. The eigenvalues of G^ (LAPACK, backward stable) are taken to be
  those of a matrix within ``16 d eps ||G^||`` of it: an assumption on the constant, which
  LAPACK states only as p(d) eps with p unspecified (the rigorous worst case grows like d^2). By Weyl's theorem,
  ``|lam^_i - sigma_i^2| <= delta`` with
  ``delta`` twice the sum of these (``_gram_error``), so ``sigma_i`` lies in
  ``[lo_i, hi_i] = [sqrt(max(0, lam^_i - delta)), sqrt(lam^_i + delta)]``, each rounded outward.
* The TSQR values ``t_i`` satisfy ``|t_i - sigma_i| <= c sigma_0`` with
  ``c = 8 (max(T, d) + d chunks) eps`` (``stream.tsqr``; likewise an assumed constant: the
  rigorous Householder bound is larger), and that pass reports the error
  ``c t_0``. With ``w = c hi_0 >= c sigma_0``: ``t_i`` lies in ``[a_i, b_i] = [max(0, lo_i - w),
  hi_i + w]``, ``t_0`` in ``[a_0, b_0]``, and ``fl(t_i + c t_0)`` in
  ``[a_i, b_i + c (hi_0 + w)]`` (outward-rounded: rounding is monotone, so ``fl(x + y) >= x``
  for y >= 0, and ``tol`` is non-decreasing in its argument).
* The rank is taken from the Gram when, for every i, ``a_i > tol(b_0)`` or ``b_i <= tol(a_0)``:
  then every count, by the exact values or the TSQR pass's, agrees; otherwise ``set_stats`` runs
  the TSQR pass. A ceiling is taken from the brackets when its tolerance lies in none of them
  (``GramBrackets``); otherwise the TSQR pass runs then (once) and decides it, as it would have.

``unit_singular_values`` are then the Gram's, within ``unit_sv_error = sqrt(delta)`` of the
exact values; after a TSQR pass, its values and its error ``c s_0``.

A pass deferred to a ceiling reads X then: the ceiling refuses (``InputError``) when X is no
longer what the statistics describe (``_DeferredPass``).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
from typing import Literal, overload

import numpy as np
import torch

from .. import distributed, validate
from ..errors import InputError, Param
from ..mapped import MappedArray
from ..numerics import EPS64, RankRule, checked, decision_margin, numerics, row_norms, svd_rank, with_numerics
from ..numerics.stream import tsqr, unit_of
from .results import Bound, GramBrackets, SetStats, every_rows_independent
from .sampling import as_matrix, rows_of

__all__ = [
    "BABEL_ENTRY_COST",
    "BABEL_MAX_WORK",
    "COARSEST_DEFAULT_EPS",
    "babel_floor",
    "exact_kruskal_rank",
    "fixed_rule",
    "set_stats",
]

#: The Babel floor is computed when T^2 (d + BABEL_ENTRY_COST) is at most this (T = 49 000 at d = 768, 174 000 at d = 2)
BABEL_MAX_WORK = 2e12
#: What each of the T^2 coherences costs besides its d products (its absolute value and its place among the
#: largest), in products: measured at 80 to 100 on the CPU, so that at d = 2 the work is not 2 T^2 but ~66 T^2
BABEL_ENTRY_COST = 64
#: The default rule is refused for features whose dtype's eps is at least this: the 8-bit floating
#: formats (float16's is 2**-10, bfloat16's 2**-7, float8_e4m3fn's 2**-3), see ``fixed_rule``.
COARSEST_DEFAULT_EPS = 2.0**-4


@overload
def fixed_rule(
    X, rule: RankRule, stats: SetStats | None = None, need_stats: Literal[True] = True
) -> tuple[RankRule, SetStats]: ...


@overload
def fixed_rule(
    X, rule: RankRule, stats: SetStats | None = None, need_stats: bool = True
) -> tuple[RankRule, SetStats | None]: ...


def fixed_rule(
    X, rule: RankRule, stats: SetStats | None = None, need_stats: bool = True
) -> tuple[RankRule, SetStats | None]:
    """The rule every rank decision about X and its subsets is taken under, and X's ``SetStats``.

    The rule is the paper's, per matrix: a matrix M (a draw, a witness, the whole set) has the
    singular values above ``max(atol, rtol * sigma_max(M))`` as its rank, with ``rtol = max(rows,
    cols) * eps`` by default, so ``rule`` is returned as it is. The whole set's rank that is
    reported beside a test at size k is ``stats.ceiling(k, rule)``: its rank at the smallest
    tolerance any k-subset can have under the rule. Since sigma_i(X_S) <= sigma_i(X), no k-subset's
    rank exceeds it. ``stats`` are computed when not given and ``need_stats``; given statistics whose
    Gram brackets came without their rows (pickled: another rank computed them) get X's rows for the
    TSQR pass a ceiling may need.

    A rule under which no vector of any subset could count as independent (its tolerance at
    ``d`` columns, the smallest any subset has, is at least sigma_max) is refused, and so is the
    default rule for the 8-bit floating formats (eps at least 1/16): its tolerance
    ``max(rows, cols) * eps * sigma_max`` reaches sigma_max at 1 / eps rows (8 for float8_e4m3fn,
    4 for float8_e5m2), so it would call the whole set rank 0 while its small subsets count; such
    features are decoded exactly and need a tolerance of the user's (``rtol`` or ``atol``). The
    default rule is refused for the same reason whenever ``max(T, d) * eps >= 1`` (float16 at
    T = 1024 rows or more, bfloat16 at 128).

    Raises:
        InputError: when, with no ``atol``, the rule's relative tolerance at d columns is at least 1;
            when the default rule is asked for features of an 8-bit floating format, or for T x d features
            with ``max(T, d) * eps >= 1``; when ``stats``
            describe rows of another shape than X's.
    """
    _T, d = X.shape
    if rule.rtol is None and not rule.atol and rule.eps >= COARSEST_DEFAULT_EPS:
        raise InputError(
            f"features of dtype {rule.dtype} have eps = {rule.eps:.3g}: under the default rule (tolerance "
            f"max(rows, cols) * eps * sigma_max) every matrix of {math.ceil(1 / rule.eps)} or more rows has a "
            "tolerance of at least its sigma_max, so the whole set would have rank 0 whatever its values; give "
            + Param("rtol")
            + " or "
            + Param("atol")
            + " (the values are decoded exactly), or features in float16 or finer"
        )
    if rule.rtol_for(1, d) >= 1 and not rule.atol:
        raise InputError(
            f"the rank rule's tolerance {rule.rtol_for(1, d):.3g} * sigma_max (at least d = {d} times "
            f"eps({rule.dtype}) = {rule.eps:.3g}, or " + Param("rtol") + ") is at least sigma_max, so no vector could "
            "count as independent: give a smaller "
            + Param("rtol")
            + " or an "
            + Param("atol")
            + ", or features in a finer dtype"
        )
    if rule.rtol is None and not rule.atol and rule.rtol_for(_T, d) >= 1:
        raise InputError(
            f"features of dtype {rule.dtype} at T = {_T} rows of d = {d}: under the default rule the whole set's "
            f"tolerance is max(T, d) * eps = {max(_T, d)} * {rule.eps:.3g} = {rule.rtol_for(_T, d):.3g} times its "
            "sigma_max, so it would have rank 0 whatever its values; give "
            + Param("rtol")
            + " or "
            + Param("atol")
            + ", or features "
            f"in a wider dtype ({'float64' if rule.eps < 2**-20 else 'float32 or float64'})"
        )
    if stats is not None and (stats.T, stats.d) != (_T, d):
        raise InputError(
            Param("stats") + f" describe {stats.T} x {stats.d} rows but " + Param("X") + f" is {_T} x {d}: "
            "give the statistics of these rows (set_stats(" + Param("X") + ", rule))"
        )
    if stats is None and need_stats:
        stats = set_stats(X, rule)
    elif stats is not None and stats.gram_brackets is not None and not stats.gram_brackets.attached:
        # statistics sent without their rows (another rank computed them): this process's rows
        b = stats.gram_brackets
        b.attach(_DeferredPass(X, as_matrix(X), stats.exponent, b.error_factor), (_T, d))
    return rule, stats


@with_numerics(threads=1)
def set_stats(X, rule: RankRule | None = None) -> SetStats:
    """Compute the whole set's singular values and row norms, from one streaming pass over its rows.

    The pass (``numerics.stream.scan``) takes O(d^2) memory, on the data divided by an exact power of
    two, and the statistics stay in those units. This is the one place the whole-set statistics are
    derived; the rank rule is applied here and in ``SetStats.ceiling``. The module docstring says
    when the Gram's singular values decide and when a TSQR pass does.

    Args:
        X (torch.Tensor | numpy.ndarray): the T x d matrix (a tensor, an array or a mapped file of rows).
        rule: the rank rule (None: the paper's rule for X's dtype).

    Returns:
        The whole set's :class:`~.results.SetStats` (rank, certified ceilings, in the rescaled units).

    Raises:
        InputError: when ``X`` is not a finite numeric T x d matrix, or ``rule`` is not a RankRule.
    """
    given, X = X, as_matrix(X)
    rule = RankRule.given(rule, X.dtype)
    rows = rows_of(X)
    unit, sc = unit_of(rows, rule)
    rule = unit.rule
    T, d = sc.T, sc.d
    m = min(T, d)
    c = 8.0 * (max(T, d) + d * sc.chunks) * EPS64  # the TSQR pass's error, relative to sigma_max
    if sc.one_row:  # every non-zero row is one row: the singular values are known exactly
        return _rank_one_stats(sc, rule, m)
    lam, usable = checked.eigvalsh_where_usable(torch.from_numpy(sc.gram), torch_first=True)  # checked
    lam_raw = lam.flip(0)[:m]
    delta = _gram_error(sc.gram, T, d)
    a, b, top = _gram_brackets(lam_raw.numpy(), delta, c)
    tol_hi, tol_lo = rule.tol(float(b[0]), T, d), rule.tol(float(a[0]), T, d)
    brackets = None
    # every value on one side of the whole set's tolerance; else (or when no eigenvalue routine gave
    # usable values) the TSQR pass decides
    if bool(usable) and bool(np.all((a > tol_hi) | (b <= tol_lo))):
        s_list = tuple(float(v) for v in lam_raw.clamp_min(0).sqrt())
        rank = int(np.count_nonzero(a > tol_hi))
        sv_error = math.sqrt(delta) * (1 + 4 * EPS64)
        brackets = GramBrackets(a.tolist(), top.tolist(), _DeferredPass(given, X, sc.exponent, c), c, (T, d))
    else:
        s_list, sv_error = _tsqr_values(rows, sc.exponent, m, c)
        rank = int(sum(1 for v in s_list if v > rule.tol(s_list[0], T, d)))
    return SetStats(
        T=T,
        d=d,
        rank=rank,
        unit_singular_values=s_list,
        unit_row_norms=tuple(float(v) for v in sc.small_norms),  # the smallest min(T, d), all a ceiling reads
        zero_rows=sc.zero_rows,
        unit_sv_error=sv_error,
        unit_proj_norms=_proj_norms(sc, m),
        exponent=sc.exponent,
        gram_brackets=brackets,
    )


def _proj_norms(sc, m: int) -> tuple[float, ...]:
    """The norms of the k smallest projections on the scan's direction, k = 1 .. m (``SetStats.unit_proj_norms``)."""
    sq = sc.proj * sc.proj
    smallest = np.sort(np.partition(sq, m - 1)[:m]) if m < sc.T else np.sort(sq)
    return tuple(float(v) for v in np.sqrt(np.cumsum(smallest)))


def _rank_one_stats(sc, rule: RankRule, m: int) -> SetStats:
    """The statistics of a set whose non-zero rows are all one row v (``Scan.one_row``), from what the
    scan read, with no factorisation: ``X = 1 v^T`` on those n rows, so its singular values are
    ``sqrt(n) ||v||`` and m - 1 exact zeros. The first is kept rounded up (``||v||`` from the
    rows' squared norms, each a d-term sum: relative error below (d + 8) eps), the zeros are exact,
    and the error bound is 0: a ceiling counts at least the exact values above its tolerance (safe),
    and no zero is counted by an error bound it does not have."""
    n = sc.T - sc.zero_rows
    norm2 = float(np.max(sc.sqn))  # every non-zero row has this squared norm
    s1 = math.sqrt(n * norm2) * (1 + (sc.d + 8) * EPS64)
    s_list = (s1,) + (0.0,) * (m - 1)
    rank = int(sum(1 for v in s_list if v > rule.tol(s1, sc.T, sc.d)))
    return SetStats(
        T=sc.T,
        d=sc.d,
        rank=rank,
        unit_singular_values=s_list,
        unit_row_norms=tuple(float(v) for v in sc.small_norms),
        zero_rows=sc.zero_rows,
        unit_sv_error=0.0,
        unit_proj_norms=_proj_norms(sc, m),
        exponent=sc.exponent,
    )


def _gram_error(gram: np.ndarray, T: int, d: int) -> float:
    """``delta``: a bound on ``|lam^_i - sigma_i^2|`` for the eigenvalues of the streamed Gram of T
    rescaled rows of length d (``set_stats``): twice ``gamma_T trace(G) + 16 d eps ||G^|| +
    2 d T 2**-1022``, with trace(G) and ||G^|| bounded by the computed trace, enlarged."""
    n = T * EPS64
    trace = float(np.trace(gram)) / (1 - 2 * (n + d * EPS64))  # >= trace(G) and >= ||G^||
    return 2.0 * ((n / (1 - n) + 16 * d * EPS64) * trace + 2.0 * d * T * 2.0**-1022) * (1 + 8 * EPS64)


def _gram_brackets(lam: np.ndarray, delta: float, c: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(a, b, top)`` from the Gram's eigenvalues ``lam`` (descending) and their error ``delta``:
    ``a_i <= t_i <= b_i`` for the TSQR pass's singular values t_i, ``a_i <= fl(t_i + c t_0) <=
    top_i`` for what a ceiling compares, and ``a_i <= sigma_i <= b_i`` (``set_stats``); every
    step rounded outward."""
    up, down = 1 + 4 * EPS64, 1 - 4 * EPS64
    lo = np.sqrt(np.maximum(lam - delta, 0.0)) * down
    hi = np.sqrt(np.maximum(lam + delta, 0.0)) * up
    h0 = float(hi[0]) if len(hi) else 0.0
    w = c * h0 * up  # >= c sigma_0
    a = np.maximum(lo - w, 0.0) * down
    b = (hi + w) * up
    top = (b + c * (h0 + w) * up) * up
    return a, b, top


class _DeferredPass:
    """The TSQR pass a ceiling runs when its tolerance falls inside a Gram bracket (``GramBrackets.refine``),
    over the rows the statistics were taken of, which must still be those rows.

    What is recorded when the statistics are taken, and compared when the pass runs: the rows' shape;
    a tensor's version counter (every in-place change through torch moves it, through any view); for
    a writable NumPy array (NumPy keeps no version), a digest of the bytes the pass reads (one more
    read of the rows, O(T d), made when the statistics are taken and again if the pass runs, which
    most ceilings never need; the pass itself is O(T d^2)); for a file mapped read-only, its size and
    modification time. A change made behind torch's back (through a NumPy view of a tensor, or the
    tensor's own storage) is not seen."""

    def __init__(self, given, X, exponent: int, c: float):
        self.rows = rows_of(X)
        self.exponent, self.c = exponent, c
        self._file = (
            given.path if isinstance(given, MappedArray) else given.filename if isinstance(given, np.memmap) else None
        )
        self._digest = isinstance(given, np.ndarray) and bool(given.flags.writeable)
        self.stamp = self._stamp()

    def _stamp(self) -> tuple:
        data = self.rows.data
        parts: list = [tuple(data.shape)]
        if isinstance(data, torch.Tensor):
            parts.append(data._version)
        if self._file is not None:
            st = os.stat(self._file)
            parts += [st.st_size, st.st_mtime_ns]
        if self._digest:
            parts.append(_digest(data))
        return tuple(parts)

    def __call__(self) -> tuple[tuple[float, ...], float]:
        """The pass's (singular values, error), from ``_tsqr_values``.

        Raises:
            InputError: when the rows changed since the statistics were taken (another shape, or
                written in place): the ceiling would describe other data.
        """
        now = self._stamp()
        if now != self.stamp:
            what = (
                f"its shape is {now[0]}, not {self.stamp[0]}" if now[0] != self.stamp[0] else "it was written in place"
            )
            raise InputError(
                "the rows " + Param("X") + f" the whole set's statistics were taken of changed since ({what}): "
                "a ceiling would describe other data; take the statistics again (set_stats) or leave "
                + Param("X")
                + " unchanged while they are used"
            )
        m = min(self.rows.T, self.rows.d)
        return _tsqr_values(self.rows, self.exponent, m, self.c)


def _digest(data) -> bytes:
    """A digest of the bytes of ``data`` (a CPU tensor or a NumPy array), about 16 MiB of rows at a time."""
    h = hashlib.sha1(usedforsecurity=False)
    width = int(data.shape[1]) * (data.itemsize if isinstance(data, np.ndarray) else data.element_size())
    step = max(1, (16 << 20) // max(1, width))
    for s in range(0, int(data.shape[0]), step):
        part = data[s : s + step]
        if isinstance(part, torch.Tensor):
            part = part.contiguous().view(torch.uint8).numpy()
        h.update(np.ascontiguousarray(part).reshape(-1).view(np.uint8).data)
    return h.digest()


def _tsqr_values(rows, exponent: int, m: int, c: float) -> tuple[tuple[float, ...], float]:
    """The singular values of the TSQR factor R of the rescaled rows (``stream.tsqr``, a second
    pass) and their error bound ``c s_0``.

    It may run at a ceiling, from wherever that is asked for, so it sets nothing beyond the
    calling thread, and only for its own duration (``numerics``: subnormals flushed, one intra-op
    thread; each as it was after): its arithmetic is float64 throughout, which the process-wide
    float32 precision settings (``tf32_off``) do not touch."""
    with numerics(threads=1):
        s = checked.svdvals(torch.from_numpy(tsqr(rows, exponent)))[:m]  # checked (numerics.checked)
    s_list = tuple(float(v) for v in s)
    return s_list, c * (s_list[0] if m else 0.0)


@with_numerics()
def babel_floor(
    X: torch.Tensor, rule: RankRule | None = None, kmax: int | None = None, row_block: int | None = None
) -> Bound:
    """Certify a floor on the Kruskal rank from the Babel function mu1(m) (cumulative coherence).

    Any k rows with mu1(k-1) < 1 have a normalised Gram matrix with smallest eigenvalue at least
    1 - mu1(k-1) (Gershgorin). So sigma_min(X_S)^2 >= min_norm^2 (1 - mu1), and the floor is the
    largest k for which that bound clears the tolerance by more than rounding (``numerics.decision_margin``:
    each k-subset's decision is computed on its own rows, and at a tie it may come out otherwise). k = 1 needs
    only non-zero rows. The data
    are divided by an exact power of two first (``numerics.scale``), and no norm is squared.
    Memory stays O(T d) for any T; the time is O(T^2 d). Under torchrun the ranks divide the row
    blocks and take the maximum of their cumulative coherences, which is exactly one process's.

    Args:
        X: the T x d matrix whose rows are bounded.
        rule: the rank rule (None: the paper's rule for X's dtype).
        kmax: the largest size considered (default min(T, d)).
        row_block: rows of coherences computed at a time (None: what fits in 64 MiB, at most 1024).

    Returns:
        The floor as a :class:`~.results.Bound` (0, with the reason, when none above 0 can be proven or
        T is too large to compute it).

    Raises:
        InputError: when ``X`` is not a finite numeric T x d matrix, ``rule`` is not a RankRule or its tolerance is
            at least 1 at d columns, or ``kmax`` or ``row_block`` is given and is not a whole number of at least 1.
    """
    X = as_matrix(X)
    rule = RankRule.given(rule, X.dtype)
    kmax = None if kmax is None else validate.integer(Param("kmax"), kmax)
    row_block = None if row_block is None else validate.integer(Param("row_block"), row_block)
    T, d = X.shape
    if float(T) * T * (d + BABEL_ENTRY_COST) > BABEL_MAX_WORK:
        return Bound(
            0,
            "babel",
            f"not computed: the Babel function of T = {T} rows takes O(T^2 d) time "
            f"(computed up to T^2 (d + {BABEL_ENTRY_COST}) = {BABEL_MAX_WORK:.0e}); no floor above 0 is claimed",
        )
    rule, _ = fixed_rule(X, rule, need_stats=False)
    unit, _ = unit_of(rows_of(X), rule)
    X64, rule = unit.materialize(), unit.rule  # T x d float64: T is small here
    kmax = min(kmax or min(T, d), T, d)
    norms = row_norms(X64)
    nmin, nmax = float(norms.min()), float(norms.max())
    what = "{every} under the tolerance rule (Babel-function bound; a proof)"
    if nmin == 0 or nmin <= rule.atol_value:
        return Bound(0, "babel", "a zero row exists, so no floor above 0 can be proven")
    mu1 = _babel(X64 / norms[:, None], max(0, kmax - 1), row_block) + 1e-12  # rounding slack
    best = 0
    for k in range(1, kmax + 1):
        mu = float(mu1[k - 1]) if k >= 2 else 0.0
        if mu >= 1:
            break
        smax = nmax * math.sqrt(1 + mu)
        tol = rule.tol(smax, k, d)
        if nmin * math.sqrt(1 - mu) - tol > decision_margin(smax, k, d):  # clear of a tie, each k-subset computed
            best = k
        else:
            break
    return Bound(best, "babel", what.format(every=every_rows_independent(best)))


def _babel(Xn: torch.Tensor, m: int, row_block: int | None) -> torch.Tensor:
    """mu1(0..m): the largest sum of the j largest |coherences| of one unit row with the others."""
    T = Xn.shape[0]
    mu1 = torch.zeros(m + 1, dtype=torch.float64, device=Xn.device)
    if m == 0:
        return mu1
    row_block = row_block or max(1, min(1024, (64 << 20) // (8 * T)))
    starts = list(range(0, T, row_block))
    shard = distributed.lockstep()
    starts = starts[shard.rank :: shard.world_size]
    for s in starts:
        C = (Xn[s : s + row_block] @ Xn.T).abs_()
        r = torch.arange(s, min(s + row_block, T), device=Xn.device)
        C[torch.arange(len(r)), r] = 0.0
        top = C.topk(min(m, T - 1), dim=1).values
        del C
        cums = torch.cumsum(top, dim=1).amax(0)
        mu1[1 : cums.numel() + 1] = torch.maximum(mu1[1 : cums.numel() + 1], cums)
    # each rank took every N-th row block: the largest sums over all of them (one process: its own)
    mu1 = torch.stack([p.to(mu1.device) for p in shard.all_gather_tensors(mu1.cpu())]).amax(0)
    return mu1


def exact_kruskal_rank(X, rule: RankRule | None = None, max_subsets: int = 2_000_000) -> int:
    """Compute the Kruskal rank by enumerating every subset (small cases only; it tests the bounds).

    Args:
        X (torch.Tensor | numpy.ndarray): the T x d matrix whose rows are counted.
        rule: the rank rule (None: the rule for X's dtype).
        max_subsets: the most subsets one size k may have.

    Returns:
        The largest k such that every k-subset of the rows has rank k under ``rule``; 0 when a row is zero.

    Raises:
        InputError: when ``X`` is not a finite numeric T x d matrix, ``rule`` is not a RankRule,
            ``max_subsets`` is not a whole number of at least 1, a size k still to check has more than
            ``max_subsets`` subsets, or the rule could count no vector as independent (``fixed_rule``).
    """
    X = as_matrix(X)
    max_subsets = validate.integer(Param("max_subsets"), max_subsets)
    rule, _ = fixed_rule(X, RankRule.given(rule, X.dtype), need_stats=False)
    T, d = X.shape
    X64 = X.to(torch.float64)
    best = 0
    for k in range(1, min(T, d) + 1):
        if math.comb(T, k) > max_subsets:
            raise InputError(f"too many subsets to enumerate at k = {k} (C({T}, {k}) > {max_subsets})")
        combos = torch.tensor(list(itertools.combinations(range(T), k)), dtype=torch.long)
        ok = True
        for part in combos.split(4096):
            rank, *_ = svd_rank(X64[part], rule)
            if bool((rank < k).any()):
                ok = False
                break
        if not ok:
            break
        best = k
    return best
