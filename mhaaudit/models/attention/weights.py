"""The canonical layout of one block's key/query weights, as the attention sees its input.

Every adapter in this package turns a block of its layout into an :class:`AttentionWeights`;
everything downstream (the capacity certificate's Z, the tests against the libraries' own
attention maps) reads only this layout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import overload

import torch
from torch import nn

__all__ = ["AttentionWeights", "head_bias", "linear_heads"]


@dataclass(frozen=True)
class AttentionWeights:
    """Key/query weights of one attention block, as the attention sees its input.

    For head h and block input tokens X (B, n, d): ``Q = pre(X) @ W_q[h] + b_q[h]``,
    ``K = pre(X) @ W_k[h] + b_k[h]``, logits ``scale * Q K^T`` (masked causally when
    ``causal``), softmax over the keys.
    """

    W_q: torch.Tensor  # (H, d, d_h)
    W_k: torch.Tensor  # (H, d, d_h)
    b_q: torch.Tensor | None  # (H, d_h)
    b_k: torch.Tensor | None  # (H, d_h)
    pre: Callable[[torch.Tensor], torch.Tensor]
    scale: float = 1.0
    causal: bool = False

    @classmethod
    def from_linears(
        cls,
        q: nn.Linear,
        k: nn.Linear,
        heads: int,
        *,
        pre: Callable[[torch.Tensor], torch.Tensor],
        scale: float,
        causal: bool,
    ) -> AttentionWeights:
        """From separate query and key ``nn.Linear`` layers whose outputs are the heads side by side."""
        return cls(
            linear_heads(q.weight, heads),
            linear_heads(k.weight, heads),
            head_bias(q.bias, heads),
            head_bias(k.bias, heads),
            pre,
            scale,
            causal,
        )

    @property
    def num_heads(self) -> int:
        """H, the number of heads."""
        return int(self.W_q.shape[0])

    @property
    def head_dim(self) -> int:
        """d_h, the width of one head's query and key."""
        return int(self.W_q.shape[2])

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Attention logits (B, H, n, n) for block input tokens ``x`` (B, n, d), before masking."""
        with torch.no_grad():
            h = self.pre(x)
            q = torch.einsum("bnd,hde->bhne", h, self.W_q)
            k = torch.einsum("bnd,hde->bhne", h, self.W_k)
            if self.b_q is not None:
                q = q + self.b_q[None, :, None, :]
            if self.b_k is not None:
                k = k + self.b_k[None, :, None, :]
            return self.scale * q @ k.transpose(-1, -2)

    def probs(self, x: torch.Tensor) -> torch.Tensor:
        """Attention probabilities (B, H, n, n), causal mask applied when the model uses one."""
        a = self.logits(x)
        if self.causal:
            n = a.shape[-1]
            mask = torch.ones(n, n, dtype=torch.bool, device=a.device).triu(1)
            a = a.masked_fill(mask, float("-inf"))
        return a.softmax(dim=-1)


def linear_heads(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """An ``nn.Linear`` weight (H*d_h, d) -> (H, d, d_h), so that ``x @ W[h]`` is head h's projection."""
    out, d = weight.shape
    return weight.detach().reshape(heads, out // heads, d).transpose(1, 2).contiguous().float()


@overload
def head_bias(bias: torch.Tensor, heads: int) -> torch.Tensor: ...


@overload
def head_bias(bias: None, heads: int) -> None: ...


def head_bias(bias: torch.Tensor | None, heads: int) -> torch.Tensor | None:
    """A bias (H*d_h,) -> (H, d_h), float32; None stays None."""
    return None if bias is None else bias.detach().float().reshape(heads, -1)
