"""Feature sets of any size: rows read where they lie, and one streaming pass over the whole set.

* ``Rows``: a T x d matrix kept as it was given (a tensor of any float dtype, or a NumPy array,
  such as the read-only memory map of a ``.npy`` or ``.safetensors`` file). Nothing takes a
  float64 copy of it: ``Rows.take`` gathers the rows of one draw, ``Rows.chunk`` one chunk of
  ``chunk_rows(d)`` rows, each converted to float64 (exact, subnormal entries included:
  ``pow2.to_float64``) only then.
* ``scan``: the one streaming pass, chunk by chunk in row order, with O(d^2 + T) memory (the
  T-vectors are 16 bytes a row): that the entries are finite; the power of two that brings the
  largest entry into [0.5, 1) (``numerics.scale``); the d x d Gram matrix ``X^T X`` of the
  rescaled rows in float64 (a sum of one symmetric product per chunk); the rows' squared norms
  and their projections on one unit vector ``u`` (the top eigenvector of the first chunk's Gram:
  for any subset S, ``sigma_max(X_S) >= ||X_S u||``, whatever u);
  the smallest min(T, d) row norms and the zero rows. Each chunk is rescaled by the largest
  exponent seen so far, and what was accumulated is rescaled (by an exact power of two) when a
  later chunk raises it, so every value is in the units of the whole set's exponent, and the
  result depends only on the data and on ``chunk_rows(d)``, never on where the rows lie. The
  next chunk is read and rescaled on a second thread while the products of this one run, on one
  BLAS thread, so the numbers do not depend on the machine's thread count either.
* ``tsqr``: a second pass, only when the Gram's eigenvalues are too coarse for a decision
  (``kruskal.bounds.set_stats``): the triangular factor R of the rescaled rows by a sequential
  TSQR in float64 (``R^T R = X^T X``), whose singular values are the set's to the accuracy of an
  SVD of the rows.
* ``Unit``: the rows divided by the whole set's power of two, gathered on demand (the lazy form
  of ``scale.Scaled``): the same float64 values as ``scaled(X).X[idx]``, bit for bit.

``scan_of`` keeps the last few scans, so the statistics, the tests and the sweep of one run read
the data once.
"""

from __future__ import annotations

import contextlib
import math
import resource
import sys
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from ..errors import InputError
from ..hostmem import available_memory  # the one cgroup-aware figure (also batching's)
from ..workers import worker_pool
from .checked import NumericalFailure
from .convert import to_float64, torch_dtype_of
from .pow2 import data_tolerance, ldexp
from .rule import RankRule, numerics, subnormals_kept

__all__ = [
    "CHUNK_BYTES",
    "ROW_RANGE_BITS",
    "Rows",
    "Scan",
    "Unit",
    "available_memory",
    "chunk_rows",
    "memory_needed",
    "nonfinite_message",
    "peak_rss_bytes",
    "refuse_unless_fits",
    "scan",
    "scan_of",
    "tsqr",
    "unit_of",
]

CHUNK_BYTES = 32 << 20  # one chunk of the streaming pass holds this many float64 bytes

#: The largest entry of every non-zero row must be at least ``2**-ROW_RANGE_BITS`` of the set's largest entry:
#: divided by the set's power of two, such a row's entries below float64's normal range (which the rank
#: computations flush to zero) are then under 2^-62 of its own largest one, below its rounding. A row smaller
#: than that would become, wholly or in part, a zero row, and the subsets of such rows would be decided wrong:
#: :func:`unit_of` refuses the set.
ROW_RANGE_BITS = 960


