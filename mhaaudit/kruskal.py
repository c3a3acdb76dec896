"""Kruskal-rank evidence for a set of T vectors in R^d (the rows of a T x d matrix).

The Kruskal rank is the largest k such that *every* k rows are linearly independent. It is
NP-hard to compute, so this module produces evidence of three kinds, each labelled with what
it proves:

* an **estimate**: Monte-Carlo draws of k distinct rows, the fraction of full-rank draws with a
  95% Clopper-Pearson interval (``subset_test``), or that fraction for every k at once
  (``kruskal_sweep``);
* a certified **ceiling**: a dependent subset that was found (its indices and singular values
  are kept as the witness; Kruskal rank <= its size - 1), or the numerical rank of the whole
  set, which no subset can exceed;
* a certified **floor**: the Babel-function (cumulative coherence) bound, which proves every
  subset up to a size is independent under the tolerance rule.

All rank decisions use one ``RankRule`` and equal ``torch.linalg.matrix_rank`` on the same
float64 rows with the same tolerance (see ``mhaaudit.rank``).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from .errors import InputError
from . import cpu
from .rank import (
    EPS64,
    Decision,
    RankRule,
    _rounding_margin,
    cholesky_margins,
    decide_full_rank,
    decide_prefix_full_rank,
    gram_rank,
    svd_rank,
    with_numerics,
)

DEFAULT_SAMPLES = 5000
DEFAULT_THRESHOLD = 0.99
DRAW_BLOCK = 64  # draws come in fixed blocks, each with its own seeded generator
FULL_GRAM_MAX_T = 6000

Progress = Callable[[int], None]


# --------------------------------------------------------------------------- statistics


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Exact two-sided binomial confidence interval."""
    if trials <= 0:
        return (0.0, 1.0)
    from scipy.special import betaincinv  # the beta quantile; scipy.stats takes ~1 s to import

    a = (1 - level) / 2
    lo = 0.0 if successes == 0 else float(betaincinv(successes, trials - successes + 1, a))
    hi = 1.0 if successes == trials else float(betaincinv(successes + 1, trials - successes, 1 - a))
    return lo, hi


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Witness:
    """A subset of rows proven dependent under the rule: Kruskal rank <= len(indices) - 1."""

    indices: tuple[int, ...]
    singular_values: tuple[float, ...]
    tol: float
    rank: int

    def as_dict(self) -> dict:
        return {"indices": list(self.indices), "singular_values": list(self.singular_values), "tol": self.tol, "rank": self.rank}


@dataclass(frozen=True)
class SetStats:
    """Facts about the whole T x d set that hold for every subset."""

    T: int
    d: int
    rank: int  # numerical rank of the whole set under its own tolerance
    singular_values: tuple[float, ...]
    row_norms_sorted: tuple[float, ...]
    zero_rows: int
    sv_error: float = 0.0  # absolute rounding bound on the singular values
    # cumulative sums of the ascending squared projections of the rows on the top singular
    # direction: for any k-subset, sigma_max(X_S)^2 >= the sum of its k squared projections
    proj_cumsum: tuple[float, ...] = ()

    def ceiling(self, k: int, rule: RankRule) -> int:
        """Largest rank any k-subset can have: sigma_i(X_S) <= sigma_i(X) and tol_S >= tol_min(k),
        with tol_min from a lower bound on sigma_max(X_S) valid for every k-subset."""
        if k < 1:
            return 0
        kk = min(k, len(self.row_norms_sorted))
        smax_lo2 = self.row_norms_sorted[kk - 1] ** 2  # sigma_max(X_S) >= its largest row norm
        if self.proj_cumsum:
            smax_lo2 = max(smax_lo2, self.proj_cumsum[kk - 1] * (1 - 1e-12))
        tol_min = rule.tol(math.sqrt(smax_lo2), k, self.d)
        # Counting values within rounding error of the tolerance keeps the ceiling safe.
        return int(sum(1 for s in self.singular_values if s + self.sv_error > tol_min))


@dataclass(frozen=True)
class SubsetTest:
    """Monte-Carlo test of "every k rows are independent" at one candidate size k."""

    check: str
    k: int
    T: int
    d: int
    samples: int
    satisfied: int
    fraction: float
    ci_low: float
    ci_high: float
    threshold: float
    verdict: str  # holds | fails | unavailable
    reason: str
    rule: RankRule
    seed: int
    device: str
    witness: Witness | None = None
    rank_histogram: dict = field(default_factory=dict)  # rank -> count over the draws examined
    histogram_draws: int = 0
    exact_rechecks: int = 0
    sampled: bool = True
    set_rank: int | None = None
    proven: bool = False  # the verdict is a proof (no sampling needed / dependent subset found)
    planned_samples: int | None = None  # draws asked for, when sampling stopped early

    def record(self) -> dict:
        return {
            "check": self.check,
            "k": self.k,
            "T": self.T,
            "d": self.d,
            "samples": self.samples,
            "satisfied": self.satisfied,
            "fraction": self.fraction,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "threshold": self.threshold,
            "verdict": self.verdict,
            "reason": self.reason,
            "tolerance": self.rule.describe(),
            "seed": self.seed,
            "witness": list(self.witness.indices) if self.witness else [],
            "witness_singular_values": list(self.witness.singular_values) if self.witness else [],
            "rank_histogram": {str(k): v for k, v in sorted(self.rank_histogram.items())},
            "exact_rechecks": self.exact_rechecks,
            "sampled": self.sampled,
            "proven": self.proven,
            "planned_samples": self.planned_samples,
            "set_rank": self.set_rank,
            "device": self.device,
        }


