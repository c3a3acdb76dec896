"""Training one point of a memorisation grid (Appendix A) and measuring what it memorised.

Adam, learning rate 1e-3, batch 256, ``max(500 epochs, 50k steps)`` unless ``epochs`` /
``max_steps`` say otherwise, 5% linear warm-up then cosine decay to zero. Memorisation is the
training accuracy (classification) or the fraction of examples with ``|prediction - label| <
tolerance`` (regression), measured exactly on the whole training set. Training stops early once
every example is memorised (checked every ``check_every`` steps, at the end of an epoch).

Seeds: a point's one ``torch.Generator`` (on the CPU) is seeded with
``derive_seed(seed, "memorize")`` (:func:`mhaaudit.settings.derive_seed`) and draws the data, the
initial weights and the batch order, in that order; the same seed gives the same point whatever
grid it is trained in.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from .. import validate
from ..errors import InputError
from ..settings import derive_seed, device_name, resolve_device
from .data import CONTEXTS, DIM, TASKS, make_dataset
from .model import MemorizeModel
from .results import MemorizeRun
from .saturation import saturation_summary

__all__ = ["Point", "Recipe", "lr_factor", "planned_schedule", "train_memorize", "train_point"]


def _positive(name: str, value) -> float:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and math.isfinite(value)):
        raise InputError(f"{name} must be a positive number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Recipe:
    """How every point of a grid is trained and judged (Appendix A); build it with :meth:`resolve`."""

    task: str = "classification"
    context: str = "shared"
    classes: int = 100
    tolerance: float = 0.01
    epochs: int | None = None
    max_steps: int | None = None
    lr: float = 1e-3
    batch_size: int = 256
    check_every: int = 200

    @classmethod
    def resolve(cls, *, task="classification", context="shared", classes=100, tolerance=0.01, epochs=None,
                max_steps=None, lr=1e-3, batch_size=256, check_every=200) -> "Recipe":
        """Check every field; errors name the CLI option."""
        return cls(
            task=validate.choice("--task", task, TASKS),
            context=validate.choice("--context", context, CONTEXTS),
            classes=validate.integer("--classes", classes, minimum=2),
            tolerance=_positive("--tolerance", tolerance),
            epochs=validate.integer("--epochs", epochs) if epochs is not None else None,
            max_steps=validate.integer("--max-steps", max_steps) if max_steps is not None else None,
            lr=_positive("--lr", lr),
            batch_size=validate.integer("--batch-size", batch_size),
            check_every=validate.integer("--check-every", check_every),
        )

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def out_dim(self) -> int:
        return self.classes if self.task == "classification" else 1


@dataclass(frozen=True)
class Point:
    """One point of a grid: the model's shape, the training-set size and the user's seed."""

    heads: int
    n: int
    head_dim: int
    size: int
    seed: int = 0

    @classmethod
    def resolve(cls, *, heads, n, head_dim, size, seed=0) -> "Point":
        return cls(
            heads=validate.integer("--heads", heads), n=validate.integer("--n", n),
            head_dim=validate.integer("--head-dim", head_dim), size=validate.integer("--sizes", size),
            seed=validate.integer("--seed", seed, minimum=0),
        )

    @property
    def label(self) -> str:
        return f"H={self.heads} n={self.n} d_h={self.head_dim} T={self.size}"


def planned_schedule(size: int, batch_size: int, epochs: int | None, max_steps: int | None) -> tuple[int, int, int]:
    """(steps per epoch, planned epochs, planned steps) under the paper rule or the overrides."""
    spe = math.ceil(size / batch_size)
    if epochs is None:
        epochs_planned = max(500, math.ceil(50_000 / spe))
    else:
        epochs_planned = epochs
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


def train_memorize(
    *,
    heads: int,
    n: int,
    head_dim: int = 64,
    size: int,
    task: str = "classification",
    context: str = "shared",
    classes: int = 100,
    tolerance: float = 0.01,
    epochs: int | None = None,
    max_steps: int | None = None,
    lr: float = 1e-3,
    batch_size: int = 256,
    check_every: int = 200,
    seed: int = 0,
    device: str | torch.device = "auto",
    saturation: bool = False,
    progress: bool = False,
    cpu_threads: int | None = 1,
) -> MemorizeRun:
    """Train one model on one random data set and measure how much of it is memorised."""
    from ..progress import task as progress_task

    point = Point.resolve(heads=heads, n=n, head_dim=head_dim, size=size, seed=seed)
    recipe = Recipe.resolve(task=task, context=context, classes=classes, tolerance=tolerance, epochs=epochs,
                            max_steps=max_steps, lr=lr, batch_size=batch_size, check_every=check_every)
    dev = resolve_device(device)
    total = planned_schedule(point.size, recipe.batch_size, recipe.epochs, recipe.max_steps)[2]
    with progress_task(point.label, total, progress) as advance:
        return train_point(point, recipe, dev, saturation=saturation, advance=advance, cpu_threads=cpu_threads)


def train_point(point: Point, recipe: Recipe, device: torch.device, *, saturation: bool = False,
                advance: Callable[[int], None] = lambda n=1: None, cpu_threads: int | None = 1) -> MemorizeRun:
    """Train ``point`` under ``recipe`` on ``device``; ``advance(k)`` is called as steps are done."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(derive_seed(point.seed, "memorize"))
    queries, ctx, labels = make_dataset(size=point.size, n=point.n, task=recipe.task, context=recipe.context,
                                        classes=recipe.classes, generator=gen)
    model = MemorizeModel(d=DIM, n=point.n, heads=point.heads, head_dim=point.head_dim, out_dim=recipe.out_dim,
                          generator=gen).to(device)
    data = (queries.to(device), ctx.to(device), labels.to(device))
    # The model is tiny: on the CPU one intra-op thread is as fast as several, and several
    # threads slow down badly when other processes share the cores. Restored afterwards.
    threads_before = torch.get_num_threads()
    if device.type == "cpu" and cpu_threads is not None:
        torch.set_num_threads(cpu_threads)
    try:
        t0 = time.perf_counter()
        outcome = _train(model, data, recipe, device, gen, advance)
        sat = saturation_summary(_attention_all(model, data[0], data[1])) if saturation else None
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - t0
    finally:
        if torch.get_num_threads() != threads_before:
            torch.set_num_threads(threads_before)
    return MemorizeRun(**asdict(point), **recipe.as_dict(), **outcome, seconds=seconds, device=device_name(device),
                       saturation=sat)


