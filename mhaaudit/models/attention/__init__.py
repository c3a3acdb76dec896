"""Reading a block's key/query weights into one canonical layout, one adapter per block layout.

:func:`first_attention` finds the adapter whose layout the block has and returns its
:class:`AttentionWeights`. The layouts known (first match wins, in this order):

- ``timm_vit``: timm ViT, a fused ``qkv`` Linear;
- ``gpt_bigcode``: GPT-BigCode with a key/value head per query head, an ``nn.Linear`` ``c_attn``
  holding each head's query, key and value side by side, causal;
- ``gpt2``: GPT-2, a ``Conv1D`` ``c_attn``, causal;
- ``gpt_neo``: GPT-Neo, ``attn.attention.q_proj`` / ``k_proj`` after ``ln_1``, unscaled logits, causal;
- ``ctrl``: CTRL, ``multi_head_attention.Wq`` / ``Wk`` after ``layernorm1``, causal;
- ``hf_vit``: transformers ViT / DeiT / DINOv2, ``q_proj`` / ``k_proj`` after ``layernorm_before``;
- ``bert``: BERT-style post-LN ``self.query`` / ``self.key`` (BERT, RoBERTa, ELECTRA);
- ``self-attn``: ``self_attn.q_proj`` / ``k_proj`` (CLIP and SigLIP vision towers, OPT);
- ``distilbert``: DistilBERT's post-LN ``q_lin`` / ``k_lin``.

Before an adapter is asked, :func:`.support.unsupported` lists what the block's attention does
beyond that form (rotary positions, relative attention, grouped key/value heads, query/key norms,
logit soft-capping, local windowed attention); a block that shows any is refused with those reasons.

A new layout is one module here with a ``@register_adapter`` function, imported below.
"""

from __future__ import annotations

from .registry import ADAPTERS, Adapter, BlockContext, adapter_for, first_attention, register_adapter
from .weights import AttentionWeights

# The adapters register themselves on import; the order is the order they are tried in.
from . import timm_vit, gpt_bigcode, gpt2, gpt_neo, ctrl  # noqa: F401  isort: skip
from . import hf_vit, bert, self_attn, distilbert  # noqa: F401  isort: skip

__all__ = [
    "ADAPTERS",
    "Adapter",
    "AttentionWeights",
    "BlockContext",
    "adapter_for",
    "first_attention",
    "register_adapter",
]
