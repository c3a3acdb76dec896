"""The trained model of a series, built once: each checkpoint's tensors read into it before it
is audited, its passes fed the model inputs the series prepared once.

The reference's pass keeps the inputs it prepared; the trained model is fed them when its inputs
are known to be the same (:func:`same_inputs`): the same preprocessing files (none of the first
checkpoint's own, or the model's byte for byte), modality, n and query token. Otherwise (or
without a reference pass) its first pass prepares the data again, and keeps that for the later
checkpoints.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .. import distributed, pipeline
from ..audit_result import AuditResult
from ..auditing import audit
from ..batches import refuse_foreign_vocabulary
from ..errors import MhaauditError, ModelError, one_line
from ..facts import ReadFacts, meta_value, weights_read_text
from ..hub import is_offline
from ..models import resolve
from ..models.checkpoints import CHECKPOINT_FILES
from ..models.hf import checkpoint_of, read_needed, used_tensors, weights_prefix
from ..models.hub_reads import hub_words, random_words
from ..models.load import check_finite_weights
from ..models.shards import INDEX_FILES, Checkpoint, NotPartial, hub_download, human_bytes, read_index
from ..request import DataRequest, ModelRequest
from ..settings import Settings
from .identity import Digest, file_digest, tensor_digest
from .spec import DATA_FILES, CheckpointRef, data_files, file_sha256

if TYPE_CHECKING:
    from .plan import _Plan
    from .result import CheckpointRun, SeriesRun


class _Trained:
    """The trained model of a series: built once, from the first checkpoint it is asked about, as
    deep as the deepest probe point; each checkpoint's tensors are read into it before it is audited,
    and its passes are fed the inputs ``kept`` holds (:func:`mhaaudit.pipeline.kept_inputs`): the
    reference's, when :func:`same_inputs` finds them the trained model's (else ``why_again`` says why
    not, and its first pass keeps its own).

    ``used`` are the parameters the probed blocks use (their tensors are what a checkpoint's digest
    covers and what a partial read reads); a model of another backend or a checkpoint in another
    form than safetensors is loaded whole, its state copied in, and has no digest."""

    def __init__(self, plan: _Plan, settings: Settings, kept: pipeline.KeptInputs) -> None:
        self.plan, self.settings = plan, settings
        self.pm: Any = None
        self.request: ModelRequest | None = None
        self.current: str | None = None
        self.used: set[str] | None = None
        self.kept = kept
        self.why_again: str | None = None  # why the reference's inputs are not fed to the trained model
        self._said_over_budget = False
        self._checkpoints: dict[str, Checkpoint | None] = {}
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> _Trained:
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()
        self.pm = None

    def _ensure(self, ref: CheckpointRef) -> None:
        """Build the model from ``ref``, unless it is built."""
        if self.pm is not None:
            return
        self.request = ref.request(self.plan.base)
        self.pm = pipeline.load(self.request, "trained", self.settings, self.plan.max_layer)
        refuse_foreign_vocabulary(self.pm)  # as a single run of it does, whatever inputs were kept
        self.current = ref.name
        self.used = used_tensors(self.pm) if self.pm.info.backend == "hf" else None
        kept = self.kept
        held = kept.pm is not None and kept.info is not None and not kept.over_budget
        why = same_inputs(self.plan, ref, kept.pm, self.pm) if held else None
        # Every rank of a job decides alike (a rank feeding kept inputs while another reads the data
        # would wait for ever): the inputs are fed only where every rank kept them, on rank 0's reasons.
        everyone = distributed.current().all_gather((held, why))
        if all(h for h, _ in everyone) and everyone[0][1] is None:
            kept.pass_to(self.pm)
            return
        if everyone[0][1] is not None:
            self.why_again = everyone[0][1]
        elif any(h for h, _ in everyone):
            self.why_again = "a process of the job kept no inputs (they outgrew its memory budget)"
        if not kept.over_budget:  # its first pass keeps its own inputs
            kept.hand_to(self.pm)

    def _checkpoint(self, ref: CheckpointRef) -> Checkpoint | None:
        if ref.name not in self._checkpoints:
            repo = None if ref.revision is None else resolve(self.plan.base.model, backend=self.plan.base.backend)
            self._checkpoints[ref.name] = checkpoint_of(
                ref.path, repo=None if repo is None else repo.resolved, revision=ref.revision
            )
        return self._checkpoints[ref.name]

    def digest(self, ref: CheckpointRef) -> Digest | None:
        """The digest of the tensors an audit of ``ref`` reads; for a checkpoint not read tensor by tensor, the
        digest of its weights files where they are on this machine (:func:`.identity.file_digest`); else None."""
        self._ensure(ref)
        ck = self._checkpoint(ref) if self.used is not None else None
        if ck is not None and self.used is not None:
            with contextlib.suppress(NotPartial):
                return tensor_digest(ck, ck.keys_for(self.pm.module, self.used, prefix=weights_prefix(self.pm)))
        files = self._weights_files(ref)
        return file_digest(files, ref.name) if files else None

    def read_of(self, ref: CheckpointRef) -> ReadFacts | None:
        """What a single run of ``ref`` reads of its files (``Checkpoint.read_facts``: from their headers), where it
        is read tensor by tensor; None for one loaded whole (whose digest is that of its files: a checkpoint
        identical to another holds the same files, and its read is the other's).

        Raises:
            ModelError: when a file cannot be read or does not hold a tensor its index puts there.
        """
        self._ensure(ref)
        ck = self._checkpoint(ref) if self.used is not None else None
        if ck is None or self.used is None:
            return None
        with contextlib.suppress(NotPartial):
            return ReadFacts.of(ck.read_facts(ck.keys_for(self.pm.module, self.used, prefix=weights_prefix(self.pm))))
        return None

    def _weights_files(self, ref: CheckpointRef) -> dict[str, str]:
        """The weights files of ``ref`` (and its config) on this machine, by name: a local file (under one name for
        every such file, so that two files of the same bytes are the same checkpoint), a local folder's files a
        load reads them from, or a hub revision's files in the local cache; empty when no weights file is there (a
        hub revision not yet downloaded)."""
        if ref.revision is not None:
            repo = resolve(self.plan.base.model, backend=self.plan.base.backend).resolved

            def local(fn: str) -> str | None:
                return hub_download(repo, fn, ref.revision, True)

        else:
            assert ref.path is not None, "a local checkpoint has a path"
            if os.path.isfile(ref.path):  # no name of its own: its bytes are the checkpoint, whatever its name
                return {"the weights file": ref.path}
            folder = ref.path

            def local(fn: str) -> str | None:
                path = os.path.join(folder, fn)
                return path if os.path.isfile(path) else None

        found: dict[str, str] = {}
        for fn in ("config.json", *CHECKPOINT_FILES, *INDEX_FILES):
            path = local(fn)
            if path is None:
                continue
            found[fn] = path
            if fn in INDEX_FILES:
                for shard in sorted(set(read_index(path)[1].values())):
                    shard_path = local(shard)
                    if shard_path is None:  # a shard not on this machine: nothing to compare
                        return {}
                    found[shard] = shard_path
        return found if set(found) - {"config.json"} else {}

    def read(self, ref: CheckpointRef) -> None:
        """Read ``ref``'s tensors into the model (nothing when it holds them already).

        Raises:
            ModelError: when the checkpoint cannot be read, does not fit the model, or holds NaN or infinite values.
        """
        self._ensure(ref)
        if self.current == ref.name:
            return
        ck = self._checkpoint(ref) if self.used is not None else None
        read: dict | None = None
        source = _source_words(ref, self.plan)
        if ck is not None:
            with contextlib.suppress(NotPartial):
                read = read_needed(self.pm, ck, ref.name).as_dict()
        if read is None:
            read, source = self._copy_whole(ref)
        check_finite_weights(self.pm, ref.name)
        self.pm.info = replace(self.pm.info, weights_source=source, weights_read=read)
        self.current = ref.name

    def _copy_whole(self, ref: CheckpointRef) -> tuple[dict | None, str]:
        """Load ``ref`` whole (as a single run loads a checkpoint not in safetensors form) and copy its
        state into the model; what was read and where from.

        Raises:
            ModelError: when its state does not fit the model built for the series.
        """
        fresh = pipeline.load(ref.request(self.plan.base), "trained", self.settings, self.plan.max_layer)
        try:
            self.pm.module.load_state_dict(fresh.module.state_dict())
        except RuntimeError as exc:
            raise ModelError(
                f"the checkpoint {ref.name} does not fit the model built for the series: {one_line(exc, 160)}"
            ) from exc
        return fresh.info.weights_read, fresh.info.weights_source

    def audit(self, ref: CheckpointRef, data: DataRequest, settings: Settings, on_note) -> AuditResult:
        """``ref``'s trained columns, audited in the model built once (its tensors read first)."""
        self.read(ref)
        assert self.request is not None, "the model is built"
        with pipeline.loaded_as(self.pm, self.request, "trained", settings, self.plan.max_layer):
            result = audit(
                self.request,
                data=data,
                settings=settings,
                on_note=on_note,
                **self.plan.audit_keywords(self.plan.trained),
            )
        self._say_if_over_budget()
        return result

    def _say_if_over_budget(self) -> None:
        """One line on stderr, once, when the prepared inputs outgrew the memory kept for them: every later
        checkpoint then reads and prepares the data again."""
        if self.kept is None or not self.kept.over_budget or self._said_over_budget:
            return
        self._said_over_budget = True
        with contextlib.suppress(OSError, ValueError, AttributeError):  # no stderr to write to
            print(
                f"Note: the prepared model inputs exceed the {human_bytes(self.kept.budget)} of memory kept for them "
                "(a quarter of the memory available), so each later checkpoint reads and prepares the data again",
                file=sys.stderr,
                flush=True,
            )


