"""The plain training loop, one point at a time: the definition the stacked training is held to.

One :class:`~.model.MemorizeModel`, ``torch.optim.Adam``, one batch after another, the data
evaluated with the model's own forward pass at each check: the procedure of Appendix A written
the obvious way (and the way this package trained before points were stacked). It is not used by
:func:`~.grid.run_memorize_grid`; the tests compare the stacked training with it and
``benchmarks/bench_memorize.py`` times it as the baseline.
"""

from __future__ import annotations

import math

import torch

from .data import DIM, make_dataset, point_generator
from .model import MemorizeModel
from .schedule import Plan, lr_factor
from .training import example_losses, memorised

__all__ = ["train_plain"]


def train_plain(point, recipe, device: torch.device) -> dict:
    """Train ``point`` (a :class:`~.training.Point`) alone; its record's training fields."""
    gen = point_generator(point.seed)
    q, ctx, y = make_dataset(
        size=point.size, n=point.n, task=recipe.task, context=recipe.context, classes=recipe.classes, generator=gen
    )
    model = MemorizeModel(
        d=DIM, n=point.n, heads=point.heads, head_dim=point.head_dim, out_dim=recipe.out_dim, generator=gen
    ).to(device)
    q, ctx, y = q.to(device), ctx.to(device), y.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    plan = Plan.of(point.size, recipe.batch_size, recipe.epochs, recipe.max_steps, recipe.check_every)
    step, record = 0, {}
    while step < plan.total:
        perm = torch.randperm(point.size, generator=gen).to(device)
        for s in range(0, point.size, recipe.batch_size):
            if step >= plan.total:
                break
            idx = perm[s : s + recipe.batch_size]
            for g in opt.param_groups:
                g["lr"] = recipe.lr * lr_factor(step, plan.total)
            loss = example_losses(recipe, model(q[idx], ctx if ctx.ndim == 2 else ctx[idx]), y[idx]).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
        epochs = plan.epochs_at(step)
        if epochs is not None:
            with torch.no_grad():
                out = model(q, ctx)
            count = int(memorised(recipe, out, y).sum())
            record = dict(
                memorized_count=count,
                final_loss=float(example_losses(recipe, out, y).sum()) / point.size,
                steps_run=step,
                epochs_run=epochs,
                stopped_early=count == point.size and step < plan.total,
            )
            record["diverged"] = not math.isfinite(record["final_loss"])
            if count == point.size:
                break
    return record
