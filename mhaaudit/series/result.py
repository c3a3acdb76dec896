"""The result of a series: every checkpoint's audit, the reference audited once, and the trend.

:class:`SeriesResult` holds, for each run (one, or one per seed with ``seeds``), the reference
columns' audit (random weights, audited once: :class:`~mhaaudit.auditing.AuditResult`) and one
:class:`CheckpointRun` per checkpoint: its audit (the trained columns), the :class:`~.identity.Digest`
of the tensors it read, and, for a checkpoint whose tensors are byte-identical to the one before
it, the name of that one (it is not audited again: its records are those of the checkpoint it
repeats, said so in ``identical_to``).

Its records (``records()``, the rows of ``--out`` and ``--format json|parquet``) are each
checkpoint's records as a single ``check --weights`` run of it writes them (with ``seeds``, the
several-seed records of :mod:`mhaaudit.seeds`), each tagged with ``checkpoint`` (its name as given),
``step`` (from its name, or null), ``order`` and ``identical_to``; the reference's records carry
null there. With ``sweep``, each swept column's Kruskal-rank estimate is a record of its own
(``check = "sweep_estimate"``: the estimate, its certified floor and ceiling). ``from_json`` /
``from_parquet`` read the whole result back.

What the report and the plot show is computed here, from those records: :meth:`SeriesResult.trend`
(one :class:`TrendPoint` a cell: a check, or the sweep estimate, of a column at a checkpoint) and
:meth:`SeriesResult.changes` (every checkpoint at which a check's verdict or exact status changes
from the checkpoint before it, a :class:`ChangePoint`: a recovery as well as a failure).
"""

from __future__ import annotations

import itertools
import os
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from ..audit_result import AuditResult
from ..checks import REGISTRY
from ..defaults import DEFAULT_THRESHOLD
from ..documents import RESULT_KEY
from ..errors import InputError
from ..facts import ReadFacts
from ..kruskal.stored import record_contradiction, sweep_contradiction
from ..seeds import SeedPlan, SeedRun, SeedsResult, spread
from ..seeds.check import CHECK_LAYOUT
from ..seeds.records import sweep_estimate_record
from ..tables import StoredSweepResult
from .identity import Digest
from .report import series_report
from .spec import CheckpointRef, Series

__all__ = [
    "SERIES_FIELDS",
    "ChangePoint",
    "CheckpointRun",
    "SeriesResult",
    "SeriesRun",
    "StoredContradiction",
    "TrendPoint",
]

#: The fields every record of a series carries first (null for the reference's records).
SERIES_FIELDS = ("checkpoint", "step", "order", "identical_to")
ESTIMATE = "sweep_estimate"


@dataclass(repr=False)
class CheckpointRun:
    """What became of one checkpoint in one run: ``audited`` (``audit`` holds its trained columns'
    audit) or ``identical`` (the tensors it read are byte-identical to those of the checkpoint before
    it, ``identical_to``; not audited again: ``same_as`` names the audited checkpoint whose records
    it carries). ``digest`` is that of its weights files for a checkpoint not in safetensors form (read
    whole), and None when those files are not on this machine (whether it repeats the one before is
    then not decided). ``resumed``: its audit was read back from the results
    file of an interrupted run. ``read``: for an identical checkpoint read tensor by tensor, what a single run of it
    reads of its own files (its tensors are those it repeats, its files may be split otherwise); else None."""

    checkpoint: CheckpointRef
    status: str  # audited | identical
    audit: AuditResult | None = None
    digest: Digest | None = None
    identical_to: str | None = None
    same_as: str | None = None
    resumed: bool = False
    timings: dict[str, float] = field(default_factory=dict)
    read: ReadFacts | None = None


