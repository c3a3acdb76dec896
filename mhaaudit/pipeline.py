"""The single capture loop: load -> prefetched batches -> capture -> consumers.

Every command that runs a model over data (``check``, ``capacity``, ``kruskal --model`` and
``--save-features``) goes through :func:`load` and :func:`stream`:

- :func:`load` turns a :class:`ModelRequest` and a choice of weights (``"random"`` or
  ``"trained"``) into a :class:`~mhaaudit.models.ProbedModel` on the run's device, built only as
  deep as the deepest probe point.
- :func:`example_batches` turns a :class:`DataRequest` into raw batches for that model (PIL images,
  or token-id rows built with the paper's BERT-pair / GPT-window constructions) and a
  :class:`DataInfo` naming the data.
- :func:`stream` reads the raw batches ahead on a background thread (folders and datasets are
  decoded on a pool of threads, in order), prepares each batch (the model's preprocessing,
  tensors on the device, through pinned memory for a GPU) on another while the previous batch
  runs, captures the requested layers with TF32 off, and hands the
  ``{layer: (B, n, d) tokens}`` of every batch to each consumer. Consumers (the streaming reduction
  of :mod:`mhaaudit.features`, the Z builder of :mod:`mhaaudit.capacity`) keep what they need and
  drop the batch, so memory grows with T x d, not T x n x d.

Within :func:`kept_inputs` the passes of one model object over the same data prepare it once: the
first pass keeps the model inputs it fed, and the later ones (the checkpoints of a series, read
into that one model) feed them again. They can be handed to another model object whose inputs
are known to be the same (:meth:`KeptInputs.pass_to`: a series' trained model, after its
reference).

Under ``torchrun`` (:mod:`mhaaudit.distributed`) rank 0 alone reads the source and deals batch b
to rank b mod N; each rank's consumers see only the batches dealt to it, in order, and the
returned :class:`DataInfo` knows how to put row-stacked results back into single-process order
(:meth:`DataInfo.gather_rows`).
"""

from __future__ import annotations

import collections
import queue
import secrets
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from . import batching, distributed, hostmem, load_sharing, phases, readings
from .batches import DataInfo, example_batches
from .ending import ending
from .errors import DataError, InputError, ModelError, Param
from .hostmem import Trimmer
from .load_sharing import shared_loads as shared_loads
from .models import load_model
from .models.probe import full_float32
from .progress import status, task
from .request import DataRequest, ModelRequest
from .settings import Settings
from .sources import BuiltinImages, DuplicateFinder
from .sources.duplicates import Fingerprints
from .workers import helper_thread, worker_pool

__all__ = [
    "DataInfo",
    "DataRequest",
    "KeptInputs",
    "ModelRequest",
    "example_batches",
    "inputs_kept",
    "kept_inputs",
    "load",
    "loaded_as",
    "stream",
]

Consumer = Callable[[dict[int, torch.Tensor]], None]


