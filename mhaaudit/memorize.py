"""The paper's synthetic memorisation experiments (Section 5.2, Appendices A, H and I).

A one-layer multi-head attention model is trained by gradient descent to memorise random labels
of random examples, and the fraction it memorises is measured as the number of heads H, the
context length n or the key/query dimension d_h grows.

Data (width d = 64): queries iid U[0,1]^d; context rows iid U[0,1]^d, either one context shared
by every example (``context="shared"``, Section 5.2) or a fresh context per example
(``context="per-example"``, Appendix I); labels uniform over ``classes`` classes
(``task="classification"``) or U[0,1] (``task="regression"``). One seeded ``torch.Generator``
draws the data, the initial weights and the batch order, in that order.

Model: ``Linear(d -> d)`` token embedding (no bias), sinusoidal positional encodings (query at
position 0, context rows at 1..n), one attention layer with H heads, key/query dimension d_h,
value dimension 1 per head, ``W_O: H -> d``, no biases anywhere, Xavier-uniform initialisation.
The query attends over the n context tokens only (never itself); logits are scaled by
1/sqrt(d_h). The read-out ``Linear(d -> classes)`` (or ``-> 1``) acts on the query's output.

Training (Appendix A): Adam, learning rate 1e-3, batch 256, ``max(500 epochs, 50k steps)``
unless ``epochs`` / ``max_steps`` say otherwise, 5% linear warm-up then cosine decay to zero.
Memorisation is the training accuracy (classification) or the fraction of examples with
``|prediction - label| < tolerance`` (regression). Training stops early once every example is
memorised (checked every ``check_every`` steps, at the end of an epoch).

Saturation (Appendix H): a head is saturated for an example when some softmax weight exceeds
0.99; :func:`saturation_summary` reports how many heads are saturated per example.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import torch

from . import __version__
from .settings import device_name, resolve_device
from .errors import InputError, OutputError

__all__ = [
    "DIM",
    "PRESETS",
    "LinearFit",
    "MemorizeGrid",
    "MemorizeModel",
    "MemorizeRun",
    "SaturationSummary",
    "fit_line",
    "make_dataset",
    "plot_memorize",
    "run_memorize_grid",
    "saturation_summary",
    "sinusoidal_positions",
    "train_memorize",
]

DIM = 64
SATURATION_THRESHOLD = 0.99
TASKS = ("classification", "regression")
CONTEXTS = ("shared", "per-example")
VARY = ("heads", "n", "head-dim")
_VARY_ALIASES = {"heads": "heads", "h": "heads", "n": "n", "head-dim": "head-dim", "head_dim": "head-dim", "dh": "head-dim"}

_PAPER_VALUES = (1, 5, 10, 20, 30, 40, 50, 60)

#: The paper's grids (Figure 2). The label-set sizes T are this project's choice (the paper does
#: not list them in the text): they straddle the number of examples the model memorises at the
#: ends of each grid (about 140 per head at n = 32 on the paper's App. H numbers), so that each
#: curve rises before it saturates at 1.0. ``cpu`` is a small grid that finishes in a few
#: minutes on two CPU cores: it trains at most 6000 steps per point (the paper rule would be
#: 50k), which is enough for clear growth with H but under-trains the larger sizes (doubling to
#: 12000 steps moved the memorised fractions by less than 0.04 on this grid).
PRESETS: dict[str, dict] = {
    "paper-fig2a": dict(vary="heads", values=_PAPER_VALUES, n=32, head_dim=64, sizes=(1000, 2000, 5000, 10000)),
    "paper-fig2b": dict(vary="n", values=_PAPER_VALUES, heads=20, head_dim=64, sizes=(1000, 2000, 5000)),
    "paper-fig2c": dict(vary="head-dim", values=(10, 16, 24, 32, 40, 48, 56, 64), heads=30, n=32, sizes=(2000, 5000, 10000)),
    "cpu": dict(vary="heads", values=(1, 2, 4, 8), n=32, head_dim=64, sizes=(500, 1000), max_steps=6000),
}

_DEFAULTS = dict(n=32, heads=4, head_dim=64)


# --------------------------------------------------------------------------------------------
# Data and model
# --------------------------------------------------------------------------------------------


def sinusoidal_positions(length: int, d: int) -> torch.Tensor:
    """Fixed sinusoidal encodings (length, d): sin on even, cos on odd coordinates."""
    pos = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    i = torch.arange(0, d, 2, dtype=torch.float64)
    freq = torch.exp(-math.log(10000.0) * i / d)
    pe = torch.zeros(length, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)[:, : pe[:, 1::2].shape[1]]
    return pe.float()


def make_dataset(*, size: int, n: int, task: str, context: str, classes: int, generator: torch.Generator, d: int = DIM):
    """Random queries (size, d), contexts ((n, d) shared or (size, n, d)) and labels."""
    if context == "shared":
        ctx = torch.rand(n, d, generator=generator)
    else:
        ctx = torch.rand(size, n, d, generator=generator)
    queries = torch.rand(size, d, generator=generator)
    if task == "classification":
        labels = torch.randint(0, classes, (size,), generator=generator)
    else:
        labels = torch.rand(size, generator=generator)
    return queries, ctx, labels


class MemorizeModel(torch.nn.Module):
    """Embedding + positions + one multi-head attention layer (d_v = 1 per head) + read-out."""

    def __init__(self, *, d: int, n: int, heads: int, head_dim: int, out_dim: int, generator: torch.Generator | None = None):
        super().__init__()
        self.d, self.n, self.heads, self.head_dim = d, n, heads, head_dim
        self.embed = torch.nn.Parameter(torch.empty(d, d))  # acts as x @ embed.T
        self.wq = torch.nn.Parameter(torch.empty(heads, d, head_dim))
        self.wk = torch.nn.Parameter(torch.empty(heads, d, head_dim))
        self.wv = torch.nn.Parameter(torch.empty(heads, d))  # one value coordinate per head
        self.wo = torch.nn.Parameter(torch.empty(d, heads))  # W_O: H -> d
        self.readout = torch.nn.Parameter(torch.empty(out_dim, d))
        self.register_buffer("pos", sinusoidal_positions(n + 1, d))
        init = torch.nn.init.xavier_uniform_
        with torch.no_grad():
            init(self.embed, generator=generator)
            for h in range(heads):
                init(self.wq[h], generator=generator)
            for h in range(heads):
                init(self.wk[h], generator=generator)
            init(self.wv, generator=generator)
            init(self.wo, generator=generator)
            init(self.readout, generator=generator)

    def attention(self, x: torch.Tensor, ctx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Softmax weights (B, H, n) of the query over the context, and the context tokens."""
        q_tok = x @ self.embed.T + self.pos[0]
        c_tok = ctx @ self.embed.T + self.pos[1:]
        q = torch.einsum("bd,hde->bhe", q_tok, self.wq)
        if c_tok.ndim == 2:  # shared context: keys computed once
            k = torch.einsum("nd,hde->hne", c_tok, self.wk)
            logits = torch.einsum("bhe,hne->bhn", q, k)
        else:
            k = torch.einsum("bnd,hde->bhne", c_tok, self.wk)
            logits = torch.einsum("bhe,bhne->bhn", q, k)
        return torch.softmax(logits / math.sqrt(self.head_dim), dim=-1), c_tok

    def forward(self, x: torch.Tensor, ctx: torch.Tensor, return_attention: bool = False):
        p, c_tok = self.attention(x, ctx)
        if c_tok.ndim == 2:
            v = torch.einsum("nd,hd->hn", c_tok, self.wv)
            heads_out = torch.einsum("bhn,hn->bh", p, v)
        else:
            v = torch.einsum("bnd,hd->bhn", c_tok, self.wv)
            heads_out = (p * v).sum(-1)
        out = (heads_out @ self.wo.T) @ self.readout.T
        return (out, p) if return_attention else out


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SaturationSummary:
    """How many heads are saturated (some softmax weight > threshold) per example.

    ``histogram[k]`` is the number of examples with exactly k saturated heads (k = 0..H).
    """

    threshold: float
    heads: int
    examples: int
    histogram: tuple[int, ...]
    frac_at_least_two_saturated: float
    frac_some_unsaturated: float
    frac_any_saturated: float
    mean_saturated: float

    def to_dict(self) -> dict:
        d = asdict(self)
        d["histogram"] = list(self.histogram)
        return d


