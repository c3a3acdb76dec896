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
A field's default is stated once: in :mod:`mhaaudit.defaults`, or the dataclass field itself.

A keyword beside a request object
---------------------------------
The public entry points (:func:`mhaaudit.audit`, :func:`mhaaudit.capacity_audit`,
:func:`mhaaudit.capture_features`, :func:`mhaaudit.estimate_kruskal_rank`, ...) take the objects
(``model=ModelRequest(...)``, ``data=DataRequest(...)``, ``settings=Settings.resolve(...)``; a
memorize run's ``MemorizeRequest``, a Kruskal test's ``Sampling``, ...), or plain keywords, written
in their signatures, that set the objects' fields. The rule for both together, in every entry point:

- A keyword left at ``None`` is not given. Its value is the object's, or, without an object, the
  field's default (``limit=None`` reads 2000 examples, :data:`mhaaudit.defaults.DEFAULT_LIMIT`).
- Without an object, the keywords given build it, checked as any object is.
- A keyword given beside an object must say what the object says (after the object's own check
  and normalisation: ``limit="256"`` agrees with ``DataRequest(limit=256)``); otherwise it is an
  :class:`~mhaaudit.errors.InputError` naming both, never silently resolved: one of them is a
  mistake, and which one cannot be known. This holds for a keyword that equals the field's
  default too (``limit=2000`` beside ``DataRequest(limit=256)`` is refused).

:func:`build_requests` is the one place the shared keywords become the three objects;
:mod:`mhaaudit.keywords` holds the check itself, low in the package so that the Kruskal estimator
applies it without importing the model stack.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from . import validate
from .batching import available_memory, parse_batch_size
from .defaults import DEFAULT_BATCH_SIZE, DEFAULT_LIMIT, DEFAULT_SPLIT
from .errors import InputError, Param
from .keywords import given, refuse_disagreement
from .models import resolve
from .models.load import check_hub_options, check_revision, check_weights_fit
from .settings import Settings

__all__ = [
    "DATA_KEYWORDS",
    "KEYWORDS",
    "MODEL_KEYWORDS",
    "SETTINGS_KEYWORDS",
    "DataRequest",
    "ModelRequest",
    "Requests",
    "build_requests",
    "build_settings",
]


