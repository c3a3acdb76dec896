"""Training the points of a grid together, each exactly as if alone (Appendix A, issue #15).

The recipe: Adam, learning rate 1e-3, batch 256, ``max(500 epochs, 50k steps)`` unless
``epochs`` / ``max_steps`` say otherwise, 5% linear warm-up then cosine decay to zero (see
:mod:`.schedule`). Memorisation is the training accuracy (classification) or the fraction of
examples with ``|prediction - label| < tolerance`` (regression), measured exactly on the whole
training set at each check. Training stops early once every example is memorised.

A group of points (different H, n, d_h, T and seeds) is stacked (:mod:`.stack`) and trained in
the same steps, with its data on the device. Each point keeps its own generator, data, initial
weights, batch order, optimiser state (one param group per schedule, one row per point),
learning-rate schedule, checks and stopping rule: the stacking only changes the order of
floating-point sums, so a point's record matches the one it gets trained alone to float
tolerance. The host learns the checks' outcomes at the checks (every ``check_every`` steps or
so), never in between; points that stop leave the stack.

Seeds: a point's one ``torch.Generator`` (on the CPU) is seeded with
``derive_seed(seed, "memorize")`` (:func:`mhaaudit.settings.derive_seed`) and draws the data, the
initial weights and the batch order, in that order; the same seed draws the same point whatever
grid or group it is trained in. Its record is the same, bit for bit, in the same group (a resumed
grid's groups are those of the run it resumes); in another group (or alone) the order of sums
differs, by float rounding at each step, which thousands of steps can amplify into a memorised count
a few examples apart.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

import torch

from .. import imports, validate
from ..defaults import DEFAULT_DEVICE
from ..errors import Param
from ..numerics.threads import intra_op_threads as _intra_op_threads
from ..progress import task as progress_task
from ..runtime import checked_seed, device_name, resolve_device
from .data import DIM, make_dataset, point_generator
from .model import MemorizeModel
from .recipe import Recipe
from .results import MemorizeRun
from .saturation import saturation_summary
from .schedule import BatchOrder, Plan, lr_factor
from .stack import StackedModel, StackShape

__all__ = [
    "Cancelled",
    "Point",
    "Recipe",
    "example_losses",
    "intra_op_threads",
    "memorised",
    "train_group",
    "train_memorize",
]

#: Steps whose batches are drawn and sent to the device at once.
CHUNK_STEPS = 256


@dataclass(frozen=True)
class Point:
    """One point of a grid: the model's shape, the training-set size and the user's seed."""

    heads: int
    n: int
    head_dim: int
    size: int
    seed: int = 0

    @classmethod
    def resolve(cls, *, heads, n, head_dim, size, seed=0) -> Point:
        """A point from values given as the user gave them (``"4"``, 4.0), checked.

        Raises:
            InputError: a value is not a whole number of at least 1 (a seed: 0 to ``MAX_SEED``).
        """
        return cls(
            heads=validate.integer(Param("heads"), heads),
            n=validate.integer(Param("n"), n),
            head_dim=validate.integer(Param("head_dim"), head_dim),
            size=validate.integer(Param("sizes"), size),
            seed=checked_seed(seed),
        )

    @property
    def label(self) -> str:
        """The point in a few words, as the progress bar shows it."""
        return f"H={self.heads} n={self.n} d_h={self.head_dim} T={self.size}"

    def plan(self, recipe: Recipe) -> Plan:
        """The point's steps and checks under ``recipe``."""
        return Plan.of(self.size, recipe.batch_size, recipe.epochs, recipe.max_steps, recipe.check_every)


def train_memorize(
    point: Point,
    recipe: Recipe | None = None,
    *,
    device: str | torch.device = DEFAULT_DEVICE,
    saturation: bool = False,
    progress: bool = False,
    cpu_threads: int | None = 1,
) -> MemorizeRun:
    """Train one model (``point``, see :meth:`Point.resolve`) on one random data set by ``recipe``
    (default: the paper's, ``Recipe()``) and measure how much of it is memorised."""
    recipe = Recipe() if recipe is None else recipe
    dev = resolve_device(device)
    with progress_task(point.label, point.plan(recipe).total, progress) as advance:
        return train_group([point], recipe, dev, saturation=saturation, advance=advance, cpu_threads=cpu_threads)[0]