@dataclass(frozen=True)
class Bound:
    value: int
    kind: str  # what produced it
    proves: str  # what it proves, in words

    def as_dict(self) -> dict:
        return {"value": self.value, "kind": self.kind, "proves": self.proves}


@dataclass(frozen=True)
class Sweep:
    """Satisfied fraction for every candidate size from one set of nested draws."""

    T: int
    d: int
    samples: int
    threshold: float
    seed: int
    rule: RankRule
    device: str
    ks: tuple[int, ...]
    fractions: tuple[float, ...]
    ci_low: tuple[float, ...]
    ci_high: tuple[float, ...]
    estimate: int  # largest k with fraction >= threshold (an estimate, not a proof)
    ceiling: Bound
    floor: Bound
    witness: Witness | None
    exact_rechecks: int
    kmax_sampled: int
    raw_estimate: int = 0  # before capping at the certified ceiling

    def rows(self) -> list[dict]:
        return [
            {"k": k, "fraction": f, "ci_low": lo, "ci_high": hi}
            for k, f, lo, hi in zip(self.ks, self.fractions, self.ci_low, self.ci_high)
        ]

    def fraction_at(self, k: int) -> float:
        if k < 1:
            return 1.0
        if k > len(self.fractions):
            return 0.0
        return self.fractions[k - 1]

    def summary(self) -> dict:
        return {
            "estimate": self.estimate,
            "estimate_means": f"largest k whose satisfied fraction is >= {self.threshold} over {self.samples} draws, "
            "capped at the certified ceiling (an estimate, not a proof)",
            "raw_estimate": self.raw_estimate,
            "ceiling": self.ceiling.as_dict(),
            "floor": self.floor.as_dict(),
            "witness": self.witness.as_dict() if self.witness else None,
            "exact_rechecks": self.exact_rechecks,
        }


# --------------------------------------------------------------------------- helpers


def as_matrix(X) -> torch.Tensor:
    """Validate a T x d feature matrix (any float dtype); returns it unchanged as a tensor."""
    if isinstance(X, np.ndarray):
        X = torch.from_numpy(X)
    if not isinstance(X, torch.Tensor):
        raise InputError("features must be a tensor or array")
    if X.ndim != 2:
        raise InputError(f"expected a T x d matrix, got an array of shape {tuple(X.shape)}")
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise InputError(f"empty feature matrix of shape {tuple(X.shape)}")
    if not X.dtype.is_floating_point:
        X = X.to(torch.float64)
    if not bool(torch.isfinite(X).all()):
        raise InputError("features contain NaN or Inf values")
    return X


def validate_params(*, samples: int | None = None, threshold: float | None = None, k: int | None = None, T: int | None = None) -> None:
    if samples is not None and samples < 1:
        raise InputError(f"--samples must be at least 1, got {samples}")
    if threshold is not None and not (0 < threshold <= 1):
        raise InputError(f"--threshold must be in (0, 1], got {threshold}")
    if k is not None and k < 1:
        raise InputError(f"--k must be at least 1, got {k}")


@with_numerics(threads=1)
def set_stats(X: torch.Tensor, rule: RankRule) -> SetStats:
    """Singular values and row norms of the whole set (eigenvalues of the smaller Gram matrix;
    an SVD when one of them sits within rounding error of the tolerance)."""
    X64 = X.to(torch.float64)
    T, d = X64.shape
    norms = torch.sort(X64.norm(dim=1)).values
    G = X64.T @ X64 if d <= T else X64 @ X64.T
    lam_asc, vecs = torch.linalg.eigh(G)
    lam = lam_asc.flip(0).clamp_min(0)
    lmax = float(lam[0])
    top = vecs[:, -1]
    v1 = top if d <= T else X64.T @ top
    v1 = v1 / v1.norm().clamp_min(1e-300)
    proj2 = torch.sort((X64 @ v1) ** 2).values
    err = float(_rounding_margin(max(T, d), min(T, d), torch.tensor(lmax)))
    # The smallest tolerance any subset can get; the Gram route is used only when its rounding
    # error is far below that, and otherwise the SVD of the rows.
    tol_floor = rule.tol(float(norms[0]), 1, d)
    if err * 1e4 < tol_floor**2:
        s = lam.sqrt()
        sv_error = math.sqrt(err * 1e4) / 100.0
    else:
        s = torch.linalg.svdvals(X64)
        sv_error = 8.0 * max(T, d) * EPS64 * float(s[0]) if s.numel() else 0.0
    s_list = tuple(float(v) for v in s.cpu())
    tol = rule.tol(s_list[0] if s_list else 0.0, T, d)
    return SetStats(
        T=T,
        d=d,
        rank=int(sum(1 for v in s_list if v > tol)),
        singular_values=s_list,
        row_norms_sorted=tuple(float(v) for v in norms.cpu()),
        zero_rows=int((norms == 0).sum()),
        sv_error=sv_error,
        proj_cumsum=tuple(float(v) for v in torch.cumsum(proj2, 0).cpu()),
    )


