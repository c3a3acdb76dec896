"""The plan of a series: what it audits (the model, the data, the checkpoints, the reference and trained
columns, the depth the trained model is built to), checked before any work.

The checkpoints are resolved once a run (:func:`~.spec.resolve_series`): a run given the
:class:`~.spec.Series` that function gave for its model (as the command line does, having checked
its outputs against the checkpoints) takes it as it is, and reads none of them again here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from ..auditing import Columns, plan_probes
from ..errors import InputError, Param
from ..models import modality_of
from ..request import DataRequest, ModelRequest
from .spec import Series, resolve_series, series_revisions

#: What a :class:`~.spec.Series` is resolved with (the model, its backend, whether its code is trusted): a Series
#: resolved for another request of the same model (another n, query token) is this model's series.
_RESOLVED_WITH = ("model", "backend", "trust_remote_code")


@dataclass(frozen=True)
class _Plan:
    """What a series audits: the model (without trained weights), the data, the checkpoints, the
    reference and trained columns (as :func:`mhaaudit.audit` names them, in the table's order), and the
    depth the trained model is built to."""

    base: ModelRequest
    data: DataRequest
    series: Series
    columns: Columns
    reference: tuple[str, ...]
    trained: tuple[str, ...]
    order: tuple[str, ...]
    max_layer: int

    def audit_keywords(self, variants: tuple[str, ...]) -> dict[str, Any]:
        """The keywords of :func:`mhaaudit.audit` that audit ``variants``: ``layer`` only where it applies."""
        depth = self.columns.layers is not None or any(v in ("random", "trained") for v in variants)
        return {
            "variants": list(variants),
            "layer": self.columns.layer if depth and self.columns.layers is None else None,
            "layers": self.columns.layers,
            "sweep": self.columns.sweep,
        }

    def reference_request(self) -> ModelRequest:
        """The request a single run's reference columns are built from (the first revision's config for a
        series of revisions; the model's own otherwise)."""
        return self.series.checkpoints[0].request(self.base) if self.series.source == "hub" else self.base


def _plan(request: ModelRequest, data: DataRequest, checkpoints, columns: Columns, out=None) -> _Plan:
    """The plan of a series, checked before any work (a glob of ``checkpoints`` leaves out ``out``);
    ``checkpoints`` may be the :class:`~.spec.Series` :func:`~.spec.resolve_series` gave for this model.

    Raises:
        InputError: for ``weights`` beside a series, a bad series, a Series not resolved for this model, an unknown
            column or none trained.
    """
    if request.weights_path is not None:
        raise InputError(
            Param("weights") + " has no effect with a series: each checkpoint gives the trained weights; name the "
            "weights in " + Param("checkpoints")
        )
    revisions = series_revisions(request.revision)
    base = replace(request, revision=None) if revisions else request
    if revisions is None and request.revision is not None and checkpoints is not None:
        raise InputError(
            Param("revision")
            + " names a commit of a hub model, "
            + Param("checkpoints")
            + " local checkpoints: give one of them "
            "(a series of hub revisions is a comma list of revisions)"
        )
    if isinstance(checkpoints, Series):  # resolved already (by the command line, to check its outputs): not again
        series = _given(checkpoints, request, revisions)
    else:
        series = resolve_series(checkpoints, revisions, base, [out] if isinstance(out, (str, os.PathLike)) else [])
    first = series.checkpoints[0].request(base)
    probes = plan_probes(
        modality_of(first.model, backend=first.backend, weights_path=first.weights_path),
        columns.variants,
        columns.layers,
        columns.layer,
    )
    trained = [p for p in probes if p.init == "trained"]
    if not trained:
        raise InputError("a series audits the trained columns of each checkpoint: add trained to " + Param("variants"))
    depth = columns.layers is not None or any(p.variant.endswith(f"-L{p.layer}") for p in probes)

    def asked(p) -> str:
        return p.init if depth else p.variant

    return _Plan(
        base=base,
        data=data,
        series=series,
        columns=columns,
        reference=tuple(dict.fromkeys(asked(p) for p in probes if p.init != "trained")),
        trained=tuple(dict.fromkeys(asked(p) for p in trained)),
        order=tuple(p.variant for p in probes),
        max_layer=max(1, max(p.layer for p in trained)),
    )


def _given(series: Series, request: ModelRequest, revisions: list[str] | None) -> Series:
    """``series``, resolved before for the model ``request`` names (and the hub ``revisions`` it lists, or none).

    Raises:
        InputError: when ``series`` was built by hand, or resolved for another model or other revisions.
    """
    given = series.model
    same = given is not None and all(getattr(given, k) == getattr(request, k) for k in _RESOLVED_WITH)
    if not same or [c.revision for c in series.checkpoints if c.revision is not None] != (revisions or []):
        raise InputError(
            Param("checkpoints") + ": a Series is taken as resolve_series gave it for the model audited (its "
            "name, backend and revisions), and this one was not; give its checkpoints' names to have them resolved"
        )
    return series
