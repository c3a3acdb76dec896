"""Exception types with messages written for users.

Every error a user can cause is one of these; the CLI prints ``Error: <message>`` on one line
and exits with status 2. Anything else escaping to the CLI is a bug.

Each type is also the built-in exception it means (:class:`InputError`, :class:`ModelError` and
:class:`DataError` are ``ValueError``; :class:`OfflineError` and :class:`OutputError` are
``OSError``), so a library caller's ``except ValueError`` catches a bad argument. Messages name
the library's parameters (``samples``, ``k``), never a command-line flag: a message names one as
``{param:samples}`` (write it with :func:`param`), ``str(exc)`` says ``samples``, and the command
line writes its own flag there (``--samples``) from one table in ``mhaaudit.cli.app``, both in
the one line it prints for an error and, running a command in :func:`parameter_names`, in every
message the run keeps (an unavailable column's reason).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar

_PARAM = re.compile(r"\{param:([A-Za-z_][A-Za-z0-9_]*)\}")

# What a library caller reads for the names a message gives that are not parameters of a library
# function (what the command line writes there is in mhaaudit.cli.app's table of flags).
LIBRARY_NAMES = {
    "check_out": "a parquet file of AuditResult.to_arrow()",
    "check_save_features": "FeatureSet.save()",
    "save_features": "FeatureSet.save()",
}


def param(name: str) -> str:
    """``{param:name}``: how a message names the library parameter ``name`` (see :class:`MhaauditError`)."""
    return "{param:" + name + "}"


_NAMES: ContextVar[Callable[[str], str] | None] = ContextVar("mhaaudit_parameter_names", default=None)


@contextlib.contextmanager
def parameter_names(name_of: Callable[[str], str]) -> Iterator[None]:
    """Inside it, messages made in this thread name each parameter as ``name_of(parameter)``: the
    command line runs a command in it with its own names (``--samples``), so that a message kept
    in a result (an unavailable column's reason) names them too. Outside it, the library's names."""
    token = _NAMES.set(name_of)
    try:
        yield
    finally:
        _NAMES.reset(token)


def current_names() -> Callable[[str], str] | None:
    """How messages made now name each parameter (see :func:`parameter_names`); None: the library's names.
    A job's other processes make their messages under the same (:func:`mhaaudit.distributed.shared`)."""
    return _NAMES.get()


def plain(message: str) -> str:
    """``message`` with each ``{param:...}`` written as the current interface names it (see
    :func:`parameter_names`; by default the library's parameter): what ``str()`` of an error says."""
    name_of = _NAMES.get()
    return _PARAM.sub(lambda m: name_of(m.group(1)) if name_of else LIBRARY_NAMES.get(m.group(1), m.group(1)), message)


class MhaauditError(Exception):
    """Base class: a problem the user can fix, described in one line.

    A message may name a parameter as ``{param:text_column}``: ``str(exc)`` says ``text_column``
    (the library's argument), and :meth:`message_for` lets an interface put its own name there
    (the CLI says ``--text-column``), so that the advice names an option the user can give.
    """

    def __init__(self, *args) -> None:
        self.template = str(args[0]) if len(args) == 1 and isinstance(args[0], str) else None
        if self.template is not None and _PARAM.search(self.template):
            args = (plain(self.template),)
        super().__init__(*args)

    @property
    def params(self) -> tuple[str, ...]:
        """The library parameters the message names."""
        return tuple(_PARAM.findall(self.template or ""))

    def message_for(self, name_of) -> str:
        """The message with every named parameter written as ``name_of(parameter)``."""
        if self.template is None or not self.params:
            return str(self)
        return _PARAM.sub(lambda m: name_of(m.group(1)), self.template)


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


def one_line(exc: BaseException, limit: int | None = None, first_line: bool = False) -> str:
    """An exception's message as one line for a user: white space folded, shortened to ``limit``.

    ``first_line`` keeps only the first non-empty line (for messages of other libraries whose
    later lines are tracebacks or hints); by default all lines are joined.
    """
    text = str(exc).strip()
    if first_line:
        text = next((ln for ln in text.splitlines() if ln.strip()), text)
    text = " ".join(text.split()) or type(exc).__name__
    if limit is not None and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text
