"""The model families mhaaudit knows: which token is the query, what the embedding output carries,
and whether ``capacity`` can express the attention exactly.

One :class:`Family` per transformers ``model_type`` (:data:`FAMILIES`) and per timm name pattern
(:data:`TIMM_FAMILIES`). Supporting a new transformers family whose blocks are found and whose
query is the first or the last token is one entry in :data:`FAMILIES`; a family whose attention
``capacity`` should read is, in addition, one adapter file in :mod:`mhaaudit.models.attention`.

- ``query``: ``"first"`` (class token, ``[CLS]``, ``<s>``: token 0), ``"last"`` (decoders) or
  ``"none"`` (no class token, e.g. SigLIP; then ``--query-index`` must name one, and
  :attr:`Family.no_query` says why).
- ``positions``: what the embedding output (layer 0) carries about positions. ``"learned"`` and
  ``"sinusoidal"`` positions are added to the token embeddings; ``"rotary"``, ``"relative"`` and
  ``"alibi"`` positions act inside the attention only, so layer 0 holds the token embeddings
  alone (:data:`mhaaudit.facts.NO_POSITIONS_AT_LAYER_0`): two equal tokens of one example are two equal
  rows there.

What ``capacity`` cannot express of a family's attention (rotary positions, relative attention,
ALiBi, grouped key/value heads including multi-query, query/key norms, logit soft-capping) is
read from each model's config and blocks by :mod:`mhaaudit.models.attention.support`, for every
family alike.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FAMILIES",
    "TIMM_FAMILIES",
    "UNPROBEABLE",
    "Family",
    "embedding_positions",
    "family_of",
    "query_words",
    "timm_family_of",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HALF = (0.5, 0.5, 0.5)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


_NO_CLASS_TOKEN_SIGLIP = "SigLIP has no class token: its head pools all patch tokens with an attention layer (MAP)"


@dataclass(frozen=True)
class Family:
    """What mhaaudit knows about one model family (see the module docstring)."""

    label: str
    modality: str  # "text" | "image"
    query: str = "first"  # "first" | "last" | "none"
    positions: str = "learned"  # learned | sinusoidal | rotary | relative | alibi | none
    mean: tuple[float, float, float] = IMAGENET_MEAN  # image normalisation when no processor is saved
    std: tuple[float, float, float] = IMAGENET_STD
    tower: str | None = None  # two-tower config: the sub-config that is probed ("vision_config")
    no_query: str = ""  # why there is no query token (query == "none")

    @property
    def decoder(self) -> bool:
        """True for a causal decoder (its query token is the last)."""
        return self.query == "last"


def _dec(label: str, positions: str = "rotary", **kw) -> Family:
    return Family(label, "text", "last", positions, **kw)


def _enc(label: str, positions: str = "learned", **kw) -> Family:
    return Family(label, "text", "first", positions, **kw)


def _img(label: str, **kw) -> Family:
    return Family(label, "image", **kw)


FAMILIES: dict[str, Family] = {
    # decoders: the query is the last token
    "gpt2": _dec("GPT-2", "learned"),
    "gpt_neo": _dec("GPT-Neo", "learned"),
    "gpt_bigcode": _dec("GPT-BigCode", "learned"),  # multi-query: grouped key/value heads (attention.support)
    "opt": _dec("OPT", "learned"),
    "ctrl": _dec("CTRL", "sinusoidal"),
    "gpt_neox": _dec("GPT-NeoX"),
    "gptj": _dec("GPT-J"),
    "codegen": _dec("CodeGen"),
    "llama": _dec("Llama"),
    "mistral": _dec("Mistral"),
    "mixtral": _dec("Mixtral"),
    "qwen2": _dec("Qwen2"),
    "qwen3": _dec("Qwen3"),
    "phi": _dec("Phi"),
    "phi3": _dec("Phi-3"),
    "gemma": _dec("Gemma"),
    "gemma2": _dec("Gemma 2"),
    "olmo": _dec("OLMo"),
    "falcon": _dec("Falcon"),
    "bloom": _dec("BLOOM", "alibi"),
    # encoders: the query is token 0 ([CLS] / <s>)
    "bert": _enc("BERT"),
    "roberta": _enc("RoBERTa"),
    "xlm-roberta": _enc("XLM-RoBERTa"),
    "camembert": _enc("CamemBERT"),
    "distilbert": _enc("DistilBERT"),
    "electra": _enc("ELECTRA"),
    "deberta": _enc("DeBERTa", "relative"),
    "deberta-v2": _enc("DeBERTa-v2", "relative"),
    "modernbert": _enc("ModernBERT", "rotary"),
    # vision: the query is the class token (token 0)
    "vit": _img("ViT", mean=HALF, std=HALF),
    "deit": _img("DeiT"),
    "dinov2": _img("DINOv2"),
    "dinov2_with_registers": _img("DINOv2 with registers"),
    "beit": _img("BEiT", positions="relative", mean=HALF, std=HALF),
    "data2vec-vision": _img("Data2Vec-vision", positions="relative", mean=HALF, std=HALF),
    "clip_vision_model": _img("CLIP vision tower", mean=CLIP_MEAN, std=CLIP_STD),
    "clip": _img("CLIP vision tower", mean=CLIP_MEAN, std=CLIP_STD, tower="vision_config"),
    "siglip_vision_model": _img(
        "SigLIP vision tower", query="none", mean=HALF, std=HALF, no_query=_NO_CLASS_TOKEN_SIGLIP
    ),
    "siglip": _img(
        "SigLIP vision tower", query="none", mean=HALF, std=HALF, tower="vision_config", no_query=_NO_CLASS_TOKEN_SIGLIP
    ),
}

#: timm families by model-name pattern, first match wins. What the embedding output carries and
#: whether there is a class token are read from the built model itself (timm_backend).
TIMM_FAMILIES: tuple[tuple[str, str, Family], ...] = (
    ("vit_*siglip*", "siglip", _img("SigLIP (timm)", query="none", no_query=_NO_CLASS_TOKEN_SIGLIP)),
    ("vit_*dinov2*", "dinov2", _img("DINOv2 (timm)")),
    ("eva02*", "eva02", _img("EVA-02 (timm)")),
    ("eva*", "eva", _img("EVA (timm)")),
    ("beit*", "beit", _img("BEiT (timm)")),
    ("deit*", "deit", _img("DeiT (timm)")),
    ("vit_*", "vit", _img("ViT (timm)")),
)

UNPROBEABLE: dict[str, str] = {
    "swin": "Swin merges patches hierarchically and pools globally; it has no class token",
    "swinv2": "Swin V2 merges patches hierarchically and pools globally; it has no class token",
    "convnext": "ConvNeXt is a convolutional network, not a token transformer",
    "convnextv2": "ConvNeXt V2 is a convolutional network, not a token transformer",
    "resnet": "ResNet is a convolutional network, not a token transformer",
    "regnet": "RegNet is a convolutional network, not a token transformer",
    "efficientnet": "EfficientNet is a convolutional network, not a token transformer",
    "mobilenet_v1": "MobileNet is a convolutional network, not a token transformer",
    "mobilenet_v2": "MobileNet is a convolutional network, not a token transformer",
    "bit": "BiT is a convolutional network, not a token transformer",
    "levit": "LeViT shrinks its token grid between stages and pools globally",
    "poolformer": "PoolFormer has no attention and no class token",
    "segformer": "SegFormer is hierarchical and has no class token",
    "pvt": "PVT is hierarchical and has no class token",
    "pvt_v2": "PVT v2 is hierarchical and has no class token",
    "focalnet": "FocalNet is hierarchical and has no class token",
    "dinat": "DiNAT is hierarchical and has no class token",
    "nat": "NAT is hierarchical and has no class token",
    "mobilevit": "MobileViT is hybrid convolutional and has no class token",
    "cvt": "CvT is hierarchical and pools its tokens",
    "van": "VAN is a convolutional network, not a token transformer",
}


def family_of(model_type: str | None) -> Family | None:
    """The :class:`Family` of a transformers ``model_type``, or None when mhaaudit does not know it."""
    return FAMILIES.get(model_type or "")


def timm_family_of(timm_name: str) -> tuple[str, Family]:
    """(family name, :class:`Family`) of a timm model name (its pretrained tag ignored)."""
    arch = timm_name.split(".")[0]
    for pattern, name, fam in TIMM_FAMILIES:
        if fnmatch.fnmatchcase(arch, pattern):
            return name, fam
    name = arch.split("_")[0]
    return name, _img(f"{name} (timm)")


def embedding_positions(family: Family, cfg: Any) -> str:
    """What the embedding output of a transformers model carries about positions, from its config
    where the config decides it (DeBERTa's ``position_biased_input``, BEiT's absolute positions)."""
    if hasattr(cfg, "use_absolute_position_embeddings"):  # BEiT, Data2Vec-vision
        if cfg.use_absolute_position_embeddings:
            return "learned"
        rel = getattr(cfg, "use_relative_position_bias", False) or getattr(
            cfg, "use_shared_relative_position_bias", False
        )
        return "relative" if rel else "none"
    if hasattr(cfg, "position_biased_input"):  # DeBERTa
        return "learned" if cfg.position_biased_input else "relative"
    return family.positions


def query_words(query_index: int | None, n: int, prefix: int = 1, *, modality: str, why: str = "") -> str:
    """The query token in words: ``"token 0 (class token; 4 more prefix tokens follow)"``, ``"token
    n-1 (last token)"`` or, without one, ``"none: <why>"``. ``prefix``: class, distillation and
    register tokens before the patches."""
    if query_index is None:
        return f"none: {why or 'the model has no class token'}"
    if query_index == 0:
        what = "class token" if modality == "image" else "first token, [CLS] / <s>"
        extra = f"; {prefix - 1} more prefix token{'s' if prefix > 2 else ''} follow" if prefix > 1 else ""
        return f"token 0 ({what}{extra})"
    if query_index == n - 1:
        return f"token {query_index} (last token)"
    return f"token {query_index}"
