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

from typing import TYPE_CHECKING

from .compare import Comparison, RunFacts
from .published import TARGETS, published, target_spec
from .targets import TARGET_FUNCTIONS, Reproduction, figure1, figure2, table1, table3

if TYPE_CHECKING:
    from ..seeds import SeedsResult

__all__ = ["TARGETS", "Comparison", "Reproduction", "RunFacts", "figure1", "figure2", "published", "reproduce_paper",
           "table1", "table3", "target_spec"]


def reproduce_paper(target: str, **options) -> Reproduction | SeedsResult:
    """Run one target (``table1``, ``table3``, ``figure1``, ``figure2``) with ``options`` (the
    keyword arguments of the target's function) and compare it with the published values.

    ``seeds`` (``"0-4"``, ``"0,3,7"`` or a list; with ``vary``, ``weights_seed``, ``data_seed`` as in
    :func:`mhaaudit.audit`) runs the target once per seed and returns a
    :class:`mhaaudit.seeds.SeedsResult`: each published value beside the between-seed range of ours."""
    from .. import validate

    if options.get("seeds") is not None:
        from ..seeds import reproduce_seeds

        return reproduce_seeds(validate.choice("target", target, TARGETS), **options)
    options.pop("seeds", None)
    if options.get("vary", "both") != "both":
        from ..errors import InputError

        raise InputError("--vary has no effect without --seeds: it says which seed --seeds varies")
    options.pop("vary", None)

    return TARGET_FUNCTIONS[validate.choice("target", target, TARGETS)](**options)
