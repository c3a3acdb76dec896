"""The transformers backend: config, weights, tokenizer and image preprocessing of a hub model.

A :class:`~.registry.ModelSpec` with backend ``hf`` becomes a :class:`~.probe.ProbedModel`:

- the config comes from a local folder, the alias table (random weights, offline), the hub or
  the local cache; a weights folder with its own config must agree with it, and a single weights
  file's tensors' shapes (read without their data) with the model it builds, before it is built;
- trained weights come from a folder, a single state file or the hub: in safetensors form only
  the tensors the probed blocks use are read (:mod:`.shards`); otherwise ``from_pretrained``
  loads a folder, and a single file is loaded directly, or staged beside its config so that
  ``from_pretrained`` renames checkpoint keys; random weights are drawn as :mod:`.random_init` says;
- ``--revision`` and ``--trust-remote-code`` reach every hub read (config, weights, tokenizer);
- ``max_layer`` builds only that many blocks; the n of a text model is the context length
  (at most the position embeddings; encoders default to 512), that of an image model is
  measured on a blank image;
- the tokenizer and the image processor are the model's own when its files have them;
- the family (:mod:`.families`) gives the query token (first, last, or none: SigLIP), the
  positions the embedding output carries, and for a two-tower folder (CLIP, SigLIP) the tower
  that is probed (its vision tower).

When the hub cannot be reached it is never called (``local_files_only=True``).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..errors import InputError, ModelError, Param
from ..hub import force_offline_env, is_offline
from .families import Family, embedding_positions, family_of, query_words
from .hf_config import _config, _tokens, config_difference, refuse_repository_code
from .hf_config import hub_problem as hub_problem
from .hf_config import repository_code as repository_code
from .hf_inputs import MAX_INPUT_SIDE as MAX_INPUT_SIDE
from .hf_inputs import image_transform, load_tokenizer
from .hf_weights import (
    _build,
    _checkpoint,
    _Weights,
    _weights_origin,
    find_blocks,
    refuse_unfitting_file,
    whole_read,
)
from .hub_reads import _Hub
from .plan import LoadPlan
from .probe import ModelInfo, ProbedModel, measure_image_tokens, prepare_module
from .registry import (
    ConfigFields,
    ModelSpec,
    check_config_numbers,
    classify_config,
    read_json,
    read_json_object,
    supported_families,
)
from .shards import (
    Checkpoint,
    NotPartial,
    WeightsRead,
    check_links_inside,
    check_local_indexes,
    used_parameters,
)

__all__ = ["find_blocks", "image_transform", "load", "load_tokenizer"]


def import_libraries() -> None:
    """Import what building a transformers model imports in any case (the caller times it)."""
    import huggingface_hub  # noqa: F401
    import transformers.utils.logging  # noqa: F401
    from transformers import AutoConfig, AutoModel  # noqa: F401


def _prepared(spec: ModelSpec, plan: LoadPlan):
    """What :func:`load` has before it builds the model: the hub options, the (probed tower's) config, its kind
    and family, and where the weights come from; a single weights file's tensors' shapes are held to the
    config's model here (:func:`.hf_weights.refuse_unfitting_file`).

    Raises:
        InputError: when ``plan`` sets a context length for an image model.
        ModelError: when the config's numbers cannot build a model, or a single weights file does not fit it.
    """
    hub = _hub_for(spec, plan.weights_path, plan.revision, plan.trust_remote_code)
    cfg, source = _config(spec, plan.weights, plan.weights_path, hub)
    kind = classify_config(cfg, spec.name)
    family, modality, _ = kind
    if modality == "image" and plan.context_length is not None:
        raise InputError("context length applies to text models only; image models take n from the image size")
    cfg, origin = _weights_origin(spec, cfg, source, plan.weights, plan.weights_path, hub)
    fam = family_of(family)
    if fam is not None and fam.tower is not None:  # a two-tower model: its vision tower is probed
        cfg = getattr(cfg, fam.tower)
    check_config_numbers(cfg, spec.name)
    if plan.weights_path is not None and os.path.isfile(plan.weights_path):  # its shapes, before the model is built
        refuse_unfitting_file(os.path.abspath(plan.weights_path), cfg, spec.name, hub.trust_remote_code)
    return hub, cfg, kind, fam, origin


def check_weights(spec: ModelSpec, plan: LoadPlan) -> None:
    """:func:`load`'s checks of the config and of a single trained weights file (its tensors' shapes), with no
    model built: a run makes them before its first column, so a file of another width is refused before any
    work (:func:`~mhaaudit.models.load.check_weights_fit`).

    Raises:
        InputError: as :func:`load`.
        ModelError: when the config cannot build a model, or the weights file does not fit it.
    """
    _prepared(spec, plan)


def load(spec: ModelSpec, plan: LoadPlan, partial: bool = True) -> ProbedModel:
    """Build the transformers model ``spec`` names as ``plan`` says, ready for probing.

    ``plan.revision`` (a branch, tag or commit of a hub model) and ``plan.trust_remote_code`` go to
    every hub read. Trained weights from a safetensors checkpoint are read only as far as the
    probed blocks need (:mod:`.shards`); ``info.weights_read`` says what was read.

    Raises:
        InputError: when ``plan`` sets a context length for an image model.
        ModelError: when the built model has no list of transformer blocks to probe.
    """
    hub, cfg, kind, fam, origin = _prepared(spec, plan)
    family, modality, _ = kind
    tokens = _tokens(cfg, kind, fam, plan.context_length, spec.name)
    built, checkpoint = _build(spec, cfg, origin, plan.seed, hub, plan.max_layer, partial)
    module = prepare_module(built, plan.device)
    blocks = find_blocks(module)
    if blocks is None:
        raise ModelError(
            f"{spec.name} cannot be probed: no list of transformer blocks found in {type(module).__name__} "
            f"(supported: {supported_families()})"
        )
    sources = list(dict.fromkeys(t for t in (origin.folder, spec.resolved) if t))
    pm = ProbedModel(
        _model_info(spec, cfg, fam, kind, tokens, plan, origin),
        module,
        plan.device,
        blocks=blocks,
        forward=_forward(module, modality),
        config=cfg,
        tokenizer=load_tokenizer(sources, hub) if modality == "text" else None,
        image_transform=image_transform(cfg, family, sources, hub) if modality == "image" else None,
    )
    try:
        read, whole = _read_weights(pm, checkpoint, origin, plan.weights, cfg, spec.name), False
    except NotPartial:  # tensor names this module cannot map: from_pretrained reads it whole
        read, whole = None, True
    if whole:  # the partly read module is let go first (outside the except), so that two models are never held at once
        del pm, module, built, blocks
        return load(spec, plan, partial=False)
    if read is not None:
        pm.info = dataclasses.replace(pm.info, weights_read=read.as_dict())
    if modality == "image":
        size, patch = getattr(cfg, "image_size", 0), getattr(cfg, "patch_size", 0)
        measure_image_tokens(pm, _count(size) // _count(patch) if patch else None)
    return pm


def _hub_for(spec: ModelSpec, weights_path: str | None, revision: str | None, trust_remote_code: bool) -> _Hub:
    """How this load reads the hub; the local folders checked before transformers reads anything from
    them (code of their own unless trusted, shard indexes, links out of the folder, config numbers, and the
    config of a weights folder against a local model's).

    Raises:
        InputError: when a weights folder's config computes otherwise than the local model's
            (``hf_config.config_difference``).
    """
    offline = is_offline()
    if offline:
        force_offline_env()
    hub = _Hub(revision, bool(trust_remote_code), offline)
    raws = []
    for folder in (spec.resolved if spec.local else None, weights_path):
        if folder is not None and os.path.isdir(folder):
            check_links_inside(folder)  # first: nothing is read through a link leading out, nor from a pipe
            is_weights = folder == weights_path
            who = f"the weights folder {folder}" if is_weights else spec.name  # named as given
            if not hub.trust_remote_code:
                refuse_repository_code(folder, who)
            check_local_indexes(folder)
            raw = _weights_config(folder) if is_weights else read_json(os.path.join(folder, "config.json"))
            if raw is not None:
                check_config_numbers(ConfigFields(raw), who)
            raws.append(raw)
    if len(raws) == 2 and raws[0] is not None and raws[1] is not None and weights_path != spec.resolved:
        # a local model's config builds the trained column: weights whose own config computes otherwise are refused
        difference = config_difference(raws[1], raws[0], spec.name)
        if difference is not None:
            raise InputError(
                Param("weights") + f" {weights_path} {difference}; the trained column is built from the model's "
                "configuration, so its records would not be these weights'. Name the model they were trained "
                f"from, or audit the folder as a model of its own (check {weights_path})"
            )
    return hub


def _weights_config(folder: str) -> dict | None:
    """The ``config.json`` of a trained weights folder, None where it has none. It is read whole and must be a
    JSON object: a folder saved with ``save_pretrained`` whose config cannot be read is refused, not read as a
    folder without one (as a checkpoint of a series, ``series.spec``).

    Raises:
        InputError: when the file is there but is not a regular file of a JSON object within the bounds of
            :func:`mhaaudit.files.read_json`.
    """
    try:
        return read_json_object(os.path.join(folder, "config.json"), InputError, "its config.json")
    except InputError as exc:
        raise InputError(Param("weights") + f" {folder}: {exc}") from None


def _model_info(
    spec: ModelSpec,
    cfg: Any,
    fam: Family | None,
    kind: tuple[str, str, bool],
    tokens: tuple[int, int | None],
    plan: LoadPlan,
    origin: _Weights,
) -> ModelInfo:
    """What the loaded model is, from its config and family (before its weights are read);
    ``kind`` is ``classify_config``'s (family, modality, decoder), ``tokens`` (n, query index)."""
    family, modality, is_decoder = kind
    n, query_index = tokens
    d, heads = int(cfg.hidden_size), int(cfg.num_attention_heads)
    return ModelInfo(
        name=spec.name,
        resolved=spec.resolved,
        backend="hf",
        family=family,
        modality=modality,
        d=d,
        n=n,
        query_index=query_index,
        num_layers=int(cfg.num_hidden_layers),
        num_heads=heads,
        head_dim=int(getattr(cfg, "head_dim", None) or d // heads),
        weights=plan.weights,
        weights_source=origin.description,
        positions=embedding_positions(fam, cfg) if fam is not None else "learned",
        query_token=query_words(query_index, n, modality=modality, why=fam.no_query if fam is not None else ""),
        decoder=modality == "text" and is_decoder,
    )


def _read_weights(
    pm: ProbedModel, checkpoint: Checkpoint | None, origin: _Weights, weights: str, cfg: Any, name: str
) -> WeightsRead | None:
    """The trained weights read into ``pm``: in part from a safetensors checkpoint (:class:`NotPartial`
    when its names do not map), else what ``from_pretrained`` read whole; None for random weights."""
    if checkpoint is not None:
        return _read_needed(pm, checkpoint, name)
    return whole_read(origin.file or origin.folder, cfg) if weights == "trained" else None


def _count(size: Any) -> int:
    """The pixel count of an image or patch size given as an int (a square) or a (height, width) pair."""
    return int(size[0]) * int(size[-1]) if isinstance(size, (list, tuple)) else int(size) ** 2


def _read_needed(pm: ProbedModel, checkpoint: Checkpoint, name: str) -> WeightsRead:
    """Read into ``pm`` the tensors its probed blocks use: one forward pass on a tiny input records
    them (see :func:`.shards.used_parameters`). Every other parameter is zero, whatever ``pm`` held."""
    module = pm.module
    with torch.no_grad():
        for t in module.parameters():
            t.zero_()
    return checkpoint.load_into(
        module,
        used_tensors(pm),
        prefix=weights_prefix(pm),
        misfit=f"the weights at {checkpoint.where} do not fit {name}",
    )


read_needed = _read_needed  # the same read into a model built once, for each checkpoint of a series


def used_tensors(pm: ProbedModel) -> set[str]:
    """The names of the parameters and buffers of ``pm`` that its probed blocks use: one forward pass
    on a tiny input, as far as the deepest block built, records them (:func:`.shards.used_parameters`)."""
    if pm.info.modality == "image":
        from PIL import Image

        tiny = pm.preprocess([Image.new("RGB", (64, 64), (128, 128, 128))])
    else:
        tiny = {"input_ids": torch.zeros((1, 2), dtype=torch.long, device=pm.device)}
    return used_parameters(pm.module, lambda: pm.capture(tiny, [pm.built_layers]))


def weights_prefix(pm: ProbedModel) -> str:
    """The prefix a checkpoint of ``pm``'s task model may put before its tensor names (``bert.``, ``vit.``)."""
    return getattr(pm.module, "base_model_prefix", "") or ""


def checkpoint_of(weights_path: str | None = None, *, repo: str | None = None, revision: str | None = None):
    """The safetensors checkpoint of trained weights, read tensor by tensor: a local folder or file
    (``weights_path``), else the hub repository ``repo`` at ``revision`` (the local cache offline).
    None for a checkpoint in another form (loaded whole).

    Raises:
        InputError: when ``revision`` is no branch, tag or commit of ``repo``.
        ModelError: when an index is malformed or names a shard outside the folder, or a header cannot be read.
    """
    if weights_path is not None:
        path = os.path.abspath(os.path.expanduser(weights_path))
        origin = _Weights(path, file=path) if os.path.isfile(path) else _Weights(path, folder=path)
    else:
        origin = _Weights(str(repo), folder=repo, hub=True)
    return _checkpoint(origin, _Hub(revision, False, is_offline()))


def _forward(module: nn.Module, modality: str) -> Callable[[dict], Any]:
    """Run ``module`` on model inputs: one pass without a key/value cache, images at any size."""
    try:
        params = set(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):  # pragma: no cover
        params = set()
    extra: dict = {}
    if modality == "image" and "interpolate_pos_encoding" in params:
        extra["interpolate_pos_encoding"] = True
    if "use_cache" in params:
        extra["use_cache"] = False

    def forward(inputs: dict) -> Any:
        return module(**{**extra, **inputs})

    return forward


# ------------------------------------------------------------------ config


# ------------------------------------------------------------------ weights


# ------------------------------------------------------------------ tokenizer and image processor