def _no_progress(n: int = 1) -> None:
    """The default ``advance``: no progress shown."""


def train_group(
    points: Sequence[Point],
    recipe: Recipe,
    device: torch.device,
    *,
    saturation: bool = False,
    advance: Callable[[int], None] = _no_progress,
    eval_chunk: int = 4096,
    cancelled: Callable[[], bool] = lambda: False,
    cpu_threads: int | None = 1,
) -> list[MemorizeRun]:
    """Train ``points`` stacked in the same steps; one run per point, in order.

    ``advance(k)`` is called as the group's steps are done (the longest plan's steps in all).
    ``eval_chunk``: examples per point evaluated at once at a check. ``cancelled()`` is asked
    every few hundred steps; when it says so, training stops with :class:`Cancelled`.
    ``cpu_threads``: see :func:`intra_op_threads` (None: the caller has set them).
    """
    with intra_op_threads(device, cpu_threads):
        trainer = _GroupTrainer(points, recipe, device, eval_chunk)
        outcomes = trainer.run(advance, cancelled)
        sats = [trainer.saturation(i) if saturation else None for i in range(len(points))]
    name = device_name(device)
    return [
        MemorizeRun(**asdict(p), recipe=recipe, **o, device=name, saturation=s)
        for p, o, s in zip(points, outcomes, sats, strict=False)
    ]


class Cancelled(Exception):
    """Training was stopped from outside (another group failed, or the user interrupted)."""


@contextlib.contextmanager
def intra_op_threads(device: torch.device, threads: int | None = 1) -> Iterator[None]:
    """Run with ``threads`` intra-op CPU threads (None: leave as is); restored afterwards.

    The model is tiny: on the CPU one intra-op thread per group is as fast as several, and
    several slow down badly when other processes share the cores; groups run side by side instead.
    """
    with _intra_op_threads(threads if device.type == "cpu" else None):
        yield


