"""The audit report of ``check``: the table of checks by column, the findings, the evidence, the
bound, the depth profile.

What is proven and what is estimated is said in the words of the results themselves; the audit
report's memorisation bound is the one each column carries (``Column.bound``), as the JSON and
parquet outputs give it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from ..check_words import CHECK_MEANING, REGISTRY, decided_status
from ..console import shown
from ..render_kruskal import (
    WHOLE_SET_LEGEND,
    estimate_text,
    exact_text,
    sweep_lines,
    verdict_text,
)
from ..sources import describe_skips
from .common import cell, loading_lines, positions_note, print_report, time_lines

if TYPE_CHECKING:
    pass


def audit_table(result) -> Table:
    """The audit table: a row per registered check, a column per audited column (unavailable where it failed)."""
    info = result.info
    cols = result.columns
    T, asked = _T(result), result.settings.limit
    short = f" ({asked} asked; the data gave no more)" if T is not None and asked and T < asked else ""
    model = shown(result.model)
    title = f"{model}: {info.family} ({info.backend}), n = {info.n}, d = {info.d}, T = {T} examples{short}"
    t = Table(title=title, title_justify="left", show_lines=True)
    t.add_column("check")
    for c in cols:
        head = (
            c.probe.variant
            if c.probe.variant.endswith(f"L{c.probe.layer}") or c.probe.variant in ("embedding", "random-attention")
            else f"{c.probe.variant} (L{c.probe.layer})"
        )
        t.add_column(head, justify="center")
    n, d = info.n, info.d
    for check in REGISTRY.values():  # one row per registered check, in the registry's order
        row = [f"{check.title}\n[dim]{check.size_at(n, T if T is not None else d or 0, d or 0)}[/dim]"]
        for c in cols:
            if c.status != "ok":
                row.append(verdict_text("unavailable"))
                continue
            row.append(cell(_rec(c, check.name)))
        t.add_row(*row)
    return t


def _T(result):
    return result.T


def _rec(col, check) -> dict:
    r = col.tests.get(check)
    return {"verdict": "unavailable"} if r is None else r.record()


def audit_lines(result) -> list[str]:
    """Findings (failures first), unavailable columns, evidence, meanings, the bound."""
    lines = finding_lines(result) + unavailable_lines(result)
    for c in result.columns:
        if c.sweep is not None:
            lines += [escape(x) for x in sweep_lines(c.sweep, label=f"[{c.probe.variant}]")]
    return lines + evidence_lines(result) + meaning_lines() + bound_lines(result)


def finding_lines(result) -> list[str]:
    """What each audited column's checks found: the failures, then what holds, then the checks left without a
    verdict (``unavailable``: no draw or example could be decided)."""
    groups: dict[str, list[tuple[str, str]]] = {"fails": [], "holds": [], "unavailable": []}
    for c in result.columns:
        if c.status != "ok":
            continue
        for check in REGISTRY.values():
            r = c.tests.get(check.name)
            if r is not None:
                # a proof decides the group: a holding estimate beside a proven failure is a failure, and never
                # a bare "holds" (it reads "holds (estimate)", then the exact status), as in the table
                rec = r.record()
                decided = decided_status(r.verdict, rec.get("exact_status"))
                shown_as = estimate_text(rec) + (f" exact: {exact_text(rec)}" if decided != r.verdict else "")
                group = groups.get(decided or "unavailable", groups["unavailable"])
                group.append((shown_as, _finding(result, c, check, r)))
    lines: list[str] = []
    for verdict, heading in (("fails", "Failures"), ("holds", "Holds"), ("unavailable", "No verdict")):
        if groups[verdict]:
            lines.append(f"[bold]{heading}[/bold]")
            lines += [f"  {v} {m}" for v, m in groups[verdict]]
    return lines


def _finding(result, c, check, r) -> str:
    """One check's finding in one column: its reason, what the positions add, its witness."""
    msg = escape(f"[{c.probe.variant}] {check.title}: {r.reason}")
    if check.vectors == "context":  # the context tokens: what their positions add
        msg += escape(positions_note(result.info, c.probe.layer))
    w = getattr(r, "witness", None)
    if w is not None:
        msg += escape(
            f" Witness rows {list(w.indices)[:8]}{' ...' if len(w.indices) > 8 else ''} (sigma_min "
            f"{w.singular_values[-1]:.3g} <= tol {w.tol:.3g})."
        )
    return msg


def unavailable_lines(result) -> list[str]:
    """One line per reason a column is unavailable: the trained columns at every depth share theirs."""
    unavailable: dict[str, list[str]] = {}
    for c in result.columns:
        if c.status != "ok":
            unavailable.setdefault(c.reason, []).append(c.probe.variant)
    return [
        f"[yellow]{escape(', '.join(variants))} unavailable[/yellow]: {shown(reason)}"
        for reason, variants in unavailable.items()
    ]


