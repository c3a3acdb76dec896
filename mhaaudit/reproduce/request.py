"""A run of one of the paper's audited targets (``table1``, ``table3``, ``figure1``) as one frozen
object, :class:`TargetRequest`; :func:`target_request`, the one place the targets' keywords become
it; and :func:`target_conveniences`, which gives a target its keywords, with their defaults from
one table (:data:`KEYWORDS`)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import validate
from ..errors import param
from ..request import SETTINGS_KEYWORDS, build_request, build_settings
from ..settings import DEFAULT_SAMPLES, DEFAULT_THRESHOLD, Settings

__all__ = ["KEYWORDS", "TargetRequest", "target_conveniences", "target_request"]

#: The audited targets' keyword conveniences in signature order: name -> (default, annotation).
#: A target takes those :func:`target_conveniences` names; their defaults are the command's.
KEYWORDS: dict[str, tuple[Any, Any]] = {
    "data": (None, str | None),
    "split": ("train", str),
    "limit": (None, int | None),
    "models": (None, Sequence[str] | None),
    "model": (None, dict | None),
    "weights": (None, dict | None),
    "context_length": (None, dict | None),
    "samples": (DEFAULT_SAMPLES, int),
    "threshold": (DEFAULT_THRESHOLD, float),
    "seed": (0, int),
    "device": ("auto", str),
    "batch_size": (32, int),
    "stop_when_decided": (True, bool),
    "progress": (False, bool),
    "on_note": (None, Callable[[str], None] | None),
    "weights_seed": (None, int | None),
    "data_seed": (None, int | None),
}


@dataclass(frozen=True)
class TargetRequest:
    """What a target audits and how: the data (``None``: the paper's online, the built-in offline),
    the examples T (``None``: the paper's), the models run (``table3``: a subset of its keys), the
    models, trained weights and context lengths put in place of the paper's (by model key), the
    batch size, the settings, and where notes go as they come.

    Checked on construction: ``limit`` a whole number of at least 1, ``models`` a list of names
    (the keys themselves are checked against the target's, which knows them).
    """

    data: str | None = None
    split: str = "train"
    limit: int | None = None
    models: tuple[str, ...] | None = None
    model: Mapping[str, str] | None = None
    weights: Mapping[str, str] | None = None
    context_length: Mapping[str, int] | None = None
    batch_size: int | str = 32
    settings: Settings = field(default_factory=lambda: Settings.resolve(stop_when_decided=True))
    on_note: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        if self.limit is not None:
            object.__setattr__(self, "limit", validate.integer(param("limit"), self.limit))
        if self.models is not None:
            object.__setattr__(self, "models", tuple(self.models) or None)


def target_request(
    request: TargetRequest | None, keywords: Mapping[str, Any], given: frozenset[str] = frozenset()
) -> TargetRequest:
    """The request of a target called with ``keywords`` (its keyword conveniences, given or at their
    defaults; ``given``: those the caller passed): ``request`` itself, a keyword given beside it
    refused where it says otherwise (InputError), or, without one, the request the keywords make
    (the settings keywords make its :class:`~mhaaudit.settings.Settings`)."""
    settings = {k: v for k, v in keywords.items() if k in SETTINGS_KEYWORDS}
    rest: dict[str, Any] = {k: v for k, v in keywords.items() if k not in SETTINGS_KEYWORDS}
    if request is None:
        return TargetRequest(**rest, settings=build_settings(None, settings))
    build_settings(request.settings, settings, given)
    return build_request(TargetRequest, request, rest, given)


_REQUEST = TargetRequest | None


def target_conveniences(*without: str) -> Callable[[Callable[[TargetRequest], Any]], Callable[..., Any]]:
    """Give a target ``fn(request)`` the keywords of :data:`KEYWORDS` but ``without`` as conveniences.

    The target is then called as ``fn(request=None, **keywords)``: its signature shows the request
    and the keywords with their defaults; :func:`target_request` makes the request of them (the
    names of those the caller gave decide what disagrees with a request given); a keyword not
    among them is a TypeError, as for any function.
    """
    names = [name for name in KEYWORDS if name not in without]

    def wrap(fn: Callable[[TargetRequest], Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def entry(request: TargetRequest | None = None, **keywords):
            for name in keywords:
                if name not in names:
                    raise TypeError(f"{fn.__name__}() got an unexpected keyword argument {name!r}")
            defaults = {name: KEYWORDS[name][0] for name in names}
            return fn(target_request(request, defaults | keywords, frozenset(keywords)))

        kind = inspect.Parameter.KEYWORD_ONLY
        entry.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=_REQUEST)]
            + [inspect.Parameter(n, kind, default=KEYWORDS[n][0], annotation=KEYWORDS[n][1]) for n in names],
            return_annotation=inspect.signature(fn).return_annotation,
        )
        return entry

    return wrap
