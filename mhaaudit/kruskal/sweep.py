"""The sweep: the satisfied fraction for every size k at once, from one set of nested draws.

Each draw is a random ordering of K rows; its leading k rows are that draw's k-subset for every
k, and independence of leading blocks is monotone in k, so one number per draw, k* (the largest
independent leading block), answers every size. The fraction P(k* >= k) for each k is an
**estimate**, as is the largest k whose fraction reaches the threshold. What is proven is kept
apart: the ceiling (a dependent subset found, ``shrink_witness``, or the rank of the whole set)
and the floor (``babel_floor``). Every k* is decided exactly (``numerics``: each leading-block
decision equals ``torch.linalg.matrix_rank`` on the same float64 rows), on the CPU with
``lapack.SweepKernel``, elsewhere with the batched certificates below, on the data divided by an
exact power of two (``numerics.scale``), so the data's scale never changes a fraction.
Under torchrun the draws are divided among the ranks (``sampling.blocks_in_order``) and every rank
gets the single-process result; rank 0's call brings the others in (``distributed.shared``).
"""

from __future__ import annotations

import contextlib

import torch

from .. import validate
from ..distributed import shared
from ..numerics import EPS64, TINY_GRAM, RankRule, cholesky_margins, decide_prefix_full_rank, lapack, scaled, with_numerics
from ..settings import DEFAULT_SAMPLES, DEFAULT_THRESHOLD, device_name, resolve_device
from .bounds import babel_floor, set_stats
from .fixed import shrink_witness
from .results import Bound, SetStats, Sweep, Witness, clopper_pearson
from .sampling import Gram, Progress, as_matrix, blocks_in_order, chunk_size

__all__ = ["kruskal_sweep"]


def _prefix_bounds(G: torch.Tensor, d: int, rule: RankRule):
    """Certified full/deficient decisions for every leading k x k block of each Gram matrix.

    From one Cholesky factor L of G + s0 I and its inverse: for the leading block of size k,
    1 / trace((G_k + s0)^-1) <= lambda_min(G_k) + s0 <= 1 / max_j (G_k + s0)^-1_jj, where both
    quantities are cumulative sums over rows of L^-1 (the inverse of a leading block of a
    triangular matrix is the leading block of its inverse). lambda_max(G_k) is bracketed by a
    prefix Rayleigh quotient and the Frobenius norm. Blocks below ``TINY_GRAM`` are left
    undecided. Returns two (B, K) bool tensors.
    """
    B, K, _ = G.shape
    dev = G.device
    diag = torch.diagonal(G, dim1=-2, dim2=-1)
    trace = diag.sum(-1).clamp_min(1e-300)
    s0 = 16.0 * K * EPS64 * trace
    eye = torch.eye(K, dtype=G.dtype, device=dev)
    L, info = torch.linalg.cholesky_ex(G + s0[:, None, None] * eye)
    for _ in range(4):
        bad = info > 0
        if not bool(bad.any()):
            break
        s0 = torch.where(bad, s0 * 1e3, s0)
        L2, info2 = torch.linalg.cholesky_ex(G[bad] + s0[bad, None, None] * eye)
        L[bad] = L2
        info[bad] = info2
    ok = info == 0
    Linv = torch.linalg.solve_triangular(L, eye.expand(B, K, K), upper=False)
    sq = Linv * Linv
    tr_inv = torch.cumsum(sq.sum(-1), dim=-1)
    maxdiag_inv = torch.cumsum(sq, dim=-2).amax(-1)
    del sq, Linv, L
    slack = 1e-4
    lam_min_lo = (1 - slack) / tr_inv - s0[:, None]
    lam_min_hi = (1 + slack) / maxdiag_inv - s0[:, None]
    # lambda_max of each leading block
    v = torch.ones(B, K, 1, dtype=G.dtype, device=dev)
    for _ in range(8):
        v = G @ v
        v = v / v.norm(dim=-2, keepdim=True).clamp_min(1e-300)
    v = v.squeeze(-1)
    w = (torch.tril(G, -1) @ v.unsqueeze(-1)).squeeze(-1)
    num = torch.cumsum(v * (2 * w + diag * v), dim=-1)
    den = torch.cumsum(v * v, dim=-1).clamp_min(1e-300)
    maxdiag = torch.cummax(diag, dim=-1).values
    lam_lo = torch.maximum(maxdiag, num / den)
    fro2 = torch.cumsum(2 * (torch.tril(G, -1) ** 2).sum(-1) + diag**2, dim=-1)
    lam_hi = torch.maximum(fro2.sqrt(), lam_lo)
    ks = torch.arange(1, K + 1, device=dev, dtype=G.dtype)
    rt = torch.tensor([rule.rtol_for(int(k), d) for k in range(1, K + 1)], device=dev, dtype=G.dtype)
    a = rule.atol_value
    tau_hi = torch.clamp(rt * lam_hi.sqrt(), min=a) ** 2
    tau_lo = torch.clamp(rt * lam_lo.sqrt(), min=a) ** 2
    # rounding in forming G and in the factorisation (Cholesky backward error for the leading
    # block, cholesky_margins) on top of a generous allowance for the triangular inverse
    backward, _ = cholesky_margins(ks, d, torch.cumsum(diag, dim=-1), 0.0)
    margin = 8.0 * (ks + d) * ks.sqrt() * EPS64 * lam_hi + backward
    trusted = ok[:, None] & (maxdiag >= TINY_GRAM)
    sure_full = (lam_min_lo > tau_hi * (1 + 1e-3) + margin) & trusted
    sure_def = (lam_min_hi < tau_lo * (1 - 1e-3) - margin) & trusted & (tau_lo * (1 - 1e-3) - margin > 0)
    return sure_full, sure_def


