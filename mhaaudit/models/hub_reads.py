"""How the hub is read: every read's options (:class:`_Hub`: the revision, whether a repository's own code
may run, offline), the words that say where a hub model's weights came from (:func:`hub_words`), and the error
for trained weights only the hub has while it cannot be reached.

Kept below the backends' modules, which all read through these, so that none loads another for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OfflineError, Param

__all__ = ["hub_words", "offline_weights_error", "random_words"]


@dataclass(frozen=True)
class _Hub:
    """How every hub read is made: at which revision, whether a repository's own code may run, offline."""

    revision: str | None = None
    trust_remote_code: bool = False
    offline: bool = True

    def kwargs(self, local: bool = False) -> dict:
        """Keyword arguments of ``from_pretrained`` (no revision for a local folder)."""
        kw: dict = {"local_files_only": self.offline or local, "trust_remote_code": self.trust_remote_code}
        if self.revision is not None and not local:
            kw["revision"] = self.revision
        return kw


def hub_words(repo: str, revision: str | None, offline: bool) -> str:
    """Where weights (or a config) read from the hub repository ``repo`` came from, in the words of a report's
    weights line and a results file's ``weights_source``: the revision when one was asked for (None: the default
    branch, unnamed), and ``(local cache)`` when read offline, last (``capacity --from`` reads one source with or
    without it)."""
    at = f" at revision {revision}" if revision is not None else ""
    return f"hub {repo}{at}" + (" (local cache)" if offline else "")


def random_words(repo: str, revision: str | None, offline: bool) -> str:
    """Where random weights drawn from the config of the hub repository ``repo`` came from, in the words of
    :func:`hub_words`."""
    return "random init from the config of " + hub_words(repo, revision, offline)


def offline_weights_error(name: str, what: str, revision: str | None = None) -> OfflineError:
    """The error for trained weights that would have to come from the hub while offline (``revision``: the one
    asked for, named in the line; None: the default branch)."""
    at = f" at revision {revision!r}" if revision is not None else ""
    return OfflineError(
        f"trained weights for {name} ({what}{at}) are not on this machine and the hub cannot be reached; "
        "pass " + Param("weights") + " PATH (a folder saved with save_pretrained, or a timm checkpoint file), "
        "or use random weights"
    )
