"""Every argument check, written once: integers, integer lists and ranges, choices, fractions,
tolerances, output paths.

Each function takes the name its one-line error gives the value: a library parameter as
``Param("limit")`` (:func:`mhaaudit.errors.param`: the library's message says ``limit``, the command
line's ``--limit``), or a word (``"target"``). It returns the value in its checked form. The CLI and the library call
the same
functions, so an argument is refused the same way whichever door it came through.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
from collections.abc import Iterable, Sequence
from typing import SupportsInt, cast, overload

from .errors import InputError, Param

__all__ = [
    "choice",
    "digits",
    "flag",
    "fraction",
    "int_list",
    "int_ranges",
    "integer",
    "name_or_path",
    "split_list",
    "tolerance",
    "values_of",
]


MAX_LIST = 100_000  # values an integer list or range may name (a list of them is made before any work)


_HEADS, _LAYERS = Param("heads"), Param("layers")  # what the messages of head_counts and layers name


def digits(text: str) -> int:
    """The integer a text of ASCII digits writes (sign, spaces around and underscores as ``int`` takes them).

    ``int`` also reads the digits of other scripts (``"\u0662\u0660"`` is 20): refused here, as ``20.0`` is, and
    the command line's integer options that typer parses (``--limit``, ``--samples``, ``--seed``, ...) read their
    values here too (``cli.options.whole_number``), so an integer is read the same way whichever option or
    parameter it is given to, whatever typer's release would make of it.

    Raises:
        ValueError: when ``text`` holds a character outside ASCII, or ``int`` refuses it.
    """
    text = text.strip()
    if not text.isascii():
        raise ValueError(f"not ASCII digits: {text!r}")
    return int(text)


def _as_int(name: str | Param, value, what: str = "an integer") -> int:
    if isinstance(value, bool):
        raise InputError(name + f" must be {what}, got {value!r}", value=value, allowed=what)
    if isinstance(value, str):
        try:
            return digits(value)
        except ValueError:
            raise InputError(name + f" must be {what}, got {value!r}", value=value, allowed=what) from None
    if isinstance(value, numbers.Integral):
        return int(value)
    if hasattr(value, "__index__") and "bool" not in str(getattr(value, "dtype", "")):  # a 0-d integer tensor
        try:
            return operator.index(value)
        except TypeError:  # a tensor of floats, or of more than one value
            pass
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return int(cast(SupportsInt, value))  # numbers.Real's stub declares no __int__; every concrete Real has one
    raise InputError(name + f" must be {what}, got {value!r}", value=value, allowed=what)


def integer(name: str | Param, value, minimum: int | None = 1, maximum: int | None = None) -> int:
    """An integer (ints, integral floats and strings of ASCII digits accepted) within the bounds, as an ``int``.

    Raises:
        InputError: when ``value`` is a bool, not an integer, or below ``minimum`` / above ``maximum``.
    """
    v = _as_int(name, value)
    if minimum is not None and v < minimum:
        raise InputError(name + f" must be at least {minimum}, got {v}", value=v, allowed=f"at least {minimum}")
    if maximum is not None and v > maximum:
        raise InputError(name + f" must be at most {maximum}, got {v}", value=v, allowed=f"at most {maximum}")
    return v


def name_or_path(what: str | Param, value, kinds: str = "a name or a path"):
    """``value`` as a data set, model or weights are given: None, a string, or a path (read as its string).

    Raises:
        InputError: when it is anything else, ``what`` beginning the message and ``kinds`` saying what it may be.
    """
    value = os.fspath(value) if isinstance(value, os.PathLike) else value
    if value is not None and not isinstance(value, str):
        raise InputError(what + f" must be {kinds}, not {type(value).__name__}")
    return value


def values_of(value) -> list:
    """The values a parameter of one value or several was given: ``[]`` for None, ``[value]`` for one value (a
    number, a string, a 0-d array or tensor), else the list of the sequence's items (each to be checked)."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable) or getattr(value, "ndim", None) == 0:
        return [value]
    return list(value)


def int_list(name: str | Param, value, minimum: int | None = 1) -> tuple[int, ...]:
    """``"1,2,4"`` (or a sequence of integers) -> a tuple without duplicates, order kept; ``()`` for None.

    Raises:
        InputError: when a value is not an integer or is below ``minimum``.
    """
    if value is None:
        return ()
    if isinstance(value, str):
        parts: list = [p.strip() for p in value.replace(" ", ",").split(",") if p.strip()]
    elif isinstance(value, Iterable):
        parts = list(value)
    else:
        parts = [value]
    out: list[int] = []
    for p in parts:
        v = _as_int(name, p, "comma-separated integers")
        if minimum is not None and v < minimum:
            raise InputError(name + f" values must be at least {minimum}, got {v}")
        if v not in out:
            out.append(v)
    return tuple(out)


