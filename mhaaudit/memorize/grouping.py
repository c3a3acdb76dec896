"""Splitting a grid's points into stacked groups that fit the device (issue #15, item 4).

A group's memory is estimated, not measured: weights, gradients and Adam's moments of every row,
the group's data on the device, what one training step keeps for the backward pass, one
evaluation chunk and the batches of :data:`~.training.CHUNK_STEPS` steps, padded to the group's
largest H, d_h, n and T, plus a quarter for the allocator's slack.

Points are taken in order of their cost and added to the current group while its estimate stays
within the budget and training them together is estimated to take no longer than apart. A step
is estimated to cost a fixed overhead (launching its kernels from Python: about 0.35 ms on a CPU
core, a few hundred microseconds on a GPU) plus its multiply-adds, padding included, at the
device's rate; so on a CPU, where the arithmetic dominates, points of very different sizes train
apart, while on a GPU, where the launches dominate, most of a grid trains in one group.

The default budget is 80% of the GPU memory free when the grid starts, or half of the memory
available on the host for a CPU device.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

from ..errors import InputError, Param
from ..hostmem import available_memory
from .stack import StackShape

if TYPE_CHECKING:
    from .recipe import Recipe

__all__ = ["RATE", "GroupPlan", "default_budget", "device_memory", "group_bytes", "plan_groups", "refuse_too_large"]

#: A step's fixed cost in multiply-adds at the device's rate (about 0.35 ms of a CPU core at
#: 17 G/s; about 0.3 ms of a GPU at 15 T/s): see the module docstring.
STEP_OVERHEAD = {"cpu": 6e6, "cuda": 5e9}
#: Those rates (multiply-adds a second), to estimate how long a group trains.
RATE = {"cpu": 17e9, "cuda": 15e12}
#: The steps whose batches are sent to the device at once (:data:`~.training.CHUNK_STEPS`).
CHUNK_STEPS = 256
_MARGIN = 1.25
_F32 = 4


@dataclass(frozen=True)
class GroupPlan:
    """The points (indices into the list planned) trained together, their padded shape, its
    estimated memory, the examples evaluated at once, and its estimated cost (multiply-adds)."""

    members: tuple[int, ...]
    shape: StackShape
    bytes: int
    eval_chunk: int
    work: float


def default_budget(device: torch.device) -> int:
    """Bytes a grid may use on ``device`` (see the module docstring)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(0.8 * free)
    try:
        return int(0.5 * os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 4 << 30


def _step_floats(s: StackShape, batch: int, shared: bool, train: bool) -> int:
    """Floats one forward pass of ``batch`` examples per point keeps (and, training, its gradients)."""
    H, e, n, d, C = s.heads, s.head_dim, s.n, s.d, s.out_dim
    per_example = d + 5 * H * n + 3 * H + 3 * C
    if not shared:
        per_example += 3 * n * d + H * (e + 2 * d)
    fixed = 3 * H * n * e + 3 * H * d * n + n * d if shared else 0
    floats = s.points * (batch * per_example + fixed)
    return 2 * floats if train else floats


def group_bytes(s: StackShape, *, batch: int, shared: bool, eval_chunk: int, chunk_steps: int) -> int:
    """Estimated peak bytes of training group ``s`` (see the module docstring)."""
    weights = 7 * s.points * s.numel  # rows, stacked rows, their gradients, Adam's two moments
    data = s.points * s.size * (s.d + 2) + s.points * s.n * s.d * (1 if shared else s.size)
    batches = 3 * s.points * chunk_steps * batch * 3  # indices (int64) and weights, twice on a GPU
    floats = (
        weights + data + batches + _step_floats(s, batch, shared, True) + _step_floats(s, eval_chunk, shared, False)
    )
    return int(_MARGIN * _F32 * floats)


def _eval_chunk(s: StackShape, batch: int, shared: bool, budget: int) -> int:
    """Examples per point evaluated at once: up to 4096, within a quarter of the budget."""
    per_example = _step_floats(s, 1, shared, False) * _F32
    fit = int(0.25 * budget // max(per_example, 1))
    return max(min(batch, s.size), min(4096, s.size, fit))


def _work(s: StackShape, batch: int, shared: bool) -> float:
    """Multiply-adds of one training step of every point of ``s`` (padded)."""
    H, e, n, d, C = s.heads, s.head_dim, s.n, s.d, s.out_dim
    per_point = batch * (d * d + H * d * n + H * C) + H * n * d * e * 2
    if not shared:
        per_point += batch * (n * d * d + H * d * e * 2)
    return 3.0 * s.points * per_point


def plan_groups(
    points: Sequence,
    totals: Sequence[int],
    recipe: Recipe,
    device: torch.device,
    budget: int,
    *,
    max_points: int | None = None,
    max_seconds: float | None = None,
) -> list[GroupPlan]:
    """Split ``points`` (objects with heads, head_dim, n, size) into groups within ``budget`` bytes.

    ``totals``: each point's planned steps (points of one group run as long as the longest);
    ``recipe``: how they train (the classes, batch and context size the memory);
    ``max_points`` caps a group's size (1: every point alone); ``max_seconds`` its estimated
    training time (its cost at the device's :data:`RATE`; a point that takes longer alone still
    trains alone). A point larger than the budget trains alone (:func:`refuse_too_large` refuses,
    first, one larger than the device can hold).
    """
    sizing = _sizing(recipe, device, budget)

    def cost(members: list[int]) -> float:
        return sizing.cost([points[i] for i in members], max(totals[i] for i in members))

    most = None if max_seconds is None else max_seconds * RATE.get(device.type, RATE["cuda"])
    groups: list[list[int]] = []
    for i in sorted(range(len(points)), key=lambda i: (cost([i]), points[i].size)):
        joined = groups[-1] + [i] if groups else None
        if (
            joined is not None
            and (max_points is None or len(joined) <= max_points)
            and (most is None or cost(joined) <= most)
            and sizing.plan(joined, [points[k] for k in joined], 0.0).bytes <= budget
            and cost(joined) <= cost(groups[-1]) + cost([i])
        ):
            groups[-1] = joined
        else:
            groups.append([i])
    return [sizing.plan(g, [points[k] for k in g], cost(g)) for g in groups]


@dataclass(frozen=True)
class _Sizing:
    """What sizes a group's memory and cost beside its points: the recipe's output width, batch and
    context, the budget, the steps whose batches are sent at once, and a step's fixed overhead."""

    out_dim: int
    batch: int
    shared: bool
    budget: int
    chunk_steps: int
    overhead: float

    def bytes(self, s: StackShape, batch: int) -> int:
        """The estimated memory of a group of shape ``s`` trained with batches of ``batch``."""
        chunk = _eval_chunk(s, batch, self.shared, self.budget)
        return group_bytes(s, batch=batch, shared=self.shared, eval_chunk=chunk, chunk_steps=self.chunk_steps)

    def cost(self, points: Sequence, steps: int) -> float:
        """Multiply-adds of training ``points`` together for ``steps`` steps (overhead included)."""
        return (self.overhead + _work(StackShape.of(points, self.out_dim), self.batch, self.shared)) * steps

    def plan(self, members: list[int], points: Sequence, work: float) -> GroupPlan:
        s = StackShape.of(points, self.out_dim)
        return GroupPlan(
            members=tuple(members),
            shape=s,
            eval_chunk=_eval_chunk(s, self.batch, self.shared, self.budget),
            work=work,
            bytes=self.bytes(s, self.batch),
        )


# What the user can lower, as StackShape fields or the batch, with the parameter that sets each.
_KNOBS = (
    ("size", "sizes"),
    ("heads", "heads"),
    ("n", "n"),
    ("head_dim", "head_dim"),
    ("out_dim", "classes"),
    ("batch", "batch_size"),
)


def refuse_too_large(
    points: Sequence, recipe: Recipe, device: torch.device, budget: int, ceiling: int, varied: str | None = None
) -> None:
    """Refuse, before any work, a point of ``points`` that needs more than ``ceiling`` bytes (the memory the device
    has) alone when planned within ``budget`` (:func:`plan_groups`), naming the largest value that fits.
    ``varied``: the field (``heads``, ``n`` or ``head_dim``) whose values the grid varies; the refusal names
    ``values`` for it, the parameter that gave them.

    Raises:
        InputError: a point needs more than ``ceiling`` bytes alone.
    """
    sizing = _sizing(recipe, device, budget)
    for p in points:
        alone = StackShape.of([p], sizing.out_dim)
        if sizing.bytes(alone, sizing.batch) > ceiling:
            raise InputError(_too_large(alone, sizing, ceiling, varied))


def _sizing(recipe: Recipe, device: torch.device, budget: int) -> _Sizing:
    """How points of ``recipe`` are sized on ``device`` within ``budget`` bytes."""
    return _Sizing(
        recipe.out_dim,
        recipe.batch_size,
        recipe.context == "shared",
        budget,
        CHUNK_STEPS,
        STEP_OVERHEAD.get(device.type, STEP_OVERHEAD["cuda"]),
    )


def device_memory(device: torch.device) -> int:
    """Bytes the device can hold for a grid: the free GPU memory, or the host memory available."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])

    return available_memory()


def _too_large(s: StackShape, sizing: _Sizing, ceiling: int, varied: str | None = None) -> str:
    """The one line refusing a point that needs more than ``ceiling`` bytes: the largest value of the
    option that needs the least lowering (the others kept) that fits; for the field ``varied``, ``values``
    (``heads`` is one value, and ``vary="heads", values=...`` gave this one)."""

    def fits(field: str, value: int) -> bool:
        t = replace(s, **{field: value}) if field != "batch" else s
        return sizing.bytes(t, value if field == "batch" else sizing.batch) <= ceiling

    batch = sizing.batch
    best = None
    for field, option in _KNOBS:
        current = batch if field == "batch" else getattr(s, field)
        if current <= 1 or not fits(field, 1):
            continue
        lo, hi = 1, current  # fits(lo), not fits(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(field, mid) else (lo, mid)
        if best is None or lo / current > best[2] / best[3]:
            best = (field, option, lo, current)
    need = sizing.bytes(s, batch)
    head = (
        f"a memorize point with H = {s.heads}, n = {s.n}, d_h = {s.head_dim}, T = {s.size} needs about "
        f"{need / 2**30:.3g} GiB, more than the {ceiling / 2**30:.3g} GiB the device has free here"
    )
    if best is None:
        return head + "; lower its sizes"
    field, option, value, current = best
    named = Param("values" if field == varied else option)
    return head + "; the largest " + named + f" that fits is {value} (given: {current})"
