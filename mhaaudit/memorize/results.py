"""The records of a memorisation grid: one run per trained point, the linear fits (:mod:`.fits`), the grid.

A run's memorised fraction is measured on its training set (exact for the trained model).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

from .._version import __version__
from ..documents import METADATA_KEY, decode_fields, decode_result, null_as_nonfinite, read_json_document
from ..errors import InputError, Param
from ..files import read_parquet
from ..provenance import stamp
from ..render_memorize import memorize_report
from ..tables import StoredResult
from .data import DIM
from .fits import FitGap, LinearFit, fit_line, heads_fit_gaps, heads_fits
from .recipe import RECIPE_FIELDS, Recipe
from .saturation import SaturationSummary, saturation_contradiction
from .schedule import Plan

#: How a point's generator is seeded (part of every stored configuration).
SEED_RULE = "derive_seed(seed, 'memorize')"

__all__ = [
    "FitGap",
    "GridSettings",
    "GroupRecord",
    "LinearFit",
    "MemorizeGrid",
    "MemorizeRun",
    "SeedSummary",
    "fit_line",
    "grid_notes",
    "heads_fit_gaps",
    "heads_fits",
    "seed_summaries",
]


@dataclass(frozen=True)
class MemorizeRun:
    """One trained point of a grid.

    ``memorized`` is the fraction of training examples memorised (training accuracy, or the
    fraction within ``tolerance`` for regression), ``memorized_count`` the number.
    ``seconds`` is the point's share of its group's training time: the points of a group train
    in the same steps, padded to one shape, so the wall time of each stretch of steps is divided
    equally among the points still training in it; the shares of a group add up to the group's
    training time (``GroupRecord.seconds`` is its whole wall time, setup included).
    ``recipe`` is how the point was trained; :meth:`to_dict` gives its fields flat, in its place.
    ``diverged``: the training diverged (its loss over the training set is not finite, NaN or
    infinite, as with ``lr=1e300``); an example whose outputs are not finite is never counted memorised.
    """

    heads: int
    n: int
    head_dim: int
    size: int
    recipe: Recipe
    seed: int
    memorized: float
    memorized_count: int
    epochs_run: int
    steps_run: int
    planned_steps: int
    final_loss: float
    seconds: float
    stopped_early: bool
    device: str
    diverged: bool = False
    saturation: SaturationSummary | None = None
    reused: bool = False

    def config(self) -> dict:
        """The run's full configuration, as the results file keys it (see :func:`config_dict`): its
        point (as :class:`~.training.Point` gives it), its recipe and its device."""
        point = {k: getattr(self, k) for k in ("heads", "n", "head_dim", "size", "seed")}
        return config_dict(**point, **self.recipe.as_dict(), device=self.device)

    def to_dict(self) -> dict:
        """The run as plain JSON types, flat (:func:`flat_fields`), its saturation summary (last) a dict or None."""
        d = flat_fields(self)
        sat = d.pop("saturation")
        d["saturation"] = sat.to_dict() if sat is not None else None
        return d

    @classmethod
    def from_document(cls, data) -> MemorizeRun:
        """The run :meth:`to_dict` wrote (a row of ``--format parquet`` too).

        Raises:
            ValueError: ``data`` is not such a run (see :func:`read_flat`).
        """
        return read_flat(cls, data, "runs[]")


@dataclass(frozen=True)
class SeedSummary:
    """The memorised fraction of one setting and size over several seeds: mean and spread.

    ``std`` is the sample standard deviation (None with one seed); ``low``/``high`` the extremes.
    """

    heads: int
    n: int
    head_dim: int
    size: int
    seeds: int
    mean: float
    std: float | None
    low: float
    high: float
    mean_count: float

    def to_dict(self) -> dict:
        """The summary as plain JSON types."""
        return asdict(self)


@dataclass(frozen=True)
class GroupRecord:
    """How a grid was grouped: the runs (indices into ``MemorizeGrid.runs``) trained together.

    ``heads``, ``head_dim``, ``n`` and ``size`` are the padded shape of the stack; ``bytes`` its
    estimated memory (see :mod:`.grouping`); ``seconds`` its wall time.
    """

    runs: tuple[int, ...]
    heads: int
    head_dim: int
    n: int
    size: int
    bytes: int
    seconds: float

    def to_dict(self) -> dict:
        """The group's record as plain JSON types."""
        return asdict(self) | {"runs": list(self.runs)}


