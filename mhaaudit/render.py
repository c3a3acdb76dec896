"""Every table and report of the commands, and the strict JSON printer: renderers only.

Nothing is computed here that a result did not return: each function lays out the fields of a
result object (an audit, Kruskal tests and sweeps, a capacity result, a memorisation grid) as
rich tables and lines on stdout, or prints a document as strict JSON. What is proven and what is
estimated is said in the words of the results themselves; the audit report's memorisation bound
is the one each column carries (``Column.bound``), as the JSON and parquet outputs give it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .checks import CHECK_MEANING, CHECK_TITLES, REGISTRY
from .console import TextConsole
from .display import text_width
from .errors import plain
from .facts import AuditSettings, CapacitySettings, ModelFacts, ReadFacts, meta_value
from .kruskal.report import (
    WHOLE_SET_LEGEND,
    estimate_text,
    exact_text,
    kruskal_report,
    sweep_lines,
    verdict_text,
)
from .models.families import positions_note as family_positions_note
from .models.shards import weights_read_text
from .sources import describe_skips

if TYPE_CHECKING:
    from .kruskal import KruskalResult


def report_width() -> int:
    """The width reports on stdout are laid out for: :func:`~mhaaudit.display.text_width` (``COLUMNS``
    when set, else the terminal's when stdout is one, else :data:`~mhaaudit.display.REDIRECTED_WIDTH`
    for a file or a pipe). The terminal is asked through ``sys.stdout`` itself, not descriptor 1,
    which is stderr's while a command runs (:mod:`mhaaudit.stdio`)."""
    return text_width()


def stdout_console() -> Console:
    """Reports on stdout, laid out to fit :func:`report_width`; colour only on a terminal, never
    with ``NO_COLOR``; control characters in names shown escaped (:class:`~mhaaudit.console.TextConsole`)."""
    return TextConsole(file=sys.stdout, width=report_width())


def print_report(items: list) -> None:
    """A report (rich tables and markup lines, as the ``*_report`` functions give them) on stdout."""
    con = stdout_console()
    for item in items:
        con.print(item, highlight=False)


