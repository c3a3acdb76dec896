"""Exception types with messages written for users.

Every error a user can cause is one of these; the CLI prints ``Error: <message>`` on one line
and exits with status 2. Anything else escaping to the CLI is a bug.
"""

from __future__ import annotations

import re

_PARAM = re.compile(r"\{param:([A-Za-z_][A-Za-z0-9_]*)\}")


class MhaauditError(Exception):
    """Base class: a problem the user can fix, described in one line.

    A message may name a parameter as ``{param:text_column}``: ``str(exc)`` says ``text_column``
    (the library's argument), and :meth:`message_for` lets an interface put its own name there
    (the CLI says ``--text-column``), so that the advice names an option the user can give.
    """

    def __init__(self, *args) -> None:
        self.template = str(args[0]) if len(args) == 1 and isinstance(args[0], str) else None
        if self.template is not None and _PARAM.search(self.template):
            args = (_PARAM.sub(lambda m: m.group(1), self.template),)
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


class InputError(MhaauditError):
    """Bad arguments or unreadable / malformed input files."""


class ModelError(MhaauditError):
    """A model that cannot be found, loaded or probed."""


class DataError(MhaauditError):
    """A data source that cannot be read or yields too few examples."""


class OfflineError(MhaauditError):
    """Something that needs the network was asked for while offline."""


class OutputError(MhaauditError):
    """An output path that cannot be written."""


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
