"""The paper's four checks as pure functions on tensors, and the registry that names them.

* General Position (``general_position``): the queries have Kruskal rank min(T, d), estimated
  by Monte Carlo at k = min(T, d).
* Assumption 1 (``assumption_1``): the queries have Kruskal rank >= n (Monte Carlo at k = n).
* Assumption 2 (``assumption_2``, streamed by ``ContextRanks``; both in :mod:`mhaaudit.contexts`,
  re-exported here): every context matrix E_t (n x d) has rank n. Exact per example: the counts
  are proofs under the rank rule.
* Assumption 3 (``assumption_3``): the vectors query + mean of context rows have Kruskal rank
  >= n (Monte Carlo at k = n).

A Monte-Carlo "holds" is an estimate (``mhaaudit.kruskal``); a dependent subset found is a
proof. ``REGISTRY`` maps each check's name to a ``Check``: its function, what it means, which
vectors it reads and what its size k is. The audit runs every registered check on every column,
``mhaaudit kruskal`` names a test after the check whose size it is (``check_for_size``), and the
table, the JSON and the parquet rows show whatever the registry holds: adding a check is one
entry plus its function. Nothing here imports models or data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .check_words import CHECK_MEANING as CHECK_MEANING
from .check_words import CHECK_TITLES as CHECK_TITLES
from .check_words import MEANINGS, TITLES
from .check_words import REGISTRY as _REGISTRY
from .contexts import ContextRankResult as ContextRankResult
from .contexts import ContextRanks as ContextRanks
from .contexts import assumption_2 as assumption_2
from .contexts import assumption_2_from_arrays as assumption_2_from_arrays
from .contexts import context_ranks as context_ranks
from .defaults import DEFAULT_SAMPLES, DEFAULT_THRESHOLD
from .errors import InputError
from .kruskal import SetStats, SubsetTest, subset_test
from .numerics import RankRule


def _mc(check: str, X, k: int, **kw) -> SubsetTest:
    kw.setdefault("samples", DEFAULT_SAMPLES)
    kw.setdefault("threshold", DEFAULT_THRESHOLD)
    return subset_test(X, k, check=check, title=REGISTRY[check].title, **kw)


def assumption_1(queries, n: int, **kw) -> SubsetTest:
    """Check Assumption 1: the query vectors' Kruskal rank is at least n, estimated at k = n.

    Args:
        queries (torch.Tensor | numpy.ndarray): the T x d query vectors.
        n: the context length, the size tested.
        **kw (Any): the keywords of :func:`~mhaaudit.kruskal.subset_test` (``samples``, ``seed``, ``rule``, ...).

    Returns:
        The :class:`~mhaaudit.kruskal.SubsetTest` at k = n (see :func:`~mhaaudit.kruskal.subset_test`).

    Raises:
        InputError: as :func:`~mhaaudit.kruskal.subset_test`: the vectors are not a finite numeric T x d
            matrix, ``n`` is not a whole number of at least 1, or a keyword is out of range.
    """
    return _mc("assumption_1", queries, n, **kw)


def assumption_3(a3_vectors, n: int, **kw) -> SubsetTest:
    """Check Assumption 3: the Kruskal rank of query + mean(context) is at least n, estimated at k = n.

    Args:
        a3_vectors (torch.Tensor | numpy.ndarray): the T x d Assumption 3 vectors.
        n: the context length, the size tested.
        **kw (Any): the keywords of :func:`~mhaaudit.kruskal.subset_test`, as :func:`assumption_1` takes them.

    Returns:
        The :class:`~mhaaudit.kruskal.SubsetTest` at k = n, as :func:`assumption_1`.

    Raises:
        InputError: as :func:`assumption_1`.
    """
    return _mc("assumption_3", a3_vectors, n, **kw)


def general_position(queries, **kw) -> SubsetTest:
    """Check general position: the queries' Kruskal rank is min(T, d), estimated at that k.

    Args:
        queries (torch.Tensor | numpy.ndarray): the T x d query vectors.
        **kw (Any): the keywords of :func:`~mhaaudit.kruskal.subset_test` (``samples``, ``seed``, ``rule``, ...).

    Returns:
        The :class:`~mhaaudit.kruskal.SubsetTest` at k = min(T, d) (see :func:`~mhaaudit.kruskal.subset_test`).

    Raises:
        InputError: as :func:`~mhaaudit.kruskal.subset_test`: the vectors are not a finite numeric T x d
            matrix, or a keyword is out of range.
    """
    shape = tuple(getattr(queries, "shape", ()))
    if len(shape) != 2:
        what = f"an array of shape {shape}" if hasattr(queries, "shape") else type(queries).__name__
        raise InputError(f"general_position takes a T x d matrix of query vectors, got {what}")
    T, d = shape
    return _mc("general_position", queries, min(T, d), **kw)


# --------------------------------------------------------------------------- the registry


@dataclass(frozen=True, kw_only=True)
class Check:
    """One of the paper's checks: what it runs, what it means, on which vectors, at which size.

    ``run`` is the check's public function on tensors. A run of the tool (the audit of a feature
    set, ``mhaaudit kruskal``) decides the check with :meth:`decide`: on the attribute ``vectors``
    names of a :class:`~mhaaudit.features.FeatureSet` (``queries`` or ``a3``: T x d; ``context``: the
    per-example context statistics of :class:`ContextRanks`) at the size ``k(n, T, d)``. An estimated
    check is decided there by the Monte-Carlo Kruskal test (:func:`~mhaaudit.kruskal.subset_test`, what
    ``run`` calls); a check decided otherwise gives ``measure(features, k, rule)``. Adding a check is
    one entry in :data:`REGISTRY` plus its function: the audit, ``kruskal``, the tables, the JSON and
    the parquet rows all read the registry.
    """

    name: str
    title: str
    meaning: str
    vectors: Literal["queries", "context", "a3"]  # the FeatureSet attribute decided on
    size: Literal["k", "rank"]  # what k is: a subset size (k = ...) or a matrix rank (rank ...)
    k: Callable[[int, int, int], int]  # (n, T, d) -> the size k it tests
    depends_on_n: bool  # whether k depends on the context length n (known without n otherwise)
    run: Callable
    estimated: bool  # a Monte-Carlo estimate (True) or an exact count (False)
    measure: Callable | None = None  # (features, k, rule) -> result, for a check not decided by subset_test

    def size_at(self, n, T, d) -> str:
        """The size as a table shows it, with the numbers put in (``k = 16``, ``rank 5``)."""
        return f"k = {self.k(n, T, d)}" if self.size == "k" else f"rank {self.k(n, T, d)}"

    def decide(self, features, *, rule: RankRule, stats=None, **draws):
        """The check's result on ``features`` (anything with ``queries``, ``a3``, ``context``, ``n``,
        ``d`` and ``T``, as a :class:`~mhaaudit.features.FeatureSet`), under ``rule``.

        ``stats`` is the whole set's :class:`SetStats` of the vectors (computed here when None);
        ``draws`` go to :func:`~mhaaudit.kruskal.subset_test` (samples, threshold, seed, device,
        stop_when_decided, progress) and are unused by a check with its own ``measure``.
        """
        k = self.k(features.n, features.T, features.d)
        if self.measure is not None:
            return self.measure(features, k, rule)
        return subset_test(
            getattr(features, self.vectors), k, check=self.name, title=self.title, rule=rule, stats=stats, **draws
        )


def _assumption_2_of(features, k: int, rule: RankRule) -> ContextRankResult:
    """Assumption 2 from the context statistics a streaming reduction kept (exact counts; unavailable where it kept
    none: ``FeatureSet.assumption_2``)."""
    T = int(features.queries.shape[0])
    return assumption_2_from_arrays(features.context, n=features.n, d=features.d, rule=rule, examples=T)


#: Every registered check by name: the dict of :data:`mhaaudit.check_words.REGISTRY`, filled here.
REGISTRY: dict[str, Check] = _REGISTRY
REGISTRY.update(
    {
        c.name: c
        for c in (
            Check(
                name="general_position",
                title=TITLES["general_position"],
                meaning=MEANINGS["general_position"],
                vectors="queries",
                size="k",
                k=lambda n, T, d: min(T, d),
                depends_on_n=False,
                run=general_position,
                estimated=True,
            ),
            Check(
                name="assumption_1",
                title=TITLES["assumption_1"],
                meaning=MEANINGS["assumption_1"],
                vectors="queries",
                size="k",
                k=lambda n, T, d: n,
                depends_on_n=True,
                run=assumption_1,
                estimated=True,
            ),
            Check(
                name="assumption_2",
                title=TITLES["assumption_2"],
                meaning=MEANINGS["assumption_2"],
                vectors="context",
                size="rank",
                k=lambda n, T, d: n,
                depends_on_n=True,
                run=assumption_2,
                estimated=False,
                measure=_assumption_2_of,
            ),
            Check(
                name="assumption_3",
                title=TITLES["assumption_3"],
                meaning=MEANINGS["assumption_3"],
                vectors="a3",
                size="k",
                k=lambda n, T, d: n,
                depends_on_n=True,
                run=assumption_3,
                estimated=True,
            ),
        )
    }
)
CHECKS = tuple(REGISTRY)  # the built-in checks' names, in the order the report shows them


def check_for_size(k: int, *, n: int | None, T: int, d: int, vectors: str) -> str:
    """The check a Kruskal test of ``vectors`` at size ``k`` answers, or ``"kruskal"`` when none does.

    Of the estimated checks on those vectors whose size is ``k``, one whose size depends on n wins
    (n is at most min(T, d)): at k = n = min(T, d), Assumption 1 (k = n) names the test, not General
    Position (k = min(T, d)), which asks the same there. Without n only the sizes that do not
    depend on n are known.
    """
    fits = [
        c
        for c in REGISTRY.values()
        if c.estimated
        and c.vectors == vectors
        and (n is not None or not c.depends_on_n)
        and c.k(n if n is not None else 0, T, d) == k
    ]
    return min(fits, key=lambda c: not c.depends_on_n).name if fits else "kruskal"


__all__ = [
    "CHECKS",
    "CHECK_MEANING",
    "CHECK_TITLES",
    "REGISTRY",
    "Check",
    "ContextRankResult",
    "ContextRanks",
    "SetStats",
    "assumption_1",
    "assumption_2",
    "assumption_2_from_arrays",
    "assumption_3",
    "check_for_size",
    "context_ranks",
    "general_position",
]
