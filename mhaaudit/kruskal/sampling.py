"""The Monte-Carlo draws and the Gram matrices they are decided from.

* ``draw_blocks``: the seeded draws, in fixed blocks of ``DRAW_BLOCK``; row r of block b is
  stream r of the counter-based generator ``numerics.philox`` keyed by
  ``derive_seed(seed, "draws", b)``, so the draws for a seed never depend on batch sizes, worker
  count, number of processes, device or how many samples are asked for (a prefix of a longer run
  is the shorter run), and are drawn where they are decided (bit-identical on the CPU and on
  CUDA). The draws are uniform k-subsets; which subsets are drawn is random, so every fraction
  computed from them is an estimate.
* ``blocks_in_order``: processes those blocks in parallel and yields them in block order; under
  torchrun the ranks divide the groups of blocks (``units``) among them and gather each round's
  results, so every rank sees every block's result, in order, as one process does.
* ``Gram``: Gram matrices of row subsets, gathered from the full T x T float64 Gram (formed once
  on the device) when it takes at most ``FULL_GRAM_MAX_BYTES`` on the CPU or
  ``DEVICE_FULL_GRAM_MAX_BYTES`` on a GPU, else computed per draw from the draw's own rows,
  gathered where the features lie (``per-draw``: in memory, in their own dtype; ``mmap``: from a
  memory-mapped file) and converted to float64 then: no float64 copy of the whole set, O(k d +
  k^2) per draw in flight. The route is reported with each result; every route gives the same
  draws, decisions and witnesses. Drawing a k-subset (k <= T / 2) costs O(k log k), whatever T. Draws are
  decided by the CPU LAPACK kernels or by the batched torch kernels (``device_kernels``: any
  device but the CPU, or the CPU under ``MHAAUDIT_KERNELS=torch``), which then take as many
  blocks per call as ``DEVICE_BATCH_BYTES`` allows.
* ``as_matrix``: the one check of a T x d feature matrix (a tensor, or an ``io.MappedArray``);
  ``rows_of``: its rows where they lie (``numerics.stream.Rows``).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .. import distributed, validate
from ..collectives import RankFailed
from ..defaults import DEFAULT_DEVICE, DEFAULT_SAMPLES, DEFAULT_SEED, DEFAULT_STOP_WHEN_DECIDED, DEFAULT_THRESHOLD
from ..errors import InputError, Param
from ..mapped import MappedArray
from ..numerics import RankRule, lapack, numerics, philox, subnormals_kept, tf32_off
from ..numerics.philox import split_key
from ..numerics.stream import Rows, Unit, chunk_rows, nonfinite_message, refuse_unless_fits, scan_of
from ..numerics.threads import intra_op_threads
from ..runtime import KERNELS_ENV, MAX_SAMPLES, checked_seed, derive_seed, kernels_env, resolve_device
from ..tensor_values import dense_values
from ..workers import worker_pool

__all__ = [
    "DEVICE_BATCH_BYTES",
    "DEVICE_FULL_GRAM_MAX_BYTES",
    "DRAW_BLOCK",
    "FULL_GRAM_MAX_BYTES",
    "KERNELS_ENV",
    "Draws",
    "Gram",
    "Progress",
    "Sampling",
    "Units",
    "as_matrix",
    "block_specs",
    "blocks_in_order",
    "decided_in_order",
    "device_kernels",
    "draw_block",
    "draw_blocks",
    "full_gram_bytes",
    "rows_of",
    "units",
]

DRAW_BLOCK = 64  # draws come in fixed blocks, each with its own generator key
FULL_GRAM_MAX_BYTES = 512 << 20  # on the CPU the full T x T float64 Gram is formed up to this size (T <= 8192)
DEVICE_FULL_GRAM_MAX_BYTES = 2 << 30  # on a GPU, up to this size (T <= 16384)
DEVICE_BATCH_BYTES = 2 << 30  # one batched call of the device kernels holds this much (on a GPU: or 1/8 of its memory)

Progress = Callable[[int], None]


def checked_progress(progress) -> Progress | None:
    """A progress callback as a caller gave it: None or a callable.

    Raises:
        InputError: when it is neither.
    """
    if progress is not None and not callable(progress):
        raise InputError(Param("progress") + f" must be a callable taking a number of draws, or None; got {progress!r}")
    return progress


FLOAT8_DTYPES = frozenset(getattr(torch, name) for name in dir(torch) if name.startswith("float8_"))
_FLOATS = frozenset({torch.float64, torch.float32, torch.float16, torch.bfloat16}) | FLOAT8_DTYPES
_EXACT_INT = 2**53  # every integer of at most this magnitude is a float64


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def as_matrix(X):
    """Validate a T x d feature matrix and apply the dtype policy; returns a tensor, or a
    memory-mapped file unchanged (``io.MappedArray``: its entries are checked by the streaming
    pass, ``numerics.stream.scan``, which is remembered for the statistics and the draws that follow).

    Only what converts to float64 exactly is taken, never cast with a loss:

    * real floating dtypes (float64, float32, float16, bfloat16, the float8 formats) are kept as
      they are: every rank computation converts them to float64, which is exact for all of them
      (``numerics.to_float64``), and the rank rule takes the eps of this dtype (the default rule is
      refused for the float8 formats: ``bounds.fixed_rule``);
    * integers and booleans are converted to float64 here (exactly: an int64 or uint64 value of
      magnitude above 2^53 is refused), and the rule takes float64's eps;
    * complex dtypes are refused: independence is decided over the reals, and keeping the real
      part would prove false things. So is anything else.

    Raises:
        InputError: when X is not a tensor or array, is a meta, sparse, nested or quantized tensor, is not
            2-D, has no rows or no columns, is complex or not numeric, holds integers beyond 2^53 or NaN or
            Inf values, or (a mapped file) needs more memory besides the file than the system has available.
    """
    if isinstance(X, MappedArray):
        if X.ndim != 2:
            raise InputError(f"expected a T x d matrix, got an array of shape {tuple(X.shape)}")
        if X.shape[0] < 1 or X.shape[1] < 1:
            raise InputError(f"empty feature matrix of shape {tuple(X.shape)}")
        refuse_unless_fits(X.shape[0], X.shape[1], str(X.path))
        scan_of(rows_of(X))  # NaN or Inf: an input error, before any work
        return X
    if isinstance(X, np.ndarray):
        if X.dtype.kind == "c":
            raise InputError(
                f"complex features ({X.dtype}) are not supported: linear independence is decided over "
                "the reals, and dropping the imaginary part would prove false things; give real features"
            )
        if X.dtype.kind not in "fiub":
            raise InputError(f"features of dtype {X.dtype} are not numeric")
        if X.dtype.kind == "f" and X.dtype.itemsize > 8:  # torch has no long double, nor float64 its values
            raise InputError(
                f"features of dtype {X.dtype} (extended precision) have values float64 cannot hold exactly, and "
                "every rank computation is in float64; give them as float64"
            )
        X = torch.from_numpy(np.ascontiguousarray(X))
    if not isinstance(X, torch.Tensor):
        raise InputError(f"features must be a tensor or array, not {type(X).__name__}")
    dense_values(X, "features")  # a meta tensor has no values; a sparse or quantized one is not a matrix of them
    if X.requires_grad:  # a model's parameter is read as its values (others stay the caller's own object)
        X = X.detach()
    if X.ndim != 2:
        raise InputError(f"expected a T x d matrix, got an array of shape {tuple(X.shape)}")
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise InputError(f"empty feature matrix of shape {tuple(X.shape)}")
    if X.dtype.is_complex:
        raise InputError(
            f"complex features ({_dtype_name(X.dtype)}) are not supported: linear independence is "
            "decided over the reals, and dropping the imaginary part would prove false things; give "
            "real features"
        )
    if X.dtype.is_floating_point and X.dtype not in _FLOATS:  # float4, packed two to a byte: torch converts it not
        raise InputError(
            f"features of dtype {_dtype_name(X.dtype)} are not supported (only float64, float32, float16, bfloat16 and "
            "the float8 formats convert to float64 exactly here); give features of one of those"
        )
    if not X.dtype.is_floating_point:
        X = _exact_float64(X)
    step = chunk_rows(X.shape[1])  # a chunk at a time: no T x d mask
    wide = X.dtype in FLOAT8_DTYPES  # exact; isfinite lacks some float8 kernels
    for s in range(0, X.shape[0], step):
        if not bool(torch.isfinite(X[s : s + step].to(torch.float64) if wide else X[s : s + step]).all()):
            raise InputError(nonfinite_message(X[s : s + step].detach().to("cpu", torch.float64).numpy(), s))
    return X


def rows_of(X) -> Rows:
    """The rows of a validated feature matrix where they lie (``numerics.stream.Rows``)."""
    if isinstance(X, MappedArray):
        return Rows(X.array, mapped=True)
    return Rows(X)


def _exact_float64(X: torch.Tensor) -> torch.Tensor:
    """Integer or boolean features as float64, exactly, or an input error.

    Raises:
        InputError: when an int64 or uint64 value exceeds 2^53 in magnitude, or torch cannot
            convert the dtype.
    """
    if X.dtype == torch.bool:
        return X.to(torch.float64)
    try:
        wide = X.dtype in (torch.int64, getattr(torch, "uint64", torch.int64))
        if wide:
            big = X.to(torch.int64) if X.dtype == torch.int64 else None
            if big is None or bool(((big > _EXACT_INT) | (big < -_EXACT_INT)).any()):
                if big is None:  # uint64: compare in NumPy, which has the type
                    if bool((X.numpy() > np.uint64(_EXACT_INT)).any()):
                        raise InputError(
                            f"features of dtype {_dtype_name(X.dtype)} hold values beyond 2^53, which "
                            "float64 cannot represent exactly; rescale them or give floating features"
                        )
                else:
                    raise InputError(
                        f"features of dtype {_dtype_name(X.dtype)} hold values beyond 2^53, which "
                        "float64 cannot represent exactly; rescale them or give floating features"
                    )
        return X.to(torch.float64)
    except (RuntimeError, TypeError) as exc:
        raise InputError(f"features of dtype {_dtype_name(X.dtype)} are not supported ({exc})") from None


def full_gram_bytes(T: int) -> int:
    """The memory the full T x T float64 Gram matrix takes."""
    return 8 * int(T) * int(T)


def device_kernels(device: torch.device) -> bool:
    """Are draws decided by the batched torch kernels (``numerics.certificates``) rather than the
    CPU LAPACK kernels (``numerics.lapack``)? On any device but the CPU; on the CPU when the
    environment sets ``MHAAUDIT_KERNELS=torch`` (how the test suite checks the GPU route draw by
    draw on a machine without one) or when SciPy's LAPACK API is missing. Decisions are the same
    either way."""
    return device.type != "cpu" or kernels_env() == "torch" or not lapack.available()


class Gram:
    """Gram matrices of row subsets, by one of three routes (``route``):

    * "full": the rows rescaled to float64 and their full T x T Gram, formed once on the device,
      when it takes at most ``FULL_GRAM_MAX_BYTES`` (CPU) or ``DEVICE_FULL_GRAM_MAX_BYTES`` (GPU);
    * "per-draw": past that, each draw's Gram computed from its own rows, gathered from the
      features as they are held in memory (their own dtype) and converted to float64 then;
    * "mmap": the same, the rows gathered from a memory-mapped file (only the pages of the rows
      drawn are read).

    Either way every decision is the same; only time and memory differ. The rows' squared norms
    and their projections on one direction (``proj``) come from the streaming pass
    (``numerics.stream.scan``), the same on every route. ``X``: a ``stream.Unit`` (the rows and
    their power of two) or an already rescaled float64 matrix. ``batched``: whether the batched
    torch kernels decide (:func:`device_kernels`)."""

    def __init__(self, X, device: torch.device):
        unit = X if isinstance(X, Unit) else Unit(Rows(X), 0, RankRule())
        device = torch.device(device)
        src = unit.src
        self.T, self.d = src.T, src.d
        self.device = device
        self.batched = device_kernels(device)
        sc = scan_of(src)
        shift = sc.exponent - unit.exponent  # 0 unless X came rescaled already
        with subnormals_kept():
            self._proj = np.ldexp(sc.proj, shift) if shift else sc.proj
            self._sqn = np.ldexp(sc.sqn, 2 * shift) if shift else sc.sqn
        self.full = self.X = None
        budget = FULL_GRAM_MAX_BYTES if device.type == "cpu" else DEVICE_FULL_GRAM_MAX_BYTES
        if full_gram_bytes(self.T) <= budget:
            self.X = unit.materialize(device)
            if device.type == "cpu":  # NumPy's X @ X.T is one symmetric rank-k update (syrk)
                Xn = self.X.numpy()
                self.full = torch.from_numpy(Xn @ Xn.T)
            else:
                self.full = self.X @ self.X.T
            self.route = "full"
        else:
            self.unit = Unit(src.to(device), unit.exponent, unit.rule, unit.atol)
            self.route = "mmap" if src.mapped else "per-draw"

    @property
    def cpu_entries(self):
        """The Gram entries for the LAPACK kernels when they decide (the rows on the CPU): read from
        the full Gram, or computed per draw from the rows; None when the batched kernels decide."""
        if self.batched:
            return None
        if self.full is None:
            return lapack.RowGramEntries(take=lambda s: self.unit.rows(s).numpy(), T=self.T, sqn=self._sqn)
        return lapack.FullGramEntries(self.full.numpy().reshape(-1), self.T)

    @property
    def proj(self) -> np.ndarray:
        """Projections of the rows on one unit vector (the top right singular direction of the first
        chunk of the streaming pass). For any subset S and unit vector u,
        sigma_max(X_S)^2 >= ||X_S u||^2: any u gives a valid lower bound, a top direction a tight
        one on data with a dominant direction."""
        return self._proj

    @functools.cached_property
    def proj_t(self) -> torch.Tensor:
        """``proj`` as a float64 tensor on the rows' device."""
        return torch.from_numpy(self._proj).to(self.device)

    def blocks_per_call(self, k: int, mats: int) -> int:
        """Blocks of draws one batched call takes: as many as fit ``DEVICE_BATCH_BYTES`` with
        ``mats`` float64 k x k matrices per draw (plus its k x d rows on the per-draw routes)."""
        per_draw = 8 * (mats * k * k + (k * self.d if self.full is None else 0))
        budget = DEVICE_BATCH_BYTES
        if self.device.type == "cuda":  # a large GPU takes larger batches: an eighth of its memory
            budget = max(budget, torch.cuda.get_device_properties(self.device).total_memory // 8)
        return max(1, budget // (DRAW_BLOCK * per_draw))

    def sub(self, idx: torch.Tensor) -> torch.Tensor:
        """The float64 Gram matrices of the row subsets ``idx`` (b x k indices): b x k x k, on the device."""
        if self.full is not None:  # one flat gather: about twice as fast as 2-D advanced indexing
            b, k = idx.shape
            lin = (idx[:, :, None] * self.T + idx[:, None, :]).reshape(-1)
            return torch.index_select(self.full.reshape(-1), 0, lin).reshape(b, k, k)
        rows = self.rows(idx)
        return rows @ rows.transpose(-1, -2)

    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        """The rescaled float64 rows ``idx``, on the device."""
        if self.X is not None:
            return self.X[idx]
        return self.unit.rows(idx).to(self.device)

    def set_rows(self, idx: torch.Tensor) -> torch.Tensor:
        """The rows of the set ``idx`` (its last dimension) in increasing index order: an exact decision (an SVD)
        is made on a set's rows in one order whatever order they were drawn in, so a set is decided alike by
        every test (within rounding of the tolerance the computed singular values depend on the row order)."""
        return self.rows(idx.sort(dim=-1).values)


def draw_block(
    T: int, k: int, seed: int, block: int, size: int, sort: bool, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Block ``block`` of the draws for ``seed``: ``size`` rows of k distinct row indices (:func:`draw_blocks`)."""
    return draw_blocks(T, k, seed, [(block, size)], sort, device)


def draw_blocks(T: int, k: int, seed: int, group, sort: bool, device: torch.device | str = "cpu") -> torch.Tensor:
    """The draws of the blocks ``group`` (``(block, size)`` pairs), one after another, on ``device``.

    Row r of block b is a stream of the counter-based generator ``numerics.philox`` under the key
    ``derive_seed(seed, "draws", b)`` (the one seed rule of ``mhaaudit.settings``), stream number
    r: a pure function of (seed, b, r), bit-identical on every device, whatever the batch, the
    thread count or the number of processes (a prefix of a longer run is the shorter run). Each
    row is a uniformly random k-subset of the T rows in uniformly random order (a random
    ordering's prefixes for the sweep), or sorted (``sort``: a subset is a set, and sorted
    indices make the Gram gather cache-friendly):

    * k <= T / 2: the first k distinct values of the stream's uniform integers below T
      (``philox.bounded``), in order of first appearance; by symmetry they are a uniformly random
      ordered k-subset. About k + k^2 / 2T values are read (``_candidates``: more if needed).
    * k > T / 2: the k largest of T distinct random sort keys (``philox.sort_keys``), in order.

    Both are uniform up to the generator's 64-bit resolution (deviations below T^2 2^-64).
    """
    device = torch.device(device)
    keys = [split_key(derive_seed(seed, "draws", b)) for b, _ in group]
    sizes = [size for _, size in group]
    k0 = torch.tensor(
        [w[0] for w, n in zip(keys, sizes, strict=False) for _ in range(n)], dtype=torch.int64, device=device
    )
    k1 = torch.tensor(
        [w[1] for w, n in zip(keys, sizes, strict=False) for _ in range(n)], dtype=torch.int64, device=device
    )
    stream = torch.cat([torch.arange(n, dtype=torch.int64) for n in sizes]).to(device)
    width = _candidates(T, k) if 2 * k <= T else T  # working entries per row: independent of T for k <= T / 2
    step = max(1, _DRAW_ELEMENTS // width)  # rows drawn at once
    return torch.cat(
        [
            _draw_rows(k0[i : i + step], k1[i : i + step], stream[i : i + step], T, k, sort)
            for i in range(0, stream.shape[0], step)
        ]
    )


_DRAW_ELEMENTS = 1 << 24  # at most this many int64 working entries (128 MiB) while drawing


def _draw_rows(k0: torch.Tensor, k1: torch.Tensor, stream: torch.Tensor, T: int, k: int, sort: bool) -> torch.Tensor:
    """The draws of the streams given (``draw_blocks``)."""
    if 2 * k <= T:
        out = _first_distinct(k0, k1, stream, T, k)
        return out.sort(dim=1).values if sort else out
    hi, lo = philox.pairs(k0, k1, stream, 0, T)
    keyed = philox.sort_keys(
        hi, lo, torch.arange(T, dtype=torch.int64, device=stream.device), max(1, (T - 1).bit_length())
    )
    if sort:
        return keyed.topk(k, dim=1, sorted=False).indices.sort(dim=1).values
    return keyed.topk(k, dim=1).indices


@functools.lru_cache(maxsize=64)
def _candidates(T: int, k: int) -> int:
    """Values of a stream read at first to find k distinct ones below T: the mean of that count
    plus six standard deviations (it is a sum of geometric variables), even."""
    mean = sum(T / (T - i) for i in range(k))
    var = sum(T * i / (T - i) ** 2 for i in range(k))
    m = math.ceil(mean + 6 * math.sqrt(var)) + 4
    return m + (m & 1)


def _first_distinct(k0: torch.Tensor, k1: torch.Tensor, stream: torch.Tensor, T: int, k: int) -> torch.Tensor:
    """For each stream, its first k distinct uniform integers below T, in order of first appearance.

    Reads ``_candidates(T, k)`` values of every stream (memory and time O(k log k) a stream, not
    O(T)); the rare stream with fewer than k distinct
    among them is read further (twice as far each time: the values read before are the same), so
    the result never depends on how far streams were read. Returns N x k int64 indices.

    Raises:
        RuntimeError: when a stream still lacks k distinct values after 64 T reads (probability
            far below 2^-64).
    """
    N = stream.shape[0]
    out = torch.empty(N, k, dtype=torch.int64, device=stream.device)
    todo = torch.arange(N, device=stream.device)
    m = _candidates(T, k)
    while todo.numel():
        if m > 64 * T:  # pragma: no cover - probability far below 2^-64
            raise RuntimeError("the draw generator found too few distinct values")
        cand = philox.bounded(*philox.pairs(k0[todo], k1[todo], stream[todo], 0, m), T)
        # where each value first appears: a stable sort puts a value's first appearance first among
        # its copies (no T-sized table: the cost is that of the m values read, whatever T)
        vals, order = torch.sort(cand, dim=1, stable=True)
        head = torch.ones_like(vals, dtype=torch.bool)
        head[:, 1:] = vals[:, 1:] != vals[:, :-1]
        new = torch.empty_like(head).scatter_(1, order, head)
        ok = new.sum(1) >= k
        keep = new[ok] & (new[ok].cumsum(1) <= k)  # the first k first appearances, in order
        out[todo[ok]] = cand[ok][keep].reshape(-1, k)
        todo = todo[~ok]
        m *= 2
    return out


def block_specs(samples: int) -> list[tuple[int, int]]:
    """``(block, size)`` for each block of ``samples`` draws: full blocks of ``DRAW_BLOCK``, then the rest."""
    return [(block, min(DRAW_BLOCK, samples - start)) for block, start in enumerate(range(0, samples, DRAW_BLOCK))]


class Units(Sequence):
    """The groups of blocks of ``samples`` draws (:func:`units`), each made when it is asked for: the
    memory they take does not grow with the number of draws. Groups of ``step`` blocks; with ``first``,
    the first group has ``first`` blocks and each next one twice as many, until they reach ``step``."""

    def __init__(self, samples: int, step: int, first: int | None = None):
        self.samples, self.step = int(samples), int(step)
        self.blocks = -(-self.samples // DRAW_BLOCK)
        self.starts = [0]  # where the growing groups start, and where the groups of ``step`` blocks begin
        size = max(1, min(int(first or self.step), self.step))
        while size < self.step and self.starts[-1] < self.blocks:
            self.starts.append(min(self.blocks, self.starts[-1] + size))
            size *= 2

    def __len__(self) -> int:
        grown = len(self.starts) - 1
        return grown + -(-(self.blocks - self.starts[-1]) // self.step)  # ceiling divisions of non-negative counts

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        grown = len(self.starts) - 1
        if i < grown:
            first, end = self.starts[i], self.starts[i + 1]
        else:
            first = self.starts[-1] + (i - grown) * self.step
            end = min(first + self.step, self.blocks)
        return [(b, min(DRAW_BLOCK, self.samples - b * DRAW_BLOCK)) for b in range(first, end)]


def units(samples: int, workers: int, per_call: int | None = None, first: int | None = None) -> Units:
    """The blocks of ``samples`` draws grouped as one ``job`` call takes them: ``per_call`` blocks
    (default: four for one caller, one for a pool of worker threads), the first group ``first`` blocks
    and each next twice as many up to ``per_call`` when given (a consumer that may stop early decides
    no more than it may need). Results never depend on the grouping (a test that stops early stops at
    a block, whatever the group); the processes of a torchrun job must group alike, as they divide
    the groups among them. The groups are made as they are reached, so the number of draws sizes no
    allocation."""
    return Units(samples, per_call or (4 if workers <= 1 else 1), first)


@dataclass(frozen=True)
class Sampling:
    """How a Monte-Carlo test draws and decides (:func:`~.fixed.subset_test`, :func:`~.sweep.kruskal_sweep`):
    ``samples`` draws under ``seed``, the verdict's ``threshold``, the rank ``rule`` (None: the
    paper's rule for the data's dtype), the ``device`` that decides them, and whether a test stops
    once its verdict cannot change (``stop_when_decided``; a sweep makes every draw).

    Checked on construction (InputError): ``samples`` is a whole number from 1 to 2^53, ``threshold`` a
    fraction, ``seed`` a whole number from 0 to 2^63 - 1; ``device`` (``auto``/``cpu``/``cuda``/``cuda:N``)
    is resolved to a ``torch.device``.
    """

    samples: int = DEFAULT_SAMPLES
    threshold: float = DEFAULT_THRESHOLD
    seed: int = DEFAULT_SEED
    rule: RankRule | None = None
    device: Any = DEFAULT_DEVICE  # a torch.device once made
    stop_when_decided: bool = DEFAULT_STOP_WHEN_DECIDED

    def __post_init__(self) -> None:
        object.__setattr__(self, "samples", validate.integer(Param("samples"), self.samples, maximum=MAX_SAMPLES))
        object.__setattr__(self, "threshold", validate.fraction(Param("threshold"), self.threshold))
        object.__setattr__(self, "seed", checked_seed(self.seed))
        object.__setattr__(self, "device", resolve_device(self.device))
        object.__setattr__(self, "stop_when_decided", validate.flag(Param("stop_when_decided"), self.stop_when_decided))
        if self.rule is not None:  # None: the paper's rule for the data's dtype, fixed when the data are known
            RankRule.checked(self.rule)


@dataclass(frozen=True)
class Draws:
    """Which seeded draws: ``samples`` draws of ``k`` of the ``T`` rows under ``seed``, each sorted
    (``sort``: a subset) or in the order drawn (an ordering: the sweep's nested subsets), made on
    ``device`` (the same draws on every device)."""

    T: int
    k: int
    samples: int
    seed: int
    sort: bool
    device: torch.device | str = "cpu"

    def of(self, group) -> torch.Tensor:
        """The draws of the blocks ``group`` (:func:`draw_blocks`)."""
        return draw_blocks(self.T, self.k, self.seed, group, self.sort, self.device)


def blocks_in_order(job, draws: Draws, workers: int, per_call: int | None = None, first: int | None = None):
    """``job(indices)`` for every group of blocks of the seeded ``draws`` (:func:`units`), yielded in order.

    With several workers each block is drawn and processed by one worker thread (torch with one
    intra-op thread: small factorisations parallelise better across matrices than within
    them), ``workers + 1`` blocks ahead of the consumer. Inside a call every rank of a torchrun job
    makes (:func:`mhaaudit.distributed.lockstep`), rank r runs groups r, r + N, ... and each round's
    results are gathered, so every rank yields every result in the same order as one process: a
    consumer that stops early stops at the same group on every rank (the rest of that round's
    groups are the only extra work).

    Raises:
        RankFailed: when the ranks split the draws into different numbers of groups (different
            thread counts or device kinds).
    """
    groups = units(draws.samples, workers, per_call, first)
    shard = distributed.lockstep()
    n = shard.world_size
    mine = _run_groups(job, (groups[i] for i in range(shard.rank, len(groups), n)), draws, workers)
    try:
        for start in range(0, len(groups), n):
            got = next(mine) if start + shard.rank < len(groups) else None
            parts = shard.all_gather_tensors((len(groups), got))
            if any(count != len(groups) for count, _ in parts):  # the groups follow the thread count
                raise RankFailed(
                    "the processes group their Monte-Carlo draws differently because they run with different "
                    "thread counts or devices; give every process the same OMP_NUM_THREADS and device kind"
                )
            yield from (result for _, result in parts[: len(groups) - start])
    finally:
        mine.close()


def decided_in_order(
    job,
    draws: Draws,
    workers: int,
    per_call: int | None,
    cpu_lapack: bool,
    progress: Progress | None,
    first: int | None = None,
):
    """:func:`blocks_in_order` of the rank decisions ``job`` makes, under their kernels' context
    (TF32 off; one BLAS thread each for the ``cpu_lapack`` kernels, whose workers are the threads),
    telling ``progress`` each group's draws once the consumer has taken the group."""
    with lapack.blas_single_thread() if cpu_lapack else contextlib.nullcontext(), tf32_off():
        for group in blocks_in_order(job, draws, workers, per_call, first):
            yield group
            if progress:
                progress(int(group[0].shape[0]))


def _run_groups(job, groups: Iterable, draws: Draws, workers: int):
    """``job`` on each group of blocks, in order (a pool of ``workers`` threads for one-block groups)."""

    def run(group):
        with numerics():  # flushing subnormals is a per-thread setting
            return job(draws.of(group))

    if workers <= 1:  # one caller (a GPU): larger batches, several blocks per call
        for group in groups:
            yield job(draws.of(group))
        return
    todo = iter(groups)
    # the workers, started inside, take one intra-op thread each
    with intra_op_threads(1), worker_pool(workers, "mhaaudit-draws") as pool:
        pending = deque(pool.submit(run, g) for g in itertools.islice(todo, workers + 1))
        while pending:
            result = pending.popleft().result()
            group = next(todo, None)
            if group is not None:
                pending.append(pool.submit(run, group))
            yield result
