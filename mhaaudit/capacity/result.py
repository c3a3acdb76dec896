"""The result types of ``mhaaudit capacity``: one column's bound and certificate, and :class:`CapacityResult`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..documents import EMPTY_WHEN_NONE
from ..facts import BatchChoice, CapacitySettings, ModelFacts, ReadFacts, meta_value, weights_read_text
from ..provenance import stamp
from ..render import capacity_report
from ..tables import StoredResult
from ..theory import CapacityBound, shared_context_rank_bound
from .assumptions import (
    Assumptions,
)
from .certificate import HeadCertificate

__all__ = ["CapacityColumn", "CapacityResult"]


@dataclass
class CapacityColumn:
    """The bound and the certificate of one set of weights: the bound for each head count h
    (``bounds[h]``), the certificate of each head prefix (``certificates``, by h), the assumptions
    the bound rests on, and what the column read."""

    variant: str  # random | trained
    status: str = "ok"  # ok | unavailable
    reason: str = ""
    assumptions: Assumptions | None = None
    bounds: dict[int, CapacityBound] = field(default_factory=dict)  # h -> its bound
    certificates: list[HeadCertificate] = field(default_factory=list)  # by h
    T: int = 0
    weights_source: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    weights_read: ReadFacts | None = None  # trained weights: what loading read
    # the batch size used and how it was chosen (None: the column did not run; stored as {})
    batch: BatchChoice | None = field(default=None, metadata=EMPTY_WHEN_NONE)
    # Proposition 2 for each certificate (by h), filled when the result is built (CapacityResult)
    prop2: dict[int, SharedContextCheck] = field(default_factory=dict, metadata={"document": False})


@dataclass(frozen=True)
class SharedContextCheck:
    """Proposition 2 for one head count h: ``bound`` = h (n - 1) + 1, its ceiling on rank(Z) when
    every example shares one context, and, when the run shared it (``--shared-context``), the
    ``verdict``: holds when rank(Z) <= bound, else fails (None when the context was not shared)."""

    heads: int
    bound: int
    verdict: str | None

    @classmethod
    def of(cls, cert: HeadCertificate, n: int, shared_context: bool) -> SharedContextCheck:
        bound = shared_context_rank_bound(cert.heads, n)
        return cls(cert.heads, bound, ("holds" if cert.rank <= bound else "fails") if shared_context else None)


def _unavailable_record(base: dict, reason: str) -> dict:
    """The one row of a column that could not run: ``base`` with every result empty and ``reason``."""
    return {
        **base,
        "heads": None,
        "rank": None,
        "rank_cap": None,
        "bound": None,
        "bound_kind": "unavailable",
        "bound_reason": reason,
        "residual": None,
        "prop2_bound": None,
        "prop2_verdict": None,
        "reason": reason,
    }


def _head_records(c: CapacityColumn, base: dict) -> list[dict]:
    """The rows of a column that ran, one per head count h: ``base`` with h's certificate, its bound, Proposition
    2's check and the assumptions the bound rests on."""
    a = c.assumptions or Assumptions()
    out = []
    for cert in c.certificates:
        b, p2 = c.bounds[cert.heads], c.prop2[cert.heads]
        out.append(
            {
                **base,
                "heads": cert.heads,
                "rank": cert.rank,
                "rank_cap": cert.rank_cap,
                "bound": b.count,
                "bound_kind": b.which,
                "bound_reason": b.reason,
                "bound_formula": b.formula,
                "residual": cert.residual,
                "rank_method": cert.method,
                "z_tolerance_value": cert.tolerance,
                "sigma_max": cert.sigma_max,
                "prop2_bound": p2.bound,
                "prop2_verdict": p2.verdict,
                "assumption_1": a.a1,
                "assumption_2": a.a2,
                "kruskal_estimate": a.kruskal_estimate,
                "reason": "",
            }
        )
    return out


@dataclass(repr=False)
class CapacityResult(StoredResult):
    """Bound and certificate of every column; ``to_arrow()`` / ``to_pandas()`` give the rows
    ``capacity --out`` writes, and a notebook shows it as the report ``capacity`` prints.
    ``CapacityResult.from_json`` / ``from_parquet`` read it back from those outputs."""

    COMMAND: ClassVar[str] = "capacity"

    model: str
    info: ModelFacts  # the model's ModelInfo
    data: str
    columns: list[CapacityColumn]
    settings: CapacitySettings  # the run's settings, as the JSON meta gives them
    timings: dict[str, float]
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        """Proposition 2 for each certificate of each column that ran (``CapacityColumn.prop2``)."""
        for c in self.columns:
            c.prop2 = {
                cert.heads: SharedContextCheck.of(cert, self.info.n, self.settings.shared_context)
                for cert in c.certificates
            }

    def records(self) -> list[dict]:
        """One row per column and head count h.

        Returns:
            The rows as dicts; a column that could not run has one 'unavailable' row.
        """
        out = []
        for c in self.columns:
            base = self._column_record(c)
            if c.status != "ok":
                out.append(_unavailable_record(base, c.reason))
                continue
            out.extend(_head_records(c, base))
        return out

    def _column_record(self, c: CapacityColumn) -> dict:
        """The fields every row of column ``c`` shares: the run's settings, the model's sizes and the column's
        status."""
        s, info = self.settings, self.info
        return {
            "model": self.model,
            "variant": c.variant,
            "layer": s.layer,
            "attention": s.attention,
            "shared_context": s.shared_context,
            "T": c.T or None,
            "n": info.n,
            "d": info.d,
            "d_h": s.head_dim,
            "H": info.num_heads,
            "tolerance": s.z_tolerance,
            "seed": s.seed,
            "status": c.status,
        }

    def table_records(self) -> list[dict]:
        """The rows of the table: :meth:`records`."""
        return self.records()

    def table_meta(self) -> dict:
        """The provenance stamp of the table: :meth:`meta`."""
        return self.meta()

    REPORT = capacity_report

    def summary_line(self) -> str:
        """The model, the block, and per column rank(Z) with the most heads and T (or that it is unavailable)."""
        parts = []
        for c in self.columns:
            if c.status != "ok" or not c.certificates:
                parts.append(f"{c.variant} unavailable")
            else:
                top = max(c.certificates, key=lambda cert: cert.heads)
                parts.append(f"{c.variant}: rank Z = {top.rank} with {top.heads} heads, T = {c.T}")
        return f"{self.model!r} block {self.settings.layer}; " + "; ".join(parts)

    def meta(self) -> dict:
        """The provenance stamp of the run, with the result itself under ``result``.

        Returns:
            The JSON ``meta`` as a dict.
        """
        return stamp(
            command="capacity",
            model=self.model,
            model_info=self.info.as_dict(),
            data=self.data,
            notes=self.notes,
            timings_s=self.timings,
            **self.settings.as_dict(),
            columns={
                c.variant: {
                    "status": c.status,
                    "reason": c.reason,
                    "T": c.T,
                    "weights_source": c.weights_source,
                    "weights_read": meta_value(c.weights_read),
                    "weights_read_text": weights_read_text(meta_value(c.weights_read)),
                    "timings_s": c.timings,
                    "assumptions": c.assumptions.to_dict() if c.assumptions else None,
                    "bound": (c.bounds[max(c.bounds)].to_dict() if c.bounds else None),
                }
                for c in self.columns
            },
            result=self.result_document(),
        )
