"""What the capacity bound is computed from: Assumptions 1 and 2 and a Kruskal-rank estimate.

Either audited on the tokens the attention block sees (:func:`audit_assumptions`, on the reduced features of the
same examples that build Z), or read from a results file of ``mhaaudit check --out`` (:func:`assumptions_from_file`).
Assumption 2 is exact per example. For Assumption 1 the theorem needs the assumption to hold, not the paper's
estimate of it: the status it rests on is the exact status where that is decided (a dependent n-subset found, or a
whole-set rank below n, proves that A1 fails, whatever fraction of the draws was independent), and the estimate
verdict otherwise, in which case the bound inherits the estimate's status (:func:`a1_status`).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import phases
from ..as_stored import edited, stored_rows_unlike
from ..audit_result import AuditResult
from ..check_words import CHECK_TITLES, is_decided
from ..checks import REGISTRY
from ..errors import InputError, Param, clipped
from ..files import read_parquet, regular_file
from ..io import read_parquet_metadata
from ..kruskal import kruskal_sweep, set_stats, subset_test
from ..kruskal.stored import record_contradiction
from ..numerics import numerics, tf32_off
from ..progress import task
from ..theory import a1_status
from .series_file import HeldRows, checkpoint_results, rows_unlike_stored

__all__ = [
    "Assumptions",
    "a1_status",
    "assumptions_from_file",
    "audit_assumptions",
    "linear_algebra",
    "read_check_results",
]


def _a1_reason(verdict: str | None, exact_status: str | None, reason: str) -> str:
    if exact_status == "fails" and verdict == "holds":
        return (
            f"{reason}; the estimate under the paper's rule holds, but the exact status is fails (proven), "
            "and Theorem 1 needs the assumption itself"
        )
    return reason


@dataclass
class Assumptions:
    """What the bound is computed from."""

    a1: str | None = None  # holds | fails | None (not checked)
    a2: str | None = None
    a1_reason: str = ""
    a2_reason: str = ""
    a1_fraction: float | None = None
    a1_proven: bool | None = None  # whether A1's status is proven (exact), not only the estimate; None: not said
    kruskal_estimate: int | None = None
    estimate_note: str = ""
    source: str = ""

    def holds(self, v: str | None) -> bool | None:
        """True for the verdict "holds", False for "fails", None for anything else (not checked, unavailable)."""
        return None if v not in ("holds", "fails") else v == "holds"

    def to_dict(self) -> dict:
        """The verdicts, reasons, A1 fraction, Kruskal estimate and source under their JSON names
        (:data:`JSON_NAMES`, in that order)."""
        return {json_name: getattr(self, name) for name, json_name in JSON_NAMES.items()}


#: The JSON name of each field of :class:`Assumptions`, in the order ``to_dict`` writes them.
JSON_NAMES = {
    "a1": "assumption_1",
    "a1_reason": "assumption_1_reason",
    "a1_fraction": "assumption_1_fraction",
    "a1_proven": "assumption_1_proven",
    "a2": "assumption_2",
    "a2_reason": "assumption_2_reason",
    "kruskal_estimate": "kruskal_estimate",
    "estimate_note": "kruskal_estimate_note",
    "source": "source",
}


@contextlib.contextmanager
def linear_algebra():
    """Rank computations on the CPU: one thread, subnormals flushed, full float32 precision (see
    ``numerics`` and ``tf32_off``).

    On shared cores the multi-threaded LAPACK calls were erratic, up to 100x slower (a 768 x 768
    eigenvalue problem took 11.6 s on two threads against 0.08 s on one, and the QR/SVD of a
    2000 x 9216 matrix was no faster on two). The model's forward pass runs outside this context.
    """
    with tf32_off(), numerics(threads=1):
        yield


def audit_assumptions(fs, settings, label: str = "") -> tuple[Assumptions, dict[str, float]]:
    """A1 (k = n) and A2 on reduced features; a Kruskal-rank estimate when Remark 1 needs one."""
    rule = settings.rule(fs.dtype)
    samples, threshold, progress = settings.samples, settings.threshold, settings.progress
    timings: dict[str, float] = {}
    t0, a2 = time.perf_counter(), fs.assumption_2(rule)
    out = Assumptions(a2=a2.verdict, a2_reason=a2.reason, source="audited on the same examples")
    with phases.phase("whole-set statistics"):
        stats = set_stats(fs.queries, rule)
    common = dict(samples=samples, threshold=threshold, seed=settings.seed, rule=rule, device=settings.device)
    with task(f"{label} assumption_1 (k = {fs.n})", samples, progress) as adv, phases.phase("draws"):
        a1 = subset_test(
            fs.queries,
            fs.n,
            check="assumption_1",
            title=CHECK_TITLES["assumption_1"],
            stats=stats,
            progress=adv,
            stop_when_decided=True,
            **common,
        )
    out.a1, out.a1_reason = a1_status(a1.verdict, a1.exact_status), _a1_reason(a1.verdict, a1.exact_status, a1.reason)
    out.a1_proven = is_decided(a1.exact_status)
    out.a1_fraction = a1.fraction if a1.sampled else None
    timings["assumptions 1-2"] = round(time.perf_counter() - t0, 3)
    if out.a1 == "fails" and a2.verdict == "holds" and fs.n < fs.d:
        t0 = time.perf_counter()
        with task(f"{label} Kruskal-rank sweep (k <= {fs.n})", samples, progress) as adv, phases.phase("draws"):
            sw = kruskal_sweep(fs.queries, kmax=fs.n, stats=stats, progress=adv, **common)
        timings["kruskal sweep"] = round(time.perf_counter() - t0, 3)
        if sw.estimate >= 1:
            out.kruskal_estimate = int(sw.estimate)
            out.estimate_note = (
                f"largest k <= {fs.n} with satisfied fraction >= {threshold} over {samples} nested draws "
                f"(an estimate); certified ceiling {sw.ceiling.value} ({sw.ceiling.kind})"
            )
            if sw.exact_kruskal_rank == sw.estimate:  # the floor meets the ceiling: the estimate is proven
                out.estimate_note += f" and floor {sw.floor.value} ({sw.floor.kind}): the Kruskal rank itself (a proof)"
    return out, timings


def read_check_results(
    path: str | Path, checkpoint: str | os.PathLike | None = None, *, trained: bool = True
) -> tuple[dict, list[dict]]:
    """The metadata and records of a parquet file written by ``mhaaudit check --out``; of a series of checkpoints,
    those a run on ``checkpoint`` alone writes (its name, path or revision; without ``trained``, those of the
    reference columns alone: :func:`.series_file.checkpoint_results`).

    Raises:
        InputError: when ``path`` is not a regular file (a named pipe, a device), cannot be read as parquet, declares
            more values than the memory available holds, was written by another command (its metadata names it),
            has no check/variant columns (or no rows), carries malformed mhaaudit metadata or none naming its
            columns, holds the records of several seeds (not one run's verdicts), a series read for no checkpoint
            of it, a row that no run of check writes (:func:`_check_row_keys`), or (written by this release) rows
            other than those of the result its metadata stores (a row edited by hand:
            :func:`mhaaudit.as_stored.stored_rows_unlike`; of a series, the rows read:
            :func:`.series_file.rows_unlike_stored`).
    """
    p = Path(path)
    if p.is_dir() or not p.exists():
        what = "a folder, not a parquet file of check results" if p.is_dir() else "no such file"
        raise InputError(Param("from_path") + f" {p}: {what}")
    try:
        regular_file(p, InputError)  # a named pipe is no missing file, and is never opened
    except InputError as exc:
        raise InputError(Param("from_path") + f" {exc}") from None
    try:
        meta = read_parquet_metadata(p)
    except Exception as exc:  # noqa: BLE001 - any failure to read the footer is the user's bad input
        raise InputError(
            Param("from_path") + f" {p}: cannot read it as a parquet file ({' '.join(str(exc).split())[:160]})"
        ) from None
    _refuse_other_command(p, meta)
    hint = "a results file of " + Param("check_out") + " holds a few rows a check"
    try:  # it is read whole, as Python values: what its footer declares, decoded, bounds them before
        rows = read_parquet(p, InputError, Param("from_path") + f" {p}", python=True, hint=hint).to_pylist()
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to read the file is the user's bad input
        raise InputError(
            Param("from_path") + f" {p}: cannot read it as a parquet file ({' '.join(str(exc).split())[:160]})"
        ) from None
    if not rows or "check" not in rows[0] or "variant" not in rows[0]:
        raise InputError(
            Param("from_path") + f" {p}: not a results file of " + Param("check_out") + " (no check/variant columns)"
        )
    if not isinstance(meta, dict) or not all(isinstance(meta.get(k) or {}, dict) for k in ("model_info", "columns")):
        raise InputError(
            Param("from_path") + f" {p}: its 'mhaaudit' parquet metadata is malformed "
            "(not what " + Param("check_out") + " writes)"
        )
    held: HeldRows | None = None
    if "series" in meta:  # before the seeds: a series of several seeds is a series first
        meta, rows, held = checkpoint_results(p, meta, rows, checkpoint, trained)
    if "seed_plan" in meta or "aggregate" in rows[0]:  # its rows are per seed and over the seeds: no one verdict
        raise InputError(
            Param("from_path")
            + f" {p}: it holds the records of several seeds ("
            + Param("check_seeds")
            + "); the bound rests on one run's verdicts: give the file of a run with one "
            + Param("seed")
        )
    _check_row_keys(p, rows)
    if any(r.get("checkpoint") is not None for r in rows):  # its metadata lost, the rows still say so
        raise InputError(
            Param("from_path") + f" {p}: its rows name checkpoints of a series (" + Param("check_checkpoints") + "), "
            "but its metadata holds no series to read one checkpoint's verdicts from"
        )
    if not meta.get("columns"):  # read so, each column of the bound was "not applicable: the file has none" (exit 0)
        raise InputError(
            Param("from_path") + f" {p}: its 'mhaaudit' parquet metadata names no columns, which every results "
            "file of " + Param("check_out") + " does (its weights and layer are read from there)"
        )
    # last: the refusals above say more. A series' rows read are held to the audits it stores of what they were read for
    unlike = (
        stored_rows_unlike(meta, rows, AuditResult) if held is None else rows_unlike_stored(meta, held, AuditResult)
    )
    if unlike is not None:
        raise InputError(edited(Param("from_path") + f" {p}", unlike) + "; give the file as its run wrote it")
    return meta, rows


def _refuse_other_command(p: Path, meta: Any) -> None:
    """Refuse a results file that another command wrote, naming it (``meta``: its mhaaudit metadata).

    Raises:
        InputError: when ``meta`` says the file is the results of another command (capacity, kruskal, memorize,
            reproduce: their rows hold no column's verdicts to read, and were refused as no results of check at
            best), or gives a command that is no command's name.
    """
    command = meta.get("command") if isinstance(meta, dict) else None
    if command is None or command == "check":
        return
    if not isinstance(command, str):
        raise InputError(
            Param("from_path") + f" {p}: its 'mhaaudit' parquet metadata is malformed (its command is "
            f"{_shown(command)}, not a command's name)"
        )
    target = meta.get("target") if command == "reproduce" and isinstance(meta.get("target"), str) else None
    what = clipped(" ".join(("mhaaudit", command, *([target] if target else []))), 80)
    raise InputError(
        Param("from_path") + f" {p}: it holds the results of {what!r} (its parquet metadata says so), not a check "
        "run's verdicts: give a results file of " + Param("check_out")
    )


#: The rows a results file holds besides one a registered check and column: its columns' Kruskal-rank curves
#: (``--sweep``) and, in a series of checkpoints, each column's estimate
_OTHER_CHECKS = ("sweep", "sweep_estimate")


def _check_row_keys(p: Path, rows: list[dict]) -> None:
    """Refuse rows that no run of ``check`` writes, by what says which row a row is.

    A row is known by its checkpoint (in a series), its column (``variant``), its check and, for a sweep row, its
    k: ``check`` writes one row a key. A row without a column or check was read as no verdict at all, and a key
    held twice as its last row: either way the bound went on from what the file does not say (exit 0).

    Raises:
        InputError: naming ``p`` and the row (counted from 1), when a row's variant or check is null or no text, its
            check is none ``check`` writes, its checkpoint is no text, or a sweep row's k is no whole number of at
            least 1; and naming both rows and their key, when two rows have the same key.
    """
    checks = (*REGISTRY, *_OTHER_CHECKS)
    seen: dict[tuple, int] = {}
    for i, r in enumerate(rows, start=1):
        for field in ("variant", "check"):
            if not isinstance(r.get(field), str) or not r[field]:
                raise InputError(
                    Param("from_path") + f" {p}: row {i}'s {field} is {_shown(r.get(field))}, not a name; every row "
                    "of a results file of " + Param("check_out") + " names its column (variant) and its check"
                )
        if r["check"] not in checks:
            raise InputError(
                Param("from_path") + f" {p}: row {i}'s check is {_shown(r['check'])}, not one that a results file "
                "of " + Param("check_out") + f" holds ({', '.join(checks)})"
            )
        checkpoint, k = r.get("checkpoint"), r.get("k")
        if checkpoint is not None and not isinstance(checkpoint, str):
            raise InputError(Param("from_path") + f" {p}: row {i}'s checkpoint is {_shown(checkpoint)}, not a name")
        sweep, column = r["check"] == "sweep", clipped(repr(r["variant"]), 60)
        if sweep and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise InputError(
                Param("from_path") + f" {p}: row {i}, a sweep row of column {column}, has k {_shown(k)}, "
                "not a whole number of at least 1"
            )
        key = (checkpoint, r["variant"], r["check"], k if sweep else None)
        if key in seen:  # one row a key: which of the two holds cannot be said
            where = f" at k = {k}" if sweep else ""
            where += f" of checkpoint {clipped(repr(checkpoint), 80)}" if checkpoint else ""
            raise InputError(
                Param("from_path") + f" {p}: rows {seen[key]} and {i} are both the {r['check']} row of column "
                f"{column}{where}; a results file of " + Param("check_out") + " holds one"
            )
        seen[key] = i


def _shown(value: Any) -> str:
    """A row's value as a message shows it: ``null`` for none, else its repr (clipped) and its type."""
    return "null" if value is None else f"{clipped(repr(value), 60)} ({type(value).__name__})"


@contextlib.contextmanager
def _malformed(p: Path):
    """Word a value of the wrong type or form in a results file as the file's fault.

    Raises:
        InputError: for a TypeError, ValueError, AttributeError, KeyError or OverflowError inside, naming ``p``;
            an InputError inside is re-raised as it is.
    """
    try:
        yield
    except InputError:  # a refusal of its own inside (another limit, other data): said as such
        raise
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        raise InputError(
            Param("from_path") + f" {p}: its 'mhaaudit' parquet metadata or rows are malformed "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:120]})"
        ) from None


