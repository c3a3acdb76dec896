"""The sweep: the satisfied fraction for every size k at once, from one set of nested draws.

Each draw is a random ordering of K rows; its leading k rows are that draw's k-subset for every
k, and independence of leading blocks is monotone in k, so one number per draw, k* (the largest
independent leading block), answers every size. The fraction P(k* >= k) for each k is an
**estimate**, as is the largest k whose fraction reaches the threshold. What is proven is kept
apart: the ceiling (a dependent subset found, ``shrink_witness``, or the rank of the whole set)
and the floor (``babel_floor``, or T for T <= d rows independent as a whole set:
``witness.independent_set_floor``). Every k* is decided exactly (``numerics``: each leading-block
decision equals ``torch.linalg.matrix_rank`` on the same float64 rows), on the CPU with
``lapack.SweepKernel``, elsewhere with the batched certificates below, on the data divided by an
exact power of two (``numerics.scale``), so the data's scale never changes a fraction. A draw
whose k* cannot be computed (a leading block's decision that no LAPACK route can give) is left
out of the fractions and counted as undecided (``Sweep.undecided_draws``).
"""

from __future__ import annotations

import torch

from .. import phases, validate
from ..defaults import DEFAULT_SAMPLES, DEFAULT_SEED
from ..distributed import shared
from ..errors import Param
from ..keywords import request_of
from ..numerics import (
    TINY_GRAM,
    RankRule,
    cholesky_margins,
    decide_prefix_full_rank,
    lambda_max_bounds,
    lapack,
    tf32_is_off,
    with_numerics,
)
from ..numerics.checked import NumericalFailure
from ..numerics.stream import unit_of
from ..runtime import checked_seed, device_name
from . import witness as witnesses
from .bounds import babel_floor, fixed_rule
from .fixed import draws_gram, joined, shrink_witness
from .results import Bound, SetStats, Sweep, Witness, checked_stats, clopper_pearson
from .sampling import Draws, Gram, Progress, Sampling, as_matrix, checked_progress, decided_in_order, rows_of

__all__ = ["draw_critical_sizes", "kruskal_sweep"]


def _prefix_shifts(G: torch.Tensor, p: torch.Tensor, d: int, rule: RankRule, delta: float):
    """For every leading k x k block of each Gram matrix (``(B, K)`` tensors, column k - 1):

    * ``s_hi``: a shift at or above the squared tolerance of every leading block up to k, plus
      the rounding margin of a completed factorisation (``cholesky_margins``);
    * ``t_lo``: at or below the squared tolerance of every leading block from k on;
    * ``m_def``: the rounding margin of a failed factorisation of a block up to k.

    Tolerances grow with k (lambda_max of leading blocks interlaces upwards, so does rtol), so
    bounds on lambda_max(G_k) give both: below, the largest diagonal entry, the squared
    projections of the rows on the top direction of the whole set (``p``) and the prefix
    Rayleigh quotients of a power-iteration vector; above, the prefix Frobenius norms and an
    upper bound on lambda_max of the whole draw.
    """
    _B, K, _ = G.shape
    diag = torch.diagonal(G, dim1=-2, dim2=-1)
    maxdiag = torch.cummax(diag, dim=-1).values
    trace = torch.cumsum(diag, dim=-1)
    low = torch.tril(G, -1)
    v = torch.where(p.abs().sum(-1, keepdim=True) > 0, p, torch.ones_like(p))[..., None]
    for _ in range(8):
        v = G @ v
        v = v / v.norm(dim=-2, keepdim=True).clamp_min(1e-300)
    w = (low @ v).squeeze(-1)
    v = v.squeeze(-1)
    rayleigh = torch.cumsum(v * (2 * w + diag * v), dim=-1) / torch.cumsum(v * v, dim=-1).clamp_min(1e-300)
    lam_lo = torch.maximum(torch.maximum(maxdiag, torch.cumsum(p * p, dim=-1)), rayleigh * (1 - 1e-12))
    fro = torch.cumsum(2 * torch.linalg.vector_norm(low, dim=-1) ** 2 + diag * diag, dim=-1).sqrt()
    del low, w
    _, top = lambda_max_bounds(G)
    lam_hi = torch.maximum(torch.minimum(fro, top[:, None]), lam_lo)
    ks = torch.arange(1, K + 1, device=G.device, dtype=G.dtype)
    rt = torch.tensor([rule.rtol_for(k, d) for k in range(1, K + 1)], device=G.device, dtype=G.dtype)
    a = rule.atol_value
    m_full, m_def = cholesky_margins(ks, d, trace, maxdiag)
    s_hi = torch.clamp(rt * lam_hi.sqrt(), min=a) ** 2 * (1 + delta) + m_full
    t_lo = torch.clamp(rt * lam_lo.sqrt(), min=a) ** 2 * (1 - delta)
    return s_hi, t_lo, m_def


