"""Saturated heads (Appendix H): a head is saturated for an example when some softmax weight
exceeds 0.99. :func:`saturation_summary` counts them per example from the attention weights; the
counts are exact for the trained model (nothing is estimated).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from ..errors import InputError

__all__ = ["SATURATION_THRESHOLD", "SaturationSummary", "saturation_contradiction", "saturation_summary"]

SATURATION_THRESHOLD = 0.99


@dataclass(frozen=True)
class SaturationSummary:
    """How many heads are saturated (some softmax weight > threshold) per example.

    ``histogram[k]`` is the number of examples with exactly k saturated heads (k = 0..H).
    """

    threshold: float
    heads: int
    examples: int
    histogram: tuple[int, ...]
    frac_at_least_two_saturated: float
    frac_some_unsaturated: float
    frac_any_saturated: float
    mean_saturated: float

    def to_dict(self) -> dict:
        """The summary as plain JSON types."""
        d = asdict(self)
        d["histogram"] = list(self.histogram)
        return d


def saturation_summary(attention: torch.Tensor, threshold: float = SATURATION_THRESHOLD) -> SaturationSummary:
    """Per-example count of saturated heads from softmax weights (T, H, n).

    Raises:
        InputError: ``attention`` is not a (T, H, n) tensor.
    """
    if not isinstance(attention, torch.Tensor) or attention.ndim != 3:
        raise InputError("attention weights must be a (T, H, n) tensor")
    T, H, _ = attention.shape
    counts = (attention.max(dim=-1).values > threshold).sum(dim=1).cpu()
    hist = torch.bincount(counts, minlength=H + 1)
    denom = max(T, 1)
    return SaturationSummary(
        threshold=float(threshold),
        heads=int(H),
        examples=int(T),
        histogram=tuple(int(v) for v in hist.tolist()),
        frac_at_least_two_saturated=float((counts >= 2).sum()) / denom,
        frac_some_unsaturated=float((counts < H).sum()) / denom,
        frac_any_saturated=float((counts >= 1).sum()) / denom,
        mean_saturated=float(counts.double().mean()) if T else 0.0,
    )


def saturation_contradiction(summary: SaturationSummary, heads: int, examples: int) -> str | None:
    """What a summary read back from a file says that :func:`saturation_summary` never gives for a model
    of ``heads`` heads over ``examples`` examples, in words, or None: its threshold is
    :data:`SATURATION_THRESHOLD`, its histogram counts the examples once each over 0..H saturated heads,
    and its fractions and mean are the histogram's.
    """
    hist = summary.histogram
    if summary.threshold != SATURATION_THRESHOLD:
        return f"a saturation threshold of {summary.threshold!r}, not {SATURATION_THRESHOLD}"
    if len(hist) != heads + 1:
        return f"a saturation histogram of {len(hist)} counts, not H + 1 = {heads + 1}"
    if min(hist) < 0 or sum(hist) != examples:
        return f"a saturation histogram {list(hist)!r} that does not count its T = {examples} examples once each"
    own = {
        "frac_at_least_two_saturated": sum(hist[2:]) / examples,
        "frac_some_unsaturated": sum(hist[:heads]) / examples,
        "frac_any_saturated": sum(hist[1:]) / examples,
        "mean_saturated": sum(k * c for k, c in enumerate(hist)) / examples,
    }
    for name, value in own.items():
        stored = getattr(summary, name)
        if not (math.isfinite(stored) and math.isclose(stored, value, rel_tol=1e-12, abs_tol=1e-15)):
            return f"{name} = {stored!r}, where its saturation histogram {list(hist)!r} gives {value!r}"
    return None
