"""Result documents: a result object as JSON data, field by field, and read back from it.

Each command's outputs carry the whole result object in the meta's ``result``
(:func:`encode_result`); :func:`decode_result`, driven by the fields' type hints, reads it back
equal to the object written, so a saved run can be rendered again, byte for byte, without running
it. :func:`result_from_meta` finds the result in a results file's meta and
:func:`read_json_document` reads a ``--format json`` document.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import enum
import json
import math
import os
import types
import typing
from dataclasses import fields

from .errors import InputError, Param

#: The key of a results file's meta (JSON ``meta``, parquet schema metadata) that holds the whole
#: result object, field by field, so that ``from_json`` / ``from_parquet`` give it back exactly.
RESULT_KEY = "result"
METADATA_KEY = b"mhaaudit"  # schema metadata of every results file: the run's meta, as JSON
_NONFINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
# Within :func:`null_as_nonfinite`, a null where a float is due reads as NaN (see there).
_NULL_FLOAT: contextvars.ContextVar[bool] = contextvars.ContextVar("null_float", default=False)
#: The metadata of a field that a document (and a ``meta``) leaves out while it is None; it reads
#: back as None, its default.
OMITTED_WHEN_NONE = {"omit_none": True}
#: The metadata of a field that a document stores as an empty object ``{}`` while it is None (a
#: record that a run may lack, stored as its fields when present); ``{}`` reads back as None.
EMPTY_WHEN_NONE = {"empty_none": True}


def _document_fields(obj) -> list:

    return [f for f in fields(obj) if f.metadata.get("document", True)]


class Stored:
    """A record that a result document stores as its :meth:`as_dict` (the form the outputs write),
    as JSON data (:meth:`document`); its class reads that back (``from_document``)."""

    def as_dict(self) -> dict:
        """The record as the outputs write it (each record its own)."""
        raise NotImplementedError

    def document(self) -> dict:
        """The record in a result document: :meth:`as_dict` as JSON data."""
        return encode_result(self.as_dict())


def encode_result(value):
    """``value`` (a result dataclass, or what its fields hold) as JSON data, losslessly.

    Dataclasses become objects of their fields (a field declared with ``metadata={"document":
    False}``, such as the feature tensors, is left out, and one declared with
    :data:`OMITTED_WHEN_NONE` while it is None; one declared with :data:`EMPTY_WHEN_NONE` is ``{}``
    while it is None), enums their values, tuples lists, map
    keys strings, and non-finite floats the strings ``"nan"``, ``"inf"``, ``"-inf"`` (strict
    JSON has no such numbers). :func:`decode_result` reverses it from the fields' type hints.
    """

    if hasattr(value, "document") and hasattr(type(value), "from_document"):  # a value that says how it is stored
        return value.document()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _encode_field(f, getattr(value, f.name))
            for f in _document_fields(value)
            if not (f.metadata.get("omit_none") and getattr(value, f.name) is None)
        }
    if isinstance(value, enum.Enum):  # before str and int: an enum may be either
        return value.value
    if isinstance(value, dict):
        return {str(k): encode_result(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_result(v) for v in value]
    return _encode_scalar(value)


def _encode_field(f: dataclasses.Field, value):
    """The field ``f`` holding ``value`` as JSON data: ``{}`` for None under :data:`EMPTY_WHEN_NONE`."""
    if value is None and f.metadata.get("empty_none"):
        return {}
    return encode_result(value)


def _encode_scalar(value):
    """A number, string, boolean, None, path, or numpy/torch scalar as JSON data.

    Raises:
        TypeError: when ``value`` is none of these.
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _encode_float(float(value))
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # a numpy or torch scalar
        return encode_result(value.item())
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"cannot store a {type(value).__name__} in a result document")


def _encode_float(value: float) -> float | str:
    """A float as JSON data: itself when finite, else ``"nan"``, ``"inf"`` or ``"-inf"``."""
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def decode_result(tp, data):
    """The value of type ``tp`` that :func:`encode_result` wrote as ``data``.

    ``tp`` is a type hint: a dataclass (read from its fields' hints), ``X | None``, ``tuple[X, ...]``,
    ``list[X]``, ``dict[K, V]``, an enum, ``int``, ``float``, ``str``, ``bool`` or ``Any``. Data
    that does not fit the hint is refused with a ``ValueError`` naming where.
    """
    return _decode(tp, data, "result")


