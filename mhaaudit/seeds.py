"""Several seeds in one run: the spread of an estimate over the randomness of the weights and the data.

A Monte-Carlo fraction's interval covers the draws only. The random weights and the examples are
random too, and a new seed moves the estimate by what they contribute. :func:`over_seeds` runs one
audit per seed and :func:`spread` sets the runs side by side:

- one record per seed (``aggregate = "seed"``, ``seed`` = the run's seed), exactly the records the
  same run with ``--seed`` alone writes, plus the seeds that drew the weights and the data;
- one summary record per cell (``aggregate = "summary"``, ``seed`` = null): the median, lowest and
  highest value over the seeds (a fraction, a sweep estimate, a rank), how many seeds hold under the
  paper's rule, and the exact status where a seed proved it (a proof holds for the weights and data
  of that seed);
- one difference record per pair of sweep estimates (``aggregate = "difference"``): the difference
  seed by seed, its lowest and highest value, and whether that range excludes zero. A range that
  contains zero is "not distinguishable with N seeds", never a difference.

Which randomness varies (:class:`SeedPlan`): ``vary="both"`` runs seed s as ``--seed s`` does
(weights and data from s); ``"weights"`` varies the weights seed and holds the data seed fixed;
``"data"`` the other way round. The Monte-Carlo draws always derive from the run's seed s (their
error is what the interval covers). Trained weights have no weights seed: their records say so
(``weights_seed`` null) and, when only the weights vary, so does the report.

Cost: the runs share their model loads (:func:`mhaaudit.pipeline.shared_loads`): a trained model is
loaded once for every seed, a random one once per weights seed, so when only the data seed varies
the model is built once.

Under torchrun (N processes) with at least N seeds, the seeds are spread over the ranks: rank r
runs the seeds r, r + N, ... whole, as one process does (reading the data itself and sharing its
own model loads), and the per-seed results are gathered back into seed order (whole on rank 0,
without their feature sets on the others), where the summaries and differences are made exactly
as in one process (:func:`over_seeds`). With fewer seeds than ranks every rank runs every seed
and each seed's batches are dealt among the ranks, as in a single run. Either way the records are
those of one process; the meta's ``distributed`` says which (``seeds_by_rank``).
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from itertools import combinations
from typing import Any, ClassVar, get_type_hints

from . import distributed, validate
from .defaults import SEEDS_VARY
from .errors import InputError, param, plain
from .features import FeatureSet
from .kruskal.results import kruskal_meta
from .pipeline import shared_loads
from .render_seeds import seeds_report
from .settings import MAX_SEED
from .tables import RESULT_KEY, Stored, StoredResult, StoredSweepResult, decode_result, encode_result

__all__ = [
    "CAPACITY_LAYOUT",
    "CELL_FIELDS",
    "CHECK_LAYOUT",
    "VARY",
    "AgainstPaper",
    "Cell",
    "DifferenceRecord",
    "EstimateRecord",
    "ExactOverSeeds",
    "Holding",
    "Layout",
    "PaperValue",
    "SeedPlan",
    "SeedRecords",
    "SeedRun",
    "SeedsResult",
    "SummaryRecord",
    "SweepRow",
    "difference_records",
    "over_seeds",
    "parse_seeds",
    "plan_seeds",
    "runs_meta",
    "spread",
    "spread_over_ranks",
    "summary_records",
]

#: What ``--seeds`` varies: the weights and data seeds together (as ``--seed``), or one of them.
VARY = SEEDS_VARY
SEEDS_EXAMPLE = "0-4 or 0,3,7"


def parse_seeds(spec) -> list[int]:
    """``"0-4"``, ``"0,3,7"``, ``"0-2,9"`` or a list of integers -> the sorted seeds (the syntax of
    every command's ``--seeds``, memorize's included)."""
    return validate.int_ranges(spec, param("seeds"), what="seeds", example=SEEDS_EXAMPLE, minimum=0, maximum=MAX_SEED)


@dataclass(frozen=True)
class SeedRun:
    """One run of a several-seed run: its seed and, where set apart, the weights and data seeds."""

    seed: int
    weights_seed: int | None = None  # None: the run's seed
    data_seed: int | None = None  # None: the run's seed

    def kwargs(self) -> dict:
        """The keyword arguments of a library call for this run."""
        return {"seed": self.seed, "weights_seed": self.weights_seed, "data_seed": self.data_seed}

    def seeds_used(self) -> tuple[int, int]:
        """The seeds that draw the weights and the data: those set apart, else the run's seed."""
        return (
            self.seed if self.weights_seed is None else self.weights_seed,
            self.seed if self.data_seed is None else self.data_seed,
        )


@dataclass(frozen=True)
class SeedPlan:
    """The seeds of a run and which randomness they vary; :func:`plan_seeds` builds it."""

    seeds: tuple[int, ...]
    vary: str = "both"
    weights_seed: int | None = None  # held fixed when vary == "data"
    data_seed: int | None = None  # held fixed when vary == "weights"

    def runs(self) -> list[SeedRun]:
        """The runs in seed order, each with the seeds it holds fixed."""
        if self.vary == "weights":
            return [SeedRun(s, None, self.data_seed) for s in self.seeds]
        if self.vary == "data":
            return [SeedRun(s, self.weights_seed, None) for s in self.seeds]
        return [SeedRun(s) for s in self.seeds]

    def describe(self) -> str:
        """One sentence: how many seeds, which seed varies and where the other is held."""
        listed = ", ".join(map(str, self.seeds))
        if self.vary == "weights":
            what = f"the weights seed varies ({listed}); the data seed is held at {self.data_seed}"
        elif self.vary == "data":
            what = f"the data seed varies ({listed}); the weights seed is held at {self.weights_seed}"
        else:
            what = f"the weights and data seeds vary together ({listed})"
        return f"{len(self.seeds)} seeds: {what}; the Monte-Carlo draws follow each run's seed"

    def as_dict(self) -> dict:
        """The plan as the JSON meta writes it (a varied seed as ``"varied"``), with :meth:`describe`."""
        return {
            "seeds": list(self.seeds),
            "vary": self.vary,
            "weights_seed": "varied" if self.vary in ("both", "weights") else self.weights_seed,
            "data_seed": "varied" if self.vary in ("both", "data") else self.data_seed,
            "draws_seed": "each run's seed",
            "describe": self.describe(),
        }


