"""The test at one candidate size k: is every k-subset of the rows independent under the rule?

``subset_test`` draws N uniformly random k-subsets (``sampling``) and decides each one exactly (``numerics``: every
decision equals ``torch.linalg.matrix_rank`` on the same float64 rows). The satisfied fraction and its Clopper-Pearson
interval are an **estimate** of the share of independent k-subsets; a "holds" verdict is an estimate, not a proof. A
dependent subset that was drawn is a **proof** that the Kruskal rank is below k: ``shrink_witness`` looks for a smaller
one inside it and keeps its indices and singular values. Sizes above d, T or the rank ceiling of the whole set
(``SetStats.ceiling``) are answered without sampling, as proofs. With T <= d rows and no dependent draw, the whole set
is decided too: independent, it proves that every k-subset is (``witness.independent_set_floor``), and the exact status
holds. A draw whose decision no LAPACK route can compute (``numerics.checked``: every SVD driver failed) is neither
independent nor dependent: it is counted in ``undecided_draws`` and left out of ``samples``, so of the fraction and its
interval, and it is never a witness. The draws are decided on the data divided by an exact power of two
(``numerics.scale``, applied to each draw's rows as they are gathered, ``numerics.stream.Unit``): the same data at any
scale give the same draws, decisions and witness, whose singular values are in the data's units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .. import phases, validate
from ..defaults import DEFAULT_SAMPLES, DEFAULT_SEED
from ..distributed import shared
from ..errors import Param
from ..keywords import request_of
from ..numerics import (
    Decision,
    RankRule,
    decide_full_rank,
    gram_rank,
    lapack,
    tf32_is_off,
    with_numerics,
)
from ..numerics.checked import NumericalFailure
from ..numerics.stream import Unit, unit_of
from ..runtime import checked_seed, device_name, resolve_device
from . import witness
from .bounds import fixed_rule
from .results import Bound, SetStats, SubsetTest, Witness, checked_stats, clopper_pearson, rows_phrase
from .results import whole_set_note as _whole_set_note
from .sampling import (
    DRAW_BLOCK,
    Draws,
    Gram,
    Progress,
    Sampling,
    as_matrix,
    checked_progress,
    decided_in_order,
    rows_of,
)

__all__ = ["draw_decisions", "shrink_witness", "subset_test"]

#: How many of the first dependent draws are kept as witness candidates: when LAPACK cannot prove one (no
#: route gives its singular values), the next is tried.
WITNESS_DRAWS = 4


def shrink_witness(X: torch.Tensor, indices, rule: RankRule) -> Witness:
    """Given a dependent subset, look for a smaller dependent one inside it and prove it.

    A zero row or two equal rows inside it are a witness at once; otherwise one pivoted QR of its
    rows finds r well-conditioned rows and the row nearest their span, and the rows that take part
    in that dependence are proven by an SVD of at most (r + 1) x d (``witness.shrink``: a bounded
    number of factorisations, ``witness.MAX_FACTORISATIONS``). Every candidate is verified with the
    exact rule, so the result is always a proof. The singular values and tolerance it keeps are in
    the data's own units.

    Raises:
        ValueError: when the rows ``indices`` are not dependent under the rule.
        ArithmeticError: (``numerics.checked.NumericalFailure``) when nothing smaller is proven and no LAPACK route
            gives usable singular values for the rows ``indices`` themselves.
    """
    X = as_matrix(X)
    rule, _ = fixed_rule(X, rule or RankRule.for_dtype(X.dtype), need_stats=False)
    return witness.shrink(unit_of(rows_of(X), rule)[0], indices)


#: Blocks of draws the first batched call decides when the test may stop early (each next call twice as many)
FIRST_BLOCKS = 8


def _decided_draws(
    gram: Gram,
    k: int,
    samples: int,
    seed: int,
    rule: RankRule,
    progress: Progress | None = None,
    may_stop: bool = False,
):
    """Yield ``(indices, decision)`` for consecutive groups of whole blocks of the seeded draws.

    With the CPU LAPACK kernels (``gram.cpu_entries``) one worker thread per core draws and
    decides a block at a time: each draw goes through ``lapack.decide_draws`` (the draw's Gram
    read from the full Gram or computed from its rows) and only the draws its certificates do not
    settle through ``decide_full_rank``. With the batched kernels (a GPU, or the CPU under
    ``MHAAUDIT_KERNELS=torch``) the draws of as many blocks as ``DEVICE_BATCH_BYTES`` allows are
    drawn on the device, their Gram matrices gathered at once and decided by ``decide_full_rank``:
    one batched Cholesky factorisation per certificate, eigenvalues only for the draws the
    certificates leave open, TF32 off; when the consumer ``may_stop`` early, the first call takes
    ``FIRST_BLOCKS`` blocks and each next twice as many, so a test settled by its first draws decides
    few more. The order of the test that certifies dependence adapts to what earlier blocks showed.
    Neither route, grouping nor order changes any decision.
    """
    d = gram.d
    entries = gram.cpu_entries
    workers = 1 if gram.batched else torch.get_num_threads()
    per_call = gram.blocks_per_call(k, mats=3) if gram.batched else None
    seen = [0, 0]  # draws decided, dependent draws

    def decide(sub):
        deficient_first = seen[1] * 2 > seen[0]
        if entries is None:
            assert tf32_is_off(), "a rank decision never runs in TF32"
            lam_lo = (gram.proj_t[sub] ** 2).sum(-1)  # sigma_max^2 >= ||X_S u||^2 for the top direction u
            return sub, decide_full_rank(
                gram.sub(sub),
                lambda j: gram.rows(sub[j]),
                k,
                d,
                rule,
                delta=1e-6,
                deficient_first=deficient_first,
                lam_lo=lam_lo,
                what="the draw",
            )
        full_np, decided = lapack.decide_draws(
            entries, sub.numpy(), d, rule, gram.proj, deficient_first=deficient_first
        )
        full = torch.from_numpy(full_np)
        exact = torch.zeros_like(full)
        left = torch.zeros_like(full)
        rest = torch.from_numpy(~decided).nonzero().squeeze(-1)
        if rest.numel():
            rs = sub[rest]
            dec = decide_full_rank(gram.sub(rs), lambda j: gram.rows(rs[j]), k, d, rule, delta=1e-6, what="the draw")
            full[rest], exact[rest], left[rest] = dec.full, dec.exact, dec.left_open()
        return sub, Decision(full, exact, left)

    draws = Draws(gram.T, k, samples, seed, True, gram.device)
    first = FIRST_BLOCKS if may_stop and gram.batched else None
    for sub, dec in decided_in_order(decide, draws, workers, per_call, entries is not None, progress, first):
        # the decisions to the host once a group (small copies), whatever the device: the tally reads them there
        dec = Decision(dec.full.cpu(), dec.exact.cpu(), dec.left_open().cpu())
        seen[0] += int(sub.shape[0])
        seen[1] += int((~dec.full & ~dec.left_open()).sum())
        yield sub, dec


@with_numerics()
def draw_decisions(
    X,
    k: int,
    *,
    samples: int = DEFAULT_SAMPLES,
    seed: int = DEFAULT_SEED,
    rule: RankRule | None = None,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Make the draws of :func:`subset_test` and decide each one, without counting them.

    Args:
        X (torch.Tensor | numpy.ndarray): the T x d matrix whose rows are drawn.
        k: the subset size, from 1 to T.
        samples: the number of draws N (default 5000).
        seed: the draws' seed (default 0).
        rule: the rank rule (None: the paper's rule for the data's dtype).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (default cpu).

    Returns:
        ``(indices, independent)``: the ``samples`` draws of ``k`` sorted row indices (N x k, int64) and
        whether each draw's rows are independent under ``rule`` (N, bool), as :func:`subset_test` decides them.

    Raises:
        InputError: when ``X`` is not a finite numeric T x d matrix, ``k`` is not a whole number from 1 to T,
            ``samples`` is not a whole number of at least 1, ``seed`` not one from 0 to 2^63 - 1, ``device`` is
            unknown, or ``rule``'s tolerance is at least 1 at d columns.
        ArithmeticError: (``numerics.checked.NumericalFailure``) when a draw's decision cannot be computed (no
            LAPACK route gives usable singular values): a yes or no cannot say undecided.
    """
    seed = checked_seed(seed)
    gram, rule, k, samples = draws_gram(X, rule, device, (Param("k"), k), samples)

    def decided():
        for sub, dec in _decided_draws(gram, k, samples, seed, rule):
            if bool(dec.left_open().any()):
                raise NumericalFailure(f"singular values of a {k} x {gram.d} float64 draw", ("gesdd", "gesvd", "gejsv"))
            yield sub, dec.full

    return joined(decided())


