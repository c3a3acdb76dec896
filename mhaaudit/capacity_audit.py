"""``mhaaudit capacity``: from audited assumptions to a memorisation bound and a certificate.

Two numbers per column (random weights; trained weights when they can be had):

- **The bound.** Theorem 1 (or Remark 1) of the paper turns the audit of the tokens an
  attention layer sees (Assumption 1 at k = n, Assumption 2, and a Kruskal-rank estimate when
  Assumption 1 fails) into a number of examples a multi-head attention layer with H heads of
  key/query dimension d_h memorises for any labels: ``H (min(n, d_h) - 1) + 1`` (Remark 1:
  ``H (min(k, d_h) - 1) + 1``). The counts are reconstructed from the paper's proof, and every
  result says so (:func:`mhaaudit.capacity.theorem1_bound`).
- **The certificate.** On the same data, the matrix ``Z`` of the proof (row t = the H per-head
  convex combinations ``E_t^T softmax(logits)`` of example t's context rows, see
  :func:`mhaaudit.capacity.attention_combinations`), built from the key/query weights of the
  model's own attention block ``layer`` (or random ones). Its numerical rank r is a number of
  examples that one attention layer with those key/query weights memorises for ANY labels: r
  independent rows are chosen, random labels drawn, value/output weights solved for, and the
  largest residual reported. ``heads`` gives r for the first h heads, for each h.

What the attention layer sees: for ``layer = K`` the tokens ``E_t`` are the input of block K
(layer K - 1 of :meth:`mhaaudit.models.ProbedModel.capture`; K = 1: the embedding output) and
the query ``x_t`` is row ``info.query_index`` of ``E_t``. The block's pre-attention
LayerNorm enters the logits only; the convex combinations are of the raw rows of ``E_t``, the
input the assumptions were audited on. The logits use the block's own scale and biases. A
decoder's causal mask changes nothing for a query in the last position (it attends to every
token); for another query position the context is cut after the query row.

Memory: ``Z`` is built batch by batch, O(T H d); the (T, n, d) activations are never held. The
rank of each head prefix ``Z_h`` is the count of its singular values above the stated rule, as
``torch.linalg.matrix_rank`` counts them, in float64: a QR factorisation of the tall orientation
gives a triangular R with the same singular values; full rank is certified by
``1 / ||R^-1||_F <= sigma_min`` clearing the tolerance (with a rounding margin), else the
singular values of R decide; once a prefix has full row rank, larger prefixes inherit it when
its sigma_min clears their largest possible tolerance (adding columns never lowers sigma_min).
Rows are chosen and value/output weights solved through the T x T Gram matrix, accumulated head
by head, and the residual is measured on ``Z`` itself.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from .errors import DataError, InputError, OfflineError

__all__ = [
    "CapacityColumn",
    "CapacityResult",
    "HeadCertificate",
    "ZBuilder",
    "assumptions_from_file",
    "read_check_results",
    "capacity_audit",
    "certify_head_prefixes",
    "parse_heads",
    "plot_capacity",
]

VARIANTS = ("random", "trained")
ATTENTION = ("model", "random")


# --------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------


def parse_heads(spec: str | Sequence[int] | int | None, num_heads: int | None = None) -> list[int] | None:
    """``"1-12"``, ``"3"``, ``"1,2,4"`` (or a list of integers) -> sorted head counts.

    ``None`` means "all heads of the layer" (returned as ``None``). Counts must be at least 1
    and, when ``num_heads`` is given, at most ``num_heads``.
    """
    if spec is None:
        return None
    out: set[int] = set()
    if isinstance(spec, bool):
        raise InputError(f"--heads must name head counts such as 1-12 or 1,2,4, got {spec!r}")
    if isinstance(spec, (int, np.integer)):
        out.add(int(spec))
    elif isinstance(spec, str):
        from .ranges import parse_int_ranges

        out = parse_int_ranges(spec, "--heads", what="head counts", example="1-12, 3 or 1,2,4")
    else:
        try:
            out.update(int(v) for v in spec)
        except (TypeError, ValueError):
            raise InputError(f"--heads must be integers, got {spec!r}") from None
    if not out:
        raise InputError(f"--heads {spec!r} names no head count (use e.g. 1-12, 3 or 1,2,4)")
    if min(out) < 1:
        raise InputError(f"--heads {spec!r}: head counts start at 1, got {min(out)}")
    if num_heads is not None and max(out) > num_heads:
        raise InputError(f"--heads {spec!r}: the attention layer has {num_heads} heads, so at most {num_heads} can be used")
    return sorted(out)


def _check_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise InputError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


# --------------------------------------------------------------------------------------------
# Z, streamed
# --------------------------------------------------------------------------------------------


def _pre64(pre: Callable | None) -> Callable | None:
    """The block's pre-attention map in float64 (a copy of the module; the model is untouched)."""
    if pre is None or isinstance(pre, torch.nn.Identity):
        return None
    if isinstance(pre, torch.nn.Module):
        return copy.deepcopy(pre).to(torch.float64).eval()
    return lambda x: pre(x.float()).to(torch.float64)


