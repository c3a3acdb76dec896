"""The block-seeded draws: what a seed gives, whatever the sample count, worker count or batch size."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from conftest import full_gram_limit
from matrices import all_draws, dominant
from threadranks import as_ranks

from mhaaudit.kruskal import kruskal_sweep, subset_test
from mhaaudit.kruskal.sampling import DRAW_BLOCK, block_specs, draw_block, draw_blocks
from mhaaudit.numerics import RankRule
from mhaaudit.numerics.philox import bounded, pairs, sort_keys, split_key
from mhaaudit.settings import derive_seed


def test_draw_blocks_do_not_depend_on_the_number_of_samples():
    a = all_draws(500, 40, 300, 9)
    b = all_draws(500, 40, 700, 9)
    assert torch.equal(a, b[:300])
    assert all(len(set(row.tolist())) == 40 for row in b)


def test_block_specs_cover_the_samples_in_fixed_blocks():
    specs = block_specs(2 * DRAW_BLOCK + 5)
    assert specs == [(0, DRAW_BLOCK), (1, DRAW_BLOCK), (2, 5)]
    assert block_specs(DRAW_BLOCK) == [(0, DRAW_BLOCK)]


def test_each_block_is_seeded_by_the_seed_rule():
    # row r of block b is Philox stream r under the key derive_seed(seed, "draws", b)
    k0, k1 = split_key(derive_seed(4, "draws", 2))
    rows = torch.arange(DRAW_BLOCK)
    hi, lo = pairs(torch.full_like(rows, k0), torch.full_like(rows, k1), rows, 0, 30)
    keys = sort_keys(hi, lo, torch.arange(30), 5)  # k > T / 2: the k largest keys, in order
    assert torch.equal(draw_block(30, 20, 4, 2, DRAW_BLOCK, sort=False), keys.topk(20, dim=1).indices)
    assert torch.equal(draw_block(30, 20, 4, 2, DRAW_BLOCK, sort=True), keys.topk(20, dim=1).indices.sort(dim=1).values)
    values = bounded(*pairs(torch.full_like(rows, k0), torch.full_like(rows, k1), rows, 0, 200), 30)
    for row, got in zip(values.tolist(), draw_block(30, 5, 4, 2, DRAW_BLOCK, sort=False).tolist(), strict=False):
        assert got == list(dict.fromkeys(row))[:5]  # k <= T / 2: the first k distinct values
    assert not torch.equal(
        draw_block(30, 5, 4, 1, DRAW_BLOCK, sort=False), draw_block(30, 5, 4, 2, DRAW_BLOCK, sort=False)
    )


def test_pinned_draws():
    """The draws a seed gives (changing them changes every published number)."""
    assert draw_block(2000, 5, 0, 0, 3, False).tolist() == [
        [930, 1714, 1471, 192, 643],
        [403, 875, 224, 1689, 737],
        [296, 140, 427, 1720, 1007],
    ]
    assert draw_block(2000, 5, 0, 1, 3, True).tolist() == [
        [463, 1070, 1116, 1235, 1817],
        [102, 532, 1490, 1495, 1987],
        [155, 775, 1201, 1297, 1470],
    ]
    assert draw_block(12, 10, 7, 3, 2, False).tolist() == [
        [1, 10, 2, 9, 4, 7, 3, 5, 11, 8],
        [9, 3, 4, 8, 2, 5, 7, 6, 11, 1],
    ]


def test_draws_are_distinct_and_in_range():
    for T, k in ((1, 1), (2, 1), (2, 2), (9, 4), (9, 5), (9, 9), (300, 150), (300, 151), (1000, 3)):
        for sort in (False, True):
            idx = all_draws(T, k, 150, 2, sort)
            assert idx.shape == (150, k) and idx.dtype == torch.int64
            assert int(idx.min()) >= 0 and int(idx.max()) < T
            assert all(len(set(row)) == k for row in idx.tolist())
            if sort:
                assert bool((idx[:, 1:] > idx[:, :-1]).all())


@pytest.mark.parametrize("T, k", [(6, 2), (6, 4), (5, 3)])
def test_draws_are_uniform_ordered_subsets(T, k):
    """Chi-square over every ordered k-subset (fixed seed: not flaky), and over each position's value."""
    n = 20000
    idx = all_draws(T, k, n, 11)
    counts = Counter(map(tuple, idx.tolist()))
    cells = math.perm(T, k)
    assert len(counts) == cells
    chi2 = sum((c - n / cells) ** 2 / (n / cells) for c in counts.values())
    assert chi2 < cells - 1 + 5 * math.sqrt(2 * (cells - 1))  # about 3.5 standard deviations
    for j in range(k):
        col = torch.bincount(idx[:, j], minlength=T).double()
        assert float(((col - n / T) ** 2 / (n / T)).sum()) < T - 1 + 5 * math.sqrt(2 * (T - 1))


