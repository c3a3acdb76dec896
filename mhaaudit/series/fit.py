"""What a local checkpoint must be for a series to audit it as the model's, read cheaply before any work.

- :func:`header_shapes`: a safetensors file's header read alone, and refused when it cannot describe the
  tensors it holds (a dtype safetensors does not store, a shape that is not a list of sizes, a tensor whose
  bytes are not its shape times its dtype's width);
- :func:`model_fit`: what each checkpoint is held against, as a single run holds its weights: the model's
  config and tensors' shapes (an alias's from its built-in config, so known offline too; a timm model's from a
  build on the meta device, a checkpoint's safetensors shapes taken as they load into it, through the model's
  own checkpoint filter: ``models.timm_backend.meta_fit``);
- :func:`refuse_unlike_model`: a checkpoint folder's ``config.json`` against the model's. A series builds
  each checkpoint's model from the model's configuration (as a single ``check MODEL --weights FOLDER`` of a
  local MODEL does, held to the same rule in ``models.hf``), so a checkpoint whose own configuration
  computes otherwise (another activation, normalisation epsilon or width: any key both configs hold, but
  those that do not change what the probed blocks compute from the weights, ``models.hf_config.computes``)
  would be audited as what it is not (an alias's checkpoint with a config of its own is built from it, and held
  only as a single run holds such weights: :func:`model_fit`);
- :func:`refuse_checkpoint_code`: a checkpoint folder whose ``auto_map`` asks for code of its own, named
  as the checkpoint (not the model), unless that code is trusted;
- :func:`torch_shapes`: a torch checkpoint's (``pytorch_model.bin``, ``.pt``) tensors' names and shapes, from
  its pickle alone; :func:`refuse_unfitting`: a checkpoint whose tensors are of other shapes than the model's.

What cannot be read cheaply is checked when the checkpoint is read: a torch file that torch's fake tensors
cannot read (``models.checkpoints.state_shapes``, ``models.timm_backend.torch_state_shapes``).
"""

from __future__ import annotations

import os

from ..errors import InputError, MhaauditError, ModelError, Param, one_line
from ..files import read_json
from ..hub import is_offline
from ..models import resolve
from ..models.checkpoints import DTYPE_BITS, state_shapes
from ..models.checkpoints import header_shapes as checked_header_shapes
from ..models.hf_config import config_difference, repository_code
from ..models.hf_weights import alias_fit, config_shapes
from ..models.misfit import first_misfit
from ..models.shards import hub_download
from ..models.timm_backend import meta_fit, torch_state_shapes
from ..request import ModelRequest

__all__ = [
    "DTYPE_BITS",
    "as_loaded",
    "form_of",
    "header_shapes",
    "model_config",
    "model_fit",
    "refuse_checkpoint_code",
    "refuse_unfitting",
    "refuse_unlike_model",
    "torch_shapes",
    "weights_shapes",
]


def header_shapes(name: str, path: str) -> dict[str, tuple[int, ...]]:
    """The names and shapes of the tensors of the safetensors file ``path`` of the checkpoint ``name``,
    from its header alone, each tensor's entry checked (``models.checkpoints.header_shapes``: a dtype of
    :data:`DTYPE_BITS`, a shape of sizes and data offsets that span exactly its shape times its dtype's width). Read
    once within ``models.file_reads.read_once``: a series' run reads each header once, for this and its later reads.

    Raises:
        InputError: when the header cannot be read, is not a safetensors header, or an entry is malformed.
    """
    try:
        return checked_header_shapes(path)
    except (ValueError, TypeError, AttributeError) as exc:
        raise InputError(Param("checkpoints") + f" {name}: cannot read {_base(path)} ({one_line(exc, 160)})") from exc


def torch_shapes(name: str, path: str) -> dict[str, tuple[int, ...]] | None:
    """The names and shapes of the tensors of the torch checkpoint file ``path`` (``.bin``, ``.pt``) of the
    checkpoint ``name``, read without their data (``models.checkpoints.state_shapes``: its pickle alone, with
    ``weights_only``; in the legacy form, with fake tensors); None for a file in torch's legacy form that cannot be
    read so, whose shapes are known only when it is loaded.

    Raises:
        InputError: when the file cannot be read as a torch checkpoint, or holds no state dict of tensors.
    """
    try:
        return state_shapes(path)
    except ModelError as exc:
        raise InputError(Param("checkpoints") + f" {name}: {one_line(exc, 240)}") from None


