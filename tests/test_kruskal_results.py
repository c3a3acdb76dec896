"""The binomial interval and the result objects."""

from __future__ import annotations

import pytest

from mhaaudit.kruskal.results import Bound, Witness, clopper_pearson


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


def test_the_one_line_summary_never_calls_an_estimate_proven_against_its_proof(tmp_path):
    """An estimate that holds while a dependent subset found at another size proves fails reads
    ``holds (exact: fails, proven)`` in ``repr``, never ``holds (proven)``."""
    import numpy as np

    from mhaaudit import estimate_kruskal_rank

    X = np.random.default_rng(0).standard_normal((300, 64))
    X[3] = X[1] + X[2]  # a dependent triple: the draws at k = 3 almost never meet it
    np.save(tmp_path / "vectors.npy", X)
    result = estimate_kruskal_rank(tmp_path / "vectors.npy", k=[3, 64], n=3, samples=2000)
    a1 = result.tests[0]
    assert (a1.verdict, a1.exact_status) == ("holds", "fails")
    line = repr(result)
    assert "assumption_1 k = 3: holds (exact: fails, proven)" in line, line
    assert "general_position k = 64: fails (proven)" in line, line
    assert a1.summary_line().endswith("(exact: fails, proven)") and "holds (proven)" not in line
