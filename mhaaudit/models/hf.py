"""The transformers backend: config, weights, tokenizer and image preprocessing of a hub model.

A :class:`~.registry.ModelSpec` with backend ``hf`` becomes a :class:`~.probe.ProbedModel`:

- the config comes from a local folder, the alias table (random weights, offline), the hub or
  the local cache; a weights folder with its own config must agree with it;
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

import contextlib
import copy
import dataclasses
import inspect
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .. import phases
from ..errors import InputError, MhaauditError, ModelError, OfflineError, one_line
from ..hub import force_offline_env, is_offline
from ..io import torch_load_reason
from .checkpoints import is_ignorable, load_fitting, offline_weights_error, read_state_file
from .families import Family, embedding_positions, family_of, query_words
from .plan import LoadPlan
from .probe import ModelInfo, ProbedModel, measure_image_tokens, prepare_module
from .random_init import build_random, init_seed, reinit_hf, seeded
from .registry import (
    BLOCK_PATHS,
    ConfigFields,
    ModelSpec,
    alias_list,
    check_config_numbers,
    classify_config,
    is_timm_folder_config,
    read_json,
    supported_families,
)
from .shards import (
    Checkpoint,
    NotPartial,
    WeightsRead,
    check_links_inside,
    check_local_indexes,
    empty_init,
    used_parameters,
)

__all__ = ["find_blocks", "image_transform", "load", "load_tokenizer"]

_ENCODER_DEFAULT_MAX_N = 512
_DECODER_DEFAULT_MAX_N = 1024  # the paper's GPT-2 context; decoders with longer positions take --context-length
_TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "tokenizer.model",
    "sentencepiece.bpe.model",
)
_FIT_FIELDS = ("model_type", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size")
# The largest side, in pixels, of the images a model's preprocessing makes (and the most pixels it may
# ask for): its preprocessor_config.json (or config.json's image_size) is refused beyond it, before an
# image is resized (a 100-byte file asking for 20000 x 20000 images makes 4.8 GB of floats per image).
MAX_INPUT_SIDE = 4096
# The files of a model folder whose ``auto_map`` makes transformers import Python code from the folder.
_CODE_MAP_FILES = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json")


@dataclass(frozen=True)
class _Weights:
    """Where the weights come from: a local folder or a hub id (``hub``), a single file, or nowhere (random)."""

    description: str
    folder: str | None = None
    file: str | None = None
    hub: bool = False


def import_libraries() -> None:
    """Import what building a transformers model imports in any case (the caller times it)."""
    import huggingface_hub  # noqa: F401
    import transformers.utils.logging  # noqa: F401
    from transformers import AutoConfig, AutoModel  # noqa: F401


def load(spec: ModelSpec, plan: LoadPlan, partial: bool = True) -> ProbedModel:
    """Build the transformers model ``spec`` names as ``plan`` says, ready for probing.

    ``plan.revision`` (a branch, tag or commit of a hub model) and ``plan.trust_remote_code`` go to
    every hub read. Trained weights from a safetensors checkpoint are read only as far as the
    probed blocks need (:mod:`.shards`); ``info.weights_read`` says what was read.

    Raises:
        InputError: when ``plan`` sets a context length for an image model.
        ModelError: when the built model has no list of transformer blocks to probe.
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
    them (code of their own unless trusted, shard indexes, links out of the folder, config numbers)."""
    offline = is_offline()
    if offline:
        force_offline_env()
    hub = _Hub(revision, bool(trust_remote_code), offline)
    for folder in (spec.resolved if spec.local else None, weights_path):
        if folder is not None and os.path.isdir(folder):
            check_links_inside(folder)  # first: nothing is read through a link leading out, nor from a pipe
            if not hub.trust_remote_code:
                refuse_repository_code(folder, spec.name)
            check_local_indexes(folder)
            raw = read_json(os.path.join(folder, "config.json"))
            if raw is not None:
                check_config_numbers(ConfigFields(raw), spec.name)
    return hub


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


@dataclass(frozen=True)
class _Hub:
    """How every hub read is made: at which revision, whether a repository's own code may run, offline."""

    revision: str | None = None
    trust_remote_code: bool = False
    offline: bool = True

    def kwargs(self, local: bool = False) -> dict:
        """Keyword arguments of ``from_pretrained`` (no revision for a local folder)."""
        kw: dict = {"local_files_only": self.offline or local, "trust_remote_code": self.trust_remote_code}
        if self.revision is not None and not local:
            kw["revision"] = self.revision
        return kw


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


