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
  ``DEVICE_FULL_GRAM_MAX_BYTES`` on a GPU, else computed per draw from the rows (memory O(T d)
  plus O(k d + k^2) per draw in flight); the route is reported with each result. Draws are
  decided by the CPU LAPACK kernels or by the batched torch kernels (``device_kernels``: any
  device but the CPU, or the CPU under ``MHAAUDIT_KERNELS=torch``), which then take as many
  blocks per call as ``DEVICE_BATCH_BYTES`` allows.
* ``as_matrix``: the one check of a T x d feature matrix.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
from typing import Callable

import numpy as np
import torch

from ..errors import InputError
from ..numerics import lapack, numerics, philox
from ..numerics.philox import split_key
from ..settings import derive_seed

__all__ = ["DRAW_BLOCK", "FULL_GRAM_MAX_BYTES", "Gram", "Progress", "as_matrix", "block_specs", "blocks_in_order",
           "DEVICE_BATCH_BYTES", "DEVICE_FULL_GRAM_MAX_BYTES",
           "KERNELS_ENV", "device_kernels", "draw_block", "draw_blocks", "full_gram_bytes", "units"]

DRAW_BLOCK = 64  # draws come in fixed blocks, each with its own generator key
FULL_GRAM_MAX_BYTES = 512 << 20  # on the CPU the full T x T float64 Gram is formed up to this size (T <= 8192)
DEVICE_FULL_GRAM_MAX_BYTES = 2 << 30  # on a GPU, up to this size (T <= 16384)
DEVICE_BATCH_BYTES = 2 << 30  # one batched call of the device kernels holds this much (on a GPU: or 1/8 of its memory)
KERNELS_ENV = "MHAAUDIT_KERNELS"  # "torch": the batched device kernels decide on the CPU too (tests of the GPU route)

Progress = Callable[[int], None]


FLOAT8_DTYPES = frozenset(getattr(torch, name) for name in dir(torch) if name.startswith("float8_"))
_EXACT_INT = 2**53  # every integer of at most this magnitude is a float64


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def as_matrix(X) -> torch.Tensor:
    """Validate a T x d feature matrix and apply the dtype policy; returns a tensor.

    Only what converts to float64 exactly is taken, never cast with a loss:

    * real floating dtypes (float64, float32, float16, bfloat16, the float8 formats) are kept as
      they are: every rank computation converts them to float64, which is exact for all of them,
      and the rank rule takes the eps of this dtype;
    * integers and booleans are converted to float64 here (exactly: an int64 or uint64 value of
      magnitude above 2^53 is refused), and the rule takes float64's eps;
    * complex dtypes are refused: independence is decided over the reals, and keeping the real
      part would prove false things. So is anything else.
    """
    if isinstance(X, np.ndarray):
        if X.dtype.kind == "c":
            raise InputError(f"complex features ({X.dtype}) are not supported: linear independence is decided over "
                             "the reals, and dropping the imaginary part would prove false things; give real features")
        if X.dtype.kind not in "fiub":
            raise InputError(f"features of dtype {X.dtype} are not numeric")
        X = torch.from_numpy(np.ascontiguousarray(X))
    if not isinstance(X, torch.Tensor):
        raise InputError("features must be a tensor or array")
    if X.ndim != 2:
        raise InputError(f"expected a T x d matrix, got an array of shape {tuple(X.shape)}")
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise InputError(f"empty feature matrix of shape {tuple(X.shape)}")
    if X.dtype.is_complex:
        raise InputError(f"complex features ({_dtype_name(X.dtype)}) are not supported: linear independence is "
                         "decided over the reals, and dropping the imaginary part would prove false things; give "
                         "real features")
    if not X.dtype.is_floating_point:
        X = _exact_float64(X)
    finite = X.to(torch.float64) if X.dtype in FLOAT8_DTYPES else X  # exact; isfinite lacks some float8 kernels
    if not bool(torch.isfinite(finite).all()):
        raise InputError("features contain NaN or Inf values")
    return X


