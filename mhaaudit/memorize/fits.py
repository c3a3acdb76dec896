"""The linear fits of a memorisation grid over H: the count memorised against H, an ordinary
least-squares line over the points below saturation (an estimate of the slope Theorem 1 bounds,
H (n - 1) + 1 examples), and, for a size with no line, why.

A line is fitted through at least :data:`MIN_FIT_VALUES` distinct values of H: a line through two
points fits them exactly, its R^2 is 1 whatever the counts, so it is no evidence that the counts
lie on a line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .results import MemorizeRun

__all__ = ["MIN_FIT_VALUES", "FitGap", "LinearFit", "fit_line", "flat_fit_notes", "heads_fit_gaps", "heads_fits"]

#: The fewest distinct x a line is fitted through: through two, R^2 = 1 by construction.
MIN_FIT_VALUES = 3


@dataclass(frozen=True)
class LinearFit:
    """Least-squares line ``count = slope * H + intercept`` over the non-saturated points; ``r2`` is NaN
    (null in JSON) when every point has the same count: the line is flat and there is no spread to explain
    (:func:`flat_fit_notes` says so).
    """

    size: int | None  # None: all sizes pooled
    slope: float
    intercept: float
    r2: float
    points: int  # number of (H, count) points fitted
    xs: tuple[int, ...] = ()  # the distinct values of H among them

    def to_dict(self) -> dict:
        """The fit as plain JSON types."""
        return asdict(self) | {"xs": list(self.xs)}


@dataclass(frozen=True)
class FitGap:
    """A size (None: all sizes pooled) with no line against H: its ``points`` below saturation, their
    distinct values of H ``xs``, and the ``reason``, in words."""

    size: int | None
    points: int
    xs: tuple[int, ...]
    reason: str

    def to_dict(self) -> dict:
        """The gap as plain JSON types."""
        return asdict(self) | {"xs": list(self.xs)}


def fit_line(xs: Sequence[float], ys: Sequence[float], size: int | None = None) -> LinearFit | None:
    """Least squares ``y = slope * x + intercept`` with R^2; ``None`` with fewer than
    :data:`MIN_FIT_VALUES` distinct x (through two, R^2 = 1 whatever the values: no test of a line)."""
    pts = list(zip(xs, ys, strict=False))
    if len({x for x, _ in pts}) < MIN_FIT_VALUES:
        return None
    m = len(pts)
    mx = sum(x for x, _ in pts) / m
    my = sum(y for _, y in pts) / m
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in pts)
    ss_tot = sum((y - my) ** 2 for _, y in pts)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    return LinearFit(
        size=size, slope=slope, intercept=intercept, r2=r2, points=m, xs=tuple(sorted({int(x) for x, _ in pts}))
    )


def flat_fit_notes(fits: Sequence[LinearFit]) -> tuple[str, ...]:
    """What the report says of each fit without an R^2 (its counts all equal), in words."""
    return tuple(
        f"{'all sizes' if f.size is None else f'T={f.size}'}: the count memorised is {f.intercept:g} at every "
        f"point fitted (H in {','.join(map(str, f.xs))}): the line is flat (slope 0) and R^2 is undefined, with no "
        "spread in the counts to explain"
        for f in fits
        if f.r2 != f.r2  # NaN
    )


def _gap_reason(values: int, diverged: int, saturated: int) -> str:
    """Why a size has no line: its ``values`` distinct H fitted, and the ``diverged`` and ``saturated`` runs
    left out of the fit (a diverged run counts as diverged only)."""
    left_out = (f"{diverged} run(s) diverged",) * bool(diverged) + (f"{saturated} saturated",) * bool(saturated)
    if values == 0:
        if not diverged:
            return "no point below saturation to fit"
        return "no point to fit: " + (", ".join(left_out) if saturated else "every run diverged")
    said = "1 value of H: no line" if values == 1 else f"{values} values of H: too few to test a line"
    return f"{said} ({', '.join(left_out)})" if diverged else said


def _left_out(runs: Sequence[MemorizeRun], sizes: Sequence[int], size: int | None, saturated_at: float) -> tuple:
    """The runs of ``size`` (None: of every size in ``sizes``) that diverged, and those that saturated
    without diverging: the points :func:`_fit_points` leaves out."""
    scope = [r for r in runs if (r.size == size if size is not None else r.size in sizes)]
    return sum(bool(r.diverged) for r in scope), sum(not r.diverged and r.memorized >= saturated_at for r in scope)


def _fit_points(runs: Sequence[MemorizeRun], sizes: Sequence[int], saturated_at: float) -> list[tuple]:
    """(size, H values, counts) per size and, with several sizes, pooled (size None): the points below
    saturation whose training did not diverge (a diverged count says nothing of what H heads memorise)."""
    out: list[tuple[int | None, list[tuple[int, int]]]] = []
    pooled: list[tuple[int, int]] = []
    for T in sizes:
        pts = sorted(
            (r.heads, r.memorized_count) for r in runs if r.size == T and r.memorized < saturated_at and not r.diverged
        )
        pooled += pts
        out.append((T, pts))
    if len(sizes) > 1:
        out.append((None, pooled))
    return [(T, [p[0] for p in pts], [p[1] for p in pts]) for T, pts in out]


def heads_fits(runs: Sequence[MemorizeRun], sizes: Sequence[int], saturated_at: float = 0.99) -> tuple[LinearFit, ...]:
    """Count memorised vs H, per size and pooled, over the non-saturated points (fraction < 0.99) that did
    not diverge; a size with fewer than :data:`MIN_FIT_VALUES` values of H has none (:func:`heads_fit_gaps`)."""
    fits = (fit_line(xs, ys, size=T) for T, xs, ys in _fit_points(runs, sizes, saturated_at))
    return tuple(f for f in fits if f is not None)


def heads_fit_gaps(runs: Sequence[MemorizeRun], sizes: Sequence[int], saturated_at: float = 0.99) -> tuple[FitGap, ...]:
    """The sizes (and the pool) :func:`heads_fits` fits no line for, and why."""
    return tuple(
        FitGap(
            size=T,
            points=len(xs),
            xs=tuple(sorted(set(xs))),
            reason=_gap_reason(len(set(xs)), *_left_out(runs, sizes, T, saturated_at)),
        )
        for T, xs, ys in _fit_points(runs, sizes, saturated_at)
        if len(set(xs)) < MIN_FIT_VALUES
    )