def find_blocks(module: nn.Module) -> nn.ModuleList | None:
    """The module's list of transformer blocks, found at one of the registry's block paths."""
    for path in BLOCK_PATHS:
        obj: Any = module
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList) and len(obj) > 0:
            return obj
    return None


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


def _config(spec: ModelSpec, weights: str, weights_path: str | None, hub: _Hub) -> tuple[Any, str]:
    """(config, source) -- source: 'folder' | 'alias' | 'alias-hub' | 'hub' | 'cache' | 'weights'.

    Raises:
        MhaauditError: the project's errors of reading the config, as raised (a revision that does
            not exist, code the repository would run, a malformed config).
        offline_weights_error: its :class:`~mhaaudit.errors.OfflineError`, when an alias's trained
            config is neither cached nor reachable offline.
        ModelError: when an alias's trained config cannot be fetched online.
        _unknown_model: its ModelError or OfflineError, when a hub id's config cannot be had.
    """
    offline = hub.offline
    if spec.local:
        return _folder_config(spec, hub), "folder"
    if spec.alias is not None:
        if weights == "trained" and weights_path is None:
            # Trained weights come with their own config (hub or local cache); decide offline at once.
            try:
                return _auto_config(spec.resolved, spec.name, hub), "alias-hub"
            except MhaauditError:  # a missing revision, code the repository would run: said as such
                raise
            except (OSError, ValueError) as exc:
                if offline:
                    raise offline_weights_error(spec.name, spec.resolved) from exc
                raise ModelError(
                    f"cannot fetch the config of {spec.resolved} for {spec.name}: {one_line(exc, 160)}"
                ) from exc
        from transformers import AutoConfig

        kw = dict(spec.alias["config"])
        return AutoConfig.for_model(kw.pop("model_type"), **kw), "alias"
    if weights_path is not None and os.path.exists(os.path.join(weights_path, "config.json")) and offline:
        # The weights folder carries the architecture; the hub config is not needed.
        try:
            return _auto_config(spec.resolved, spec.name, hub), "cache"
        except MhaauditError:
            raise
        except (OSError, ValueError):
            return _auto_config(weights_path, spec.name, hub, local=True), "weights"
    try:
        return _auto_config(spec.resolved, spec.name, hub), ("cache" if offline else "hub")
    except MhaauditError:
        raise
    except (OSError, ValueError) as exc:
        raise _unknown_model(spec.name, weights, weights_path, offline, exc) from exc


def _auto_config(source: str, name: str, hub: _Hub, local: bool = False) -> Any:
    """``AutoConfig.from_pretrained`` at the run's revision; a revision that does not exist and code
    the repository would have to run are named as such, other failures are the caller's to word.

    Raises:
        InputError: when the hub has no such revision (:func:`hub_problem`).
        ModelError: when the repository's code would have to run without ``trust_remote_code``
            (:func:`hub_problem`), or the config class refuses a field's value.
        OSError: the library's, re-raised, when :func:`hub_problem` does not name it.
        ValueError: the library's, re-raised, likewise.
    """
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source, **hub.kwargs(local))
    except (OSError, ValueError) as exc:
        problem = hub_problem(exc, name, hub.revision)
        if problem is None:
            raise
        raise problem from exc
    except _config_errors() as exc:  # a field of the wrong type, refused by the config class itself
        raise ModelError(f"the config of {name} is malformed: {one_line(exc, 200, first_line=True)}") from exc


