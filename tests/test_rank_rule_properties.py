"""Properties of the rank rule, over random matrices with planted structure (duplicated rows,
low-rank blocks, directions next to the tolerance, permuted rows). Every matrix's rank is decided
under the paper's rule on that matrix (sigma > sigma_max(M) * max(rows, cols) * eps); the whole
set's rank reported at size k is its rank at the smallest tolerance any k-subset can have
(``SetStats.ceiling``).

* no k-subset's rank exceeds the whole-set rank reported at k, on every route (the reference
  SVD, torch.linalg.matrix_rank, the LAPACK kernels, the batched torch kernels, the sweep);
* a witness means the exact status fails, and every decided exact status is true (brute force);
* certified floor <= estimate <= certified ceiling;
* the exact status does not change under a permutation of the rows or a power-of-ten scaling
  across float64's range;
* a duplicated row is reported as a 2-row witness whenever the sweep or the exact path runs.
"""

from __future__ import annotations

import contextlib
import math
import os

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mhaaudit.kruskal import exact_kruskal_rank, fixed_rule, kruskal_sweep, subset_test
from mhaaudit.kruskal.sampling import KERNELS_ENV
from mhaaudit.numerics import RankRule, svd_rank

RULE = RankRule.for_dtype(torch.float32)  # the rule of model features; the data below are float64
FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextlib.contextmanager
def kernels(route: str):
    """Decide draws with the CPU LAPACK kernels ("lapack") or the batched GPU kernels on the CPU ("torch")."""
    old = os.environ.get(KERNELS_ENV)
    if route == "torch":
        os.environ[KERNELS_ENV] = "torch"
    else:
        os.environ.pop(KERNELS_ENV, None)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(KERNELS_ENV, None)
        else:
            os.environ[KERNELS_ENV] = old


@st.composite
def planted(draw, max_T: int = 10, max_d: int = 7):
    """A float64 T x d matrix: generic rows plus one planted structure, and what was planted."""
    T = draw(st.integers(3, max_T))
    d = draw(st.integers(2, max_d))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    X = torch.randn(T, d, generator=g, dtype=torch.float64)
    kind = draw(st.sampled_from(["generic", "duplicate", "low-rank", "near-tolerance"]))
    if kind == "duplicate":
        i, j = draw(st.lists(st.integers(0, T - 1), min_size=2, max_size=2, unique=True))
        X[j] = X[i]
    elif kind == "low-rank":
        r = draw(st.integers(1, max(1, min(T, d) - 1)))
        rows = draw(st.integers(r + 1, T))
        X[:rows] = torch.randn(rows, r, generator=g, dtype=torch.float64) @ torch.randn(
            r, d, generator=g, dtype=torch.float64
        )
    elif kind == "near-tolerance":  # one direction at a chosen multiple of the set's tolerance
        factor = draw(st.sampled_from([0.25, 0.9, 1.1, 4.0]))
        Q = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0]
        coef = torch.randn(T, d, generator=g, dtype=torch.float64)
        coef[:, -1] = 0
        base = coef @ Q.T
        tol = float(torch.linalg.svdvals(base)[0]) * max(T, d) * RULE.eps
        X = base + factor * tol / math.sqrt(T) * torch.randn(T, 1, generator=g, dtype=torch.float64) * Q[:, -1]
    perm = torch.randperm(T, generator=g) if draw(st.booleans()) else torch.arange(T)
    return X[perm], kind