def _critical_sizes(G: torch.Tensor, rows_fn, d: int, rule: RankRule):
    """For each draw, k* = the largest k whose leading k rows are independent (0 if none).

    Independence of leading blocks is monotone in k (smallest eigenvalues interlace, the
    tolerance grows), so certified bounds bracket k* and a bisection with exact decisions
    settles the rest.
    """
    B, K, _ = G.shape
    sure_full, sure_def = _prefix_bounds(G, d, rule)
    ar = torch.arange(1, K + 1, device=G.device)
    lo = torch.where(sure_full, ar, torch.zeros_like(ar)).amax(-1)  # known independent up to lo
    hi_k = torch.where(sure_def, ar, torch.full_like(ar, K + 1)).amin(-1)  # known dependent from hi_k
    lo = torch.minimum(lo, hi_k - 1)
    hi = hi_k - 1  # k* in [lo, hi]
    rechecks = 0
    while True:
        open_ = (lo < hi).nonzero().squeeze(-1)
        if open_.numel() == 0:
            break
        mid = (lo[open_] + hi[open_] + 1) // 2
        M = int(mid.max())
        dec = decide_prefix_full_rank(G[open_, :M, :M], mid, lambda b, m: rows_fn(open_[b : b + 1], m)[0], d, rule)
        rechecks += int(dec.exact.sum())
        lo[open_] = torch.where(dec.full, mid, lo[open_])
        hi[open_] = torch.where(dec.full, hi[open_], mid - 1)
    return lo, rechecks


def _critical_sizes_of_draws(gram: Gram, K: int, samples: int, seed: int, rule: RankRule, dev: torch.device,
                             progress: Progress | None):
    """k* of every nested draw: ``(counts, rechecks, smallest)`` with ``counts[j]`` the number of
    draws with k* = j and ``smallest`` the ``(size, indices)`` of the smallest dependent leading
    block seen (None if every draw was independent up to K)."""
    d = gram.X.shape[1]
    counts = torch.zeros(K + 2, dtype=torch.long)
    rechecks, smallest = 0, None
    chunk = chunk_size(K, mats=6)
    entries = gram.cpu_entries
    kernel = (lapack.SweepKernel(entries, gram.proj, lambda s: gram.rows(torch.from_numpy(s)), K, d, rule)
              if entries is not None else None)
    workers = torch.get_num_threads() if kernel is not None else 1

    def block(idx: torch.Tensor):
        if kernel is not None:  # one draw at a time, LAPACK through ctypes
            kstar, rc = kernel.draws(idx.numpy())
            return idx, torch.from_numpy(kstar), rc
        idx = idx.to(dev)
        parts = [_critical_sizes(gram.sub(sub), lambda j, m, sub=sub: gram.rows(sub[j, :m]), d, rule)
                 for sub in idx.split(chunk)]
        return idx, torch.cat([p[0].cpu() for p in parts]), sum(p[1] for p in parts)

    with lapack.blas_single_thread() if kernel is not None else contextlib.nullcontext():
        for idx, kstar, rc in blocks_in_order(block, gram.T, K, samples, seed, False, workers, gram.X.device):
            rechecks += rc
            counts += torch.bincount(kstar, minlength=K + 2)[: K + 2]
            small = int(kstar.min())
            if small < K and (smallest is None or small + 1 < smallest[0]):
                j = int(kstar.argmin())
                smallest = (small + 1, idx[j, : small + 1].cpu().tolist())
            if progress:
                progress(int(idx.shape[0]))
    return counts, rechecks, smallest


