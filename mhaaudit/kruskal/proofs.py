"""What one test's proof says of the others on the same vectors.

Tests of one set of vectors run apart (General Position and Assumption 1 on the queries of a column;
``kruskal --k`` at several sizes; the sweep), and each proves what its own draws show. Their proofs hold for
the other sizes too:

* a dependent m-subset (a witness) is inside some k-subset for every k >= m, which is then dependent
  (Cauchy interlacing: the k-subset's k-th singular value is at most the m-subset's m-th, and its tolerance
  at least the m-subset's, ``RankRule.tol`` growing with sigma_max and the rows), so no k >= m fails to fail;
* a proof that every k' rows are independent (an exact "holds", the sweep's certified floor) proves it for
  every k <= k', each k-subset lying in a k'-subset (the same inequalities the other way round).

:func:`shared_proofs` hands each proof to the tests it decides, so that one report never calls undecided
what another of its tests proves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .results import Bound, SubsetTest, Sweep, Witness

__all__ = ["shared_proofs"]


def shared_proofs(tests: Sequence[SubsetTest], sweep: Sweep | None = None) -> tuple[list[SubsetTest], Sweep | None]:
    """``tests`` and ``sweep`` of one set of vectors under one rule, each undecided exact status that another's
    proof decides now decided by it (with the proof, and the test it came from, in the reason).

    Args:
        tests: subset tests of the same T x d vectors and rule (their ``k`` differ).
        sweep: their sweep, or None.

    Returns:
        The tests and the sweep, each replaced where a proof of another decides more of it.
    """
    witnesses: list[tuple[Witness, str]] = [(t.witness, f"the test at k = {t.k}") for t in tests if t.witness]
    if sweep is not None and sweep.witness is not None:
        witnesses.append((sweep.witness, "the sweep"))
    floors = [(t.k, f"the test at k = {t.k}") for t in tests if t.exact_status == "holds"]
    if sweep is not None and sweep.floor.value:
        floors.append((sweep.floor.value, "the sweep's certified floor"))
    out = [_decided(t, witnesses, floors) for t in tests]
    return out, _swept(sweep, witnesses, floors) if sweep is not None else None


def _decided(t: SubsetTest, witnesses: list[tuple[Witness, str]], floors: list[tuple[int, str]]) -> SubsetTest:
    if t.exact_status != "undecided":
        return t
    inside = [(w, where) for w, where in witnesses if len(w.indices) <= t.k]
    if inside:
        w, where = min(inside, key=lambda found: len(found[0].indices))
        m = len(w.indices)
        return replace(
            t,
            exact_status="fails",
            exact_basis="witness",
            witness=w,
            reason=f"{t.reason}; but the dependent {m}-subset found by {where} "
            + ("is one of them" if m == t.k else f"lies inside {t.k}-subsets")
            + f", so the Kruskal rank is below {m} (a proof)",
        )
    above = [(k, where) for k, where in floors if k >= t.k]
    if above:
        k, where = max(above)
        return replace(
            t,
            exact_status="holds",
            exact_basis="certified-floor",
            reason=f"{t.reason}; every {k} rows are independent ({where}, a proof), so every {t.k} rows are",
        )
    return t


def _swept(sweep: Sweep, witnesses: list[tuple[Witness, str]], floors: list[tuple[int, str]]) -> Sweep:
    """The sweep with the tests' proofs: a smaller witness lowers its ceiling, a larger proven size raises its floor."""
    ceiling, floor, witness = sweep.ceiling, sweep.floor, sweep.witness
    for w, where in witnesses:
        m = len(w.indices)
        if m - 1 < ceiling.value:
            ceiling, witness = (
                Bound(
                    m - 1,
                    "witness",
                    f"a dependent {m}-subset was found by {where}, so the Kruskal rank is at most {m - 1} (a proof)",
                ),
                w,
            )
    for k, where in floors:
        if floor.value < k <= ceiling.value:
            floor = Bound(k, "shared", f"every {k} rows are independent ({where}, a proof)")
    if (ceiling, floor) == (sweep.ceiling, sweep.floor):
        return sweep
    estimate = min(max(sweep.raw_estimate, floor.value), ceiling.value)
    return replace(sweep, ceiling=ceiling, floor=floor, witness=witness, estimate=estimate)
