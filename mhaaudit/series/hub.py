"""What a series reads from the hub: the repository a revision names, and, offline, whether a revision's
weights are in the local cache before any work."""

from __future__ import annotations

from ..errors import InputError, ModelError, OfflineError, Param
from ..models import resolve
from ..models.shards import INDEX_FILE, INDEX_FILES, hub_download, read_index
from ..request import ModelRequest

__all__ = ["check_cached_weights", "hub_repo"]


#: The weights files a transformers repository may hold, in the order the loader looks for them.
_HUB_WEIGHTS = ("model.safetensors", INDEX_FILE, "pytorch_model.bin", "pytorch_model.bin.index.json")


def check_cached_weights(repo: str, revision: str | None) -> None:
    """Offline: the weights of ``repo`` at ``revision`` are in the local cache (a weights file, or an index
    and every shard it names), so that the series does not fail after its reference columns are audited.

    Raises:
        OfflineError: when they are not.
        ModelError: when a cached index is malformed or names a shard that is not a plain file name.
    """
    for fn in _HUB_WEIGHTS:
        path = hub_download(repo, fn, revision, True)
        if path is None:
            continue
        if fn not in INDEX_FILES:
            return
        _, weight_map = read_index(path)
        missing = sorted(f for f in set(weight_map.values()) if hub_download(repo, f, revision, True) is None)
        if not missing:
            return
        raise OfflineError(
            Param("revision") + f" {revision}: the shard {missing[0]} of {repo} at this revision is not in the local "
            "cache and the hub cannot be reached; download the revision's weights first"
        )
    raise OfflineError(
        Param("revision") + f" {revision}: the weights of {repo} at this revision are not in the local cache (its "
        "config is) and the hub cannot be reached; download the revision's weights first"
    )


def hub_repo(base: ModelRequest) -> str:
    """The hub repository of ``base`` (its id, or an alias's).

    Raises:
        InputError: when the model is a local folder or file (a revision names a commit of a hub model).
        ModelError: when the model is a timm model (revisions are read from transformers repositories).
    """
    spec = resolve(base.model, backend=base.backend)
    if spec.local:
        raise InputError(
            Param("revision") + f" names branches, tags or commits of a hub model; {base.model} is a local folder"
        )
    if spec.backend == "timm":
        raise ModelError(Param("revision") + f" applies to transformers models; {base.model} is a timm model")
    return spec.resolved
