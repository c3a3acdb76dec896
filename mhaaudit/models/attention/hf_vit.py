"""transformers ViT, DeiT, DINOv2 and BEiT blocks (pre-LN, ``layernorm_before`` or ``norm1`` in
front of the attention). Two layouts of the same attention: ``attention.q_proj`` / ``k_proj``
(transformers 5) and ``attention.attention.query`` / ``key`` (transformers 4)."""

from __future__ import annotations

from typing import Any

from torch import nn

from .registry import BlockContext, register_adapter
from .weights import AttentionWeights


def _linears(block: nn.Module) -> tuple[nn.Linear, nn.Linear] | None:
    att: Any = getattr(block, "attention", None)  # a module of either layout, or None
    if hasattr(att, "q_proj") and hasattr(att, "k_proj"):
        return att.q_proj, att.k_proj
    inner: Any = getattr(att, "attention", None)
    if hasattr(inner, "query") and hasattr(inner, "key"):
        return inner.query, inner.key
    return None


def _matches(block: nn.Module) -> bool:
    return _linears(block) is not None and (hasattr(block, "layernorm_before") or hasattr(block, "norm1"))


@register_adapter("hf-vit", _matches)
def read(block: nn.Module, ctx: BlockContext) -> AttentionWeights:
    """The key/query linears of a transformers ViT-style layer after its pre-attention norm
    (``layernorm_before`` or ``norm1``), scale 1/sqrt(d_h)."""
    pre = getattr(block, "layernorm_before", None) or getattr(block, "norm1", None)
    linears = _linears(block)
    assert pre is not None and linears is not None, "_matches requires both"
    q, k = linears
    return AttentionWeights.from_linears(q, k, ctx.num_heads, pre=pre, scale=ctx.head_dim**-0.5, causal=ctx.causal)