def _fractions(counts: torch.Tensor, K: int, K_all: int, samples: int):
    """fraction(k) = P(k* >= k) with its interval, for k = 1 .. K_all (0 above K: certified)."""
    ge = torch.flip(torch.cumsum(torch.flip(counts, [0]), 0), [0])  # ge[k] = #draws with k* >= k
    fr, lo_l, hi_l = [], [], []
    for k in range(1, K_all + 1):
        s = int(ge[k]) if k <= K else 0
        fr.append(s / samples if K else 0.0)
        lo, hi = clopper_pearson(s, samples) if k <= K else (0.0, 0.0)
        lo_l.append(lo)
        hi_l.append(hi)
    return tuple(fr), tuple(lo_l), tuple(hi_l)


def _ceiling(witness: Witness | None, K: int, T: int, d: int, set_rank: int) -> Bound:
    """The smallest certified ceiling: a dependent subset found, the set's rank, or min(T, d)."""
    candidates = []
    if witness is not None:
        n = len(witness.indices)
        candidates.append(Bound(n - 1, "witness", f"a dependent {n}-subset was found, so the Kruskal rank is at most {n - 1} (a proof)"))
    if K < min(T, d):
        candidates.append(Bound(K, "set-rank", f"the whole set has numerical rank {set_rank}; no subset of more than {K} "
                                               "rows can be independent under the rule (a proof)"))
    else:
        candidates.append(Bound(min(T, d), "dimension", f"the Kruskal rank of {T} vectors in R^{d} is at most min(T, d) = {min(T, d)}"))
    return min(candidates, key=lambda b: b.value)


@shared
@with_numerics()
def kruskal_sweep(
    X,
    *,
    samples: int = DEFAULT_SAMPLES,
    threshold: float = DEFAULT_THRESHOLD,
    seed: int = 0,
    rule: RankRule | None = None,
    device: torch.device | str = "cpu",
    kmax: int | None = None,
    stats: SetStats | None = None,
    progress: Progress | None = None,
) -> Sweep:
    """The satisfied fraction for every k = 1 .. min(T, d) from one set of nested draws.

    Each draw is a random ordering of K rows; its leading k rows are the k-subset of that draw
    for every k, so one factorisation per draw answers all k. Sizes above the rank ceiling of
    the whole set are certified to fail and not sampled.
    """
    X = as_matrix(X)
    samples = validate.integer("--samples", samples)
    threshold = validate.fraction("--threshold", threshold)
    rule = rule or RankRule.for_dtype(X.dtype)
    dev = resolve_device(device)
    T, d = X.shape
    K_all = min(T, d) if kmax is None else max(1, min(T, d, kmax))
    stats = stats or set_stats(X, rule)
    K = max((k for k in range(1, K_all + 1) if stats.ceiling(k, rule) >= k), default=0)
    counts, rechecks, smallest, gram = torch.zeros(K + 2, dtype=torch.long), 0, None, None
    if K > 0:
        unit = scaled(X, rule)  # nothing squared overflows or underflows, whatever the data's scale
        gram = Gram(unit.X, dev)
        counts, rechecks, smallest = _critical_sizes_of_draws(gram, K, samples, seed, unit.rule, dev, progress)
    fractions, ci_low, ci_high = _fractions(counts, K, K_all, samples)
    raw_estimate = max((k for k, f in enumerate(fractions, 1) if f >= threshold), default=0)
    witness = shrink_witness(X, smallest[1], rule) if smallest else None
    ceiling = _ceiling(witness, K, T, d, stats.rank)
    return Sweep(
        T=T, d=d, samples=samples, threshold=threshold, seed=seed, rule=rule, device=device_name(dev),
        ks=tuple(range(1, K_all + 1)), fractions=fractions, ci_low=ci_low, ci_high=ci_high,
        estimate=min(raw_estimate, ceiling.value),  # an estimate never exceeds what is proven
        ceiling=ceiling, floor=babel_floor(X, rule, kmax=min(K_all, ceiling.value) or 1), witness=witness,
        exact_rechecks=rechecks, kmax_sampled=K, raw_estimate=raw_estimate, gram=gram.route if gram else None,
    )
