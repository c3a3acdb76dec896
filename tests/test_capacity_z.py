"""The matrix Z against brute force, Proposition 2, and the reference certificate."""

from __future__ import annotations

import math

import pytest
import torch

from mhaaudit.capacity import Heads, attention_combinations, random_attention_weights, shared_context_rank_bound
from mhaaudit.capacity.oracle import memorization_certificate
from mhaaudit.errors import InputError


def _brute_force_Z(E, x, Wq, Wk, bq=None, bk=None, pre=None, exclude=None):
    """Explicit loops over examples t, heads h and context rows i."""
    T, n, d = E.shape
    H, _, dh = Wq.shape
    Z = torch.zeros(T, H * d, dtype=torch.float64)
    for t in range(T):
        Et = E[t]
        Ep = pre(Et) if pre is not None else Et
        xp = pre(x[t]) if pre is not None else x[t]
        for h in range(H):
            q = xp @ Wq[h] + (bq[h] if bq is not None else 0.0)
            logits = []
            for i in range(n):
                k = Ep[i] @ Wk[h] + (bk[h] if bk is not None else 0.0)
                logits.append(float(k @ q) / math.sqrt(dh))
            if exclude is not None:
                logits[exclude] = -math.inf
            mx = max(logits)
            w = [math.exp(a - mx) for a in logits]
            s = sum(w)
            z = torch.zeros(d, dtype=torch.float64)
            for i in range(n):
                z += (w[i] / s) * Et[i]
            Z[t, h * d : (h + 1) * d] = z
    return Z


def _layernorm(v):
    mu = v.mean(dim=-1, keepdim=True)
    var = v.var(dim=-1, unbiased=False, keepdim=True)
    return (v - mu) / torch.sqrt(var + 1e-5)


@pytest.mark.parametrize("use_pre", [False, True])
@pytest.mark.parametrize("use_bias", [False, True])
@pytest.mark.parametrize("exclude", [None, 0, 2])
def test_attention_combinations_matches_brute_force(use_pre, use_bias, exclude):
    g = torch.Generator().manual_seed(1)
    T, n, d, H, dh = 5, 4, 6, 3, 2
    E = torch.randn(T, n, d, generator=g, dtype=torch.float64)
    x = torch.randn(T, d, generator=g, dtype=torch.float64)
    Wq = torch.randn(H, d, dh, generator=g, dtype=torch.float64)
    Wk = torch.randn(H, d, dh, generator=g, dtype=torch.float64)
    bq = torch.randn(H, dh, generator=g, dtype=torch.float64) if use_bias else None
    bk = torch.randn(H, dh, generator=g, dtype=torch.float64) if use_bias else None
    pre = _layernorm if use_pre else None
    want = _brute_force_Z(E, x, Wq, Wk, bq, bk, pre, exclude)
    for chunk in (1, 2, 256):
        got = attention_combinations(E, x, Heads(Wq, Wk, bq, bk, pre), exclude_query_index=exclude, chunk=chunk)
        assert got.shape == (T, H * d)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_shared_context_2d_equals_broadcast():
    g = torch.Generator().manual_seed(2)
    T, n, d, H, dh = 7, 3, 5, 2, 4
    E = torch.rand(n, d, generator=g, dtype=torch.float64)
    x = torch.rand(T, d, generator=g, dtype=torch.float64)
    Wq, Wk = random_attention_weights(d, H, dh, seed=3)
    a = attention_combinations(E, x, Heads(Wq, Wk), chunk=3)
    b = attention_combinations(E.expand(T, n, d), x, Heads(Wq, Wk))
    torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)


def test_rows_are_convex_combinations():
    g = torch.Generator().manual_seed(4)
    T, n, d, H = 6, 3, 4, 2
    E = torch.rand(T, n, d, generator=g, dtype=torch.float64)
    x = torch.rand(T, d, generator=g, dtype=torch.float64)
    Wq, Wk = random_attention_weights(d, H, 3, seed=0)
    Z = attention_combinations(E, x, Heads(Wq, Wk)).reshape(T, H, d)
    # Each z_h lies in the convex hull of the context rows: per coordinate within [min, max].
    lo = E.min(dim=1).values.unsqueeze(1)
    hi = E.max(dim=1).values.unsqueeze(1)
    assert torch.all(Z >= lo - 1e-12) and torch.all(Z <= hi + 1e-12)


def test_random_attention_weights_seeded_and_xavier():
    a = random_attention_weights(64, 3, 16, seed=7)
    b = random_attention_weights(64, 3, 16, seed=7)
    c = random_attention_weights(64, 3, 16, seed=8)
    assert a[0].shape == (3, 64, 16) and a[1].shape == (3, 64, 16)
    assert a[0].dtype == torch.float64
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])
    bound = math.sqrt(6 / (64 + 16))
    assert a[0].abs().max() <= bound and a[1].abs().max() <= bound


def _shared_Z(H, n, d, T, dh, seed):
    g = torch.Generator().manual_seed(1000 + seed)
    E = torch.rand(n, d, generator=g, dtype=torch.float64)
    x = torch.rand(T, d, generator=g, dtype=torch.float64)
    Wq, Wk = random_attention_weights(d, H, dh, seed=seed)
    return attention_combinations(E, x, Heads(Wq, Wk))


