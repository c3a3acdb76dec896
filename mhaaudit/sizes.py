"""Sizes written for people: a count of bytes in binary units.

Kept at the bottom (no import of the package), so what records a size (the facts of a run, the
weights read) writes it without loading the report layout.
"""

from __future__ import annotations

__all__ = ["human_bytes"]


def human_bytes(n: int | None) -> str:
    """``n`` bytes in binary units to three significant digits (``1.1 GiB``), whole bytes below 1 KiB; "?" for None."""
    if n is None:
        return "?"
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if x < 1024 or unit == "TiB":
            return f"{int(x)} B" if unit == "B" else f"{x:.3g} {unit}"
        x /= 1024
    return f"{n} B"  # pragma: no cover
