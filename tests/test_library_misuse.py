"""The public functions given what they cannot use: a wrong type, an empty or 0-d/1-d tensor, a dtype the
rank rule has no meaning for, a meta or sparse tensor, an index outside the tokens. Each is refused with one
of the project's typed exceptions (a ValueError or OSError), whose message names the parameter, never a
torch RuntimeError, an AttributeError or a TypeError from deep inside."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest
import torch

import mhaaudit
from mhaaudit import (
    RandomAttention,
    RankRule,
    assumption_1,
    assumption_2,
    babel_floor,
    check_features,
    context_ranks,
    draw_decisions,
    exact_kruskal_rank,
    general_position,
    kruskal_sweep,
    reduce_tokens,
    set_stats,
    subset_test,
    svd_rank,
)
from mhaaudit.errors import InputError, MhaauditError
from mhaaudit.estimation import kruskal_request

RULE = RankRule()
X = torch.randn(12, 6, generator=torch.Generator().manual_seed(0))
TOKENS = torch.randn(20, 3, 8, generator=torch.Generator().manual_seed(1))
META = torch.empty(12, 6, device="meta")
SPARSE = X.to_sparse()

# (case id, a call, a piece of the message)
CASES = [
    # the Monte-Carlo estimator and its bounds: a meta tensor has no values, a sparse one is no matrix of them
    ("subset_test-meta", lambda: subset_test(META, 3, samples=10, rule=RULE), "meta device"),
    ("subset_test-sparse", lambda: subset_test(SPARSE, 3, samples=10, rule=RULE), "not a dense tensor"),
    ("kruskal_sweep-meta", lambda: kruskal_sweep(META, samples=10, rule=RULE), "meta device"),
    ("exact_kruskal_rank-sparse", lambda: exact_kruskal_rank(SPARSE, RULE), "not a dense tensor"),
    ("babel_floor-meta", lambda: babel_floor(META, RULE), "meta device"),
    ("set_stats-sparse", lambda: set_stats(SPARSE, RULE), "not a dense tensor"),
    ("draw_decisions-meta", lambda: draw_decisions(META, 3, samples=10, rule=RULE), "meta device"),
    ("assumption_1-meta", lambda: assumption_1(META, 3, samples=10), "meta device"),
    ("subset_test-a-list", lambda: subset_test([[1.0, 2.0]], 1, samples=10), "not list"),
    # general position reads the shape first
    ("general_position-1d", lambda: general_position(torch.randn(6), samples=10), "T x d matrix"),
    ("general_position-3d", lambda: general_position(TOKENS, samples=10), "shape (20, 3, 8)"),
    ("general_position-none", lambda: general_position(None, samples=10), "NoneType"),
    # the SVD rank of small matrices
    ("svd_rank-a-list", lambda: svd_rank([[1.0]], RULE), "not list"),
    ("svd_rank-empty", lambda: svd_rank(torch.empty(0, 6), RULE), "at least one entry"),
    ("svd_rank-no-columns", lambda: svd_rank(torch.empty(4, 0), RULE), "at least one entry"),
    ("svd_rank-complex", lambda: svd_rank(X.to(torch.complex64), RULE), "complex"),
    ("svd_rank-meta", lambda: svd_rank(META, RULE), "meta"),
    ("svd_rank-sparse", lambda: svd_rank(SPARSE, RULE), "sparse"),
    # context matrices (Assumption 2)
    ("assumption_2-1d", lambda: assumption_2(torch.randn(6)), "(T, n, d)"),
    ("assumption_2-0d", lambda: assumption_2(torch.tensor(1.0)), "(T, n, d)"),
    ("assumption_2-bool", lambda: assumption_2(TOKENS > 0), "got bool"),
    ("assumption_2-float8", lambda: assumption_2(TOKENS.to(torch.float8_e4m3fn)), "float8_e4m3fn"),
    ("assumption_2-complex", lambda: assumption_2(TOKENS.to(torch.complex64)), "complex64"),
    ("assumption_2-meta", lambda: assumption_2(TOKENS.to("meta")), "meta device"),
    ("assumption_2-n-empty", lambda: assumption_2(torch.randn(4, 0, 8)), "no empty dimension"),
    ("assumption_2-batch-0", lambda: assumption_2(TOKENS, batch_size=0), "batch_size must be at least 1"),
    ("assumption_2-none", lambda: assumption_2(None), "NoneType"),
    ("context_ranks-bool", lambda: context_ranks(TOKENS > 0, RULE), "got bool"),
    # token batches reduced to a feature set
    ("reduce_tokens-query-outside", lambda: reduce_tokens(TOKENS, 5), "query_index 5 is outside the n = 3"),
    ("reduce_tokens-query-text", lambda: reduce_tokens(TOKENS, "first"), "query_index must be an integer"),
    ("reduce_tokens-int", lambda: reduce_tokens(TOKENS.long(), 0), "got int64"),
    ("reduce_tokens-complex", lambda: reduce_tokens(TOKENS.to(torch.complex64), 0), "complex64"),
    ("reduce_tokens-meta", lambda: reduce_tokens(TOKENS.to("meta"), 0), "meta device"),
    ("reduce_tokens-batch-0", lambda: reduce_tokens(TOKENS, 0, batch_size=0), "batch_size must be at least 1"),
    ("reduce_tokens-numpy", lambda: reduce_tokens(TOKENS.numpy(), 0), "ndarray"),
    ("reduce_tokens-n-empty", lambda: reduce_tokens(torch.randn(4, 0, 8), 0), "no empty dimension"),
    # a feature set that is not one, or whose fields disagree
    ("check_features-a-string", lambda: check_features("features", samples=10), "must be a FeatureSet"),
    (  # some context arrays and not others (features reduced without contexts have none, and are checked)
        "check_features-part-context",
        lambda: check_features(_fs(context={"context_rank": torch.zeros(5, dtype=torch.long)}), samples=10),
        "no tensor 'context_sigma_min'",
    ),
    ("check_features-n-text", lambda: check_features(_fs(n="3"), samples=10), "n = '3'"),
    ("check_features-a3-shape", lambda: check_features(_fs(a3=torch.randn(5, 8)), samples=10), "a3 has shape"),
    ("check_features-d", lambda: check_features(_fs(d=99), samples=10), "d = 99"),
    ("check_features-queries-list", lambda: check_features(_fs(queries=[[0.0]]), samples=10), "not a tensor"),
    # the random attention head
    ("RandomAttention-d-text", lambda: RandomAttention("wide"), "d must be an integer"),
    ("RandomAttention-int-tokens", lambda: RandomAttention(8)(torch.ones(2, 3, 8, dtype=torch.long)), "int64"),
    ("RandomAttention-float64-tokens", lambda: RandomAttention(8)(torch.randn(2, 3, 8).double()), "float64"),
    ("RandomAttention-a-list", lambda: RandomAttention(8)([[0.0] * 8]), "got list"),
    # the rank rule: a negative or NaN tolerance would count every singular value, or none, without a word
    ("RankRule-negative-rtol", lambda: RankRule(rtol=-1), "rtol must be a finite number >= 0, got -1"),
    ("RankRule-nan-atol", lambda: RankRule(atol=float("nan")), "atol must be a number >= 0"),
    ("RankRule-text-rtol", lambda: RankRule(rtol="small"), "rtol must be a finite number >= 0"),
    ("RankRule-zero-eps", lambda: RankRule(eps=0.0), "eps must be a finite number > 0"),
    ("RankRule-inf-rtol", lambda: RankRule(rtol=float("inf")), "rtol must be a finite number >= 0"),
    ("RankRule-huge-atol", lambda: RankRule(atol=10**400), "atol must be a number >= 0, at most float64's largest"),
    ("RankRule-for_dtype-huge", lambda: RankRule.for_dtype("float32", rtol=10**400), "rtol must be a finite number"),
    ("RankRule-for_dtype-inf", lambda: RankRule.for_dtype("float32", atol=float("inf")), "finite"),
    # the facades' arguments
    ("audit-a-number", lambda: mhaaudit.audit(123), "model must be a name"),
    ("audit-none", lambda: mhaaudit.audit(None), "model must be a name"),
    ("estimate-a-tensor", lambda: mhaaudit.estimate_kruskal_rank(X, samples=10), "features must be the path"),
    ("audit_series-a-number", lambda: mhaaudit.audit_series("m", checkpoints=3), "checkpoints 3"),
    ("capture_features-layer-text", lambda: mhaaudit.capture_features("m", layer="top"), "layer must be an integer"),
    # a yes or no is never read by its truthiness: the string "no" is true in Python
    ("ModelRequest-trust-no", lambda: mhaaudit.ModelRequest("m", trust_remote_code="no"), "trust_remote_code must be"),
    ("DataRequest-convert-0", lambda: mhaaudit.DataRequest(convert_rgb=0), "convert_rgb must be True or False"),
    ("Settings-stop-no", lambda: mhaaudit.Settings.resolve(stop_when_decided="no"), "stop_when_decided must be"),
    ("capacity-shared-no", lambda: mhaaudit.capacity_audit("m", shared_context="no"), "shared_context must be"),
    ("audit-sweep-yes", lambda: mhaaudit.audit("m", sweep="yes"), "sweep must be True or False, got 'yes'"),
    ("check_features-sweep-1", lambda: check_features(_fs(), sweep=1), "sweep must be True or False, got 1"),
    ("estimate-sweep-no", lambda: mhaaudit.estimate_kruskal_rank("x.npy", sweep="no"), "sweep must be True or False"),
    ("subset_test-stop-no", lambda: subset_test(X, 2, samples=10, stop_when_decided="no"), "stop_when_decided must"),
    # a bound's sizes: a row block below 1 computed no coherence at all, and the floor read every size as proven
    ("babel_floor-row_block-negative", lambda: babel_floor(X, RULE, row_block=-1), "row_block must be at least 1"),
    ("babel_floor-row_block-0", lambda: babel_floor(X, RULE, row_block=0), "row_block must be at least 1"),
    ("babel_floor-kmax-negative", lambda: babel_floor(X, RULE, kmax=-1), "kmax must be at least 1"),
    ("babel_floor-rule-none-text", lambda: babel_floor(X, "x"), "rule 'x': not a RankRule"),
    ("set_stats-rule-text", lambda: set_stats(X, "x"), "rule 'x': not a RankRule"),
    ("exact_kruskal_rank-rule-text", lambda: exact_kruskal_rank(X, "x"), "rule 'x': not a RankRule"),
    ("exact_kruskal_rank-max-0", lambda: exact_kruskal_rank(X, max_subsets=0), "max_subsets must be at least 1"),
    ("exact_kruskal_rank-max-text", lambda: exact_kruskal_rank(X, max_subsets="a"), "max_subsets must be an integer"),
    # a draws' seed is a whole number from 0 to 2^63 - 1, as Settings takes it: not taken modulo 2^64, nor cut
    ("subset_test-seed-fraction", lambda: subset_test(X, 2, samples=10, seed=1.5), "seed must be an integer"),
    ("subset_test-seed-negative", lambda: subset_test(X, 2, samples=10, seed=-1), "seed must be at least 0"),
    ("subset_test-seed-huge", lambda: subset_test(X, 2, samples=10, seed=2**64), "seed must be at most"),
    ("subset_test-seed-bool", lambda: subset_test(X, 2, samples=10, seed=True), "seed must be an integer"),
    ("kruskal_sweep-seed-negative", lambda: kruskal_sweep(X, samples=10, seed=-5), "seed must be at least 0"),
    ("draw_decisions-seed-none", lambda: draw_decisions(X, 2, samples=3, seed=None), "seed must be an integer"),
    ("draw_decisions-rule-text", lambda: draw_decisions(X, 2, samples=3, rule="x"), "rule 'x': not a RankRule"),
    # the other keywords of the Monte-Carlo tests
    ("kruskal_sweep-kmax-0", lambda: kruskal_sweep(X, samples=10, kmax=0), "kmax must be at least 1"),
    ("kruskal_sweep-kmax-fraction", lambda: kruskal_sweep(X, samples=10, kmax=4.5), "kmax must be an integer"),
    (
        "kruskal_sweep-progress-text",
        lambda: kruskal_sweep(X, samples=10, progress="yes"),
        "progress must be a callable",
    ),
    ("kruskal_sweep-stats-int", lambda: kruskal_sweep(X, samples=10, stats=5), "stats must be the SetStats"),
    ("subset_test-histogram-text", lambda: subset_test(X, 2, samples=10, histogram_limit="a"), "histogram_limit must"),
    ("subset_test-histogram-negative", lambda: subset_test(X, 2, samples=10, histogram_limit=-1), "at least 0"),
    ("subset_test-stats-int", lambda: subset_test(X, 2, samples=10, stats=5), "stats must be the SetStats"),
    # sizes: one, given as a number or a string of digits, or several; never a string's characters
    ("estimate-k-fraction", lambda: mhaaudit.estimate_kruskal_rank("x.npy", k=3.5), "k must be an integer, got 3.5"),
    ("estimate-k-list-text", lambda: mhaaudit.estimate_kruskal_rank("x.npy", k="3,16"), "k must be an integer"),
    # where the examples come from: a path, a name or None (an AttributeError of a number's .strip())
    ("audit-data-number", lambda: mhaaudit.audit("m", data=5), "data must be a path, a data set's name or None"),
    ("DataRequest-split-empty", lambda: mhaaudit.DataRequest(split=" "), "split must name a split"),
    ("DataRequest-split-number", lambda: mhaaudit.DataRequest(split=3), "split must name a split, got 3"),
]


def _fs(**change):
    return dataclasses.replace(reduce_tokens(TOKENS, 0), **change)


@pytest.mark.parametrize("case, call, says", CASES, ids=[c[0] for c in CASES])
def test_misuse_is_a_typed_error_that_says_what(case, call, says):
    with pytest.raises(MhaauditError) as caught:
        call()
    assert isinstance(caught.value, (ValueError, OSError))
    assert says.lower() in str(caught.value).lower(), str(caught.value)


def test_every_case_has_its_own_id():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


def test_what_is_well_formed_still_works():
    """The checks that refuse the cases above take every real floating dtype and a non-contiguous view."""
    view = torch.randn(6, 12, generator=torch.Generator().manual_seed(2)).t()  # T x d, not contiguous
    assert subset_test(view, 3, samples=10, rule=RULE).fraction == 1.0
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        fs = reduce_tokens(TOKENS.to(dtype), -1)
        assert fs.dtype == dtype and fs.query_index == 2
        assert assumption_2(TOKENS.to(dtype)).verdict == "holds"
    # integer context matrices are read in float64, as they always were
    ints = (TOKENS * 4).round().long()
    assert assumption_2(ints) == assumption_2(ints.double())
    pairs = zip(context_ranks(ints, RULE), context_ranks(ints.double(), RULE), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    # a hand-made feature set with NumPy integers, and a query counted from the end, is checked as it ran before
    import numpy as np

    fs = _fs(n=np.int64(3), d=np.int64(8), query_index=-1)
    assert check_features(fs, samples=10)[:2] == check_features(_fs(), samples=10)[:2]  # all but the timings
    # a rule's tolerances are read as floats; one rescaled past float64's range stays infinite, as it means
    assert RankRule(rtol=1, atol=0).rtol == 1.0 and RankRule(rtol=1).tol(2.0, 3, 3) == 2.0
    assert RankRule(atol=1e300).in_units(-100).atol == float("inf")
    # any integer seeds the random head (it is taken modulo 2^64), as before
    assert RandomAttention(8, seed=-3).W_Q.shape == (8, 8)
    # a rule left out is the paper's for the data's dtype; a size or seed given as NumPy integers or digits is read
    dependent = torch.cat([X, X[:1] + X[1:2]]).double()  # a dependent triple: no floor of 3 is a proof
    assert babel_floor(dependent).value == babel_floor(dependent, RankRule.for_dtype("float64")).value < 3
    assert babel_floor(dependent, kmax=np.int64(4), row_block=3) == babel_floor(dependent, kmax=4)
    assert set_stats(X).rank == set_stats(X, RankRule.for_dtype(X.dtype)).rank == 6
    assert subset_test(X, 2, samples=10, seed="7").seed == subset_test(X, 2, samples=10, seed=np.int64(7)).seed == 7
    assert kruskal_sweep(X, samples=10, kmax="3").fractions == kruskal_sweep(X, samples=10, kmax=3).fractions
    assert mhaaudit.DataRequest(data=pathlib.Path("some/folder")).data == str(pathlib.Path("some/folder"))
    assert draw_decisions(X, "2", samples="3")[0].shape == draw_decisions(X, 2.0, samples=3)[0].shape == (3, 2)
    assert kruskal_request(k=torch.tensor(12)).ks == (12,) and kruskal_request(k=torch.tensor([2, 3])).ks == (2, 3)
    assert kruskal_request(k="16").ks == (16,) and kruskal_request(k=np.array([3, 12])).ks == (3, 12)
    # a layer given as text is the block it names
    from mhaaudit.probes import plan_probes

    assert plan_probes("image", layer="2") == plan_probes("image", layer=2)
    rank = svd_rank(X.to(torch.float8_e4m3fn), RULE)[0]
    assert int(rank) == 6
    with pytest.raises(InputError, match="NaN or infinite"):
        svd_rank(torch.full((2, 2), float("nan")), RULE)
