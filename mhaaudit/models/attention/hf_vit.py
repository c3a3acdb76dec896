"""transformers ViT, DeiT and DINOv2 blocks (pre-LN): ``attention.q_proj`` / ``attention.k_proj``,
with ``layernorm_before`` (or ``norm1``) in front of the attention."""

from __future__ import annotations

from torch import nn

from ...errors import ModelError
from .registry import BlockContext, register_adapter
from .weights import AttentionWeights


def _matches(block: nn.Module) -> bool:
    att = getattr(block, "attention", None)
    return hasattr(att, "q_proj") and hasattr(att, "k_proj")


@register_adapter("hf-vit", _matches)
def read(block: nn.Module, ctx: BlockContext) -> AttentionWeights:
    pre = getattr(block, "layernorm_before", None) or getattr(block, "norm1", None)
    if pre is None:
        raise ModelError(f"{ctx.model}: cannot find the pre-attention LayerNorm of block {ctx.layer}")
    att = block.attention
    return AttentionWeights.from_linears(att.q_proj, att.k_proj, ctx.num_heads, pre=pre, scale=ctx.head_dim**-0.5,
                                         causal=ctx.causal)
