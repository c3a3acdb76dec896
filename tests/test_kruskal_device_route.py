"""The batched (GPU) route of the Monte-Carlo test and the sweep, checked draw by draw on the CPU.

``MHAAUDIT_KERNELS=torch`` makes the CPU run the kernels a GPU runs (``numerics.certificates``,
batched over many blocks of draws); every decision and every k* must equal
``torch.linalg.matrix_rank`` and the CPU LAPACK route on the same draws. With CUDA present the
same is checked across devices.
"""

from __future__ import annotations

import pytest
import torch
from matrices import dominant, kstar_brute, matrix_rank_decisions, near_tolerance_matrix, structured

from mhaaudit.kruskal import draw_decisions, kruskal_sweep, sampling, subset_test
from mhaaudit.kruskal.sampling import DRAW_BLOCK, KERNELS_ENV, Gram, device_kernels
from mhaaudit.kruskal.sweep import draw_critical_sizes
from mhaaudit.numerics import RankRule, lapack
from mhaaudit.settings import device_name, resolve_device

needs_lapack = pytest.mark.skipif(not lapack.available(), reason="SciPy's Cython LAPACK API is not available")

CASES = [  # features, k: dependent draws (repeated rows, rank-deficient sets) and draws near the tolerance
    ("repeats32", lambda: structured(120, 16, 16, 2, dup=6), 12),
    ("repeats64", lambda: structured(120, 16, 16, 2, dup=6).double(), 12),
    ("near-tol32", lambda: near_tolerance_matrix(60, 12, 0), 12),
    ("near-tol64", lambda: near_tolerance_matrix(60, 12, 0).double(), 12),
    ("dominant32", lambda: dominant(150, 40, 3), 30),
]
RULES = [{}, {"rtol": 1e-3}, {"atol": 0.5}, {"rtol": 0.05, "atol": 0.1}]


def _same(a: dict, b: dict) -> bool:
    """Records equal but for ``exact_rechecks`` (how many draws the certificates left to
    eigenvalues or the SVD: work, which differs between the kernels; the decisions do not)."""
    return {**a, "exact_rechecks": 0} == {**b, "exact_rechecks": 0}


def _routes(monkeypatch, fn):
    """``fn()`` on the CPU LAPACK route and on the batched route (on the CPU)."""
    monkeypatch.delenv(KERNELS_ENV, raising=False)
    lapack_side = fn()
    monkeypatch.setenv(KERNELS_ENV, "torch")
    return lapack_side, fn()


def test_the_switch(monkeypatch):
    monkeypatch.delenv(KERNELS_ENV, raising=False)
    assert device_kernels(torch.device("cpu")) == (not lapack.available())
    assert device_kernels(torch.device("meta"))
    monkeypatch.setenv(KERNELS_ENV, "torch")
    assert device_kernels(torch.device("cpu"))
    g = Gram(torch.randn(10, 3, dtype=torch.float64), torch.device("cpu"))
    assert g.batched and g.cpu_entries is None and g.route == "full"


@needs_lapack
@pytest.mark.parametrize("name, make, k", CASES)
@pytest.mark.parametrize("rule_kw", RULES)
def test_fixed_size_decisions_draw_by_draw(monkeypatch, name, make, k, rule_kw):
    X = make()
    rule = RankRule.for_dtype(X.dtype, **rule_kw)
    (i0, f0), (i1, f1) = _routes(monkeypatch, lambda: draw_decisions(X, k, samples=260, seed=3, rule=rule))
    assert torch.equal(i0, i1)
    assert torch.equal(f1, matrix_rank_decisions(X, i1, rule))
    assert torch.equal(f0, f1)


@needs_lapack
@pytest.mark.parametrize("name, make, k", CASES)
def test_fixed_size_records_and_witnesses_are_equal(monkeypatch, name, make, k):
    X = make()
    rule = RankRule.for_dtype(X.dtype)
    for kw in ({}, {"stop_when_decided": True, "threshold": 0.999}):
        a, b = _routes(monkeypatch, lambda kw=kw: subset_test(X, k, samples=700, seed=5, rule=rule, device="cpu", **kw))
        assert _same(a.record(), b.record()) and a.rank_histogram == b.rank_histogram
        assert a.witness == b.witness and b.device == "cpu"


@needs_lapack
@pytest.mark.parametrize("name, make, k", CASES)
@pytest.mark.parametrize("rule_kw", RULES[:3])
def test_sweep_critical_sizes_draw_by_draw(monkeypatch, name, make, k, rule_kw):
    X = make()
    rule = RankRule.for_dtype(X.dtype, **rule_kw)
    K = min(X.shape)
    (o0, k0), (o1, k1) = _routes(monkeypatch, lambda: draw_critical_sizes(X, K, samples=130, seed=2, rule=rule))
    assert torch.equal(o0, o1) and torch.equal(k0, k1)
    for order, kstar in list(zip(o1, k1.tolist(), strict=False))[::4]:  # every 4th draw against matrix_rank
        assert kstar == kstar_brute(X, order, rule)


@needs_lapack
def test_sweep_results_are_equal(monkeypatch):
    X = dominant(200, 40, 7)
    rule = RankRule.for_dtype(X.dtype)
    a, b = _routes(monkeypatch, lambda: kruskal_sweep(X, samples=300, seed=1, rule=rule, device="cpu"))
    assert _same(a.summary(), b.summary()) and a.witness == b.witness and a.fractions == b.fractions