def _first_failure(G: torch.Tensor, idx: torch.Tensor, M: int, shift: torch.Tensor) -> torch.Tensor:
    """One batched Cholesky of ``G[idx, :M, :M] - shift I``: 0 where it completes, else the order
    of the first leading block that is not positive definite."""
    A = G[idx, :M, :M]
    A.diagonal(dim1=-2, dim2=-1).sub_(shift[:, None])
    return torch.linalg.cholesky_ex(A)[1].to(torch.long)


def _critical_sizes(
    G: torch.Tensor, p: torch.Tensor, rows_fn, d: int, rule: RankRule, rounds: int = 4, delta: float = 1e-6
):
    """For each draw, k* = the largest k whose leading k rows are independent (0 if none; -1 when a
    decision it needs cannot be computed), and how many sizes needed an exact decision. The batched
    form of ``lapack.SweepKernel``.

    Leading blocks are nested and independence is monotone in k, so one batched factorisation
    per shift tests every k of every draw at once (a Cholesky of ``G - s I`` fails at the first
    leading block with an eigenvalue at or below ``s``): a round factorises the open draws once
    at ``s_hi`` of the top of their open range (every block before the failure is independent)
    and once at ``t_lo`` of its bottom less the margin (the block where it fails is dependent).
    Rounds go on while they narrow the ranges; what they leave open is bisected with exact
    decisions (``decide_prefix_full_rank``). Draws whose first row is below ``TINY_GRAM`` go
    straight to the bisection.
    """
    B, K, _ = G.shape
    s_hi, t_lo, m_def = _prefix_shifts(G, p, d, rule, delta)
    lo = torch.zeros(B, dtype=torch.long, device=G.device)  # every k <= lo is independent
    hi = torch.full((B,), K, dtype=torch.long, device=G.device)  # every k > hi is dependent
    trusted = G[:, 0, 0] >= TINY_GRAM
    for _ in range(rounds):
        idx = ((lo < hi) & trusted).nonzero().squeeze(-1)
        if idx.numel() == 0:
            break
        before = hi[idx] - lo[idx]
        j = hi[idx]
        info = _first_failure(G, idx, int(j.max()), s_hi[idx, j - 1])
        lo[idx] = torch.maximum(lo[idx], torch.where(info == 0, j, torch.minimum(j, info - 1)))
        low, h = lo[idx], hi[idx]
        shift = t_lo[idx, low.clamp(max=K - 1)] - m_def[idx, h - 1]
        go = (low < h) & (shift > 0)
        sel, low, h = idx[go], low[go], h[go]
        if sel.numel():
            info = _first_failure(G, sel, int(h.max()), shift[go])
            hi[sel] = torch.where((info > low) & (info <= h), info - 1, h)
        if not bool((hi[idx] - lo[idx] < before).any()):
            break
    rechecks = torch.zeros((), dtype=torch.long, device=G.device)  # counted where the decisions are: read once
    while True:
        open_ = (lo < hi).nonzero().squeeze(-1)
        if open_.numel() == 0:
            break
        mid = (lo[open_] + hi[open_] + 1) // 2
        M = int(mid.max())
        dec = decide_prefix_full_rank(
            G[open_, :M, :M], mid, lambda b, m, o=open_: rows_fn(o[b : b + 1], m)[0], d, rule, what="the draw"
        )
        rechecks += dec.exact.sum()
        lo[open_] = torch.where(dec.full, mid, lo[open_])
        hi[open_] = torch.where(dec.full, hi[open_], mid - 1)
        left = open_[dec.left_open()]  # a block no LAPACK route decides: the draw's k* is unknown (-1)
        lo[left], hi[left] = -1, -1
    return lo, int(rechecks)


