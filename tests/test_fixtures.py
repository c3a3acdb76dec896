"""The shared files in ``fixtures/``: the Kruskal-rank tools agree with every matrix's stated facts.

Each matrix in ``fixtures/matrices`` has an exact Kruskal rank that ``fixtures/make_fixtures.py``
checked by brute force before writing it (its docstring says how). Here the library must reach
the same facts through its public API: ``exact_kruskal_rank`` equals the rank; ``subset_test``
finds every draw independent up to the rank, proves the dependence just above it (a dependent
subset found, or a ceiling) whenever dependent subsets are common enough to be drawn, and knows
without sampling that more than min(T, d) rows are dependent; ``set_stats`` gives the whole set's
rank and zero rows, and never a ceiling below a size known to be independent.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from conftest import FIXTURES, fixture_module

from mhaaudit import RankRule, exact_kruskal_rank, set_stats, subset_test

INDEX = json.loads((FIXTURES / "matrices" / "index.json").read_text())
ENTRIES = {e["name"]: e for e in INDEX["matrices"]}
NAMES = sorted(ENTRIES)
DRAWS_PER_DEPENDENT = 30  # enough draws that a dependent subset is all but certain to come up
MAX_DRAWS = 20_000


def load(name: str) -> tuple[dict, np.ndarray]:
    entry = ENTRIES[name]
    return entry, np.load(FIXTURES / "matrices" / entry["file"])


def rule_for(entry: dict) -> RankRule:
    return RankRule.for_dtype(entry["dtype"])


def dependent(X: np.ndarray, rows, entry: dict) -> bool:
    """The tolerance rule of the index, applied with torch.linalg.matrix_rank (an independent oracle)."""
    sub = torch.from_numpy(np.asarray(X, dtype=np.float64)[list(rows)])
    k, d = sub.shape
    eps = INDEX["tolerance"]["eps"][entry["dtype"]]
    return int(torch.linalg.matrix_rank(sub, rtol=max(k, d) * eps)) < k


def test_the_fixtures_are_small_and_cover_the_planted_structures():
    total = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert total < 1_000_000, f"fixtures/ holds {total} bytes"
    ranks = {e["kruskal_rank"] for e in ENTRIES.values()}
    assert {0, 1} <= ranks and any(e["kruskal_rank"] == min(e["T"], e["d"]) for e in ENTRIES.values())
    assert {e["near_tolerance"]["side"] for e in ENTRIES.values() if "near_tolerance" in e} == {"above", "below"}
    assert {e["dtype"] for e in ENTRIES.values()} == {"float32", "float64"}


def test_the_data_files_are_what_the_script_writes():
    """``make_fixtures.py --check`` for the matrices, the index and the model configurations."""
    make = fixture_module("make_fixtures")
    files = {**make.model_files(), **make.matrix_files()}
    stale = [rel for rel, data in files.items() if (FIXTURES / rel).read_bytes() != data]
    assert not stale, f"regenerate with python fixtures/make_fixtures.py: {stale}"


@pytest.mark.parametrize("name", NAMES)
def test_index_describes_the_file(name):
    entry, X = load(name)
    assert X.shape == (entry["T"], entry["d"]) and str(X.dtype) == entry["dtype"]
    assert int((np.abs(X).sum(1) == 0).sum()) == entry["zero_rows"]
    r = entry["kruskal_rank"]
    assert 0 <= r <= min(entry["T"], entry["d"])
    if r < min(entry["T"], entry["d"]):
        assert len(entry["witness"]) <= r + 1 and dependent(X, entry["witness"], entry)
    near = entry.get("near_tolerance")
    if near:
        S = torch.from_numpy(X[near["subset"]].astype(np.float64))
        s = torch.linalg.svdvals(S)
        ratio = float(s[-1] / (s[0] * max(S.shape) * INDEX["tolerance"]["eps"][entry["dtype"]]))
        assert ratio == pytest.approx(near["sigma_min_over_tol"], abs=1e-5)
        assert (ratio > 1) == (near["side"] == "above") and abs(ratio - 1) < 0.01
        assert dependent(X, near["subset"], entry) == (near["side"] == "below")


@pytest.mark.parametrize("name", NAMES)
def test_exact_kruskal_rank_agrees(name):
    entry, X = load(name)
    assert exact_kruskal_rank(X, rule=rule_for(entry)) == entry["kruskal_rank"]


@pytest.mark.parametrize("name", NAMES)
def test_subset_test_holds_at_fraction_one_up_to_the_rank(name):
    entry, X = load(name)
    for k in range(1, entry["kruskal_rank"] + 1):
        res = subset_test(X, k, samples=200, seed=0, rule=rule_for(entry))
        assert res.verdict == "holds", (k, res.reason)
        assert res.fraction == 1.0 and res.satisfied == res.samples and res.witness is None, (k, res.reason)


@pytest.mark.parametrize(
    "name", [n for n in NAMES if ENTRIES[n]["kruskal_rank"] < min(ENTRIES[n]["T"], ENTRIES[n]["d"])]
)
def test_subset_test_proves_the_dependence_above_the_rank(name):
    entry, X = load(name)
    k = entry["kruskal_rank"] + 1
    share = entry["dependent_above"] / entry["subsets_above"]
    samples = math.ceil(DRAWS_PER_DEPENDENT / share)
    if samples > MAX_DRAWS:  # too rare to be drawn: whatever the estimate says, it claims no proof
        res = subset_test(X, k, samples=2000, seed=0, rule=rule_for(entry))
        assert res.proven == (res.witness is not None), res.reason
        if res.witness is None:
            assert res.verdict == "holds" and "not a proof" in res.reason
        return
    res = subset_test(X, k, samples=samples, threshold=1.0, seed=0, rule=rule_for(entry))
    assert res.verdict == "fails", res.reason
    assert res.witness is not None or res.proven, res.reason
    if res.witness is not None:
        assert len(res.witness.indices) <= k and dependent(X, res.witness.indices, entry)
        if entry["dependent_above"] == 1:  # the planted subset is the only dependent one
            assert sorted(res.witness.indices) == sorted(entry["witness"])


@pytest.mark.parametrize("name", NAMES)
def test_subset_test_knows_more_than_min_t_d_rows_are_dependent(name):
    entry, X = load(name)
    k = min(entry["T"], entry["d"]) + 1
    res = subset_test(X, k, samples=50, seed=0, rule=rule_for(entry))
    assert res.verdict == "fails" and res.proven and not res.sampled and res.samples == 0


@pytest.mark.parametrize("name", NAMES)
def test_set_stats_agrees(name):
    entry, X = load(name)
    rule = rule_for(entry)
    st = set_stats(torch.from_numpy(X), rule)
    assert (st.T, st.d) == (entry["T"], entry["d"])
    assert st.rank == entry["set_rank"] and st.zero_rows == entry["zero_rows"]
    s = torch.linalg.svdvals(torch.from_numpy(X.astype(np.float64)))
    assert np.allclose(st.singular_values, s.numpy(), rtol=0, atol=st.sv_error + 1e-12 * float(s[0]))
    for k in range(1, entry["kruskal_rank"] + 1):  # a ceiling is a proof: never below a size known independent
        assert st.ceiling(k, rule) >= k, k
