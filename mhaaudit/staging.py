"""The outputs of one run, staged and put in place together (all or none).

Kept free of torch and numpy: the command line enters :func:`staged_outputs` before it knows
which command runs, and ``--help`` must not import the library.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import OutputError

__all__ = ["StagedOutputs", "make_output_folder", "staged_outputs"]


def _reason(exc: OSError) -> str:
    return exc.strerror or " ".join(str(exc).split())


class StagedOutputs:
    """The outputs of one run, staged as temporaries in their target folders and put in place together.

    Inside :func:`staged_outputs`, every :func:`atomic_path` (``--out``, ``--plot``,
    ``--save-features``) writes a temporary beside its target; :meth:`commit` renames them all
    into place at the end. When anything fails first (a full disk, an interruption, a bug),
    :meth:`abort` removes every temporary and every folder the run created, so no output of the
    run is left and no earlier file is replaced.
    """

    def __init__(self) -> None:
        self.files: dict[Path, Path] = {}  # target -> its temporary
        self.folders: list[Path] = []  # folders created for outputs, in order of creation

    def stage(self, tmp: Path, target: Path) -> None:
        """Note that ``tmp`` goes to ``target`` at :meth:`commit`; one staged earlier for ``target`` is removed."""
        earlier = self.files.pop(target, None)
        if earlier is not None:  # written twice in one run: the last one counts
            with contextlib.suppress(OSError):
                earlier.unlink()
        self.files[target] = tmp

    def made(self, folder: Path) -> None:
        """Note a folder created for an output, for :meth:`abort` to remove (when empty)."""
        self.folders.append(folder)

    def commit(self) -> None:
        """Rename every staged output into place. Ctrl-C, SIGTERM and SIGHUP are held back for the few
        renames (delivered right after), so a run is never ended with some outputs in place.

        Raises:
            OutputError: when a rename fails; every output not yet renamed is removed first (:meth:`abort`).
        """
        held = _hold_signals()
        try:
            for target, tmp in list(self.files.items()):
                try:
                    os.replace(tmp, target)
                except OSError as exc:
                    self.abort()
                    raise OutputError(f"cannot write {target}: {_reason(exc)}") from exc
                del self.files[target]
            self.folders.clear()
        finally:
            _release_signals(held)

    def abort(self) -> None:
        """Remove every temporary still staged and every folder the run created that is empty; forget them."""
        for tmp in self.files.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
        self.files.clear()
        for folder in reversed(self.folders):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty: a folder that holds something else stays
        self.folders.clear()


# Ctrl-C, SIGTERM and SIGHUP (absent on Windows): the signals that end a run with its outputs removed.
_HELD = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))

_Held = tuple[dict[signal.Signals, Any], list[int]]  # the handlers replaced, the signals noted meanwhile


def _hold_signals() -> _Held | None:
    """Hold Ctrl-C, SIGTERM and SIGHUP back: their Python handlers (which run in the main thread, whatever
    thread the signal reached) are swapped for ones that only note the signal. Returns what
    :func:`_release_signals` needs, or None outside the main thread (where handlers cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    noted: list[int] = []
    previous: dict[signal.Signals, Any] = {}
    for sig in _HELD:
        handler = signal.getsignal(sig)
        if handler is None or handler == signal.SIG_IGN:
            continue  # not set from Python, or ignored: left as it is
        previous[sig] = handler
        signal.signal(sig, lambda signum, _frame: noted.append(signum))
    return previous, noted


def _release_signals(held: _Held | None) -> None:
    """Restore the handlers and deliver, once each, the signals that came meanwhile."""
    if held is None:
        return
    previous, noted = held
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    for signum in dict.fromkeys(noted):
        signal.raise_signal(signum)


_STAGED: contextvars.ContextVar[StagedOutputs | None] = contextvars.ContextVar("mhaaudit_staged_outputs", default=None)


@contextlib.contextmanager
def staged_outputs() -> Iterator[StagedOutputs]:
    """Stage every output written inside (:class:`StagedOutputs`); all are put in place at the end, or none."""
    outer = _STAGED.get()
    if outer is not None:  # nested: the outer run decides
        yield outer
        return
    staged = StagedOutputs()
    token = _STAGED.set(staged)
    try:
        yield staged
        staged.commit()
    finally:
        staged.abort()  # nothing left once committed; everything removed otherwise
        _STAGED.reset(token)


def make_output_folder(folder: Path) -> None:
    """Create ``folder`` (an output's folder) unless it exists; a run that fails later removes it again."""
    if folder.is_symlink() or folder.exists():
        return
    folder.mkdir()
    staged = _STAGED.get()
    if staged is not None:
        staged.made(folder)
