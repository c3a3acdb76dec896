"""The exact numerical rank of many small matrices at once: the routes behind Assumption 2.

``mhaaudit.contexts`` decides the rank of every example's n x d context matrix (n <= d) under a rule.
Here is how a batch of them is decided, on the host's cores or with a device:

* :func:`host_ranks`: on the CPU, the batch dealt in parts among worker threads (one intra-op and BLAS
  thread each), each part's float64 Gram matrices formed a few examples at a time and their two extreme
  eigenvalues taken (``numerics.extremes``: LAPACK ``dsytrd`` and ``dstebz``);
* :func:`device_ranks`: on a device, the Gram matrices of several batches (:class:`DeviceBatch`, each
  formed where its batch lies, in its own power of two) reduced to tridiagonal form there all at once
  (``numerics.tridiagonal``), and the extremes of the forms found on the host's threads
  (``numerics.extremes.tridiagonal_extremes``).

Either way a matrix whose smallest eigenvalue lies clear above the squared tolerance (beyond the rounding
band of ``numerics.rounding_band``) has full rank and its sigmas are the roots of the extremes; any other
takes its whole spectrum, or the SVD of its rows near the tolerance (``numerics.gram_rank_and_sigmas``);
and a matrix far smaller than the largest of its batch is decided on its own scale. So every rank equals
``torch.linalg.matrix_rank``'s under the same rule.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

from ..workers import worker_pool
from .certificates import TINY_GRAM, gram_rank_and_sigmas, rounding_band, svd_rank
from .extremes import extreme_eigenvalues, tridiagonal_extremes
from .rule import RankRule, numerics, with_numerics
from .scale import Scaled, scaled
from .threads import intra_op_threads
from .tridiagonal import tridiagonalize

__all__ = ["DeviceBatch", "device_ranks", "host_ranks", "tridiagonal_forms"]


def host_ranks(E: torch.Tensor, rule: RankRule, e: int, workers: int):
    """``(rank, sigma_min, sigma_max, tol)`` of the CPU batch ``E`` (B >= 1, n <= d) whose power of two is ``e``,
    in the data's units: the batch dealt in ``workers`` parts, each on a worker thread of its own."""
    return _run([functools.partial(_part_of_rows, chunk, rule, e) for chunk in E.chunk(workers)], workers, E.device)


#: Bytes of a float64 copy of context matrices the device makes at a time to form their Gram matrices
_DEVICE_PART_BYTES = 2**28
#: Bytes of Gram matrices reduced to tridiagonal form at a time (each step of the reduction is a few kernels,
#: whatever the number of matrices: on one H200 the reduction of 32 and of 2000 197 x 197 matrices took 0.11 s
#: alike)
_TRIDIAGONAL_BYTES = 2**29
#: Threads that find the extremes of the tridiagonal forms (on one H200's 16 cores, 2000 forms took 0.39 s on
#: one thread, 0.11 s on 4 and 0.18 s on 16: each call holds the GIL for its arguments)
_BISECTION_WORKERS = 4


