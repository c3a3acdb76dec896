"""The paper's synthetic memorisation experiments (Section 5.2, Appendices A, H and I).

A one-layer multi-head attention model is trained by gradient descent to memorise random labels
of random examples, and the fraction it memorises is measured as the number of heads H, the
context length n or the key/query dimension d_h grows.

What is measured and what is estimated: a point's memorised count is exact for the model it
trained (every training example is evaluated); whether that model is the best the architecture
can do is not known (gradient descent may under-train, the more so at large T), so the counts
are lower estimates of the capacity Theorem 1 bounds. The linear fit against H is an
ordinary least-squares estimate.

Modules:

- :mod:`.data`: the random data (queries, contexts, labels) and the sinusoidal positions;
- :mod:`.model`: :class:`MemorizeModel`, one attention layer with d_v = 1 per head;
- :mod:`.training`: the recipe of Appendix A (Adam, warm-up + cosine, early stop) and the
  training of a point, seeded through ``derive_seed(seed, "memorize")``;
- :mod:`.saturation`: saturated heads per example (Appendix H);
- :mod:`.results`: the run, fit and grid records, and their rows in a results file;
- :mod:`.grid`: the presets, the grid's points, resuming, :func:`run_memorize_grid`.
"""

from __future__ import annotations

from .data import CONTEXTS, DIM, TASKS, make_dataset, sinusoidal_positions
from .grid import PRESETS, VARY, resolve_grid, run_memorize_grid
from .model import MemorizeModel
from .results import LinearFit, MemorizeGrid, MemorizeRun, fit_line
from .saturation import SATURATION_THRESHOLD, SaturationSummary, saturation_summary
from .training import planned_schedule, train_memorize

__all__ = [
    "CONTEXTS",
    "DIM",
    "PRESETS",
    "SATURATION_THRESHOLD",
    "TASKS",
    "VARY",
    "LinearFit",
    "MemorizeGrid",
    "MemorizeModel",
    "MemorizeRun",
    "SaturationSummary",
    "fit_line",
    "make_dataset",
    "planned_schedule",
    "resolve_grid",
    "run_memorize_grid",
    "saturation_summary",
    "sinusoidal_positions",
    "train_memorize",
]
