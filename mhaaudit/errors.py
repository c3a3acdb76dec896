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