def saturation_summary(attention: torch.Tensor, threshold: float = SATURATION_THRESHOLD) -> SaturationSummary:
    """Per-example count of saturated heads from softmax weights (T, H, n)."""
    if not isinstance(attention, torch.Tensor) or attention.ndim != 3:
        raise InputError("attention weights must be a (T, H, n) tensor")
    T, H, _ = attention.shape
    counts = (attention.max(dim=-1).values > threshold).sum(dim=1).cpu()
    hist = torch.bincount(counts, minlength=H + 1)
    denom = max(T, 1)
    return SaturationSummary(
        threshold=float(threshold),
        heads=int(H),
        examples=int(T),
        histogram=tuple(int(v) for v in hist.tolist()),
        frac_at_least_two_saturated=float((counts >= 2).sum()) / denom,
        frac_some_unsaturated=float((counts < H).sum()) / denom,
        frac_any_saturated=float((counts >= 1).sum()) / denom,
        mean_saturated=float(counts.double().mean()) if T else 0.0,
    )


@dataclass(frozen=True)
class MemorizeRun:
    """One trained point of a grid.

    ``memorized`` is the fraction of training examples memorised (training accuracy, or the
    fraction within ``tolerance`` for regression), ``memorized_count`` the number.
    """

    heads: int
    n: int
    head_dim: int
    size: int
    task: str
    context: str
    classes: int
    tolerance: float
    epochs: int | None
    max_steps: int | None
    lr: float
    batch_size: int
    check_every: int
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
    saturation: SaturationSummary | None = None
    reused: bool = False

    def config(self) -> dict:
        return _config_dict(
            heads=self.heads, n=self.n, head_dim=self.head_dim, size=self.size, task=self.task, context=self.context,
            classes=self.classes, tolerance=self.tolerance, epochs=self.epochs, max_steps=self.max_steps, lr=self.lr,
            batch_size=self.batch_size, check_every=self.check_every, seed=self.seed, device=self.device,
        )

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "saturation"}
        d["saturation"] = self.saturation.to_dict() if self.saturation is not None else None
        return d


