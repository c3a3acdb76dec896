"""The matrix Z of the proof of Theorem 1, and the builder that streams it batch by batch.

Row t of ``Z`` is ``[z_1; ...; z_H]`` with ``z_h = E_t^T softmax(s_h)``: a convex combination of
the context rows of example t chosen by head h (:func:`attention_combinations`; the heads'
key/query side is a :class:`Heads`). :class:`ZBuilder`
accumulates the rows from (B, n, d) token batches (memory O(T H d); the (T, n, d) activations are
never held). Everything is computed in float64.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import DataError, InputError
from ..runtime import derive_seed
from ..validate import integer

__all__ = ["Heads", "ZBuilder", "as_real_tensor", "attention_combinations", "random_attention_weights"]


def as_real_tensor(name: str, value, ndims: tuple[int, ...]) -> torch.Tensor:
    """``value`` as a real tensor with one of ``ndims`` dimensions: a tensor as it is (dtype and device kept),
    anything else converted through float64 NumPy.

    Raises:
        InputError: when ``value`` cannot be read as a real numeric array, is complex, or has a number of
            dimensions not in ``ndims``; ``name`` begins the message.
    """
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.as_tensor(np.asarray(value, dtype=np.float64))
        except Exception as exc:
            raise InputError(f"{name} is not a real numeric array") from exc
    if value.is_complex():
        raise InputError(f"{name} must be real")
    if value.ndim not in ndims:
        want = " or ".join(str(k) for k in ndims)
        raise InputError(f"{name} must have {want} dimensions, got shape {tuple(value.shape)}")
    return value


def real_matrix(name: str, value) -> torch.Tensor:
    """``value`` as a non-empty float64 matrix of finite values on the CPU.

    Raises:
        InputError: when ``value`` is not a real numeric 2-D array (see :func:`as_real_tensor`), is empty,
            or holds NaN or infinite values; ``name`` begins the message.
    """
    M = as_real_tensor(name, value, (2,)).detach().to("cpu", torch.float64)
    if M.shape[0] == 0 or M.shape[1] == 0:
        raise InputError(f"{name} is empty (shape {M.shape[0]} x {M.shape[1]})")
    if not torch.isfinite(M).all():
        raise InputError(f"{name} contains NaN or infinite values")
    return M


@dataclass(frozen=True)
class Heads:
    """The key/query side of H attention heads, as the rows of ``Z`` read it.

    Head h's logits over the context rows ``E[i]`` for the query ``x`` are
    ``s_h[i] = (pre(E)[i] Wk_h + bk_h) . (pre(x) Wq_h + bq_h) * scale``.

    Attributes:
        Wq, Wk: query/key weights, (H, d, d_h) (a (d, d_h) matrix means one head).
        bq, bk: optional biases, (H, d_h). (``bk`` shifts all logits of a head equally, so it
            cannot change ``Z``; it is accepted for fidelity to real layers.)
        pre: what the keys and queries see, e.g. a LayerNorm; applied to ``E`` and ``x`` along
            the last dimension. ``z_h`` always combines the raw rows of ``E_t`` (the value input).
        scale: the logits' scale; None: ``1 / sqrt(d_h)``.
    """

    Wq: Any
    Wk: Any
    bq: Any = None
    bk: Any = None
    pre: Callable[[torch.Tensor], torch.Tensor] | None = None
    scale: float | None = None

    @property
    def num_heads(self) -> int:
        """H: the leading size of ``Wq``, or 1 for a single (d, d_h) matrix."""
        return int(self.Wq.shape[0]) if self.Wq.ndim == 3 else 1

    @property
    def head_dim(self) -> int:
        """d_h: the last size of ``Wq``."""
        return int(self.Wq.shape[-1])


def attention_combinations(
    E: torch.Tensor,
    x: torch.Tensor,
    heads: Heads,
    *,
    exclude_query_index: int | None = None,
    chunk: int = 256,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """The matrix ``Z`` (T, H*d) of the proof of Theorem 1.

    Row t is ``[z_1; ...; z_H]`` with ``z_h = E_t^T softmax(s_h)`` and the logits ``s_h`` of
    ``heads`` (:class:`Heads`) for the context ``E_t`` and the query ``x_t``.

    Args:
        E: contexts, (T, n, d). A (n, d) matrix is taken as one context shared by all examples.
        x: queries, (T, d).
        heads: the key/query weights, biases, pre-attention map and scale.
        exclude_query_index: a context row the query may not attend to (self-attention where the
            query is that row of the context and should not see itself); ``None`` for none.
        chunk: examples processed at once; memory is O(chunk * n * d + T * H * d).
        dtype: computation dtype (float64 by default).

    Returns:
        ``Z`` in ``dtype`` on the device of ``x``, (T, H*d).

    Raises:
        InputError: when ``chunk`` is not a positive integer; ``E``, ``x``, the weights or biases are not real
            arrays of consistent shapes (widths, example counts, (H, d, d_h) weights, (H, d_h) biases); the
            context is empty; or ``exclude_query_index`` is not an integer row of a context of at least 2 rows.
    """
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise InputError(f"chunk must be a positive integer, got {chunk!r}")
    E, x, Wq, Wk = _inputs(E, x, heads.Wq, heads.Wk)
    H, _d, dh = Wq.shape
    exclude_query_index = _excluded(exclude_query_index, E.shape[-2])
    on = _on(x.device, dtype)
    scale = 1.0 / math.sqrt(dh) if heads.scale is None else float(heads.scale)
    prepared = Heads(on(Wq), on(Wk), on(_head_bias("bq", heads.bq, H, dh)), on(_head_bias("bk", heads.bk, H, dh)))
    pre = heads.pre
    out = torch.empty((x.shape[0], H * x.shape[1]), dtype=dtype, device=x.device)
    shared = _context(on(E), pre) if E.ndim == 2 else None
    for start in range(0, x.shape[0], chunk):
        stop = min(start + chunk, x.shape[0])
        context = shared if shared is not None else _context(on(E[start:stop]), pre)
        xc = x[start:stop].to(dtype=dtype)
        out[start:stop] = _chunk_rows(pre(xc) if pre is not None else xc, context, prepared, exclude_query_index, scale)
    return out


def _on(device: torch.device, dtype: torch.dtype) -> Callable:
    """A tensor (None stays None) moved to ``device`` in ``dtype``."""

    def move(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.to(device=device, dtype=dtype)

    return move


def _context(E: torch.Tensor, pre: Callable[[torch.Tensor], torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The raw context rows and what the keys see of them."""
    return E, pre(E) if pre is not None else E