def _critical_sizes_of_draws(gram: Gram, K: int, samples: int, seed: int, rule: RankRule, progress: Progress | None):
    """Yield ``(draws, kstar, rechecks)`` for consecutive groups of whole blocks of the nested
    draws: the draws (orderings of K rows), each one's k* and how many sizes needed an exact
    decision. On the CPU LAPACK kernels (``lapack.SweepKernel``) a draw at a time, one worker
    thread per core; on the batched kernels (a GPU, or the CPU under ``MHAAUDIT_KERNELS=torch``)
    as many blocks at once as ``DEVICE_BATCH_BYTES`` allows, TF32 off."""
    d = gram.d
    entries = gram.cpu_entries
    kernel = (
        lapack.SweepKernel(entries, gram.proj, lambda s: gram.set_rows(torch.from_numpy(s)), K, d, rule)
        if entries is not None
        else None
    )
    workers = torch.get_num_threads() if kernel is not None else 1
    per_call = gram.blocks_per_call(K, mats=5) if kernel is None else None

    def block(idx: torch.Tensor):
        if kernel is not None:  # one draw at a time, LAPACK through ctypes
            kstar, rc = kernel.draws(idx.numpy())
            return idx, torch.from_numpy(kstar), rc
        assert tf32_is_off(), "a rank decision never runs in TF32"
        kstar, rc = _critical_sizes(gram.sub(idx), gram.proj_t[idx], lambda j, m: gram.set_rows(idx[j, :m]), d, rule)
        return idx, kstar, rc

    draws = Draws(gram.T, K, samples, seed, False, gram.device)
    for idx, kstar, rc in decided_in_order(block, draws, workers, per_call, kernel is not None, progress):
        yield idx, kstar.cpu(), rc


@with_numerics()
def draw_critical_sizes(
    X,
    K: int,
    *,
    samples: int = DEFAULT_SAMPLES,
    seed: int = DEFAULT_SEED,
    rule: RankRule | None = None,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The nested draws of ``kruskal_sweep`` up to size K and each one's k*: ``(orderings (N, K), kstar (N,))``.

    Raises:
        InputError: as :func:`~.fixed.draw_decisions`, for ``K`` in place of ``k``.
        ArithmeticError: (``numerics.checked.NumericalFailure``) when a draw's k* cannot be computed (no LAPACK
            route gives usable singular values for a decision it needs).
    """
    seed = checked_seed(seed)
    gram, rule, K, samples = draws_gram(X, rule, device, (Param("K"), K), samples)

    def decided():
        for idx, kstar, _ in _critical_sizes_of_draws(gram, K, samples, seed, rule, None):
            if bool((kstar < 0).any()):
                raise NumericalFailure(f"singular values of a draw of {K} x {gram.d}", ("gesdd", "gesvd", "gejsv"))
            yield idx, kstar

    return joined(decided())


def _counted(gram: Gram, K: int, samples: int, seed: int, rule: RankRule, progress: Progress | None):
    """What the nested draws showed: how many draws have each k* (``counts[k]``, k = 0 .. K + 1), the
    exact decisions they needed, the smallest dependent prefix drawn as (size, indices), or None, and
    how many draws' k* could not be computed (left out of the counts)."""
    counts, rechecks, smallest, undecided = torch.zeros(K + 2, dtype=torch.long), 0, None, 0
    for idx, kstar, rc in _critical_sizes_of_draws(gram, K, samples, seed, rule, progress):
        rechecks += rc
        known = kstar >= 0
        undecided += int((~known).sum())
        idx, kstar = idx[known.to(idx.device)], kstar[known]
        if kstar.numel() == 0:
            continue
        counts += torch.bincount(kstar, minlength=K + 2)[: K + 2]
        small = int(kstar.min())
        if small < K and (smallest is None or small + 1 < smallest[0]):
            smallest = (small + 1, idx[int(kstar.argmin()), : small + 1].cpu().tolist())
    return counts, rechecks, smallest, undecided