@dataclass(frozen=True)
class GridSettings:
    """What every point of a grid shares, as the document's ``settings`` gives it (in that order):
    the model's shape held fixed (``n``, ``heads``, ``head_dim``; the varied one is None, each run
    giving its own), the training recipe (:class:`~mhaaudit.memorize.recipe.Recipe`, its fields flat
    in the document), the seeds, the device and the width ``d``."""

    n: int | None
    heads: int | None
    head_dim: int | None
    recipe: Recipe
    seed: int
    seeds: tuple[int, ...]
    device: str
    d: int

    def to_dict(self) -> dict:
        """The settings as the document gives them: flat (:func:`flat_fields`), the seeds a list."""
        return flat_fields(self) | {"seeds": list(self.seeds)}

    @classmethod
    def from_document(cls, data) -> GridSettings:
        """The settings :meth:`to_dict` wrote.

        Raises:
            ValueError: ``data`` is not such settings (see :func:`read_flat`).
        """
        return read_flat(cls, data, "settings")


@dataclass(frozen=True, repr=False)
class MemorizeGrid(StoredResult):
    """Every point of a grid, in grid order (seeds innermost), the linear fits when H varies,
    the mean and spread over seeds, and how the points were grouped for training.
    ``to_arrow()`` / ``to_pandas()`` give the runs as ``--format parquet`` prints them, and a
    notebook shows the grid as ``mhaaudit memorize`` prints it. ``MemorizeGrid.from_json`` /
    ``from_parquet`` read it back from ``--format json`` / ``--format parquet`` outputs.

    ``fits`` are the lines fitted against H, ``fit_gaps`` the sizes (and the pool) with none, and why
    (:mod:`.fits`). ``groups`` covers the runs trained now (not those read back from ``out``);
    ``memory_budget`` is the bytes the groups were planned within. ``notes``: what the table says
    beside the runs (a run that diverged, see :func:`grid_notes`; a fit whose counts are all equal, with no
    R^2: :func:`~.fits.flat_fit_notes`).
    """

    vary: str | None
    values: tuple[int, ...]
    sizes: tuple[int, ...]
    preset: str | None
    runs: tuple[MemorizeRun, ...]
    settings: GridSettings  # what every point shares
    fits: tuple[LinearFit, ...] = ()
    fit_gaps: tuple[FitGap, ...] = ()
    reused: int = 0
    out: str | None = None
    plot: str | None = None
    seeds: tuple[int, ...] = (0,)
    summary: tuple[SeedSummary, ...] = ()
    groups: tuple[GroupRecord, ...] = ()
    memory_budget: int | None = None
    notes: tuple[str, ...] = ()

    COMMAND: ClassVar[str] = "memorize"

    @classmethod
    def from_json(cls, source) -> MemorizeGrid:
        """Read back the grid that ``memorize --format json`` printed.

        Args:
            source (dict | str | os.PathLike): the document (the grid's :meth:`to_dict`), its JSON text or path.

        Returns:
            The :class:`MemorizeGrid`.

        Raises:
            InputError: ``source`` is not such a document, or a run in it says what no training writes (a count
                outside 0..T, a fraction other than the count over T, a loss not finite unless diverged: the checks
                of the results file ``out``, :func:`run_contradiction`).
        """

        doc = source if isinstance(source, dict) else read_json_document(source)[0]
        if not isinstance(doc, dict) or not str(doc.get("tool", "")).startswith("mhaaudit"):
            raise InputError("the JSON document is not a memorize grid (no tool stamp)")
        with null_as_nonfinite():  # printed as strict JSON: a non-finite number (a fit's r2, a loss) is null
            return _decoded(cls, {k: v for k, v in doc.items() if k != "tool"}, "the JSON document")

    @classmethod
    def from_parquet(cls, path) -> MemorizeGrid:
        """Read back the grid that ``memorize --format parquet`` printed.

        Args:
            path (str | os.PathLike): the parquet file: the runs are its rows, the rest its metadata.

        Returns:
            The :class:`MemorizeGrid`.

        Raises:
            InputError: the file is not such a parquet file, or a run in it says what no training writes (as
                :meth:`from_json`).
        """

        import pyarrow as pa

        where = os.fspath(path)
        try:  # read whole, as Python values: what its footer declares, decoded, must fit first
            table = read_parquet(where, InputError, where, python=True)
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"{where}: not a readable parquet file ({exc})") from exc
        raw = (table.schema.metadata or {}).get(METADATA_KEY)
        meta = json.loads(raw) if raw else {}
        if meta.get("command") != cls.COMMAND:
            raise InputError(
                f"{where}: holds the results of {meta.get('command')!r}, not of 'memorize' "
                "(the "
                + Param("out")
                + " file of memorize is its resume file: read it with "
                + Param("out")
                + " again)"
            )
        data = {k: meta[k] for k in cls.__dataclass_fields__ if k in meta and k != "runs"}
        # every file has every column of memorize's schema: those of the resume file are null here
        fields = {*MemorizeRun.__dataclass_fields__, *RECIPE_FIELDS}  # (the recipe's given flat)
        data["runs"] = [{k: v for k, v in r.items() if k in fields or v is not None} for r in table.to_pylist()]
        return _decoded(cls, data, where)

    def meta(self) -> dict:
        """The provenance stamp of the grid.

        Returns:
            The ``meta`` of its parquet output, as a dict.
        """
        doc = self.to_dict()
        return stamp(
            command="memorize",
            seed=self.settings.seed,
            device=self.settings.device,
            **{k: v for k, v in doc.items() if k not in ("tool", "runs")},
        )

    def table_records(self) -> list[dict]:
        """The rows of the table and of ``--format parquet``: one per run."""
        return [r.to_dict() for r in self.runs]

    def table_meta(self) -> dict:
        """The metadata of ``--format parquet``: :meth:`meta`."""
        return self.meta()

    REPORT = memorize_report

    def summary_line(self) -> str:
        """The grid in one line: its points, values, sizes and seeds."""
        s = f"{len(self.runs)} points"
        if self.vary:
            s += f", {self.vary} in {','.join(map(str, self.values))}"
        s += f", T in {','.join(map(str, self.sizes))}, seeds {','.join(map(str, self.seeds))}"
        if self.runs:
            s += f": memorised {min(r.memorized for r in self.runs):.3f} to {max(r.memorized for r in self.runs):.3f}"
        return s + (f" ({self.reused} read from {self.out})" if self.reused else "")

    def to_dict(self) -> dict:
        """The document ``memorize --format json`` prints."""
        return {
            "tool": f"mhaaudit {__version__}",
            "vary": self.vary,
            "values": list(self.values),
            "sizes": list(self.sizes),
            "preset": self.preset,
            "settings": self.settings.to_dict(),
            "runs": [r.to_dict() for r in self.runs],
            "fits": [f.to_dict() for f in self.fits],
            "fit_gaps": [g.to_dict() for g in self.fit_gaps],
            "reused": self.reused,
            "out": self.out,
            "plot": self.plot,
            "seeds": list(self.seeds),
            "summary": [m.to_dict() for m in self.summary],
            "groups": [g.to_dict() for g in self.groups],
            "memory_budget": self.memory_budget,
            "notes": list(self.notes),
        }


