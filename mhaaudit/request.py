"""A user's request as three frozen objects, each checked once where it is made, then passed down.

- :class:`ModelRequest`: what to load (the model, its backend, trained weights, the context
  length and query token, the hub revision and whether repository code may run).
- :class:`DataRequest`: what data (the source, split, how many examples, the batch size, the
  column and image policy, whether duplicates are kept).
- :class:`~mhaaudit.settings.Settings`: how to run (device, tolerances, draws, threshold, seed,
  early stopping, progress bars).

A :class:`ModelRequest` or :class:`DataRequest` is valid by construction: its ``__post_init__``
checks and normalises every field (an integer given as text, ``batch_size="auto"``), and refuses
what can be refused before any work (a ``weights_path`` that does not exist, a revision or
``trust_remote_code`` that cannot apply). ``Settings.resolve`` does the same for the settings.

The public entry points (:func:`mhaaudit.audit`, :func:`mhaaudit.capacity_audit`,
:func:`mhaaudit.capture_features`) accept the objects (``model=ModelRequest(...)``,
``data=DataRequest(...)``, ``settings=Settings.resolve(...)``) and keep the documented keyword names
(``docs/guides/python.md``) as conveniences. :func:`build_requests` is the one place where keywords
become objects: a keyword the caller gave beside an object that says otherwise is refused, never silently resolved
(:func:`keyword_conveniences` tells it which keywords the caller gave). The keywords the three
entry points share are one table, :class:`Conveniences` with its defaults :data:`CONVENIENCES`,
from which their signatures are built.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple, TypedDict, get_type_hints

from . import validate
from .batching import available_memory, parse_batch_size
from .errors import InputError, param
from .models import resolve
from .models.load import check_hub_options, check_revision
from .settings import Settings

__all__ = [
    "CONVENIENCES",
    "Conveniences",
    "DataRequest",
    "ModelRequest",
    "Requests",
    "build_request",
    "build_requests",
    "build_settings",
    "keyword_conveniences",
    "refuse_disagreement",
]


@dataclass(frozen=True)
class ModelRequest:
    """What the user named: the model, how to load it, and which token is the query.

    Checked on construction (InputError): ``weights_path`` must exist; ``context_length`` and
    ``query_index`` must be whole numbers (``context_length`` at least 1); ``revision`` and
    ``trust_remote_code`` are refused where they cannot apply (a local model, timm).
    """

    model: str
    backend: str | None = None  # "hf" | "timm" | None (detect)
    weights_path: str | None = None  # local folder or file with trained weights
    context_length: int | None = None  # text models: tokens per example n
    query_index: int | None = None  # None: the model's own ([CLS] or last token)
    revision: str | None = None  # branch, tag or commit of a hub model
    trust_remote_code: bool = False  # let a repository's own model code run

    def __post_init__(self) -> None:

        if self.weights_path is not None and not Path(self.weights_path).expanduser().exists():
            raise InputError(f"{{param:weights}} {self.weights_path}: does not exist (no such file or folder)")
        if self.context_length is not None:
            object.__setattr__(self, "context_length", validate.integer(param("context_length"), self.context_length))
        if self.query_index is not None:
            object.__setattr__(
                self, "query_index", validate.integer(param("query_index"), self.query_index, minimum=None)
            )
        object.__setattr__(self, "revision", check_revision(self.revision))
        object.__setattr__(self, "trust_remote_code", bool(self.trust_remote_code))
        if self.revision is not None or self.trust_remote_code:  # refused before any work when they cannot apply
            check_hub_options(
                resolve(self.model, backend=self.backend, weights_path=self.weights_path),
                self.revision,
                self.trust_remote_code,
            )


@dataclass(frozen=True)
class DataRequest:
    """Where the examples come from and how many are read per forward pass.

    Checked on construction (InputError): ``limit`` is a whole number from 1 to what the memory
    here can hold (every example kept costs at least 64 bytes); ``batch_size`` a positive whole
    number or ``"auto"`` (see :mod:`mhaaudit.batching`); a column name is a non-empty string.
    """

    data: str | None = None  # None: the built-in offline default
    split: str = "train"
    limit: int = 2000
    batch_size: int | str = 32  # or "auto" (see mhaaudit.batching)
    keep_duplicates: bool = False  # exact duplicate inputs are dropped unless asked to keep them
    text_column: str | None = None  # the column/field holding text (None: found, see sources.choose_column)
    image_column: str | None = None  # the column holding images (None: found)
    convert_rgb: bool = False  # convert images of other modes to RGB (torchvision's rule) instead of skipping them

    def __post_init__(self) -> None:

        for name in ("text_column", "image_column"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise InputError(f"{{param:{name}}} must name a column, got {value!r}")
        # Whatever the model, every example kept costs its vectors (at least 64 bytes): a bound before any work.
        object.__setattr__(
            self, "limit", validate.integer(param("limit"), self.limit, maximum=available_memory() // 64)
        )
        object.__setattr__(self, "batch_size", parse_batch_size(self.batch_size))
        object.__setattr__(self, "keep_duplicates", bool(self.keep_duplicates))
        object.__setattr__(self, "convert_rgb", bool(self.convert_rgb))


class Requests(NamedTuple):
    """The three objects of one call, as :func:`build_requests` returns them."""

    model: ModelRequest
    data: DataRequest
    settings: Settings


# keyword -> the field it sets, per object
MODEL_KEYWORDS = {
    "backend": "backend",
    "weights": "weights_path",
    "weights_path": "weights_path",
    "context_length": "context_length",
    "query_index": "query_index",
    "revision": "revision",
    "trust_remote_code": "trust_remote_code",
}
DATA_KEYWORDS = {
    name: name
    for name in ("split", "limit", "batch_size", "keep_duplicates", "text_column", "image_column", "convert_rgb")
}
SETTINGS_KEYWORDS = {
    name: name
    for name in (
        "device",
        "samples",
        "threshold",
        "seed",
        "rtol",
        "atol",
        "stop_when_decided",
        "progress",
        "weights_seed",
        "data_seed",
    )
}
KEYWORDS = {**MODEL_KEYWORDS, **DATA_KEYWORDS, **SETTINGS_KEYWORDS}


class Conveniences(TypedDict, total=False):
    """The keyword conveniences that :func:`mhaaudit.audit`, :func:`mhaaudit.capacity_audit` and
    :func:`mhaaudit.capture_features` all take (``**conveniences``), each a field of a request
    object; :data:`CONVENIENCES` holds their defaults, and :func:`keyword_conveniences` puts them
    in the entry points' signatures."""

    split: str
    limit: int
    batch_size: int | str
    seed: int
    rtol: float | None
    atol: float | None
    device: str
    backend: str | None
    context_length: int | None
    progress: bool
    keep_duplicates: bool
    revision: str | None
    trust_remote_code: bool
    text_column: str | None
    image_column: str | None
    convert_rgb: bool
    weights_seed: int | None
    data_seed: int | None


