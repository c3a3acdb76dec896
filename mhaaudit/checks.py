"""The paper's four checks as pure functions on tensors, and the registry that names them.

* General Position (``general_position``): the queries have Kruskal rank min(T, d), estimated
  by Monte Carlo at k = min(T, d).
* Assumption 1 (``assumption_1``): the queries have Kruskal rank >= n (Monte Carlo at k = n).
* Assumption 2 (``assumption_2``, streamed by ``ContextRanks``): every context matrix E_t
  (n x d) has rank n. Exact per example: the counts are proofs under the rank rule.
* Assumption 3 (``assumption_3``): the vectors query + mean of context rows have Kruskal rank
  >= n (Monte Carlo at k = n).

A Monte-Carlo "holds" is an estimate (``mhaaudit.kruskal``); a dependent subset found is a
proof. ``REGISTRY`` maps each check's name to a ``Check``: its function, what it means, which
vectors it reads and what its size k is. Nothing here imports models or data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .errors import InputError
from .kruskal import SetStats, SubsetTest, subset_test
from .numerics import RankRule, decide_full_rank, gram_rank, scaled, with_numerics
from .settings import DEFAULT_SAMPLES, DEFAULT_THRESHOLD


def _inverse_iteration_sigma(G: torch.Tensor, iters: int = 12):
    """Estimates of (sigma_min, sigma_max) of the rows behind positive-definite Gram matrices."""
    L, info = torch.linalg.cholesky_ex(G)
    B, k, _ = G.shape
    v = torch.ones(B, k, 1, dtype=G.dtype, device=G.device)
    w = v.clone()
    for _ in range(iters):
        v = torch.cholesky_solve(v, L)
        v = v / v.norm(dim=1, keepdim=True).clamp_min(1e-300)
        w = G @ w
        w = w / w.norm(dim=1, keepdim=True).clamp_min(1e-300)
    lam_min = (v.transpose(1, 2) @ G @ v).reshape(B)  # Rayleigh quotient: >= lambda_min
    lam_max = (w.transpose(1, 2) @ G @ w).reshape(B)  # <= lambda_max
    return lam_min.clamp_min(0).sqrt(), lam_max.clamp_min(0).sqrt()


@with_numerics()
def context_ranks(E: torch.Tensor, rule: RankRule):
    """Exact numerical rank of each ``(n, d)`` matrix in a ``(B, n, d)`` batch.

    Full rank is decided with the certified Cholesky test of ``mhaaudit.numerics`` (SVD for the
    undecided), so decisions equal ``torch.linalg.matrix_rank`` under the same rule; the ranks of
    deficient matrices come from eigenvalues of the Gram matrix (SVD near the tolerance). Returns
    ``(rank, sigma_min, sigma_max, tol)``. For full-rank matrices ``sigma_min``/``sigma_max`` are
    inverse/power-iteration estimates (the rank decision does not depend on them); when n > d
    no matrix can have rank n and ranks are not computed (-1).

    The batch is divided by an exact power of two first (``numerics.scale``), so no Gram entry
    over- or underflows whatever the data's scale; the singular values and tolerances returned
    are in the data's own units.
    """
    if E.ndim != 3:
        raise InputError(f"context matrices must be (B, n, d), got shape {tuple(E.shape)}")
    B, n, d = E.shape
    if n > d:
        nan = torch.full((B,), float("nan"), dtype=torch.float64)
        return torch.full((B,), -1, dtype=torch.long), nan, nan.clone(), nan.clone()
    unit = scaled(E, rule)
    E64, rule = unit.X, unit.rule
    G = E64 @ E64.transpose(1, 2)
    dec = decide_full_rank(G, lambda j: E64[j], n, d, rule)
    rank = torch.full((B,), n, dtype=torch.long, device=E64.device)
    smin = torch.empty(B, dtype=torch.float64, device=E64.device)
    smax = torch.empty(B, dtype=torch.float64, device=E64.device)
    full = dec.full
    if bool(full.any()):
        idx = full.nonzero().squeeze(-1)
        smin[idx], smax[idx] = _inverse_iteration_sigma(G[idx])
    if bool((~full).any()):
        idx = (~full).nonzero().squeeze(-1)
        rank[idx] = gram_rank(G[idx], lambda j: E64[idx[j]], d, rule)
        lam = torch.linalg.eigvalsh(G[idx]).clamp_min(0)
        smin[idx], smax[idx] = lam[:, 0].sqrt(), lam[:, -1].sqrt()
    tol = rule.tol(smax, n, d)
    return rank, unit.to_data(smin), unit.to_data(smax), unit.to_data(tol)


@dataclass(frozen=True)
class ContextRankResult:
    """Assumption 2 over T examples: exact counts, not an estimate."""

    T: int
    n: int
    d: int
    full: int
    deficient: int
    rank_histogram: dict
    min_margin: float  # min over examples of sigma_min / tol (> 1 means full rank with room)
    worst_example: int
    worst_sigma_min: float
    worst_tol: float
    rule: RankRule
    verdict: str
    reason: str
    deficient_examples: tuple[int, ...] = ()
    check: str = "assumption_2"

    @property
    def exact_status(self) -> str:
        """Every example's rank is decided exactly, so the count is the exact answer (the estimate
        verdict is the same): fails, holds, or undecided when there are no examples."""
        return self.verdict if self.verdict in ("holds", "fails") else "undecided"

    @property
    def exact_basis(self) -> str:
        if self.exact_status == "undecided":
            return "none"
        return "dimension" if self.n > self.d else "exhaustive"

    @property
    def proven(self) -> bool:
        return self.exact_status != "undecided"

    def record(self, seed: int | None = None) -> dict:
        frac = self.full / self.T if self.T else 0.0
        return {
            "check": self.check,
            "k": self.n,
            "T": self.T,
            "d": self.d,
            "samples": self.T,
            "satisfied": self.full,
            "fraction": frac,
            "ci_low": frac,
            "ci_high": frac,
            "threshold": 1.0,
            "verdict": self.verdict,
            "exact_status": self.exact_status,
            "exact_basis": self.exact_basis,
            "scope": "per-example",
            "reason": self.reason,
            "tolerance": self.rule.describe(),
            "seed": seed,
            "witness": list(self.deficient_examples[:20]),
            "witness_singular_values": [],
            "rank_histogram": {str(k): v for k, v in sorted(self.rank_histogram.items())},
            "exact_rechecks": 0,
            "sampled": False,
            "proven": self.proven,
            "set_rank": None,
            "min_margin": self.min_margin,
        }


@dataclass
class ContextRanks:
    """Streaming Assumption 2: feed ``(B, n, d)`` batches, read the result at the end."""

    rule: RankRule
    n: int | None = None
    d: int | None = None
    ranks: list = field(default_factory=list)
    sigma_min: list = field(default_factory=list)
    sigma_max: list = field(default_factory=list)
    tols: list = field(default_factory=list)

    def update(self, E: torch.Tensor) -> None:
        B, n, d = E.shape
        if self.n is None:
            self.n, self.d = n, d
        elif (n, d) != (self.n, self.d):
            raise InputError(f"context batches changed shape from (n, d) = ({self.n}, {self.d}) to ({n}, {d})")
        r, smin, smax, tol = context_ranks(E, self.rule)
        self.ranks.append(r.cpu())
        self.sigma_min.append(smin.cpu())
        self.sigma_max.append(smax.cpu())
        self.tols.append(tol.cpu())

    def arrays(self) -> dict[str, torch.Tensor]:
        cat = lambda xs, dt: torch.cat(xs) if xs else torch.zeros(0, dtype=dt)  # noqa: E731
        return {
            "context_rank": cat(self.ranks, torch.long),
            "context_sigma_min": cat(self.sigma_min, torch.float64),
            "context_sigma_max": cat(self.sigma_max, torch.float64),
            "context_tol": cat(self.tols, torch.float64),
        }

    def result(self) -> ContextRankResult:
        a = self.arrays()
        return assumption_2_from_arrays(a, n=self.n or 0, d=self.d or 0, rule=self.rule)


def assumption_2_from_arrays(a: dict[str, torch.Tensor], *, n: int, d: int, rule: RankRule) -> ContextRankResult:
    rank = a["context_rank"]
    T = int(rank.numel())
    full_mask = rank == n
    full = int(full_mask.sum())
    hist: dict[int, int] = {}
    for v in rank.tolist():
        hist[int(v)] = hist.get(int(v), 0) + 1
    if T and n <= d:
        smin, tol = a["context_sigma_min"], a["context_tol"]
        # sigma_min / tol in the data's units: a ratio, so the same at every scale (0 for a zero matrix)
        margin = torch.where(tol > 0, smin / torch.where(tol > 0, tol, 1.0),
                             torch.where(smin > 0, float("inf"), 0.0).to(smin.dtype))
        worst = int(margin.argmin())
        min_margin = float(margin[worst])
        worst_smin, worst_tol = float(a["context_sigma_min"][worst]), float(a["context_tol"][worst])
    else:
        worst, min_margin, worst_smin, worst_tol = -1, float("nan"), float("nan"), float("nan")
    deficient = tuple(int(i) for i in (~full_mask).nonzero().squeeze(-1).tolist())
    if T == 0:
        verdict, reason = "unavailable", "no examples"
    elif n > d:
        verdict = "fails"
        reason = f"n = {n} > d = {d}: n tokens in R^{d} are always dependent, so no context matrix can have rank n"
    elif full == T:
        verdict = "holds"
        reason = f"all {T} context matrices have rank n = {n} (smallest sigma_min / tolerance = {min_margin:.3g})"
    else:
        verdict = "fails"
        lo = min(hist)
        reason = f"{T - full} of {T} context matrices have rank < n = {n} (lowest rank {lo}); first: example {deficient[0]}"
    return ContextRankResult(
        T=T, n=n, d=d, full=full, deficient=T - full, rank_histogram=hist, min_margin=min_margin,
        worst_example=worst, worst_sigma_min=worst_smin, worst_tol=worst_tol, rule=rule,
        verdict=verdict, reason=reason, deficient_examples=deficient,
    )


def assumption_2(E: torch.Tensor, rule: RankRule | None = None, batch_size: int = 64) -> ContextRankResult:
    """Assumption 2 on a ``(T, n, d)`` tensor (use ``ContextRanks`` to stream)."""
    rule = rule or RankRule.for_dtype(E.dtype)
    acc = ContextRanks(rule)
    for part in E.split(batch_size):
        acc.update(part)
    return acc.result()


def _mc(check: str, X, k: int, **kw) -> SubsetTest:
    kw.setdefault("samples", DEFAULT_SAMPLES)
    kw.setdefault("threshold", DEFAULT_THRESHOLD)
    return subset_test(X, k, check=check, title=REGISTRY[check].title, **kw)


def assumption_1(queries, n: int, **kw) -> SubsetTest:
    """Kruskal rank of the query vectors >= n, estimated at k = n."""
    return _mc("assumption_1", queries, n, **kw)


def assumption_3(a3_vectors, n: int, **kw) -> SubsetTest:
    """Kruskal rank of query + mean(context) >= n, estimated at k = n."""
    return _mc("assumption_3", a3_vectors, n, **kw)


def general_position(queries, **kw) -> SubsetTest:
    """Kruskal rank of the queries = min(T, d), estimated at that k."""
    T, d = queries.shape
    return _mc("general_position", queries, min(T, d), **kw)


# --------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Check:
    """One of the paper's checks: what it runs, what it means, on which vectors, at which size."""

    name: str
    title: str
    meaning: str
    vectors: str  # queries | contexts | a3 (query + mean of context rows)
    size: str  # what k is, in words
    k: Callable[[int, int, int], int]  # (n, T, d) -> the size k it tests
    run: Callable
    estimated: bool  # a Monte-Carlo estimate (True) or an exact count (False)