def draws_gram(
    X, rule: RankRule | None, device: torch.device | str, size: tuple[str | Param, int], samples: int
) -> tuple[Gram, RankRule, int, int]:
    """The Gram of the rows of ``X`` on ``device`` that the draws of :func:`draw_decisions` and
    :func:`~.sweep.draw_critical_sizes` are decided from (rescaled), the rule they are decided
    under (``rule`` fixed for ``X``), and the draws asked for, checked: ``size`` (the parameter's
    name and its value) rows of the T, ``samples`` times, each as an int.

    Raises:
        InputError: when ``X`` is not a finite numeric T x d matrix, the size is not a whole number
            from 1 to T, ``samples`` is not a whole number of at least 1, ``device`` is unknown, or
            ``rule`` is no RankRule or its tolerance is at least 1 at d columns.
    """
    X = as_matrix(X)
    k = validate.integer(size[0], size[1], maximum=X.shape[0])
    samples = validate.integer(Param("samples"), samples)
    rule, _ = fixed_rule(X, RankRule.given(rule, X.dtype), need_stats=False)
    unit, _ = unit_of(rows_of(X), rule)
    return Gram(unit, resolve_device(device)), unit.rule, k, samples


def joined(pairs) -> tuple[torch.Tensor, torch.Tensor]:
    """Pairs of tensors (the draws, what was decided of each) concatenated on the CPU, each side."""
    parts = [(a.cpu(), b.cpu()) for a, b in pairs]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