def test_reading_a_stream_further_gives_the_same_draws(monkeypatch):
    """A stream with too few distinct values among those read first is read further: the draws
    never depend on how far streams are read."""
    from mhaaudit.kruskal import sampling

    want = all_draws(500, 40, 200, 9)
    monkeypatch.setattr(sampling, "_candidates", lambda T, k: 2)
    assert torch.equal(all_draws(500, 40, 200, 9), want)


def test_same_draws_whatever_device_string_and_grouping(monkeypatch):
    from mhaaudit.kruskal import sampling

    for k in (20, 200):
        a = draw_blocks(300, k, 5, [(0, DRAW_BLOCK), (1, DRAW_BLOCK), (2, 7)], False, "cpu")
        b = torch.cat([draw_block(300, k, 5, b, n, False, torch.device("cpu")) for b, n in ((0, 64), (1, 64), (2, 7))])
        assert torch.equal(a, b) and a.device.type == "cpu"
        with monkeypatch.context() as m:
            m.setattr(sampling, "_DRAW_ELEMENTS", 1000)  # a few rows at a time
            assert torch.equal(draw_blocks(300, k, 5, [(0, DRAW_BLOCK), (1, DRAW_BLOCK), (2, 7)], False, "cpu"), a)
    X = dominant(120, 24, 3)
    rule = RankRule.for_dtype(X.dtype)
    recs = [subset_test(X, 10, samples=300, seed=2, rule=rule, device=dev).record() for dev in ("cpu", "auto")]
    assert recs[0]["witness"] == recs[1]["witness"] and recs[0]["satisfied"] == recs[1]["satisfied"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_same_draws_on_cuda():
    for T, k, sort in ((2000, 197, True), (2000, 768, False), (700, 600, False), (50, 50, True)):
        group = [(b, DRAW_BLOCK) for b in range(6)] + [(6, 17)]
        assert torch.equal(draw_blocks(T, k, 3, group, sort, "cpu"), draw_blocks(T, k, 3, group, sort, "cuda").cpu())


def test_results_do_not_depend_on_the_number_of_threads():
    X = dominant(200, 48, 4)
    rule = RankRule.for_dtype(X.dtype)
    before = torch.get_num_threads()
    out = []
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            out.append(
                (
                    subset_test(X, 30, samples=700, seed=5, rule=rule).record(),
                    kruskal_sweep(X, samples=300, seed=5, rule=rule).fractions,
                )
            )
    finally:
        torch.set_num_threads(before)
    assert out[0] == out[1]


def test_ranks_dividing_the_groups_yield_what_one_process_yields(monkeypatch):
    """Rank r runs groups r, r + N, ...; every rank yields every group's result in order, and a
    consumer that stops early stops every rank at the same group."""
    from mhaaudit.kruskal.sampling import Draws, blocks_in_order, units

    def job(idx):
        return idx * 1  # the draws themselves

    for workers in (1, 2):
        one = list(blocks_in_order(job, Draws(50, 5, 11 * DRAW_BLOCK - 3, 3, True), workers))
        assert len(one) == len(units(11 * DRAW_BLOCK - 3, workers))
        got = as_ranks(
            monkeypatch, 3, lambda w=workers: list(blocks_in_order(job, Draws(50, 5, 11 * DRAW_BLOCK - 3, 3, True), w))
        )
        assert all(len(g) == len(one) and all(torch.equal(a, b) for a, b in zip(g, one, strict=False)) for g in got)

    def first_five():
        out = []
        for x in blocks_in_order(job, Draws(50, 5, 11 * DRAW_BLOCK, 3, True), 2):
            out.append(x)
            if len(out) == 5:
                break
        return out

    got = as_ranks(monkeypatch, 3, first_five)
    assert all(all(torch.equal(a, b) for a, b in zip(g, one[:5], strict=False)) for g in got)


def test_tests_split_among_ranks_give_one_process_records(monkeypatch):
    """subset_test (stopping early once settled) and kruskal_sweep with their draws divided among 3
    ranks: every rank gets the single-process records, witness and histogram included."""
    from matrices import structured

    X = structured(120, 16, 16, 2, dup=3)  # a few repeated rows: some draws are dependent
    rule = RankRule.for_dtype(X.dtype)

    def run():
        return (
            subset_test(X, 12, samples=900, seed=5, rule=rule, stop_when_decided=True, threshold=0.999).record(),
            subset_test(X, 12, samples=900, seed=5, rule=rule).record(),
            kruskal_sweep(X, samples=500, seed=5, rule=rule).summary(),
        )

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the thread count the ranks below run with
    try:
        one = run()
    finally:
        torch.set_num_threads(before)
    assert one[0]["planned_samples"] == 900 and one[0]["samples"] < 900 and one[0]["witness"]  # it did stop early
    for got in as_ranks(monkeypatch, 3, run):
        assert got == one


def test_the_number_of_draws_sizes_no_allocation():
    """The groups of blocks are made as they are reached: the most draws a test takes costs no more
    memory to start than a few (it once built the list of every block first)."""
    import tracemalloc

    from mhaaudit.kruskal.sampling import Draws, blocks_in_order, units
    from mhaaudit.settings import MAX_SAMPLES

    groups = units(MAX_SAMPLES, 1)
    assert len(groups) == MAX_SAMPLES // DRAW_BLOCK // 4
    assert groups[-1] == [(b, DRAW_BLOCK) for b in range(MAX_SAMPLES // DRAW_BLOCK - 4, MAX_SAMPLES // DRAW_BLOCK)]
    assert list(units(2 * DRAW_BLOCK + 5, 2)) == [[(0, DRAW_BLOCK)], [(1, DRAW_BLOCK)], [(2, 5)]]
    # growing groups (1, 2, then 4 blocks a call) end at the same blocks
    assert [[b for b, _ in g] for g in units(5 * DRAW_BLOCK + 1, 1, 4, 1)] == [[0], [1, 2], [3, 4, 5]]
    grown, blocks = units(MAX_SAMPLES, 1, 8, 2), MAX_SAMPLES // DRAW_BLOCK
    assert len(grown) == 2 + -(-(blocks - 6) // 8) and [len(grown[i]) for i in range(3)] == [2, 4, 8]
    assert grown[2][0][0] == 6 and grown[-1][-1] == (blocks - 1, DRAW_BLOCK)

    def peak(samples: int) -> int:
        tracemalloc.start()
        try:
            draws = blocks_in_order(lambda idx: idx.shape, Draws(50, 3, samples, 0, True), 1)
            shapes = [next(draws) for _ in range(3)]
            draws.close()
            used = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert shapes == [torch.Size([4 * DRAW_BLOCK, 3])] * 3
        return used

    few = 12 * DRAW_BLOCK
    peak(few)  # imports made once, outside the measurements
    assert peak(MAX_SAMPLES) < peak(few) + (1 << 20)


# --------------------------------------------------------------------------- the size paths


def _paths_data(tmp_path):
    """300 x 12 float32 rows, 60 of them in a 4-dimensional subspace (so some draws of 8 are
    dependent and leave witnesses), the last third of the rows larger by 2^3 (so the streaming pass
    raises its exponent midway), saved as a .npy file."""
    import numpy as np

    g = torch.Generator().manual_seed(11)
    X = torch.randn(300, 12, generator=g)
    X[:60] = torch.randn(60, 4, generator=g) @ torch.randn(4, 12, generator=g)
    X = X[torch.randperm(300, generator=g)]
    X[200:] *= 8.0
    np.save(tmp_path / "x.npy", X.numpy())
    return X, tmp_path / "x.npy"


@pytest.mark.parametrize("chunk_bytes", [None, 8 * 12 * 37])  # one chunk, or chunks of 37 rows
def test_every_size_path_gives_the_same_numbers(tmp_path, monkeypatch, chunk_bytes):
    """The full-Gram path (small T), the per-draw path (large T, rows in memory) and the mapped path
    (rows in a memory-mapped file) give the same draws, decisions, witnesses, sweep and whole-set
    statistics; each record names its path. The paths are forced with the byte limit of the full
    Gram, as a large T would choose them."""
    from mhaaudit.io import MappedArray, read_array
    from mhaaudit.kruskal import draw_decisions, set_stats
    from mhaaudit.numerics import stream

    if chunk_bytes:
        monkeypatch.setattr(stream, "CHUNK_BYTES", chunk_bytes)
    X, path = _paths_data(tmp_path)
    rule = RankRule.for_dtype(X.dtype)
    if chunk_bytes:  # the exponent rises midway through the pass
        assert math.frexp(float(X[:37].abs().max()))[1] < math.frexp(float(X.abs().max()))[1]

    def run(data, full: bool):
        with pytest.MonkeyPatch.context() as m:
            if not full:
                full_gram_limit(m, 0)
            st = set_stats(data, rule)
            idx, ok = draw_decisions(data, 8, samples=400, seed=3, rule=rule)
            test = subset_test(data, 8, samples=400, seed=3, rule=rule, stats=st)
            sw = kruskal_sweep(data, samples=150, seed=2, rule=rule, stats=st)
        return st, idx, ok, test, sw

    mapped, _ = read_array(path)
    assert isinstance(mapped, MappedArray)
    runs = {
        "full": run(X, True),
        "per-draw": run(X, False),
        "mmap": run(mapped, False),
        "mapped-full": run(mapped, True),
    }
    base_st, base_idx, base_ok, base_test, base_sw = runs["full"]
    assert 0 < int(base_ok.sum()) < 400 and base_test.witness is not None  # dependent draws were found
    for name, (st, idx, ok, test, sw) in runs.items():
        assert st == base_st, name  # rank, singular values, norms, projections: every field
        assert torch.equal(idx, base_idx) and torch.equal(ok, base_ok), name
        rec, base_rec = test.record(), base_test.record()
        assert rec.pop("gram") == ("full" if "full" in name else name), name
        base_rec.pop("gram")
        rec.pop("exact_rechecks"), base_rec.pop("exact_rechecks")
        assert rec == base_rec and test.witness == base_test.witness, name
        assert test.rank_histogram == base_test.rank_histogram, name
        assert sw.gram == ("full" if "full" in name else name), name
        assert (sw.fractions, sw.witness, sw.ceiling, sw.estimate) == (
            base_sw.fractions,
            base_sw.witness,
            base_sw.ceiling,
            base_sw.estimate,
        ), name


def test_a_draw_reads_only_its_own_rows(monkeypatch):
    """Past the full Gram, a draw gathers its k rows and no others: no float64 copy of the set."""
    from mhaaudit.numerics import stream

    X = torch.randn(1000, 10, generator=torch.Generator().manual_seed(4))  # more rows than the 6 x 128 drawn
    taken = []
    real = stream.Rows.take

    def spy(self, idx):
        taken.append(math.prod(idx.shape))
        return real(self, idx)

    monkeypatch.setattr(stream.Rows, "take", spy)
    full_gram_limit(monkeypatch, 0)
    test = subset_test(X, 6, samples=128, seed=0)
    assert test.gram == "per-draw"
    # each take is the k = 6 rows of whole draws, never more than the 128 draws made (on the CPU those of one
    # draw or one block of DRAW_BLOCK; a large GPU takes as many blocks as one batched call holds), and every
    # draw is taken
    assert taken and all(t % 6 == 0 and t <= 6 * 128 < X.shape[0] for t in taken) and sum(taken) >= 6 * 128, taken
    if test.device == "cpu":  # (the device the run used)
        assert max(taken) <= 6 * DRAW_BLOCK, taken


def test_a_non_finite_feature_is_named_by_its_row_and_column():
    """Features in memory holding a NaN or an infinity are refused naming the first, as a mapped file's are."""
    from mhaaudit.errors import InputError

    X = torch.randn(40, 3, dtype=torch.bfloat16)
    X[5, 1] = float("-inf")
    X[9, 0] = float("nan")
    with pytest.raises(InputError, match=r"NaN or Inf values \(the first at row 5, column 1: -inf\)"):
        subset_test(X, 2, samples=10)
