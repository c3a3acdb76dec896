"""BERT-style blocks (post-LN): ``attention.self.query`` / ``attention.self.key`` see the block input directly."""

from __future__ import annotations

from typing import Any

from torch import nn

from .registry import BlockContext, register_adapter
from .weights import AttentionWeights


def _matches(block: nn.Module) -> bool:
    selfatt = getattr(getattr(block, "attention", None), "self", None)
    return hasattr(selfatt, "query") and hasattr(selfatt, "key")


@register_adapter("bert", _matches)
def read(block: Any, ctx: BlockContext) -> AttentionWeights:
    """The key/query weights of a BERT layer (``attention.self.query`` / ``key``): the block input is not normed
    first (post-LN), scale 1/sqrt(d_h)."""
    selfatt = block.attention.self
    return AttentionWeights.from_linears(
        selfatt.query, selfatt.key, ctx.num_heads, pre=nn.Identity(), scale=ctx.head_dim**-0.5, causal=ctx.causal
    )
