"""What no run writes: a stored test record or sweep that contradicts itself.

A results file read back (a series' resume file, a results file a command reads) holds each test's
record as written: :func:`record_contradiction` finds one whose fields cannot come from one run
(a verdict other than its fraction against its threshold, a fraction other than its count over its
draws, an exact status that cites a witness it does not hold, ...), and :func:`sweep_contradiction`
a sweep whose estimate or bounds contradict its fractions. Each gives, in words, what is wrong, or
None. Both read the form the outputs write: a test's :meth:`~.results.SubsetTest.record` (Assumption
2's counts give theirs in the same columns) and a :class:`~.results.Sweep`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .results import EXACT_BASES, EXACT_STATUSES, SCOPES, Sweep

__all__ = ["record_contradiction", "sweep_contradiction"]

_VERDICTS = ("holds", "fails", "unavailable")
#: Bases that prove a failure, and those that prove "holds" (``exhaustive`` decides either way).
_FAILS_BY = ("witness", "set-rank", "dimension")
_HOLDS_BY = ("certified-floor",)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def record_contradiction(rec: Mapping) -> str | None:
    """What a stored test record says that no run writes, in words, or None.

    Checked: the words (verdict, exact status and basis, scope); the counts (``0 <= satisfied <= samples``,
    ``fraction = satisfied / samples``, 0 without draws, inside its interval); the verdict against the fraction
    and threshold (holds exactly when the fraction reaches the threshold, unavailable exactly without draws,
    fails without draws only when proven); the exact status against its basis and evidence (a witness basis
    holds a witness of at most k rows among the T; a status proven to hold has no dependent draw; a status
    decided by the dimension has k above d or T).
    """
    verdict, status, basis = rec.get("verdict"), rec.get("exact_status"), rec.get("exact_basis")
    if verdict not in _VERDICTS:
        return f"verdict {verdict!r} is not one of {', '.join(_VERDICTS)}"
    if status not in EXACT_STATUSES or basis not in EXACT_BASES:
        return f"exact status {status!r} with basis {basis!r} is not a status and basis a run writes"
    if rec.get("scope") is not None and rec.get("scope") not in SCOPES:
        return f"scope {rec.get('scope')!r} is not one of {', '.join(SCOPES)}"
    counts: dict[str, Any] = {x: rec.get(x) for x in ("k", "T", "d", "samples", "satisfied")}
    if not all(_whole(v) and v >= 0 for v in counts.values()):
        return ", ".join(f"{x} = {v!r}" for x, v in counts.items()) + " are not counts"
    k, T, d, samples, satisfied = (int(v) for v in counts.values())
    fraction, threshold = rec.get("fraction"), rec.get("threshold")
    if not (_number(fraction) and _number(threshold)) or not 0 < float(threshold) <= 1:  # type: ignore[arg-type]
        return f"fraction = {fraction!r} with threshold {threshold!r}"
    fraction, threshold = float(fraction), float(threshold)  # type: ignore[arg-type]
    if satisfied > samples:
        return f"satisfied = {satisfied} of samples = {samples}"
    if not math.isclose(fraction, satisfied / samples if samples else 0.0, rel_tol=1e-12, abs_tol=1e-15):
        return f"fraction = {fraction!r}, not its count {satisfied} over samples = {samples}"
    low, high = rec.get("ci_low"), rec.get("ci_high")
    if _number(low) and _number(high) and not float(low) - 1e-9 <= fraction <= float(high) + 1e-9:  # type: ignore[arg-type]
        return f"fraction = {fraction!r} outside its interval [{low!r}, {high!r}]"
    per_example = rec.get("scope") == "per-example"
    if verdict == "unavailable":  # no draw decided (Assumption 2: no count under this rule): nothing proven
        if status != "undecided" or (samples and not per_example):
            return f"verdict unavailable with {samples} draws decided and exact status {status}"
    elif samples and verdict != ("holds" if fraction >= threshold else "fails"):
        return f"verdict {verdict} with fraction {fraction!r} against threshold {threshold!r}"
    if not samples and verdict == "holds":
        return "verdict holds with no draw decided"
    if not samples and verdict == "fails" and status != "fails":
        return f"verdict fails with no draw decided and exact status {status}, not a proof"
    if (status == "undecided") != (basis == "none"):
        return f"exact status {status} with basis {basis}"
    if (basis in _FAILS_BY and status != "fails") or (basis in _HOLDS_BY and status != "holds"):
        return f"exact status {status} with basis {basis}, which proves the other answer"
    witness = rec.get("witness") or []
    if basis == "witness" and not witness:
        return "exact status fails by a witness, and the record holds no witness"
    if witness and not per_example and (status != "fails" or len(witness) > k):
        return f"a witness of {len(witness)} rows with exact status {status} at k = {k}"
    if any(not _whole(i) or not 0 <= i < T for i in witness) or len(set(witness)) != len(witness):
        return f"witness {list(witness)[:8]} is not rows among T = {T}"
    if status == "holds" and satisfied != samples:
        return f"exact status holds with {samples - satisfied} of {samples} draws dependent"
    if basis == "dimension" and not (k > d or k > T):
        return f"exact status fails by the dimension at k = {k}, with d = {d} and T = {T}"
    if per_example and status == "fails" and basis == "exhaustive" and satisfied == samples:
        return f"exact status fails with every one of {samples} examples of full rank"
    return None


def sweep_contradiction(sweep: Sweep) -> str | None:
    """What a stored sweep says that no run writes, in words, or None: fractions outside [0, 1] or not one
    per size, a certified floor above the ceiling, a ceiling by a witness without that witness, a raw estimate
    other than the largest size whose fraction reaches the threshold, or an estimate other than it bounded by
    the floor and ceiling."""
    if len(sweep.fractions) != len(sweep.ks) or not all(_number(f) and 0 <= f <= 1 for f in sweep.fractions):
        return f"its fractions {list(sweep.fractions)[:6]} are not one fraction per size"
    floor, ceiling = sweep.floor.value, sweep.ceiling.value
    if not 0 <= floor <= ceiling <= min(sweep.T, sweep.d):
        return f"certified floor {floor} and ceiling {ceiling} with T = {sweep.T}, d = {sweep.d}"
    if sweep.ceiling.kind == "witness" and (sweep.witness is None or len(sweep.witness.indices) != ceiling + 1):
        return f"ceiling {ceiling} by a witness, and the sweep holds no witness of {ceiling + 1} rows"
    raw = max((k for k, f in zip(sweep.ks, sweep.fractions, strict=True) if f >= sweep.threshold), default=0)
    if sweep.raw_estimate != raw:
        return f"raw estimate {sweep.raw_estimate}, where its fractions reach the threshold up to k = {raw}"
    if sweep.estimate != min(max(raw, floor), ceiling):
        return f"estimate {sweep.estimate}, not its raw estimate {raw} within the floor {floor} and ceiling {ceiling}"
    return None
