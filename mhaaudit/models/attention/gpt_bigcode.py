"""GPT-BigCode blocks with one key/value head per query head (``multi_query`` off): an ``nn.Linear``
``c_attn`` whose output holds each head's query, key and value side by side (head h: rows
``3 h d_h`` to ``3 (h + 1) d_h`` of the weight), pre-LN ``ln_1``, causal. The multi-query layout
(one key/value head for all) is refused before an adapter is asked (:mod:`.support`)."""

from __future__ import annotations

from typing import Any

from torch import nn

from .registry import BlockContext, register_adapter
from .weights import AttentionWeights


def _matches(block: nn.Module) -> bool:
    return isinstance(getattr(getattr(block, "attn", None), "c_attn", None), nn.Linear)


@register_adapter("gpt_bigcode", _matches)
def read(block: Any, ctx: BlockContext) -> AttentionWeights:
    """The key/query weights of a GPTBigCode block, split from the fused per-head ``c_attn`` rows after ``ln_1``,
    causal; scale 1/sqrt(d_h) unless the config turns it off."""
    heads, dh = ctx.num_heads, ctx.head_dim
    c_attn = block.attn.c_attn
    w = c_attn.weight.detach().float().reshape(heads, 3, dh, -1)  # (H, q|k|v, d_h, d)
    W_q, W_k = (w[:, i].transpose(1, 2).contiguous() for i in (0, 1))
    b = None if c_attn.bias is None else c_attn.bias.detach().float().reshape(heads, 3, dh)
    b_q, b_k = (None, None) if b is None else (b[:, 0].contiguous(), b[:, 1].contiguous())
    scale = dh**-0.5 if getattr(ctx.config, "scale_attn_weights", True) else 1.0
    return AttentionWeights(W_q, W_k, b_q, b_k, block.ln_1, scale, True)