@dataclass
class KeptInputs:
    """The model inputs the first pass of one model (``pm``, the object; None: the first model that
    makes a pass) over the data fed, kept to be fed again (:func:`kept_inputs`): this rank's batches
    as ``(batch index, inputs)`` after the exact duplicates were dropped, on the CPU (pinned for a
    GPU), with what the pass learned of the data (``info``) and the notes it made; ``keys`` are the
    data request (with the batch size asked for, and with the one chosen), data seed and place in
    the job they were prepared for; :meth:`pass_to` hands them to another model object whose inputs
    are the same. Inputs past ``budget`` bytes are not kept (``over_budget``)."""

    pm: Any
    budget: int
    keys: tuple = ()
    batches: list = field(default_factory=list)
    info: DataInfo | None = None
    notes: list[str] = field(default_factory=list)
    nbytes: int = 0
    over_budget: bool = False
    fed_again: int = 0  # later passes that fed the kept inputs

    def reset(self) -> None:
        """Let the kept inputs go (other data is read next: its first pass keeps its own)."""
        self.keys, self.batches, self.info, self.notes, self.nbytes = (), [], None, [], 0

    def serves(self, pm) -> bool:
        """Whether the passes of ``pm`` keep and are fed these inputs (the first pass claims them when
        no model does yet)."""
        if self.pm is None:
            self.pm = pm
        return pm is self.pm

    def pass_to(self, pm) -> None:
        """Feed the kept inputs to the passes of ``pm`` from now on, instead of the model that kept them
        (which is let go): the caller knows ``pm`` prepares the data as that model does (the same
        preprocessing, modality, n and query token)."""
        self.pm = pm

    def release(self) -> None:
        """Let the model that kept the inputs go, keeping what :meth:`pass_to`'s caller compares (its
        ``info`` and ``config``): a series' reference model is not held while the checkpoints are audited."""
        if self.pm is not None and not isinstance(self.pm, ReleasedModel):
            self.pm = ReleasedModel(self.pm.info, getattr(self.pm, "config", None))

    def hand_to(self, pm) -> None:
        """Let the kept inputs go, and let the next pass of ``pm`` keep its own (the inputs of the model
        that kept them are not known to be ``pm``'s). Inputs found over the budget stay unkept."""
        self.reset()
        self.pm = pm

    def add(self, index: int, inputs: dict[str, torch.Tensor]) -> None:
        """Keep one batch's inputs (on the CPU), unless the budget is spent (then keep none)."""
        if self.over_budget:
            return
        size = sum(v.numel() * v.element_size() for v in inputs.values() if isinstance(v, torch.Tensor))
        if self.nbytes + size > self.budget:
            self.over_budget, self.batches, self.nbytes = True, [], 0
            return
        pin = staged(self.pm.device)
        self.batches.append((index, {k: _host_copy(v, pin) for k, v in inputs.items()}))
        self.nbytes += size


@dataclass(frozen=True)
class ReleasedModel:
    """What :meth:`KeptInputs.release` keeps of the model that kept the inputs: its description and
    config, not its weights (no pass is ever made with it, so it keeps and is fed nothing)."""

    info: Any
    config: Any


def _host_copy(v, pin: bool):
    if not isinstance(v, torch.Tensor):
        return v
    v = v.detach().to("cpu")
    return v.pin_memory() if pin else v


_KEPT: KeptInputs | None = None  # while kept_inputs() is open


