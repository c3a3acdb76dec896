"""From assumptions to capacity: the linear algebra behind Theorem 1.

Pure functions on tensors; nothing here knows about models or data sources. Everything is
computed in float64 unless a caller asks otherwise.

- :func:`theorem1_bound` turns assumption results (A1, A2, a Kruskal-rank estimate) into the
  number of examples Theorem 1 (or Remark 1) says a multi-head attention layer memorises.
  The count ``H (min(n, d_h) - 1) + 1`` is *reconstructed* from the paper's proof (the
  extracted text lost the formula), and every result says so.
- :func:`attention_combinations` builds the matrix ``Z`` of the proof (step 2): row t is
  ``[z_1; ...; z_H]`` with ``z_h = E_t^T softmax(s_h)``, a convex combination of the context
  rows of example t chosen by head h.
- :func:`memorization_certificate` turns ``Z`` into a certified number of memorised examples:
  its numerical rank r, r independent rows, and value/output weights that hit random labels on
  those rows exactly (up to a reported residual).
- :func:`shared_context_rank_bound` is Proposition 2's ceiling ``H (n - 1) + 1`` for a context
  shared by all examples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from .errors import InputError

__all__ = [
    "CapacityBound",
    "Certificate",
    "attention_combinations",
    "memorization_certificate",
    "random_attention_weights",
    "shared_context_rank_bound",
    "theorem1_bound",
]

_RECONSTRUCTED_NOTE = (
    "count reconstructed from the proof of Proposition 1 / Theorem 1 (the formula was lost in the "
    "text extraction of the paper), not read verbatim"
)


# --------------------------------------------------------------------------------------------
# Theorem 1 / Remark 1
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CapacityBound:
    """What Theorem 1 (or Remark 1) guarantees for one set of assumption results.

    Fields:
        applies: whether a guarantee follows from the inputs.
        count: the number of examples memorised (``None`` when it does not apply).
        formula: the formula with the numbers plugged in ("" when it does not apply).
        which: ``"theorem-1"``, ``"remark-1"`` or ``"not-applicable"``.
        reason: one line: why it applies or why not.
        reconstructed: always ``True``: the count was reconstructed from the proof.
        notes: further remarks (conflicting inputs, d_h capping the bound, ...).
        heads, head_dim, n, d, kruskal_estimate: the inputs, for the report.
    """

    applies: bool
    count: int | None
    formula: str
    which: str
    reason: str
    reconstructed: bool = True
    notes: tuple[str, ...] = ()
    heads: int = 0
    head_dim: int = 0
    n: int = 0
    d: int = 0
    kruskal_estimate: int | None = None

    def to_dict(self) -> dict:
        return {
            "applies": self.applies,
            "count": self.count,
            "formula": self.formula,
            "which": self.which,
            "reason": self.reason,
            "reconstructed": self.reconstructed,
            "notes": list(self.notes),
            "heads": self.heads,
            "head_dim": self.head_dim,
            "n": self.n,
            "d": self.d,
            "kruskal_estimate": self.kruskal_estimate,
        }


def _positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise InputError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def theorem1_bound(
    *,
    heads: int,
    head_dim: int,
    n: int,
    d: int,
    a1_holds: bool | None,
    a2_holds: bool | None,
    kruskal_estimate: int | None = None,
) -> CapacityBound:
    """The number of examples an MHA layer provably memorises, given the assumption results.

    - A1 and A2 hold and ``n < d``: Theorem 1, ``H (min(n, d_h) - 1) + 1``.
    - A1 fails (or was not checked) but A2 holds, ``n < d``, and a Kruskal-rank estimate
      ``k < n`` of the queries is given: Remark 1, ``H (min(k, d_h) - 1) + 1``.
    - A2 fails or was not checked, ``n >= d``, or A1 fails with no usable estimate: no guarantee
      (``applies=False``) and ``reason`` says which.

    ``a1_holds`` decides between Theorem 1 and Remark 1; an estimate that contradicts it is
    recorded in ``notes``. Both counts are reconstructed from the proof (``reconstructed=True``).
    """
    heads = _positive_int("heads", heads)
    head_dim = _positive_int("head_dim", head_dim)
    n = _positive_int("n", n)
    d = _positive_int("d", d)
    if kruskal_estimate is not None:
        kruskal_estimate = _positive_int("kruskal_estimate", kruskal_estimate)
    for name, val in (("a1_holds", a1_holds), ("a2_holds", a2_holds)):
        if val is not None and not isinstance(val, (bool, np.bool_)):
            raise InputError(f"{name} must be True, False or None, got {val!r}")

    notes: list[str] = [_RECONSTRUCTED_NOTE]
    common = dict(heads=heads, head_dim=head_dim, n=n, d=d, kruskal_estimate=kruskal_estimate)

    def not_applicable(reason: str) -> CapacityBound:
        return CapacityBound(
            applies=False, count=None, formula="", which="not-applicable", reason=reason,
            notes=tuple(notes), **common,
        )

    if a2_holds is None:
        return not_applicable("A2 (every context matrix has rank n) was not checked")
    if not a2_holds:
        return not_applicable("A2 fails: some context matrix E_t has rank below n")
    if n >= d:
        return not_applicable(f"n >= d ({n} >= {d}): Theorem 1 needs the context length below the width")

    if a1_holds:
        if kruskal_estimate is not None and kruskal_estimate < n:
            notes.append(
                f"the Kruskal-rank estimate {kruskal_estimate} is below n = {n} although A1 was "
                "reported to hold; the A1 result was used"
            )
        m = min(n, head_dim)
        count = heads * (m - 1) + 1
        formula = f"H*(min(n, d_h) - 1) + 1 = {heads}*(min({n}, {head_dim}) - 1) + 1 = {count}"
        if head_dim < n:
            notes.append(f"d_h = {head_dim} < n = {n} caps the bound: heads wider than n add nothing, narrower ones lose")
        return CapacityBound(
            applies=True, count=count, formula=formula, which="theorem-1",
            reason="A1 and A2 hold and n < d", notes=tuple(notes), **common,
        )

    # A1 fails or was not checked: Remark 1 needs an estimate k < n.
    state = "fails" if a1_holds is False else "was not checked"
    if kruskal_estimate is None:
        return not_applicable(f"A1 {state} and no Kruskal-rank estimate of the queries was given")
    if kruskal_estimate >= n:
        if a1_holds is None:
            notes.append(f"A1 was not checked; the Kruskal-rank estimate {kruskal_estimate} >= n = {n} was used in its place")
            m = min(n, head_dim)
            count = heads * (m - 1) + 1
            formula = f"H*(min(n, d_h) - 1) + 1 = {heads}*(min({n}, {head_dim}) - 1) + 1 = {count}"
            return CapacityBound(
                applies=True, count=count, formula=formula, which="theorem-1",
                reason=f"Kruskal-rank estimate {kruskal_estimate} >= n, A2 holds and n < d",
                notes=tuple(notes), **common,
            )
        return not_applicable(
            f"inconsistent inputs: A1 fails but the Kruskal-rank estimate {kruskal_estimate} is not below n = {n}"
        )
    k = kruskal_estimate
    m = min(k, head_dim)
    count = heads * (m - 1) + 1
    formula = f"H*(min(k, d_h) - 1) + 1 = {heads}*(min({k}, {head_dim}) - 1) + 1 = {count}"
    notes.append("the Kruskal rank is an estimate unless it was proven; the count inherits that status")
    return CapacityBound(
        applies=True, count=count, formula=formula, which="remark-1",
        reason=f"A1 {state}, A2 holds, queries' Kruskal rank estimated at k = {k} < n = {n}",
        notes=tuple(notes), **common,
    )


def shared_context_rank_bound(H: int, n: int) -> int:
    """Proposition 2: with one context shared by all examples, ``rank(Z) <= H (n - 1) + 1``."""
    H = _positive_int("H", H)
    n = _positive_int("n", n)
    return H * (n - 1) + 1


# --------------------------------------------------------------------------------------------
# The matrix Z
# --------------------------------------------------------------------------------------------


def _as_tensor(name: str, value, ndims: tuple[int, ...]) -> torch.Tensor:
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


def attention_combinations(
    E: torch.Tensor,
    x: torch.Tensor,
    Wq: torch.Tensor,
    Wk: torch.Tensor,
    bq: torch.Tensor | None = None,
    bk: torch.Tensor | None = None,
    *,
    pre: Callable[[torch.Tensor], torch.Tensor] | None = None,
    exclude_query_index: int | None = None,
    chunk: int = 256,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """The matrix ``Z`` (T, H*d) of the proof of Theorem 1.

    Row t is ``[z_1; ...; z_H]`` with ``z_h = E_t^T softmax(s_h)`` and logits
    ``s_h[i] = (pre(E_t)[i] Wk_h + bk_h) . (pre(x_t) Wq_h + bq_h) / sqrt(d_h)``.

    Args:
        E: contexts, (T, n, d). A (n, d) matrix is taken as one context shared by all examples.
        x: queries, (T, d).
        Wq, Wk: query/key weights, (H, d, d_h) (a (d, d_h) matrix means one head).
        bq, bk: optional biases, (H, d_h). (``bk`` shifts all logits of a head equally, so it
            cannot change ``Z``; it is accepted for fidelity to real layers.)
        pre: what the keys and queries see, e.g. a LayerNorm; applied to ``E`` and ``x`` along
            the last dimension. ``z_h`` always combines the raw rows of ``E_t`` (the value input).
        exclude_query_index: a context row the query may not attend to (self-attention where the
            query is that row of the context and should not see itself); ``None`` for none.
        chunk: examples processed at once; memory is O(chunk * n * d + T * H * d).
        dtype: computation dtype (float64 by default).
    """
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise InputError(f"chunk must be a positive integer, got {chunk!r}")
    E = _as_tensor("E", E, (2, 3))
    x = _as_tensor("x", x, (2,))
    Wq = _as_tensor("Wq", Wq, (2, 3))
    Wk = _as_tensor("Wk", Wk, (2, 3))
    if Wq.ndim == 2:
        Wq = Wq.unsqueeze(0)
    if Wk.ndim == 2:
        Wk = Wk.unsqueeze(0)
    shared = E.ndim == 2
    T, d = x.shape
    n = E.shape[-2]
    if E.shape[-1] != d:
        raise InputError(f"E has width {E.shape[-1]} but the queries x have width {d}")
    if not shared and E.shape[0] != T:
        raise InputError(f"E has {E.shape[0]} examples but x has {T}")
    if n < 1:
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
    biases = []
    for name, b in (("bq", bq), ("bk", bk)):
        if b is None:
            biases.append(None)
            continue
        b = _as_tensor(name, b, (1, 2))
        if b.ndim == 1:
            b = b.unsqueeze(0)
        if tuple(b.shape) != (H, dh):
            raise InputError(f"{name} must have shape (H, d_h) = ({H}, {dh}), got {tuple(b.shape)}")
        biases.append(b)
    bq, bk = biases
    if exclude_query_index is not None:
        if isinstance(exclude_query_index, bool) or not isinstance(exclude_query_index, int):
            raise InputError(f"exclude_query_index must be an integer, got {exclude_query_index!r}")
        if exclude_query_index < 0:
            exclude_query_index += n
        if not 0 <= exclude_query_index < n:
            raise InputError(f"exclude_query_index {exclude_query_index} is outside the context (n = {n})")
        if n < 2:
            raise InputError("excluding the query leaves an empty context (n = 1)")

    device = x.device
    Wq = Wq.to(device=device, dtype=dtype)
    Wk = Wk.to(device=device, dtype=dtype)
    bq = bq.to(device=device, dtype=dtype) if bq is not None else None
    bk = bk.to(device=device, dtype=dtype) if bk is not None else None
    scale = 1.0 / math.sqrt(dh)

    out = torch.empty((T, H * d), dtype=dtype, device=device)
    if shared:
        E_raw_shared = E.to(device=device, dtype=dtype)
        E_pre_shared = pre(E_raw_shared) if pre is not None else E_raw_shared
    for start in range(0, T, chunk):
        stop = min(start + chunk, T)
        xc = x[start:stop].to(dtype=dtype)
        xp = pre(xc) if pre is not None else xc
        q = torch.einsum("cd,hde->che", xp, Wq)  # (c, H, dh)
        if bq is not None:
            q = q + bq.unsqueeze(0)
        # s[c,h,i] = pre(E)[c,i] . (Wk_h q[c,h]) + bk_h . q[c,h]: never forms (c, H, n, dh).
        u = torch.einsum("hde,che->chd", Wk, q)  # (c, H, d)
        if shared:
            Ec, Ep = E_raw_shared, E_pre_shared
            s = torch.einsum("nd,chd->chn", Ep, u)
        else:
            Ec = E[start:stop].to(device=device, dtype=dtype)
            Ep = pre(Ec) if pre is not None else Ec
            s = torch.einsum("cnd,chd->chn", Ep, u)
        if bk is not None:
            s = s + torch.einsum("he,che->ch", bk, q).unsqueeze(-1)
        s = s * scale
        if exclude_query_index is not None:
            s[..., exclude_query_index] = float("-inf")
        p = torch.softmax(s, dim=-1)  # (c, H, n)
        if shared:
            z = torch.einsum("chn,nd->chd", p, Ec)
        else:
            z = torch.einsum("chn,cnd->chd", p, Ec)
        out[start:stop] = z.reshape(stop - start, H * d)
    return out


def random_attention_weights(d: int, heads: int, head_dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Frozen random key/query weights ``(Wq, Wk)``, each (heads, d, head_dim), float64.

    Each head's (d, head_dim) matrix is Xavier-uniform: U(-a, a) with a = sqrt(6 / (d + head_dim)).
    Seeded by ``seed`` through one CPU ``torch.Generator``: the same seed gives the same weights.
    """
    d = _positive_int("d", d)
    heads = _positive_int("heads", heads)
    head_dim = _positive_int("head_dim", head_dim)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InputError(f"seed must be an integer, got {seed!r}")
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(seed))
    bound = math.sqrt(6.0 / (d + head_dim))
    Wq = (torch.rand((heads, d, head_dim), generator=gen, dtype=torch.float64) * 2 - 1) * bound
    Wk = (torch.rand((heads, d, head_dim), generator=gen, dtype=torch.float64) * 2 - 1) * bound
    return Wq, Wk


