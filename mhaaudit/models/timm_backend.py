"""The timm backend: ViT-style timm models by name, from a local folder, or from a checkpoint file.

A :class:`~.registry.ModelSpec` with backend ``timm`` becomes a :class:`~.probe.ProbedModel`:

- the architecture is the timm model name, or the ``"architecture"`` (and ``"model_args"``) of
  a folder's ``config.json`` in timm's format, with a checkpoint file in it or beside it;
- token transformers with a patch embedding and a flat list of blocks can be probed (ViT, DeiT,
  DINOv2, EVA-02, BEiT, SigLIP, ...; the structure is checked on a model built on the meta device,
  which allocates nothing). The query is the class token (token 0, before any distillation or
  register tokens); a model without one (SigLIP, ``class_token=False``) has no query token of
  its own and needs ``--query-index``;
- trained weights come from a checkpoint file (timm's own filter adapts other layouts) or the
  hub; random weights are drawn as :mod:`.random_init` says; ``max_layer`` builds that many blocks;
- images are preprocessed with timm's data config at the resolution the model was built for.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import InputError, ModelError, Param, one_line
from ..files import native_name, regular_file
from ..hub import force_offline_env, is_offline
from .checkpoints import fake_read, find_checkpoint, is_ignorable, load_fitting, state_shapes
from .families import query_words
from .file_reads import once
from .hub_reads import offline_weights_error
from .misfit import first_misfit, parameters_missing, shape_misfit
from .plan import LoadPlan
from .probe import ModelInfo, ProbedModel, measure_image_tokens, prepare_module
from .random_init import init_seed, reinit_timm, seeded
from .registry import ConfigFields, ModelSpec, check_config_numbers, read_json, supported_families, timm_family_of
from .shards import check_links_inside

#: Tensors' names and shapes (a checkpoint's, a model's).
Shapes = dict[str, tuple[int, ...]]

# timm's build arguments that size the model, and their transformers names (see check_config_numbers).
_TIMM_SIZES = {
    "embed_dim": "hidden_size",
    "num_heads": "num_attention_heads",
    "depth": "num_hidden_layers",
    "img_size": "image_size",
    "patch_size": "patch_size",
    "in_chans": "num_channels",
}

__all__ = ["load"]

_NEEDED = ("patch_embed", "blocks", "forward_features")


@dataclasses.dataclass(frozen=True)
class _Arch:
    """A timm architecture: its model name, the arguments to build it with, and a local checkpoint."""

    name: str
    model_args: dict
    file: str | None = None


def import_libraries() -> None:
    """Import timm (and torchvision with it; the caller times it)."""
    import timm  # noqa: F401


def load(spec: ModelSpec, plan: LoadPlan) -> ProbedModel:
    """Build the timm model ``spec`` names as ``plan`` says, ready for probing (its hub options do
    not apply to timm: :func:`~.load.check_hub_options` refuses them before).

    Raises:
        InputError: when ``plan`` sets a context length (image models take n from the image size).
        ModelError: when timm does not know the architecture.
    """
    import timm

    if plan.context_length is not None:
        raise InputError("context length applies to text models only; image models take n from the image size")
    offline = is_offline()
    if offline:
        force_offline_env()
    arch = _architecture(spec, plan.weights, plan.weights_path)
    if not timm.is_model(arch.name):
        raise ModelError(f"unknown timm model {arch.name!r}: not in timm.list_models()")
    _check_model_args(arch, spec.name)
    full_layers, heads, d, head_dim, shape = _shape(arch, spec.name)
    family, fam = timm_family_of(arch.name)
    query_index = 0 if shape.class_token else None
    why = fam.no_query or f"{arch.name} has no class token (global_pool={shape.pool!r})"
    max_layer = plan.max_layer
    built = full_layers if max_layer is None or max_layer >= full_layers else max(1, max_layer)
    model, wsource = _build(spec, arch, plan, built, full_layers, offline, shape.block_seeded)
    model = prepare_module(model, plan.device)
    info = ModelInfo(
        name=spec.name,
        resolved=arch.name if arch.file is None else spec.resolved,
        backend="timm",
        family=family,
        modality="image",
        d=d,
        n=0,
        query_index=query_index,
        num_layers=full_layers,
        num_heads=heads,
        head_dim=head_dim,
        weights=plan.weights,
        weights_source=wsource,
        positions=shape.positions,
        query_token=query_words(query_index, 0, modality="image", why=why),
    )
    pm = ProbedModel(
        info,
        model,
        plan.device,
        blocks=model.blocks,
        image_transform=_transform(model, spec.name),
        forward=lambda inputs: model.forward_features(inputs["pixel_values"]),
        config=getattr(model, "pretrained_cfg", None),
    )
    measure_image_tokens(pm, shape.patches)
    return pm


def check_weights(spec: ModelSpec, plan: LoadPlan) -> None:
    """:func:`load`'s checks of a trained weights file in safetensors form, with no tensor's data read and no
    memory allocated: its tensors' names and shapes as they load (:func:`meta_fit`) against the model built on
    the meta device, so that a run refuses a file of another width or architecture before its first column
    (``models.load.check_weights_fit``). A torch file gives the state the load takes from it
    (:func:`torch_state_shapes`: EMA weights first, with fake tensors). Left to the load: a file that cannot be read
    so, a filter that needs the tensors' values, and the parameters of blocks after the first, which a run may not
    build.

    Raises:
        InputError: as :func:`load` for the model's name, folder or arguments.
        ModelError: when a tensor has another shape than the model's of its name, or a parameter is missing,
            in the words :func:`~.checkpoints.load_fitting` gives when the file is loaded; when its header cannot
            be read or an entry of it is malformed (:func:`~.checkpoints.header_shapes`).
    """
    arch = _architecture(spec, plan.weights, plan.weights_path)
    if plan.weights != "trained" or not (plan.weights_path or arch.file):
        return
    path = os.path.abspath(plan.weights_path or arch.file or "")
    fit = meta_fit(spec)
    # a header no load reads (each entry checked): refused before any work; a torch file as the load picks its state
    shapes = state_shapes(path) if path.endswith(".safetensors") else torch_state_shapes(path)
    if fit is None or shapes is None:
        return
    own, params, loaded = fit
    state = loaded(shapes)
    if state is None:
        return
    misfit = f"the checkpoint {path} does not fit {spec.name}"
    wrong = first_misfit(state, own, "")
    if wrong is not None:
        raise ModelError(f"{misfit}: {shape_misfit(*wrong)}")
    later = re.compile(r"^blocks\.([1-9]\d*)\.")
    missing = [k for k in params if k not in state and not is_ignorable(k) and not later.match(k)]
    if missing:
        raise ModelError(f"{misfit}: {parameters_missing(missing)}")


def torch_state_shapes(path: str) -> Shapes | None:
    """The names and shapes of the state the load takes from the torch file ``path`` (timm's ``load_state_dict``:
    its EMA weights first, then ``state_dict`` or ``model``, a parallel run's ``module.`` prefix dropped), read with
    fake tensors (torch's ``FakeTensorMode``: each storage on the meta device, whatever size the file claims, and
    not one byte of the tensors' data read; its pickle unpickled with ``weights_only=True``:
    ``models.checkpoints.fake_read``). None where it cannot be read so, or holds more than tensors: the load reads
    it, and says what is wrong with it. Read once within ``models.file_reads.read_once``."""
    from timm.models import load_state_dict

    def read() -> Shapes | None:
        regular_file(path, ModelError)
        sd = load_state_dict(path, use_ema=True, device="meta", weights_only=True)
        if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
            return None
        return {str(k): tuple(v.shape) for k, v in sd.items()}

    try:
        return once("timm state shapes", path, lambda: fake_read(read))
    except OSError:  # the file cannot be looked up: the load says so
        return None


def meta_fit(spec: ModelSpec) -> tuple[Shapes, list[str], Callable[[Shapes], Shapes | None]] | None:
    """What a checkpoint of the timm model ``spec`` is held to before it is read: the shapes of the model's
    tensors and the names of its parameters (its full depth, built on the meta device: nothing is allocated), and
    the names and shapes a checkpoint's tensors load into it as, from their names and shapes alone (timm's
    ``clean_state_dict``, then the model's own checkpoint filter, run on tensors of the meta device; None where the
    filter needs the tensors' values). None when timm does not know the architecture (the load says so).

    Raises:
        InputError, ModelError: as :func:`load`, for the model's name, folder or arguments.
    """
    import timm
    from timm.models import clean_state_dict

    arch = _architecture(spec, "random", None)
    if not timm.is_model(arch.name):
        return None
    _check_model_args(arch, spec.name)
    model = _meta_model(arch.name, json.dumps(arch.model_args, sort_keys=True))
    filt = getattr(sys.modules.get(type(model).__module__), "checkpoint_filter_fn", None)

    def loaded(shapes: Shapes) -> Shapes | None:
        try:  # sizes no tensor has (an overflow), or a filter that reads values: the load reads the tensors
            with torch.device("meta"):
                state = clean_state_dict({k: torch.empty(shape) for k, shape in shapes.items()})
            state = filt(state, model) if filt is not None else state
        except Exception:  # noqa: BLE001
            return None
        return {k: tuple(v.shape) for k, v in state.items()}

    own = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    return own, [k for k, _ in model.named_parameters()], loaded


@functools.lru_cache(maxsize=4)
def _meta_model(name: str, model_args: str) -> Any:
    """The timm model ``name`` built with ``model_args`` (JSON) on the meta device: kept for a series' checkpoints."""
    import timm

    with torch.device("meta"):
        return timm.create_model(name, pretrained=False, num_classes=0, **json.loads(model_args))


def _architecture(spec: ModelSpec, weights: str, weights_path: str | None) -> _Arch:
    """The timm name, build arguments and local checkpoint of a name, folder or checkpoint file.

    Raises:
        InputError: when a local path does not exist or its config.json names no architecture.
        ModelError: when the config's architecture is not a string or its model_args not an object,
            or trained weights are asked for and the folder holds no checkpoint file.
    """
    if not spec.local:
        return _Arch(spec.resolved, {})
    path = spec.resolved
    if not os.path.exists(path):
        raise InputError(f"no such timm model, folder or file: {spec.name}")
    if os.path.isdir(path):
        check_links_inside(path)  # as a transformers folder: no link leading out, no pipe or device
    else:
        regular_file(path, ModelError)
    folder = Path(path) if os.path.isdir(path) else Path(path).parent
    data = read_json(folder / "config.json") or {}
    if not data.get("architecture"):
        raise InputError(
            f"cannot tell the timm architecture of {spec.name}: give the timm model name as the model and "
            "the checkpoint file as " + Param("weights")
        )
    args = data.get("model_args") or {}
    if not isinstance(data["architecture"], str) or not isinstance(args, dict):
        raise ModelError(
            f'the config of {spec.name} is malformed: it needs an "architecture" name and a "model_args" object'
        )
    # timm's names for the sizes the transformers check knows, checked before anything is built
    check_config_numbers(
        ConfigFields({hf: args[t] for t, hf in _TIMM_SIZES.items() if t in args}),
        spec.name,
        shown={hf: t for t, hf in _TIMM_SIZES.items()},
    )
    file = path if os.path.isfile(path) else find_checkpoint(folder)
    if weights == "trained" and weights_path is None and file is None:
        raise ModelError(f"no checkpoint file found in {folder}")
    return _Arch(data["architecture"], dict(args), file)


# Arguments of timm's builder (create_model, build_model_with_cfg) and of the model classes that name
# files, downloads or where tensors go: never taken from a folder's config.json (a checkpoint_path
# there would make timm open any file on the machine).
_REFUSED_ARGS = frozenset(
    {
        "pretrained",
        "pretrained_cfg",
        "pretrained_cfg_overlay",
        "checkpoint_path",
        "cache_dir",
        "pretrained_strict",
        "pretrained_filter_fn",
        "pretrained_model_args",
        "feature_cfg",
        "features_only",
        "model_cfg",
        "kwargs_filter",
        "scriptable",
        "exportable",
        "no_jit",
        "num_classes",
        "device",
        "dtype",
    }
)


def _constructor_args(cls: type) -> set[str]:
    """The named arguments of a model class's constructor (through the classes it passes ``**kwargs`` to)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters.values()
        names |= {p.name for p in params if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names


def _check_model_args(arch: _Arch, name: str) -> None:
    """Check, before timm builds anything, that a folder's ``model_args`` are arguments of the architecture's
    own model class (an allow-list: what sizes and shapes the model), never the builder's (files, downloads,
    the device); the class is found from a build on the meta device with timm's defaults (nothing allocated,
    nothing read).

    Raises:
        ModelError: when ``model_args`` names an argument that is not the model class's, or one of the builder's.
    """
    if not arch.model_args:
        return
    import timm

    with torch.device("meta"):
        cls = type(timm.create_model(arch.name, pretrained=False, num_classes=0))
    allowed = _constructor_args(cls) - _REFUSED_ARGS
    refused = sorted(k for k in arch.model_args if k not in allowed)
    if refused:
        raise ModelError(
            f"the config of {name} is refused: its model_args name {', '.join(map(repr, refused[:5]))}, "
            f"which {'is not an argument' if len(refused) == 1 else 'are not arguments'} of timm's {cls.__name__} "
            "that mhaaudit passes on (only the architecture's own sizes and options are, never a file, "
            "a download or the device)"
        )


@dataclasses.dataclass(frozen=True)
class _Shape:
    """What the built model shows: a class token, its patch count, the positions layer 0 carries."""

    class_token: bool
    pool: str
    patches: int | None
    positions: str
    block_seeded: bool  # random init re-drawn block by block (timm VisionTransformer)


def _shape(arch: _Arch, name: str) -> tuple[int, int, int, int, _Shape]:
    """(blocks, heads, d, head_dim, shape) of the full-depth model, read from a build on the meta device."""
    import timm

    probe: Any
    with torch.device("meta"):
        probe = timm.create_model(arch.name, pretrained=False, num_classes=0, **arch.model_args)
    _check_structure(probe, name)
    attn = probe.blocks[0].attn
    heads = int(getattr(attn, "num_heads", 1))
    d = int(probe.embed_dim if hasattr(probe, "embed_dim") else probe.num_features)
    patches = getattr(probe.patch_embed, "num_patches", None)
    shape = _Shape(
        class_token=getattr(probe, "cls_token", None) is not None,
        pool=str(getattr(probe, "global_pool", "")),
        patches=int(patches) if patches else None,
        positions=_positions(probe),
        block_seeded=_block_seeded(probe),
    )
    return len(probe.blocks), heads, d, int(getattr(attn, "head_dim", d // heads)), shape


def _block_seeded(model: nn.Module) -> bool:
    from timm.models.vision_transformer import VisionTransformer

    return isinstance(model, VisionTransformer) and hasattr(model, "weight_init_mode")


def _positions(model: Any) -> str:
    """What the embedding output carries about positions: learned (added), and what acts inside the attention."""
    inside = []
    if getattr(model, "rope", None) is not None:
        inside.append("rotary")
    if getattr(model, "rel_pos_bias", None) is not None or any(
        getattr(getattr(b, "attn", None), "relative_position_bias_table", None) is not None for b in model.blocks
    ):
        inside.append("relative")
    if getattr(model, "pos_embed", None) is not None:
        return " + ".join(["learned", *inside])
    return inside[0] if inside else "none"


# The timm models below are typed Any: what they hold (blocks, patch_embed, ...) is checked by
# _check_structure at run time, not declared by their classes.
def _check_structure(model: nn.Module, name: str) -> None:
    blocks = getattr(model, "blocks", None)
    if (
        not all(hasattr(model, a) for a in _NEEDED)
        or not isinstance(blocks, (nn.ModuleList, nn.Sequential))
        or not all(hasattr(b, "attn") for b in blocks)
    ):
        raise ModelError(
            f"{name} cannot be probed: timm {type(model).__name__} is not a ViT-style token transformer "
            f"(needs a patch embedding and a flat list of attention blocks; supported: {supported_families('image')})"
        )


def _build(
    spec: ModelSpec, arch: _Arch, plan: LoadPlan, built: int, full_layers: int, offline: bool, block_seeded: bool
) -> tuple[Any, str]:
    """(model with ``built`` blocks and its weights, where the weights came from).

    Random weights of a model whose init :func:`.random_init.reinit_timm` re-draws block by block
    are drawn at the depth built; other models (EVA, BEiT) are drawn at full depth and cut, so
    that their first blocks do not depend on how many are built.

    Raises:
        offline_weights_error: its :class:`~mhaaudit.errors.OfflineError`, when trained hub weights
            are asked for offline.
        ModelError: when a weights folder holds no checkpoint file.
    """
    import timm

    weights, weights_path, seed = plan.weights, plan.weights_path, plan.seed
    if weights == "trained" and weights_path is None and arch.file is None:
        if offline:
            raise offline_weights_error(spec.name, f"timm {arch.name}")
        model = timm.create_model(arch.name, pretrained=True, num_classes=0, **arch.model_args)
        _truncate(model, built)
        return model, f"timm pretrained {arch.name} (hub)"
    cut = built < full_layers and (weights != "random" or block_seeded)
    kwargs = dict(arch.model_args, **({"depth": built} if cut else {}))
    with seeded(init_seed(seed)):
        model = timm.create_model(arch.name, pretrained=False, num_classes=0, **kwargs)
    if weights == "random":
        reinit_timm(model, seed)
        _truncate(model, built)
        return model, f"random init of timm {arch.name}" + (
            f" (config from {spec.resolved})" if arch.model_args else ""
        )
    source = weights_path or arch.file
    assert source is not None, "trained weights without a file come from the hub (returned above)"
    path = os.path.abspath(source)
    if os.path.isdir(path):
        found = find_checkpoint(path)
        if found is None:
            raise ModelError(f"no checkpoint file (model.safetensors, pytorch_model.bin) in {path}")
        path = found
    _load_file(model, path, built, spec.name)
    return model, f"timm checkpoint {path}"


def _truncate(model: Any, built: int) -> None:
    """Keep the first ``built`` blocks of ``model`` (in the container type it had)."""
    if len(model.blocks) > built:
        model.blocks = type(model.blocks)(list(model.blocks)[:built])


def _load_file(model: nn.Module, path: str, built: int, name: str) -> None:
    """Load a timm checkpoint (EMA weights when present) into a model with ``built`` blocks.

    Raises:
        ModelError: when the file cannot be read or its weights do not fit the model.
    """
    from timm.models import clean_state_dict, load_state_dict

    try:
        regular_file(path, ModelError)
        with native_name(path) as native:
            if native != path and path.endswith(".safetensors"):  # timm picks its reader by the name's suffix
                from safetensors.torch import load_file

                sd = clean_state_dict(load_file(native, device="cpu"))  # as timm reads a safetensors file
            else:
                sd = load_state_dict(path, use_ema=True, weights_only=True)  # timm's default was weights_only=False
    except Exception as exc:  # unreadable file
        raise ModelError(f"cannot read the timm checkpoint {path}: {one_line(exc, 160)}") from exc
    filt = getattr(sys.modules.get(type(model).__module__), "checkpoint_filter_fn", None)
    if filt is not None:
        try:
            sd = filt(sd, model)
        except Exception as exc:
            raise ModelError(f"the checkpoint {path} does not fit {name}: {one_line(exc, 160)}") from exc
    pat = re.compile(r"^blocks\.(\d+)\.")
    sd = {k: v for k, v in sd.items() if not ((m := pat.match(k)) and int(m.group(1)) >= built)}
    load_fitting(model, sd, f"the checkpoint {path} does not fit {name}")


def _transform(model: nn.Module, name: str):
    """timm's preprocessing for ``model``, at the resolution it was built for: a function from a list
    of images to one B x 3 x H x W tensor.

    Raises:
        ModelError: when timm cannot build the preprocessing.
    """
    import timm.data

    try:
        data_cfg = timm.data.resolve_data_config({}, model=model)
        img_size = getattr(getattr(model, "patch_embed", None), "img_size", None)
        if img_size is not None and tuple(data_cfg["input_size"][1:]) != tuple(img_size):
            # The pretrained config may describe another resolution than the one the model was built for.
            data_cfg["input_size"] = (data_cfg["input_size"][0], *tuple(img_size))
        tf = timm.data.create_transform(**data_cfg)
    except Exception as exc:
        raise ModelError(f"{name}: cannot build timm preprocessing ({one_line(exc, 120)})") from exc

    def transform(images: list) -> torch.Tensor:
        return torch.stack([tf(im) for im in images])

    return transform