class _GroupTrainer:
    """The state of a group in training: stacked weights and data, and each point's host-side record."""

    def __init__(self, points: Sequence[Point], recipe: Recipe, device: torch.device, eval_chunk: int):
        self.points, self.recipe, self.device, self.eval_chunk = list(points), recipe, device, eval_chunk
        self.shape = StackShape.of(points, recipe.out_dim)
        self.plans = [p.plan(recipe) for p in points]
        self.orders: list[BatchOrder] = []
        models, data = [], []
        for p in points:
            gen = point_generator(p.seed)
            data.append(
                make_dataset(
                    size=p.size, n=p.n, task=recipe.task, context=recipe.context, classes=recipe.classes, generator=gen
                )
            )
            models.append(
                MemorizeModel(d=DIM, n=p.n, heads=p.heads, head_dim=p.head_dim, out_dim=recipe.out_dim, generator=gen)
            )
            self.orders.append(BatchOrder(gen, p.size, recipe.batch_size))
        self.models = models
        self.stack = StackedModel(models, self.shape, device)
        self._put_data(data)
        # One param group per schedule length: each group's learning rate follows its own plan.
        self.group_totals = sorted({pl.total for pl in self.plans})
        self.opt = _adam(
            [
                {
                    "params": [r for r, pl in zip(self.stack.rows, self.plans, strict=False) if pl.total == t],
                    "lr": recipe.lr,
                }
                for t in self.group_totals
            ]
        )
        self.records: list[dict | None] = [None] * len(points)

    def _put_data(self, data) -> None:
        """Stack the points' data, padded to the group's T and n, on the device (flat over points)."""
        P, T, n, d = self.shape.points, self.shape.size, self.shape.n, self.shape.d
        queries = torch.zeros(P, T, d)
        labels = torch.zeros(P, T, dtype=data[0][2].dtype)
        shared = self.recipe.context == "shared"
        ctx = torch.zeros(P, n, d) if shared else torch.zeros(P, T, n, d)
        for i, (q, c, y) in enumerate(data):
            queries[i, : q.shape[0]] = q
            labels[i, : y.shape[0]] = y
            if shared:
                ctx[i, : c.shape[0]] = c
            else:
                ctx[i, : c.shape[0], : c.shape[1]] = c
        self.queries = queries.view(P * T, d).to(self.device)
        self.labels = labels.view(P * T).to(self.device)
        self.ctx = (ctx if shared else ctx.view(P * T, n, d)).to(self.device)
        self.sizes = torch.tensor([p.size for p in self.points], device=self.device)

    # ------------------------------------------------------------------ the loop

    def run(self, advance: Callable[[int], None], cancelled: Callable[[], bool]) -> list[dict]:
        """Train until every point has stopped; each point's record as of its last check.

        Raises:
            Cancelled: ``cancelled()`` said so.
        """
        self.spent = [0.0] * len(self.points)
        self._mark = time.perf_counter()
        self._select(list(range(len(self.points))))
        step = reported = 0
        while self.live:
            if cancelled():
                raise Cancelled
            start, stop = step, min(step + CHUNK_STEPS, max(self.plans[i].total for i in self.live))
            batches: tuple[torch.Tensor, ...] = self._batches(start, stop)
            while step < stop and self.live:
                self._step(step, *(b[:, step - start] for b in batches))
                step += 1
                if any(self.plans[i].is_check(step) for i in self.live):
                    kept = self._check(step)
                    if len(kept) < len(self.live):
                        batches = tuple(b[kept] for b in batches)
                        self._select([self.live[k] for k in kept])
                    advance(step - reported)
                    reported = step
        advance(max(pl.total for pl in self.plans) - reported)
        return self.records  # type: ignore[return-value]

    def _select(self, live: list[int]) -> None:
        """Restrict the stack to the points ``live`` (those still training)."""
        self.live = live
        if not live:
            return
        index = torch.tensor(live, dtype=torch.int64, device=self.device)
        self.frame = self.stack.frame.take(index)
        self.rows = [self.stack.rows[i] for i in live]
        self.live_sizes = self.sizes[index]
        self.live_index = index
        self.live_ctx = self.ctx[index] if self.recipe.context == "shared" else None

    def _batches(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Flat example indices (L, S, B), weights (1, or 0 where a short batch is padded) and batch sizes (L, S)."""
        T = self.shape.size
        rows = torch.stack([self.orders[i].take(start, stop) for i in self.live])
        real = rows >= 0
        flat = torch.where(real, rows, 0) + torch.tensor(self.live)[:, None, None] * T
        out = (flat, real.float(), real.sum(-1).float())
        if self.device.type == "cuda":
            return tuple(t.pin_memory().to(self.device, non_blocking=True) for t in out)  # type: ignore[return-value]
        return out

    def _step(self, step: int, idx: torch.Tensor, weight: torch.Tensor, count: torch.Tensor) -> None:
        """One Adam step of every live point on its batch ``idx`` (L, B)."""
        for group, total in zip(self.opt.param_groups, self.group_totals, strict=False):
            group["lr"] = self.recipe.lr * lr_factor(step, total)
        x, ctx, labels = self._gather(idx)
        out, _ = self.stack.forward(torch.stack(self.rows), self.frame, x, ctx)
        loss = ((example_losses(self.recipe, out, labels) * weight).sum(1) / count).sum()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def _gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries (L, B, d), contexts and labels (L, B) of the examples at flat indices ``idx`` (L, B)."""
        flat = idx.reshape(-1)
        x = self.queries.index_select(0, flat).view(*idx.shape, -1)
        labels = self.labels.index_select(0, flat).view(idx.shape)
        if self.live_ctx is not None:
            return x, self.live_ctx, labels
        return x, self.ctx.index_select(0, flat).view(*idx.shape, *self.ctx.shape[1:]), labels

    # ------------------------------------------------------------------ checks

    def _charge(self) -> None:
        """Share the wall time since the last mark equally among the live points: they are padded to one
        shape and trained and evaluated in the same operations, so each costs the same."""
        now = time.perf_counter()
        share = (now - self._mark) / len(self.live)
        for i in self.live:
            self.spent[i] += share
        self._mark = now

    def _check(self, step: int) -> list[int]:
        """Record the points that check at ``step``; the positions (in ``live``) of those that go on.

        A point's ``seconds`` is its share of the group's time up to this check (see :meth:`_charge`):
        the shares of a group's points add up to its training time, and a point that stops early stops
        being charged.
        """
        counts, sums = self._evaluate()
        self._charge()
        kept = []
        for k, i in enumerate(self.live):
            plan, size = self.plans[i], self.points[i].size
            epochs = plan.epochs_at(step)
            if epochs is not None:
                full = counts[k] == size
                self.records[i] = dict(
                    memorized=counts[k] / size,
                    memorized_count=counts[k],
                    epochs_run=epochs,
                    steps_run=step,
                    planned_steps=plan.total,
                    final_loss=sums[k] / size,
                    stopped_early=full and step < plan.total,
                    seconds=self.spent[i],
                    diverged=not math.isfinite(sums[k]),
                )
                if full or step >= plan.total:
                    continue
            kept.append(k)
        return kept

    @torch.no_grad()
    def _evaluate(self) -> tuple[list[int], list[float]]:
        """Examples memorised and the loss summed over each live point's whole training set."""
        theta = torch.stack(self.rows)
        L, T = len(self.live), max(self.points[i].size for i in self.live)
        counts = torch.zeros(L, dtype=torch.int64, device=self.device)
        sums = torch.zeros(L, dtype=torch.float64, device=self.device)
        for c0 in range(0, T, self.eval_chunk):
            pos = torch.arange(c0, min(c0 + self.eval_chunk, T), device=self.device)
            idx = self.live_index[:, None] * self.shape.size + pos
            x, ctx, labels = self._gather(idx)
            out, _ = self.stack.forward(theta, self.frame, x, ctx)
            valid = pos < self.live_sizes[:, None]
            counts += (memorised(self.recipe, out, labels) & valid).sum(1)
            # where, not a product: the padding's loss, NaN once weights diverge, must not reach a point's sum
            sums += torch.where(valid, example_losses(self.recipe, out, labels), 0).sum(1).double()
        return counts.tolist(), sums.tolist()

    @torch.no_grad()
    def saturation(self, i: int):
        """Saturated heads per example of point ``i`` with its final weights (Appendix H)."""
        p = self.points[i]
        model = self.stack.unpad(i, self.models[i]).to(self.device)
        lo = i * self.shape.size
        queries = self.queries[lo : lo + p.size]
        ctx = self.ctx[i, : p.n] if self.recipe.context == "shared" else self.ctx[lo : lo + p.size, : p.n]
        parts = [
            model.attention(queries[s : s + self.eval_chunk], ctx if ctx.ndim == 2 else ctx[s : s + self.eval_chunk])[0]
            for s in range(0, p.size, self.eval_chunk)
        ]
        return saturation_summary(torch.cat(parts))


def example_losses(recipe: Recipe, out: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-example loss (..., B) of outputs (..., B, classes): cross-entropy, or the squared error for regression."""
    if recipe.task == "classification":
        return torch.nn.functional.cross_entropy(
            out.reshape(-1, out.shape[-1]), labels.reshape(-1), reduction="none"
        ).view(labels.shape)
    return (out[..., 0] - labels) ** 2


def memorised(recipe: Recipe, out: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Which examples are memorised: predicted class right, or ``|prediction - label| < tolerance``.
    An example whose outputs are not all finite (diverged training) is never memorised: the argmax
    of NaN logits names a class (0) that no output predicts."""
    finite = torch.isfinite(out).all(dim=-1)
    if recipe.task == "classification":
        return (out.argmax(dim=-1) == labels) & finite
    return ((out[..., 0] - labels).abs() < recipe.tolerance) & finite


def _adam(groups: list[dict]) -> torch.optim.Optimizer:
    """torch.optim.Adam over the points' rows, fused where this torch has it for the device. Its first use imports
    ``torch._dynamo``, which imports FSDP: a single-process run leaves that out (``imports.light``)."""
    with imports.light(transformers=False):
        try:
            return torch.optim.Adam(groups, fused=True)
        except (RuntimeError, ValueError, TypeError):
            return torch.optim.Adam(groups)
