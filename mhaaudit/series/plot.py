"""The trend figure of a series (``check --checkpoints --plot``): each check's satisfied fraction
against the step, and the Kruskal-rank estimate with its certified floor and ceiling; with
``seeds``, the median with the between-seed range shaded. The reference (random weights, audited
once) is a dotted line across. Every value drawn is one of :meth:`SeriesResult.trend`'s."""

from __future__ import annotations

from pathlib import Path

from ..checks import REGISTRY
from ..plot import save_figure

__all__ = ["plot_series"]

ESTIMATE = "sweep_estimate"


def _x(points, by_step: bool) -> list[float]:
    return [float(p.step if by_step else p.order) for p in points]


def plot_series(result, path: str | Path) -> Path | None:
    """Draw the series' trend to ``path`` (.png, .pdf or .svg, written atomically); None when no
    checkpoint was audited (nothing to draw)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    points = [p for p in result.trend() if p.value is not None]
    if not points:
        return None
    reference = [p for p in result.trend(reference=True) if p.value is not None]
    by_step = all(c.step is not None for c in result.done())
    swept = any(p.check == ESTIMATE for p in points)
    fig, axes = plt.subplots(2 if swept else 1, 1, figsize=(7.5, 7.0 if swept else 4.4), dpi=120, squeeze=False)
    ax = axes[0][0]
    cells: dict[tuple[str, int, str], list] = {}
    for p in points:
        cells.setdefault((p.variant, p.layer, p.check), []).append(p)
    for line in cells.values():  # drawn left to right: checkpoints named out of step order are not joined back
        line.sort(key=lambda p: _x([p], by_step))
    styles = ["-", "--", "-.", ":"]
    variants = list(dict.fromkeys((p.variant, p.layer) for p in points))
    for (variant, layer, check), line in cells.items():
        if check == ESTIMATE:
            continue
        i = list(REGISTRY).index(check)
        style = styles[variants.index((variant, layer)) % len(styles)]
        xs = _x(line, by_step)
        ax.plot(
            xs,
            [p.value for p in line],
            style,
            color=f"C{i}",
            marker="o",
            ms=3,
            label=f"{REGISTRY[check].title} ({variant})",
        )
        if all(p.low is not None for p in line):
            ax.fill_between(xs, [p.low for p in line], [p.high for p in line], color=f"C{i}", alpha=0.15)
    layers = {layer for _, layer in variants}
    drawn = [p for p in reference if p.check in REGISTRY and _random_at(p, layers)]
    for p in drawn:
        ax.axhline(p.value, color=f"C{list(REGISTRY).index(p.check)}", ls=":", lw=0.9)
    if drawn:
        ax.plot([], [], ":", color="grey", lw=0.9, label="random weights at the same depth (audited once)")
    ax.axhline(result.threshold, color="grey", lw=0.6)
    ax.set_ylabel("satisfied fraction")
    ax.set_ylim(-0.02, 1.02)
    seeds = f", median and range over {len(result.plan.seeds)} seeds" if result.plan is not None else ""
    ax.set_title(f"{result.model}: assumptions over training{seeds}")
    ax.legend(fontsize=7, loc="best")
    if swept:
        bx = axes[1][0]
        for j, (variant, layer) in enumerate(variants):
            line = cells.get((variant, layer, ESTIMATE), [])
            if not line:
                continue
            xs = _x(line, by_step)
            bx.plot(xs, [p.value for p in line], marker="o", ms=3, color=f"C{j}", label=f"estimate ({variant})")
            bx.fill_between(xs, [p.floor for p in line], [p.ceiling for p in line], color=f"C{j}", alpha=0.12)
            if all(p.low is not None for p in line):
                bx.fill_between(xs, [p.low for p in line], [p.high for p in line], color=f"C{j}", alpha=0.3)
        bx.plot([], [], color="grey", alpha=0.3, lw=6, label="certified floor to ceiling")
        info = next((c.audit.info for r in result.runs for c in r.checkpoints if c.audit is not None), None)
        if info is not None:  # the sizes Assumption 1 and General Position ask for
            bx.axhline(info.n, color="k", ls="--", lw=0.8)
            bx.axhline(info.d, color="k", ls=":", lw=0.8)
            bx.text(bx.get_xlim()[0], info.n, f" n = {info.n}", va="bottom", fontsize=7)
            bx.text(bx.get_xlim()[0], info.d, f" d = {info.d}", va="bottom", fontsize=7)
        bx.set_ylabel("Kruskal-rank estimate")
        bx.legend(fontsize=7, loc="best")
    axes[-1][0].set_xlabel("step" if by_step else "checkpoint (order in the series)")
    return save_figure(fig, path)


def _random_at(point, layers: set[int]) -> bool:
    """Whether a reference cell is the random column at a depth the trained columns read (the embedding
    and random-attention columns are not drawn)."""
    return (point.variant == "random" or point.variant.startswith("random-L")) and point.layer in layers
