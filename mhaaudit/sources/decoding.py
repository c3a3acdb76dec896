"""Decoding one image: its bytes read within their folder and capped, its header checked before
its pixels are decoded, its mode kept or converted, and a :class:`DecodeBudget` that bounds the
images decoded ahead of the model.
"""

from __future__ import annotations

import io
import os
import re
import threading
import weakref
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from ..errors import one_line

# The most bytes one image file may hold (larger ones are refused unread, as PIL refuses
# decompression bombs): a path in a table must not make the run read /dev/zero.
MAX_IMAGE_BYTES = 256 << 20


# The most pixels one image may declare in its header (8192 x 8192; a 50-megapixel photograph
# passes): a larger one is skipped as unreadable before its pixels are decoded. A 400 KB PNG can
# declare 12000 x 12000 pixels, 430 MB once decoded.
MAX_IMAGE_PIXELS = 1 << 26


# Decoded bytes counted per declared pixel (four bands of a byte, or one band of four bytes).
_BYTES_PER_PIXEL = 4


def _read_path(path: Path, base: Path | None) -> bytes:
    """The bytes of an image file a table names by path: only a regular file inside the data's own
    folder ``base`` (symbolic links resolved), and at most :data:`MAX_IMAGE_BYTES`; anything else
    is unreadable (ValueError), without saying whether such a file exists.

    Raises:
        ValueError: when ``base`` is None (a streamed dataset), or the path leaves ``base``, is not a regular file
            or holds more than :data:`MAX_IMAGE_BYTES`.
    """
    if base is None:
        raise ValueError("an image given by path in a streamed dataset (only stored bytes are read)")
    root = os.path.realpath(base)
    real = os.path.realpath(path if path.is_absolute() else base / path)
    if os.path.commonpath([root, real]) != root:
        raise ValueError("an image path outside the data's folder (not read)")
    if not os.path.isfile(real):
        raise ValueError("an image path that is not a regular file in the data's folder")
    return _read_capped(real)


def _read_capped(path: str | Path) -> bytes:
    """The bytes of the image file ``path``.

    Raises:
        ValueError: when the file holds more than :data:`MAX_IMAGE_BYTES`.
    """
    with open(path, "rb") as fh:
        raw = fh.read(MAX_IMAGE_BYTES + 1)
    if len(raw) > MAX_IMAGE_BYTES:
        raise ValueError(f"an image file of more than {MAX_IMAGE_BYTES >> 20} MiB (not read)")
    return raw


def _read_value(value: Any, base: Path | None) -> Any:
    """Bytes (or a PIL image) from a PIL image, bytes, a file of an image folder (a ``Path``), or a
    path or {"bytes", "path"} dict a table gives (:func:`_read_path`)."""
    if isinstance(value, dict):
        raw = value.get("bytes")
        if raw is None and value.get("path"):
            raw = _read_path(Path(value["path"]), base)
        value = raw
    if isinstance(value, Path):  # a file of an image folder the user named, found by listing it
        value = _read_capped(value)
    elif isinstance(value, str):  # a path a table gives
        value = _read_path(Path(value), base)
    return value


_UNREADABLE = (OSError, UnidentifiedImageError, ValueError, SyntaxError, Image.DecompressionBombError)


def _why(exc: BaseException) -> str:
    if isinstance(exc, UnidentifiedImageError):
        return "not an image file that PIL can identify"
    return one_line(exc, 120, first_line=True)


def _opened(value: Any, base: Path | None) -> Image.Image:
    """The image ``value`` holds, opened (its header read, no pixels decoded yet).

    Raises:
        ValueError: when ``value`` holds no image bytes, or its header declares more than :data:`MAX_IMAGE_PIXELS`.
        OSError: (and PIL's other errors) when the bytes are not an image PIL can identify.
    """
    value = _read_value(value, base)
    if isinstance(value, Image.Image):
        return value
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise ValueError(f"holds {type(value).__name__}, not image bytes")
    try:
        image = Image.open(io.BytesIO(bytes(value)))
    except Image.DecompressionBombError as exc:  # past PIL's own ceiling: said as any image past this one
        said = re.search(r"\((\d+) pixels\)", str(exc))
        raise ValueError(
            f"its header declares {said.group(1) + ' pixels' if said else 'more pixels than PIL opens'}, more "
            f"than the {MAX_IMAGE_PIXELS} decoded (not decoded)"
        ) from None
    w, h = image.size
    if w * h > MAX_IMAGE_PIXELS:
        raise ValueError(
            f"its header declares {w} x {h} pixels, more than the {MAX_IMAGE_PIXELS} decoded (not decoded)"
        )
    return image


