"""The configuration of a transformers model: read from a folder, the alias table, the hub or the
cache, with every hub read's options (:class:`~.hub_reads._Hub`), checked for repository code, and the n of a
text model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import InputError, MhaauditError, ModelError, OfflineError, Param, clipped, one_line
from .families import Family
from .hub_reads import _Hub, offline_weights_error
from .registry import (
    ModelSpec,
    alias_list,
    is_timm_folder_config,
    read_json,
)

_ENCODER_DEFAULT_MAX_N = 512


_DECODER_DEFAULT_MAX_N = 1024  # the paper's GPT-2 context; decoders with longer positions take --context-length


# The files of a model folder whose ``auto_map`` makes transformers import Python code from the folder.
_CODE_MAP_FILES = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json")


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
                    raise offline_weights_error(spec.name, spec.resolved, hub.revision) from exc
                raise ModelError(
                    f"cannot fetch the config of {spec.resolved} for {spec.name}: {one_line(exc, 160)}"
                ) from exc
        return alias_config(spec.alias), "alias"
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
        raise _unknown_model(spec.name, weights, weights_path, hub, exc) from exc


def alias_config(alias: dict) -> Any:
    """The config an alias's model is built from where the hub's is not read (random weights, or trained weights
    given beside it): its built-in one (``registry.ALIASES``), which needs no network."""
    from transformers import AutoConfig

    kw = dict(alias["config"])
    return AutoConfig.for_model(kw.pop("model_type"), **kw)


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
        # every line: the first names the field, the next what is wrong with its value
        raise ModelError(f"the config of {name} is malformed: {one_line(exc, 300)}") from exc


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
        return InputError(Param("revision") + f" {revision}: no such branch, tag or commit of {name}")
    if "trust_remote_code" in text:
        return ModelError(
            f"{name} needs code from its own repository to load; pass " + Param("trust_remote_code") + " if you trust "
            "that code (it runs on this machine)"
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
            "pass " + Param("trust_remote_code") + " if you trust that code (it runs on this machine)"
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


def _unknown_model(name: str, weights: str, weights_path: str | None, hub: _Hub, exc: Exception) -> Exception:
    """The error for a hub id whose config cannot be had."""
    if not hub.offline:
        return ModelError(
            f"unknown model {name!r}: not an alias ({alias_list()}), a local folder, a timm model name, "
            f"or a hub id ({one_line(exc, 120)})"
        )
    if weights == "trained" and "/" in name and weights_path is None:
        return offline_weights_error(name, "hub", hub.revision)
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


# ------------------------------------------------------------------ one config against another

#: Config keys that change neither what the probed blocks compute from the weights read nor the random
#: weights drawn from the config: what a save rewrites (the library's version, the path, the dtype stored),
#: the task head's labels and what a forward pass returns.
VOLATILE_CONFIG = frozenset(
    {
        "_name_or_path",
        "_commit_hash",
        "transformers_version",
        "torch_dtype",
        "dtype",
        "use_cache",
        "architectures",
        "id2label",
        "label2id",
        "finetuning_task",
        "problem_type",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
    }
)
#: Config keys that name a width: a difference there is another width.
WIDTH_KEYS = frozenset({"hidden_size", "n_embd", "d_model", "embed_dim", "width"})
#: Config keys that scale the random weights drawn from the config, and nothing computed from trained weights.
_INIT_SCALE = frozenset({"initializer_range", "initializer_factor"})
#: Config keys that change nothing an audit computes from trained weights: the draws of random weights
#: (the reference is built from the model's config) and training-only switches.
_NOT_COMPUTED = _INIT_SCALE | {"gradient_checkpointing", "use_cache"}


def computes(key: str) -> bool:
    """Whether a config key can change what the probed blocks compute from trained weights: not a key
    a save writes for itself (``_name_or_path``, any key starting with ``_``, :data:`VOLATILE_CONFIG`), nor
    dropout (off in an audit), nor what only draws random weights (:data:`_NOT_COMPUTED`)."""
    low = key.lower()
    return not (
        key.startswith("_")
        or key in VOLATILE_CONFIG
        or "dropout" in low
        or low.endswith("pdrop")
        or key in _NOT_COMPUTED
    )


def draws_alike(a: dict, b: dict) -> bool:
    """Whether two configs draw the same random weights for the probed blocks to compute alike: equal in each key
    that can change what they compute (:func:`computes`), in the initialisation's scale and in the dtype the model
    is built in (:func:`_built_dtype`: weights drawn in bfloat16 are other values). A config asking for code of its
    own (``auto_map``) never is: that code is read with the config, and may differ where it does not."""
    if "auto_map" in a or "auto_map" in b or _built_dtype(a) != _built_dtype(b):
        return False
    keys = {k for k in set(a) | set(b) if computes(k) or k in _INIT_SCALE}
    return all(a.get(k) == b.get(k) or canonical(a.get(k)) == canonical(b.get(k)) for k in keys)


def _built_dtype(config: dict) -> str:
    """The dtype transformers builds a config's model in: the one it writes (``dtype``, or the older
    ``torch_dtype``), float32 when it writes none. A save writes it for itself (:data:`VOLATILE_CONFIG`), but the
    random weights drawn from the config are drawn in it."""
    written = config.get("dtype") or config.get("torch_dtype") or "float32"
    return str(written).removeprefix("torch.")


def canonical(value) -> str:
    """A JSON value as one text (keys sorted): two configs that write one value alike compare equal."""
    return json.dumps(value, sort_keys=True, default=str)


def short(value, most: int = 40) -> str:
    """A JSON value in at most ``most`` characters, for a message."""
    return clipped(json.dumps(value, default=str), most)


def config_difference(config: dict, model_cfg: dict, model: str) -> str | None:
    """How the ``config.json`` of trained weights differs from the model ``model``'s in what the audit computes
    with (:func:`computes`, a key both hold), in words (``"computes otherwise than the model M: its config.json
    has hidden_act = "relu" (M: "gelu")"``), or None when it does not. A ``model_type`` difference is another
    family, a width key another width."""
    differ = [
        k
        for k in sorted(set(config) & set(model_cfg))
        if computes(k) and config[k] != model_cfg[k] and canonical(config[k]) != canonical(model_cfg[k])
    ]
    if not differ:
        return None
    named = [k for k in differ if k == "model_type"] or [k for k in differ if k in WIDTH_KEYS]
    what = {"model_type": "is of another family than"}.get(named[0], "is of another width than") if named else ""
    shown = ", ".join(f"{k} = {short(config[k])} ({model}: {short(model_cfg[k])})" for k in (named or differ)[:4])
    more = f" and {len(differ) - 4} more" if not named and len(differ) > 4 else ""
    return f"{what or 'computes otherwise than'} the model {model}: its config.json has {shown}{more}"