def same_inputs(plan: _Plan, ref: CheckpointRef, reference: Any, trained: Any) -> str | None:
    """None when the trained model built from ``ref`` is fed the inputs the ``reference`` model is fed
    from the same data (the reference's kept inputs may be fed to it); else why that is not known.

    Known when both have the same backend, modality, family, n, query token and image size, and
    their preprocessing comes from the same files: a hub revision's request is the reference's own,
    a weights file adds no preprocessing file, and a checkpoint folder holds none of its own
    (:data:`.spec.DATA_FILES`) or each the model's, byte for byte (SHA-256), and no other."""
    a, b = reference.info, trained.info
    for name in ("backend", "modality", "family", "n", "query_index", "resolved"):
        if getattr(a, name) != getattr(b, name):
            return f"{name} is {getattr(b, name)} with trained weights but {getattr(a, name)} with random ones"
    sizes = [getattr(m.config, "image_size", None) for m in (reference, trained)]
    if a.backend == "hf" and sizes[0] != sizes[1]:
        return "the image size differs between the configs of the model and its first checkpoint"
    if ref.revision is not None or ref.path is None or not os.path.isdir(ref.path):
        return None  # the same revision's files, or a weights file that carries no preprocessing
    own = data_files(ref.path)
    if not own:
        return None
    model = _model_data_files(plan)
    if model is None or own != model:
        differ = sorted(fn for fn in set(own) | set(model or {}) if own.get(fn) != (model or {}).get(fn))
        return (
            f"the first checkpoint {ref.name} carries preprocessing files of its own that are not the model's "
            f"({', '.join(differ[:3]) or 'the model has none to compare'})"
        )
    return None