class DecodeBudget:
    """Bounds the decoded images alive at once (decoded ahead of the pass, or waiting in its batches).

    A worker asks :meth:`acquire` before it decodes an image of ``size`` bytes (from its header);
    it waits while the images alive would exceed ``budget`` bytes, unless its image is the next one
    the pass takes (so one image larger than the budget still passes, and the pass never stalls).
    The bytes are given back when the decoded image is freed (or at once for an image skipped).
    :meth:`close` lets every waiting worker go (the pass ended early).
    """

    def __init__(self, budget: int) -> None:
        self.budget = max(1, int(budget))
        self.held = 0
        self.next = 0
        self.closed = False
        self._cond = threading.Condition()

    def acquire(self, index: int, size: int) -> None:
        """Wait until ``size`` bytes for item ``index`` fit (or it is the next item taken), then hold them."""
        with self._cond:
            while not self.closed and index != self.next and self.held + size > self.budget:
                self._cond.wait()
            self.held += size

    def release(self, size: int) -> None:
        """Give back ``size`` bytes (an image freed or skipped)."""
        with self._cond:
            self.held -= size
            self._cond.notify_all()

    def taken(self, index: int) -> None:
        """Item ``index`` was taken by the pass: the next one may decode whatever the budget holds."""
        with self._cond:
            self.next = index + 1
            self._cond.notify_all()

    def close(self) -> None:
        """Let every waiting worker go."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()


def _budgeted(value: Any, base: Path | None, convert: bool, index: int, budget: DecodeBudget):
    """:func:`_decode` of item ``index`` within ``budget``: the image's declared size is held before its pixels
    are decoded, and given back when the image is freed (or at once when it is skipped)."""
    try:
        opened = _opened(value, base)
    except _UNREADABLE as exc:
        budget.acquire(index, 0)
        return None, "unreadable", _why(exc)
    w, h = opened.size
    size = w * h * _BYTES_PER_PIXEL
    budget.acquire(index, size)
    try:
        image, cause, why = _decode(opened, base, convert)
    except BaseException:
        budget.release(size)
        raise
    if image is None:
        budget.release(size)
    else:
        weakref.finalize(image, budget.release, size)
    return image, cause, why


def _decode(value: Any, base: Path | None = None, convert: bool = False) -> tuple[Image.Image | None, str, str]:
    """``(image, "", "")`` for an RGB image made from a PIL image, bytes, a path, or a {"bytes",
    "path"} dict; ``(None, cause, why)`` when it cannot be decoded (``"unreadable"``) or is not
    RGB (``"not RGB"``, unless ``convert``: then every mode is converted with PIL's
    ``convert("RGB")``, as torchvision's ImageFolder loader does). The sources call it on a pool
    of threads (:func:`~._common.ordered_map`), keeping their order; PIL's warnings about odd
    files go through the process's warning filters (``warnings.catch_warnings`` is not thread-safe)."""
    try:
        image = _opened(value, base)  # an image declaring more than MAX_IMAGE_PIXELS is not decoded
        image.load()
    except _UNREADABLE as exc:
        return None, "unreadable", _why(exc)
    if image.mode == "RGB":
        return image, "", ""
    if convert:
        try:
            return image.convert("RGB"), "", image.mode
        except _UNREADABLE as exc:
            return None, "unreadable", _why(exc)
    return None, "not RGB", f"mode {image.mode}"


def _header_mode(value: Any, base: Path | None = None) -> tuple[str | None, str]:
    """The image mode read from the header alone (no pixels decoded), or ``(None, why)`` (an image
    declaring more than :data:`MAX_IMAGE_PIXELS` included)."""
    try:
        image = _opened(value, base)
        return image.mode, ""
    except _UNREADABLE as exc:
        return None, _why(exc)
