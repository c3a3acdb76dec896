"""What a reproduction of a table or figure of the paper returns: its settings and its result."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..display import Report
from ..documents import OMITTED_WHEN_NONE
from ..facts import SettingsFacts
from ..provenance import stamp
from ..render import reproduction_report
from .compare import Comparison, RunFacts
from .published import published

if TYPE_CHECKING:
    from ..auditing import AuditResult
    from ..kruskal import Sweep
    from ..memorize import MemorizeGrid

__all__ = ["GridTargetSettings", "Reproduction", "TargetSettings"]


@dataclass(frozen=True, kw_only=True)
class TargetSettings(SettingsFacts):
    """The settings of a table or Figure 1 run, as its ``meta`` gives them (in that order): the
    :class:`~mhaaudit.facts.SettingsFacts` (draws, threshold, seeds, rank rule), the examples asked for, the data
    (None: the paper's online, the built-in offline), and the model
    keys a table ran (None for Figure 1: then the ``meta`` leaves them out)."""

    limit: int
    data: str | None
    models: tuple[str, ...] | None = field(default=None, metadata=OMITTED_WHEN_NONE)


@dataclass(frozen=True)
class GridTargetSettings:
    """The settings of a Figure 2 run, as its ``meta`` gives them: the seed, the device, the
    preset and the grid trained (its :meth:`~mhaaudit.memorize.MemorizeGrid.to_dict`, without
    the runs, which the document gives beside the meta)."""

    seed: int
    device: str | None
    preset: str | None
    grid: MemorizeGrid = field(repr=False)

    def as_dict(self) -> dict:
        """The settings as the ``meta`` gives them."""
        return {
            "seed": self.seed,
            "device": self.device,
            "preset": self.preset,
            "grid": self.grid.to_dict() | {"runs": None},
        }


@dataclass(repr=False)
class Reproduction(Report):
    """One target's comparisons, what the run was (``facts`` per model) and what it produced;
    ``print()`` shows it as ``mhaaudit reproduce`` prints it."""

    target: str
    title: str
    source: str
    comparisons: list[Comparison]
    facts: dict[str, RunFacts]  # model key -> what its run was
    setting: list[str]  # the run in words, with how it differs from the paper's
    settings: TargetSettings | GridTargetSettings  # for the output's meta
    # phase -> seconds (an audit's phases nested under its model, and a column's under the column's name)
    timings: dict[str, float | dict[str, float | dict[str, float]]]
    sweeps: dict[tuple[str, str], Sweep] = field(default_factory=dict)  # (model key, column) -> its sweep
    audits: dict[str, AuditResult] = field(default_factory=dict)  # model key -> its audit
    grid: MemorizeGrid | None = None  # figure2: the grid trained
    notes: list[str] = field(default_factory=list)

    def records(self) -> list[dict]:
        """One row per published value: the comparisons' records."""
        return [c.record() for c in self.comparisons]

    def sweep_rows(self) -> list[dict]:
        """The sweeps' rows, each with its model key and column."""
        return [{"model": key, "column": col, **row} for (key, col), sw in self.sweeps.items() for row in sw.rows()]

    def counts(self) -> dict:
        """How many comparisons have each status (match, differs, undetermined, unavailable)."""
        c = Counter(x.status for x in self.comparisons)
        return {s: c.get(s, 0) for s in ("match", "differs", "undetermined", "unavailable")}

    def meta(self) -> dict:
        """The run's provenance stamp (the JSON ``meta``): the target, the paper, the counts, the setting."""
        return stamp(
            command="reproduce",
            target=self.target,
            title=self.title,
            source=self.source,
            paper=published()["paper"],
            counts=self.counts(),
            setting=self.setting,
            notes=self.notes,
            timings_s=self.timings,
            **self.settings.as_dict(),
        )

    def document(self, meta: dict | None = None) -> dict:
        """What ``--format json`` prints: ``meta``, the records, and the sweep rows and memorize runs
        when the target has them."""
        doc = {"meta": self.meta() if meta is None else meta, "records": self.records()}
        if self.sweeps:
            doc["sweep"] = self.sweep_rows()
        if self.grid is not None:
            doc["runs"] = [r.to_dict() for r in self.grid.runs]
        return doc

    REPORT = reproduction_report

    def summary_line(self) -> str:
        """The target in one line: how many published values have each status."""
        return (
            f"{self.target}: "
            + ", ".join(f"{v} {k}" for k, v in self.counts().items())
            + f" of {len(self.comparisons)} published values"
        )
