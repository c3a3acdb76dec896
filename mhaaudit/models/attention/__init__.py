"""Reading a block's key/query weights into one canonical layout, one adapter per block layout.

:func:`first_attention` finds the adapter whose layout the block has and returns its
:class:`AttentionWeights`. The layouts known (first match wins, in this order):

- ``timm_vit``: timm ViT, a fused ``qkv`` Linear;
- ``gpt2``: GPT-2, a ``Conv1D`` ``c_attn``, causal;
- ``hf_vit``: transformers ViT / DeiT / DINOv2, ``q_proj`` / ``k_proj`` after ``layernorm_before``;
- ``bert``: BERT-style post-LN ``self.query`` / ``self.key``.

A new layout is one module here with a ``@register_adapter`` function, imported below.
"""

from __future__ import annotations

from .registry import ADAPTERS, Adapter, BlockContext, adapter_for, first_attention, register_adapter
from .weights import AttentionWeights

# The adapters register themselves on import; the order is the order they are tried in.
from . import timm_vit, gpt2, hf_vit, bert  # noqa: E402,F401  isort: skip

__all__ = ["ADAPTERS", "Adapter", "AttentionWeights", "BlockContext", "adapter_for", "first_attention", "register_adapter"]
