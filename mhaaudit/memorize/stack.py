"""Several memorisation models stacked into one: padded parameters, one forward, one Adam step.

P points of a grid (different H, n, d_h, T and seeds) are trained in the same steps. Each
point's ``MemorizeModel`` weights are zero-padded to the group's largest H, d_h and n and
flattened into one row of N numbers; every operation is a batched matrix product over the rows. The padding is exact,
not approximate:

- a padded head has W_V = 0 and W_O = 0, so it adds exactly 0 to the output, and the gradient of
  every one of its weights is exactly 0; Adam leaves a weight with zero gradient and zero moments
  at 0, so padded heads stay padded;
- padded key/query coordinates (d_h below the group's) have W_Q = W_K = 0: they add 0 to the
  logits and receive zero gradient;
- padded context positions (n below the group's) get a logit of -inf, so softmax weight 0 and
  zero gradient; their rows are zero.

So a point computes the same function with the same gradients as alone; only the order of the
floating-point sums inside the batched products can differ (results agree to float tolerance).

The logits are computed through ``A_h = W_Q,h (C W_K,h)^T`` (d x n per head, with C the
embedded shared context), so that a batch costs B d n per head instead of B d d_h + B d_h n;
with a context per example, through ``(x W_Q,h) W_K,h^T`` against the embedded context. The
read-out ``W_O`` and the output layer are folded into one H x classes matrix per point.

Each point's weights are one leaf tensor of N numbers (its row), so that ``torch.optim.Adam``
keeps each point's own moments and step count; the rows of the points still training are
stacked for each step. A point that stopped is left out of the stack and of the optimiser's
step, so its weights stay as they were when it stopped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .data import DIM
from .model import MemorizeModel

__all__ = ["StackShape", "StackedModel"]

_NAMES = ("embed", "wq", "wk", "wv", "wo", "readout")


@dataclass(frozen=True)
class StackShape:
    """The padded shape of a group: P points, H heads, d_h, n context rows, T examples, classes."""

    points: int
    heads: int
    head_dim: int
    n: int
    size: int
    out_dim: int
    d: int = DIM

    @classmethod
    def of(cls, points: Sequence, out_dim: int) -> StackShape:
        """The padded shape of ``points`` (objects with heads, head_dim, n and size)."""
        return cls(
            points=len(points),
            heads=max(p.heads for p in points),
            head_dim=max(p.head_dim for p in points),
            n=max(p.n for p in points),
            size=max(p.size for p in points),
            out_dim=out_dim,
        )

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape of each parameter of one padded model, by name."""
        d, H, e, C = self.d, self.heads, self.head_dim, self.out_dim
        return {"embed": (d, d), "wq": (H, d, e), "wk": (H, d, e), "wv": (H, d), "wo": (d, H), "readout": (C, d)}

    @property
    def numel(self) -> int:
        """The parameters of one padded model."""
        return sum(math.prod(s) for s in self.param_shapes().values())


@dataclass(frozen=True)
class Frame:
    """What the forward pass needs of the points being stacked, besides their weights."""

    pos: torch.Tensor  # (L, n + 1, d) positions, zero beyond a point's n
    mask: torch.Tensor | None  # (L, 1, 1, n): 0, or -inf at padded context rows; None without padding
    scale: torch.Tensor  # (L, 1, 1, 1): 1 / sqrt(d_h)

    def take(self, index: torch.Tensor) -> Frame:
        return Frame(self.pos[index], None if self.mask is None else self.mask[index], self.scale[index])


