"""The records of a several-seed run and their result document: cells, summaries, differences,
per-seed estimates and sweep rows, and :class:`SeedsResult`, which holds them.

Each record type writes itself as the JSON and parquet outputs write it (``as_dict``) and reads
itself back from a result document (``from_document`` / ``from_record``), field by field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, get_type_hints

from ..documents import RESULT_KEY, Stored, decode_result, encode_result
from ..render_seeds import seeds_report
from ..tables import StoredResult, StoredSweepResult
from .plan import SeedPlan, SeedRun

__all__ = [
    "CELL_FIELDS",
    "AgainstPaper",
    "Cell",
    "DifferenceRecord",
    "EstimateRecord",
    "ExactOverSeeds",
    "Holding",
    "PaperValue",
    "SeedRecords",
    "SeedsResult",
    "SummaryRecord",
    "SweepRow",
]


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
        """Every record: the per-seed records in seed order, then the summaries, then the differences.

        Returns:
            The records as dicts.
        """
        return (
            [r for seed in self.per_seed for r in seed.rows()]
            + [s.as_dict() for s in self.summaries]
            + [d.as_dict() for d in self.differences]
        )

    def sweep_rows(self) -> list[dict]:
        """The swept columns' sweep rows of every seed, each tagged with its seed."""
        return [r.as_dict() for r in self.sweeps]

    def meta(self) -> dict:
        """The meta of the files written, with this result as a document under ``RESULT_KEY``.

        Returns:
            The meta as a dict.
        """
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
