"""DistilBERT blocks (post-LN): ``attention.q_lin`` / ``attention.k_lin`` see the block input directly."""

from __future__ import annotations

from typing import Any

from torch import nn

from .registry import BlockContext, register_adapter
from .weights import AttentionWeights


def _matches(block: nn.Module) -> bool:
    att = getattr(block, "attention", None)
    return hasattr(att, "q_lin") and hasattr(att, "k_lin")


@register_adapter("distilbert", _matches)
def read(block: Any, ctx: BlockContext) -> AttentionWeights:
    """The key/query weights of a DistilBERT layer (``q_lin`` / ``k_lin``): no pre-norm (post-LN), scale 1/sqrt(d_h)."""
    att = block.attention
    return AttentionWeights.from_linears(
        att.q_lin, att.k_lin, ctx.num_heads, pre=nn.Identity(), scale=ctx.head_dim**-0.5, causal=ctx.causal
    )