class ZBuilder:
    """Accumulates the rows of ``Z`` (T, H d) one batch of (B, n, d) tokens at a time.

    ``shared_context``: every example uses the context of the first example seen (``E_t = E_0``)
    with its own query ``x_t`` (Proposition 2's setting).
    """

    def __init__(self, *, Wq: torch.Tensor, Wk: torch.Tensor, bq: torch.Tensor | None = None,
                 bk: torch.Tensor | None = None, pre: Callable | None = None, scale: float | None = None,
                 query_index: int = 0, causal: bool = False, shared_context: bool = False) -> None:
        Wq = Wq.detach().to(torch.float64)
        Wk = Wk.detach().to(torch.float64)
        if Wq.ndim != 3 or Wq.shape != Wk.shape:
            raise InputError(f"key/query weights must both be (H, d, d_h), got {tuple(Wq.shape)} and {tuple(Wk.shape)}")
        H, d, dh = Wq.shape
        # attention_combinations scales the logits by 1/sqrt(d_h); another scale is folded into W_q, b_q.
        f = 1.0 if scale is None else float(scale) * math.sqrt(dh)
        self.Wq = Wq * f
        self.Wk = Wk
        self.bq = bq.detach().to(torch.float64) * f if bq is not None else None
        self.bk = bk.detach().to(torch.float64) if bk is not None else None
        self.pre = _pre64(pre)
        self.H, self.d, self.dh = int(H), int(d), int(dh)
        self.query_index = int(query_index)
        self.causal = bool(causal)
        self.shared_context = bool(shared_context)
        self._E0: torch.Tensor | None = None
        self._parts: list[torch.Tensor] = []
        self.n: int | None = None

    def update(self, tokens: torch.Tensor) -> None:
        from .capacity import attention_combinations

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
            z = attention_combinations(E, x, self.Wq.to(tokens.device), self.Wk.to(tokens.device),
                                       None if self.bq is None else self.bq.to(tokens.device),
                                       None if self.bk is None else self.bk.to(tokens.device),
                                       pre=self._pre_on(tokens.device), chunk=max(1, B))
        self._parts.append(z.cpu())

    def _pre_on(self, device):
        if self.pre is None or not isinstance(self.pre, torch.nn.Module):
            return self.pre
        return self.pre.to(device)

    @property
    def T(self) -> int:
        return sum(int(p.shape[0]) for p in self._parts)

    def result(self) -> torch.Tensor:
        if not self._parts:
            raise DataError("no examples reached the attention layer")
        return torch.cat(self._parts)


# --------------------------------------------------------------------------------------------
# Rank and certificate for head prefixes, from Gram matrices
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeadCertificate:
    """The certificate for the first ``heads`` heads: Z_h = Z[:, : heads * d].

    Fields:
        heads: h.
        rank: numerical rank r of Z_h under the rule (equals matrix_rank on Z_h).
        rank_cap: min(T, h d), the largest rank Z_h can have.
        rows: the r example indices chosen (independent rows of Z_h).
        residual: max |Z_S w - y| / max |y| for random labels y ~ N(0, 1) and the solved w.
        tolerance: the singular-value cut-off; sigma_max: largest singular value of Z_h.
        method: how the rank was decided (singular values; a QR certificate of full rank; or
            full row rank inherited from fewer heads) and how the weights were solved (gram or qr).
        seconds: time spent on this prefix.
    """

    heads: int
    rank: int
    rank_cap: int
    rows: tuple[int, ...]
    residual: float
    tolerance: float
    sigma_max: float
    method: str
    seconds: float

    def to_dict(self) -> dict:
        return {"heads": self.heads, "rank": self.rank, "rank_cap": self.rank_cap, "residual": self.residual,
                "tolerance": self.tolerance, "sigma_max": self.sigma_max, "method": self.method,
                "seconds": self.seconds}


def _r_factor(Zh: torch.Tensor) -> torch.Tensor:
    """The k x k triangular factor of a QR factorisation of Zh's tall orientation, k = min(T, m).
    Its singular values are those of Zh (this is how LAPACK treats a wide matrix, and much faster
    than ``torch.linalg.svdvals`` on a 2000 x 9216 matrix)."""
    A = Zh if Zh.shape[0] >= Zh.shape[1] else Zh.T
    return torch.linalg.qr(A, mode="r").R


def _rounding(T: int, m: int, fro: float) -> float:
    # Rounding in the QR factorisation, bounded generously (a decision is taken only when it
    # survives this much); undecided cases are settled by the singular values themselves.
    return 8.0 * math.sqrt(T * m) * float(torch.finfo(torch.float64).eps) * fro


def _sigma_min_lower(R: torch.Tensor) -> float:
    """A lower bound on the smallest singular value of triangular R: 1 / ||R^-1||_F (0 if singular)."""
    k = R.shape[0]
    if k == 0 or bool((R.diagonal() == 0).any()):
        return 0.0
    Rinv = torch.linalg.solve_triangular(R, torch.eye(k, dtype=R.dtype), upper=True)
    f = float(torch.linalg.matrix_norm(Rinv))
    return 1.0 / f if math.isfinite(f) and f > 0 else 0.0