def as_loaded(shapes: dict[str, tuple[int, ...]], loads: tuple | None) -> dict[str, tuple[int, ...]]:
    """A checkpoint's tensors' ``shapes`` named as the model's tensors they load into (``loads``: the model's
    shapes and its checkpoints' name prefix, ``models.hf_weights.config_shapes``; None: as they are). A task
    model's save (``transformer.h.0.attn.c_attn.weight``) and a base model's (``h.0.attn.c_attn.weight``) of one
    model then name each tensor alike; a prefixed copy beside the name of its own loads into nothing and is kept."""
    if loads is None or not loads[1]:
        return shapes
    expected, prefix = loads
    out = {}
    for key, shape in shapes.items():
        bare = key.removeprefix(prefix + ".")
        out[bare if bare != key and bare in expected and bare not in shapes else key] = shape
    return out


def form_of(path: str) -> str:
    """The form a weights file stores its tensors in: ``safetensors``, else ``torch`` (a pickle)."""
    return "safetensors" if path.lower().endswith(".safetensors") else "torch"


def weights_shapes(name: str, path: str, base: ModelRequest | None = None) -> dict[str, tuple[int, ...]] | None:
    """The names and shapes of the tensors of the weights file ``path`` of the checkpoint ``name``, read without
    their data: :func:`header_shapes` or :func:`torch_shapes` by its form (None: a torch file in the legacy form
    that cannot be read without its data). A timm model's file (``base``, :func:`_timm_model`) gives the names
    and shapes its tensors load as (``models.timm_backend.meta_fit``; None where its filter needs their values): a
    torch file's from the state timm's load picks from it (``models.timm_backend.torch_state_shapes``: its EMA
    weights first; None where it cannot be read so).

    Raises:
        InputError: when the file cannot be read in its form.
    """
    if form_of(path) == "safetensors":
        shapes = header_shapes(name, path)
        fit = _timm_fit(base) if base is not None else None
        return shapes if fit is None else fit[2](shapes)
    if base is None or not _timm_model(base):
        return torch_shapes(name, path)
    fit, picked = _timm_fit(base), torch_state_shapes(path)  # the state timm's load picks, with fake tensors
    return None if fit is None or picked is None else fit[2](picked)


def _timm_fit(base: ModelRequest):
    """``models.timm_backend.meta_fit`` of ``base`` where it names a timm model timm knows; else None (a model
    of transformers, or one the run refuses, saying why)."""
    try:
        spec = resolve(base.model, backend=base.backend)
        return meta_fit(spec) if spec.backend == "timm" else None
    except (MhaauditError, OSError, ValueError):
        return None


def _timm_model(base: ModelRequest) -> bool:
    """Whether ``base`` names a timm model, whose loader reads a torch checkpoint its own way: its EMA weights
    first (a training checkpoint may hold no other), a parallel run's ``module.`` prefix dropped, names and shapes
    remapped by the model's filter. What :func:`torch_shapes` reads (the state dict a transformers load reads) is
    then not what loads: such a file is read as timm's load reads it (``models.timm_backend.torch_state_shapes``)."""
    try:
        return resolve(base.model, backend=base.backend).backend == "timm"
    except (MhaauditError, OSError, ValueError):  # a name no backend takes: the run says so
        return False


def refuse_unfitting(name: str, shapes: dict[str, tuple[int, ...]], model: str, expected) -> None:
    """Refuse the checkpoint ``name`` holding a tensor of another shape than the model ``model`` has for it
    (``expected``: ``models.hf_weights.config_shapes`` of the model's config, or None: nothing to hold it
    against): a weights file carries no config, so its shapes are what says it is of another width.

    Raises:
        InputError: naming the first such tensor.
    """
    misfit = first_misfit(shapes, *expected) if expected is not None else None
    if misfit is not None:
        key, have, want = misfit
        raise InputError(
            Param("checkpoints") + f" {name} does not fit the model {model}: its tensor {key} has shape {have}, the "
            f"model's {want}; a series audits every checkpoint in the model's architecture"
        )


