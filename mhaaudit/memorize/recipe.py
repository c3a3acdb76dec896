"""The training recipe of Appendix A, :class:`Recipe`: how every point of a grid is trained and
judged. A run (:class:`~.results.MemorizeRun`) and a grid's settings
(:class:`~.results.GridSettings`) hold the recipe they were trained by, and the outputs give its
fields flat, in this order.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from .. import validate
from ..errors import InputError, Param
from ..runtime import MAX_INT64
from .data import CONTEXTS, TASKS

__all__ = ["RECIPE_FIELDS", "Recipe"]


def _count(name: Param, value, minimum: int = 1) -> int:
    """A whole number of the recipe: at least ``minimum``, and at most what its int64 column of the results holds.

    Raises:
        InputError: when ``value`` is no whole number within those bounds.
    """
    return validate.integer(name, value, minimum=minimum, maximum=MAX_INT64)


def _positive(name: str | Param, value) -> float:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and math.isfinite(value)):
        raise InputError(name + f" must be a positive number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Recipe:
    """How every point of a grid is trained and judged (Appendix A).

    Checked and normalised on construction (InputError naming the parameter): ``task`` and
    ``context`` one of :data:`~.data.TASKS` / :data:`~.data.CONTEXTS`, ``classes`` at least 2,
    ``tolerance`` and ``lr`` positive, the step counts whole numbers of at least 1.
    """

    task: str = "classification"
    context: str = "shared"
    classes: int = 100
    tolerance: float = 0.01
    epochs: int | None = None
    max_steps: int | None = None
    lr: float = 1e-3
    batch_size: int = 256
    check_every: int = 200

    def __post_init__(self) -> None:
        checked = dict(
            task=validate.choice(Param("task"), self.task, TASKS),
            context=validate.choice(Param("context"), self.context, CONTEXTS),
            classes=_count(Param("classes"), self.classes, minimum=2),
            tolerance=_positive(Param("tolerance"), self.tolerance),
            # (epochs: bounded with the steps they plan, request._steps_fit, which names the largest that fits)
            epochs=validate.integer(Param("epochs"), self.epochs) if self.epochs is not None else None,
            max_steps=_count(Param("max_steps"), self.max_steps) if self.max_steps is not None else None,
            lr=_positive(Param("lr"), self.lr),
            batch_size=_count(Param("batch_size"), self.batch_size),
            check_every=_count(Param("check_every"), self.check_every),
        )
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def as_dict(self) -> dict:
        """The recipe's fields by name."""
        return asdict(self)

    @property
    def out_dim(self) -> int:
        """The model's outputs: one per class, or one number for regression."""
        return self.classes if self.task == "classification" else 1


#: The recipe's fields, in the order the outputs give them.
RECIPE_FIELDS = tuple(f.name for f in fields(Recipe))
