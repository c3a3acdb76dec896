"""``mhaaudit capacity``: from audited assumptions to a memorisation bound and a certificate.

Two numbers per column (random weights; trained weights when they can be had):

- **The bound** (:mod:`mhaaudit.theory`). Theorem 1 (or Remark 1) turns the audit of the tokens an
  attention layer sees (Assumption 1 at k = n, Assumption 2, and a Kruskal-rank estimate when
  Assumption 1 fails) into a number of examples a multi-head attention layer with H heads of
  key/query dimension d_h memorises for any labels. The counts are reconstructed from the
  paper's proof, and every result says so.
- **The certificate** (:mod:`.certificate`). On the same data, the matrix ``Z`` of the proof
  (:mod:`.z`), built from the key/query weights of the model's own attention block ``block`` (or
  random ones). Its numerical rank r is a number of examples that one attention layer with those
  key/query weights memorises for ANY labels (a proof by construction).

What the attention layer sees: for ``block = K`` the tokens ``E_t`` are the input of block K
(layer K - 1 of :meth:`mhaaudit.models.ProbedModel.capture`; K = 1: the embedding output) and
the query ``x_t`` is row ``info.query_index`` of ``E_t``. The block's pre-attention LayerNorm
enters the logits only; the convex combinations are of the raw rows of ``E_t``, the input the
assumptions were audited on. The logits use the block's own scale and biases. A decoder's causal
mask changes nothing for a query in the last position (it attends to every token); for another
query position the context is cut after the query row. A block whose attention is not of that
form (rotary positions, relative attention, grouped key/value heads, query/key norms, logit
soft-capping; :mod:`mhaaudit.models.attention.support`) is refused with the reasons, and so is a
model without a query token of its own (SigLIP).

The tokens come from the one capture loop of :mod:`mhaaudit.pipeline`: per batch, the Z builder
and (unless the verdicts are read from a file) the streaming reduction consume them.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from .. import phases, pipeline, readings
from ..capture import data_notes
from ..defaults import CAPACITY_ATTENTION, CAPACITY_BLOCK, CAPACITY_BLOCK_WHY
from ..distributed import current, describe, shared
from ..errors import InputError, ModelError, OfflineError, Param
from ..facts import CapacitySettings, JobFacts, ModelFacts, ReadFacts
from ..features import StreamingReducer
from ..models import first_attention
from ..models.file_reads import read_once
from ..progress import task
from ..request import DataRequest, ModelRequest, Requests, build_requests
from ..seeds import SeedsResult, plan_for
from ..settings import Settings
from ..theory import theorem1_bound
from ..validate import choice, flag, head_counts, integer, split_list
from .assumptions import (
    Assumptions,
    assumptions_from_file,
    audit_assumptions,
    check_same_examples,
    linear_algebra,
    read_check_results,
)
from .certificate import certify_head_prefixes
from .result import CapacityColumn, CapacityResult
from .seeds import capacity_seeds
from .z import Heads, ZBuilder, random_attention_weights

__all__ = ["ATTENTION", "VARIANTS", "CapacityColumn", "CapacityResult", "attention_for", "capacity_audit"]

VARIANTS = ("random", "trained")
ATTENTION = CAPACITY_ATTENTION


# --------------------------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """What every column of one capacity run shares, checked before any work."""

    request: ModelRequest
    data: DataRequest
    settings: Settings
    block: int
    heads: str | Sequence[int] | int | None
    attention: str
    shared_context: bool
    from_path: Path | None
    from_results: tuple | None


@dataclass(frozen=True)
class _Attention:
    """Key/query weights the rows of Z use, as ZBuilder takes them, and their description."""

    heads: Heads
    causal: bool
    describe: str


def attention_for(pm, block: int, attention: str, seed: int) -> _Attention:
    """The key/query weights of block ``block`` of ``pm`` (``attention="model"``) or random ones."""
    info = pm.info
    if attention == "model":
        aw = first_attention(pm, block)
        desc = (
            f"the model's own block {block} attention ({aw.num_heads} heads, d_h = {aw.head_dim}, its pre-attention "
            f"map {type(aw.pre).__name__} inside the logits, scale {aw.scale:.4g}"
            + (", biases" if aw.b_q is not None else "")
            + ")"
        )
        return _Attention(Heads(aw.W_q, aw.W_k, aw.b_q, aw.b_k, aw.pre, aw.scale), aw.causal, desc)
    H, dh = info.num_heads, info.head_dim
    Wq, Wk = random_attention_weights(info.d, H, dh, seed)
    pre = torch.nn.LayerNorm(info.d, elementwise_affine=False)
    causal = info.decoder
    desc = (
        f"{H} random heads (seed {seed}): Xavier-uniform d x d_h key/query weights with d_h = {dh}, no biases, "
        f"logits 1/sqrt(d_h) on LayerNorm (no affine) of the tokens"
    )
    return _Attention(Heads(Wq, Wk, pre=pre), causal, desc)


def _capture(plan: _Plan, pm, attn: _Attention, col: CapacityColumn, notes: list[str]):
    """One pass of the pipeline over the data: rows of Z and (when auditing) the reduced features."""
    info = pm.info
    zb = ZBuilder(attn.heads, query_index=info.query_index, causal=attn.causal, shared_context=plan.shared_context)
    reducer = (
        None if plan.from_path is not None else StreamingReducer(info.query_index, plan.settings.rule(torch.float32))
    )
    layer = plan.block - 1
    first = _first_context(zb, f"capacity/{col.variant}/E0") if plan.shared_context else None

    def consume(tokens: dict) -> None:
        if first is not None:
            first.before()
        zb.update(tokens[layer])
        if first is not None:
            first.after()
        if reducer is not None:
            reducer.update(tokens[layer])

    fed = pipeline.stream(
        pm, plan.data, [layer], [consume], plan.settings, notes, label=f"{col.variant} weights: tokens and Z"
    )
    col.timings["capture and Z"] = fed.seconds
    col.batch = fed.batch
    notes.extend(line for line in data_notes(fed, plan.data.limit) if line not in notes)
    fs = (
        None
        if reducer is None
        else reducer.result({"model": plan.request.model, "variant": col.variant, "layer": layer}, fed=fed)
    )
    rows, _ = fed.gather_rows({"Z": zb.result()} if zb.T else None)
    assert rows is not None, "no rank read an example"
    return rows["Z"], fs, fed.name


class _SharedContext:
    """The one context E_0 of Proposition 2's setting is the first example's on every rank: rank 0
    (whose first batch is the data's first) publishes it, the others take it before their first
    batch, so each rank's rows of Z are the rows one process computes (one process: rank 0 alone)."""

    def __init__(self, zb: ZBuilder, shard, key: str) -> None:
        self.zb, self.shard, self.key, self.done = zb, shard, key, False

    def before(self) -> None:
        if not self.done and self.shard.rank != 0:
            self.zb._E0 = self.shard.fetch(self.key)
            self.done = True

    def after(self) -> None:
        if not self.done and self.shard.rank == 0:
            self.shard.publish(self.key, self.zb._E0)
            self.done = True


def _first_context(zb: ZBuilder, key: str) -> _SharedContext:
    return _SharedContext(zb, current(), key)


def _column(
    plan: _Plan, variant: str, notes: list[str]
) -> tuple[CapacityColumn, ModelFacts | None, str, list[int], int]:
    """Load, capture, audit and certify one column. Returns (column, model info, data name, heads, d_h).

    Raises:
        OfflineError: when random weights (the model's configuration) cannot be had offline.
        InputError: when ``block`` is past the model's last block, or a head count is above its heads.
        ModelError: when the model has no query token of its own.
    """
    col = CapacityColumn(variant)
    t0 = time.perf_counter()
    pm = None
    try:
        pm = pipeline.load(plan.request, variant, plan.settings, plan.block)
    except OfflineError as exc:
        if variant != "trained":
            raise
        col.status, col.reason = "unavailable", exc.message
    current().same(pm is not None, f"whether the {variant} weights of {plan.request.model} can be loaded")
    if pm is None:
        return col, None, "", [], 0
    readings.refuse_other_models(pm, variant, plan.settings.weights_seed_used, plan.block)  # each node's own files
    col.timings["load"] = round(time.perf_counter() - t0, 3)
    info = pm.info
    col.weights_source, col.weights_read = info.weights_source, ReadFacts.of(info.weights_read)
    if plan.block > pm.built_layers:
        raise InputError(
            Param("block")
            + f" {plan.block}: {plan.request.model} has {info.num_layers} blocks"
            + (" (block 2 is the default; give " + Param("block") + " 1)" if info.num_layers == 1 else "")
        )
    if info.query_index is None:
        raise ModelError(
            f"{plan.request.model} has no query token of its own ({info.query_token.removeprefix('none: ')}), "
            "and capacity reads the model's own query; check and kruskal "
            + Param("model")
            + " take "
            + Param("query_index")
            + " K"
        )
    attn = attention_for(pm, plan.block, plan.attention, plan.settings.weights_seed_used)
    hs = _validated_heads(plan.heads, attn.heads.num_heads)
    if (
        plan.from_path is not None and plan.from_results is not None
    ):  # before the data pass: a file of another model is refused at once
        same = {"model": info, "weights_seed": plan.settings.weights_seed_used}  # a file of other weights is refused
        a, which, fnotes = assumptions_from_file(
            plan.from_path, init=variant, layer=plan.block - 1, n=info.n, d=info.d, results=plan.from_results, **same
        )
        notes.extend(x for x in fnotes if x not in notes)
        col.assumptions = a or Assumptions(a1_reason=which, a2_reason=which, source=which)
    Z, fs, data_name = _capture(plan, pm, attn, col, notes)
    col.T = int(Z.shape[0])
    if plan.from_path is not None and plan.from_results is not None:
        check_same_examples(plan.from_path, plan.from_results, T=col.T, data=data_name)
    if fs is not None:
        with linear_algebra():
            col.assumptions, t_a = audit_assumptions(fs, plan.settings, label=variant)
        col.timings.update(t_a)
    _certify(plan, col, Z, info, hs, attn.heads.head_dim)
    line = f"key/query weights: {attn.describe}"
    if line not in notes:
        notes.append(line)
    return col, ModelFacts.of(info), data_name, hs, attn.heads.head_dim


def _validated_heads(heads, num_heads: int) -> list[int]:
    return head_counts(heads, num_heads) or [num_heads]


def _certify(plan: _Plan, col: CapacityColumn, Z: torch.Tensor, info, hs: list[int], head_dim: int) -> None:
    """The bound for each head count from the column's assumptions, and the certificate from Z."""
    a = col.assumptions
    assert a is not None, "a column's assumptions are read or audited before it is certified"
    for h in hs:
        col.bounds[h] = theorem1_bound(
            heads=h,
            head_dim=head_dim,
            n=info.n,
            d=info.d,
            a1_holds=a.holds(a.a1),
            a2_holds=a.holds(a.a2),
            kruskal_estimate=a.kruskal_estimate,
            a1_proven=a.a1_proven,
        )
    t0 = time.perf_counter()
    z_rule = plan.settings.rule(torch.float64)
    with task(f"{col.variant} weights: rank and certificate", len(hs), plan.settings.progress) as adv, linear_algebra():
        col.certificates = certify_head_prefixes(Z, info.d, hs, rule=z_rule, seed=plan.settings.seed, progress=adv)
    col.timings["rank and certificate"] = round(time.perf_counter() - t0, 3)


def _run_notes(
    info: ModelFacts, columns: list[CapacityColumn], hs: list[int] | None, shared_context: bool
) -> list[str]:
    """What the reader must know to read the numbers: causal masks, caps by T, Proposition 2's reach."""
    notes = []
    n, d = info.n, info.d
    if info.modality == "text" and info.query_index not in (0, None):
        if info.query_index % n == n - 1:
            notes.append(
                "the model is a decoder with a causal mask; its query (the last token) attends to every token, "
                "so the mask changes nothing"
            )
        else:
            notes.append("the model is a decoder with a causal mask; the context was cut after the query row")
    Tcap = max((c.T for c in columns if c.status == "ok"), default=0)
    if hs and Tcap and Tcap <= max(hs) * d:
        notes.append(
            f"Z has T = {Tcap} rows and H d = {max(hs)} * {d} = {max(hs) * d} columns: its rank is at most "
            f"min(T, h d); where it reaches T, the certificate memorises all T examples and more data could "
            "certify more"
        )
    if shared_context:
        notes.append(
            "shared context: every example uses the context E_0 of the first example, with its own query; "
            "Proposition 2 says rank(Z) <= h (n - 1) + 1 for any weights"
        )
        if hs and Tcap and all(min(Tcap, h * d) <= h * (n - 1) + 1 for h in hs):
            notes.append(
                f"with T = {Tcap}, min(T, h d) <= h (n - 1) + 1 for every h asked for, so the check cannot fail "
                "here; raise " + Param("limit") + " or use fewer heads for an informative test"
            )
    return notes


def _block_of(block: int | None, layer: int | None) -> int:
    """``block`` (or the deprecated ``layer``, same meaning), checked; default
    :data:`~mhaaudit.defaults.CAPACITY_BLOCK` (2: see there why).

    Raises:
        InputError: when ``block`` and ``layer`` are both given and differ, or the block is not an integer of at
            least 1.
    """
    if layer is not None:
        warnings.warn(
            "capacity_audit(layer=K) is deprecated; use block=K (the same: the attention block K, whose input "
            "is the output of block K - 1)",
            DeprecationWarning,
            stacklevel=4,
        )  # past capacity_audit and its torchrun wrapper
        if block is not None and block != layer:
            raise InputError(
                Param("block") + f" {block} and " + Param("layer") + f" {layer} disagree; give only " + Param("block")
            )
        block = layer
    return integer(Param("block"), CAPACITY_BLOCK if block is None else block)


@shared
def capacity_audit(
    model: str | ModelRequest,
    *,
    heads: str | Sequence[int] | int | None = None,
    attention: str = "model",
    shared_context: bool = False,
    from_path: str | Path | None = None,
    variants: Sequence[str] | None = None,
    block: int | None = None,
    layer: int | None = None,
    data: str | DataRequest | None = None,
    settings: Settings | None = None,
    seeds: str | Sequence[int] | None = None,
    vary: str = "both",
    weights: str | None = None,
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
    progress: bool | None = None,
    weights_seed: int | None = None,
    data_seed: int | None = None,
) -> CapacityResult | SeedsResult:
    """Bound and certify the memorisation capacity of each column (random and/or trained weights).

    The assumptions are audited on the input of one attention block, or read from a results file.
    Settings built from the keywords stop each test once it is decided. See :mod:`mhaaudit.request`
    for a keyword given beside a request object.

    Args:
        model: an alias, a hub id or a local folder, or a :class:`~mhaaudit.request.ModelRequest` (no ``query_index``).
        heads: the head counts h to certify with the first h heads (``"1-12"``; default: all heads).
        attention: ``"model"`` (the block's own key and query weights) or ``"random"``.
        shared_context: every example shares one context (Proposition 2's setting).
        from_path: a results file of ``mhaaudit check --out`` to read the assumptions from.
        variants: the columns, ``random`` and/or ``trained`` (default both).
        block: the audited attention block (default :data:`~mhaaudit.defaults.CAPACITY_BLOCK`).
        layer: a deprecated alias of ``block``.
        data: the data source, or a :class:`~mhaaudit.request.DataRequest` (None: the built-in data).
        settings: the :class:`~mhaaudit.settings.Settings` (None: built from the keywords).
        seeds: run once per seed, with rank(Z) per seed and its spread.
        vary: what ``seeds`` vary, as in :func:`mhaaudit.audit`.
        weights: a local folder or file of trained weights.
        backend: ``"hf"`` or ``"timm"`` (None: detected).
        context_length: the tokens per example n of a text model.
        revision: a branch, tag or commit of a hub model.
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
        progress: show progress bars on stderr.
        weights_seed: the seed of the random weights, set apart from ``seed``.
        data_seed: the seed of the data, set apart from ``seed``.

    Returns:
        A :class:`CapacityResult`, or a :class:`mhaaudit.seeds.SeedsResult` with ``seeds``.

    Raises:
        InputError: for a bad argument: ``seeds`` with ``from_path``, ``samples`` or ``threshold`` with
            ``from_path``, an unknown attention or variant, head counts below 1, a ``query_index``, a keyword
            that disagrees with an object beside it; a results file that cannot be read or holds other examples.
        OfflineError: when random weights cannot be had offline (trained ones leave their column unavailable).
        ModelError: when the model has no query token of its own.
    """
    keywords = dict(
        weights=weights,
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
        progress=progress,
        weights_seed=weights_seed,
        data_seed=data_seed,
    )
    settings, request, data_req = _requests(build_requests(model, data, settings, keywords))
    over = plan_for(settings, seeds, vary)
    if over is not None and from_path is not None:
        raise InputError(
            Param("seeds")
            + " has no effect with "
            + Param("from_path")
            + ": the assumptions are read from one run's file"
        )
    blk = _block_of(block, layer)
    attention = choice(Param("attention"), attention, ATTENTION)
    vs = _variants(variants, request)
    if from_path is not None and (samples is not None or threshold is not None):
        raise InputError(
            Param("samples") + " and " + Param("threshold") + " have no effect with " + Param("from_path") + ": "
            "Assumption 1 is read from the file, "
            "not sampled"
        )
    head_counts(heads)  # syntax and sizes below 1, before any work; the model's head count is checked once known
    plan = _Plan(
        request,
        data_req,
        settings,
        blk,
        heads,
        attention,
        flag(Param("shared_context"), shared_context),
        *_read_from(from_path, data_req, request, "trained" in vs),
    )

    def run(plan: _Plan) -> CapacityResult:
        result = _run(plan, vs)
        if block is None and layer is None:
            result.notes.insert(0, (CAPACITY_BLOCK_WHY))
        result.settings = replace(result.settings, distributed=JobFacts.of(describe()))
        return result

    if over is None:
        return run(plan)
    asked = {"model": request, "data": data_req, "settings": settings, "variants": vs}
    asked |= {"block": blk, "heads": heads, "attention": attention, "shared_context": plan.shared_context}
    return capacity_seeds(
        lambda **seeds: run(replace(plan, settings=settings.with_(**seeds))), over, data_req.data, asked
    )


def _variants(variants, request: ModelRequest) -> list[str]:
    """The columns asked for (default both); trained weights without the trained column are refused.

    Raises:
        InputError: when a variant is unknown, or ``weights_path`` is given without the trained column.
    """
    vs = [choice("variant", v, VARIANTS) for v in split_list(variants) or VARIANTS]  # named as the records name them
    if request.weights_path is not None and "trained" not in vs:
        raise InputError(
            Param("weights") + " has no effect without the trained column; add trained to " + Param("variants")
        )
    return vs


def _read_from(from_path, data: DataRequest, model: ModelRequest, trained: bool) -> tuple[Path | None, Any]:
    """``from_path`` and the check results read from it (of a series, for the checkpoint that the trained weights
    of ``model`` are), checked against the examples asked for (None, None without a file)."""
    if from_path is None:
        return None, None
    from_results = read_check_results(from_path, model.weights_path or model.revision, trained=trained)
    check_same_examples(from_path, from_results, limit=data.limit)
    return Path(from_path), from_results


def _requests(req: Requests) -> tuple[Settings, ModelRequest, DataRequest]:
    """The settings, model and data of a capacity run; a query token named by the request is refused.

    Raises:
        InputError: when the model request names a ``query_index``.
    """
    if req.model.query_index is not None:
        raise InputError(
            Param("query_index")
            + ": capacity reads the model's own query token; check and kruskal "
            + Param("model")
            + " take "
            + Param("query_index")
            + " K"
        )
    return req.settings, req.model, req.data


def _run(plan: _Plan, variants: list[str]) -> CapacityResult:
    with read_once():  # a weights file's shapes: read for its check before the first column, kept for its load
        result, spent = phases.recorded(lambda: _run_timed(plan, variants))
    result.timings = spent
    return result


def _run_timed(plan: _Plan, variants: list[str]) -> CapacityResult:
    """The capacity audit of :func:`_run`, its phases (the capture's) timed by the recording open around it.

    Raises:
        OfflineError: when no column could be loaded.
    """
    if "trained" in variants:  # a weights file of another width: refused before the first column
        plan.request.check_weights_fit(plan.settings)
    columns: list[CapacityColumn] = []
    notes: list[str] = []
    info_d: ModelFacts | None = None
    data_name, hs, head_dim = "", None, None
    for variant in variants:
        col, info, name, col_hs, dh = _column(plan, variant, notes)
        columns.append(col)
        if col.batch is not None and plan.data.batch_size == "auto":  # the other weights: the same batch
            plan = replace(plan, data=replace(plan.data, batch_size=col.batch.size))
        if col.status != "ok":
            continue
        if info is not None and (info_d is None or variant == "random"):
            info_d = info
        data_name, hs, head_dim = name, col_hs, dh
    if info_d is None:
        raise OfflineError(columns[0].reason if columns else f"{plan.request.model}: no column could be loaded")
    notes.extend(_run_notes(info_d, columns, hs, plan.shared_context))
    batch = next((c.batch for c in columns if c.batch is not None), None)
    s = plan.settings
    blk = plan.block
    settings = CapacitySettings(
        layer=blk,
        attention=plan.attention,
        shared_context=plan.shared_context,
        heads=tuple(hs) if hs is not None else None,
        head_dim=head_dim,
        samples=s.samples,
        threshold=s.threshold,
        seed=s.seed,
        **{k: v for k, v in s.as_dict().items() if k in ("weights_seed", "data_seed")},
        device=s.device_name,
        limit=plan.data.limit,
        batch_size=batch.size if batch is not None else plan.data.batch_size,
        batch_size_choice=batch.how if batch is not None else None,
        from_path=str(plan.from_path) if plan.from_path is not None else None,
        z_tolerance=s.rule(torch.float64).describe() + " (Z is computed in float64 from the tokens)",
        assumption_tolerance=s.rule(torch.float32).describe(),
        tokens=f"input of block {blk} (layer {blk - 1}: "
        + ("the embedding output" if blk == 1 else f"the output of block {blk - 1}")
        + ")",
    )
    return CapacityResult(
        model=plan.request.model,
        info=info_d,
        data=data_name,
        columns=columns,
        settings=settings,
        timings={},  # the run's phases, once it ends (:func:`_run`)
        notes=notes,
    )
