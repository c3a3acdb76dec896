"""The weights of a transformers model: where they come from (:class:`_Weights`), the model built
with them from a folder, a single state file or the hub, or with random weights.
"""

from __future__ import annotations

import contextlib
import copy
import os
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .. import phases
from ..errors import ModelError, one_line
from ..feature_files import torch_load_reason
from ..files import native_name
from ..staging import scratch_folder
from .checkpoints import checkpoint_header, is_ignorable, load_fitting, read_state, state_shapes
from .families import family_of
from .hf_config import _auto_config, alias_config, hub_problem
from .hub_reads import _Hub, hub_words, offline_weights_error, random_words
from .misfit import first_misfit, parameters_missing, shape_misfit
from .random_init import build_random, init_seed, reinit_hf, seeded
from .registry import (
    BLOCK_PATHS,
    ModelSpec,
)
from .shards import (
    SAFETENSORS_DTYPES,
    Checkpoint,
    NotPartial,
    WeightsRead,
    empty_init,
    read_index,
    saved_names,
)

_FIT_FIELDS = ("model_type", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size")


@dataclass(frozen=True)
class _Weights:
    """Where the weights come from: a local folder or a hub id (``hub``), a single file, or nowhere (random)."""

    description: str
    folder: str | None = None
    file: str | None = None
    hub: bool = False


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
            "hub": random_words(spec.resolved, hub.revision, False),
            "cache": random_words(spec.resolved, hub.revision, True),
        }[source]
        return cfg, _Weights(origin)
    if weights_path is None:
        if source == "folder":
            return cfg, _Weights(f"local folder {spec.resolved}", folder=spec.resolved)
        return cfg, _Weights(hub_words(spec.resolved, hub.revision, hub.offline), folder=spec.resolved, hub=True)
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