def _config_errors() -> tuple[type[BaseException], ...]:
    """The errors a config class raises on values of the wrong type or form."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:  # pragma: no cover - releases without validated configs
        return (TypeError,)
    return (StrictDataclassError, TypeError)


def hub_problem(exc: BaseException, name: str, revision: str | None) -> Exception | None:
    """The one-line error for a revision that does not exist or a model that needs its own code, else None."""
    text = str(exc)
    chain: list[str] = []
    e: BaseException | None = exc
    while e is not None and len(chain) < 8:
        chain.append(type(e).__name__)
        e = e.__cause__ or e.__context__
    if revision is not None and ("RevisionNotFoundError" in chain or "is not a valid git identifier" in text):
        return InputError(f"{{param:revision}} {revision}: no such branch, tag or commit of {name}")
    if "trust_remote_code" in text:
        return ModelError(
            f"{name} needs code from its own repository to load; pass {{param:trust_remote_code}} if you trust "
            f"that code (it runs on this machine)"
        )
    return None


def repository_code(folder: str) -> list[tuple[str, str]]:
    """The code a model folder asks transformers to import: (file, module) for every ``auto_map``
    entry of its config files (a module of another repository is named ``repo--module.py``)."""
    found: list[tuple[str, str]] = []
    for fn in _CODE_MAP_FILES:
        data = read_json(os.path.join(folder, fn))
        amap = data.get("auto_map") if data else None
        if not amap:
            continue
        refs: list[Any] = []  # what the JSON holds: checked below
        for value in amap.values() if isinstance(amap, dict) else amap if isinstance(amap, list) else [amap]:
            refs += value if isinstance(value, (list, tuple)) else [value]
        mods = [r.rsplit(".", 1)[0] + ".py" for r in refs if isinstance(r, str) and r.strip()]
        found += [(fn, m) for m in mods] or [(fn, "auto_map")]  # an auto_map of no usable entry still asks for code
    return found


def refuse_repository_code(folder: str, name: str) -> None:
    """A ModelError, before anything is imported, when ``folder`` carries code of its own for transformers to run.

    Raises:
        ModelError: when a config file's ``auto_map`` names code (:func:`repository_code`).
    """
    code = repository_code(folder)
    if code:
        fn, module = code[0]
        raise ModelError(
            f"{name} needs code from its own folder to load (the auto_map of its {fn} names {module}); "
            f"pass {{param:trust_remote_code}} if you trust that code (it runs on this machine)"
        )


def _folder_config(spec: ModelSpec, hub: _Hub) -> Any:
    name, path = spec.name, spec.resolved
    if not os.path.exists(path):
        raise InputError(f"no such model folder or file: {name}")
    if os.path.isfile(path):
        raise InputError(
            f"{name} is a file; give a transformers model as a folder saved with save_pretrained, "
            f"or a timm checkpoint with backend timm"
        )
    if not os.path.exists(os.path.join(path, "config.json")):
        raise ModelError(f"{name} has no config.json; save transformers models with save_pretrained")
    if is_timm_folder_config(read_json(Path(path) / "config.json")):
        raise ModelError(f"{name} looks like a timm model folder; use backend timm")
    return _auto_config(path, name, hub, local=True)


def _unknown_model(name: str, weights: str, weights_path: str | None, offline: bool, exc: Exception) -> Exception:
    """The error for a hub id whose config cannot be had."""
    if not offline:
        return ModelError(
            f"unknown model {name!r}: not an alias ({alias_list()}), a local folder, a timm model name, "
            f"or a hub id ({one_line(exc, 120)})"
        )
    if weights == "trained" and "/" in name and weights_path is None:
        return offline_weights_error(name, "hub")
    if weights_path is not None:
        return OfflineError(
            f"the architecture of {name} (its config.json) is not in the local cache and the hub cannot be "
            f"reached; name an alias ({alias_list()}) or a local folder with config.json as the model"
        )
    if "/" in name:
        return OfflineError(
            f"the config of {name} is not in the local cache and the hub cannot be reached; "
            f"pass a local folder, or use one of the built-in aliases: {alias_list()}"
        )
    return ModelError(
        f"unknown model {name!r}: not an alias ({alias_list()}), a local folder, a timm model name, "
        f"or a hub id in the local cache"
    )


def _max_positions(cfg: Any) -> int | None:
    mp = getattr(cfg, "max_position_embeddings", None)
    if mp is None:
        mp = getattr(cfg, "n_positions", None)
    if mp is None:
        return None
    mp = int(mp)
    if getattr(cfg, "model_type", "") in ("roberta", "xlm-roberta", "camembert", "longformer"):
        mp -= int(getattr(cfg, "pad_token_id", 1) or 1) + 1  # positions start after the padding index
    return mp


def _tokens(
    cfg: Any, kind: tuple[str, str, bool], fam: Family | None, context_length: int | None, name: str
) -> tuple[int, int | None]:
    """(n, query index): a text model's (:func:`_text_shape`), (0, 0) for an image model until its n is
    measured; no query index for a family without a query token of its own."""
    _, modality, is_decoder = kind
    query_index: int | None
    n, query_index = _text_shape(cfg, is_decoder, context_length, name) if modality == "text" else (0, 0)
    if fam is not None and fam.query == "none":
        query_index = None
    return n, query_index


def _text_shape(cfg: Any, is_decoder: bool, context_length: int | None, name: str) -> tuple[int, int]:
    """(n, query_index) of a text model: the context length, at most the position embeddings.

    Raises:
        InputError: when ``context_length`` exceeds the model's position embeddings.
    """
    maxpos = _max_positions(cfg)
    if context_length is None:
        n = maxpos if maxpos is not None else _ENCODER_DEFAULT_MAX_N
        n = min(n, _DECODER_DEFAULT_MAX_N if is_decoder else _ENCODER_DEFAULT_MAX_N)
    else:
        n = context_length
        if maxpos is not None and n > maxpos:
            raise InputError(f"context length {n} exceeds the {maxpos} position embeddings of {name}")
    return n, (n - 1 if is_decoder else 0)


# ------------------------------------------------------------------ weights


def _weights_origin(
    spec: ModelSpec, cfg: Any, source: str, weights: str, weights_path: str | None, hub: _Hub
) -> tuple[Any, _Weights]:
    """(config, where the weights come from); a weights folder's own config replaces the named one if it fits.

    Raises:
        ModelError: when a weights folder's config differs from the named model's in a size field.
    """
    if weights == "random":
        origin = {
            "alias": f"random init from the built-in {spec.name.lower()} config",
            "folder": f"random init from the config in local folder {spec.resolved}",
            "hub": f"random init from the config of hub {spec.resolved}",
            "cache": f"random init from the config of hub {spec.resolved} (local cache)",
        }[source]
        return cfg, _Weights(origin)
    if weights_path is None:
        if source == "folder":
            return cfg, _Weights(f"local folder {spec.resolved}", folder=spec.resolved)
        where = f"hub {spec.resolved} (local cache)" if hub.offline else f"hub {spec.resolved}"
        return cfg, _Weights(where, folder=spec.resolved, hub=True)
    wp = os.path.abspath(weights_path)
    if os.path.isfile(wp):
        return cfg, _Weights(f"weights file {wp}", file=wp)
    if (Path(wp) / "config.json").exists() and source != "folder":
        wcfg = _auto_config(wp, spec.name, hub, local=True)  # --trust-remote-code reaches it too
        for f in _FIT_FIELDS:
            a, b = getattr(cfg, f, None), getattr(wcfg, f, None)
            if a is not None and b is not None and a != b:
                raise ModelError(
                    f"the weights at {weights_path} do not fit {spec.name}: {f} is {b} there but {a} in {spec.name}"
                )
        cfg = wcfg
    return cfg, _Weights(f"local folder {wp}", folder=wp)


def _build(
    spec: ModelSpec, cfg: Any, origin: _Weights, seed: int, hub: _Hub, max_layer: int | None, partial: bool = True
) -> tuple[nn.Module, Checkpoint | None]:
    """The module built with at most ``max_layer`` blocks, and the checkpoint still to be read into it.

    A safetensors checkpoint (a folder, a hub repository or a single file) is read after building,
    only as far as the probed blocks need (the module is built without drawing weights); other
    checkpoints are loaded here, whole.
    """
    from transformers import AutoModel

    _import_model_code(AutoModel, cfg)
    full_layers = int(cfg.num_hidden_layers)
    if max_layer is not None and max_layer < full_layers:
        cfg = copy.deepcopy(cfg)
        cfg.num_hidden_layers = max(1, max_layer)
    remote = {"trust_remote_code": hub.trust_remote_code}  # always explicit: never left to a prompt
    checkpoint = _checkpoint(origin, hub) if partial else None
    if checkpoint is not None:
        with empty_init():
            return AutoModel.from_config(cfg, **remote), checkpoint
    if origin.folder is not None:
        return _from_pretrained(spec, origin, cfg, hub), None
    if origin.file is not None:
        with seeded(init_seed(seed)):
            module = AutoModel.from_config(cfg, **remote)
        return _load_state_file(module, origin.file, cfg, spec.name, seed, hub.trust_remote_code), None

    def redraw(module: nn.Module) -> None:
        blocks = find_blocks(module)
        if blocks is not None:
            reinit_hf(module, blocks, seed, full_layers)

    return build_random(lambda: AutoModel.from_config(cfg, **remote), redraw, seed), None


def _import_model_code(auto: Any, cfg: Any) -> None:
    """Import the modelling code of ``cfg``'s architecture (transformers imports it on first use),
    timed as the run's imports; a config it does not know is left for the build to report."""
    with phases.phase("imports"), contextlib.suppress(Exception):  # remote code, an unknown config: the build says
        auto._model_mapping[type(cfg)]


