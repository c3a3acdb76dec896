"""The report of ``reproduce``: the paper's values beside ours."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from ..check_words import published_what, subset_sizes
from ..console import shown
from .common import print_report

if TYPE_CHECKING:
    pass


STATUS_MARK = {
    "match": "[green]yes[/green]",
    "differs": "[red]no[/red]",
    "undetermined": "[yellow]?[/yellow]",
    "unavailable": "[yellow]n/a[/yellow]",
}


def published_number(value: float) -> str:
    """A published fraction as the paper and its notebooks print it (Python's shortest form:
    ``0.0``, ``1.0``, ``0.9982``), never as a bare ``0``; a count as an integer."""
    value = float(value)
    return repr(value) if 0.0 <= value <= 1.0 else (str(int(value)) if value.is_integer() else f"{value:g}")


def _paper_cell(c) -> str:
    value = "" if c.paper_value is None or c.kind == "estimate" else f" {published_number(c.paper_value)}"
    return escape(f"{c.paper_verdict}{value}")


def _our_cell(c) -> str:
    """Our verdict and number (a fraction to 4 decimals, as the other tables print them), and the
    95% interval below when the number is a Monte-Carlo estimate."""
    if c.our_verdict is None:
        return "-"
    value = ""
    if c.our_value is not None and c.kind != "estimate":
        v = float(c.our_value)
        value = f" {v:.4f}" if 0.0 <= v <= 1.0 else f" {v:g}"
    ci = "" if c.ci_low is None else f"\n[{c.ci_low:.3f}, {c.ci_high:.3f}]"
    return escape(f"{c.our_verdict}{value}{ci}")


def reproduction_table(result) -> tuple[Table, list[str]]:
    """One row per published value: the paper's verdict and number, ours with its 95% interval,
    whether they match (with the number of the note giving the reason when they do not). The
    model column appears when the target has several models; the table fits 100 columns."""
    several = len({c.model for c in result.comparisons}) > 1
    t = Table(title=f"{result.title}: the paper's values beside this run's", title_justify="left")
    if several:
        t.add_column("model", no_wrap=True)
    # the column wraps only where its names are long (Figure 2's grid points): they starved "what" at 100 columns
    long_names = max((len(c.column) for c in result.comparisons), default=0) > 20
    t.add_column("column", no_wrap=not long_names)
    t.add_column("what", ratio=1)  # the column that wraps
    t.add_column("k", justify="right", no_wrap=True)
    t.add_column("paper", no_wrap=True)
    t.add_column("ours (95% CI)", no_wrap=True)
    t.add_column("match", no_wrap=True)
    notes: dict[str, int] = {}
    for c in result.comparisons:
        what, k = published_what(c.kind, c.check), subset_sizes(c.k, [c.our_k])
        mark = STATUS_MARK[c.status]
        if c.reason:
            mark += escape(f" [{notes.setdefault(c.reason, len(notes) + 1)}]")
        t.add_row(*([c.model] if several else []), escape(c.column), what, k, _paper_cell(c), _our_cell(c), mark)
    return t, [f"[{i}] {shown(reason)}" for reason, i in notes.items()]


def reproduction_report(result, written: Sequence[str] = ()) -> list:
    """``mhaaudit reproduce``: the comparison table, the reasons for every difference, what the run was."""
    table, reasons = reproduction_table(result)
    counts = result.counts()
    items: list = [
        table,
        f"{counts['match']} match, {counts['differs']} differ, {counts['undetermined']} undetermined, "
        f"{counts['unavailable']} unavailable, of {len(result.comparisons)} published values "
        f"(source: {shown(result.source)}). k: the paper's / ours where they differ.",
    ]
    if reasons:
        items.append("[bold]Why they differ[/bold] (from this run's records)")
        items += [f"  {line}" for line in reasons]
    items.append("[bold]This run[/bold]")
    items += [f"  {shown(line)}" for line in result.setting]
    items += [f"  note: {shown(note)}" for note in dict.fromkeys(result.notes)]
    parts = [f"{k} {v:.1f} s" for k, v in result.timings.items() if isinstance(v, (int, float)) and k != "total"]
    for what, sub in result.timings.items():
        if isinstance(sub, dict):
            parts += [f"{what} {k} {v:.1f} s" for k, v in sub.items() if isinstance(v, (int, float)) and k != "total"]
    items.append(f"  time: {result.timings.get('total', 0):.1f} s" + (f" ({', '.join(parts)})" if parts else ""))
    items.append(
        "A match is the same verdict, not the same number: Monte-Carlo fractions are estimates (95% "
        "Clopper-Pearson intervals); dependent subsets, rank ceilings and context-rank counts are proofs."
    )
    if written:
        items.append(shown(f"Wrote {', '.join(written)}"))
    return items


def render_reproduction(result, written: Sequence[str] = ()) -> None:
    """Print the report of ``mhaaudit reproduce`` (:func:`reproduction_report`); ``written`` names the files written."""
    print_report(reproduction_report(result, written))