#: The defaults of :class:`Conveniences`, in signature order.
CONVENIENCES: Conveniences = {
    "split": "train",
    "limit": 2000,
    "batch_size": 32,
    "seed": 0,
    "rtol": None,
    "atol": None,
    "device": "auto",
    "backend": None,
    "context_length": None,
    "progress": False,
    "keep_duplicates": False,
    "revision": None,
    "trust_remote_code": False,
    "text_column": None,
    "image_column": None,
    "convert_rgb": False,
    "weights_seed": None,
    "data_seed": None,
}


def build_requests(
    model: str | ModelRequest,
    data: str | DataRequest | None,
    settings: Settings | None,
    keywords: Mapping[str, Any],
    given: frozenset[str] = frozenset(),
) -> Requests:
    """The model, data and settings of one call: the one place keywords become request objects.

    ``model``, ``data`` and ``settings`` are the objects themselves or, for ``model`` and ``data``,
    the name or source they stand for. ``keywords`` are the entry point's convenience keywords with
    their values (given or the entry point's defaults); ``given`` names those the caller passed.
    An object is taken as it is; a keyword the caller gave beside it must say what the object says
    (InputError otherwise: one of them is a mistake, and which one cannot be known). Without an
    object, the keywords build it, checked as any object is.

    Returns:
        The :class:`Requests` (model, data, settings); data is None where ``data`` is None.

    Raises:
        TypeError: when ``keywords`` holds a name that is not a request keyword (a bug in the entry point).
        InputError: when a keyword given disagrees with the object beside it, or a value is refused as the
            object's own check refuses it.
    """
    unknown = set(keywords) - set(KEYWORDS)
    if unknown:
        raise TypeError(f"not a request keyword: {', '.join(sorted(unknown))}")
    run = build_settings(settings, {k: v for k, v in keywords.items() if k in SETTINGS_KEYWORDS}, given)
    load = _one(
        ModelRequest,
        model,
        "model",
        MODEL_KEYWORDS,
        keywords,
        given,
        lambda kw: ModelRequest(model, **kw),  # type: ignore[arg-type]
    )
    examples = _one(
        DataRequest,
        data,
        "data",
        DATA_KEYWORDS,
        keywords,
        given,
        lambda kw: DataRequest(data, **kw),  # type: ignore[arg-type]
    )
    return Requests(load, examples, run)