def _checkpoint(origin: _Weights, hub: _Hub) -> Checkpoint | None:
    """The safetensors checkpoint the trained weights come from, or None (random weights, or a
    checkpoint that is read whole)."""
    try:
        if origin.file is not None:
            return Checkpoint.file(origin.file) if origin.file.endswith(".safetensors") else None
        if origin.folder is None:
            return None
        if origin.hub:
            return Checkpoint.hub(origin.folder, hub.revision, hub.offline)
        return Checkpoint.local(origin.folder)
    except NotPartial:
        return None


def whole_read(path: str | None, cfg: Any) -> WeightsRead | None:
    """What a whole load read: every checkpoint file of a local folder or a single file (None from the hub)."""
    if path is None or not os.path.exists(path):
        return None
    files = (
        [path]
        if os.path.isfile(path)
        else [
            os.path.join(path, f)
            for f in sorted(os.listdir(path))
            if f.endswith((".safetensors", ".bin", ".pth", ".pt"))
        ]
    )
    size = sum(os.path.getsize(f) for f in files)
    stored = getattr(cfg, "dtype", None) or getattr(cfg, "torch_dtype", None) or "unknown"
    return WeightsRead("whole", str(stored).removeprefix("torch."), size, size, len(files), len(files), 0, None)


def _from_pretrained(spec: ModelSpec, origin: _Weights, cfg: Any, hub: _Hub) -> nn.Module:
    from transformers import AutoModel

    folder, kw = origin.folder, hub.kwargs(local=not origin.hub)
    assert folder is not None, "called for weights in a folder or hub repository"
    try:
        module, info = AutoModel.from_pretrained(folder, config=cfg, output_loading_info=True, **kw)
    except OSError as exc:
        problem = hub_problem(exc, spec.name, hub.revision)
        if problem is not None:
            raise problem from exc
        if hub.offline and origin.hub:
            raise offline_weights_error(spec.name, spec.resolved) from exc
        raise ModelError(f"cannot load weights for {spec.name} from {folder}: {one_line(exc, 240)}") from exc
    except (pickle.UnpicklingError, EOFError) as exc:
        raise ModelError(f"cannot load weights for {spec.name} from {folder}: {torch_load_reason(exc)}") from exc
    except RuntimeError as exc:
        why = _describe_mismatch(folder, cfg, kw) or one_line(exc, 240)
        raise ModelError(f"the weights at {folder} do not fit {spec.name}: {why}") from exc
    missing = [k for k in info.get("missing_keys", []) if not is_ignorable(k)]
    mismatched = list(info.get("mismatched_keys", []))
    if missing or mismatched:
        bad = sorted(missing)[0] if missing else str(mismatched[0])
        raise ModelError(
            f"the weights at {folder} do not fit {spec.name}: {len(missing) + len(mismatched)} parameter(s) "
            f"missing or of the wrong shape (e.g. {bad})"
        )
    return module