@dataclass(frozen=True)
class LinearFit:
    """Least-squares line ``count = slope * H + intercept`` over the non-saturated points."""

    size: int | None  # None: all sizes pooled
    slope: float
    intercept: float
    r2: float
    points: int  # number of (H, count) points fitted
    xs: tuple[int, ...] = ()  # the distinct values of H among them

    def to_dict(self) -> dict:
        return asdict(self) | {"xs": list(self.xs)}


@dataclass(frozen=True)
class MemorizeGrid:
    """Every point of a grid, in grid order, plus the linear fits when H varies."""

    vary: str | None
    values: tuple[int, ...]
    sizes: tuple[int, ...]
    preset: str | None
    runs: tuple[MemorizeRun, ...]
    fits: tuple[LinearFit, ...] = ()
    reused: int = 0
    out: str | None = None
    plot: str | None = None
    settings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "tool": f"mhaaudit {__version__}",
            "vary": self.vary,
            "values": list(self.values),
            "sizes": list(self.sizes),
            "preset": self.preset,
            "settings": self.settings,
            "runs": [r.to_dict() for r in self.runs],
            "fits": [f.to_dict() for f in self.fits],
            "reused": self.reused,
            "out": self.out,
            "plot": self.plot,
        }


def _config_dict(**kw) -> dict:
    # The device type (not its index) belongs to the config: the same seed gives other numbers
    # on another kind of device.
    dev = str(kw.pop("device"))
    kw["device_type"] = dev.split(":")[0].split(" ")[0]
    kw["d"] = DIM
    kw["tolerance"] = float(kw["tolerance"])
    kw["lr"] = float(kw["lr"])
    return kw


def _config_key(cfg: dict) -> str:
    return json.dumps(cfg, sort_keys=True)


# --------------------------------------------------------------------------------------------
# Progress (rich, on stderr; a no-op when disabled)
# --------------------------------------------------------------------------------------------


class _Progress:
    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._p = None
        self._depth = 0

    def __enter__(self):
        self._depth += 1
        if self.enabled and self._p is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self._p = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TimeRemainingColumn(), console=Console(stderr=True), transient=True,
            )
            self._p.__enter__()
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth == 0 and self._p is not None:
            self._p.__exit__(*exc)
            self._p = None
        return False

    def add(self, description: str, total: int):
        return self._p.add_task(description, total=total) if self._p is not None else None

    def update(self, task, **kw):
        if self._p is not None and task is not None:
            self._p.update(task, **kw)

    def remove(self, task):
        if self._p is not None and task is not None:
            self._p.remove_task(task)


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


