"""Blocks with ``self_attn.q_proj`` / ``self_attn.k_proj``: CLIP and SigLIP vision towers
(``layer_norm1`` before the attention), OPT (``self_attn_layer_norm``, before the attention unless
the config puts it after), and Llama-style decoders (``input_layernorm``; their rotary positions
are refused before an adapter is asked, see :mod:`.support`)."""

from __future__ import annotations

from typing import Any

from torch import nn

from ...errors import ModelError
from .registry import BlockContext, register_adapter
from .weights import AttentionWeights


def _matches(block: nn.Module) -> bool:
    att = getattr(block, "self_attn", None)
    return hasattr(att, "q_proj") and hasattr(att, "k_proj")


def _pre(block: Any, ctx: BlockContext) -> nn.Module | None:
    if hasattr(block, "self_attn_layer_norm"):  # OPT: pre-LN unless do_layer_norm_before is off
        return block.self_attn_layer_norm if getattr(ctx.config, "do_layer_norm_before", True) else nn.Identity()
    return getattr(block, "layer_norm1", None) or getattr(block, "input_layernorm", None)


@register_adapter("self-attn", _matches)
def read(block: Any, ctx: BlockContext) -> AttentionWeights:
    """The key/query weights of a block with a ``self_attn`` module (``q_proj`` / ``k_proj``) after its pre-attention
    norm, with the module's own scaling (1/sqrt(d_h) when it states none).

    Raises:
        ModelError: when the block's pre-attention norm cannot be found.
    """
    pre = _pre(block, ctx)
    if pre is None:
        raise ModelError(f"{ctx.model}: cannot find the pre-attention norm of block {ctx.layer}")
    att = block.self_attn
    scale = float(getattr(att, "scaling", None) or getattr(att, "scale", None) or ctx.head_dim**-0.5)
    return AttentionWeights.from_linears(att.q_proj, att.k_proj, ctx.num_heads, pre=pre, scale=scale, causal=ctx.causal)
