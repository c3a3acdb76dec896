"""The extreme eigenvalues of small symmetric matrices (dsytrd + dstebz through ctypes) against brute force."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from conftest import devices
from hypothesis import given, settings
from hypothesis import strategies as st

from mhaaudit.numerics import extremes
from mhaaudit.numerics.tridiagonal import tridiagonalize

pytestmark = pytest.mark.skipif(not extremes.available(), reason="SciPy's Cython LAPACK API is not available")


def _grams(seed: int, B: int, n: int, d: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((B, n, d)) * rng.uniform(1e-3, 1e3, size=(B, 1, 1))
    X[0, -1] = X[0, 0]  # a repeated row: the smallest eigenvalue is rounding noise
    return X @ X.transpose(0, 2, 1)


@pytest.mark.parametrize(("n", "d"), [(1, 3), (2, 2), (7, 12), (40, 64), (197, 256)])
def test_the_extremes_are_numpy_s_to_rounding(n, d):
    G = _grams(n, 6, n, d)
    lo, hi, ok = extremes.extreme_eigenvalues(G)
    lam = np.linalg.eigvalsh(G)
    assert ok.all()
    scale = lam[:, -1]
    assert np.all(np.abs(lo - lam[:, 0]) <= 1e-13 * scale)
    assert np.all(np.abs(hi - lam[:, -1]) <= 1e-13 * scale)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 12),
    seed=st.integers(0, 2**31 - 1),
    spread=st.floats(-30, 30),
)
def test_the_extremes_of_any_symmetric_matrix(n, seed, spread):
    """Indefinite and ill-conditioned matrices too: the extremes are those of the whole spectrum."""
    rng = np.random.default_rng(seed)
    Q = np.linalg.qr(rng.standard_normal((n, n)))[0]
    lam = np.sort(rng.standard_normal(n) * np.exp(np.linspace(0, spread, n)))
    G = ((Q * lam) @ Q.T)[None]
    G = (G + G.transpose(0, 2, 1)) / 2
    lo, hi, ok = extremes.extreme_eigenvalues(G)
    ref = np.linalg.eigvalsh(G)[0]
    assert bool(ok[0])
    tol = 1e-12 * max(abs(ref[0]), abs(ref[-1]))
    assert abs(lo[0] - ref[0]) <= tol and abs(hi[0] - ref[-1]) <= tol


def test_only_the_lower_triangle_is_read():
    G = _grams(3, 4, 9, 11)
    junk = G.copy()
    junk[:, np.triu_indices(9, 1)[0], np.triu_indices(9, 1)[1]] += 1.0  # the upper triangle: changed
    a, b = extremes.extreme_eigenvalues(G), extremes.extreme_eigenvalues(np.tril(G) + np.tril(G, -1).transpose(0, 2, 1))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    c = extremes.extreme_eigenvalues(junk)
    assert np.array_equal(a[0], c[0]) and np.array_equal(a[1], c[1])
    assert np.array_equal(G, _grams(3, 4, 9, 11))  # the input itself is not written


def test_values_no_matrix_can_have_are_not_usable():
    G = _grams(4, 5, 6, 9)
    G[1, 2, 2] = np.nan
    G[3, 4, 4] = np.inf
    ok = extremes.extreme_eigenvalues(G)[2]
    assert ok.tolist() == [True, False, True, False, True]


def test_empty_batches_and_matrices():
    for shape in [(0, 5, 5), (3, 0, 0)]:
        lo, hi, ok = extremes.extreme_eigenvalues(np.zeros(shape))
        assert lo.shape == hi.shape == ok.shape == (shape[0],) and not ok.any()


def test_worker_threads_give_the_values_of_one_thread():
    """Each call keeps its own buffers: calls in parallel threads give the values of one call alone."""
    G = _grams(5, 24, 30, 40)
    alone = extremes.extreme_eigenvalues(G)
    with ThreadPoolExecutor(4) as pool:
        parts = list(pool.map(extremes.extreme_eigenvalues, np.split(G, 4)))
    for i in range(3):
        assert np.array_equal(np.concatenate([p[i] for p in parts]), alone[i])


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize(("n", "d"), [(1, 3), (2, 2), (3, 5), (7, 12), (40, 64), (197, 256)])
def test_the_tridiagonal_forms_have_numpy_s_eigenvalues(device, n, d):
    """The batched Householder reduction (on the device the matrices are on) keeps every eigenvalue to rounding,
    for a zero matrix and a deficient one too; its forms' extremes are those of the matrices themselves."""
    G = _grams(n + d, 6, n, d)
    G[1] = 0.0
    T = torch.from_numpy(G).to(device)
    diagonal, off = tridiagonalize(T)
    assert diagonal.device == T.device and diagonal.shape == (6, n) and off.shape == (6, n - 1)
    assert torch.equal(T.cpu(), torch.from_numpy(G))  # not written
    tri = np.zeros_like(G)
    idx = np.arange(n)
    tri[:, idx, idx] = diagonal.cpu().numpy()
    tri[:, idx[1:], idx[:-1]] = tri[:, idx[:-1], idx[1:]] = off.cpu().numpy()
    lam, got = np.linalg.eigvalsh(G), np.linalg.eigvalsh(tri)
    scale = np.maximum(lam[:, -1:], 1e-300)
    assert (np.abs(got - lam) <= 1e-12 * scale).all()
    assert (got[1] == 0).all()
    lo, hi, ok = extremes.tridiagonal_extremes(
        diagonal.cpu().numpy(), off.cpu().numpy(), np.diagonal(G, axis1=1, axis2=2), np.sqrt((G * G).sum((1, 2)))
    )
    ref = extremes.extreme_eigenvalues(G)
    assert ok.all() and ref[2].all()
    assert (np.abs(lo - ref[0]) <= 1e-12 * scale[:, 0]).all() and (np.abs(hi - ref[1]) <= 1e-12 * scale[:, 0]).all()


def test_tridiagonal_extremes_are_checked_against_the_matrices():
    """Extremes of a form that is not the matrix's (here: another matrix's) fail the checks against the matrix's
    own diagonal and norm, so nothing is decided from them."""
    G = _grams(3, 4, 5, 9)
    diagonal, off = tridiagonalize(torch.from_numpy(G))
    wrong = np.diagonal(G, axis1=1, axis2=2) * 10.0
    _, _, ok = extremes.tridiagonal_extremes(diagonal.numpy(), off.numpy(), wrong, np.sqrt((G * G).sum((1, 2))) * 10)
    assert not ok.any()


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("scale", [2.0**-1000, 1e-160, 2.0**-530, 2.0**500, 1e300])
def test_the_tridiagonal_forms_hold_at_every_scale(device, scale):
    """Each matrix is reduced in units of its own power of two, so at any scale of float64 its form's eigenvalues
    are those of the matrix to rounding (without the units, 1e-160 lost a fifth of their accuracy, and norms
    overflowed above 1e154); the matrices given are not written."""
    G = _grams(11, 5, 9, 14)
    T = torch.from_numpy(G * scale).to(device)
    given = T.clone()
    diagonal, off = tridiagonalize(T)
    assert torch.equal(T, given)
    tri = np.zeros_like(G)
    idx = np.arange(9)
    tri[:, idx, idx] = diagonal.cpu().numpy() / scale
    tri[:, idx[1:], idx[:-1]] = tri[:, idx[:-1], idx[1:]] = off.cpu().numpy() / scale
    lam, got = np.linalg.eigvalsh(G), np.linalg.eigvalsh(tri)
    assert (np.abs(got - lam) <= 1e-12 * lam[:, -1:]).all()