def plan_seeds(
    seeds, *, vary: str = "both", seed: int = 0, weights_seed: int | None = None, data_seed: int | None = None
) -> SeedPlan:
    """Check ``seeds`` (``"0-4"``, ``"0,3,7"`` or a list) and what they vary.

    ``vary="weights"`` holds the data seed at ``data_seed`` (default: the first seed listed),
    ``vary="data"`` the weights seed at ``weights_seed`` (default: the first seed); the seed that
    varies cannot also be given, nor can ``seed`` (give ``--seed`` or ``--seeds``).

    Raises:
        InputError: when ``seeds`` or ``vary`` is refused, ``seed`` is given (other than 0), the varied seed is
            given, or the held seed is not an integer in [0, ``MAX_SEED``].
    """
    listed = parse_seeds(seeds)
    vary = validate.choice(param("vary"), vary, VARY)
    if seed not in (None, 0):
        raise InputError("give either {param:seed} or {param:seeds}, not both")
    varied = {"both": ("weights_seed", "data_seed"), "weights": ("weights_seed",), "data": ("data_seed",)}[vary]
    for name, value in (("weights_seed", weights_seed), ("data_seed", data_seed)):
        if value is not None and name in varied:
            raise InputError(
                f"{{param:{name}}} has no effect with {{param:seeds}} and {{param:vary}} {vary}: "
                "{param:seeds} sets it for every run"
                + ("; hold it fixed with {param:vary} weights or {param:vary} data" if vary == "both" else "")
            )
        if value is not None:
            validate.integer(param(name), value, minimum=0, maximum=MAX_SEED)
    if vary == "weights":
        return SeedPlan(tuple(listed), vary, None, listed[0] if data_seed is None else int(data_seed))
    if vary == "data":
        return SeedPlan(tuple(listed), vary, listed[0] if weights_seed is None else int(weights_seed), None)
    return SeedPlan(tuple(listed), vary)


# --------------------------------------------------------------------------- running


IMAGE_FILES_NOTE = (
    "images read from a folder or file keep their own order, so the data seed does not change "
    "them: only the built-in images, text examples and samples of data depend on it"
)


def data_seed_notes(plan: SeedPlan, data) -> list[str]:
    """What a varied data seed cannot move: the images of a folder or file (read in their own order)."""
    if plan.vary == "data" and data not in (None, "builtin"):
        return [plain("{param:data} ") + f"{data}: {IMAGE_FILES_NOTE}"]
    return []


