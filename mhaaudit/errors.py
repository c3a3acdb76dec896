"""Exception types with messages written for users.

Every error a user can cause is one of these; the CLI prints ``Error: <message>`` on one line
and exits with status 2. Anything else escaping to the CLI is a bug.
"""

from __future__ import annotations


class MhaauditError(Exception):
    """Base class: a problem the user can fix, described in one line."""


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
