"""Theorem 1, Remark 1 and Proposition 2 of the paper: from assumption verdicts to counts.

Pure functions on numbers. :func:`theorem1_bound` turns assumption results (A1, A2, a
Kruskal-rank estimate) into the number of examples Theorem 1 (or Remark 1) says a multi-head
attention layer memorises. The count ``H (min(n, d_h) - 1) + 1`` is *reconstructed* from the
paper's proof (the extracted text lost the formula), and every result says so.
:func:`shared_context_rank_bound` is Proposition 2's ceiling ``H (n - 1) + 1`` for a context shared
by all examples.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .check_words import decided_status
from .errors import InputError
from .validate import integer

__all__ = ["CapacityBound", "a1_status", "shared_context_rank_bound", "theorem1_bound"]

_RECONSTRUCTED_NOTE = (
    "count reconstructed from the proof of Proposition 1 / Theorem 1 (the formula was lost in the "
    "text extraction of the paper), not read verbatim"
)


# --------------------------------------------------------------------------------------------
# Theorem 1 / Remark 1
# --------------------------------------------------------------------------------------------


def a1_status(verdict: str | None, exact_status: str | None) -> str | None:
    """The Assumption 1 status Theorem 1 rests on: ``check_words.decided_status``, holds or fails (None when not
    checked). The theorem needs the assumption itself, not the share of independent draws."""
    status = decided_status(verdict, exact_status)
    return status if status in ("holds", "fails") else None


@dataclass(frozen=True)
class CapacityBound:
    """What Theorem 1 (or Remark 1) guarantees for one set of assumption results.

    Fields:
        applies: whether a guarantee follows from the inputs.
        count: the number of examples memorised (``None`` when it does not apply).
        formula: the formula with the numbers plugged in ("" when it does not apply).
        which: ``"theorem-1"``, ``"remark-1"`` or ``"not-applicable"``.
        reason: one line: why it applies or why not.
        reconstructed: always ``True``: the count was reconstructed from the proof.
        notes: further remarks (conflicting inputs, d_h capping the bound, ...).
        heads, head_dim, n, d, kruskal_estimate: the inputs, for the report.
    """

    applies: bool
    count: int | None
    formula: str
    which: str
    reason: str
    reconstructed: bool = True
    notes: tuple[str, ...] = ()
    heads: int = 0
    head_dim: int = 0
    n: int = 0
    d: int = 0
    kruskal_estimate: int | None = None

    def to_dict(self) -> dict:
        """Every field by name, in their order; ``notes`` as a list."""
        return {**dataclasses.asdict(self), "notes": list(self.notes)}


def _check_verdicts(a1_holds: bool | None, a2_holds: bool | None, a1_proven: bool | None = None) -> None:
    """Return nothing when the assumption verdicts (and whether A1 is proven) are True, False or None.

    Raises:
        InputError: when ``a1_holds``, ``a2_holds`` or ``a1_proven`` is anything else.
    """
    for name, val in (("a1_holds", a1_holds), ("a2_holds", a2_holds), ("a1_proven", a1_proven)):
        if val is not None and not isinstance(val, (bool, np.bool_)):
            raise InputError(f"{name} must be True, False or None, got {val!r}")


@dataclass(frozen=True)
class _Inputs:
    """The checked numbers of one :func:`theorem1_bound` call; they build its :class:`CapacityBound`."""

    heads: int
    head_dim: int
    n: int
    d: int
    kruskal_estimate: int | None

    def bound(self, notes: list[str], **fields) -> CapacityBound:
        """A :class:`CapacityBound` with these inputs, ``fields`` and the notes as they stand now."""
        return CapacityBound(
            **fields,
            notes=tuple(notes),
            heads=self.heads,
            head_dim=self.head_dim,
            n=self.n,
            d=self.d,
            kruskal_estimate=self.kruskal_estimate,
        )

    def not_applicable(self, notes: list[str], reason: str) -> CapacityBound:
        """The bound that guarantees nothing, for ``reason``."""
        return self.bound(notes, applies=False, count=None, formula="", which="not-applicable", reason=reason)

    def applies(self, notes: list[str], symbol: str, rank: int, *, which: str, reason: str) -> CapacityBound:
        """The bound ``H (min(rank, d_h) - 1) + 1``, its formula written with ``symbol`` for the rank."""
        m = min(rank, self.head_dim)
        count = self.heads * (m - 1) + 1
        formula = f"H*(min({symbol}, d_h) - 1) + 1 = {self.heads}*(min({rank}, {self.head_dim}) - 1) + 1 = {count}"
        return self.bound(notes, applies=True, count=count, formula=formula, which=which, reason=reason)


def theorem1_bound(
    *,
    heads: int,
    head_dim: int,
    n: int,
    d: int,
    a1_holds: bool | None,
    a2_holds: bool | None,
    kruskal_estimate: int | None = None,
    a1_proven: bool | None = None,
) -> CapacityBound:
    """Count the examples an MHA layer provably memorises, given the assumption results.

    Theorem 1 gives ``H (min(n, d_h) - 1) + 1`` when A1 and A2 hold and ``n < d``. Remark 1 gives
    ``H (min(k, d_h) - 1) + 1`` when A1 fails or was not checked, A2 holds, ``n < d``, and a
    Kruskal-rank estimate ``k < n`` is given. Otherwise there is no guarantee (``applies=False``),
    and ``reason`` says why. An estimate that contradicts ``a1_holds`` is recorded in ``notes``.
    Both counts are reconstructed from the proof (``reconstructed=True``).

    Args:
        heads: the number of heads H.
        head_dim: the head dimension d_h.
        n: the context length.
        d: the embedding dimension.
        a1_holds: Assumption 1's verdict (None: not checked).
        a2_holds: Assumption 2's verdict (None: not checked).
        kruskal_estimate: an estimate k of the queries' Kruskal rank, for Remark 1.
        a1_proven: whether A1 holding is proven (False: an estimate only, and the reason and notes say so).

    Returns:
        The :class:`CapacityBound`: the count, the rule that gave it (Theorem 1, Remark 1 or none), and
        the reason and notes.

    Raises:
        InputError: when ``heads``, ``head_dim``, ``n``, ``d`` or a given ``kruskal_estimate`` is not a positive
            integer, or ``a1_holds`` / ``a2_holds`` / ``a1_proven`` is not True, False or None.
    """
    inputs = _Inputs(
        heads=integer("heads", heads),
        head_dim=integer("head_dim", head_dim),
        n=integer("n", n),
        d=integer("d", d),
        kruskal_estimate=None if kruskal_estimate is None else integer("kruskal_estimate", kruskal_estimate),
    )
    _check_verdicts(a1_holds, a2_holds, a1_proven)
    notes: list[str] = [_RECONSTRUCTED_NOTE]
    if a2_holds is None:
        return inputs.not_applicable(notes, "A2 (every context matrix has rank n) was not checked")
    if not a2_holds:
        return inputs.not_applicable(notes, "A2 fails: some context matrix E_t has rank below n")
    if inputs.n >= inputs.d:
        return inputs.not_applicable(
            notes, f"n >= d ({inputs.n} >= {inputs.d}): Theorem 1 needs the context length below the width"
        )
    if a1_holds:
        return _theorem1(inputs, notes, a1_proven)
    return _remark1(inputs, a1_holds, notes)


def _theorem1(inputs: _Inputs, notes: list[str], a1_proven: bool | None = None) -> CapacityBound:
    """Theorem 1's bound when A1 and A2 hold and n < d, with a note on an estimate that disagrees with A1 and
    one on an A1 that holds as an estimate only."""
    n, head_dim, k = inputs.n, inputs.head_dim, inputs.kruskal_estimate
    if a1_proven is False:
        notes.append("A1 holds as an estimate (the share of independent draws), not a proof; the count inherits that")
    if k is not None and k < n:
        notes.append(
            f"the Kruskal-rank estimate {k} is below n = {n} although A1 was reported to hold; the A1 result was used"
        )
    if head_dim < n:
        notes.append(f"d_h = {head_dim} < n = {n} caps the bound: heads wider than n add nothing, narrower ones lose")
    a1 = "A1 (an estimate)" if a1_proven is False else "A1"
    return inputs.applies(notes, "n", n, which="theorem-1", reason=f"{a1} and A2 hold and n < d")


def _remark1(inputs: _Inputs, a1_holds: bool | None, notes: list[str]) -> CapacityBound:
    """The bound when A1 fails or was not checked (A2 holds, n < d): Remark 1's with an estimate k < n, Theorem
    1's when A1 was not checked and the estimate reaches n, else none."""
    n, k = inputs.n, inputs.kruskal_estimate
    state = "fails" if a1_holds is False else "was not checked"
    if k is None:
        return inputs.not_applicable(notes, f"A1 {state} and no Kruskal-rank estimate of the queries was given")
    if k >= n:
        if a1_holds is None:
            notes.append(f"A1 was not checked; the Kruskal-rank estimate {k} >= n = {n} was used in its place")
            return inputs.applies(
                notes, "n", n, which="theorem-1", reason=f"Kruskal-rank estimate {k} >= n, A2 holds and n < d"
            )
        return inputs.not_applicable(
            notes, f"inconsistent inputs: A1 fails but the Kruskal-rank estimate {k} is not below n = {n}"
        )
    notes.append("the Kruskal rank is an estimate unless it was proven; the count inherits that status")
    return inputs.applies(
        notes,
        "k",
        k,
        which="remark-1",
        reason=f"A1 {state}, A2 holds, queries' Kruskal rank estimated at k = {k} < n = {n}",
    )


def shared_context_rank_bound(H: int, n: int) -> int:
    """Proposition 2: with one context shared by all examples, ``rank(Z) <= H (n - 1) + 1``."""
    H = integer("H", H)
    n = integer("n", n)
    return H * (n - 1) + 1