def int_ranges(
    spec,
    name: str | Param,
    *,
    what: str = "numbers",
    example: str = "0-6 or 0,1,4",
    minimum: int | None = None,
    maximum: int | None = None,
    non_empty: bool = True,
    once: str | None = None,
) -> list[int]:
    """``"0-6"``, ``"3"``, ``"1,2,4"``, ``"0-2,6"`` (or integers) -> the sorted integers named.

    Empty parts are ignored; errors name ``name``. ``minimum`` / ``maximum`` bound every value. With
    ``once`` (what one value is, ``"seed"``), a value named twice (``"0,0"``, ``"0-2,1"``) is refused;
    without it, it counts once.

    Raises:
        InputError: when ``spec`` is not integers or ranges, a range is empty, it names more than ``MAX_LIST``
            values, it names none (with ``non_empty``), a value is outside ``minimum`` / ``maximum``, or (with
            ``once``) a value is named twice.
    """
    named = _named_ints(spec, name, what, example)
    out = set(named)
    if once is not None and len(out) < len(named):
        seen: set[int] = set()
        for v in named:
            if v in seen:
                raise InputError(name + f" {spec!r}: {once} {v} is named twice; name each {once} once")
            seen.add(v)
    if non_empty and not out:
        raise InputError(name + f" {spec!r} names no {what} (use e.g. {example})")
    if out and minimum is not None and min(out) < minimum:
        raise InputError(name + f" {spec!r}: {what} start at {minimum}, got {min(out)}")
    if out and maximum is not None and max(out) > maximum:
        raise InputError(name + f" {spec!r}: at most {maximum}, got {max(out)}")
    return sorted(out)


def _named_ints(spec, name: str | Param, what: str, example: str) -> list[int]:
    """The integers ``spec`` names (an integer, a text of parts and ranges, or integers), in order, a value
    named twice (in two parts, or a part and a range) as often as it is named.

    Raises:
        InputError: when ``spec`` is a bool or none of these, or a part is not an integer or range.
    """
    if isinstance(spec, bool):
        raise InputError(name + f" must name {what} such as {example}, got {spec!r}")
    if isinstance(spec, numbers.Integral):
        return [int(spec)]
    if isinstance(spec, str):
        out: list[int] = []
        held: set[int] = set()  # the distinct values so far, for the list's size limit
        for part in spec.split(","):
            part = part.strip()
            if part:
                values = _part_ints(part, spec, name, what, example, len(held))
                out.extend(values)
                held.update(values)
        return out
    if isinstance(spec, Iterable):
        return [_as_int(name, v, what) for v in spec]
    raise InputError(name + f" must name {what} such as {example}, got {spec!r}")


def _range_example(example: str) -> str:
    """The first range of a list of examples (``"1-12, 3 or 1,2,4"`` -> ``"1-12"``; ``"4, 1-8 or 1,2,4,8"`` ->
    ``"1-8"``), else its first example."""
    parts = [p.rstrip(",") for p in example.split(" ") if p and p != "or"]
    return next((p for p in parts if "-" in p), parts[0] if parts else example)


def _part_ints(part: str, spec: str, name: str | Param, what: str, example: str, held: int) -> Iterable[int]:
    """The integers of one part of ``spec``: ``"3"`` or the range ``"0-6"`` (``held``: how many
    the parts before it named, for the list's size limit).

    Raises:
        InputError: when the part is not an integer or range, the range is empty, or the list would pass
            ``MAX_LIST`` values.
    """
    try:
        if "-" not in part[1:]:
            return (digits(part),)
        cut = part.index("-", 1)
        lo, hi = digits(part[:cut]), digits(part[cut + 1 :])
    except ValueError:
        raise InputError(name + f" {spec!r}: use {what} and ranges such as {example}") from None
    if hi < lo:
        raise InputError(name + f" {spec!r}: the range {part} is empty (use low-high, e.g. {_range_example(example)})")
    if hi - lo + 1 + held > MAX_LIST:
        raise InputError(name + f" {spec!r} names more than {MAX_LIST} {what}, the most a list may hold")
    return range(lo, hi + 1)


