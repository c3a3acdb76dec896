"""Assumption 2, exactly: the rank of every example's context matrix E_t (n x d), streamed.

Each matrix's rank is decided from the eigenvalues of its Gram matrix, whose rounding error is bounded,
and with the SVD where one lies within that bound of the tolerance (:func:`mhaaudit.numerics.gram_rank`),
so the counts are proofs under the rank rule, not an estimate; no Kruskal
sampling is involved, so this sits below the estimator and the registry of checks
(:mod:`mhaaudit.checks` names it ``assumption_2`` and re-exports these names), and what reduces a
capture's features (:mod:`mhaaudit.features`) streams its batches here without loading either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from . import validate
from .errors import InputError
from .numerics import RankRule, with_numerics
from .numerics.batch_ranks import DeviceBatch, device_ranks, host_ranks
from .numerics.pow2 import max_abs
from .numerics.scale import exponent_for
from .runtime import MAX_INT64
from .tensor_values import dense_values

__all__ = [
    "ContextRankResult",
    "ContextRanks",
    "assumption_2",
    "assumption_2_from_arrays",
    "context_ranks",
    "real_tensor",
]


def real_tensor(x, what: str, ndim: int, shape: str, *, integers: bool = False) -> torch.Tensor:
    """``x`` checked to be a dense tensor of real floating values (float64, float32, float16 or bfloat16; with
    ``integers``, integer values too, read in float64 with float64's eps, as the rank rule says) with ``ndim``
    dimensions, none of them empty but the first; read as its values (detached).

    Raises:
        InputError: when ``x`` is not a tensor, is a meta, sparse, nested or quantized tensor, has another number
            of dimensions (``shape`` says which), an empty dimension past the first, or another dtype (complex
            values: independence is decided over the reals; booleans, 8-bit floats, and integers unless
            ``integers``: activations are floating point, and the rank rule needs a floating dtype's eps).
    """
    if not isinstance(x, torch.Tensor):
        raise InputError(f"{what} must be a torch tensor {shape}, not {type(x).__name__}")
    dense_values(x, what)
    if x.ndim != ndim:
        raise InputError(f"{what} must be {shape}, got shape {tuple(x.shape)}")
    if any(size < 1 for size in x.shape[1:]):
        raise InputError(f"{what} must be {shape} with no empty dimension but the first, got shape {tuple(x.shape)}")
    integer = integers and not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool
    if not integer and (not x.is_floating_point() or x.element_size() < 2):
        kinds = "real floating or integer values" if integers else "real floating values"
        raise InputError(
            f"{what} must hold {kinds} (float64, float32, float16 or bfloat16"
            + (", or integers" if integers else "")
            + f"), got {str(x.dtype).removeprefix('torch.')}"
        )
    return x.detach() if x.requires_grad else x


@with_numerics()
def context_ranks(
    E: torch.Tensor, rule: RankRule, *, top: float | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Compute the exact numerical rank of each ``(n, d)`` matrix in a ``(B, n, d)`` batch.

    Ranks come from the Gram matrix's eigenvalues, accurate to a rounding error that is bounded: a
    matrix whose smallest eigenvalue lies beyond that bound above the squared tolerance has full rank
    (its two extreme eigenvalues suffice, ``numerics.extremes``); a matrix with an eigenvalue within
    that bound of the tolerance, or whose eigenvalues no routine gives usable, is decided by the SVD
    (``numerics.gram_rank``), so ranks equal ``torch.linalg.matrix_rank``'s under the same rule.
    ``sigma_min`` and ``sigma_max`` are the square roots of the extreme eigenvalues of a matrix clear of the
    tolerance (their rounding error lies far below it), and the SVD's where the SVD decided, so a margin
    ``sigma_min / tol`` near 1 is the SVD's own (``numerics.gram_rank_and_sigmas``). When n > d no matrix
    can have rank n, and ranks are not computed (-1). The batch is divided by an exact power of two first
    (``numerics.scale``). The batch is dealt in parts among as many worker threads as torch's
    intra-op thread count, each running its factorisations on one thread, so the numbers do not
    depend on the machine's thread count (on the CPU each matrix is decided on its own: its results
    do not depend on the batch it came in). On a GPU the device forms the Gram matrices and reduces
    them all at once to tridiagonal form (``numerics.tridiagonal``: a GPU's eigensolver takes one
    small matrix at a time), and the host's threads find the extremes of those forms by bisection.

    Args:
        E: the ``(B, n, d)`` batch of context matrices.
        rule: the rank rule.
        top: the largest absolute entry of ``E`` when known (None: read here, which also finds NaN).

    Returns:
        ``(rank, sigma_min, sigma_max, tol)``: each of length B, on ``E``'s device, in the data's units.

    Raises:
        InputError: when ``E`` is not a 3-D tensor of real values (:func:`real_tensor`; integers too), or holds NaN
            or infinite values.
    """
    E = real_tensor(E, "context matrices", 3, "(B, n, d)", integers=True)
    rule = RankRule.checked(rule)
    top = _finite_top(E, top)
    B, n, d = E.shape
    if n > d or B == 0:
        nan = torch.full((B,), float("nan"), dtype=torch.float64, device=E.device)
        return torch.full((B,), -1, dtype=torch.long, device=E.device), nan, nan.clone(), nan.clone()
    e = exponent_for(E, top)  # one power of two for the batch: every part of it is in the same units
    parts = max(1, min(B, torch.get_num_threads()))
    if E.device.type in _HOST_DEVICES:  # each worker forms its part's Gram matrices too
        return host_ranks(E, rule, e, parts)
    return device_ranks([DeviceBatch.of(E, rule, e)], rule, parts)


#: Devices whose batches the host's own route decides (any other takes the device route)
_HOST_DEVICES = ("cpu",)


def _finite_top(E: torch.Tensor, top: float | None) -> float:
    """``top``, or ``E``'s largest absolute entry when None (read here).

    Raises:
        InputError: when ``E`` holds NaN or infinite values.
    """
    if top is None:
        top = max_abs(E)
    if E.is_floating_point() and not math.isfinite(top):
        raise InputError("the context matrices hold NaN or infinite values")
    return top


def _pending_limit(device: torch.device) -> int:
    """The bytes of batches :class:`ContextRanks` keeps on ``device`` before deciding them: ``_PENDING_BYTES``, or
    an eighth of a GPU's free memory where that is less (at least ``_PENDING_LEAST``)."""
    if device.type != "cuda":
        return _PENDING_BYTES
    free, _total = torch.cuda.mem_get_info(device)
    return max(_PENDING_LEAST, min(_PENDING_BYTES, free // 8))


#: Bytes of context matrices (and their Gram matrices) :class:`ContextRanks` keeps on a device before deciding
#: them all at once, and the least it keeps where the device's free memory is short
_PENDING_BYTES = 2**30
_PENDING_LEAST = 2**26


@dataclass(frozen=True)
class ContextRankResult:
    """Assumption 2 over T examples: exact counts, not an estimate."""

    T: int
    n: int
    d: int
    full: int
    deficient: int
    rank_histogram: dict[int, int]
    min_margin: float  # min over examples of sigma_min / tol (> 1 means full rank with room)
    worst_example: int
    worst_sigma_min: float
    worst_tol: float
    rule: RankRule
    verdict: str
    reason: str
    deficient_examples: tuple[int, ...] = ()
    check: str = "assumption_2"
    seed: int | None = None  # the audit's seed, for the record (no draws are made: every example is decided)

    @property
    def exact_status(self) -> str:
        """Every example's rank is decided exactly, so the count is the exact answer (the estimate
        verdict is the same): fails, holds, or undecided when there are no examples."""
        return self.verdict if self.verdict in ("holds", "fails") else "undecided"

    @property
    def exact_basis(self) -> str:
        """What the exact answer rests on: "dimension" (n > d), "exhaustive" (every example decided), or "none"."""
        if self.exact_status == "undecided":
            return "none"
        return "dimension" if self.n > self.d else "exhaustive"

    @property
    def proven(self) -> bool:
        """True when the verdict is exact (there was at least one example to decide)."""
        return self.exact_status != "undecided"

    def record(self) -> dict:
        """The row of a results table (the columns of ``tables.TEST_COLUMNS``), as ``SubsetTest.record``
        gives its own."""
        frac = self.full / self.T if self.T else 0.0
        return {
            "check": self.check,
            "k": self.n,
            "T": self.T,
            "d": self.d,
            "samples": self.T,
            "satisfied": self.full,
            "fraction": frac,
            "ci_low": frac,
            "ci_high": frac,
            "threshold": 1.0,
            "verdict": self.verdict,
            "exact_status": self.exact_status,
            "exact_basis": self.exact_basis,
            "scope": "per-example",
            "reason": self.reason,
            "tolerance": self.rule.describe(),
            "seed": self.seed,
            "witness": list(self.deficient_examples[:20]),
            "witness_singular_values": [],
            "witness_tol": None,
            "rank_histogram": {str(k): v for k, v in sorted(self.rank_histogram.items())},
            "exact_rechecks": 0,
            "undecided_draws": 0,
            "sampled": False,
            "proven": self.proven,
            "set_rank_ceiling": None,
            "min_margin": self.min_margin,
        }


@dataclass
class ContextRanks:
    """Streaming Assumption 2: feed ``(B, n, d)`` batches, read the result at the end."""

    rule: RankRule
    n: int | None = None
    d: int | None = None
    ranks: list[torch.Tensor] = field(default_factory=list)  # one (B,) tensor per batch decided (or group of them)
    sigma_min: list[torch.Tensor] = field(default_factory=list)
    sigma_max: list[torch.Tensor] = field(default_factory=list)
    tols: list[torch.Tensor] = field(default_factory=list)
    # batches on a device fed and not yet decided
    _pending: list[DeviceBatch] = field(default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.rule = RankRule.checked(self.rule)

    def update(self, E: torch.Tensor, *, top: float | None = None) -> None:
        """Decide the rank of each (n, d) context matrix of the batch ``E`` and keep the statistics where
        ``E`` lies (copied to the CPU once, by :meth:`arrays`). ``top``: ``E``'s largest absolute entry,
        when the caller has read it (:func:`context_ranks`). A batch on a device (a GPU) is checked and its
        Gram matrices formed now; a copy of it is kept there, with those of the next batches, until they hold
        about ``_PENDING_BYTES`` (at most an eighth of the device's free memory; each ``ContextRanks`` its own)
        or :meth:`arrays` is called, or a batch comes that is decided at once (on the CPU, or on another
        device): then all are decided, in the order fed (``context_ranks``: the device's reduction to
        tridiagonal form takes as long for one batch as for thousands of examples).

        Raises:
            InputError: when the batch is not a 3-D tensor of real values (:func:`real_tensor`; integers too), its
                (n, d) differs from the first batch's, or it holds NaN or infinite values (then it is not kept).
            RuntimeError: (torch's, such as ``torch.cuda.OutOfMemoryError``) when deciding the kept batches fails:
                the batch was accepted, and every batch not decided is kept, to be decided by the next call.
        """
        E = real_tensor(E, "context matrices", 3, "(B, n, d)", integers=True)
        B, n, d = E.shape
        if self.n is None:
            self.n, self.d = n, d
        elif (n, d) != (self.n, self.d):
            raise InputError(f"context batches changed shape from (n, d) = ({self.n}, {self.d}) to ({n}, {d})")
        if E.device.type in _HOST_DEVICES or n > d or B == 0:
            got = context_ranks(E, self.rule, top=top)
            if B:
                self._decide_pending()  # (those kept come first)
            self._keep(got)
            return
        top = _finite_top(E, top)
        if self._pending and self._pending[0].E.device != E.device:
            self._decide_pending()
        batch = DeviceBatch.of(E.clone(), self.rule, exponent_for(E, top))  # a copy: the caller may reuse E
        self._pending.append(batch)
        if sum(b.nbytes for b in self._pending) >= _pending_limit(E.device):
            self._decide_pending()

    def _keep(self, got) -> None:
        r, smin, smax, tol = got
        self.ranks.append(r)
        self.sigma_min.append(smin)
        self.sigma_max.append(smax)
        self.tols.append(tol)

    def _decide_pending(self) -> None:
        """Decide the batches kept on a device (:func:`context_ranks`'s device route), in the order fed, in groups
        of consecutive batches of at most ``_pending_limit`` bytes. A group is let go only once decided: where
        deciding it fails (out of memory, say), it and those after it are still kept, and the next call starts
        again with that group (no larger), so the statistics read later count every batch or raise."""
        while self._pending:
            limit, size, group = _pending_limit(self._pending[0].E.device), 0, 0
            for b in self._pending:
                if group and size + b.nbytes > limit:
                    break
                size, group = size + b.nbytes, group + 1
            batches = self._pending[:group]
            workers = max(1, min(sum(b.E.shape[0] for b in batches), torch.get_num_threads()))
            self._keep(device_ranks(batches, self.rule, workers))
            del self._pending[:group]

    def arrays(self) -> dict[str, torch.Tensor]:
        """The per-example statistics fed so far, each of length T, on the CPU: ``context_rank`` (int64; -1 when
        n > d), ``context_sigma_min``, ``context_sigma_max`` and ``context_tol`` (float64, in the data's units).
        Batches kept on a device are decided first."""
        self._decide_pending()
        cat = lambda xs, dt: torch.cat(xs).cpu() if xs else torch.zeros(0, dtype=dt)  # noqa: E731
        return {
            "context_rank": cat(self.ranks, torch.long),
            "context_sigma_min": cat(self.sigma_min, torch.float64),
            "context_sigma_max": cat(self.sigma_max, torch.float64),
            "context_tol": cat(self.tols, torch.float64),
        }

    def result(self) -> ContextRankResult:
        """Assumption 2 over every example fed (verdict "unavailable" when none was)."""
        a = self.arrays()
        return assumption_2_from_arrays(a, n=self.n or 0, d=self.d or 0, rule=self.rule)


def assumption_2_unavailable(T: int, n: int, d: int, rule: RankRule, reason: str) -> ContextRankResult:
    """Assumption 2 of T examples left undecided (verdict "unavailable"), for ``reason``."""
    return ContextRankResult(
        T=T, n=n, d=d, full=0, deficient=0, rank_histogram={}, min_margin=float("nan"), worst_example=-1,
        worst_sigma_min=float("nan"), worst_tol=float("nan"), rule=rule, verdict="unavailable", reason=reason,
    )  # fmt: skip


def assumption_2_from_arrays(
    a: dict[str, torch.Tensor], *, n: int, d: int, rule: RankRule, examples: int | None = None
) -> ContextRankResult:
    """Assumption 2 from the per-example statistics of :meth:`ContextRanks.arrays`: the exact count of context
    matrices of rank n among T, the rank histogram, the worst sigma_min / tolerance margin and the verdict
    ("holds", "fails", or "unavailable" when T = 0; n > d fails by dimension alone). The ranks were decided under
    one rule when the statistics were made: where ``rule`` gives another tolerance, the verdict is "unavailable"
    (:func:`_decided_under`), never the count of another rule; so it is where the statistics contradict themselves
    (a rank n whose sigma_min does not clear its tolerance, or the reverse: :func:`_contradiction`). Where ``a`` is
    empty (a reduction that kept no context ranks), it is "unavailable" for its ``examples``."""
    if not a:
        why = "the features were reduced without their context matrices' ranks (contexts=False)"
        return assumption_2_unavailable(examples or 0, n, d, rule, why)
    rank = a["context_rank"]
    T = int(rank.numel())
    other = (_decided_under(a, n, d, rule) or _contradiction(a, n)) if T and n <= d else None
    if other is not None:
        return assumption_2_unavailable(T, n, d, rule, other)
    full_mask = rank == n
    full = int(full_mask.sum())
    hist: dict[int, int] = {}
    for v in rank.tolist():
        hist[int(v)] = hist.get(int(v), 0) + 1
    if T and n <= d:
        smin, tol = a["context_sigma_min"], a["context_tol"]
        # sigma_min / tol in the data's units: a ratio, so the same at every scale (0 for a zero matrix)
        margin = torch.where(
            tol > 0, smin / torch.where(tol > 0, tol, 1.0), torch.where(smin > 0, float("inf"), 0.0).to(smin.dtype)
        )
        worst = int(margin.argmin())
        min_margin = float(margin[worst])
        worst_smin, worst_tol = float(a["context_sigma_min"][worst]), float(a["context_tol"][worst])
    else:
        worst, min_margin, worst_smin, worst_tol = -1, float("nan"), float("nan"), float("nan")
    deficient = tuple(int(i) for i in (~full_mask).nonzero().squeeze(-1).tolist())
    if T == 0:
        verdict, reason = "unavailable", "no examples"
    elif n > d:
        verdict = "fails"
        reason = f"n = {n} > d = {d}: n tokens in R^{d} are always dependent, so no context matrix can have rank n"
    elif full == T:
        verdict = "holds"
        reason = f"all {T} context matrices have rank n = {n} (smallest sigma_min / tolerance = {min_margin:.3g})"
    else:
        verdict = "fails"
        lo = min(hist)
        reason = (
            f"{T - full} of {T} context matrices have rank < n = {n} (lowest rank {lo}); first: example {deficient[0]}"
        )
    return ContextRankResult(
        T=T,
        n=n,
        d=d,
        full=full,
        deficient=T - full,
        rank_histogram=hist,
        min_margin=min_margin,
        worst_example=worst,
        worst_sigma_min=worst_smin,
        worst_tol=worst_tol,
        rule=rule,
        verdict=verdict,
        reason=reason,
        deficient_examples=deficient,
    )


def _decided_under(a: dict[str, torch.Tensor], n: int, d: int, rule: RankRule) -> str | None:
    """Why the context ranks of ``a`` cannot stand for ``rule``: they were decided under a rule whose tolerance
    differs from ``rule``'s for some example (None when they agree for every one)."""
    stored = a["context_tol"].to(torch.float64)
    wanted = rule.tol(a["context_sigma_max"].to(torch.float64), n, d)
    off = ~torch.isclose(stored, wanted, rtol=1e-12, atol=0.0)
    if not bool(off.any()):
        return None
    i = int(off.nonzero()[0])
    return (
        f"the context ranks were decided when the tokens were reduced, under another rank rule (tolerance "
        f"{float(stored[i]):.3g} for example {i}, where this rule gives {float(wanted[i]):.3g}); reduce the tokens "
        "under this rule to decide Assumption 2 under it"
    )


def _contradiction(a: dict[str, torch.Tensor], n: int) -> str | None:
    """Why the context statistics of ``a`` (n <= d) contradict themselves, or None: each rank was decided from the
    singular values it keeps (:func:`context_ranks`), so a matrix has rank n exactly when its ``sigma_min`` clears its
    tolerance, and no rank lies outside 0 .. n. Statistics that say otherwise (a feature file edited or corrupted)
    prove nothing."""
    rank = a["context_rank"]
    clear = a["context_sigma_min"].to(torch.float64) > a["context_tol"].to(torch.float64)
    off = ((rank == n) != clear) | (rank < 0) | (rank > n)
    if not bool(off.any()):
        return None
    i = int(off.nonzero()[0])
    smin, tol = float(a["context_sigma_min"][i]), float(a["context_tol"][i])
    return (
        f"the context statistics contradict themselves: example {i} has rank {int(rank[i])} of n = {n} with "
        f"sigma_min {smin:.3g} {'>' if smin > tol else '<='} its tolerance {tol:.3g}; reduce the tokens again to "
        "decide Assumption 2"
    )


def assumption_2(E: torch.Tensor, rule: RankRule | None = None, batch_size: int = 64) -> ContextRankResult:
    """Check Assumption 2 on a ``(T, n, d)`` tensor: every context matrix has rank n.

    Use ``ContextRanks`` to stream the matrices instead.

    Args:
        E: the ``(T, n, d)`` context matrices.
        rule: the rank rule (None: the rule for E's dtype).
        batch_size: context matrices decided at a time (default 64).

    Returns:
        The :class:`ContextRankResult`: how many of the T context matrices have rank n, the verdict and
        the evidence (rank histogram, the worst margin, the deficient examples).

    Raises:
        InputError: when ``E`` is not a 3-D tensor of real values (:func:`real_tensor`; integers too), holds NaN or
            infinite values, or ``batch_size`` is not a positive integer.
    """
    E = real_tensor(E, "context matrices", 3, "(T, n, d)", integers=True)
    batch_size = validate.integer("batch_size", batch_size, maximum=MAX_INT64)
    acc = ContextRanks(RankRule.given(rule, E.dtype))
    for part in E.split(batch_size):
        acc.update(part)
    return acc.result()