@dataclass(repr=False)
class SeriesRun:
    """One run of the series (``seed``: its seeds, None without ``seeds``): the reference columns'
    audit (None when only trained columns were asked for) and each checkpoint's :class:`CheckpointRun`,
    in the series' order (those done, when the run was interrupted)."""

    seed: SeedRun | None
    reference: AuditResult | None
    checkpoints: list[CheckpointRun] = field(default_factory=list)

    def audit_of(self, name: str) -> AuditResult | None:
        """The trained columns' audit whose records the checkpoint ``name`` carries (its own, or for an
        identical checkpoint that of the checkpoint it repeats); None when it is not done."""
        runs = {c.checkpoint.name: c for c in self.checkpoints}
        run = runs.get(name)
        if run is None:
            return None
        if run.status == "identical" and run.same_as is not None and run.same_as in runs:
            return runs[run.same_as].audit
        return run.audit

    def columns_meta(self, name: str | None) -> dict | None:
        """What each column read and how (``AuditResult.columns_meta``, a single run's ``columns``) in the audit
        whose records the checkpoint ``name`` carries (None: the reference's); None when there is none."""
        audit = self.reference if name is None else self.audit_of(name)
        return None if audit is None else audit.columns_meta()


@dataclass(frozen=True)
class TrendPoint:
    """One cell of the series' table: a check (or ``sweep_estimate``) of one column (``variant`` at
    ``layer``) at one checkpoint (``checkpoint`` None: the reference, audited once).

    ``value`` is the satisfied fraction (the estimate for ``sweep_estimate``), with ``seeds`` its
    median and ``low`` / ``high`` the range over the seeds (None in one run). ``verdict`` is the
    estimate under the paper's rule (with ``seeds``: holds or fails when every seed says so, else
    mixed), ``exact_status`` the exact status (over the seeds: what every proving seed found, mixed
    when they disagree, undecided when none proved it); ``floor`` / ``ceiling`` the certified bounds
    of an estimate (the lowest floor and highest ceiling over the seeds)."""

    checkpoint: str | None
    order: int | None
    step: int | None
    variant: str
    layer: int
    check: str
    value: float | None
    low: float | None = None
    high: float | None = None
    verdict: str | None = None
    exact_status: str | None = None
    floor: int | None = None
    ceiling: int | None = None
    seeds_holding: int | None = None
    seeds: int | None = None
    identical_to: str | None = None


@dataclass(frozen=True)
class ChangePoint:
    """A checkpoint at which a check (``check`` of ``variant`` at ``layer``) changes its
    ``what`` (``verdict`` or ``exact_status``) from ``before`` (at ``previous``) to ``after``."""

    variant: str
    layer: int
    check: str
    what: str
    before: str
    after: str
    checkpoint: str
    order: int
    step: int | None
    previous: str

    def line(self) -> str:
        """The change in one sentence."""
        title = REGISTRY[self.check].title if self.check in REGISTRY else self.check
        step = "" if self.step is None else f", step {self.step}"
        what = "verdict" if self.what == "verdict" else "exact status"
        return (
            f"{title} ({self.variant}, layer {self.layer}): the {what} changes from {self.before} to {self.after} at "
            f"checkpoint {self.checkpoint} (order {self.order}{step}), after {self.previous}"
        )


def _tagged(records: list[dict], ref: CheckpointRef | None, identical_to: str | None = None) -> list[dict]:
    where = (
        {"checkpoint": None, "step": None, "order": None, "identical_to": None}
        if ref is None
        else {"checkpoint": ref.name, "step": ref.step, "order": ref.order, "identical_to": identical_to}
    )
    return [where | r for r in records]


def _estimates(audit: AuditResult) -> list[dict]:
    return [
        sweep_estimate_record(c.sweep, model=audit.model, variant=c.probe.variant, layer=c.probe.layer)
        for c in audit.columns
        if c.sweep is not None
    ]


