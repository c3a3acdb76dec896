"""When a point trains, checks and stops, and which examples each of its steps sees (Appendix A).

``max(500 epochs, 50k steps)`` unless ``epochs`` / ``max_steps`` say otherwise, 5% linear
warm-up then cosine decay to zero. Memorisation is checked at the end of the first epoch after
at least ``check_every`` steps since the last check, and always at the last step; training stops
at the first check that finds every example memorised. Each epoch is a fresh permutation of the
point's examples, drawn from the point's own generator, cut into batches (the last one shorter
when the batch size does not divide T).

Everything here is decided on the host before training, from the point's size and the recipe,
so that points trained together need no host synchronisation to know their schedules.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ..runtime import MAX_INT64

__all__ = ["MAX_STEPS", "BatchOrder", "Plan", "lr_factor", "planned_schedule"]

#: The most steps a point may plan: its record counts them in 64-bit integers (the results file's columns).
MAX_STEPS = MAX_INT64


def planned_schedule(size: int, batch_size: int, epochs: int | None, max_steps: int | None) -> tuple[int, int, int]:
    """(steps per epoch, planned epochs, planned steps) under the paper rule or the overrides."""
    spe = math.ceil(size / batch_size)
    epochs_planned = max(500, math.ceil(50000 / spe)) if epochs is None else epochs
    steps = epochs_planned * spe
    if max_steps is not None:
        steps = min(steps, max_steps)
        epochs_planned = math.ceil(steps / spe)
    return spe, epochs_planned, steps


def lr_factor(step: int, total: int) -> float:
    """5% linear warm-up, then cosine decay to zero (``step`` counts from 0)."""
    warm = max(1, round(0.05 * total))
    if step < warm:
        return (step + 1) / warm
    if total <= warm:
        return 1.0
    progress = (step - warm) / (total - warm)
    return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


@dataclass(frozen=True)
class Plan:
    """A point's schedule: steps per epoch, planned steps, and its checks.

    The checks are computed, not stored: a step is a check when it ends every ``every``-th epoch
    before the last, or is the last step (``total``, after ``epochs`` epochs, the last one cut short
    when ``max_steps`` says so). A plan costs the same memory for any number of epochs.
    """

    steps_per_epoch: int
    total: int
    epochs: int  # epochs run by the last step
    every: int  # epochs between checks

    @classmethod
    def of(cls, size: int, batch_size: int, epochs: int | None, max_steps: int | None, check_every: int) -> Plan:
        """The plan of a point of ``size`` examples (see :func:`planned_schedule`): its steps and checks."""
        spe, _, total = planned_schedule(size, batch_size, epochs, max_steps)
        last = math.ceil(total / spe)  # the last epoch may be cut short by max_steps
        every = math.ceil(check_every / spe)  # epochs between checks
        return cls(steps_per_epoch=spe, total=total, epochs=last, every=every)

    def epochs_at(self, step: int) -> int | None:
        """The epochs run when ``step`` steps are done if that is a check, else None."""
        if step == self.total:
            return self.epochs
        epoch, rest = divmod(step, self.steps_per_epoch)
        if rest or not 0 < epoch < self.epochs or epoch % self.every:
            return None
        return epoch

    def is_check(self, step: int) -> bool:
        """Whether the memorised fraction is checked when ``step`` steps are done."""
        return self.epochs_at(step) is not None

    def checks(self) -> Iterator[tuple[int, int]]:
        """Every check in order, as (step, epochs run), computed one after another."""
        for epoch in range(self.every, self.epochs, self.every):
            yield epoch * self.steps_per_epoch, epoch
        yield self.total, self.epochs


class BatchOrder:
    """A point's batches, step after step: rows of example indices (-1 pads a short last batch)."""

    def __init__(self, generator: torch.Generator, size: int, batch_size: int):
        self.gen, self.size, self.batch = generator, size, batch_size
        self.spe = math.ceil(size / batch_size)
        self._rows = torch.empty(0, batch_size, dtype=torch.int64)
        self._first = 0  # the step of self._rows[0]

    def take(self, start: int, stop: int) -> torch.Tensor:
        """The batches of steps ``start`` to ``stop - 1`` (int64, (stop - start, batch)); calls must not go back."""
        self._rows = self._rows[start - self._first :]
        self._first = start
        need = stop - start - self._rows.shape[0]
        if need > 0:
            epochs = math.ceil(need / self.spe)
            fresh = torch.full((epochs, self.spe * self.batch), -1, dtype=torch.int64)
            for e in range(epochs):
                fresh[e, : self.size] = torch.randperm(self.size, generator=self.gen)
            self._rows = torch.cat([self._rows, fresh.view(epochs * self.spe, self.batch)])
        return self._rows[: stop - start]
