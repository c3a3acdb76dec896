"""``mhaaudit check MODEL --checkpoints SPEC`` (or ``--revision A,B,C``): a series of checkpoints audited in one run.

``check`` hands a series here once it has checked the options and built the request, the same
way as for one audit; the series has its own output (a table per trained column over the
checkpoints, the changes, the trend figure). The ``--out`` file is the series' results file,
rewritten as it runs so that an interrupted series resumes from the checkpoints done.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..stdio import say
from .names import flag, flagged, with_flags
from .options import Format
from .output import emit, prepare_outputs

if TYPE_CHECKING:  # the library is imported only when a command runs
    from ..request import Requests


def is_series(checkpoints: str | None, revision: str | None) -> bool:
    """Whether ``check``'s options ask for a series: ``--checkpoints``, or a comma list in ``--revision``."""
    return checkpoints is not None or "," in (revision or "")


def check_series(
    model: str,
    data: str | None,
    req: Requests,
    checkpoints: str | None,
    audited: Mapping[str, Any],
    *,
    fmt: Format,
    out: Path | None,
    plot: Path | None,
) -> list[dict]:
    """Audit the series ``--checkpoints`` (or ``--revision A,B,C``) names with the request ``req`` that
    ``check`` built from ``model``, ``data`` and its options, and write its outputs.

    ``audited`` holds the keywords of each checkpoint's audit that ``check`` reads from its options
    (``variants``, ``layer``, ``layers``, ``sweep``, ``seeds``, ``vary``), as :func:`mhaaudit.audit` takes them.

    Returns:
        The series' records (``check`` exits 1 when a check ``--fail-on`` names fails in one).
    """
    from ..console import shown
    from ..io import refuse_inputs
    from ..models.file_reads import read_once
    from ..render import print_report
    from ..series import audit_series, plot_series, resolve_series, series_revisions

    with read_once():  # each checkpoint's header: read here, for the checks before any work, and kept for the run
        revisions = series_revisions(req.model.revision)
        series = resolve_series(checkpoints, revisions, req.model, [out, plot])
        refuse_inputs({"--out": out, "--plot": plot}, [model, data, *series.paths])
        prepare_outputs(out, plot, fmt)
        result = audit_series(
            req.model,
            checkpoints=series,  # resolved once: a glob's matches less the outputs (--plot as well as --out)
            data=req.data,
            settings=req.settings,
            on_note=lambda m: say(f"Note: {flagged(m)}"),
            out=out,
            names=flag,
            **audited,
        )
    with_flags(result)
    if plot is not None and plot_series(result, plot) is None:
        say(f"Note: no checkpoint could be audited, so no plot was written to {plot}")
        plot = None
    written = [str(p) for p in (out, plot) if p is not None]

    def render() -> None:
        print_report([*result.renderables(), *([shown(f"Wrote {', '.join(written)}")] if written else [])])

    # --out is the series' own results file (rewritten as it runs, for resuming): not emit's to write.
    emit(
        fmt, result.meta(), result.records(), sweep=result.sweep_rows() or None, out=out, render=render, write_out=False
    )
    return result.records()