# --------------------------------------------------------------------------------------------
# Certificate
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Certificate:
    """Proof-by-construction that an MHA layer memorises ``rank`` examples.

    With the key/query weights that produced ``Z`` fixed, the value/output weights ``w`` (one
    output, ``d_v = d`` per head, read-out collapsed into one linear map on ``Z``) solve
    ``Z_S w = y`` for random labels ``y`` on the chosen rows ``S``.

    Fields:
        rank: numerical rank r of Z under ``tolerance_rule``.
        rows: the r chosen example indices (linearly independent rows of Z).
        weights: w, (H*d,) float64.
        labels: y, (r,) float64, iid N(0, 1) from ``seed``.
        residual: max |Z_S w - y| / max |y| (relative, float64).
        cond: condition number of Z_S (largest / smallest singular value); nan when r = 0.
        tolerance: the singular-value cut-off used.
        tolerance_rule: the rule, in words and numbers.
        singular_values: all singular values of Z, descending (float64).
        shape: (T, H*d).
        seed: the label seed.
    """

    rank: int
    rows: tuple[int, ...]
    weights: torch.Tensor
    labels: torch.Tensor
    residual: float
    cond: float
    tolerance: float
    tolerance_rule: str
    singular_values: torch.Tensor
    shape: tuple[int, int]
    seed: int
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "rows": list(self.rows),
            "residual": self.residual,
            "cond": self.cond,
            "tolerance": self.tolerance,
            "tolerance_rule": self.tolerance_rule,
            "shape": list(self.shape),
            "seed": self.seed,
            "notes": list(self.notes),
        }