@dataclass(repr=False)
class SeriesResult(StoredSweepResult):
    """The audit of a series of checkpoints: ``series`` (the checkpoints, in order), ``runs`` (one
    :class:`SeriesRun`, or one per seed with ``plan``), ``complete`` (False for the results file of
    an interrupted run: the checkpoints done so far), ``notes`` and the ``meta_`` of the files written.

    ``records()`` / ``sweep_rows()`` are the rows the outputs hold; :meth:`audit` gives one
    checkpoint's audit as a single ``check --weights`` run returns it (the reference columns and
    its own); :meth:`trend` and :meth:`changes` are what the report and the plot show.
    ``SeriesResult.from_json`` / ``from_parquet`` read it back from what ``check --checkpoints``
    printed or wrote."""

    COMMAND: ClassVar[str] = "check"

    model: str
    series: Series
    runs: list[SeriesRun]
    variants: tuple[str, ...] = ()  # the columns, in the order of a single run's table
    plan: SeedPlan | None = None
    complete: bool = True
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    meta_: dict[str, Any] = field(default_factory=dict)

    REPORT = series_report

    @classmethod
    def from_json(cls, source):
        """Read the series back from a ``--format json`` document, each stored test checked.

        Args:
            source (dict | str | os.PathLike): the parsed document, its JSON text, or a path to it.

        Returns:
            (Self): The series, equal field by field to the one written.

        Raises:
            InputError: when ``source`` cannot be read or holds no series (see :meth:`StoredResult.from_json`), or
                a stored test record contradicts itself (:class:`StoredContradiction`).
        """
        where = "the JSON document" if isinstance(source, dict) or str(source).lstrip().startswith("{") else source
        return _checked(super().from_json(source), os.fspath(where))

    @classmethod
    def from_parquet(cls, path):
        """Read the series back from the metadata of a ``--out FILE.parquet`` file, each stored test checked.

        Args:
            path (str | os.PathLike): a parquet file written by ``check --checkpoints ... --out``.

        Returns:
            (Self): The series, equal field by field to the one written.

        Raises:
            InputError: when ``path`` is not a readable parquet file or holds no series (see
                :meth:`StoredResult.from_parquet`), or a stored test record contradicts itself
                (:class:`StoredContradiction`).
        """
        return _checked(super().from_parquet(path), os.fspath(path))

    def contradiction(self) -> str | None:
        """The first stored test record or sweep of the series that contradicts itself, named by its checkpoint
        (or the reference), seed, column and check, with what is wrong; None when there is none
        (:func:`mhaaudit.kruskal.stored.record_contradiction`, :func:`~mhaaudit.kruskal.stored.sweep_contradiction`)."""
        for r in self.runs:
            seed = "" if r.seed is None else f", seed {r.seed.seed}"
            audits = [
                ("the reference", r.reference),
                *((f"checkpoint {c.checkpoint.name}", c.audit) for c in r.checkpoints),
            ]
            for where, audit in audits:
                for col in [] if audit is None else audit.columns:
                    place = f"the record of {where}{seed}, column {col.probe.variant} (layer {col.probe.layer})"
                    for check, test in col.tests.items():
                        wrong = record_contradiction(test.record())
                        if wrong is not None:
                            return f"{place}, check {check}: {wrong}"
                    wrong = None if col.sweep is None else sweep_contradiction(col.sweep)
                    if wrong is not None:
                        return f"{place}, its Kruskal-rank sweep: {wrong}"
        return None

    # ------------------------------------------------------------------ the checkpoints

    @property
    def checkpoints(self) -> tuple[CheckpointRef, ...]:
        """The checkpoints of the series, in order."""
        return self.series.checkpoints

    def done(self) -> list[CheckpointRef]:
        """The checkpoints every run has done, in order (all of them unless interrupted)."""
        names = [{c.checkpoint.name for c in r.checkpoints} for r in self.runs]
        return [c for c in self.checkpoints if all(c.name in n for n in names)]

    def checkpoint_named(self, name: str | os.PathLike) -> str:
        """The name of the checkpoint ``name`` stands for: its name as given, or its path (a ``Path``,
        relative or absolute) for a local checkpoint.

        Raises:
            KeyError: when no checkpoint of the series is named ``name`` or lies at that path.
        """
        text = os.fspath(name) if isinstance(name, (str, os.PathLike)) else None
        if isinstance(text, str):
            if any(c.name == text for c in self.checkpoints):
                return text
            path = os.path.abspath(os.path.expanduser(text))
            for c in self.checkpoints:
                if c.path is not None and os.path.normpath(c.path) == path:
                    return c.name
        listed = ", ".join(c.name for c in self.checkpoints[:5]) + (", ..." if len(self.checkpoints) > 5 else "")
        raise KeyError(f"no checkpoint of the series is named {name!r} or lies there (its checkpoints: {listed})")

    def run_of(self, name: str | os.PathLike, run: int = 0) -> CheckpointRun:
        """The :class:`CheckpointRun` of the checkpoint ``name`` (its name, or its path) in run ``run`` (the
        first by default).

        Raises:
            KeyError: when no checkpoint of the series is named ``name``, or it is not done.
        """
        wanted = self.checkpoint_named(name)
        for c in self.runs[run].checkpoints:
            if c.checkpoint.name == wanted:
                return c
        raise KeyError(f"the checkpoint {wanted!r} is not done (the series was interrupted before it)")

    def audit(self, name: str | os.PathLike, run: int = 0) -> AuditResult:
        """Give one checkpoint's audit, as a single ``check MODEL --weights CHECKPOINT`` run returns it.

        It holds the reference columns and the checkpoint's trained columns, in the order of the audit's
        table. An identical checkpoint gives the trained columns of the one it repeats. The random columns
        name the weights the series lists for the checkpoint (``random_weights_source`` in ``meta.series``:
        a revision whose config draws the reference's random weights names them as its single run does), and its
        ``info`` records the weights of each column as that run's does (an identical checkpoint's, named as its own
        files, and what is read of them: ``CheckpointRun.read``).

        Args:
            name: the checkpoint's name, as given, or its path (a ``Path``, relative or absolute).
            run: the run's place in ``runs``, one per seed with ``seeds`` (default 0).

        Returns:
            The checkpoint's :class:`~mhaaudit.AuditResult`.

        Raises:
            KeyError: when no checkpoint of the series is named ``name`` or lies there, or it is not done.
        """
        r = self.runs[run]
        wanted = self.checkpoint_named(name)
        own = r.audit_of(wanted)
        if own is None:
            raise KeyError(f"the checkpoint {wanted!r} is not done (the series was interrupted before it)")
        ref, sources = r.reference, {"random": self._random_source(wanted), "trained": self._own_source(wanted)}
        reads = {"trained": self.run_of(wanted, run).read}  # an identical checkpoint's own files' read

        def named(c):  # a column's weights, named as that run names them
            c = replace(c, weights_read=reads[c.probe.init]) if reads.get(c.probe.init) is not None else c
            return replace(c, weights_source=sources[c.probe.init]) if sources.get(c.probe.init) else c

        # the weights each init read, as a single run records them: the first loaded (random, where the reference
        # columns were audited) gives the model's facts, each after it is added
        first = (ref or own).info
        used = (*ref.info.weights_used, *own.info.weights_used) if ref is not None else own.info.weights_used
        info = replace(
            first,
            weights_source=sources.get(first.weights) or first.weights_source,
            weights_read=reads.get(first.weights) or first.weights_read,
            weights_used=tuple(
                replace(w, source=sources.get(w.init) or w.source, read=reads.get(w.init) or w.read) for w in used
            ),
        )
        own = replace(own, info=info, columns=[named(c) for c in own.columns])
        if ref is None:
            return own
        place = {v: i for i, v in enumerate(self.variants)}
        cols = [named(c) for c in ref.columns] + own.columns
        cols.sort(key=lambda c: place.get(c.probe.variant, len(place)))
        return replace(own, columns=cols, notes=list(dict.fromkeys([*ref.notes, *own.notes])))

    def _entry(self, name: str) -> dict:
        """What the series' ``meta`` lists for the checkpoint ``name`` (empty where it lists nothing)."""
        series = self.meta_.get("series")
        entries = series.get("checkpoints") if isinstance(series, dict) else None
        listed = entries if isinstance(entries, list) else []
        return next((e for e in listed if isinstance(e, dict) and e.get("name") == name), {})

    def _random_source(self, name: str) -> str | None:
        """The words a single run of the checkpoint ``name`` gives the random weights, where the series lists them
        (a revision whose config draws the reference's: ``capacity --from`` reads the reference columns with
        them); None otherwise (the reference columns' own words stand)."""
        drawn = self._entry(name).get("random_weights_source")
        return drawn if isinstance(drawn, str) else None

    def _own_source(self, name: str) -> str | None:
        """The words a single run of the checkpoint ``name`` gives its trained weights, where the series lists them
        (an identical checkpoint carries the audit of the one it repeats, but its weights are its own); None
        otherwise (its audit's own words stand)."""
        columns = self._entry(name).get("columns")
        listed = columns.values() if isinstance(columns, dict) else ()
        said = {
            c.get("weights_source") for c in listed if isinstance(c, dict) and isinstance(c.get("weights_source"), str)
        }
        return said.pop() if len(said) == 1 else None

    # ------------------------------------------------------------------ records

    def _seeds_of(self, audits: list[AuditResult]) -> SeedsResult:
        assert self.plan is not None, "a several-seed series"
        return spread(CHECK_LAYOUT, self.plan, audits)

    def reference_over_seeds(self) -> SeedsResult | None:
        """With ``seeds``, the reference columns over the seeds, as ``check --seeds`` gives them; else None."""
        refs = [r.reference for r in self.runs if r.reference is not None]
        return self._seeds_of(refs) if self.plan is not None and refs and len(refs) == len(self.runs) else None

    def records(self) -> list[dict]:
        """Every record: the reference's first (checkpoint null), then each checkpoint's in order.

        Each record is tagged with ``checkpoint``, ``step``, ``order`` and ``identical_to``.

        Returns:
            The records as dicts; with ``sweep`` also the columns' estimates (``check = "sweep_estimate"``),
            with ``seeds`` the several-seed records.
        """
        out: list[dict] = []
        if self.plan is None:
            run = self.runs[0]
            if run.reference is not None:
                out += _tagged(run.reference.records() + _estimates(run.reference), None)
            for c in run.checkpoints:
                audit = run.audit_of(c.checkpoint.name)
                if audit is not None:
                    out += _tagged(audit.records() + _estimates(audit), c.checkpoint, c.identical_to)
            return out
        over_seeds = self.reference_over_seeds()
        if over_seeds is not None:
            out += _tagged(over_seeds.records(), None)
        for ref in self.done():
            audits = [r.audit_of(ref.name) for r in self.runs]
            first = self.runs[0].checkpoints[[c.checkpoint.name for c in self.runs[0].checkpoints].index(ref.name)]
            out += _tagged(self._seeds_of([a for a in audits if a is not None]).records(), ref, first.identical_to)
        return out

    def sweep_rows(self) -> list[dict]:
        """Every swept column's sweep rows, tagged as the records are (with ``seeds``, with the seed)."""
        out: list[dict] = []
        for r in self.runs:
            seed = {} if r.seed is None else {"aggregate": "seed", "seed": r.seed.seed}
            if r.reference is not None:
                out += [x | seed for x in _tagged(r.reference.sweep_rows(), None)]
            for c in r.checkpoints:
                audit = r.audit_of(c.checkpoint.name)
                if audit is not None:
                    out += [x | seed for x in _tagged(audit.sweep_rows(), c.checkpoint, c.identical_to)]
        return out

    def meta(self) -> dict:
        """The meta of the files written, with this result as a document under ``RESULT_KEY``.

        Returns:
            The meta as a dict.
        """
        return self.meta_ | {RESULT_KEY: self.result_document()}

    # ------------------------------------------------------------------ the trend

    def trend(self, reference: bool = False) -> list[TrendPoint]:
        """List each cell of the series' table, checkpoint by checkpoint.

        Args:
            reference: give the reference columns' cells (audited once) instead.

        Returns:
            One :class:`TrendPoint` per cell.
        """
        out: list[TrendPoint] = []
        refs: list[CheckpointRef | None] = [None] if reference else list(self.done())
        for ref in refs:
            audits = [r.reference if ref is None else r.audit_of(ref.name) for r in self.runs]
            if any(a is None for a in audits):
                continue
            identical = None if ref is None else self.run_of(ref.name).identical_to
            out += _points(ref, [a for a in audits if a is not None], identical)
        return out

    def changes(self) -> list[ChangePoint]:
        """Find where each trained column's checks change, from the checkpoint before.

        The sweep's exact Kruskal rank is no check, so it is not here.

        Returns:
            One :class:`ChangePoint` per change of each check of each trained column, checkpoint by checkpoint:
            every checkpoint at which its verdict differs from the checkpoint before, and every one at which its
            exact status does (a check that fails and then holds again has two), in the series' order per check.
        """
        cells: dict[tuple[str, int, str], list[TrendPoint]] = {}
        for p in self.trend():
            if p.check != ESTIMATE:
                cells.setdefault((p.variant, p.layer, p.check), []).append(p)
        out = []
        for (variant, layer, check), points in cells.items():
            for what in ("verdict", "exact_status"):
                for before, after in itertools.pairwise(points):
                    a, b = getattr(before, what), getattr(after, what)
                    if a != b and a is not None and b is not None:
                        out.append(
                            ChangePoint(
                                variant,
                                layer,
                                check,
                                what,
                                a,
                                b,
                                str(after.checkpoint),
                                int(after.order or 0),
                                after.step,
                                str(before.checkpoint),
                            )
                        )
        return out

    @property
    def threshold(self) -> float:
        """The satisfied fraction at which a check holds under the paper's rule."""
        return float(self.meta_.get("threshold", DEFAULT_THRESHOLD))

    def identical(self) -> list[CheckpointRun]:
        """The checkpoints whose tensors are byte-identical to the one before them (not audited again)."""
        return [c for c in self.runs[0].checkpoints if c.status == "identical"]

    def summary_line(self) -> str:
        """The model, how many checkpoints were audited and how many repeated the one before."""
        done = len(self.done())
        return (
            f"{self.model!r}: {done} of {len(self.checkpoints)} checkpoints"
            + (f" over {len(self.plan.seeds)} seeds" if self.plan is not None else "")
            + f", {len(self.identical())} identical to the one before, {len(self.changes())} changes"
        )


