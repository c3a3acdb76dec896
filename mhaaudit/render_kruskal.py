"""How a Kruskal-rank test and a sweep are shown: the rich tables and lines of their reports.

What ``print(test)`` and a notebook show for a :class:`~mhaaudit.kruskal.SubsetTest` or a
:class:`~mhaaudit.kruskal.Sweep`, and the pieces the command reports (:mod:`mhaaudit.render`) lay
out around them. Renderers only: each function lays out the fields of a result; a test names its
check by its own ``title``. Below the estimator's package (it imports none of it): a report names a
verdict without loading the estimator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from . import phases
from .check_words import decided_status, fraction_text
from .console import shown

if TYPE_CHECKING:
    from .kruskal.results import KruskalResult, SubsetTest, Sweep

VERDICT_STYLE = {"holds": "green", "fails": "red", "unavailable": "yellow"}


def verdict_text(verdict: str) -> str:
    """``verdict`` in rich markup, coloured by :data:`VERDICT_STYLE` (white for any other word)."""
    style = VERDICT_STYLE.get(verdict, "white")
    return f"[{style}]{verdict}[/{style}]"


WHOLE_SET_MARK = "whole set"
WHOLE_SET_LEGEND = (
    "[yellow]whole set[/yellow]: k reaches T, so the test is one set, not a sample of k-subsets: "
    "it does not answer the paper's question (the reason names the run that does; where k > d, any run fails)."
)


def estimate_text(rec: dict) -> str:
    """The estimate verdict as a table shows it: marked when it is one set, not a sample (k >= T),
    and called an estimate when a proof says otherwise."""
    v = rec.get("verdict", "")
    if rec.get("scope") == "whole-set":
        return f"[yellow]{v} ({WHOLE_SET_MARK})[/yellow]"
    if decided_status(v, rec.get("exact_status")) != v:
        return f"{verdict_text(v)} (estimate)"
    return verdict_text(v)


def exact_text(rec: dict) -> str:
    """The exact status as a table shows it: ``fails (witness)``, ``holds (exhaustive)``, ``undecided``."""
    status = rec.get("exact_status", "undecided")
    if status == "undecided":
        return "undecided"
    return f"{verdict_text(status)} ({rec.get('exact_basis')})"


def kruskal_table(tests: list[SubsetTest], title: str = "Kruskal-rank tests") -> Table:
    """A rich table of ``tests``, one row each: check, k, T, d, the draws and their fraction with its 95 % CI
    ("-" for a test that drew nothing, and a fraction "-" where no draw could be decided: 0 of 0 is no
    fraction), the estimate verdict and the exact status."""
    t = Table(title=title, title_justify="left")
    for col in ("check", "k", "T", "d", "draws", "independent", "fraction", "95% CI", "verdict", "exact"):
        t.add_column(col, justify="right" if col not in ("check", "verdict", "exact") else "left")
    for r in tests:
        rec = r.record()
        measured = r.sampled and r.samples > 0
        t.add_row(
            r.title or r.check,
            str(r.k),
            str(r.T),
            str(r.d),
            str(r.samples) if r.sampled else "-",
            str(r.satisfied) if r.sampled else "-",
            fraction_text(r.fraction) if measured else "-",
            f"[{r.ci_low:.4f}, {r.ci_high:.4f}]" if measured else "-",
            estimate_text(rec),
            exact_text(rec),
        )
    return t


def test_evidence_lines(r: SubsetTest) -> list[str]:
    """The lines under a test's row: its reason, its witness (rows, rank, smallest singular value against the
    tolerance), the rank histogram of its draws, and how many draws were rechecked near the tolerance."""
    lines = [f"{r.title or r.check} at k = {r.k}: {r.reason}."]
    if r.witness is not None:
        sv = r.witness.singular_values
        lines.append(
            f"  witness: rows {list(r.witness.indices)[:12]}{' ...' if len(r.witness.indices) > 12 else ''} "
            f"have rank {r.witness.rank} < {len(r.witness.indices)} (smallest singular value {sv[-1]:.3g} <= "
            f"tolerance {r.witness.tol:.3g})"
        )
    if r.rank_histogram and r.sampled:
        items = sorted(r.rank_histogram.items())
        shown = ", ".join(f"{k}: {v}" for k, v in items[:8]) + (" ..." if len(items) > 8 else "")
        lines.append(f"  ranks of examined draws: {shown}")
    if r.exact_rechecks:
        lines.append(f"  {r.exact_rechecks} draw(s) sat near the tolerance and were decided from eigenvalues or by SVD")
    return lines


def sweep_lines(sw: Sweep, label: str = "") -> list[str]:
    """What a sweep estimates and proves, in lines: the estimate, the certified ceiling and floor, and the exact
    Kruskal rank or the interval it lies in; ``label`` begins the first line."""
    pre = f"{label}: " if label else ""
    how = (
        f"largest k with satisfied fraction >= {sw.threshold} over {sw.samples} nested draws; an estimate"
        if sw.kmax_sampled
        else "no draw was made: the certified ceiling below proves that no row is independent"
    )
    out = [
        f"{pre}Kruskal-rank estimate {sw.estimate} ({how}).",
        f"  certified ceiling {sw.ceiling.value}: {sw.ceiling.proves}.",
        f"  certified floor {sw.floor.value}: {sw.floor.proves}.",
    ]
    if sw.exact_kruskal_rank is not None:
        out.append(f"  exact: the floor meets the ceiling, so the Kruskal rank is {sw.exact_kruskal_rank} (a proof).")
    else:
        out.append(
            f"  exact: the Kruskal rank lies in [{sw.floor.value}, {sw.ceiling.value}] (proven); "
            "every k in between is undecided."
        )
    if sw.raw_estimate > sw.estimate:
        out.append(
            f"  (the sampled fraction stayed above the threshold up to k = {sw.raw_estimate}; "
            "capped at the proven ceiling)"
        )
    return out


#: The most rows a compact sweep table shows: the sizes its lines name, then the first where the fraction moves.
SWEEP_TABLE_ROWS = 40


def sweep_table(sw: Sweep, marks: tuple[int, ...] = ()) -> Table:
    """A compact view of the curve: the sizes the sweep's lines name (1, the last, the estimate and the size
    above it, the sampled estimate before capping and the size above it) and ``marks``, then every k where the
    fraction changes noticeably, up to :data:`SWEEP_TABLE_ROWS` rows."""
    t = Table(title="Kruskal-rank sweep (satisfied fraction by subset size)", title_justify="left")
    for col in ("k", "fraction", "95% CI"):
        t.add_column(col, justify="right")
    K = len(sw.ks)
    named = (1, K, sw.estimate, sw.estimate + 1, sw.raw_estimate, sw.raw_estimate + 1, *marks)
    keep = {k for k in named if 1 <= k <= K}
    moved, prev = [], None
    for k, f in zip(sw.ks, sw.fractions, strict=False):
        if prev is None or abs(f - prev) >= 0.05:
            moved.append(k)
            prev = f
    keep |= set([k for k in moved if k not in keep][: max(SWEEP_TABLE_ROWS - len(keep), 0)])
    for k in sorted(keep):
        t.add_row(str(k), fraction_text(sw.fractions[k - 1]), f"[{sw.ci_low[k - 1]:.4f}, {sw.ci_high[k - 1]:.4f}]")
    return t


def kruskal_legend(tests) -> list[str]:
    """The lines under a table of tests: what its two verdict columns mean, and the whole-set mark."""
    out = [
        "verdict: the paper's rule (satisfied fraction of the draws >= threshold), an estimate; exact: "
        "fails, holds or undecided, with what decides it (a witness or a whole-set rank below k proves fails)."
    ]
    if any(getattr(t, "scope", "") == "whole-set" for t in tests):
        out.append(WHOLE_SET_LEGEND)
    return out


def subset_test_report(test: SubsetTest) -> list:
    """One test at one size: its table row and its evidence."""
    return [kruskal_table([test]), *kruskal_legend([test]), *test_evidence_lines(test)]


def sweep_report(sw: Sweep, marks: tuple[int, ...] = ()) -> list:
    """A sweep: the compact curve and what it estimates and proves."""
    return [sweep_table(sw, marks=marks), *sweep_lines(sw)]


def kruskal_report(result: KruskalResult) -> list:
    """``mhaaudit kruskal``: the tests at each size, the sweep, and the run's facts."""
    inp, tests, sw = result.inputs, list(result.tests), result.sweep
    out: list = [f"[bold]mhaaudit kruskal[/bold]: {inp.T} vectors in R^{inp.d} ({inp.dtype}) from {shown(inp.source)}"]
    if tests:
        out.append(kruskal_table(tests))
        out += kruskal_legend(tests)
        out += [line for t in tests for line in test_evidence_lines(t)]
    if sw is not None:
        out += sweep_report(sw, marks=tuple(m for m in (inp.n, inp.d) if m))
    at_k = "".join(f"; at k = {k}: {c}" for k, c in result.set_rank_ceilings.items())
    if not at_k:  # no size needed it (k > d or k > T is answered by the dimensions)
        at_k = ": the sweep certifies its ceiling with it" if sw is not None else ": no size tested needed it"
    out.append(
        f"Whole set as one matrix: numerical rank {result.set_rank} under its own tolerance; whole-set rank at "
        "the smallest tolerance a k-subset can have (no k-subset's rank exceeds it)"
        f"{at_k}. "
        f"Rank rule: {result.rule.describe()}. "
        f"Threshold {result.threshold}, {result.samples} draws, seed {result.seed}, device {result.device}"
        + ("." if result.phases else f", {result.total_s} s.")
    )
    if result.skips:  # with --model: what reading the data found
        out.append(f"  skipped inputs: {shown(result.skips.describe())}")
    out += [f"  note: {shown(note)}" for note in result.notes]
    if result.phases:  # the run's time, with its phases
        out.append("  time: " + phases.described(result.phases))
    return out
