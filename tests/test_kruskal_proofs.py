"""One test's proof decides the others' exact statuses (``mhaaudit.kruskal.proofs``), checked against brute force."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from matrices import structured

from mhaaudit import estimate_kruskal_rank
from mhaaudit.kruskal import exact_kruskal_rank, kruskal_sweep, subset_test
from mhaaudit.kruskal.proofs import shared_proofs
from mhaaudit.numerics import RankRule


def test_a_witness_found_at_one_size_decides_the_smaller_sizes_it_fits(tmp_path):
    """The python guide's vectors: General Position (k = 64) finds the dependent triple; Assumption 1 at k = 3,
    whose draws all missed it, is then proven to fail too, whichever order the sizes are given in."""
    X = np.random.default_rng(0).standard_normal((300, 64))
    X[3] = X[1] + X[2]
    np.save(tmp_path / "v.npy", X)
    for ks in ([3, 64], [64, 3]):
        r = estimate_kruskal_rank(str(tmp_path / "v.npy"), k=ks, n=3, samples=2000)
        a1 = next(t for t in r.tests if t.k == 3)
        assert a1.verdict == "holds" and a1.satisfied == a1.samples  # no draw found it: the estimate stands
        assert (a1.exact_status, a1.exact_basis) == ("fails", "witness") and a1.witness.indices == (1, 2, 3)
        assert "but the dependent 3-subset found by the test at k = 64 is one of them" in a1.reason


def test_the_sweep_s_floor_decides_a_test_below_it_and_a_test_s_witness_lowers_its_ceiling():
    g = torch.Generator().manual_seed(4)
    X = torch.linalg.qr(torch.randn(64, 64, generator=g, dtype=torch.float64))[0][:40].float()  # orthonormal rows
    X = torch.cat([X, (X[0] + X[1])[None]])  # and one row in the span of two: the Kruskal rank is 2
    sweep = kruskal_sweep(X, kmax=2, samples=30, seed=0)  # up to 2: no witness, nothing known above
    test = subset_test(X, 2, samples=30, seed=0)
    assert test.exact_status == "undecided" and sweep.floor.value == 2 and sweep.ceiling.value == 41
    (decided,), _ = shared_proofs([test], sweep, X)
    assert (decided.exact_status, decided.exact_basis) == ("holds", "certified-floor")
    assert "(the sweep's certified floor, a proof), so every 2 rows are" in decided.reason
    # a test at k = 1 proves itself from the smallest row norm (it said "so every 1 rows are" from the sweep's floor)
    (one,), _ = shared_proofs([subset_test(X, 1, samples=30, seed=0)], sweep, X)
    assert one.exact_status == "holds" and "every row is independent (non-zero)" in one.reason
    assert "every 1 rows" not in one.reason
    whole = subset_test(X, 41, samples=30, seed=0)  # k = T: the whole set, decided exactly, and its triple shown
    assert whole.exact_status == "fails" and len(whole.witness.indices) == 3
    _, capped = shared_proofs([whole], sweep, X)
    assert (capped.ceiling.value, capped.ceiling.kind) == (2, "witness") and capped.witness == whole.witness
    assert capped.exact_kruskal_rank == 2 and capped.exact_at(3) == ("fails", "witness")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    T=st.integers(3, 8),
    d=st.integers(2, 6),
    rank=st.integers(1, 6),
    dup=st.integers(0, 2),
    seed=st.integers(0, 10_000),
)
def test_shared_proofs_never_claim_what_brute_force_denies(T, d, rank, dup, seed):
    X = structured(T, d, min(rank, d), seed, min(dup, T // 2))
    rule = RankRule.for_dtype(X.dtype)
    exact = exact_kruskal_rank(X, rule)
    tests = [subset_test(X, k, samples=20, seed=seed, rule=rule) for k in range(1, min(T, d) + 1)]
    decided, sweep = shared_proofs(tests, kruskal_sweep(X, samples=20, seed=seed, rule=rule), X)
    for t in decided:
        if t.exact_status == "holds":
            assert exact >= t.k
        elif t.exact_status == "fails":
            assert exact < t.k
    assert sweep.floor.value <= exact <= sweep.ceiling.value


def test_a_witness_is_carried_only_where_a_superset_is_dependent_and_a_floor_only_to_decided_draws():
    """A witness is carried to a larger size through one superset decided on its own rows: a witness whose
    supersets are independent (here a forged one) is not carried. A test with no draw decided, or a dependent
    draw unproven, takes no floor."""
    from dataclasses import replace

    from mhaaudit.kruskal.results import Witness

    X = torch.randn(40, 64, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    X[5] = X[0] + X[1]  # a true triple (0, 1, 5)
    sweep = kruskal_sweep(X, kmax=2, samples=20, seed=0)
    test5 = subset_test(X, 5, samples=20, seed=0)
    assert sweep.floor.value == 2 and test5.exact_status == "undecided" and test5.witness is None
    forged = Witness((2, 3, 4), (2.0, 1.0, 1e-20), 1e-3, 2)  # rows 2, 3, 4 are independent
    true = Witness((0, 1, 5), (2.0, 1.0, 1e-20), 1e-3, 2)
    for w, carried in ((forged, False), (true, True)):
        other = replace(test5, k=3, exact_status="fails", exact_basis="witness", witness=w)
        (t5, _), _ = shared_proofs([test5, other], None, X)
        assert (t5.exact_status == "fails") == carried and (t5.witness is w) == carried
        if carried:
            assert "lies inside a 5-subset that is dependent too" in t5.reason
    test2 = subset_test(X, 2, samples=20, seed=0)
    for left_open in (
        replace(test2, verdict="unavailable", samples=0, satisfied=0, fraction=0.0),
        replace(test2, satisfied=test2.samples - 1, fraction=(test2.samples - 1) / test2.samples),
    ):
        (t,), _ = shared_proofs([left_open], sweep, X)
        assert t.exact_status == "undecided"
    (t,), _ = shared_proofs([test2], sweep, X)
    assert t.exact_status == "holds"