def _sigma_max(R: torch.Tensor, iters: int = 30) -> float:
    """The largest singular value of R by power iteration (a lower bound, accurate after a few steps)."""
    v = torch.ones(R.shape[1], dtype=R.dtype)
    for _ in range(iters):
        v = R.T @ (R @ v)
        nv = float(v.norm())
        if nv == 0:
            return 0.0
        v = v / nv
    return float((R @ v).norm())


def _z_rank(Zh: torch.Tensor, rule, sigma_min_known: float = 0.0) -> tuple[int, float, float, float, str]:
    """Numerical rank of Zh (T, m) under ``rule``, as ``torch.linalg.matrix_rank`` counts it.

    Returns ``(rank, sigma_max, tol, sigma_min lower bound (0 unless full rank was certified),
    how)``. ``sigma_min_known`` is a lower bound on sigma_min(Zh) known from a smaller head
    prefix of full row rank (adding columns never lowers it): when it clears the largest
    possible tolerance, full row rank follows without a factorisation.
    """
    T, m = Zh.shape
    k = min(T, m)
    fro = float(torch.linalg.matrix_norm(Zh))
    if fro == 0.0:
        return 0, 0.0, float(rule.tol(0.0, T, m)), 0.0, "zero"
    if T <= m and sigma_min_known > 0:
        tol_hi = float(rule.tol(fro, T, m))  # ||Z||_F >= sigma_max
        if sigma_min_known > tol_hi + _rounding(T, m, fro):
            return T, fro, tol_hi, sigma_min_known, "full row rank inherited from fewer heads"
    R = _r_factor(Zh)
    smax = _sigma_max(R)
    tol = float(rule.tol(smax, T, m))
    lo = _sigma_min_lower(R)
    tol_hi = float(rule.tol(float(torch.linalg.matrix_norm(R)), T, m))
    if lo > tol_hi + _rounding(T, m, fro):
        return k, smax, tol, lo, "QR: sigma_min >= 1/||R^-1||_F clears the tolerance"
    s = torch.linalg.svdvals(R)
    smax = float(s[0])
    tol = float(rule.tol(smax, T, m))
    r = int((s > tol).sum())
    return r, smax, tol, (float(s[-1]) if r == k else 0.0), "singular values"


