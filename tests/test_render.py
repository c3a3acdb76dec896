"""Renderers: the estimate and the exact status are shown apart, and a whole-set row is marked."""

from __future__ import annotations

import io

from mhaaudit.kruskal import Bound, SubsetTest, Sweep
from mhaaudit.numerics import RankRule
from mhaaudit.render import cell
from mhaaudit.render.audit import meaning_lines
from mhaaudit.render_kruskal import (
    SWEEP_TABLE_ROWS,
    WHOLE_SET_MARK,
    estimate_text,
    exact_text,
    kruskal_table,
    sweep_lines,
    sweep_table,
)


def _rec(**kw) -> dict:
    base = {
        "check": "general_position",
        "verdict": "holds",
        "fraction": 0.9995,
        "sampled": True,
        "T": 400,
        "satisfied": 1999,
        "exact_status": "undecided",
        "exact_basis": "none",
        "scope": "subsets",
    }
    return base | kw


def test_a_holding_estimate_beside_a_proof_of_failure_is_never_a_bare_holds():
    text = cell(_rec(exact_status="fails", exact_basis="witness"))
    first, *rest = text.split("\n")
    assert "holds" in first and "(estimate)" in first
    assert any("exact:" in line and "fails" in line and "(witness)" in line for line in rest)


def test_an_undecided_estimate_shows_its_fraction_only():
    assert cell(_rec()) == "[green]holds[/green]\n0.9995"
    assert exact_text(_rec()) == "undecided"


def test_a_sampled_cell_shows_the_interval_the_report_says_it_gives():
    """50 independent draws of 50 hold under the paper's rule, but their 95% interval reaches down to
    0.9289, below the threshold 0.99: the cell shows it, as the report's legend says every cell does."""
    rec = _rec(fraction=1.0, satisfied=50, samples=50, ci_low=0.9288782635358024, ci_high=1.0)
    assert cell(rec) == "[green]holds[/green]\n1.0000\n[0.9289, 1.0000]"
    assert "Clopper-Pearson" in " ".join(meaning_lines())
    proof = _rec(verdict="fails", sampled=False, fraction=0.0, ci_low=0.0, ci_high=0.0, exact_status="fails")
    assert "[0.0000" not in cell(proof)  # no draws: no interval


def test_a_share_below_one_never_reads_one():
    """49999 independent draws of 50000, beside the dependent one that proves the assumption fails, read 0.9999,
    not 1.0000 (nor does one of 50000 read 0); other shares are rounded as usual, and 0 and 1 stay 0 and 1."""
    from mhaaudit.check_words import fraction_text

    rec = _rec(fraction=49999 / 50000, satisfied=49999, samples=50000, exact_status="fails", exact_basis="witness")
    assert cell(rec).split("\n")[1] == "0.9999"
    assert [fraction_text(v) for v in (1 / 50000, 0.99994, 0.12345, 0.5, 0.0, 1.0)] == [
        "0.0001", "0.9999", "0.1235", "0.5000", "0.0000", "1.0000"
    ]  # fmt: skip
    assert fraction_text(9996 / 10000, 3) == "0.999" and fraction_text(0.9994, 3) == "0.999"


def test_a_proof_without_sampling_names_its_basis():
    text = cell(_rec(verdict="fails", sampled=False, fraction=0.0, exact_status="fails", exact_basis="set-rank"))
    assert text == "[red]fails[/red]\nno sampling\nexact: [red]fails[/red] (set-rank)"


def test_a_whole_set_row_is_marked_not_an_ordinary_verdict():
    rec = _rec(sampled=False, fraction=1.0, exact_status="holds", exact_basis="exhaustive", scope="whole-set")
    assert WHOLE_SET_MARK in estimate_text(rec) and estimate_text(rec) != "[green]holds[/green]"
    assert cell(rec).startswith("[yellow]holds (whole set)[/yellow]")


