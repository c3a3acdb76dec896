"""Householder tridiagonalisation of many small symmetric matrices at once, on any device.

LAPACK's ``dsytrd`` reduces one matrix at a time, and a GPU's eigensolvers take one small matrix at a
time too: for thousands of 197 x 197 Gram matrices (Assumption 2, ``mhaaudit.contexts``) either is the
whole cost of the reduction. :func:`tridiagonalize` runs the unblocked reduction of LAPACK's ``dsytd2``
(the lower triangle; ``dlarfg``'s reflectors) on the whole batch, one column step for every matrix at
once: n - 2 steps of a batched matrix-vector product and a batched rank-2 update, each a handful of
device kernels whatever the batch's size. Its backward error is that of ``dsytd2`` (Higham, *Accuracy
and Stability of Numerical Algorithms*, section 19.3: each step is an orthogonal similarity applied
in floating point), so the eigenvalues of the tridiagonal form are those of ``G`` to a rounding error
of about n eps ||G||, far inside the rounding band that ``numerics.certificates.rounding_band`` allows.
The extreme eigenvalues of the tridiagonal forms are then found on the host by bisection
(``numerics.extremes.tridiagonal_extremes``), where they are checked before they decide anything.
"""

from __future__ import annotations

import torch

__all__ = ["tridiagonalize"]


def tridiagonalize(G: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The symmetric tridiagonal forms of the ``(B, n, n)`` symmetric float64 matrices ``G`` (their lower
    triangles are read; ``G`` is not written), computed where ``G`` lies.

    Returns:
        ``(diagonal, off_diagonal)``: ``(B, n)`` and ``(B, n - 1)`` float64 tensors on ``G``'s device, with
        the eigenvalues of each matrix of ``G`` to rounding.
    """
    B, n = G.shape[0], G.shape[-1]
    A = G.clone()
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
    return diagonal, off
