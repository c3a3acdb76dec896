"""From assumptions to capacity: Theorem 1's bound and a memorisation certificate.

- :mod:`mhaaudit.theory` (re-exported here): Theorem 1 / Remark 1 counts and Proposition 2's ceiling (pure
  functions on numbers, below the audit and its report, which print the bound too).
- :mod:`.z`: the matrix Z of per-head convex combinations of context rows, and its streaming builder.
- :mod:`.certificate`: the rank of Z's head prefixes and the solved value/output weights (a proof).
- :mod:`.assumptions`: Assumptions 1 and 2 and the Kruskal estimate, audited or read from a file.
- :mod:`.audit`: the ``mhaaudit capacity`` facade, :func:`capacity_audit`.
- :mod:`.oracle`: the slow reference certificate the fast one is tested against.
"""

from __future__ import annotations

from ..theory import CapacityBound, shared_context_rank_bound, theorem1_bound
from .assumptions import Assumptions, assumptions_from_file, read_check_results
from .audit import CapacityColumn, CapacityResult, attention_for, capacity_audit
from .certificate import HeadCertificate, certify_head_prefixes
from .z import Heads, ZBuilder, attention_combinations, random_attention_weights

__all__ = [
    "Assumptions",
    "CapacityBound",
    "CapacityColumn",
    "CapacityResult",
    "HeadCertificate",
    "Heads",
    "ZBuilder",
    "assumptions_from_file",
    "attention_combinations",
    "attention_for",
    "capacity_audit",
    "certify_head_prefixes",
    "random_attention_weights",
    "read_check_results",
    "shared_context_rank_bound",
    "theorem1_bound",
]
