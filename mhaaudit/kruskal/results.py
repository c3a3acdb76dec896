"""What the Kruskal-rank evidence is made of: result objects and the binomial interval.

Each result is frozen and carries its own evidence and the ``RankRule`` it was decided under:

* ``Witness``: a subset of rows proven dependent (a proof that the Kruskal rank is below its size);
* ``SetStats``: facts about the whole set that hold for every subset (a certified ceiling),
  kept in the exactly rescaled units in which it is decided;
* ``SubsetTest``: the test at one size k. It answers two questions and keeps them apart: the
  estimate verdict under the paper's rule (``verdict``: the satisfied fraction of Monte-Carlo
  draws against the threshold, with a 95% Clopper-Pearson interval from ``clopper_pearson``) and
  the exact status (``exact_status``: fails, holds or undecided, with ``exact_basis``, what
  decides it). ``proven`` is true exactly when the exact status is decided; ``scope`` says
  whether the test is over k-subsets of a larger set (the paper's question) or k reaches T;
* ``Bound``: a certified floor or ceiling, with what produced it and what it proves;
* ``Sweep``: the satisfied fraction for every size from one set of nested draws (estimates),
  with the certified floor and ceiling;
* ``KruskalResult``: what ``mhaaudit kruskal`` and :func:`mhaaudit.estimate_kruskal_rank` found:
  the tests, the sweep, the inputs and the run's facts, as its table, JSON and parquet outputs give
  them (and read back from them).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..documents import OMITTED_WHEN_NONE
from ..errors import InputError, Param
from ..facts import CaptureFacts, JobFacts, SkipCounts, meta_value
from ..notes import Note
from ..numerics import RankRule, ldexp
from ..provenance import stamp
from ..render_kruskal import kruskal_report, subset_test_report, sweep_report
from ..tables import COLUMNS, ResultTable, StoredSweepResult, table_rows
from .brackets import GramBrackets

__all__ = [
    "EXACT_BASES",
    "EXACT_STATUSES",
    "SCOPES",
    "Bound",
    "GramBrackets",
    "KruskalInputs",
    "KruskalResult",
    "SetStats",
    "SubsetTest",
    "Sweep",
    "Witness",
    "checked_stats",
    "clopper_pearson",
    "data_read",
]

#: The exact status of "every k rows are independent", beside the estimate verdict.
EXACT_STATUSES = ("fails", "holds", "undecided")
#: What decides the exact status: a dependent subset found (witness), the whole set's numerical
#: rank below k (set-rank), k above d or T (dimension), every subset decided (exhaustive: k = T,
#: or every example of Assumption 2), a certified floor (certified-floor: the Babel function's, at k = 1 every row
#: non-zero, or T <= d rows independent as a whole set, so every subset of them is), nothing (none).
EXACT_BASES = ("witness", "set-rank", "dimension", "exhaustive", "certified-floor", "none")
#: subsets: the test is over k-subsets of a larger set (the paper's question); whole-set: k >= T,
#: the only subset is the set itself (or there is none), which does not answer the paper's
#: question; per-example: Assumption 2, every example's context matrix.
SCOPES = ("subsets", "whole-set", "per-example")


def rows_phrase(k: int) -> str:
    """``"1 row"``, ``"2 rows"``: a count of rows in words."""
    return "1 row" if k == 1 else f"{k} rows"


def every_rows_independent(k: int) -> str:
    """ "every k rows are independent" as English for every k (0 and 1 included)."""
    if k <= 0:
        return "no size of subset is proven independent"
    if k == 1:
        return "every row is independent (non-zero)"
    return f"every {k} rows are independent"


def verdict_phrase(test: SubsetTest) -> str:
    """A test's verdict in a few words: ``holds``, ``fails (proven)`` when its exact status proves the verdict,
    and the exact status beside it when a proof says otherwise (``holds (estimate; exact: fails, witness)``)."""
    if not test.proven:
        return test.verdict
    if test.exact_status == test.verdict:
        return f"{test.verdict} (proven)"
    return f"{test.verdict} (estimate; exact: {test.exact_status}, {test.exact_basis})"


def whole_set_note(check: str, k: int, T: int, d: int) -> str:
    """What a whole-set row (k >= T) adds to its reason: it is one set, not a sample of k-subsets, and which run
    answers the paper's question; where k > d, that any larger run fails too (any k vectors in R^d are dependent)."""
    if k > d and check != "general_position":
        return (
            f"; this is one set, not a sample of {k}-subsets of a larger set, but with k = {k} > d = {d} the "
            f"{k}-subsets of any larger set are dependent too: a run with more vectors fails as well"
        )
    need, what = (d, f"d = {d}") if check == "general_position" else (k, f"k = {k}")
    return (
        f"; this is one set, not a sample of {k}-subsets of a larger set, so it does not answer the paper's "
        f"question: a run with more than {need} vectors does (raise "
        + Param("limit")
        + f" above {what}; from a file, give more than {need} rows)"
    )


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Exact two-sided binomial confidence interval.

    Returns:
        ``(low, high)``, the bounds of the ``level`` interval on the success probability after
        ``successes`` of ``trials``; ``(0.0, 1.0)`` when there were no trials.
    """
    if trials <= 0:
        return (0.0, 1.0)
    from scipy.special import betaincinv  # the beta quantile; scipy.stats takes ~1 s to import

    a = (1 - level) / 2
    lo = 0.0 if successes == 0 else float(betaincinv(successes, trials - successes + 1, a))
    hi = 1.0 if successes == trials else float(betaincinv(successes + 1, trials - successes, 1 - a))
    return lo, hi


@dataclass(frozen=True)
class Witness:
    """A subset of rows proven dependent under the rule: Kruskal rank <= len(indices) - 1."""

    indices: tuple[int, ...]
    singular_values: tuple[float, ...]
    tol: float
    rank: int

    def as_dict(self) -> dict:
        """The witness as JSON data: its row indices, their singular values, the tolerance and the rank."""
        return {
            "indices": list(self.indices),
            "singular_values": list(self.singular_values),
            "tol": self.tol,
            "rank": self.rank,
        }


@dataclass(frozen=True)
class SetStats:
    """Facts about the whole T x d set that hold for every subset.

    The values are kept in the units of the data divided by ``2**exponent`` (the power of two that
    brings the largest entry into [0.5, 1); see ``numerics.scale``), in which the ceiling is
    decided; ``singular_values``, ``row_norms_sorted`` and ``sv_error`` give them in the data's
    own units.
    """

    T: int
    d: int
    rank: int  # numerical rank of the whole set under its own tolerance
    unit_singular_values: tuple[float, ...]
    unit_row_norms: tuple[float, ...]  # ascending
    zero_rows: int
    unit_sv_error: float = 0.0  # absolute rounding bound on the singular values
    # norms of the k smallest projections of the rows on the top singular direction, k = 1, 2, ...:
    # for any k-subset, sigma_max(X_S) >= the norm of its k projections >= the k-th of these
    unit_proj_norms: tuple[float, ...] = ()
    exponent: int = 0
    # set when the singular values are the streamed Gram's: the brackets that decide the ceiling, and
    # the TSQR pass for a tolerance that falls inside one (see GramBrackets)
    gram_brackets: GramBrackets | None = field(default=None, compare=False, repr=False)

    @property
    def singular_values(self) -> tuple[float, ...]:
        """The whole set's singular values in the data's own units, descending."""
        return tuple(ldexp(v, self.exponent) for v in self.unit_singular_values)

    @property
    def row_norms_sorted(self) -> tuple[float, ...]:
        """The row norms it keeps (the smallest ones, those a ceiling reads) in the data's own units, ascending."""
        return tuple(ldexp(v, self.exponent) for v in self.unit_row_norms)

    @property
    def sv_error(self) -> float:
        """The absolute rounding bound on the singular values, in the data's own units."""
        return ldexp(self.unit_sv_error, self.exponent)

    def ceiling(self, k: int, rule: RankRule) -> int:
        """Largest rank any k-subset can have: sigma_i(X_S) <= sigma_i(X) and tol_S >= tol_min(k),
        with tol_min from a lower bound on sigma_max(X_S) valid for every k-subset. ``rule`` is
        the rule for the data ``set_stats`` was given."""
        if k < 1:
            return 0
        rule = rule.in_units(self.exponent)
        kk = min(k, len(self.unit_row_norms))
        smax_lo = self.unit_row_norms[kk - 1]  # sigma_max(X_S) >= its largest row norm
        if self.unit_proj_norms:
            smax_lo = max(smax_lo, self.unit_proj_norms[kk - 1] * (1 - 1e-12))
        tol_min = rule.tol(smax_lo, k, self.d)
        values, error = self.unit_singular_values, self.unit_sv_error
        if self.gram_brackets is not None:  # the Gram's values: decided by the brackets, or refined
            if self.gram_brackets.refined is None:
                count = self.gram_brackets.count_above(tol_min)
                if count is not None:
                    return count
            values, error = self.gram_brackets.refine()
        # Counting values within rounding error of the tolerance keeps the ceiling safe.
        return int(sum(1 for s in values if s + error > tol_min))


