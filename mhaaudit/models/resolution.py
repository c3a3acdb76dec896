"""Which model a name means: :func:`resolve` turns a name (an alias, a hub id, a timm name, a local
folder or file) into a :class:`~.registry.ModelSpec` from the registry's tables, without building
anything and without calling the hub; :func:`modality_of` says whether a model takes images or text
before it is loaded.

The backend is ``timm`` for a ``timm:`` prefix, a timm model name, a timm checkpoint file (its
parameter names read) or a folder saved in timm's format (``config.json`` with ``"architecture"``),
else ``transformers``.
"""

from __future__ import annotations

import os
from pathlib import Path

from .. import files
from ..errors import InputError, MhaauditError, ModelError, Param
from ..hub import is_offline
from .checkpoints import state_file_keys
from .registry import ALIASES, ModelSpec, _modality_of_type, is_path_like, is_timm_folder_config, read_json, timm_family

__all__ = ["modality_of", "resolve"]


def _timm_name(name: str) -> str | None:
    """The timm model name when ``name`` names a timm architecture, else None."""
    if name.startswith("timm:"):
        return name[5:]
    if "/" in name or name in ALIASES:
        return None
    try:
        import timm

        return name if timm.is_model(name) else None
    except Exception:  # noqa: BLE001  # pragma: no cover - timm missing
        return None


def _looks_like_timm_path(path: str) -> bool:
    """A local folder/file saved in timm's format, or a bare checkpoint file (timm's way to ship one)."""
    p = Path(path)
    data = read_json((p if p.is_dir() else p.parent) / "config.json")
    return p.is_file() if data is None else is_timm_folder_config(data)


# State-dict keys that mark a timm ViT checkpoint (as opposed to a transformers one).
_TIMM_KEY_PREFIXES = ("blocks.", "patch_embed.", "module.blocks.")


def _is_timm_checkpoint(path: str | None) -> bool:
    if not path or not os.path.isfile(path):
        return False

    return any(k.startswith(_TIMM_KEY_PREFIXES) for k in state_file_keys(path))


def resolve(name: str, *, backend: str | None = None, weights_path: str | None = None) -> ModelSpec:
    """The :class:`ModelSpec` of a model name: an alias, hub id, timm name, local folder or file.

    ``backend`` ("hf" or "timm") forces a backend; by default it is detected. ``weights_path``
    matters for an alias with a timm version given a timm checkpoint file (then timm is used),
    and gives the family of a hub id when it is a folder with a ``config.json``.
    """
    name = name.strip()
    alias = ALIASES.get(name.lower())
    if alias is not None:
        return _resolve_alias(name, alias, backend, weights_path)
    if is_path_like(name):
        return _resolve_path(name, backend)
    timm_name = _timm_name(name) if backend != "hf" else None
    if backend == "timm" or timm_name is not None:
        timm_name = timm_name or (name[5:] if name.startswith("timm:") else name)
        return ModelSpec(name, "timm", timm_name, timm_family(timm_name), "image")
    weights_cfg = read_json(Path(weights_path) / "config.json") if weights_path else None
    family = _model_type(weights_cfg, weights_path) if weights_cfg and not is_timm_folder_config(weights_cfg) else None
    if family:
        return ModelSpec(name, "hf", name, family, _modality_of_type(family))
    return ModelSpec(name, "hf", name)


def _resolve_alias(name: str, alias: dict, backend: str | None, weights_path: str | None) -> ModelSpec:
    """An alias's transformers model, or its timm version when asked for or given a timm checkpoint.

    Raises:
        ModelError: when the timm backend is wanted and the alias has no timm version.
    """
    timm_wanted = backend == "timm" or (backend is None and "timm" in alias and _is_timm_checkpoint(weights_path))
    if timm_wanted and "timm" not in alias:
        raise ModelError(f"alias {name} has no timm version; use the transformers backend")
    resolved = alias["timm"] if timm_wanted else alias["hf"]
    return ModelSpec(name, "timm" if timm_wanted else "hf", resolved, alias["family"], alias["modality"], alias)


def _model_type(config: dict | None, folder) -> str | None:
    """The ``model_type`` a folder's ``config.json`` names (None: no config, or none named).

    Raises:
        ModelError: when it names something other than a string.
    """
    family = config.get("model_type") if config else None
    if family is not None and not isinstance(family, str):
        raise ModelError(f"{folder}: config.json's model_type must be a string, got {type(family).__name__}")
    return family or None


# The file a folder of saved features holds (``features.FEATURES_FILE``, written by ``check --save-features``).
_SAVED_FEATURES = "features.safetensors"


def _resolve_path(name: str, backend: str | None) -> ModelSpec:
    """A local folder or file: timm's format when asked for or saved so, else a transformers folder.

    Raises:
        InputError: when the file is a ``.npy`` file, or the folder one of saved features without a config.json
            (features, which ``estimate_kruskal_rank`` audits).
        ModelError: when the path is neither a folder nor a regular file, or its config's model_type is no string.
    """
    path = os.path.abspath(os.path.expanduser(name))
    if os.path.exists(path) and not os.path.isdir(path):
        files.regular_file(path, ModelError)  # a named pipe would block the loader, a device never end
        if path.lower().endswith(".npy"):  # NumPy's format holds one array, never a model: features given as one
            raise InputError(
                f"{name} is a .npy file, which holds features, not a model: audit it with " + Param("kruskal_features")
            )
    if (
        os.path.isdir(path)
        and not os.path.exists(os.path.join(path, "config.json"))
        and os.path.isfile(os.path.join(path, _SAVED_FEATURES))
    ):
        raise InputError(
            f"{name} is a folder of saved features ({_SAVED_FEATURES}), not a model: audit it with "
            + Param("kruskal_features")
        )
    if backend == "timm" or (backend is None and _looks_like_timm_path(path)):
        return ModelSpec(name, "timm", path, None, "image", local=True)
    data = read_json(Path(path) / "config.json")
    family = _model_type(data, path)
    return ModelSpec(name, "hf", path, family, _modality_of_type(family) if family else None, local=True)


def modality_of(model: str, backend: str | None = None, weights_path: str | None = None) -> str:
    """``"image"`` or ``"text"``: what ``model`` takes, decided from its name or config without building it.

    A hub id whose family the name does not tell is looked up in the hub's config (the local
    cache when offline). A name that cannot be resolved gives ``"image"``: loading the model
    then reports the real problem.
    """
    name = model.strip()
    alias = ALIASES.get(name.lower())
    if alias is not None:
        return alias["modality"]
    try:
        spec = resolve(name, backend=backend, weights_path=weights_path)
    except MhaauditError:
        return "image"
    if spec.modality is not None:
        return spec.modality
    if spec.local:
        return "image"  # no config.json: the loader says what is missing
    try:
        from transformers import AutoConfig

        # Never the repository's own code here (nor a prompt asking for it): the loader decides that.
        cfg = AutoConfig.from_pretrained(spec.resolved, local_files_only=is_offline(), trust_remote_code=False)
        return _modality_of_type(getattr(cfg, "model_type", ""))
    except Exception:  # noqa: BLE001 - the loader reports the real problem with this name
        return "image"
