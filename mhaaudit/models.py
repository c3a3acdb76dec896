"""Loading models and probing their token features.

A model name (an alias, a Hugging Face hub id, a local folder, a timm model name or a timm
checkpoint file) becomes a :class:`ProbedModel`: the network in eval mode on its device, a
:class:`ModelInfo` describing what the audit needs to know (width ``d``, tokens per example
``n``, the query token's index, depth, heads, where the weights came from), the model's own
preprocessing, and :meth:`ProbedModel.capture`, which runs a batch only as far as the deepest
requested probe point.

Probe points: layer 0 is the embedding output (after position embeddings, what block 1 sees);
layer k >= 1 is the output of block k. :class:`RandomAttention` is the paper's "random
attention" layer, meant to be applied to layer 0. :func:`first_attention` exposes the
key/query weights of one block as the attention sees its input.

Everything a user can get wrong ends in :class:`~mhaaudit.errors.ModelError`,
:class:`~mhaaudit.errors.OfflineError` or :class:`~mhaaudit.errors.InputError` with a one-line
message. When the hub cannot be reached it is never called (``local_files_only=True``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import nn

from .settings import resolve_device
from .errors import InputError, MhaauditError, ModelError, OfflineError
from .hub import force_offline_env, is_offline

__all__ = [
    "ALIASES",
    "AttentionWeights",
    "ModelInfo",
    "ProbedModel",
    "RandomAttention",
    "first_attention",
    "load_model",
    "modality_of",
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

# Families probed through transformers. ``prefix`` is the number of tokens before the patches
# for image models (class token first); registers are added from the config.
_HF_IMAGE_FAMILIES = {"vit": 1, "deit": 2, "dinov2": 1, "dinov2_with_registers": 1}
_HF_DECODER_TYPES = {
    "gpt2", "gpt_neo", "gpt_neox", "gptj", "gpt_bigcode", "codegen", "llama", "mistral", "mixtral",
    "opt", "bloom", "falcon", "qwen2", "qwen3", "phi", "phi3", "gemma", "gemma2", "olmo", "ctrl",
}
# Image families that are known not to fit: the reason goes into the error message.
_HF_UNPROBEABLE = {
    "swin": "Swin merges patches hierarchically and pools globally; it has no class token",
    "swinv2": "Swin V2 merges patches hierarchically and pools globally; it has no class token",
    "convnext": "ConvNeXt is a convolutional network, not a token transformer",
    "convnextv2": "ConvNeXt V2 is a convolutional network, not a token transformer",
    "resnet": "ResNet is a convolutional network, not a token transformer",
    "regnet": "RegNet is a convolutional network, not a token transformer",
    "efficientnet": "EfficientNet is a convolutional network, not a token transformer",
    "mobilenet_v1": "MobileNet is a convolutional network, not a token transformer",
    "mobilenet_v2": "MobileNet is a convolutional network, not a token transformer",
    "bit": "BiT is a convolutional network, not a token transformer",
    "levit": "LeViT shrinks its token grid between stages and pools globally",
    "poolformer": "PoolFormer has no attention and no class token",
    "segformer": "SegFormer is hierarchical and has no class token",
    "pvt": "PVT is hierarchical and has no class token",
    "pvt_v2": "PVT v2 is hierarchical and has no class token",
    "focalnet": "FocalNet is hierarchical and has no class token",
    "dinat": "DiNAT is hierarchical and has no class token",
    "nat": "NAT is hierarchical and has no class token",
    "mobilevit": "MobileViT is hybrid convolutional and has no class token",
    "cvt": "CvT is hierarchical and pools its tokens",
    "van": "VAN is a convolutional network, not a token transformer",
}
_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)
_BLOCK_PATHS = ("layers", "encoder.layer", "encoder.layers", "h", "transformer.h", "layer", "blocks")
_ENCODER_DEFAULT_MAX_N = 512
_IGNORABLE_MISSING = ("pooler", "mask_token")
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "tokenizer.model", "sentencepiece.bpe.model")


# --------------------------------------------------------------------------------------------
# Public data types
# --------------------------------------------------------------------------------------------


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
    query_index: int  # 0 for [CLS]-style models, n - 1 for decoders
    num_layers: int  # blocks in the full model (also when fewer were built)
    num_heads: int
    head_dim: int
    weights: str  # "random" | "trained"
    weights_source: str  # plain words

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class AttentionWeights:
    """Key/query weights of one attention block, as the attention sees its input.

    For head h and block input tokens X (B, n, d): ``Q = pre(X) @ W_q[h] + b_q[h]``,
    ``K = pre(X) @ W_k[h] + b_k[h]``, logits ``scale * Q K^T`` (masked causally when
    ``causal``), softmax over the keys.
    """

    W_q: torch.Tensor  # (H, d, d_h)
    W_k: torch.Tensor  # (H, d, d_h)
    b_q: torch.Tensor | None  # (H, d_h)
    b_k: torch.Tensor | None  # (H, d_h)
    pre: Callable[[torch.Tensor], torch.Tensor]
    scale: float = 1.0
    causal: bool = False

    @property
    def num_heads(self) -> int:
        return int(self.W_q.shape[0])

    @property
    def head_dim(self) -> int:
        return int(self.W_q.shape[2])

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Attention logits (B, H, n, n) for block input tokens ``x`` (B, n, d), before masking."""
        with torch.no_grad():
            h = self.pre(x)
            q = torch.einsum("bnd,hde->bhne", h, self.W_q)
            k = torch.einsum("bnd,hde->bhne", h, self.W_k)
            if self.b_q is not None:
                q = q + self.b_q[None, :, None, :]
            if self.b_k is not None:
                k = k + self.b_k[None, :, None, :]
            return self.scale * q @ k.transpose(-1, -2)

    def probs(self, x: torch.Tensor) -> torch.Tensor:
        """Attention probabilities (B, H, n, n), causal mask applied when the model uses one."""
        a = self.logits(x)
        if self.causal:
            n = a.shape[-1]
            mask = torch.ones(n, n, dtype=torch.bool, device=a.device).triu(1)
            a = a.masked_fill(mask, float("-inf"))
        return a.softmax(dim=-1)


class _StopForward(Exception):
    """Raised from a hook once the deepest requested block has run."""


@contextlib.contextmanager
def _no_tf32() -> Iterator[None]:
    """Keep float32 arithmetic exact-ish on CUDA: TF32 off for matmuls and convolutions."""
    if not torch.cuda.is_available():
        yield
        return
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