@contextmanager
def kept_inputs(pm=None, budget: int | None = None) -> Iterator[KeptInputs]:
    """While open, the first pass of ``pm`` (this model object; None: the first model that makes a
    pass) over the data keeps the model inputs it fed (read, preprocessed, exact duplicates
    dropped), and every later pass of ``pm`` (or of the model :meth:`KeptInputs.pass_to` names) over
    the same data (the same data request and data seed, at the same place in the job; a batch size
    given as the number ``auto`` chose is the same) feeds those inputs again instead of reading and
    preparing the data anew, with the same description of the data: the checkpoints of a series,
    each read into ``pm``, see the examples a pass of their own would see, prepared once. Inputs
    past ``budget`` bytes (default: a quarter of the memory available) are not kept, and the later
    passes read the data again."""
    global _KEPT
    outer = _KEPT
    _KEPT = KeptInputs(pm, hostmem.available_memory() // 4 if budget is None else int(budget))
    try:
        yield _KEPT
    finally:
        _KEPT = outer


def inputs_kept() -> bool:
    """Whether the inputs of a pass are kept for the passes after it (:func:`kept_inputs` is open and a first
    pass within its budget has kept them): the data is then not read again."""
    return _KEPT is not None and _KEPT.info is not None and not _KEPT.over_budget


def _feed_kept(pm, kept: KeptInputs, want: list[int], consumers: Sequence[Consumer], settings: Settings, label: str):
    """Feed the kept inputs of a pass through ``pm`` to each consumer, as :func:`stream` fed them:
    the description of the data that pass learned, with this pass's time."""
    assert kept.info is not None, "only a pass that kept its inputs is fed again"
    t0 = time.perf_counter()
    share = distributed.current().world_size
    with task(label, kept.info.count, settings.progress) as advance, full_float32():
        for _, inputs in kept.batches:
            inputs = {
                k: v.to(pm.device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()
            }
            with phases.phase("forward", device=pm.device):
                tokens = pm.capture(inputs, want)
            with phases.phase("reduction", device=pm.device):
                for consume in consumers:
                    consume(tokens)
            advance(_batch_size(inputs) * share)
            del tokens, inputs
    hostmem.release()
    kept.fed_again += 1
    return replace(
        kept.info, fed=list(kept.info.fed), parts=list(kept.info.parts), seconds=round(time.perf_counter() - t0, 3)
    )


def load(request: ModelRequest, init: str, settings: Settings, max_layer: int):
    """The model of ``request`` with ``init`` weights (``"random"`` | ``"trained"``) on the run's
    device, with blocks built up to ``max_layer`` (at least 1); within :func:`shared_loads`, the
    model already loaded for the same weights."""
    cache = load_sharing.current()
    if cache is None:
        return _load(request, init, settings, max_layer)
    key = _load_key(request, init, settings, max_layer)
    if key not in cache:
        pm = _load(request, init, settings, max_layer)
        for other in [k for k in cache if k[:2] == key[:2]]:
            del cache[other]
        cache[key] = pm
    return cache[key]


def _load_key(request: ModelRequest, init: str, settings: Settings, max_layer: int) -> tuple:
    """What makes two loads the same model: the request, the weights, the weights seed (random weights
    only), the depth built and the device."""
    return (
        request,
        init,
        None if init == "trained" else settings.weights_seed_used,
        max(1, int(max_layer)),
        str(settings.device),
    )


@contextmanager
def loaded_as(pm, request: ModelRequest, init: str, settings: Settings, max_layer: int):
    """While open, :func:`load` of these weights (``request``, ``init``, ``settings``, ``max_layer``)
    gives ``pm``, a model the caller holds (other loads are shared as within :func:`shared_loads`,
    until it closes): a series reads each checkpoint's tensors into the one model it built, and
    audits it there."""
    with load_sharing.holding({_load_key(request, init, settings, max_layer): pm}):
        yield


def _load(request: ModelRequest, init: str, settings: Settings, max_layer: int):
    with (
        status(f"Loading {request.model} ({init} weights, blocks up to {max(1, int(max_layer))})", settings.progress),
        phases.phase("model build", device=settings.device),
    ):
        pm = load_model(
            request.model,
            weights=init,
            backend=request.backend,
            weights_path=request.weights_path if init == "trained" else None,
            device=settings.device,
            context_length=request.context_length,
            max_layer=max(1, int(max_layer)),
            seed=settings.weights_seed_used,
            revision=request.revision,
            trust_remote_code=request.trust_remote_code,
        )
    readings.note_model(pm, init, settings.weights_seed_used, max(1, int(max_layer)))  # while recording only
    return pm


def query_index(pm, request: ModelRequest) -> int:
    """The query row for ``pm``, in 0..n-1: the user's ``--query-index`` (negative counts from the end) or the
    model's own.

    Raises:
        ModelError: when the model has no query token of its own and none is asked for.
        InputError: when the index asked for is out of range for the model's n tokens.
    """
    n = pm.info.n
    if request.query_index is None and pm.info.query_index is None:
        raise ModelError(
            f"{pm.info.name} has no query token of its own ({pm.info.query_token.removeprefix('none: ')}); "
            "name one with " + Param("query_index") + f" K (0 to {n - 1})"
        )
    qi = pm.info.query_index if request.query_index is None else int(request.query_index)
    if not -n <= qi < n:
        raise InputError(Param("query_index") + f" {qi} is out of range for n = {n} tokens")
    return qi % n


def staged(device: torch.device) -> bool:
    """Whether model inputs for ``device`` are built on the CPU in pinned memory and copied
    asynchronously (a CUDA device), rather than built in place (the CPU)."""
    return torch.device(device).type == "cuda"


def is_on(tensor: torch.Tensor, device: torch.device | str) -> bool:
    """Whether ``tensor`` lies on ``device`` (``cuda`` without an index: the current CUDA device, where a tensor
    made there says ``cuda:0``)."""
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return tensor.device == d


def _prepare(pm, raw) -> dict[str, torch.Tensor]:
    """Model inputs on the model's device for one raw batch. For a CUDA model they are built on
    the CPU, pinned and copied with ``non_blocking=True``: the copy overlaps the work queued
    before it, and the caching host allocator keeps the pinned buffer until the copy is done. A
    batch already on the model's device (the built-in images as tensors) is prepared there."""
    pin = staged(pm.device) and not (isinstance(raw, torch.Tensor) and is_on(raw, pm.device))
    where = torch.device("cpu") if pin else pm.device
    if pm.info.modality == "image":
        inputs = pm.preprocess(raw, device=where)
    else:
        ids, segments = raw
        inputs = pm.preprocess(ids, device=where)
        if segments is not None:
            inputs["token_type_ids"] = torch.tensor(segments, dtype=torch.long, device=where)
    if pin:
        inputs = {k: v.pin_memory().to(pm.device, non_blocking=True) for k, v in inputs.items()}
    return inputs


#: Helper threads preparing batches for a CUDA model, in order: its forward pass takes a few milliseconds a batch,
#: and one thread's preprocessing (resizing PIL images, normalising them) takes several times as long
CUDA_PREPARE_WORKERS = 4


def _prefetched(
    pm, raw_batches: Iterable[tuple[int, Any]], workers: int | None = None
) -> Generator[tuple[int, dict[str, torch.Tensor] | None], None, None]:
    """``(batch index, model inputs)``, in order, each batch prepared on a helper thread while those before
    it are probed (``(None, None)`` passed through for a round in which this rank has no batch).

    The raw batches themselves are read ahead on another thread (:func:`_read_ahead`: the
    sources decode files on their own pool of threads, the built-in images are synthesised
    there); the model's preprocessing (PIL and numpy, largely outside the interpreter lock) runs
    here, on ``workers`` threads (one on the CPU, whose cores the forward pass needs;
    :data:`CUDA_PREPARE_WORKERS` for a CUDA model), and CUDA inputs are staged through pinned memory
    (:func:`_prepare`).
    """
    if workers is None:
        workers = CUDA_PREPARE_WORKERS if staged(pm.device) else 1
    with worker_pool(workers, "mhaaudit-prepare") as pool:
        pending: collections.deque = collections.deque()
        for index, raw in raw_batches:
            if raw is not None and len(raw) == 0:
                continue
            pending.append((index, None if raw is None else pool.submit(_prepare, pm, raw)))  # None: an empty turn
            if len(pending) > workers:
                index0, fut = pending.popleft()
                yield index0, None if fut is None else fut.result()
        while pending:
            index0, fut = pending.popleft()
            yield index0, None if fut is None else fut.result()


#: How long the exit waits for a reader to finish the item it is reading (:func:`mhaaudit.workers.helper_thread`):
#: as a reader closed early is waited for, so that a stalled read does not hold the exit long
READER_EXIT_WAIT_S = 5.0


def _read_ahead(items: Iterator, depth: int) -> Iterator:
    """``items``, read by a helper thread up to ``depth`` ahead (rank 0 reads the source while the
    batches it dealt are computed); an error of the reader is raised here, in order. Closed early, it
    waits a few seconds for the reader to stop, unless a signal is ending the run
    (:func:`mhaaudit.ending.ending`); one never closed (a failed run's traceback may keep it alive) is stopped
    at exit (:func:`mhaaudit.workers.stop_helpers`)."""
    box: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def put(x) -> bool:
        while not stop.is_set():
            try:
                box.put(x, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def fill() -> None:
        try:
            for x in items:
                if not put((True, x)):
                    return
            put((True, end))
        except BaseException as exc:  # noqa: BLE001 - handed to the reading side
            put((False, exc))

    reader = helper_thread(fill, "mhaaudit-read", stop, READER_EXIT_WAIT_S)
    try:
        while True:
            ok, x = box.get()
            if not ok:
                raise x
            if x is end:
                return
            yield x
    finally:
        stop.set()
        if not ending():  # else the process ends soon, and what the reader is making goes unused
            reader.join(timeout=5)


def _assigned(
    pm, data: DataRequest, settings: Settings, notes: list[str], shard, need: int | None = None
) -> tuple[DataInfo, Iterator]:
    """``(batch index, raw batch)`` for this process: the batches rank 0 reads and deals to this
    rank (every batch in one process), read ahead on a helper thread."""
    if shard.rank == 0:
        try:
            seed, digest = settings.data_seed_used, readings.recorded()  # digest: while the ranks' readings compare
            info, raw = example_batches(pm, data, seed, notes, need, settings.progress, digest=digest)
        except Exception as exc:  # refused before the first batch: the other ranks hear it as from a batch
            for _ in shard.deal(_raising(exc)):
                pass
            raise  # pragma: no cover - deal raises it first
        info.shard = shard
        return info, shard.deal(_read_ahead(raw, 2 * shard.world_size))
    return DataInfo(shard=shard), shard.deal(None)


def _raising(exc: BaseException) -> Iterator:
    """A source whose first batch is the failure ``exc`` (rank 0 deals it, so every rank ends with it)."""
    raise exc
    yield  # pragma: no cover - makes this a generator


def _settle(info: DataInfo, notes: list[str], first_note: int) -> None:
    """Every rank learns what rank 0 learned of the data (its name, items skipped, duplicates,
    notes) and which batches every rank fed."""
    info.settle()
    shard = info.shard
    info.parts = shard.all_gather(info.fed)
    name, skipped, skips, policy, dups, dups_line, new_notes = shard.broadcast(
        (info.name, info.skipped, info.skips, info.policy, info.duplicates, info.duplicates_line, notes[first_note:])
    )
    info.name, info.skipped, info.duplicates, info.duplicates_line = name, skipped, dups, dups_line
    info.skips, info.policy = skips, policy
    if shard.rank != 0:
        notes.extend(x for x in new_notes if x not in notes)
    info.count = sum(size for part in info.parts for _, size in part)


def _without_duplicates(finder, keyer: Fingerprints, index: int | None, inputs: dict | None, shard) -> dict | None:
    """``inputs`` less the examples that repeat an earlier input exactly (kept with
    ``--keep-duplicates``), found from keys computed on the device the batch is on (``keyer``).
    Under torchrun the ranks exchange the keys of each round's batches and feed them to their
    finders in batch order, so every rank drops what one process would."""

    keep = None
    for b, keys in sorted(
        (x for x in shard.all_gather((index, keyer.keys(inputs) if inputs is not None else None)) if x[1] is not None),
        key=lambda x: x[0],
    ):
        mask = finder.add(keys)
        keep = mask if b == index else keep
    if inputs is None:
        return inputs
    assert keep is not None, "this rank's own keys came back from the exchange"
    if all(keep):
        return inputs
    rows = [i for i, k in enumerate(keep) if k]
    return {
        name: v[torch.tensor(rows, dtype=torch.long, device=v.device)] if getattr(v, "ndim", 0) >= 1 else v
        for name, v in inputs.items()
    }


def _batch_size(inputs: dict[str, torch.Tensor]) -> int:
    first = inputs.get("pixel_values", inputs.get("input_ids"))
    return int(first.shape[0]) if first is not None else 0


def _batch_choice(pm, data: DataRequest, layers: list[int], shard):
    """The batch size of ``data`` for ``pm`` (``auto`` resolved; under torchrun the smallest any rank chose)."""
    choice = batching.choose_batch_size(pm, layers, data.batch_size, data.limit)
    if data.batch_size == "auto":
        choice = min(shard.all_gather(choice), key=lambda c: c.size)
    return choice


def stream(
    pm,
    data: DataRequest,
    layers: Iterable[int],
    consumers: Sequence[Consumer],
    settings: Settings,
    notes: list[str],
    label: str = "capture",
    need: int | None = None,
) -> DataInfo:
    """Feed every example of ``data`` through ``pm`` once and every captured batch to each consumer.

    ``need``: the fewest examples the caller can use; a source known to hold fewer (read from
    image headers) is refused before the first forward pass.

    ``layers``: the probe points (0 = embedding output, k = output of block k); only blocks up to
    the deepest run. Returns what was fed. The forward
    passes and the consumers run with TF32 and reduced-precision float32 matmuls off
    (:func:`~mhaaudit.models.probe.full_float32`): these features feed rank decisions.

    Raises:
        DataError: when the source yields no usable example (or, with ``need``, is known to hold too few).
    """
    t0 = time.perf_counter()
    first_note = len(notes)
    shard = distributed.current()
    want = sorted(set(int(k) for k in layers))
    kept = _KEPT if _KEPT is not None and not _KEPT.over_budget and _KEPT.serves(pm) else None
    job = (settings.data_seed_used, shard.rank, shard.world_size)
    key = (data, *job)
    if kept is not None and kept.info is not None:
        if key in kept.keys:
            notes.extend(kept.notes)
            return _feed_kept(pm, kept, want, consumers, settings, label)
        kept.reset()  # other data (another data seed): this pass keeps its own
    keeping = kept if kept is not None and kept.info is None else None  # this pass keeps its inputs
    batch = _batch_choice(pm, data, want, shard)
    data = replace(data, batch_size=batch.size)
    # the duplicate keys' secret: rank 0's (a collective every rank makes here), so that the keys
    # of every rank can be compared
    keyer = Fingerprints(shard.broadcast(secrets.randbits(63))) if pm.info.modality == "image" else None
    with phases.phase("data"):
        info, raw = _assigned(pm, data, settings, notes, shard, need)
    info.batch = batch
    # Images: exact duplicates of what the model sees (its preprocessed pixels) are found before the
    # forward pass, on the device the batch is on. Every pass over the same data (other weights)
    # finds and drops the same ones.
    finder = DuplicateFinder(keep=data.keep_duplicates) if pm.info.modality == "image" else None
    share, shown = shard.world_size, 0  # rank 0's bar stands for every rank
    trim = Trimmer(every=4.0)  # freed batch buffers go back to the system (see mhaaudit.hostmem)
    dev = pm.device
    digest = readings.InputsDigest() if readings.recorded() else None  # what the ranks compare (seeds spread)
    with (
        task(label, data.limit, settings.progress) as advance,
        full_float32(),
        closing(_prefetched(pm, raw)) as batches,
    ):
        while True:
            with phases.phase("data"):  # the wait for the next prepared batch
                item = next(batches, None)
            if item is None:
                break
            index, inputs = item
            seen = _batch_size(inputs) if inputs is not None else 0
            if finder is not None:
                assert keyer is not None, "images have a finder and their keys"
                with phases.phase("duplicate keys", device=dev):
                    inputs = _without_duplicates(finder, keyer, index, inputs, shard)
            step = min(seen * share, data.limit - shown)
            advance(step)
            shown += step
            size = _batch_size(inputs) if inputs is not None else 0
            if not size:
                continue
            if digest is not None and inputs is not None:
                digest.add(inputs)
            with phases.phase("forward", device=dev):
                tokens = pm.capture(inputs, want)
            with phases.phase("reduction", device=dev):
                for consume in consumers:
                    consume(tokens)
            if keeping is not None and inputs is not None:
                keeping.add(index, inputs)
            del tokens, inputs
            trim.maybe()
            info.fed.append((index, size))
            info.count += size
    hostmem.release()
    if finder is not None:
        found = finder.result()
        info.duplicates, info.duplicates_line = found.as_dict(), found.describe("images")
    _settle(info, notes, first_note)
    info.seconds = round(time.perf_counter() - t0, 3)
    if info.count == 0:
        raise DataError(f"the data source yielded no usable examples ({info.name})")
    if digest is not None:  # images of a folder, file or data set do not depend on the data seed
        seeded = pm.info.modality != "image" or isinstance(info.source, BuiltinImages)
        readings.note_inputs(pm, data.data, settings.data_seed_used if seeded else None, digest)
        if info.documents_sha256 is not None:  # what ranks with other data seeds compare
            readings.note_documents(pm, data.data, info.documents_sha256)
    if keeping is not None and not keeping.over_budget:
        keeping.keys, keeping.notes = (key, (data, *job)), list(notes[first_note:])
        keeping.info = replace(info, source=None, fed=list(info.fed), parts=list(info.parts))
    return info
