"""A weights file held against the model it loads into: which tensor does not fit, and the words it is refused in.

The check of a weights file before a run's first column and ``checkpoints.load_fitting`` name the same tensor:
the first, by the model's name for it, whose shape differs (:func:`first_misfit`, which a series' check of its
checkpoints uses too). They and a sharded checkpoint's reader refuse in the same words (:func:`shape_misfit`,
:func:`parameters_missing`, :func:`holds_complex`). The module imports nothing of the package, so each reader
can use it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["first_misfit", "holds_complex", "parameters_missing", "shape_misfit"]

Shape = tuple[int, ...]


def first_misfit(
    shapes: Mapping[str, Sequence[int]], expected: Mapping[str, Sequence[int]], prefix: str
) -> tuple[str, Shape, Shape] | None:
    """The first tensor (by name) of a checkpoint whose shape differs from the model's tensor that it loads
    into, as ``(name, its shape, the model's)``, or None. ``shapes``: the checkpoint's; ``expected``: the
    model's state dict's. Each of the model's tensors loads from the checkpoint's tensor of its own name, else from
    the one of that name behind the ``prefix`` a task model's checkpoint puts before its names (``bert.``,
    ``vit.``), as the loaders look them up (a prefixed copy beside the model's own names loads into nothing); a
    tensor the model lacks loads into nothing and is not compared."""
    for name in sorted(expected):
        key = name if name in shapes else f"{prefix}.{name}" if prefix and f"{prefix}.{name}" in shapes else None
        if key is not None and tuple(shapes[key]) != tuple(expected[name]):
            return key, tuple(shapes[key]), tuple(expected[name])
    return None


def shape_misfit(tensor: str, have: Sequence[int], want: Sequence[int]) -> str:
    """``"<tensor> has shape <have>, the model expects <want>"``."""
    return f"{tensor} has shape {tuple(have)}, the model expects {tuple(want)}"


def parameters_missing(missing: Sequence[str], stored: str = "") -> str:
    """``"<n> parameter(s) missing (e.g. <the first><stored>)"``; ``stored``: where the file keeps it, if told."""
    return f"{len(missing)} parameter(s) missing (e.g. {missing[0]}{stored})"


def holds_complex(tensor: str) -> str:
    """A complex tensor where the model's is real: loading it would drop the imaginary part."""
    return f"{tensor} holds complex values, the model's are real"