class ProbedModel:
    """A loaded model plus the means to feed it and to read its token features."""

    def __init__(
        self,
        info: ModelInfo,
        module: nn.Module,
        device: torch.device,
        *,
        tokenizer: object | None = None,
        image_transform: Callable[[list], torch.Tensor] | None = None,
        blocks: nn.ModuleList | nn.Sequential | None = None,
        config: Any = None,
    ) -> None:
        self.info = info
        self.module = module
        self.device = device
        self.tokenizer = tokenizer
        self.config = config
        self._image_transform = image_transform
        self._blocks = blocks

    def __repr__(self) -> str:
        i = self.info
        return (
            f"ProbedModel({i.name!r}, backend={i.backend}, family={i.family}, d={i.d}, n={i.n}, "
            f"blocks built={self.built_layers}/{i.num_layers}, weights={i.weights}, device={self.device})"
        )

    @property
    def built_layers(self) -> int:
        """How many blocks exist in the loaded module (fewer than ``info.num_layers`` with max_layer)."""
        return len(self._blocks) if self._blocks is not None else 0

    # ---------------------------------------------------------------- inputs

    def preprocess(self, batch) -> dict[str, torch.Tensor]:
        """Turn a batch into model inputs (on the model's device).

        Images: a list of PIL images, transformed by the model's own preprocessing.
        Text: a list of token-id sequences, all of length ``info.n`` (or a (B, n) tensor).
        """
        if self.info.modality == "image":
            return {"pixel_values": self._preprocess_images(batch)}
        return self._preprocess_text(batch)

    def _preprocess_images(self, batch) -> torch.Tensor:
        try:
            from PIL import Image
        except ImportError as exc:  # pragma: no cover - pillow is a dependency
            raise ModelError("Pillow is needed for image models: pip install pillow") from exc
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
        return px.to(self.device, dtype=torch.float32)

    def _preprocess_text(self, batch) -> dict[str, torch.Tensor]:
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
        ids = ids.to(self.device)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    # ---------------------------------------------------------------- probing

    def _check_layers(self, layers: Sequence[int]) -> list[int]:
        try:
            want = sorted({int(k) for k in layers})
        except (TypeError, ValueError) as exc:
            raise InputError(f"layers must be integers, got {layers!r}") from exc
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
        with torch.no_grad(), _no_tf32():
            if self.info.backend == "timm":
                out = self._capture_timm(inputs, want)
            else:
                out = self._capture_hf(inputs, want)
        return {k: out[k] for k in want}

    def _capture_hf(self, inputs: dict, want: list[int]) -> dict[int, torch.Tensor]:
        blocks = self._blocks
        assert blocks is not None
        top = want[-1]
        store: dict[int, torch.Tensor] = {}
        handles = []

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

        try:
            if 0 in want:
                handles.append(blocks[0].register_forward_pre_hook(pre_hook, with_kwargs=True))
            for k in want:
                if k >= 1:
                    handles.append(blocks[k - 1].register_forward_hook(make_post(k)))
            kwargs = dict(inputs)
            params = self._forward_params()
            if self.info.modality == "image" and "interpolate_pos_encoding" in params:
                kwargs.setdefault("interpolate_pos_encoding", True)
            if "use_cache" in params:
                kwargs.setdefault("use_cache", False)  # no key/value cache for a single pass
            try:
                self.module(**kwargs)
            except _StopForward:
                pass
        finally:
            for h in handles:
                h.remove()
        missing = [k for k in want if k not in store]
        if missing:  # pragma: no cover - would mean the blocks were not called
            raise ModelError(f"{self.info.name}: layer {missing[0]} was not reached during the forward pass")
        return store

    def _forward_params(self) -> set[str]:
        import inspect

        try:
            return set(inspect.signature(self.module.forward).parameters)
        except (TypeError, ValueError):  # pragma: no cover
            return set()

    def _capture_timm(self, inputs: dict, want: list[int]) -> dict[int, torch.Tensor]:
        m = self.module
        x = inputs["pixel_values"]
        x = m.patch_embed(x)
        x = m._pos_embed(x)
        x = m.patch_drop(x)
        x = m.norm_pre(x)
        store: dict[int, torch.Tensor] = {}
        if 0 in want:
            store[0] = x.to(torch.float32)
        for i in range(want[-1]):
            x = m.blocks[i](x)
            if i + 1 in want:
                store[i + 1] = x.to(torch.float32)
        return store


# --------------------------------------------------------------------------------------------
# The paper's random attention layer
# --------------------------------------------------------------------------------------------


class RandomAttention(nn.Module):
    """One frozen random attention head with a skip connection: ``x + Attn(LN(x))``.

    LayerNorm without affine parameters; W_Q, W_K, W_V, W_O are d x d, Xavier-uniform, drawn
    in that order from ``torch.Generator().manual_seed(seed)`` on the CPU; no biases; logits
    scaled by 1/sqrt(d); softmax over the tokens; no MLP. With row-vector tokens:
    ``Attn(h) = softmax(h W_Q (h W_K)^T / sqrt(d)) (h W_V) W_O``.
    """

    def __init__(self, d: int, seed: int = 0, eps: float = 1e-5, device: torch.device | str | None = None) -> None:
        super().__init__()
        if int(d) < 1:
            raise InputError(f"RandomAttention: width d must be positive, got {d}")
        self.d = int(d)
        self.seed = int(seed)
        self.eps = float(eps)
        g = torch.Generator(device="cpu").manual_seed(self.seed)
        for name in ("W_Q", "W_K", "W_V", "W_O"):
            w = torch.empty(self.d, self.d, dtype=torch.float32)
            nn.init.xavier_uniform_(w, generator=g)
            self.register_buffer(name, w)
        if device is not None:
            self.to(device)
        self.eval()

    def extra_repr(self) -> str:
        return f"d={self.d}, seed={self.seed}, eps={self.eps}"

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """The head's attention probabilities (B, n, n) for input tokens ``x`` (B, n, d)."""
        h = nn.functional.layer_norm(x, (self.d,), eps=self.eps)
        q = h @ self.W_Q
        k = h @ self.W_K
        return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.d), dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 3 or x.shape[-1] != self.d:
            raise InputError(f"RandomAttention expects (B, n, {self.d}) tokens, got shape {tuple(x.shape)}")
        h = nn.functional.layer_norm(x, (self.d,), eps=self.eps)
        q = h @ self.W_Q
        k = h @ self.W_K
        v = h @ self.W_V
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.d), dim=-1)
        return x + (a @ v) @ self.W_O


# --------------------------------------------------------------------------------------------
# Key/query weights of a block
# --------------------------------------------------------------------------------------------