def evidence_lines(result) -> list[str]:
    """What the audit read and how: sizes and settings, the data, each column's weights, notes, time."""
    lines = ["[bold]Evidence[/bold]"]
    s = result.settings
    info = result.info
    T = _T(result)
    lines.append(
        f"  n = {info.n} tokens (query = token {info.query_index}), d = {info.d}, T = {T} examples, "
        f"{s.samples} draws per test, threshold {s.threshold}, seed {s.seed}, device {s.device}"
    )
    lines.append(f"  rank rule: {s.tolerance.rule}")
    lines += _data_lines(result)
    for c in result.columns:
        if c.status == "ok":
            lines.append(f"  {c.probe.variant}: {escape(c.probe.describe())}; weights: {shown(c.weights_source)}")
            lines += loading_lines(c.weights_read)
    lines += loading_lines(None, s)
    for note in result.notes:
        lines.append(f"  note: {shown(note)}")
    return lines + time_lines(result.timings, [(c.probe.variant, c.timings) for c in result.columns])


def _data_lines(result) -> list[str]:
    """The data read, the inputs skipped and the image policy."""
    lines = [f"  data: {shown(result.data)}"]
    skips = getattr(result, "skips", None)
    if skips:
        lines.append(f"  skipped inputs: {shown(describe_skips(skips.as_dict()))}")
    elif result.skipped:
        lines.append(f"  skipped inputs: {result.skipped}")
    if getattr(result, "image_policy", ""):
        lines.append(escape(f"  image modes: {result.image_policy}"))
    return lines


def meaning_line(check: str) -> str:
    """What passing ``check`` means, in one line; empty for a check without one."""
    return CHECK_MEANING.get(check, "")


def meaning_lines() -> list[str]:
    """What each registered check means, and how a cell reads."""
    lines = ["[bold]What the checks mean[/bold]"]
    for check in REGISTRY.values():
        lines.append(f"  {check.title}: {check.meaning}.")
    lines.append(
        "  Each cell gives the estimate under the paper's rule (Monte-Carlo fractions, with 95% Clopper-Pearson "
        "intervals) and, where it is decided, the exact status (exact: fails or holds, and what proves it: a dependent "
        "subset found, a whole-set rank below k, an exhaustive check); Assumption 2's counts are exact."
    )
    return lines


def bound_lines(result) -> list[str]:
    """The memorisation bound (Theorem 1 / Remark 1) each audited column carries."""
    bounds = [(c, c.bound) for c in result.columns if c.status == "ok" and c.bound is not None]
    if not bounds:
        return []
    b0 = bounds[0][1]
    out = [
        f"[bold]Memorisation bound[/bold] (Theorem 1 with H = {b0.heads} heads of d_h = {b0.head_dim}; the count is "
        "reconstructed from the proof)"
    ]
    for c, b in bounds:
        if b.applies:
            out.append(f"  {c.probe.variant}: {b.count} examples ({b.formula}; {b.reason})")
        else:
            hint = f"; {c.bound_hint}" if c.bound_hint else ""
            out.append(f"  {c.probe.variant}: no guarantee ({b.reason}{hint})")
    return out


def is_depth_profile(result) -> bool:
    """Whether the audit ran over more than two layers, so that it reads as a depth profile."""
    return result.settings.layers is not None and len({c.probe.layer for c in result.columns}) > 2


def depth_tables(result) -> list[Table]:
    """One table per set of weights: a row per depth, a column per check."""
    info = result.info
    tables = []
    for weights in dict.fromkeys(c.probe.init for c in result.columns):
        cols = [c for c in result.columns if c.probe.init == weights]
        t = Table(
            title=f"{shown(result.model)}: depth profile, {weights} weights "
            f"(n = {info.n}, d = {info.d}, T = {_T(result)})",
            title_justify="left",
        )
        t.add_column("layer", justify="right")
        for check in REGISTRY.values():
            t.add_column(check.title, justify="center")
        if any(c.sweep is not None for c in cols):
            t.add_column("Kruskal estimate", justify="right")
        for c in cols:
            row = [str(c.probe.layer)]
            for name in REGISTRY:
                row.append(verdict_text("unavailable") if c.status != "ok" else cell(_rec(c, name)).replace("\n", " "))
            if any(x.sweep is not None for x in cols):
                row.append(str(c.sweep.estimate) if c.sweep is not None else "-")
            t.add_row(*row)
        tables.append(t)
    return tables


def audit_report(result, *, save_features=None, out=None, plot=None) -> list:
    """``mhaaudit check``: the table (or the depth profile), the findings, the files written."""
    items: list = depth_tables(result) if is_depth_profile(result) else [audit_table(result)]
    if any(
        t.record().get("scope") == "whole-set" for c in result.columns if c.status == "ok" for t in c.tests.values()
    ):
        items.append(WHOLE_SET_LEGEND)
    items += audit_lines(result)
    written = [str(p) for p in (out, plot) if p is not None]
    if save_features is not None:
        written.append(f"{save_features}/<variant>/")
    if written:
        items.append(f"Wrote {shown(', '.join(written))}")
    return items


def render_audit(result, *, save_features=None, out=None, plot=None) -> None:
    """Print the report of ``mhaaudit check`` (:func:`audit_report`); the paths name the files written."""
    print_report(audit_report(result, save_features=save_features, out=out, plot=plot))