@dataclass(frozen=True)
class ModelRequest:
    """What the user named: the model, how to load it, and which token is the query.

    Checked on construction (InputError): ``weights_path`` must name something that exists; ``context_length`` and
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

        model = os.fspath(self.model) if isinstance(self.model, os.PathLike) else self.model
        if not isinstance(model, str):  # a string is what every later step reads
            raise InputError(
                Param("model") + f" must be a name, hub id or path (a string), not {type(self.model).__name__}"
            )
        object.__setattr__(self, "model", model)
        if isinstance(self.weights_path, str) and not self.weights_path:  # (``Path("")`` is the current folder)
            raise InputError(Param("weights") + " is empty: name a folder or file of trained weights")
        if self.weights_path is not None and not Path(self.weights_path).expanduser().exists():
            raise InputError(Param("weights") + f" {self.weights_path}: does not exist (no such file or folder)")
        if self.context_length is not None:
            object.__setattr__(self, "context_length", validate.integer(Param("context_length"), self.context_length))
        if self.query_index is not None:
            object.__setattr__(
                self, "query_index", validate.integer(Param("query_index"), self.query_index, minimum=None)
            )
        object.__setattr__(self, "revision", check_revision(self.revision))
        object.__setattr__(self, "trust_remote_code", validate.flag(Param("trust_remote_code"), self.trust_remote_code))
        if self.revision is not None or self.trust_remote_code:  # refused before any work when they cannot apply
            check_hub_options(
                resolve(self.model, backend=self.backend, weights_path=self.weights_path),
                self.revision,
                self.trust_remote_code,
            )

    def check_weights_fit(self, settings: Settings) -> None:
        """Before any model is built: trained weights given in a single file fit the model this request's
        configuration builds (its tensors' shapes, read without their data; ``models.load.check_weights_fit``),
        so that a run with a trained column refuses a file of another width before its first column.

        Args:
            settings: the run's settings (device, weights seed).

        Raises:
            InputError: for an invalid request, as the load would.
            ModelError: when the configuration cannot build a model, or the file does not fit it.
        """
        if self.weights_path is None:
            return
        check_weights_fit(
            self.model,
            weights="trained",
            backend=self.backend,
            weights_path=self.weights_path,
            device=settings.device,
            context_length=self.context_length,
            seed=settings.weights_seed_used,
            revision=self.revision,
            trust_remote_code=self.trust_remote_code,
        )


@dataclass(frozen=True)
class DataRequest:
    """Where the examples come from and how many are read per forward pass.

    Checked on construction (InputError): ``data`` is None, a string or a path (read as its string);
    ``split`` a non-empty string; ``limit`` a whole number from 1 to what the memory
    here can hold (every example kept costs at least 64 bytes); ``batch_size`` a positive whole
    number or ``"auto"`` (see :mod:`mhaaudit.batching`); a column name is a non-empty string.
    """

    data: str | None = None  # None: the built-in offline default
    split: str = DEFAULT_SPLIT
    limit: int = DEFAULT_LIMIT
    batch_size: int | str = DEFAULT_BATCH_SIZE  # or "auto" (see mhaaudit.batching)
    keep_duplicates: bool = False  # exact duplicate inputs are dropped unless asked to keep them
    text_column: str | None = None  # the column/field holding text (None: found, see sources.choose_column)
    image_column: str | None = None  # the column holding images (None: found)
    convert_rgb: bool = False  # convert images of other modes to RGB (torchvision's rule) instead of skipping them

    def __post_init__(self) -> None:
        kinds = "a path, a data set's name or None (the built-in data)"  # a pathlib.Path is the path it names
        object.__setattr__(self, "data", validate.name_or_path(Param("data"), self.data, kinds))
        if not isinstance(self.split, str) or not self.split.strip():
            raise InputError(Param("split") + f" must name a split, got {self.split!r}")
        for name in ("text_column", "image_column"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise InputError(Param(name) + f" must name a column, got {value!r}")
        # Whatever the model, every example kept costs its vectors (at least 64 bytes): a bound before any work.
        object.__setattr__(
            self, "limit", validate.integer(Param("limit"), self.limit, maximum=available_memory() // 64)
        )
        object.__setattr__(self, "batch_size", parse_batch_size(self.batch_size))
        object.__setattr__(self, "keep_duplicates", validate.flag(Param("keep_duplicates"), self.keep_duplicates))
        object.__setattr__(self, "convert_rgb", validate.flag(Param("convert_rgb"), self.convert_rgb))


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


def build_requests(
    model: str | ModelRequest, data: str | DataRequest | None, settings: Settings | None, keywords: Mapping[str, Any]
) -> Requests:
    """The model, data and settings of one call: the one place keywords become request objects,
    under the rule of the module docstring.

    Args:
        model: a :class:`ModelRequest`, or the model's name it stands for.
        data: a :class:`DataRequest`, or the source it stands for (None: the built-in data).
        settings: the :class:`~mhaaudit.settings.Settings`, or None.
        keywords: the entry point's keywords of :data:`KEYWORDS`, by name (None: not given). Settings
            built from keywords stop each test once it is decided unless ``stop_when_decided=False``
            (:data:`~mhaaudit.defaults.DEFAULT_STOP_WHEN_DECIDED`).

    Returns:
        The :class:`Requests` (model, data, settings).

    Raises:
        TypeError: when ``keywords`` holds a name that is not a request keyword (a bug in the entry point).
        InputError: when a keyword given disagrees with the object beside it, or a value is refused as the
            object's own check refuses it.
    """
    unknown = set(keywords) - set(KEYWORDS)
    if unknown:
        raise TypeError(f"not a request keyword: {', '.join(sorted(unknown))}")
    run = build_settings(settings, {k: v for k, v in keywords.items() if k in SETTINGS_KEYWORDS})
    model_keywords = {k: v for k, v in keywords.items() if k in MODEL_KEYWORDS}
    if isinstance(model, ModelRequest):
        refuse_disagreement(model, "model", model_keywords, MODEL_KEYWORDS)
    else:
        model = ModelRequest(model, **{MODEL_KEYWORDS[k]: v for k, v in given(model_keywords).items()})
    data_keywords = {k: v for k, v in keywords.items() if k in DATA_KEYWORDS}
    if isinstance(data, DataRequest):
        refuse_disagreement(data, "data", data_keywords)
    else:
        data = DataRequest(data, **given(data_keywords))
    return Requests(model, data, run)


def build_settings(settings: Settings | None, keywords: Mapping[str, Any]) -> Settings:
    """The settings part of :func:`build_requests`, for an entry point that takes settings only
    (:func:`mhaaudit.check_features`): ``settings`` once the keywords given agree with it, or
    ``Settings.resolve`` of the keywords given (stopping each test once decided unless they say not to).

    Raises:
        TypeError: when ``settings`` is neither None nor a Settings.
        InputError: when a keyword given disagrees with ``settings``, or is out of range.
    """
    if settings is None:
        return Settings.resolve(**given(keywords))
    if not isinstance(settings, Settings):
        raise TypeError(f"settings must be a Settings, got {type(settings).__name__}")
    refuse_disagreement(settings, "settings", keywords)
    return settings
