"""The block-seeded draws: what a seed gives, whatever the sample count, worker count or batch size."""

from __future__ import annotations

import torch
from matrices import all_draws, dominant
from threadranks import as_ranks

from mhaaudit.kruskal import kruskal_sweep, subset_test
from mhaaudit.kruskal.sampling import DRAW_BLOCK, block_specs, draw_block
from mhaaudit.numerics import RankRule
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
    # block b is the k largest of T uniform keys from a generator seeded with derive_seed(seed, "draws", b)
    gen = torch.Generator().manual_seed(derive_seed(4, "draws", 2))
    keys = torch.rand(DRAW_BLOCK, 30, generator=gen)
    assert torch.equal(draw_block(30, 5, 4, 2, DRAW_BLOCK, sort=False), keys.topk(5, dim=1).indices)
    sorted_ = draw_block(30, 5, 4, 2, DRAW_BLOCK, sort=True)
    assert torch.equal(sorted_, keys.topk(5, dim=1).indices.sort(dim=1).values)
    assert not torch.equal(draw_block(30, 5, 4, 1, DRAW_BLOCK, sort=False), draw_block(30, 5, 4, 2, DRAW_BLOCK, sort=False))


def test_results_do_not_depend_on_the_number_of_threads():
    X = dominant(200, 48, 4)
    rule = RankRule.for_dtype(X.dtype)
    before = torch.get_num_threads()
    out = []
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            out.append((subset_test(X, 30, samples=700, seed=5, rule=rule).record(),
                        kruskal_sweep(X, samples=300, seed=5, rule=rule).fractions))
    finally:
        torch.set_num_threads(before)
    assert out[0] == out[1]


def test_ranks_dividing_the_groups_yield_what_one_process_yields(monkeypatch):
    """Rank r runs groups r, r + N, ...; every rank yields every group's result in order, and a
    consumer that stops early stops every rank at the same group."""
    from mhaaudit.kruskal.sampling import blocks_in_order, units

    def job(idx):
        return idx * 1  # the draws themselves

    for workers in (1, 2):
        one = list(blocks_in_order(job, 50, 5, 11 * DRAW_BLOCK - 3, 3, True, workers))
        assert len(one) == len(units(11 * DRAW_BLOCK - 3, workers))
        got = as_ranks(monkeypatch, 3, lambda: list(blocks_in_order(job, 50, 5, 11 * DRAW_BLOCK - 3, 3, True, workers)))
        assert all(len(g) == len(one) and all(torch.equal(a, b) for a, b in zip(g, one)) for g in got)

    def first_five():
        out = []
        for x in blocks_in_order(job, 50, 5, 11 * DRAW_BLOCK, 3, True, 2):
            out.append(x)
            if len(out) == 5:
                break
        return out

    got = as_ranks(monkeypatch, 3, first_five)
    assert all(all(torch.equal(a, b) for a, b in zip(g, one[:5])) for g in got)


def test_tests_split_among_ranks_give_one_process_records(monkeypatch):
    """subset_test (stopping early once settled) and kruskal_sweep with their draws divided among 3
    ranks: every rank gets the single-process records, witness and histogram included."""
    from matrices import structured

    X = structured(120, 16, 16, 2, dup=3)  # a few repeated rows: some draws are dependent
    rule = RankRule.for_dtype(X.dtype)

    def run():
        return (subset_test(X, 12, samples=900, seed=5, rule=rule, stop_when_decided=True, threshold=0.999).record(),
                subset_test(X, 12, samples=900, seed=5, rule=rule).record(),
                kruskal_sweep(X, samples=500, seed=5, rule=rule).summary())

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the thread count the ranks below run with
    try:
        one = run()
    finally:
        torch.set_num_threads(before)
    assert one[0]["planned_samples"] == 900 and one[0]["samples"] < 900 and one[0]["witness"]  # it did stop early
    for got in as_ranks(monkeypatch, 3, run):
        assert got == one
