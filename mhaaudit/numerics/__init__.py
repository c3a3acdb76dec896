"""Numerics: the rank rule, the certificates that decide rank under it, and the CPU kernels.

* ``numerics.rule``: ``RankRule`` (which singular values count) and ``numerics`` (the setting
  rank computations run in: subnormals flushed, thread count).
* ``numerics.pow2``: exact powers of two (``exponent_of``, ``ldexp``), under the rule and the scaling.
* ``numerics.convert``: the exact float64 value of any real floating tensor (``to_float64``),
  computed in the calling thread.
* ``numerics.scale``: exact power-of-two rescaling, so that nothing squared over- or underflows
  and the data's scale never reaches a decision.
* ``numerics.certificates``: torch decisions that equal ``torch.linalg.matrix_rank`` under the
  rule (SVD, Gram eigenvalues, shifted Cholesky) and the rounding bounds that make them proofs.
* ``numerics.checked``: singular values and eigenvalues from LAPACK, checked before they decide
  anything and recomputed by another driver where they are not usable.
* ``numerics.lapack``: the same certificates per draw through LAPACK on the CPU (imported on use).
* ``numerics.extremes``: the smallest and largest eigenvalue of many small symmetric matrices, on
  the CPU (LAPACK ``dsytrd`` and ``dstebz``, or ``dstebz`` alone on tridiagonal forms), checked.
* ``numerics.tridiagonal``: many small symmetric matrices reduced to tridiagonal form at once, on any
  device (imported on use).
* ``numerics.batch_ranks``: the exact rank of many small matrices at once (Assumption 2's routes: the
  host's cores, or a device's tridiagonal forms; imported on use).
* ``numerics.philox``: the counter-based generator of the Monte-Carlo draws, bit-identical on every
  device (imported on use).
* ``numerics.stream``: rows read where they lie (in memory or a memory-mapped file) and the one
  streaming pass over a whole set, O(d^2) memory (imported on use).
"""

from . import checked
from .certificates import (
    EPS64,
    TINY_GRAM,
    Decision,
    cholesky_margins,
    decide_full_rank,
    decide_prefix_full_rank,
    decision_margin,
    eigvalsh,
    gram_rank,
    gram_rank_and_sigmas,
    lambda_max_bounds,
    rounding_band,
    rounding_margin,
    svd_rank,
    svd_rank_where_usable,
)
from .convert import FLOAT8_DTYPES, to_float64
from .pow2 import exponent_of, ldexp
from .rule import RankRule, numerics, subnormals_kept, tf32_is_off, tf32_off, with_numerics
from .scale import Scaled, row_norms, scaled

__all__ = [
    "EPS64",
    "FLOAT8_DTYPES",
    "TINY_GRAM",
    "Decision",
    "RankRule",
    "Scaled",
    "checked",
    "cholesky_margins",
    "decide_full_rank",
    "decide_prefix_full_rank",
    "decision_margin",
    "eigvalsh",
    "exponent_of",
    "gram_rank",
    "gram_rank_and_sigmas",
    "lambda_max_bounds",
    "ldexp",
    "numerics",
    "rounding_band",
    "rounding_margin",
    "row_norms",
    "scaled",
    "subnormals_kept",
    "svd_rank",
    "svd_rank_where_usable",
    "tf32_is_off",
    "tf32_off",
    "to_float64",
    "with_numerics",
]