def _describe_mismatch(weights_dir: str, cfg: Any, kw: dict) -> str | None:
    """Name the first parameter whose shape differs between a checkpoint and a config."""
    from transformers import AutoModel

    try:
        _m, info = AutoModel.from_pretrained(
            weights_dir, config=cfg, output_loading_info=True, ignore_mismatched_sizes=True, **kw
        )
        mism = list(info.get("mismatched_keys", []))
    except Exception:  # noqa: BLE001 - only used to word an error message
        return None
    if not mism:
        return None
    first = mism[0]
    if isinstance(first, (tuple, list)) and len(first) == 3:
        key, have, want = first
        return (
            f"{len(mism)} parameter(s) of the wrong shape, e.g. {key}: {tuple(have)} in the checkpoint, "
            f"{tuple(want)} expected"
        )
    return f"{len(mism)} parameter(s) of the wrong shape, e.g. {first}"


def _load_state_file(
    module: nn.Module, path: str, cfg: Any, name: str, seed: int, trust_remote_code: bool = False
) -> nn.Module:
    """Load a single weights file into a transformers model, checking that it fits.

    A file in the library's checkpoint format (what save_pretrained writes and the hub serves)
    may name parameters differently from the modules; when the direct load fails, the file is
    loaded through ``from_pretrained``, which renames them.

    Raises:
        ModelError: when the file fits the model neither directly nor through ``from_pretrained``.
    """
    sd = read_state_file(path)
    prefix = getattr(module, "base_model_prefix", "") or ""
    own = module.state_dict()
    if prefix and not any(k in own for k in sd) and any(k.startswith(prefix + ".") for k in sd):
        sd = {k[len(prefix) + 1 :]: v for k, v in sd.items() if k.startswith(prefix + ".")}
    try:
        load_fitting(module, sd, f"the weights in {path} do not fit {name}")
        return module
    except ModelError as direct_error:
        staged = _load_file_as_checkpoint(path, cfg, seed, trust_remote_code)
        if staged is None:
            raise direct_error
        return staged


