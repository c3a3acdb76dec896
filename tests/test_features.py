"""mhaaudit.features: the streaming reduction equals the checks on the full tensor; saved features."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import numpy as np
import pytest
import torch

from mhaaudit.checks import assumption_2
from mhaaudit.errors import InputError, OutputError
from mhaaudit.features import FEATURES_FILE, META_FILE, FeatureSet, StreamingReducer, reduce_tokens
from mhaaudit.kruskal import subset_test
from mhaaudit.numerics import RankRule

T, N, D = 45, 6, 10


def _tokens(dtype=torch.float32, seed=0):
    """(T, n, d) tokens with a few rank-deficient contexts and a few dependent queries."""
    g = torch.Generator().manual_seed(seed)
    E = torch.randn(T, N, D, generator=g, dtype=torch.float64)
    E[3, 5] = E[3, 1]  # duplicated token: rank n - 1
    E[10] = torch.randn(N, 2, generator=g, dtype=torch.float64) @ torch.randn(2, D, generator=g, dtype=torch.float64)
    tiny = 1e-9 if dtype == torch.float32 else 1e-20
    E[20, 4] = E[20, 0] + tiny * torch.randn(D, generator=g, dtype=torch.float64)  # below the tolerance
    E[30, 0] = 2 * E[31, 0]  # two parallel queries
    return E.to(dtype)


def _assert_same(a: FeatureSet, b: FeatureSet):
    assert torch.equal(a.queries, b.queries)
    assert torch.equal(a.a3, b.a3)
    assert a.context.keys() == b.context.keys()
    for k in a.context:
        assert torch.equal(a.context[k], b.context[k]), k
    assert (a.n, a.d, a.query_index, a.dtype) == (b.n, b.d, b.query_index, b.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("qi", [0, -1])
def test_streaming_equals_one_batch_and_the_full_tensor(dtype, qi):
    E = _tokens(dtype)
    one = reduce_tokens(E, qi, batch_size=T)
    for bs in (1, 7, 64):
        _assert_same(reduce_tokens(E, qi, batch_size=bs), one)
    # the reduced vectors are the definitions applied to the full tensor
    assert one.queries.dtype == dtype
    assert torch.equal(one.queries, E[:, qi])
    assert torch.allclose(one.a3, E[:, qi] + E.mean(dim=1), rtol=0, atol=1e-6 if dtype == torch.float32 else 1e-14)
    assert one.query_index == qi % N and one.T == T and (one.n, one.d) == (N, D)
    # Assumption 2 from the streamed statistics equals the check on the full tensor
    rule = RankRule.for_dtype(dtype)
    streamed, full = one.assumption_2(rule), assumption_2(E, rule)
    assert streamed.record() == full.record()
    assert streamed.verdict == "fails" and set(streamed.deficient_examples) == {3, 10, 20}
    assert streamed.rank_histogram == {N: T - 3, N - 1: 2, 2: 1}
    # Assumption 1 and 3 on the streamed vectors equal the tests on vectors cut from the tensor
    for X_stream, X_full in ((one.queries, E[:, qi]), (one.a3, E[:, qi] + E.mean(dim=1))):
        a = subset_test(X_stream, N, samples=100, seed=4, rule=rule, check="assumption_1").record()
        b = subset_test(X_full.to(dtype), N, samples=100, seed=4, rule=rule, check="assumption_1").record()
        assert a == b


def test_streaming_reducer_one_batch_at_a_time_equals_reduce_tokens():
    E = _tokens()
    red = StreamingReducer(0)
    for i in range(0, T, 10):
        red.update(E[i : i + 10])
    _assert_same(red.result(), reduce_tokens(E, 0))


def test_a_reducer_without_contexts_keeps_the_vectors_alone(monkeypatch):
    """``contexts=False``: the same query and Assumption 3 rows, no context ranks computed, an empty ``context``."""
    from mhaaudit.contexts import ContextRanks

    E = _tokens()
    full = reduce_tokens(E, 0)
    called = []
    monkeypatch.setattr(ContextRanks, "update", lambda self, *a, **kw: called.append(1))
    red = StreamingReducer(0, contexts=False)
    for i in range(0, T, 10):
        red.update(E[i : i + 10])
    fs = red.result()
    assert torch.equal(fs.queries, full.queries) and torch.equal(fs.a3, full.a3) and (fs.n, fs.d) == (full.n, full.d)
    assert fs.context == {} and not called and full.context


def test_features_reduced_without_contexts_are_checked_saved_and_loaded(tmp_path):
    """``contexts=False``: Assumption 2 is unavailable and says why (it was a KeyError); the vectors are checked
    (it was "malformed"), saved and loaded back without context arrays."""
    from mhaaudit import check_features

    red = StreamingReducer(0, contexts=False)
    red.update(_tokens()[:20])
    fs = red.result()
    a2 = fs.assumption_2(fs.rule())
    assert a2.verdict == "unavailable" and "contexts=False" in a2.reason and a2.T == 20
    rec = check_features(fs, samples=20)[0]
    assert rec["assumption_2"].verdict == "unavailable" and rec["assumption_1"].samples == 20
    back = FeatureSet.load(fs.save(tmp_path / "f"))
    assert back.context == {} and torch.equal(back.queries, fs.queries) and torch.equal(back.a3, fs.a3)
    partial = FeatureSet(fs.queries, fs.a3, {"context_rank": torch.zeros(20, dtype=torch.long)}, fs.n, fs.d, 0)
    with pytest.raises(InputError, match="has no tensor 'context_sigma_min'"):
        partial.save(tmp_path / "g")


def test_float16_assumption_3_rows_are_one_rounding_of_the_sum_or_refused():
    """q + mean in float16 was summed in float16: finite tokens above half its range gave infinite rows, which
    the Kruskal tests then refused as "NaN or Inf" features. The sum is taken in float32 and rounded once;
    where it does not fit float16, the reduction says so."""
    from mhaaudit.errors import ModelError

    E = torch.randn(6, 3, 8, generator=torch.Generator().manual_seed(0)).half()
    fs = reduce_tokens(E, 0)
    assert fs.a3.dtype == torch.float16
    assert torch.equal(fs.a3, (E[:, 0].float() + E.float().mean(dim=1)).half())
    big = torch.full((4, 3, 5), 40000.0, dtype=torch.float16)
    with pytest.raises(ModelError, match="overflows float16"):
        reduce_tokens(big, 0)
    assert torch.isfinite(reduce_tokens(big / 2, 0).a3).all()


def test_reducers_of_dealt_batches_gather_into_the_single_process_features():
    """Rank r of N reduces batches r, r + N, ...; gathered, every rank holds one process's FeatureSet
    (a rank dealt no batch included)."""
    from mhaaudit.distributed import Session
    from mhaaudit.pipeline import DataInfo

    E, size, world = _tokens(), 7, 8  # 7 batches for 8 ranks: rank 7 is dealt none
    reducers = [StreamingReducer(2) for _ in range(world)]
    fed: list[list] = [[] for _ in range(world)]
    for b, tokens in enumerate(E.split(size)):
        reducers[b % world].update(tokens)
        fed[b % world].append((b, int(tokens.shape[0])))
    parts = []  # what each rank contributes to the gather: its rows and their header
    for red in reducers:
        rows = (
            None if red._ctx is None else {"queries": torch.cat(red._q), "a3": torch.cat(red._a3), **red._ctx.arrays()}
        )
        parts.append(None if rows is None else (rows, (red.n, red.d)))

    class Gathered(Session):
        def all_gather(self, obj):
            return parts

    whole = reduce_tokens(E, 2, batch_size=size)
    for r in (0, 3, world - 1):
        info = DataInfo(fed=fed[r], parts=fed, shard=Gathered(rank=r, world_size=world, local_rank=r, backend="gloo"))
        _assert_same(reducers[r].result(fed=info), whole)


def test_streaming_reducer_errors():
    red = StreamingReducer(0)
    with pytest.raises(InputError, match="no examples"):
        red.result()
    with pytest.raises(InputError, match=r"\(B, n, d\)"):
        red.update(torch.zeros(4, 5))
    red.update(torch.randn(2, N, D))
    with pytest.raises(InputError, match="changed shape"):
        red.update(torch.randn(2, N + 1, D))


def test_feature_set_save_load_roundtrip(tmp_path):
    fs = reduce_tokens(_tokens(torch.float64), -1, batch_size=8, meta={"model": "m", "variant": "random", "layer": 1})
    dest = fs.save(tmp_path / "feat")
    assert sorted(p.name for p in dest.iterdir()) == sorted([FEATURES_FILE, META_FILE])
    assert [p.name for p in tmp_path.iterdir()] == ["feat"]  # no temporary folder left
    back = FeatureSet.load(dest)
    _assert_same(back, fs)
    assert back.queries.dtype == torch.float64
    assert back.meta["model"] == "m" and back.meta["T"] == T and back.meta["dtype"] == "float64"
    assert back.meta["stamp"]["tool"] == "mhaaudit"
    rule = back.rule()
    assert rule.dtype == "float64"
    assert back.assumption_2(rule).record() == fs.assumption_2(rule).record()
    # saving again over the same folder replaces the files
    fs2 = reduce_tokens(_tokens(torch.float64, seed=1), 0)
    fs2.save(dest)
    _assert_same(FeatureSet.load(dest), fs2)


def test_assumption_2_is_decided_under_the_rule_of_the_reduction_or_not_at_all(tmp_path):
    """Context ranks are settled when the tokens are reduced: under another rule the stored ranks were counted
    all the same, with the other rule named beside them (an exact "holds" where every matrix fails it)."""
    from mhaaudit.auditing import check_features
    from mhaaudit.contexts import assumption_2

    g = np.random.default_rng(0)
    E = np.empty((4, 3, 6))
    for t in range(4):  # singular values 1, 0.5, 0.01: full rank by default, rank 2 under rtol = 0.1
        U, _ = np.linalg.qr(g.standard_normal((3, 3)))
        V, _ = np.linalg.qr(g.standard_normal((6, 3)))
        E[t] = (U * np.array([1.0, 0.5, 1e-2])) @ V.T
    tokens = torch.from_numpy(E).to(torch.float32)
    loose = RankRule.for_dtype(torch.float32, rtol=0.1)
    assert assumption_2(tokens, loose).full == 0 == sum(np.linalg.matrix_rank(e, rtol=0.1) == 3 for e in E)
    fs = reduce_tokens(tokens, 0)
    assert fs.assumption_2(fs.rule()).verdict == "holds"
    other = fs.assumption_2(loose)
    assert other.verdict == "unavailable" and other.exact_status == "undecided" and not other.proven
    assert "decided when the tokens were reduced, under another rank rule" in other.reason
    tests, _, _ = check_features(fs, rtol=0.1, samples=50, device="cpu")
    assert tests["assumption_2"].verdict == "unavailable" and tests["general_position"].verdict in ("holds", "fails")
    for under in (
        reduce_tokens(tokens, 0, rule=loose),
        FeatureSet.load(reduce_tokens(tokens, 0, rule=loose).save(tmp_path / "f")),
    ):
        assert under.assumption_2(loose).verdict == "fails" and under.assumption_2(loose).full == 0
        assert under.assumption_2(under.rule()).verdict == "unavailable"


def test_feature_set_save_errors(tmp_path):
    fs = reduce_tokens(_tokens(), 0)
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="is a file"):
        fs.save(tmp_path / "file")
    with pytest.raises(OutputError, match="does not exist"):
        fs.save(tmp_path / "missing" / "feat")
    # NumPy integers and a query counted from the end are written as load reads them back: plain ints, from the start
    odd = dataclasses.replace(fs, n=np.int64(fs.n), d=np.int32(fs.d), query_index=-fs.n)
    back = FeatureSet.load(odd.save(tmp_path / "odd"))
    assert (back.n, back.d, back.query_index) == (fs.n, fs.d, 0) and torch.equal(back.queries, fs.queries)
    shutil.rmtree(tmp_path / "odd")
    # a feature set whose fields disagree is not written: load would refuse it
    for change, says in ((dict(n=-1), "n = -1"), (dict(d=99), "d = 99"), (dict(query_index=7), "query_index")):
        with pytest.raises(InputError, match=says):
            dataclasses.replace(fs, **change).save(tmp_path / "bad")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_feature_set_load_errors(tmp_path):
    with pytest.raises(InputError, match="not a saved feature folder"):
        FeatureSet.load(tmp_path)
    (tmp_path / FEATURES_FILE).write_bytes(b"garbage")
    (tmp_path / META_FILE).write_text(json.dumps({"n": 1}))
    with pytest.raises(InputError, match="cannot read saved features"):
        FeatureSet.load(tmp_path)


@pytest.mark.parametrize("name", [FEATURES_FILE, META_FILE])
def test_a_saved_feature_folder_linking_out_is_refused(tmp_path, capsys, name):
    """A file of the folder that is a symbolic link to one elsewhere is refused before it is read; a link
    to a file inside the folder is read."""
    fs = reduce_tokens(_tokens(), 0)
    elsewhere, dest = fs.save(tmp_path / "elsewhere"), tmp_path / "feat"
    fs.save(dest)
    (dest / name).unlink()
    (dest / name).symlink_to(elsewhere / name)
    with pytest.raises(InputError, match=f"{name} is a symbolic link to .*, outside the saved feature folder"):
        FeatureSet.load(dest)
    from clitools import assert_one_error, run

    rc, out, err = run(capsys, "kruskal", dest, "--samples", "20")
    assert_one_error(rc, err, "outside the saved feature folder")
    assert out == ""
    (dest / name).unlink()
    (dest / ("kept-" + name)).write_bytes((elsewhere / name).read_bytes())
    (dest / name).symlink_to("kept-" + name)  # inside the folder
    _assert_same(FeatureSet.load(dest), fs)


def test_a_saved_folder_whose_ranks_or_count_no_save_writes_is_refused(tmp_path):
    """A context rank above what an n x d matrix has (meta.json's n edited below the ranks saved), and a T that is a
    float, are what no save writes: refused in one line, never read under the n given."""
    fs = reduce_tokens(_tokens(), 0)
    dest = fs.save(tmp_path / "feat")
    meta = json.loads((dest / META_FILE).read_text())
    (dest / META_FILE).write_text(json.dumps(meta | {"n": 3}))
    with pytest.raises(
        InputError, match=r"example 0 has context rank 6, where an n x d context matrix \(n = 3, d = 10\)"
    ):
        FeatureSet.load(dest)
    (dest / META_FILE).write_text(json.dumps(meta | {"T": float(T)}))
    with pytest.raises(InputError, match=f"meta.json gives T = {float(T)}, the tensors hold {T} examples"):
        FeatureSet.load(dest)
    (dest / META_FILE).write_text(json.dumps(meta))
    _assert_same(FeatureSet.load(dest), fs)


def test_read_array_of_a_folder_refuses_its_features_linking_out(tmp_path):
    """``mhaaudit.io.read_array(folder)`` reads a saved folder's queries as FeatureSet.load does: a
    features.safetensors that is a symbolic link leading out of the folder is refused, not read."""
    from mhaaudit.io import read_array

    fs = reduce_tokens(_tokens(), 0)
    elsewhere, dest = fs.save(tmp_path / "elsewhere"), fs.save(tmp_path / "feat")
    got, _ = read_array(dest)
    assert torch.equal(torch.from_numpy(np.array(got.array)), fs.queries)
    (dest / FEATURES_FILE).unlink()
    (dest / FEATURES_FILE).symlink_to(elsewhere / FEATURES_FILE)
    with pytest.raises(InputError, match="outside the saved feature folder"):
        read_array(dest)


def test_an_n_whose_tokens_no_tensor_holds_is_refused(tmp_path):
    """meta.json's n at most 2^63 - 1 but beyond what one example's n x d tokens can be (2^63 - 1 bytes): refused
    where it is read, by load and by checked(); the largest n whose tokens fit is read (beside context ranks of -1:
    tokens of n > d, whose ranks are not decided)."""
    fs = reduce_tokens(torch.randn(T, D + 2, D), 0)
    dest = fs.save(tmp_path / "feat")
    meta = json.loads((dest / META_FILE).read_text())
    fits = (2**63 - 1) // (fs.d * fs.queries.element_size())
    for n in (10**18, 2**63 - 1, fits + 1):
        (dest / META_FILE).write_text(json.dumps(meta | {"n": n}))
        with pytest.raises(InputError, match=f"meta.json gives n = {n}: the n x d tokens of one example"):
            FeatureSet.load(dest)
        with pytest.raises(InputError, match=f"gives n = {n}: the n x d tokens"):
            FeatureSet(fs.queries, fs.a3, fs.context, n=n, d=fs.d, query_index=0).checked()
    (dest / META_FILE).write_text(json.dumps(meta | {"n": fits}))
    assert FeatureSet.load(dest).n == fits


def test_an_n_above_d_is_refused_beside_context_ranks_decided(tmp_path, capsys):
    """The context ranks are decided only for n <= d (for n > d each is -1): a meta.json giving n > d beside decided
    ranks (10^15 at d = 10, within what a tensor of tokens holds) is refused where it is read, by load, by checked()
    and by kruskal whatever it tests; tokens of n > d, with ranks of -1, are read."""
    from clitools import assert_one_error, run

    fs = reduce_tokens(_tokens(), 0)
    dest = fs.save(tmp_path / "feat")
    meta = json.loads((dest / META_FILE).read_text())
    for n in (D + 1, 10**15):
        (dest / META_FILE).write_text(json.dumps(meta | {"n": n}))
        words = f"meta.json gives n = {n} > d = {D}, but the context ranks were decided (example 0 has rank {N})"
        with pytest.raises(InputError, match=re.escape(words)):
            FeatureSet.load(dest)
        with pytest.raises(InputError, match=f"it gives n = {n} > d = {D}, but the context ranks were decided"):
            FeatureSet(fs.queries, fs.a3, fs.context, n=n, d=fs.d, query_index=0).checked()
        for extra in (("--k", "2"), ("--sweep",)):
            rc, out, err = run(capsys, "kruskal", dest, *extra, "--samples", "20")
            assert_one_error(rc, err, words)
            assert out == ""
    wide = reduce_tokens(torch.randn(T, D + 2, D), 0)
    assert FeatureSet.load(wide.save(tmp_path / "wide")).n == D + 2


def test_load_points_from_the_check_folder_to_its_columns(tmp_path):
    fs = reduce_tokens(_tokens(), 0)
    fs.save(tmp_path / "random")
    fs.save(tmp_path / "trained")
    with pytest.raises(InputError, match=r"one saved feature folder per column \(random, trained\)"):
        FeatureSet.load(tmp_path)


def test_non_finite_activations_are_named():
    from mhaaudit.errors import ModelError

    tokens = torch.randn(4, 3, 8)
    tokens[1, 2, 5] = float("inf")
    red = StreamingReducer(0)
    with pytest.raises(ModelError, match="NaN or infinite values"):
        red.update(tokens)