def _int_option(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise InputError(f"--{name} must be an integer, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise InputError(f"--{name} must be an integer, got {value!r}") from None
    if not isinstance(value, int):
        raise InputError(f"--{name} must be an integer, got {value!r}")
    if value < minimum:
        raise InputError(f"--{name} must be at least {minimum}, got {value}")
    return value


def _int_list(name: str, value, minimum: int = 1) -> tuple[int, ...]:
    """``"1,2,4"`` or a sequence of integers -> a tuple without duplicates, order kept."""
    if value is None:
        return ()
    if isinstance(value, str):
        parts = [p.strip() for p in value.replace(" ", ",").split(",") if p.strip()]
    elif isinstance(value, Iterable):
        parts = list(value)
    else:
        parts = [value]
    out: list[int] = []
    for p in parts:
        try:
            if isinstance(p, bool):
                raise ValueError
            if isinstance(p, str):
                v = int(p)
            elif isinstance(p, float):
                if not p.is_integer():
                    raise ValueError
                v = int(p)
            else:
                v = int(p) if int(p) == p else None  # type: ignore[arg-type]
                if v is None:
                    raise ValueError
        except (TypeError, ValueError):
            raise InputError(f"--{name} must be comma-separated integers, got {p!r}") from None
        if v < minimum:
            raise InputError(f"--{name} values must be at least {minimum}, got {v}")
        if v not in out:
            out.append(v)
    return tuple(out)


def _choice(name: str, value: str, choices: Sequence[str]) -> str:
    v = str(value).strip().lower()
    if v not in choices:
        raise InputError(f"unknown --{name} {value!r} (choose from {', '.join(choices)})")
    return v


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


def _lr_factor(step: int, total: int) -> float:
    """5% linear warm-up, then cosine decay to zero (``step`` counts from 0)."""
    warm = max(1, round(0.05 * total))
    if step < warm:
        return (step + 1) / warm
    if total <= warm:
        return 1.0
    progress = (step - warm) / (total - warm)
    return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


# --------------------------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------------------------


def _evaluate(model, queries, ctx, labels, task, tolerance, chunk=4096):
    shared = ctx.ndim == 2
    correct = 0
    loss_sum = 0.0
    with torch.no_grad():
        for s in range(0, queries.shape[0], chunk):
            xb = queries[s:s + chunk]
            cb = ctx if shared else ctx[s:s + chunk]
            yb = labels[s:s + chunk]
            out = model(xb, cb)
            if task == "classification":
                loss_sum += float(torch.nn.functional.cross_entropy(out, yb, reduction="sum"))
                correct += int((out.argmax(dim=-1) == yb).sum())
            else:
                pred = out.squeeze(-1)
                loss_sum += float(((pred - yb) ** 2).sum())
                correct += int(((pred - yb).abs() < tolerance).sum())
    return correct, loss_sum / max(queries.shape[0], 1)


def _attention_all(model, queries, ctx, chunk=4096) -> torch.Tensor:
    shared = ctx.ndim == 2
    parts = []
    with torch.no_grad():
        for s in range(0, queries.shape[0], chunk):
            p, _ = model.attention(queries[s:s + chunk], ctx if shared else ctx[s:s + chunk])
            parts.append(p)
    return torch.cat(parts)


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
    _progress: _Progress | None = None,
) -> MemorizeRun:
    """Train one model on one random data set and measure how much of it is memorised."""
    heads = _int_option("heads", heads)
    n = _int_option("n", n)
    head_dim = _int_option("head-dim", head_dim)
    size = _int_option("sizes", size)
    classes = _int_option("classes", classes, 2)
    batch_size = _int_option("batch-size", batch_size)
    check_every = _int_option("check-every", check_every)
    seed = _int_option("seed", seed, 0)
    if epochs is not None:
        epochs = _int_option("epochs", epochs)
    if max_steps is not None:
        max_steps = _int_option("max-steps", max_steps)
    task = _choice("task", task, TASKS)
    context = _choice("context", context, CONTEXTS)
    if not (isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr > 0 and math.isfinite(lr)):
        raise InputError(f"--lr must be a positive number, got {lr!r}")
    if not (isinstance(tolerance, (int, float)) and not isinstance(tolerance, bool) and tolerance > 0):
        raise InputError(f"--tolerance must be a positive number, got {tolerance!r}")
    dev = resolve_device(device)

    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    queries, ctx, labels = make_dataset(size=size, n=n, task=task, context=context, classes=classes, generator=gen)
    out_dim = classes if task == "classification" else 1
    model = MemorizeModel(d=DIM, n=n, heads=heads, head_dim=head_dim, out_dim=out_dim, generator=gen).to(dev)
    queries, ctx, labels = queries.to(dev), ctx.to(dev), labels.to(dev)

    spe, epochs_planned, total = planned_schedule(size, batch_size, epochs, max_steps)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = torch.nn.functional.cross_entropy if task == "classification" else torch.nn.functional.mse_loss

    # The model is tiny: on the CPU one intra-op thread is as fast as several, and several
    # threads slow down badly when other processes share the cores. Restored afterwards.
    threads_before = torch.get_num_threads()
    if dev.type == "cpu" and cpu_threads is not None:
        torch.set_num_threads(cpu_threads)
    try:
        return _train(model, opt, queries, ctx, labels, loss_fn=loss_fn, dev=dev, gen=gen, size=size,
                      batch_size=batch_size, total=total, lr=lr, check_every=check_every, task=task,
                      tolerance=tolerance, saturation=saturation,
                      prog=_progress if _progress is not None else _Progress(progress),
                      label=f"H={heads} n={n} d_h={head_dim} T={size}",
                      record=dict(heads=heads, n=n, head_dim=head_dim, size=size, task=task, context=context,
                                  classes=classes, tolerance=float(tolerance), epochs=epochs, max_steps=max_steps,
                                  lr=float(lr), batch_size=batch_size, check_every=check_every, seed=seed,
                                  planned_steps=total, device=device_name(dev)))
    finally:
        if torch.get_num_threads() != threads_before:
            torch.set_num_threads(threads_before)


def _train(model, opt, queries, ctx, labels, *, loss_fn, dev, gen, size, batch_size, total, lr, check_every,
           task, tolerance, saturation, prog, label, record) -> MemorizeRun:
    shared = ctx.ndim == 2
    t0 = time.perf_counter()
    step = 0
    epoch = 0
    since_check = 0
    count = 0
    final_loss = float("nan")
    stopped_early = False
    with prog:
        task_id = prog.add(label, total)
        while step < total:
            perm = torch.randperm(size, generator=gen).to(dev)
            for s in range(0, size, batch_size):
                if step >= total:
                    break
                idx = perm[s:s + batch_size]
                xb = queries[idx]
                cb = ctx if shared else ctx[idx]
                yb = labels[idx]
                for g in opt.param_groups:
                    g["lr"] = lr * _lr_factor(step, total)
                out = model(xb, cb)
                loss = loss_fn(out, yb) if task == "classification" else loss_fn(out.squeeze(-1), yb)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                step += 1
                since_check += 1
            epoch += 1
            prog.update(task_id, completed=step)
            if since_check >= check_every or step >= total:
                since_check = 0
                count, final_loss = _evaluate(model, queries, ctx, labels, task, tolerance)
                if count == size:
                    stopped_early = step < total
                    break
        prog.remove(task_id)
    sat = None
    if saturation:
        sat = saturation_summary(_attention_all(model, queries, ctx))
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    seconds = time.perf_counter() - t0
    return MemorizeRun(
        **record, memorized=count / size, memorized_count=count, epochs_run=epoch, steps_run=step,
        final_loss=final_loss, seconds=seconds, stopped_early=stopped_early, saturation=sat,
    )


# --------------------------------------------------------------------------------------------
# Linear fit
# --------------------------------------------------------------------------------------------


def fit_line(xs: Sequence[float], ys: Sequence[float], size: int | None = None) -> LinearFit | None:
    """Least squares ``y = slope * x + intercept`` with R^2; ``None`` with fewer than 2 distinct x."""
    pts = list(zip(xs, ys))
    if len({x for x, _ in pts}) < 2:
        return None
    m = len(pts)
    mx = sum(x for x, _ in pts) / m
    my = sum(y for _, y in pts) / m
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in pts)
    ss_tot = sum((y - my) ** 2 for _, y in pts)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    return LinearFit(size=size, slope=slope, intercept=intercept, r2=r2, points=m, xs=tuple(sorted({int(x) for x, _ in pts})))


