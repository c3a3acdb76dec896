"""The words of the checks: each check's title and what passing it means, by name.

What lays results out (the reports, the figures) names a check by these words without running one,
so they sit at the bottom; :mod:`mhaaudit.checks` defines the checks with them and fills
:data:`REGISTRY`, and :data:`CHECK_TITLES` and :data:`CHECK_MEANING` read every registered check's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = [
    "CHECK_MEANING",
    "CHECK_TITLES",
    "KIND_TITLES",
    "MEANINGS",
    "REGISTRY",
    "TITLES",
    "decided_status",
    "fraction_text",
    "is_decided",
    "published_what",
    "subset_sizes",
]

#: The built-in checks' titles, and the Kruskal test's (a test no check names), by name.
TITLES: dict[str, str] = {
    "general_position": "General Position",
    "assumption_1": "Assumption 1",
    "assumption_2": "Assumption 2",
    "assumption_3": "Assumption 3",
    "kruskal": "Kruskal test",
}
#: What passing each built-in check means, by name.
MEANINGS: dict[str, str] = {
    "general_position": "every d query vectors are linearly independent (Kruskal rank = min(T, d))",
    "assumption_1": "every n query vectors are linearly independent (Kruskal rank >= n)",
    "assumption_2": "every example's n context tokens are linearly independent (rank E_t = n)",
    "assumption_3": "every n vectors query + mean(context) are linearly independent",
}

#: Every registered check by name (a ``mhaaudit.checks.Check``): ``mhaaudit.checks.REGISTRY`` is this dict,
#: which that module fills with the built-in checks.
REGISTRY: dict[str, Any] = {}


class _Field(Mapping):
    """A live view of one field of every registered check, by name, then of ``extra`` names (the words
    above: a built-in check's words are known before the checks are defined)."""

    def __init__(self, field_name: str, extra: dict[str, str] | None = None):
        self._field, self._extra = field_name, extra or {}

    def __getitem__(self, name: str) -> str:
        if name in REGISTRY:
            return getattr(REGISTRY[name], self._field)
        return self._extra[name]

    def __iter__(self):
        return iter([*REGISTRY, *(k for k in self._extra if k not in REGISTRY)])

    def __len__(self) -> int:
        return len(list(iter(self)))


CHECK_TITLES: Mapping[str, str] = _Field("title", TITLES)
CHECK_MEANING: Mapping[str, str] = _Field("meaning", MEANINGS)

#: What a published value of ``reproduce`` that is not a check's fraction is, by its kind.
KIND_TITLES = {
    "ranks": "ranks of d-subsets",
    "sweep": "sweep fraction",
    "shape": "Figure 1 level",
    "estimate": "Kruskal estimate",
    "linear": "linear in H",
    "monotone": "rises with H",
    "theorem1": "Theorem 1 count",
}


def published_what(kind: str, check: str | None) -> str:
    """What a published value of ``reproduce`` is, for its table's row: the check's title, or its kind's."""
    return CHECK_TITLES.get(check, check) if kind == "check" and check else KIND_TITLES.get(kind, kind)


def subset_sizes(k: int | None, ours) -> str:
    """The paper's subset size ``k``, and after it the sizes ``ours`` (our tests' n or d) that differ from it:
    ``768 / 32``; empty without ``k``."""
    if k is None:
        return ""
    other = sorted({v for v in ours if v is not None} - {k})
    return str(k) + (" / " + ", ".join(map(str, other)) if other else "")


def is_decided(exact_status: str | None) -> bool:
    """Whether an exact status is decided, holds or fails (a proof says which), not undecided or absent."""
    return exact_status in ("holds", "fails")


def decided_status(verdict: str | None, exact_status: str | None) -> str | None:
    """A check's status as its proof decides it: the exact status where it is decided (holds or fails), else the
    verdict as given (the estimate, ``unavailable``, or None). A proven failure overrides a holding estimate."""
    return exact_status if is_decided(exact_status) else verdict


def fraction_text(v: float, digits: int = 4) -> str:
    """A share (a satisfied fraction, a memorised fraction) with ``digits`` decimals, rounded as usual except that
    a share above 0 or below 1 is never written as 0 or 1: within half a unit of either it is cut toward the inside
    (49999 of 50000 reads ``0.9999``, not ``1.0000``, beside a dependent draw that proves it below 1)."""
    text = f"{v:.{digits}f}"
    unit = 10**digits
    if 0 < v < 1 and float(text) in (0.0, 1.0):
        text = f"{(math.floor(v * unit) if v > 0.5 else math.ceil(v * unit)) / unit:.{digits}f}"
    return text