def model_shapes(cfg: Any, trust_remote_code: bool) -> tuple[dict[str, tuple[int, ...]], str] | None:
    """The shapes of the state dict of the model ``cfg`` builds, and the prefix a checkpoint of its task model
    puts before its tensor names: built on the meta device (no memory taken, nothing drawn), to hold a
    checkpoint's tensors against before any is read. Each tensor is there under its name in the model and, where
    the library writes it under another (``shards.saved_names``: ViT's ``layers.0.attention.q_proj.weight`` is
    written ``encoder.layer.0.attention.attention.query.weight``), under that name too, as a load reads either.
    None when it cannot be built here (the load says why)."""
    from transformers import AutoModel

    try:
        with torch.device("meta"), empty_init():
            module = AutoModel.from_config(cfg, trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - remote code not trusted, a config the library refuses: the build says
        return None
    shapes = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    saved = saved_names(module, set(shapes))
    shapes |= {saved[k]: shape for k, shape in shapes.items() if saved[k] not in shapes}
    return shapes, getattr(module, "base_model_prefix", "") or ""


def config_shapes(config: dict, trust_remote_code: bool) -> tuple[dict[str, tuple[int, ...]], str] | None:
    """:func:`model_shapes` of the model a ``config.json``'s contents build (for a two-tower model, its probed
    tower's); None when they build none here."""
    from transformers import AutoConfig

    cfg: Any
    try:
        cfg = AutoConfig.for_model(**config)
    except Exception:  # noqa: BLE001 - a config the library refuses: the load says why
        return None
    fam = family_of(str(config.get("model_type")))
    if fam is not None and fam.tower is not None:
        cfg = getattr(cfg, fam.tower, None)
    return None if cfg is None else model_shapes(cfg, trust_remote_code)


def alias_fit(alias: dict, trust_remote_code: bool) -> tuple[dict, tuple[dict[str, tuple[int, ...]], str] | None]:
    """What trained weights given beside an alias are held against, as a run of them holds them: the fields of its
    built-in config (``hf_config.alias_config``) that weights with a config of their own must share
    (:data:`_FIT_FIELDS`, named as that config's ``config.json`` names them; such weights are then built from their
    own config, :func:`_weights_origin`), and :func:`model_shapes` of the model the built-in config builds, which a
    weights file without a config must fit (:func:`refuse_unfitting_file`). Known offline, before any model is built."""
    cfg = alias_config(alias)
    names = getattr(cfg, "attribute_map", None) or {}
    fields = {names.get(f, f): getattr(cfg, f, None) for f in _FIT_FIELDS}
    return {k: v for k, v in fields.items() if v is not None}, model_shapes(cfg, trust_remote_code)


def refuse_unfitting_file(path: str, cfg: Any, name: str, trust_remote_code: bool) -> None:
    """Refuse, before any weights are read or any model is built, the single weights file ``path`` holding a
    tensor of another shape than the model ``cfg`` builds has for it (a checkpoint of another width): a file
    carries no config to compare, its tensors' shapes are all it says of the model it is. A file whose shapes
    cannot be had without reading its data (a torch file in the legacy form that torch's fake tensors cannot read:
    ``checkpoints.state_shapes``) is checked when it is loaded.

    Raises:
        ModelError: naming the first such tensor, or when the file cannot be read.
    """
    shapes = state_shapes(path)
    expected = model_shapes(cfg, trust_remote_code) if shapes else None
    misfit = first_misfit(shapes, *expected) if shapes and expected else None
    if misfit is not None:
        raise ModelError(f"the weights in {path} do not fit {name}: {shape_misfit(*misfit)}")


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


#: The weights a local folder holds, as ``from_pretrained`` looks for them: safetensors before torch's pickle, one file
#: before a sharded checkpoint's index (whose shards it reads).
_WEIGHT_LAYOUTS = (
    ("model.safetensors", "model.safetensors.index.json"),
    ("pytorch_model.bin", "pytorch_model.bin.index.json"),
)


def _weight_files(folder: str) -> list[str]:
    """The files ``from_pretrained`` reads the weights of the local ``folder`` from; not the other files a training
    checkpoint keeps beside them (``optimizer.pt``, ``rng_state.pth``, ``training_args.bin``)."""
    for single, index in _WEIGHT_LAYOUTS:
        if os.path.isfile(os.path.join(folder, single)):
            return [os.path.join(folder, single)]
        if os.path.isfile(os.path.join(folder, index)):
            _doc, weight_map = read_index(os.path.join(folder, index), folder)
            return [os.path.join(folder, fn) for fn in sorted(set(weight_map.values()))]
    return []


def _stored_dtype(files: list[str]) -> str | None:
    """The dtype(s) the weight ``files`` store, joined by "+", most bytes first (as a partial read reports them),
    from their headers (the ones the load read, within ``file_reads.read_once``) or a memory-mapped look at the
    torch files (no tensor data read); None when a file cannot say (a torch file in the legacy format, which
    cannot be mapped)."""
    nbytes: dict[str, int] = {}
    try:
        for f in files:
            if f.endswith(".safetensors"):
                for key, entry in checkpoint_header(f).items():
                    if key != "__metadata__":
                        dt = SAFETENSORS_DTYPES.get(entry["dtype"], str(entry["dtype"]).lower())
                        nbytes[dt] = nbytes.get(dt, 0) + entry["data_offsets"][1] - entry["data_offsets"][0]
                continue
            state = torch.load(f, map_location="cpu", mmap=True, weights_only=True)
            for v in state.values() if isinstance(state, dict) else ():
                if isinstance(v, torch.Tensor):
                    dt = str(v.dtype).removeprefix("torch.")
                    nbytes[dt] = nbytes.get(dt, 0) + v.numel() * v.element_size()
    except Exception:  # noqa: BLE001 - the load itself succeeded: a file that cannot say leaves the dtype unknown
        return None
    return "+".join(sorted(nbytes, key=lambda d: -nbytes[d])) or None


def whole_read(path: str | None, cfg: Any) -> WeightsRead | None:
    """What a whole load read: the weight files of a local folder (:func:`_weight_files`) or a single file (None
    from the hub), and the dtype they store (the config's where a file cannot say)."""
    if path is None or not os.path.exists(path):
        return None
    files = [path] if os.path.isfile(path) else _weight_files(path)
    size = sum(os.path.getsize(f) for f in files)
    stored = _stored_dtype(files) or getattr(cfg, "dtype", None) or getattr(cfg, "torch_dtype", None) or "unknown"
    # the tensors are from_pretrained's to read, all of them, uncounted: none is known (not 0 read)
    return WeightsRead("whole", str(stored).removeprefix("torch."), size, size, len(files), len(files), None, None)


def _from_pretrained(spec: ModelSpec, origin: _Weights, cfg: Any, hub: _Hub) -> nn.Module:
    from transformers import AutoModel

    folder, kw = origin.folder, hub.kwargs(local=not origin.hub)
    assert folder is not None, "called for weights in a folder or hub repository"
    try:  # a local folder by a name safetensors takes, whatever bytes its own holds (a hub id is UTF-8: itself)
        with native_name(folder) as name:
            module, info = AutoModel.from_pretrained(name, config=cfg, output_loading_info=True, **kw)
    except OSError as exc:
        problem = hub_problem(exc, spec.name, hub.revision)
        if problem is not None:
            raise problem from exc
        if hub.offline and origin.hub:
            raise offline_weights_error(spec.name, spec.resolved, hub.revision) from exc
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
    sd, wrapped = read_state(path)
    prefix = getattr(module, "base_model_prefix", "") or ""
    own = module.state_dict()
    if prefix and not any(k in own for k in sd) and any(k.startswith(prefix + ".") for k in sd):
        sd = {k[len(prefix) + 1 :]: v for k, v in sd.items() if k.startswith(prefix + ".")}
    try:
        load_fitting(module, sd, f"the weights in {path} do not fit {name}")
        return module
    except ModelError as direct_error:
        odd = [k for k, v in sd.items() if v.is_complex()]
        # from_pretrained would cast a complex tensor into the real parameter its renamed key names: staged
        # without them, the load tells whether any was needed (a parameter is then missing)
        staged_sd = {k: v for k, v in sd.items() if not v.is_complex()} if odd else (sd if wrapped else None)
        why: list[str] = []
        staged = _load_file_as_checkpoint(path, cfg, seed, trust_remote_code, staged_sd, why)
        if staged is None and odd:
            raise ModelError(
                f"the checkpoint {path} holds complex values ({str(odd[0])[:80]}) and does not fit {name} without "
                f"them ({one_line(direct_error, 160)}); a model's weights are real"
            ) from direct_error
        if staged is None and why:  # read under the library's names: what it lacks there, not every renamed name
            raise ModelError(f"the weights in {path} do not fit {name}: {why[0]}") from direct_error
        if staged is None:
            raise direct_error
        return staged


def _load_file_as_checkpoint(
    path: str,
    cfg: Any,
    seed: int,
    trust_remote_code: bool = False,
    unwrapped: dict | None = None,
    why: list[str] | None = None,
) -> nn.Module | None:
    """Load a single weights file through ``from_pretrained`` (checkpoint key renaming, task-head
    prefixes), staged in a scratch folder beside its config (removed at the end, or by
    ``staging.abandon`` when a signal ends the process first). ``unwrapped``: the state dict to stage in the
    file's place (the one a training checkpoint wraps, or the file's real tensors only). None when it does not
    fit; then, when the library read it and found parameters missing or of another shape, ``why`` (when given)
    is told which, in words."""
    from transformers import AutoModel

    fname = "model.safetensors" if path.endswith(".safetensors") else "pytorch_model.bin"
    with scratch_folder("mhaaudit-weights-") as folder:
        tmp = str(folder)
        if unwrapped is not None:  # the file itself is no checkpoint from_pretrained reads
            torch.save(unwrapped, os.path.join(tmp, "pytorch_model.bin"))
        else:
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
    missing = sorted(k for k in info.get("missing_keys", []) if not is_ignorable(k))
    mismatched = list(info.get("mismatched_keys") or [])
    if missing or mismatched:
        if why is not None:
            first = mismatched[0][0] if mismatched and isinstance(mismatched[0], (tuple, list)) else None
            written = saved_names(module, set(missing[:1])).get(missing[0], missing[0]) if missing else None
            stored = f", stored as {written}" if written is not None and written != missing[0] else ""
            why.append(
                parameters_missing(missing, stored)
                if missing
                else f"{len(mismatched)} parameter(s) of the wrong shape (e.g. {first or mismatched[0]})"
            )
        return None
    return module
