"""The figures of ``mhaaudit reproduce --plot``: our curves with the published values marked.

* figure1 and table3: the satisfied fraction against k from our sweep(s), with the paper's
  points (notebook sweeps) and levels (Figure 1's bands) drawn on top, and n and d marked;
* figure2: memorised examples against H, one line per training-set size T, with Theorem 1's
  count H (min(n, d_h) - 1) + 1.

Every figure is written through :func:`mhaaudit.plot.save_figure` (atomically).
"""

from __future__ import annotations

from pathlib import Path

from ..plot import save_figure
from ..theory import theorem1_bound
from .published import target_spec


def plot_reproduction(result, path: str | Path) -> Path:
    """Draw ``result``'s figure to ``path``; the target decides which."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    if result.target == "figure2":
        _memorization(ax, result)
    else:
        _sweeps(ax, result)
    ax.set_title(result.title, fontsize=9)
    ax.legend(fontsize=7, loc="best")
    return save_figure(fig, path)


def _sweeps(ax, result) -> None:
    spec = target_spec(result.target)
    bands = spec.get("bands", {})
    for i, ((key, column), sw) in enumerate(result.sweeps.items()):
        color = f"C{i}"
        ax.plot(sw.ks, sw.fractions, color=color, lw=1.4, label=f"ours: {key} {column} (estimate {sw.estimate})")
        ax.fill_between(sw.ks, sw.ci_low, sw.ci_high, color=color, alpha=0.2)
        pts = [it for it in spec["values"] if it["model"] == key and it.get("column") == column]
        sweep = [(it["k"], it["fraction"]) for it in pts if it["kind"] == "sweep"]
        if sweep:
            ax.plot(*zip(*sweep, strict=False), "x", color=color, ms=5, label=f"paper: {key} {column}")
        for it in (p for p in pts if p["kind"] == "shape"):
            lo, hi = bands[it["verdict"]]
            ax.errorbar(it["k"], (lo + hi) / 2, yerr=(hi - lo) / 2, fmt="none", color="k", capsize=3, lw=1)
        facts = result.facts.get(key)
        for value, style, name in ((facts.n, "--", "n"), (facts.d, ":", "d")) if facts else ():
            ax.axvline(value, color=color, ls=style, lw=0.8)
            ax.text(value, 0.02, f" {name} = {value}", rotation=90, va="bottom", ha="right", fontsize=7)
    if any(it["kind"] == "shape" for it in spec["values"]):
        ax.plot([], [], "k|", label="paper: level read off Figure 1 (band)")
    ax.axhline(spec["protocol"]["threshold"], color="grey", lw=0.6)
    ax.set_xlabel("subset size k")
    ax.set_ylabel("fraction of k-subsets independent")
    ax.set_ylim(-0.02, 1.05)


def _memorization(ax, result) -> None:
    grid = result.grid
    for i, T in enumerate(grid.sizes):
        pts = sorted((r.heads, r.memorized_count) for r in grid.runs if r.size == T)
        ax.plot(*zip(*pts, strict=False), marker="o", color=f"C{i}", label=f"ours: memorised of T = {T}")
        ax.axhline(T, color=f"C{i}", lw=0.5, ls=":")
    s = grid.settings
    theorem = [
        (h, theorem1_bound(heads=h, head_dim=s.head_dim, n=s.n, d=s.d, a1_holds=True, a2_holds=True))
        for h in sorted({r.heads for r in grid.runs})
    ]
    bounds = [(h, b.count) for h, b in theorem if b.applies]
    if bounds:
        ax.plot(*zip(*bounds, strict=False), "k--", lw=1, label="Theorem 1: H (min(n, d_h) - 1) + 1")
    ax.set_xlabel("number of heads H")
    ax.set_ylabel("examples memorised")
