"""A series of checkpoints audited in one run: how the assumptions change over training.

``audit_series(model, checkpoints="runs/ckpt-*")`` (or ``revision="step1000,step8000"`` for hub
revisions; ``check MODEL --checkpoints SPEC`` on the command line) audits each checkpoint as a
single ``check --weights`` run of it does, at the cost of reading it: the reference columns and
the data once, the trained model built once with each checkpoint's tensors read into it, and a
checkpoint byte-identical to the one before it reported and not audited again.

- :mod:`.spec`: the series read and checked before any work; each checkpoint's name, step, order;
- :mod:`.plan`: what a run audits, its checkpoints resolved once;
- :mod:`.identity`: the digest of the tensors an audit reads;
- :mod:`.run`: :func:`audit_series`, the run (its seeds, its ranks under torchrun, its results file);
- :mod:`.result`: :class:`SeriesResult`, its records, the trend and the changes;
- :mod:`.report` and :mod:`.plot`: how it prints, and its figure.
"""

from __future__ import annotations

from .identity import Digest, tensor_digest
from .plot import plot_series
from .result import ChangePoint, CheckpointRun, SeriesResult, SeriesRun, TrendPoint
from .run import audit_series
from .spec import CheckpointRef, Series, resolve_series, series_revisions, step_of

__all__ = [
    "ChangePoint",
    "CheckpointRef",
    "CheckpointRun",
    "Digest",
    "Series",
    "SeriesResult",
    "SeriesRun",
    "TrendPoint",
    "audit_series",
    "plot_series",
    "resolve_series",
    "series_revisions",
    "step_of",
    "tensor_digest",
]
