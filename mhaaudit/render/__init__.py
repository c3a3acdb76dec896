"""Every table and report of the commands, and the strict JSON printer: renderers only.

Nothing is computed here that a result did not return: each function lays out the fields of a
result object (an audit, Kruskal tests and sweeps, a capacity result, a memorisation grid, a
reproduction) as rich tables and lines on stdout, or prints a document as strict JSON. One module
a report: :mod:`.common` (the console, the width, a cell, strict JSON, the Kruskal report),
:mod:`.audit`, :mod:`.capacity`, :mod:`.memorize` and :mod:`.reproduction`; their names are all
importable from here, with :func:`render_seeds`, which prints the report
:func:`mhaaudit.render_seeds.seeds_report` lays out.
"""

from ..check_words import KIND_TITLES
from ..render_seeds import seeds_report
from .audit import (
    audit_lines,
    audit_report,
    audit_table,
    bound_lines,
    depth_tables,
    evidence_lines,
    finding_lines,
    is_depth_profile,
    meaning_line,
    meaning_lines,
    render_audit,
    unavailable_lines,
)
from .capacity import (
    capacity_bound_lines,
    capacity_evidence_lines,
    capacity_report,
    capacity_table,
    certificate_lines,
    render_capacity,
)
from .common import (
    cell,
    loading_lines,
    positions_note,
    print_json,
    print_report,
    render_kruskal,
    report_width,
    stdout_console,
    time_lines,
)
from .memorize import (
    fit_table,
    memorize_report,
    memorize_table,
    render_memorize,
    seed_summary_table,
)
from .reproduction import (
    STATUS_MARK,
    published_number,
    render_reproduction,
    reproduction_report,
    reproduction_table,
)


def render_seeds(result) -> None:
    """Print the terminal report of a :class:`mhaaudit.seeds.SeedsResult` (its per-seed tables and ranges)."""
    print_report(seeds_report(result))


__all__ = [
    "KIND_TITLES",
    "STATUS_MARK",
    "audit_lines",
    "audit_report",
    "audit_table",
    "bound_lines",
    "capacity_bound_lines",
    "capacity_evidence_lines",
    "capacity_report",
    "capacity_table",
    "cell",
    "certificate_lines",
    "depth_tables",
    "evidence_lines",
    "finding_lines",
    "fit_table",
    "is_depth_profile",
    "loading_lines",
    "meaning_line",
    "meaning_lines",
    "memorize_report",
    "memorize_table",
    "positions_note",
    "print_json",
    "print_report",
    "published_number",
    "render_audit",
    "render_capacity",
    "render_kruskal",
    "render_memorize",
    "render_reproduction",
    "render_seeds",
    "report_width",
    "reproduction_report",
    "reproduction_table",
    "seed_summary_table",
    "stdout_console",
    "time_lines",
    "unavailable_lines",
]