def build_settings(
    settings: Settings | None, keywords: Mapping[str, Any], given: frozenset[str] = frozenset()
) -> Settings:
    """The settings part of :func:`build_requests`, for an entry point that takes settings only
    (:func:`mhaaudit.check_features`): ``settings`` itself, checked against the keywords given, or
    ``Settings.resolve`` of the keywords."""
    return _one(Settings, settings, "settings", SETTINGS_KEYWORDS, keywords, given, lambda kw: Settings.resolve(**kw))


def build_request(
    cls: type, obj, keywords: Mapping[str, Any], given: frozenset[str] = frozenset(), what: str = "request"
):
    """The one request object of an entry point that takes one of its own (``cls``: memorize's
    ``MemorizeRequest``, kruskal's ``Sampling``), the same way :func:`build_requests` makes its
    three: ``obj`` itself, a keyword the caller gave beside it refused where it says otherwise
    (InputError), or, without ``obj``, ``cls(**keywords)``. Each keyword is the field of the same
    name; ``what`` is the entry point's name for the object.

    Raises:
        TypeError: when ``obj`` is neither None nor a ``cls``.
        InputError: when a keyword given disagrees with ``obj``, or ``cls`` refuses a keyword's value.
    """
    if obj is not None and not isinstance(obj, cls):
        raise TypeError(f"{what} must be a {cls.__name__}, got {type(obj).__name__}")
    return _one(cls, obj, what, {k: k for k in keywords}, keywords, given, lambda kw: cls(**kw))


def _one(
    cls: type,
    obj,
    what: str,
    names: Mapping[str, str],
    keywords: Mapping[str, Any],
    given: frozenset[str],
    build: Callable[[dict], Any],
):
    """The ``cls`` object of a call: ``obj`` itself, checked against the keywords given, or built."""
    mine = {k: v for k, v in keywords.items() if k in names}
    if not isinstance(obj, cls):
        return build({names[k]: v for k, v in mine.items()})

    def meant(k: str, value):
        field = names[k]
        if cls is Settings:
            return getattr(Settings.resolve(**{field: value}), field)
        return getattr(replace(obj, **{field: value}), field)  # type: ignore[type-var]  # obj is a cls instance

    refuse_disagreement(obj, what, names, mine, given, meant)
    return obj


def refuse_disagreement(
    obj,
    what: str,
    names: Mapping[str, str],
    keywords: Mapping[str, Any],
    given: frozenset[str],
    meant: Callable[[str, Any], Any],
) -> None:
    """The one rule for a keyword given beside an object: it must say what the object says.

    ``names`` maps each keyword to the field of ``obj`` it sets; ``meant(keyword, value)`` is the
    field's value the keyword stands for (checked and normalised as the object would hold it). A
    keyword in ``given`` whose value differs from the field raises InputError naming both (one of
    them is a mistake, and which one cannot be known); one left at its default is not compared.

    Raises:
        InputError: when a keyword in ``given`` means a value other than the field of ``obj`` it sets.
    """
    for k in sorted(given & set(keywords) & set(names)):
        field = names[k]
        said = getattr(obj, field)
        if meant(k, keywords[k]) != said:
            raise InputError(
                f"{{param:{k}}} = {keywords[k]!r} disagrees with the {type(obj).__name__} given as {what} "
                f"({field} = {said!r}); give the value in one place"
            )


def keyword_conveniences(fn: Callable) -> Callable:
    """Mark a public entry point whose keywords are conveniences for the request objects.

    ``fn`` takes a keyword-only parameter ``given`` (hidden from its public signature): the names
    of the keywords the caller passed, for :func:`build_requests` to tell a keyword given from one
    left at its default. An ``fn`` that takes ``**conveniences: Unpack[Conveniences]`` gets every
    keyword of :class:`Conveniences`, with its default from :data:`CONVENIENCES`: in its public
    signature (``inspect.signature``, ``help()``) as keyword-only parameters, and in
    ``conveniences`` on every call (an unknown keyword is a TypeError, as for any function).
    """
    sig = inspect.signature(fn)
    own = [p for p in sig.parameters.values() if p.name != "given" and p.kind is not p.VAR_KEYWORD]
    takes = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    shared: Mapping[str, Any] = CONVENIENCES if takes else {}
    types = get_type_hints(Conveniences)
    kind = inspect.Parameter.KEYWORD_ONLY
    public = sig.replace(
        parameters=own + [inspect.Parameter(n, kind, default=v, annotation=types[n]) for n, v in shared.items()]
    )

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if "given" in kwargs:
            raise TypeError(f"{fn.__name__}() got an unexpected keyword argument 'given'")
        try:
            public.bind(*args, **kwargs)
        except TypeError as e:  # an argument the entry point does not take
            raise TypeError(f"{fn.__name__}() {e}") from None
        return fn(*args, given=frozenset(kwargs), **{**shared, **kwargs})

    call.__signature__ = public  # type: ignore[attr-defined]
    return call
