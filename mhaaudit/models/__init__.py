"""Models: a name becomes a loaded model whose token features can be probed.

A model name (an alias, a Hugging Face hub id, a local folder, a timm model name or a timm
checkpoint file) becomes a :class:`ProbedModel`: the network in eval mode on its device, a
:class:`ModelInfo` describing what the audit needs to know (width ``d``, tokens per example
``n``, the query token's index, depth, heads, where the weights came from), the model's own
preprocessing, and :meth:`ProbedModel.capture`, which runs a batch only as far as the deepest
requested probe point.

Where each concept lives:

- ``registry``: aliases, families' tables, config checks; ``resolution``: backend and modality
  detection (:func:`resolve`, :func:`modality_of`);
- ``families``: every family's query token and what its embedding output carries; adding a
  transformers family is one entry there;
- ``load``: :func:`load_model`, the one entry point (error mapping); ``plan``: :class:`LoadPlan`,
  how to load it (the arguments, checked where they are made), what a backend reads;
- ``hf`` and ``timm_backend``: one module per backend (config, weights, tokenizer, images);
  ``hub_reads``: every hub read's options, and the error for weights only the hub has, offline;
- ``checkpoints``: reading state files and loading them only where they fit; ``file_reads``: a weights
  file's header (a torch file's shapes) read once a run;
- ``shards``: reading only the tensors the probed blocks use from a safetensors checkpoint
  (sharded, single file, or the hub), and what was read;
- ``random_init``: how random weights derive from the seed, independent of the depth built;
- ``probe``: :class:`ProbedModel` and :class:`ModelInfo`; hooks, truncated depth, TF32 off;
- ``attention``: :func:`first_attention`, one adapter per block layout reading key/query
  weights into :class:`AttentionWeights`;
- ``random_attention``: :class:`RandomAttention`, the paper's random attention layer.
"""

from __future__ import annotations

from .attention import AttentionWeights, first_attention
from .load import load_model
from .plan import LoadPlan
from .probe import ModelInfo, ProbedModel
from .random_attention import RandomAttention
from .registry import ALIASES, ModelSpec
from .resolution import modality_of, resolve

__all__ = [
    "ALIASES",
    "AttentionWeights",
    "LoadPlan",
    "ModelInfo",
    "ModelSpec",
    "ProbedModel",
    "RandomAttention",
    "first_attention",
    "load_model",
    "modality_of",
    "resolve",
]
