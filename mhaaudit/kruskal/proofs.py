"""What one test's proof says of the others on the same vectors.

Tests of one set of vectors run apart (General Position and Assumption 1 on the queries of a column;
``kruskal --k`` at several sizes; the sweep), and each proves what its own draws show. Their proofs hold for
the other sizes too:

* a dependent m-subset (a witness) lies inside k-subsets for every k > m. In exact arithmetic such a k-subset
  is dependent (Cauchy interlacing: its k-th singular value is at most the m-subset's m-th, and its tolerance
  at least the m-subset's, ``RankRule.tol`` growing with sigma_max and the rows). Each subset's decision is
  the one computed on its own rows, and near a tie two computations may answer otherwise, so the carried
  proof is one k-subset holding the witness, decided on its own rows (one factorisation);
* a certified floor k' (every k' rows independent: a test's ``certified-floor``, the sweep's floor) proves it
  for every k <= k', each k-subset lying in a k'-subset (the same inequalities the other way round). Such a
  floor is proven with a margin over rounding (``witness.independent_set_floor``, ``bounds.babel_floor``),
  which carries to every subset. A test none of whose draws was decided, or with a dependent draw left
  unproven, takes no floor.

:func:`shared_proofs` hands each proof to the tests it decides, and the tests' proofs to the sweep.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from ..numerics.checked import NumericalFailure
from ..numerics.stream import unit_of
from . import witness as witnesses
from .results import Bound, SubsetTest, Sweep, Witness, every_rows_independent
from .sampling import rows_of

__all__ = ["shared_proofs"]


def shared_proofs(
    tests: Sequence[SubsetTest], sweep: Sweep | None, X: torch.Tensor
) -> tuple[list[SubsetTest], Sweep | None]:
    """``tests`` and ``sweep`` of the vectors ``X`` under one rule, each undecided exact status that another's
    proof decides now decided by it (with the proof, and the test it came from, in the reason).

    Args:
        tests: subset tests of ``X`` under one rule (their ``k`` differ).
        sweep: their sweep, or None.
        X (torch.Tensor | mhaaudit.mapped.MappedArray): the T x d vectors the tests drew from.

    Returns:
        The tests and the sweep, each replaced where a proof of another decides more of it.
    """
    found = [(t.witness, f"the test at k = {t.k}") for t in tests if t.witness]
    if sweep is not None and sweep.witness is not None:
        found.append((sweep.witness, "the sweep"))
    floors = [(t.k, f"the test at k = {t.k}") for t in tests if t.exact_basis == "certified-floor"]
    if sweep is not None and sweep.floor.value:
        floors.append((sweep.floor.value, "the sweep's certified floor"))
    rule = next((t.rule for t in tests), sweep.rule if sweep is not None else None)
    dependent = _superset_check(X, rule) if found and rule is not None else None
    out = [_decided(t, found, floors, dependent) for t in tests]
    return out, _swept(sweep, found, floors) if sweep is not None else None


def _superset_check(X, rule) -> Callable[[Witness, int], bool]:
    """``dependent(w, k)``: whether one k-subset of ``X`` holding the witness's rows (with the first rows not in
    it) is dependent, as decided on its own rows; False where LAPACK cannot decide it."""
    unit, _ = unit_of(rows_of(X), rule)

    def dependent(w: Witness, k: int) -> bool:
        if k == len(w.indices):  # the witness is such a subset itself
            return True
        inside = set(w.indices)
        rest = [i for i in range(unit.shape[0]) if i not in inside][: k - len(inside)]
        try:
            return witnesses.prove(unit, sorted(inside.union(rest))) is not None
        except NumericalFailure:
            return False

    return dependent


def _decided(
    t: SubsetTest,
    found: list[tuple[Witness, str]],
    floors: list[tuple[int, str]],
    dependent: Callable[[Witness, int], bool] | None,
) -> SubsetTest:
    if t.exact_status != "undecided" or t.verdict == "unavailable":  # nothing decided: nothing to add a proof to
        return t
    inside = sorted(((w, where) for w, where in found if len(w.indices) <= t.k), key=lambda f: len(f[0].indices))
    for w, where in inside:
        if dependent is None or not dependent(w, t.k):
            continue
        m = len(w.indices)
        held = "is one of them" if m == t.k else f"lies inside a {t.k}-subset that is dependent too"
        return replace(
            t,
            exact_status="fails",
            exact_basis="witness",
            witness=w,
            reason=f"{t.reason}; but the dependent {m}-subset found by {where} {held}, so the Kruskal rank is "
            f"below {m} and not every {t.k} rows are independent (a proof)",
        )
    above = [(k, where) for k, where in floors if k >= t.k]
    if above and t.satisfied == t.samples:  # a dependent draw that could not be proven leaves it open
        k, where = max(above)
        return replace(
            t,
            exact_status="holds",
            exact_basis="certified-floor",
            reason=f"{t.reason}; {every_rows_independent(k)} ({where}, a proof), so {every_rows_independent(t.k)}",
        )
    return t


def _swept(sweep: Sweep, found: list[tuple[Witness, str]], floors: list[tuple[int, str]]) -> Sweep:
    """The sweep with the tests' proofs: a smaller witness lowers its ceiling, a larger proven size raises its floor."""
    ceiling, floor, witness = sweep.ceiling, sweep.floor, sweep.witness
    for w, where in found:
        m = len(w.indices)
        if m - 1 < ceiling.value:
            proves = f"a dependent {m}-subset was found by {where}, so the Kruskal rank is at most {m - 1} (a proof)"
            ceiling, witness = Bound(m - 1, "witness", proves), w
    for k, where in floors:
        if floor.value < k <= ceiling.value:
            floor = Bound(k, "shared", f"{every_rows_independent(k)} ({where}, a proof)")
    if (ceiling, floor) == (sweep.ceiling, sweep.floor):
        return sweep
    estimate = min(max(sweep.raw_estimate, floor.value), ceiling.value)
    return replace(sweep, ceiling=ceiling, floor=floor, witness=witness, estimate=estimate)
