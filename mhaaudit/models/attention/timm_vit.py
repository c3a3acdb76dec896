"""timm ViT blocks (ViT, DeiT, DINOv2, SigLIP; BEiT-style query bias): one fused ``qkv`` Linear
(queries, keys, values stacked), pre-LN ``norm1``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .registry import BlockContext, register_adapter
from .weights import AttentionWeights, head_bias, linear_heads


def _matches(block: nn.Module) -> bool:
    return isinstance(getattr(getattr(block, "attn", None), "qkv", None), nn.Linear)


@register_adapter("timm-vit", _matches)
def read(block: Any, ctx: BlockContext) -> AttentionWeights:
    """The key/query weights of a timm ViT block, split from the fused ``attn.qkv`` linear after ``norm1``; a
    BEiT-style query bias without key bias gets a zero key bias; the module's own scale (1/sqrt(d_h) by default)."""
    attn = block.attn
    heads = int(getattr(attn, "num_heads", ctx.num_heads))
    d = attn.qkv.in_features
    dh = int(getattr(attn, "head_dim", d // heads))
    w, b = attn.qkv.weight, attn.qkv.bias
    q_rows, k_rows = slice(0, heads * dh), slice(heads * dh, 2 * heads * dh)
    b_q = b_k = None
    if b is not None:
        b_q, b_k = head_bias(b[q_rows], heads), head_bias(b[k_rows], heads)
    elif getattr(attn, "q_bias", None) is not None:  # BEiT-style: a query bias, no key bias
        b_q = head_bias(attn.q_bias, heads)
        b_k = torch.zeros_like(b_q)
    scale = float(getattr(attn, "scale", dh**-0.5))
    return AttentionWeights(
        linear_heads(w[q_rows], heads), linear_heads(w[k_rows], heads), b_q, b_k, block.norm1, scale, False
    )