def test_a_check_left_without_a_verdict_is_not_listed_under_holds():
    from types import SimpleNamespace

    import mhaaudit.checks  # noqa: F401  # fills the registry of checks the findings read
    from mhaaudit.render.audit import finding_lines

    def test(verdict, reason):
        rec = {"verdict": verdict, "exact_status": "undecided", "exact_basis": "none", "scope": "subsets"}
        return SimpleNamespace(verdict=verdict, reason=reason, witness=None, record=lambda: rec)

    col = SimpleNamespace(
        status="ok",
        probe=SimpleNamespace(variant="random", layer=1),
        tests={
            "general_position": test("fails", "only 0/64 draws independent"),
            "assumption_1": test("unavailable", "none of the 64 draws could be decided"),
            "assumption_3": test("holds", "all 64 draws independent"),
        },
    )
    lines = finding_lines(SimpleNamespace(columns=[col]))
    heads = [line for line in lines if line.startswith("[bold]")]
    assert heads == ["[bold]Failures[/bold]", "[bold]Holds[/bold]", "[bold]No verdict[/bold]"]
    after_holds = lines[lines.index("[bold]Holds[/bold]") + 1 :]
    assert "could be decided" not in after_holds[0] and "Assumption 3" in after_holds[0]
    assert "unavailable" in lines[-1] and "Assumption 1" in lines[-1]


def test_a_holding_estimate_proven_to_fail_is_listed_under_failures_never_as_a_bare_holds():
    """Two equal queries among 400: Assumption 1 holds as an estimate (999 of 1000 draws of 8 rows independent)
    and fails exactly (the witness [4, 5]). The findings list it under Failures, as the table's cell reads it."""
    from types import SimpleNamespace

    import torch

    from mhaaudit.auditing import check_features
    from mhaaudit.features import reduce_tokens
    from mhaaudit.render.audit import finding_lines

    g = torch.Generator().manual_seed(0)
    E = torch.randn(400, 8, 16, generator=g)
    E[5, 0] = E[4, 0]
    tests, _sweep, _t = check_features(reduce_tokens(E, 0), samples=1000, progress=False)
    a1 = tests["assumption_1"]
    assert (a1.verdict, a1.exact_status) == ("holds", "fails")
    col = SimpleNamespace(status="ok", probe=SimpleNamespace(variant="random", layer=1), tests={"assumption_1": a1})
    lines = finding_lines(SimpleNamespace(columns=[col]))
    assert lines[0] == "[bold]Failures[/bold]" and "[bold]Holds[/bold]" not in lines
    assert lines[1].startswith(
        r"  [green]holds[/green] (estimate) exact: [red]fails[/red] (witness) \[random] Assumption 1"
    )


def _sweep(fractions: list[float], estimate: int, raw: int) -> Sweep:
    K = len(fractions)
    return Sweep(
        T=200,
        d=K,
        samples=200,
        threshold=0.99,
        seed=0,
        rule=RankRule(),
        device="cpu",
        ks=tuple(range(1, K + 1)),
        fractions=tuple(fractions),
        ci_low=tuple(fractions),
        ci_high=tuple(fractions),
        estimate=estimate,
        ceiling=Bound(estimate, "witness", "a dependent subset"),
        floor=Bound(2, "babel", "every 2 rows"),
        witness=None,
        exact_rechecks=0,
        kmax_sampled=K,
        raw_estimate=raw,
    )


def _rows(sw: Sweep, marks: tuple[int, ...] = ()) -> list[int]:
    return [int(k) for k in sweep_table(sw, marks=marks).columns[0].cells]


def test_the_sweep_table_shows_every_size_its_lines_name():
    """The line under a capped estimate names the size up to which the sampled fraction held: the table shows that
    size and the one above it, where the fraction fell below the threshold, and also the sizes it shows anyway."""
    fractions = [1.0] * 10 + [0.99, 0.985] + [0.98] * 6 + [0.9] * 6
    sw = _sweep(fractions, estimate=2, raw=11)
    rows = _rows(sw)
    assert {1, 2, 3, 11, 12, 24} <= set(rows)
    assert "stayed above the threshold up to k = 11" in " ".join(sweep_lines(sw))


def test_a_jagged_sweep_keeps_its_named_sizes_within_the_row_limit():
    """A curve that moves at every size has more sizes to show than the table's rows: the sizes the lines name and
    the marks are kept (the last one too), the rest fill the table up to its limit."""
    K = 120
    fractions = [1.0 if k % 2 else 0.5 for k in range(K)]
    sw = _sweep(fractions, estimate=1, raw=1)
    rows = _rows(sw, marks=(97,))
    assert len(rows) == SWEEP_TABLE_ROWS
    assert {1, 2, 97, K} <= set(rows) and rows == sorted(rows)


