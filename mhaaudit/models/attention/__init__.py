"""Reading a block's key/query weights into one canonical layout, one adapter per block layout.

:func:`first_attention` finds the adapter whose layout the block has and returns its
:class:`AttentionWeights`. The layouts known (first match wins, in this order):

- ``timm_vit``: timm ViT, a fused ``qkv`` Linear;
- ``gpt2``: GPT-2, a ``Conv1D`` ``c_attn``, causal;
- ``hf_vit``: transformers ViT / DeiT / DINOv2, ``q_proj`` / ``k_proj`` after ``layernorm_before``;
- ``bert``: BERT-style post-LN ``self.query`` / ``self.key`` (BERT, RoBERTa, ELECTRA);
- ``self-attn``: ``self_attn.q_proj`` / ``k_proj`` (CLIP and SigLIP vision towers, OPT);
- ``distilbert``: DistilBERT's post-LN ``q_lin`` / ``k_lin``.

Before an adapter is asked, :func:`.support.unsupported` lists what the block's attention does
beyond that form (rotary positions, relative attention, grouped key/value heads, query/key norms,
logit soft-capping); a block that shows any is refused with those reasons.

A new layout is one module here with a ``@register_adapter`` function, imported below.
"""

from __future__ import annotations

from .registry import ADAPTERS, Adapter, BlockContext, adapter_for, first_attention, register_adapter
from .weights import AttentionWeights

# The adapters register themselves on import; the order is the order they are tried in.
from . import timm_vit, gpt2, hf_vit, bert, self_attn, distilbert  # noqa: F401  isort: skip

__all__ = ["ADAPTERS", "Adapter", "AttentionWeights", "BlockContext", "adapter_for", "first_attention", "register_adapter"]
