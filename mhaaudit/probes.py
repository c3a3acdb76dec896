"""Probe planning: which probe points (the columns of the paper's tables) an audit captures.

A *probe point* is a choice of initialisation (``init``: random or trained weights), a depth (0 =
embedding output, k = output of block k) and, for the paper's "random attention" column, one
frozen random attention head applied to the embedding output.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from . import validate
from .errors import InputError, Param

IMAGE_VARIANTS = ("embedding", "random-attention", "random", "trained")
VARIANT_HELP = {
    "embedding": "random-initialised embedding module output (layer 0)",
    "random-attention": "LayerNorm (no affine) + one frozen random attention head + skip, on the embedding output",
    "random": "random-initialised model, output of block {layer}",
    "trained": "trained weights, output of block {layer}",
}


@dataclass(frozen=True)
class Probe:
    """One column: weights, depth and whether the random attention head is applied."""

    variant: str  # embedding | random-attention | random | trained | random-L{k} | trained-L{k}
    init: str  # random | trained: the weights the model is built with
    layer: int
    random_attention: bool = False

    def describe(self) -> str:
        """What the column reads, in words: its weights and the layer whose output it takes."""
        if self.random_attention:
            return VARIANT_HELP["random-attention"]
        if self.layer == 0:
            return f"{self.init} weights, embedding output (layer 0)"
        return f"{self.init} weights, output of block {self.layer}"


def plan_probes(
    modality: str,
    variants: Sequence[str] | None = None,
    layers: Sequence[int] | str | None = None,
    layer: int | None = None,
) -> list[Probe]:
    """Plan the columns to audit, one probe point a column.

    Images get the paper's Table 1 columns. Text, or any model with ``layers`` given, gets random and
    trained weights at each layer (the paper's Table 3 uses layers 0 and 1).

    Args:
        modality: ``"image"`` or ``"text"``.
        variants: the columns to keep (None: all of them), or their comma list (``"random,trained"``).
        layers: the depths of the random and trained columns (text default: 0 and 1), or ``"0,1"``, ``"0-6"``.
        layer: the depth of the image ``random`` and ``trained`` columns (default 1; refused for text).

    Returns:
        The probe points (one a column), in the table's order.

    Raises:
        InputError: when ``layer`` is given beside ``layers`` or for a text model, or is below 1; a layer is
            negative; or a variant is unknown or has no column at the depth asked.
    """
    if isinstance(variants, str):  # a comma list, as the command line's --variants takes it
        variants = validate.split_list(variants) or []
    if layers is not None:  # "0,1", "0-6" or integers, as the command line's --layers takes them
        layers = validate.layers(layers, Param("layers"))
    layer = _check_layer(modality, layer, layers)
    if layers is not None or modality == "text":
        return _depth_probes(variants, layers)
    return _image_probes(variants, layer)


def _check_layer(modality: str, layer: int | None, layers: Sequence[int] | None) -> int | None:
    """``layer`` as an int (None when not given), refused beside ``layers`` and for a text model, and a block
    (at least 1).

    Raises:
        InputError: when ``layer`` is given beside ``layers`` or for a text model, or is below 1.
    """
    if layer is not None and layers is not None:
        raise InputError(
            Param("layer")
            + " has no effect with "
            + Param("layers")
            + ": "
            + Param("layers")
            + " names every depth to audit; "
            "give one of them"
        )
    if layer is not None and modality == "text":
        raise InputError(
            Param("layer") + " has no effect on a text model (it sets the depth of the image columns); "
            "give " + Param("layers") + " instead (default 0,1)"
        )
    if layer is None:
        return None
    block = validate.integer(Param("layer"), layer, minimum=None)
    if block < 1:
        raise InputError(Param("layer") + f" must be at least 1 (block index; 0 is the embedding output), got {layer}")
    return block


def _depth_probes(variants: Sequence[str] | None, layers: Sequence[int] | None) -> list[Probe]:
    """random and/or trained weights at each depth (default 0 and 1, the paper's Table 3).

    Raises:
        InputError: when a layer is negative, or a variant is not random or trained.
    """
    ls = sorted(set(layers if layers is not None else (0, 1)))
    if any(v < 0 for v in ls):
        raise InputError(f"layers must be >= 0, got {ls}")
    inits = _inits_from_variants(variants)
    return [Probe(f"{w}-L{depth}", w, depth) for w in inits for depth in ls]


def _image_probes(variants: Sequence[str] | None, layer: int | None) -> list[Probe]:
    """The paper's Table 1 columns, the random and trained ones at depth ``layer`` (default 1).

    Raises:
        InputError: when ``layer`` is given without a random or trained column, or a variant is unknown.
    """
    vs = list(dict.fromkeys(variants or IMAGE_VARIANTS))
    if layer is not None and not {"random", "trained"} & set(vs):
        raise InputError(
            Param("layer") + f" has no effect on the columns {', '.join(vs)} (they read the embedding output); "
            "it sets the depth of the random and trained columns"
        )
    out = []
    for v in vs:
        if v not in IMAGE_VARIANTS:
            raise InputError(f"unknown variant {v!r}; choose from {', '.join(IMAGE_VARIANTS)}")
        if v == "embedding":
            out.append(Probe(v, "random", 0))
        elif v == "random-attention":
            out.append(Probe(v, "random", 0, random_attention=True))
        else:
            out.append(Probe(v, v, 1 if layer is None else layer))
    return out


def _inits_from_variants(variants: Sequence[str] | None) -> list[str]:
    if not variants:
        return ["random", "trained"]
    ws = []
    for v in variants:
        if v not in ("random", "trained"):
            raise InputError(f"with layers, variants are 'random' and/or 'trained', got {v!r}")
        ws.append(v)
    return list(dict.fromkeys(ws))


def probe_for_variant(variant: str, layer: int = 1) -> Probe:
    """The probe point a variant name stands for: a Table 1 column or ``random-L<k>`` / ``trained-L<k>``.

    Raises:
        InputError: when ``variant`` is neither.
    """
    if variant in IMAGE_VARIANTS:
        return plan_probes("image", [variant], layer=layer if variant in ("random", "trained") else None)[0]
    m = re.fullmatch(r"(random|trained)-L(\d+)", variant)
    if not m:
        raise InputError(
            f"unknown variant {variant!r}; choose from {', '.join(IMAGE_VARIANTS)} or random-L<k>/trained-L<k>"
        )
    return Probe(variant, m.group(1), int(m.group(2)))


def refuse_weights_without_trained(weights_path, probe: Probe, variants: str = "variants") -> None:
    """Trained weights given for a column that does not read them are refused;
    ``variants`` is the parameter that chose the column.

    Raises:
        InputError: when ``weights_path`` is given and ``probe`` does not read trained weights.
    """
    if weights_path is not None and probe.init != "trained":
        raise InputError(
            Param("weights") + " loads trained weights; use it with " + Param(variants) + " trained (or trained-L<k>), "
            f"not {probe.variant!r}"
        )


def one_column(variant: str, weights) -> None:
    """One column to capture (``kruskal``), and trained weights only for a trained one.

    Raises:
        InputError: when ``variant`` names several columns, or ``weights`` is given for a column without trained
            weights.
    """
    if len(validate.split_list(variant) or []) > 1:
        raise InputError(
            Param("variant") + f" {variant}: kruskal captures one column at a time; give one (check audits several)"
        )
    refuse_weights_without_trained(weights, probe_for_variant(variant), "variant")