def cell(rec: dict) -> str:
    """One table cell: the estimate verdict, the evidence in brief, and the exact status when it
    is decided (a table never shows a bare "holds" beside a proof of failure)."""
    v = rec.get("verdict", "")
    if v == "unavailable":
        return verdict_text(v)
    if rec.get("scope") == "per-example":  # every example decided (Assumption 2): the count is exact
        return f"{verdict_text(v)}\n{rec['satisfied']}/{rec['T']} full"
    lines = [estimate_text(rec), f"{rec['fraction']:.4f}" if rec.get("sampled", True) else "no sampling"]
    if rec.get("exact_status", "undecided") != "undecided":
        lines.append(f"exact: {exact_text(rec)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- Kruskal tests and sweeps


def render_kruskal(result: KruskalResult) -> None:
    """Print the terminal report of a Kruskal-rank estimate (:func:`kruskal_report`)."""
    print_report(kruskal_report(result))


# --------------------------------------------------------------------------- strict JSON


def _finite(o):
    """Strict JSON: non-finite numbers become null."""
    if isinstance(o, float):
        return o if o == o and o not in (float("inf"), float("-inf")) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def print_json(doc: dict) -> None:
    """``doc`` as strict JSON on stdout: non-finite numbers become null, numpy values plain numbers."""
    sys.stdout.write(
        json.dumps(_finite(json.loads(json.dumps(doc, default=_default))), indent=2, allow_nan=False) + "\n"
    )
    sys.stdout.flush()


def _default(o):
    try:
        if isinstance(o, np.generic):
            return o.item()
    except Exception:  # noqa: BLE001  # pragma: no cover - serialising a value must not raise
        pass
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def meaning_line(check: str) -> str:
    """What passing ``check`` means, in one line; empty for a check without one."""
    return CHECK_MEANING.get(check, "")


# --------------------------------------------------------------------------- the audit (Table 1 / Table 3)


def audit_table(result) -> Table:
    """The audit table: a row per registered check, a column per audited column (unavailable where it failed)."""
    info = result.info
    cols = result.columns
    T, asked = _T(result), result.settings.limit
    short = f" ({asked} asked; the data gave no more)" if T is not None and asked and T < asked else ""
    title = f"{result.model}: {info.family} ({info.backend}), n = {info.n}, d = {info.d}, T = {T} examples{short}"
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
    """What each audited column's checks found: the failures, then what holds."""
    fails: list[tuple[str, str]] = []
    holds: list[tuple[str, str]] = []
    for c in result.columns:
        if c.status != "ok":
            continue
        for check in REGISTRY.values():
            r = c.tests.get(check.name)
            if r is not None:
                (fails if r.verdict == "fails" else holds).append(
                    (verdict_text(r.verdict), _finding(result, c, check, r))
                )
    lines: list[str] = []
    if fails:
        lines.append("[bold]Failures[/bold]")
        lines += [f"  {v} {m}" for v, m in fails]
    if holds:
        lines.append("[bold]Holds[/bold]")
        lines += [f"  {v} {m}" for v, m in holds]
    return lines


def _finding(result, c, check, r) -> str:
    """One check's finding in one column: its reason, what the positions add, its witness."""
    msg = escape(f"[{c.probe.variant}] {check.title}: {r.reason}")
    if check.vectors == "contexts":  # the context tokens: what their positions add
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
        f"[yellow]{escape(', '.join(variants))} unavailable[/yellow]: {escape(reason)}"
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
            lines.append(f"  {c.probe.variant}: {c.probe.describe()}; weights: {c.weights_source}")
            lines += loading_lines(c.weights_read)
    lines += loading_lines(None, s)
    for note in result.notes:
        lines.append(f"  note: {note}")
    return lines + time_lines(result.timings, [(c.probe.variant, c.timings) for c in result.columns])


def _data_lines(result) -> list[str]:
    """The data read, the inputs skipped and the image policy."""
    lines = [escape(f"  data: {result.data}")]
    skips = getattr(result, "skips", None)
    if skips:
        lines.append(escape(f"  skipped inputs: {describe_skips(skips.as_dict())}"))
    elif result.skipped:
        lines.append(f"  skipped inputs: {result.skipped}")
    if getattr(result, "image_policy", ""):
        lines.append(escape(f"  image modes: {result.image_policy}"))
    return lines


def time_lines(timings: dict[str, float], columns) -> list[str]:
    """The run's timings, then each column's: ``columns`` are (name, timings) pairs."""
    lines = ["  time: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())]
    for name, spent in columns:
        if spent:
            lines.append(f"    {name}: " + ", ".join(f"{k} {v:.1f} s" for k, v in spent.items()))
    return lines


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


def positions_note(info: ModelFacts, layer: int) -> str:
    """What an Assumption 2 verdict at ``layer`` owes to the model's kind of positions (only layer 0 of a model
    without a position term in its embedding output has one); empty where it does not apply."""
    return family_positions_note(info.as_dict(), layer)


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
            title=f"{result.model}: depth profile, {weights} weights (n = {info.n}, d = {info.d}, T = {_T(result)})",
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
        items.append(escape(f"Wrote {', '.join(written)}"))
    return items


def render_audit(result, *, save_features=None, out=None, plot=None) -> None:
    """Print the report of ``mhaaudit check`` (:func:`audit_report`); the paths name the files written."""
    print_report(audit_report(result, save_features=save_features, out=out, plot=plot))


# --------------------------------------------------------------------------- capacity (Theorem 1 and the certificate)


def capacity_table(result) -> Table:
    """One row per column and head count h, from the result's records."""
    info, s = result.info, result.settings
    title = (
        f"{result.model}: memorisation capacity of the attention of block {s.layer} "
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
            lines.append(f"  [yellow]{c.variant} unavailable[/yellow]: {escape(c.reason)}")
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
            lines.append(escape(f"    assumptions {a.source}"))
        for note in b.notes[1:]:
            lines.append(escape(f"    note: {note}"))
        if a is not None and a.kruskal_estimate == 1 and s.layer == 1:
            lines.append(
                escape(
                    plain(
                        "    hint: the queries are numerically one vector (e.g. a [CLS] token before any attention, "
                        "the same for every input), so Remark 1 guarantees a single example; {param:block} 2 audits "
                        "and certifies block 2's attention on the output of block 1, where the paper finds "
                        "Assumption 1 holding"
                    )
                )
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
            cmp = plain(
                f"; the bound {b.count} exceeds T = {c.T}, so every example is certified "
                "(raise {param:limit} to compare)"
            )
        elif b.applies:
            cmp = f"; below the bound {b.count} (the theorem speaks of the best key/query weights; these certify fewer)"
        lines.append(
            escape(
                f"  {c.variant}: r = {last.rank} of T = {c.T} examples with h = {last.heads} heads "
                f"(at most min(T, h d) = {last.rank_cap}){cmp}; residual {last.residual:.2e}; "
                f"method: {last.method}"
            )
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
        escape(f"  tokens: {s.tokens}; query = token {result.info.query_index}; data: {result.data}"),
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
    lines += [escape(f"  note: {note}") for note in result.notes]
    return lines + time_lines(result.timings, [(c.variant, c.timings) for c in result.columns])


def loading_lines(
    read: ReadFacts | None, settings: AuditSettings | CapacitySettings | None = None, label: str = ""
) -> list[str]:
    """What loading the trained weights read, and the batch size when it was chosen automatically."""
    lines = [escape(f"    {label}{weights_read_text(meta_value(read))}")] if read else []
    how = settings.batch_size_choice if settings is not None else None
    if settings is not None and how not in (None, "given"):
        lines.append(escape(f"  batch size: {settings.batch_size} (auto: {how})"))
    return lines


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
        items.append(escape(f"Wrote {', '.join(written)}"))
    return items


def render_capacity(result, *, out=None, plot=None) -> None:
    """Print the report of ``mhaaudit capacity`` (:func:`capacity_report`); the paths name the files written."""
    print_report(capacity_report(result, out=out, plot=plot))


# --------------------------------------------------------------------------- memorize (Section 5.2)


def _setting(run) -> str:
    return f"H={run.heads} n={run.n} d_h={run.head_dim}"


def memorize_table(grid) -> Table:
    """One row per trained point of the grid (with the saturation columns when counted)."""
    s, recipe = grid.settings, grid.settings.recipe
    metric = "training accuracy" if recipe.task == "classification" else f"fraction with |error| < {recipe.tolerance}"
    table = Table(
        title=f"Memorisation ({recipe.task}, {recipe.context} context, d = {s.d}; memorised = {metric})",
        title_justify="left",
    )
    sat = any(r.saturation is not None for r in grid.runs)
    if sat:
        table.caption = ">=2 sat.: examples with >=2 heads saturated; >=1 unsat.: with >=1 head unsaturated"
        table.caption_justify = "left"
    table.add_column("setting", justify="left", no_wrap=True)
    for col in ("size T", "memorised", "count", "epochs", "steps", "final loss", "time (s)"):
        table.add_column(col, justify="right")
    if sat:
        table.add_column(">=2 sat.", justify="right")
        table.add_column(">=1 unsat.", justify="right")
    for r in grid.runs:
        cells = [
            _setting(r),
            str(r.size),
            f"{r.memorized:.3f}",
            str(r.memorized_count),
            str(r.epochs_run) + (" (early)" if r.stopped_early else ""),
            str(r.steps_run),
            f"{r.final_loss:.4g}",
            f"{r.seconds:.1f}" + (" (file)" if r.reused else ""),
        ]
        if sat and r.saturation is None:
            cells += ["-", "-"]
        elif sat:
            cells += [f"{r.saturation.frac_at_least_two_saturated:.3f}", f"{r.saturation.frac_some_unsaturated:.3f}"]
        table.add_row(*cells)
    return table


def fit_table(grid) -> Table:
    """The linear fits of the count memorised against H."""
    ft = Table(title="Linear fit of the count memorised against H (points with memorised < 0.99)", title_justify="left")
    for col in ("size T", "slope (examples per head)", "intercept", "R^2", "points", "H values"):
        ft.add_column(col, justify="left" if col == "size T" else "right")
    for f in grid.fits:
        ft.add_row(
            "all" if f.size is None else str(f.size),
            f"{f.slope:.2f}",
            f"{f.intercept:.2f}",
            f"{f.r2:.4f}",
            str(f.points),
            ",".join(str(x) for x in f.xs),
        )
    return ft


def seed_summary_table(grid) -> Table:
    """The memorised fraction of each setting over the seeds: mean, standard deviation, range."""
    t = Table(title=f"Over {len(grid.seeds)} seeds ({', '.join(map(str, grid.seeds))})", title_justify="left")
    for col in ("setting", "size T", "seeds", "mean", "std", "lowest", "highest", "mean count"):
        t.add_column(col, justify="left" if col == "setting" else "right")
    for m in grid.summary:
        t.add_row(
            _setting(m),
            str(m.size),
            str(m.seeds),
            f"{m.mean:.3f}",
            "-" if m.std is None else f"{m.std:.3f}",
            f"{m.low:.3f}",
            f"{m.high:.3f}",
            f"{m.mean_count:.1f}",
        )
    return t


def memorize_report(grid) -> list:
    """``mhaaudit memorize``: the points, the fits against H, the saturation histograms, the files."""
    items: list = [memorize_table(grid)]
    if len(grid.seeds) > 1 and grid.summary:
        items.append(seed_summary_table(grid))
    if grid.fits:
        items.append(fit_table(grid))
    elif grid.vary == "heads":
        items.append("Linear fit against H: fewer than two non-saturated values of H per size; none computed.")
    for r in grid.runs:
        if r.saturation is not None:
            items.append(
                f"saturated heads per example, {_setting(r)} T={r.size}: "
                + ", ".join(f"{k}: {c}" for k, c in enumerate(r.saturation.histogram) if c)
            )
    for what, path in (("results", grid.out), ("plot", grid.plot)):
        if path:
            items.append(escape(f"{what}: {path}"))
    return items


def render_memorize(grid) -> None:
    """Print the report of ``mhaaudit memorize`` (:func:`memorize_report`)."""
    print_report(memorize_report(grid))


# --------------------------------------------------------------------------- reproduce (the paper's values beside ours)

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


KIND_TITLES = {
    "ranks": "ranks of d-subsets",
    "sweep": "sweep fraction",
    "shape": "Figure 1 level",
    "estimate": "Kruskal estimate",
    "linear": "linear in H",
    "monotone": "rises with H",
    "theorem1": "Theorem 1 count",
}


def reproduction_table(result) -> tuple[Table, list[str]]:
    """One row per published value: the paper's verdict and number, ours with its 95% interval,
    whether they match (with the number of the note giving the reason when they do not). The
    model column appears when the target has several models; the table fits 100 columns."""
    several = len({c.model for c in result.comparisons}) > 1
    t = Table(title=f"{result.title}: the paper's values beside this run's", title_justify="left")
    if several:
        t.add_column("model", no_wrap=True)
    t.add_column("column", no_wrap=True)
    t.add_column("what", ratio=1)  # the one column that wraps
    t.add_column("k", justify="right", no_wrap=True)
    t.add_column("paper", no_wrap=True)
    t.add_column("ours (95% CI)", no_wrap=True)
    t.add_column("match", no_wrap=True)
    notes: dict[str, int] = {}
    for c in result.comparisons:
        what = CHECK_TITLES.get(c.check, c.check) if c.kind == "check" else KIND_TITLES.get(c.kind, c.kind)
        k = "" if c.k is None else (str(c.k) if c.our_k in (None, c.k) else f"{c.k} / {c.our_k}")
        mark = STATUS_MARK[c.status]
        if c.reason:
            mark += escape(f" [{notes.setdefault(c.reason, len(notes) + 1)}]")
        t.add_row(*([c.model] if several else []), escape(c.column), what, k, _paper_cell(c), _our_cell(c), mark)
    return t, [f"[{i}] {escape(reason)}" for reason, i in notes.items()]


def reproduction_report(result, written: Sequence[str] = ()) -> list:
    """``mhaaudit reproduce``: the comparison table, the reasons for every difference, what the run was."""
    table, reasons = reproduction_table(result)
    counts = result.counts()
    items: list = [
        table,
        f"{counts['match']} match, {counts['differs']} differ, {counts['undetermined']} undetermined, "
        f"{counts['unavailable']} unavailable, of {len(result.comparisons)} published values "
        f"(source: {escape(result.source)}). k: the paper's / ours where they differ.",
    ]
    if reasons:
        items.append("[bold]Why they differ[/bold] (from this run's records)")
        items += [f"  {line}" for line in reasons]
    items.append("[bold]This run[/bold]")
    items += [f"  {escape(line)}" for line in result.setting]
    items += [f"  note: {escape(note)}" for note in dict.fromkeys(result.notes)]
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
        items.append(escape(f"Wrote {', '.join(written)}"))
    return items


def render_reproduction(result, written: Sequence[str] = ()) -> None:
    """Print the report of ``mhaaudit reproduce`` (:func:`reproduction_report`); ``written`` names the files written."""
    print_report(reproduction_report(result, written))
