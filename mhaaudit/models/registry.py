"""The model registry: every name mhaaudit resolves, and what it knows about each family.

Everything that decides *which* model a name means lives here, in tables:

- :data:`ALIASES`: short names for the paper's models. Each entry carries the transformers hub
  id, the timm name where there is one, the family, the modality and the config to build it
  from, so that random-init models build offline.
- :data:`FAMILIES` / :data:`TIMM_FAMILIES` (from :mod:`.families`): the families mhaaudit knows,
  each with its query token, the positions its embedding output carries and its image
  normalisation; :data:`UNPROBEABLE`: families known not to fit the theory, with the reason.
- :data:`BLOCK_PATHS`: where transformers models keep their list of blocks.

:func:`~.resolution.resolve` turns a name into a :class:`ModelSpec` (backend, resolved name,
family, modality, alias entry) from these tables, and :func:`~.resolution.modality_of` says whether
a model takes images or text before it is loaded (:mod:`.resolution`, above the checkpoint reading
it needs to tell a timm checkpoint file).

Adding a transformers family is one entry in :data:`FAMILIES`; adding a block layout for reading
attention weights is one file in :mod:`mhaaudit.models.attention`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import files
from ..errors import MhaauditError, ModelError
from .families import FAMILIES, TIMM_FAMILIES, UNPROBEABLE, Family, family_of, timm_family_of

__all__ = [
    "ALIASES",
    "BLOCK_PATHS",
    "FAMILIES",
    "TIMM_FAMILIES",
    "UNPROBEABLE",
    "ConfigFields",
    "Family",
    "ModelSpec",
    "alias_list",
    "check_config_numbers",
    "classify_config",
    "supported_families",
]

# --------------------------------------------------------------------------------------------
# Aliases: the paper's models. The configs are shipped here so random-init models build offline.
# --------------------------------------------------------------------------------------------

ALIASES: dict[str, dict] = {
    "vit-base": {
        "hf": "google/vit-base-patch16-224-in21k",
        "timm": "vit_base_patch16_224",
        "family": "vit",
        "modality": "image",
        "description": "ViT-Base/16 at 224 px (n = 197, d = 768)",
        "config": {"model_type": "vit"},
    },
    "bert-base": {
        "hf": "bert-base-uncased",
        "family": "bert",
        "modality": "text",
        "description": "BERT-Base uncased (d = 768, 512 positions)",
        "config": {"model_type": "bert"},
    },
    "bert-large": {
        "hf": "bert-large-uncased",
        "family": "bert",
        "modality": "text",
        "description": "BERT-Large uncased (d = 1024, 512 positions)",
        "config": {
            "model_type": "bert",
            "hidden_size": 1024,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "intermediate_size": 4096,
        },
    },
    "gpt2": {
        "hf": "gpt2",
        "family": "gpt2",
        "modality": "text",
        "description": "GPT-2 small (d = 768, 1024 positions)",
        "config": {"model_type": "gpt2"},
    },
    "gpt2-large": {
        "hf": "gpt2-large",
        "family": "gpt2",
        "modality": "text",
        "description": "GPT-2 large (d = 1280, 1024 positions)",
        "config": {"model_type": "gpt2", "n_embd": 1280, "n_layer": 36, "n_head": 20},
    },
}

# --------------------------------------------------------------------------------------------
# Families: see .families (one entry per transformers model_type or timm name pattern)
# --------------------------------------------------------------------------------------------

BLOCK_PATHS = (
    "layers",
    "encoder.layer",
    "encoder.layers",
    "h",
    "transformer.h",
    "decoder.layers",
    "transformer.layer",
    "vision_model.encoder.layers",
    "layer",
    "blocks",
)


# The sizes of a config checked before anything is built, each with its upper bound: far above every
# published model, far below what would make a build allocate without end or divide by zero.
_CONFIG_BOUNDS = {
    "hidden_size": 1 << 17,
    "num_attention_heads": 1 << 12,
    "num_key_value_heads": 1 << 12,
    "head_dim": 1 << 14,
    "num_hidden_layers": 1 << 12,
    "intermediate_size": 1 << 20,
    "vocab_size": 1 << 24,
    "max_position_embeddings": 1 << 24,
    "image_size": 1 << 15,
    "patch_size": 1 << 15,
    "num_channels": 1 << 10,
}


class ConfigFields:
    """A config.json as read (a dict), seen through attributes like a config object."""

    def __init__(self, data: dict):
        self._data = data

    def __getattr__(self, key: str) -> Any:
        return self._data.get(key)


def check_config_numbers(cfg: Any, name: str, shown: dict[str, str] | None = None) -> None:
    """Check the sizes in a config before anything is built. ``shown``: the names the config itself gives
    the fields, where they differ (timm's).

    Raises:
        ModelError: when a size is not a positive integer within :data:`_CONFIG_BOUNDS`, there are more heads
            than the width or they do not divide it (with no ``head_dim``), the key/value heads do not divide the
            attention heads, or the patch is larger than the image.
    """

    def ints(field: str) -> list[int] | None:
        value = getattr(cfg, field, None)
        if value is None:
            return None
        values = list(value) if isinstance(value, (list, tuple)) and field in ("image_size", "patch_size") else [value]
        bound = _CONFIG_BOUNDS[field]
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= bound for v in values):
            raise ModelError(
                f"the config of {name} is malformed: {(shown or {}).get(field, field)} is {value!r}, "
                f"expected a positive integer of at most {bound}"
            )
        return values

    got = {f: ints(f) for f in _CONFIG_BOUNDS}
    hidden, heads, kv = (
        vals[0] if (vals := got[f]) else None for f in ("hidden_size", "num_attention_heads", "num_key_value_heads")
    )
    if hidden is not None and heads is not None:
        if heads > hidden:
            raise ModelError(f"the config of {name} is malformed: {heads} attention heads for a width of {hidden}")
        if got["head_dim"] is None and hidden % heads:
            raise ModelError(
                f"the config of {name} is malformed: {heads} attention heads do not divide the width {hidden}"
            )
    if heads is not None and kv is not None and (kv > heads or heads % kv):
        raise ModelError(
            f"the config of {name} is malformed: {kv} key/value heads do not divide {heads} attention heads"
        )
    image, patch = got["image_size"], got["patch_size"]
    if image is not None and patch is not None and any(p > i for p, i in zip(patch * 2, image * 2, strict=False)):
        raise ModelError(
            f"the config of {name} is malformed: patch size {cfg.patch_size} is larger than "
            f"the image size {cfg.image_size}"
        )


def alias_list() -> str:
    """The alias names, comma-separated, for error messages."""
    return ", ".join(ALIASES)


def supported_families(modality: str | None = None) -> str:
    """The families mhaaudit knows (transformers model types and timm name patterns), for error messages."""
    hf = [t for t, f in FAMILIES.items() if modality in (None, f.modality)]
    out = "transformers " + ", ".join(hf)
    if modality in (None, "image"):
        out += "; timm " + ", ".join(p for p, _n, _f in TIMM_FAMILIES)
    return out


def classify_config(cfg: Any, name: str) -> tuple[str, str, bool]:
    """(family, modality, is_decoder) of a transformers config.

    A family of :data:`~.families.FAMILIES` is taken as the table says; another text model with
    a vocabulary is probed as an encoder, or as a decoder when its config or architecture says so.

    Raises:
        ModelError: when the family cannot be probed (known as unprobeable, encoder-decoder, an unknown image
            family, or neither an image model nor a text transformer with a vocabulary).
    """
    family = getattr(cfg, "model_type", "") or ""
    if family in UNPROBEABLE:
        raise ModelError(f"{name} cannot be probed: {UNPROBEABLE[family]} (supported: {supported_families()})")
    if getattr(cfg, "is_encoder_decoder", False):
        raise ModelError(
            f"{name} cannot be probed: encoder-decoder models ({family}) are not supported "
            f"(supported: {supported_families()})"
        )
    known = family_of(family)
    if known is not None:
        return family, known.modality, known.decoder
    vision_like = hasattr(cfg, "num_channels") or hasattr(cfg, "image_size") or hasattr(cfg, "patch_size")
    if vision_like and not hasattr(cfg, "vocab_size"):
        raise ModelError(
            f"{name} cannot be probed: image family {family or 'unknown'!r} is not one mhaaudit knows "
            f"(supported: {supported_families('image')}); a ViT-style token transformer is needed"
        )
    if not hasattr(cfg, "vocab_size"):
        raise ModelError(
            f"{name} cannot be probed: {family or 'this model'} is neither a ViT-style image model nor a "
            f"text transformer (supported: {supported_families()})"
        )
    archs = getattr(cfg, "architectures", None) or []
    is_decoder = bool(getattr(cfg, "is_decoder", False)) or any(a.endswith(("CausalLM", "LMHeadModel")) for a in archs)
    return family, "text", is_decoder


def _modality_of_type(model_type: str) -> str:
    known = family_of(model_type)
    return known.modality if known is not None else "text"


# --------------------------------------------------------------------------------------------
# Names -> specs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """What a model name means, decided without building the model or calling the hub.

    ``resolved`` is what the backend loads from: a hub id (an alias's, or the name itself), a
    timm model name, or an absolute local path (``local``). ``family`` and ``modality`` are None
    where only the config on the hub or the checkpoint can tell.
    """

    name: str
    backend: str  # "hf" | "timm"
    resolved: str
    family: str | None = None
    modality: str | None = None
    alias: dict | None = field(default=None, compare=False)
    local: bool = False


def read_json(path: Path | str) -> dict | None:
    """A JSON object from a model folder's file, or None when it is missing, not JSON or not an object.

    Raises:
        ModelError: when the file is there but is not a regular file (a named pipe, a device such as
            ``/dev/zero``), holds more than :data:`~mhaaudit.files.MAX_JSON_BYTES`, or is nested deeper than
            Python can parse (:func:`mhaaudit.files.read_json`).
    """
    data = files.read_json(path, ModelError, lenient=True)
    return data if isinstance(data, dict) else None


def read_json_object(path: str | os.PathLike, error: type[MhaauditError], what: str) -> dict | None:
    """The JSON object of the file ``path`` (``what`` naming it), None where there is no such file (nor a link by
    that name): unlike :func:`read_json`, a metadata file that is there is read whole, never passed over.

    Raises:
        MhaauditError: of type ``error``, as :func:`mhaaudit.files.read_json` says, or when the file holds another
            JSON value than an object.
    """
    if not os.path.lexists(path):
        return None
    data = files.read_json(path, error, what)
    if not isinstance(data, dict):
        raise error(f"{what} is not a JSON object")
    return data


# The endings of checkpoint file names: a name that ends so is read as a local path, not a hub id.
_CHECKPOINT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt", ".ckpt", ".npz")


def is_path_like(name: str) -> bool:
    """True when ``name`` names a local folder or file rather than a hub id or timm name."""
    return (
        os.path.exists(os.path.expanduser(name))
        or name.startswith(("/", "./", "../", "~", "\\"))
        or (len(name) > 2 and name[1] == ":" and name[2] in "/\\")
        or name.endswith(_CHECKPOINT_SUFFIXES)
    )


def is_timm_folder_config(data: dict | None) -> bool:
    """A ``config.json`` in timm's format: an ``"architecture"`` and no transformers ``model_type``."""
    return data is not None and "architecture" in data and "model_type" not in data


def timm_family(timm_name: str) -> str:
    """The family name of a timm model name (see :data:`~.families.TIMM_FAMILIES`)."""
    return timm_family_of(timm_name)[0]