def assumptions_from_file(
    path: str | Path,
    *,
    init: str,
    layer: int,
    n: int | None = None,
    d: int | None = None,
    results: tuple[dict, list[dict]] | None = None,
    model: Any = None,
    weights_seed: int | None = None,
) -> tuple[Assumptions | None, str, list[str]]:
    """The A1/A2 verdicts and Kruskal estimate of the column of ``path`` with ``init`` weights at ``layer``.

    ``path`` is a parquet file written by ``mhaaudit check --out`` (``results``: its contents, already read by
    :func:`read_check_results`). ``model``: this run's model facts (a ``ModelInfo``); ``weights_seed``: its random
    weights' seed. A column audited on a model of another shape, or on random weights of another seed, is refused;
    one on weights of another source is noted (:func:`_check_same_weights`). Returns ``(assumptions or None, the
    column's name or the reason none fits, notes)``.
    """
    p = Path(path)
    results = results if results is not None else read_check_results(p)
    with _malformed(p):
        return _assumptions_from_file(p, results, init=init, layer=layer, n=n, d=d, model=model, seed=weights_seed)


def _assumptions_from_file(
    p: Path,
    results: tuple[dict, list[dict]],
    *,
    init: str,
    layer: int,
    n: int | None,
    d: int | None,
    model: Any = None,
    seed: int | None = None,
) -> tuple[Assumptions | None, str, list[str]]:
    meta, rows = results
    notes: list[str] = []
    info = meta.get("model_info") or {}
    for key in ("n", "d"):  # "17" is no n: compared with the model's 17, it read "n = 17, but the model has n = 17"
        if info.get(key) is not None:
            _whole(info[key], f"the model's {key}")
    if (n is not None and info.get("n") not in (None, n)) or (d is not None and info.get("d") not in (None, d)):
        raise InputError(
            Param("from_path") + f" {p}: audited with n = {info.get('n')}, d = {info.get('d')}, but the model here has "
            f"n = {n}, d = {d}"
        )
    cols = meta.get("columns") or {}
    chosen, why = _column(p, cols, init=init, layer=layer)
    if chosen is None:
        return None, why, notes
    differs = _check_same_weights(p, meta, chosen, cols.get(chosen) or {}, init, model, seed)
    if differs:
        notes.append(differs)
    mine = [r for r in rows if r.get("variant") == chosen]
    for check in ("assumption_1", "assumption_2"):  # check writes a row of each check for each column it audits
        if not any(r["check"] == check for r in mine):
            raise ValueError(f"column {chosen!r} has no {check} row, which every column that check audits has")
    out = _verdicts(mine, source=f"read from {p} (column {chosen})")
    width = d if d is not None else info.get("d")
    width = width if isinstance(width, int) and not isinstance(width, bool) else None
    _read_estimate(out, p, (cols.get(chosen) or {}).get("sweep"), mine, meta.get("threshold"), width)
    return out, chosen, notes


