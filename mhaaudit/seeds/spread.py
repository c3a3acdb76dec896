"""Several seeds run and set side by side: each seed's run (spread over the ranks of a torchrun
job), the summary of each cell over the seeds and the differences between cells.

:func:`over_seeds` runs a library call once per seed of a :class:`~.plan.SeedPlan`; :func:`spread`
makes the :class:`~.records.SeedsResult` of the runs as a command's :class:`Layout` says.
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from .. import distributed, readings
from ..documents import RESULT_KEY
from ..errors import Param
from ..features import FeatureSet
from ..load_sharing import shared_loads
from .plan import SeedPlan, SeedRun
from .records import (
    Cell,
    DifferenceRecord,
    EstimateRecord,
    ExactOverSeeds,
    Holding,
    PaperValue,
    SeedRecords,
    SeedsResult,
    SummaryRecord,
    SweepRow,
    cell_of,
)

__all__ = [
    "Layout",
    "difference_records",
    "over_seeds",
    "result_records",
    "result_sweep_rows",
    "run_and_spread",
    "runs_meta",
    "spread",
    "spread_over_ranks",
    "summary_records",
]


IMAGE_FILES_NOTE = (
    "images read from a folder or file keep their own order, so the data seed does not change "
    "them: only the built-in images, text examples and samples of data depend on it"
)


def data_seed_notes(plan: SeedPlan, data, modality: str) -> list[str]:
    """What a varied data seed (``--vary data`` or ``both``) cannot move: the images of a folder or file (read in
    their own order). Text read from a file is not among them: its examples are drawn from the documents with the
    data seed."""
    if plan.vary in ("data", "both") and data not in (None, "builtin") and modality == "image":
        return [(Param("data") + " ") + f"{data}: {IMAGE_FILES_NOTE}"]
    return []


def over_seeds(fn: Callable, plan: SeedPlan, *, asked: Mapping[str, Any] | None = None, **kwargs) -> list:
    """``fn(**kwargs, seed=s, weights_seed=..., data_seed=...)`` for each run of ``plan``, in order,
    sharing the model loads; the results, one per seed. ``asked``: what else decides the runs' results
    (name -> a request object or a value: the model, data and settings ``fn`` holds).

    Inside a call that every rank of a torchrun job makes (:func:`mhaaudit.distributed.lockstep`)
    with at least as many seeds as ranks, the seeds are spread over the ranks: rank r runs the
    runs r, r + N, ... whole, as one process (its own model loads shared), and the results are
    gathered back into seed order. Rank 0, which prints and writes, receives every seed's result
    whole; another rank keeps its own seeds' results whole and receives the others without the
    feature sets they hold (:func:`_without_features`: their records, meta and sweeps are the same,
    so the summaries and differences made from them are too), so that its memory holds the
    features of its own seeds only. With fewer seeds than ranks (or one process) every rank runs
    every seed and each seed's batches are dealt among the ranks.

    Spread over the ranks, each rank reads its own files (on several nodes, its node's): before any
    work the ranks compare what they were asked (``plan``, ``asked`` and ``kwargs``), and before their
    results are combined the digests of the model inputs they fed and the models they built
    (:mod:`mhaaudit.readings`); every rank refuses when one differs from rank 0's.

    Raises:
        RankFailed: when a rank was asked another run than rank 0, or read other inputs where rank 0
            read the same (the message names what differs).
    """
    shard = distributed.lockstep()
    runs = plan.runs()
    if not spread_over_ranks(plan, shard.world_size):
        with shared_loads():
            return [fn(**kwargs, **run.kwargs()) for run in runs]
    world = shard.world_size
    every = shard.all_gather(readings.asked_fields({"seeds": plan, **(asked or {}), **kwargs}))
    if (why := readings.asked_difference(every)) is not None:
        raise distributed.RankFailed(why)
    with distributed.alone(), shared_loads(), readings.recording() as read:
        mine = [fn(**kwargs, **run.kwargs()) for run in runs[shard.rank :: world]]
    shard.wait_for_all("seeds")  # ranks' seeds take unequal times: the gathers below must not time out
    if (why := readings.disagreement(shard.all_gather({k: sorted(v) for k, v in read.items()}))) is not None:
        raise distributed.RankFailed(why)  # every rank: they gathered the same digests
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


def _median(values: Sequence[float]):
    m = statistics.median(values)
    return int(m) if float(m).is_integer() and all(isinstance(v, int) for v in values) else m


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
        # a record without a verdict ("unavailable": no draw decided, or no column) has no value to summarise
        numbers: list[Any] = [
            r.get(value) for _, r in members if _is_number(r.get(value)) and r.get("verdict") != "unavailable"
        ]
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
    """A value with its between-seed range in words; one value is labelled a single run, and values from fewer
    seeds than the ``runs`` made say so."""
    if not values:
        return "no value"
    if len(values) == 1:
        if runs > 1:
            return f"{_fmt(values[0])} (one of {runs} seeds gave a value: no spread over seeds)"
        return f"{_fmt(values[0])} (a single run: no spread over seeds)"
    said = f"median {_fmt(_median(values))}, range {_fmt(min(values))} to {_fmt(max(values))} over {len(values)} seeds"
    return said + (f" of {runs} (the others gave no value)" if len(values) < runs else "")


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


def result_records(result) -> list[dict]:
    """A run's records: its ``records()``."""
    return result.records()


def result_sweep_rows(result) -> list[dict]:
    """A run's sweep rows: its ``sweep_rows()``."""
    return result.sweep_rows()


def runs_meta(runs: list, plan: SeedPlan) -> dict:
    """The first run's meta, with every seed's timings."""
    first = runs[0].meta()
    timings = {str(run.seed): r.meta().get("timings_s") for run, r in zip(plan.runs(), runs, strict=True)}
    return first | {"timings_s": timings}


def run_and_spread(
    layout: Layout, run: Callable, plan: SeedPlan, data, asked: Mapping[str, Any] | None = None
) -> SeedsResult:
    """``run(seed=, weights_seed=, data_seed=)`` for each seed of ``plan``, set side by side as
    ``layout`` says; ``data`` is the data source the runs read, ``asked`` what else decides them
    (:func:`over_seeds`)."""
    runs = over_seeds(run, plan, asked=asked)
    notes = data_seed_notes(plan, data, runs[0].info.modality)
    return spread(layout, plan, runs, meta=runs_meta(runs, plan), notes=notes)
