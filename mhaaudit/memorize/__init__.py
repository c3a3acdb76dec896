"""The paper's synthetic memorisation experiments (Section 5.2, Appendices A, H and I).

A one-layer multi-head attention model is trained by gradient descent to memorise random labels
of random examples, and the fraction it memorises is measured as the number of heads H, the
context length n or the key/query dimension d_h grows.

What is measured and what is estimated: a point's memorised count is exact for the model it
trained (every training example is evaluated); whether that model is the best the architecture
can do is not known (gradient descent may under-train, the more so at large T), so the counts
are lower estimates of the capacity Theorem 1 bounds. The linear fit against H is an
ordinary least-squares estimate.

The points of a grid (different H, n, d_h, T and seeds) train together: stacked into groups that
fit the device, each point keeping its own data, initial weights, batch order, optimiser state,
schedule and stopping rule, so that its record is the one it gets alone, to float tolerance.

Modules:

- :mod:`.data`: the random data (queries, contexts, labels) and the sinusoidal positions;
- :mod:`.model`: :class:`MemorizeModel`, one attention layer with d_v = 1 per head;
- :mod:`.schedule`: the plan of a point (steps, learning rate, checks) and its batch order;
- :mod:`.stack`: several models padded and stacked into one, exactly;
- :mod:`.recipe`: :class:`~.recipe.Recipe`, the training recipe of Appendix A, which every run
  and a grid's settings hold;
- :mod:`.training`: the training of a stacked group by the recipe, seeded through
  ``derive_seed(seed, "memorize")``;
- :mod:`.grouping`: the grid split into groups within a memory budget;
- :mod:`.reference`: the plain one-point training loop the stacked training is tested against;
- :mod:`.saturation`: saturated heads per example (Appendix H);
- :mod:`.fits`: the linear fits of the count memorised against H (three values of H or more), and why
  a size has none;
- :mod:`.results`: the run, seed-summary, group and grid records, and the results file's rows;
- :mod:`.request`: :class:`MemorizeRequest`, a run as one frozen object, checked where it is made;
  the presets and the grid it asks for;
- :mod:`.grid`: the grid's points and seeds, resuming, :func:`run_memorize_grid`.
"""

from __future__ import annotations

from .data import CONTEXTS, DIM, TASKS, make_dataset, sinusoidal_positions
from .grid import PRESETS, VARY, GridUnfinished, memorize_grid, resolve_grid, run_memorize_grid
from .model import MemorizeModel
from .request import MemorizeRequest, grid_axes
from .results import GridSettings, GroupRecord, LinearFit, MemorizeGrid, MemorizeRun, SeedSummary, fit_line
from .saturation import SATURATION_THRESHOLD, SaturationSummary, saturation_summary
from .schedule import planned_schedule
from .training import train_memorize

__all__ = [
    "CONTEXTS",
    "DIM",
    "PRESETS",
    "SATURATION_THRESHOLD",
    "TASKS",
    "VARY",
    "GridSettings",
    "GridUnfinished",
    "GroupRecord",
    "LinearFit",
    "MemorizeGrid",
    "MemorizeModel",
    "MemorizeRequest",
    "MemorizeRun",
    "SaturationSummary",
    "SeedSummary",
    "fit_line",
    "grid_axes",
    "make_dataset",
    "memorize_grid",
    "planned_schedule",
    "resolve_grid",
    "run_memorize_grid",
    "saturation_summary",
    "sinusoidal_positions",
    "train_memorize",
]