def test_a_test_with_no_decided_draw_shows_no_fraction():
    """No draw decided: 0 of 0 is no fraction; the row printed 0.0000 with the interval [0, 1] beside "unavailable"
    (its reason says there is no estimate)."""
    test = SubsetTest(
        check="kruskal",
        k=3,
        T=40,
        d=8,
        samples=0,
        satisfied=0,
        fraction=0.0,
        ci_low=0.0,
        ci_high=1.0,
        threshold=0.99,
        verdict="unavailable",
        reason="none of the 5 draws of 3 rows could be decided, so there is no estimate",
        rule=RankRule(),
        seed=0,
        device="cpu",
    )
    table = kruskal_table([test])
    cells = {str(c.header): [str(x) for x in c.cells] for c in table.columns}
    assert cells["fraction"] == ["-"] and cells["95% CI"] == ["-"] and cells["draws"] == ["0"]


def test_a_sweep_that_drew_nothing_does_not_say_it_drew():
    """All-zero rows: every size is decided by the proven ceiling 0 and no draw is made; the sweep's lines said
    "over 50 nested draws" all the same."""
    import torch

    from mhaaudit.kruskal import kruskal_sweep

    none = kruskal_sweep(torch.zeros(5, 3), samples=50)
    assert none.kmax_sampled == 0 and none.ceiling.value == 0
    first = sweep_lines(none)[0]
    assert "nested draws" not in first and "no draw was made" in first
    some = kruskal_sweep(torch.randn(30, 4, generator=torch.Generator().manual_seed(0)), samples=50)
    assert some.kmax_sampled == 4 and "over 50 nested draws; an estimate" in sweep_lines(some)[0]


def test_a_memorize_tables_shares_below_one_never_read_one():
    """The lowest and highest memorised fractions over seeds, and the saturation columns, were rounded plainly: 9996
    of 10000 examples read 1.000 beside a mean of 0.999 (and 1 of 10000 read 0.000). They are written as the
    memorised fraction and the mean are (fraction_text): a share below 1 reads 0.999, one above 0 reads 0.001."""
    from rich.console import Console

    from mhaaudit.memorize.recipe import Recipe
    from mhaaudit.memorize.results import GridSettings, MemorizeGrid, MemorizeRun, SeedSummary
    from mhaaudit.memorize.saturation import SATURATION_THRESHOLD, SaturationSummary
    from mhaaudit.render_memorize import memorize_table, seed_summary_table

    T = 10000
    near = [(9996, 9999), (1, 4)]  # lowest and highest counts memorised over three seeds, near 1 and near 0
    summary = tuple(
        SeedSummary(heads=2, n=4, head_dim=8, size=T, seeds=3, mean=(lo + hi) / 2 / T, std=0.0001, low=lo / T,
                    high=hi / T, mean_count=(lo + hi) / 2)
        for lo, hi in near
    )  # fmt: skip
    hist = (0, T - 1, 1)  # of 2 heads: T - 1 examples with one saturated, one example with both
    sat = SaturationSummary(
        threshold=SATURATION_THRESHOLD, heads=2, examples=T, histogram=hist, frac_at_least_two_saturated=1 / T,
        frac_some_unsaturated=(T - 1) / T, frac_any_saturated=1.0, mean_saturated=(T + 1) / T,
    )  # fmt: skip
    run = MemorizeRun(
        heads=2, n=4, head_dim=8, size=T, recipe=Recipe(), seed=0, memorized=0.5, memorized_count=T // 2,
        epochs_run=1, steps_run=40, planned_steps=40, final_loss=1.0, seconds=0.0, stopped_early=False,
        device="cpu", saturation=sat,
    )  # fmt: skip
    settings = GridSettings(n=4, heads=2, head_dim=8, recipe=Recipe(), seed=0, seeds=(0, 1, 2), device="cpu", d=64)
    grid = MemorizeGrid(
        vary=None, values=(), sizes=(T,), preset=None, runs=(run,), settings=settings, seeds=(0, 1, 2), summary=summary
    )

    def rows(table) -> list[list[str]]:
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(table)
        return [line.split("│")[1:-1] for line in console.export_text().splitlines() if line.count("│") > 2]

    lows_highs = [[c.strip() for c in r[5:7]] for r in rows(seed_summary_table(grid))]
    assert lows_highs == [["0.999", "0.999"], ["0.001", "0.001"]]
    (points,) = rows(memorize_table(grid))
    assert [c.strip() for c in points[-2:]] == ["0.001", "0.999"]