def _fractions(counts: torch.Tensor, K: int, K_all: int, samples: int):
    """fraction(k) = P(k* >= k) with its interval, for k = 1 .. K_all (0 above K: certified)."""
    ge = torch.flip(torch.cumsum(torch.flip(counts, [0]), 0), [0])  # ge[k] = #draws with k* >= k
    fr, lo_l, hi_l = [], [], []
    for k in range(1, K_all + 1):
        s = int(ge[k]) if k <= K else 0
        fr.append(s / samples if K and samples else 0.0)
        lo, hi = (clopper_pearson(s, samples) if samples else (0.0, 1.0)) if k <= K else (0.0, 0.0)
        lo_l.append(lo)
        hi_l.append(hi)
    return tuple(fr), tuple(lo_l), tuple(hi_l)


def _ceiling(witness: Witness | None, K: int, K_all: int, T: int, d: int, set_rank: int) -> Bound:
    """The smallest certified ceiling: a dependent subset found, the set's rank, or min(T, d). ``K``: the
    largest size the whole set's rank ceiling allows up to ``K_all``, the largest size swept; ``set_rank``: the
    whole set's rank ceiling at size K + 1 (``SetStats.ceiling``). Below ``K_all`` it stopped K, so no K + 1
    rows are independent; at ``K_all`` (a ``kmax`` below min(T, d)) nothing is known of the larger sizes."""
    candidates = []
    if witness is not None:
        n = len(witness.indices)
        candidates.append(
            Bound(
                n - 1, "witness", f"a dependent {n}-subset was found, so the Kruskal rank is at most {n - 1} (a proof)"
            )
        )
    if K < K_all:
        candidates.append(
            Bound(
                K,
                "set-rank",
                f"the whole set has numerical rank {set_rank} at the smallest tolerance "
                f"a {K + 1}-subset can have under the rule (its rank ceiling there), and "
                f"above every larger size's ceiling too; no subset of more than {K} rows "
                "can be independent under the rule (a proof)",
            )
        )
    else:
        candidates.append(
            Bound(
                min(T, d), "dimension", f"the Kruskal rank of {T} vectors in R^{d} is at most min(T, d) = {min(T, d)}"
            )
        )
    return min(candidates, key=lambda b: b.value)


