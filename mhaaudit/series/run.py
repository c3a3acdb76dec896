"""audit_series: the checkpoints of a training run audited in one run, each as a single audit of it.

For each checkpoint the series gives the records ``check MODEL --weights CHECKPOINT`` (or
``--revision REV``) gives, at the cost of reading the checkpoint:

- the series is checked before any work (:func:`~.spec.resolve_series`);
- the reference columns (random weights: ``embedding``, ``random-attention``, ``random``; the
  random depths of a text model) are audited once, as a single run audits them;
- the trained model is built once, as deep as the deepest probe point, from the first checkpoint
  audited; each later checkpoint's tensors that this depth uses are read into it (only those: as a
  single run reads them, tensor by tensor from safetensors; a checkpoint in another form is loaded
  whole and copied in), so memory holds one checkpoint's model;
- the data is read, prepared and cleared of exact duplicates once, by the reference's pass, and
  every checkpoint is fed the same model inputs (:func:`mhaaudit.pipeline.kept_inputs`), when the
  trained model's inputs are known to be the reference's (:func:`.trained.same_inputs`: the same
  preprocessing files, byte for byte, modality, n and query token); otherwise, or without a
  reference pass, by the first checkpoint's pass (the series' notes say why). Inputs beyond a
  quarter of the memory available are not kept, which one line on stderr says;
- a checkpoint whose tensors read are byte-identical to the one before it (:mod:`.identity`; for a
  checkpoint loaded whole, its weights files where they are on this machine) is reported and not
  audited again.

``seeds`` runs the whole series once per seed (the reference too). Under ``torchrun`` the
reference is audited by every rank together, as one audit is; then, with at least as many
checkpoints as ranks, the checkpoints are spread over the ranks in rounds (round j: rank r audits
checkpoint j N + r, whole, as one process does: each rank prepares the data for its own share
again) and gathered back in order, so rank 0 holds the
records one process would; with fewer, every rank takes part in each checkpoint's audit. With
``out``, the results file is rewritten after every round (only that file: the run's other outputs
wait for its end), and a run that finds the file of an interrupted run of the same settings takes
the reference and the checkpoints it holds (a checkpoint whose tensors changed since is audited
again) and audits the rest.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from .. import distributed, pipeline, validate
from .._version import __version__
from ..as_stored import edited
from ..auditing import AuditResult, Columns, audit
from ..distributed import shared
from ..documents import RESULT_KEY
from ..errors import InputError, Message, Param, clipped, one_line, with_names
from ..facts import meta_value
from ..io import check_results_out, read_parquet_metadata, write_parquet
from ..models.file_reads import read_once
from ..progress import log
from ..provenance import stamp
from ..request import DataRequest, ModelRequest, build_requests
from ..seeds import SeedPlan, SeedRun, plan_for
from ..settings import Settings
from ..tables import table_rows
from .identity import Digest
from .plan import _Plan, _plan
from .result import CheckpointRun, SeriesResult, SeriesRun, StoredContradiction
from .spec import CheckpointRef, Series
from .stored_rows import rows_unlike_result
from .trained import _Trained, checkpoint_columns, random_source
from .where import MODEL_WEIGHTS, local_state

__all__ = ["audit_series"]


@shared
def audit_series(
    model: str | ModelRequest,
    *,
    checkpoints: str | Sequence[str] | Series | None = None,
    variants: Sequence[str] | None = None,
    layer: int | None = None,
    layers: Sequence[int] | str | None = None,
    data: str | DataRequest | None = None,
    settings: Settings | None = None,
    sweep: bool = False,
    on_note: Callable[[str], None] | None = None,
    seeds: str | Sequence[int] | None = None,
    vary: str = "both",
    weights: str | None = None,
    out: str | os.PathLike | None = None,
    names: Callable[[str], str] | None = None,
    query_index: int | None = None,
    backend: str | None = None,
    context_length: int | None = None,
    revision: str | None = None,
    trust_remote_code: bool | None = None,
    split: str | None = None,
    limit: int | None = None,
    batch_size: int | str | None = None,
    keep_duplicates: bool | None = None,
    text_column: str | None = None,
    image_column: str | None = None,
    convert_rgb: bool | None = None,
    samples: int | None = None,
    threshold: float | None = None,
    seed: int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    device: str | None = None,
    stop_when_decided: bool | None = None,
    progress: bool | None = None,
    weights_seed: int | None = None,
    data_seed: int | None = None,
) -> SeriesResult:
    """Audit a series of checkpoints of ``model``, each as :func:`mhaaudit.audit` audits trained weights.

    The trained columns are audited at each checkpoint; the other columns (the reference) and the data
    are prepared once. Records carry the checkpoint's name (``checkpoint``), its step (``step``) and
    its place (``order``). A checkpoint whose tensors equal the one before it is not audited again
    (``identical_to``). See :mod:`mhaaudit.request` for a keyword given beside a request object.

    Args:
        model: the model the checkpoints are of, or a :class:`~mhaaudit.request.ModelRequest`.
        checkpoints: a comma list or sequence of folders, weights files or globs, or a Series resolve_series gave.
        variants: the columns, as :func:`mhaaudit.audit` takes them (a sequence or a comma list).
        layer: the depth of the image ``random`` and ``trained`` columns (default 1).
        layers: audit random and trained weights at each of these depths instead (integers, or ``"0,1"``, ``"0-6"``).
        data: the data source, or a :class:`~mhaaudit.request.DataRequest` (None: the built-in data).
        settings: the :class:`~mhaaudit.settings.Settings` (None: built from the keywords).
        sweep: also run the Kruskal-rank sweep of each column's queries.
        on_note: called with each note as it comes.
        seeds: run the series once per seed (``"0-4"``, ``"0,3,7"`` or a list of ints).
        vary: what ``seeds`` vary: ``"both"``, ``"weights"`` or ``"data"``.
        weights: refused, as ``check --weights`` is beside a series: each checkpoint gives the trained weights.
        out: a parquet file rewritten as the series runs (an interrupted run in it is resumed), checked as ``--out``.
        names: how the messages written to ``out`` name a parameter (None: the library's names).
        query_index: the query token's position (None: the model's own).
        backend: ``"hf"`` or ``"timm"`` (None: detected).
        context_length: the tokens per example n of a text model.
        revision: instead of ``checkpoints``, a comma list of hub revisions (``"step1000,step8000"``).
        trust_remote_code: let a hub repository's own model code run.
        split: the data split to read.
        limit: how many examples to read (default 2000).
        batch_size: examples per forward pass, or ``"auto"`` (see :mod:`mhaaudit.batching`).
        keep_duplicates: keep exact duplicate inputs (default: dropped).
        text_column: the column or field holding the text (None: found).
        image_column: the column holding the images (None: found).
        convert_rgb: convert images of other modes to RGB instead of skipping them.
        samples: Monte-Carlo draws per test (default 5000).
        threshold: the satisfied fraction at which a test holds (default 0.99).
        seed: the run's seed (default 0).
        rtol: the rank rule's relative tolerance.
        atol: the rank rule's absolute tolerance.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (default auto).
        stop_when_decided: stop a test once its verdict is settled (default True).
        progress: show progress bars on stderr.
        weights_seed: the seed of the random weights, set apart from ``seed``.
        data_seed: the seed of the data, set apart from ``seed``.

    Returns:
        A :class:`mhaaudit.series.SeriesResult`.

    Raises:
        InputError: for a bad argument (as :func:`mhaaudit.audit`), ``weights`` beside a series, an ``out`` that is
            not a path ending in ``.parquet``, no trained
            column, or a bad series: neither ``checkpoints`` nor a list of revisions, a glob that matches nothing
            or whose step numbers are ambiguous, a checkpoint missing, unreadable, named twice or of another
            family, width or architecture than the first, a revision that does not exist, a Series resolve_series did
            not give for this model; or an ``out`` file that holds other results, or rows unlike its stored result's.
        ModelError: when the model cannot be built or probed, a checkpoint cannot be read or does not fit, or a
            checkpoint folder holds a link or an index leading out of it.
        DataError: when the data cannot be read or gives fewer than n usable examples.
        OfflineError: when what the run needs (the model's configuration, a revision, a hub data set) must be
            downloaded and the network cannot be reached.
        OutputError: when ``out`` cannot be written, is one of the run's inputs or lies inside an input folder
            (the model's, the data's, a checkpoint's), as the command line refuses ``--out``.
    """
    keywords = dict(
        weights=weights,
        query_index=query_index,
        backend=backend,
        context_length=context_length,
        revision=revision,
        trust_remote_code=trust_remote_code,
        split=split,
        limit=limit,
        batch_size=batch_size,
        keep_duplicates=keep_duplicates,
        text_column=text_column,
        image_column=image_column,
        convert_rgb=convert_rgb,
        samples=samples,
        threshold=threshold,
        seed=seed,
        rtol=rtol,
        atol=atol,
        device=device,
        stop_when_decided=stop_when_decided,
        progress=progress,
        weights_seed=weights_seed,
        data_seed=data_seed,
    )
    with read_once():  # a checkpoint's header: read for its checks before any work, then for its digest and read
        req = build_requests(model, data, settings, keywords)
        columns = Columns(variants, layer, layers, validate.flag(Param("sweep"), sweep))
        plan = _plan(req.model, req.data, checkpoints, columns, out)
        if out is not None:  # the command line's checks of --out (where it is written: rank 0 alone)
            inputs = [req.model.model, req.data.data, *plan.series.paths]
            out = check_results_out(out, Message(Param("out")), inputs, writer=distributed.lockstep().rank == 0)
        seed_plan = plan_for(req.settings, seeds, vary)
        store = _Store(out, _key(plan, req.settings, seed_plan, local=out is not None), seed_plan, names)
        t0 = time.perf_counter()
        on_note = _each_once(on_note)  # every audit of the series gives the model's and the data's notes again
        for seed_run in [None] if seed_plan is None else seed_plan.runs():
            _series_run(plan, req.settings, seed_run, store, on_note)
        result = _result(plan, seed_plan, store.finished, store.key, complete=True, extra=store.notes)
        spent = [c.timings for r in store.finished for c in r.checkpoints]
        result.timings.update({k: round(v, 3) for k, v in store.timings.items()})
        for phase in ("read", "audit"):
            result.timings[f"checkpoints {phase}"] = round(sum(t.get(phase, 0.0) for t in spent), 3)
        result.timings["total"] = round(time.perf_counter() - t0, 3)
        result.meta_["timings_s"] = dict(result.timings)
        if store.path is not None and distributed.lockstep().rank == 0:
            store.save(result)
        return result


# --------------------------------------------------------------------------- what the results depend on


def _key(plan: _Plan, settings: Settings, seeds: SeedPlan | None, *, local: bool) -> dict:
    """What a run's results depend on, but the checkpoints: the model, data, settings, columns and seeds, and with
    ``local`` (a results file to resume: ``--out``), of the model and data that are local files, their real place
    and their files' names, sizes and modification times (``where.local_state``: a model folder's own files but its
    weights, a data folder's at any depth): a results file of other settings is not resumed. Without ``local`` no
    folder is walked (``local`` is None): nothing would be resumed against it."""
    what = {
        "model": dataclasses.asdict(plan.base),
        "source": plan.series.source,
        "data": dataclasses.asdict(plan.data),
        "local": {
            "model": local_state(plan.base.model, below=False, skip=MODEL_WEIGHTS),
            "data": local_state(plan.data.data, below=True),
        }
        if local
        else None,
        "settings": {k: v for k, v in settings.as_dict().items()},
        "columns": {"order": list(plan.order), "layer": plan.columns.layer, "sweep": plan.columns.sweep},
        "seeds": None if seeds is None else seeds.as_dict(),
    }
    return json.loads(json.dumps(what, default=str))


def _each_once(on_note: Callable[[str], None] | None) -> Callable[[str], None] | None:
    """``on_note``, called once for each distinct note (the results keep each audit's notes as it gave them)."""
    if on_note is None:
        return None
    said: set[str] = set()

    def note(line: str) -> None:
        if line not in said:
            said.add(line)
            on_note(line)

    return note


# --------------------------------------------------------------------------- one run of the series


def _series_run(plan: _Plan, settings: Settings, seed: SeedRun | None, store: _Store, on_note) -> SeriesRun:
    """The series under one run's seeds: the reference audited once, then the checkpoints in rounds
    (one checkpoint a round in one process; one a rank when they are spread over the ranks)."""
    with pipeline.kept_inputs() as kept:  # the reference's pass keeps its inputs (else the first checkpoint's)
        return _series_passes(plan, settings, seed, store, on_note, kept)


def _series_passes(
    plan: _Plan, settings: Settings, seed: SeedRun | None, store: _Store, on_note, kept: pipeline.KeptInputs
) -> SeriesRun:
    """:func:`_series_run` within ``kept``: the inputs the run's first pass prepares."""
    run_settings = settings if seed is None else settings.with_(**seed.kwargs())
    data = plan.data
    t0 = time.perf_counter()
    reference = store.reference()
    if plan.reference and reference is None:
        log(f"Reference columns ({', '.join(plan.reference)}): audited once for the series", run_settings.progress)
        reference = _without_features(
            audit(
                plan.reference_request(),
                data=data,
                settings=run_settings,
                on_note=on_note,
                **plan.audit_keywords(plan.reference),
            )
        )
    store.timings["reference"] = store.timings.get("reference", 0.0) + round(time.perf_counter() - t0, 3)
    kept.release()  # the reference's model is let go before the trained model is built
    if reference is not None and data.batch_size == "auto":  # the trained passes use the batch the reference chose
        data = replace(data, batch_size=reference.settings.batch_size)
    run = SeriesRun(seed, reference)
    refs = list(plan.series.checkpoints)
    shard = distributed.lockstep()
    spread = 1 < shard.world_size <= len(refs)
    width = shard.world_size if spread else 1
    alone = distributed.alone if spread else contextlib.nullcontext
    previous: tuple[CheckpointRef, Digest | None] | None = None
    with _Trained(plan, run_settings, kept) as trained:
        for start in range(0, len(refs), width):
            chunk = refs[start : start + width]
            mine = (chunk[shard.rank] if shard.rank < len(chunk) else None) if spread else chunk[0]
            t0 = time.perf_counter()
            with alone():
                digest = trained.digest(mine) if mine is not None else None
            store.timings["digests"] = store.timings.get("digests", 0.0) + round(time.perf_counter() - t0, 3)
            if trained.why_again is not None:
                store.note(f"the data was prepared again for the trained weights: {trained.why_again}")
            digests = shard.all_gather(digest)[: len(chunk)] if spread else [digest]
            entry = None
            if mine is not None:
                log(f"Checkpoint {mine.order + 1} of {len(refs)}: {mine.label}", run_settings.progress)
                at = chunk.index(mine)
                before = previous if at == 0 else (chunk[at - 1], digests[at - 1])
                with alone():
                    entry = _checkpoint_run(trained, mine, (digest, before), data, run_settings, store, on_note)
            entries = [_lean(entry)]  # the checks are done: the features are let go (memory: one checkpoint's)
            if spread:
                shard.wait_for_all("series")  # the ranks' checkpoints take unequal times: no gather may time out
                entries = shard.all_gather(entries[0])
            run.checkpoints += [e for e in entries if e is not None]
            previous = (chunk[-1], digests[-1])
            _resolve_same(run)
            if store.path is not None and shard.rank == 0:
                store.save_partial(plan, run)
    store.finished.append(run)
    return run


def _checkpoint_run(
    trained: _Trained,
    ref: CheckpointRef,
    digests: tuple[Digest | None, tuple[CheckpointRef, Digest | None] | None],
    data: DataRequest,
    settings: Settings,
    store: _Store,
    on_note,
) -> CheckpointRun:
    """What becomes of one checkpoint (``digests``: its own, and the checkpoint before it with its
    digest): identical to the one before, read back from the results file, or audited."""
    digest, before = digests
    if before is not None and digest is not None and before[1] is not None and digest.sha256 == before[1].sha256:
        return CheckpointRun(ref, "identical", digest=digest, identical_to=before[0].name, read=trained.read_of(ref))
    stored = store.checkpoint(ref, digest)
    if stored is not None:
        return stored
    t0 = time.perf_counter()
    trained.read(ref)
    t1 = time.perf_counter()
    result = trained.audit(ref, data, settings, on_note)
    timings = {"read": round(t1 - t0, 3), "audit": round(time.perf_counter() - t1, 3)}
    return CheckpointRun(ref, "audited", result, digest, timings=timings)


def _resolve_same(run: SeriesRun) -> None:
    """Each identical checkpoint carries the records of the audited checkpoint it repeats (a chain of
    identical checkpoints leads back to one)."""
    audited: str | None = None
    for c in run.checkpoints:
        if c.status == "identical":
            c.same_as = audited
        else:
            audited = c.checkpoint.name


def _lean(entry: CheckpointRun | None) -> CheckpointRun | None:
    """``entry`` without the feature tensors its columns hold (no record, report or figure reads them)."""
    if entry is None or entry.audit is None:
        return entry
    return replace(entry, audit=_without_features(entry.audit))


def _without_features(audit_result: AuditResult) -> AuditResult:
    """A copy of ``audit_result`` whose columns hold no feature tensors."""
    lean = copy.copy(audit_result)
    lean.columns = [replace(c, features=None) for c in audit_result.columns]
    return lean


# --------------------------------------------------------------------------- the result


def _result(
    plan: _Plan,
    seeds: SeedPlan | None,
    runs: list[SeriesRun],
    key: dict,
    complete: bool,
    extra: Sequence[str] = (),
) -> SeriesResult:
    """The series' result: its runs, what it read, and the meta of its files (the first audit's, less
    its columns, with the series); ``extra`` are the series' own notes, before its audits'."""
    first = next((a for r in runs for a in [r.reference, *(c.audit for c in r.checkpoints)] if a is not None), None)
    notes = list(dict.fromkeys([*extra, *_notes(runs)]))
    base = first.meta() if first is not None else stamp(command="check", model=plan.base.model)
    meta = {k: v for k, v in base.items() if k not in (RESULT_KEY, "columns", "timings_s")}
    checkpoints = [
        {
            "name": c.checkpoint.name,
            "order": c.checkpoint.order,
            "step": c.checkpoint.step,
            "path": c.checkpoint.path,
            "revision": c.checkpoint.revision,
            "status": c.status,
            "identical_to": c.identical_to,
            "same_as": c.same_as,
            "resumed": c.resumed,
            "digest": None if c.digest is None else dataclasses.asdict(c.digest),
            "weights_read": c.audit.info.as_dict().get("trained_weights_read") if c.audit else meta_value(c.read),
            "timings_s": c.timings,
            "columns": checkpoint_columns(runs[0], c, plan),  # capacity --from reads a checkpoint by these
            "random_weights_source": random_source(c.checkpoint, plan),  # the reference columns' source for it
        }
        for c in (runs[0].checkpoints if runs else [])
    ]
    meta |= {
        "model": plan.base.model,
        "notes": notes,
        "series": {
            "source": plan.series.source,
            "checkpoints": checkpoints,
            "complete": complete,
            "key": key,
            "reference_columns": runs[0].columns_meta(None) if runs else None,
        },
    }
    if seeds is not None:
        meta |= {"seed": None, "seeds": list(seeds.seeds), "seed_plan": seeds.as_dict()}
    return SeriesResult(
        model=plan.base.model,
        series=plan.series,
        runs=list(runs),
        variants=plan.order,
        plan=seeds,
        complete=complete,
        notes=notes,
        meta_=json.loads(json.dumps(meta, default=str)),  # as a results file holds it
    )


def _notes(runs: list[SeriesRun]) -> list[str]:
    """The notes of the series: its audits', each once."""
    notes: list[str] = []
    for r in runs:
        for a in [r.reference, *(c.audit for c in r.checkpoints)]:
            if a is not None:
                notes += [str(n) for n in a.notes if str(n) not in notes]
    return notes


# --------------------------------------------------------------------------- the results file


class _Store:
    """The ``out`` results file of a series: read back when it holds an interrupted run of the same
    settings (``key``), and rewritten after every round (at once: it keeps what is done if the run
    stops). ``finished`` are the runs (one a seed) done in this call."""

    def __init__(
        self, out: str | os.PathLike | None, key: dict, seeds: SeedPlan | None, names: Callable[[str], str] | None
    ) -> None:
        self.path = None if out is None else Path(out)
        self.names = names
        self.key, self.seeds = key, seeds
        self.finished: list[SeriesRun] = []
        self.timings: dict[str, float] = {}  # the series' phases over every run, in seconds
        self.notes: list[str] = []  # the series' own notes (how its data was prepared)
        self.stored: SeriesResult | None = None
        shard = distributed.lockstep()
        if self.path is not None and shard.rank == 0 and self.path.exists():
            self.stored = self._read(self.path)
        self.stored = shard.broadcast(self.stored)  # under torchrun rank 0 reads the file: every rank resumes alike

    def note(self, text: str) -> None:
        """Keep one note of the series (once)."""
        if text not in self.notes:
            self.notes.append(text)

    def _read(self, path: Path) -> SeriesResult:
        """The series an existing results file holds.

        Raises:
            InputError: when it is not the results file of a series, holds a run of other settings, a stored test
                record that contradicts itself (:meth:`SeriesResult.contradiction`), or rows other than those its
                stored result gives (:func:`.stored_rows.rows_unlike_result`: a row edited by hand).
        """
        try:
            stored = SeriesResult.from_parquet(path)
        except StoredContradiction as exc:  # a row edited by hand: never resumed as a result
            raise InputError(
                edited(Param("out") + f" {path}", exc.what) + "; move it away or pick another " + Param("out")
            ) from exc
        except InputError as exc:
            raise InputError(
                Param("out")
                + f" {path} exists and is not the results file of a series ({one_line(exc, 120)}); move it "
                "away or pick another " + Param("out")
            ) from exc
        if stored.meta_.get("series", {}).get("key") != self.key:
            raise InputError(
                Param("out")
                + f" {path} holds a series run with other settings (model, data, columns, seeds or draws); "
                "move it away or pick another " + Param("out")
            )
        unlike = rows_unlike_result(path, stored, self.names)  # a resume writes the rows again from the metadata
        if unlike is not None:
            written_by = read_parquet_metadata(path).get("version")  # (read whole by from_parquet above)
            if written_by != __version__:  # another release may write other rows
                raise InputError(
                    Param("out") + f" {path} was written by mhaaudit {clipped(str(written_by), 40)} and holds "
                    f"{unlike}, which this release ({__version__}) cannot resume; move it away or pick another "
                    + Param("out")
                )
            raise InputError(
                edited(Param("out") + f" {path}", unlike) + "; move it away or pick another " + Param("out")
            )
        return stored

    def _stored_run(self) -> SeriesRun | None:
        index = len(self.finished)
        if self.stored is None or index >= len(self.stored.runs):
            return None
        return self.stored.runs[index]

    def reference(self) -> AuditResult | None:
        """The reference of the run under way that the file holds, or None."""
        run = self._stored_run()
        return None if run is None else run.reference

    def checkpoint(self, ref: CheckpointRef, digest: Digest | None) -> CheckpointRun | None:
        """The audit of ``ref`` in the run under way that the file holds, when its tensors are those it read then."""
        run = self._stored_run()
        if run is None or digest is None:
            return None
        for c in run.checkpoints:
            if c.checkpoint.name == ref.name and c.status == "audited" and c.digest == digest and c.audit is not None:
                return CheckpointRun(ref, "audited", c.audit, digest, resumed=True, timings=c.timings)
        return None

    def save_partial(self, plan: _Plan, run: SeriesRun) -> None:
        """Rewrite the file with what is done: the runs finished, and ``run`` so far."""
        runs = [*self.finished, run]
        seeds = None if self.seeds is None else replace(self.seeds, seeds=self.seeds.seeds[: len(runs)])
        self.save(_result(plan, seeds, runs, self.key, complete=False, extra=self.notes))

    def save(self, result: SeriesResult) -> None:
        """Write ``result`` to the file, at once and atomically."""
        assert self.path is not None, "a results file to write"
        rows, meta = table_rows(result.records(), result.sweep_rows()), result.meta()
        if self.names is not None:
            rows, meta = with_names(rows, self.names), with_names(meta, self.names)
        write_parquet(rows, self.path, meta, now=True)