def chunk_rows(d: int) -> int:
    """Rows in one chunk of the streaming pass: a function of d alone, so that every place the rows
    lie (memory, a mapped file, a device) is read in the same chunks and gives the same numbers."""
    return max(1, CHUNK_BYTES // (8 * max(1, int(d))))


DRAW_WORKING_BYTES = 256 << 20  # the draws in flight, their Gram matrices and the kernels' buffers (k <= d <= 4096)


def memory_needed(T: int, d: int) -> int:
    """Bytes a run holds besides the rows themselves: the streaming pass's two float64 numbers a row
    (squared norms, projections), its O(d^2) factor and QR workspace, two float64 chunks, and the
    draws in flight."""
    return 16 * int(T) + 4 * 8 * int(d) * int(d) + 2 * CHUNK_BYTES + DRAW_WORKING_BYTES


def nonfinite_message(chunk: np.ndarray, start: int) -> str:
    """Why features holding a NaN or an infinity in ``chunk`` (their rows from row ``start``, as float64) are
    refused, naming the first, so that it can be found in a file of millions of rows."""
    rows, cols = np.nonzero(~np.isfinite(chunk))
    r, c = int(rows[0]), int(cols[0])
    return f"features contain NaN or Inf values (the first at row {start + r}, column {c}: {chunk[r, c]})"


def refuse_unless_fits(T: int, d: int, what: str) -> None:
    """An input error, before any work, when a memory-mapped T x d set needs more memory besides
    its file (``memory_needed``) than the system has available; it names the rows that would fit.

    Raises:
        InputError: when ``memory_needed(T, d)`` exceeds the available memory.
    """
    avail = available_memory()
    need = memory_needed(T, d)
    if need <= avail:
        return
    fit = max(0, (avail - memory_needed(0, d)) // 16)
    raise InputError(
        f"{what}: {T} x {d} rows need about {need / 1e9:.2f} GB of memory besides the mapped file "
        f"(16 bytes a row for the streaming statistics, the O(d^2) factor and the draws), "
        f"but {avail / 1e9:.2f} GB are available: at most {fit} rows of width {d} fit"
    )


def peak_rss_bytes() -> int:
    """The process's peak resident memory so far (mapped file pages it touched included): Linux's
    ``VmHWM``, which, unlike ``ru_maxrss``, does not carry over the peak of the process that
    started this one; ``ru_maxrss`` elsewhere."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


class Rows:
    """A T x d matrix read a set of rows or a chunk at a time (a tensor, or a NumPy array such as a
    read-only memory map). ``mapped``: the rows lie in a file, not in this process's memory."""

    def __init__(self, data, mapped: bool | None = None):
        if isinstance(data, Rows):
            data, mapped = data.data, data.mapped if mapped is None else mapped
        self.data: torch.Tensor | np.ndarray = data
        self.numpy = isinstance(data, np.ndarray)
        self.mapped = bool(mapped if mapped is not None else isinstance(data, np.memmap))
        self.T, self.d = int(data.shape[0]), int(data.shape[1])
        self.dtype = torch_dtype_of(data.dtype) if self.numpy else data.dtype
        self.device = torch.device("cpu") if self.numpy else data.device

    @property
    def shape(self) -> tuple[int, int]:
        """``(T, d)``: the number of rows and their width."""
        return (self.T, self.d)

    def take(self, idx) -> torch.Tensor:
        """The rows ``idx`` (any integer shape, last axis the rows of one draw) as float64, unscaled,
        on the rows' device."""
        if self.numpy:
            flat = np.asarray(idx.cpu() if isinstance(idx, torch.Tensor) else idx, dtype=np.intp).reshape(-1)
            out = torch.from_numpy(np.take(self.data, flat, axis=0).astype(np.float64))
            shape = tuple(idx.shape) if hasattr(idx, "shape") else (len(flat),)
            return out.reshape(*shape, self.d)
        if not isinstance(idx, torch.Tensor):
            idx = torch.as_tensor(idx, dtype=torch.long)
        return to_float64(self.data[idx.to(self.device)])

    def chunk(self, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` as float64 (a copy of that chunk only), on the rows' device."""
        part = self.data[start:stop]
        return torch.from_numpy(np.array(part, dtype=np.float64)) if isinstance(part, np.ndarray) else to_float64(part)

    def to(self, device: torch.device) -> Rows:
        """The rows on ``device`` in their own dtype (a mapped file is copied a chunk at a time)."""
        if device == self.device:
            return self
        if isinstance(self.data, torch.Tensor):  # (not self.numpy)
            return Rows(self.data.to(device), mapped=False)
        out = torch.empty(self.T, self.d, dtype=self.dtype, device=device)
        step = chunk_rows(self.d)
        for s in range(0, self.T, step):
            out[s : s + step] = torch.from_numpy(
                np.array(self.data[s : s + step], dtype=self.data.dtype.newbyteorder("="))
            ).to(device)
        return Rows(out, mapped=False)


@dataclass(frozen=True)
class Scan:
    """What the one streaming pass learnt about the whole set, in the units of ``2**exponent``
    (see the module docstring). ``gram``: d x d, ``X^T X``; ``sqn``,
    ``proj``: each row's squared norm and its projection on ``u``; ``small_norms``: the smallest
    min(T, d) row norms, ascending; ``first_zero``: the first all-zero row, or None; ``one_row``:
    every non-zero row is one and the same row (compared entry by entry, subnormals kept), so the
    set is exactly of rank 1."""

    T: int
    d: int
    exponent: int
    gram: np.ndarray
    sqn: np.ndarray
    proj: np.ndarray
    u: np.ndarray
    small_norms: np.ndarray
    zero_rows: int
    first_zero: int | None
    chunks: int
    one_row: bool = False  # every non-zero row equals one row (and there is one): rank 1 exactly
    too_small: str | None = None  # why no one scale holds every row (``ROW_RANGE_BITS``): ``unit_of`` refuses the set


def _exponent(m: float) -> int:
    return math.frexp(m)[1] if m > 0 else 0


def _ldexp_np(x: np.ndarray, e: int) -> np.ndarray:
    """``x * 2**e`` exactly (two halves, as ``scale.ldexp``), in place where possible."""
    if e == 0:
        return x
    h = e // 2
    x *= math.ldexp(1.0, h)
    x *= math.ldexp(1.0, e - h)
    return x


def scan(rows: Rows) -> Scan:
    """The one streaming pass over ``rows`` (module docstring): O(d^2) float64 for the Gram, one
    float64 chunk at a time, two float64 numbers a row. Raises ``InputError`` on a NaN or Inf entry.
    It runs in the ``numerics`` setting wherever it is called from, so its numbers never depend on
    the caller's, and with one BLAS thread (the numbers never depend on the machine's count either;
    on shared cores a BLAS team that waits for busy cores made the pass several times slower)."""
    with numerics(), _one_blas_thread():
        return _scan(rows)


_BLAS_LOCK = threading.Lock()


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """NumPy's BLAS on one thread for the block (a process-wide setting, restored after)."""
    with _BLAS_LOCK, threadpool_limits(limits=1, user_api="blas"):
        yield


def _times_pow2(x: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``x * 2**e`` in place (``e`` broadcasts against ``x``): one product by ``2**e`` where that is a
    float64 (a product by a power of two is exact, or rounded once where the result is subnormal,
    as ``np.ldexp`` rounds it: the same bits), ``np.ldexp`` where it is not."""
    if e.size and -1074 <= int(e.min()) and int(e.max()) <= 1023:
        return np.multiply(x, np.ldexp(1.0, e), out=x)
    return np.ldexp(x, e, out=x)


@dataclass
class _Chunk:
    """One chunk made ready for the Gram (``_prepare``): its rows divided by ``2**e_run``."""

    start: int
    Cs: np.ndarray
    norms: np.ndarray
    zero: np.ndarray
    e_before: int | None  # the largest exponent before this chunk, and with it
    e_run: int | None


class _Preparer:
    """Reads and rescales the chunks in order (the state: the largest exponent so far); run one
    chunk ahead of the Gram on a second thread, so reading the rows (page faults of a mapped file)
    and the elementwise work overlap the matrix products."""

    def __init__(self, rows: Rows):
        self.rows = rows
        self.e_run: int | None = None
        self.first: np.ndarray | None = None  # the first non-zero row, in the units of e_first
        self.e_first: int | None = None
        self.one_row = True  # every non-zero row so far equals ``first``
        self.top = 0.0  # the largest absolute entry so far
        # the exponent, the row and the largest entry (as text, written while subnormals are kept) of the smallest
        # non-zero row
        self.low: tuple[int, int, str] | None = None

    def __call__(self, s: int, stop: int) -> _Chunk:
        with numerics():  # this thread's own setting, as the caller's
            return self._prepare(s, stop)

    def _prepare(self, s: int, stop: int) -> _Chunk:
        e_before = self.e_run
        with subnormals_kept():  # subnormal entries are converted and rescaled exactly
            C = self.rows.chunk(s, stop).cpu().numpy()  # the one float64 copy of this chunk
            rowmax = np.maximum(C.max(axis=1), -C.min(axis=1))  # NaN and Inf carry through max and min
            if not np.isfinite(rowmax).all():
                raise InputError(nonfinite_message(C, s))
            top = float(rowmax.max())
            self.top = max(self.top, top)
            e_c = _exponent(top) if top > 0 else None  # an all-zero chunk fixes no scale
            if e_c is not None and (self.e_run is None or e_c > self.e_run):
                self.e_run = e_c
            # row norms as ``scale.row_norms``: each row by its own power of two, then back; in place
            er = np.frexp(rowmax)[1][:, None]
            self._keep_lowest(s, rowmax, er[:, 0])
            _times_pow2(C, -er)
            e_use = 0 if self.e_run is None else self.e_run
            norms = np.ldexp(np.sqrt(np.einsum("ij,ij->i", C, C)), er[:, 0] - e_use)
            Cs = _times_pow2(C, er - e_use)  # the chunk divided by 2**e_run (exact: one rounding at most)
            zero = rowmax == 0  # (a subnormal maximum is not zero: compared with subnormals kept)
            self._compare(Cs, zero)
        return _Chunk(s, Cs, norms, zero, e_before, self.e_run)

    def _keep_lowest(self, s: int, rowmax: np.ndarray, er: np.ndarray) -> None:
        """Keep the smallest non-zero row seen so far (by the exponent of its largest entry; the first of equals).
        Called with subnormals kept: a subnormal entry is written as it is, not as 0."""
        nz = np.flatnonzero(rowmax > 0)
        if not nz.size:
            return
        j = nz[int(np.argmin(er[nz]))]
        if self.low is None or int(er[j]) < self.low[0]:
            self.low = (int(er[j]), s + int(j), f"{float(rowmax[j]):.3g}")

    def _compare(self, Cs: np.ndarray, zero: np.ndarray) -> None:
        """Keep ``one_row``: do this chunk's non-zero rows all equal the first non-zero row? (Equal
        rows are rescaled alike, so they stay equal; a larger exponent means a larger entry, so
        rows that differ.)"""
        if not self.one_row:
            return
        if self.first is not None and self.e_run != self.e_first:
            self.one_row = False
            return
        nz = np.flatnonzero(~zero)
        if not nz.size:
            return
        if self.first is None:
            self.first, self.e_first = Cs[nz[0]].copy(), self.e_run
        self.one_row = bool((Cs[nz] == self.first).all())


def _top_direction(G: np.ndarray, d: int) -> np.ndarray:
    """A unit vector: the top eigenvector of the symmetric ``G`` where LAPACK gives a usable one
    (finite, of norm 1 to rounding), else the constant direction. Any unit vector u makes
    ``||X_S u||`` a valid lower bound on sigma_max(X_S); the top one makes it a tight one. Only that
    one eigenvector is computed (LAPACK ``syevr``: a quarter of the time of every eigenvector)."""
    from scipy.linalg import eigh

    flat = np.full(d, 1 / math.sqrt(d))
    flat = flat / np.linalg.norm(flat)
    if not np.abs(G).max() > 0:
        return flat
    try:
        u = eigh(G, subset_by_index=[d - 1, d - 1], driver="evr", check_finite=False)[1][:, 0]
    except (np.linalg.LinAlgError, ValueError):  # pragma: no cover - LAPACK reported no convergence
        return flat
    n = float(np.linalg.norm(u)) if np.isfinite(u).all() else math.nan
    if not abs(n - 1) < 1e-6:  # NaN fails too
        return flat
    return u / n


def _scan(rows: Rows) -> Scan:
    T, d = rows.T, rows.d
    step = chunk_rows(d)
    m = min(T, d)
    e_run = None  # the largest exponent so far: everything accumulated is in units of 2**e_run
    gram = np.zeros((d, d))
    sqn = np.empty(T)
    proj = np.empty(T)
    small = np.empty(0)
    zero_rows, first_zero, chunks = 0, None, 0
    u: np.ndarray | None = None
    starts = list(range(0, T, step))
    prepare = _Preparer(rows)
    with worker_pool(1, "mhaaudit-scan") as ahead:
        pending = ahead.submit(prepare, 0, min(T, step)) if starts else None
        for i, s in enumerate(starts):
            assert pending is not None
            ch = pending.result()
            pending = (
                ahead.submit(prepare, starts[i + 1], min(T, starts[i + 1] + step)) if i + 1 < len(starts) else None
            )
            chunks += 1
            if ch.e_before is not None and ch.e_run is not None and ch.e_run > ch.e_before:
                shift = ch.e_before - ch.e_run  # a larger entry: what came before is rescaled, exactly
                with subnormals_kept():
                    _ldexp_np(gram, 2 * shift)
                    _ldexp_np(sqn[:s], 2 * shift)
                    _ldexp_np(proj[:s], shift)
                    _ldexp_np(small, shift)
            e_run = ch.e_run
            if ch.zero.any():
                zero_rows += int(ch.zero.sum())
                if first_zero is None:
                    first_zero = s + int(np.flatnonzero(ch.zero)[0])
            Cs = ch.Cs
            small = np.sort(np.concatenate([small, ch.norms]))[:m]
            sqn[s : s + len(Cs)] = np.einsum("ij,ij->i", Cs, Cs)
            G = Cs.T @ Cs  # one symmetric rank-k update (syrk)
            gram += G
            if u is None:  # the top eigenvector of the first chunk's Gram
                u = _top_direction(G, d)
            del G
            proj[s : s + len(Cs)] = Cs @ u
            del ch, Cs
    if u is None:  # T == 0 (no chunk)  # pragma: no cover - as_matrix refuses empty sets
        u = np.full(d, 1 / math.sqrt(max(1, d)))
    return Scan(
        T=T,
        d=d,
        exponent=int(e_run or 0),
        gram=gram,
        sqn=sqn,
        proj=proj,
        u=u,
        small_norms=small,
        zero_rows=zero_rows,
        first_zero=first_zero,
        chunks=chunks,
        one_row=prepare.one_row and prepare.first is not None,
        too_small=_too_small(prepare, int(e_run or 0)),
    )


def _too_small(prepare: _Preparer, exponent: int) -> str | None:
    """Why the set cannot be decided in one scale, naming its smallest row, when a non-zero row's largest entry
    is below ``2**-ROW_RANGE_BITS`` of the set's largest; else None."""
    if prepare.low is None or exponent - prepare.low[0] < ROW_RANGE_BITS:
        return None
    _e, row, value = prepare.low
    return (
        f"row {row} of the features is not zero but its largest entry ({value}) is less than 2^-{ROW_RANGE_BITS} "
        f"of the largest entry of the set ({prepare.top:.3g}): float64 holds no one scale for both, so subsets of "
        "rows that small cannot be decided; drop such rows"
    )


def tsqr(rows: Rows, exponent: int) -> np.ndarray:
    """R (min(T, d) x d, upper triangular) with ``R^T R = X^T X`` for the rows divided by
    ``2**exponent``: a sequential TSQR in float64, one chunk of ``chunk_rows(d)`` rows at a time
    (Householder QR of the previous R stacked on the chunk). Backward stable: the singular values
    of R are those of the rows up to ``8 (T + d * chunks) eps sigma_max``.

    Raises:
        NumericalFailure: when LAPACK's QR gives a factor that is not finite (it cannot for finite rows).
    """
    T, d = rows.T, rows.d
    step = chunk_rows(d)
    buf = torch.empty(min(T, d) + step, d, dtype=torch.float64)  # R on top of the next chunk, no copy per chunk
    n_r = 0
    for s in range(0, T, step):
        n = min(T, s + step) - s
        with subnormals_kept():
            buf[n_r : n_r + n] = ldexp(rows.chunk(s, s + n).cpu(), -exponent)
        r = torch.linalg.qr(buf[: n_r + n], mode="r").R
        if not bool(torch.isfinite(r).all()):  # Householder QR of finite rows cannot give this unless LAPACK failed
            raise NumericalFailure(f"QR factor of a {n_r + n} x {d} float64 matrix", ("geqrf",))
        n_r = r.shape[0]
        buf[:n_r] = r
    return buf[:n_r].clone().numpy()


_CACHE: list = []  # (weak reference to the data, version, Scan), the most recent last
_LOCK = threading.Lock()


def _version(data) -> int:
    return int(getattr(data, "_version", 0)) if isinstance(data, torch.Tensor) else 0


def scan_of(rows: Rows) -> Scan:
    """``scan(rows)``, remembered for the last few data objects (a tensor modified in place is
    scanned again)."""
    data = rows.data
    with _LOCK:
        for ref, version, result in _CACHE:
            if ref() is data and version == _version(data):
                return result
    result = scan(rows)
    with _LOCK:
        _CACHE[:] = [entry for entry in _CACHE if entry[0]() is not None]  # the scans of data gone go too
        try:
            _CACHE.append((weakref.ref(data), _version(data), result))
        except TypeError:  # pragma: no cover - an object without weak references is not remembered
            return result
        del _CACHE[:-4]
    return result


@dataclass(frozen=True)
class Unit:
    """The rows divided by ``2**exponent`` (the whole set's, from ``scan``), gathered on demand, and
    the rank rule in those units: the lazy form of ``scale.Scaled``."""

    src: Rows
    exponent: int
    rule: RankRule
    atol: float | None = None  # the rule's absolute tolerance in the data's units (``rule`` has it in the units)

    @property
    def shape(self) -> tuple[int, int]:
        """``(T, d)`` of the rows it rescales."""
        return self.src.shape

    def rows(self, idx) -> torch.Tensor:
        """The rescaled float64 rows ``idx`` (exactly ``scaled(X).X[idx]``)."""
        with subnormals_kept():
            return ldexp(self.src.take(idx), -self.exponent)

    def chunk(self, start: int, stop: int) -> torch.Tensor:
        """The rescaled float64 rows ``start:stop`` (exactly ``scaled(X).X[start:stop]``)."""
        with subnormals_kept():
            return ldexp(self.src.chunk(start, stop), -self.exponent)

    def materialize(self, device: torch.device | None = None) -> torch.Tensor:
        """All rows rescaled, float64, on ``device`` (T x d x 8 bytes: for the small-T routes only)."""
        device = device or self.src.device
        out = torch.empty(self.src.T, self.src.d, dtype=torch.float64, device=device)
        step = chunk_rows(self.src.d)
        for s in range(0, self.src.T, step):
            out[s : s + step] = self.chunk(s, min(self.src.T, s + step)).to(device)
        return out

    def to_data(self, v):
        """A singular value or tolerance back in the data's own units (``Scaled.to_data``)."""
        with subnormals_kept():
            return ldexp(v, self.exponent)

    def tol_to_data(self, tol):
        """A tolerance back in the data's own units (``Scaled.tol_to_data``)."""
        return data_tolerance(self.to_data(tol), self.atol)


def unit_of(rows: Rows, rule: RankRule) -> tuple[Unit, Scan]:
    """The rescaled rows and the scan that fixed their power of two (``rule`` in those units).

    Raises:
        InputError: when the set holds a NaN or infinite entry, or a non-zero row whose largest entry is below
            ``2**-ROW_RANGE_BITS`` of the set's largest (no one scale holds both: ``Scan.too_small``).
    """
    sc = scan_of(rows)
    if sc.too_small is not None:
        raise InputError(sc.too_small)
    return Unit(rows, sc.exponent, rule.in_units(sc.exponent), rule.atol), sc