def _decoded(cls, data: dict, where: str):
    """The grid ``data`` gives, each run held to what training writes, as the results file's rows are
    (:func:`run_contradiction`).

    Raises:
        InputError: ``data`` is not such a grid, or a run says what no training writes.
    """
    try:
        grid = decode_result(cls, data)
    except (TypeError, ValueError, KeyError) as exc:
        raise InputError(f"{where}: its {cls.__name__} cannot be read back: {exc}") from exc
    for run in grid.runs:
        wrong = run_contradiction(run)
        if wrong is not None:
            raise InputError(
                f"{where}: not a grid as memorize writes it: its run of H = {run.heads}, n = {run.n}, "
                f"d_h = {run.head_dim}, T = {run.size}, seed {run.seed} says {wrong}"
            )
    return grid


# --------------------------------------------------------------------------- the recipe, flat


def flat_names(cls) -> tuple[str, ...]:
    """The fields of a record holding a ``recipe`` (a run, the settings) as its outputs give them:
    the recipe's fields (:data:`~.recipe.RECIPE_FIELDS`) in the recipe's place."""
    return tuple(name for f in fields(cls) for name in (RECIPE_FIELDS if f.name == "recipe" else (f.name,)))


def flat_fields(record) -> dict:
    """The fields of ``record`` (a run, the settings) by name, flat (:func:`flat_names`)."""
    return {k: getattr(record.recipe if k in RECIPE_FIELDS else record, k) for k in flat_names(type(record))}