def _decode(tp, data, where: str):
    """The value of hint ``tp`` in ``data`` (at ``where``, for messages): dispatched to the
    reader of that kind of hint.

    Raises:
        TypeError: when no reader reads a ``tp`` (a bug in the result's type hints).
    """
    if tp is typing.Any or tp is object:
        return data
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _decode_union(tp, data, where)
    if isinstance(tp, type):
        if hasattr(tp, "from_document"):
            return tp.from_document(data)
        if dataclasses.is_dataclass(tp):
            return _decode_dataclass(tp, data, where)
        if issubclass(tp, enum.Enum):
            return tp(data)
        if tp in _SCALAR_READERS:
            return _SCALAR_READERS[tp](data, where)
    reader = _CONTAINER_READERS.get(origin or tp)
    if reader is None:
        raise TypeError(f"{where}: no rule to read a {tp}")
    return reader(typing.get_args(tp), data, where)


def _decode_union(tp, data, where: str):
    """``X | Y | None``: None when allowed, else the first option ``data`` fits.

    Raises:
        ValueError: when ``data`` fits none of the options, with each option's reason.
    """
    args = typing.get_args(tp)
    if data is None and type(None) in args:
        return None
    errors = []
    for option in (a for a in args if a is not type(None)):
        try:
            return _decode(option, data, where)
        except (TypeError, ValueError, KeyError) as exc:
            errors.append(str(exc))
    raise ValueError(f"{where}: {data!r} fits none of {tp}: {'; '.join(errors)}")


def decode_fields(tp, data, where: str):
    """The dataclass ``tp`` from the object of its stored fields, read field by field from their
    type hints (what a ``from_document`` that stores its fields under other keys reads them with)."""
    return _decode_dataclass(tp, data, where)