@shared
@with_numerics()
def kruskal_sweep(
    X,
    *,
    sampling: Sampling | None = None,
    kmax: int | None = None,
    stats: SetStats | None = None,
    progress: Progress | None = None,
    samples: int | None = None,
    threshold: float | None = None,
    seed: int | None = None,
    rule: RankRule | None = None,
    device: torch.device | str | None = None,
) -> Sweep:
    """Estimate the satisfied fraction at every k = 1 .. min(T, d) from one set of nested draws.

    Each draw is a random ordering of K rows; its leading k rows are that draw's k-subset for every k.
    So one factorisation per draw answers all k. Sizes above the whole set's rank ceiling are
    certified to fail and not sampled. A sweep makes every draw, whatever ``stop_when_decided`` says.
    See :mod:`mhaaudit.request` for a keyword given beside ``sampling``.

    Args:
        X (torch.Tensor | numpy.ndarray): the T x d matrix whose rows are tested.
        sampling: the draws as one :class:`~.sampling.Sampling` (None: built from the keywords).
        kmax: the largest size swept (default min(T, d)).
        stats: the whole set's :class:`~.results.SetStats` under the rule (None: computed here).
        progress: called with the number of draws decided as they are.
        samples: the number of draws (default 5000).
        threshold: the fraction a size's estimate must reach (default 0.99).
        seed: the draws' seed (default 0).
        rule: the rank rule (None: the paper's rule for the data's dtype).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (default auto).

    Returns:
        The :class:`~.results.Sweep`: the fraction and its interval at every size, the estimate, and the
        certified floor and ceiling with their evidence.

    Raises:
        InputError: when ``X`` is not a finite numeric T x d matrix, ``samples``, ``threshold``, ``seed`` or
            ``kmax`` is out of range, ``device`` is unknown, ``rule``'s tolerance is at least 1 at d columns,
            ``stats`` or ``progress`` is of another type, or a keyword disagrees with ``sampling``.
    """
    keywords = dict(samples=samples, threshold=threshold, seed=seed, rule=rule, device=device)
    X = as_matrix(X)
    run = request_of(Sampling, sampling, "sampling", keywords)
    progress, stats = checked_progress(progress), checked_stats(stats)
    kmax = None if kmax is None else validate.integer(Param("kmax"), kmax)
    samples, threshold, seed, dev = run.samples, run.threshold, run.seed, run.device
    rule = run.rule or RankRule.for_dtype(X.dtype)
    T, d = X.shape
    K_all = min(T, d) if kmax is None else max(1, min(T, d, kmax))
    rule, stats = fixed_rule(X, rule, stats)  # the per-matrix rule, and the set's ceilings
    K = max((k for k in range(1, K_all + 1) if stats.ceiling(k, rule) >= k), default=0)
    counts, rechecks, smallest, gram, undecided = torch.zeros(K + 2, dtype=torch.long), 0, None, None, 0
    if K > 0:
        unit, _ = unit_of(rows_of(X), rule)  # rescaled by an exact power of two, gathered per draw
        gram = Gram(unit, dev)
        counts, rechecks, smallest, undecided = _counted(gram, K, samples, seed, unit.rule, progress)
    fractions, ci_low, ci_high = _fractions(counts, K, K_all, samples - undecided)
    raw_estimate = max((k for k, f in enumerate(fractions, 1) if f >= threshold), default=0)
    with phases.phase("witness"):
        try:
            witness = shrink_witness(X, smallest[1], rule) if smallest else None
        except NumericalFailure:  # the dependent prefix cannot be proven: not a witness
            witness = None
        if witness is None and K < K_all:  # every K + 1 rows are dependent: show how
            unit, sc = unit_of(rows_of(X), rule)
            witness = witnesses.set_witness(unit, K + 1, sc.first_zero, hint=stats.rank)
    ceiling = _ceiling(witness, K, K_all, T, d, stats.ceiling(K + 1, rule))
    with phases.phase("whole-set statistics"):
        floor = babel_floor(X, rule, kmax=min(K_all, ceiling.value) or 1)
        if K == T and smallest is None and not undecided:  # T <= d rows, no draw dependent: perhaps all independent
            whole = witnesses.independent_set_floor(unit)
            floor = whole if whole is not None and whole.value > floor.value else floor
    return Sweep(
        T=T,
        d=d,
        samples=samples - undecided,
        threshold=threshold,
        seed=seed,
        rule=rule,
        device=device_name(dev),
        ks=tuple(range(1, K_all + 1)),
        fractions=fractions,
        ci_low=ci_low,
        ci_high=ci_high,
        # an estimate never exceeds what is proven, nor falls below it (when no draw could be decided)
        estimate=min(max(raw_estimate, floor.value), ceiling.value),
        ceiling=ceiling,
        floor=floor,
        witness=witness,
        exact_rechecks=rechecks,
        kmax_sampled=K,
        raw_estimate=raw_estimate,
        gram=gram.route if gram else None,
        undecided_draws=undecided,
    )
