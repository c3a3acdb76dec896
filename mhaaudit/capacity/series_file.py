"""A results file of a series of checkpoints (``check --checkpoints``, or a list in ``--revision``) read by
``capacity --from`` for one of its checkpoints.

A series' rows are each checkpoint's records as a single ``check MODEL --weights CHECKPOINT`` run of it writes
them, tagged with the checkpoint (the reference columns' rows, audited once, with none); its metadata lists each
checkpoint's columns as that run's metadata does (``columns``), and the reference columns' once. So the file is
read as that single run's file would be: the reference rows and the checkpoint's, untagged, under the series'
metadata with their columns. Which checkpoint is the one this run's trained weights are: the one ``--weights``
names (its name as given, or its path) or ``--revision`` names; a run without the trained column reads the
reference columns alone. A hub revision whose config draws the random weights the reference columns were drawn
from (the first revision's) lists the words its single run gives them (``random_weights_source``): the reference
columns are read for it with those, as its own (a series written before they were listed has none: they keep
the first revision's, which ``capacity`` notes as other weights). The rows read are held to the audits of the
reference and of the checkpoint that the series' metadata stores (:func:`rows_unlike_stored`), as a single run's
rows are held to its stored result.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from ..as_stored import held_rows_unlike, unlike_stored
from ..documents import RESULT_KEY, decode_result
from ..errors import InputError, Param, clipped
from ..tables import SERIES_COLUMNS, schema_columns, table_rows, utf8_text

__all__ = ["HeldRows", "checkpoint_results", "rows_unlike_stored"]

#: What a series tags each record with (the schema's series columns), and the rows only a series writes
_TAGS = tuple(c.name for c in SERIES_COLUMNS)
_SERIES_ONLY = "sweep_estimate"


@dataclass(frozen=True)
class HeldRows:
    """The rows of a series file read for one checkpoint, as the file holds them (tagged), with their places in it
    (``numbers``, counted from 1), and that checkpoint's name (None: the reference columns' rows alone)."""

    rows: list[dict]
    numbers: list[int]
    name: str | None


def checkpoint_results(
    p: Path, meta: dict, rows: list[dict], checkpoint: str | os.PathLike | None, trained: bool
) -> tuple[dict, list[dict], HeldRows]:
    """The metadata and rows of the series file ``p`` (``meta``, ``rows``) for ``checkpoint`` (its name as given,
    its path, or its revision), as a results file of ``check`` run on that checkpoint alone holds them; without
    ``trained`` (the run reads no trained column), those of the reference columns alone; and those rows as the file
    holds them, to be held to the series' stored result (:func:`rows_unlike_stored`).

    Raises:
        InputError: when the series holds several seeds' runs, ``checkpoint`` is None (with ``trained``), names
            none of its checkpoints or one not audited (an interrupted series), or the file lists no columns of
            the checkpoint (a series written before they were listed) or no reference columns (or, read without
            ``trained``, its series audited none), holds no rows of what it reads, or lists a checkpoint whose name
            is no text.
    """
    series = meta.get("series")
    entries = series.get("checkpoints") if isinstance(series, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InputError(
            Param("from_path") + f" {p}: its 'mhaaudit' parquet metadata lists no checkpoints of its series ("
            "not what " + Param("check_checkpoints") + " writes)"
        )
    if "seed_plan" in meta:
        raise InputError(
            Param("from_path")
            + f" {p}: it holds a series of checkpoints audited with several seeds ("
            + Param("check_seeds")
            + "); the bound rests on one run's verdicts: give the file of a series run with one "
            + Param("seed")
        )
    assert isinstance(series, dict), "a series lists its checkpoints"
    for e in entries:  # a name is what the rows are tagged with and the checkpoint is found by
        if not isinstance(e.get("name"), str):
            shown = f"{clipped(repr(e.get('name')), 60)} ({type(e.get('name')).__name__})"
            raise InputError(
                Param("from_path") + f" {p}: its series lists a checkpoint whose name is {shown}, not a name "
                "(not what " + Param("check_checkpoints") + " writes)"
            )
    name = None
    if trained:
        if checkpoint is None:
            _refuse_unnamed(p, entries)
        name = _named(p, entries, os.fspath(checkpoint), series.get("complete") is False)
    columns = series.get("reference_columns") or {}
    found = name if name is not None or checkpoint is None else _found(entries, os.fspath(checkpoint))
    drawn = next((e.get("random_weights_source") for e in entries if e.get("name") == found), None)
    if isinstance(drawn, str) and isinstance(columns, dict):
        columns = {
            k: c | {"weights_source": drawn} if isinstance(c, dict) and c.get("weights") == "random" else c
            for k, c in columns.items()
        }
    own = next((e.get("columns") for e in entries if e.get("name") == name), None) if name is not None else {}
    if not isinstance(columns, dict) or not isinstance(own, dict) or "reference_columns" not in series:
        raise InputError(
            Param("from_path")
            + f" {p}: its series lists no columns of "
            + (f"checkpoint {clipped(name, 80)}" if name is not None and not isinstance(own, dict) else "its reference")
            + " (a series written by an earlier version, or one interrupted before it): audit it with "
            + Param("check_out")
            + " alone"
        )
    if not own and not columns:  # the reference read, of a series that audited none (no rows were removed)
        raise InputError(
            Param("from_path") + f" {p}: its series audited no reference (random) columns, only each checkpoint's "
            "trained column: read one checkpoint's (trained in "
            + Param("variants")
            + ", the checkpoint in "
            + Param("weights")
            + " or "
            + Param("revision")
            + ")"
        )
    tags = (None, name, utf8_text(name))  # a name that is not UTF-8 tags the rows with its bytes' escapes
    numbers = [i for i, r in enumerate(rows, start=1) if r.get("checkpoint") in tags and r.get("check") != _SERIES_ONLY]
    mine = [rows[i - 1] for i in numbers]
    if (own and not any(r.get("checkpoint") is not None for r in mine)) or not mine:
        whose = f"checkpoint {clipped(str(name), 80)}" if own else "its reference"
        raise InputError(
            Param("from_path") + f" {p}: it holds no rows of {whose}, whose columns its series lists (the rows were "
            "removed, or the file damaged): give the file as the series wrote it"
        )
    kept = [{k: v for k, v in r.items() if k not in _TAGS} for r in mine]
    held = HeldRows(mine, numbers, name)
    return {k: v for k, v in meta.items() if k != "series"} | {"columns": {**columns, **own}}, kept, held


class _Joined:
    """The rows the audits of a series' reference and of one checkpoint give, tagged as the series tags them."""

    def __init__(self, audits: list[tuple[dict, Any]]) -> None:
        self.audits = audits

    def records(self) -> list[dict]:
        """Each audit's records, tagged."""
        return [tags | r for tags, audit in self.audits for r in audit.records()]

    def sweep_rows(self) -> list[dict]:
        """Each audit's sweep rows, tagged."""
        return [tags | r for tags, audit in self.audits for r in audit.sweep_rows() or []]


