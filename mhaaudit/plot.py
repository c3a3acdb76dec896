"""The Kruskal-rank curve (the paper's Figure 1): satisfied fraction against subset size."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .check_words import REGISTRY
from .errors import OutputError, printable
from .kruskal import Sweep
from .staging import atomic_path, check_writable

FORMATS = ("png", "pdf", "svg")


def check_plot_path(path: str | os.PathLike) -> Path:
    """Validate a plot path before any work is done; return it as a ``Path``.

    Raises:
        OutputError: when the path cannot be written (:func:`~mhaaudit.staging.check_writable`), its suffix is not
            .png, .pdf or .svg, or matplotlib, which draws it, cannot be imported.
    """
    p = check_writable(path)
    if p.suffix.lower().lstrip(".") not in FORMATS:
        raise OutputError(f"cannot plot to {p}: use a .png, .pdf or .svg file name")
    try:  # found now, not once the work is done
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise OutputError(
            f"cannot plot to {p}: matplotlib, which draws the figure, cannot be imported here ({exc}); "
            "install it (pip install matplotlib) or leave the plot out"
        ) from exc
    return p


#: Characters XML 1.0 does not allow, besides the controls that :func:`~mhaaudit.errors.printable` escapes (an SVG
#: holds each text of the figure)
_NOT_XML = re.compile("[\ufffe\uffff]")


def save_figure(fig, path: str | Path) -> Path:
    """Lay a matplotlib figure out tight and write it atomically in the format its suffix names, then close it.

    Every text of the figure shows as it is written: a name read from a file or a model (a file name in a
    legend, a model name in a title) is never read as math (``$x^^$`` would make matplotlib raise), and its
    control characters are escaped (they have no glyph, and an SVG holding them is not well-formed XML)."""
    import matplotlib
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    suffix = check_plot_path(path).suffix.lower().lstrip(".")
    try:
        for t in fig.findobj(Text):
            t.set_parse_math(False)
            text = t.get_text()
            shown = _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", printable(text, keep="\n"))
            if shown != text:
                t.set_text(shown)
        with matplotlib.rc_context({"text.parse_math": False}):  # texts made while drawing (ticks) too
            fig.tight_layout()
            with atomic_path(path) as tmp:
                fig.savefig(tmp, format=suffix)
    finally:
        plt.close(fig)
    return Path(path)


def plot_sweeps(
    curves: list[tuple[str, Sweep]],
    path: str | Path,
    *,
    n: int | None = None,
    d: int | None = None,
    title: str | None = None,
) -> Path:
    """One line per (label, sweep); vertical lines at n and d when known. Written atomically."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    threshold = None
    for label, sw in curves:
        ax.plot(sw.ks, sw.fractions, label=f"{label} (estimate {sw.estimate})", lw=1.6)
        ax.fill_between(sw.ks, sw.ci_low, sw.ci_high, alpha=0.2)
        threshold = sw.threshold
    if n:
        ax.axvline(n, color="k", ls="--", lw=1)
        ax.text(n, 0.02, f" n = {n}", rotation=90, va="bottom", ha="right", fontsize=8)
    if d:
        ax.axvline(d, color="k", ls=":", lw=1)
        ax.text(d, 0.02, f" d = {d}", rotation=90, va="bottom", ha="right", fontsize=8)
    if threshold is not None:
        ax.axhline(threshold, color="grey", lw=0.8)
    ax.set_xlabel("subset size k")
    ax.set_ylabel("fraction of k-subsets independent")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title or "Kruskal-rank sweep")
    ax.legend(fontsize=8, loc="lower left")
    return save_figure(fig, path)


def plot_audit(result, path: str | Path) -> Path | None:
    """An audit's figure (``check --plot``): the depth profile when it audited ``layers``, else the sweep
    curve of each column. Returns the path written, or None when no column could be audited
    (nothing was measured, so nothing is drawn)."""
    if not any(c.status == "ok" for c in result.columns):
        return None
    if result.settings.layers is not None:
        return plot_depth(result, path)
    curves = [(c.probe.variant, c.sweep) for c in result.columns if c.sweep is not None]
    return plot_sweeps(curves, path, n=result.info.n, d=result.info.d, title=f"Kruskal-rank sweep: {result.model}")