def _model_data_files(plan: _Plan) -> dict[str, str] | None:
    """The SHA-256 of each preprocessing file (:data:`.spec.DATA_FILES`) of the series' model: a local
    folder's, or its hub repository's in the local cache (None when none can be had)."""
    base = plan.base
    repo = resolve(base.model, backend=base.backend)
    if repo.local:
        return data_files(repo.resolved) if os.path.isdir(repo.resolved) else None
    found: dict[str, str] = {}
    try:
        for fn in DATA_FILES:
            path = hub_download(repo.resolved, fn, base.revision, True)  # the local cache only
            if path is not None:
                found[fn] = file_sha256(path)
    except (MhaauditError, OSError, ValueError):  # nothing to compare with: not known to be the same
        return None
    return found or None


def checkpoint_columns(run: SeriesRun, c: CheckpointRun, plan: _Plan) -> dict | None:
    """The columns whose records the checkpoint of ``c`` carries (``SeriesRun.columns_meta``), as a single run of
    it lists them: those of a checkpoint identical to the one before it are the audited one's, but their weights
    are its own (byte for byte the tensors read), so they name its own source and what is read of its own files, as
    ``capacity --from`` reads them (verdicts audited on another source are noted there as other weights of the same
    shape)."""
    columns = run.columns_meta(c.checkpoint.name)
    if c.status != "identical" or not columns:
        return columns
    own = {"weights_source": _source_words(c.checkpoint, plan)}
    if c.read is not None:  # what is read of its own files
        own |= {"weights_read": meta_value(c.read), "weights_read_text": weights_read_text(meta_value(c.read))}
    return {name: col | own for name, col in columns.items()}


def random_source(ref: CheckpointRef, plan: _Plan) -> str | None:
    """Where a single run of the hub revision of ``ref`` says its random weights come from, when they are the
    reference columns' (its config draws the random weights the first revision's does): ``capacity --from`` reads
    the reference columns for it as its own. None otherwise (they come from another config, or a local
    checkpoint's single run draws them from the model's config, as the series does)."""
    if ref.revision is None or not ref.draws_reference:
        return None
    return random_words(resolve(plan.base.model, backend=plan.base.backend).resolved, ref.revision, is_offline())


def _source_words(ref: CheckpointRef, plan: _Plan) -> str:
    """Where a checkpoint's trained weights come from, as a single run of it says."""
    if ref.revision is not None:
        repo = resolve(plan.base.model, backend=plan.base.backend).resolved
        return hub_words(repo, ref.revision, is_offline())
    assert ref.path is not None, "a local checkpoint has a path"
    return f"weights file {ref.path}" if os.path.isfile(ref.path) else f"local folder {ref.path}"