# What a results file's model_info says of the model's shape, compared with this run's by capacity --from.
_ARCHITECTURE = ("backend", "family", "num_layers", "num_heads", "head_dim")


def _check_same_weights(
    p: Path, meta: dict, chosen: str, col: dict, init: str, model: Any, seed: int | None
) -> str | None:
    """Refuse the verdicts of column ``chosen`` (its metadata ``col``) when they were audited on another model than
    this run's (``model``: its facts, a ``ModelInfo``, read for :data:`_ARCHITECTURE` and ``weights_source``):
    another shape, or, for random weights, another weights seed (the file's, against ``seed``). Weights of the
    same shape from another source (a folder moved, or another checkpoint of one model) are not refused: their
    difference is returned, for a note.

    Raises:
        InputError: when the shape or the random weights' seed differs.
        ValueError: when the file says either in a malformed way.
    """
    way = (
        "run 'mhaaudit check' on the same model and weights, or give capacity the model and "
        + Param("weights_seed")
        + " the file was made with"
    )
    info = meta.get("model_info") or {}
    for key in _ARCHITECTURE:
        theirs, ours = info.get(key), getattr(model, key, None)
        if theirs is not None and ours is not None and theirs != ours:
            raise InputError(
                Param("from_path") + f" {p}: audited on a model with {key} = {clipped(repr(theirs), 60)}, "
                f"but the model here has {key} = {ours!r}; " + way
            )
    if init == "random" and seed is not None:
        file_seed = meta.get("weights_seed", meta.get("seed"))
        if file_seed is not None and (isinstance(file_seed, bool) or not isinstance(file_seed, int)):
            raise ValueError(f"its weights seed is {clipped(repr(file_seed), 60)}, not a whole number")
        if file_seed is not None and file_seed != seed:
            raise InputError(
                Param("from_path")
                + f" {p}: its random weights were drawn with weights seed {file_seed}, this run's with {seed}; "
                + way
            )
    source, theirs = getattr(model, "weights_source", None), col.get("weights_source")
    if source is None or theirs is None or _where(theirs) == _where(source):
        return None
    return (
        f"the verdicts of column {clipped(repr(chosen), 60)} read from {p} were audited on "
        f"{clipped(str(theirs), 160)}; this run's {init} weights are {clipped(str(source), 160)}, of the same shape"
    )