def _decode_dataclass(tp, data, where: str):
    """A dataclass from the object of its stored fields: each read from its type hint; a missing
    required field or an unknown one is refused.

    Raises:
        ValueError: when ``data`` is not an object, lacks a required field or has a field ``tp`` does not.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object for {tp.__name__}, got {type(data).__name__}")
    data = _renamed(tp, data, where)
    hints = typing.get_type_hints(tp)
    kept = [f for f in _document_fields(tp) if f.init]
    required = [f.name for f in kept if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [name for name in required if name not in data]
    if missing:
        raise ValueError(f"{where}: {tp.__name__} lacks {', '.join(missing)}")
    unknown = sorted(set(data) - {f.name for f in kept})
    if unknown:
        raise ValueError(f"{where}: {tp.__name__} has no field {', '.join(unknown)}")
    values = {
        f.name: None
        if f.metadata.get("empty_none") and data[f.name] == {}
        else _decode(hints[f.name], data[f.name], f"{where}.{f.name}")
        for f in kept
        if f.name in data
    }
    return tp(**values)


def _renamed(tp, data: dict, where: str) -> dict:
    """``data`` with the fields a document written by an older version stored under an old name
    (the class's ``RENAMED_FIELDS``: old name -> name) under their names.

    Raises:
        ValueError: when ``data`` holds a field under both its old name and its name.
    """
    renamed = getattr(tp, "RENAMED_FIELDS", {})
    both = [old for old, new in renamed.items() if old in data and new in data]
    if both:
        raise ValueError(f"{where}: {tp.__name__} holds {', '.join(both)} and its new name both")
    return {renamed.get(k, k): v for k, v in data.items()}


def _decode_tuple(args: tuple, data, where: str) -> tuple:
    """``tuple[X, ...]`` or ``tuple[X, Y]`` from a list.

    Raises:
        ValueError: when ``data`` is not a list, or not as long as a fixed-length tuple.
    """
    if not isinstance(data, list):
        raise ValueError(f"{where}: expected a list, got {type(data).__name__}")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_decode(args[0], v, f"{where}[]") for v in data)
    if not args:
        return tuple(data)
    if len(args) != len(data):
        raise ValueError(f"{where}: expected {len(args)} values, got {len(data)}")
    return tuple(_decode(a, v, f"{where}[]") for a, v in zip(args, data, strict=True))


def _decode_list(args: tuple, data, where: str) -> list:
    """``list[X]`` from a list.

    Raises:
        ValueError: when ``data`` is not a list.
    """
    if not isinstance(data, list):
        raise ValueError(f"{where}: expected a list, got {type(data).__name__}")
    return [_decode(args[0], v, f"{where}[]") for v in data] if args else list(data)


def _decode_dict(args: tuple, data, where: str) -> dict:
    """``dict[K, V]`` from an object (its keys strings, as JSON writes them).

    Raises:
        ValueError: when ``data`` is not an object.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
    kt, vt = args if args else (str, typing.Any)
    return {_decode_key(kt, k, where): _decode(vt, v, f"{where}.{k}") for k, v in data.items()}


def _decode_bool(data, where: str) -> bool:
    if not isinstance(data, bool):
        raise ValueError(f"{where}: expected true or false, got {data!r}")
    return data


def _decode_int(data, where: str) -> int:
    if isinstance(data, bool) or not isinstance(data, int):
        raise ValueError(f"{where}: expected an integer, got {data!r}")
    return data


@contextlib.contextmanager
def null_as_nonfinite():
    """Within it, :func:`decode_result` reads a null where a float (not ``float | None``) is due as NaN:
    for a document printed as strict JSON by ``render.print_json``, which writes each non-finite
    number as null (``memorize --format json``), rather than encoded by :func:`encode_result`."""
    token = _NULL_FLOAT.set(True)
    try:
        yield
    finally:
        _NULL_FLOAT.reset(token)


def _decode_float(data, where: str) -> float:
    if isinstance(data, str) and data in _NONFINITE:
        return _NONFINITE[data]
    if data is None and _NULL_FLOAT.get():
        return math.nan
    if isinstance(data, bool) or not isinstance(data, (int, float)):
        raise ValueError(f"{where}: expected a number, got {data!r}")
    try:
        return float(data)
    except OverflowError:  # an integer past float64's range (JSON's integers have none)
        raise ValueError(f"{where}: {str(data)[:40]}... lies past the range of a float") from None


def _decode_str(data, where: str) -> str:
    if not isinstance(data, str):
        raise ValueError(f"{where}: expected a string, got {data!r}")
    return data


#: The reader of each scalar hint, and of each container (by its origin: ``list[int]`` -> list).
_SCALAR_READERS: dict[type, typing.Callable] = {
    bool: _decode_bool,
    int: _decode_int,
    float: _decode_float,
    str: _decode_str,
}
_CONTAINER_READERS: dict[object, typing.Callable] = {tuple: _decode_tuple, list: _decode_list, dict: _decode_dict}


def _decode_key(tp, key: str, where: str):
    """A map key, which JSON writes as a string, as ``tp`` (str, int or float).

    Raises:
        ValueError: when ``key`` is not a ``tp``.
    """
    if tp is str or tp is object:
        return key
    try:
        return tp(key) if tp in (int, float) else _decode(tp, key, f"{where} key")
    except ValueError as exc:
        raise ValueError(f"{where}: the key {key!r} is not a {tp.__name__}") from exc


def result_from_meta(cls, meta: dict, source: str):
    """The ``cls`` result stored under :data:`RESULT_KEY` in a results file's ``meta``.

    Raises:
        InputError: when ``meta`` holds no result, one of another command, or one that cannot be read back as a
            ``cls``; ``source`` begins the message.
    """
    if not isinstance(meta, dict) or RESULT_KEY not in meta:
        raise InputError(
            f"{source}: holds no {cls.__name__} (its meta has no {RESULT_KEY!r}; it was written by "
            "another command or an older version)"
        )
    commands = cls.COMMANDS or (cls.COMMAND,)
    if meta.get("command") not in commands:
        raise InputError(
            f"{source}: holds the results of {meta.get('command')!r}, not of {' or '.join(map(repr, commands))}"
        )
    _refuse_other_seeds(cls, meta[RESULT_KEY], source)
    try:
        return decode_result(cls, meta[RESULT_KEY])
    except (TypeError, ValueError, KeyError) as exc:
        raise InputError(f"{source}: its {cls.__name__} cannot be read back: {exc}") from exc


#: The field a several-seed result (``mhaaudit.seeds.SeedsResult``) has and a result of one run has not.
_PER_SEED = "per_seed"


def _refuse_other_seeds(cls, stored, source: str) -> None:
    """Refuse a several-seed result read as one run's, or one run's read as several seeds'.

    Raises:
        InputError: when ``stored`` is the result of several seeds and ``cls`` that of one run, or the other way round.
    """
    several = isinstance(stored, dict) and _PER_SEED in stored
    if several == any(f.name == _PER_SEED for f in fields(cls)):
        return
    if several:
        raise InputError(
            f"{source}: holds the result of a run with "
            + Param("seeds")
            + f", which mhaaudit.seeds.SeedsResult reads, not of one run ({cls.__name__})"
        )
    raise InputError(
        f"{source}: holds the result of a run without " + Param("seeds") + f", not of several seeds ({cls.__name__})"
    )


def read_json_document(source) -> tuple[object, str]:
    """The JSON value in ``source`` (the JSON text, or a path to a file holding it), and where it
    was read from, for messages. Unreadable or invalid input is an :class:`~mhaaudit.errors.InputError`.

    Raises:
        InputError: when the file cannot be read, or the text is not JSON.
    """
    if isinstance(source, str) and source.lstrip().startswith("{"):
        text, where = source, "the JSON document"
    else:
        where = os.fspath(source)
        try:
            with open(where, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise InputError(f"{where}: cannot read it ({exc.strerror or exc})") from exc
    try:
        return json.loads(text), where
    except ValueError as exc:
        raise InputError(f"{where}: not a JSON document ({exc})") from exc