def choice(name: str | Param, value, choices: Sequence[str], *, aliases: dict[str, str] | None = None) -> str:
    """``value`` (case-insensitive, surrounding spaces ignored) if it is one of ``choices``; return it lowercased.

    Raises:
        InputError: when ``value``, after ``aliases``, is not one of ``choices``.
    """
    v = str(value).strip().lower()
    if aliases:
        v = aliases.get(v, v)
    if v not in choices:
        raise InputError(
            "unknown " + name + f" {value!r} (choose from {', '.join(choices)})",
            value=value,
            allowed=f"one of {', '.join(choices)}",
        )
    return v


def flag(name: str | Param, value) -> bool:
    """``value`` as a yes or no: True or False (a NumPy bool too). Anything else is refused, never read by its
    truthiness: the string ``"no"`` is true in Python, and ``trust_remote_code="no"`` must not run a repository's
    code.

    Raises:
        InputError: when ``value`` is not a bool.
    """
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise InputError(name + f" must be True or False, got {value!r}", value=value, allowed="True or False")


def split_list(values) -> list[str] | None:
    """Repeated and comma-separated option values (``--x a,b --x c``) -> ``[a, b, c]``; None if empty."""
    if not values:
        return None
    if isinstance(values, str):
        values = [values]
    out = [v.strip() for item in values for v in str(item).split(",") if v.strip()]
    return list(dict.fromkeys(out)) or None


def fraction(name: str | Param, value, *, low_open: bool = True) -> float:
    """A number in (0, 1] (or [0, 1] with ``low_open=False``); return it as a ``float``.

    Raises:
        InputError: when ``value`` is not a number or is outside the interval.
    """
    boolean = isinstance(value, bool) or "bool" in str(getattr(value, "dtype", type(value).__name__))
    not_number = InputError(name + f" must be a number in (0, 1], got {value!r}", value=value, allowed="(0, 1]")
    if boolean:  # True is no fraction, as it is no count of samples
        raise not_number
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise not_number from None
    ok = (0 < v <= 1) if low_open else (0 <= v <= 1)
    if not ok:
        interval = "(0, 1]" if low_open else "[0, 1]"
        raise InputError(name + f" must be in {interval}, got {value}", value=value, allowed=interval)
    return v


def tolerance(name: str | Param, value, *, infinite: bool = False) -> float | None:
    """A finite number >= 0 as a ``float`` (``infinite``: +inf too), or None (the default rule).

    Raises:
        InputError: when ``value`` is not a number (or an integer beyond float64's range), is NaN, is negative,
            or is infinite where ``infinite`` is not asked for.
    """
    if value is None:
        return None
    what = "a number >= 0" if infinite else "a finite number >= 0"
    try:
        v = float(value)
    except OverflowError:  # an integer beyond float64's range
        said = f" must be {what}, at most float64's largest (about 1.8e308), got {value!r}"
        raise InputError(name + said, value=value, allowed=">= 0") from None
    except (TypeError, ValueError):
        raise InputError(name + f" must be {what}, got {value!r}", value=value, allowed=">= 0") from None
    if not (v >= 0) or (math.isinf(v) and not infinite):
        raise InputError(name + f" must be {what}, got {value}", value=value, allowed=">= 0")
    return v


@overload
def head_counts(spec: None, num_heads: int | None = None, name: str | Param = _HEADS) -> None: ...


@overload
def head_counts(
    spec: str | int | Iterable[int], num_heads: int | None = None, name: str | Param = _HEADS
) -> list[int]: ...


def head_counts(spec, num_heads: int | None = None, name: str | Param = _HEADS) -> list[int] | None:
    """``"1-12"``, ``"3"``, ``"1,2,4"`` (or integers) -> sorted head counts; None means all heads.

    Counts start at 1 and, when ``num_heads`` is known, are at most ``num_heads``.

    Raises:
        InputError: when ``spec`` is not counts or ranges, names none, names a count below 1 or above ``num_heads``.
    """
    if spec is None:
        return None
    out = int_ranges(spec, name, what="head counts", example="1-12, 3 or 1,2,4", minimum=1)
    if num_heads is not None and max(out) > num_heads:
        raise InputError(
            name + f" {spec!r}: the attention layer has {num_heads} heads, so at most {num_heads} can be used"
        )
    return out


def layers(spec, name: str | Param = _LAYERS) -> list[int] | None:
    """``"0-6"``, ``"0,1,4"`` or ``"0-2,6"`` -> the sorted layers (0 = the embedding output); None for None.

    Raises:
        InputError: when ``spec`` is not layers or ranges, names none, or names a negative layer.
    """
    if spec is None:
        return None
    out = int_ranges(spec, name, what="layers", example="0-6 or 0,1,4")
    if min(out) < 0:
        raise InputError(name + f" {spec!r}: layers start at 0 (the embedding output)")
    return out
