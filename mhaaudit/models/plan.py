"""LoadPlan: how a model is to be loaded, checked where it is made, and handed to a backend whole.

:func:`~.load.load_model` makes one from its keywords; :mod:`.hf` and :mod:`.timm_backend` read
what they build from it (with the :class:`~.registry.ModelSpec` the name resolved to).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .. import validate
from ..defaults import BACKENDS, DEFAULT_DEVICE
from ..errors import InputError, Param
from ..files import regular_file
from ..runtime import resolve_device

__all__ = ["LoadPlan", "check_revision"]


@dataclass(frozen=True)
class LoadPlan:
    """How to load a model: its weights, backend, device, depth, context length, seed and hub options.

    Checked and normalised on construction (InputError): ``weights`` is ``"random"`` or
    ``"trained"`` (case and spaces do not matter), ``backend`` ``"hf"``, ``"timm"`` or None
    (detect); ``weights_path`` must exist (a folder or a regular file) and goes with trained weights
    only; ``max_layer`` is a whole number from 0, ``context_length`` from 1; a ``revision`` is not empty; ``device``
    (``auto``/``cpu``/``cuda``/``cuda:N`` or a ``torch.device``) is resolved to a ``torch.device``.
    """

    weights: str = "random"  # "random" | "trained"
    backend: str | None = None  # "hf" | "timm" | None (detect)
    weights_path: str | None = None  # local folder or file with trained weights
    device: Any = DEFAULT_DEVICE  # a torch.device once made
    context_length: int | None = None  # text models: tokens per example n
    max_layer: int | None = None  # blocks built (None: all)
    seed: int = 0  # the random init derives from derive_seed(seed, "model-init")
    revision: str | None = None  # branch, tag or commit of a hub model
    trust_remote_code: bool = False  # let a repository's own model code run

    def __post_init__(self) -> None:
        weights = validate.choice("weights", self.weights or "random", ("random", "trained"))
        object.__setattr__(self, "weights", weights)
        if self.backend is not None:
            object.__setattr__(self, "backend", validate.choice("backend", self.backend, BACKENDS))
        if self.weights_path is not None:
            path = os.path.expanduser(str(self.weights_path))
            if not os.path.exists(path):
                raise InputError(f"weights path does not exist: {path}")
            if not os.path.isdir(path):
                regular_file(path, InputError, f"weights path {path}")  # a pipe would block, a device never end
            if weights == "random":
                raise InputError(
                    "a weights path was given together with random weights; use weights='trained' to load it"
                )
            object.__setattr__(self, "weights_path", path)
        if self.max_layer is not None:
            object.__setattr__(self, "max_layer", validate.integer("max_layer", self.max_layer, minimum=0))
        if self.context_length is not None:
            length = validate.integer("context length", self.context_length, minimum=1)
            object.__setattr__(self, "context_length", length)
        object.__setattr__(self, "revision", check_revision(self.revision))
        object.__setattr__(self, "trust_remote_code", validate.flag("trust_remote_code", self.trust_remote_code))
        object.__setattr__(self, "device", resolve_device(self.device))


def check_revision(revision) -> str | None:
    """A revision as given, stripped (None: the default branch).

    Raises:
        InputError: the revision is not a string, or empty.
    """
    if revision is None:
        return None
    if not isinstance(revision, str) or not revision.strip():
        raise InputError(Param("revision") + ": give a branch, tag or commit of the hub model")
    return revision.strip()
