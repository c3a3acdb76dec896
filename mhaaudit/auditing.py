"""The audit's entry points: :func:`audit`, :func:`capture_features` and :func:`check_features`.

They plan the probe points (:mod:`mhaaudit.probes`), capture them (:mod:`mhaaudit.capture`), run
the checks and return the result types of :mod:`mhaaudit.audit_result`. :func:`audit` resolves the
:class:`~mhaaudit.settings.Settings` once and passes them down. Under ``torchrun`` every rank makes
the call (:func:`~mhaaudit.distributed.shared`): the batches are dealt among the ranks and the reduced
features gathered back, so every rank holds what one process would, and the record ``meta`` names the
world size and backend.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from . import phases, validate
from .audit_result import AuditResult, CheckResult, Column, check_features_folder
from .capture import Captured, capture_probe, collect_features, images_ahead
from .check_words import is_decided
from .checks import REGISTRY, ContextRankResult
from .distributed import describe, shared
from .errors import DataError, InputError, OfflineError, Param, joined
from .facts import AuditSettings, JobFacts, ModelFacts, ReadFacts
from .features import FeatureSet
from .kruskal import SubsetTest, Sweep, kruskal_sweep, set_stats
from .kruskal.proofs import shared_proofs
from .models import modality_of
from .models.file_reads import read_once
from .notes import Note, NoteKind, add_note
from .probes import IMAGE_VARIANTS, VARIANT_HELP, Probe, plan_probes, probe_for_variant, refuse_weights_without_trained
from .progress import task
from .request import DataRequest, ModelRequest, Requests, build_requests, build_settings
from .seeds import SeedsResult, plan_for
from .seeds.check import audit_seeds
from .settings import Settings
from .sources import describe_skips
from .theory import CapacityBound, a1_status, theorem1_bound

# The entry points, and the names of planning, capture and the result types they are read by.
__all__ = [
    "IMAGE_VARIANTS",
    "VARIANT_HELP",
    "AuditResult",
    "CheckResult",
    "Column",
    "Note",
    "NoteKind",
    "Probe",
    "add_note",
    "audit",
    "capture_features",
    "capture_probe",
    "check_features",
    "check_features_folder",
    "collect_features",
    "memorisation_bound",
    "plan_probes",
    "probe_for_variant",
    "refuse_weights_without_trained",
    "run_checks",
]


@shared
def capture_features(
    model: str | ModelRequest,
    *,
    variant: str = "random",
    layer: int = 1,
    data: str | DataRequest | None = None,
    settings: Settings | None = None,
    weights_path: str | None = None,
    query_index: int | None = None,
    split: str | None = None,
    limit: int | None = None,
    batch_size: int | str | None = None,
    seed: int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    device: str | None = None,
    backend: str | None = None,
    context_length: int | None = None,
    progress: bool | None = None,
    keep_duplicates: bool | None = None,
    revision: str | None = None,
    trust_remote_code: bool | None = None,
    text_column: str | None = None,
    image_column: str | None = None,
    convert_rgb: bool | None = None,
    weights_seed: int | None = None,
    data_seed: int | None = None,
) -> FeatureSet:
    """Capture the reduced features of one column: what ``mhaaudit kruskal`` uses without a file.

    A keyword left at None is not given. See :mod:`mhaaudit.request` for a keyword given beside a
    request object.

    Args:
        model: an alias, a hub id or a local folder, or a :class:`~mhaaudit.request.ModelRequest`.
        variant: the column: ``embedding``, ``random-attention``, ``random``, ``trained``, ``random-L<k>``, ...
        layer: the depth of a ``random`` or ``trained`` column.
        data: the data source, or a :class:`~mhaaudit.request.DataRequest` (None: the built-in data).
        settings: the :class:`~mhaaudit.settings.Settings` (None: built from the keywords).
        weights_path: a local folder or file of trained weights (``weights`` in :func:`audit`).
        query_index: the query token's position (None: the model's own).
        split: the data split to read.
        limit: how many examples to read (default 2000).
        batch_size: examples per forward pass, or ``"auto"`` (see :mod:`mhaaudit.batching`).
        seed: the run's seed (default 0).
        rtol: the rank rule's relative tolerance.
        atol: the rank rule's absolute tolerance.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (default auto).
        backend: ``"hf"`` or ``"timm"`` (None: detected).
        context_length: the tokens per example n of a text model.
        progress: show progress bars on stderr.
        keep_duplicates: keep exact duplicate inputs (default: dropped).
        revision: a branch, tag or commit of a hub model.
        trust_remote_code: let a hub repository's own model code run.
        text_column: the column or field holding the text (None: found).
        image_column: the column holding the images (None: found).
        convert_rgb: convert images of other modes to RGB instead of skipping them.
        weights_seed: the seed of the random weights, set apart from ``seed``.
        data_seed: the seed of the data, set apart from ``seed``.

    Returns:
        The :class:`~mhaaudit.features.FeatureSet` of the column ``variant`` at depth ``layer``.

    Raises:
        InputError: for a bad argument (as :func:`audit`), or ``weights_path`` for a column that does not
            read trained weights.
        ModelError: when the model cannot be found, built or probed, or has no query token of its own.
        DataError: when the data cannot be read.
        OfflineError: when the model's configuration, its trained weights or a hub data set must be
            downloaded and the network cannot be reached.
    """
    keywords = dict(
        weights_path=weights_path,
        query_index=query_index,
        split=split,
        limit=limit,
        batch_size=batch_size,
        seed=seed,
        rtol=rtol,
        atol=atol,
        device=device,
        backend=backend,
        context_length=context_length,
        progress=progress,
        keep_duplicates=keep_duplicates,
        revision=revision,
        trust_remote_code=trust_remote_code,
        text_column=text_column,
        image_column=image_column,
        convert_rgb=convert_rgb,
        weights_seed=weights_seed,
        data_seed=data_seed,
    )
    req = build_requests(model, data, settings, keywords)
    layer = validate.integer(Param("layer"), layer, minimum=None)  # a number given as text is that number
    return capture_probe(req.model, req.data, variant, settings=req.settings, layer=layer)


# --------------------------------------------------------------------------- checks


def run_checks(
    fs: FeatureSet, settings: Settings, *, sweep: bool = False, label: str = ""
) -> tuple[dict[str, CheckResult], Sweep | None, dict[str, float]]:
    """Every registered check (:data:`~mhaaudit.checks.REGISTRY`: GP, A1, A2, A3) and optionally the
    sweep on one reduced feature set, under ``settings``: (results by check, sweep or None, timings in s)."""

    rule = settings.rule(fs.dtype)
    timings: dict[str, float] = {}
    tests: dict[str, CheckResult] = {}
    t0 = time.perf_counter()
    exact = [c for c in REGISTRY.values() if not c.estimated]
    sampled = [c for c in REGISTRY.values() if c.estimated]
    for c in exact:
        tests[c.name] = _with_seed(c.decide(fs, rule=rule), settings.seed)
    swept = ["queries"] if sweep else []  # the sweep is the queries' Kruskal-rank curve (Figure 1)
    with phases.phase("whole-set statistics"):
        stats = {v: set_stats(getattr(fs, v), rule) for v in dict.fromkeys([*(c.vectors for c in sampled), *swept])}
    timings["set ranks"] = round(time.perf_counter() - t0, 3)
    common = dict(samples=settings.samples, threshold=settings.threshold, seed=settings.seed, device=settings.device)
    for c in sampled:
        t0 = time.perf_counter()
        with (
            task(f"{label} {c.name} (k = {c.k(fs.n, fs.T, fs.d)})", settings.samples, settings.progress) as adv,
            phases.phase("draws"),
        ):
            tests[c.name] = c.decide(
                fs,
                rule=rule,
                stats=stats[c.vectors],
                progress=adv,
                stop_when_decided=settings.stop_when_decided,
                **common,
            )
        timings[c.name] = round(time.perf_counter() - t0, 3)
    sw = None
    if sweep:
        t0 = time.perf_counter()
        with task(f"{label} sweep", settings.samples, settings.progress) as adv, phases.phase("draws"):
            sw = kruskal_sweep(fs.queries, stats=stats["queries"], progress=adv, rule=rule, **common)
        timings["sweep"] = round(time.perf_counter() - t0, 3)
    for vectors in stats:  # the proofs of the tests of one set of vectors decide each other's exact statuses
        mine = {c.name: t for c in sampled if c.vectors == vectors and isinstance(t := tests[c.name], SubsetTest)}
        decided, with_proofs = shared_proofs(
            list(mine.values()), sw if vectors == "queries" else None, getattr(fs, vectors)
        )
        tests.update(zip(mine, decided, strict=True))
        sw = with_proofs if vectors == "queries" else sw
    return tests, sw, timings


def _with_seed(result, seed: int):
    """An exact check's result with the audit's seed in its record (a sampled check has its own)."""
    return replace(result, seed=seed) if isinstance(result, ContextRankResult) else result


def check_features(
    fs: FeatureSet,
    *,
    settings: Settings | None = None,
    sweep: bool = False,
    label: str = "",
    samples: int | None = None,
    threshold: float | None = None,
    seed: int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    device: str | None = None,
    progress: bool | None = None,
    stop_when_decided: bool | None = None,
) -> tuple[dict[str, CheckResult], Sweep | None, dict[str, float]]:
    """Run GP, A1, A2 and A3 (and optionally the sweep) on one reduced feature set.

    A keyword left at None is not given: the defaults :func:`audit` has. See :mod:`mhaaudit.request`
    for a keyword given beside ``settings``.

    Args:
        fs: the reduced features (from :func:`capture_features` or ``FeatureSet.load``).
        settings: the :class:`~mhaaudit.settings.Settings` (None: built from the keywords).
        sweep: also run the Kruskal-rank sweep of the queries.
        label: the name progress bars give the feature set.
        samples: Monte-Carlo draws per test (default 5000).
        threshold: the satisfied fraction at which a test holds (default 0.99).
        seed: the draws' seed (default 0).
        rtol: the rank rule's relative tolerance.
        atol: the rank rule's absolute tolerance.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (default auto).
        progress: show progress bars on stderr.
        stop_when_decided: stop a test once its verdict is settled (default True).

    Returns:
        ``(tests, sweep, timings)``: each check's result by name, the sweep (None without ``sweep``),
        and each step's time in seconds.

    Raises:
        InputError: when ``fs`` is not a FeatureSet whose fields agree (:meth:`FeatureSet.checked`), a sample
            count, threshold, tolerance or device is out of range, or a keyword disagrees with ``settings``.
    """
    keywords = dict(
        samples=samples,
        threshold=threshold,
        seed=seed,
        rtol=rtol,
        atol=atol,
        device=device,
        progress=progress,
        stop_when_decided=stop_when_decided,
    )
    if not isinstance(fs, FeatureSet):
        raise InputError(
            Param("fs") + f" must be a FeatureSet (capture_features, reduce_tokens, FeatureSet.load), not "
            f"{type(fs).__name__}"
        )
    sweep = validate.flag(Param("sweep"), sweep)
    return run_checks(fs.checked(), build_settings(settings, keywords), sweep=sweep, label=label)


def _column(p: Probe, got: Captured, settings: Settings, sweep: bool) -> Column:
    col = Column(p)
    if p.variant in got.unavailable:
        col.status, col.reason = "unavailable", got.unavailable[p.variant]
        return col
    fs = got.features[p.variant]
    if fs.T < fs.n:
        # the limit is at least n (checked before the data pass), so the data ran out: raising it cannot help

        skipped = f"; skipped: {describe_skips(got.skips.as_dict())}" if got.skips else ""
        dups = got.duplicates.dropped if got.duplicates is not None else 0
        dropped = f"; {dups} exact duplicates dropped (keep them with " + Param("keep_duplicates") + ")" if dups else ""
        hint = (
            "; convert the other modes to RGB with " + Param("convert_rgb") + " (as torchvision's ImageFolder does)"
            if "not RGB" in got.skips and got.image_policy.startswith("RGB only")
            else ""
        )
        raise DataError(
            f"the data gave only {fs.T} usable examples, but Assumptions 1 and 3 draw n = {fs.n} of the "
            f"T examples, so T must be at least {fs.n}{skipped}" + dropped + hint + "; supply more data"
        )
    col.features, col.T = fs, fs.T
    col.weights_source = fs.meta.get("weights_source", "")
    col.weights_read = ReadFacts.of(fs.meta.get("weights_read"))
    col.tests, col.sweep, col.timings = run_checks(fs, settings, sweep=sweep, label=p.variant)
    assert got.info is not None, "a column with features has its model's facts"
    col.bound, col.bound_hint = memorisation_bound(got.info, col)
    return col


def memorisation_bound(info: ModelFacts, col: Column) -> tuple[CapacityBound | None, str]:
    """What Theorem 1 / Remark 1 concludes from one audited column's verdicts, with the model's
    heads: the bound (None when the model does not say its heads, width and length), and, when
    the theorem gives no count, what would give one (else "")."""
    H, dh, n, d = info.num_heads, info.head_dim, info.n, info.d
    if col.status != "ok" or not (
        isinstance(H, int)
        and isinstance(dh, int)
        and isinstance(n, int)
        and isinstance(d, int)
        and min(H, dh, n, d) > 0
    ):
        return None, ""
    a1, a2 = col.tests.get("assumption_1"), col.tests.get("assumption_2")
    est = col.sweep.estimate if col.sweep is not None and col.sweep.estimate >= 1 else None
    # the theorem needs Assumption 1 itself: a proven failure (a witness) overrides a holding estimate
    a1_holds = {"holds": True, "fails": False}.get(a1_status(a1.verdict, a1.exact_status) or "") if a1 else None
    a2_holds = {"holds": True, "fails": False}.get(a2.verdict) if a2 else None
    a1_proven = is_decided(a1.exact_status) if a1 else None
    b = theorem1_bound(
        heads=H, head_dim=dh, n=n, d=d, a1_holds=a1_holds, a2_holds=a2_holds, kruskal_estimate=est, a1_proven=a1_proven
    )  # fmt: skip
    hint = ""
    if not b.applies and est is None and not a1_holds and a2_holds and n < d:  # what Remark 1 needs besides k
        hint = "run with " + Param("sweep") + " for a Remark 1 count from the estimated Kruskal rank"
    return b, hint


@shared
def audit(
    model: str | ModelRequest,
    *,
    variants: Sequence[str] | None = None,
    layer: int | None = None,
    layers: Sequence[int] | str | None = None,
    data: str | DataRequest | None = None,
    settings: Settings | None = None,
    sweep: bool = False,
    on_note: Callable[[str], None] | None = None,
    seeds: str | Sequence[int] | None = None,
    vary: str = "both",
    weights: str | None = None,
    query_index: int | None = None,
    backend: str | None = None,
    context_length: int | None = None,
    revision: str | None = None,
    trust_remote_code: bool | None = None,
    split: str | None = None,
    limit: int | None = None,
    batch_size: int | str | None = None,
    keep_duplicates: bool | None = None,
    text_column: str | None = None,
    image_column: str | None = None,
    convert_rgb: bool | None = None,
    samples: int | None = None,
    threshold: float | None = None,
    seed: int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    device: str | None = None,
    stop_when_decided: bool | None = None,
    progress: bool | None = None,
    weights_seed: int | None = None,
    data_seed: int | None = None,
) -> AuditResult | SeedsResult:
    """Audit ``model`` on ``data``: the paper's Table 1 (images) or Table 3 (text), and more.

    Each column's features are captured once and checked for GP, A1, A2 and A3. A keyword left at
    None is not given: the request object's value, else the field's default. See
    :mod:`mhaaudit.request` for a keyword given beside a request object.

    Args:
        model: an alias, a hub id or a local folder, or a :class:`~mhaaudit.request.ModelRequest`.
        variants: the columns, default all: ``embedding``, ``random-attention``, ``random``, ``trained`` (or "a,b").
        layer: the depth of the ``random`` and ``trained`` image columns (default 1).
        layers: audit random and trained weights at each of these depths instead (text default 0, 1; or ``"0-6"``).
        data: the data source, or a :class:`~mhaaudit.request.DataRequest` (None: the built-in data).
        settings: the :class:`~mhaaudit.settings.Settings` (None: built from the keywords).
        sweep: also run the Kruskal-rank sweep of each column's queries.
        on_note: called with each note as it comes (the notes are in ``AuditResult.notes`` too).
        seeds: run once per seed (``"0-4"``, ``"0,3,7"`` or a list of ints).
        vary: what ``seeds`` vary: ``"both"``, ``"weights"`` or ``"data"``.
        weights: a local folder or file of trained weights (the request's ``weights_path``).
        query_index: the query token's position (None: the model's own).
        backend: ``"hf"`` or ``"timm"`` (None: detected).
        context_length: the tokens per example n of a text model.
        revision: a branch, tag or commit of a hub model.
        trust_remote_code: let a hub repository's own model code run.
        split: the data split to read.
        limit: how many examples to read (default 2000).
        batch_size: examples per forward pass, or ``"auto"`` (see :mod:`mhaaudit.batching`).
        keep_duplicates: keep exact duplicate inputs (default: dropped).
        text_column: the column or field holding the text (None: found).
        image_column: the column holding the images (None: found).
        convert_rgb: convert images of other modes to RGB instead of skipping them.
        samples: Monte-Carlo draws per test (default 5000).
        threshold: the satisfied fraction at which a test holds (default 0.99).
        seed: the run's seed (default 0).
        rtol: the rank rule's relative tolerance.
        atol: the rank rule's absolute tolerance.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (default auto).
        stop_when_decided: stop a test once its verdict is settled (default True).
        progress: show progress bars on stderr.
        weights_seed: the seed of the random weights, set apart from ``seed``.
        data_seed: the seed of the data, set apart from ``seed``.

    Returns:
        An :class:`AuditResult`, or a :class:`mhaaudit.seeds.SeedsResult` with ``seeds``.
        Skipped inputs are in ``AuditResult.skips`` by cause, duplicates in ``AuditResult.duplicates``.
        A run that gets fewer than ``limit`` examples says so in the notes and the table.

    Raises:
        InputError: for a bad argument: an unknown variant, ``layer`` below 1 or given beside ``layers``
            or for a text model, ``weights`` with no trained column, a sample count, threshold, tolerance,
            device, limit or seed list out of range, or a keyword that disagrees with a request object beside it.
        ModelError: when the model cannot be found, built or probed, or has no query token of its own.
        DataError: when the data cannot be read or gives fewer than n usable examples.
        OfflineError: when what the run needs (the model's configuration, a hub data set) must be downloaded and
            the network cannot be reached; trained weights that cannot be had leave their column unavailable,
            with the reason, unless no column can be audited.
    """
    keywords = dict(
        weights=weights,
        query_index=query_index,
        backend=backend,
        context_length=context_length,
        revision=revision,
        trust_remote_code=trust_remote_code,
        split=split,
        limit=limit,
        batch_size=batch_size,
        keep_duplicates=keep_duplicates,
        text_column=text_column,
        image_column=image_column,
        convert_rgb=convert_rgb,
        samples=samples,
        threshold=threshold,
        seed=seed,
        rtol=rtol,
        atol=atol,
        device=device,
        stop_when_decided=stop_when_decided,
        progress=progress,
        weights_seed=weights_seed,
        data_seed=data_seed,
    )
    req = build_requests(model, data, settings, keywords)
    cols = Columns(variants, layer, layers, validate.flag(Param("sweep"), sweep))
    plan = plan_for(req.settings, seeds, vary)
    with read_once():  # a weights file's shapes: read for its check before the first column, kept for its load
        if plan is None:
            return _audit(req, cols, on_note)
        return audit_seeds(
            lambda **run: _audit(req._replace(settings=req.settings.with_(**run)), cols, on_note),
            plan,
            req.data.data,
            {"model": req.model, "data": req.data, "settings": req.settings, "columns": cols},
        )


@dataclass(frozen=True)
class Columns:
    """What the audit measures: the probe points (``plan_probes``: ``variants``, ``layer`` and ``layers`` as
    :func:`audit` takes them) and whether each gets the sweep; a series of checkpoints asks the same."""

    variants: Sequence[str] | None
    layer: int | None
    layers: Sequence[int] | str | None
    sweep: bool


def _audit(req: Requests, cols: Columns, on_note: Callable[[str], None] | None) -> AuditResult:
    result, spent = phases.recorded(lambda: _audit_timed(req, cols, on_note))
    result.timings = spent
    return result


def _audit_timed(req: Requests, cols: Columns, on_note: Callable[[str], None] | None) -> AuditResult:
    """The audit of :func:`_audit`, its phases timed by the recording open around it.

    Raises:
        InputError: when trained weights are given without a trained column.
        OfflineError: when no column can be audited offline.
    """
    request, data_req, settings = req
    modality = modality_of(request.model, backend=request.backend, weights_path=request.weights_path)
    probes = plan_probes(modality, cols.variants, cols.layers, cols.layer)
    if request.weights_path is not None and not any(p.init == "trained" for p in probes):
        raise InputError(
            Param("weights") + " has no effect without a trained column; add trained to " + Param("variants")
        )
    request.check_weights_fit(settings)  # a weights file of another width: refused before the first column
    if modality == "image":  # the first images are made while the model loads
        images_ahead(data_req, settings)
    got = collect_features(request, probes, data_req, settings, on_note=on_note)
    if not got.features:  # every column unavailable: there is nothing to audit, and that is no success
        raise OfflineError("no column could be audited: " + joined(dict.fromkeys(got.unavailable.values()), "; "))
    columns = [_column(p, got, settings, cols.sweep) for p in probes]
    run = AuditSettings.of(
        settings.as_dict(),
        limit=data_req.limit,
        batch_size=got.batch.size if got.batch is not None else data_req.batch_size,
        batch_size_choice=got.batch.how if got.batch is not None else None,
        layer=1 if cols.layer is None else cols.layer,
        layers=tuple(cols.layers) if cols.layers is not None else None,
        distributed=JobFacts.of(describe()),
    )
    assert got.info is not None, "a run with features has its model's facts"
    return AuditResult(
        model=request.model,
        info=got.info,
        data=got.data,
        columns=columns,
        settings=run,
        timings={},
        skipped=got.skipped,
        notes=got.notes,
        duplicates=got.duplicates,
        skips=got.skips,
        image_policy=got.image_policy,
    )
