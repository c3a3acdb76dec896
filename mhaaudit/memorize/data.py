"""The random data of the memorisation experiments and the fixed positional encodings.

Width d = 64 (:data:`DIM`). Queries iid U[0,1]^d; context rows iid U[0,1]^d, either one context
shared by every example (``context="shared"``, Section 5.2) or a fresh context per example
(``context="per-example"``, Appendix I); labels uniform over ``classes`` classes
(``task="classification"``) or U[0,1] (``task="regression"``).
"""

from __future__ import annotations

import math

import torch

from ..defaults import MEMORIZE_CONTEXTS, MEMORIZE_TASKS
from ..runtime import derive_seed

__all__ = ["CONTEXTS", "DIM", "TASKS", "make_dataset", "point_generator", "sinusoidal_positions"]

DIM = 64
TASKS = MEMORIZE_TASKS
CONTEXTS = MEMORIZE_CONTEXTS


def sinusoidal_positions(length: int, d: int) -> torch.Tensor:
    """Fixed sinusoidal encodings (length, d): sin on even, cos on odd coordinates."""
    pos = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    i = torch.arange(0, d, 2, dtype=torch.float64)
    freq = torch.exp(-math.log(10000.0) * i / d)
    pe = torch.zeros(length, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)[:, : pe[:, 1::2].shape[1]]
    return pe.float()


def point_generator(seed: int) -> torch.Generator:
    """The CPU generator of a point of seed ``seed``: it draws the point's data (:func:`make_dataset`), then its
    initial weights, then the order of its batches."""
    return torch.Generator(device="cpu").manual_seed(derive_seed(seed, "memorize"))


def make_dataset(*, size: int, n: int, task: str, context: str, classes: int, generator: torch.Generator, d: int = DIM):
    """Random queries (size, d), contexts ((n, d) shared or (size, n, d)) and labels, in that order of draws."""
    ctx = torch.rand(n, d, generator=generator) if context == "shared" else torch.rand(size, n, d, generator=generator)
    queries = torch.rand(size, d, generator=generator)
    if task == "classification":
        labels = torch.randint(0, classes, (size,), generator=generator)
    else:
        labels = torch.rand(size, generator=generator)
    return queries, ctx, labels