@dataclass
class _Tally:
    """What the draws of one test showed."""

    drawn: int = 0  # draws made, undecided ones included
    satisfied: int = 0
    undecided: int = 0  # draws whose decision no LAPACK route could compute
    rechecks: int = 0
    histogram: dict[int, int] = field(default_factory=dict)  # rank -> count over the dependent draws examined
    histogram_draws: int = 0
    dependent: list[list[int]] = field(default_factory=list)  # the first dependent draws: witness candidates
    stopped: bool = False

    @property
    def decided(self) -> int:
        """The draws decided (independent or dependent): the fraction's denominator."""
        return self.drawn - self.undecided


def _tally(
    gram: Gram,
    k: int,
    samples: int,
    seed: int,
    rule: RankRule,
    histogram_limit: int,
    max_fail: int | None,
    progress: Progress | None,
) -> _Tally:
    """Decide the seeded draws; stop early once more than ``max_fail`` are dependent (None: never),
    at the end of the block of ``DRAW_BLOCK`` draws where that happened, so where a test stops
    depends on nothing but the draws (not on how many blocks were decided at once)."""
    d = gram.d
    t = _Tally()
    for sub, dec in _decided_draws(gram, k, samples, seed, rule, progress, max_fail is not None):  # on the host
        stop = False
        left = dec.left_open()
        if max_fail is not None:  # stop after the block where the dependent draws first exceed max_fail
            fails = torch.cumsum((~dec.full & ~left).long(), 0) + (t.decided - t.satisfied)
            over = (fails > max_fail).nonzero()
            if over.numel():
                cut = ((t.drawn + int(over[0])) // DRAW_BLOCK + 1) * DRAW_BLOCK - t.drawn
                sub, dec, stop = sub[:cut], Decision(dec.full[:cut], dec.exact[:cut], left[:cut]), True
                left = left[:cut]
        t.drawn += int(sub.shape[0])
        t.satisfied += int(dec.full.sum())
        t.undecided += int(left.sum())
        t.rechecks += int(dec.exact.sum())
        bad = (~dec.full & ~left).nonzero().squeeze(-1)  # the dependent draws (an undecided one is not)
        for i in bad[: max(0, WITNESS_DRAWS - len(t.dependent))].tolist():
            t.dependent.append(sub[i].cpu().tolist())
        room = histogram_limit - t.histogram_draws
        if room > 0 and bad.numel():
            sel = bad[:room].to(sub.device)
            for part in sel.split(64):
                ranks = gram_rank(
                    gram.sub(sub[part]),
                    lambda j, part=part, sub=sub: gram.rows(sub[part[j]]),
                    d,
                    rule,
                    left="its rank is left out of the histogram",
                )
                for r in ranks.tolist():
                    if r >= 0:
                        t.histogram[int(r)] = t.histogram.get(int(r), 0) + 1
                        t.histogram_draws += 1
        if stop:
            t.stopped = t.drawn < samples
            break
    return t


def _reason(
    t: _Tally, k: int, threshold: float, witness: Witness | None, planned: int, max_fail: int, whole: Bound | None
) -> str:
    reason = _decided_reason(t, k, threshold, witness, planned, max_fail)
    if whole is not None:  # every subset proven independent: the estimate is a proof here
        reason = reason.removesuffix("; an estimate, not a proof") + f"; {whole.proves}"
    if t.undecided:
        reason += (
            f"; {t.undecided} of {t.drawn} draws left undecided (no LAPACK route gave usable singular values) "
            "and not counted"
        )
    if witness is None and t.dependent and t.satisfied < t.decided:
        reason += (
            "; no dependent draw could be proven (no LAPACK route gave usable singular values), "
            "so the exact status is undecided"
        )
    return reason


def _decided_reason(t: _Tally, k: int, threshold: float, witness: Witness | None, planned: int, max_fail: int) -> str:
    n, ok = t.decided, t.satisfied
    if n == 0:
        return f"none of the {t.drawn} draws of {rows_phrase(k)} could be decided, so there is no estimate"
    if ok / n >= threshold and witness is None:
        return (
            f"all {n} draws of {rows_phrase(k)} were independent"
            if ok == n
            else f"{ok}/{n} draws of {rows_phrase(k)} independent, fraction >= threshold {threshold}"
        ) + "; an estimate, not a proof"
    if witness is not None and ok / n >= threshold:
        return (
            f"{ok}/{n} draws independent (fraction >= threshold {threshold}), but a dependent "
            f"{len(witness.indices)}-subset was found, so the exact Kruskal rank is below {len(witness.indices)}"
        )
    reason = f"only {ok}/{n} draws of {rows_phrase(k)} independent, fraction < threshold {threshold}"
    if t.stopped:
        reason += (
            f"; sampling stopped after {n} of {planned} draws because more than "
            f"{max_fail} dependent draws settle the verdict"
        )
    if witness is not None:
        reason += f"; dependent {len(witness.indices)}-subset found (proof that Kruskal rank < {len(witness.indices)})"
    return reason


def _by_dimension(k: int, T: int, d: int, base: dict) -> SubsetTest | None:
    """The answer when k > d or k > T: every k rows are dependent, or there are no k rows."""
    if k <= d and k <= T:
        return None
    if k > d:
        reason = f"k = {k} > d = {d}: any {k} vectors in R^{d} are linearly dependent (no sampling needed)"
    else:
        reason = f"k = {k} > T = {T}: the Kruskal rank of {T} vectors is at most {T} (no sampling needed)"
    return _proved_failure(reason, "dimension", base)


def _proved_failure(reason: str, basis: str, base: dict, **found) -> SubsetTest:
    """A test that fails without a draw, proved by ``basis`` (dimension, set-rank); ``base``: the
    fields every test has (k, T, d, check, ...), ``found``: what the proof found (set rank, witness)."""
    k, T, d = base["k"], base["T"], base["d"]
    scope = "whole-set" if k >= T else "subsets"
    if scope == "whole-set":
        reason += _whole_set_note(base["check"], k, T, d)
    return SubsetTest(
        samples=0,
        satisfied=0,
        fraction=0.0,
        ci_low=0.0,
        ci_high=0.0,
        verdict="fails",
        reason=reason,
        sampled=False,
        exact_status="fails",
        exact_basis=basis,
        scope=scope,
        **found,
        **base,
    )


def _without_sampling(X, unit: Unit, k: int, stats: SetStats, base: dict, first_zero: int | None):
    """The answer when no sampling is needed (k above the set's rank ceiling, k = T), or None.
    The whole set's rank reported at size k is its ceiling there (``SetStats.ceiling``): its rank
    at the smallest tolerance any k-subset can have under the rule, which no k-subset exceeds."""
    T, d = X.shape
    rule = base["rule"]
    ceil_k = stats.ceiling(k, rule)
    if ceil_k < k:
        # every k rows are dependent: a zero row, two equal rows or a subset of k rows shows how
        with phases.phase("witness"):
            found = witness.set_witness(unit, k, first_zero if stats.zero_rows else None, hint=stats.rank)
        reason = (
            f"the whole set has numerical rank {ceil_k} at the smallest tolerance any {k}-subset can have under "
            f"the rule, and no subset's rank exceeds it, so no {rows_phrase(k)} {'is' if k == 1 else 'are'} "
            "independent (no sampling needed; a proof)"
        )
        return _proved_failure(reason, "set-rank", base, set_rank_ceiling=ceil_k, witness=found)
    if k == T:  # one subset only: decide it exactly, no sampling
        with phases.phase("witness"):
            try:
                whole = witness.prove(unit, range(T))
            except NumericalFailure:
                return _whole_set_undecided(base, ceil_k)
            ok = whole is None
            found = witness.shrink(unit, range(T), proven=whole) if not ok else None
        return SubsetTest(
            samples=1,
            satisfied=int(ok),
            fraction=float(ok),
            ci_low=float(ok),
            ci_high=float(ok),
            verdict="holds" if ok else "fails",
            reason=f"k = T = {T}: the only subset is the whole set, "
            f"which is {'independent' if ok else 'dependent'} (decided exactly, no sampling)"
            + _whole_set_note(base["check"], k, T, d),
            sampled=False,
            set_rank_ceiling=ceil_k,
            witness=found,
            exact_status="holds" if ok else "fails",
            exact_basis="exhaustive" if ok else "witness",
            scope="whole-set",
            **base,
        )
    return None


def _whole_set_undecided(base: dict, ceiling: int) -> SubsetTest:
    """k = T, and the whole set's decision cannot be computed (no LAPACK route gives its singular values): the one
    subset is undecided, and so is everything else."""
    T = base["T"]
    return SubsetTest(
        samples=0,
        satisfied=0,
        fraction=0.0,
        ci_low=0.0,
        ci_high=1.0,
        verdict="unavailable",
        reason=f"k = T = {T}: the only subset is the whole set, whose decision could not be computed (no LAPACK "
        "route gave usable singular values), so it is left undecided" + _whole_set_note(base["check"], T, T, base["d"]),
        sampled=False,
        set_rank_ceiling=ceiling,
        scope="whole-set",
        undecided_draws=1,
        **base,
    )


def _base(shape: tuple[int, int], k: int, run: Sampling, rule: RankRule, check: str, title: str | None) -> dict:
    """The fields every test at size ``k`` of a (T, d) set has, whatever answers it."""
    return dict(
        check=check,
        k=k,
        T=shape[0],
        d=shape[1],
        threshold=run.threshold,
        rule=rule,
        seed=run.seed,
        device=device_name(run.device),
        title=title or ("Kruskal test" if check == "kruskal" else check),
    )


@shared
@with_numerics()
def subset_test(
    X,
    k: int,
    *,
    sampling: Sampling | None = None,
    check: str = "kruskal",
    title: str | None = None,
    stats: SetStats | None = None,
    histogram_limit: int | None = None,
    progress: Progress | None = None,
    samples: int | None = None,
    threshold: float | None = None,
    seed: int | None = None,
    rule: RankRule | None = None,
    device: torch.device | str | None = None,
    stop_when_decided: bool | None = None,
) -> SubsetTest:
    """Estimate whether every k rows of X are independent, from N draws of k distinct rows.

    A draw is satisfied when its k x d matrix has rank k under ``rule``. The verdict is ``holds``
    when the satisfied fraction reaches ``threshold``. Known answers need no draws: k > d, k > T,
    and k above the rank ceiling of the whole set. A test that stops once decided records the
    draws made as ``samples`` and those asked for as ``planned_samples``. See :mod:`mhaaudit.request`
    for a keyword given beside ``sampling``.

    Args:
        X (torch.Tensor | numpy.ndarray): the T x d matrix whose rows are tested.
        k: the subset size.
        sampling: the draws as one :class:`~.sampling.Sampling` (None: built from the keywords).
        check: the check the test is for, in its record.
        title: its title in the report (default: "Kruskal test" for ``check="kruskal"``, else ``check``).
        stats: the whole set's :class:`~.results.SetStats` under the rule (None: computed here).
        histogram_limit: the dependent draws whose ranks the histogram covers (None: 100 to k = 271, 10 from 567).
        progress: called with the number of draws decided as they are.
        samples: the number of draws (default 5000).
        threshold: the satisfied fraction at which the verdict is ``holds`` (default 0.99).
        seed: the draws' seed (default 0).
        rule: the rank rule (None: the paper's rule for the data's dtype).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (default auto).
        stop_when_decided: stop once more than ``(1 - threshold) * samples`` draws fail (default True).

    Returns:
        The :class:`~.results.SubsetTest`: verdict, satisfied fraction and its interval, exact status and
        the evidence (a witness, a certified ceiling) behind them.

    Raises:
        InputError: when ``X`` is not a finite numeric T x d matrix, ``k`` is not a whole number of at least 1,
            ``samples``, ``threshold``, ``seed`` or ``histogram_limit`` is out of range, ``device`` is unknown,
            ``rule``'s tolerance is at least 1 at d columns, ``stats`` or ``progress`` is of another type, or a
            keyword disagrees with ``sampling``.
    """
    keywords = dict(
        samples=samples,
        threshold=threshold,
        seed=seed,
        rule=rule,
        device=device,
        stop_when_decided=stop_when_decided,
    )
    X = as_matrix(X)
    k = validate.integer(Param("k"), k)
    run = request_of(Sampling, sampling, "sampling", keywords)
    progress, stats = checked_progress(progress), checked_stats(stats)
    if histogram_limit is not None:
        histogram_limit = validate.integer(Param("histogram_limit"), histogram_limit, minimum=0)
    samples, threshold, seed, dev = run.samples, run.threshold, run.seed, run.device
    rule = run.rule or RankRule.for_dtype(X.dtype)
    base = _base(X.shape, k, run, rule, check, title)
    answer = _by_dimension(k, X.shape[0], X.shape[1], base)
    if answer is not None:
        return answer
    rule, stats = fixed_rule(X, rule, stats)  # the rule, and the whole set's statistics
    base["rule"] = rule
    # the rows divided by an exact power of two, gathered as the draws need them: nothing squared
    # overflows or underflows, whatever the data's scale, and no float64 copy of the whole set
    unit, sc = unit_of(rows_of(X), rule)
    answer = _without_sampling(X, unit, k, stats, base, sc.first_zero)
    if answer is not None:
        return answer
    if histogram_limit is None:
        histogram_limit = int(min(100, max(10, 2e9 // k**3)))
    max_fail = math.floor((1 - threshold) * samples + 1e-9)
    gram = Gram(unit, dev)
    t = _tally(
        gram, k, samples, seed, unit.rule, histogram_limit, max_fail if run.stop_when_decided else None, progress
    )
    return _sampled(t, unit, base, samples, max_fail, stats, gram.route)


def _sampled(
    t: _Tally, unit: Unit, base: dict, samples: int, max_fail: int, stats: SetStats, route: str | None
) -> SubsetTest:
    """The test of what the draws showed (``t``): ``samples`` draws were asked for, more than
    ``max_fail`` dependent ones settle the verdict; ``base``: the fields every test has; ``stats``: the
    whole set's (its ceiling at k, and at k = 1 the smallest row norm)."""
    k, threshold = base["k"], base["threshold"]
    ceiling = stats.ceiling(k, base["rule"])
    if t.satisfied:
        t.histogram[k] = t.histogram.get(k, 0) + t.satisfied
    n = t.decided  # an undecided draw is neither independent nor dependent: not counted
    lo, hi = clopper_pearson(t.satisfied, n) if n else (0.0, 1.0)
    with phases.phase("witness"):
        found = _first_proven(unit, t.dependent)  # else, with T <= d rows, perhaps every k-subset is independent:
        whole = witness.independent_set_floor(unit) if not t.dependent and not t.undecided and n else None
        if whole is None and k == 1 and not t.dependent and not t.undecided and n:  # every row non-zero
            whole = witness.nonzero_rows_floor(stats, base["rule"])
    frac = t.satisfied / n if n else 0.0
    return SubsetTest(
        samples=n,
        satisfied=t.satisfied,
        fraction=frac,
        ci_low=lo,
        ci_high=hi,
        verdict=("holds" if frac >= threshold else "fails") if n else "unavailable",
        reason=_reason(t, k, threshold, found, samples, max_fail, whole),
        witness=found,
        exact_status="fails" if found is not None else "holds" if whole is not None else "undecided",
        exact_basis="witness" if found is not None else "certified-floor" if whole is not None else "none",
        rank_histogram=t.histogram,
        histogram_draws=t.histogram_draws + t.satisfied,
        exact_rechecks=t.rechecks,
        sampled=True,
        set_rank_ceiling=ceiling,
        planned_samples=samples if t.stopped else None,
        gram=route,
        undecided_draws=t.undecided,
        **base,
    )


def _first_proven(unit: Unit, dependent: list[list[int]]) -> Witness | None:
    """A witness shrunk from the first of the ``dependent`` draws that LAPACK can prove, or None: a draw whose
    singular values no route gives is not a proof, and the next is tried."""
    for draw in dependent:
        try:
            return witness.shrink(unit, draw)
        except NumericalFailure:
            continue
    return None