def _residual(ZS: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> float:
    denom = max(float(y.abs().max()), float(np.finfo(np.float64).tiny))
    return float((ZS @ w - y).abs().max()) / denom


def _solve_gram(ZS: torch.Tensor, GS: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
    """Min-norm w with Z_S w = y through the Gram matrix of the rows (None when it is not
    numerically positive definite); two steps of iterative refinement against Z_S itself."""
    L, info = torch.linalg.cholesky_ex(GS)
    if int(info) != 0:
        return None
    w = ZS.T @ torch.cholesky_solve(y.unsqueeze(1), L).squeeze(1)
    for _ in range(2):
        res = y - ZS @ w
        w = w + ZS.T @ torch.cholesky_solve(res.unsqueeze(1), L).squeeze(1)
    return w


def _solve_qr(ZS: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Min-norm w with Z_S w = y through a QR factorisation of Z_S^T (better conditioned than the Gram route)."""
    Q, R = torch.linalg.qr(ZS.T, mode="reduced")
    c = torch.linalg.solve_triangular(R.T, y.unsqueeze(1), upper=False).squeeze(1)
    return Q @ c


def certify_head_prefixes(Z: torch.Tensor, d: int, heads: Sequence[int], *, rule=None, seed: int = 0,
                          progress: Callable[[int], None] | None = None) -> list[HeadCertificate]:
    """The certificate of :func:`mhaaudit.capacity.memorization_certificate` for Z[:, : h d], each h.

    The rank of each prefix counts its float64 singular values above the rule. The T x T Gram
    matrix is accumulated head by head; rows are chosen by its pivoted Cholesky factorisation
    (the same greedy choice as a column-pivoted QR of Z^T) and the value/output weights solved
    through it, unless the residual shows the rows too ill-conditioned for that, in which case a
    column-pivoted QR of Z_h^T and a QR solve are used. Labels are ``N(0, 1)`` from ``seed``;
    the residual is recomputed from ``Z``.
    """
    import scipy.linalg

    from .numerics import RankRule

    Z = torch.as_tensor(Z).to("cpu", torch.float64)
    if Z.ndim != 2:
        raise InputError(f"Z must be a matrix, got shape {tuple(Z.shape)}")
    T, m = Z.shape
    d = _check_int("d", d)
    if T == 0 or m == 0 or m % d:
        raise InputError(f"Z has shape {T} x {m}, which is not T x (H * {d}) with T >= 1")
    if not torch.isfinite(Z).all():
        raise InputError("Z contains NaN or infinite values")
    H = m // d
    hs = parse_heads(list(heads), H)
    rule = rule or RankRule.for_dtype(torch.float64)
    G = torch.zeros(T, T, dtype=torch.float64)
    done = 0
    out = []
    smin_known = 0.0
    for h in hs:
        t0 = time.perf_counter()
        while done < h:
            Zj = Z[:, done * d:(done + 1) * d]
            G.addmm_(Zj, Zj.T)
            done += 1
        Zh = Z[:, : h * d]
        r, smax, tol, smin, how = _z_rank(Zh, rule, smin_known)
        if r == T and smin > 0:
            smin_known = max(smin_known, smin)
        solver = "gram"
        gen = torch.Generator(device="cpu").manual_seed(int(seed))
        if r == 0:
            rows = np.zeros(0, dtype=np.int64)
            residual = 0.0
        else:
            if r == T:
                rows = np.arange(T)
            else:  # greedy choice of r rows: pivoted Cholesky of the Gram matrix
                _, piv, _, _ = scipy.linalg.lapack.dpstrf(G.numpy().copy(), lower=1)
                rows = np.sort(piv[:r] - 1)
            y = torch.randn(r, generator=gen, dtype=torch.float64)
            idx = torch.as_tensor(rows, dtype=torch.long)
            w = _solve_gram(Zh[idx], G[idx][:, idx], y)
            residual = _residual(Zh[idx], w, y) if w is not None else float("inf")
            if not residual < 1e-8:
                # Ill-conditioned rows: the Gram route squares the condition number. Choose the rows
                # by a column-pivoted QR of Z_h^T and solve through a QR factorisation instead.
                rows_q = rows
                if r < T:
                    _, _, piv = scipy.linalg.qr(Zh.T.numpy(), mode="economic", pivoting=True)
                    rows_q = np.sort(piv[:r])
                idx_q = torch.as_tensor(rows_q, dtype=torch.long)
                rq = _residual(Zh[idx_q], _solve_qr(Zh[idx_q], y), y)
                if rq < residual:
                    rows, residual, solver = rows_q, rq, "qr"
        out.append(HeadCertificate(heads=h, rank=r, rank_cap=min(T, h * d), rows=tuple(int(i) for i in rows),
                                   residual=residual, tolerance=tol, sigma_max=smax, method=f"rank: {how}; weights: {solver} solve",
                                   seconds=round(time.perf_counter() - t0, 3)))
        if progress:
            progress(1)
    return out


# --------------------------------------------------------------------------------------------
# Assumption verdicts: from the audit, or from a results file of ``mhaaudit check --out``
# --------------------------------------------------------------------------------------------


@dataclass
class Assumptions:
    """What the bound is computed from."""

    a1: str | None = None  # holds | fails | None (not checked)
    a2: str | None = None
    a1_reason: str = ""
    a2_reason: str = ""
    a1_fraction: float | None = None
    kruskal_estimate: int | None = None
    estimate_note: str = ""
    source: str = ""

    def holds(self, v: str | None) -> bool | None:
        return None if v not in ("holds", "fails") else v == "holds"

    def to_dict(self) -> dict:
        return {"assumption_1": self.a1, "assumption_1_reason": self.a1_reason, "assumption_1_fraction": self.a1_fraction,
                "assumption_2": self.a2, "assumption_2_reason": self.a2_reason,
                "kruskal_estimate": self.kruskal_estimate, "kruskal_estimate_note": self.estimate_note,
                "source": self.source}


def _linear_algebra():
    """Rank computations on the CPU: one thread, subnormals flushed (see ``rank.numerics``).

    On shared cores the multi-threaded LAPACK calls were erratic, up to 100x slower (a 768 x 768
    eigenvalue problem took 11.6 s on two threads against 0.08 s on one, and the QR/SVD of a
    2000 x 9216 matrix was no faster on two). The model's forward pass runs outside this context.
    """
    from .numerics import numerics

    return numerics(threads=1)


def _audit_assumptions(fs, *, samples: int, threshold: float, seed: int, rtol, atol, device, progress: bool,
                       label: str) -> tuple[Assumptions, dict]:
    """A1 (k = n) and A2 on reduced features; a Kruskal-rank estimate when Remark 1 needs one."""
    from .kruskal import kruskal_sweep, set_stats, subset_test
    from .progress import task

    rule = fs.rule(rtol, atol)
    timings: dict = {}
    t0 = time.perf_counter()
    a2 = fs.assumption_2(rule)
    out = Assumptions(a2=a2.verdict, a2_reason=a2.reason, source="audited on the same examples")
    if fs.T < fs.n:
        out.a1_reason = f"not checked: {fs.T} examples, fewer than n = {fs.n} (raise --limit)"
        timings["assumption_2"] = round(time.perf_counter() - t0, 3)
        return out, timings
    stats = set_stats(fs.queries, rule)
    common = dict(samples=samples, threshold=threshold, seed=seed, rule=rule, device=device)
    with task(f"{label} assumption_1 (k = {fs.n})", samples, progress) as adv:
        a1 = subset_test(fs.queries, fs.n, check="assumption_1", stats=stats, progress=adv, stop_when_decided=True, **common)
    out.a1, out.a1_reason = a1.verdict, a1.reason
    out.a1_fraction = a1.fraction if a1.sampled else None
    timings["assumptions 1-2"] = round(time.perf_counter() - t0, 3)
    if a1.verdict == "fails" and a2.verdict == "holds" and fs.n < fs.d:
        t0 = time.perf_counter()
        with task(f"{label} Kruskal-rank sweep (k <= {fs.n})", samples, progress) as adv:
            sw = kruskal_sweep(fs.queries, kmax=fs.n, stats=stats, progress=adv, **common)
        timings["kruskal sweep"] = round(time.perf_counter() - t0, 3)
        if sw.estimate >= 1:
            out.kruskal_estimate = int(sw.estimate)
            out.estimate_note = (f"largest k <= {fs.n} with satisfied fraction >= {threshold} over {samples} nested draws "
                                 f"(an estimate); certified ceiling {sw.ceiling.value} ({sw.ceiling.kind})")
    return out, timings


def read_check_results(path: str | Path) -> tuple[dict, list[dict]]:
    """The metadata and records of a parquet file written by ``mhaaudit check --out``."""
    import pyarrow.parquet as pq

    from .io import read_parquet_metadata

    p = Path(path)
    if not p.is_file():
        raise InputError(f"--from {p}: no such file")
    try:
        meta = read_parquet_metadata(p)
        rows = pq.read_table(p).to_pylist()
    except Exception as exc:
        raise InputError(f"--from {p}: cannot read it as a parquet file ({' '.join(str(exc).split())[:160]})") from None
    if not rows or "check" not in rows[0] or "variant" not in rows[0]:
        raise InputError(f"--from {p}: not a results file of 'mhaaudit check --out' (no check/variant columns)")
    return meta, rows


def assumptions_from_file(path: str | Path, *, weights: str, layer: int, n: int | None = None,
                          d: int | None = None, results: tuple[dict, list[dict]] | None = None,
                          ) -> tuple[Assumptions | None, str, list[str]]:
    """The A1/A2 verdicts and Kruskal estimate of the column of ``path`` with these weights at ``layer``.

    ``path`` is a parquet file written by ``mhaaudit check --out`` (``results``: its contents,
    already read by :func:`read_check_results`). Returns ``(assumptions or None, the column's
    name or the reason none fits, notes)``.
    """
    p = Path(path)
    meta, rows = results if results is not None else read_check_results(p)
    notes: list[str] = []
    info = meta.get("model_info") or {}
    if (n is not None and info.get("n") not in (None, n)) or (d is not None and info.get("d") not in (None, d)):
        raise InputError(f"--from {p}: audited with n = {info.get('n')}, d = {info.get('d')}, but the model here has "
                         f"n = {n}, d = {d}")
    if meta.get("command") not in (None, "check"):
        notes.append(f"--from {p} was written by 'mhaaudit {meta.get('command')}', not 'mhaaudit check'")
    cols = meta.get("columns") or {}
    chosen = None
    for variant, c in cols.items():
        if c.get("weights") != weights or int(c.get("layer", -1)) != layer or variant == "random-attention":
            continue
        if c.get("status", "ok") != "ok":
            return None, f"column {variant!r} of {p} is unavailable: {c.get('reason', '')}", notes
        chosen = variant
        break
    if chosen is None:
        have = ", ".join(f"{v} ({c.get('weights')} weights, layer {c.get('layer')})" for v, c in cols.items()) or "none"
        return None, (f"{p} has no column with {weights} weights at layer {layer} (the input of block {layer + 1}); "
                      f"it has: {have}"), notes
    mine = [r for r in rows if r.get("variant") == chosen]
    out = Assumptions(source=f"read from {p} (column {chosen})")
    for r in mine:
        if r.get("check") == "assumption_1":
            out.a1 = r.get("verdict") if r.get("verdict") in ("holds", "fails") else None
            out.a1_reason = r.get("reason") or ""
            out.a1_fraction = r.get("fraction") if r.get("sampled") else None
        elif r.get("check") == "assumption_2":
            out.a2 = r.get("verdict") if r.get("verdict") in ("holds", "fails") else None
            out.a2_reason = r.get("reason") or ""
    sweep = (cols.get(chosen) or {}).get("sweep")
    if isinstance(sweep, dict) and sweep.get("estimate"):
        out.kruskal_estimate = int(sweep["estimate"])
        out.estimate_note = f"the Kruskal-rank estimate of {p} ({sweep.get('estimate_means', 'an estimate')})"
    else:
        sw = [r for r in mine if r.get("check") == "sweep" and r.get("k") is not None]
        thr = meta.get("threshold")
        if sw and thr is not None:
            ok = [int(r["k"]) for r in sw if (r.get("fraction") or 0.0) >= float(thr)]
            if ok:
                out.kruskal_estimate = max(ok)
                out.estimate_note = f"largest k with satisfied fraction >= {thr} in the sweep rows of {p} (an estimate)"
    return out, chosen, notes


# --------------------------------------------------------------------------------------------
# The command's result
# --------------------------------------------------------------------------------------------


@dataclass
class CapacityColumn:
    variant: str  # random | trained
    status: str = "ok"  # ok | unavailable
    reason: str = ""
    assumptions: Assumptions | None = None
    bounds: dict = field(default_factory=dict)  # h -> CapacityBound
    certificates: list = field(default_factory=list)  # HeadCertificate, by h
    T: int = 0
    weights_source: str = ""
    timings: dict = field(default_factory=dict)


@dataclass
class CapacityResult:
    model: str
    info: dict
    data: str
    columns: list[CapacityColumn]
    settings: dict
    timings: dict
    notes: list = field(default_factory=list)

    def column(self, variant: str) -> CapacityColumn:
        for c in self.columns:
            if c.variant == variant:
                return c
        raise KeyError(variant)

    def records(self) -> list[dict]:
        """One row per column and head count h (one 'unavailable' row for a column that could not run)."""
        from .capacity import shared_context_rank_bound

        s, info = self.settings, self.info
        H, dh, n, d = info.get("num_heads"), s["head_dim"], info.get("n"), info.get("d")
        out = []
        for c in self.columns:
            base = {"model": self.model, "variant": c.variant, "layer": s["layer"], "attention": s["attention"],
                    "shared_context": s["shared_context"], "T": c.T or None, "n": n, "d": d, "d_h": dh, "H": H,
                    "tolerance": s["z_tolerance"], "seed": s["seed"], "status": c.status}
            if c.status != "ok":
                out.append({**base, "heads": None, "rank": None, "rank_cap": None, "bound": None,
                            "bound_kind": "unavailable", "bound_reason": c.reason, "residual": None,
                            "prop2_bound": None, "prop2_verdict": None, "reason": c.reason})
                continue
            a = c.assumptions or Assumptions()
            for cert in c.certificates:
                b = c.bounds[cert.heads]
                p2 = shared_context_rank_bound(cert.heads, n)
                out.append({
                    **base, "heads": cert.heads, "rank": cert.rank, "rank_cap": cert.rank_cap,
                    "bound": b.count, "bound_kind": b.which, "bound_reason": b.reason, "bound_formula": b.formula,
                    "residual": cert.residual, "rank_method": cert.method, "z_tolerance_value": cert.tolerance,
                    "sigma_max": cert.sigma_max, "prop2_bound": p2,
                    "prop2_verdict": ("holds" if cert.rank <= p2 else "fails") if s["shared_context"] else None,
                    "assumption_1": a.a1, "assumption_2": a.a2, "kruskal_estimate": a.kruskal_estimate,
                    "reason": "",
                })
        return out

    def meta(self) -> dict:
        from .io import stamp

        return stamp(command="capacity", model=self.model, model_info=self.info, data=self.data, notes=self.notes,
                     timings_s=self.timings, **self.settings,
                     columns={c.variant: {"status": c.status, "reason": c.reason, "T": c.T,
                                          "weights_source": c.weights_source, "timings_s": c.timings,
                                          "assumptions": c.assumptions.to_dict() if c.assumptions else None,
                                          "bound": (c.bounds[max(c.bounds)].to_dict() if c.bounds else None)}
                              for c in self.columns})


# --------------------------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------------------------


def _prefetched(pm, batches):
    """Model inputs, each batch preprocessed in a helper thread while the previous one is probed.

    Image preprocessing (PIL and numpy, largely outside the interpreter lock) is the slowest
    step on a CPU; overlapping it with the forward pass and the reductions saves its time.
    """
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mhaaudit-preprocess") as pool:
        pending = None
        for batch in batches:
            if batch is None or len(batch) == 0:
                continue
            if isinstance(batch, dict):  # already model inputs (token ids): nothing to prepare
                fut = pool.submit(lambda b=batch: b)
            else:
                fut = pool.submit(pm.preprocess, batch)
            if pending is not None:
                yield pending.result()
            pending = fut
        if pending is not None:
            yield pending.result()


def _attention_for(pm, layer: int, attention: str, seed: int):
    """Key/query weights (Wq, Wk, bq, bk, pre, scale, causal, description) the Z rows use."""
    from .models import first_attention

    info = pm.info
    if attention == "model":
        aw = first_attention(pm, layer)
        desc = (f"the model's own block {layer} attention ({aw.num_heads} heads, d_h = {aw.head_dim}, its pre-attention "
                f"map {type(aw.pre).__name__} inside the logits, scale {aw.scale:.4g}"
                + (", biases" if aw.b_q is not None else "") + ")")
        return aw.W_q, aw.W_k, aw.b_q, aw.b_k, aw.pre, aw.scale, aw.causal, desc
    from .capacity import random_attention_weights

    H, dh = info.num_heads, info.head_dim
    Wq, Wk = random_attention_weights(info.d, H, dh, seed)
    pre = torch.nn.LayerNorm(info.d, elementwise_affine=False)
    causal = info.modality == "text" and info.query_index != 0
    desc = (f"{H} random heads (seed {seed}): Xavier-uniform d x d_h key/query weights with d_h = {dh}, no biases, "
            f"logits 1/sqrt(d_h) on LayerNorm (no affine) of the tokens")
    return Wq, Wk, None, None, pre, None, causal, desc


def capacity_audit(
    model: str,
    *,
    heads: str | Sequence[int] | int | None = None,
    attention: str = "model",
    shared_context: bool = False,
    from_path: str | Path | None = None,
    variants: Sequence[str] | None = None,
    weights: str | None = None,
    layer: int = 1,
    data: str | None = None,
    split: str = "train",
    limit: int = 2000,
    batch_size: int = 32,
    samples: int | None = None,
    threshold: float | None = None,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    device: str = "auto",
    backend: str | None = None,
    context_length: int | None = None,
    progress: bool = False,
) -> CapacityResult:
    """Bound and certificate for each column (``variants``: random and/or trained; default both).

    The assumptions are audited on the tokens block ``layer`` sees (its input), unless
    ``from_path`` gives a results file of ``mhaaudit check --out`` to read them from. ``heads``
    (e.g. ``"1-12"``) asks for the certificate with the first h heads for each h (default: all
    heads). ``attention="random"`` uses random key/query weights instead of the model's.
    """
    from .audit import _batches, _load
    from .capacity import theorem1_bound
    from .settings import device_name, resolve_device
    from .features import StreamingReducer
    from .settings import DEFAULT_SAMPLES, DEFAULT_THRESHOLD
    from .progress import task
    from . import validate
    from .numerics import RankRule

    samples = DEFAULT_SAMPLES if samples is None else samples
    threshold = DEFAULT_THRESHOLD if threshold is None else threshold
    limit = _check_int("--limit", limit)
    batch_size = _check_int("--batch-size", batch_size)
    _check_int("--samples", samples)
    validate.fraction("--threshold", threshold)
    validate.tolerance("--rtol", rtol)
    validate.tolerance("--atol", atol)
    layer = _check_int("--layer", layer)
    if attention not in ATTENTION:
        raise InputError(f"--attention must be one of {', '.join(ATTENTION)}, got {attention!r}")
    vs = list(dict.fromkeys(variants or VARIANTS))
    for v in vs:
        if v not in VARIANTS:
            raise InputError(f"unknown variant {v!r}; choose from {', '.join(VARIANTS)}")
    if weights is not None and not Path(weights).expanduser().exists():
        raise InputError(f"--weights {weights}: no such file or folder")
    from_results = read_check_results(from_path) if from_path is not None else None
    parse_heads(heads)  # syntax and sizes below 1, before any work; the model's head count is checked once known
    dev = resolve_device(device)
    z_rule = RankRule.for_dtype(torch.float64, rtol=rtol, atol=atol)
    t_start = time.perf_counter()
    columns: list[CapacityColumn] = []
    info_d: dict = {}
    data_name = ""
    notes: list[str] = []
    timings: dict = {}
    hs: list[int] | None = None
    head_dim = None
    for variant in vs:
        col = CapacityColumn(variant)
        t0 = time.perf_counter()
        try:
            pm = _load(model, variant, backend=backend, weights_path=weights, device=str(dev),
                       context_length=context_length, max_layer=layer, seed=seed)
        except OfflineError as exc:
            if variant != "trained":
                raise
            col.status, col.reason = "unavailable", str(exc)
            columns.append(col)
            continue
        col.timings["load"] = round(time.perf_counter() - t0, 3)
        info = pm.info
        if not info_d or variant == "random":
            info_d = info.to_dict()
        col.weights_source = info.weights_source
        if layer > pm.built_layers:
            raise InputError(f"--layer {layer}: {model} has {info.num_layers} blocks")
        Wq, Wk, bq, bk, pre, scale, causal, attn_desc = _attention_for(pm, layer, attention, seed)
        H_layer = int(Wq.shape[0])
        head_dim = int(Wq.shape[2])
        hs = parse_heads(heads, H_layer) or [H_layer]
        if from_results is not None:  # before the data pass: a file of another model is refused at once
            a, which, fnotes = assumptions_from_file(from_path, weights=variant, layer=layer - 1, n=info.n, d=info.d,
                                                     results=from_results)
            notes.extend(x for x in fnotes if x not in notes)
            col.assumptions = a or Assumptions(a1_reason=which, a2_reason=which, source=which)
        zb = ZBuilder(Wq=Wq, Wk=Wk, bq=bq, bk=bk, pre=pre, scale=scale, query_index=info.query_index,
                      causal=causal, shared_context=shared_context)
        reducer = None
        if from_path is None:
            reducer = StreamingReducer(info.query_index, RankRule.for_dtype(torch.float32, rtol=rtol, atol=atol))
        t0 = time.perf_counter()
        src, batches = _batches(pm, data=data, split=split, limit=limit, batch_size=batch_size, seed=seed, notes=notes)
        count = 0
        with task(f"{variant} weights: tokens and Z", limit, progress) as adv:
            for inputs in _prefetched(pm, batches):
                tokens = pm.capture(inputs, [layer - 1])[layer - 1]
                zb.update(tokens)
                if reducer is not None:
                    reducer.update(tokens)
                count += int(tokens.shape[0])
                adv(int(tokens.shape[0]))
        col.timings["capture and Z"] = round(time.perf_counter() - t0, 3)
        data_name = src.name
        if count == 0:
            raise DataError(f"the data source yielded no usable examples ({src.name})")
        Z = zb.result()
        col.T = int(Z.shape[0])
        # The assumptions: audited here, or read from a file.
        if from_path is None:
            fs = reducer.result({"model": model, "variant": variant, "layer": layer - 1})
            with _linear_algebra():
                col.assumptions, t_a = _audit_assumptions(fs, samples=samples, threshold=threshold, seed=seed, rtol=rtol,
                                                          atol=atol, device=dev, progress=progress, label=variant)
            col.timings.update(t_a)
        a = col.assumptions
        for h in hs:
            col.bounds[h] = theorem1_bound(heads=h, head_dim=head_dim, n=info.n, d=info.d, a1_holds=a.holds(a.a1),
                                           a2_holds=a.holds(a.a2), kruskal_estimate=a.kruskal_estimate)
        t0 = time.perf_counter()
        with task(f"{variant} weights: rank and certificate", len(hs), progress) as adv, _linear_algebra():
            col.certificates = certify_head_prefixes(Z, info.d, hs, rule=z_rule, seed=seed, progress=adv)
        col.timings["rank and certificate"] = round(time.perf_counter() - t0, 3)
        del Z, zb
        columns.append(col)
        line = f"key/query weights: {attn_desc}"
        if line not in notes:
            notes.append(line)
    if not info_d:
        raise OfflineError(columns[0].reason if columns else f"{model}: no column could be loaded")
    n, d = info_d["n"], info_d["d"]
    if info_d.get("modality") == "text" and info_d.get("query_index") not in (0, None):
        if info_d["query_index"] % n == n - 1:
            notes.append("the model is a decoder with a causal mask; its query (the last token) attends to every token, "
                         "so the mask changes nothing")
        else:
            notes.append("the model is a decoder with a causal mask; the context was cut after the query row")
    Tcap = max((c.T for c in columns if c.status == "ok"), default=0)
    if hs and Tcap and Tcap <= max(hs) * d:
        notes.append(f"Z has T = {Tcap} rows and H d = {max(hs)} * {d} = {max(hs) * d} columns: its rank is at most "
                     f"min(T, h d); where it reaches T, the certificate memorises all T examples and more data could "
                     "certify more")
    if shared_context:
        notes.append("shared context: every example uses the context E_0 of the first example, with its own query; "
                     "Proposition 2 says rank(Z) <= h (n - 1) + 1 for any weights")
        if hs and Tcap and all(min(Tcap, h * d) <= h * (n - 1) + 1 for h in hs):
            notes.append(f"with T = {Tcap}, min(T, h d) <= h (n - 1) + 1 for every h asked for, so the check cannot fail "
                         "here; raise --limit or use fewer heads for an informative test")
    settings = dict(layer=layer, attention=attention, shared_context=shared_context, heads=hs, head_dim=head_dim,
                    samples=samples, threshold=threshold, seed=seed, device=device_name(dev), limit=limit,
                    batch_size=batch_size, from_path=str(from_path) if from_path is not None else None,
                    z_tolerance=z_rule.describe() + " (Z is computed in float64 from the tokens)",
                    assumption_tolerance=RankRule.for_dtype(torch.float32, rtol=rtol, atol=atol).describe(),
                    tokens=f"input of block {layer} (layer {layer - 1}: "
                           + ("the embedding output" if layer == 1 else f"the output of block {layer - 1}") + ")")
    timings["total"] = round(time.perf_counter() - t_start, 3)
    return CapacityResult(model=model, info=info_d, data=data_name, columns=columns, settings=settings,
                          timings=timings, notes=notes)


# --------------------------------------------------------------------------------------------
# Plot
# --------------------------------------------------------------------------------------------


def plot_capacity(result: CapacityResult, path: str | Path) -> Path:
    """Rank r of Z against the number of heads h, with the bound lines; written atomically."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from .plot import save_figure

    info, s = result.info, result.settings
    n, d, dh = info.get("n"), info.get("d"), s.get("head_dim")
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    hs_all: list[int] = []
    for c in result.columns:
        if c.status != "ok" or not c.certificates:
            continue
        hs = [x.heads for x in c.certificates]
        hs_all = sorted(set(hs_all) | set(hs))
        ax.plot(hs, [x.rank for x in c.certificates], marker="o", lw=1.6, label=f"rank(Z), {c.variant} weights")
        bh = [h for h in hs if c.bounds[h].applies]
        if bh:
            ax.plot(bh, [c.bounds[h].count for h in bh], ls="--", lw=1, marker="x",
                    label=f"bound ({c.variant}: {c.bounds[bh[-1]].which})")
    if hs_all and n and dh:
        hx = np.arange(1, max(hs_all) + 1)
        ax.plot(hx, hx * (min(n, dh) - 1) + 1, color="k", ls=":", lw=1, label="H (min(n, d_h) - 1) + 1")
        ax.plot(hx, hx * (n - 1) + 1, color="grey", ls="-.", lw=1, label="H (n - 1) + 1 (Prop. 2)")
        T = max(c.T for c in result.columns if c.status == "ok")
        ax.plot(hx, np.minimum(T, hx * d), color="r", lw=0.8, alpha=0.6, label=f"min(T, h d), T = {T} examples")
    ax.set_xlabel("heads used h")
    ax.set_ylabel("examples")
    ax.set_title(f"Memorisation certificate: {result.model}" + (" (shared context)" if s.get("shared_context") else ""))
    ax.legend(fontsize=7, loc="best", framealpha=0.8)
    fig.tight_layout()
    return save_figure(fig, path)