def _heads_fits(runs: Sequence[MemorizeRun], sizes: Sequence[int], saturated_at: float = 0.99) -> tuple[LinearFit, ...]:
    """Count memorised vs H, per size and pooled, over the non-saturated points (fraction < 0.99)."""
    fits = []
    pooled_x, pooled_y = [], []
    for T in sizes:
        pts = sorted((r.heads, r.memorized_count) for r in runs if r.size == T and r.memorized < saturated_at)
        pooled_x += [p[0] for p in pts]
        pooled_y += [p[1] for p in pts]
        f = fit_line([p[0] for p in pts], [p[1] for p in pts], size=T)
        if f is not None:
            fits.append(f)
    if len(sizes) > 1:
        f = fit_line(pooled_x, pooled_y, size=None)
        if f is not None:
            fits.append(f)
    return tuple(fits)


# --------------------------------------------------------------------------------------------
# Results file
# --------------------------------------------------------------------------------------------


_SAT_COLUMNS = ("sat_threshold", "sat_histogram", "sat_frac_ge2", "sat_frac_some_unsaturated", "sat_frac_any", "sat_mean")


def _run_to_row(run: MemorizeRun) -> dict:
    row = {k: getattr(run, k) for k in run.__dataclass_fields__ if k not in ("saturation", "reused")}
    row["config_key"] = _config_key(run.config())
    s = run.saturation
    row.update(
        sat_threshold=s.threshold if s else None,
        sat_histogram=list(s.histogram) if s else None,
        sat_frac_ge2=s.frac_at_least_two_saturated if s else None,
        sat_frac_some_unsaturated=s.frac_some_unsaturated if s else None,
        sat_frac_any=s.frac_any_saturated if s else None,
        sat_mean=s.mean_saturated if s else None,
    )
    return row


