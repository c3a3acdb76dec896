"""Numerics: the rank rule, the certificates that decide rank under it, and the CPU kernels.

* ``numerics.rule``: ``RankRule`` (which singular values count) and ``numerics`` (the setting
  rank computations run in: subnormals flushed, thread count).
* ``numerics.certificates``: torch decisions that equal ``torch.linalg.matrix_rank`` under the
  rule (SVD, Gram eigenvalues, shifted Cholesky) and the rounding bounds that make them proofs.
* ``numerics.lapack``: the same certificates per draw through LAPACK on the CPU (imported on use).
"""

from .certificates import (
    EPS64,
    Decision,
    cholesky_margins,
    decide_full_rank,
    decide_prefix_full_rank,
    eigvalsh,
    gram_rank,
    lambda_max_bounds,
    rounding_margin,
    svd_rank,
)
from .rule import RankRule, numerics, with_numerics

__all__ = [
    "EPS64",
    "Decision",
    "RankRule",
    "cholesky_margins",
    "decide_full_rank",
    "decide_prefix_full_rank",
    "eigvalsh",
    "gram_rank",
    "lambda_max_bounds",
    "numerics",
    "rounding_margin",
    "svd_rank",
    "with_numerics",
]
