"""Floor, ceiling and brute force: the bounds that hold for every subset."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matrices import SCALES32, SCALES64, dominant, structured
from threadranks import as_ranks

from mhaaudit.kruskal import babel_floor, exact_kruskal_rank, set_stats
from mhaaudit.numerics import RankRule


def test_exact_kruskal_rank_small_cases():
    eye = torch.eye(4)
    assert exact_kruskal_rank(eye) == 4
    X = torch.cat([eye, eye[:1]])  # a duplicated row: two equal rows are dependent
    assert exact_kruskal_rank(X) == 1
    X = torch.cat([eye, torch.ones(1, 4)])  # 5 vectors in general position in R^4
    assert exact_kruskal_rank(X) == 4
    X = torch.tensor([[1.0, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]])  # rows 0,1,2 dependent
    assert exact_kruskal_rank(X) == 2


def test_babel_floor_is_a_proof_on_orthogonal_rows():
    X = torch.eye(6, dtype=torch.float64)
    fl = babel_floor(X, RankRule.for_dtype(torch.float64))
    assert fl.value == 6
    X = torch.cat([torch.eye(3), torch.eye(3)[:1]])  # coherence 1: nothing beyond 1 provable
    assert babel_floor(X, RankRule.for_dtype(torch.float32)).value == 1


def test_set_stats_matches_svd():
    X = structured(70, 30, 12, seed=9)
    rule = RankRule.for_dtype(X.dtype)
    st_ = set_stats(X, rule)
    assert st_.rank == int(torch.linalg.matrix_rank(X.double(), rtol=rule.rtol_for(70, 30)))
    ref = torch.linalg.svdvals(X.double())
    assert np.allclose(st_.singular_values[:12], ref[:12].numpy(), rtol=1e-9)


@pytest.mark.parametrize("dtype, scales", [(torch.float64, SCALES64), (torch.float32, SCALES32)])
def test_set_stats_and_babel_floor_are_the_same_at_every_scale(dtype, scales):
    X = structured(70, 30, 12, seed=9).to(dtype)
    X[5] = 0.0
    rule = RankRule.for_dtype(torch.float32)
    g = torch.Generator().manual_seed(0)
    Y = torch.randn(20, 400, generator=g).to(dtype)  # nearly orthogonal rows: a floor above 1
    base, floor = set_stats(X, rule), babel_floor(Y, rule)
    assert base.rank == 12 and base.zero_rows == 1 and floor.value > 2
    for scale in scales:
        st_ = set_stats(X * scale, rule)
        assert (st_.rank, st_.zero_rows) == (base.rank, base.zero_rows)
        assert [st_.ceiling(k, rule) for k in range(1, 31)] == [base.ceiling(k, rule) for k in range(1, 31)]
        assert np.allclose(np.array(st_.singular_values[:12]) / scale, base.singular_values[:12], rtol=1e-9)
        assert np.allclose(np.array(st_.row_norms_sorted) / scale, base.row_norms_sorted, rtol=1e-12)
        assert babel_floor(Y * scale, rule) == floor


def test_subnormal_data_keep_their_rank():
    X = structured(70, 30, 12, seed=9).double()
    rule = RankRule.for_dtype(torch.float32)
    for scale in (1e-310, 1e-315):
        st_ = set_stats(X * scale, rule)
        assert st_.rank == 12 and st_.zero_rows == 0


def test_babel_floor_in_row_blocks_and_among_ranks_is_the_same(monkeypatch):
    """Any row block (memory O(block x T)) and the row blocks divided among 3 ranks give one floor."""
    X = dominant(150, 20, 3, common=0.0)
    rule = RankRule.for_dtype(torch.float64)
    floor = babel_floor(X, rule)
    assert floor.value >= 2
    assert babel_floor(X, rule, row_block=7) == floor
    assert as_ranks(monkeypatch, 3, lambda: babel_floor(X, rule, row_block=11)) == [floor] * 3


def test_babel_floor_says_its_count_in_english():
    rule = RankRule.for_dtype(torch.float64)
    near = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]], dtype=torch.float64)  # two parallel rows
    one = babel_floor(near, rule)
    assert one.value == 1 and "every row is independent (non-zero)" in one.proves and "1 rows" not in one.proves
    many = babel_floor(torch.eye(4, dtype=torch.float64), rule)
    assert many.value == 4 and many.proves.startswith("every 4 rows are independent")


def _tsqr_only(monkeypatch):
    """set_stats with the Gram's brackets never deciding: every value from the TSQR pass."""
    from mhaaudit.kruskal import bounds

    real = bounds._gram_brackets

    def undecided(lam, delta, c):
        a, b, top = real(lam, delta, c)
        return np.zeros_like(a), np.full_like(b, np.inf), np.full_like(top, np.inf)

    monkeypatch.setattr(bounds, "_gram_brackets", undecided)