def _subsets(T: int, k: int, n: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [sorted(torch.randperm(T, generator=g)[:k].tolist()) for _ in range(n)]


def _own_rank(X: torch.Tensor, rows) -> int:
    """torch.linalg.matrix_rank of the rows at their own tolerance (the paper's rule, an independent oracle)."""
    S = X[list(rows)].double()
    return int(torch.linalg.matrix_rank(S, rtol=max(S.shape) * RULE.eps))


@FAST
@given(planted(), st.integers(0, 1000))
def test_no_subset_has_a_higher_rank_than_the_whole_set_rank_reported_at_its_size(case, seed):
    X, _ = case
    T, d = X.shape
    rule, stats = fixed_rule(X, RULE)
    assert rule == RULE  # the per-matrix rule, as given
    for k in range(1, T + 1):
        ceil = stats.ceiling(k, rule)
        assert stats.rank <= ceil  # the set as one matrix has a tolerance no smaller than a k-subset's least
        for rows in _subsets(T, k, 6, seed + k):
            rank = int(svd_rank(X[rows], rule)[0])
            assert rank == _own_rank(X, rows)
            assert rank <= ceil, (k, rows, rank, ceil)
    for route in ("lapack", "torch"):
        with kernels(route):
            for k in {1, min(T, d), max(1, min(T, d) - 1)}:
                res = subset_test(X, k, samples=64, seed=seed, rule=RULE)
                assert res.set_rank_ceiling == stats.ceiling(k, RULE)
                assert max(res.rank_histogram, default=0) <= res.set_rank_ceiling, (route, k, res.rank_histogram)
                assert (
                    f"{res.set_rank_ceiling}" in res.record()["reason"] or res.sampled or res.exact_basis != "set-rank"
                )
            sw = kruskal_sweep(X, samples=64, seed=seed, rule=RULE)
            for k, f in zip(sw.ks, sw.fractions, strict=False):
                if stats.ceiling(k, RULE) < k:
                    assert f == 0.0 and sw.exact_at(k)[0] == "fails"


@FAST
@given(planted(max_T=8, max_d=6), st.integers(0, 1000))
def test_a_witness_means_fails_and_every_decided_status_is_true(case, seed):
    X, _ = case
    T, _d = X.shape
    truth = exact_kruskal_rank(X, RULE)
    for route in ("lapack", "torch"):
        with kernels(route):
            for k in range(1, T + 1):
                res = subset_test(X, k, samples=64, seed=seed, rule=RULE)
                if res.witness is not None:
                    assert (res.exact_status, res.proven) == ("fails", True)
                    assert len(res.witness.indices) <= truth + 1
                    w = res.witness.indices  # dependent under the rule at its own tolerance
                    assert _own_rank(X, w) < len(w)
                assert res.proven == (res.exact_status != "undecided")
                if res.exact_status == "fails":
                    assert truth < k, (route, k, truth, res.reason)
                elif res.exact_status == "holds":
                    assert truth >= k, (route, k, truth, res.reason)
                assert res.scope == ("whole-set" if k >= T else "subsets")


@FAST
@given(planted(), st.integers(0, 1000))
def test_floor_estimate_ceiling_are_ordered_and_exact(case, seed):
    X, _ = case
    truth = exact_kruskal_rank(X, RULE)
    for route in ("lapack", "torch"):
        with kernels(route):
            sw = kruskal_sweep(X, samples=128, seed=seed, rule=RULE)
            assert sw.floor.value <= sw.estimate <= sw.ceiling.value
            assert sw.floor.value <= truth <= sw.ceiling.value
            for row in sw.rows():
                if row["exact_status"] == "fails":
                    assert truth < row["k"]
                elif row["exact_status"] == "holds":
                    assert truth >= row["k"]


def _statuses(X, seed):
    """The exact status at every k, from tests whose draws cover every subset (C(T, k) <= 20 here)."""
    out = []
    for k in range(1, X.shape[0] + 1):
        r = subset_test(X, k, samples=640, seed=seed, rule=RULE)
        out.append((r.exact_status, r.verdict if not r.sampled else None))
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    planted(max_T=6, max_d=5).filter(lambda c: c[1] != "near-tolerance"), st.integers(-300, 300), st.integers(0, 1000)
)
def test_exact_status_is_the_same_under_permutation_and_powers_of_ten(case, p, seed):
    """Planted structures with room around the tolerance: rounding from the scaling changes no decision."""
    X, _ = case
    T = X.shape[0]
    base = _statuses(X, seed)
    perm = torch.randperm(T, generator=torch.Generator().manual_seed(seed))
    assert _statuses(X[perm], seed) == base
    assert _statuses(X * 10.0**p, seed) == base


@FAST
@given(st.integers(2, 7), st.integers(0, 2**31 - 1), st.data())
def test_a_duplicated_row_is_a_two_row_witness(d, seed, data):
    T = data.draw(st.integers(2, d))  # T <= d: the duplicate is the only dependence
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(T, d, generator=g, dtype=torch.float64)
    i, j = data.draw(st.lists(st.integers(0, T - 1), min_size=2, max_size=2, unique=True))
    X[j] = X[i]
    pair = tuple(sorted((i, j)))
    for route in ("lapack", "torch"):
        with kernels(route):
            exact = subset_test(X, T, samples=10, seed=seed, rule=RULE)  # k = T: the exact path
            assert (exact.exact_status, exact.exact_basis) == (
                "fails",
                "set-rank",
            )  # rank T - 1 < k = T, and the pair shows how
            assert tuple(sorted(exact.witness.indices)) == pair
            sw = kruskal_sweep(X, samples=64, seed=seed, rule=RULE)  # every draw orders all T rows
            assert sw.witness is not None and tuple(sorted(sw.witness.indices)) == pair
            assert (sw.ceiling.kind, sw.ceiling.value) == ("witness", 1)
            sampled = subset_test(X, 2, samples=64, seed=seed, rule=RULE)
            if sampled.witness is not None:
                assert tuple(sorted(sampled.witness.indices)) == pair