def _inputs(E, x, Wq, Wk) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``E``, ``x``, ``Wq``, ``Wk`` as real tensors of consistent shapes (one head's (d, d_h) made (1, d, d_h)).

    Raises:
        InputError: when one is not a real array of the dimensions allowed, the widths of ``E``, ``x`` and the
            weights differ, ``E`` and ``x`` have different numbers of examples, the context has no row, ``Wq`` and
            ``Wk`` differ in shape, or there is no head or a zero head dimension.
    """
    E = as_real_tensor("E", E, (2, 3))
    x = as_real_tensor("x", x, (2,))
    Wq = as_real_tensor("Wq", Wq, (2, 3))
    Wk = as_real_tensor("Wk", Wk, (2, 3))
    if Wq.ndim == 2:
        Wq = Wq.unsqueeze(0)
    if Wk.ndim == 2:
        Wk = Wk.unsqueeze(0)
    T, d = x.shape
    if E.shape[-1] != d:
        raise InputError(f"E has width {E.shape[-1]} but the queries x have width {d}")
    if E.ndim == 3 and E.shape[0] != T:
        raise InputError(f"E has {E.shape[0]} examples but x has {T}")
    if E.shape[-2] < 1:
        raise InputError("the context must have at least one row")
    if Wq.shape != Wk.shape:
        raise InputError(f"Wq {tuple(Wq.shape)} and Wk {tuple(Wk.shape)} must have the same shape (H, d, d_h)")
    H, dw, dh = Wq.shape
    if H < 1:
        raise InputError("at least one head is needed (Wq has 0 heads)")
    if dw != d:
        raise InputError(f"Wq/Wk expect width {dw} but the tokens have width {d}")
    if dh < 1:
        raise InputError("head dimension d_h must be at least 1")
    return E, x, Wq, Wk


def _head_bias(name: str, b, H: int, dh: int) -> torch.Tensor | None:
    """A bias as a real (H, d_h) tensor (one head's (d_h,) made (1, d_h)); None stays None.

    Raises:
        InputError: when ``b`` is not a real array of shape (H, d_h) or (d_h,) for one head.
    """
    if b is None:
        return None
    b = as_real_tensor(name, b, (1, 2))
    if b.ndim == 1:
        b = b.unsqueeze(0)
    if tuple(b.shape) != (H, dh):
        raise InputError(f"{name} must have shape (H, d_h) = ({H}, {dh}), got {tuple(b.shape)}")
    return b


def _excluded(index, n: int) -> int | None:
    """The context row the query may not attend to, counted from 0 (a negative index from the end).

    Raises:
        InputError: when ``index`` is not an integer, falls outside the ``n`` rows, or ``n`` is 1 (excluding the
            query would leave no row).
    """
    if index is None:
        return None
    if isinstance(index, bool) or not isinstance(index, int):
        raise InputError(f"exclude_query_index must be an integer, got {index!r}")
    if index < 0:
        index += n
    if not 0 <= index < n:
        raise InputError(f"exclude_query_index {index} is outside the context (n = {n})")
    if n < 2:
        raise InputError("excluding the query leaves an empty context (n = 1)")
    return index


def _chunk_rows(
    xp: torch.Tensor,
    context: tuple[torch.Tensor, torch.Tensor],
    heads: Heads,
    exclude: int | None,
    scale: float,
) -> torch.Tensor:
    """Rows of Z (c, H*d) for the queries ``xp`` (c, d) as the queries see them (after ``pre``);
    ``context``: the raw and the pre-processed context rows, (c, n, d) or one (n, d) shared by all;
    ``heads``: (H, d, d_h) weights and (H, d_h) biases on the device and in the dtype of the rows."""
    Ec, Ep = context
    q = torch.einsum("cd,hde->che", xp, heads.Wq)  # (c, H, dh)
    if heads.bq is not None:
        q = q + heads.bq.unsqueeze(0)
    # s[c,h,i] = pre(E)[c,i] . (Wk_h q[c,h]) + bk_h . q[c,h]: never forms (c, H, n, dh).
    u = torch.einsum("hde,che->chd", heads.Wk, q)  # (c, H, d)
    s = torch.einsum("nd,chd->chn" if Ep.ndim == 2 else "cnd,chd->chn", Ep, u)
    if heads.bk is not None:
        s = s + torch.einsum("he,che->ch", heads.bk, q).unsqueeze(-1)
    s = s * scale
    if exclude is not None:
        s[..., exclude] = float("-inf")
    p = torch.softmax(s, dim=-1)  # (c, H, n)
    z = torch.einsum("chn,nd->chd" if Ec.ndim == 2 else "chn,cnd->chd", p, Ec)
    return z.reshape(xp.shape[0], -1)


def random_attention_weights(d: int, heads: int, head_dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Frozen random key/query weights ``(Wq, Wk)``, each (heads, d, head_dim), float64.

    Each head's (d, head_dim) matrix is Xavier-uniform: U(-a, a) with a = sqrt(6 / (d + head_dim)).
    Seeded from ``derive_seed(seed, "random-attention")`` through one CPU ``torch.Generator``: the
    same seed gives the same weights.

    Raises:
        InputError: when ``d``, ``heads`` or ``head_dim`` is not a positive integer, or ``seed`` is not an integer.
    """
    d = integer("d", d)
    heads = integer("heads", heads)
    head_dim = integer("head_dim", head_dim)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InputError(f"seed must be an integer, got {seed!r}")
    gen = torch.Generator(device="cpu")
    gen.manual_seed(derive_seed(int(seed), "random-attention"))
    bound = math.sqrt(6.0 / (d + head_dim))
    Wq = (torch.rand((heads, d, head_dim), generator=gen, dtype=torch.float64) * 2 - 1) * bound
    Wk = (torch.rand((heads, d, head_dim), generator=gen, dtype=torch.float64) * 2 - 1) * bound
    return Wq, Wk


def _pre64(pre: Callable | None) -> Callable | None:
    """The block's pre-attention map in float64 (a copy of the module; the model is untouched)."""
    if pre is None or isinstance(pre, torch.nn.Identity):
        return None
    if isinstance(pre, torch.nn.Module):
        return copy.deepcopy(pre).to(torch.float64).eval()
    return lambda x: pre(x.float()).to(torch.float64)


class ZBuilder:
    """Accumulates the rows of ``Z`` (T, H d) one batch of (B, n, d) tokens at a time.

    ``heads``: the key/query side of the attention (:class:`Heads`, weights (H, d, d_h)); the query
    of an example is its row ``query_index``; ``causal``: the query sees the tokens up to itself.
    ``shared_context``: every example uses the context of the first example seen (``E_t = E_0``)
    with its own query ``x_t`` (Proposition 2's setting). Key/query weights that are not both
    (H, d, d_h) are refused where the builder is made (InputError).
    """

    def __init__(self, heads: Heads, *, query_index: int = 0, causal: bool = False, shared_context: bool = False):
        Wq = heads.Wq.detach().to(torch.float64)
        Wk = heads.Wk.detach().to(torch.float64)
        if Wq.ndim != 3 or Wq.shape != Wk.shape:
            raise InputError(f"key/query weights must both be (H, d, d_h), got {tuple(Wq.shape)} and {tuple(Wk.shape)}")
        H, d, dh = Wq.shape
        # attention_combinations scales the logits by 1/sqrt(d_h); another scale is folded into W_q, b_q.
        f = 1.0 if heads.scale is None else float(heads.scale) * math.sqrt(dh)
        self.Wq = Wq * f
        self.Wk = Wk
        self.bq = heads.bq.detach().to(torch.float64) * f if heads.bq is not None else None
        self.bk = heads.bk.detach().to(torch.float64) if heads.bk is not None else None
        self.pre = _pre64(heads.pre)
        self.H, self.d, self.dh = int(H), int(d), int(dh)
        self.query_index = int(query_index)
        self.causal = bool(causal)
        self.shared_context = bool(shared_context)
        self._E0: torch.Tensor | None = None
        self._parts: list[torch.Tensor] = []
        self.n: int | None = None

    def update(self, tokens: torch.Tensor) -> None:
        """Add the rows of ``Z`` of one batch of token rows, (B, n, d); the rows are kept on the CPU.

        Raises:
            InputError: when ``tokens`` is not (B, n, d) with the weights' d.
        """
        if tokens.ndim != 3 or tokens.shape[-1] != self.d:
            raise InputError(f"token batches must be (B, n, {self.d}), got {tuple(tokens.shape)}")
        B, n, _ = tokens.shape
        if self.n is None:
            self.n = int(n)
        qi = self.query_index % n
        x = tokens[:, qi, :]
        keep = qi + 1 if self.causal else n  # causal: the query sees the tokens up to itself
        if self.shared_context:
            if self._E0 is None:
                self._E0 = tokens[0, :keep, :].detach().to(torch.float64).clone()
            E = self._E0.to(tokens.device)
        else:
            E = tokens[:, :keep, :]
        with torch.no_grad():
            on = _on(tokens.device, torch.float64)
            heads = Heads(on(self.Wq), on(self.Wk), on(self.bq), on(self.bk), self._pre_on(tokens.device))
            z = attention_combinations(E, x, heads, chunk=max(1, B))
        self._parts.append(z.cpu())

    def _pre_on(self, device):
        if self.pre is None or not isinstance(self.pre, torch.nn.Module):
            return self.pre
        return self.pre.to(device)

    @property
    def T(self) -> int:
        """The number of rows accumulated so far."""
        return sum(int(p.shape[0]) for p in self._parts)

    def result(self) -> torch.Tensor:
        """``Z``: every row accumulated, in the order of the batches, (T, H d) float64 on the CPU.

        Raises:
            DataError: when no batch was added.
        """
        if not self._parts:
            raise DataError("no examples reached the attention layer")
        return torch.cat(self._parts)
