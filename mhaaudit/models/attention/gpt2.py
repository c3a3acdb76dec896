"""GPT-2 blocks: a ``Conv1D`` ``c_attn`` with weight (d, 3d) applied as ``x @ W + b``, pre-LN ``ln_1``, causal."""

from __future__ import annotations

from typing import Any

from torch import nn

from .registry import BlockContext, register_adapter
from .weights import AttentionWeights, head_bias


def _matches(block: nn.Module) -> bool:
    return hasattr(getattr(block, "attn", None), "c_attn")


@register_adapter("gpt2", _matches)
def read(block: Any, ctx: BlockContext) -> AttentionWeights:
    """The key/query weights of a GPT-2 block, split from the fused ``c_attn`` Conv1D (d, 3d) after ``ln_1``, causal;
    scale 1/sqrt(d_h) unless the config turns it off, divided by the layer number when the config asks."""
    heads, dh = ctx.num_heads, ctx.head_dim
    c_attn = block.attn.c_attn
    w = c_attn.weight.detach().float()
    d = w.shape[0]
    W_q = w[:, :d].reshape(d, heads, dh).permute(1, 0, 2).contiguous()
    W_k = w[:, d : 2 * d].reshape(d, heads, dh).permute(1, 0, 2).contiguous()
    b = c_attn.bias
    b_q = head_bias(b[:d], heads) if b is not None else None
    b_k = head_bias(b[d : 2 * d], heads) if b is not None else None
    scale = dh**-0.5 if getattr(ctx.config, "scale_attn_weights", True) else 1.0
    if getattr(ctx.config, "scale_attn_by_inverse_layer_idx", False):
        scale /= float(ctx.layer)
    return AttentionWeights(W_q, W_k, b_q, b_k, block.ln_1, scale, True)
