"""The paper's "random attention" layer: one frozen random head with a skip connection.

Applied to the embedding output (layer 0), it gives the features of the paper's Table 1 column
"random attention". Its weights are drawn once from the seed and never trained.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .. import validate
from ..errors import InputError
from ..runtime import derive_seed

__all__ = ["RandomAttention"]


class RandomAttention(nn.Module):
    """One frozen random attention head with a skip connection: ``x + Attn(LN(x))``.

    LayerNorm without affine parameters; W_Q, W_K, W_V, W_O are d x d, Xavier-uniform, drawn
    in that order on the CPU from ``torch.Generator().manual_seed(derive_seed(seed,
    "random-attention"))`` (``seed`` is the user's seed); no biases; logits
    scaled by 1/sqrt(d); softmax over the tokens; no MLP. With row-vector tokens:
    ``Attn(h) = softmax(h W_Q (h W_K)^T / sqrt(d)) (h W_V) W_O``. Constructing refuses a width
    ``d`` that is not an integer of at least 1 and a ``seed`` that is not a whole number (an InputError).
    """

    # buffers, registered in __init__
    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor

    def __init__(self, d: int, seed: int = 0, eps: float = 1e-5, device: torch.device | str | None = None) -> None:
        super().__init__()
        if validate.integer("d", d, minimum=None) < 1:
            raise InputError(f"RandomAttention: width d must be positive, got {d}")
        self.d = validate.integer("d", d)
        self.seed = validate.integer("seed", seed, minimum=None)  # any integer: derive_seed takes it modulo 2^64
        self.eps = float(eps)
        g = torch.Generator(device="cpu").manual_seed(derive_seed(self.seed, "random-attention"))
        for name in ("W_Q", "W_K", "W_V", "W_O"):
            w = torch.empty(self.d, self.d, dtype=torch.float32)
            nn.init.xavier_uniform_(w, generator=g)
            self.register_buffer(name, w)
        if device is not None:
            self.to(device)
        self.eval()

    def extra_repr(self) -> str:
        """``d``, ``seed`` and ``eps``, for the module's repr."""
        return f"d={self.d}, seed={self.seed}, eps={self.eps}"

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """The head's attention probabilities (B, n, n) for input tokens ``x`` (B, n, d)."""
        return self._probs(nn.functional.layer_norm(x, (self.d,), eps=self.eps))

    def _probs(self, h: torch.Tensor) -> torch.Tensor:
        q = h @ self.W_Q
        k = h @ self.W_K
        return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.d), dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x + Attn(LN(x))`` for tokens ``x`` (B, n, d): the same shape.

        Raises:
            InputError: when ``x`` is not a tensor of shape (B, n, d) with this head's d, or not of the dtype and
                device of the head's weights (float32 on the CPU unless the head was moved with ``.to``).
        """
        if not isinstance(x, torch.Tensor) or x.ndim != 3 or x.shape[-1] != self.d:
            got = f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise InputError(f"RandomAttention expects (B, n, {self.d}) tokens, got {got}")
        if x.dtype != self.W_Q.dtype or x.device != self.W_Q.device:
            raise InputError(
                f"RandomAttention's weights are {str(self.W_Q.dtype).removeprefix('torch.')} on {self.W_Q.device}, "
                f"the tokens {str(x.dtype).removeprefix('torch.')} on {x.device}: move one to the other (.to)"
            )
        h = nn.functional.layer_norm(x, (self.d,), eps=self.eps)
        return x + (self._probs(h) @ (h @ self.W_V)) @ self.W_O
