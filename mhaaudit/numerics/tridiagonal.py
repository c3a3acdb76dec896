"""Householder tridiagonalisation of many small symmetric matrices at once, on any device.

LAPACK's ``dsytrd`` reduces one matrix at a time, and a GPU's eigensolvers take one small matrix at a
time too: for thousands of 197 x 197 Gram matrices (Assumption 2, ``mhaaudit.contexts``) either is the
whole cost of the reduction. :func:`tridiagonalize` runs the unblocked reduction of LAPACK's ``dsytd2``
(``dlarfg``'s reflectors, of the lower triangle's columns) on the whole batch, one column step for every
matrix at once: n - 2 steps of a batched matrix-vector product and a batched rank-2 update, each a handful
of device kernels whatever the batch's size. Each matrix is first divided by the power of two that brings
its largest entry into [0.5, 1) (exact; undone on the forms), so no norm over- or underflows at any scale; a
column whose norm still underflows (below about 1e-154 of the matrix's largest entry) is left as it is, a
perturbation far below the rounding of the other steps. Each step is an orthogonal similarity applied in
floating point, so the backward error is that of ``dsytd2`` and ``dsytrd``, the route it replaces on a GPU:
a modest multiple of n^2 eps ||G|| over the n - 2 reflectors at worst (Higham, *Accuracy and Stability of
Numerical Algorithms*, Theorem 19.4), about n eps ||G|| in practice. Assumption 2 decides from these
eigenvalues only outside its rounding band (``numerics.certificates.rounding_band``), and the extremes of
the forms are found on the host by bisection and checked against each matrix's diagonal and norm before
they decide anything (``numerics.extremes.tridiagonal_extremes``).
"""

from __future__ import annotations

import torch

from .pow2 import exponent_of, ldexp

__all__ = ["tridiagonalize"]


def tridiagonalize(G: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The symmetric tridiagonal forms of the ``(B, n, n)`` symmetric float64 matrices ``G`` (both triangles are
    read: ``G`` must be symmetric; it is not written), computed where ``G`` lies.

    Returns:
        ``(diagonal, off_diagonal)``: ``(B, n)`` and ``(B, n - 1)`` float64 tensors on ``G``'s device, with
        the eigenvalues of each matrix of ``G`` to rounding.
    """
    B, n = G.shape[0], G.shape[-1]
    e = exponent_of(G, dims=(1, 2)).to(G.device) if B and n else torch.zeros(B, dtype=torch.long, device=G.device)
    A = ldexp(G.clone(), -e[:, None, None], inplace=True)  # each matrix in units where its largest entry is < 1
    diagonal = torch.empty(B, n, dtype=G.dtype, device=G.device)
    off = torch.empty(B, max(n - 1, 0), dtype=G.dtype, device=G.device)
    for k in range(n - 2):
        x = A[:, k + 1 :, k]  # the column below the diagonal, reduced to a multiple of the first unit vector
        x0 = x[:, 0]
        norm = torch.linalg.vector_norm(x, dim=1)
        alpha = -torch.copysign(norm, x0)  # of x0's opposite sign: v's first entry is x0 - alpha, no cancellation
        v = x.clone()
        v[:, 0] -= alpha
        # beta = 2 / ||v||^2 (||v||^2 / 2 = norm (norm + |x0|), without cancellation), 0 for a zero column, which
        # is left as it is (alpha is then x0, 0): H = I - beta v v^T
        beta = torch.nan_to_num((norm * (norm + x0.abs())).reciprocal(), posinf=0.0)
        A22 = A[:, k + 1 :, k + 1 :]
        p = torch.bmm(A22, v[:, :, None]).squeeze(-1).mul_(beta[:, None])
        w = torch.addcmul(p, (0.5 * beta * torch.linalg.vecdot(v, p))[:, None], v, value=-1)
        A22.baddbmm_(torch.stack((v, w), -1), torch.stack((w, v), 1), alpha=-1)  # H A22 H = A22 - v w^T - w v^T
        diagonal[:, k] = A[:, k, k]
        off[:, k] = alpha
    if n >= 2:
        diagonal[:, n - 2] = A[:, n - 2, n - 2]
        off[:, n - 2] = A[:, n - 1, n - 2]
    if n >= 1:
        diagonal[:, n - 1] = A[:, n - 1, n - 1]
    return ldexp(diagonal, e[:, None], inplace=True), ldexp(off, e[:, None], inplace=True)