def _split_heads_linear(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """nn.Linear weight (H*d_h, d) -> (H, d, d_h) so that x @ W[h] is head h's projection."""
    out, d = weight.shape
    return weight.detach().reshape(heads, out // heads, d).transpose(1, 2).contiguous().float()


def first_attention(pm: ProbedModel, layer: int = 1) -> AttentionWeights:
    """Key/query weights of block ``layer`` (1-based) of a loaded model."""
    try:
        layer = int(layer)
    except (TypeError, ValueError) as exc:
        raise InputError(f"layer must be an integer, got {layer!r}") from exc
    if layer < 1 or layer > pm.built_layers:
        raise InputError(
            f"first_attention: block {layer} is not available (the loaded model has blocks 1..{pm.built_layers})"
        )
    block = pm._blocks[layer - 1]  # type: ignore[index]
    info = pm.info
    heads, dh = info.num_heads, info.head_dim
    causal = info.query_index != 0 and info.modality == "text"

    # timm ViT block: fused qkv Linear.
    attn = getattr(block, "attn", None)
    if attn is not None and isinstance(getattr(attn, "qkv", None), nn.Linear):
        for nm in ("q_norm", "k_norm"):
            if not isinstance(getattr(attn, nm, nn.Identity()), nn.Identity):
                raise ModelError(f"{info.name}: block {layer} normalises queries/keys ({nm}); first_attention does not cover that")
        heads = int(getattr(attn, "num_heads", heads))
        d = attn.qkv.in_features
        dh = int(getattr(attn, "head_dim", d // heads))
        w = attn.qkv.weight
        W_q = _split_heads_linear(w[: heads * dh], heads)
        W_k = _split_heads_linear(w[heads * dh : 2 * heads * dh], heads)
        b_q = b_k = None
        if attn.qkv.bias is not None:
            b = attn.qkv.bias.detach().float()
            b_q, b_k = b[: heads * dh].reshape(heads, dh), b[heads * dh : 2 * heads * dh].reshape(heads, dh)
        elif getattr(attn, "q_bias", None) is not None:
            b_q = attn.q_bias.detach().float().reshape(heads, dh)
            b_k = torch.zeros_like(b_q)
        scale = float(getattr(attn, "scale", dh**-0.5))
        return AttentionWeights(W_q, W_k, b_q, b_k, block.norm1, scale, False)

    # GPT-2 style: Conv1D c_attn with weight (d, 3d), x @ W + b.
    if attn is not None and hasattr(attn, "c_attn"):
        w = attn.c_attn.weight.detach().float()
        d = w.shape[0]
        W_q = w[:, :d].reshape(d, heads, dh).permute(1, 0, 2).contiguous()
        W_k = w[:, d : 2 * d].reshape(d, heads, dh).permute(1, 0, 2).contiguous()
        b = attn.c_attn.bias.detach().float() if attn.c_attn.bias is not None else None
        b_q = b[:d].reshape(heads, dh) if b is not None else None
        b_k = b[d : 2 * d].reshape(heads, dh) if b is not None else None
        cfg = pm.config
        scale = dh**-0.5 if getattr(cfg, "scale_attn_weights", True) else 1.0
        if getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
            scale /= float(layer)
        return AttentionWeights(W_q, W_k, b_q, b_k, block.ln_1, scale, True)

    # ViT / DeiT / DINOv2 style (pre-LN): attention.q_proj / k_proj.
    att = getattr(block, "attention", None)
    if att is not None and hasattr(att, "q_proj") and hasattr(att, "k_proj"):
        pre = getattr(block, "layernorm_before", None) or getattr(block, "norm1", None)
        if pre is None:
            raise ModelError(f"{info.name}: cannot find the pre-attention LayerNorm of block {layer}")
        q, k = att.q_proj, att.k_proj
        return AttentionWeights(
            _split_heads_linear(q.weight, heads),
            _split_heads_linear(k.weight, heads),
            q.bias.detach().float().reshape(heads, dh) if q.bias is not None else None,
            k.bias.detach().float().reshape(heads, dh) if k.bias is not None else None,
            pre,
            dh**-0.5,
            causal,
        )

    # BERT style (post-LN): attention.self.query / key see the block input directly.
    selfatt = getattr(att, "self", None) if att is not None else None
    if selfatt is not None and hasattr(selfatt, "query") and hasattr(selfatt, "key"):
        q, k = selfatt.query, selfatt.key
        return AttentionWeights(
            _split_heads_linear(q.weight, heads),
            _split_heads_linear(k.weight, heads),
            q.bias.detach().float().reshape(heads, dh) if q.bias is not None else None,
            k.bias.detach().float().reshape(heads, dh) if k.bias is not None else None,
            nn.Identity(),
            dh**-0.5,
            causal,
        )
    raise ModelError(f"{info.name}: first_attention does not know the attention layout of {type(block).__name__}")


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def _alias_list() -> str:
    return ", ".join(ALIASES)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence library progress bars, warnings and info logs while loading."""
    restore = []
    try:
        from transformers.utils import logging as tlog

        was_bar = tlog.is_progress_bar_enabled()
        old_level = tlog.get_verbosity()
        tlog.disable_progress_bar()
        tlog.set_verbosity_error()
        restore.append(lambda: (tlog.set_verbosity(old_level), tlog.enable_progress_bar() if was_bar else None))
    except Exception:  # pragma: no cover - transformers missing or changed
        pass
    try:
        from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

        hub_was = are_progress_bars_disabled()
        disable_progress_bars()
        restore.append(lambda: None if hub_was else enable_progress_bars())
    except Exception:  # pragma: no cover
        pass
    tlogger = logging.getLogger("timm")
    old_timm = tlogger.level
    tlogger.setLevel(logging.ERROR)
    restore.append(lambda: tlogger.setLevel(old_timm))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for fn in reversed(restore):
            fn()


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Seed the global RNG for a random init without disturbing the caller's RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield


def _one_line(exc: BaseException, limit: int = 240) -> str:
    text = " ".join(str(exc).split())
    if not text:
        text = type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_path_like(name: str) -> bool:
    return (
        os.path.exists(os.path.expanduser(name))
        or name.startswith(("/", "./", "../", "~", "\\"))
        or (len(name) > 2 and name[1] == ":" and name[2] in "/\\")
        or name.endswith((".safetensors", ".bin", ".pth", ".pt", ".ckpt", ".npz"))
    )


def _timm_name(name: str) -> str | None:
    """The timm model name when ``name`` names a timm architecture, else None."""
    if name.startswith("timm:"):
        return name[5:]
    if "/" in name or name in ALIASES:
        return None
    try:
        import timm

        return name if timm.is_model(name) else None
    except Exception:  # pragma: no cover - timm missing
        return None


def _looks_like_timm_path(name: str) -> bool:
    """A local folder/file saved in timm's format: config.json with an "architecture" key."""
    p = Path(os.path.expanduser(name))
    folder = p if p.is_dir() else p.parent
    data = _read_json(folder / "config.json")
    if data is None:
        return p.is_file()
    return "architecture" in data and "model_type" not in data


def _read_json(path: Path) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def load_model(
    name: str,
    *,
    weights: str = "random",
    backend: str | None = None,
    weights_path: str | None = None,
    device="auto",
    context_length: int | None = None,
    max_layer: int | None = None,
    seed: int = 0,
) -> ProbedModel:
    """Load a model by alias, hub id, local folder/file or timm name, ready for probing.

    ``weights="random"`` builds from the config with a seeded random init; ``"trained"``
    loads weights from ``weights_path``, else the hub (online) or the local cache (offline).
    ``max_layer`` builds only that many blocks (``info.num_layers`` still reports the full
    depth). ``context_length`` sets n for text models.
    """
    if not isinstance(name, str) or not name.strip():
        raise InputError("a model name is required (an alias such as vit-base, a hub id, a folder or a timm name)")
    name = name.strip()
    weights = (weights or "random").strip().lower()
    if weights not in ("random", "trained"):
        raise InputError(f"weights must be 'random' or 'trained', got {weights!r}")
    if backend is not None:
        backend = backend.strip().lower()
        if backend not in ("hf", "timm"):
            raise InputError(f"backend must be 'hf' or 'timm', got {backend!r}")
    if weights_path is not None:
        weights_path = os.path.expanduser(str(weights_path))
        if not os.path.exists(weights_path):
            raise InputError(f"weights path does not exist: {weights_path}")
        if weights == "random":
            raise InputError("a weights path was given together with random weights; use weights='trained' to load it")
    if max_layer is not None:
        try:
            max_layer = int(max_layer)
        except (TypeError, ValueError) as exc:
            raise InputError(f"max_layer must be an integer, got {max_layer!r}") from exc
        if max_layer < 0:
            raise InputError(f"max_layer must be >= 0, got {max_layer}")
    if context_length is not None:
        try:
            context_length = int(context_length)
        except (TypeError, ValueError) as exc:
            raise InputError(f"context length must be an integer, got {context_length!r}") from exc
        if context_length < 1:
            raise InputError(f"context length must be at least 1, got {context_length}")
    dev = resolve_device(device)

    # Decide the backend.
    alias = ALIASES.get(name.lower())
    timm_name: str | None = None
    use_timm = False
    if backend == "timm":
        use_timm = True
        if alias is not None:
            if "timm" not in alias:
                raise ModelError(f"alias {name} has no timm version; use the transformers backend")
            timm_name = alias["timm"]
        elif not _is_path_like(name):
            timm_name = _timm_name(name) or (name[5:] if name.startswith("timm:") else name)
    elif backend is None and alias is not None and "timm" in alias and weights_path and os.path.isfile(weights_path):
        keys = _state_file_keys(weights_path)
        if any(k.startswith(("blocks.", "patch_embed.", "module.blocks.")) for k in keys):
            use_timm, timm_name = True, alias["timm"]
    elif backend is None and alias is None:
        if _is_path_like(name):
            use_timm = _looks_like_timm_path(name)
        else:
            timm_name = _timm_name(name)
            use_timm = timm_name is not None

    try:
        with _quiet():
            if use_timm:
                return _load_timm(name, timm_name, weights, weights_path, dev, context_length, max_layer, seed)
            return _load_hf(name, alias, weights, weights_path, dev, context_length, max_layer, seed)
    except MhaauditError:
        raise
    except torch.cuda.OutOfMemoryError as exc:
        raise ModelError(f"{name}: out of GPU memory while loading ({_one_line(exc, 120)}); try --device cpu") from exc
    except (OSError, RuntimeError, ValueError, KeyError, TypeError, ImportError, AttributeError, AssertionError) as exc:
        raise ModelError(f"cannot load {name}: {_one_line(exc)}") from exc


# ------------------------------------------------------------------ transformers


def _hf_blocks(module: nn.Module) -> nn.ModuleList | None:
    for path in _BLOCK_PATHS:
        obj: Any = module
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList) and len(obj) > 0:
            return obj
    return None


def _hf_family_checks(cfg: Any, name: str) -> tuple[str, str, bool]:
    """(family, modality, is_decoder) for a transformers config, or ModelError."""
    family = getattr(cfg, "model_type", "") or ""
    if family in _HF_UNPROBEABLE:
        raise ModelError(f"{name} cannot be probed: {_HF_UNPROBEABLE[family]}")
    if family in _HF_IMAGE_FAMILIES:
        return family, "image", False
    vision_like = hasattr(cfg, "num_channels") or hasattr(cfg, "image_size") or hasattr(cfg, "patch_size")
    if vision_like and not hasattr(cfg, "vocab_size"):
        raise ModelError(
            f"{name} cannot be probed: image family {family or 'unknown'!r} is not one mhaaudit knows "
            f"(supported: {', '.join(_HF_IMAGE_FAMILIES)}); a class-token ViT is needed"
        )
    if not hasattr(cfg, "vocab_size"):
        raise ModelError(f"{name} cannot be probed: {family or 'this model'} is neither a ViT-style image model nor a text transformer")
    if getattr(cfg, "is_encoder_decoder", False):
        raise ModelError(f"{name} cannot be probed: encoder-decoder models ({family}) are not supported")
    archs = getattr(cfg, "architectures", None) or []
    is_decoder = (
        family in _HF_DECODER_TYPES
        or bool(getattr(cfg, "is_decoder", False))
        or any(a.endswith(("CausalLM", "LMHeadModel")) for a in archs)
    )
    return family, "text", is_decoder


def _alias_config(alias: dict) -> Any:
    from transformers import AutoConfig

    kw = dict(alias["config"])
    return AutoConfig.for_model(kw.pop("model_type"), **kw)


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


def _offline_weights_error(name: str, what: str) -> OfflineError:
    return OfflineError(
        f"trained weights for {name} ({what}) are not on this machine and the hub cannot be reached; "
        f"pass --weights PATH (a folder saved with save_pretrained, or a timm checkpoint file), or use random weights"
    )


def _hf_config_for(name: str, alias: dict | None, weights: str, weights_path: str | None, offline: bool):
    """(config, resolved, source) -- source: 'folder' | 'alias' | 'hub' | 'cache'."""
    from transformers import AutoConfig

    expanded = os.path.expanduser(name)
    if _is_path_like(name):
        if not os.path.exists(expanded):
            raise InputError(f"no such model folder or file: {name}")
        if os.path.isfile(expanded):
            raise InputError(
                f"{name} is a file; give a transformers model as a folder saved with save_pretrained, "
                f"or a timm checkpoint with backend timm"
            )
        if not os.path.exists(os.path.join(expanded, "config.json")):
            raise ModelError(f"{name} has no config.json; save transformers models with save_pretrained")
        data = _read_json(Path(expanded) / "config.json") or {}
        if "model_type" not in data and "architecture" in data:
            raise ModelError(f"{name} looks like a timm model folder; use backend timm")
        return AutoConfig.from_pretrained(expanded, local_files_only=True), os.path.abspath(expanded), "folder"
    if alias is not None:
        if weights == "trained" and weights_path is None:
            # Trained weights come with their own config (hub or local cache); decide offline at once.
            try:
                return AutoConfig.from_pretrained(alias["hf"], local_files_only=offline), alias["hf"], "alias-hub"
            except (OSError, ValueError) as exc:
                if offline:
                    raise _offline_weights_error(name, alias["hf"]) from exc
                raise ModelError(f"cannot fetch the config of {alias['hf']} for {name}: {_one_line(exc, 160)}") from exc
        return _alias_config(alias), alias["hf"], "alias"
    if weights_path is not None and os.path.exists(os.path.join(weights_path, "config.json")) and offline:
        # The weights folder carries the architecture; the hub config is not needed.
        try:
            cfg = AutoConfig.from_pretrained(name, local_files_only=True)
            return cfg, name, "cache"
        except (OSError, ValueError):
            return AutoConfig.from_pretrained(weights_path, local_files_only=True), name, "weights"
    try:
        cfg = AutoConfig.from_pretrained(name, local_files_only=offline)
        return cfg, name, ("cache" if offline else "hub")
    except (OSError, ValueError) as exc:
        if offline:
            if weights == "trained" and "/" in name and weights_path is None:
                raise _offline_weights_error(name, "hub") from exc
            if weights_path is not None:
                raise OfflineError(
                    f"the architecture of {name} (its config.json) is not in the local cache and the hub cannot be "
                    f"reached; name an alias ({_alias_list()}) or a local folder with config.json as the model"
                ) from exc
            if "/" in name:
                raise OfflineError(
                    f"the config of {name} is not in the local cache and the hub cannot be reached; "
                    f"pass a local folder, or use one of the built-in aliases: {_alias_list()}"
                ) from exc
            raise ModelError(
                f"unknown model {name!r}: not an alias ({_alias_list()}), a local folder, a timm model name, "
                f"or a hub id in the local cache"
            ) from exc
        raise ModelError(
            f"unknown model {name!r}: not an alias ({_alias_list()}), a local folder, a timm model name, "
            f"or a hub id ({_one_line(exc, 120)})"
        ) from exc


def _check_weights_fit(cfg_expected: Any, cfg_weights: Any, name: str, where: str) -> None:
    """ModelError when a weights folder's architecture differs from the named model's."""
    fields = ("model_type", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size")
    for f in fields:
        a, b = getattr(cfg_expected, f, None), getattr(cfg_weights, f, None)
        if a is not None and b is not None and a != b:
            raise ModelError(f"the weights at {where} do not fit {name}: {f} is {b} there but {a} in {name}")


def _load_hf(name, alias, weights, weights_path, dev, context_length, max_layer, seed) -> ProbedModel:
    from transformers import AutoModel

    offline = is_offline()
    if offline:
        force_offline_env()
    cfg, resolved, source = _hf_config_for(name, alias, weights, weights_path, offline)
    family, modality, is_decoder = _hf_family_checks(cfg, name)
    full_layers = int(getattr(cfg, "num_hidden_layers"))

    # Where the weights (and processor/tokenizer files) come from.
    weights_dir: str | None = None
    weights_file: str | None = None
    if weights == "trained":
        if weights_path is not None:
            wp = os.path.abspath(weights_path)
            wcfg_path = Path(wp) / "config.json"
            if os.path.isfile(wp):
                weights_file = wp
            elif wcfg_path.exists() and source != "folder":
                from transformers import AutoConfig

                wcfg = AutoConfig.from_pretrained(wp, local_files_only=True)
                _check_weights_fit(cfg, wcfg, name, weights_path)
                cfg = wcfg
            if weights_file is not None:
                wsource = f"weights file {wp}"
            else:
                weights_dir, wsource = wp, f"local folder {wp}"
        elif source == "folder":
            weights_dir, wsource = resolved, f"local folder {resolved}"
        else:
            weights_dir, wsource = resolved, (f"hub {resolved} (local cache)" if offline else f"hub {resolved}")
    else:
        wsource = {
            "alias": f"random init from the built-in {name.lower()} config",
            "folder": f"random init from the config in local folder {resolved}",
            "hub": f"random init from the config of hub {resolved}",
            "cache": f"random init from the config of hub {resolved} (local cache)",
        }[source]

    build_cfg = cfg
    built = full_layers
    if max_layer is not None and max_layer < full_layers:
        import copy

        build_cfg = copy.deepcopy(cfg)
        built = max(1, max_layer)
        build_cfg.num_hidden_layers = built

    if weights_file is not None:
        with _seeded(seed):
            module = AutoModel.from_config(build_cfg)
        try:
            _load_hf_state_file(module, weights_file, name)
        except ModelError as direct_error:
            # A file in the library's checkpoint format (what save_pretrained writes and the hub
            # serves) may name parameters differently from the modules; from_pretrained renames them.
            module = _load_hf_file_as_checkpoint(weights_file, build_cfg, seed)
            if module is None:
                raise direct_error
    elif weights == "trained":
        local_only = offline or weights_path is not None or source == "folder"
        try:
            module, info = AutoModel.from_pretrained(
                weights_dir, config=build_cfg, local_files_only=local_only, output_loading_info=True
            )
        except OSError as exc:
            if offline and weights_path is None and source != "folder":
                raise _offline_weights_error(name, resolved) from exc
            raise ModelError(f"cannot load weights for {name} from {weights_dir}: {_one_line(exc)}") from exc
        except RuntimeError as exc:
            raise ModelError(
                f"the weights at {weights_dir} do not fit {name}: {_describe_mismatch(weights_dir, build_cfg, local_only) or _one_line(exc)}"
            ) from exc
        missing = [k for k in info.get("missing_keys", []) if not any(s in k for s in _IGNORABLE_MISSING)]
        mismatched = list(info.get("mismatched_keys", []))
        if missing or mismatched:
            bad = sorted(missing)[0] if missing else str(mismatched[0])
            raise ModelError(
                f"the weights at {weights_dir} do not fit {name}: {len(missing) + len(mismatched)} parameter(s) "
                f"missing or of the wrong shape (e.g. {bad})"
            )
    else:
        with _seeded(seed):
            module = AutoModel.from_config(build_cfg)
        blocks0 = _hf_blocks(module)
        if blocks0 is not None:
            _reinit_depth_invariant(module, blocks0, seed, full_layers)

    module = module.to(device=dev, dtype=torch.float32).eval()
    for p in module.parameters():
        p.requires_grad_(False)
    blocks = _hf_blocks(module)
    if blocks is None:
        raise ModelError(f"{name} cannot be probed: no list of transformer blocks found in {type(module).__name__}")

    d = int(getattr(cfg, "hidden_size"))
    heads = int(getattr(cfg, "num_attention_heads"))
    head_dim = int(getattr(cfg, "head_dim", None) or d // heads)

    tokenizer = None
    transform = None
    if modality == "text":
        if context_length is not None and not isinstance(context_length, int):  # pragma: no cover
            raise InputError("context length must be an integer")
        maxpos = _max_positions(cfg)
        if context_length is None:
            n = maxpos if maxpos is not None else _ENCODER_DEFAULT_MAX_N
            if not is_decoder:
                n = min(n, _ENCODER_DEFAULT_MAX_N)
        else:
            n = context_length
            if maxpos is not None and n > maxpos:
                raise InputError(f"context length {n} exceeds the {maxpos} position embeddings of {name}")
        query_index = n - 1 if is_decoder else 0
        tok_candidates = list(dict.fromkeys(t for t in (weights_dir, resolved) if t))
        tokenizer = _load_tokenizer(tok_candidates, offline)
    else:
        if context_length is not None:
            raise InputError("context length applies to text models only; image models take n from the image size")
        proc_candidates = list(dict.fromkeys(t for t in (weights_dir, resolved) if t))
        transform = _hf_image_transform(cfg, family, proc_candidates, offline)
        query_index = 0
        n = 0  # measured below

    info_obj = ModelInfo(
        name=name,
        resolved=resolved,
        backend="hf",
        family=family,
        modality=modality,
        d=d,
        n=n,
        query_index=query_index,
        num_layers=full_layers,
        num_heads=heads,
        head_dim=head_dim,
        weights=weights,
        weights_source=wsource,
    )
    pm = ProbedModel(info_obj, module, dev, tokenizer=tokenizer, image_transform=transform, blocks=blocks, config=cfg)
    if modality == "image":
        pm.info = dataclasses.replace(pm.info, n=_measure_tokens(pm))
    return pm


def _postorder(module: nn.Module, skip: set[int]) -> list[nn.Module]:
    out: list[nn.Module] = []

    def rec(m: nn.Module) -> None:
        if id(m) in skip:
            return
        for c in m.children():
            rec(c)
        out.append(m)

    rec(module)
    return out


def _reinit_depth_invariant(model: nn.Module, blocks: nn.ModuleList, seed: int, full_layers: int) -> None:
    """Re-draw a random init so that it does not depend on how many blocks were built.

    The model's own ``_init_weights`` runs once more, children before parents as transformers
    does, with the config's full depth (GPT-2 scales its residual projections by the depth), and
    with one seed per unit: the non-block modules share one, block i gets its own. A model built
    with ``max_layer=k`` then has exactly the first k blocks of the full-depth model of that seed.
    """
    import zlib

    init_fn = getattr(model, "_init_weights", None)
    cfg = getattr(model, "config", None)
    if init_fn is None or cfg is None:
        return
    units = [("rest", _postorder(model, {id(b) for b in blocks}))]
    units += [(f"block.{i}", _postorder(b, set())) for i, b in enumerate(blocks)]
    try:
        from transformers import initialization as hf_init

        guard: Any = hf_init.guard_torch_init_functions()
    except Exception:  # noqa: BLE001 - older transformers
        guard = contextlib.nullcontext()
    saved = cfg.num_hidden_layers
    cfg.num_hidden_layers = full_layers
    try:
        with guard, torch.no_grad():
            for unit, mods in units:
                for m in mods:
                    for t in list(m.parameters(recurse=False)) + list(m.buffers(recurse=False)):
                        if hasattr(t, "_is_hf_initialized"):
                            delattr(t, "_is_hf_initialized")
                with _seeded((int(seed) * 1000003 + zlib.crc32(unit.encode())) % (2**63)):
                    for m in mods:
                        init_fn(m)
    finally:
        cfg.num_hidden_layers = saved


def _describe_mismatch(weights_dir: str, cfg: Any, local_only: bool) -> str | None:
    """Name the first parameter whose shape differs between a checkpoint and a config."""
    from transformers import AutoModel

    try:
        _m, info = AutoModel.from_pretrained(
            weights_dir, config=cfg, local_files_only=local_only, output_loading_info=True, ignore_mismatched_sizes=True
        )
        mism = list(info.get("mismatched_keys", []))
    except Exception:  # noqa: BLE001 - only used to word an error message
        return None
    if not mism:
        return None
    first = mism[0]
    if isinstance(first, (tuple, list)) and len(first) == 3:
        key, have, want = first
        return f"{len(mism)} parameter(s) of the wrong shape, e.g. {key}: {tuple(have)} in the checkpoint, {tuple(want)} expected"
    return f"{len(mism)} parameter(s) of the wrong shape, e.g. {first}"


def _read_state_file(path: str) -> dict[str, torch.Tensor]:
    """A state dict from a .safetensors file or a torch checkpoint (weights only)."""
    try:
        if path.endswith(".safetensors"):
            from safetensors.torch import load_file

            sd = load_file(path)
        else:
            sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - unreadable or not a checkpoint
        raise ModelError(f"cannot read the checkpoint {path}: {_one_line(exc, 160)}") from exc
    for key in ("state_dict", "model", "module"):
        if isinstance(sd, dict) and key in sd and isinstance(sd[key], dict):
            sd = sd[key]
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise ModelError(f"the checkpoint {path} does not hold a state dict of tensors")
    return sd


def _state_file_keys(path: str) -> list[str]:
    if path.endswith(".safetensors"):
        try:
            from safetensors import safe_open

            with safe_open(path, framework="pt") as fh:
                return list(fh.keys())
        except Exception:  # noqa: BLE001
            return []
    try:
        return list(_read_state_file(path))
    except ModelError:
        return []


def _load_hf_state_file(module: nn.Module, path: str, name: str) -> None:
    """Load a single weights file into a transformers model, checking that it fits."""
    sd = _read_state_file(path)
    prefix = getattr(module, "base_model_prefix", "") or ""
    own = module.state_dict()
    if prefix and not any(k in own for k in sd) and any(k.startswith(prefix + ".") for k in sd):
        sd = {k[len(prefix) + 1 :]: v for k, v in sd.items() if k.startswith(prefix + ".")}
    mismatched = [k for k, v in sd.items() if k in own and tuple(own[k].shape) != tuple(v.shape)]
    if mismatched:
        k = mismatched[0]
        raise ModelError(
            f"the weights in {path} do not fit {name}: {k} has shape {tuple(sd[k].shape)}, "
            f"the model expects {tuple(own[k].shape)}"
        )
    result = module.load_state_dict({k: v for k, v in sd.items() if k in own}, strict=False)
    persistent = {k for k, _ in module.named_parameters()}
    missing = [k for k in result.missing_keys if k in persistent and not any(s in k for s in _IGNORABLE_MISSING)]
    if missing:
        raise ModelError(f"the weights in {path} do not fit {name}: {len(missing)} parameter(s) missing (e.g. {missing[0]})")


def _load_hf_file_as_checkpoint(path: str, cfg: Any, seed: int) -> nn.Module | None:
    """Load a single weights file through ``from_pretrained`` (checkpoint key renaming, task-head
    prefixes), staged in a temporary folder beside its config. None when it does not fit."""
    import shutil
    import tempfile

    from transformers import AutoModel

    fname = "model.safetensors" if path.endswith(".safetensors") else "pytorch_model.bin"
    with tempfile.TemporaryDirectory(prefix="mhaaudit-weights-") as tmp:
        try:
            os.symlink(os.path.abspath(path), os.path.join(tmp, fname))
        except OSError:
            shutil.copyfile(path, os.path.join(tmp, fname))
        cfg.to_json_file(os.path.join(tmp, "config.json"))
        try:
            with _seeded(seed):
                module, info = AutoModel.from_pretrained(tmp, config=cfg, local_files_only=True, output_loading_info=True)
        except Exception:  # noqa: BLE001 - the caller reports the direct load's clearer error
            return None
    missing = [k for k in info.get("missing_keys", []) if not any(s in k for s in _IGNORABLE_MISSING)]
    if missing or info.get("mismatched_keys"):
        return None
    return module


def _load_tokenizer(candidates: list[str], offline: bool) -> object | None:
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
            tok = AutoTokenizer.from_pretrained(src, local_files_only=offline or local)
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


def _hf_image_transform(cfg: Any, family: str, sources: list[str], offline: bool) -> Callable[[list], torch.Tensor]:
    """The model's own image preprocessing: its saved processor when present, else from the config."""
    proc = None
    for source in sources:
        local = os.path.isdir(source)
        if local and not os.path.exists(os.path.join(source, "preprocessor_config.json")):
            continue
        try:
            from transformers import AutoImageProcessor

            proc = AutoImageProcessor.from_pretrained(source, local_files_only=offline or local)
            break
        except Exception:  # noqa: BLE001 - fall back to the config values
            proc = None
    if proc is None:
        from transformers import ViTImageProcessor

        size = getattr(cfg, "image_size", 224)
        if isinstance(size, (list, tuple)):
            h, w = int(size[0]), int(size[-1])
        else:
            h = w = int(size)
        if family == "vit":
            mean, std = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)
        else:
            mean, std = _IMAGENET_MEAN, _IMAGENET_STD
        proc = ViTImageProcessor(size={"height": h, "width": w}, image_mean=mean, image_std=std)

    def transform(images: list) -> torch.Tensor:
        out = proc(images=images, return_tensors="pt")
        return out["pixel_values"]

    return transform


def _measure_tokens(pm: ProbedModel) -> int:
    """Tokens per example, measured by running the embedding on one blank image."""
    from PIL import Image

    inputs = pm.preprocess([Image.new("RGB", (256, 256), (128, 128, 128))])
    return int(pm.capture(inputs, [0])[0].shape[1])


# ------------------------------------------------------------------ timm


def _load_timm(name, timm_name, weights, weights_path, dev, context_length, max_layer, seed) -> ProbedModel:
    import timm
    import timm.data

    if context_length is not None:
        raise InputError("context length applies to text models only; image models take n from the image size")
    offline = is_offline()
    if offline:
        force_offline_env()

    expanded = os.path.expanduser(name[5:] if name.startswith("timm:") else name)
    file_path: str | None = None
    model_args: dict = {}
    if timm_name is None:
        # A local timm folder (config.json with "architecture") or a checkpoint file beside one.
        if not os.path.exists(expanded):
            raise InputError(f"no such timm model, folder or file: {name}")
        folder = Path(expanded) if os.path.isdir(expanded) else Path(expanded).parent
        data = _read_json(folder / "config.json") or {}
        arch = data.get("architecture")
        if not arch:
            raise InputError(
                f"cannot tell the timm architecture of {name}: give the timm model name as the model and "
                f"the checkpoint file as --weights"
            )
        timm_name = arch
        model_args = dict(data.get("model_args") or {})
        if os.path.isfile(expanded):
            file_path = expanded
        else:
            for fn in ("model.safetensors", "pytorch_model.bin", "model.pth", "checkpoint.pth"):
                if (folder / fn).exists():
                    file_path = str(folder / fn)
                    break
        if weights == "trained" and weights_path is None and file_path is None:
            raise ModelError(f"no checkpoint file found in {folder}")
    if not timm.is_model(timm_name):
        raise ModelError(f"unknown timm model {timm_name!r}: not in timm.list_models()")

    base, _tag = timm.models.split_model_name_tag(timm_name)
    # Full depth and structure, without allocating memory.
    with torch.device("meta"):
        probe = timm.create_model(timm_name, pretrained=False, num_classes=0, **model_args)
    _check_timm_structure(probe, name)
    full_layers = len(probe.blocks)
    heads = int(getattr(probe.blocks[0].attn, "num_heads", 1))
    d = int(probe.embed_dim if hasattr(probe, "embed_dim") else probe.num_features)
    head_dim = int(getattr(probe.blocks[0].attn, "head_dim", d // heads))
    del probe

    built = full_layers
    kwargs = dict(model_args)
    if max_layer is not None and max_layer < full_layers:
        built = max(1, max_layer)
        kwargs["depth"] = built

    if weights == "trained" and weights_path is None and file_path is None:
        if offline:
            raise _offline_weights_error(name, f"timm {timm_name}")
        model = timm.create_model(timm_name, pretrained=True, num_classes=0, **model_args)
        if built < full_layers:
            model.blocks = nn.Sequential(*list(model.blocks)[:built])
        wsource = f"timm pretrained {timm_name} (hub)"
    else:
        with _seeded(seed):
            model = timm.create_model(timm_name, pretrained=False, num_classes=0, **kwargs)
        if weights == "random":
            _timm_reinit_depth_invariant(model, seed)
        if weights == "trained":
            path = os.path.abspath(weights_path or file_path)  # type: ignore[arg-type]
            if os.path.isdir(path):
                found = [p for p in ("model.safetensors", "pytorch_model.bin", "model.pth") if os.path.exists(os.path.join(path, p))]
                if not found:
                    raise ModelError(f"no checkpoint file (model.safetensors, pytorch_model.bin) in {path}")
                path = os.path.join(path, found[0])
            _load_timm_file(model, path, built, name)
            wsource = f"timm checkpoint {path}"
        else:
            wsource = f"random init of timm {timm_name}" + (f" (config from {expanded})" if model_args else "")

    model = model.to(device=dev, dtype=torch.float32).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        data_cfg = timm.data.resolve_data_config({}, model=model)
        img_size = getattr(getattr(model, "patch_embed", None), "img_size", None)
        if img_size is not None and tuple(data_cfg["input_size"][1:]) != tuple(img_size):
            # The pretrained config may describe another resolution than the one the model was built for.
            data_cfg["input_size"] = (data_cfg["input_size"][0], *tuple(img_size))
        tf = timm.data.create_transform(**data_cfg)
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"{name}: cannot build timm preprocessing ({_one_line(exc, 120)})") from exc

    def transform(images: list) -> torch.Tensor:
        return torch.stack([tf(im) for im in images])

    blocks = model.blocks
    info = ModelInfo(
        name=name,
        resolved=timm_name if file_path is None else os.path.abspath(expanded),
        backend="timm",
        family=base.split("_")[0],
        modality="image",
        d=d,
        n=0,
        query_index=0,
        num_layers=full_layers,
        num_heads=heads,
        head_dim=head_dim,
        weights=weights,
        weights_source=wsource,
    )
    pm = ProbedModel(info, model, dev, image_transform=transform, blocks=blocks, config=getattr(model, "pretrained_cfg", None))
    pm.info = dataclasses.replace(pm.info, n=_measure_tokens(pm))
    return pm


def _timm_reinit_depth_invariant(model: nn.Module, seed: int) -> None:
    """Re-draw a timm ViT's random init so that it does not depend on how many blocks were built.

    timm's own init scheme runs again: the whole model from one seed (position embedding and
    class token first, then the modules in order), then block i once more from its own seed.
    The first k blocks of a depth-k build then equal those of the full-depth model of that seed.
    """
    import zlib

    from timm.models._manipulate import named_apply
    from timm.models.vision_transformer import VisionTransformer, get_init_weights_vit

    if not isinstance(model, VisionTransformer) or not hasattr(model, "weight_init_mode"):
        return
    mode = model.weight_init_mode
    with torch.no_grad():
        with _seeded((int(seed) * 1000003 + zlib.crc32(b"rest")) % (2**63)):
            model.init_weights(mode, needs_reset=True)
        fn = get_init_weights_vit(mode, 0.0, needs_reset=True)
        for i, blk in enumerate(model.blocks):
            with _seeded((int(seed) * 1000003 + zlib.crc32(f"block.{i}".encode())) % (2**63)):
                named_apply(fn, blk, name=f"blocks.{i}")
            if getattr(model, "fix_init", False):
                scale = math.sqrt(2.0 * (i + 1))
                blk.attn.proj.weight.div_(scale)
                blk.mlp.fc2.weight.div_(scale)


def _check_timm_structure(model: nn.Module, name: str) -> None:
    needed = ("patch_embed", "_pos_embed", "patch_drop", "norm_pre", "blocks")
    if not all(hasattr(model, a) for a in needed):
        kind = type(model).__name__
        raise ModelError(
            f"{name} cannot be probed: timm {kind} is not a ViT-style token transformer "
            f"(needs patch embedding, class token and a flat list of blocks)"
        )
    if getattr(model, "cls_token", None) is None or int(getattr(model, "num_prefix_tokens", 0)) == 0:
        pool = getattr(model, "global_pool", "")
        raise ModelError(
            f"{name} cannot be probed: it has no class token (global_pool={pool!r}), so there is no query token"
        )


def _load_timm_file(model: nn.Module, path: str, built: int, name: str) -> None:
    import re

    from timm.models import load_state_dict

    try:
        sd = load_state_dict(path, use_ema=True)
    except Exception as exc:  # noqa: BLE001 - unreadable file
        raise ModelError(f"cannot read the timm checkpoint {path}: {_one_line(exc, 160)}") from exc
    import sys

    filt = getattr(sys.modules.get(type(model).__module__), "checkpoint_filter_fn", None)
    if filt is not None:
        try:
            sd = filt(sd, model)
        except Exception as exc:  # noqa: BLE001
            raise ModelError(f"the checkpoint {path} does not fit {name}: {_one_line(exc, 160)}") from exc
    pat = re.compile(r"^blocks\.(\d+)\.")
    sd = {k: v for k, v in sd.items() if not ((m := pat.match(k)) and int(m.group(1)) >= built)}
    own = model.state_dict()
    mismatched = [k for k, v in sd.items() if k in own and tuple(own[k].shape) != tuple(v.shape)]
    if mismatched:
        k = mismatched[0]
        raise ModelError(
            f"the checkpoint {path} does not fit {name}: {k} has shape {tuple(sd[k].shape)}, "
            f"the model expects {tuple(own[k].shape)}"
        )
    result = model.load_state_dict(sd, strict=False)
    missing = list(result.missing_keys)
    if missing:
        raise ModelError(
            f"the checkpoint {path} does not fit {name}: {len(missing)} parameter(s) missing (e.g. {missing[0]})"
        )


def modality_of(model: str, *, backend: str | None = None, weights_path: str | None = None) -> str:
    """Image or text, decided from the name or the config, without building the model."""
    import json
    from pathlib import Path

    name = model.strip()
    if name.lower() in ALIASES:
        return ALIASES[name.lower()]["modality"]
    if backend == "timm" or name.startswith("timm:"):
        return "image"
    for folder in (name, weights_path):
        if folder and (Path(folder) / "config.json").is_file():
            try:
                cfg = json.loads((Path(folder) / "config.json").read_text())
            except (OSError, ValueError):
                cfg = {}
            if "model_type" not in cfg and "architecture" in cfg:
                return "image"  # a timm model folder
            return "image" if cfg.get("model_type", "") in _HF_IMAGE_FAMILIES else "text"
    if Path(name).is_file():
        return "image"  # a checkpoint file: timm
    try:
        import timm

        if backend != "hf" and timm.is_model(name):
            return "image"
    except Exception:  # pragma: no cover - timm is a dependency
        pass
    try:
        from transformers import AutoConfig

        from .hub import is_offline

        cfg = AutoConfig.from_pretrained(name, local_files_only=is_offline())
        return "image" if getattr(cfg, "model_type", "") in _HF_IMAGE_FAMILIES else "text"
    except Exception:
        return "image"  # the loader reports the real problem with this name
