"""A memorize run as one frozen object: :class:`MemorizeRequest`, checked where it is made, then
passed down; :func:`resolve_grid`, the grid it asks for (a preset merged with explicit values); and
:func:`grid_axes`, which reads several values given to ``heads``, ``n`` or ``head_dim`` as the
parameter varied (what ``mhaaudit memorize --heads 1,2,4`` means).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

import torch

from .. import validate
from ..defaults import (
    DEFAULT_CLASSES,
    DEFAULT_DEVICE,
    DEFAULT_SEED,
    DEFAULT_TOLERANCE,
    MEMORIZE_PRESETS,
    MEMORIZE_VARY,
)
from ..errors import InputError, Param
from ..plot import check_plot_path
from ..runtime import MAX_SEED, checked_seed, resolve_device
from ..staging import check_writable
from .grouping import default_budget
from .recipe import Recipe
from .schedule import MAX_STEPS, planned_schedule

__all__ = ["PRESETS", "VARY", "MemorizeRequest", "grid_axes", "resolve_grid"]

VARY = MEMORIZE_VARY
_VARY_ALIASES = {"h": "heads", "head_dim": "head-dim", "dh": "head-dim"}

#: The paper's grids (Figure 2) and the small ``cpu`` grid: see :data:`mhaaudit.defaults.MEMORIZE_PRESETS`.
PRESETS: dict[str, dict] = MEMORIZE_PRESETS

_DEFAULTS = dict(n=32, heads=4, head_dim=64)
# The fields that say what the grid is (the preset's keys among them).
GRID_FIELDS = ("vary", "values", "n", "heads", "head_dim", "sizes", "epochs", "max_steps")
# The grid's parameters: (name, the --vary value naming it).
_AXES = (("heads", "heads"), ("n", "n"), ("head_dim", "head-dim"))


@dataclass(frozen=True)
class MemorizeRequest(Recipe):
    """What a memorize run trains (the grid: values of the varied parameter x sizes T x seeds),
    how (the fields of :class:`~.recipe.Recipe`, of Appendix A), where, and what it writes.

    Checked and normalised on construction (InputError naming the parameter), in this order: the
    grid (:func:`resolve_grid`), the recipe (:class:`~.recipe.Recipe`), ``seed``/``seeds``, the
    device, ``memory_budget`` (GiB), ``max_group`` and ``max_minutes``, then the ``out`` and ``plot`` paths.
    :func:`~.grid.run_memorize_grid` describes each field.
    """

    vary: str | None = None
    values: str | Sequence[int] | None = None
    n: int | None = None
    heads: int | None = None
    head_dim: int | None = None
    sizes: str | Sequence[int] | None = None
    preset: str | None = None
    seed: int = DEFAULT_SEED
    device: str | torch.device = DEFAULT_DEVICE
    saturation: bool = False
    out: str | os.PathLike | None = None
    plot: str | os.PathLike | None = None
    progress: bool = False
    seeds: str | Sequence[int] | None = None
    memory_budget: float | None = None
    max_group: int | None = None
    max_minutes: float | None = None

    def __post_init__(self) -> None:
        grid = resolve_grid(self)
        _recipe(self, grid)
        super().__post_init__()  # the recipe's own fields
        _task_fields(self)
        _steps_fit(grid, _recipe(self, grid))
        seeds = _seeds(self.seed, self.seeds)
        checked = _own_grid_fields(self)
        checked |= dict(
            seed=seeds[0] if self.seeds is None else 0,
            seeds=tuple(seeds) if self.seeds is not None else None,
            device=resolve_device(self.device),
            memory_budget=_gib(self.memory_budget),
            max_group=validate.integer(Param("max_group"), self.max_group) if self.max_group is not None else None,
            max_minutes=_minutes(self.max_minutes, self.out),
            out=check_writable(self.out) if self.out is not None else None,
            plot=check_plot_path(self.plot) if self.plot is not None else None,
            saturation=validate.flag(
                Param("saturation"), bool(self.saturation) if self.saturation is None else self.saturation
            ),
            progress=validate.flag(Param("progress"), False if self.progress is None else self.progress),
        )
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @property
    def grid(self) -> dict:
        """The grid asked for: see :func:`resolve_grid`."""
        return resolve_grid(self)

    @property
    def recipe(self) -> Recipe:
        """How every point is trained (the preset's ``epochs``/``max_steps`` where none are given)."""
        return _recipe(self, self.grid)

    @property
    def seed_list(self) -> list[int]:
        """The seeds every point is trained for: ``seeds``, or ``seed`` alone."""
        return [self.seed] if self.seeds is None else [int(s) for s in self.seeds]  # a tuple of ints once made

    def budget(self) -> int:
        """Bytes a group may use: ``memory_budget`` GiB, or what the device has free (see :mod:`.grouping`)."""
        if self.memory_budget is None:
            return default_budget(resolve_device(self.device))
        return int(self.memory_budget * (1 << 30))


def resolve_grid(request: MemorizeRequest) -> dict:
    """The grid ``request`` asks for: its preset merged with its explicit values (explicit wins), checked.
    ``epochs`` given without ``max_steps`` replaces the preset's ``max_steps`` (``cpu``'s 6000) too: the
    training length asked for is the one trained.

    A dict: ``vary``, ``values``, ``sizes``, ``preset``, ``fixed`` (``n``, ``heads``, ``head_dim``),
    ``epochs`` and ``max_steps``.

    Raises:
        InputError: an unknown preset or varied parameter, values without a varied parameter or
            the reverse, no sizes, or a value that is not a whole number of at least 1.
    """
    base: dict = {}
    preset = request.preset
    if preset is not None:
        preset = validate.choice(Param("preset"), preset, tuple(PRESETS))
        base = dict(PRESETS[preset])
    explicit = {name: getattr(request, name) for name in GRID_FIELDS}
    if request.vary is not None and request.values is None and base and _vary(request.vary) != base.get("vary"):
        base.pop("values", None)  # the preset's values belong to another parameter
    if request.epochs is not None and request.max_steps is None:
        base.pop("max_steps", None)  # the epochs asked for, not the preset's cap on its own training length
    merged = {**base, **{k: v for k, v in explicit.items() if v is not None}}

    vary_v = _vary(merged["vary"]) if merged.get("vary") is not None else None
    vals = validate.int_list(Param("values"), merged.get("values"))
    if merged.get("values") is not None and not vals:  # given, but blank: not the values left out
        shown = f" {merged['values']!r}" if isinstance(merged["values"], str) else ""
        raise InputError(Param("values") + f"{shown} names no values (use e.g. " + Param("values") + " 1,2,4,8)")
    if vary_v is not None and not vals:
        raise InputError(
            Param("vary") + f" {vary_v} needs " + Param("values") + " (e.g. " + Param("values") + " 1,2,4,8)"
        )
    if vary_v is None and merged.get("values") is not None:
        raise InputError(Param("values") + " needs " + Param("vary") + " (heads, n or head-dim)")
    sizes_v = validate.int_list(Param("sizes"), merged.get("sizes"))
    if not sizes_v:
        raise InputError(
            "the grid is empty: give "
            + Param("sizes")
            + " (e.g. "
            + Param("sizes")
            + " 500,1000) or a "
            + Param("preset")
        )
    fixed = {
        name: validate.integer(Param(name), merged.get(name, _DEFAULTS[name])) for name in ("n", "heads", "head_dim")
    }
    ep, ms = merged.get("epochs"), merged.get("max_steps")
    return dict(
        vary=vary_v,
        values=vals,
        sizes=sizes_v,
        preset=preset,
        fixed=fixed,
        epochs=validate.integer(Param("epochs"), ep) if ep is not None else None,
        max_steps=validate.integer(Param("max_steps"), ms) if ms is not None else None,
    )


def grid_axes(vary: str | None, values: str | None, preset: str | None, given: Mapping[str, str | None]) -> dict:
    """``vary``/``values`` and the fixed ``heads``/``n``/``head_dim`` of a request, from ``given``:
    each of those parameters as one value, a range or a list (``4``, ``1-8``, ``1,2,4,8``).

    A parameter given several values is the one varied (as ``vary=P, values=...``); given to the
    parameter the grid varies (by ``vary`` or the preset), even one value replaces the values. Beside a
    preset, several values vary another parameter than the preset's only where ``vary`` names it: the grid's
    axis never changes in silence. ``vary`` may be an alias (``h``, ``dh``, ``head_dim``).

    Raises:
        InputError: ``vary`` names no parameter, a value is not a whole number of at least 1, two
            parameters would vary, or several values are given to a parameter other than the one ``preset``
            varies without ``vary`` naming it.
    """
    vary = _vary(vary) if vary is not None else None  # an alias (dh, h, head_dim) as the name it stands for
    varied = vary or (PRESETS[preset]["vary"] if preset else None)
    out: dict = {"vary": vary, "values": values, "heads": None, "n": None, "head_dim": None}
    source: str | Param | None = (
        Param("values") if values is not None else None
    )  # what gave the varied parameter's values
    for name, axis in _AXES:
        spec = given.get(name)
        if spec is None:
            continue
        vals = validate.int_ranges(spec, Param(name), what="values", example="4, 1-8 or 1,2,4,8", minimum=1)
        if axis != varied and len(vals) == 1:
            out[name] = vals[0]
            continue
        if vary is None and preset is not None and axis != varied:  # the preset's grid would vary another one
            raise InputError(
                Param(name)
                + f" {spec} gives several values, but "
                + Param("preset")
                + f" {preset} varies {varied}; only one parameter varies: add "
                + Param("vary")
                + f" {axis} to vary {axis} instead, or give "
                + Param(name)
                + " one value"
            )
        if vary is not None and axis != vary:
            raise InputError(
                Param(name)
                + f" {spec} gives several values, but "
                + Param("vary")
                + f" {vary} varies another parameter; "
                "only one parameter varies"
            )
        if source is not None:
            raise InputError(
                Param(name) + f" {spec} and " + source + " both give the values of the varied parameter; "
                "only one parameter varies"
            )
        out.update(vary=axis, values=",".join(map(str, vals)))
        source = Param(name) + f" {spec}"
    return out


def _vary(value) -> str:
    return validate.choice(Param("vary"), value, VARY, aliases=_VARY_ALIASES)


def _recipe(request: MemorizeRequest, grid: dict) -> Recipe:
    """The request's recipe, its ``epochs``/``max_steps`` the grid's (the preset's where it gives none)."""
    own = {f.name: getattr(request, f.name) for f in fields(Recipe)}
    return Recipe(**(own | {"epochs": grid["epochs"], "max_steps": grid["max_steps"]}))


def _task_fields(recipe: Recipe) -> None:
    """Refuse a field of the recipe that its task does not use, given another value than its default (as the
    command line refuses the option): ``classes`` for regression, ``tolerance`` for classification.

    Raises:
        InputError: ``classes`` with the regression task, or ``tolerance`` with classification.
    """
    if recipe.task == "regression" and recipe.classes != DEFAULT_CLASSES:
        raise InputError(
            Param("classes")
            + f" {recipe.classes} has no effect with "
            + Param("task")
            + " regression: the labels are numbers in [0, 1]"
        )
    if recipe.task == "classification" and recipe.tolerance != DEFAULT_TOLERANCE:
        raise InputError(
            Param("tolerance")
            + f" {recipe.tolerance:g} has no effect with "
            + Param("task")
            + " classification: a class is right or wrong"
        )


def _steps_fit(grid: dict, recipe: Recipe) -> None:
    """Refuse a grid whose largest T plans more steps than a record counts (:data:`~.schedule.MAX_STEPS`),
    before any work: the plan is computed, never stored, so nothing else sizes memory by the epochs.

    Raises:
        InputError: ``max_steps`` above :data:`~.schedule.MAX_STEPS`, or ``epochs`` that plan more steps (or, capped
            by ``max_steps``, exceed it themselves).
    """
    if recipe.max_steps is not None and recipe.max_steps > MAX_STEPS:
        raise InputError(Param("max_steps") + f" must be at most {MAX_STEPS} (a record's 64-bit step count)")
    T = max(grid["sizes"])
    spe, _, total = planned_schedule(T, recipe.batch_size, recipe.epochs, recipe.max_steps)
    if total > MAX_STEPS:
        raise InputError(
            Param("epochs")
            + f" {recipe.epochs} plans {total} steps at T = {T}, more than a record counts ({MAX_STEPS}, "
            + "64-bit); the largest "
            + Param("epochs")
            + f" that fits is {MAX_STEPS // spe}"
        )
    if recipe.epochs is not None and recipe.epochs > MAX_STEPS:  # (capped by max_steps, still a record's count)
        raise InputError(Param("epochs") + f" must be at most {MAX_STEPS} (a record's 64-bit count)")


def _own_grid_fields(request: MemorizeRequest) -> dict:
    """The grid fields ``request`` gives itself, normalised (those it leaves to the preset stay None)."""
    out: dict = {"vary": _vary(request.vary) if request.vary is not None else None}
    for name in ("values", "sizes"):
        value = getattr(request, name)
        out[name] = validate.int_list(Param(name), value) if value is not None else None
    for name in ("n", "heads", "head_dim"):
        value = getattr(request, name)
        out[name] = validate.integer(Param(name), value) if value is not None else None
    if request.preset is not None:
        out["preset"] = validate.choice(Param("preset"), request.preset, tuple(PRESETS))
    return out


def _seeds(seed, seeds) -> list[int]:
    seed = checked_seed(0 if seed is None else seed)
    if seeds is None:
        return [seed]
    if seed != 0:
        raise InputError("give either " + Param("seed") + " or " + Param("seeds") + ", not both")
    return validate.int_ranges(
        seeds, Param("seeds"), what="seeds", example="0-5 or 0,1,4", minimum=0, maximum=MAX_SEED, once="seed"
    )


def _minutes(minutes, out) -> float | None:
    """``max_minutes``, checked: a positive number, and only with a results file that keeps the points
    trained in time.

    Raises:
        InputError: when it is not a positive number, or is given without ``out``.
    """
    if minutes is None:
        return None
    number = isinstance(minutes, (int, float)) and not isinstance(minutes, bool)
    if not number or not (minutes > 0 and math.isfinite(minutes)):
        raise InputError(Param("max_minutes") + f" must be a positive number of minutes, got {minutes!r}")
    if out is None:
        raise InputError(
            Param("max_minutes")
            + " stops the grid to be resumed later, which needs a results file: add "
            + Param("out")
        )
    return float(minutes)


def _gib(gib) -> float | None:
    if gib is None:
        return None
    if isinstance(gib, bool) or not isinstance(gib, (int, float)) or not (gib > 0 and math.isfinite(gib)):
        raise InputError(Param("memory_budget") + f" must be a positive number of GiB, got {gib!r}")
    return gib
