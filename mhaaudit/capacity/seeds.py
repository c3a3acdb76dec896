"""How ``capacity --seeds`` sets its runs side by side: the layout of rank(Z)'s seed records."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..seeds import SeedPlan, SeedsResult
from ..seeds.spread import Layout, result_records, run_and_spread

__all__ = ["CAPACITY_LAYOUT", "capacity_seeds"]


#: How ``capacity --seeds`` sets its runs side by side: rank(Z) per column and head count, and
#: the columns' difference at the same head count.
CAPACITY_LAYOUT = Layout(
    "capacity",
    result_records,
    ("model", "variant", "layer", "heads"),
    value="rank",
    differences_same=("layer", "heads"),
)


def capacity_seeds(run: Callable, plan: SeedPlan, data=None, asked: Mapping[str, Any] | None = None) -> SeedsResult:
    """The capacity run ``run(seed=, weights_seed=, data_seed=)`` for each seed of ``plan``: the
    spread of rank(Z) per column and head count, and the difference between the columns' ranks;
    ``asked``: what else decides the runs (the ranks of a job compare it)."""
    return run_and_spread(CAPACITY_LAYOUT, run, plan, data, asked)