def over_seeds(fn: Callable, plan: SeedPlan, **kwargs) -> list:
    """``fn(**kwargs, seed=s, weights_seed=..., data_seed=...)`` for each run of ``plan``, in order,
    sharing the model loads; the results, one per seed.

    Inside a call that every rank of a torchrun job makes (:func:`mhaaudit.distributed.lockstep`)
    with at least as many seeds as ranks, the seeds are spread over the ranks: rank r runs the
    runs r, r + N, ... whole, as one process (its own model loads shared), and the results are
    gathered back into seed order. Rank 0, which prints and writes, receives every seed's result
    whole; another rank keeps its own seeds' results whole and receives the others without the
    feature sets they hold (:func:`_without_features`: their records, meta and sweeps are the same,
    so the summaries and differences made from them are too), so that its memory holds the
    features of its own seeds only. With fewer seeds than ranks (or one process) every rank runs
    every seed and each seed's batches are dealt among the ranks."""
    shard = distributed.lockstep()
    runs = plan.runs()
    if not spread_over_ranks(plan, shard.world_size):
        with shared_loads():
            return [fn(**kwargs, **run.kwargs()) for run in runs]
    world = shard.world_size
    with distributed.alone(), shared_loads():
        mine = [fn(**kwargs, **run.kwargs()) for run in runs[shard.rank :: world]]
    shard.wait_for_all("seeds")  # ranks' seeds take unequal times: the gathers below must not time out
    whole = shard.gather_tensors(mine)  # on rank 0 only
    lean = shard.all_gather_tensors([_without_features(r) for r in mine])  # the records etc. of every rank's seeds
    parts = whole if whole is not None else [mine if r == shard.rank else lean[r] for r in range(world)]
    return [parts[i % world][i // world] for i in range(len(runs))]


def _without_features(result):
    """``result`` (one seed's) with every :class:`~mhaaudit.features.FeatureSet` it holds (a
    column's ``features``) left out: a shallow copy of each object on the way to one, ``result``
    itself when it holds none. Nothing in a record, meta or sweep row comes from a feature set."""
    if isinstance(result, FeatureSet):
        return None
    if type(result) in (list, tuple):
        items = [_without_features(v) for v in result]
        if all(a is b for a, b in zip(items, result, strict=True)):
            return result
        return type(result)(items) if isinstance(result, list) else tuple(items)
    if isinstance(result, dict):
        lean = {k: _without_features(v) for k, v in result.items()}
        return result if all(lean[k] is v for k, v in result.items()) else lean
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        changed = {}
        for f in dataclasses.fields(result):
            value = getattr(result, f.name)
            lean = _without_features(value)
            if lean is not value:
                changed[f.name] = lean
        if not changed:
            return result
        out = copy.copy(result)
        for name, value in changed.items():
            object.__setattr__(out, name, value)  # frozen dataclasses too: ``out`` is a new copy
        return out
    return result


def spread_over_ranks(plan: SeedPlan, world_size: int) -> bool:
    """Whether a job of ``world_size`` processes runs the seeds of ``plan`` spread over its ranks
    (each seed whole on one rank): when it has at least one seed per rank."""
    return 1 < world_size <= len(plan.seeds)


def ranks_meta(plan: SeedPlan) -> tuple[dict, list[str]]:
    """How the seeds ran over the ranks of the job the call is part of: the meta's ``distributed``
    (with ``seeds_by_rank``, or None where each seed's batches were dealt) and a note; nothing in
    one process."""
    shard = distributed.lockstep()
    world = shard.world_size
    if world == 1:
        return {}, []
    how = {"world_size": world, "backend": shard.backend or None}
    if not spread_over_ranks(plan, world):
        return how | {"seeds_by_rank": None}, [
            f"{len(plan.seeds)} seeds on {world} processes (fewer seeds than processes): every process ran every "
            "seed, each seed's batches dealt among the processes"
        ]
    by_rank = {str(r): list(plan.seeds[r::world]) for r in range(world)}
    said = "; ".join(f"rank {r} seeds {', '.join(map(str, s))}" for r, s in by_rank.items())
    return how | {"seeds_by_rank": by_rank}, [f"the seeds were spread over {world} processes, each seed whole: {said}"]


# --------------------------------------------------------------------------- spread


def _median(values: Sequence[float]):
    m = statistics.median(values)
    return int(m) if float(m).is_integer() and all(isinstance(v, int) for v in values) else m


def cell_of(rec: dict, key: Sequence[str]) -> tuple:
    return tuple(rec.get(k) for k in key)


#: The fields a cell of a several-seed run may be keyed by (each command's layout names some of them).
CELL_FIELDS = ("model", "variant", "column", "kind", "layer", "check", "k", "heads")


@dataclass(frozen=True)
class Cell:
    """What a summary's records agree on: ``key`` names the fields of the command's cell in the
    order its records write them (:attr:`Layout.key`); a field the key does not name is None."""

    key: tuple[str, ...]
    model: str | None = None
    variant: str | None = None
    column: str | None = None
    kind: str | None = None
    layer: int | None = None
    check: str | None = None
    k: int | None = None
    heads: int | None = None

    @classmethod
    def of(cls, key: Sequence[str], values: Sequence) -> Cell:
        """The cell whose ``key`` fields hold ``values``.

        Raises:
            TypeError: when ``key`` names a field no cell has (a bug in a layout).
        """
        unknown = [k for k in key if k not in CELL_FIELDS]
        if unknown:
            raise TypeError(f"no cell field {', '.join(unknown)} (a cell is keyed by {', '.join(CELL_FIELDS)})")
        return cls(tuple(key), **dict(zip(key, values, strict=True)))

    @classmethod
    def read(cls, data: dict, other: str | None = None) -> Cell:
        """The cell a record ``data`` names: its cell fields (but ``other``, a field the record
        holds for another purpose), in the record's order."""
        key = [k for k in data if k in CELL_FIELDS and k != other]
        return decode_result(cls, {"key": key} | {k: data[k] for k in key})

    def values(self, key: Sequence[str] | None = None) -> tuple:
        """The values of ``key`` (default: the cell's own key); None for a field the cell does not name."""
        return tuple(getattr(self, k) if k in self.key else None for k in (self.key if key is None else key))

    def as_dict(self) -> dict:
        """The cell's fields as its records write them, in the key's order."""
        return dict(zip(self.key, self.values(), strict=True))


@dataclass(frozen=True)
class Holding:
    """How many seeds' verdicts hold, and how many decide (hold or fail), under the paper's rule."""

    holding: int
    decided: int


@dataclass(frozen=True)
class ExactOverSeeds:
    """The exact status over the seeds: the one every proving seed found (fails or holds), mixed
    when proving seeds disagree, undecided when none proved it; and the seeds that proved it."""

    status: str
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class PaperValue:
    """The published value a ``reproduce`` cell is compared with: its value, verdict and source."""

    value: int | float | None
    verdict: str | None
    source: str | None


@dataclass(frozen=True)
class AgainstPaper:
    """Our seeds beside the published value: how many match it, and whether it lies in the range of
    ours (None without a published value or a range)."""

    seeds_matching: int
    inside: bool | None


def _check_keys(record, data, where: str) -> None:
    """Refuse ``data`` whose fields are not those ``record`` writes (in their order).

    Raises:
        ValueError: when they differ.
    """
    if list(record.as_dict()) != list(data):
        raise ValueError(f"{where}: the fields {list(data)} are not those of a {type(record).__name__}")


def _read(tp, data: dict, name: str, where: str):
    if name not in data:
        raise ValueError(f"{where}: lacks {name}")
    return decode_result(tp, data[name])


def _read_fields(cls: type, data: dict, where: str, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Each field of the record ``cls`` but its ``cell`` (and ``skip``), read from ``data`` as the
    field's annotation says.

    Raises:
        ValueError: when ``data`` lacks a field, or holds one of another type.
    """
    hints = get_type_hints(cls)
    return {f.name: _read(hints[f.name], data, f.name, where) for f in fields(cls) if f.name not in ("cell", *skip)}


class _Aggregate(Stored):
    """What a summary and a difference record share in a result document: the ``aggregate`` tag
    that marks the kind (:attr:`AGGREGATE`), where the records of that kind sit (:attr:`WHERE`),
    how one is written (:meth:`document`) and the check that what is read back is one."""

    AGGREGATE: ClassVar[str]
    WHERE: ClassVar[str]

    @classmethod
    def _tagged(cls, data) -> dict:
        """``data``, once it is the object of a record of this kind.

        Raises:
            ValueError: when ``data`` is not the object of a record of this kind.
        """
        if not isinstance(data, dict) or data.get("aggregate") != cls.AGGREGATE:
            raise ValueError(f"{cls.WHERE}: not a {cls.AGGREGATE} record: {data!r}")
        return data


@dataclass(frozen=True)
class SummaryRecord(_Aggregate):
    """One cell over the seeds (``aggregate = "summary"``): the seeds it ran in, the numbers of
    ``value`` they gave, their median, lowest and highest (None without a number) and the phrase
    that says them; where the records have them, how many seeds hold under the paper's rule and
    the exact status over the seeds; for ``reproduce``, the published value beside ours.

    :meth:`as_dict` is the record as the outputs write it; the result document stores the same
    object and :meth:`from_document` reads it back."""

    AGGREGATE: ClassVar[str] = "summary"
    WHERE: ClassVar[str] = "result.summaries[]"

    cell: Cell
    value: str  # which value is summarised: fraction, rank, estimate, our_value
    seeds: tuple[int, ...]
    values: tuple[int | float, ...]
    median: int | float | None
    low: int | float | None
    high: int | float | None
    spread: str
    holding: Holding | None = None
    exact: ExactOverSeeds | None = None
    paper: PaperValue | None = None
    against_paper: AgainstPaper | None = None

    @property
    def runs(self) -> int:
        """How many seeds ran the cell."""
        return len(self.seeds)

    def as_dict(self) -> dict:
        """The summary record as the JSON and parquet outputs write it."""
        rec = self.cell.as_dict()
        if self.paper is not None:
            rec |= {"paper_value": self.paper.value, "paper_verdict": self.paper.verdict, "source": self.paper.source}
        rec |= {"aggregate": "summary", "seed": None, "value": self.value}
        rec |= {"seeds": list(self.seeds), "runs": self.runs, "values": list(self.values)}
        rec |= {"median": self.median, "low": self.low, "high": self.high}
        if self.holding is not None:
            rec |= {"seeds_holding": self.holding.holding, "seeds_decided": self.holding.decided}
        if self.exact is not None:
            rec |= {"exact_status": self.exact.status, "exact_seeds": list(self.exact.seeds)}
        rec["spread"] = self.spread
        if self.against_paper is not None:
            rec |= {"seeds_matching": self.against_paper.seeds_matching, "paper_inside": self.against_paper.inside}
        return rec

    @classmethod
    def from_document(cls, data) -> SummaryRecord:
        """The summary :meth:`document` wrote.

        Raises:
            ValueError: when ``data`` is not the object of a summary record, or lacks a field of one.
        """
        data, where = cls._tagged(data), cls.WHERE
        number = int | float | None
        out = cls(
            cell=Cell.read(data),
            **_read_fields(cls, data, where, skip=("holding", "exact", "paper", "against_paper")),
            holding=Holding(_read(int, data, "seeds_holding", where), _read(int, data, "seeds_decided", where))
            if "seeds_holding" in data
            else None,
            exact=ExactOverSeeds(
                _read(str, data, "exact_status", where), _read(tuple[int, ...], data, "exact_seeds", where)
            )
            if "exact_status" in data
            else None,
            paper=PaperValue(
                _read(number, data, "paper_value", where),
                _read(str | None, data, "paper_verdict", where),
                _read(str | None, data, "source", where),
            )
            if "paper_value" in data
            else None,
            against_paper=AgainstPaper(
                _read(int, data, "seeds_matching", where), _read(bool | None, data, "paper_inside", where)
            )
            if "seeds_matching" in data
            else None,
        )
        _check_keys(out, data, where)
        return out


@dataclass(frozen=True)
class DifferenceRecord(_Aggregate):
    """The difference of two cells' values seed by seed (``aggregate = "difference"``): the cells'
    names ``a`` and ``b``, the seeds they share, the differences, their median and range, whether
    that range excludes zero (only then is it called a difference) and the sentence that says so.

    :meth:`as_dict` is the record as the outputs write it; the result document stores the same
    object and :meth:`from_document` reads it back."""

    AGGREGATE: ClassVar[str] = "difference"
    WHERE: ClassVar[str] = "result.differences[]"

    check: str  # the check of the cells compared (sweep_estimate), or the value's name (rank)
    value: str  # which value: estimate, rank
    a: str
    b: str
    seeds: tuple[int, ...]
    values: tuple[int | float, ...]  # a minus b, seed by seed
    median: int | float
    low: int | float
    high: int | float
    excludes_zero: bool
    conclusion: str

    @property
    def runs(self) -> int:
        """How many seeds the two cells share."""
        return len(self.seeds)

    def as_dict(self) -> dict:
        """The difference record as the JSON and parquet outputs write it."""
        return {
            "aggregate": "difference",
            "check": self.check,
            "value": self.value,
            "seed": None,
            "a": self.a,
            "b": self.b,
            "seeds": list(self.seeds),
            "runs": self.runs,
            "values": list(self.values),
            "median": self.median,
            "low": self.low,
            "high": self.high,
            "excludes_zero": self.excludes_zero,
            "conclusion": self.conclusion,
        }

    @classmethod
    def from_document(cls, data) -> DifferenceRecord:
        """The difference :meth:`document` wrote.

        Raises:
            ValueError: when ``data`` is not the object of a difference record, or lacks a field of one.
        """
        data, where = cls._tagged(data), cls.WHERE
        out = cls(**_read_fields(cls, data, where))
        _check_keys(out, data, where)
        return out


@dataclass(frozen=True)
class EstimateRecord:
    """One seed's Kruskal-rank estimate of a column's sweep (``check = "sweep_estimate"``): the
    column's :class:`Cell` (model, variant and, but for ``kruskal``, layer), the estimate before and
    after capping at the certified ceiling, the certified floor and ceiling and the exact Kruskal
    rank where they meet; and the seeds of the run (``weights_seed`` None for trained weights).

    :meth:`as_dict` is the record as the outputs write it (a per-seed record)."""

    cell: Cell
    estimate: int
    raw_estimate: int
    exact_kruskal_rank: int | None
    floor: int
    ceiling: int
    seed: int
    weights_seed: int | None
    data_seed: int

    def as_dict(self) -> dict:
        """The estimate as the JSON and parquet outputs write it."""
        return (
            {"check": "sweep_estimate"}
            | self.cell.as_dict()
            | {
                "estimate": self.estimate,
                "raw_estimate": self.raw_estimate,
                "exact_kruskal_rank": self.exact_kruskal_rank,
                "floor": self.floor,
                "ceiling": self.ceiling,
                "aggregate": "seed",
                "seed": self.seed,
                "weights_seed": self.weights_seed,
                "data_seed": self.data_seed,
            }
        )

    @classmethod
    def from_record(cls, data) -> EstimateRecord:
        """The estimate :meth:`as_dict` wrote (as a per-seed record, or read back from JSON).

        Raises:
            ValueError: when ``data`` is not the object of a sweep estimate.
        """
        where = "result.per_seed[][]"
        if not isinstance(data, dict) or data.get("check") != "sweep_estimate" or data.get("aggregate") != "seed":
            raise ValueError(f"{where}: not a sweep estimate: {data!r}")
        out = cls(cell=Cell.read(data, other="check"), **_read_fields(cls, data, where))
        _check_keys(out, data, where)
        return out


@dataclass(frozen=True)
class SeedRecords:
    """One seed's records: its run, the records of the command run with that seed alone (each
    command's own, tagged with the seeds that drew the weights and the data) and its sweep
    estimates, typed. :meth:`rows` is what the outputs write: the records, then the estimates; the
    result document stores them as ``[run, rows]``."""

    run: SeedRun
    records: list[dict[str, Any]]
    estimates: tuple[EstimateRecord, ...] = ()

    def rows(self) -> list[dict]:
        """The seed's per-seed records as the outputs write them: its records, then its estimates."""
        return self.records + [e.as_dict() for e in self.estimates]

    def document(self) -> list:
        """The seed's records in a result document: ``[run, rows]``."""
        return [encode_result(self.run), encode_result(self.rows())]

    @classmethod
    def from_document(cls, data) -> SeedRecords:
        """The seed's records :meth:`document` wrote (its sweep estimates read back typed).

        Raises:
            ValueError: when ``data`` is not ``[run, rows]`` with the estimates after the records.
        """
        where = "result.per_seed[]"
        if not isinstance(data, list) or len(data) != 2 or not isinstance(data[1], list):
            raise ValueError(f"{where}: expected [run, records], got {data!r}")
        rows = decode_result(list[dict[str, Any]], data[1])
        out = cls(
            run=decode_result(SeedRun, data[0]),
            records=[r for r in rows if r.get("check") != "sweep_estimate"],
            estimates=tuple(EstimateRecord.from_record(r) for r in rows if r.get("check") == "sweep_estimate"),
        )
        if encode_result(out.rows()) != data[1]:
            raise ValueError(f"{where}: the sweep estimates are not after the other records")
        return out


@dataclass(frozen=True)
class SweepRow(Stored):
    """One seed's row of a sweep: the column's :class:`Cell` (model, variant or column, layer;
    none for ``kruskal``'s one capture), the size k, the satisfied fraction with its 95% interval,
    the exact status and its basis at k, and the run's seed. :meth:`as_dict` is the row as the
    outputs write it (``sweep_rows()``)."""

    cell: Cell
    k: int
    fraction: float
    ci_low: float
    ci_high: float
    exact_status: str
    exact_basis: str
    seed: int

    def as_dict(self) -> dict:
        """The row as the JSON and parquet outputs write it."""
        return self.cell.as_dict() | {
            "k": self.k,
            "fraction": self.fraction,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "exact_status": self.exact_status,
            "exact_basis": self.exact_basis,
            "aggregate": "seed",
            "seed": self.seed,
        }

    @classmethod
    def from_document(cls, data) -> SweepRow:
        """The row :meth:`as_dict` wrote (a seed's sweep row, or read back from JSON).

        Raises:
            ValueError: when ``data`` is not the object of a seed's sweep row.
        """
        where = "result.sweeps[]"
        if not isinstance(data, dict) or data.get("aggregate") != "seed":
            raise ValueError(f"{where}: not a seed's sweep row: {data!r}")
        out = cls(cell=Cell.read(data, other="k"), **_read_fields(cls, data, where))
        _check_keys(out, data, where)
        return out


def _exact(statuses: dict) -> ExactOverSeeds:
    """The exact status over the seeds (:class:`ExactOverSeeds`) from each seed's."""
    proved = {s: v for s, v in statuses.items() if v in ("fails", "holds")}
    found = set(proved.values())
    status = "undecided" if not found else found.pop() if len(found) == 1 else "mixed"
    return ExactOverSeeds(status, tuple(sorted(proved)))


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _cells(per_seed: list[tuple[SeedRun, list[dict]]], key: Sequence[str]) -> dict[tuple, list[tuple[SeedRun, dict]]]:
    """The records grouped by cell (their values of ``key``), each with its run, in first-seen order."""
    cells: dict[tuple, list[tuple[SeedRun, dict]]] = {}
    for run, recs in per_seed:
        for r in recs:
            cells.setdefault(cell_of(r, key), []).append((run, r))
    return cells


def _holding(members: list[tuple[SeedRun, dict]]) -> Holding | None:
    """How many seeds hold and decide under the paper's rule, where the cell's records have verdicts."""
    verdicts = [r.get("verdict") for _, r in members]
    if all(v is None for v in verdicts):
        return None
    return Holding(sum(v == "holds" for v in verdicts), sum(v in ("holds", "fails") for v in verdicts))


def summary_records(
    per_seed: list[tuple[SeedRun, list[dict]]], *, key: Sequence[str], value: str, paper: bool = False
) -> list[SummaryRecord]:
    """One summary record per cell (the records that agree on ``key``): the median, lowest and
    highest ``value`` over the seeds, the seeds whose verdict holds under the paper's rule (when
    the records have one), and the exact status where a seed proved it. With ``paper``, the
    published value, verdict and source are copied from the cell's first record."""
    out = []
    for cell, members in _cells(per_seed, key).items():
        first = members[0][1]
        numbers: list[Any] = [r.get(value) for _, r in members if _is_number(r.get(value))]
        out.append(
            SummaryRecord(
                cell=Cell.of(key, cell),
                value=value,
                seeds=tuple(run.seed for run, _ in members),
                values=tuple(numbers),
                median=_median(numbers) if numbers else None,
                low=min(numbers) if numbers else None,
                high=max(numbers) if numbers else None,
                spread=spread_phrase(numbers, len(members)),
                holding=_holding(members),
                exact=_exact({run.seed: r.get("exact_status") for run, r in members})
                if any("exact_status" in r for _, r in members)
                else None,
                paper=PaperValue(first.get("paper_value"), first.get("paper_verdict"), first.get("source"))
                if paper
                else None,
            )
        )
    return out


def spread_phrase(values: Sequence, runs: int) -> str:
    """A value with its between-seed range in words; one value is labelled a single run."""
    if not values:
        return "no value"
    if len(values) == 1:
        return f"{_fmt(values[0])} (a single run: no spread over seeds)"
    return f"median {_fmt(_median(values))}, range {_fmt(min(values))} to {_fmt(max(values))} over {len(values)} seeds"


def _fmt(v) -> str:
    if isinstance(v, float) and not float(v).is_integer():
        return f"{v:.4g}"
    return str(int(v)) if isinstance(v, (int, float)) else str(v)


def _values_by_seed(
    per_seed: list[tuple[SeedRun, list[dict]]], key: Sequence[str], value: str, check: str | None
) -> dict[tuple, dict[int, float]]:
    """Each cell's ``value`` by seed (the records of ``check`` only, when given)."""
    by_seed: dict[tuple, dict[int, float]] = {}
    for run, recs in per_seed:
        for r in recs:
            if (check is None or r.get("check") == check) and isinstance(r.get(value), (int, float)):
                by_seed.setdefault(cell_of(r, key), {})[run.seed] = r[value]
    return by_seed


def _conclusion(name_a: str, name_b: str, diffs: list) -> tuple[bool, str]:
    """Whether the seed-by-seed differences exclude zero (never with one seed), and what that says."""
    lo, hi = min(diffs), max(diffs)
    if len(diffs) == 1:
        return False, f"{name_a} minus {name_b}: {_fmt(diffs[0])} in a single run; not distinguishable with 1 seed"
    ranged = f"{name_a} minus {name_b}: median {_fmt(_median(diffs))}, range {_fmt(lo)} to {_fmt(hi)}"
    if lo > 0 or hi < 0:
        bigger = name_a if lo > 0 else name_b
        return True, f"{ranged} over {len(diffs)} seeds, which excludes zero: {bigger} is higher in every seed"
    return False, f"{ranged}, which contains zero: not distinguishable with {len(diffs)} seeds"


def _difference(
    a: dict[int, float], b: dict[int, float], names: tuple[str, str], what: tuple[str, str]
) -> DifferenceRecord | None:
    """The difference record of two cells (their values by seed, their ``names``; ``what`` = the
    record's check and value), over the seeds they share; None when they share none."""
    common = [s for s in a if s in b]
    if not common:
        return None
    diffs = [a[s] - b[s] for s in common]
    excludes, said = _conclusion(*names, diffs)
    return DifferenceRecord(
        check=what[0],
        value=what[1],
        a=names[0],
        b=names[1],
        seeds=tuple(common),
        values=tuple(diffs),
        median=_median(diffs),
        low=min(diffs),
        high=max(diffs),
        excludes_zero=excludes,
        conclusion=said,
    )


def difference_records(
    summaries: list[SummaryRecord],
    per_seed: list[tuple[SeedRun, list[dict]]],
    *,
    key: Sequence[str],
    value: str,
    check: str | None = None,
    same: Sequence[str] = (),
) -> list[DifferenceRecord]:
    """For every pair of cells (of ``check``, when given; agreeing on the fields ``same``), the
    difference of their ``value`` seed by seed: its median and range, and whether the range
    excludes zero (only then is it called a difference)."""
    by_seed = _values_by_seed(per_seed, key, value, check)
    cells = [
        s.cell.values(key)
        for s in summaries
        if (check is None or s.cell.check == check) and s.cell.values(key) in by_seed
    ]
    varying = [k for i, k in enumerate(key) if len({c[i] for c in cells}) > 1] or list(key)
    out = []
    for a, b in combinations(cells, 2):
        fields_a, fields_b = dict(zip(key, a, strict=True)), dict(zip(key, b, strict=True))
        if any(fields_a[f] != fields_b[f] for f in same):
            continue
        names = (_name(a, key, varying), _name(b, key, varying))
        rec = _difference(by_seed[a], by_seed[b], names, (check or value, value))
        if rec is not None:
            out.append(rec)
    return out


def _name(cell: tuple, key: Sequence[str], varying: Sequence[str]) -> str:
    """A cell's name in a difference: the fields that tell the cells apart (the variant names its depth)."""
    parts = dict(zip(key, cell, strict=True))

    def shown(fields) -> list[str]:
        return [
            f"h = {parts[k]}" if k == "heads" else str(parts[k])
            for k in fields
            if k not in ("check", "layer", "k") and parts.get(k) is not None
        ]

    return " ".join(shown(varying) or shown(key)) or "?"


@dataclass(repr=False)
class SeedsResult(StoredSweepResult):
    """The runs of several seeds side by side (:func:`spread`): ``summaries`` (one
    :class:`SummaryRecord` per cell) and ``differences`` (:class:`DifferenceRecord`) are typed;
    ``per_seed`` holds each run's records (:class:`SeedRecords`: those of the command run with that
    seed alone, tagged with its seeds, and its typed sweep estimates) and ``sweeps`` every seed's
    sweep rows (:class:`SweepRow`). ``records()`` holds the records as the outputs write them,
    ``sweep_rows()`` the sweep rows (tagged with the seed).

    ``SeedsResult.from_json`` / ``from_parquet`` read it back from what ``--seeds`` printed or
    wrote (``check``, ``kruskal --model``, ``capacity``, ``reproduce``), equal field by field. The
    per-seed result objects (``runs``) are not in those files (their records are, in
    ``per_seed``): a result read back has none."""

    COMMANDS: ClassVar[tuple[str, ...]] = ("check", "kruskal", "capacity", "reproduce")

    command: str
    plan: SeedPlan
    per_seed: list[SeedRecords]  # each run's records, tagged with its seeds
    summaries: list[SummaryRecord]
    differences: list[DifferenceRecord]
    sweeps: list[SweepRow] = field(default_factory=list)
    meta_: dict[str, Any] = field(default_factory=dict)  # the meta, less the result itself
    notes: list[str] = field(default_factory=list)
    title: str = ""
    # the per-seed results (AuditResult, CapacityResult, KruskalResult or Reproduction)
    runs: list[StoredResult] = field(default_factory=list, compare=False, metadata={"document": False})

    def records(self) -> list[dict]:
        """Every record: the per-seed records in seed order, then the summaries, then the differences."""
        return (
            [r for seed in self.per_seed for r in seed.rows()]
            + [s.as_dict() for s in self.summaries]
            + [d.as_dict() for d in self.differences]
        )

    def sweep_rows(self) -> list[dict]:
        """The swept columns' sweep rows of every seed, each tagged with its seed."""
        return [r.as_dict() for r in self.sweeps]

    def meta(self) -> dict:
        """The meta of the files written, with this result as a document under ``RESULT_KEY``."""
        return self.meta_ | {RESULT_KEY: self.result_document()}

    def summary(self, check: str | None = None) -> list[SummaryRecord]:
        """The summary records (one per cell: the between-seed range), of ``check`` only when given."""
        return [s for s in self.summaries if check is None or s.cell.check == check]

    REPORT = seeds_report

    def summary_line(self) -> str:
        """One line: the command, how many seeds, cells and differences."""
        return (
            f"{self.command}: {len(self.plan.seeds)} seeds ({self.plan.vary} varied), {len(self.summaries)} cells, "
            f"{len(self.differences)} differences"
        )


def _tag(records: list[dict], run: SeedRun, trained: Callable[[dict], bool]) -> list[dict]:
    """A run's records as per-seed records: which aggregate, which seeds drew the weights and the data."""
    weights, data = run.seeds_used()
    return [
        r | {"aggregate": "seed", "seed": run.seed, "weights_seed": None if trained(r) else weights, "data_seed": data}
        for r in records
    ]


def is_trained(record: dict) -> bool:
    """Whether a record comes from trained weights (its variant or column names them)."""
    return any(str(record.get(k) or "").startswith("trained") for k in ("variant", "column"))


@dataclass(frozen=True)
class Layout:
    """How a command's runs are set side by side by :func:`spread`.

    ``records(result)`` gives a run's records, summarised per ``key`` over ``value`` (with
    ``paper``, the published value, verdict and source copied from each cell's first record);
    ``estimates(result)`` (optional) its sweep estimates as records of ``check = "sweep_estimate"``
    keyed by ``estimate_key``, whose pairs give the difference records; ``trained(record)`` tells
    which records come from trained weights (no weights seed); ``sweep_rows(result)`` its sweep
    rows. ``differences_same``, when given, makes the ordinary cells' pairs that agree on those
    fields give differences too (capacity: the rank of the columns at the same head count).
    """

    command: str
    records: Callable[[Any], list[dict]]
    key: tuple[str, ...]
    value: str = "fraction"
    estimates: Callable[[Any], list[dict]] | None = None
    estimate_key: tuple[str, ...] = ()
    trained: Callable[[dict], bool] = is_trained
    sweep_rows: Callable[[Any], list[dict]] | None = None
    paper: bool = False
    differences_same: tuple[str, ...] | None = None


def _estimated(
    layout: Layout, plan: SeedPlan, runs: list
) -> tuple[list[tuple[EstimateRecord, ...]], list[SummaryRecord], list[DifferenceRecord]]:
    """The runs' sweep estimates: (per-seed records, summaries, differences); none without ``estimates``."""
    if layout.estimates is None:
        return [() for _ in runs], [], []
    est = [(run, _tag(layout.estimates(res), run, layout.trained)) for run, res in zip(plan.runs(), runs, strict=True)]
    summaries = summary_records(est, key=layout.estimate_key, value="estimate")
    differences = difference_records(summaries, est, key=layout.estimate_key, value="estimate", check="sweep_estimate")
    return [tuple(EstimateRecord.from_record(r) for r in e) for _, e in est], summaries, differences


def _seeds_meta(plan: SeedPlan, meta: dict | None, notes: list[str]) -> dict:
    """The meta of a several-seed run: the first run's (less its result), the plan and the notes;
    under torchrun, how the seeds ran over the ranks."""
    base = {k: v for k, v in (meta or {}).items() if k != RESULT_KEY}
    ranks, _ = ranks_meta(plan)
    described = plan.as_dict()
    return (
        base
        | {
            "seed": None,
            "seeds": list(plan.seeds),
            "seed_plan": described,
            "weights_seed": described["weights_seed"],
            "data_seed": described["data_seed"],
            "seed_notes": notes,
        }
        | ({"distributed": ranks} if ranks else {})
    )


def spread(
    layout: Layout, plan: SeedPlan, runs: list, *, meta: dict | None = None, notes: Sequence[str] = ()
) -> SeedsResult:
    """The runs of ``plan`` (``runs``, one result per seed) side by side, as ``layout`` says: the
    per-seed records, one summary per cell, the differences; ``meta`` is the first run's."""
    per_seed = [
        (run, _tag(layout.records(res), run, layout.trained)) for run, res in zip(plan.runs(), runs, strict=True)
    ]
    summaries = summary_records(per_seed, key=layout.key, value=layout.value, paper=layout.paper)
    differences: list[DifferenceRecord] = []
    if layout.differences_same is not None:
        differences += difference_records(
            summaries, per_seed, key=layout.key, value=layout.value, same=layout.differences_same
        )
    est, est_summaries, est_differences = _estimated(layout, plan, runs)
    seeds = [SeedRecords(run, recs, e) for (run, recs), e in zip(per_seed, est, strict=True)]
    sweeps: list[SweepRow] = []
    if layout.sweep_rows is not None:
        for run, res in zip(plan.runs(), runs, strict=True):
            sweeps += [
                SweepRow.from_document(r | {"aggregate": "seed", "seed": run.seed}) for r in layout.sweep_rows(res)
            ]
    trained = _trained_notes(plan, [r for seed in seeds for r in seed.rows()], layout.trained)
    all_notes = [plan.describe(), *notes, *trained, *ranks_meta(plan)[1]]
    return SeedsResult(
        command=layout.command,
        plan=plan,
        per_seed=seeds,
        summaries=summaries + est_summaries,
        differences=differences + est_differences,
        sweeps=sweeps,
        meta_=_seeds_meta(plan, meta, all_notes),
        notes=all_notes,
        runs=list(runs),
    )


def _trained_notes(plan: SeedPlan, records: list[dict], trained: Callable[[dict], bool]) -> list[str]:
    names = list(
        dict.fromkeys(
            str(r.get("variant") or r.get("column") or "trained")
            for r in records
            if trained(r) and "unavailable" not in (r.get("verdict"), r.get("status"))
        )
    )
    if not names:
        return []
    which = ", ".join(names)
    if plan.vary == "weights":
        return [
            f"trained weights have no weights seed: in {which} only the Monte-Carlo draws vary between the runs "
            "(the data seed is held fixed)"
        ]
    return [f"trained weights have no weights seed: the spread of {which} is that of the data and the draws"]


# --------------------------------------------------------------------------- the commands


def sweep_estimate_record(sw, **where) -> dict:
    """A sweep's Kruskal-rank estimate as a record (``check = "sweep_estimate"``) of the cell ``where``."""
    return {
        "check": "sweep_estimate",
        **where,
        "estimate": sw.estimate,
        "raw_estimate": sw.raw_estimate,
        "exact_kruskal_rank": sw.exact_kruskal_rank,
        "floor": sw.floor.value,
        "ceiling": sw.ceiling.value,
    }


def _sweep_estimates(result) -> list[dict]:
    return [
        sweep_estimate_record(c.sweep, model=result.model, variant=c.probe.variant, layer=c.probe.layer)
        for c in result.columns
        if c.sweep is not None
    ]


def _records(result) -> list[dict]:
    return result.records()


def _sweep_rows(result) -> list[dict]:
    return result.sweep_rows()


#: How ``check --seeds`` sets its runs side by side: the fractions per column, layer, check and
#: size, and the columns' sweep estimates.
CHECK_LAYOUT = Layout(
    "check",
    _records,
    ("model", "variant", "layer", "check", "k"),
    estimates=_sweep_estimates,
    estimate_key=("model", "variant", "layer", "check"),
    sweep_rows=_sweep_rows,
)

#: How ``capacity --seeds`` sets its runs side by side: rank(Z) per column and head count, and
#: the columns' difference at the same head count.
CAPACITY_LAYOUT = Layout(
    "capacity", _records, ("model", "variant", "layer", "heads"), value="rank", differences_same=("layer", "heads")
)


def runs_meta(runs: list, plan: SeedPlan) -> dict:
    """The first run's meta, with every seed's timings."""
    first = runs[0].meta()
    timings = {str(run.seed): r.meta().get("timings_s") for run, r in zip(plan.runs(), runs, strict=True)}
    return first | {"timings_s": timings}


def plan_for(settings, seeds, vary: str = "both") -> SeedPlan | None:
    """The plan of an entry point's ``seeds`` and ``vary`` beside its settings (whose seed, weights
    seed and data seed the plan holds or refuses, see :func:`plan_seeds`); None without ``seeds``,
    where ``vary`` must stay at its default.

    Raises:
        InputError: when ``vary`` is given without ``seeds``, or :func:`plan_seeds` refuses the seeds.
    """
    if seeds is None:
        if vary != "both":
            raise InputError(
                "{param:vary} has no effect without {param:seeds}: it says which seed {param:seeds} varies"
            )
        return None
    return plan_seeds(
        seeds, vary=vary, seed=settings.seed, weights_seed=settings.weights_seed, data_seed=settings.data_seed
    )


def _seeds_of(layout: Layout, run: Callable, plan: SeedPlan, data) -> SeedsResult:
    runs = over_seeds(run, plan)
    return spread(layout, plan, runs, meta=runs_meta(runs, plan), notes=data_seed_notes(plan, data))


def audit_seeds(run: Callable, plan: SeedPlan, data=None) -> SeedsResult:
    """The audit ``run(seed=, weights_seed=, data_seed=)`` for each seed of ``plan`` (what
    ``audit(..., seeds=...)`` returns); ``data`` is the data source the runs read."""
    return _seeds_of(CHECK_LAYOUT, run, plan, data)


def capacity_seeds(run: Callable, plan: SeedPlan, data=None) -> SeedsResult:
    """The capacity run ``run(seed=, weights_seed=, data_seed=)`` for each seed of ``plan``: the
    spread of rank(Z) per column and head count, and the difference between the columns' ranks."""
    return _seeds_of(CAPACITY_LAYOUT, run, plan, data)


def kruskal_seeds(run: Callable, plan: SeedPlan, capture) -> SeedsResult:
    """The Kruskal estimate ``run(seed=, weights_seed=, data_seed=)`` of a capture for each seed of
    ``plan`` (what ``estimate_kruskal_rank(..., seeds=...)`` returns): the per-seed, summary and
    difference records of its tests and its sweep's estimate; ``capture`` is the
    :class:`~mhaaudit.estimation.Capture` the runs share."""
    runs = over_seeds(run, plan)
    where = {"model": capture.model.model, "variant": capture.variant}
    first = runs[0]
    meta = {k: v for k, v in kruskal_meta(first).items() if k != "seed"} | {
        "inputs": {"source": first.source, "T": first.T, "d": first.d, "n": first.n},
        "capture": first.capture.as_dict(),
        "timings_s": {str(r.seed): x.timings for r, x in zip(plan.runs(), runs, strict=True)},
    }
    layout = Layout(
        "kruskal",
        lambda r: [where | t.record() for t in r.tests],
        ("model", "variant", "check", "k"),
        estimates=lambda r: [sweep_estimate_record(r.sweep, **where)] if r.sweep is not None else [],
        estimate_key=("model", "variant", "check"),
        sweep_rows=lambda r: r.sweep.rows() if r.sweep is not None else [],
    )
    return spread(layout, plan, runs, meta=meta, notes=data_seed_notes(plan, capture.data.data))