class StoredContradiction(InputError):
    """A results file whose stored test record contradicts itself (``what``: which record, and how)."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: {what}; no run writes that (the file was edited or damaged)")
        self.what = what


def _checked(result: SeriesResult, where: str) -> SeriesResult:
    """``result``, read from ``where``, when no stored record of it contradicts itself.

    Raises:
        StoredContradiction: naming the file, the record and what it says that no run writes.
    """
    wrong = result.contradiction()
    if wrong is not None:
        raise StoredContradiction(where, wrong)
    return result


def _points(ref: CheckpointRef | None, audits: list[AuditResult], identical: str | None) -> list[TrendPoint]:
    """The cells of one checkpoint (or the reference), from its audit in each run."""
    named = (None, None, None) if ref is None else (ref.name, ref.order, ref.step)
    where: dict[str, Any] = dict(zip(("checkpoint", "order", "step"), named, strict=True), identical_to=identical)
    seeds = len(audits) > 1
    out = []
    for i, col in enumerate(audits[0].columns):
        cols = [a.columns[i] for a in audits]
        for check in REGISTRY:
            recs = [c.records(a.model)[list(REGISTRY).index(check)] for a, c in zip(audits, cols, strict=True)]
            values = [r["fraction"] for r in recs if isinstance(r.get("fraction"), (int, float))]
            verdicts = {r["verdict"] for r in recs}
            out.append(
                TrendPoint(
                    **where,
                    variant=col.probe.variant,
                    layer=col.probe.layer,
                    check=check,
                    value=statistics.median(values) if values else None,
                    low=min(values) if seeds and values else None,
                    high=max(values) if seeds and values else None,
                    verdict=verdicts.pop() if len(verdicts) == 1 else "mixed",
                    exact_status=_exact_over([r.get("exact_status") for r in recs]),
                    seeds_holding=sum(r["verdict"] == "holds" for r in recs) if seeds else None,
                    seeds=len(recs) if seeds else None,
                )
            )
        sweeps = [c.sweep for c in cols if c.sweep is not None]
        if len(sweeps) == len(cols) and sweeps:
            estimates = [s.estimate for s in sweeps]
            exact = [s.exact_kruskal_rank for s in sweeps]
            out.append(
                TrendPoint(
                    **where,
                    variant=col.probe.variant,
                    layer=col.probe.layer,
                    check=ESTIMATE,
                    value=statistics.median(estimates),
                    low=min(estimates) if seeds else None,
                    high=max(estimates) if seeds else None,
                    exact_status=str(exact[0]) if len(set(exact)) == 1 and exact[0] is not None else None,
                    floor=min(s.floor.value for s in sweeps),
                    ceiling=max(s.ceiling.value for s in sweeps),
                    seeds=len(sweeps) if seeds else None,
                )
            )
    return out


def _exact_over(statuses: list) -> str | None:
    """The exact status over runs: what every proving run found (mixed when they disagree), else undecided."""
    proved = {s for s in statuses if s in ("fails", "holds")}
    if not statuses or all(s is None for s in statuses):
        return None
    if not proved:
        return "undecided"
    return proved.pop() if len(proved) == 1 else "mixed"
