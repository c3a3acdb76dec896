"""Figure 2 held to the paper: memorisation against the number of heads H on a ``memorize`` grid.

Per size T, a linear rise (a line through at least three values of H below saturation) and a monotone one;
per point, the memorised count against Theorem 1's count, undetermined where no weights of the model can
reach it (one head on many classes: ``memorize.model.one_head_ceiling``). Every difference is explained from
the runs: how long they trained against the paper's rule, and which diverged.
"""

from __future__ import annotations

import itertools
import math

from .compare import Comparison, no_value, without_interval

__all__ = ["compare_memorization"]


def compare_memorization(
    target: str, spec: dict, runs: list[dict], fits: list[dict], bound, most=None
) -> list[Comparison]:
    """Figure 2's claims against a grid over H: a linear fit and a monotone rise per size T, and
    each point's memorised count against Theorem 1's count (``bound(run)``: a
    :class:`~mhaaudit.theory.CapacityBound`). ``most(run)``, where given, is the most examples of the
    run's that any weights of its model memorise, when it is known to be below T (else None): a count
    above it cannot be reached by any training, so the point cannot test the count."""
    items = {it["kind"]: it for it in spec["values"]}
    out = []
    sizes = sorted({r["size"] for r in runs})
    for T in sizes:
        pts = sorted((r for r in runs if r["size"] == T), key=lambda r: r["heads"])
        fit = next((f for f in fits if f.get("size") == T), None)
        out.append(_linear(target, items["linear"], T, pts, fit, spec))
        out.append(_monotone(target, items["monotone"], T, pts, spec))
    for r in runs:
        out.append(_theorem1(target, items["theorem1"], r, bound(r), spec, most(r) if most else None))
    return out


def _memo_base(target: str, item: dict, column: str, paper_value=None) -> dict:
    return dict(
        target=target,
        model=item["model"],
        column=column,
        kind=item["kind"],
        check=None,
        k=None,
        paper_verdict=item["verdict"],
        paper_value=paper_value,
        paper_detail=item.get("formula", item.get("note", "")),
        source=item["source"],
    )


def _training_evidence(pts: list[dict], spec: dict, steps_said: bool = False) -> str:
    """How long the points trained, against the paper's rule (``steps_said``: the steps were already named)."""
    tr = spec["training"]
    steps = max(r["steps_run"] for r in pts)
    epochs = max(r["epochs_run"] for r in pts)
    out = [] if steps_said else [f"trained at most {steps} steps ({epochs} epochs) per point"]
    if diverged := sorted({r["heads"] for r in pts if r.get("diverged")}):
        out.append(f"the training diverged at H = {diverged} (a loss that is not finite)")
    if steps < tr["steps"] or epochs < tr["epochs"]:
        out.append(f"the paper trains at least {tr['epochs']} epochs and {tr['steps']} steps")
    return "; ".join(out)


def _loss(value: float | None) -> str:
    return "not finite" if value is None or not math.isfinite(value) else f"{value:.3g}"


def _judged(
    base: dict, ok: bool, verdicts: tuple[str, str], value: float | None, detail: str, reason: str
) -> Comparison:
    """:func:`without_interval` of a check that matches the paper when ``ok``: ``verdicts`` (ours
    when it does, when it does not)."""
    return without_interval(
        base, verdicts[0] if ok else verdicts[1], value, detail, "match" if ok else "differs", reason
    )


