"""The Kruskal-rank estimator on a set of vectors: what ``mhaaudit kruskal`` runs.

:func:`estimate_kruskal_rank` takes its vectors from a file (a T x d matrix, a T x n x d token
array with a query index, or a folder written by ``check --save-features``) or captures them from
a model (one probe point, as ``check`` would), then runs the Monte-Carlo subset test at each size
asked for and the sweep when asked. A size that one of the registered checks tests
(:data:`~mhaaudit.checks.REGISTRY`: n for Assumption 1 or 3, min(T, d) for General Position)
carries that check's name; any other size is a plain ``kruskal`` test. The result is a
:class:`~mhaaudit.kruskal.KruskalResult` (``mhaaudit.KruskalResult``): the tests, the sweep, the
inputs and the run's facts, which the command prints as a table, JSON or parquet (``meta()`` is the
provenance stamp) and ``KruskalResult.from_json`` / ``from_parquet`` read back.

What is asked travels as three frozen objects, each checked once when it is built:
:class:`KruskalRequest` (the file and the sizes), :class:`Capture` (the model and data, when there
is no file) and :class:`~mhaaudit.settings.Settings` (draws, threshold, seed, tolerances, device).
The keyword arguments of :func:`estimate_kruskal_rank` are the command's option names; they build
the same objects in :func:`kruskal_request`, :func:`kruskal_capture` and ``Settings.resolve``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import kruskal, phases, validate
from .capture import capture_probe
from .checks import REGISTRY, check_for_size
from .defaults import KRUSKAL_VECTORS
from .distributed import describe, shared
from .errors import InputError, Param
from .facts import CaptureFacts, JobFacts
from .feature_files import read_array, to_query_matrix
from .features import FeatureSet
from .keywords import given, refuse_disagreement
from .kruskal import KruskalInputs, KruskalResult, as_matrix, data_read, fixed_rule
from .kruskal.proofs import shared_proofs
from .mapped import MappedArray
from .numerics.stream import peak_rss_bytes
from .probes import one_column
from .progress import log, task
from .request import DATA_KEYWORDS, SETTINGS_KEYWORDS, DataRequest, ModelRequest, build_requests, build_settings
from .seeds import SeedPlan, SeedsResult, plan_for
from .seeds.kruskal import kruskal_seeds
from .settings import Settings
from .tensor_values import own_storage

VECTORS = KRUSKAL_VECTORS  # the query vectors, or the Assumption 3 vectors (query + mean of context rows)


@dataclass(frozen=True)
class KruskalRequest:
    """What is estimated: the vectors' file (None: a model's capture), and the sizes.

    ``ks`` are the candidate sizes (none: n and min(T, d) when n is known, else the sweep);
    ``n`` is the vectors' context length (tested by default; a saved feature folder and a
    captured model know their own); ``vectors`` chooses the query or the Assumption 3 vectors of a
    feature folder or a capture; ``key`` a tensor or column of a file; ``query_index`` the query
    row of a T x n x d token array (with a model: :class:`~mhaaudit.pipeline.ModelRequest`'s).
    Build it with :func:`kruskal_request`, which checks every field.
    """

    features: Path | None = None
    ks: tuple[int, ...] = ()
    sweep: bool = False
    n: int | None = None
    vectors: str | None = None
    key: str | None = None
    query_index: int | None = None


@dataclass(frozen=True)
class Capture:
    """Where the vectors come from without a file: one probe point of a model over data.

    ``variant`` is one column (``embedding``, ``random-attention``, ``random``, ``trained``,
    ``random-L<k>`` or ``trained-L<k>``); build it with :func:`kruskal_capture`.
    """

    model: ModelRequest
    data: DataRequest
    variant: str = "random"


# --------------------------------------------------------------------------- the requests


def kruskal_request(
    features: str | Path | None = None,
    *,
    k: int | Sequence[int] | None = None,
    sweep: bool = False,
    n: int | None = None,
    vectors: str | None = None,
    key: str | None = None,
    query_index: int | None = None,
) -> KruskalRequest:
    """A checked :class:`KruskalRequest`: sizes and n positive integers (repeated sizes once),
    ``vectors`` queries or a3, ``features`` a path.

    Raises:
        InputError: when a size, n or ``query_index`` is not an integer in range, ``vectors`` is neither
            queries nor a3, or ``features`` is not a path (a tensor in memory, a number).
    """
    sizes = validate.values_of(k)  # one size or a sequence of them, never a string's characters
    ks = tuple(dict.fromkeys(validate.integer(Param("k"), kk) for kk in sizes))
    n = None if n is None else validate.integer(Param("n"), n)
    if vectors is not None:
        vectors = validate.choice(Param("vectors"), getattr(vectors, "value", vectors), VECTORS)
    if query_index is not None:
        query_index = validate.integer(Param("query_index"), query_index, minimum=None)
    if features is not None and not isinstance(features, (str, os.PathLike)):
        raise InputError(
            Param("features") + f" must be the path of a features file or folder, not {type(features).__name__} "
            "(a matrix in memory: mhaaudit.kruskal_sweep or mhaaudit.subset_test)"
        )
    return KruskalRequest(
        features=None if features is None else Path(features),
        ks=ks,
        sweep=validate.flag(Param("sweep"), sweep),
        n=n,
        vectors=vectors,
        key=key,
        query_index=query_index,
    )


def kruskal_capture(
    model: str = "vit-base",
    *,
    variant: str = "random",
    n: int | None = None,
    query_index: int | None = None,
    data: DataRequest | None = None,
    **model_options,
) -> Capture:
    """A checked :class:`Capture` of one column of ``model``: ``n`` is a text model's context length, ``data`` a
    :class:`~mhaaudit.request.DataRequest` (default: the built-in data, 2000 examples, batches of 32);
    ``model_options`` are :class:`~mhaaudit.request.ModelRequest`'s (backend, weights, revision, trust_remote_code).
    Several columns, or ``weights`` without a trained column, are refused."""
    one_column(variant, model_options.get("weights"))
    options = dict(model_options)
    request = ModelRequest(
        model, context_length=n, query_index=query_index, weights_path=options.pop("weights", None), **options
    )
    return Capture(model=request, data=data if data is not None else DataRequest(), variant=variant)


# keyword -> the KruskalRequest field it sets
_REQUEST_FIELDS = {
    "features": "features",
    "k": "ks",
    "sweep": "sweep",
    "n": "n",
    "vectors": "vectors",
    "key": "key",
    "query_index": "query_index",
}
_REQUEST_KEYS = tuple(k for k in _REQUEST_FIELDS if k != "features")
_CAPTURE_KEYS = ("model", "variant", "backend", "weights", "revision", "trust_remote_code", "data", *DATA_KEYWORDS)


def _pick(keywords: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    return {k: keywords[k] for k in keys if k in keywords}


def _objects(features, request, capture, settings, keywords: Mapping[str, Any]):
    """The three objects from the keywords, under the rule of :mod:`mhaaudit.request`.

    Returns:
        ``(request, capture, settings)``; capture is None when the request reads features from a file.

    Raises:
        TypeError: when ``keywords`` holds a name :func:`estimate_kruskal_rank` does not take.
        InputError: when capture keywords (or ``capture``) come with features, ``key`` comes without them, or
            a keyword disagrees with the object beside it.
    """
    unknown = set(keywords) - {*_REQUEST_KEYS, *SETTINGS_KEYWORDS, *_CAPTURE_KEYS}
    if unknown:
        raise TypeError(f"estimate_kruskal_rank() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
    keywords = given(keywords)
    request = _request_object(request, {"features": features, **_pick(keywords, _REQUEST_KEYS)})
    settings = build_settings(settings, _pick(keywords, SETTINGS_KEYWORDS))
    capturing = _pick(keywords, _CAPTURE_KEYS)
    if request.features is not None:
        if capture is not None or capturing:
            raise InputError(
                f"{', '.join(capturing) or 'capture'} has no effect when features ({request.features}) are given: "
                "the capture options apply only without a file"
            )
        return request, None, settings
    if request.key is not None:
        raise InputError(
            Param("key") + " has no effect without features: it chooses a tensor or column in a feature file"
        )
    return request, _capture_object(request, capture, settings, capturing), settings


def _request_object(request: KruskalRequest | None, keywords: dict[str, Any]) -> KruskalRequest:
    if request is None:
        return kruskal_request(**given(keywords))
    meant = lambda k, value: getattr(kruskal_request(**{k: value}), _REQUEST_FIELDS[k])  # noqa: E731
    refuse_disagreement(request, "request", keywords, _REQUEST_FIELDS, meant)
    return request


def build_capture(request: KruskalRequest, settings: Settings, keywords: Mapping[str, Any]) -> Capture:
    """The :class:`Capture` of a request without features, built from the capture keywords
    (``model``, ``variant``, ``backend``, ``weights``, ..., ``data``, ``split``, ``limit``, ...; None:
    not given) and the request's n and query index, as :func:`estimate_kruskal_rank` builds it."""
    return _capture_object(request, None, settings, given(keywords))


def _capture_object(request: KruskalRequest, capture: Capture | None, settings: Settings, keywords: dict) -> Capture:
    """The capture: ``capture`` checked against the keywords given and the request's n and query
    index, or built from them by :func:`~mhaaudit.request.build_requests`."""
    requests = {k: v for k, v in keywords.items() if k not in ("model", "variant", "data")}
    if capture is None:
        variant = keywords.get("variant") or "random"
        one_column(variant, keywords.get("weights"))
        requests |= {"context_length": request.n, "query_index": request.query_index}
        built = build_requests(keywords.get("model") or "vit-base", keywords.get("data"), settings, requests)
        return Capture(model=built.model, data=built.data, variant=variant)
    same = lambda k, value: value  # noqa: E731
    refuse_disagreement(capture, "capture", _pick(keywords, ["variant"]), meant=same)
    refuse_disagreement(capture.model, "capture", _pick(keywords, ["model"]), meant=same)
    refuse_disagreement(capture.data, "capture", _pick(keywords, ["data"]), meant=same)
    said = {"n": request.n, "query_index": request.query_index}
    refuse_disagreement(capture.model, "capture", said, {"n": "context_length"}, meant=same)
    build_requests(capture.model, capture.data, settings, requests)
    return capture


# --------------------------------------------------------------------------- the estimate


def estimate_kruskal_rank(
    features: str | Path | None = None,
    *,
    request: KruskalRequest | None = None,
    capture: Capture | None = None,
    settings: Settings | None = None,
    on_note: Callable[[str], None] | None = None,
    seeds: str | Sequence[int] | None = None,
    vary: str = "both",
    k: int | Sequence[int] | None = None,
    sweep: bool | None = None,
    n: int | None = None,
    vectors: str | None = None,
    key: str | None = None,
    query_index: int | None = None,
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
    model: str | None = None,
    variant: str | None = None,
    backend: str | None = None,
    weights: str | None = None,
    revision: str | None = None,
    trust_remote_code: bool | None = None,
    data: str | None = None,
    split: str | None = None,
    limit: int | None = None,
    batch_size: int | str | None = None,
    keep_duplicates: bool | None = None,
    text_column: str | None = None,
    image_column: str | None = None,
    convert_rgb: bool | None = None,
) -> KruskalResult | SeedsResult:
    """Estimate the Kruskal rank of a set of vectors: Monte-Carlo tests at candidate sizes, or a sweep.

    The vectors come from ``features``, or without it from a capture of one column of ``model``
    (default ``vit-base``, ``variant="random"``, on the built-in data). Each keyword is the command's
    option of the same name; None: not given. See :mod:`mhaaudit.request` for a keyword given beside
    a request object. Capture keywords or ``capture`` beside ``features`` are refused.

    Args:
        features: a T x d matrix file (``.npy``, ``.pt``, ``.safetensors``, ``.parquet``) or a saved feature folder.
        request: the :class:`KruskalRequest` (None: built by :func:`kruskal_request` from the keywords).
        capture: the :class:`Capture` (None: built by :func:`kruskal_capture` from the keywords).
        settings: the :class:`~mhaaudit.settings.Settings` (None: built from the keywords).
        on_note: called with each note: the vectors and the rank rule, and the sweep run for want of ``k``.
        seeds: with a capture only, capture and estimate once per seed (``"0-4"``, ``"0,3,7"`` or a list).
        vary: what ``seeds`` vary: ``"both"``, ``"weights"`` or ``"data"``.
        k: one candidate size or several (None: n and min(T, d) when n is known, else the sweep).
        sweep: run the sweep over every size instead.
        n: the vectors' context length, tested by default.
        vectors: ``"queries"`` or ``"a3"``, the vectors of a feature folder or a capture.
        key: the tensor or column of the file to read.
        query_index: the query row of a T x n x d token array, or of the model.
        samples: Monte-Carlo draws per test (default 5000).
        threshold: the satisfied fraction at which a test holds (default 0.99).
        seed: the run's seed (default 0).
        rtol: the rank rule's relative tolerance.
        atol: the rank rule's absolute tolerance.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (default auto).
        stop_when_decided: stop a test once its verdict is settled (default True).
        progress: show progress bars on stderr.
        weights_seed: the seed of a capture's random weights, set apart from ``seed``.
        data_seed: the seed of a capture's data, set apart from ``seed``.
        model: the model to capture from: an alias, a hub id or a local folder.
        variant: the captured column (default ``random``).
        backend: ``"hf"`` or ``"timm"`` (None: detected).
        weights: a local folder or file of trained weights.
        revision: a branch, tag or commit of a hub model.
        trust_remote_code: let a hub repository's own model code run.
        data: the data source of the capture (None: the built-in data).
        split: the data split to read.
        limit: how many examples to read (default 2000).
        batch_size: examples per forward pass, or ``"auto"`` (see :mod:`mhaaudit.batching`).
        keep_duplicates: keep exact duplicate inputs (default: dropped).
        text_column: the column or field holding the text (None: found).
        image_column: the column holding the images (None: found).
        convert_rgb: convert images of other modes to RGB instead of skipping them.

    Returns:
        A :class:`KruskalResult`, or with ``seeds`` a :class:`~mhaaudit.seeds.SeedsResult`.

    Raises:
        InputError: for a bad argument, seed options given with ``features``, a file that cannot be read as
            vectors, a size above T, or n above T when n sets the size; a capture raises what
            :func:`~mhaaudit.audit` raises.
    """
    keywords = dict(
        k=k,
        sweep=sweep,
        n=n,
        vectors=vectors,
        key=key,
        query_index=query_index,
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
        model=model,
        variant=variant,
        backend=backend,
        weights=weights,
        revision=revision,
        trust_remote_code=trust_remote_code,
        data=data,
        split=split,
        limit=limit,
        batch_size=batch_size,
        keep_duplicates=keep_duplicates,
        text_column=text_column,
        image_column=image_column,
        convert_rgb=convert_rgb,
    )
    request, capture, settings = _objects(features, request, capture, settings, keywords)
    if request.features is not None and (
        settings.weights_seed is not None or settings.data_seed is not None or seeds is not None or vary != "both"
    ):
        raise InputError(
            Param("seeds")
            + ", "
            + Param("vary")
            + ", "
            + Param("weights_seed")
            + " and "
            + Param("data_seed")
            + " have no "
            f"effect when features ({request.features}) are given: they seed the capture from "
            + Param("model")
            + " (a file's vectors are fixed; "
            + Param("seed")
            + " seeds the draws)"
        )
    plan = plan_for(settings, seeds, vary)
    if plan is None:
        return _estimate_one(request, capture, settings, on_note)
    assert capture is not None, "a request without features comes with its capture"
    return _estimate_seeds(request=request, capture=capture, settings=settings, plan=plan, on_note=on_note)


@shared
def _estimate_seeds(
    *,
    request: KruskalRequest,
    capture: Capture,
    settings: Settings,
    plan: SeedPlan,
    on_note: Callable[[str], None] | None = None,
) -> SeedsResult:
    """The estimate of a capture for each seed of ``plan``: a call every rank of a torchrun job
    makes, so that the seeds can be spread over the ranks (:func:`mhaaudit.seeds.over_seeds`)."""
    asked = {"request": request, "settings": settings}  # and the capture: kruskal_seeds adds it
    return kruskal_seeds(
        lambda **run: _estimate_one(request, capture, settings.with_(**run), on_note), plan, capture, asked
    )


def _estimate_one(
    request: KruskalRequest, capture: Capture | None, settings: Settings, on_note: Callable[[str], None] | None
) -> KruskalResult:
    result, spent = phases.recorded(lambda: _estimate_timed(request, capture, settings, on_note))
    return dataclasses.replace(result, phases=spent)


def _estimate_timed(
    request: KruskalRequest, capture: Capture | None, settings: Settings, on_note: Callable[[str], None] | None
) -> KruskalResult:
    """The estimate of :func:`_estimate_one`, its phases timed by the recording open around it: the capture's
    own (or ``data``, reading a file), ``whole-set statistics``, ``draws`` and ``witness``."""
    t0 = time.perf_counter()
    X, n, source, vectors, captured, read = _vectors(request, capture, settings)
    with phases.phase("whole-set statistics"):  # its checks, and the streaming pass over a memory-mapped file
        X = as_matrix(X)
    T, d = X.shape
    ks, sweep = _sizes(request, n, T, d, vectors)
    if not (request.ks or request.sweep) and sweep:
        _note(on_note, "No " + Param("k") + " given and n unknown: running the full sweep.", settings.progress)
    with phases.phase("whole-set statistics"):  # a rule refused by X's shape and dtype, before an expanded X is copied
        rule, _ = fixed_rule(X, settings.rule(X.dtype), need_stats=False)
        rule, stats = fixed_rule(X := own_storage(X), rule)
    if on_note is not None:
        on_note(f"{T} vectors in R^{d} from {source}; rank rule: {rule.describe()}")
    tests, sw, timings = _estimate(X, ks, sweep, n, vectors, settings, rule, stats)
    return KruskalResult(
        inputs=KruskalInputs(source=str(source), T=T, d=d, n=n, dtype=str(X.dtype).replace("torch.", "")),
        tests=tuple(tests),
        sweep=sw,
        rule=rule,
        seed=settings.seed,
        device=settings.device_name,
        threshold=settings.threshold,
        samples=settings.samples,
        set_rank=stats.rank,
        timings=timings,
        total_s=round(time.perf_counter() - t0, 3),
        storage="memory-mapped" if isinstance(X, MappedArray) else "memory",
        peak_rss_bytes=peak_rss_bytes(),
        capture=captured,
        **data_read(read),  # with --model: the inputs skipped and the capture's notes
        distributed=JobFacts.of(describe()),
    )


def _vectors(request: KruskalRequest, capture: Capture | None, settings: Settings):
    """The vectors to test: (matrix, n, source, which vectors, how the capture ran: batch size and
    weights read, empty for a file; the capture's meta, {} for a file). A feature folder and a model know their n.

    Raises:
        InputError: when ``n`` differs from the n a saved feature folder was captured with.
    """
    if request.features is None:
        assert capture is not None, "a request without features comes with its capture"
        vectors = request.vectors or "queries"
        for kk in request.ks:  # before the model is loaded (the sizes are checked against T again once read)
            if kk > capture.data.limit:
                raise InputError(
                    Param("k") + f" {kk} is larger than " + Param("limit") + f" {capture.data.limit}, "
                    "the most examples the capture reads"
                )
        # the vectors alone: the context ranks (Assumption 2) are not computed; the model's n bounds T below only
        # where the default sizes test it (given sizes or the sweep alone draw what T allows)
        needs_n = not (request.ks or request.sweep)
        fs = capture_probe(
            capture.model, capture.data, capture.variant, settings=settings, contexts=False, needs_n=needs_n
        )
        source = f"{fs.meta.get('model')} [{fs.meta.get('variant')}] {vectors} on {fs.meta.get('data')}"
        captured = CaptureFacts.of(fs.meta.get("batch"), fs.meta.get("weights_read"))
        return (fs.a3 if vectors == "a3" else fs.queries), fs.n, source, vectors, captured, fs.meta
    with phases.phase("data"):
        X, n_known, source, vectors = _read(request)
    n = request.n
    if n is not None and n_known is not None and n != n_known:
        raise InputError(
            Param("n") + f" {n}: the saved features in {request.features} were captured with n = {n_known}"
        )
    return X, n or n_known, source, vectors, CaptureFacts(), {}


def _read(request: KruskalRequest):
    """Vectors from a file or a ``--save-features`` folder: (matrix, n or None, source, which vectors).

    Raises:
        InputError: when ``key`` or ``query_index`` is given for a folder, ``vectors`` for a single matrix, or
            the file cannot be read as vectors.
    """
    features, key, query_index, vectors = request.features, request.key, request.query_index, request.vectors
    assert features is not None, "only a request with features is read"
    if features.is_dir():
        for name, value in (("key", key), ("query_index", query_index)):
            if value is not None:
                raise InputError(
                    Param(name) + f" has no effect on a saved feature folder ({features}): it holds the query "
                    "and Assumption 3 vectors already; choose them with " + Param("vectors")
                )
        vectors = vectors or "queries"
        fs = FeatureSet.load(features)
        m = fs.meta
        source = f"{features} ({vectors}; {m.get('model', '?')} {m.get('variant', '')} layer {m.get('layer', '?')})"
        return (fs.a3 if vectors == "a3" else fs.queries), fs.n, source, vectors
    if vectors is not None:
        raise InputError(
            Param("vectors") + f" has no effect on a single matrix ({features}): it chooses between the query and "
            "Assumption 3 vectors of a saved feature folder or of " + Param("model")
        )
    arr, desc = read_array(features, key=key)
    X, source = to_query_matrix(arr, query_index, desc)
    return X, None, source, "queries"


def _note(on_note: Callable[[str], None] | None, line: str, watched: bool) -> None:
    """``line`` to ``on_note`` when given, else to stderr for a person watching (``watched``)."""
    if on_note is not None:
        on_note(line)
    else:
        log(line, watched)


def _sizes(request: KruskalRequest, n: int | None, T: int, d: int, vectors: str):
    """The sizes to test and whether to sweep: ``k``, else n and min(T, d) when n is known, else the sweep.

    Raises:
        InputError: when a size ``k`` is above T, or n (setting the sizes) is above T.
    """
    ks, sweep = list(request.ks), request.sweep
    for kk in ks:
        if kk > T:
            raise InputError(Param("k") + f" {kk} is larger than the number of vectors T = {T}")
    if ks or sweep:
        return ks, sweep
    if n is None:
        return ks, True
    if n > T:
        a = "3" if vectors == "a3" else "1"
        raise InputError(
            f"only T = {T} vectors, but Assumption {a} at n = {n} needs at least n of them; "
            "supply more vectors or choose sizes with " + Param("k")
        )
    return list(dict.fromkeys([n, min(T, d)])), False


def _estimate(X, ks, sweep: bool, n, vectors: str, settings: Settings, rule, stats):
    """The subset test at each size (named for the registered check it answers) and the sweep when
    asked: (tests, sweep or None, timings in s)."""
    T, d = X.shape
    common = dict(
        samples=settings.samples,
        threshold=settings.threshold,
        seed=settings.seed,
        rule=rule,
        device=settings.device,
        stats=stats,
    )
    tests, timings, sw = [], {}, None
    for kk in ks:
        check = check_for_size(kk, n=n, T=T, d=d, vectors=vectors)
        s = time.perf_counter()
        with task(f"k = {kk}", settings.samples, settings.progress) as adv, phases.phase("draws"):
            title = REGISTRY[check].title if check in REGISTRY else None  # None: the estimator's own title
            tests.append(
                kruskal.subset_test(
                    X,
                    kk,
                    check=check,
                    title=title,
                    progress=adv,
                    stop_when_decided=settings.stop_when_decided,
                    **common,
                )
            )
        timings[f"k={kk}"] = round(time.perf_counter() - s, 3)
    if sweep:
        s = time.perf_counter()
        with task("sweep", settings.samples, settings.progress) as adv, phases.phase("draws"):
            sw = kruskal.kruskal_sweep(X, progress=adv, **common)
        timings["sweep"] = round(time.perf_counter() - s, 3)
    tests, sw = shared_proofs(tests, sw, X)  # what one test proves decides the others' exact statuses
    return tests, sw, timings


__all__ = [
    "Capture",
    "KruskalRequest",
    "KruskalResult",
    "build_capture",
    "estimate_kruskal_rank",
    "kruskal_capture",
    "kruskal_request",
]