def _train(model, data, recipe: Recipe, dev, gen, advance) -> dict:
    queries, ctx, labels = data
    size = queries.shape[0]
    shared = ctx.ndim == 2
    total = planned_schedule(size, recipe.batch_size, recipe.epochs, recipe.max_steps)[2]
    opt = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    classify = recipe.task == "classification"
    step = epoch = since_check = count = 0
    final_loss = float("nan")
    stopped_early = False
    while step < total:
        perm = torch.randperm(size, generator=gen).to(dev)
        for s in range(0, size, recipe.batch_size):
            if step >= total:
                break
            idx = perm[s:s + recipe.batch_size]
            for g in opt.param_groups:
                g["lr"] = recipe.lr * lr_factor(step, total)
            out = model(queries[idx], ctx if shared else ctx[idx])
            yb = labels[idx]
            loss = torch.nn.functional.cross_entropy(out, yb) if classify else torch.nn.functional.mse_loss(out.squeeze(-1), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            since_check += 1
        epoch += 1
        if since_check >= recipe.check_every or step >= total:
            advance(since_check)
            since_check = 0
            count, final_loss = _evaluate(model, queries, ctx, labels, recipe)
            if count == size:
                stopped_early = step < total
                advance(total - step)
                break
    return dict(memorized=count / size, memorized_count=count, epochs_run=epoch, steps_run=step, planned_steps=total,
                final_loss=final_loss, stopped_early=stopped_early)


def _evaluate(model, queries, ctx, labels, recipe: Recipe, chunk=4096):
    shared = ctx.ndim == 2
    correct = 0
    loss_sum = 0.0
    with torch.no_grad():
        for s in range(0, queries.shape[0], chunk):
            out = model(queries[s:s + chunk], ctx if shared else ctx[s:s + chunk])
            yb = labels[s:s + chunk]
            if recipe.task == "classification":
                loss_sum += float(torch.nn.functional.cross_entropy(out, yb, reduction="sum"))
                correct += int((out.argmax(dim=-1) == yb).sum())
            else:
                pred = out.squeeze(-1)
                loss_sum += float(((pred - yb) ** 2).sum())
                correct += int(((pred - yb).abs() < recipe.tolerance).sum())
    return correct, loss_sum / max(queries.shape[0], 1)


def _attention_all(model, queries, ctx, chunk=4096) -> torch.Tensor:
    shared = ctx.ndim == 2
    parts = []
    with torch.no_grad():
        for s in range(0, queries.shape[0], chunk):
            p, _ = model.attention(queries[s:s + chunk], ctx if shared else ctx[s:s + chunk])
            parts.append(p)
    return torch.cat(parts)
