"""The report of a several-seed run (:class:`mhaaudit.seeds.SeedsResult`): each cell's median and
range over the seeds, how many seeds hold under the paper's rule, the exact status where a seed
proved it, the sweep estimates' spread, and the differences with their between-seed range.

Nothing is computed here that :mod:`mhaaudit.seeds` did not put in the records.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from .check_words import CHECK_TITLES, fraction_text, published_what, subset_sizes
from .console import shown
from .errors import Param
from .render_kruskal import WHOLE_SET_LEGEND, WHOLE_SET_MARK

__all__ = ["seeds_report", "seeds_tables"]


def _num(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not v.is_integer():
        return fraction_text(v) if 0.0 <= v <= 1.0 else f"{v:.4g}"
    return str(int(v))


def _range(rec) -> str:
    """The median and range of a summary; the seeds that gave a value said where some gave none (unavailable)."""
    if rec.median is None:
        return "-"
    if rec.runs == 1:
        return f"{_num(rec.median)} (single run)"
    if len(rec.values) < rec.runs:
        spread = "" if rec.low == rec.high else f" [{_num(rec.low)}, {_num(rec.high)}]"
        return f"{_num(rec.median)}{spread} ({len(rec.values)} of {rec.runs} seeds gave a value)"
    if rec.low == rec.high:
        return f"{_num(rec.median)} (every seed)"
    return f"{_num(rec.median)} [{_num(rec.low)}, {_num(rec.high)}]"


def _exact(result, rec) -> str:
    if rec.exact is None or rec.exact.status == "undecided":
        return "undecided"
    seeds = rec.exact.seeds
    if rec.exact.status == "mixed":  # the seeds proved it each way: which seed proved what
        found = _cell_records(result, rec)
        return "mixed: " + "; ".join(
            f"{status} in seed" + ("s " if len(by) > 1 else " ") + ", ".join(map(str, by))
            for status in ("fails", "holds")
            if (by := [seed for seed, r in found if r.get("exact_status") == status])
        )
    where = (
        "every seed"
        if len(seeds) == rec.runs
        else "seed" + ("s " if len(seeds) > 1 else " ") + ", ".join(map(str, seeds))
    )
    return f"{rec.exact.status} (proven in {where})"


def _cell_records(result, rec) -> list[tuple[int, dict]]:
    """The per-seed records of the cell of the summary ``rec``, each with its seed."""
    key, values = rec.cell.key, rec.cell.values()
    return [
        (seed.run.seed, r) for seed in result.per_seed for r in seed.records if tuple(r.get(k) for k in key) == values
    ]


def _whole_set_seeds(result, rec) -> list[int]:
    """The seeds in which the cell of the summary ``rec`` was a test of one set (scope whole-set: k reached T), as
    the per-seed records say."""
    return [seed for seed, r in _cell_records(result, rec) if r.get("scope") == "whole-set"]


def _holds(rec, whole: list[int]) -> str:
    if rec.holding is None:
        return "-"
    held = f"{rec.holding.holding} of {rec.runs}"
    if not whole:
        return held
    where = (
        "" if len(whole) == rec.runs else " in seed" + ("s " if len(whole) > 1 else " ") + ", ".join(map(str, whole))
    )
    return f"{held} [yellow]({WHOLE_SET_MARK}{where})[/yellow]"


def _cell_table(result) -> Table:
    cells = [s for s in result.summaries if s.cell.check != "sweep_estimate" and s.value != "our_value"]
    what = "rank(Z)" if result.command == "capacity" else "fraction"
    t = Table(
        title=f"Over {len(result.plan.seeds)} seeds: median \\[lowest, highest] of the {what}", title_justify="left"
    )
    capacity = result.command == "capacity"
    # The words wrap (the check's name, the long headers), so that a narrow terminal narrows them
    # before it cuts a cell short.
    # capacity's layer field is the block whose attention builds Z, and its report calls it so
    for col in ("column", "block", "heads h") if capacity else ("column", "layer", "check", "k"):
        t.add_column(col, no_wrap=col != "check")
    t.add_column(what + " median \\[range]", no_wrap=False)
    if not capacity:
        t.add_column("seeds holding (paper's rule)", no_wrap=False)
        t.add_column("exact status", no_wrap=False)
    for s in cells:
        cell = s.cell
        if capacity:
            t.add_row(escape(str(cell.variant)), _num(cell.layer), _num(cell.heads), _range(s))
        else:
            t.add_row(
                escape(str(cell.variant)),
                _num(cell.layer),
                CHECK_TITLES.get(cell.check, str(cell.check)),
                _num(cell.k),
                _range(s),
                _holds(s, _whole_set_seeds(result, s)),
                _exact(result, s),
            )
    return t


def _estimate_table(result) -> Table | None:
    est = [s for s in result.summaries if s.cell.check == "sweep_estimate"]
    if not est:
        return None
    t = Table(
        title="Kruskal-rank estimate of the sweep (largest k with fraction >= threshold): over the seeds",
        title_justify="left",
    )
    for col in ("column", "median \\[lowest, highest]", "per seed", "exact Kruskal rank"):
        t.add_column(col, no_wrap=col != "exact Kruskal rank")
    for s in est:
        per = [
            (e.seed, e.estimate, e.exact_kruskal_rank)
            for seed in result.per_seed
            for e in seed.estimates
            if (e.cell.model, e.cell.variant, e.cell.layer) == (s.cell.model, s.cell.variant, s.cell.layer)
        ]
        proven = [f"{x} (seed {seed})" for seed, _, x in per if x is not None]
        name = f"{s.cell.model} {s.cell.variant}" if result.command == "reproduce" else str(s.cell.variant)
        t.add_row(
            shown(name),
            _range(s),
            ", ".join(f"{seed}: {e}" for seed, e, _ in per),
            escape(", ".join(proven)) if proven else "not proven",
        )
    return t


def _reproduce_table(result) -> Table:
    t = Table(
        title=f"{escape(result.title)}: the paper's values beside the between-seed range of ours", title_justify="left"
    )
    rows = [s for s in result.summaries if s.value == "our_value"]
    several = len({s.cell.model for s in rows}) > 1  # one model: its name is in the title
    # names, numbers and verdicts stay whole; the words wrap: at 100 columns, headings that could not wrap left "what"
    # no width
    for col, no_wrap in (
        *((("model", True),) if several else ()),
        ("column", True),
        ("what", False),
        ("k", True),
        ("paper", True),
        (f"ours over {len(result.plan.seeds)} seeds", False),
        ("paper inside", False),
        ("seeds matching", False),
    ):
        t.add_column(col, no_wrap=no_wrap, min_width=12 if col == "what" else None)  # "Assumption 1" whole
    for s in rows:
        cell = s.cell
        what = published_what(cell.kind, cell.check)
        found = _cell_records(result, s)
        paper = (s.paper.verdict if s.paper is not None else None) or ""
        if s.paper is not None and s.paper.value is not None:
            paper += f" {_num(s.paper.value)}"
        against = s.against_paper
        inside = {True: "inside", False: "outside", None: "-"}[against.inside if against is not None else None]
        t.add_row(
            *((shown(cell.model),) if several else ()),
            escape(str(cell.column)),
            escape(str(what)),
            subset_sizes(cell.k, [r.get("our_k") for _, r in found]) or "-",
            escape(paper),
            _range(s) if s.median is not None else _verdicts(found),
            inside,
            f"{against.seeds_matching if against is not None else 0} of {s.runs}",
        )
    return t


def _verdicts(found: list[tuple[int, dict]]) -> str:
    """Our side of a published value that has no number (the ranks of d-subsets): each seed's, as its one-seed
    table says it; ``-`` where no seed gave one."""
    said = [(seed, r.get("our_verdict")) for seed, r in found]
    if not any(v is not None for _, v in said):
        return "-"
    if len(said) > 1 and len({v for _, v in said}) == 1:
        return escape(f"{said[0][1]} (every seed)")
    return escape(", ".join(f"{v if v is not None else '-'} (seed {seed})" for seed, v in said))


def seeds_tables(result) -> list:
    """The tables of a several-seed run of check or capacity: each cell over the seeds (with the legend of a
    test of the whole set where one was), then the sweep estimates' (when swept). The reference columns of a
    series of checkpoints over the seeds are printed so too."""
    items: list = []
    if any(s.cell.check != "sweep_estimate" for s in result.summaries):
        items.append(_cell_table(result))
        if result.command != "capacity" and any(_whole_set_seeds(result, s) for s in result.summaries):
            items.append(WHOLE_SET_LEGEND)
    est = _estimate_table(result)
    return items if est is None else [*items, est]


def seeds_report(result) -> list:
    """The tables and lines of a several-seed run."""
    items: list = [escape(f"{result.command}: {result.plan.describe()}.")]
    items += [f"note: {shown(n)}" for n in result.notes[1:]]
    if result.command == "reproduce":
        est = _estimate_table(result)
        items += [_reproduce_table(result), "k: the paper's / ours where they differ.", *([est] if est else [])]
    else:
        items += seeds_tables(result)
    swept = any(s.cell.check == "sweep_estimate" for s in result.summaries)
    if result.differences:
        items.append("[bold]Differences[/bold] (seed by seed; called a difference only when the range excludes zero)")
        items += [f"  {shown(d.conclusion)}" for d in result.differences]
    elif result.command == "check" and not swept:
        items.append(
            "No sweep estimates to compare: add " + Param("sweep") + " for each column's Kruskal-rank estimate and the "
            "differences between columns."
        )
    items.append(
        "The ranges are between seeds: they show what a new seed moves. Each fraction's 95% interval "
        "(in the JSON and parquet records) covers its Monte-Carlo draws only. A proof holds for the weights "
        "and data of the seed that gave it."
    )
    return items