def _spectrum(T: int, d: int, s, seed: int) -> torch.Tensor:
    """T x d float64 rows with singular values ``s`` (orthonormal factors)."""
    g = torch.Generator().manual_seed(seed)
    U = torch.linalg.qr(torch.randn(T, d, generator=g, dtype=torch.float64)).Q
    V = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64)).Q
    return U @ torch.diag(torch.as_tensor(s, dtype=torch.float64)) @ V.T


CASES = [
    ("structured", lambda: structured(70, 30, 12, seed=9), RankRule.for_dtype(torch.float32)),
    ("structured64", lambda: structured(70, 30, 12, seed=9).double(), RankRule.for_dtype(torch.float64)),
    ("dominant", lambda: dominant(300, 16, seed=1), RankRule.for_dtype(torch.float32)),
    ("spread", lambda: _spectrum(400, 24, np.logspace(0, -7, 24), 3), RankRule.for_dtype(torch.float32)),
    ("wide", lambda: torch.randn(6, 20, generator=torch.Generator().manual_seed(4)), RankRule.for_dtype(torch.float32)),
    ("atol", lambda: _spectrum(90, 10, np.logspace(1, -4, 10), 5), RankRule(rtol=1e-3, atol=2e-3)),
    ("zero", lambda: torch.zeros(40, 5), RankRule.for_dtype(torch.float32)),
]


@pytest.mark.parametrize("name, make, rule", CASES, ids=[c[0] for c in CASES])
def test_gram_values_give_the_tsqr_passs_rank_and_every_ceiling(monkeypatch, name, make, rule):
    """Whichever values the whole set's statistics come from (the streamed Gram's, or the TSQR
    pass's), the rank and the ceiling at every size are the same numbers."""
    X = make()
    st = set_stats(X, rule)
    with monkeypatch.context() as m:
        _tsqr_only(m)
        ref = set_stats(X, rule)
    assert ref.gram_brackets is None
    assert st.rank == ref.rank
    T = X.shape[0]
    assert [st.ceiling(k, rule) for k in range(1, T + 3)] == [ref.ceiling(k, rule) for k in range(1, T + 3)]


def test_a_value_at_the_sets_own_tolerance_takes_the_tsqr_pass(monkeypatch):
    """A singular value within the Gram's error of the whole set's tolerance: the rank is the TSQR
    pass's, computed at once."""
    from mhaaudit.kruskal import bounds

    rule = RankRule(rtol=1e-3)
    X = _spectrum(200, 8, [1.0, 0.5, 0.2, 0.1, 0.05, 0.01, 1e-3, 1e-4], 6)  # s_7 = rtol * s_0
    calls = []
    real = bounds.tsqr
    monkeypatch.setattr(bounds, "tsqr", lambda *a: calls.append(1) or real(*a))
    st = set_stats(X, rule)
    assert calls and st.gram_brackets is None
    assert st.rank == int(sum(1 for v in st.unit_singular_values if v > 1e-3 * st.unit_singular_values[0]))


def test_a_value_at_a_ceilings_tolerance_takes_the_tsqr_pass_then(monkeypatch):
    """A singular value within the Gram's error of the tolerance one ceiling compares with (here
    atol, while the whole set's own tolerance rtol * s_0 is far from every value): the statistics
    come from the Gram, and that ceiling runs the TSQR pass once, and agrees with it."""
    from mhaaudit.kruskal import bounds

    rule = RankRule(rtol=0.02, atol=0.1)
    X = _spectrum(50, 6, [10.0, 5.0, 2.0, 1.0, 0.1, 0.01], 7)
    calls = []
    real = bounds.tsqr
    monkeypatch.setattr(bounds, "tsqr", lambda *a: calls.append(1) or real(*a))
    st = set_stats(X, rule)
    assert not calls and st.gram_brackets is not None and st.gram_brackets.refined is None
    assert st.gram_brackets.count_above(rule.in_units(st.exponent).atol_value) is None  # s_4 = atol: in its bracket
    first = st.ceiling(1, rule)  # tol_min(1) = max(atol, rtol * smallest row norm) = atol
    assert calls == [1] and st.gram_brackets.refined is not None
    assert [st.ceiling(k, rule) for k in range(1, 8)] and calls == [1]  # once
    with monkeypatch.context() as m:
        _tsqr_only(m)
        ref = set_stats(X, rule)
    assert first == ref.ceiling(1, rule)
    assert [st.ceiling(k, rule) for k in range(1, 52)] == [ref.ceiling(k, rule) for k in range(1, 52)]
    assert st.rank == ref.rank == 4  # above rtol * s_0 = 0.2


