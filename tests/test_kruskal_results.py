"""The binomial interval and the result objects."""

from __future__ import annotations

import pytest

from mhaaudit.kruskal.results import Bound, KruskalInputs, KruskalResult, SubsetTest, Witness, clopper_pearson
from mhaaudit.numerics import RankRule


def test_clopper_pearson_known_values():
    lo, hi = clopper_pearson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 10), rel=1e-9)
    lo, hi = clopper_pearson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** (1 / 10), rel=1e-9)
    lo, hi = clopper_pearson(50, 100)
    assert lo < 0.5 < hi and hi - lo < 0.21


def test_clopper_pearson_without_trials_says_nothing():
    assert clopper_pearson(0, 0) == (0.0, 1.0)


def test_witness_and_bound_records():
    w = Witness((3, 7), (2.0, 0.0), 1e-6, 1)
    assert w.as_dict() == {"indices": [3, 7], "singular_values": [2.0, 0.0], "tol": 1e-6, "rank": 1}
    b = Bound(4, "babel", "every 4 rows are independent")
    assert b.as_dict() == {"value": 4, "kind": "babel", "proves": "every 4 rows are independent"}


def _test(verdict: str, exact: str, basis: str, witness: Witness | None = None) -> SubsetTest:
    return SubsetTest(
        check="kruskal",
        k=3,
        T=40,
        d=8,
        samples=300,
        satisfied=299 if verdict == "holds" else 100,
        fraction=299 / 300 if verdict == "holds" else 1 / 3,
        ci_low=0.0,
        ci_high=1.0,
        threshold=0.99,
        verdict=verdict,
        reason="",
        rule=RankRule(),
        seed=0,
        device="cpu",
        witness=witness,
        exact_status=exact,
        exact_basis=basis,
    )


def test_repr_never_calls_an_estimate_proven_when_the_proof_says_otherwise():
    """A test whose draws hold under the paper's rule while a witness proves it fails: its repr, and the repr of
    the result holding it, say the estimate and the proof apart, never "holds (proven)"."""
    w = Witness((3, 5), (1.0, 0.0), 1e-14, 1)
    mixed = _test("holds", "fails", "witness", w)
    proven = _test("fails", "fails", "witness", w)
    plain = _test("holds", "undecided", "none")
    assert "holds (estimate; exact: fails, witness)" in repr(mixed) and "(proven)" not in repr(mixed)
    assert "fails (proven)" in repr(proven)
    assert "holds," in repr(plain) and "proven" not in repr(plain)
    inputs = KruskalInputs("x.npy", 40, 8, None, "float32")
    result = KruskalResult(inputs, (mixed, proven, plain), None, RankRule(), 0, "cpu", 0.99, 300, 8)
    line = repr(result)
    assert "holds (proven)" not in line
    assert line.count("holds (estimate; exact: fails, witness)") == 1 and line.count("fails (proven)") == 1


def test_the_one_line_summary_never_calls_an_estimate_proven_against_its_proof(tmp_path):
    """An estimate that holds while a dependent subset found at another size proves fails reads
    ``holds (estimate; exact: fails, witness)`` in ``repr``, never ``holds (proven)``."""
    import numpy as np

    from mhaaudit import estimate_kruskal_rank

    X = np.random.default_rng(0).standard_normal((300, 64))
    X[3] = X[1] + X[2]  # a dependent triple: the draws at k = 3 almost never meet it
    np.save(tmp_path / "vectors.npy", X)
    result = estimate_kruskal_rank(tmp_path / "vectors.npy", k=[3, 64], n=3, samples=2000)
    a1 = result.tests[0]
    assert (a1.verdict, a1.exact_status) == ("holds", "fails")
    line = repr(result)
    assert "assumption_1 k = 3: holds (estimate; exact: fails, witness)" in line, line
    assert "general_position k = 64: fails (proven)" in line, line
    assert "holds (proven)" not in line and "holds (proven)" not in repr(a1)
