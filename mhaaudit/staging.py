"""The outputs of one run, staged and put in place together (all or none); each written atomically
(:func:`atomic_path`: its path checked first, a temporary beside it, renamed into place); and the
scratch folders a run makes in the system's temporary folder, removed when their work or the process ends.

Kept free of torch and numpy: the command line enters :func:`staged_outputs` before it knows
which command runs, and ``--help`` must not import the library.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import MhaauditError, OutputError, Param
from .files import special_kind

__all__ = [
    "StagedOutputs",
    "abandon",
    "atomic_path",
    "check_writable",
    "make_output_folder",
    "ordinary_mode",
    "process_scratch_folder",
    "remove_scratch_folders",
    "scratch_folder",
    "staged_outputs",
]


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
        # held while the lists change, and by abort from another thread (:func:`abandon`)
        self._lock = threading.RLock()

    def stage(self, tmp: Path, target: Path) -> None:
        """Note that ``tmp`` goes to ``target`` at :meth:`commit`; one staged earlier for ``target`` is removed.

        Raises:
            OutputError: when the process is ending (:func:`abandon`): ``tmp`` is removed instead.
        """
        with self._lock:
            if _ABANDONED:  # the process is ending (:func:`abandon`): nothing more is kept
                with contextlib.suppress(OSError):
                    tmp.unlink()
                raise OutputError(f"cannot write {target}: the run is ending")
            earlier = self.files.pop(target, None)
            if earlier is not None:  # written twice in one run: the last one counts
                with contextlib.suppress(OSError):
                    earlier.unlink()
            self.files[target] = tmp

    def made(self, folder: Path) -> None:
        """Note a folder created for an output, for :meth:`abort` to remove (when empty)."""
        with self._lock:
            self.folders.append(folder)

    def commit(self) -> None:
        """Rename every staged output into place. Ctrl-C, SIGTERM and SIGHUP are held back for the few
        renames (delivered right after), so a run is never ended with some outputs in place.

        Raises:
            OutputError: when a rename fails, or the process is ending (:func:`abandon`); every output not yet
                renamed is removed first (:meth:`abort`).
        """
        held = _hold_signals()
        try:
            with self._lock:
                if _ABANDONED and self.files:
                    target = next(iter(self.files))
                    self.abort()
                    raise OutputError(f"cannot write {target}: the run is ending")
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
        with self._lock:
            for tmp in self.files.values():
                with contextlib.suppress(OSError):
                    tmp.unlink()
            self.files.clear()
            for folder in reversed(self.folders):
                with contextlib.suppress(OSError):
                    folder.rmdir()  # only when empty: a folder that holds something else stays
            self.folders.clear()

    def abandon(self, wait: float) -> None:
        """:meth:`abort`, from another thread than the run's, waiting ``wait`` seconds at most for the run's own
        changes to the lists (a commit's renames) to end; nothing when they do not."""
        if self._lock.acquire(timeout=wait):
            try:
                self.abort()
            finally:
                self._lock.release()


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

# What the process has under way, for :func:`abandon`: every run's staged outputs, every temporary being written.
_RUNS: dict[StagedOutputs, None] = {}
_WRITING: dict[Path, None] = {}
_SCRATCH: dict[Path, int] = {}  # scratch folders in the system's temporary folder -> the process that made them
_UNDER_WAY = threading.Lock()
_ABANDONED = False  # set by abandon: the process is ending, and no output is begun or staged after it


@contextlib.contextmanager
def staged_outputs() -> Iterator[StagedOutputs]:
    """Stage every output written inside (:class:`StagedOutputs`); all are put in place at the end, or none."""
    outer = _STAGED.get()
    if outer is not None:  # nested: the outer run decides
        yield outer
        return
    staged = StagedOutputs()
    token = _STAGED.set(staged)
    with _UNDER_WAY:
        _RUNS[staged] = None
    try:
        yield staged
        staged.commit()
    finally:
        staged.abort()  # nothing left once committed; everything removed otherwise
        _STAGED.reset(token)
        with _UNDER_WAY:
            _RUNS.pop(staged, None)


def abandon(wait: float = 1.0) -> None:
    """Remove, from any thread, every output the process has staged and not put in place, every temporary
    it is writing and every folder a run created for them (when empty): the end of the process after a
    signal whose run did not unwind in time (:mod:`mhaaudit.ending`). A run in the middle of putting its
    outputs in place is waited for ``wait`` seconds at most (and left as it is after that). From then on
    no output is begun (:func:`atomic_path` raises an OutputError) or staged. The scratch folders of
    :func:`scratch_folder` and :func:`process_scratch_folder` are removed too, with all they hold."""
    global _ABANDONED
    _ABANDONED = True
    with _registry(wait):
        runs, writing, scratch = list(_RUNS), list(_WRITING), _own(_SCRATCH)
    for tmp in writing:
        with contextlib.suppress(OSError):
            tmp.unlink()
    for staged in runs:
        staged.abandon(wait)
    for folder in scratch:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _registry(wait: float) -> Iterator[None]:
    """The registry's lock for the block, waited for ``wait`` seconds at most: a run interrupted in the middle of
    its bookkeeping can keep it, and the block then runs without it (copying what it reads in one step)."""
    got = _UNDER_WAY.acquire(timeout=wait)
    try:
        yield
    finally:
        if got:
            _UNDER_WAY.release()


def _new_scratch(prefix: str) -> Path:
    """A new scratch folder in the system's temporary folder, noted as this process's for :func:`abandon`,
    :func:`remove_scratch_folders` and the exit hook.

    Raises:
        OutputError: when the process is ending (:func:`abandon`).
    """
    if _ABANDONED:  # the process is ending: a helper thread begins nothing more
        raise OutputError("cannot make a temporary folder: the run is ending")
    folder = Path(tempfile.mkdtemp(prefix=prefix))  # outside the lock: a slow temporary folder holds up no one
    with _UNDER_WAY:
        if not _ABANDONED:
            _SCRATCH[folder] = os.getpid()
    if _ABANDONED:  # abandon came meanwhile, and did not see it
        shutil.rmtree(folder, ignore_errors=True)
        raise OutputError("cannot make a temporary folder: the run is ending")
    return folder


def _own(scratch: dict[Path, int]) -> list[Path]:
    """The scratch folders this process made (a forked child inherits its parent's list, not its folders). The
    items are copied first, in one step, so a thread that adds one meanwhile changes nothing here."""
    pid = os.getpid()
    return [folder for folder, maker in list(scratch.items()) if maker == pid]


def remove_scratch_folders(wait: float = 1.0) -> None:
    """Remove every scratch folder this process made and still has, with all it holds: the end of a process
    (its exit hook, registered once), and of one that skips its exit hooks (``os._exit``, as a torchrun rank
    ends: ``mhaaudit.distributed.leave``). The registry's lock is waited for ``wait`` seconds at most, each
    time it is taken."""
    with _registry(wait):
        folders = _own(_SCRATCH)
    for folder in folders:
        _remove_scratch(folder, wait)


def _remove_scratch(folder: Path, wait: float = 1.0) -> None:
    """Remove ``folder`` with all it holds (links inside are removed, never followed) when this process made it:
    a forked child that leaves its parent's :func:`scratch_folder` leaves the folder to the parent."""
    if _SCRATCH.get(folder) != os.getpid():
        return
    shutil.rmtree(folder, ignore_errors=True)
    with _registry(wait):
        _SCRATCH.pop(folder, None)


@contextlib.contextmanager
def scratch_folder(prefix: str) -> Iterator[Path]:
    """A new folder in the system's temporary folder (its name starting with ``prefix``) for the work inside,
    removed with everything in it when the work ends, however it ends, and by :func:`abandon` when a signal
    ends the process first.

    Raises:
        OutputError: when the process is ending (:func:`abandon`).
    """
    folder = _new_scratch(prefix)
    try:
        yield folder
    finally:
        _remove_scratch(folder)


_PROCESS_SCRATCH: dict[str, Path] = {}  # prefix -> the folder (which process made it: _SCRATCH)
_PROCESS_LOCK = threading.Lock()


def process_scratch_folder(prefix: str) -> Path:
    """The process's scratch folder for ``prefix`` in the system's temporary folder, made at the first call:
    what a cache keeps when its own folder cannot be written, for the life of this process only. It is removed
    with everything in it when the process exits (by the exit hook of :func:`remove_scratch_folders`, which
    removes only the folders of the process that runs it, so not the parent's in a forked child; and by that
    function where a process ends without its hooks, as a torchrun rank does), and by :func:`abandon` when a
    signal ends the process first.

    Raises:
        OutputError: when the process is ending (:func:`abandon`).
    """
    with _PROCESS_LOCK:
        made = _PROCESS_SCRATCH.get(prefix)
        if made is not None and _SCRATCH.get(made) == os.getpid() and made.is_dir():
            return made
        _PROCESS_SCRATCH[prefix] = _new_scratch(prefix)
        return _PROCESS_SCRATCH[prefix]


atexit.register(remove_scratch_folders)  # every scratch folder still there at the end, whenever it was made


def make_output_folder(folder: Path) -> None:
    """Create ``folder`` (an output's folder) unless it exists; a run that fails later removes it again."""
    if folder.is_symlink() or folder.exists():
        return
    folder.mkdir()
    staged = _STAGED.get()
    if staged is not None:
        staged.made(folder)


# --------------------------------------------------------------------------- atomic writes


def _refuse_unnamable(p: Path, what: str | Param) -> None:
    """Refuse a path the system cannot name (a name longer than its file system takes, a loop of links).

    Raises:
        OutputError: when looking ``p`` up fails for another reason than its absence; ``what`` begins the message.
    """
    try:
        os.lstat(p)
    except (FileNotFoundError, NotADirectoryError):  # absent, or under a file: said with the folder's checks
        pass
    except OSError as exc:
        raise OutputError(what + f": {_reason(exc)}") from None


def _refuse_symlink(p: Path, what: str | Param) -> None:
    """Refuse a dangling symbolic link at an output path (writing would create a file wherever it points).

    Raises:
        OutputError: when ``p`` is a symbolic link whose target does not exist; ``what`` begins the message.
    """
    if p.is_symlink() and not p.exists():
        raise OutputError(
            what + f": it is a symbolic link to {os.readlink(p)}, which does not exist; "
            "remove the link or choose another path"
        )


def _refuse_special(p: Path, what: str | Param, expected: str) -> None:
    """Refuse an output path at which a device node, a named pipe or a socket stands (or a symbolic link to one):
    the output, renamed into place, would replace the node (as root, ``/dev/null`` itself).

    Raises:
        OutputError: when :func:`mhaaudit.files.special_kind` names what stands at ``p``; ``what`` begins the
            message, ``expected`` ("a regular file", "a folder") says what an output there must be.
    """
    kind = special_kind(p)
    if kind is not None:
        raise OutputError(what + f": it is {kind}, not {expected}; an output never replaces it: choose another path")


# What ``tempfile`` adds to a prefix: 8 random characters (and ``.tmp``, the suffix given here).
_RANDOM_CHARS = 8
_TMP_SUFFIX = ".tmp"


def temp_prefix(name: str, folder: Path, suffix: str = _TMP_SUFFIX) -> str:
    """``.NAME.``: the prefix of a temporary made beside ``NAME`` in ``folder`` (with ``suffix``), ``NAME``
    shortened (by its bytes) so that the temporary's whole name fits the longest name the folder's file
    system takes: a legal 255-byte output name has a legal temporary."""
    try:
        longest = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # not asked (no pathconf, or no such folder yet): the usual
        longest = 255
    room = max(1, longest - len(os.fsencode(f"..{suffix}")) - _RANDOM_CHARS)
    return f".{os.fsdecode(os.fsencode(name)[:room])}."


def check_writable(path: str | os.PathLike) -> Path:
    """Fail early, before any work, when ``path`` cannot be written; return it as a ``Path``.

    The file is replaced by a rename, so a symbolic link at ``path`` is replaced, never followed;
    a dangling one is refused.

    Raises:
        OutputError: when ``path`` is a folder, a dangling symbolic link, a device node, a named pipe or a socket
            (or a symbolic link to one), its folder is missing, is a file or is not writable (tried, not only read
            from the permission bits), or the file itself is not writable.
    """
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    _refuse_unnamable(p, f"cannot write {p}")
    _refuse_special(p, f"cannot write {p}", "a regular file")
    if p.exists() and p.is_dir():
        raise OutputError(f"cannot write {p}: it is a directory")
    _refuse_symlink(p, f"cannot write {p}")
    if not parent.exists():
        raise OutputError(f"cannot write {p}: folder {parent} does not exist")
    if not parent.is_dir():
        raise OutputError(f"cannot write {p}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"cannot write {p}: folder {parent} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise OutputError(f"cannot write {p}: file is not writable")
    try:  # the permission bits do not tell everything (/proc, a read-only mount, root): try it
        fd, probe = tempfile.mkstemp(prefix=temp_prefix(p.name, parent), suffix=_TMP_SUFFIX, dir=parent)
    except OSError as exc:
        raise OutputError(f"cannot write {p}: folder {parent} is not writable ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)
    return p


def ordinary_mode(p: Path) -> int:
    """The permissions a plain ``open(p, "w")`` would give: the existing file's, else 0o666 less the umask.

    ``mkstemp`` (and some writers, such as safetensors') create files private (0o600); a file
    renamed into place gets this mode first. A symbolic link's target is not asked.
    """
    try:
        if not p.is_symlink():
            return p.stat().st_mode & 0o7777
    except OSError:
        pass
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, now: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it into place only on success.

    Inside :func:`staged_outputs` the rename waits for the end of the run (all outputs or none),
    unless ``now`` (a cache, or a results file kept up to date for resuming). On any failure the
    temporary file is removed and ``path`` is left as it was.

    Raises:
        OutputError: when ``path`` cannot be written (:func:`check_writable`), or when writing or renaming fails
            with an OSError (a full disk, a vanished folder).
        OSError: an mhaaudit error of the work inside (an OutputError, an OfflineError), re-raised as it is.
    """
    p = check_writable(path)
    parent = p.parent if str(p.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(p.name, parent), suffix=_TMP_SUFFIX, dir=parent)
    os.close(fd)
    tmp_p = Path(tmp)
    with _UNDER_WAY:
        if not _ABANDONED:
            _WRITING[tmp_p] = None
    if _ABANDONED:  # the process is ending (:func:`abandon`): a helper thread begins nothing more
        with contextlib.suppress(OSError):
            tmp_p.unlink()
        raise OutputError(f"cannot write {p}: the run is ending")
    staged = None if now else _STAGED.get()
    try:
        yield tmp_p
        os.chmod(tmp_p, ordinary_mode(p))
        if staged is None:
            os.replace(tmp_p, p)
        else:
            staged.stage(tmp_p, p)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp_p.unlink()
        if isinstance(exc, MhaauditError):  # an OutputError or OfflineError of the work inside says itself
            raise
        # A full disk or a vanished folder is the user's to fix, not a bug: one line, exit 2.
        raise OutputError(f"cannot write {p}: {_reason(exc)}") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            tmp_p.unlink()
        raise
    finally:
        with _UNDER_WAY:
            _WRITING.pop(tmp_p, None)