@dataclass(frozen=True)
class DeviceBatch:
    """A batch of context matrices on a device, with its power of two and its rescaled Gram matrices."""

    E: torch.Tensor
    e: int
    G: torch.Tensor

    @classmethod
    def of(cls, E: torch.Tensor, rule: RankRule, e: int) -> DeviceBatch:
        """The batch ``E`` (kept as given) with its Gram matrices, formed where it lies from its rows divided by
        ``2**e``, ``_DEVICE_PART_BYTES`` of float64 rows at a time."""
        grams = []
        for part in E.split(max(1, _DEVICE_PART_BYTES // (E.shape[1] * E.shape[2] * 8))):
            X = scaled(part, rule, exponent=e).X
            grams.append(X @ X.transpose(1, 2))
        return cls(E, e, torch.cat(grams))

    @property
    def nbytes(self) -> int:
        """The bytes the batch and its Gram matrices hold on the device."""
        return self.E.nbytes + self.G.nbytes


@with_numerics()
def device_ranks(batches: list[DeviceBatch], rule: RankRule, workers: int):
    """``context_ranks`` of the batches on a device, concatenated in order: the device reduces every Gram
    matrix to tridiagonal form, ``_TRIDIAGONAL_BYTES`` of them at a time; the host finds the extremes of the
    forms and decides them (:func:`_decided`, each batch in its own units), dealt in parts of consecutive
    examples of one batch among ``workers`` threads (at most ``_BISECTION_WORKERS``); the few matrices
    recomputed from their rows are copied over."""
    host = tridiagonal_forms(torch.cat([b.G for b in batches]) if len(batches) > 1 else batches[0].G)
    workers = min(workers, _BISECTION_WORKERS)
    size = -(-sum(b.G.shape[0] for b in batches) // workers)  # examples a job, at most
    jobs, start = [], 0
    for b in batches:
        for i in range(0, b.G.shape[0], size):
            at = slice(start + i, start + min(i + size, b.G.shape[0]))
            jobs.append(functools.partial(_part_on_device, b, i, [x[at] for x in host], rule))
        start += b.G.shape[0]
    return _run(jobs, workers, batches[0].E.device)


def tridiagonal_forms(G: torch.Tensor) -> list[np.ndarray]:
    """The device's part of :func:`device_ranks`: the tridiagonal forms of the Gram matrices ``G``, reduced where
    ``G`` lies ``_TRIDIAGONAL_BYTES`` of them at a time, and their diagonals and Frobenius norms, copied to the
    host as ``[diagonal, off_diagonal, gram_diagonal, fro]`` (what ``numerics.extremes.tridiagonal_extremes``
    takes); no copy of ``G`` outlives the call."""
    forms = [tridiagonalize(part) for part in G.split(max(1, _TRIDIAGONAL_BYTES // (G.shape[1] * G.shape[2] * 8)))]
    return [
        torch.cat(xs).cpu().numpy()
        for xs in (
            [f[0] for f in forms],
            [f[1] for f in forms],
            [G.diagonal(dim1=-2, dim2=-1)],
            [torch.linalg.matrix_norm(G)],
        )
    ]


def _part_on_device(b: DeviceBatch, first: int, host: list, rule: RankRule):
    """``context_ranks`` of the examples of the device batch ``b`` from position ``first`` on, from their
    tridiagonal forms and the diagonals and Frobenius norms of their Gram matrices (``host``, NumPy arrays, one
    row an example), in the calling thread."""
    diagonal, off, gram_diagonal, fro = host
    device = b.E.device
    at = lambda j: j.to(device) + first  # noqa: E731  (positions in the batch)
    return _decided(
        tridiagonal_extremes(diagonal, off, gram_diagonal, fro),
        torch.from_numpy(gram_diagonal.max(-1)),
        lambda j: b.G[at(j)].cpu(),
        lambda j: scaled(b.E[at(j)], rule, exponent=b.e).X.cpu(),
        b.E.shape[1],
        b.E.shape[2],
        rule,
        b.e,
        lambda j: b.E[at(j)],
    )


def _run(jobs: list, workers: int, device: torch.device):
    """The jobs' results, in order, on ``workers`` threads of one intra-op (and BLAS) thread each, joined on
    ``device``."""
    workers = min(workers, len(jobs))
    if workers <= 1:
        with intra_op_threads(1):
            got = [job() for job in jobs]
    else:
        with intra_op_threads(1), worker_pool(workers, "mhaaudit-contexts") as pool:
            # the workers, started inside, take one intra-op (and BLAS) thread each; flushing subnormals is theirs
            got = list(pool.map(_in_worker, jobs))
    return tuple(torch.cat(xs).to(device) for xs in zip(*got, strict=True))


#: Examples whose Gram matrices are formed at a time on the CPU
_GRAM_ROWS = 4


def _in_worker(job):
    with numerics():
        return job()


def _part_of_rows(E: torch.Tensor, rule: RankRule, e: int):
    """``context_ranks`` of the CPU part ``E`` of a batch whose power of two is ``e``: its Gram matrices
    a few examples at a time, with NumPy's BLAS (on some CPUs twice as fast as torch's here), so their
    float64 copy stays in the cache and no float64 copy of the whole part is made."""
    B, n, _d = E.shape
    G = torch.empty(B, n, n, dtype=torch.float64)
    for i in range(0, B, _GRAM_ROWS):
        X = scaled(E[i : i + _GRAM_ROWS], rule, exponent=e).X.numpy()
        np.matmul(X, X.transpose(0, 2, 1), out=G.numpy()[i : i + _GRAM_ROWS])
    rows = lambda j: scaled(E[j], rule, exponent=e).X  # noqa: E731  (for the few recomputed from their rows)
    return _part_of_gram(G, rows, E.shape[2], rule, e, lambda j: E[j])


#: A context matrix whose largest singular value, in the units of its batch, is below ``sqrt(n d)`` times this
#: may have lost entries to the flushing of subnormal values (its largest entry below 2^-960 of the batch's):
#: it is decided again from its own values, on its own scale (``numerics.svd_rank``)
_OWN_SCALE_BELOW = 2.0**-950


def _part_of_gram(G: torch.Tensor, rows, d: int, rule: RankRule, e: int, given):
    """``context_ranks`` from the host's Gram matrices ``G`` of rescaled context matrices (``rows(j)``:
    those at positions ``j``, for the few recomputed from their rows; ``given(j)``: the same as they were
    given, in the data's units), in the calling thread (:func:`_decided`, from their extreme eigenvalues)."""
    maxdiag = G.diagonal(dim1=-2, dim2=-1).amax(-1)
    found = extreme_eigenvalues(G.numpy())
    return _decided(found, maxdiag, lambda j: G[j], rows, G.shape[-1], d, rule, e, given)


def _decided(found, maxdiag: torch.Tensor, gram, rows, n: int, d: int, rule: RankRule, e: int, given):
    """``context_ranks`` of a batch of rescaled context matrices whose power of two is ``e``, from the
    extreme eigenvalues of their Gram matrices (``found``: ``numerics.extremes``'s ``(lo, hi, ok)``, or None),
    in the calling thread. ``maxdiag``: each Gram matrix's largest diagonal entry; ``gram(j)``, ``rows(j)`` and
    ``given(j)``: the Gram matrices, the rescaled rows and the rows as given (in the data's units) of the
    matrices at positions ``j``, for the few decided otherwise. A matrix
    whose smallest eigenvalue lies clear above the squared tolerance (beyond the rounding band of
    ``gram_rank``, ``numerics.rounding_band``) has full rank: for those the two extreme eigenvalues suffice
    (``numerics.extremes``); the others take their whole spectrum (:func:`_spectrum_route`). A matrix far
    smaller than the largest of its batch is decided on its own scale (``_OWN_SCALE_BELOW``): its entries
    divided by the batch's power of two could lie below float64's normal range, where they are flushed."""
    B = maxdiag.shape[0]
    # the rule in the units, and back
    unit = Scaled(torch.zeros(0, dtype=torch.float64), e, rule.in_units(e), rule.atol)
    data_rule, rule = rule, unit.rule
    rank = torch.full((B,), n, dtype=torch.long)
    smin, smax = torch.empty(B, dtype=torch.float64), torch.empty(B, dtype=torch.float64)
    clear = torch.zeros(B, dtype=torch.bool)
    if found is not None:
        lo, hi, ok = (torch.from_numpy(x) for x in found)
        lo, hi = lo.clamp_min(0), hi.clamp_min(0)
        tol2 = rule.tol(hi.sqrt(), n, d) ** 2
        # gram_rank's test: no eigenvalue within the rounding band of the squared tolerance, none below it
        clear = ok & (lo - tol2 > rounding_band(n, d, hi, tol2))
        clear &= maxdiag >= TINY_GRAM
        smin[clear], smax[clear] = lo[clear].sqrt(), hi[clear].sqrt()
    if not bool(clear.all()):
        rest = (~clear).nonzero().squeeze(-1)
        rank[rest], smin[rest], smax[rest] = _spectrum_route(gram(rest), lambda j: rows(rest[j]), d, rule)
    tol = rule.tol(smax, n, d)
    own = (smax < math.sqrt(n * d) * _OWN_SCALE_BELOW).nonzero().squeeze(-1)
    smin, smax, tol = unit.to_data(smin), unit.to_data(smax), unit.tol_to_data(tol)
    if own.numel():
        rank[own], smin[own], smax[own], tol[own], _ = svd_rank(given(own).cpu(), data_rule)
    return rank, smin, smax, tol


def _spectrum_route(G: torch.Tensor, rows, d: int, rule: RankRule):
    """``(rank, sigma_min, sigma_max)`` in the units of ``rule`` from every eigenvalue of each Gram matrix of
    ``G`` (checked routes), or from the SVD of its rows where none is usable or one lies within the rounding
    margin of the squared tolerance (``gram_rank_and_sigmas``: its singular values then too)."""
    rank, smin, smax = gram_rank_and_sigmas(G, rows, d, rule)
    return rank.cpu(), smin, smax
