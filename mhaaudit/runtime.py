"""What a run resolves before any work: the one seed rule, the device, mhaaudit's environment variables.

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
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import zlib

import numpy as np
import torch

from . import validate
from .defaults import DEFAULT_DEVICE
from .errors import InputError, Param

__all__ = [
    "MAX_INT64",
    "MAX_SAMPLES",
    "MAX_SEED",
    "PURPOSES",
    "derive_seed",
    "device_name",
    "first_use",
    "resolve_device",
    "warm_up",
]

# The draws are made in blocks and counted, never held, so their number sizes no allocation; the
# counts and fractions are exact in float64 up to 2^53 draws, the most a test takes.
MAX_SAMPLES = 2**53
#: The largest integer a record's 64-bit integer column holds (parquet, JSON readers): seeds, steps.
MAX_INT64 = 2**63 - 1
# Seeds are stored as 64-bit signed integers: 0 to 2^63 - 1.
MAX_SEED = MAX_INT64
PURPOSES = ("model-init", "data", "random-attention", "draws", "labels", "memorize")


def checked_seed(seed, name: str = "seed") -> int:
    """A seed as a caller gave it (``name``: the parameter), as every seed of a run is taken: a whole number from
    0 to :data:`MAX_SEED` (a larger or negative one would be taken modulo 2^64, two seeds giving one set of
    draws, and a fraction cut).

    Raises:
        InputError: when it is not.
    """
    return validate.integer(Param(name), seed, minimum=0, maximum=MAX_SEED)


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


#: The longest a process waits at exit for the thread of :func:`warm_up`
WARM_UP_EXIT_WAIT_S = 10.0


def first_use(device: torch.device) -> None:
    """Make on ``device`` one small float64 call of each linear-algebra library the checks use there, and wait
    for them: a matrix product (the BLAS), a Cholesky factorisation and a triangular solve, singular values,
    eigenvalues and a QR factorisation (the solver library). On a GPU the first call of each makes the
    library's handle and loads its kernels; :func:`warm_up` pays for that while the model libraries are
    imported, not inside the first check that needs it. Nothing is kept."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(2, 24, 16, generator=g, dtype=torch.float64).to(device)
    gram = a.mT @ a + torch.eye(16, dtype=torch.float64, device=device)
    factor, _ = torch.linalg.cholesky_ex(gram)
    torch.linalg.solve_triangular(factor, a.mT, upper=False)
    torch.linalg.svdvals(a)
    torch.linalg.eigvalsh(gram)
    torch.linalg.qr(a[0])
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def warm_up(device: torch.device) -> threading.Thread | None:
    """Start making ``device``'s CUDA context, and the handles and first kernels of its linear-algebra
    libraries (:func:`first_use`), on a helper thread, and return that
    thread; the caller goes on (importing the model libraries, building the model), and the first work it
    queues on the device need not wait for the context. Only for a CUDA device not yet initialised, in a
    process that runs alone (``WORLD_SIZE`` unset or 1: under torchrun each process takes its own device
    later); None otherwise. A failure on the thread is not reported: the first use meets it and says so. A
    process that ends early (a refused option) waits for the thread at exit, at most
    :data:`WARM_UP_EXIT_WAIT_S`, so that CUDA is not torn down under it."""
    try:
        alone = int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1
    except ValueError:
        alone = False
    if device.type != "cuda" or not alone or not torch.cuda.is_available() or torch.cuda.is_initialized():
        return None

    def run() -> None:
        with contextlib.suppress(Exception):  # the first use on the main thread raises it again, with its context
            first_use(device)

    thread = threading.Thread(target=run, name="mhaaudit-cuda-warm-up", daemon=True)
    thread.start()
    atexit.register(thread.join, WARM_UP_EXIT_WAIT_S)
    return thread


def device_name(device: torch.device) -> str:
    """A human description of a device, for reports and file metadata."""
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{idx} ({torch.cuda.get_device_name(idx)})"
    return "cpu"
