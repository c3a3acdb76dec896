"""Exception types with messages written for users.

Every error a user can cause is one of these; the CLI prints ``Error: <message>`` on one line
and exits with status 2. Anything else escaping to the CLI is a bug.

Each type is also the built-in exception it means (:class:`InputError`, :class:`ModelError` and
:class:`DataError` are ``ValueError``; :class:`OfflineError` and :class:`OutputError` are
``OSError``), so a library caller's ``except ValueError`` catches a bad argument.

A message names the library's parameters (``samples``, ``k``), never a command-line flag. It is
a :class:`Message`: text and :class:`Param` parts, built with ``+`` (``Param("samples") + " must be
at least 1"``). ``str()`` of it says ``samples``; an interface writes its own name for each part
(:meth:`Message.named`: the command line writes ``--samples`` from its one table of flags, in
``mhaaudit.cli.names``). An error carries its structured fields: the parameters its message names
(:attr:`MhaauditError.params`), and where it refuses one value, that value and what is allowed.
Messages a result keeps (an unavailable column's reason, a note) are Messages too, so the command
line names its flags in them when it writes the result.
"""

from __future__ import annotations

import dataclasses
import errno
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self

# What a library caller reads for the names a message gives that are not parameters of a library
# function (what the command line writes there is in mhaaudit.cli.names's table of flags).
LIBRARY_NAMES = {
    "check_checkpoints": "audit_series(...)",
    "check_out": "a parquet file of AuditResult.to_arrow()",
    "check_save_features": "FeatureSet.save()",
    "check_seeds": "audit(..., seeds=...)",
    "kruskal_features": "estimate_kruskal_rank(features)",
    "save_features": "FeatureSet.save()",
}


@dataclass(frozen=True)
class Param:
    """A library parameter that a message names: ``str()`` is the library's name for it."""

    name: str

    def __str__(self) -> str:
        return LIBRARY_NAMES.get(self.name, self.name)

    def __format__(self, spec: str) -> str:
        # Written into an f-string, the parameter would lose its name for an interface: join with ``+``.
        raise TypeError(f"Param({self.name!r}) in an f-string: join it to the text with + instead")

    def __add__(self, other: object) -> Message:
        return Message(self) + other if isinstance(other, (str, Param)) else NotImplemented

    def __radd__(self, other: object) -> Message:
        return Message(other, self) if isinstance(other, str) else NotImplemented


Part = str | Param


class Message(str):
    """Text for a user that names library parameters: ``str`` of the library's wording, with
    :attr:`parts` (plain text and :class:`Param`) so that an interface can write its own names."""

    parts: tuple[Part, ...]

    def __new__(cls, *parts: object) -> Self:
        """The message of ``parts`` in order: text, :class:`Param` or other Messages.

        Raises:
            TypeError: when a part is anything else.
        """
        flat: list[Part] = []
        for p in parts:
            items = p.parts if isinstance(p, Message) else (p,)
            for item in items:
                if not isinstance(item, (str, Param)):
                    raise TypeError(f"a message part is text or a Param, not {type(item).__name__}")
                if isinstance(item, str) and not isinstance(item, Message):
                    item = str(item)
                if isinstance(item, str) and flat and isinstance(flat[-1], str):
                    flat[-1] += item
                elif item != "":
                    flat.append(item)
        self = super().__new__(cls, "".join(str(p) for p in flat))
        self.parts = tuple(flat)
        return self

    def named(self, name_of: Callable[[str], str]) -> str:
        """The text with each parameter written as ``name_of(parameter)``."""
        return "".join(p if isinstance(p, str) else name_of(p.name) for p in self.parts)

    @property
    def params(self) -> tuple[str, ...]:
        """The library parameters the message names, in order."""
        return tuple(p.name for p in self.parts if isinstance(p, Param))

    def __add__(self, other: object) -> Message:
        return Message(self, other) if isinstance(other, (str, Param)) else NotImplemented

    def __radd__(self, other: object) -> Message:
        return Message(other, self) if isinstance(other, str) else NotImplemented

    def __reduce__(self):
        return (Message, self.parts)

    def to_json(self) -> list:
        """The parts as JSON values: text as strings, a parameter as ``{"param": name}``."""
        return [p if isinstance(p, str) else {"param": p.name} for p in self.parts]

    @classmethod
    def from_json(cls, parts: list) -> Message:
        """The message :meth:`to_json` gave."""
        return Message(*(p if isinstance(p, str) else Param(str(p["param"])) for p in parts))


def named(text: str, name_of: Callable[[str], str]) -> str:
    """``text`` with each parameter it names written as ``name_of(parameter)`` (a plain string as is)."""
    return text.named(name_of) if isinstance(text, Message) else text


def with_names(obj: Any, name_of: Callable[[str], str]) -> Any:
    """``obj`` (a result, its records or meta) with every :class:`Message` in it written as
    ``named(message, name_of)``: in place in lists, dicts and dataclass instances; a tuple that
    holds one is copied. Returns ``obj`` (or the tuple's copy)."""
    return _with_names(obj, name_of, set())