def test_gram_brackets_hold_the_exact_singular_values():
    """Every exact singular value lies within its bracket and within sv_error of the Gram's value."""
    for seed, X in enumerate([dominant(300, 16, seed=1).double(), _spectrum(400, 24, np.logspace(0, -7, 24), 3)]):
        st = set_stats(X, RankRule.for_dtype(torch.float32))
        assert st.gram_brackets is not None, seed
        exact = torch.linalg.svdvals(X * 2.0**-st.exponent).numpy()
        assert np.all(np.array(st.gram_brackets.lo) <= exact) and np.all(exact <= np.array(st.gram_brackets.hi))
        assert np.all(np.abs(np.array(st.unit_singular_values) - exact) <= st.unit_sv_error)


def test_statistics_sent_to_another_rank_carry_no_rows_and_take_that_ranks_own(monkeypatch):
    """Pickled (a torchrun rank sends them with a shared call), the statistics carry their brackets
    but not the rows; ``fixed_rule`` given them with the rows attaches the rows, and a ceiling whose
    tolerance falls in a bracket runs the TSQR pass there and agrees with the sender's."""
    import pickle

    from mhaaudit.kruskal import fixed_rule

    rule = RankRule(rtol=0.02, atol=0.1)
    X = _spectrum(50, 6, [10.0, 5.0, 2.0, 1.0, 0.1, 0.01], 7)  # s_4 = atol: ceiling(1) needs the pass
    sent = set_stats(X, rule)
    data = pickle.dumps(sent)
    assert len(data) < X.numel() * 8  # not the rows
    got = pickle.loads(data)
    assert got.gram_brackets is not None and not got.gram_brackets.attached
    with pytest.raises(RuntimeError, match="carry no rows"):
        got.ceiling(1, rule)
    _, got = fixed_rule(X, rule, got)
    assert got is not None and got.gram_brackets is not None and got.gram_brackets.attached
    assert [got.ceiling(k, rule) for k in range(1, 52)] == [sent.ceiling(k, rule) for k in range(1, 52)]
    assert got.gram_brackets.refined == sent.gram_brackets.refined  # the same pass, the same bits
    again = pickle.loads(pickle.dumps(got))  # once the pass ran, its values travel and no rows are needed
    assert again.gram_brackets is not None and again.gram_brackets.attached
    assert again.ceiling(1, rule) == sent.ceiling(1, rule)


def _lazy_case():
    """Rows whose ceiling at k = 1 falls inside a Gram bracket (s_4 = atol): the TSQR pass runs then."""
    rule = RankRule(rtol=0.02, atol=0.1)
    return _spectrum(50, 6, [10.0, 5.0, 2.0, 1.0, 0.1, 0.01], 7), rule


def test_a_deferred_ceiling_refuses_rows_changed_since_the_statistics():
    """The TSQR pass a ceiling defers reads the caller's rows then: written in place (through any
    view) or resized since ``set_stats``, they are refused with an error naming them, not described."""
    from mhaaudit.errors import InputError

    X, rule = _lazy_case()
    st = set_stats(X, rule)
    X[3, 2] += 1.0  # in place
    with pytest.raises(InputError, match="written in place") as info:
        st.ceiling(1, rule)
    assert isinstance(info.value, ValueError) and info.value.params == ("X", "X")
    assert st.gram_brackets is not None and st.gram_brackets.refined is None  # nothing was taken of the new rows

    X, rule = _lazy_case()
    st = set_stats(X, rule)
    X[:, :3].mul_(2.0)  # through a view: the same version counter
    with pytest.raises(InputError, match="written in place"):
        st.ceiling(1, rule)

    X, rule = _lazy_case()
    st = set_stats(X, rule)
    X.resize_(40, 6)
    with pytest.raises(InputError, match=r"its shape is \(40, 6\), not \(50, 6\)"):
        st.ceiling(1, rule)

    X, rule = _lazy_case()
    st = set_stats(X, rule)
    _ = X + 1.0  # read, not written
    assert st.ceiling(1, rule) == set_stats(X.clone(), rule).ceiling(1, rule)


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_a_deferred_ceiling_refuses_a_numpy_array_written_in_place():
    """NumPy keeps no version: a writable array's bytes are compared (a read-only one cannot change)."""
    from mhaaudit.errors import InputError

    X, rule = _lazy_case()
    arr = X.numpy().copy()
    st = set_stats(arr, rule)
    arr[7, 1] = -arr[7, 1]
    with pytest.raises(InputError, match="written in place"):
        st.ceiling(1, rule)
    arr[7, 1] = -arr[7, 1]  # the same bytes again: the rows the statistics describe
    assert st.ceiling(1, rule) == set_stats(X, rule).ceiling(1, rule)

    frozen = X.numpy().copy()
    frozen.flags.writeable = False
    st = set_stats(frozen, rule)
    assert st.ceiling(1, rule) == set_stats(X, rule).ceiling(1, rule)