def rows_unlike_stored(meta: dict, held: HeldRows, kind: type) -> str | None:
    """Where the rows ``held`` of a series file differ from those its stored result gives the reference and the
    checkpoint they were read for (their ``kind`` audits, one run's: a series of several seeds is refused before),
    in words; None when they are the same, and when nothing says what they should be (the file stores no result, or
    another release wrote it: :func:`~mhaaudit.as_stored.unlike_stored`). Columns that only other rows fill (a swept
    column's estimate) are left aside.
    """
    return unlike_stored(meta, lambda: _unlike(meta, held, kind))


def _unlike(meta: dict, held: HeldRows, kind: type) -> str | None:
    """:func:`rows_unlike_stored` once the file is known to store a result of this release (raises what reading it
    back raises)."""
    run = meta[RESULT_KEY]["runs"][0]
    audits = [] if run["reference"] is None else [(dict.fromkeys(_TAGS), run["reference"])]
    if held.name is not None:
        entries = {c["checkpoint"]["name"]: c for c in run["checkpoints"]}
        entry = entries[held.name]
        ref = entry["checkpoint"]
        tags = {"checkpoint": ref["name"], "step": ref["step"], "order": ref["order"]}
        same = entry["same_as"] if entry["status"] == "identical" else None  # as SeriesRun.audit_of finds it
        audited = entries.get(same, entry)
        audits.append((tags | {"identical_to": entry["identical_to"]}, audited["audit"]))
    joined = _Joined([(tags, decode_result(kind, doc)) for tags, doc in audits])
    given = {k for r in table_rows(joined.records(), joined.sweep_rows()) for k in r}
    schema = schema_columns(meta)  # in every file, whichever rows fill them
    columns = [c for c in held.rows[0] if c in given or c in schema or any(r[c] is not None for r in held.rows)]
    rows = [{c: r[c] for c in columns} for r in held.rows]
    return held_rows_unlike(rows, columns, joined, meta, numbers=held.numbers, series=True)


def _named(p: Path, entries: list[dict[str, Any]], given: str, interrupted: bool) -> str:
    """The name of the checkpoint ``given`` names: the local checkpoint that lies at ``given`` (relative to this
    run's folder: the weights this run reads), else the one named so as given, or its revision. A series run in
    another folder may name another checkpoint as this run's weights are given.

    Raises:
        InputError: when no checkpoint of the series lies there or is named so (saying, for an ``interrupted``
            series, that it lists only the checkpoints audited before it stopped).
    """
    found = _found(entries, given)
    if found is not None:
        return found
    raise InputError(
        Param("from_path")
        + f" {p}: no checkpoint of its series is named {clipped(given, 120)} or lies there (it holds: "
        + clipped(", ".join(str(e.get("name")) for e in entries), 300)
        + (
            "; it was interrupted, and lists only those audited before: run it again into this file for the rest"
            if interrupted
            else ""
        )
        + ")"
    )


def _found(entries: list[dict[str, Any]], given: str) -> str | None:
    """The name of the checkpoint ``given`` names (see :func:`_named`), or None when none is named so."""
    path = os.path.abspath(os.path.expanduser(given))
    for e in entries:
        if isinstance(e.get("path"), str) and os.path.normpath(e["path"]) == path:
            return str(e["name"])
    for e in entries:
        if e.get("name") == given:
            return given
    return None


def _refuse_unnamed(p: Path, entries: list[dict[str, Any]]) -> NoReturn:
    """Refuse a series file read for the trained column with no checkpoint named.

    Raises:
        InputError: always, naming ``p``, its checkpoints and what to give.
    """
    listed = ", ".join(str(e.get("name")) for e in entries) or "none audited yet"
    raise InputError(
        Param("from_path")
        + f" {p}: it holds a series of checkpoints ({clipped(listed, 300)}), the verdicts of each: give "
        + Param("weights")
        + " CHECKPOINT or "
        + Param("revision")
        + " REV naming the one whose weights this run bounds"
    )
