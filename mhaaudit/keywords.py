"""Keywords beside a request object: the one check of the rule :mod:`mhaaudit.request` states.

It sits at the bottom of the package (it imports only :mod:`mhaaudit.errors`), so that every entry
point applies the same rule, the Kruskal estimator's (:class:`mhaaudit.kruskal.Sampling`) included.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from .errors import InputError, Param

__all__ = ["given", "refuse_disagreement", "request_of"]

R = TypeVar("R")


def given(keywords: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords a caller gave: those whose value is not None (None means "not given")."""
    return {k: v for k, v in keywords.items() if v is not None}


def refuse_disagreement(
    obj: Any,
    what: str,
    keywords: Mapping[str, Any],
    fields: Mapping[str, str] | None = None,
    meant: Callable[[str, Any], Any] | None = None,
) -> None:
    """Refuse a keyword given beside ``obj`` that says otherwise than ``obj``.

    Args:
        obj: the request object the caller gave (a frozen dataclass).
        what: the entry point's parameter that took ``obj`` (``data``, ``settings``, ...), for the message.
        keywords: the keywords beside it; those left at None are not compared.
        fields: keyword -> the field of ``obj`` it sets, where the names differ.
        meant: ``meant(keyword, value)``, the field's value the keyword stands for; by default the field
            of a copy of ``obj`` with the value put in, checked and normalised as ``obj`` was.

    Raises:
        InputError: when a keyword given means another value than the field of ``obj`` it sets.
    """
    for k, value in sorted(given(keywords).items()):
        field = (fields or {}).get(k, k)
        said = getattr(obj, field)
        said_by_keyword = meant(k, value) if meant is not None else getattr(replace(obj, **{field: value}), field)
        if said_by_keyword != said:
            raise InputError(
                Param(k) + f" = {value!r} disagrees with the {type(obj).__name__} given as {what} "
                f"({field} = {said!r}); give the value in one place"
            )


def request_of(cls: type[R], obj: R | None, what: str, keywords: Mapping[str, Any]) -> R:
    """The ``cls`` object of a call: ``obj``, once every keyword given beside it agrees with it
    (:func:`refuse_disagreement`), or, without ``obj``, ``cls`` built from the keywords given (each
    the field of its name; a field not given keeps its default).

    Raises:
        TypeError: when ``obj`` is neither None nor a ``cls``.
        InputError: when a keyword given disagrees with ``obj``, or ``cls`` refuses a keyword's value.
    """
    if obj is None:
        return cls(**given(keywords))
    if not isinstance(obj, cls):
        raise TypeError(f"{what} must be a {cls.__name__}, got {type(obj).__name__}")
    refuse_disagreement(obj, what, keywords)
    return obj