def _exact_float64(X: torch.Tensor) -> torch.Tensor:
    """Integer or boolean features as float64, exactly, or an input error."""
    if X.dtype == torch.bool:
        return X.to(torch.float64)
    try:
        wide = X.dtype in (torch.int64, getattr(torch, "uint64", torch.int64))
        if wide:
            big = X.to(torch.int64) if X.dtype == torch.int64 else None
            if big is None or bool(((big > _EXACT_INT) | (big < -_EXACT_INT)).any()):
                if big is None:  # uint64: compare in NumPy, which has the type
                    if bool((X.numpy() > np.uint64(_EXACT_INT)).any()):
                        raise InputError(f"features of dtype {_dtype_name(X.dtype)} hold values beyond 2^53, which "
                                         "float64 cannot represent exactly; rescale them or give floating features")
                else:
                    raise InputError(f"features of dtype {_dtype_name(X.dtype)} hold values beyond 2^53, which "
                                     "float64 cannot represent exactly; rescale them or give floating features")
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
    return device.type != "cpu" or os.environ.get(KERNELS_ENV, "").strip().lower() == "torch" or not lapack.available()


class Gram:
    """Gram matrices of row subsets: gathered from the full T x T float64 Gram, formed once on the
    device, when it takes at most ``FULL_GRAM_MAX_BYTES`` (CPU) or ``DEVICE_FULL_GRAM_MAX_BYTES``
    (GPU), else computed per draw from the rows (``route``: "full" or "per-draw"). Either way
    every decision is the same; only time and memory differ. ``batched``: whether the batched
    torch kernels decide (:func:`device_kernels`)."""

    def __init__(self, X: torch.Tensor, device: torch.device):
        self.X = X.to(device=device, dtype=torch.float64)
        self.T = int(X.shape[0])
        self.full = None
        self.batched = device_kernels(self.X.device)
        budget = FULL_GRAM_MAX_BYTES if self.X.device.type == "cpu" else DEVICE_FULL_GRAM_MAX_BYTES
        if full_gram_bytes(self.T) <= budget:
            if self.X.device.type == "cpu":  # NumPy's X @ X.T is one symmetric rank-k update (syrk)
                Xn = self.X.numpy()
                self.full = torch.from_numpy(Xn @ Xn.T)
            else:
                self.full = self.X @ self.X.T
        self.route = "full" if self.full is not None else "per-draw"

    @property
    def cpu_entries(self):
        """The Gram entries for the LAPACK kernels when they decide (the rows on the CPU): read from
        the full Gram, or computed per draw from the rows; None when the batched kernels decide."""
        if self.batched:
            return None
        if self.full is None:
            return lapack.RowGramEntries(self.X.numpy())
        return lapack.FullGramEntries(self.full.numpy().reshape(-1), self.T)

    @functools.cached_property
    def proj(self) -> np.ndarray:
        """Projections of the rows on the top right singular direction (power iteration).

        For any subset S and unit vector u, sigma_max(X_S)^2 >= ||X_S u||^2: any u gives a valid
        lower bound, the top direction a tight one on data with a dominant direction.
        """
        X = self.X
        u = X.mean(0)
        if not bool(u.norm() > 0):
            u = X[int(X.norm(dim=1).argmax())]
        for _ in range(30):
            u = X.T @ (X @ u)
            nu = u.norm()
            if not bool(nu > 0):
                break
            u = u / nu
        return (X @ u).cpu().numpy()

    @functools.cached_property
    def proj_t(self) -> torch.Tensor:
        """``proj`` as a float64 tensor on the rows' device."""
        return torch.from_numpy(self.proj).to(self.X.device)

    def blocks_per_call(self, k: int, mats: int) -> int:
        """Blocks of draws one batched call takes: as many as fit ``DEVICE_BATCH_BYTES`` with
        ``mats`` float64 k x k matrices per draw (plus its k x d rows on the per-draw route)."""
        per_draw = 8 * (mats * k * k + (k * self.X.shape[1] if self.full is None else 0))
        budget = DEVICE_BATCH_BYTES
        if self.X.device.type == "cuda":  # a large GPU takes larger batches: an eighth of its memory
            budget = max(budget, torch.cuda.get_device_properties(self.X.device).total_memory // 8)
        return max(1, budget // (DRAW_BLOCK * per_draw))

    def sub(self, idx: torch.Tensor) -> torch.Tensor:
        if self.full is not None:  # one flat gather: about twice as fast as 2-D advanced indexing
            b, k = idx.shape
            lin = (idx[:, :, None] * self.T + idx[:, None, :]).reshape(-1)
            return torch.index_select(self.full.reshape(-1), 0, lin).reshape(b, k, k)
        rows = self.X[idx]
        return rows @ rows.transpose(-1, -2)

    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        return self.X[idx]


def draw_block(T: int, k: int, seed: int, block: int, size: int, sort: bool,
               device: torch.device | str = "cpu") -> torch.Tensor:
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
    k0 = torch.tensor([w[0] for w, n in zip(keys, sizes) for _ in range(n)], dtype=torch.int64, device=device)
    k1 = torch.tensor([w[1] for w, n in zip(keys, sizes) for _ in range(n)], dtype=torch.int64, device=device)
    stream = torch.cat([torch.arange(n, dtype=torch.int64) for n in sizes]).to(device)
    step = max(1, _DRAW_ELEMENTS // T)  # rows drawn at once: O(rows T) working memory
    return torch.cat([_draw_rows(k0[i:i + step], k1[i:i + step], stream[i:i + step], T, k, sort)
                      for i in range(0, stream.shape[0], step)])


_DRAW_ELEMENTS = 1 << 24  # at most this many int64 working entries (128 MiB) while drawing


def _draw_rows(k0: torch.Tensor, k1: torch.Tensor, stream: torch.Tensor, T: int, k: int, sort: bool) -> torch.Tensor:
    """The draws of the streams given (``draw_blocks``)."""
    if 2 * k <= T:
        out = _first_distinct(k0, k1, stream, T, k)
        return out.sort(dim=1).values if sort else out
    hi, lo = philox.pairs(k0, k1, stream, 0, T)
    keyed = philox.sort_keys(hi, lo, torch.arange(T, dtype=torch.int64, device=stream.device),
                             max(1, (T - 1).bit_length()))
    if sort:
        return keyed.topk(k, dim=1, sorted=False).indices.sort(dim=1).values
    return keyed.topk(k, dim=1).indices


@functools.lru_cache(maxsize=64)
def _candidates(T: int, k: int) -> int:
    """Values of a stream read at first to find k distinct ones below T: the mean of that count
    plus six standard deviations (it is a sum of geometric variables), even."""
    mean = sum(T / (T - i) for i in range(k))
    var = sum(T * i / (T - i) ** 2 for i in range(k))
    m = int(math.ceil(mean + 6 * math.sqrt(var))) + 4
    return m + (m & 1)


def _first_distinct(k0: torch.Tensor, k1: torch.Tensor, stream: torch.Tensor, T: int, k: int) -> torch.Tensor:
    """For each stream, its first k distinct uniform integers below T, in order of first appearance.

    Reads ``_candidates(T, k)`` values of every stream; the rare stream with fewer than k distinct
    among them is read further (twice as far each time: the values read before are the same), so
    the result never depends on how far streams were read.
    """
    N = stream.shape[0]
    out = torch.empty(N, k, dtype=torch.int64, device=stream.device)
    todo = torch.arange(N, device=stream.device)
    m = _candidates(T, k)
    while todo.numel():
        if m > 64 * T:  # pragma: no cover - probability far below 2^-64
            raise RuntimeError("the draw generator found too few distinct values")
        cand = philox.bounded(*philox.pairs(k0[todo], k1[todo], stream[todo], 0, m), T)
        pos = torch.arange(m, dtype=torch.int64, device=stream.device).expand_as(cand)
        first = torch.full((cand.shape[0], T), m, dtype=torch.int64, device=stream.device)
        first.scatter_reduce_(1, cand, pos, "amin")  # where each value first appears
        new = first.gather(1, cand) == pos
        ok = new.sum(1) >= k
        keep = new[ok] & (new[ok].cumsum(1) <= k)  # the first k first appearances, in order
        out[todo[ok]] = cand[ok][keep].reshape(-1, k)
        todo = todo[~ok]
        m *= 2
    return out


def block_specs(samples: int) -> list[tuple[int, int]]:
    """``(block, size)`` for each block of ``samples`` draws: full blocks of ``DRAW_BLOCK``, then the rest."""
    return [(block, min(DRAW_BLOCK, samples - start)) for block, start in enumerate(range(0, samples, DRAW_BLOCK))]


def units(samples: int, workers: int, per_call: int | None = None) -> list[list[tuple[int, int]]]:
    """The blocks of ``samples`` draws grouped as one ``job`` call takes them: ``per_call`` blocks
    (default: four for one caller, one for a pool of worker threads). Results never depend on the
    grouping (a test that stops early stops at a block, whatever the group); the processes of a
    torchrun job must group alike, as they divide the groups among them."""
    specs = block_specs(samples)
    step = per_call or (4 if workers <= 1 else 1)
    return [specs[i:i + step] for i in range(0, len(specs), step)]


def blocks_in_order(job, T: int, k: int, samples: int, seed: int, sort: bool, workers: int,
                    device: torch.device | str = "cpu", per_call: int | None = None):
    """``job(indices)`` for every group of blocks of the seeded draws (:func:`units`), yielded in order;
    the draws are made on ``device`` (the same draws on every device).

    With several workers each block is drawn and processed by one worker thread (torch with one
    intra-op thread: small factorisations parallelise better across matrices than within
    them), ``workers + 1`` blocks ahead of the consumer. Inside a call every rank of a torchrun job
    makes (:func:`mhaaudit.distributed.lockstep`), rank r runs groups r, r + N, ... and each round's
    results are gathered, so every rank yields every result in the same order as one process: a
    consumer that stops early stops at the same group on every rank (the rest of that round's
    groups are the only extra work).
    """
    from ..distributed import lockstep

    groups = units(samples, workers, per_call)
    shard = lockstep()
    if shard is None:
        yield from _run_groups(job, groups, T, k, seed, sort, workers, device)
        return
    n = shard.world_size
    mine = _run_groups(job, groups[shard.rank::n], T, k, seed, sort, workers, device)
    try:
        for start in range(0, len(groups), n):
            got = next(mine) if start + shard.rank < len(groups) else None
            parts = shard.all_gather_tensors((len(groups), got))
            if any(count != len(groups) for count, _ in parts):  # the groups follow the thread count
                from ..distributed import RankFailed

                raise RankFailed("the processes group their Monte-Carlo draws differently because they run with different "
                                 "thread counts or devices; give every process the same OMP_NUM_THREADS and device kind")
            yield from (result for _, result in parts[: len(groups) - start])
    finally:
        mine.close()


def _run_groups(job, groups: list, T: int, k: int, seed: int, sort: bool, workers: int, device):
    """``job`` on each group of blocks, in order (a pool of ``workers`` threads for one-block groups)."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    def draws(group) -> torch.Tensor:
        return draw_blocks(T, k, seed, group, sort, device)

    def run(group):
        with numerics():  # flushing subnormals is a per-thread setting
            return job(draws(group))

    if workers <= 1:  # one caller (a GPU): larger batches, several blocks per call
        for group in groups:
            yield job(draws(group))
        return
    todo = iter(groups)
    pool = ThreadPoolExecutor(workers)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pending = deque(pool.submit(run, g) for g in itertools.islice(todo, workers + 1))
        while pending:
            result = pending.popleft().result()
            group = next(todo, None)
            if group is not None:
                pending.append(pool.submit(run, group))
            yield result
    finally:
        torch.set_num_threads(old_threads)
        pool.shutdown(cancel_futures=True)
