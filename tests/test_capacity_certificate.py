"""The head-prefix certificate: ranks equal matrix_rank and the reference certificate, residuals are real fits."""

from __future__ import annotations

import pytest
import torch

from mhaaudit.capacity import Heads, attention_combinations, certify_head_prefixes, random_attention_weights
from mhaaudit.capacity.oracle import memorization_certificate
from mhaaudit.errors import InputError

# --------------------------------------------------------------------------------------------
# Proposition 2 and the certificate
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("Hh,n,seed", [(1, 3, 0), (2, 4, 1), (3, 5, 2), (4, 3, 3)])
def test_proposition_2_shared_context_rank(Hh, n, seed):
    """With one shared context, rank(Z) <= H (n - 1) + 1, and generic weights reach it."""
    d, dh = 12, 4
    g = torch.Generator().manual_seed(seed)
    T = 3 * (Hh * (n - 1) + 1)
    E = torch.randn(n, d, generator=g, dtype=torch.float64)
    x = torch.randn(T, d, generator=g, dtype=torch.float64) * 2
    Wq, Wk = random_attention_weights(d, Hh, dh, seed)
    Z = attention_combinations(E, x, Heads(Wq * 3, Wk * 3))
    bound = Hh * (n - 1) + 1
    exact = int(torch.linalg.matrix_rank(Z))
    certs = certify_head_prefixes(Z, d, range(1, Hh + 1))
    for c in certs:
        assert c.rank <= c.heads * (n - 1) + 1
    assert certs[-1].rank == exact == bound  # tight, as the paper says
    assert certs[-1].residual < 1e-6


def test_certificate_ranks_match_matrix_rank_and_memorization_certificate():
    g = torch.Generator().manual_seed(4)
    T, d, Hh = 30, 6, 5
    # Low-rank pieces so that several head prefixes are rank deficient below T.
    Z = torch.randn(T, 4, generator=g, dtype=torch.float64) @ torch.randn(4, Hh * d, generator=g, dtype=torch.float64)
    Z[:, 2 * d :] += torch.randn(T, (Hh - 2) * d, generator=g, dtype=torch.float64)
    certs = certify_head_prefixes(Z, d, [1, 2, 3, 5], seed=7)
    for c in certs:
        Zh = Z[:, : c.heads * d]
        assert c.rank == int(torch.linalg.matrix_rank(Zh)) == memorization_certificate(Zh).rank
        assert c.rank_cap == min(T, c.heads * d)
        assert len(c.rows) == c.rank
        assert int(torch.linalg.matrix_rank(Zh[list(c.rows)])) == c.rank  # the chosen rows are independent
        assert c.residual < 1e-8
    assert [c.rank for c in certs] == [4, 4, 10, 22]


def test_certificate_residual_is_the_real_fit():
    """Solving the value/output weights for the chosen rows hits the random labels."""
    g = torch.Generator().manual_seed(5)
    Z = torch.randn(12, 3 * 8, generator=g, dtype=torch.float64)
    (c,) = certify_head_prefixes(Z, 8, [3], seed=11)
    assert c.rank == 12 and c.rows == tuple(range(12)) and c.method.endswith("weights: gram solve")
    assert c.residual < 1e-12
    # Two nearly equal rows: the Gram route squares the condition number and fails, the QR route fits.
    Z2 = torch.randn(10, 40, generator=g, dtype=torch.float64)
    Z2[9] = Z2[8] + 1e-9 * torch.randn(40, generator=g, dtype=torch.float64)
    (c2,) = certify_head_prefixes(Z2, 8, [5], seed=1)
    assert c2.rank == 10 == int(torch.linalg.matrix_rank(Z2))
    assert c2.method.endswith("weights: qr solve") and c2.residual < 1e-5


def test_full_row_rank_is_inherited_by_more_heads():
    g = torch.Generator().manual_seed(6)
    Z = torch.randn(10, 5 * 8, generator=g, dtype=torch.float64)
    certs = certify_head_prefixes(Z, 8, range(1, 6))
    assert (
        [c.rank for c in certs]
        == [int(torch.linalg.matrix_rank(Z[:, : h * 8])) for h in range(1, 6)]
        == [8, 10, 10, 10, 10]
    )
    assert "QR" in certs[1].method or "singular values" in certs[1].method
    assert all("inherited" in c.method for c in certs[2:])
    assert all(c.residual < 1e-10 for c in certs)
    zero = certify_head_prefixes(torch.zeros(5, 8, dtype=torch.float64), 4, [1, 2])
    assert [x.rank for x in zero] == [0, 0] and zero[0].residual == 0.0


@pytest.mark.parametrize("scale", [1e-300, 1e-165, 1e170, 1e300])
def test_the_certificate_is_the_same_at_any_scale(scale):
    """The squares of Z's entries underflowed below 1e-162: ||Z||_F was 0 and every prefix "rank 0"."""
    Z = torch.randn(6, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    at_one = certify_head_prefixes(Z, 4, [1, 2, 3])
    scaled = certify_head_prefixes(Z * scale, 4, [1, 2, 3])
    want = [int(torch.linalg.matrix_rank(Z[:, : 4 * h])) for h in (1, 2, 3)]
    assert [c.rank for c in scaled] == [c.rank for c in at_one] == want == [4, 6, 6]
    assert memorization_certificate(Z * scale).rank == 6
    for a, b in zip(at_one, scaled, strict=True):
        assert b.sigma_max / scale == pytest.approx(a.sigma_max, rel=1e-12)
        assert b.tolerance / scale == pytest.approx(a.tolerance, rel=1e-12)
        assert b.rows == a.rows


def test_certify_rejects_bad_input():
    with pytest.raises(InputError, match="not T x"):
        certify_head_prefixes(torch.zeros(3, 10), 4, [1])
    with pytest.raises(InputError, match="at most 2"):
        certify_head_prefixes(torch.zeros(3, 8), 4, [3])
    with pytest.raises(InputError, match="NaN"):
        certify_head_prefixes(torch.full((3, 8), float("nan")), 4, [1])


def test_certify_and_the_oracle_refuse_a_complex_or_empty_z_alike():
    """Both read Z through one check: a complex Z is refused, not certified on its real part."""
    Z = torch.randn(6, 4, dtype=torch.complex128)
    for certify in (lambda z: certify_head_prefixes(z, 2, [1, 2]), memorization_certificate):
        with pytest.raises(InputError, match="Z must be real"):
            certify(Z)
        with pytest.raises(InputError, match="Z is empty"):
            certify(torch.zeros(0, 4, dtype=torch.float64))
        with pytest.raises(InputError, match="Z must have 2 dimensions"):
            certify(torch.zeros(2, 2, 2))
