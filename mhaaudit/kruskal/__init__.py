"""Kruskal-rank evidence for a set of T vectors in R^d (the rows of a T x d matrix).

The Kruskal rank is the largest k such that *every* k rows are linearly independent. It is
NP-hard to compute, so this package produces evidence of three kinds, each labelled with what
it proves:

* an **estimate**: Monte-Carlo draws of k distinct rows, the fraction of full-rank draws with a
  95% Clopper-Pearson interval (``subset_test``, in ``fixed``), or that fraction for every k at
  once (``kruskal_sweep``, in ``sweep``);
* a certified **ceiling**: a dependent subset that was found (its indices and singular values
  are kept as the witness; Kruskal rank <= its size - 1), or the numerical rank of the whole
  set, which no subset can exceed (``set_stats``, in ``bounds``);
* a certified **floor**: the Babel-function (cumulative coherence) bound, which proves every
  subset up to a size is independent under the tolerance rule (``babel_floor``, in ``bounds``).

Every test at one size k carries both answers under separate names: the estimate verdict under
the paper's rule (``verdict``) and the exact status (``exact_status``: fails, holds or undecided,
with ``exact_basis``: witness, set-rank, dimension, exhaustive, certified-floor or none).

Every rank decision (a draw, a witness, the whole set) uses the paper's rule on that matrix, one
``RankRule`` (``fixed_rule`` returns it as given: sigma_max(M) * max(rows, cols) * eps by default)
and equals ``torch.linalg.matrix_rank`` on the same float64 rows with the same tolerance (see
``mhaaudit.numerics``). The whole set's rank reported beside a test at size k (``set_rank_ceiling``) is
``SetStats.ceiling(k, rule)``: its rank at the smallest tolerance any k-subset can have, which no
k-subset's rank exceeds. They are taken on the data
divided by an exact power of two (``numerics.scale``), so the data's scale never changes a
verdict, a fraction, a draw or a witness; singular values and tolerances are reported in the
data's own units. The same draws and decisions come out on every device: the draws come from a
counter-based generator (``numerics.philox``), and on a GPU the batched kernels decide what the
CPU LAPACK kernels decide on the CPU. The modules: ``results``
(the result objects), ``sampling`` (the block-seeded draws and Gram gathers, and ``Sampling``,
how a test draws and decides: samples, threshold, seed, rule, device), ``fixed`` (the
test at one size), ``sweep`` (every size at once), ``bounds`` (floor, ceiling, brute force).

Under torchrun the draws of a test or a sweep are divided among the ranks
(``sampling.blocks_in_order``) and every rank gets the single-process result; rank 0's call
brings the others in (``distributed.shared``).
"""

from ..defaults import DEFAULT_SAMPLES, DEFAULT_THRESHOLD
from .bounds import babel_floor, exact_kruskal_rank, fixed_rule, set_stats
from .fixed import draw_decisions, shrink_witness, subset_test
from .results import (
    Bound,
    KruskalInputs,
    KruskalResult,
    SetStats,
    SubsetTest,
    Sweep,
    Witness,
    clopper_pearson,
    data_read,
)
from .sampling import Sampling, as_matrix
from .sweep import draw_critical_sizes, kruskal_sweep

__all__ = [
    "DEFAULT_SAMPLES",
    "DEFAULT_THRESHOLD",
    "Bound",
    "KruskalInputs",
    "KruskalResult",
    "Sampling",
    "SetStats",
    "SubsetTest",
    "Sweep",
    "Witness",
    "as_matrix",
    "babel_floor",
    "clopper_pearson",
    "data_read",
    "draw_critical_sizes",
    "draw_decisions",
    "exact_kruskal_rank",
    "fixed_rule",
    "kruskal_sweep",
    "set_stats",
    "shrink_witness",
    "subset_test",
]