class _Gram:
    """Gram matrices of row subsets: gathered from the full T x T Gram when it fits."""

    def __init__(self, X: torch.Tensor, device: torch.device):
        self.X = X.to(device=device, dtype=torch.float64)
        self.full = None
        if X.shape[0] <= FULL_GRAM_MAX_T:
            if self.X.device.type == "cpu":  # NumPy's X @ X.T is one symmetric rank-k update (syrk)
                Xn = self.X.numpy()
                self.full = torch.from_numpy(Xn @ Xn.T)
            else:
                self.full = self.X @ self.X.T
        self.T = int(X.shape[0])

    @property
    def cpu_flat(self):
        """The full Gram as a flat NumPy array when it lives on the CPU (the fast path), else None."""
        if self.full is None or self.full.device.type != "cpu" or not cpu.available():
            return None
        return self.full.numpy().reshape(-1)

    @functools.cached_property
    def proj(self) -> np.ndarray:
        """Projections of the rows on the top right singular direction (power iteration).

        For any subset S and unit vector u, sigma_max(X_S)^2 >= ||X_S u||^2: any u gives a valid
        lower bound, the top direction a tight one on data with a dominant direction.
        """
        X = self.X
        u = X.mean(0)
        if not bool(u.norm() > 0):
            u = X[int(X.norm(dim=1).argmax())]
        for _ in range(30):
            u = X.T @ (X @ u)
            nu = u.norm()
            if not bool(nu > 0):
                break
            u = u / nu
        return (X @ u).cpu().numpy()

    def sub(self, idx: torch.Tensor) -> torch.Tensor:
        if self.full is not None:  # one flat gather: about twice as fast as 2-D advanced indexing
            b, k = idx.shape
            lin = (idx[:, :, None] * self.T + idx[:, None, :]).reshape(-1)
            return torch.index_select(self.full.reshape(-1), 0, lin).reshape(b, k, k)
        rows = self.X[idx]
        return rows @ rows.transpose(-1, -2)

    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        return self.X[idx]


def _block_seed(seed: int, block: int) -> int:
    return int(np.random.SeedSequence([int(seed) % 2**64, block]).generate_state(1, np.uint64)[0])


def _draw_block(T: int, k: int, seed: int, block: int, size: int, sort: bool) -> torch.Tensor:
    """Block ``block`` of the draws for ``seed``: ``size`` rows of k distinct row indices.

    Each block has its own generator (seeded from the seed and the block number), so blocks can
    be drawn in any order and in parallel and the draws never depend on batch sizes. A row is the
    k largest of T uniform keys: a uniformly random k-subset, in random order (a random
    ordering's prefixes for the sweep), or sorted (``sort``: a subset is a set, and sorted
    indices make the Gram gather cache-friendly).
    """
    gen = torch.Generator(device="cpu").manual_seed(_block_seed(seed, block))
    keys = torch.rand(size, T, generator=gen)
    if sort:
        return keys.topk(k, dim=1, sorted=False).indices.sort(dim=1).values
    return keys.topk(k, dim=1).indices


def _block_specs(samples: int) -> list[tuple[int, int]]:
    return [(block, min(DRAW_BLOCK, samples - start)) for block, start in enumerate(range(0, samples, DRAW_BLOCK))]


def _draw_blocks(T: int, k: int, samples: int, seed: int, sort: bool = False):
    """Yield (start, indices) blocks of the seeded draws of k distinct rows."""
    for block, size in _block_specs(samples):
        yield block * DRAW_BLOCK, _draw_block(T, k, seed, block, size, sort)


def _blocks_in_order(job, T: int, k: int, samples: int, seed: int, sort: bool, workers: int):
    """``job(indices)`` for every block of the seeded draws, yielded in block order.

    With several workers each block is drawn and processed by one worker thread (torch with one
    intra-op thread: small factorisations parallelise better across matrices than within
    them), ``workers + 1`` blocks ahead of the consumer.
    """
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    def run(spec):
        torch.set_flush_denormal(True)  # per thread; see rank.numerics
        return job(_draw_block(T, k, seed, spec[0], spec[1], sort))

    specs = iter(_block_specs(samples))
    if workers <= 1:  # one caller (a GPU): larger batches, several blocks per call
        while group := list(itertools.islice(specs, 4)):
            yield job(torch.cat([_draw_block(T, k, seed, b, size, sort) for b, size in group]))
        return
    pool = ThreadPoolExecutor(workers)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pending = deque(pool.submit(run, spec) for spec in itertools.islice(specs, workers + 1))
        while pending:
            result = pending.popleft().result()
            spec = next(specs, None)
            if spec is not None:
                pending.append(pool.submit(run, spec))
            yield result
    finally:
        torch.set_num_threads(old_threads)
        pool.shutdown(cancel_futures=True)


