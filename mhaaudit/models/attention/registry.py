"""The adapter registry: which adapter reads the attention weights of a block of a given layout.

An adapter is a ``matches(block)`` test of what the block looks like (which submodules it has)
and a ``read(block, ctx)`` that returns the block's :class:`~.weights.AttentionWeights`. Adapters
register with :func:`register_adapter`; :func:`first_attention` asks them in registration
order and uses the first that matches. Supporting a new block layout is one adapter file,
imported in ``attention/__init__.py``. A ``read`` takes the block as ``Any``: it looks up the
submodules its ``matches`` found by name, which no static type of ``nn.Module`` lists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch import nn

from ... import validate
from ...errors import InputError, ModelError, Param
from .support import unsupported
from .weights import AttentionWeights

if TYPE_CHECKING:  # pragma: no cover
    from ..probe import ProbedModel

__all__ = ["ADAPTERS", "Adapter", "BlockContext", "adapter_for", "first_attention", "register_adapter"]


@dataclass(frozen=True)
class BlockContext:
    """What an adapter may need besides the block: the model's name, the block's number, its
    heads as the config gives them, whether the model is causal, and the config itself."""

    model: str
    layer: int  # 1-based
    num_heads: int
    head_dim: int
    causal: bool
    config: Any = None


@dataclass(frozen=True)
class Adapter:
    """A reader of one attention layout: ``matches(block)`` says whether a block has it, ``read(block, ctx)``
    returns its key/query weights. Constructing checks nothing (see :func:`register_adapter`)."""

    name: str
    matches: Callable[[nn.Module], bool]
    read: Callable[[nn.Module, BlockContext], AttentionWeights]


ADAPTERS: list[Adapter] = []


def register_adapter(name: str, matches: Callable[[nn.Module], bool]):
    """Decorator: register ``read(block, ctx)`` for blocks that ``matches``."""

    def deco(read: Callable[[nn.Module, BlockContext], AttentionWeights]):
        ADAPTERS.append(Adapter(name, matches, read))
        return read

    return deco


def adapter_for(block: nn.Module) -> Adapter | None:
    """The first registered adapter whose layout ``block`` has, or None."""
    return next((a for a in ADAPTERS if a.matches(block)), None)


def first_attention(pm: ProbedModel, layer: int = 1) -> AttentionWeights:
    """Key/query weights of block ``layer`` (1-based) of a loaded model.

    Raises:
        InputError: when ``layer`` is not an integer or not one of the blocks the model was built with.
        ModelError: when the block's attention is not of the form capacity expresses, or no registered adapter
            knows its layout.
    """
    layer = validate.integer("layer", layer, minimum=None)
    if layer < 1 or layer > pm.built_layers:
        raise InputError(
            f"first_attention: block {layer} is not available (the loaded model has blocks 1..{pm.built_layers})"
        )
    block = pm.blocks[layer - 1]
    reasons = unsupported(pm, block)
    if reasons:
        raise ModelError(
            f"{pm.info.name} ({pm.info.family}): the attention of block {layer} is not of the form capacity expresses "
            f"(softmax of scale (x W_q + b_q)(y W_k + b_k)^T on the block input): it has {', '.join(reasons)}; "
            + Param("attention")
            + " random uses random heads on the same tokens"
        )
    adapter = adapter_for(block)
    if adapter is None:
        raise ModelError(
            f"{pm.info.name}: first_attention does not know the attention layout of {type(block).__name__}"
        )
    info = pm.info
    ctx = BlockContext(
        model=info.name,
        layer=layer,
        num_heads=info.num_heads,
        head_dim=info.head_dim,
        causal=info.decoder,
        config=pm.config,
    )
    return adapter.read(block, ctx)