REGISTRY: dict[str, Check] = {
    c.name: c
    for c in (
        Check("general_position", "General Position",
              "every d query vectors are linearly independent (Kruskal rank = min(T, d))",
              "queries", "k = min(T, d)", lambda n, T, d: min(T, d), general_position, True),
        Check("assumption_1", "Assumption 1", "every n query vectors are linearly independent (Kruskal rank >= n)",
              "queries", "k = n", lambda n, T, d: n, assumption_1, True),
        Check("assumption_2", "Assumption 2",
              "every example's n context tokens are linearly independent (rank E_t = n)",
              "contexts", "rank n", lambda n, T, d: n, assumption_2, False),
        Check("assumption_3", "Assumption 3", "every n vectors query + mean(context) are linearly independent",
              "a3", "k = n", lambda n, T, d: n, assumption_3, True),
    )
}
CHECKS = tuple(REGISTRY)  # the names, in the order the report shows them
CHECK_TITLES = {**{c.name: c.title for c in REGISTRY.values()}, "kruskal": "Kruskal test"}
CHECK_MEANING = {c.name: c.meaning for c in REGISTRY.values()}


__all__ = [
    "CHECKS",
    "CHECK_MEANING",
    "CHECK_TITLES",
    "Check",
    "REGISTRY",
    "ContextRankResult",
    "ContextRanks",
    "SetStats",
    "assumption_1",
    "assumption_2",
    "assumption_2_from_arrays",
    "assumption_3",
    "context_ranks",
    "general_position",
]
