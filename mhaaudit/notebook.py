"""Progress in a Jupyter notebook: one bar per phase, left finished when the phase ends.

In a notebook kernel :func:`mhaaudit.progress.task` hands its bars here instead of drawing them
with rich on stderr (rich's live display in a kernel needs ipywidgets, draws one output per phase,
and leaves bars frozen where a phase ended early). With ipywidgets installed a bar is a
``tqdm.notebook`` widget; without it, a plain-text ``tqdm`` line on stderr (no warning about the
missing widgets: :func:`quiet_tqdm_fallback`, run when mhaaudit is imported in a kernel, keeps
``tqdm.auto``'s from showing too). When a phase ends before its announced total (a test decided before all its
draws were made, or without sampling at all), the bar's total is set to what was done, so every
finished phase shows a finished bar; an interrupted phase keeps its bar where it stopped.

ipywidgets and tqdm are imported where they are used: ``import mhaaudit`` runs this module, and
stays cheap outside a notebook.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator


def in_notebook() -> bool:
    """True inside a Jupyter kernel (an IPython shell with a kernel), False in a terminal or plain Python."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # noqa: BLE001  # pragma: no cover - a broken IPython install: no notebook
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


def has_widgets() -> bool:
    """Whether ipywidgets can be imported (tqdm's notebook bars need it)."""
    try:
        import ipywidgets  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken ipywidgets install means no widgets
        return False
    return True


def quiet_tqdm_fallback() -> None:
    """In a kernel without ipywidgets, import ``tqdm.autonotebook`` once with its "IProgress not
    found" warning silenced: the libraries mhaaudit uses (transformers, datasets) import
    ``tqdm.auto``, which falls back to text bars there anyway, after a warning a user cannot act
    on. Elsewhere, and when the widgets exist, it does nothing."""
    if "tqdm.autonotebook" in sys.modules or not in_notebook() or has_widgets():
        return

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.suppress(Exception):  # tqdm is a dependency of transformers; never fail here
            import tqdm.autonotebook  # noqa: F401


@contextlib.contextmanager
def notebook_task(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """Yield an ``advance(n)`` callback driving one bar of the notebook: a widget with ipywidgets,
    else a text line on stderr. The bar is finished when the phase ends normally."""
    if has_widgets():
        from tqdm.notebook import tqdm as bar_type
    else:
        from tqdm.std import tqdm as bar_type
    bar = bar_type(
        total=total,
        desc=description,
        leave=True,
        file=sys.stderr,
        mininterval=0.2,
        dynamic_ncols=False,
        ncols=None if has_widgets() else 100,
    )
    ok = False
    try:

        def advance(n: int = 1) -> None:
            bar.update(n)

        yield advance
        ok = True
    finally:
        if ok:
            finish(bar)
        bar.close()


def finish(bar) -> None:
    """Show a finished bar for a phase that ended normally: one that ended before its announced
    total (a test decided early, or without sampling at all) is finished at what was done, and
    says so."""
    planned = bar.total
    if planned is not None and bar.n == planned:
        return
    done = bar.n
    if done == 0:
        total = 1  # nothing was needed: a full bar, labelled
        bar.n = 1
        bar.set_postfix_str(
            f"done: 0 of {planned} needed" if planned is not None else "done: nothing to read", refresh=False
        )
    else:
        total = done
        if planned is not None:
            bar.set_postfix_str(f"done after {done} of {planned}", refresh=False)
    bar.total = total
    container = getattr(bar, "container", None)  # a tqdm.notebook widget: its progress bar keeps its own max
    if container is not None:
        container.children[1].max = total
        container.children[1].value = bar.n
    bar.refresh()
