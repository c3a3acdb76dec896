"""The report of ``capacity``: Theorem 1's bound per column and head count, the certificate and
its evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from ..console import shown
from ..errors import Param
from ..render_kruskal import (
    verdict_text,
)
from .common import loading_lines, positions_note, print_report, time_lines

if TYPE_CHECKING:
    pass


def capacity_table(result) -> Table:
    """One row per column and head count h, from the result's records."""
    info, s = result.info, result.settings
    title = (
        f"{shown(result.model)}: memorisation capacity of the attention of block {s.layer} "
        f"(n = {info.n}, d = {info.d}, H = {info.num_heads}, d_h = {s.head_dim}; "
        f"{s.attention} key/query weights" + ("; shared context" if s.shared_context else "") + ")"
    )
    t = Table(title=title, title_justify="left")
    cols = ["column", "heads h", "T", "rank(Z) = certified", "min(T, h d)", "bound", "bound from", "residual"]
    if s.shared_context:
        cols += ["h (n - 1) + 1", "Prop. 2"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("column", "bound from", "Prop. 2") else "right")
    for r in result.records():
        if r["status"] != "ok":
            row = [r["variant"], "-", "-", verdict_text("unavailable"), "-", "-", "-", "-"]
            if s.shared_context:
                row += ["-", "-"]
        else:
            row = [
                r["variant"],
                str(r["heads"]),
                str(r["T"]),
                str(r["rank"]),
                str(r["rank_cap"]),
                "none" if r["bound"] is None else str(r["bound"]),
                r["bound_kind"],
                f"{r['residual']:.1e}",
            ]
            if s.shared_context:
                row += [str(r["prop2_bound"]), verdict_text(r["prop2_verdict"])]
        t.add_row(*row)
    return t


def capacity_bound_lines(result) -> list[str]:
    """The bound of each column (largest h), with the assumptions it rests on."""
    n, s = result.info.n, result.settings
    lines = [
        "[bold]The bound[/bold] (Theorem 1 / Remark 1; the counts H (min(n, d_h) - 1) + 1 and "
        "H (min(k, d_h) - 1) + 1 are reconstructed from the paper's proof, not read verbatim)"
    ]
    for c in result.columns:
        if c.status != "ok":
            lines.append(f"  [yellow]{c.variant} unavailable[/yellow]: {shown(c.reason)}")
            continue
        a = c.assumptions
        b = c.bounds[max(c.bounds)]
        if b.applies:
            lines.append(
                escape(f"  {c.variant}: {b.count} examples with H = {b.heads} heads ({b.formula}); {b.reason}")
            )
        else:
            lines.append(escape(f"  {c.variant}: the theorem does not apply: {b.reason}"))
        if a is not None:
            frac = f" (satisfied fraction {a.a1_fraction:.4f})" if a.a1_fraction is not None else ""
            lines.append(escape(f"    Assumption 1 (k = n = {n}): {a.a1 or 'not checked'}{frac}; {a.a1_reason}"))
            lines.append(
                escape(
                    f"    Assumption 2 (rank E_t = n): {a.a2 or 'not checked'}; {a.a2_reason}"
                    + positions_note(result.info, s.layer - 1)
                )
            )
            if a.kruskal_estimate is not None:
                lines.append(escape(f"    Kruskal-rank estimate k = {a.kruskal_estimate}: {a.estimate_note}"))
            lines.append(shown(f"    assumptions {a.source}"))
        for note in b.notes[1:]:
            lines.append(shown(f"    note: {note}"))
        if a is not None and a.kruskal_estimate == 1 and s.layer == 1:
            lines.append(
                escape(
                    "    hint: the queries are numerically one vector (e.g. a [CLS] token before any attention, "
                    "the same for every input), so Remark 1 guarantees a single example; "
                )
                + Param("block")
                + " 2 audits and certifies block 2's attention on the output of block 1, where the paper finds "
                "Assumption 1 holding"
            )
    return lines


def certificate_lines(result) -> list[str]:
    """What rank(Z) certifies for each column (largest h), beside its bound."""
    lines = [
        "[bold]The certificate[/bold]",
        "  rank(Z) = r: one attention layer with these key/query weights memorises the r chosen examples for ANY "
        "labels; checked by solving the value/output weights for random N(0, 1) labels (residual = max |Z_S w - y| / "
        "max |y|).",
    ]
    for c in result.columns:
        if c.status != "ok" or not c.certificates:
            continue
        last = c.certificates[-1]
        b = c.bounds[last.heads]
        cmp = ""
        if b.applies and last.rank >= b.count:
            cmp = f"; at least the bound {b.count}"
        elif b.applies and last.rank == c.T:
            cmp = (
                f"; the bound {b.count} exceeds T = {c.T}, so every example is certified "
                "(raise " + Param("limit") + " to compare)"
            )
        elif b.applies:
            cmp = f"; below the bound {b.count} (the theorem speaks of the best key/query weights; these certify fewer)"
        lines.append(
            escape(
                f"  {c.variant}: r = {last.rank} of T = {c.T} examples with h = {last.heads} heads "
                f"(at most min(T, h d) = {last.rank_cap})"
            )
            + cmp  # a Message where it names a parameter: the command line writes its flag there
            + escape(f"; residual {last.residual:.2e}; method: {last.method}")
        )
        if last.rank == c.T:
            lines.append(
                escape(
                    f"    the rank is capped by T: the certificate memorises all {c.T} examples; "
                    "more examples could certify more"
                )
            )
    return lines


def capacity_evidence_lines(result) -> list[str]:
    """The evidence of a capacity audit: tokens, rank rules, draws, weights read, notes and timings, as lines."""
    s = result.settings
    lines = [
        "[bold]Evidence[/bold]",
        shown(f"  tokens: {s.tokens}; query = token {result.info.query_index}; data: {result.data}"),
        escape(f"  Z rank rule: {s.z_tolerance}"),
        escape(f"  assumption rank rule: {s.assumption_tolerance}"),
    ]
    if s.from_path is None:
        lines.append(
            f"  Assumption 1: {s.samples} draws (stopping once decided), threshold {s.threshold}, seed {s.seed}, "
            f"device {s.device}"
        )
    for c in result.columns:
        lines += loading_lines(c.weights_read, label=f"{c.variant} weights ")
    lines += loading_lines(None, s)
    lines += [shown(f"  note: {note}") for note in result.notes]
    return lines + time_lines(result.timings, [(c.variant, c.timings) for c in result.columns])


def capacity_report(result, *, out=None, plot=None) -> list:
    """``mhaaudit capacity``: the table, the bound, the certificate and the evidence."""
    items: list = [
        capacity_table(result),
        *capacity_bound_lines(result),
        *certificate_lines(result),
        *capacity_evidence_lines(result),
    ]
    written = [str(p) for p in (out, plot) if p is not None]
    if written:
        items.append(shown(f"Wrote {', '.join(written)}"))
    return items


def render_capacity(result, *, out=None, plot=None) -> None:
    """Print the report of ``mhaaudit capacity`` (:func:`capacity_report`); the paths name the files written."""
    print_report(capacity_report(result, out=out, plot=plot))