def _linear(target: str, item: dict, T: int, pts: list[dict], fit: dict | None, spec: dict) -> Comparison:
    base = _memo_base(target, item, f"T = {T}")
    base["paper_detail"] = f"r2 >= {item['min_r2']} over the non-saturated points"
    if fit is None or len(fit["xs"]) < 3:
        sat = sorted({r["heads"] for r in pts if r["memorized"] >= 0.99})
        below = sorted({r["heads"] for r in pts if r["memorized"] < 0.99 and not r.get("diverged")})
        reason = (
            f"at T = {T} only {len(below)} of the {len({r['heads'] for r in pts})} values of H have points below "
            f"saturation (at H = {below}; "
            f"memorised fraction 0.99 or more at H = {sat}); a line fits two points exactly, so it takes three "
            "to show a linear rise; " + _training_evidence(pts, spec)
        )
        return no_value(base, "undetermined", reason)
    ok = fit["slope"] > 0 and math.isfinite(fit["r2"]) and fit["r2"] >= item["min_r2"]
    detail = f"slope {fit['slope']:.1f} examples per head, r2 {fit['r2']:.4f} over H = {list(fit['xs'])}"
    reason = ""
    if not ok:
        why = f"slope {fit['slope']:.2f} <= 0" if fit["slope"] <= 0 else f"r2 = {fit['r2']:.4f} < {item['min_r2']}"
        reason = f"{why} over {fit['points']} non-saturated points at T = {T}; " + _training_evidence(pts, spec)
    r2 = fit["r2"] if math.isfinite(fit["r2"]) else None
    return _judged(base, ok, ("linear", "not linear"), r2, detail, reason)


def _monotone(target: str, item: dict, T: int, pts: list[dict], spec: dict) -> Comparison:
    base = _memo_base(target, item, f"T = {T}")
    counts = [(r["heads"], r["memorized_count"]) for r in pts]
    detail = ", ".join(f"H = {h}: {c}" for h, c in counts)
    if len({h for h, _ in counts}) < 2:  # one value of H shows no rise, nor its absence
        why = f"only one value of H at T = {T}: a rise with H takes two"
        return without_interval(base, None, None, detail, "undetermined", why)
    drops = [(a, b) for a, b in itertools.pairwise(counts) if b[1] < a[1]]
    rises = len(counts) > 1 and counts[-1][1] > counts[0][1]
    ok = not drops and rises
    reason = ""
    if not ok:
        if drops:
            reason = "memorised count falls from " + ", ".join(
                f"{a[1]} at H = {a[0]} to {b[1]} at H = {b[0]}" for a, b in drops
            )
        else:
            reason = f"the count does not rise from H = {counts[0][0]} to H = {counts[-1][0]}"
        reason += "; " + _training_evidence(pts, spec)
    return _judged(base, ok, ("increasing", "not increasing"), None, detail, reason)


def _theorem1(target: str, item: dict, run: dict, bound, spec: dict, most: int | None = None) -> Comparison:
    T = run["size"]
    column = f"H = {run['heads']}, n = {run['n']}, d_h = {run['head_dim']}, T = {T}"
    base = _memo_base(target, item, column, float(bound.count) if bound.applies else None)
    count, detail = float(run["memorized_count"]), f"{run['memorized_count']}/{T} memorised"
    if not bound.applies:
        return without_interval(
            base, None, count, detail, "undetermined", f"Theorem 1 gives no count here: {bound.reason}"
        )
    base["paper_detail"] = bound.formula
    need = min(bound.count, T)
    if most is not None and most < need:
        reason = (
            f"with one head an example's {run.get('classes', 'class')} class scores are multiples of one vector, so "
            f"no weights memorise more than {most} of these {T} examples (those of class 0 and of the two most "
            f"frequent other classes; up to rounding between near-equal scores), below min(T, {bound.count}) = "
            f"{need}; Theorem 1 counts exact fits of real-valued labels, which this classification cannot test"
        )
        return without_interval(base, None, count, detail, "undetermined", reason)
    ok = run["memorized_count"] >= need
    reason = ""
    if not ok:
        reason = (
            f"gradient descent memorised {run['memorized_count']} of {T} examples after {run['steps_run']} of "
            f"{run['planned_steps']} planned steps (final loss {_loss(run['final_loss'])}), below "
            f"min(T, {bound.count}) = {need}"
        )
        more = _training_evidence([run], spec, steps_said=True)
        reason += f"; {more}" if more else ""
    return _judged(base, ok, ("at least the count", "below the count"), count, detail, reason)
