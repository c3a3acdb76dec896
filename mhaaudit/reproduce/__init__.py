"""Hold the tool against the paper: run one of its experiments and compare with the published values.

``reproduce_paper("table1" | "table3" | "figure1" | "figure2", ...)`` runs the paper's protocol
with the paper's settings through the library's facades (:mod:`.targets`) and returns a
:class:`Reproduction`: for every value the paper or its official notebooks publish
(``published.json``, read by :mod:`.published`), our value beside it, whether the two match
(the same verdict), and for every difference the reason drawn from the run's own records
(:mod:`.compare`). What is proven and what is estimated is the audit's: Monte-Carlo fractions
and Kruskal-rank estimates are estimates with 95% intervals; dependent subsets, rank ceilings
and context-rank counts are proofs. A "match" is agreement of verdicts, not a proof that the
paper's numbers are right; a difference names what differs, not which side is wrong.
"""

from __future__ import annotations

from .. import validate
from .compare import Comparison, RunFacts
from .published import TARGETS, published, target_spec
from .targets import TARGET_FUNCTIONS, Reproduction, figure1, figure2, table1, table3

__all__ = ["TARGETS", "Comparison", "Reproduction", "RunFacts", "figure1", "figure2", "published", "reproduce_paper",
           "table1", "table3", "target_spec"]


def reproduce_paper(target: str, **options) -> Reproduction:
    """Run one target (``table1``, ``table3``, ``figure1``, ``figure2``) with ``options`` (the
    keyword arguments of the target's function) and compare it with the published values."""
    return TARGET_FUNCTIONS[validate.choice("target", target, TARGETS)](**options)