def checked_stats(stats) -> SetStats | None:
    """Whole-set statistics as a caller gave them (``stats=`` of ``subset_test`` and ``kruskal_sweep``): None or a
    :class:`SetStats` (``set_stats`` makes them).

    Raises:
        InputError: when they are neither.
    """
    if stats is not None and not isinstance(stats, SetStats):
        raise InputError(
            Param("stats") + f" must be the SetStats of set_stats(X, rule), or None; got {type(stats).__name__}"
        )
    return stats


def kruskal_meta(result) -> dict:
    """The provenance stamp of a test, a sweep or a :class:`KruskalResult` (the ``meta`` of
    ``mhaaudit kruskal``'s output; a result adds its facts, several seeds' results leave out the seed)."""
    return stamp(
        command="kruskal",
        seed=result.seed,
        device=result.device,
        tolerance=result.rule.as_dict(),
        threshold=result.threshold,
        samples=result.samples,
    )


#: The columns of a test's record: ``tables.COLUMNS["kruskal"]``, those of ``tables.TEST_COLUMNS`` but Assumption
#: 2's margin, which only its per-example test has (``checks.ContextRanks.record``).
_RECORD_COLUMNS = tuple(c.name for c in COLUMNS["kruskal"])


@dataclass(frozen=True, repr=False)
class SubsetTest(ResultTable):
    """Monte-Carlo test of "every k rows are independent" at one candidate size k.

    ``to_arrow()`` / ``to_pandas()`` give its record as the one row of a table, and a notebook
    shows it as ``mhaaudit kruskal`` prints it. An exact status, basis or scope that is not one of
    :data:`EXACT_STATUSES`, :data:`EXACT_BASES`, :data:`SCOPES`, a witness without the status
    fails, or a status decided with no basis (or undecided with one) is refused where the test is
    made (ValueError).
    """

    check: str
    k: int
    T: int
    d: int
    samples: int
    satisfied: int
    fraction: float
    ci_low: float
    ci_high: float
    threshold: float
    verdict: str  # the estimate under the paper's rule: holds | fails | unavailable
    reason: str
    rule: RankRule
    seed: int
    device: str
    witness: Witness | None = None
    exact_status: str = "undecided"  # fails | holds | undecided (EXACT_STATUSES)
    exact_basis: str = "none"  # what decides it (EXACT_BASES)
    scope: str = "subsets"  # subsets | whole-set (SCOPES)
    rank_histogram: dict[int, int] = field(default_factory=dict)  # rank -> count over the draws examined
    histogram_draws: int = 0
    exact_rechecks: int = 0
    sampled: bool = True
    # the whole set's rank at the smallest tolerance a k-subset can have (SetStats.ceiling): no k-subset exceeds it
    set_rank_ceiling: int | None = None
    planned_samples: int | None = None  # draws asked for, when sampling stopped early
    # draws made whose decision no LAPACK route could compute: neither independent nor dependent, not in samples
    undecided_draws: int = 0
    gram: str | None = None  # how each draw's Gram was had: "full" (read from T x T) | "per-draw" (from the rows in
    # memory) | "mmap" (from the rows of a memory-mapped file)
    title: str = ""  # how a report names the test ("Kruskal test", "Assumption 1"); empty: the check's name

    #: Fields a document of an older version stored under another name (read back under these).
    RENAMED_FIELDS: ClassVar[dict[str, str]] = {"set_rank": "set_rank_ceiling"}

    def __post_init__(self):
        if self.exact_status not in EXACT_STATUSES or self.exact_basis not in EXACT_BASES or self.scope not in SCOPES:
            raise ValueError(
                f"bad exact status {self.exact_status!r} / basis {self.exact_basis!r} / scope {self.scope!r}"
            )
        if self.witness is not None and self.exact_status != "fails":
            raise ValueError("a test with a witness has exact status fails")
        if (self.exact_status == "undecided") != (self.exact_basis == "none"):
            raise ValueError("an exact status is decided exactly when something decides it")

    @property
    def proven(self) -> bool:
        """Whether the exact status is decided (fails or holds); a witness always decides it."""
        return self.exact_status != "undecided"

    @property
    def set_rank(self) -> int | None:
        """Deprecated name of :attr:`set_rank_ceiling` (the whole set's rank at the smallest tolerance a
        k-subset can have, not the whole set's rank under its own tolerance); removed in the next release."""
        warnings.warn(
            "SubsetTest.set_rank is deprecated: it is set_rank_ceiling (the whole set's rank at the smallest "
            "tolerance a k-subset can have); the whole set's own rank is KruskalResult.set_rank",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.set_rank_ceiling

    def record(self) -> dict:
        """The row of a results table: the columns of ``tables.COLUMNS["kruskal"]``, in their order, each the
        field of the same name or what :meth:`_derived_columns` makes of the evidence."""
        derived = self._derived_columns()
        return {name: derived[name] if name in derived else getattr(self, name) for name in _RECORD_COLUMNS}

    def _derived_columns(self) -> dict:
        w = self.witness
        return {
            "tolerance": self.rule.describe(),
            "witness": list(w.indices) if w else [],
            "witness_singular_values": list(w.singular_values) if w else [],
            "witness_tol": w.tol if w else None,
            "rank_histogram": {str(k): v for k, v in sorted(self.rank_histogram.items())},
            "proven": self.proven,
        }

    def table_records(self) -> list[dict]:
        """The rows of the table: the one :meth:`record`."""
        return [self.record()]

    def table_meta(self) -> dict:
        """The provenance stamp of the test (the ``meta`` of ``mhaaudit kruskal``'s output)."""
        return kruskal_meta(self)

    REPORT = subset_test_report

    def summary_line(self) -> str:
        """The check, k, T, d, the verdict (:func:`verdict_phrase`) and the draws found independent; a witness said
        so."""
        s = (
            f"{self.check} at k = {self.k} of T = {self.T} rows in R^{self.d}: {verdict_phrase(self)}, "
            f"{self.satisfied}/{self.samples} draws independent"
        )
        if self.witness is not None:
            s += f", a dependent {len(self.witness.indices)}-row subset"
        return s


@dataclass(frozen=True)
class Bound:
    """A certified floor or ceiling on the Kruskal rank: its value, what produced it and what it proves."""

    value: int
    kind: str  # what produced it
    proves: str  # what it proves, in words

    def as_dict(self) -> dict:
        """The bound as JSON data: ``value``, ``kind`` and ``proves``."""
        return {"value": self.value, "kind": self.kind, "proves": self.proves}


@dataclass(frozen=True, repr=False)
class Sweep(ResultTable):
    """Satisfied fraction for every candidate size from one set of nested draws.

    ``to_arrow()`` / ``to_pandas()`` give the curve as the sweep rows of ``kruskal --out``
    (``check = "sweep"``), and a notebook shows it as ``mhaaudit kruskal`` prints it.
    """

    T: int
    d: int
    samples: int
    threshold: float
    seed: int
    rule: RankRule
    device: str
    ks: tuple[int, ...]
    fractions: tuple[float, ...]
    ci_low: tuple[float, ...]
    ci_high: tuple[float, ...]
    estimate: int  # largest k with fraction >= threshold (an estimate, not a proof)
    ceiling: Bound
    floor: Bound
    witness: Witness | None
    exact_rechecks: int
    kmax_sampled: int
    raw_estimate: int = 0  # before capping at the certified ceiling
    gram: str | None = None  # "full" | "per-draw" | "mmap" (see SubsetTest.gram); None when nothing was sampled
    # draws made whose k* no LAPACK route could compute: left out of samples and of every fraction
    undecided_draws: int = 0

    def exact_at(self, k: int) -> tuple[str, str]:
        """``(exact_status, exact_basis)`` of "every k rows are independent": fails above the
        certified ceiling, holds up to the certified floor, undecided between them."""
        if k > self.ceiling.value:
            return "fails", {"witness": "witness", "set-rank": "set-rank"}.get(self.ceiling.kind, "dimension")
        if k <= self.floor.value:
            return "holds", "certified-floor"
        return "undecided", "none"

    @property
    def exact_kruskal_rank(self) -> int | None:
        """The Kruskal rank when the certified floor meets the certified ceiling, else None."""
        return self.floor.value if self.floor.value == self.ceiling.value else None

    def rows(self) -> list[dict]:
        """One row per size k swept: the satisfied fraction, its interval and the exact status and basis at k."""
        return [
            {
                "k": k,
                "fraction": f,
                "ci_low": lo,
                "ci_high": hi,
                "exact_status": self.exact_at(k)[0],
                "exact_basis": self.exact_at(k)[1],
            }
            for k, f, lo, hi in zip(self.ks, self.fractions, self.ci_low, self.ci_high, strict=False)
        ]

    def summary(self) -> dict:
        """The sweep's findings as JSON data (the ``sweep_summary`` of the ``meta``): the estimate and the
        exact Kruskal rank with what each means, the certified bounds, the witness, the rechecks and the Gram."""
        return {
            "estimate": self.estimate,
            "estimate_means": f"largest k whose satisfied fraction is >= {self.threshold} over {self.samples} draws, "
            "capped at the certified ceiling (an estimate, not a proof)",
            "raw_estimate": self.raw_estimate,
            "exact_kruskal_rank": self.exact_kruskal_rank,
            "exact_means": "the Kruskal rank when the certified floor equals the certified ceiling (a proof); "
            "null when they differ",
            "ceiling": self.ceiling.as_dict(),
            "floor": self.floor.as_dict(),
            "witness": self.witness.as_dict() if self.witness else None,
            "exact_rechecks": self.exact_rechecks,
            "gram": self.gram,
            "undecided_draws": self.undecided_draws,
        }

    def table_records(self) -> list[dict]:
        """The rows of the table: :meth:`rows`, tagged ``check = "sweep"``."""
        return table_rows([], self.rows())

    def table_meta(self) -> dict:
        """The provenance stamp of the sweep, with its :meth:`summary` as ``sweep_summary``."""
        return {**kruskal_meta(self), "sweep_summary": self.summary()}

    REPORT = sweep_report

    def summary_line(self) -> str:
        """T, d, the draws, the estimate and the certified floor and ceiling."""
        return (
            f"T = {self.T} rows in R^{self.d}, {self.samples} draws: estimate {self.estimate} "
            f"(certified floor {self.floor.value}, ceiling {self.ceiling.value})"
        )


@dataclass(frozen=True)
class KruskalInputs:
    """The vectors ``mhaaudit kruskal`` tested: where from, how many (T), their width d, the
    context length n when known (None otherwise) and their dtype."""

    source: str
    T: int
    d: int
    n: int | None
    dtype: str

    def as_dict(self) -> dict:
        """The inputs as JSON data: ``source``, ``T``, ``d``, ``n`` and ``dtype``."""
        return {"source": self.source, "T": self.T, "d": self.d, "n": self.n, "dtype": self.dtype}


def data_read(meta: dict) -> dict[str, Any]:
    """A :class:`KruskalResult`'s ``skips`` and ``notes`` from the meta of the features it tested
    (:func:`mhaaudit.capture.capture_probe` keeps them there; none for vectors read from a file)."""
    return {"skips": SkipCounts.of(meta.get("skips") or {}), "notes": tuple(meta.get("notes") or ())}


@dataclass(frozen=True, repr=False)
class KruskalResult(StoredSweepResult):
    """What ``mhaaudit kruskal`` found (:func:`mhaaudit.estimate_kruskal_rank` returns it): a test at
    each size asked for, the sweep when one ran, and the run's facts (the rank rule, the whole set's
    rank, the time it took; with ``--model``, the inputs ``skips`` and the capture's ``notes``); ``T``,
    ``d``, ``n`` and ``source`` are the inputs'.

    Its table, JSON (``meta()``, ``records()``, ``sweep_rows()``) and parquet outputs are made from
    these fields; ``KruskalResult.from_json`` / ``from_parquet`` read it back from them.
    """

    COMMAND: ClassVar[str] = "kruskal"

    inputs: KruskalInputs
    tests: tuple[SubsetTest, ...]
    sweep: Sweep | None
    rule: RankRule
    seed: int
    device: str
    threshold: float
    samples: int
    set_rank: int  # the whole set's numerical rank under its own tolerance
    timings: dict[str, float] = field(default_factory=dict)  # each test's and the sweep's seconds
    total_s: float = 0.0
    # the run's phases (``mhaaudit.phases``: capture, whole-set statistics, draws, witness, ..., other, total)
    phases: dict[str, float] = field(default_factory=dict)
    storage: str = "memory"  # memory | memory-mapped
    peak_rss_bytes: int | None = None
    capture: CaptureFacts = field(default_factory=CaptureFacts)  # with --model: the batch and the weights read
    skips: SkipCounts = field(default_factory=SkipCounts)  # with --model: the inputs skipped, by cause
    notes: tuple[Note, ...] = ()  # with --model: what reading the data found (a T short of --limit, ...)
    distributed: JobFacts | None = field(default=None, metadata=OMITTED_WHEN_NONE)  # under torchrun: its job

    @property
    def T(self) -> int:
        """The number of vectors tested (``inputs.T``)."""
        return self.inputs.T

    @property
    def d(self) -> int:
        """Their width (``inputs.d``)."""
        return self.inputs.d

    @property
    def n(self) -> int | None:
        """The context length when known (``inputs.n``), else None."""
        return self.inputs.n

    @property
    def source(self) -> str:
        """Where the vectors came from (``inputs.source``)."""
        return self.inputs.source

    @property
    def set_rank_ceilings(self) -> dict[str, int]:
        """The whole-set rank at the smallest tolerance a k-subset can have, by k (as a string)."""
        return {str(t.k): t.set_rank_ceiling for t in self.tests if t.set_rank_ceiling is not None}

    def records(self) -> list[dict]:
        """One record per test, in the order of ``tests``.

        Returns:
            The records as dicts (:meth:`SubsetTest.record`).
        """
        return [t.record() for t in self.tests]

    def sweep_rows(self) -> list[dict]:
        """The sweep's rows (:meth:`Sweep.rows`); empty when no sweep ran."""
        return self.sweep.rows() if self.sweep is not None else []

    def meta(self) -> dict:
        """The provenance stamp and the run's facts.

        Returns:
            The JSON ``meta`` (and the parquet metadata) as a dict.
        """
        meta = kruskal_meta(self) | {
            "inputs": self.inputs.as_dict(),
            "set_rank": self.set_rank,
            "set_rank_ceilings": self.set_rank_ceilings,
            "timings_s": dict(self.timings),
            "total_s": self.total_s,
            "phases_s": dict(self.phases),
            "storage": self.storage,
            "peak_rss_bytes": self.peak_rss_bytes,
        }
        if self.capture:
            meta["capture"] = self.capture.as_dict()
            meta["skips"], meta["notes"] = self.skips.as_dict(), list(self.notes)
        if self.sweep is not None:
            meta["sweep_summary"] = self.sweep.summary()
        if self.distributed is not None:
            meta["distributed"] = meta_value(self.distributed)
        meta["result"] = self.result_document()
        return meta

    REPORT = kruskal_report

    def summary_line(self) -> str:
        """The vectors tested (T, d, source), each test's verdict and the sweep's estimate."""
        tests = ", ".join(f"{t.check} k = {t.k}: {verdict_phrase(t)}" for t in self.tests)
        swept = f"; sweep estimate {self.sweep.estimate}" if self.sweep is not None else ""
        return f"{self.T} vectors in R^{self.d} from {self.source}" + (f"; {tests}" if tests else "") + swept
