"""The model of the memorisation experiments: one multi-head attention layer with d_v = 1 per head.

``Linear(d -> d)`` token embedding (no bias), sinusoidal positional encodings (query at position
0, context rows at 1..n), one attention layer with H heads, key/query dimension d_h, value
dimension 1 per head, ``W_O: H -> d``, no biases anywhere, Xavier-uniform initialisation drawn
from the caller's generator (embedding, then W_Q head by head, W_K head by head, W_V, W_O, the
read-out). The query attends over the n context tokens only (never itself); logits are scaled by
1/sqrt(d_h). The read-out ``Linear(d -> classes)`` (or ``-> 1``) acts on the query's output.
"""

from __future__ import annotations

import math

import torch

from .data import sinusoidal_positions

__all__ = ["MemorizeModel", "one_head_ceiling"]


class MemorizeModel(torch.nn.Module):
    """Embedding + positions + one multi-head attention layer (d_v = 1 per head) + read-out."""

    pos: torch.Tensor  # a buffer: the sinusoidal positions (n + 1, d)

    def __init__(
        self, *, d: int, n: int, heads: int, head_dim: int, out_dim: int, generator: torch.Generator | None = None
    ):
        super().__init__()
        self.d, self.n, self.heads, self.head_dim = d, n, heads, head_dim
        self.embed = torch.nn.Parameter(torch.empty(d, d))  # acts as x @ embed.T
        self.wq = torch.nn.Parameter(torch.empty(heads, d, head_dim))
        self.wk = torch.nn.Parameter(torch.empty(heads, d, head_dim))
        self.wv = torch.nn.Parameter(torch.empty(heads, d))  # one value coordinate per head
        self.wo = torch.nn.Parameter(torch.empty(d, heads))  # W_O: H -> d
        self.readout = torch.nn.Parameter(torch.empty(out_dim, d))
        self.register_buffer("pos", sinusoidal_positions(n + 1, d))
        init = torch.nn.init.xavier_uniform_
        with torch.no_grad():
            init(self.embed, generator=generator)
            for h in range(heads):
                init(self.wq[h], generator=generator)
            for h in range(heads):
                init(self.wk[h], generator=generator)
            init(self.wv, generator=generator)
            init(self.wo, generator=generator)
            init(self.readout, generator=generator)

    def attention(self, x: torch.Tensor, ctx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Softmax weights (B, H, n) of the query over the context, and the context tokens."""
        q_tok = x @ self.embed.T + self.pos[0]
        c_tok = ctx @ self.embed.T + self.pos[1:]
        q = torch.einsum("bd,hde->bhe", q_tok, self.wq)
        if c_tok.ndim == 2:  # shared context: keys computed once
            k = torch.einsum("nd,hde->hne", c_tok, self.wk)
            logits = torch.einsum("bhe,hne->bhn", q, k)
        else:
            k = torch.einsum("bnd,hde->bhne", c_tok, self.wk)
            logits = torch.einsum("bhe,bhne->bhn", q, k)
        return torch.softmax(logits / math.sqrt(self.head_dim), dim=-1), c_tok

    def forward(self, x: torch.Tensor, ctx: torch.Tensor, return_attention: bool = False):
        """The outputs (B, out_dim) for queries ``x`` (B, d) and contexts ``ctx`` ((n, d) shared or
        (B, n, d) per example); with ``return_attention``, also the softmax weights (B, H, n)."""
        p, c_tok = self.attention(x, ctx)
        if c_tok.ndim == 2:
            v = torch.einsum("nd,hd->hn", c_tok, self.wv)
            heads_out = torch.einsum("bhn,hn->bh", p, v)
        else:
            v = torch.einsum("bnd,hd->bhn", c_tok, self.wv)
            heads_out = (p * v).sum(-1)
        out = (heads_out @ self.wo.T) @ self.readout.T
        return (out, p) if return_attention else out


def one_head_ceiling(labels: torch.Tensor) -> int:
    """The most of these class labels a one-head :class:`MemorizeModel` memorises, whatever its weights.

    With one head and one value coordinate, an example's class scores are ``s * u``: its head's output ``s``
    times one vector ``u`` (the read-out after ``W_O``). The predicted class is then the first largest
    entry of ``u`` (``s > 0``), its first smallest (``s < 0``), or class 0 (``s = 0``: every score equal,
    and ``argmax`` takes the first). So at most the examples of class 0 and of the two most frequent other
    classes are memorised: in exact arithmetic. The scores are computed in float32 through ``W_O`` and the
    read-out, so where two entries of ``u`` are equal to within rounding, examples may fall on either side of
    their tie; weights a training reaches do not sit at such ties.

    Args:
        labels (torch.Tensor): the point's class labels (int64, from 0).

    Returns:
        That many examples: the count of class 0 plus those of the two most frequent other classes.
    """
    counts = torch.bincount(labels.reshape(-1).cpu())
    return int(counts[0]) + int(counts[1:].sort(descending=True).values[:2].sum()) if counts.numel() else 0