def _with_names(obj: Any, name_of: Callable[[str], str], seen: set[int]) -> Any:
    if isinstance(obj, Message):
        return obj.named(name_of)
    if isinstance(obj, (str, bytes, int, float, type(None))) or id(obj) in seen:
        return obj
    if isinstance(obj, list):
        seen.add(id(obj))
        obj[:] = [_with_names(v, name_of, seen) for v in obj]
    elif isinstance(obj, dict):
        seen.add(id(obj))
        for k, v in obj.items():
            obj[k] = _with_names(v, name_of, seen)
    elif isinstance(obj, tuple):
        items = [_with_names(v, name_of, seen) for v in obj]
        if any(a is not b for a, b in zip(items, obj, strict=True)):
            return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        seen.add(id(obj))
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name, None)
            new = _with_names(v, name_of, seen)
            if new is not v:
                object.__setattr__(obj, f.name, new)
    return obj


def joined(items: Iterable[str | Param], sep: str = ", ") -> Message:
    """``sep.join(items)`` as a message, its parameters kept."""
    parts: list[str | Param] = []
    for i, item in enumerate(items):
        parts += [sep, item] if i else [item]
    return Message(*parts)


class MhaauditError(Exception):
    """Base class: a problem the user can fix, described in one line.

    Args:
        message: the line, a :class:`Message` where it names a parameter.
        value: the value refused, where the error refuses one value (else None).
        allowed: what the parameter allows instead, in words (``"at least 1"``; else None).
    """

    def __init__(self, message: str, *, value: Any = None, allowed: str | None = None) -> None:
        super().__init__(message)
        self.value, self.allowed = value, allowed

    @property
    def message(self) -> str:
        """The message as made: a :class:`Message` where it names parameters."""
        return self.args[0] if len(self.args) == 1 and isinstance(self.args[0], str) else str(self)

    @property
    def params(self) -> tuple[str, ...]:
        """The library parameters the message names."""
        m = self.message
        return m.params if isinstance(m, Message) else ()

    @property
    def param(self) -> str | None:
        """The one parameter the error is about: the first the message names (None if it names none)."""
        return next(iter(self.params), None)

    def message_for(self, name_of: Callable[[str], str]) -> str:
        """The message with every named parameter written as ``name_of(parameter)``."""
        return named(self.message, name_of)


class InputError(MhaauditError, ValueError):
    """Bad arguments or unreadable / malformed input files."""


class ModelError(MhaauditError, ValueError):
    """A model that cannot be found, loaded or probed."""


class DataError(MhaauditError, ValueError):
    """A data source that cannot be read or yields too few examples."""


class OfflineError(MhaauditError, OSError):
    """Something that needs the network was asked for while offline."""


class OutputError(MhaauditError, OSError):
    """An output path that cannot be written."""


# What a terminal would act on rather than show: the C0 controls, DEL and the C1 controls (ESC starts
# the sequences that retitle a window or clear a screen; 0x9b is CSI on its own), the bidirectional
# marks and overrides that reorder what is shown, and lone surrogates (a file name's undecodable bytes).
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str, keep: str = "") -> str:
    r"""``text`` with every control character written as its escape (ESC as ``\x1b``, U+202E as
    ``\u202e``), so that a name read from a file, a folder or a model (a file name, a column name)
    shows as what it is and cannot drive the terminal it is shown on. The characters in ``keep``
    (``"\n"`` for a report's own line breaks) stay as they are. Text without any is returned as is.
    """
    if not _CONTROLS.search(text):
        return text

    def shown(m: re.Match) -> str:
        c = m.group()
        if c in keep:
            return c
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    return _CONTROLS.sub(shown, text)


def clipped(text: str, most: int) -> str:
    """``text`` in at most ``most`` characters, for a message: cut, with ``...`` where it was cut."""
    return text if len(text) <= most else text[: most - 3] + "..."


def one_line(exc: BaseException, limit: int | None = None, first_line: bool = False) -> str:
    """An exception's message as one line for a user: white space folded, shortened to ``limit``.

    ``first_line`` keeps only the first non-empty line (for messages of other libraries whose
    later lines are tracebacks or hints); by default all lines are joined.
    """
    text = str(exc).strip()
    if first_line:
        text = next((ln for ln in text.splitlines() if ln.strip()), text)
    text = " ".join(text.split()) or type(exc).__name__
    return text if limit is None else clipped(text, limit)


#: What the operating system says of a path it will not let a run read, search or write, or cannot take: the
#: user's to fix (a folder's permissions, a name too long, a full or read-only disk), never a bug of mhaaudit
PATH_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("EACCES", "EPERM", "ENAMETOOLONG", "EROFS", "ENOSPC", "EDQUOT", "ELOOP")
    if hasattr(errno, name)
)


def path_problem(exc: BaseException) -> str | None:
    """The one line for an ``OSError`` the system raised about a path it names with an error of
    :data:`PATH_ERRNOS` (``x/y.npy: Permission denied``); None for any other exception."""
    if isinstance(exc, OSError) and exc.errno in PATH_ERRNOS and exc.filename is not None:
        return one_line(Exception(f"{exc.filename}: {exc.strerror or one_line(exc)}"))
    return None


def users_to_fix(exc: BaseException) -> bool:
    """Whether ``exc`` is a problem the user can fix (exit 2): an :class:`MhaauditError`, or a path
    the system will not let a run use (:func:`path_problem`). Anything else that ends a run is a bug
    of mhaaudit (exit 3)."""
    return isinstance(exc, MhaauditError) or path_problem(exc) is not None
