"""GPT-Neo blocks: ``attn.attention.q_proj`` / ``k_proj`` (no biases) after the pre-LN ``ln_1``, causal,
and no 1/sqrt(d_h) scaling of the logits. Its local (windowed) blocks are refused before an
adapter is asked (:mod:`.support`)."""

from __future__ import annotations

from typing import Any

from torch import nn

from .registry import BlockContext, register_adapter
from .weights import AttentionWeights


def _matches(block: nn.Module) -> bool:
    att = getattr(getattr(block, "attn", None), "attention", None)
    return hasattr(att, "q_proj") and hasattr(att, "k_proj") and hasattr(block, "ln_1")


@register_adapter("gpt_neo", _matches)
def read(block: Any, ctx: BlockContext) -> AttentionWeights:
    """The key/query weights of a GPT-Neo block (``q_proj`` / ``k_proj``) after ``ln_1``, causal, unscaled (GPT-Neo
    applies no 1/sqrt(d_h))."""
    att = block.attn.attention
    return AttentionWeights.from_linears(att.q_proj, att.k_proj, ctx.num_heads, pre=block.ln_1, scale=1.0, causal=True)