def plot_depth(result, path: str | Path) -> Path:
    """Satisfied fractions of each check against depth, one line style per set of weights."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    styles = {"random": "--", "trained": "-"}
    for weights in dict.fromkeys(c.probe.init for c in result.columns):
        cols = [c for c in result.columns if c.probe.init == weights and c.status == "ok"]
        if not cols:
            continue
        xs = [c.probe.layer for c in cols]
        fractions = [{r["check"]: r["fraction"] for r in c.records(result.model)} for c in cols]
        for i, check in enumerate(REGISTRY.values()):  # one line per registered check, in the registry's order
            ax.plot(
                xs,
                [f[check.name] for f in fractions],
                styles.get(weights, "-"),
                color=f"C{i}",
                marker="o",
                ms=3,
                label=f"{check.title} ({weights})",
            )
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("layer (0 = embedding output)")
    ax.set_ylabel("satisfied fraction")
    ax.set_ylim(-0.02, 1.02)
    info = result.info
    ax.set_title(f"{result.model}: assumptions by depth (n = {info.n}, d = {info.d})")
    ax.legend(fontsize=7, loc="best")
    return save_figure(fig, path)


def plot_capacity(result, path: str | Path) -> Path:
    """Rank r of Z against the number of heads h, with the bound lines; written atomically."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    info, s = result.info, result.settings
    n, d, dh = info.n, info.d, s.head_dim
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    hs_all: list[int] = []
    for c in result.columns:
        if c.status != "ok" or not c.certificates:
            continue
        hs = [x.heads for x in c.certificates]
        hs_all = sorted(set(hs_all) | set(hs))
        ax.plot(hs, [x.rank for x in c.certificates], marker="o", lw=1.6, label=f"rank(Z), {c.variant} weights")
        bh = [h for h in hs if c.bounds[h].applies]
        if bh:
            ax.plot(
                bh,
                [c.bounds[h].count for h in bh],
                ls="--",
                lw=1,
                marker="x",
                label=f"bound ({c.variant}: {c.bounds[bh[-1]].which})",
            )
    if hs_all and n and dh:
        hx = np.arange(1, max(hs_all) + 1)
        ax.plot(hx, hx * (min(n, dh) - 1) + 1, color="k", ls=":", lw=1, label="H (min(n, d_h) - 1) + 1")
        ax.plot(hx, hx * (n - 1) + 1, color="grey", ls="-.", lw=1, label="H (n - 1) + 1 (Prop. 2)")
        T = max(c.T for c in result.columns if c.status == "ok")
        ax.plot(hx, np.minimum(T, hx * d), color="r", lw=0.8, alpha=0.6, label=f"min(T, h d), T = {T} examples")
    ax.set_xlabel("heads used h")
    ax.set_ylabel("examples")
    ax.set_title(f"Memorisation certificate: {result.model}" + (" (shared context)" if s.shared_context else ""))
    ax.legend(fontsize=7, loc="best", framealpha=0.8)
    return save_figure(fig, path)


_MEMORIZE_XLABEL = {"heads": "number of heads H", "n": "context length n", "head-dim": "key/query dimension d_h"}


def plot_memorize(grid, path: str | Path) -> Path:
    """Memorised fraction vs the varied parameter, one line per size (the layout of Figure 2); with nothing
    varied, vs the sizes T.

    With several seeds, the line is the mean over seeds and the band spans the lowest to the
    highest seed.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    seeds = len(getattr(grid, "seeds", ()) or ()) > 1
    fig, ax = plt.subplots(figsize=(4.8, 3.6), dpi=150)
    _memorize_lines(ax, grid, seeds)
    s = grid.settings
    if grid.vary == "head-dim":
        ax.axvline(s.n, color="grey", linestyle="--", linewidth=1, label="d_h = n")
    ax.set_title(_memorize_title(grid, seeds), fontsize=9)
    ax.set_xlabel(_MEMORIZE_XLABEL.get(grid.vary, "training-set size T"))
    if s.recipe.task == "regression":
        ax.set_ylabel(f"fraction with |error| < {s.recipe.tolerance}")
    else:
        ax.set_ylabel("memorised fraction (training accuracy)")
    ax.set_ylim(-0.02, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def _memorize_lines(ax, grid, seeds: bool) -> None:
    """One line per size T over the varied parameter (nothing varied: one line over the sizes T): the mean
    over seeds with a band from the lowest to the highest (``seeds``), else each run's memorised fraction."""
    param = {"heads": "heads", "n": "n", "head-dim": "head_dim"}.get(grid.vary or "")
    lines: list[tuple[str, Callable[[Any], bool], Callable[[Any], int]]]
    if param is None:
        lines = [("memorised", lambda r: True, lambda r: r.size)]
    else:
        lines = [(f"T = {T}", _of_size(T), lambda r: getattr(r, param)) for T in grid.sizes]
    for label, kept, x in lines:
        if seeds:
            pts = sorted((x(m), m.mean, m.low, m.high) for m in grid.summary if kept(m))
            (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
            ax.fill_between(
                [p[0] for p in pts], [p[2] for p in pts], [p[3] for p in pts], color=line.get_color(), alpha=0.2
            )
        else:
            pairs = sorted((x(r), r.memorized) for r in grid.runs if kept(r))
            ax.plot([p[0] for p in pairs], [p[1] for p in pairs], marker="o", label=label)


def _of_size(size: int) -> Callable[[Any], bool]:
    return lambda r: r.size == size


def _memorize_title(grid, seeds: bool) -> str:
    """The settings held fixed, the context, and (several seeds) what the line and band show."""
    s = grid.settings
    parts = [
        f"{label} = {getattr(s, key)}"
        for vary, label, key in (("heads", "H", "heads"), ("n", "n", "n"), ("head-dim", "d_h", "head_dim"))
        if grid.vary != vary
    ]
    title = ", ".join(parts) + f" ({s.recipe.context} context)"
    if seeds:
        title += f"\nmean of {len(grid.seeds)} seeds; band from the lowest to the highest"
    return title