def _base(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def model_fit(base: ModelRequest, volatile: frozenset[str]) -> tuple[dict | None, tuple | None, bool]:
    """What each checkpoint of the model ``base`` is held against before any work, as a single run of it holds its
    weights: the config whose keys a checkpoint's ``config.json`` must share (:func:`refuse_unlike_model`), the
    model's tensors' shapes and its checkpoints' name prefix (:func:`refuse_unfitting`; ``models.hf_weights.
    config_shapes``), and whether a checkpoint with a config of its own is built from that config. An alias's are
    those of its built-in config, which builds its model beside trained weights (``models.hf_weights.alias_fit``):
    known offline, and a checkpoint with a config is built from its own, so only its width and depth are the
    alias's to say (its shapes are held against the first checkpoint's). A timm model has no config to compare,
    and its tensors' shapes are those of its build on the meta device (``models.timm_backend.meta_fit``). Another
    model's are its :func:`model_config` (None each when it has none here), which builds every checkpoint."""
    trust = bool(base.trust_remote_code)
    try:
        spec = resolve(base.model, backend=base.backend)
    except (MhaauditError, OSError, ValueError):  # a name no backend takes: the run says so
        spec = None
    if spec is not None and spec.backend == "timm":  # its tensors' shapes from a build on the meta device
        fit = _timm_fit(base)
        return None, None if fit is None else (fit[0], ""), False
    if spec is not None and spec.alias is not None and spec.backend == "hf":
        config, shapes = alias_fit(spec.alias, trust)
        return config, shapes, True
    own = model_config(base, volatile)
    return own, config_shapes(own, trust) if own is not None else None, False


def model_config(base: ModelRequest, volatile: frozenset[str]) -> dict | None:
    """The model's ``config.json`` less the ``volatile`` keys: a local folder's, or a hub model's (from the
    local cache offline); None when the model has none to read (a timm model, an alias not in the local cache
    offline: :func:`model_fit` holds an alias's checkpoints against its built-in config) or it cannot be had
    here (the run that needs it says why)."""
    if base.backend == "timm":
        return None
    try:
        spec = resolve(base.model, backend=base.backend)
        if spec.local:
            path: str | None = os.path.join(spec.resolved, "config.json") if os.path.isdir(spec.resolved) else None
        else:
            path = hub_download(spec.resolved, "config.json", base.revision, is_offline())
        data = read_json(path, InputError, "config.json") if path is not None and os.path.isfile(path) else None
    except (MhaauditError, OSError, ValueError):
        return None
    if not isinstance(data, dict) or "model_type" not in data:
        return None
    return {k: v for k, v in data.items() if k not in volatile}


def refuse_unlike_model(name: str, config: dict, model: str, model_cfg: dict, own: bool = False) -> None:
    """Refuse the checkpoint ``name`` whose config (less the keys every save rewrites) differs from the model
    ``model``'s in a key both hold that the audit computes with (``models.hf_config.config_difference``). ``own``:
    the checkpoint is built from its own config (an alias's, :func:`model_fit`), so ``model_cfg`` holds only what a
    single run holds such weights to, and the line gives that run's reason, not the model's configuration's.

    Raises:
        InputError: when ``model_type`` differs (another family), a width key (another width), or any other such key.
    """
    difference = config_difference(config, model_cfg, model)
    if difference is not None:
        why = (
            f"its weights do not fit {model}, as a single run of {model} with them (" + Param("weights") + f" {name}) "
            "finds"
            if own
            else "a series audits every checkpoint with the model's configuration, so its records would not be this "
            "checkpoint's"
        )
        raise InputError(
            Param("checkpoints") + f" {name} {difference}; " + why + ". Name the model it was trained from, or audit "
            f"it as a model of its own (check {name})"
        )


def refuse_checkpoint_code(name: str, folder: str, trusted: bool) -> None:
    """Refuse, unless ``trusted``, the checkpoint folder whose config files' ``auto_map`` asks for code of its own.

    Raises:
        ModelError: naming the checkpoint, the file and the module it names.
    """
    code = [] if trusted else repository_code(folder)
    if code:
        fn, module = code[0]
        raise ModelError(
            Param("checkpoints") + f" {name} needs code from its own folder to load (the auto_map of its {fn} names "
            f"{module}); pass " + Param("trust_remote_code") + " if you trust that code (it runs on this machine)"
        )
