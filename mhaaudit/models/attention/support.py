"""Whether a block's attention has the form every adapter reads: what ``capacity`` cannot express.

An :class:`~.weights.AttentionWeights` describes logits ``scale (pre(x) W_q[h] + b_q[h]) (pre(y)
W_k[h] + b_k[h])^T`` of the block input alone. Attention that also depends on the positions
(rotary, relative or ALiBi terms), shares key heads among query heads, normalises queries and keys
per head, caps its logits, or lets a token see only a window of the others is not of that form,
and Z built from it would certify a layer the model does not have. :data:`FEATURES` names each
such feature with its test on the loaded model and its block; :func:`unsupported` lists those a
block shows. A new feature is one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import nn

if TYPE_CHECKING:  # pragma: no cover
    from ..probe import ProbedModel

__all__ = ["FEATURES", "unsupported"]

_ROPE_CONFIG = ("rope_parameters", "rope_scaling", "rope_theta", "rotary_dim", "rotary_pct", "partial_rotary_factor")
_QK_NORMS = ("q_norm", "k_norm", "q_layernorm", "k_layernorm", "query_norm", "key_norm")


def _cfg(pm: ProbedModel, name: str, default: Any = None) -> Any:
    cfg = pm.config
    return getattr(cfg, name, default) if cfg is not None and not isinstance(cfg, dict) else default


def _rotary(pm: ProbedModel, block: nn.Module) -> bool:
    if "rotary" in pm.info.positions or any(_cfg(pm, a) is not None for a in _ROPE_CONFIG):
        return True
    return any("rotary" in type(m).__name__.lower() for m in block.modules())


def _relative(pm: ProbedModel, block: nn.Module) -> bool:
    if "relative" in pm.info.positions:
        return True
    flags = ("relative_attention", "use_relative_position_bias", "use_shared_relative_position_bias")
    if any(bool(_cfg(pm, f, False)) for f in flags) or str(_cfg(pm, "position_embedding_type", "")).startswith(
        "relative"
    ):
        return True
    if getattr(pm.module, "rel_pos_bias", None) is not None:  # timm BEiT's shared bias
        return True
    return any(
        "relativeposition" in type(m).__name__.lower() or hasattr(m, "relative_position_bias_table")
        for m in block.modules()
    )


def _alibi(pm: ProbedModel, block: nn.Module) -> bool:
    return pm.info.positions == "alibi" or bool(_cfg(pm, "alibi", False))


def _grouped(pm: ProbedModel, block: nn.Module) -> bool:
    heads = int(_cfg(pm, "num_attention_heads", 0) or pm.info.num_heads)
    kv = _cfg(pm, "num_key_value_heads") or _cfg(pm, "num_kv_heads")
    return bool(_cfg(pm, "multi_query", False)) or (kv is not None and 0 < int(kv) < heads)


def _qk_norm(pm: ProbedModel, block: nn.Module) -> bool:
    return any(
        name.rsplit(".", 1)[-1] in _QK_NORMS and not isinstance(m, nn.Identity) for name, m in block.named_modules()
    )


def _softcap(pm: ProbedModel, block: nn.Module) -> bool:
    return _cfg(pm, "attn_logit_softcapping") is not None


def _local(pm: ProbedModel, block: nn.Module) -> bool:
    """A block whose tokens see only a window of the others (GPT-Neo's local blocks)."""
    return any(getattr(m, "attention_type", None) == "local" for m in block.modules())


#: (reason in words, test on the loaded model and one of its blocks), in the order they are named.
FEATURES: tuple[tuple[str, Callable[[ProbedModel, nn.Module], bool]], ...] = (
    ("rotary positions", _rotary),
    ("relative attention", _relative),
    ("ALiBi position biases", _alibi),
    ("grouped key/value heads", _grouped),
    ("query/key norms", _qk_norm),
    ("logit soft-capping", _softcap),
    ("local (windowed) attention", _local),
)


def unsupported(pm: ProbedModel, block: nn.Module) -> list[str]:
    """The reasons the attention of ``block`` is not of the form an adapter reads (empty: it is)."""
    return [why for why, test in FEATURES if test(pm, block)]
