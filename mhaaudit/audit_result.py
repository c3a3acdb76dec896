"""The audit's result types: one column's results and :class:`AuditResult` (its notes are :mod:`mhaaudit.notes`)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from .checks import REGISTRY, ContextRankResult
from .display import verdict_tally
from .errors import OutputError, Param
from .facts import AuditSettings, DuplicateInputs, ModelFacts, ReadFacts, SkipCounts, meta_value, weights_read_text
from .features import FEATURES_FILE, META_FILE, FeatureSet
from .files import first_name_under, special_kind
from .io import check_folder_writable
from .kruskal import SubsetTest, Sweep
from .notes import Note
from .probes import IMAGE_VARIANTS, Probe
from .provenance import stamp
from .render import audit_report
from .staging import make_output_folder
from .tables import StoredSweepResult
from .theory import CapacityBound

#: What one check of a column returns: a Monte-Carlo / exact subset test, or Assumption 2's exact counts.
CheckResult = SubsetTest | ContextRankResult


@dataclass(repr=False)
class Column:
    """The audit of one probe point.

    ``T`` is the number of examples its checks read and ``weights_read`` what loading its trained
    weights read (None for random weights). ``bound`` is what Theorem 1 / Remark 1 concludes from
    its verdicts with the model's heads (None when the model does not say its heads, or the column
    is unavailable), and ``bound_hint`` what would give a count when there is none.
    ``features`` are the reduced features themselves (not stored in the results files).
    """

    probe: Probe
    status: str = "ok"  # ok | unavailable
    reason: str = ""
    features: FeatureSet | None = field(default=None, compare=False, metadata={"document": False})
    tests: dict[str, CheckResult] = field(default_factory=dict)  # check -> its result
    sweep: Sweep | None = None
    timings: dict[str, float] = field(default_factory=dict)
    weights_source: str = ""
    T: int | None = None
    weights_read: ReadFacts | None = None
    bound: CapacityBound | None = None
    bound_hint: str = ""

    def records(self, model: str) -> list[dict]:
        """One record per registered check, tagged with ``model`` and the column; ``unavailable`` with the
        reason where the check did not run."""
        out = []
        for check in REGISTRY:
            r = self.tests.get(check)
            rec = (
                {"check": check, "verdict": "unavailable", "reason": self.reason or "not run"}
                if r is None
                else r.record()
            )
            out.append({"model": model, "variant": self.probe.variant, "layer": self.probe.layer, **rec})
        return out

    def __repr__(self) -> str:
        what = verdict_tally(self.records("")) if self.status == "ok" else f"unavailable: {self.reason}"
        T = f", T = {self.T}" if self.T is not None else ""
        return f"<Column {self.probe.variant} (layer {self.probe.layer}{T}): {what}>"


@dataclass(repr=False)
class AuditResult(StoredSweepResult):
    """The audit of every column; ``to_arrow()`` / ``to_pandas()`` give the rows ``check --out`` writes,
    and a notebook shows it as the report ``check`` prints. ``AuditResult.from_json`` /
    ``from_parquet`` read it back from what ``check --format json`` printed or ``--out`` wrote."""

    COMMAND: ClassVar[str] = "check"

    model: str
    info: ModelFacts  # the model's ModelInfo, and the weights each column read
    data: str
    columns: list[Column]
    settings: AuditSettings  # the run's settings, as the JSON meta gives them
    timings: dict[str, float]
    skipped: int = 0
    notes: list[Note] = field(default_factory=list)
    duplicates: DuplicateInputs | None = None  # exact duplicate inputs found (None: none looked for)
    skips: SkipCounts = field(default_factory=SkipCounts)  # inputs skipped, by cause
    image_policy: str = ""  # images: the rule for modes other than RGB (skipped, or converted)

    @property
    def T(self) -> int | None:
        """The number of examples audited (that of the first column audited; None when none was)."""
        return next((c.T for c in self.columns if c.T is not None), None)

    def records(self) -> list[dict]:
        """Every column's records, column by column.

        Returns:
            One dict a record (:meth:`Column.records`), the rows ``--out`` writes.
        """
        return [r for c in self.columns for r in c.records(self.model)]

    REPORT = audit_report

    def summary_line(self) -> str:
        """The model, T, the columns (those unavailable said so) and the tally of verdicts."""
        T = self.T
        cols = ", ".join(c.probe.variant + ("" if c.status == "ok" else " (unavailable)") for c in self.columns)
        return (
            f"{self.model!r}"
            + ("" if T is None else f", T = {T}")
            + f"; columns {cols}: {verdict_tally(self.records())}"
        )

    def meta(self) -> dict:
        """The provenance stamp of the audit, with what each column read and how.

        Returns:
            The JSON ``meta`` as a dict.
        """
        meta = stamp(
            command="check",
            model=self.model,
            model_info=self.info.as_dict(),
            data=self.data,
            skipped=self.skipped,
            skips=self.skips.as_dict(),
            image_policy=self.image_policy or None,
            duplicates=self.duplicates.as_dict() if self.duplicates is not None else {},
            notes=self.notes,
            timings_s=self.timings,
            **self.settings.as_dict(),
        )
        meta["columns"] = self.columns_meta()
        meta["result"] = self.result_document()
        return meta

    def columns_meta(self) -> dict:
        """What each column read and how, by its name: the ``columns`` of :meth:`meta`."""
        return {
            c.probe.variant: {
                "status": c.status,
                "reason": c.reason,
                "layer": c.probe.layer,
                "weights": c.probe.init,
                "describe": c.probe.describe(),
                "weights_source": c.weights_source,
                "timings_s": c.timings,
                "weights_read": meta_value(c.weights_read),
                "weights_read_text": weights_read_text(meta_value(c.weights_read)),
                "sweep": c.sweep.summary() if c.sweep else None,
                "bound": c.bound.to_dict() if c.bound is not None else None,
                "bound_hint": c.bound_hint,
            }
            for c in self.columns
        }

    def sweep_rows(self) -> list[dict]:
        """The sweep rows of every column swept, tagged with the model, the column and its layer."""
        rows: list[dict] = []
        for c in self.columns:
            if c.sweep is not None:
                rows.extend(
                    {"model": self.model, "variant": c.probe.variant, "layer": c.probe.layer, **r}
                    for r in c.sweep.rows()
                )
        return rows

    def column(self, variant: str) -> Column:
        """Find the column named ``variant``.

        Args:
            variant: the column's name (``embedding``, ``random``, ``trained-L1``, ...).

        Returns:
            The :class:`Column`.

        Raises:
            KeyError: when no column is named ``variant``.
        """
        for c in self.columns:
            if c.probe.variant == variant:
                return c
        raise KeyError(variant)

    def save_features(self, folder: str | Path) -> Path:
        """Write each audited column's reduced features to ``folder/<variant>``.

        This is what ``check --save-features`` writes, for ``mhaaudit kruskal`` or a later audit.
        The folders are staged with a run's other outputs: all written or none.

        Args:
            folder: the folder to write into.

        Returns:
            The folder.

        Raises:
            OutputError: when the folder cannot be made.
        """
        folder = Path(folder)
        try:
            make_output_folder(folder)
        except OutputError:
            raise
        except OSError as exc:
            raise OutputError(
                Param("save_features") + f" {folder}: cannot create the folder ({exc.strerror or exc})"
            ) from exc
        for c in self.columns:
            if c.features is not None:
                c.features.save(folder / c.probe.variant)
        return folder


# the subfolders AuditResult.save_features writes: a column's variant, at a depth or not
COLUMN_FOLDER = rf"({'|'.join(re.escape(v) for v in IMAGE_VARIANTS)})(-L\d+)?"


def check_features_folder(folder: str | Path, inputs: Sequence) -> Path:
    """Before any work: the folder :meth:`AuditResult.save_features` will write must be writable, and
    where a column's subfolder goes, a symbolic link (the features would be written wherever it
    points) or one of ``inputs`` (paths the run reads) is refused with
    :class:`~mhaaudit.errors.OutputError`.

    The inputs and what stands in the folder are looked at first: a refused folder is never tried for
    writing (no probe is made in it).

    Returns:
        The folder as a ``Path``.

    Raises:
        OutputError: when the folder cannot be made or written, is a device node, a named pipe or a socket, a
            column's subfolder in it is a symbolic link or not a folder, a file the features go to is a device
            node, a named pipe or a socket, or an input lies where a column's features would be written.
    """
    folder = Path(folder)
    for i in inputs:
        if i is None or not os.path.lexists(os.path.expanduser(str(i))):
            continue
        first = first_name_under(i, folder)  # by device and inode: a second name of the folder counts
        if first is not None and re.fullmatch(COLUMN_FOLDER, first):
            raise OutputError(
                Param("save_features") + f" {folder}: the input {i} lies where the features would be written; "
                "write them elsewhere"
            )
    if folder.is_dir() and special_kind(folder) is None:
        for entry in sorted(folder.iterdir()):
            if not re.fullmatch(COLUMN_FOLDER, entry.name):
                continue
            if entry.is_symlink():
                raise OutputError(
                    Param("save_features") + f" {folder}: {entry.name} is a symbolic link (to "
                    f"{os.readlink(entry)}); the features are written into real folders only: remove it "
                    "or choose another folder"
                )
            for place in (entry, entry / FEATURES_FILE, entry / META_FILE):
                kind = special_kind(place) or (None if place != entry or entry.is_dir() else "a file")
                if kind is not None:
                    raise OutputError(
                        Param("save_features") + f" {folder}: {place.relative_to(folder)} is {kind}, where the "
                        "features are written: refused (remove it or choose another folder)"
                    )
    return check_folder_writable(folder, Param("save_features"))