def test_statistics_given_with_rows_of_another_shape_are_refused():
    """``fixed_rule`` (and ``GramBrackets.attach``) check the rows given against the statistics' shape."""
    import pickle

    from mhaaudit.errors import InputError
    from mhaaudit.kruskal import fixed_rule

    X, rule = _lazy_case()
    st = set_stats(X, rule)
    with pytest.raises(InputError, match="describe 50 x 6 rows but X is 49 x 6") as info:
        fixed_rule(X[:49], rule, st)
    assert set(info.value.params) == {"stats", "X"}
    sent = pickle.loads(pickle.dumps(st))  # without its rows, as another rank receives it
    assert sent.gram_brackets is not None and sent.gram_brackets.shape == (50, 6)
    with pytest.raises(InputError, match="describe 50 x 6 rows"):
        sent.gram_brackets.attach(lambda: ((), 0.0), (49, 6))
    assert not sent.gram_brackets.attached
    _, got = fixed_rule(X, rule, sent)
    assert got.gram_brackets is not None and got.gram_brackets.attached


def _numerics_settings() -> dict:
    """The settings a rank computation may change: torch's and every OpenMP/BLAS pool's thread
    counts, the float32 precision of every backend, subnormal flushing in this thread."""
    from threadpoolctl import threadpool_info

    from mhaaudit.numerics.rule import _flushing, _matmul_precision, _precision_settings

    return {
        "threads": torch.get_num_threads(),
        "pools": sorted((p["user_api"], p["internal_api"], p["num_threads"]) for p in threadpool_info()),
        "precision": _matmul_precision(),
        "backends": [obj.fp32_precision for obj in _precision_settings()],
        "flushing": _flushing(),
    }


def test_a_deferred_ceiling_leaves_the_processs_numerics_settings_as_they_were(monkeypatch):
    """The TSQR pass a ceiling runs late, inside the caller's program: the caller's settings
    (here subnormals flushed, one backend's float32 precision set on its own, two threads) are
    the same during the pass, for what is process-wide, and after it, for everything."""
    from mhaaudit.kruskal import bounds
    from mhaaudit.numerics.rule import _precision_settings

    X, rule = _lazy_case()
    st = set_stats(X, rule)
    matmul = torch.backends.cuda.matmul
    before_matmul = matmul.fp32_precision
    threads = torch.get_num_threads()
    during = []
    real = bounds.tsqr
    monkeypatch.setattr(
        bounds, "tsqr", lambda *a: during.append([o.fp32_precision for o in _precision_settings()]) or real(*a)
    )
    try:
        torch.set_flush_denormal(True)
        matmul.fp32_precision = "tf32"
        torch.set_num_threads(2)
        caller = _numerics_settings()
        assert caller["flushing"] or not torch.set_flush_denormal(True)  # flushing where the CPU has it
        st.ceiling(1, rule)
        assert st.gram_brackets is not None and st.gram_brackets.refined is not None  # the pass ran
        assert during == [caller["backends"]]
        assert _numerics_settings() == caller
    finally:
        torch.set_flush_denormal(False)
        matmul.fp32_precision = before_matmul
        torch.set_num_threads(threads)


def test_the_babel_floor_counts_each_coherence_beside_its_products(monkeypatch):
    """At d = 2 the T^2 coherences cost far more than their 2 T^2 products (their absolute values, their
    top-k): a 200 000 x 2 set ran for minutes under a cap on T^2 d alone. The cap counts T^2 (d + 64)."""
    from mhaaudit.kruskal import bounds

    monkeypatch.setattr(bounds, "BABEL_MAX_WORK", 1e6)
    rule = RankRule.for_dtype(torch.float64)
    big = torch.randn(150, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert 150**2 * 2 < 1e6 < 150**2 * (2 + bounds.BABEL_ENTRY_COST)
    skipped = bounds.babel_floor(big, rule)
    assert skipped.value == 0 and skipped.proves.startswith("not computed") and "T^2 (d + 64) = 1e+06" in skipped.proves
    small = bounds.babel_floor(big[:100], rule)
    assert 100**2 * (2 + bounds.BABEL_ENTRY_COST) <= 1e6 and not small.proves.startswith("not computed")
