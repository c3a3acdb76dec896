"""A single-process command imports no distributed-training packages.

transformers' modelling code imports torch's distributed tensor package (through its sharding
utilities) whenever ``torch.distributed`` is available, and ``torch._dynamo``, which
transformers' masking utilities import, imports FSDP with it: seconds of import time (measured at
about 10 s on a GPU machine) for packages that an audit run as one process never uses.

The command line asks for light imports (:data:`LIGHT`, set by ``mhaaudit.cli``); then, while a
model is built (:func:`light`: the window in which the model libraries are first imported) in a
process that is not part of a launched job and has no process group:

- transformers is told that ``torch.distributed`` is unavailable (its modules imported in the
  window bind that answer and take their single-process paths, as on a build of torch without
  distributed support);
- ``torch.distributed.fsdp``, ``torch.distributed.tensor`` and ``torch.distributed._composable``
  cannot be imported (``ModuleNotFoundError``, which ``torch._dynamo`` expects and handles).

``memorize`` opens the same window, without transformers, while it makes its optimisers: torch's
optimisers import ``torch._dynamo`` on first use.

After the window everything can be imported again. Under ``torchrun`` (``WORLD_SIZE`` above 1), with
a process group already made, or once transformers' modelling code or the distributed tensor
package has been imported, nothing is changed. A library user's own process is left alone unless
it sets :data:`LIGHT` itself.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["BLOCKED", "LIGHT", "light"]

#: Set by the command line: single-process runs skip the distributed-training packages.
LIGHT = False

#: The packages a single-process run does not import while its model is built.
BLOCKED = ("torch.distributed.fsdp", "torch.distributed.tensor", "torch.distributed._composable")


class _Blocked(importlib.abc.MetaPathFinder):
    """Answers ``ModuleNotFoundError`` for :data:`BLOCKED` and what lies below them while a window is open
    (``windows`` above 0). It is put first in ``sys.meta_path`` by the first window and left there: a finder
    taken out of that list while another thread imports can make that import skip the finder after it
    (windows open on several threads at once: ``memorize`` makes each group's optimiser in one)."""

    def __init__(self) -> None:
        self.windows = 0

    def find_spec(self, name, path=None, target=None):
        if self.windows and (name in BLOCKED or name.startswith(tuple(b + "." for b in BLOCKED))):
            raise ModuleNotFoundError(f"No module named {name!r} (not imported by a single-process run)", name=name)
        return None


_FINDER = _Blocked()
_FINDER_LOCK = threading.Lock()


@contextmanager
def _blocking() -> Iterator[None]:
    """:data:`BLOCKED` cannot be imported while the block runs (nor while another thread's window is open)."""
    with _FINDER_LOCK:
        if not any(f is _FINDER for f in sys.meta_path):
            sys.meta_path.insert(0, _FINDER)
        _FINDER.windows += 1
    try:
        yield
    finally:
        with _FINDER_LOCK:
            _FINDER.windows -= 1


def _applies() -> bool:
    if not LIGHT:
        return False
    try:
        if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
            return False
    except ValueError:
        return False
    if "transformers.modeling_utils" in sys.modules or any(b in sys.modules for b in BLOCKED):
        return False  # too late to matter, or wanted by someone
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    try:
        return not (dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:  # noqa: BLE001 - a torch without these functions: leave it alone
        return False


_ASK = "is_torch_distributed_available"  # how transformers asks whether torch.distributed is there


def _distributed_unavailable() -> bool:
    return False


def _told_unavailable() -> list[tuple[object, object]]:
    """Tell transformers that ``torch.distributed`` is unavailable (module docstring); what to put back."""
    saved: list[tuple[object, object]] = []
    try:
        import transformers.utils as tu
        import transformers.utils.import_utils as iu
    except ImportError:  # no transformers: only the block applies
        return saved
    for mod in (tu, iu):
        if hasattr(mod, _ASK):
            saved.append((mod, getattr(mod, _ASK)))
            setattr(mod, _ASK, _distributed_unavailable)
    return saved


@contextmanager
def light(transformers: bool = True) -> Iterator[None]:
    """The window in which a model is built (module docstring): distributed-training packages
    are not imported in it, when the command line asked for that and this process runs alone.
    ``transformers=False``: a window that builds no transformers model (torch's optimisers import
    ``torch._dynamo`` on first use, and with it FSDP): only the block applies, and transformers is
    not imported for it."""
    if not _applies():
        yield
        return
    saved = _told_unavailable() if transformers else []
    try:
        with _blocking():
            yield
    finally:
        for mod, fn in saved:
            setattr(mod, _ASK, fn)
