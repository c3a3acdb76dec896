"""Which seed a several-seed run varies: the ``--seeds`` syntax, the runs and the plan of them.

:class:`SeedPlan` holds the seeds and which randomness they vary (the weights, the data or both);
:func:`plan_seeds` checks them, :func:`plan_for` reads them beside an entry point's settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import validate
from ..defaults import SEEDS_VARY
from ..errors import InputError, Param
from ..runtime import MAX_SEED

__all__ = ["VARY", "SeedPlan", "SeedRun", "parse_seeds", "plan_seeds"]

#: What ``--seeds`` varies: the weights and data seeds together (as ``--seed``), or one of them.
VARY = SEEDS_VARY
SEEDS_EXAMPLE = "0-4 or 0,3,7"


def parse_seeds(spec) -> list[int]:
    """``"0-4"``, ``"0,3,7"``, ``"0-2,9"`` or a list of integers -> the sorted seeds (the syntax of
    every command's ``--seeds``, memorize's included). A seed named twice is refused: each seed is one run.

    Raises:
        InputError: when ``spec`` names no seeds, a seed outside [0, 2^63 - 1], or a seed twice (``"0,0"``).
    """
    return validate.int_ranges(
        spec, Param("seeds"), what="seeds", example=SEEDS_EXAMPLE, minimum=0, maximum=MAX_SEED, once="seed"
    )


@dataclass(frozen=True)
class SeedRun:
    """One run of a several-seed run: its seed and, where set apart, the weights and data seeds."""

    seed: int
    weights_seed: int | None = None  # None: the run's seed
    data_seed: int | None = None  # None: the run's seed

    def kwargs(self) -> dict:
        """The keyword arguments of a library call for this run."""
        return {"seed": self.seed, "weights_seed": self.weights_seed, "data_seed": self.data_seed}

    def seeds_used(self) -> tuple[int, int]:
        """The seeds that draw the weights and the data: those set apart, else the run's seed."""
        return (
            self.seed if self.weights_seed is None else self.weights_seed,
            self.seed if self.data_seed is None else self.data_seed,
        )


@dataclass(frozen=True)
class SeedPlan:
    """The seeds of a run and which randomness they vary; :func:`plan_seeds` builds it."""

    seeds: tuple[int, ...]
    vary: str = "both"
    weights_seed: int | None = None  # held fixed when vary == "data"
    data_seed: int | None = None  # held fixed when vary == "weights"

    def runs(self) -> list[SeedRun]:
        """The runs in seed order, each with the seeds it holds fixed."""
        if self.vary == "weights":
            return [SeedRun(s, None, self.data_seed) for s in self.seeds]
        if self.vary == "data":
            return [SeedRun(s, self.weights_seed, None) for s in self.seeds]
        return [SeedRun(s) for s in self.seeds]

    def describe(self) -> str:
        """One sentence: how many seeds, which seed varies and where the other is held."""
        listed = ", ".join(map(str, self.seeds))
        if self.vary == "weights":
            what = f"the weights seed varies ({listed}); the data seed is held at {self.data_seed}"
        elif self.vary == "data":
            what = f"the data seed varies ({listed}); the weights seed is held at {self.weights_seed}"
        else:
            what = f"the weights and data seeds vary together ({listed})"
        return f"{len(self.seeds)} seeds: {what}; the Monte-Carlo draws follow each run's seed"

    def as_dict(self) -> dict:
        """The plan as the JSON meta writes it (a varied seed as ``"varied"``), with :meth:`describe`."""
        return {
            "seeds": list(self.seeds),
            "vary": self.vary,
            "weights_seed": "varied" if self.vary in ("both", "weights") else self.weights_seed,
            "data_seed": "varied" if self.vary in ("both", "data") else self.data_seed,
            "draws_seed": "each run's seed",
            "describe": self.describe(),
        }


def plan_seeds(
    seeds, *, vary: str = "both", seed: int = 0, weights_seed: int | None = None, data_seed: int | None = None
) -> SeedPlan:
    """Check ``seeds`` (``"0-4"``, ``"0,3,7"`` or a list) and what they vary.

    ``vary="weights"`` holds the data seed at ``data_seed`` (default: the lowest seed listed),
    ``vary="data"`` the weights seed at ``weights_seed`` (default: the lowest seed); the seed that
    varies cannot also be given, nor can ``seed`` other than its default 0 (give ``--seed`` or ``--seeds``;
    the command line refuses ``--seed 0`` beside ``--seeds`` too, see :func:`~mhaaudit.cli.given.refuse_seed`).

    Raises:
        InputError: when ``seeds`` or ``vary`` is refused, ``seed`` is given (other than 0), the varied seed is
            given, or the held seed is not an integer in [0, ``MAX_SEED``].
    """
    listed = parse_seeds(seeds)
    vary = validate.choice(Param("vary"), vary, VARY)
    if seed not in (None, 0):
        raise InputError("give either " + Param("seed") + " or " + Param("seeds") + ", not both")
    varied = {"both": ("weights_seed", "data_seed"), "weights": ("weights_seed",), "data": ("data_seed",)}[vary]
    for name, value in (("weights_seed", weights_seed), ("data_seed", data_seed)):
        if value is not None and name in varied:
            raise InputError(
                Param(name)
                + " has no effect with "
                + Param("seeds")
                + " and "
                + Param("vary")
                + f" {vary}: "
                + Param("seeds")
                + " sets it for every run"
                + (
                    "; hold it fixed with " + Param("vary") + " weights or " + Param("vary") + " data"
                    if vary == "both"
                    else ""
                )
            )
        if value is not None:
            validate.integer(Param(name), value, minimum=0, maximum=MAX_SEED)
    if vary == "weights":
        return SeedPlan(tuple(listed), vary, None, listed[0] if data_seed is None else int(data_seed))
    if vary == "data":
        return SeedPlan(tuple(listed), vary, listed[0] if weights_seed is None else int(weights_seed), None)
    return SeedPlan(tuple(listed), vary)


def refuse_vary_without_seeds(vary: str) -> None:
    """Refuse a ``vary`` other than its default where no ``seeds`` are given (it would say nothing).

    Raises:
        InputError: when ``vary`` is not "both".
    """
    if vary != "both":
        raise InputError(
            Param("vary")
            + " has no effect without "
            + Param("seeds")
            + ": it says which seed "
            + Param("seeds")
            + " varies"
        )


def plan_for(settings, seeds, vary: str = "both") -> SeedPlan | None:
    """The plan of an entry point's ``seeds`` and ``vary`` beside its settings (whose seed, weights
    seed and data seed the plan holds or refuses, see :func:`plan_seeds`); None without ``seeds``,
    where ``vary`` must stay at its default.

    Raises:
        InputError: when ``vary`` is given without ``seeds``, or :func:`plan_seeds` refuses the seeds.
    """
    if seeds is None:
        refuse_vary_without_seeds(vary)
        return None
    return plan_seeds(
        seeds, vary=vary, seed=settings.seed, weights_seed=settings.weights_seed, data_seed=settings.data_seed
    )
