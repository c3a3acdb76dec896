"""The report of ``memorize`` printed: the trained grid, its fits and its seed summary, as
:mod:`mhaaudit.render_memorize` lays them out (its names are importable from here)."""

from __future__ import annotations

from ..render_memorize import fit_table as fit_table
from ..render_memorize import memorize_report as memorize_report
from ..render_memorize import memorize_table as memorize_table
from ..render_memorize import seed_summary_table as seed_summary_table
from .common import print_report


def render_memorize(grid) -> None:
    """Print the report of ``mhaaudit memorize`` (:func:`memorize_report`)."""
    print_report(memorize_report(grid))