@pytest.mark.parametrize("H", [1, 2, 3, 5])
def test_proposition2_rank_attained_for_shared_context(H):
    d, n, T = 64, 8, 200
    Z = _shared_Z(H, n, d, T, dh=64, seed=H)
    cert = memorization_certificate(Z)
    assert cert.rank == shared_context_rank_bound(H, n) == H * (n - 1) + 1
    assert torch.linalg.matrix_rank(Z).item() == cert.rank


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("H,n,dh", [(2, 5, 3), (4, 3, 64), (6, 4, 8), (3, 10, 32)])
def test_proposition2_never_exceeded(seed, H, n, dh):
    d = 40
    T = 3 * (H * (n - 1) + 1)
    Z = _shared_Z(H, n, d, T, dh=dh, seed=seed)
    cert = memorization_certificate(Z)
    assert cert.rank <= shared_context_rank_bound(H, n)


def test_proposition2_property():
    pytest.importorskip("hypothesis")
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=25, deadline=None)
    @given(
        H=st.integers(1, 4),
        n=st.integers(1, 6),
        dh=st.integers(1, 8),
        d=st.integers(8, 24),
        seed=st.integers(0, 10_000),
    )
    def check(H, n, dh, d, seed):
        T = H * (n - 1) + 6
        Z = _shared_Z(H, n, d, T, dh=dh, seed=seed)
        assert memorization_certificate(Z).rank <= shared_context_rank_bound(H, n)

    check()


def test_per_example_context_can_exceed_shared_bound():
    # Distinct contexts: the shared-context ceiling no longer applies (rank grows with T).
    g = torch.Generator().manual_seed(5)
    H, n, d, T = 2, 3, 32, 40
    E = torch.rand(T, n, d, generator=g, dtype=torch.float64)
    x = torch.rand(T, d, generator=g, dtype=torch.float64)
    Wq, Wk = random_attention_weights(d, H, 8, seed=1)
    cert = memorization_certificate(attention_combinations(E, x, Heads(Wq, Wk)))
    assert cert.rank > shared_context_rank_bound(H, n)


@pytest.mark.parametrize("H,n,T", [(1, 8, 30), (3, 8, 100), (5, 8, 400)])
def test_certificate_solves_labels(H, n, T):
    Z = _shared_Z(H, n, 64, T, dh=64, seed=11)
    cert = memorization_certificate(Z, seed=3)
    r = cert.rank
    assert r == torch.linalg.matrix_rank(Z).item()
    assert len(cert.rows) == r == len(set(cert.rows))
    assert cert.residual < 1e-6
    ZS = Z[list(cert.rows)]
    # Recompute independently: the chosen rows are independent and w hits y.
    assert torch.linalg.matrix_rank(ZS).item() == r
    res = (ZS @ cert.weights - cert.labels).abs().max() / cert.labels.abs().max()
    assert res.item() < 1e-6
    assert math.isfinite(cert.cond) and cert.cond >= 1
    assert "eps(float64)" in cert.tolerance_rule
    # Seeded labels.
    again = memorization_certificate(Z, seed=3)
    assert torch.equal(again.labels, cert.labels) and again.rows == cert.rows


def test_certificate_full_row_rank_and_rtol():
    g = torch.Generator().manual_seed(9)
    Z = torch.randn(10, 30, generator=g, dtype=torch.float64)
    cert = memorization_certificate(Z)
    assert cert.rank == 10 and cert.rows == tuple(range(10)) and cert.residual < 1e-10
    # A coarse relative tolerance lowers the rank; the rule says which tolerance was used.
    low = torch.cat([Z[:5], 1e-8 * Z[5:]])
    c2 = memorization_certificate(low, rtol=1e-6)
    assert c2.rank == 5 and "rtol" in c2.tolerance_rule and c2.residual < 1e-6


def test_certificate_zero_matrix():
    cert = memorization_certificate(torch.zeros(4, 3))
    assert cert.rank == 0 and cert.rows == () and math.isnan(cert.cond)


# ------------------------------------------------------------------ bad input


def test_attention_combinations_bad_input():
    E = torch.rand(4, 3, 5, dtype=torch.float64)
    x = torch.rand(4, 5, dtype=torch.float64)
    Wq, Wk = random_attention_weights(5, 2, 3, seed=0)
    with pytest.raises(InputError):
        attention_combinations(E, torch.rand(3, 5), Heads(Wq, Wk))  # T mismatch
    with pytest.raises(InputError):
        attention_combinations(E, torch.rand(4, 6), Heads(Wq, Wk))  # width mismatch
    with pytest.raises(InputError):
        attention_combinations(E, x, Heads(Wq, Wk[:, :, :2]))  # Wq/Wk mismatch
    with pytest.raises(InputError):
        attention_combinations(E, x, Heads(Wq[:0], Wk[:0]))  # zero heads
    with pytest.raises(InputError):
        attention_combinations(E, x, Heads(Wq, Wk, bq=torch.zeros(2, 4)))  # bias shape
    with pytest.raises(InputError):
        attention_combinations(E, x, Heads(Wq, Wk), exclude_query_index=3)
    with pytest.raises(InputError):
        attention_combinations(E, x, Heads(Wq, Wk), chunk=0)
    with pytest.raises(InputError):
        attention_combinations(torch.rand(4, 5), x[:, :4], Heads(Wq, Wk))
    with pytest.raises(InputError):
        random_attention_weights(5, 0, 3, seed=0)
    with pytest.raises(InputError):
        memorization_certificate(torch.rand(3))
    with pytest.raises(InputError):
        memorization_certificate(torch.tensor([[float("nan"), 1.0]]))
