"""CTRL blocks: ``multi_head_attention.Wq`` / ``Wk`` (``nn.Linear``, heads side by side) after the
pre-LN ``layernorm1``, causal."""

from __future__ import annotations

from typing import Any

from torch import nn

from .registry import BlockContext, register_adapter
from .weights import AttentionWeights


def _matches(block: nn.Module) -> bool:
    att = getattr(block, "multi_head_attention", None)
    return hasattr(att, "Wq") and hasattr(att, "Wk") and hasattr(block, "layernorm1")


@register_adapter("ctrl", _matches)
def read(block: Any, ctx: BlockContext) -> AttentionWeights:
    """The key/query weights of a CTRL layer (``Wq`` / ``Wk``) after ``layernorm1``, causal, with the layer's own
    scaling (1/sqrt(d_h) when it states none)."""
    att = block.multi_head_attention
    scale = float(getattr(att, "scaling", None) or ctx.head_dim**-0.5)
    return AttentionWeights.from_linears(att.Wq, att.Wk, ctx.num_heads, pre=block.layernorm1, scale=scale, causal=True)
