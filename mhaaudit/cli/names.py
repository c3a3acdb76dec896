"""The command line's names for the library's parameters, written into every message it shows."""

from __future__ import annotations

from typing import Any

from ..errors import named, with_names

# The command line's name for each library parameter (or other name) a message names (a
# :class:`mhaaudit.errors.Param`), where it is not the parameter with dashes: ``text_column`` is
# ``--text-column``, and these are the rest.
FLAGS = {
    "from_path": "--from",
    "variant": "--variants",  # kruskal captures one column; its flag keeps check's name
    "check_out": "'mhaaudit check --out'",
    "check_checkpoints": "check --checkpoints",
    "check_save_features": "check --save-features",
    "check_seeds": "check --seeds",
    "kruskal_features": "'mhaaudit kruskal FEATURES'",
    "X": "FEATURES",  # the vectors a Kruskal computation reads: kruskal's argument (a file that changed while read)
    "stats": "the statistics",  # taken by the command itself, never given
}


def flag(param: str) -> str:
    """The command line's name for the library parameter ``param`` (``text_column`` -> ``--text-column``)."""
    return FLAGS.get(param, "--" + param.replace("_", "-"))


def flagged(text: str) -> str:
    """``text`` as the command line shows it: each parameter a :class:`~mhaaudit.errors.Message` names
    written as its flag (plain text as is)."""
    return named(text, flag)


def with_flags(obj: Any) -> Any:
    """``obj`` (a result, its records or meta, a report's items) with every message it keeps written as
    the command line shows it (:func:`~mhaaudit.errors.with_names` with :func:`flag`)."""
    return with_names(obj, flag)