def _rank_tolerance(sv: np.ndarray, shape: tuple[int, int], rtol: float | None) -> tuple[float, str]:
    smax = float(sv[0]) if sv.size else 0.0
    if rtol is None:
        eps = float(np.finfo(np.float64).eps)
        m = max(shape)
        tol = smax * m * eps
        rule = f"sigma > sigma_max * max(rows, cols) * eps(float64) = {smax:.6g} * {m} * {eps:.3g} = {tol:.3g}"
    else:
        tol = smax * float(rtol)
        rule = f"sigma > sigma_max * rtol = {smax:.6g} * {float(rtol):.3g} = {tol:.3g}"
    return tol, rule


def memorization_certificate(Z: torch.Tensor, *, seed: int = 0, rtol: float | None = None) -> Certificate:
    """Certify that the MHA layer behind ``Z`` memorises ``rank(Z)`` examples.

    1. Numerical rank r of ``Z`` (float64 SVD; default cut-off
       ``sigma_max * max(rows, cols) * eps(float64)``, or ``sigma_max * rtol``).
    2. r linearly independent rows ``S`` by column-pivoted QR of ``Z^T`` (greedy, well
       conditioned: each pivot is the row farthest from the span of those already chosen).
    3. Random labels ``y ~ N(0, 1)`` (seeded) and the minimum-norm ``w`` with ``Z_S w = y``,
       solved through the same QR factors.
    4. The residual ``max |Z_S w - y| / max |y|`` recomputed from ``Z`` itself.
    """
    import scipy.linalg

    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InputError(f"seed must be an integer, got {seed!r}")
    if rtol is not None:
        if isinstance(rtol, bool) or not isinstance(rtol, (int, float)) or not (rtol >= 0):
            raise InputError(f"rtol must be a non-negative number, got {rtol!r}")
    Zt = _as_tensor("Z", Z, (2,))
    A = Zt.detach().to("cpu", torch.float64).numpy()
    if not np.all(np.isfinite(A)):
        raise InputError("Z contains NaN or infinite values")
    T, m = A.shape
    if T == 0 or m == 0:
        raise InputError(f"Z is empty (shape {T} x {m})")

    sv = np.linalg.svd(A, compute_uv=False)
    tol, rule = _rank_tolerance(sv, (T, m), rtol)
    r = int(np.sum(sv > tol))
    notes: list[str] = []

    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(seed))
    if r == 0:
        return Certificate(
            rank=0, rows=(), weights=torch.zeros(m, dtype=torch.float64), labels=torch.zeros(0, dtype=torch.float64),
            residual=0.0, cond=float("nan"), tolerance=tol, tolerance_rule=rule,
            singular_values=torch.from_numpy(sv.copy()), shape=(T, m), seed=int(seed),
            notes=("Z is numerically zero: nothing is certified",),
        )

    # Column-pivoted QR of Z^T (m x T): the first r pivots are r well-separated rows of Z.
    Q, R, piv = scipy.linalg.qr(A.T, mode="economic", pivoting=True)
    rows = np.sort(piv[:r])
    ZS = A[rows]
    y = torch.randn(r, generator=gen, dtype=torch.float64).numpy()

    # Minimum-norm solution of Z_S w = y through a QR of Z_S^T (m x r, full column rank).
    Qs, Rs = np.linalg.qr(ZS.T, mode="reduced")
    c = scipy.linalg.solve_triangular(Rs, y, trans="T", lower=False)
    w = Qs @ c
    residual = float(np.max(np.abs(ZS @ w - y)) / max(np.max(np.abs(y)), np.finfo(np.float64).tiny))
    svS = np.linalg.svd(ZS, compute_uv=False)
    cond = float(svS[0] / svS[-1]) if svS[-1] > 0 else float("inf")
    if r < T:
        notes.append(f"Z has {T} rows but rank {r}: only the {r} chosen examples are certified")
    return Certificate(
        rank=r, rows=tuple(int(i) for i in rows), weights=torch.from_numpy(w), labels=torch.from_numpy(y),
        residual=residual, cond=cond, tolerance=tol, tolerance_rule=rule,
        singular_values=torch.from_numpy(sv.copy()), shape=(T, m), seed=int(seed), notes=tuple(notes),
    )
