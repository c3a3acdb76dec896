"""How ``kruskal --model --seeds`` sets its runs side by side: the layout of a capture's seed records."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..kruskal.results import kruskal_meta
from ..models import modality_of
from .plan import SeedPlan
from .records import SeedsResult, sweep_estimate_record
from .spread import Layout, data_seed_notes, over_seeds, spread

__all__ = ["kruskal_seeds"]


def kruskal_seeds(run: Callable, plan: SeedPlan, capture, asked: Mapping[str, Any] | None = None) -> SeedsResult:
    """The Kruskal estimate ``run(seed=, weights_seed=, data_seed=)`` of a capture for each seed of
    ``plan`` (what ``estimate_kruskal_rank(..., seeds=...)`` returns): the per-seed, summary and
    difference records of its tests and its sweep's estimate; ``capture`` is the
    :class:`~mhaaudit.estimation.Capture` the runs share, ``asked`` what else decides them (the ranks of a
    job compare it)."""
    runs = over_seeds(run, plan, asked={**(asked or {}), "capture": capture})
    where = {"model": capture.model.model, "variant": capture.variant}
    first = runs[0]
    meta = {k: v for k, v in kruskal_meta(first).items() if k != "seed"} | {
        "inputs": first.inputs.as_dict(),  # as one run's meta gives them (the first seed's)
        "capture": first.capture.as_dict(),
        "skips": first.skips.as_dict(),  # the data read, as the first seed read it
        "timings_s": {str(r.seed): x.timings for r, x in zip(plan.runs(), runs, strict=True)},
        "phases_s": {str(r.seed): x.phases for r, x in zip(plan.runs(), runs, strict=True)},
    }
    layout = Layout(
        "kruskal",
        lambda r: [where | t.record() for t in r.tests],
        ("model", "variant", "check", "k"),
        estimates=lambda r: [sweep_estimate_record(r.sweep, **where)] if r.sweep is not None else [],
        estimate_key=("model", "variant", "check"),
        sweep_rows=lambda r: r.sweep.rows() if r.sweep is not None else [],
    )
    read: list[str] = []  # each seed's notes of reading the data, once
    for note in (n for r in runs for n in r.notes):
        read += [] if note in read else [note]
    m = capture.model
    modality = modality_of(m.model, backend=m.backend, weights_path=m.weights_path)
    return spread(layout, plan, runs, meta=meta, notes=[*data_seed_notes(plan, capture.data.data, modality), *read])