class StackedModel:
    """The padded weights of P models (one leaf row each) and their batched forward pass."""

    def __init__(self, models: Sequence[MemorizeModel], shape: StackShape, device: torch.device):
        self.shape = shape
        P, n, d = shape.points, shape.n, shape.d
        pos, mask, scale = torch.zeros(P, n + 1, d), torch.zeros(P, n), torch.empty(P)
        self.rows: list[torch.Tensor] = []
        for i, m in enumerate(models):
            self.rows.append(self._pad(m).to(device).requires_grad_(True))
            pos[i, : m.n + 1] = m.pos
            mask[i, m.n :] = float("-inf")
            scale[i] = 1.0 / math.sqrt(m.head_dim)
        self.frame = Frame(
            pos.to(device),
            mask.to(device)[:, None, None, :] if bool((mask != 0).any()) else None,
            scale.to(device)[:, None, None, None],
        )
        self._sizes = [math.prod(s) for s in shape.param_shapes().values()]

    def _pad(self, m: MemorizeModel) -> torch.Tensor:
        parts = {k: torch.zeros(s) for k, s in self.shape.param_shapes().items()}
        for k, view in self._slots(parts, m).items():
            view.copy_(getattr(m, k).detach())
        return torch.cat([parts[k].reshape(-1) for k in _NAMES])

    @staticmethod
    def _slots(parts: dict[str, torch.Tensor], m: MemorizeModel) -> dict[str, torch.Tensor]:
        """The views of padded weights ``parts`` that hold the weights of ``m``."""
        h, e = m.heads, m.head_dim
        return {
            "embed": parts["embed"],
            "wq": parts["wq"][:h, :, :e],
            "wk": parts["wk"][:h, :, :e],
            "wv": parts["wv"][:h],
            "wo": parts["wo"][:, :h],
            "readout": parts["readout"],
        }

    def unpad(self, i: int, m: MemorizeModel) -> MemorizeModel:
        """Copy point ``i``'s current weights into ``m``, a model of the point's own shape."""
        parts = {k: v[0] for k, v in self.params(self.rows[i].detach()[None]).items()}
        with torch.no_grad():
            for k, view in self._slots(parts, m).items():
                getattr(m, k).copy_(view)
        return m

    def params(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views of stacked rows (L, N) in the padded shapes (L, ...)."""
        chunks = torch.split(theta, self._sizes, dim=1)
        return {
            k: c.view(theta.shape[0], *s) for (k, s), c in zip(self.shape.param_shapes().items(), chunks, strict=False)
        }

    def forward(self, theta: torch.Tensor, frame: Frame, x: torch.Tensor, ctx: torch.Tensor):
        """Outputs (L, B, classes) and attention weights (L, B, H, n) of L stacked rows ``theta``.

        ``x``: queries (L, B, d); ``ctx``: the shared contexts (L, n, d) or one context per
        example (L, B, n, d); ``frame``: the rows' positions, mask and scale.
        """
        w = self.params(theta)
        E_T = w["embed"].transpose(1, 2)
        x_tok = torch.baddbmm(frame.pos[:, :1], x, E_T)  # (L, B, d)
        if ctx.ndim == 3:
            logits, v = _shared_logits(w, E_T, x_tok, ctx, frame)
        else:
            logits, v = _per_example_logits(w, E_T, x_tok, ctx, frame)
        if frame.mask is not None:
            logits = logits + frame.mask
        p = torch.softmax(logits, dim=-1)  # (L, B, H, n)
        heads_out = (p * v).sum(-1)  # (L, B, H)
        W = torch.bmm(w["wo"].transpose(1, 2), w["readout"].transpose(1, 2))  # (L, H, classes)
        return torch.bmm(heads_out, W), p


def _shared_logits(w, E_T, x_tok, ctx, frame: Frame):
    """Logits through A_h = W_Q,h (C W_K,h)^T: one (d, H n) matrix per point for the whole batch."""
    L, B, d = x_tok.shape
    c_tok = torch.baddbmm(frame.pos[:, 1:], ctx, E_T)  # (L, n, d)
    keys = torch.matmul(c_tok[:, None], w["wk"])  # (L, H, n, e)
    A = torch.matmul(w["wq"], keys.transpose(-1, -2)) * frame.scale  # (L, H, d, n)
    H, n = A.shape[1], A.shape[3]
    logits = torch.bmm(x_tok, A.transpose(1, 2).reshape(L, d, H * n)).view(L, B, H, n)
    v = torch.bmm(w["wv"], c_tok.transpose(1, 2))  # (L, H, n)
    return logits, v[:, None]


def _per_example_logits(w, E_T, x_tok, ctx, frame: Frame):
    """Logits through (x W_Q,h) W_K,h^T against each example's embedded context."""
    c_tok = torch.matmul(ctx, E_T[:, None]) + frame.pos[:, None, 1:]  # (L, B, n, d)
    q = torch.matmul(x_tok[:, None], w["wq"])  # (L, H, B, e)
    r = torch.matmul(q, w["wk"].transpose(-1, -2)) * frame.scale  # (L, H, B, d)
    logits = torch.matmul(r.transpose(1, 2), c_tok.transpose(-1, -2))  # (L, B, H, n)
    v = torch.matmul(c_tok, w["wv"].transpose(1, 2)[:, None]).transpose(-1, -2)  # (L, B, H, n)
    return logits, v