def _chunk_size(k: int, mats: int = 3, budget_bytes: int = 1 << 28) -> int:
    return max(1, min(4 * DRAW_BLOCK, budget_bytes // max(1, mats * k * k * 8)))


def _prove(X: torch.Tensor, idx: list[int], rule: RankRule) -> Witness | None:
    """A Witness when the rows ``idx`` are dependent under ``rule``, else None."""
    rank, _, _, tol, s = svd_rank(X[idx].to(torch.float64), rule)
    if int(rank) >= len(idx):
        return None
    return Witness(tuple(idx), tuple(float(v) for v in s.cpu()), float(tol), int(rank))


def shrink_witness(X: torch.Tensor, indices, rule: RankRule) -> Witness:
    """Given a dependent subset, look for a smaller dependent one inside it and prove it.

    Two reductions, repeated while they help: the support of the left singular vector of the
    smallest singular value (the rows that take part in the dependence), and, when the rank r
    is below size - 1, r well-conditioned rows (column-pivoted QR) plus one more row. Every
    candidate is verified with the exact rule, so the result is always a proof.
    """
    from scipy.linalg import qr

    best = _prove(X, [int(i) for i in indices], rule)
    if best is None:
        raise ValueError("shrink_witness needs a dependent subset")
    for _ in range(8):
        idx = list(best.indices)
        rows = X[idx].to(torch.float64)
        improved = False
        if best.rank < len(idx) - 1:
            _, _, piv = qr(rows.cpu().numpy().T, pivoting=True, mode="economic")
            base = [idx[p] for p in piv[: best.rank]]
            for extra in (idx[p] for p in piv[best.rank :]):
                w = _prove(X, base + [extra], rule)
                if w is not None:
                    best, improved = w, True
                    break
        else:
            U, _, _ = torch.linalg.svd(rows, full_matrices=True)
            u = U[:, len(idx) - 1].abs() if rows.shape[0] <= rows.shape[1] else U[:, -1].abs()
            order = torch.argsort(u, descending=True).tolist()
            support = [idx[i] for i in order if float(u[i]) > 1e-6 * float(u.max())]
            if 1 <= len(support) < len(idx):
                w = _prove(X, sorted(support), rule)
                if w is not None:
                    best, improved = w, True
        if not improved:
            break
    return best


# --------------------------------------------------------------------------- the test at one k


def _decided_draws(gram: "_Gram", k: int, samples: int, seed: int, rule: RankRule, progress: Progress | None = None):
    """Yield ``(indices, decision)`` for consecutive chunks of the seeded draws.

    On the CPU blocks of draws are drawn and decided by one worker thread per core. With the
    full Gram on the CPU, each draw goes through ``cpu.decide_draws`` (LAPACK through ctypes)
    and only the draws its certificates do not settle through ``decide_full_rank``. The order
    of the test that certifies dependence adapts to what earlier blocks showed. Neither
    changes any decision.
    """
    d = gram.X.shape[1]
    chunk = _chunk_size(k)
    on_cpu = gram.X.device.type == "cpu"
    workers = torch.get_num_threads() if on_cpu else 1
    flat = gram.cpu_flat
    proj = gram.proj if flat is not None else None
    seen = [0, 0]  # draws decided, dependent draws

    def decide(sub):
        deficient_first = seen[1] * 2 > seen[0]
        if flat is None:
            G = gram.sub(sub)
            return sub, decide_full_rank(G, lambda j: gram.rows(sub[j]), k, d, rule, deficient_first=deficient_first)
        full_np, decided = cpu.decide_draws(flat, gram.T, sub.numpy(), d, rule, proj, deficient_first=deficient_first)
        full = torch.from_numpy(full_np)
        exact = torch.zeros_like(full)
        rest = torch.from_numpy(~decided).nonzero().squeeze(-1)
        if rest.numel():
            rs = sub[rest]
            dec = decide_full_rank(gram.sub(rs), lambda j: gram.rows(rs[j]), k, d, rule, delta=1e-6)
            full[rest], exact[rest] = dec.full, dec.exact
        return sub, Decision(full, exact)

    def block(idx):
        idx = idx.to(gram.X.device)
        return [decide(part) for part in idx.split(chunk)]

    with cpu.blas_single_thread() if flat is not None else contextlib.nullcontext():
        for results in _blocks_in_order(block, gram.T, k, samples, seed, True, workers):
            for sub, dec in results:
                seen[0] += int(sub.shape[0])
                seen[1] += int((~dec.full).sum())
                yield sub, dec
            if progress:
                progress(sum(int(sub.shape[0]) for sub, _ in results))


def draw_decisions(X, k: int, *, samples: int = DEFAULT_SAMPLES, seed: int = 0, rule: RankRule | None = None,
                   device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The draws of ``subset_test`` and each one's decision: ``(indices (N, k), independent (N,))``."""
    from .settings import resolve_device

    X = as_matrix(X)
    rule = rule or RankRule.for_dtype(X.dtype)
    gram = _Gram(X, resolve_device(device))
    parts = [(sub.cpu(), dec.full.cpu()) for sub, dec in _decided_draws(gram, k, samples, seed, rule)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


@with_numerics()
def subset_test(
    X,
    k: int,
    *,
    samples: int = DEFAULT_SAMPLES,
    threshold: float = DEFAULT_THRESHOLD,
    seed: int = 0,
    rule: RankRule | None = None,
    device: torch.device | str = "cpu",
    check: str = "kruskal",
    stats: SetStats | None = None,
    histogram_limit: int | None = None,
    stop_when_decided: bool = False,
    progress: Progress | None = None,
) -> SubsetTest:
    """Estimate whether every k rows of X are independent: N draws of k distinct rows.

    A draw is satisfied when its k x d matrix has rank k under ``rule``. Verdict: ``holds`` when
    the satisfied fraction is at least ``threshold``. Known answers are given without sampling:
    k > d (any k vectors in R^d are dependent), k > T, and k above the rank ceiling of the whole
    set. The rank histogram covers the first ``histogram_limit`` unsatisfied draws (the rest are
    counted as rank < k) plus all satisfied draws; by default its size adapts to the cost of
    one eigen-decomposition (100 draws up to k = 270, 10 at k = 768).

    With ``stop_when_decided`` sampling stops as soon as the verdict can no longer change (more
    than ``(1 - threshold) * samples`` dependent draws); the fraction and interval are then over
    the draws made, which the result records as ``samples``.
    """
    from .settings import device_name, resolve_device

    X = as_matrix(X)
    validate_params(samples=samples, threshold=threshold, k=k)
    rule = rule or RankRule.for_dtype(X.dtype)
    dev = resolve_device(device)
    T, d = X.shape
    base = dict(check=check, k=k, T=T, d=d, threshold=threshold, rule=rule, seed=seed, device=device_name(dev))

    def known(reason: str, set_rank=None, witness=None) -> SubsetTest:
        return SubsetTest(samples=0, satisfied=0, fraction=0.0, ci_low=0.0, ci_high=0.0, verdict="fails",
                          reason=reason, sampled=False, set_rank=set_rank, proven=True, witness=witness, **base)

    if k > d:
        return known(f"k = {k} > d = {d}: any {k} vectors in R^{d} are linearly dependent (no sampling needed)")
    if k > T:
        return known(f"k = {k} > T = {T}: the Kruskal rank of {T} vectors is at most {T} (no sampling needed)")
    stats = stats or set_stats(X, rule)
    ceil_k = stats.ceiling(k, rule)
    if ceil_k < k:
        witness = None
        if stats.zero_rows:
            zi = int((X.to(torch.float64).norm(dim=1) == 0).nonzero()[0])
            witness = Witness((zi,), (0.0,), 0.0, 0)
        return known(
            f"the whole set has numerical rank {stats.rank} (at most {ceil_k} for any {k}-subset under the rule), "
            f"so no {k} rows are independent (no sampling needed)",
            set_rank=stats.rank,
            witness=witness,
        )

    satisfied = 0
    rechecks = 0
    hist: dict[int, int] = {}
    hist_draws = 0
    first_dependent = None
    if histogram_limit is None:
        histogram_limit = int(min(100, max(10, 2e9 // k**3)))
    if k == T:  # one subset only: decide it exactly, no sampling
        w = _prove(X, list(range(T)), rule)
        ok = w is None
        return SubsetTest(samples=1, satisfied=int(ok), fraction=float(ok), ci_low=float(ok), ci_high=float(ok),
                          verdict="holds" if ok else "fails", reason=f"k = T = {T}: the only subset is the whole set, "
                          f"which is {'independent' if ok else 'dependent'} (decided exactly, no sampling)",
                          sampled=False, set_rank=stats.rank, proven=True,
                          witness=shrink_witness(X, list(range(T)), rule) if not ok else None, **base)
    max_fail = math.floor((1 - threshold) * samples + 1e-9)
    drawn = 0
    stopped = False
    gram = _Gram(X, dev)
    for sub, dec in _decided_draws(gram, k, samples, seed, rule, progress):
        drawn += int(sub.shape[0])
        satisfied += int(dec.full.sum())
        rechecks += int(dec.exact.sum())
        bad = (~dec.full).nonzero().squeeze(-1)
        if first_dependent is None and bad.numel():
            first_dependent = sub[int(bad[0])].cpu()
        room = histogram_limit - hist_draws
        if room > 0 and bad.numel():
            sel = bad[:room]
            for part in sel.split(64):
                ranks = gram_rank(gram.sub(sub[part]), lambda j, part=part, sub=sub: gram.rows(sub[part[j]]), d, rule)
                for r in ranks.tolist():
                    hist[int(r)] = hist.get(int(r), 0) + 1
            hist_draws += int(sel.numel())
        if stop_when_decided and drawn - satisfied > max_fail and drawn < samples:
            stopped = True
            break
    n_planned = samples
    samples = drawn
    n_full = satisfied
    if n_full:
        hist[k] = hist.get(k, 0) + n_full
    frac = satisfied / samples
    lo, hi = clopper_pearson(satisfied, samples)
    witness = shrink_witness(X, first_dependent.tolist(), rule) if first_dependent is not None else None
    holds = frac >= threshold
    if holds and witness is None:
        reason = (f"all {samples} draws of {k} rows were independent" if satisfied == samples else
                  f"{satisfied}/{samples} draws of {k} rows independent, fraction >= threshold {threshold}")
        reason += "; an estimate, not a proof"
    elif holds:
        reason = (f"{satisfied}/{samples} draws independent (fraction >= threshold {threshold}), but a dependent "
                  f"{len(witness.indices)}-subset was found, so the exact Kruskal rank is below {len(witness.indices)}")
    else:
        reason = f"only {satisfied}/{samples} draws of {k} rows independent, fraction < threshold {threshold}"
        if stopped:
            reason += (f"; sampling stopped after {samples} of {n_planned} draws because more than "
                       f"{max_fail} dependent draws settle the verdict")
        if witness is not None:
            reason += f"; dependent {len(witness.indices)}-subset found (proof that Kruskal rank < {len(witness.indices)})"
    return SubsetTest(
        samples=samples, satisfied=satisfied, fraction=frac, ci_low=lo, ci_high=hi,
        verdict="holds" if holds else "fails", reason=reason, witness=witness, rank_histogram=hist,
        histogram_draws=hist_draws + n_full, exact_rechecks=rechecks, sampled=True, set_rank=stats.rank,
        planned_samples=n_planned if stopped else None, **base,
    )


# --------------------------------------------------------------------------- the sweep over every k


def _prefix_bounds(G: torch.Tensor, d: int, rule: RankRule):
    """Certified full/deficient decisions for every leading k x k block of each Gram matrix.

    From one Cholesky factor L of G + s0 I and its inverse: for the leading block of size k,
    1 / trace((G_k + s0)^-1) <= lambda_min(G_k) + s0 <= 1 / max_j (G_k + s0)^-1_jj, where both
    quantities are cumulative sums over rows of L^-1 (the inverse of a leading block of a
    triangular matrix is the leading block of its inverse). lambda_max(G_k) is bracketed by a
    prefix Rayleigh quotient and the Frobenius norm. Returns two (B, K) bool tensors.
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
    lam_lo = torch.maximum(torch.cummax(diag, dim=-1).values, num / den)
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
    sure_full = (lam_min_lo > tau_hi * (1 + 1e-3) + margin) & ok[:, None]
    sure_def = (lam_min_hi < tau_lo * (1 - 1e-3) - margin) & ok[:, None] & (tau_lo * (1 - 1e-3) - margin > 0)
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


class _SweepKernel:
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
    """

    def __init__(self, gram: "_Gram", K: int, d: int, rule: RankRule, delta: float = 1e-6):
        self.gram, self.K, self.d, self.rule, self.delta = gram, K, d, rule, delta
        self.flat, self.T = gram.cpu_flat, gram.T
        self.sqn = torch.diagonal(gram.full).numpy()
        self.proj = gram.proj
        ks = np.arange(1, K + 1, dtype=np.float64)
        self.rt = np.array([rule.rtol_for(int(k), d) for k in range(1, K + 1)])
        self.a = rule.atol_value
        self.ks = ks
        _, _, self.pos, _ = cpu.lower_layout(K)
        self.row_start = np.concatenate([[0], np.cumsum(np.arange(1, K + 1))])
        self.hint = K  # rows to gather first and the size to aim at: only speed depends on them
        self.guess = K

    def draws(self, subs: np.ndarray) -> tuple[np.ndarray, int]:
        """k* for each row of ``subs`` (B, K), and how many sizes needed an exact decision."""
        K = self.K
        Gp = np.zeros((K, K))
        W = np.empty((K, K))
        potrf = cpu.Potrf(K)

        def factor(m: int, shift: float) -> int:
            """LAPACK info of Cholesky(G_m - shift I): 0, or the order of the first failing block."""
            W[:m, :m] = Gp[:m, :m]
            W.reshape(-1)[: m * (K + 1) : K + 1] -= shift
            return potrf(W, m)

        out = np.empty(subs.shape[0], dtype=np.int64)
        exact = 0
        for b in range(subs.shape[0]):
            out[b], e = self._one(subs[b], Gp, factor)
            exact += e
            self.hint = min(K, int(out[b] * 1.1) + 8)  # k* of neighbouring draws cluster
        return out, exact

    def _one(self, s: np.ndarray, Gp: np.ndarray, factor) -> tuple[int, int]:
        K, delta, rt, a = self.K, self.delta, self.rt, self.a
        rowsq = np.zeros(K)
        dg = self.sqn[s]
        maxdiag = np.maximum.accumulate(dg)
        trace = np.cumsum(dg)
        lam_lo = np.maximum(maxdiag, np.cumsum(self.proj[s] ** 2))
        m_full, m_def = cholesky_margins(self.ks, self.d, trace, maxdiag)
        m = 0

        def grow(new_m: int) -> None:
            nonlocal m
            a0, b0 = self.row_start[m], self.row_start[new_m]
            vals = cpu.gather_lower(self.flat, self.T, s, m, new_m)
            Gp.reshape(-1)[self.pos[a0:b0]] = vals
            sq = np.add.reduceat(vals * vals, self.row_start[m:new_m] - a0)
            d0 = dg[m:new_m]
            rowsq[m:new_m] = 2.0 * sq - d0 * d0
            m = new_m

        def tight(k: int) -> tuple[float, float]:
            """At size k: the shift that certifies independence (the largest squared tolerance
            plus the rounding margin), and the smallest squared tolerance (before any margin),
            from power-iteration bounds on lambda_max(G_k)."""
            lo_k, hi_k = cpu.power_bounds(Gp[:k, :k], self.proj[s[:k]], float(trace[k - 1]))
            hi_k = min(hi_k, math.sqrt(max(float(rowsq[:k].sum()), 0.0)))
            lo_k = max(lo_k, float(lam_lo[k - 1]))
            s_hi = max(rt[k - 1] * math.sqrt(hi_k), a) ** 2 * (1 + delta) + m_full[k - 1]
            t_lo = max(rt[k - 1] * math.sqrt(lo_k), a) ** 2 * (1 - delta)
            return s_hi, t_lo

        grow(max(1, min(K, self.hint)))
        cache: dict[int, tuple[float, float]] = {}

        def shifts(k: int) -> tuple[float, float]:
            if k not in cache:
                cache[k] = tight(k)
            return cache[k]

        lo, hi, exact = 0, K, 0  # every k <= lo is independent, every k > hi dependent
        j = self.guess  # where to aim the certificate of independence
        last_b = -1  # the lo at which the certificate of dependence last ran
        while lo < hi:
            if lo >= m:  # every gathered size is independent: gather more rows
                grow(min(hi, max(m + 16, int(m * 1.25))))
                j = m
            mm = min(hi, m)
            j = max(lo + 1, min(j, mm))
            before = (lo, hi)
            # independence of every leading block up to j: the largest tolerance there is j's
            f = factor(j, shifts(j)[0])
            lo = max(lo, j if f == 0 else f - 1)
            if lo >= hi:
                break
            if lo == m:
                continue
            # dependence of the block where a factorisation at the smallest open tolerance (that
            # of lo + 1; tolerances grow with k) fails, less the margin of the largest block
            s_lo = shifts(lo + 1)[1] - m_def[mm - 1]
            if s_lo > 0 and lo != last_b:
                last_b = lo
                f = factor(mm, s_lo)
                if lo < f <= mm:
                    hi = min(hi, f - 1)
                elif f == 0 and m < hi:
                    grow(min(hi, max(m + 16, int(m * 1.25))))
                    last_b = -1
                    continue
            if (lo, hi) == before and j == lo + 1:
                # lambda_min(G_{lo+1}) sits within rounding distance of its tolerance:
                # decide_full_rank falls back to eigenvalues or the SVD
                full, was_exact = self._decide(s, Gp, lo + 1)
                exact += was_exact
                if full:
                    lo += 1
                else:
                    hi = lo
            # aim next at the top of the range when it just shrank from above, else just past lo
            j = hi if hi != before[1] else lo + 1
        self.guess = max(1, lo)
        return lo, exact

    def _decide(self, s: np.ndarray, Gp: np.ndarray, k: int) -> tuple[bool, int]:
        A = np.tril(Gp[:k, :k])
        A = A + np.tril(A, -1).T
        dec = decide_full_rank(torch.from_numpy(A)[None], lambda j: self.gram.rows(torch.from_numpy(s[:k]))[None],
                               k, self.d, self.rule, self.delta)
        return bool(dec.full[0]), int(dec.exact[0])


@with_numerics()
def babel_floor(X: torch.Tensor, rule: RankRule, kmax: int | None = None, row_block: int = 1024) -> Bound:
    """Certified floor from the Babel function mu1(m) (cumulative coherence).

    Any k rows with mu1(k-1) < 1 have a normalised Gram matrix with smallest eigenvalue at least
    1 - mu1(k-1) (Gershgorin), so sigma_min(X_S)^2 >= min_norm^2 (1 - mu1) and
    sigma_max(X_S)^2 <= max_norm^2 (1 + mu1); the floor is the largest k for which that lower
    bound clears the tolerance. k = 1 needs only non-zero rows.
    """
    X64 = X.to(torch.float64)
    T, d = X64.shape
    kmax = min(kmax or min(T, d), T, d)
    norms = X64.norm(dim=1)
    nmin, nmax = float(norms.min()), float(norms.max())
    what = "every {k} rows are independent under the tolerance rule (Babel-function bound; a proof)"
    if nmin == 0 or nmin <= rule.atol_value:
        return Bound(0, "babel", "a zero row exists, so no floor above 0 can be proven")
    Xn = X64 / norms[:, None]
    m = max(0, kmax - 1)
    mu1 = torch.zeros(m + 1, dtype=torch.float64, device=X64.device)
    if m > 0:
        for s in range(0, T, row_block):
            C = (Xn[s : s + row_block] @ Xn.T).abs()
            r = torch.arange(s, min(s + row_block, T), device=X64.device)
            C[torch.arange(len(r)), r] = 0.0
            top = C.topk(min(m, T - 1), dim=1).values
            cums = torch.cumsum(top, dim=1).amax(0)
            mu1[1 : cums.numel() + 1] = torch.maximum(mu1[1 : cums.numel() + 1], cums)
    mu1 = mu1 + 1e-12  # rounding slack
    best = 0
    for k in range(1, kmax + 1):
        mu = float(mu1[k - 1]) if k >= 2 else 0.0
        if mu >= 1:
            break
        smin2 = nmin**2 * (1 - mu)
        tol = rule.tol(nmax * math.sqrt(1 + mu), k, d)
        if smin2 > tol**2:
            best = k
        else:
            break
    return Bound(best, "babel", what.format(k=best))


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
    from .settings import device_name, resolve_device

    X = as_matrix(X)
    validate_params(samples=samples, threshold=threshold)
    rule = rule or RankRule.for_dtype(X.dtype)
    dev = resolve_device(device)
    T, d = X.shape
    K_all = min(T, d) if kmax is None else max(1, min(T, d, kmax))
    stats = stats or set_stats(X, rule)
    K = 0
    for k in range(1, K_all + 1):
        if stats.ceiling(k, rule) >= k:
            K = k
    gram = _Gram(X, dev)
    counts = torch.zeros(K + 2, dtype=torch.long)
    rechecks = 0
    min_dep = None  # (size, indices)
    if K > 0:
        chunk = _chunk_size(K, mats=6)
        kernel = _SweepKernel(gram, K, d, rule) if gram.cpu_flat is not None else None
        workers = torch.get_num_threads() if kernel is not None else 1

        def block(idx: torch.Tensor):
            if kernel is not None:  # one draw at a time, LAPACK through ctypes
                kstar, rc = kernel.draws(idx.numpy())
                return idx, torch.from_numpy(kstar), rc
            idx = idx.to(dev)
            parts = [_critical_sizes(gram.sub(sub), lambda j, m, sub=sub: gram.rows(sub[j, :m]), d, rule)
                     for sub in idx.split(chunk)]
            return idx, torch.cat([p[0].cpu() for p in parts]), sum(p[1] for p in parts)

        with cpu.blas_single_thread() if kernel is not None else contextlib.nullcontext():
            for idx, kstar, rc in _blocks_in_order(block, T, K, samples, seed, False, workers):
                rechecks += rc
                counts += torch.bincount(kstar, minlength=K + 2)[: K + 2]
                small = int(kstar.min())
                if small < K and (min_dep is None or small + 1 < min_dep[0]):
                    j = int(kstar.argmin())
                    min_dep = (small + 1, idx[j, : small + 1].cpu().tolist())
                if progress:
                    progress(int(idx.shape[0]))
    # fraction(k) = P(k* >= k)
    ge = torch.flip(torch.cumsum(torch.flip(counts, [0]), 0), [0])  # ge[k] = #draws with k* >= k
    ks = tuple(range(1, K_all + 1))
    fr, lo_l, hi_l = [], [], []
    for k in ks:
        s = int(ge[k]) if k <= K else 0
        fr.append(s / samples if K else 0.0)
        lo, hi = clopper_pearson(s, samples) if k <= K else (0.0, 0.0)
        lo_l.append(lo)
        hi_l.append(hi)
    est = 0
    for k, f in zip(ks, fr):
        if f >= threshold:
            est = k
    witness = shrink_witness(X, min_dep[1], rule) if min_dep else None
    ceil_candidates = []
    if witness is not None:
        ceil_candidates.append(Bound(len(witness.indices) - 1, "witness",
                                     f"a dependent {len(witness.indices)}-subset was found, so the Kruskal rank is at most {len(witness.indices) - 1} (a proof)"))
    if K < min(T, d):
        ceil_candidates.append(Bound(K, "set-rank",
                                     f"the whole set has numerical rank {stats.rank}; no subset of more than {K} rows can be independent under the rule (a proof)"))
    else:
        ceil_candidates.append(Bound(min(T, d), "dimension", f"the Kruskal rank of {T} vectors in R^{d} is at most min(T, d) = {min(T, d)}"))
    ceiling = min(ceil_candidates, key=lambda b: b.value)
    raw_estimate = est
    est = min(est, ceiling.value)  # an estimate never exceeds what is proven
    floor = babel_floor(X, rule, kmax=min(K_all, ceiling.value) or 1)
    return Sweep(
        T=T, d=d, samples=samples, threshold=threshold, seed=seed, rule=rule, device=device_name(dev),
        ks=ks, fractions=tuple(fr), ci_low=tuple(lo_l), ci_high=tuple(hi_l), estimate=est,
        ceiling=ceiling, floor=floor, witness=witness, exact_rechecks=rechecks, kmax_sampled=K,
        raw_estimate=raw_estimate,
    )


# --------------------------------------------------------------------------- brute force


def exact_kruskal_rank(X, rule: RankRule | None = None, max_subsets: int = 2_000_000) -> int:
    """The Kruskal rank by enumerating every subset (small cases only; used to test the bounds)."""
    X = as_matrix(X)
    rule = rule or RankRule.for_dtype(X.dtype)
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