def _load_file_as_checkpoint(path: str, cfg: Any, seed: int, trust_remote_code: bool = False) -> nn.Module | None:
    """Load a single weights file through ``from_pretrained`` (checkpoint key renaming, task-head
    prefixes), staged in a temporary folder beside its config. None when it does not fit."""
    from transformers import AutoModel

    fname = "model.safetensors" if path.endswith(".safetensors") else "pytorch_model.bin"
    with tempfile.TemporaryDirectory(prefix="mhaaudit-weights-") as tmp:
        try:
            os.symlink(os.path.abspath(path), os.path.join(tmp, fname))
        except OSError:
            shutil.copyfile(path, os.path.join(tmp, fname))
        cfg.to_json_file(os.path.join(tmp, "config.json"))
        try:
            with seeded(init_seed(seed)):
                module, info = AutoModel.from_pretrained(
                    tmp,
                    config=cfg,
                    local_files_only=True,
                    output_loading_info=True,
                    trust_remote_code=trust_remote_code,
                )
        except Exception:  # noqa: BLE001 - the caller reports the direct load's clearer error
            return None
    missing = [k for k in info.get("missing_keys", []) if not is_ignorable(k)]
    if missing or info.get("mismatched_keys"):
        return None
    return module


# ------------------------------------------------------------------ tokenizer and image processor


def load_tokenizer(candidates: list[str], hub: _Hub | None = None) -> object | None:
    """The first usable tokenizer among folders / hub ids, or None (a missing tokenizer is not an error)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:  # pragma: no cover
        return None
    for src in candidates:
        local = os.path.isdir(src)
        # A folder without vocabulary files would give a nearly empty tokenizer, silently.
        if local and not any(os.path.exists(os.path.join(src, f)) for f in _TOKENIZER_FILES):
            continue
        try:
            tok = AutoTokenizer.from_pretrained(src, **(hub or _Hub()).kwargs(local))
        except Exception:  # noqa: BLE001 - a missing tokenizer is not an error here
            continue
        try:
            specials = len(set(getattr(tok, "all_special_tokens", []) or []))
            if len(tok) <= specials + 1:
                continue
        except Exception:  # noqa: BLE001  # pragma: no cover
            pass
        return tok
    return None


def image_transform(
    cfg: Any, family: str, sources: list[str], hub: _Hub | None = None
) -> Callable[[list], torch.Tensor]:
    """The model's own image preprocessing: its saved processor when present, else from the config.

    Raises:
        ModelError: when the preprocessing would make images larger than :data:`MAX_INPUT_SIDE` pixels a side.
    """
    proc = None
    for source in sources:
        local = os.path.isdir(source)
        if local and not os.path.exists(os.path.join(source, "preprocessor_config.json")):
            continue
        try:
            from transformers import AutoImageProcessor

            proc = AutoImageProcessor.from_pretrained(source, **(hub or _Hub()).kwargs(local))
            break
        except Exception:  # noqa: BLE001 - fall back to the config values
            proc = None
    if proc is None:
        from transformers import ViTImageProcessor

        size = getattr(cfg, "image_size", 224)
        h, w = (int(size[0]), int(size[-1])) if isinstance(size, (list, tuple)) else (int(size), int(size))
        norm = family_of(family) or Family(family, "image")
        proc = ViTImageProcessor(size={"height": h, "width": w}, image_mean=norm.mean, image_std=norm.std)
    for what in ("size", "crop_size", "pad_size"):
        value = getattr(proc, what, None)
        try:
            sizes = dict(value) if value is not None and not isinstance(value, (int, float)) else {what: value}
        except (TypeError, ValueError):
            continue
        for key, v in sizes.items():
            limit = MAX_INPUT_SIDE**2 if "pixels" in key else MAX_INPUT_SIDE
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > limit and key != "min_pixels":
                raise ModelError(
                    f"the image preprocessing of {sources[0] if sources else family} asks for {what} {key} = {v}, "
                    f"more than the {limit} {'pixels' if 'pixels' in key else 'pixels a side'} mhaaudit makes images "
                    "of: refused before any image is resized"
                )

    def transform(images: list) -> torch.Tensor:
        return proc(images=images, return_tensors="pt")["pixel_values"]

    return transform