def _row_to_run(row: dict) -> MemorizeRun:
    sat = None
    if row.get("sat_histogram") is not None:
        hist = tuple(int(v) for v in row["sat_histogram"])
        sat = SaturationSummary(
            threshold=float(row["sat_threshold"]), heads=int(row["heads"]), examples=int(sum(hist)), histogram=hist,
            frac_at_least_two_saturated=float(row["sat_frac_ge2"]),
            frac_some_unsaturated=float(row["sat_frac_some_unsaturated"]),
            frac_any_saturated=float(row["sat_frac_any"]), mean_saturated=float(row["sat_mean"]),
        )
    fields = {k: row[k] for k in MemorizeRun.__dataclass_fields__ if k not in ("saturation", "reused")}
    return MemorizeRun(**fields, saturation=sat, reused=True)


def _read_results(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise InputError(f"cannot read the existing results file {path} ({exc.__class__.__name__}); move it away or pick another --out") from exc
    rows = table.to_pylist()
    if rows and "config_key" not in rows[0]:
        raise InputError(f"{path} is not a results file of 'mhaaudit memorize' (no config_key column); pick another --out")
    return rows


def _write_results(path: Path, rows: list[dict], meta: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows)
    table = table.replace_schema_metadata({k: str(v) for k, v in meta.items()})
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except Exception as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise OutputError(f"cannot write {path}: {exc}") from exc


def _check_writable(path: Path, what: str) -> None:
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{what} {path}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{what} {path}: the folder {parent} is not writable")
    if path.is_dir():
        raise OutputError(f"{what} {path} is a folder, not a file")


# --------------------------------------------------------------------------------------------
# The grid
# --------------------------------------------------------------------------------------------


def resolve_grid(
    *,
    vary=None,
    values=None,
    n=None,
    heads=None,
    head_dim=None,
    sizes=None,
    preset=None,
    epochs=None,
    max_steps=None,
) -> dict:
    """Merge a preset with explicit options (explicit wins) and validate the grid."""
    base: dict = {}
    if preset is not None:
        key = str(preset).strip().lower()
        if key not in PRESETS:
            raise InputError(f"unknown --preset {preset!r} (choose from {', '.join(PRESETS)})")
        base = dict(PRESETS[key])
        preset = key
    explicit = dict(vary=vary, values=values, n=n, heads=heads, head_dim=head_dim, sizes=sizes, epochs=epochs, max_steps=max_steps)
    if vary is not None and values is None and preset is not None and _VARY_ALIASES.get(str(vary).strip().lower()) != base.get("vary"):
        base.pop("values", None)  # the preset's values belong to another parameter
    merged = {**base, **{k: v for k, v in explicit.items() if v is not None}}

    vary_v = merged.get("vary")
    if vary_v is not None:
        v = str(vary_v).strip().lower()
        if v not in _VARY_ALIASES:
            raise InputError(f"unknown --vary {vary_v!r} (choose from {', '.join(VARY)})")
        vary_v = _VARY_ALIASES[v]
    vals = _int_list("values", merged.get("values"))
    if vary_v is not None and not vals:
        raise InputError(f"--vary {vary_v} needs --values (e.g. --values 1,2,4,8)")
    if vary_v is None and merged.get("values") is not None:
        raise InputError("--values needs --vary (heads, n or head-dim)")
    sizes_v = _int_list("sizes", merged.get("sizes"))
    if not sizes_v:
        raise InputError("the grid is empty: give --sizes (e.g. --sizes 500,1000) or a --preset")
    fixed = {
        "n": _int_option("n", merged.get("n", _DEFAULTS["n"])),
        "heads": _int_option("heads", merged.get("heads", _DEFAULTS["heads"])),
        "head_dim": _int_option("head-dim", merged.get("head_dim", _DEFAULTS["head_dim"])),
    }
    ep = merged.get("epochs")
    ms = merged.get("max_steps")
    return dict(
        vary=vary_v, values=vals, sizes=sizes_v, preset=preset, fixed=fixed,
        epochs=_int_option("epochs", ep) if ep is not None else None,
        max_steps=_int_option("max-steps", ms) if ms is not None else None,
    )


def _points(grid: dict) -> list[dict]:
    pts = []
    values = grid["values"] if grid["vary"] else (None,)
    param = {"heads": "heads", "n": "n", "head-dim": "head_dim"}.get(grid["vary"] or "", None)
    for v in values:
        for T in grid["sizes"]:
            p = dict(grid["fixed"])
            if param is not None:
                p[param] = v
            p["size"] = T
            pts.append(p)
    return pts


def run_memorize_grid(
    *,
    vary: str | None = None,
    values: str | Sequence[int] | None = None,
    n: int | None = None,
    heads: int | None = None,
    head_dim: int | None = None,
    sizes: str | Sequence[int] | None = None,
    preset: str | None = None,
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
    out: str | os.PathLike | None = None,
    plot: str | os.PathLike | None = None,
    progress: bool = False,
) -> MemorizeGrid:
    """Train every point of a grid (values of the varied parameter x sizes T).

    ``out``: a parquet file, written atomically after every point; when it exists, points
    already in it with the same full configuration (including the device type) are read back
    instead of recomputed (``MemorizeRun.reused``; a point asked for with ``saturation`` is
    recomputed when the stored one has none). ``plot``: memorisation vs the varied parameter,
    one line per size.
    """
    grid = resolve_grid(vary=vary, values=values, n=n, heads=heads, head_dim=head_dim, sizes=sizes,
                        preset=preset, epochs=epochs, max_steps=max_steps)
    task = _choice("task", task, TASKS)
    context = _choice("context", context, CONTEXTS)
    classes = _int_option("classes", classes, 2)
    batch_size = _int_option("batch-size", batch_size)
    check_every = _int_option("check-every", check_every)
    seed = _int_option("seed", seed, 0)
    if not (isinstance(tolerance, (int, float)) and not isinstance(tolerance, bool) and tolerance > 0):
        raise InputError(f"--tolerance must be a positive number, got {tolerance!r}")
    if not (isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr > 0 and math.isfinite(lr)):
        raise InputError(f"--lr must be a positive number, got {lr!r}")
    dev = resolve_device(device)
    out_path = Path(out) if out is not None else None
    plot_path = Path(plot) if plot is not None else None
    if out_path is not None:
        _check_writable(out_path, "--out")
    if plot_path is not None:
        _check_writable(plot_path, "--plot")

    rows: list[dict] = _read_results(out_path) if out_path is not None and out_path.exists() else []
    by_key = {r["config_key"]: r for r in rows}
    common = dict(task=task, context=context, classes=classes, tolerance=float(tolerance), epochs=grid["epochs"],
                  max_steps=grid["max_steps"], lr=float(lr), batch_size=batch_size, check_every=check_every, seed=seed)
    meta = {
        "created_by": f"mhaaudit {__version__} memorize",
        "mhaaudit_version": __version__,
        "torch_version": torch.__version__,
        "seed": seed,
        "device": device_name(dev),
        "preset": grid["preset"],
    }

    runs: list[MemorizeRun] = []
    reused = 0
    pts = _points(grid)
    prog = _Progress(progress)
    with prog:
        grid_task = prog.add("grid", len(pts))
        for i, p in enumerate(pts):
            cfg = _config_dict(**p, **common, device=device_name(dev))
            key = _config_key(cfg)
            row = by_key.get(key)
            stored = None
            if row is not None and (not saturation or row.get("sat_histogram") is not None):
                try:
                    stored = _row_to_run(row)
                except (KeyError, TypeError, ValueError):
                    stored = None  # a row from another version of the file layout: recompute it
            if stored is not None:
                runs.append(stored)
                reused += 1
            else:
                run = train_memorize(**p, **common, device=dev, saturation=saturation, _progress=prog)
                runs.append(run)
                if out_path is not None:
                    new_row = _run_to_row(run)
                    by_key[new_row["config_key"]] = new_row
                    _write_results(out_path, list(by_key.values()), meta)
            prog.update(grid_task, completed=i + 1)

    fits = _heads_fits(runs, grid["sizes"]) if grid["vary"] == "heads" else ()
    settings = dict(grid["fixed"]) | {k: v for k, v in common.items()} | {"device": device_name(dev), "d": DIM}
    result = MemorizeGrid(
        vary=grid["vary"], values=grid["values"], sizes=grid["sizes"], preset=grid["preset"], runs=tuple(runs),
        fits=fits, reused=reused, out=str(out_path) if out_path is not None else None,
        plot=str(plot_path) if plot_path is not None else None, settings=settings,
    )
    if plot_path is not None:
        plot_memorize(result, plot_path)
    return result


# --------------------------------------------------------------------------------------------
# Plot
# --------------------------------------------------------------------------------------------

_XLABEL = {"heads": "number of heads H", "n": "context length n", "head-dim": "key/query dimension d_h", None: "setting"}


def plot_memorize(grid: MemorizeGrid, path: str | os.PathLike) -> None:
    """Memorised fraction vs the varied parameter, one line per size (the layout of Figure 2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    param = {"heads": "heads", "n": "n", "head-dim": "head_dim"}.get(grid.vary or "", None)
    fig, ax = plt.subplots(figsize=(4.8, 3.6), dpi=150)
    for T in grid.sizes:
        pts = sorted(
            ((getattr(r, param) if param else 0), r.memorized) for r in grid.runs if r.size == T
        )
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"T = {T}")
    fixed = grid.settings
    parts = []
    if grid.vary != "heads":
        parts.append(f"H = {fixed.get('heads')}")
    if grid.vary != "n":
        parts.append(f"n = {fixed.get('n')}")
    if grid.vary != "head-dim":
        parts.append(f"d_h = {fixed.get('head_dim')}")
    if grid.vary == "head-dim":
        ax.axvline(fixed.get("n"), color="grey", linestyle="--", linewidth=1, label="d_h = n")
    ctx = fixed.get("context", "shared")
    ax.set_title(", ".join(parts) + f" ({ctx} context)", fontsize=9)
    ax.set_xlabel(_XLABEL.get(grid.vary, "setting"))
    if fixed.get("task") == "regression":
        ax.set_ylabel(f"fraction with |error| < {fixed.get('tolerance')}")
    else:
        ax.set_ylabel("memorised fraction (training accuracy)")
    ax.set_ylim(-0.02, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    suffix = path.suffix.lstrip(".").lower() or "png"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent if str(path.parent) else "."))
    os.close(fd)
    try:
        fig.savefig(tmp, format=suffix, metadata={"Software": f"mhaaudit {__version__}"} if suffix == "png" else None)
        os.replace(tmp, path)
    except ValueError as exc:
        raise OutputError(f"--plot {path}: unsupported image format {suffix!r}") from exc
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