def test_batched_route_does_not_depend_on_blocks_per_call_or_the_gram_route(monkeypatch):
    """Many blocks per call, one block per call, Gram gathered or per draw: the same records, and a
    test that stops early stops after the same block."""
    monkeypatch.setenv(KERNELS_ENV, "torch")
    X = structured(120, 16, 16, 2, dup=6)
    rule = RankRule.for_dtype(X.dtype)

    def run():
        t = subset_test(
            X, 12, samples=900, seed=5, rule=rule, device="cpu", stop_when_decided=True, threshold=0.999
        ).record()
        return (
            t,
            subset_test(X, 12, samples=900, seed=5, rule=rule, device="cpu").record(),
            kruskal_sweep(X, samples=500, seed=5, rule=rule, device="cpu").summary(),
        )

    many = run()
    assert many[0]["samples"] < 900 and many[0]["samples"] % DRAW_BLOCK == 0 and many[0]["planned_samples"] == 900
    monkeypatch.setattr(sampling, "DEVICE_BATCH_BYTES", 1)  # one block per call
    assert run() == many
    monkeypatch.setattr(sampling, "FULL_GRAM_MAX_BYTES", 0)
    rows = run()
    assert all(r.pop("gram") == "per-draw" for r in rows) and all(m.pop("gram") == "full" for m in many)
    assert rows == many


def test_a_test_that_may_stop_early_decides_its_draws_in_growing_groups(monkeypatch):
    """The batched route's first call takes FIRST_BLOCKS blocks and each next twice as many when the test may stop
    early: a test settled by its first draws decides few more than it needs, with the records of one call."""
    from mhaaudit.kruskal import fixed

    monkeypatch.setenv(KERNELS_ENV, "torch")
    X = structured(120, 16, 16, 2, dup=6)
    rule = RankRule.for_dtype(X.dtype)
    sizes: list[int] = []
    real = fixed.decide_full_rank
    monkeypatch.setattr(fixed, "decide_full_rank", lambda G, *a, **kw: sizes.append(G.shape[0]) or real(G, *a, **kw))

    def run(samples, **kw):
        sizes.clear()
        return subset_test(X, 12, samples=samples, seed=5, rule=rule, device="cpu", **kw).record(), list(sizes)

    early = {"stop_when_decided": True, "threshold": 0.999}
    grown, grown_sizes = run(40 * DRAW_BLOCK, **early)
    assert grown_sizes[0] == fixed.FIRST_BLOCKS * DRAW_BLOCK and grown["planned_samples"] == 40 * DRAW_BLOCK
    assert sum(grown_sizes) < 2 * max(grown["samples"], fixed.FIRST_BLOCKS * DRAW_BLOCK)  # few more than it needed
    monkeypatch.setattr(fixed, "FIRST_BLOCKS", 3)
    three, three_sizes = run(40 * DRAW_BLOCK, **early)
    assert three == grown and three_sizes[: len(three_sizes) - 1] == [
        3 * DRAW_BLOCK * 2**i for i in range(len(three_sizes) - 1)
    ]
    monkeypatch.setattr(fixed, "FIRST_BLOCKS", 10**9)  # one call for every draw
    whole, whole_sizes = run(40 * DRAW_BLOCK, **early)
    assert whole == grown and whole_sizes == [40 * DRAW_BLOCK]
    monkeypatch.setattr(fixed, "FIRST_BLOCKS", 1)
    _, all_sizes = run(40 * DRAW_BLOCK, stop_when_decided=False)  # every draw made: one call, as before
    assert all_sizes == [40 * DRAW_BLOCK]


def test_rank_decisions_run_without_tf32(monkeypatch):
    from mhaaudit.kruskal import fixed, sweep
    from mhaaudit.numerics import tf32_is_off

    monkeypatch.setenv(KERNELS_ENV, "torch")
    seen = []
    real_fixed, real_sweep = fixed.decide_full_rank, sweep._critical_sizes

    def spy(real):
        def inner(*a, **kw):
            seen.append(tf32_is_off())
            return real(*a, **kw)

        return inner

    monkeypatch.setattr(fixed, "decide_full_rank", spy(real_fixed))
    monkeypatch.setattr(sweep, "_critical_sizes", spy(real_sweep))
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # a user's setting: TF32 allowed
    try:
        assert not tf32_is_off()
        X = dominant(100, 20, 1)
        subset_test(X, 15, samples=200, seed=0)
        kruskal_sweep(X, samples=100, seed=0)
        assert torch.get_float32_matmul_precision() == "high"  # restored on exit
    finally:
        torch.set_float32_matmul_precision(saved)
    assert seen and all(seen)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name, make, k", CASES)
def test_same_draws_and_decisions_on_cuda(name, make, k):
    X = make()
    rule = RankRule.for_dtype(X.dtype)
    i0, f0 = draw_decisions(X, k, samples=260, seed=3, rule=rule, device="cpu")
    i1, f1 = draw_decisions(X, k, samples=260, seed=3, rule=rule, device="cuda")
    assert torch.equal(i0, i1) and torch.equal(f0, f1)
    a = subset_test(X, k, samples=700, seed=5, rule=rule, device="cpu").record()
    b = subset_test(X, k, samples=700, seed=5, rule=rule, device="cuda").record()
    assert (a.pop("device"), b.pop("device")) == ("cpu", device_name(resolve_device("cuda"))) and _same(a, b)
    K = min(X.shape)
    o0, k0 = draw_critical_sizes(X, K, samples=130, seed=2, rule=rule, device="cpu")
    o1, k1 = draw_critical_sizes(X, K, samples=130, seed=2, rule=rule, device="cuda")
    assert torch.equal(o0, o1) and torch.equal(k0, k1)
