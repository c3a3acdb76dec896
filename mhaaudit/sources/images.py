"""Image sources: the built-in offline default, image folders, parquet files of image bytes, and
Hugging Face datasets (streamed).

Every source yields RGB ``PIL.Image.Image`` objects in a deterministic order and counts what it
had to skip, by cause, with an example of each. Folders, parquet and Arrow files, saved datasets
and hub datasets are decoded on a pool of threads, in order. Like the paper (which kept the RGB
images among 2000 ImageNet images), sources keep images whose mode is already RGB and count every
other image (grayscale, CMYK, RGBA, palette) as skipped ("not RGB"), unless ``convert_rgb``
converts them as torchvision's ImageFolder does; files that cannot be decoded are skipped as
"unreadable". ``limit`` caps the number of images yielded.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from ..defaults import DEFAULT_LIMIT, DEFAULT_SPLIT
from ..errors import DataError, InputError, Param, joined
from ..files import folder_files
from ..hostmem import available_memory
from ._common import Skips, classify, is_builtin, is_local, no_split, open_hf_dataset, ordered_map, stream_rows
from .containers import IMAGE_NAMES, Table, choose_column, is_saved_dataset, table_of
from .decoding import MAX_IMAGE_BYTES as MAX_IMAGE_BYTES
from .decoding import MAX_IMAGE_PIXELS as MAX_IMAGE_PIXELS
from .decoding import DecodeBudget, _budgeted, _header_mode
from .mosaics import BUILTIN_PHOTOS, CROP_SIZE, GRID, TILE_SIDE, load_photos, make_ahead, mosaics_for

__all__ = [
    "BUILTIN_PHOTOS",
    "IMAGE_EXTENSIONS",
    "BuiltinImages",
    "HubImages",
    "ImageFolder",
    "ImageSource",
    "ParquetImages",
    "TableImages",
    "image_source",
    "images_ahead",
]

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm", ".pnm"}
)
_OFFLINE_IMAGES = (
    "a local image folder, a .parquet file of image bytes, or the built-in default (no " + Param("data") + ")"
)


# The decoded images alive at once (decoded ahead, waiting in batches) hold at most this share of the
# memory available when the pass starts, and at most DECODE_AHEAD_MAX bytes; beyond it, only the next
# image the pass takes is decoded.
DECODE_AHEAD_SHARE = 4
DECODE_AHEAD_MAX = 2 << 30


def decode_budget() -> DecodeBudget:
    """A :class:`DecodeBudget` of ``1 /`` :data:`DECODE_AHEAD_SHARE` of the memory available now, at most
    :data:`DECODE_AHEAD_MAX` bytes."""
    return DecodeBudget(min(available_memory() // DECODE_AHEAD_SHARE, DECODE_AHEAD_MAX))


RGB_ONLY = "RGB only (the paper's rule): images of any other mode are skipped and counted"
CONVERT_RGB = (
    "every mode converted to RGB with PIL's convert('RGB'), as torchvision's ImageFolder does "
    "(alpha dropped, grayscale repeated, palettes expanded)"
)


@dataclass
class Scan:
    """What the headers of a finite source say before any pixel is decoded: ``usable`` images
    among the ``scanned`` items, ``complete`` when every item was scanned (``usable`` is then
    all the source has, less any that fail to decode later), the items that cannot be used by
    cause, and how many usable ones have another mode (converted)."""

    usable: int
    scanned: int
    complete: bool
    skips: Skips
    converted: int = 0


class ImageSource:
    """An iterable of RGB ``PIL.Image.Image`` in a deterministic order.

    ``name`` describes the source in plain words for reports; ``skips`` holds the items the
    current (or last) pass skipped, by cause (not RGB, unreadable) with an example of each, and
    ``skipped`` their number; ``converted`` counts the images of another mode converted to RGB
    (``convert_rgb``); ``policy`` says which rule applied. ``total`` is the most images a full
    pass can yield when known in advance (exact for the built-in source; an upper bound for
    folders and files, where some items may be skipped; None for streamed datasets); ``limit``
    caps the number yielded. Finite local sources can :meth:`scan` their headers first.
    Each ``iter()`` starts a fresh pass and resets ``skips``.
    """

    name: str
    total: int | None
    limit: int

    def __init__(self, name: str, limit: int, total: int | None = None, convert_rgb: bool = False) -> None:
        self.name = name
        self.limit = limit
        self.total = total
        self.convert_rgb = bool(convert_rgb)
        self.skips = Skips()
        self.converted = 0

    @property
    def skipped(self) -> int:
        """How many images were skipped so far (not RGB, unreadable, ...), all reasons together."""
        return self.skips.total

    @property
    def policy(self) -> str:
        """The mode rule in one line: RGB only (the paper's), or every mode converted to RGB."""
        return CONVERT_RGB if self.convert_rgb else RGB_ONLY

    def _generate(self) -> Iterator[Image.Image]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _items(self) -> Iterator[tuple[str, Any]] | None:
        """``(label, raw value)`` of every item, for :meth:`scan`; None when the source cannot be scanned."""
        return None

    _base: Path | None = None

    def _decoded(self, items: Iterator[tuple[str, Any]]) -> Iterator[Image.Image]:
        """Decode ``(label, value)`` items on the thread pool, in order, the decoded images alive at once
        bounded (:class:`DecodeBudget`); count what is skipped."""
        labels: list[str] = []
        budget = decode_budget()

        def values():
            for i, (label, value) in enumerate(items):
                labels.append(label)
                yield i, value

        decoded = ordered_map(lambda iv: _budgeted(iv[1], self._base, self.convert_rgb, iv[0], budget), values())
        try:
            for i, (image, cause, why) in enumerate(decoded):
                budget.taken(i)
                if image is None:
                    self.skips.add(cause, f"{labels[i]}: {why}")
                    continue
                if why:
                    self.converted += 1
                yield image
                del image  # the pass holds it now: its bytes come back when it is freed
        finally:
            budget.close()  # workers waiting for room go, so that the pool can end
            decoded.close()

    def scan(self, upto: int | None = None) -> Scan | None:
        """Read the items' headers (cheap: no pixels are decoded) until ``upto`` usable images are
        found or the source ends; None for sources that cannot be scanned (streamed, built-in)."""
        items = self._items()
        if items is None:
            return None
        skips = Skips()
        usable = scanned = converted = 0
        complete = True
        for label, value in items:
            if upto is not None and usable >= upto:
                complete = False
                break
            scanned += 1
            mode, why = _header_mode(value, self._base)
            if mode is None:
                skips.add("unreadable", f"{label}: {why}")
            elif mode == "RGB" or self.convert_rgb:
                usable += 1
                converted += mode != "RGB"
            else:
                skips.add("not RGB", f"{label}: mode {mode}")
        return Scan(usable, scanned, complete, skips, converted)

    def __iter__(self) -> Iterator[Image.Image]:
        self.skips = Skips()
        self.converted = 0
        yielded = 0
        if self.limit <= 0:
            return
        for image in self._generate():
            yield image
            yielded += 1
            if yielded >= self.limit:
                return
        if yielded == 0:
            raise DataError(
                f"{self.name}: no usable images ({self.skips.describe() or 'none found'})" + self.convert_hint()
            )

    def convert_hint(self) -> str:
        """Advice when images were skipped for their mode and conversion is off."""
        if self.convert_rgb or not self.skips.count("not RGB"):
            return ""
        return (
            "; to audit them, convert them to RGB with "
            + Param("convert_rgb")
            + " (as torchvision's ImageFolder does; "
            "the paper kept RGB images only)"
        )

    def batches(self, batch_size: int) -> Iterator[list[Image.Image]]:
        """Lists of up to ``batch_size`` images (the last one may be shorter).

        Raises:
            InputError: when ``batch_size`` is below 1.
        """
        if batch_size < 1:
            raise InputError(f"batch size must be at least 1, got {batch_size}")
        batch: list[Image.Image] = []
        for image in self:
            batch.append(image)
            if len(batch) == batch_size:
                yield batch
                batch = []
        if batch:
            yield batch

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class BuiltinImages(ImageSource):
    """Seeded 224 x 224 mosaics of 3 x 3 independent random crops of the colour photographs in
    ``BUILTIN_PHOTOS`` (turned, flipped and colour-jittered; :mod:`.mosaics` says exactly how).

    A handful of photographs cropped one at a time gives feature sets far less diverse than a real
    image collection (nearby crops of one photograph are nearly collinear after a random
    embedding); tiles of independent crops restore enough diversity for the paper's Table 1
    pattern to show. The images are distinct, made ``CHUNK`` at a time while iterating with
    integer torch operations on ``device`` (the CPU by default), and the same bits on every device
    for a seed; only the photographs' pyramids are held.
    """

    GRID = GRID
    SIDE = CROP_SIZE  # the images' height and width, in pixels

    def __init__(self, limit: int = DEFAULT_LIMIT, seed: int = 0, device: Any = None) -> None:
        found = load_photos()
        if not found:
            raise DataError("the built-in photographs (scikit-image, scikit-learn) could not be found")
        self.photos = tuple((name, array) for name, _, array in found)
        self.seed = seed
        self.device = str(device) if device is not None else "cpu"
        parts = []
        for package, label in (("skimage", "scikit-image"), ("sklearn", "scikit-learn")):
            names = [n.replace("_", " ") if package == "skimage" else n for n, p, _ in found if p == package]
            if names:
                parts.append(f"{label} ({', '.join(names)})")
        name = (
            f"built-in: {limit} seeded {CROP_SIZE}x{CROP_SIZE} mosaics (seed {seed}) of {GRID}x{GRID} "
            f"independent random square crops ({TILE_SIDE[0]:.0%}-{TILE_SIDE[1]:.0%} of the shorter side, rotated by "
            f"multiples of 90 degrees, flipped, colour/brightness/contrast jittered) of {len(found)} colour "
            f"photographs shipped with {' and '.join(parts)} (offline default; not a real image collection)"
        )
        super().__init__(name, limit, total=limit)

    def arrays(self) -> Iterator:
        """The images as ``(m, 224, 224, 3)`` uint8 tensors on ``device``, chunk by chunk (endless:
        iterate the source itself for ``limit`` images)."""
        return mosaics_for(self.seed, self.device)

    def tensor_batches(self, batch_size: int) -> Iterator[torch.Tensor]:
        """The images that iterating the source gives, as ``(b, 3, 224, 224)`` uint8 tensors of up to
        ``batch_size`` on the source's device (the last one may be shorter): what a model whose
        preprocessing takes tensors reads (``ProbedModel.takes_image_tensors``), with no PIL image made.

        Raises:
            InputError: when ``batch_size`` is below 1.
        """
        if batch_size < 1:
            raise InputError(f"batch size must be at least 1, got {batch_size}")
        self.skips, self.converted = Skips(), 0
        left, held = self.limit, []
        if left <= 0:
            return
        for chunk in self.arrays():  # endless: ends once the limit is reached
            held.append(chunk[:left])
            left -= held[-1].shape[0]
            while sum(c.shape[0] for c in held) >= batch_size or (left <= 0 and held):
                rows = torch.cat(held) if len(held) > 1 else held[0]
                held = [rows[batch_size:]] if rows.shape[0] > batch_size else []
                yield rows[:batch_size].permute(0, 3, 1, 2).contiguous()
            if left <= 0:
                return

    def _generate(self) -> Iterator[Image.Image]:
        for chunk in self.arrays():
            for array in chunk.cpu().numpy():
                yield Image.fromarray(array, "RGB")


def images_ahead(data: str | None, seed: int, limit: int = DEFAULT_LIMIT) -> bool:
    """When ``data`` names the built-in images (None or ``builtin``): start making the first ones of ``seed``
    (two batches' worth, fewer for a small ``limit``) on the CPU on a helper thread, for the source that
    reads them next (:func:`.mosaics.make_ahead`); whether it did."""
    if not is_builtin(data):
        return False
    make_ahead(seed, "cpu", images=limit)
    return True


def _first(limit: int, total: int, unit: str, order: str) -> str:
    """Words saying that a source yields only its first ``limit`` items (never silently)."""
    return f"; the first {limit} usable {unit} in {order} are read" if limit < total else ""


def _is_image_name(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


class ImageFolder(ImageSource):
    """Image files under a folder (recursive, common extensions, sorted by relative path; names starting
    with a dot passed over). The folder is listed as :func:`mhaaudit.files.folder_files` lists it:
    constructing refuses a link to a file outside the folder, an image name that is a named pipe or
    a device, and folders nested more than :data:`~mhaaudit.files.MAX_FOLDER_DEPTH` deep (DataError).
    """

    def __init__(self, root: Path, limit: int = DEFAULT_LIMIT, convert_rgb: bool = False) -> None:
        self.root = root
        files = folder_files(root, DataError, "image folder", keep=_is_image_name)
        if not files:
            exts = ", ".join(sorted(e.lstrip(".") for e in IMAGE_EXTENSIONS))
            raise DataError(f"image folder {root} holds no image files ({exts})")
        self.files = sorted(files, key=lambda p: p.relative_to(root).as_posix())
        mode = "RGB only" if not convert_rgb else "converted to RGB"
        super().__init__(
            f"image folder {root} ({len(self.files)} files, {mode}"
            f"{_first(limit, len(self.files), 'images', 'sorted path order')})",
            limit,
            total=min(limit, len(self.files)),
            convert_rgb=convert_rgb,
        )

    def _items(self) -> Iterator[tuple[str, Any]]:
        return ((p.relative_to(self.root).as_posix(), p) for p in self.files)

    def _generate(self) -> Iterator[Image.Image]:
        return self._decoded(self._items())


class TableImages(ImageSource):
    """A column of encoded images in a container (:mod:`.containers`: parquet or Arrow file, a
    saved ``Dataset`` or a split of a ``DatasetDict``): ``{"bytes": ..., "path": ...}`` structs as
    Hugging Face writes them, or raw bytes, read a batch at a time in the stored order."""

    def __init__(
        self, table: Table, limit: int = DEFAULT_LIMIT, image_column: str | None = None, convert_rgb: bool = False
    ) -> None:
        self.table = table
        self.column, how = choose_column(table.label, table.kinds, image_column, "image")
        self._base = table.base
        rows = table.rows if table.rows is not None else limit
        mode = "RGB only" if not convert_rgb else "converted to RGB"
        super().__init__(
            f"{table.label}, column '{self.column}' ({how}; {table.rows} rows, {mode}"
            f"{_first(limit, rows, 'images', 'stored order')})",
            limit,
            total=min(limit, rows),
            convert_rgb=convert_rgb,
        )

    def _items(self) -> Iterator[tuple[str, Any]]:
        return ((f"row {i}", v) for i, v in enumerate(self.table.values(self.column)))

    def _generate(self) -> Iterator[Image.Image]:
        return self._decoded(self._items())


class ParquetImages(TableImages):
    """A column of encoded images in a parquet file (:class:`TableImages` of the file)."""

    def __init__(
        self, path: Path, limit: int = DEFAULT_LIMIT, image_column: str | None = None, convert_rgb: bool = False
    ) -> None:
        self.path = path
        super().__init__(table_of(path), limit, image_column, convert_rgb)


class HubImages(ImageSource):
    """A Hugging Face dataset (hub id or local dataset folder), streamed in its own order."""

    def __init__(
        self,
        data: str,
        split: str = DEFAULT_SPLIT,
        limit: int = DEFAULT_LIMIT,
        image_column: str | None = None,
        convert_rgb: bool = False,
    ) -> None:
        dataset = open_hf_dataset(data, split=split, what="image", instead=_OFFLINE_IMAGES, examples=limit)
        import datasets  # after the offline check: importing it takes seconds

        features = dataset.features
        label = f"dataset '{data}'"
        column: str | None
        if features is not None:
            kinds = {
                c: "image"
                if isinstance(f, datasets.Image)
                else (
                    "bytes"
                    if isinstance(f, datasets.Value) and f.dtype in ("binary", "large_binary")
                    else "image"
                    if c in ("image", "img")
                    else getattr(f, "dtype", None) or type(f).__name__
                )
                for c, f in features.items()
            }
            column, _ = choose_column(label, kinds, image_column, "image")
        else:
            column = image_column  # features unknown until the first row: a well-known name, else refused
        if features is not None:
            if isinstance(features[column], datasets.Image):
                # decode here, so that one corrupt image is skipped instead of ending the stream
                dataset = dataset.cast_column(column, datasets.Image(decode=False))
            dataset = dataset.select_columns([column])
        self.data, self.split, self.column = data, split, column
        self.dataset = dataset
        where = f"dataset folder {data}" if is_local(data) else f"hub dataset {data}"
        mode = "RGB only" if not convert_rgb else "converted to RGB"
        super().__init__(
            f"{where} split {split} (streamed in the dataset's order: the first {limit} usable images "
            f"are read; {mode})",
            limit,
            convert_rgb=convert_rgb,
        )

    def _values(self) -> Iterator[tuple[str, Any]]:
        for i, row in enumerate(stream_rows(self.dataset, self.data)):
            if self.column is None:
                self.column = next((c for c in IMAGE_NAMES if c in row), None)
            if self.column is None or self.column not in row:
                wanted = f"column '{self.column}'" if self.column else f"column named {', '.join(IMAGE_NAMES)}"
                raise DataError(
                    f"dataset '{self.data}' has no {wanted}; its columns: "
                    f"{', '.join(row)}; choose one with " + Param("image_column")
                )
            yield f"row {i}", row[self.column]

    def _generate(self) -> Iterator[Image.Image]:
        return self._decoded(self._values())


_DATASET_SUFFIXES = frozenset({".parquet", ".arrow"})


def _has_image_files(root: Path) -> bool:
    return bool(folder_files(root, DataError, "data folder", keep=_is_image_name))


def _has_dataset_files(root: Path) -> bool:
    return bool(
        folder_files(root, DataError, "data folder", keep=lambda n: os.path.splitext(n)[1].lower() in _DATASET_SUFFIXES)
    )


def image_source(
    data: str | None = None,
    *,
    split: str = DEFAULT_SPLIT,
    limit: int = DEFAULT_LIMIT,
    seed: int = 0,
    image_column: str | None = None,
    device: Any = None,
    convert_rgb: bool = False,
) -> ImageSource:
    """Open the image source that ``data`` names.

    ``data`` is one of: ``None`` or ``"builtin"`` (:class:`BuiltinImages`, synthesised from ``seed``);
    a folder of image files (:class:`ImageFolder`); a folder written by ``save_to_disk``, a
    ``.parquet`` or ``.arrow`` file (:class:`TableImages`); or a hub dataset id, or ``hf:`` and a
    local dataset folder (:class:`HubImages`, streamed). A folder of parquet or arrow files and no
    images is read as a dataset folder. Images that are not RGB are skipped and counted unless
    ``convert_rgb``. Folders and files keep their own order; the source's name says when only the
    first ``limit`` are read.

    Args:
        data: what to read (None: the built-in images).
        split: the split of a hub dataset or a saved ``DatasetDict``.
        limit: the most images yielded (default 2000).
        seed: the seed of the built-in images (other sources ignore it).
        image_column: the column holding the images (None: a well-known name, else the only image column).
        device: where the built-in images are synthesised (None: the CPU, the same images everywhere).
        convert_rgb: convert images of other modes to RGB, as torchvision's ImageFolder does.

    Returns:
        The :class:`ImageSource` (built-in mosaics, a folder, a table of image bytes or a hub data set).

    Raises:
        DataError: for a missing path, an empty folder or an unknown split.
        OfflineError: for a hub id while offline.
        InputError: for bad arguments: ``limit`` not a positive integer, an option that has no effect on the
            source, a single image file or a file that is not an image source.
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InputError(f"limit must be a positive number of images, got {limit!r}")
    if data is None or is_builtin(data):
        return _builtin_images(split, limit, seed, image_column, device, convert_rgb)
    kind, target = classify(data)
    if kind == "dir":
        return _folder_images(target, split, limit, image_column, convert_rgb)
    if kind == "file":
        return _file_images(target, split, limit, image_column, convert_rgb)
    return HubImages(target, split=split, limit=limit, image_column=image_column, convert_rgb=convert_rgb)


def _builtin_images(split: str, limit: int, seed: int, image_column, device, convert_rgb: bool) -> ImageSource:
    """The built-in images: no columns, no splits, RGB already.

    Raises:
        InputError: when ``image_column``, ``convert_rgb`` or a split is given.
    """
    given = [p for p, v in (("image_column", image_column), ("convert_rgb", convert_rgb)) if v]
    if given:
        raise InputError(
            joined([Param(p) for p in given], " and ")
            + f" {'has' if len(given) == 1 else 'have'} no effect on the built-in images "
            "(RGB mosaics, no columns)"
        )
    no_split(split, "the built-in images")
    return BuiltinImages(limit=limit, seed=seed, device=device)


def _folder_images(target: Path, split: str, limit: int, image_column, convert_rgb: bool) -> ImageSource:
    """A folder: one written by ``save_to_disk``, a hub dataset's files, or image files.

    Raises:
        InputError: when ``image_column`` or a split is given for a folder of image files.
    """
    if is_saved_dataset(target):
        return TableImages(table_of(target, split), limit=limit, image_column=image_column, convert_rgb=convert_rgb)
    if not _has_image_files(target) and _has_dataset_files(target):
        # a dataset folder as the hub stores them (data/*.parquet ...): the datasets library reads it
        return HubImages(str(target), split=split, limit=limit, image_column=image_column, convert_rgb=convert_rgb)
    if image_column is not None:
        raise InputError(Param("image_column") + f" has no effect on an image folder ({target}): it has no columns")
    no_split(split, f"an image folder ({target})")
    return ImageFolder(target, limit=limit, convert_rgb=convert_rgb)


def _file_images(target: Path, split: str, limit: int, image_column, convert_rgb: bool) -> ImageSource:
    """A file: a ``.parquet`` or ``.arrow`` table of encoded images; anything else is refused.

    Raises:
        InputError: when ``target`` is a single image, any other file, or a split is given for a table file.
    """
    suffix = target.suffix.lower()
    if suffix in (".parquet", ".arrow"):
        no_split(split, f"a file ({target})")
    if suffix == ".parquet":
        return ParquetImages(target, limit=limit, image_column=image_column, convert_rgb=convert_rgb)
    if suffix == ".arrow":
        return TableImages(table_of(target), limit=limit, image_column=image_column, convert_rgb=convert_rgb)
    if suffix in IMAGE_EXTENSIONS:
        raise InputError(f"{target} is a single image; give the folder that holds the images")
    raise InputError(
        f"{target}: not an image source (give an image folder, a .parquet or .arrow file, a folder "
        "written by save_to_disk, a Hugging Face dataset id, or nothing for the built-in default)"
    )
