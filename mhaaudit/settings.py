"""The run settings, resolved once at the edge (CLI or API call) and passed down; the one seed rule.

A :class:`Settings` holds what every part of a run must agree on: the ``torch.device`` (resolved
from ``auto``/``cpu``/``cuda``/``cuda:N`` here and never again below), the rank rule's tolerances
(the :class:`~mhaaudit.numerics.RankRule` for features of a given dtype is built from them), the
Monte-Carlo draw count and threshold, whether a test may stop once its verdict is settled, and the
seed.

The seed rule
-------------
Every random choice of a run derives from the one user seed through :func:`derive_seed`:

    derive_seed(seed, purpose, *index)
      = SeedSequence([seed mod 2^64, crc32(purpose), *index]).generate_state(1, uint64)[0]

``purpose`` names the consumer and ``index`` numbers its parts. The purposes used are:

- ``"model-init"``: random initialisation of a model's weights (``index``: none outside the blocks; k for block k)
- ``"data"``: the built-in images, text example construction and sampling of data
- ``"random-attention"``: the frozen random attention head of the paper's Table 1
- ``"draws"``: Monte-Carlo block ``b`` of a Kruskal test or sweep (``index``: ``b``); the result is
  the 64-bit key of the counter-based generator ``numerics.philox`` whose stream r gives the
  block's draw r, identically on every device (``kruskal.sampling.draw_blocks``)
- ``"labels"``: the random labels of the capacity certificate
- ``"memorize"``: a synthetic memorisation point (``index``: none; every point starts from the same stream)

Different purposes get independent streams, so adding a consumer never shifts another's numbers,
and a part's stream does not depend on how many parts run or in which order.

The weights seed and the data seed
----------------------------------
The random weights (``"model-init"``, ``"random-attention"``) derive from the *weights seed*
and the data (``"data"``) from the *data seed*. Both are the run's seed unless set apart
(``Settings.weights_seed`` / ``Settings.data_seed``, the CLI's ``--weights-seed`` /
``--data-seed``), so a run that sets neither draws exactly what it always drew; the Monte-Carlo
draws, labels and memorisation points always derive from the run's seed. Setting one apart holds
that randomness fixed while the other moves (``mhaaudit.seeds``). Trained weights have no
weights seed.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from . import validate
from .defaults import DEFAULT_DEVICE, DEFAULT_SAMPLES, DEFAULT_SEED, DEFAULT_THRESHOLD
from .errors import InputError, Param
from .numerics.rule import RankRule

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

# The draws are made in blocks and counted, never held, so their number sizes no allocation; the
# counts and fractions are exact in float64 up to 2^53 draws, the most a test takes.
MAX_SAMPLES = 2**53
# Seeds are stored as 64-bit signed integers (parquet, JSON readers): 0 to 2^63 - 1.
MAX_SEED = 2**63 - 1
PURPOSES = ("model-init", "data", "random-attention", "draws", "labels", "memorize")


def derive_seed(seed: int, purpose: str, *index: int) -> int:
    """The seed of ``purpose`` (part ``index``) under the user seed ``seed``: a 64-bit integer.

    See the module docstring for the rule and the purposes. The result is accepted by
    ``torch.Generator.manual_seed`` and ``numpy.random.default_rng``.

    Raises:
        ValueError: when ``purpose`` is not one of :data:`PURPOSES` (a bug: purposes are the code's, not the user's).
    """
    if purpose not in PURPOSES:
        raise ValueError(f"unknown seed purpose {purpose!r}; known: {', '.join(PURPOSES)}")
    key = [int(seed) % 2**64, zlib.crc32(purpose.encode())] + [int(i) % 2**64 for i in index]
    return int(np.random.SeedSequence(key).generate_state(1, np.uint64)[0])


def resolve_device(spec: str | torch.device | None = DEFAULT_DEVICE) -> torch.device:
    """Turn ``auto``/``cpu``/``cuda``/``cuda:N`` into a ``torch.device``.

    ``auto`` picks the first CUDA device when one is available, else the CPU. Asking for CUDA
    on a machine without it is an error, not a silent fallback. A ``torch.device`` is returned as it is.

    Raises:
        InputError: when ``spec`` is empty or names no device, or names CUDA on a machine without it, or a CUDA
            index past the devices present.
    """
    if isinstance(spec, torch.device):
        return spec
    if isinstance(spec, str) and not spec.strip():
        raise InputError(Param("device") + " is empty (use auto, cpu, cuda or cuda:N)")
    spec = (spec or DEFAULT_DEVICE).strip().lower()
    if spec == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError(
                Param("device") + f" {spec} was asked for but no CUDA device is available; "
                "use " + Param("device") + " cpu or auto"
            )
        try:
            dev = torch.device(spec)
        except RuntimeError as exc:  # e.g. "cuda:x"
            raise InputError(f"not a device: {spec!r} (use auto, cpu, cuda or cuda:N)") from exc
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InputError(Param("device") + f" {spec}: only {torch.cuda.device_count()} CUDA device(s) present")
        return dev
    raise InputError(f"not a device: {spec!r} (use auto, cpu, cuda or cuda:N)")


KERNELS_ENV = "MHAAUDIT_KERNELS"  # "torch": the batched device kernels decide on the CPU too
DECODE_WORKERS_ENV = "MHAAUDIT_DECODE_WORKERS"  # threads that decode images
MAX_DECODE_WORKERS = 256


def kernels_env() -> str:
    """``$MHAAUDIT_KERNELS``: "" (unset: the kernels follow the device) or "torch"; anything else is refused.

    Raises:
        InputError: when the variable is set to anything but ``torch`` (any case, blanks around it allowed).
    """
    raw = os.environ.get(KERNELS_ENV, "")
    value = raw.strip().lower()
    if value not in ("", "torch"):
        raise InputError(f"{KERNELS_ENV}={raw!r}: set it to torch (the batched kernels on the CPU too) or unset it")
    return value


def decode_workers_env() -> int | None:
    """``$MHAAUDIT_DECODE_WORKERS``: a whole number of threads from 1 to 256, or None when unset.

    Raises:
        InputError: when the variable is set (not blank) to anything but a whole number from 1 to 256.
    """
    raw = os.environ.get(DECODE_WORKERS_ENV, "")
    if not raw.strip():
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_DECODE_WORKERS:
        raise InputError(
            f"{DECODE_WORKERS_ENV}={raw!r}: give a whole number of threads from 1 to {MAX_DECODE_WORKERS}, or unset it"
        )
    return value


def check_environment() -> None:
    """Refuse, before any work, a setting of mhaaudit's environment variables that means nothing.

    Raises:
        InputError: from :func:`kernels_env` or :func:`decode_workers_env`.
    """
    kernels_env()
    decode_workers_env()


def device_name(device: torch.device) -> str:
    """A human description of a device, for reports and file metadata."""
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{idx} ({torch.cuda.get_device_name(idx)})"
    return "cpu"


def _seed(name: str) -> Callable[[Any], int]:
    return lambda value: validate.integer(Param(name), value, minimum=0, maximum=MAX_SEED)


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
    "stop_when_decided": bool,
    "progress": bool,
    "weights_seed": _optional(_seed("weights_seed")),
    "data_seed": _optional(_seed("data_seed")),
}


@dataclass(frozen=True)
class Settings:
    """What every consumer of a run agrees on; build it with :meth:`resolve`.

    ``rtol``/``atol`` are the user's tolerances (None: the paper's rule); :meth:`rule` turns them
    into the rank rule for features of a dtype, the same rule for Assumptions 1, 2, 3 and General
    Position. ``stop_when_decided`` lets a Monte-Carlo test stop once its verdict cannot change.
    Every field is checked and normalised where the object is made (InputError), the device
    resolved from ``auto``/``cpu``/``cuda``/``cuda:N`` (an unavailable device is an input error).
    """

    device: torch.device
    samples: int = DEFAULT_SAMPLES
    threshold: float = DEFAULT_THRESHOLD
    seed: int = DEFAULT_SEED
    rtol: float | None = None
    atol: float | None = None
    stop_when_decided: bool = False
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
