"""A run of one of the paper's audited targets (``table1``, ``table3``, ``figure1``) as one frozen
object, :class:`TargetRequest`, and :func:`target_request`, the one place the targets' keywords become it;
:func:`columns_by_name`, the targets' words for a column of the data they cannot find.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .. import validate
from ..defaults import DEFAULT_BATCH_SIZE, DEFAULT_SPLIT
from ..errors import InputError, Message, MhaauditError, Param
from ..keywords import given, request_of
from ..request import SETTINGS_KEYWORDS, build_settings
from ..settings import Settings
from ..sources.containers import IMAGE_NAMES, TEXT_NAMES

__all__ = ["TargetRequest", "target_request"]


@dataclass(frozen=True)
class TargetRequest:
    """What a target audits and how: the data (``None``: the paper's online, the built-in offline),
    the examples T (``None``: the paper's), the models run (``table3``: a subset of its keys), the
    models, trained weights and context lengths put in place of the paper's (by model key), the
    batch size, the settings, and where notes go as they come.

    Checked on construction: ``data`` and each model and weights a name or a path (a ``pathlib.Path`` is
    read as its path), ``limit`` a whole number of at least 1, ``models`` a list of names (the keys
    themselves are checked against the target's, which knows them).
    """

    data: str | None = None
    split: str = DEFAULT_SPLIT
    limit: int | None = None
    models: tuple[str, ...] | None = None
    model: Mapping[str, str] | None = None
    weights: Mapping[str, str] | None = None
    context_length: Mapping[str, int] | None = None
    batch_size: int | str = DEFAULT_BATCH_SIZE
    settings: Settings = field(default_factory=Settings.resolve)
    on_note: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "data", validate.name_or_path(Param("data"), self.data))
        for option in ("model", "weights"):  # by model key: a name or a path each (a pathlib.Path is its path)
            by_key = getattr(self, option)
            if by_key is not None and not isinstance(by_key, Mapping):
                raise InputError(Param(option) + f" must map the paper's model keys to names, not {by_key!r}")
            if by_key is not None:
                named = {k: validate.name_or_path(Param(option) + f" {k}={v!r}:", v) for k, v in by_key.items()}
                object.__setattr__(self, option, named)
        if self.limit is not None:
            object.__setattr__(self, "limit", validate.integer(Param("limit"), self.limit))
        if self.models is not None:
            object.__setattr__(self, "models", tuple(self.models) or None)


def target_request(request: TargetRequest | None, keywords: Mapping[str, Any]) -> TargetRequest:
    """The request of a target called with ``keywords`` (its keywords by name; None: not given):
    ``request`` once the keywords given agree with it, or, without one, the request the keywords
    make (the settings keywords make its :class:`~mhaaudit.settings.Settings`), under the rule of
    :mod:`mhaaudit.request`.

    Raises:
        TypeError: when ``request`` is neither None nor a :class:`TargetRequest`.
        InputError: when a keyword given disagrees with ``request``, or a value is out of range.
    """
    settings = {k: v for k, v in keywords.items() if k in SETTINGS_KEYWORDS}
    rest = {k: v for k, v in keywords.items() if k not in SETTINGS_KEYWORDS}
    if request is None:
        return TargetRequest(**given(rest), settings=build_settings(None, settings))
    request = request_of(TargetRequest, request, "request", rest)
    build_settings(request.settings, settings)
    return request


# The parameters that choose the data's column, which the targets do not take: the names a target reads a column
# by instead, and what it reads when none has them.
_READ_INSTEAD = {
    "text_column": (", ".join(TEXT_NAMES), "the only string column"),
    "image_column": (", ".join(IMAGE_NAMES), "the only image column"),
}


@contextmanager
def columns_by_name() -> Iterator[None]:
    """Run a target's audit of its data: an error whose closing advice chooses a column with a parameter the
    targets do not take (``text_column``, ``image_column``; the advice of :func:`mhaaudit.audit`) says instead
    which column a target reads.

    Raises:
        MhaauditError: the error the audit raised, of its type and fields (reworded where it advised a column).
    """
    try:
        yield
    except MhaauditError as exc:
        message = exc.message
        parts = message.parts if isinstance(message, Message) else ()
        last = parts[-1] if parts else None
        before = parts[-2] if len(parts) > 1 else None
        cut = before.rfind("; ") if isinstance(before, str) else -1
        if not isinstance(last, Param) or last.name not in _READ_INSTEAD or not isinstance(before, str) or cut < 0:
            raise
        names, otherwise = _READ_INSTEAD[last.name]
        named = "a column of one of those names" if names in before[:cut] else f"the one named {names}"
        said = Message(*parts[:-2], before[:cut], f"; the paper's targets take no column option: they read {named}, ")
        exc.args = (said + f"else {otherwise}",)  # reworded in place: its type and fields stay as raised
        raise