def _where(source: Any) -> Any:
    """Where weights came from, read offline from the hub's local cache or not: the same repository's weights."""
    return source.removesuffix(" (local cache)") if isinstance(source, str) else source


def _whole(value: Any, what: str, top: int | None = None) -> int:
    """``value`` when it is a whole number (a JSON integer, not a boolean) of at least 0 and at most ``top``.

    Raises:
        ValueError: naming ``what``, when it is not (a float such as 1.7 was cut to 1, a string read as a number).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (top is not None and value > top):
        bound = f" from 0 to {top}" if top is not None else " of at least 0"
        raise ValueError(f"{what} is {clipped(repr(value), 60)}, not a whole number{bound}")
    return value


#: The statuses ``check`` writes of a column (``audit_result.Column.status``)
_STATUSES = ("ok", "unavailable")


def _column(p: Path, cols: dict, *, init: str, layer: int) -> tuple[str | None, str]:
    """(the column of ``init`` weights at ``layer``, "") or (None, why there is none to read).

    Raises:
        ValueError: when a column of ``init`` weights gives a layer that is no whole number, or the column at
            ``layer`` a status that ``check`` does not write.
    """
    for variant, c in cols.items():
        if c.get("weights") != init or c.get("layer") is None:
            continue
        if _whole(c["layer"], f"the layer of column {variant!r}") != layer:  # 1.7 is no layer, not layer 1
            continue
        if variant == "random-attention":
            continue
        status = c.get("status", "ok")
        if status not in _STATUSES:  # read as unavailable, a column with no reason given
            raise ValueError(f"column {variant!r} has status {clipped(repr(status), 40)}, not ok or unavailable")
        if status != "ok":
            why = c.get("reason") if isinstance(c.get("reason"), str) else ""
            return None, f"column {variant!r} of {p} is unavailable: {why.strip() or 'the file gives no reason'}"
        return variant, ""
    have = ", ".join(f"{v} ({c.get('weights')} weights, layer {c.get('layer')})" for v, c in cols.items()) or "none"
    return None, (
        f"{p} has no column with {init} weights at layer {layer} (the input of block {layer + 1}); it has: {have}"
    )


#: The words a results file's A1 and A2 rows may hold: their ``verdict`` and their ``exact_status`` (None in a
#: file written before exact statuses were kept)
_VERDICTS = ("holds", "fails", "unavailable")
_EXACT = ("holds", "fails", "undecided", None)


def _verdicts(rows: list[dict], *, source: str) -> Assumptions:
    """The A1/A2 verdicts of one column's rows.

    Raises:
        ValueError: when an A1 or A2 row's verdict or exact status is not a word ``check`` writes (a file
            edited by hand, or another program's): read as no verdict, it would go unnoticed; when its satisfied
            fraction is no number in [0, 1]; or when the row contradicts itself
            (:func:`mhaaudit.kruskal.stored.record_contradiction`).
    """
    out = Assumptions(source=source)
    for r in rows:
        if r.get("check") in ("assumption_1", "assumption_2"):
            for field, words in (("verdict", _VERDICTS), ("exact_status", _EXACT)):
                if r.get(field) not in words:
                    raise ValueError(
                        f"the {r['check']} row's {field} is {r.get(field)!r}, not one of {', '.join(map(str, words))}"
                    )
            fraction = r.get("fraction")
            if fraction is not None and not (
                isinstance(fraction, (int, float)) and not isinstance(fraction, bool) and 0 <= fraction <= 1
            ):  # (NaN fails the bounds) a satisfied fraction no run writes, in a file of any version
                raise ValueError(f"the {r['check']} row's fraction is {clipped(repr(fraction), 40)}, not one in [0, 1]")
            # a row with an exact status and its basis (every file written since bases were kept) is held to what
            # a run writes; an older row, without them, is read as before
            if r.get("exact_basis") is not None and (why := record_contradiction(r)) is not None:
                raise ValueError(f"the {r['check']} row says what no run writes: {why}")
        if r.get("check") == "assumption_1":
            out.a1 = a1_status(r.get("verdict"), r.get("exact_status"))
            out.a1_reason = _a1_reason(r.get("verdict"), r.get("exact_status"), r.get("reason") or "")
            out.a1_proven = is_decided(r.get("exact_status")) if "exact_status" in r else None
            out.a1_fraction = r.get("fraction") if r.get("sampled") else None
        elif r.get("check") == "assumption_2":
            out.a2 = r.get("verdict") if r.get("verdict") in ("holds", "fails") else None
            out.a2_reason = r.get("reason") or ""
    return out


def _read_estimate(out: Assumptions, p: Path, sweep: Any, rows: list[dict], threshold: Any, d: int | None) -> None:
    """The column's Kruskal-rank estimate into ``out``: its sweep's own, else the largest k of its
    sweep rows whose satisfied fraction reaches the file's threshold; none where neither says.

    Raises:
        ValueError: when the estimate or a sweep row's k is no whole number from 0 to ``d`` (the vectors' width, when
            known): the Kruskal rank of vectors in R^d is at most d, and no run writes another.
    """
    estimate = sweep.get("estimate") if isinstance(sweep, dict) else None
    if estimate is not None:
        _whole(estimate, "the column's Kruskal-rank estimate", d)
    if estimate:
        out.kruskal_estimate = estimate
        out.estimate_note = f"the Kruskal-rank estimate of {p} ({sweep.get('estimate_means', 'an estimate')})"
        return
    sw = [r for r in rows if r.get("check") == "sweep" and r.get("k") is not None]
    if not sw or threshold is None:
        return
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
        raise ValueError(f"its threshold is {clipped(repr(threshold), 60)}, not a fraction in (0, 1]")
    ok = [_whole(r["k"], "a sweep row's k", d) for r in sw if (r.get("fraction") or 0.0) >= float(threshold)]
    if ok:
        out.kruskal_estimate = max(ok)
        out.estimate_note = f"largest k with satisfied fraction >= {threshold} in the sweep rows of {p} (an estimate)"


def check_same_examples(
    path: str | Path,
    results: tuple[dict, list[dict]],
    *,
    limit: int | None = None,
    T: int | None = None,
    data: str | None = None,
) -> None:
    """Refuse verdicts audited on other examples than this run's: another ``--limit`` (known before
    the data pass), another number of examples T or another data source (known after it)."""
    with _malformed(Path(path)):
        _check_same_examples(path, results, limit=limit, T=T, data=data)


def _check_same_examples(
    path: str | Path, results: tuple[dict, list[dict]], *, limit: int | None, T: int | None, data: str | None
) -> None:
    meta, rows = results
    p = Path(path)
    way = (
        "run 'mhaaudit check' with the same " + Param("data") + " and " + Param("limit") + ", "
        "or give capacity the ones the file was made with"
    )
    file_limit = meta.get("limit")
    if file_limit is not None:  # 40.5 is no --limit (int() read it as 40)
        _whole(file_limit, "its limit")
    if limit is not None and file_limit is not None and file_limit != int(limit):
        raise InputError(
            Param("from_path")
            + f" {p}: its audit read "
            + Param("limit")
            + f" {file_limit} examples, this run "
            + Param("limit")
            + f" {limit}; "
            + way
        )
    file_T = next((r.get("T") for r in rows if r.get("check") == "assumption_2" and r.get("T") is not None), None)
    if T is not None and file_T is not None and int(file_T) != int(T):
        raise InputError(Param("from_path") + f" {p}: its audit used T = {file_T} examples, this run T = {T}; " + way)
    file_data = meta.get("data")
    if data and file_data and file_data != data:
        raise InputError(
            Param("from_path") + f" {p}: its audit used other data ({file_data}) than this run ({data}); " + way
        )