def read_flat(cls, data, where: str):
    """The record ``cls`` from its flat fields (:func:`flat_fields`, as JSON data), each read
    from its type hint, the recipe's gathered into its ``recipe``.

    Raises:
        ValueError: ``data`` is not an object, lacks a field of the recipe or a required one of
            ``cls``, has one ``cls`` does not, or a value that is not of its field's type.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object for {cls.__name__}, got {type(data).__name__}")
    missing = [k for k in RECIPE_FIELDS if k not in data]
    if missing:
        raise ValueError(f"{where}: {cls.__name__} lacks {', '.join(missing)}")
    if "recipe" in data:
        raise ValueError(f"{where}: {cls.__name__} has no field recipe (its fields are given flat)")
    nested = {k: v for k, v in data.items() if k not in RECIPE_FIELDS} | {"recipe": {k: data[k] for k in RECIPE_FIELDS}}
    return decode_fields(cls, nested, where)


# --------------------------------------------------------------------------- configuration keys


def config_dict(**kw) -> dict:
    """A point's full configuration, the key under which the results file stores it.

    The device type (not its index) belongs to the config: the same seed gives other numbers
    on another kind of device. So does the seed rule: rows written before points were seeded
    through ``derive_seed(seed, "memorize")`` lack ``seed_rule`` and are recomputed.
    """
    dev = str(kw.pop("device"))
    kw["device_type"] = dev.split(":")[0].split(" ")[0]
    kw["seed_rule"] = SEED_RULE
    kw["d"] = DIM
    kw["tolerance"] = float(kw["tolerance"])
    kw["lr"] = float(kw["lr"])
    return kw


def config_key(cfg: dict) -> str:
    return json.dumps(cfg, sort_keys=True)


# --------------------------------------------------------------------------- what a run read back says


def run_contradiction(run: MemorizeRun) -> str | None:
    """What a run read back (from a results file, a grid's JSON or parquet output) says that no training writes,
    in words, or None.

    Training writes a point's record at a check of its plan (:class:`~.schedule.Plan`, which the run's recipe and
    T decide): its shape and T are at least 1; its count is within 0..T and its fraction is the count over T;
    ``planned_steps`` is its plan's; ``steps_run`` is a check of that plan and ``epochs_run`` the epochs run by
    then; it stopped before the planned steps (``stopped_early``) only with every example memorised; its time is
    finite and not negative; its final loss (a mean cross-entropy or squared error) is not negative, and not
    finite exactly when ``diverged``; its saturation, when it has one, is a count of its T examples over 0..H
    saturated heads (:func:`~.saturation.saturation_contradiction`).
    """
    for name in ("heads", "n", "head_dim", "size"):
        if getattr(run, name) < 1:
            return f"{name} = {getattr(run, name)}, below 1"
    if not 0 <= run.memorized_count <= run.size:
        return f"memorized_count = {run.memorized_count} of T = {run.size} examples"
    if not (math.isfinite(run.memorized) and run.memorized == run.memorized_count / run.size):
        return f"memorized = {run.memorized!r}, not its count {run.memorized_count} over T = {run.size}"
    for name in ("epochs_run", "steps_run", "planned_steps"):
        if getattr(run, name) < 0:
            return f"{name} = {getattr(run, name)}"
    if not (math.isfinite(run.seconds) and run.seconds >= 0):
        return f"seconds = {run.seconds!r}"
    r = run.recipe
    plan = Plan.of(run.size, r.batch_size, r.epochs, r.max_steps, r.check_every)
    if run.planned_steps != plan.total:
        return f"planned_steps = {run.planned_steps}, where its configuration plans {plan.total}"
    if run.steps_run > plan.total:
        return f"steps_run = {run.steps_run}, above its {plan.total} planned steps"
    epochs = plan.epochs_at(run.steps_run)
    if epochs is None:
        return (
            f"steps_run = {run.steps_run}, at no check of its plan (every {plan.every} epochs of "
            f"{plan.steps_per_epoch} steps, and at step {plan.total})"
        )
    if run.epochs_run != epochs:
        return f"epochs_run = {run.epochs_run}, where {run.steps_run} steps of its plan are {epochs} epochs"
    if run.stopped_early != (run.steps_run < plan.total):
        return f"stopped_early = {run.stopped_early} at step {run.steps_run} of {plan.total} planned"
    if run.stopped_early and run.memorized_count != run.size:
        return f"it stopped early with {run.memorized_count} of {run.size} examples memorised, not all"
    if run.final_loss < 0:
        return f"final_loss = {run.final_loss!r}, below 0"
    if run.diverged != (not math.isfinite(run.final_loss)):
        return f"diverged = {run.diverged} with final_loss = {run.final_loss!r}"
    s = run.saturation
    wrong = saturation_contradiction(s, run.heads, run.size) if s is not None else None
    if s is not None and wrong is None and (s.heads, s.examples) != (run.heads, run.size):
        return f"a saturation summary of H = {s.heads} heads over {s.examples} examples, not its H and T"
    return wrong


def grid_notes(runs: Sequence[MemorizeRun], fitted: bool = False) -> tuple[str, ...]:
    """What the report says beside the runs: each run whose training diverged, in words (``fitted``: the
    grid fits a line against H, which leaves such a run out)."""
    left_out = ", and the point is left out of the linear fit" if fitted else ""
    return tuple(
        f"H={r.heads} n={r.n} d_h={r.head_dim} T={r.size} seed {r.seed}: the training diverged (final loss "
        f"{r.final_loss}, not finite); no example with non-finite outputs counts as memorised{left_out}; "
        "a smaller learning rate may train it"
        for r in runs
        if r.diverged
    )


def seed_summaries(runs: Sequence[MemorizeRun]) -> tuple[SeedSummary, ...]:
    """Mean and spread of the memorised fraction over the seeds of each (setting, size), in order."""
    by: dict[tuple, list[MemorizeRun]] = {}
    for r in runs:
        by.setdefault((r.heads, r.n, r.head_dim, r.size), []).append(r)
    out = []
    for (h, n, e, T), rs in by.items():
        fr = [r.memorized for r in rs]
        mean = sum(fr) / len(fr)
        std = math.sqrt(sum((f - mean) ** 2 for f in fr) / (len(fr) - 1)) if len(fr) > 1 else None
        out.append(
            SeedSummary(
                heads=h,
                n=n,
                head_dim=e,
                size=T,
                seeds=len(rs),
                mean=mean,
                std=std,
                low=min(fr),
                high=max(fr),
                mean_count=sum(r.memorized_count for r in rs) / len(rs),
            )
        )
    return tuple(out)
