"""The run settings, resolved once at the edge (CLI or API call) and passed down.

A :class:`Settings` holds what every part of a run must agree on: the ``torch.device`` (resolved
from ``auto``/``cpu``/``cuda``/``cuda:N`` here and never again below), the rank rule's tolerances
(the :class:`~mhaaudit.numerics.RankRule` for features of a given dtype is built from them), the
Monte-Carlo draw count and threshold, whether a test may stop once its verdict is settled, and the
seed.

The weights seed and the data seed
----------------------------------
The random weights (``"model-init"``, ``"random-attention"``) derive from the *weights seed*
and the data (``"data"``) from the *data seed*. Both are the run's seed unless set apart
(``Settings.weights_seed`` / ``Settings.data_seed``, the CLI's ``--weights-seed`` /
``--data-seed``), so a run that sets neither draws exactly what it always drew; the Monte-Carlo
draws, labels and memorisation points always derive from the run's seed. Setting one apart holds
that randomness fixed while the other moves (``mhaaudit.seeds``). Trained weights have no
weights seed.

The seed rule (:func:`derive_seed`), the device (:func:`resolve_device`) and the environment
variables live in :mod:`mhaaudit.runtime`, below the rank rule; this module re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from . import validate
from .defaults import DEFAULT_DEVICE, DEFAULT_SAMPLES, DEFAULT_SEED, DEFAULT_STOP_WHEN_DECIDED, DEFAULT_THRESHOLD
from .errors import Param
from .numerics.rule import RankRule
from .runtime import DECODE_WORKERS_ENV as DECODE_WORKERS_ENV
from .runtime import KERNELS_ENV as KERNELS_ENV
from .runtime import MAX_DECODE_WORKERS as MAX_DECODE_WORKERS
from .runtime import MAX_SAMPLES as MAX_SAMPLES
from .runtime import MAX_SEED as MAX_SEED
from .runtime import PURPOSES as PURPOSES
from .runtime import check_environment as check_environment
from .runtime import checked_seed
from .runtime import decode_workers_env as decode_workers_env
from .runtime import derive_seed as derive_seed
from .runtime import device_name as device_name
from .runtime import kernels_env as kernels_env
from .runtime import resolve_device as resolve_device

__all__ = [
    "DEFAULT_SAMPLES",
    "DEFAULT_THRESHOLD",
    "MAX_SAMPLES",
    "MAX_SEED",
    "PURPOSES",
    "Settings",
    "derive_seed",
    "device_name",
    "resolve_device",
]


def _seed(name: str) -> Callable[[Any], int]:
    return lambda value: checked_seed(value, name)


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else check(value)


# How each field of Settings is checked and normalised, in the order the fields are checked.
_CHECKS: dict[str, Callable[[Any], Any]] = {
    "device": resolve_device,
    "samples": lambda value: validate.integer(Param("samples"), value, maximum=MAX_SAMPLES),
    "threshold": lambda value: validate.fraction(Param("threshold"), value),
    "seed": _seed("seed"),
    "rtol": lambda value: validate.tolerance(Param("rtol"), value),
    "atol": lambda value: validate.tolerance(Param("atol"), value),
    "stop_when_decided": lambda value: validate.flag(Param("stop_when_decided"), value),
    "progress": lambda value: validate.flag(Param("progress"), value),
    "weights_seed": _optional(_seed("weights_seed")),
    "data_seed": _optional(_seed("data_seed")),
}


@dataclass(frozen=True)
class Settings:
    """What every consumer of a run agrees on; build it with :meth:`resolve`.

    ``rtol``/``atol`` are the user's tolerances (None: the paper's rule); :meth:`rule` turns them
    into the rank rule for features of a dtype, the same rule for Assumptions 1, 2, 3 and General
    Position. ``stop_when_decided`` lets a Monte-Carlo test stop once its verdict cannot change (the default,
    as for the keywords and the command line; False makes every draw).
    Every field is checked and normalised where the object is made (InputError), the device
    resolved from ``auto``/``cpu``/``cuda``/``cuda:N`` (an unavailable device is an input error).
    """

    device: torch.device
    samples: int = DEFAULT_SAMPLES
    threshold: float = DEFAULT_THRESHOLD
    seed: int = DEFAULT_SEED
    rtol: float | None = None
    atol: float | None = None
    stop_when_decided: bool = DEFAULT_STOP_WHEN_DECIDED
    progress: bool = False
    weights_seed: int | None = None  # None: the run's seed (see the module docstring)
    data_seed: int | None = None  # None: the run's seed

    def __post_init__(self) -> None:
        for name, check in _CHECKS.items():
            object.__setattr__(self, name, check(getattr(self, name)))

    @classmethod
    def resolve(cls, *, device: str | torch.device | None = DEFAULT_DEVICE, **fields: Any) -> Settings:
        """The settings of ``fields`` (any field but the device, by name; the rest keep their
        defaults) on ``device``, after the environment's settings are checked.

        Raises:
            InputError: when an environment variable is set to nothing meaningful (:func:`check_environment`), or a
                field is out of range or the device unavailable (checked as the object is made).
        """
        check_environment()
        return cls(device, **fields)  # type: ignore[arg-type]  # __post_init__ resolves the device

    def rule(self, dtype: torch.dtype | str = torch.float32):
        """The rank rule for features of ``dtype`` under the user's tolerances."""
        return RankRule.for_dtype(dtype, rtol=self.rtol, atol=self.atol)

    def seed_for(self, purpose: str, *index: int) -> int:
        """:func:`derive_seed` under this run's seed."""
        return derive_seed(self.seed, purpose, *index)

    @property
    def weights_seed_used(self) -> int:
        """The seed the random weights derive from: ``weights_seed``, else the run's seed."""
        return self.seed if self.weights_seed is None else self.weights_seed

    @property
    def data_seed_used(self) -> int:
        """The seed the data derive from: ``data_seed``, else the run's seed."""
        return self.seed if self.data_seed is None else self.data_seed

    def with_(self, **changes) -> Settings:
        """A copy with some fields changed, checked as any Settings is (a ``torch.device`` stays as it is)."""
        return replace(self, **changes)

    @property
    def device_name(self) -> str:
        """The device described for reports and file metadata (:func:`device_name`), e.g. ``cpu``."""
        return device_name(self.device)

    def as_dict(self) -> dict:
        """The settings as written into every output's ``meta``."""
        out = {
            "device": self.device_name,
            "samples": self.samples,
            "threshold": self.threshold,
            "seed": self.seed,
            "tolerance": self.rule().as_dict(),
            "stop_when_decided": self.stop_when_decided,
        }
        if self.weights_seed is not None or self.data_seed is not None:  # set apart: say which seed drew what
            out.update(weights_seed=self.weights_seed_used, data_seed=self.data_seed_used)
        return out
