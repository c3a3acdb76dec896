"""The pieces every report shares: the console and width of stdout, a table cell, what loading
read, the timings, the positions note, the strict JSON printer, and the Kruskal
report printed.

Nothing is computed here that a result did not return.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Console
from rich.markup import escape

from .. import phases
from ..check_words import fraction_text
from ..console import TextConsole, shown
from ..display import text_width
from ..facts import AuditSettings, CapacitySettings, ModelFacts, ReadFacts, meta_value, weights_read_text
from ..facts import positions_note as family_positions_note
from ..render_kruskal import (
    estimate_text,
    exact_text,
    kruskal_report,
    verdict_text,
)

if TYPE_CHECKING:
    from ..kruskal import KruskalResult


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
    """One table cell: the estimate verdict, the evidence in brief (a sampled fraction with its 95%
    Clopper-Pearson interval), and the exact status when it is decided (a table never shows a bare
    "holds" beside a proof of failure)."""
    v = rec.get("verdict", "")
    if v == "unavailable":
        return verdict_text(v)
    if rec.get("scope") == "per-example":  # every example decided (Assumption 2): the count is exact
        return f"{verdict_text(v)}\n{rec['satisfied']}/{rec['T']} full"
    lines = [estimate_text(rec), fraction_text(rec["fraction"]) if rec.get("sampled", True) else "no sampling"]
    if rec.get("sampled", True) and rec.get("ci_low") is not None and rec.get("ci_high") is not None:
        lines.append(f"[{rec['ci_low']:.4f}, {rec['ci_high']:.4f}]")  # how far the draws pin the fraction down
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


def loading_lines(
    read: ReadFacts | None, settings: AuditSettings | CapacitySettings | None = None, label: str = ""
) -> list[str]:
    """What loading the trained weights read, and the batch size when it was chosen automatically."""
    lines = [shown(f"    {label}{weights_read_text(meta_value(read))}")] if read else []
    how = settings.batch_size_choice if settings is not None else None
    if settings is not None and how not in (None, "given"):
        lines.append(escape(f"  batch size: {settings.batch_size} (auto: {how})"))
    return lines


def time_lines(timings: dict[str, float], columns) -> list[str]:
    """The run's timings, then each column's: ``columns`` are (name, timings) pairs."""
    lines = ["  time: " + phases.described(timings)]
    for name, spent in columns:
        if spent:
            lines.append(f"    {name}: " + phases.described(spent))
    return lines


def positions_note(info: ModelFacts, layer: int) -> str:
    """What an Assumption 2 verdict at ``layer`` owes to the model's kind of positions (only layer 0 of a model
    without a position term in its embedding output has one); empty where it does not apply."""
    return family_positions_note(info.as_dict(), layer)
