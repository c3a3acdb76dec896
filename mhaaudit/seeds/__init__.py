"""Several seeds in one run: the spread of an estimate over the randomness of the weights and the data.

A Monte-Carlo fraction's interval covers the draws only. The random weights and the examples are
random too, and a new seed moves the estimate by what they contribute. :func:`over_seeds` runs one
audit per seed and :func:`spread` sets the runs side by side:

- one record per seed (``aggregate = "seed"``, ``seed`` = the run's seed), exactly the records the
  same run with ``--seed`` alone writes, plus the seeds that drew the weights and the data;
- one summary record per cell (``aggregate = "summary"``, ``seed`` = null): the median, lowest and
  highest value over the seeds (a fraction, a sweep estimate, a rank), how many seeds hold under the
  paper's rule, and the exact status where a seed proved it (a proof holds for the weights and data
  of that seed);
- one difference record per pair of sweep estimates (``aggregate = "difference"``): the difference
  seed by seed, its lowest and highest value, and whether that range excludes zero. A range that
  contains zero is "not distinguishable with N seeds", never a difference.

Which randomness varies (:class:`SeedPlan`): ``vary="both"`` runs seed s as ``--seed s`` does
(weights and data from s); ``"weights"`` varies the weights seed and holds the data seed fixed;
``"data"`` the other way round. The Monte-Carlo draws always derive from the run's seed s (their
error is what the interval covers). Trained weights have no weights seed: their records say so
(``weights_seed`` null) and, when only the weights vary, so does the report.

Cost: the runs share their model loads (:func:`mhaaudit.load_sharing.shared_loads`): a trained model is
loaded once for every seed, a random one once per weights seed, so when only the data seed varies
the model is built once.

Under torchrun (N processes) with at least N seeds, the seeds are spread over the ranks: rank r
runs the seeds r, r + N, ... whole, as one process does (reading the data itself and sharing its
own model loads), and the per-seed results are gathered back into seed order (whole on rank 0,
without their feature sets on the others), where the summaries and differences are made exactly
as in one process (:func:`over_seeds`). With fewer seeds than ranks every rank runs every seed
and each seed's batches are dealt among the ranks, as in a single run. Either way the records are
those of one process; the meta's ``distributed`` says which (``seeds_by_rank``).
"""

from .plan import VARY, SeedPlan, SeedRun, parse_seeds, plan_for, plan_seeds
from .records import (
    CELL_FIELDS,
    AgainstPaper,
    Cell,
    DifferenceRecord,
    EstimateRecord,
    ExactOverSeeds,
    Holding,
    PaperValue,
    SeedRecords,
    SeedsResult,
    SummaryRecord,
    SweepRow,
)
from .spread import Layout, difference_records, over_seeds, runs_meta, spread, spread_over_ranks, summary_records

__all__ = [
    "CELL_FIELDS",
    "VARY",
    "AgainstPaper",
    "Cell",
    "DifferenceRecord",
    "EstimateRecord",
    "ExactOverSeeds",
    "Holding",
    "Layout",
    "PaperValue",
    "SeedPlan",
    "SeedRecords",
    "SeedRun",
    "SeedsResult",
    "SummaryRecord",
    "SweepRow",
    "difference_records",
    "over_seeds",
    "parse_seeds",
    "plan_for",
    "plan_seeds",
    "runs_meta",
    "spread",
    "spread_over_ranks",
    "summary_records",
]
