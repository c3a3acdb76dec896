"""How a series prints itself: a table per trained column (checkpoints as rows, checks as columns),
the reference audited once, a line for each change and for each checkpoint that repeats the one
before it. Renderers only: every number and every change is one the result gives
(:meth:`~mhaaudit.series.SeriesResult.trend`, :meth:`~mhaaudit.series.SeriesResult.changes`).
"""

from __future__ import annotations

from rich.table import Table

from ..check_words import fraction_text
from ..checks import REGISTRY
from ..console import shown
from ..render import audit_table, meaning_lines
from ..render_kruskal import verdict_text
from ..render_seeds import seeds_tables
from ..sizes import human_bytes

__all__ = ["series_report", "trend_tables"]

ESTIMATE = "sweep_estimate"


def _number(v) -> str:
    """A step, order or estimate: whole numbers as such, a median between two whole numbers to one decimal."""
    if v is None:
        return "-"
    return str(int(v)) if float(v).is_integer() else f"{v:.1f}"


def _fraction(v, digits: int = 4) -> str:
    return "-" if v is None else fraction_text(v, digits)


def _cell(p) -> str:
    """One check at one checkpoint: the fraction (with seeds: the median, then the range), the verdict
    (with seeds: how many hold), the exact status."""
    if p.verdict == "unavailable":
        return verdict_text("unavailable")
    lines = [_fraction(p.value)]
    if p.low is not None and p.high is not None:
        lines.append(f"[{_fraction(p.low, 3)}, {_fraction(p.high, 3)}]")
    held = f" {p.seeds_holding}/{p.seeds}" if p.seeds is not None and p.seeds_holding is not None else ""
    lines.append(verdict_text(p.verdict or "-") + held)
    lines.append(f"exact: {p.exact_status or '-'}")
    return "\n".join(lines)


def _estimate_cell(p) -> str:
    """A column's Kruskal-rank estimate at one checkpoint (with seeds: the median and range), its certified
    floor and ceiling, and the exact Kruskal rank where they meet."""
    lines = [_number(p.value)]
    if p.low is not None and p.high is not None:
        lines.append(f"[{_number(p.low)}, {_number(p.high)}]")
    lines.append(f"floor {p.floor}")
    lines.append(f"ceiling {p.ceiling}")
    if p.exact_status is not None:
        lines.append(f"exact {p.exact_status}")
    return "\n".join(lines)


def trend_tables(result) -> list[Table]:
    """One table per trained column: a row per checkpoint done, a column per check (and the estimate)."""
    points = result.trend()
    columns: dict[tuple[str, int], list] = {}
    for p in points:
        columns.setdefault((p.variant, p.layer), []).append(p)
    seeds = (
        f"; over {len(result.plan.seeds)} seeds: the median, \\[the range], the seeds that hold"
        if result.plan is not None
        else ""
    )
    tables = []
    for (variant, layer), cells in columns.items():
        swept = any(p.check == ESTIMATE for p in cells)
        t = Table(
            title=f"{shown(result.model)}: {shown(variant)} (layer {layer}) at each checkpoint{seeds}",
            title_justify="left",
        )
        t.add_column("#", justify="right")
        t.add_column("checkpoint", overflow="fold")
        t.add_column("step", justify="right")
        for check in REGISTRY.values():
            t.add_column(check.title, justify="center")
        if swept:
            t.add_column("Kruskal rank", justify="center")
        rows: dict[str, dict] = {}
        for p in cells:
            rows.setdefault(str(p.checkpoint), {})[p.check] = p
        for name, row in rows.items():
            p0 = next(iter(row.values()))
            label = shown(name) + (f"\n[dim](identical to {shown(p0.identical_to)})[/dim]" if p0.identical_to else "")
            out = [str(p0.order), label, _number(p0.step)]
            out += [_cell(row[c]) if c in row else "-" for c in REGISTRY]
            if swept:
                out.append(_estimate_cell(row[ESTIMATE]) if ESTIMATE in row else "-")
            t.add_row(*out)
        tables.append(t)
    return tables


def change_lines(result) -> list[str]:
    """Every change of each check's verdict and exact status from one checkpoint to the next, one line each; a
    check without any says so."""
    changes = result.changes()
    lines = ["[bold]Changes[/bold] (from each checkpoint to the next)"]
    lines += [f"  {shown(c.line())}" for c in changes]
    changed = {(c.variant, c.layer, c.check) for c in changes}
    still = sorted(
        {(p.variant, p.layer, p.check) for p in result.trend() if p.check != ESTIMATE} - changed,
        key=lambda x: (x[0], x[1], list(REGISTRY).index(x[2])),
    )
    done = len(result.done())
    for variant, layer, check in still:
        lines.append(
            f"  {REGISTRY[check].title} ({shown(variant)}, layer {layer}): no change of verdict or exact status over "
            f"the {done} checkpoint{'s' if done != 1 else ''}"
        )
    return lines


def identical_lines(result) -> list[str]:
    """One line per checkpoint whose tensors are byte-identical to the one before it."""
    lines = []
    for c in result.identical():
        d = c.digest
        what = (
            f"its {d.files} weights and config files ({human_bytes(d.bytes)}) are"
            if d.files
            else f"the {d.tensors} tensors the audit reads ({human_bytes(d.bytes)}) are"
        )
        lines.append(
            shown(
                f"  {c.checkpoint.label}: {what} "
                f"byte-identical to those of {c.identical_to} (SHA-256 {d.sha256[:16]}...): not audited again; its "
                f"records are those of {c.same_as}"
            )
        )
    return ["[bold]Identical checkpoints[/bold]", *lines] if lines else []


def series_lines(result) -> list[str]:
    """What the series read: its checkpoints, what each read, the data, notes and time."""
    lines = ["[bold]The series[/bold]"]
    done = len(result.done())
    total = len(result.checkpoints)
    source = "hub revisions" if result.series.source == "hub" else "local checkpoints"
    lines.append(f"  {done} of {total} {source} done" + ("" if result.complete else " (interrupted: rerun to resume)"))
    for c in result.runs[0].checkpoints:
        read = c.audit.info.weights_read if c.audit is not None else None
        how = "identical to the one before" if c.status == "identical" else "audited"
        if c.resumed:
            how += " (read back from the results file)"
        said = f"  {c.checkpoint.order}. {c.checkpoint.label}: {how}"
        if read is not None and c.status == "audited":
            said += (
                f"; read {human_bytes(read.bytes_read)} of {human_bytes(read.bytes_total)} ({read.method}, "
                f"{read.stored_dtype})"
            )
        lines.append(shown(said))
    lines += [f"  note: {shown(n)}" for n in result.notes]
    if result.timings:
        lines.append("  time: " + ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items()))
    return lines


def series_report(result) -> list:
    """``mhaaudit check --checkpoints``: the reference, a table per trained column, the changes, the
    identical checkpoints, what was read."""
    items: list = []
    reference = result.runs[0].reference if result.runs else None
    over_seeds = result.reference_over_seeds()
    if over_seeds is not None:  # as the trained columns' tables and the records give it: over the seeds
        items.append("[bold]Reference[/bold] (random weights, audited once for the series, in each seed)")
        items += seeds_tables(over_seeds)
    elif reference is not None:
        items.append("[bold]Reference[/bold] (random weights, audited once for the series)")
        items.append(audit_table(reference))
    items += trend_tables(result)
    items += change_lines(result)
    items += identical_lines(result)
    items += series_lines(result)
    items += meaning_lines()
    return items
