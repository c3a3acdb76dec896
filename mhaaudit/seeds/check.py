"""How ``check --seeds`` sets its runs side by side: the layout of the audit's seed records."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .plan import SeedPlan
from .records import SeedsResult, sweep_estimate_record
from .spread import Layout, result_records, result_sweep_rows, run_and_spread

__all__ = ["CHECK_LAYOUT", "audit_seeds"]


def _sweep_estimates(result) -> list[dict]:
    return [
        sweep_estimate_record(c.sweep, model=result.model, variant=c.probe.variant, layer=c.probe.layer)
        for c in result.columns
        if c.sweep is not None
    ]


#: How ``check --seeds`` sets its runs side by side: the fractions per column, layer, check and
#: size, and the columns' sweep estimates.
CHECK_LAYOUT = Layout(
    "check",
    result_records,
    ("model", "variant", "layer", "check", "k"),
    estimates=_sweep_estimates,
    estimate_key=("model", "variant", "layer", "check"),
    sweep_rows=result_sweep_rows,
)


def audit_seeds(run: Callable, plan: SeedPlan, data=None, asked: Mapping[str, Any] | None = None) -> SeedsResult:
    """The audit ``run(seed=, weights_seed=, data_seed=)`` for each seed of ``plan`` (what
    ``audit(..., seeds=...)`` returns); ``data`` is the data source the runs read, ``asked`` what else
    decides them (the ranks of a job compare it: :func:`~.spread.over_seeds`)."""
    return run_and_spread(CHECK_LAYOUT, run, plan, data, asked)
