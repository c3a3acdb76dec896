"""The inputs of a transformers model: its tokenizer and its image preprocessing."""

from __future__ import annotations

import os
from typing import Any

import torch

from ..errors import ModelError, one_line
from ..files import native_name
from .families import Family, family_of
from .hub_reads import _Hub

_TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "tokenizer.model",
    "sentencepiece.bpe.model",
)


# The largest side, in pixels, of the images a model's preprocessing makes (and the most pixels it may
# ask for): its preprocessor_config.json (or config.json's image_size) is refused beyond it, before an
# image is resized (a 100-byte file asking for 20000 x 20000 images makes 4.8 GB of floats per image).
MAX_INPUT_SIDE = 4096


def load_tokenizer(candidates: list[str], hub: _Hub | None = None) -> object | None:
    """The first usable tokenizer among folders / hub ids, or None (a missing tokenizer is not an error).

    Raises:
        ModelError: when a folder holds tokenizer files that cannot be read (a truncated ``tokenizer.json``, a
            vocabulary of another format): another vocabulary in their place would be a silent substitute.
    """
    try:
        from transformers import AutoTokenizer
    except ImportError:  # pragma: no cover
        return None
    for src in candidates:
        local = os.path.isdir(src)
        # A folder without vocabulary files would give a nearly empty tokenizer, silently.
        present = [f for f in _TOKENIZER_FILES if os.path.exists(os.path.join(src, f))] if local else []
        if local and not present:
            continue
        try:  # a folder by a name the tokenizers library takes, whatever bytes its own holds (a hub id is UTF-8)
            with native_name(src) as name:
                tok = AutoTokenizer.from_pretrained(name, **(hub or _Hub()).kwargs(local))
        except Exception as exc:  # noqa: BLE001 - a hub id's tokenizer missing (offline) is not an error here
            if local:
                raise ModelError(
                    f"the tokenizer files of {src} ({', '.join(present)}) cannot be read: "
                    f"{one_line(exc, 300, first_line=True)}"
                ) from None
            continue
        try:
            specials = len(set(getattr(tok, "all_special_tokens", []) or []))
            if len(tok) <= specials + 1:
                continue
        except Exception:  # noqa: BLE001  # pragma: no cover
            pass
        return tok
    return None


def image_transform(cfg: Any, family: str, sources: list[str], hub: _Hub | None = None) -> ImageTransform:
    """The model's own image preprocessing: its saved processor when present, else from the config.

    Raises:
        ModelError: when the preprocessing would make images larger than :data:`MAX_INPUT_SIDE` pixels a side.
    """
    proc = None
    for source in sources:
        local = os.path.isdir(source)
        if local and not os.path.exists(os.path.join(source, "preprocessor_config.json")):
            continue
        try:
            from transformers import AutoImageProcessor

            proc = AutoImageProcessor.from_pretrained(source, **(hub or _Hub()).kwargs(local))
            break
        except Exception as exc:  # noqa: BLE001 - a hub id's processor missing (offline): the config's values
            if local:  # the folder's own preprocessing, unreadable: the config's would be a silent substitute
                raise ModelError(
                    f"the preprocessor_config.json of {source} cannot be read: {one_line(exc, 300, first_line=True)}"
                ) from None
            proc = None
    if proc is None:
        from transformers import ViTImageProcessor

        size = getattr(cfg, "image_size", 224)
        h, w = (int(size[0]), int(size[-1])) if isinstance(size, (list, tuple)) else (int(size), int(size))
        norm = family_of(family) or Family(family, "image")
        proc = ViTImageProcessor(size={"height": h, "width": w}, image_mean=norm.mean, image_std=norm.std)
    for what in ("size", "crop_size", "pad_size"):
        value = getattr(proc, what, None)
        try:
            sizes = dict(value) if value is not None and not isinstance(value, (int, float)) else {what: value}
        except (TypeError, ValueError):
            continue
        for key, v in sizes.items():
            limit = MAX_INPUT_SIDE**2 if "pixels" in key else MAX_INPUT_SIDE
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > limit and key != "min_pixels":
                raise ModelError(
                    f"the image preprocessing of {sources[0] if sources else family} asks for {what} {key} = {v}, "
                    f"more than the {limit} {'pixels' if 'pixels' in key else 'pixels a side'} mhaaudit makes images "
                    "of: refused before any image is resized"
                )

    return ImageTransform(proc)


class ImageTransform:
    """A transformers image processor as a function of a list of PIL images (the batch's pixel tensor),
    and of uint8 tensor batches where that gives the same pixels (:meth:`takes_tensors`): the processor
    then runs where the batch is, a GPU's images never passing through the host."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self._proven: dict[tuple, bool] = {}

    def __call__(self, images: list) -> torch.Tensor:
        """The pixel tensor of a list of PIL images."""
        return self.proc(images=images, return_tensors="pt")["pixel_values"]

    def tensors(self, batch: torch.Tensor) -> torch.Tensor:
        """The pixel tensor of a ``(B, 3, H, W)`` uint8 batch, computed where the batch is."""
        return self.proc(images=batch, return_tensors="pt")["pixel_values"]

    def takes_tensors(self, height: int, width: int, device: torch.device | str) -> bool:
        """Whether uint8 tensor batches of ``height`` x ``width`` images on ``device`` give the pixels their PIL
        images give, bit for bit; found once per size and device. Only a processor that works on tensors itself
        (transformers' torchvision backend, which turns a PIL image into such a tensor first) and whose resizing,
        cropping and padding leave an image of that size as it is (:func:`_leaves_size`: what is left is done
        per pixel value) is tried, on one image holding every value 0-255 in each channel, both ways."""
        key = (int(height), int(width), str(device))
        if key not in self._proven:
            self._proven[key] = self._same_pixels(*key)
        return self._proven[key]

    def _same_pixels(self, height: int, width: int, device: str) -> bool:
        if getattr(self.proc, "backend", None) != "torchvision" or height * width < 256:
            return False
        if not _leaves_size(self.proc, height, width):
            return False
        from PIL import Image

        values = (torch.arange(height * width).reshape(height, width, 1) + torch.tensor([0, 85, 170])) % 256
        probe = values.to(torch.uint8)
        try:
            want = self([Image.fromarray(probe.numpy(), "RGB")])
            got = self.tensors(probe.permute(2, 0, 1)[None].contiguous().to(device))
        except Exception:  # noqa: BLE001 - a processor that refuses tensors keeps the PIL route
            return False
        return tuple(want.shape[-2:]) == (height, width) and torch.equal(want, got.to("cpu", want.dtype))


def _leaves_size(proc: Any, height: int, width: int) -> bool:
    """Whether ``proc``'s geometry leaves a ``height`` x ``width`` image as it is: no resizing, or to that very size
    (torchvision then returns the image itself); no cropping, or to that size; no padding."""

    def fields(size: Any) -> dict:
        try:
            return {k: v for k, v in dict(size).items() if v is not None}
        except (TypeError, ValueError):
            return {"?": size}

    same = {"height": height, "width": width}
    square = {"shortest_edge": height} if height == width else same
    if getattr(proc, "do_resize", False) and fields(getattr(proc, "size", None)) not in (same, square):
        return False
    if getattr(proc, "do_center_crop", False) and fields(getattr(proc, "crop_size", None)) != same:
        return False
    return not getattr(proc, "do_pad", False)
