"""The probe: a loaded model, its inputs, and its token features at the requested probe points.

Probe points: layer 0 is the embedding output (after position embeddings, what block 1 sees);
layer k >= 1 is the output of block k. :meth:`ProbedModel.capture` runs a batch only as far as
the deepest requested point: forward hooks on the blocks copy the token matrices out and stop
the pass once the deepest one has run. The hooks are always removed, also when the forward pass
fails. Features come out in float32 with TF32 switched off, since they feed rank decisions.

The backends (:mod:`.hf`, :mod:`.timm_backend`) build a :class:`ProbedModel` from the module,
its list of blocks, a function that runs the module on model inputs, and its preprocessing.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import nn

from .. import validate
from ..errors import InputError, ModelError
from ..numerics.rule import tf32_off
from .families import query_words

__all__ = [
    "ModelInfo",
    "ProbedModel",
    "full_float32",
    "measure_image_tokens",
    "measure_tokens",
    "no_tf32",
    "prepare_module",
]


@dataclass(frozen=True)
class ModelInfo:
    """What the audit needs to know about a loaded model."""

    name: str  # as the user typed it
    resolved: str  # hub id / timm name / local path
    backend: str  # "hf" | "timm"
    family: str  # model_type, e.g. "vit", "bert", "gpt2"
    modality: str  # "image" | "text"
    d: int  # width
    n: int  # tokens per example
    query_index: int | None  # 0 for [CLS]-style models, n - 1 for decoders, None without a class token
    num_layers: int  # blocks in the full model (also when fewer were built)
    num_heads: int
    head_dim: int
    weights: str  # "random" | "trained"
    weights_source: str  # plain words
    positions: str = "learned"  # what layer 0 carries: learned | sinusoidal | rotary | relative | alibi | none
    query_token: str = ""  # the query token in words, e.g. "token 0 (class token; 1 more prefix token follows)"
    weights_read: dict | None = None  # trained weights: what loading read (:class:`.shards.WeightsRead` as a dict)
    decoder: bool = False  # a causal (decoder) text model, decided once at load from its family or config

    def to_dict(self) -> dict:
        """The fields written into a run's ``meta`` (``model_info``). ``decoder`` is left out: the
        query token (``query_index``, ``query_token``) already says it, and the outputs keep their keys."""
        out = dataclasses.asdict(self)
        del out["decoder"]
        return out


class _StopForward(Exception):
    """Raised from a hook once the deepest requested block has run."""


full_float32 = tf32_off  # the forward pass that feeds a rank decision runs at full float32 precision
no_tf32 = full_float32  # the former name


class ProbedModel:
    """A loaded model plus the means to feed it and to read its token features.

    ``forward`` runs ``module`` on a dict of model inputs (the backend knows how); ``blocks``
    is the module's list of transformer blocks, which the probe hooks.
    """

    def __init__(
        self,
        info: ModelInfo,
        module: nn.Module,
        device: torch.device,
        *,
        blocks: nn.ModuleList | nn.Sequential,
        forward: Callable[[dict], Any] | None = None,
        tokenizer: object | None = None,
        image_transform: Callable[[list], torch.Tensor] | None = None,
        config: Any = None,
    ) -> None:
        self.info = info
        self.module = module
        self.device = device
        self.tokenizer = tokenizer
        self.config = config
        self._blocks = blocks
        self._forward = forward if forward is not None else (lambda inputs: module(**inputs))
        self._image_transform = image_transform

    def __repr__(self) -> str:
        i = self.info
        return (
            f"ProbedModel({i.name!r}, backend={i.backend}, family={i.family}, d={i.d}, n={i.n}, "
            f"blocks built={self.built_layers}/{i.num_layers}, weights={i.weights}, device={self.device})"
        )

    @property
    def blocks(self) -> nn.ModuleList | nn.Sequential:
        """The transformer blocks that were built, in order (block k is ``blocks[k - 1]``)."""
        return self._blocks

    @property
    def built_layers(self) -> int:
        """How many blocks exist in the loaded module (fewer than ``info.num_layers`` with max_layer)."""
        return len(self._blocks)

    # ---------------------------------------------------------------- inputs

    def preprocess(self, batch, device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
        """Turn a batch into model inputs on ``device`` (the model's device by default).

        Images: a list of PIL images, transformed by the model's own preprocessing; or a ``(B, 3, H, W)`` uint8
        tensor where :meth:`takes_image_tensors` says so (the same pixels, computed where the tensor is).
        Text: a list of token-id sequences, all of length ``info.n`` (or a (B, n) tensor).
        """
        device = self.device if device is None else torch.device(device)
        if self.info.modality == "image":
            return {"pixel_values": self._preprocess_images(batch, device)}
        return self._preprocess_text(batch, device)

    def takes_image_tensors(self, height: int, width: int) -> bool:
        """Whether :meth:`preprocess` may be given ``(B, 3, height, width)`` uint8 tensors on the model's device
        for images of that size: the model's preprocessing then gives what it gives for their PIL images, bit for
        bit, computed where the batch is (``hf_inputs.ImageTransform.takes_tensors``); False for timm's."""
        takes = getattr(self._image_transform, "takes_tensors", None)
        return bool(takes is not None and takes(height, width, self.device))

    def _preprocess_images(self, batch, device: torch.device) -> torch.Tensor:
        from PIL import Image

        if isinstance(batch, torch.Tensor):
            if batch.dtype != torch.uint8 or batch.ndim != 4 or batch.shape[1] != 3:
                raise InputError(
                    f"preprocess: a tensor of images must be (B, 3, H, W) uint8, got {tuple(batch.shape)} {batch.dtype}"
                )
            if not self.takes_image_tensors(batch.shape[2], batch.shape[3]):
                raise InputError(
                    f"preprocess: {self.info.name}'s preprocessing takes PIL images, not tensors, of "
                    f"{batch.shape[2]} x {batch.shape[3]} pixels"
                )
            return self._image_transform.tensors(batch).to(device, dtype=torch.float32)  # type: ignore[union-attr]
        if isinstance(batch, Image.Image):
            batch = [batch]
        batch = list(batch)
        if not batch:
            raise InputError("preprocess: empty batch of images")
        images = []
        for i, im in enumerate(batch):
            if not isinstance(im, Image.Image):
                raise InputError(f"preprocess: item {i} is a {type(im).__name__}, not a PIL image")
            images.append(im if im.mode == "RGB" else im.convert("RGB"))
        assert self._image_transform is not None
        px = self._image_transform(images)
        return px.to(device, dtype=torch.float32)

    def _preprocess_text(self, batch, device: torch.device) -> dict[str, torch.Tensor]:
        n = self.info.n
        if isinstance(batch, torch.Tensor):
            ids = batch.to(torch.long)
            if ids.ndim != 2:
                raise InputError(f"preprocess: token ids must be 2-D (batch, n), got shape {tuple(ids.shape)}")
        else:
            seqs = [list(s) for s in batch]
            if not seqs:
                raise InputError("preprocess: empty batch of token sequences")
            bad = [len(s) for s in seqs if len(s) != n]
            if bad:
                raise InputError(
                    f"preprocess: every token sequence must have exactly n = {n} tokens (got length {bad[0]})"
                )
            try:
                ids = torch.tensor(seqs, dtype=torch.long)
            except (TypeError, ValueError) as exc:
                raise InputError(f"preprocess: token sequences must hold integers ({exc})") from exc
        if ids.shape[1] != n:
            raise InputError(f"preprocess: every token sequence must have exactly n = {n} tokens (got {ids.shape[1]})")
        vocab = getattr(self.config, "vocab_size", None)
        if ids.numel() and (int(ids.min()) < 0 or (vocab is not None and int(ids.max()) >= vocab)):
            raise InputError(f"preprocess: token ids must lie in [0, {vocab}) for {self.info.name}")
        ids = ids.to(device)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    # ---------------------------------------------------------------- probing

    def _check_layers(self, layers: Sequence[int]) -> list[int]:
        want = sorted(validate.int_list("layers", layers, minimum=None))
        if not want:
            raise InputError("capture: no layers requested")
        if want[0] < 0:
            raise InputError(f"layer {want[0]} does not exist: layers start at 0 (embedding output)")
        if want[-1] > self.built_layers:
            if self.built_layers < self.info.num_layers:
                raise InputError(
                    f"layer {want[-1]} was asked for but the model was built with only {self.built_layers} "
                    f"block(s) (max_layer); load it with max_layer >= {want[-1]}"
                )
            raise InputError(f"layer {want[-1]} does not exist: {self.info.name} has {self.info.num_layers} blocks")
        return want

    def capture(self, inputs, layers: Sequence[int]) -> dict[int, torch.Tensor]:
        """Token features (B, n, d), float32, on the model's device, for each requested layer.

        Layer 0 is the embedding output (what block 1 sees); layer k >= 1 is the output of
        block k. Only blocks up to ``max(layers)`` run.
        """
        want = self._check_layers(layers)
        if not isinstance(inputs, dict):
            inputs = self.preprocess(inputs)
        inputs = {k: (v.to(self.device) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
        if self.info.modality == "text" and "attention_mask" not in inputs and "input_ids" in inputs:
            inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
        with torch.no_grad(), full_float32():
            out = self._run_hooked(inputs, want)
        return {k: out[k] for k in want}

    def _run_hooked(self, inputs: dict, want: list[int]) -> dict[int, torch.Tensor]:
        """Run the model with hooks that copy out the requested token matrices (float32, (B, n, d) each, by probe
        point) and stop at the deepest.

        Raises:
            ModelError: when a requested block was not reached during the forward pass.
        """
        blocks, top = self._blocks, want[-1]
        store: dict[int, torch.Tensor] = {}

        def pre_hook(_mod, args, kwargs):
            hs = args[0] if args else kwargs["hidden_states"]
            # a copy: the block may reuse or modify its input buffer
            store[0] = hs.detach().to(torch.float32, copy=True)
            if top == 0:
                raise _StopForward

        def make_post(k: int):
            def post_hook(_mod, _args, output):
                hs = output[0] if isinstance(output, (tuple, list)) else output
                store[k] = hs.detach().to(torch.float32, copy=k != top)
                if k == top:
                    raise _StopForward

            return post_hook

        handles = []
        try:
            if 0 in want:
                handles.append(blocks[0].register_forward_pre_hook(pre_hook, with_kwargs=True))
            handles += [blocks[k - 1].register_forward_hook(make_post(k)) for k in want if k >= 1]
            with contextlib.suppress(_StopForward):
                self._forward(inputs)
        finally:
            for h in handles:
                h.remove()
        missing = [k for k in want if k not in store]
        if missing:  # pragma: no cover - would mean the blocks were not called
            raise ModelError(f"{self.info.name}: layer {missing[0]} was not reached during the forward pass")
        return store


_Module = TypeVar("_Module", bound=nn.Module)


def prepare_module(module: _Module, device: torch.device) -> _Module:
    """A loaded module made ready for probing: float32 on ``device``, eval mode, no gradients."""
    module = module.to(device=device, dtype=torch.float32).eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def measure_tokens(pm: ProbedModel) -> int:
    """Tokens per example of an image model, measured by running the embedding on one blank image."""
    from PIL import Image

    inputs = pm.preprocess([Image.new("RGB", (256, 256), (128, 128, 128))])
    return int(pm.capture(inputs, [0])[0].shape[1])


def measure_image_tokens(pm: ProbedModel, patches: int | None) -> None:
    """Set ``n`` of an image model (measured) and its query token in words: the tokens before its
    ``patches`` patch tokens are the class token and what follows it (distillation, registers)."""
    n = measure_tokens(pm)
    prefix = n - patches if patches is not None and 0 < patches < n else 1
    words = query_words(
        pm.info.query_index, n, prefix, modality="image", why=pm.info.query_token.removeprefix("none: ")
    )
    pm.info = dataclasses.replace(pm.info, n=n, query_token=words)
