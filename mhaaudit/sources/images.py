"""Image sources: the built-in offline default, image folders, parquet files of image bytes, and
Hugging Face datasets (streamed).

Every source yields RGB ``PIL.Image.Image`` objects in a deterministic order and counts what it
had to skip. Folders, parquet files and datasets are decoded on a pool of threads, in order. Like the paper (which kept the RGB images among 2000 ImageNet images), sources keep
images whose mode is already RGB and count every other image (grayscale, CMYK, RGBA, palette) as
skipped, as well as files that cannot be decoded. ``limit`` caps the number of images yielded.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Iterator

from PIL import Image, UnidentifiedImageError

from ..errors import DataError, InputError, one_line
from ._common import classify, is_builtin, is_local, open_hf_dataset, ordered_map, stream_rows
from .mosaics import BUILTIN_PHOTOS, CROP_SIZE, GRID, TILE_SIDE

__all__ = [
    "ImageSource",
    "BuiltinImages",
    "ImageFolder",
    "ParquetImages",
    "HubImages",
    "image_source",
    "IMAGE_EXTENSIONS",
    "BUILTIN_PHOTOS",
]

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp",
     ".ppm", ".pgm", ".pbm", ".pnm"}
)
_OFFLINE_IMAGES = "a local image folder, a .parquet file of image bytes, or the built-in default (no --data)"


def _decode(value: Any, base: Path | None = None) -> Image.Image | None:
    """An RGB image from a PIL image, bytes, a path, or a {"bytes", "path"} dict; None when it
    cannot be decoded or is not RGB. The sources call it on a pool of threads
    (:func:`~._common.ordered_map`), keeping their order; PIL's warnings about odd files go
    through the process's warning filters (``warnings.catch_warnings`` is not thread-safe)."""
    try:
        if isinstance(value, Image.Image):
            image = value
            image.load()
        else:
            if isinstance(value, dict):
                raw = value.get("bytes")
                if raw is None and value.get("path"):
                    path = Path(value["path"])
                    if not path.is_absolute() and base is not None:
                        path = base / path
                    raw = path.read_bytes()
                value = raw
            if isinstance(value, (str, Path)):
                value = Path(value).read_bytes()
            if not isinstance(value, (bytes, bytearray, memoryview)):
                return None
            image = Image.open(io.BytesIO(bytes(value)))
            image.load()
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None
    return image if image.mode == "RGB" else None


class ImageSource:
    """An iterable of RGB ``PIL.Image.Image`` in a deterministic order.

    ``name`` describes the source in plain words for reports; ``skipped`` counts the items the
    current (or last) pass skipped because they were unreadable or not RGB; ``total`` is the
    most images a full pass can yield when known in advance (exact for the built-in source; an
    upper bound for folders and parquet files, where some items may be skipped; None for
    streamed datasets); ``limit`` caps the number yielded.
    Each ``iter()`` starts a fresh pass and resets ``skipped``.
    """

    name: str
    skipped: int
    total: int | None
    limit: int

    def __init__(self, name: str, limit: int, total: int | None = None) -> None:
        self.name = name
        self.limit = limit
        self.total = total
        self.skipped = 0

    def _generate(self) -> Iterator[Image.Image]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __iter__(self) -> Iterator[Image.Image]:
        self.skipped = 0
        yielded = 0
        if self.limit <= 0:
            return
        for image in self._generate():
            yield image
            yielded += 1
            if yielded >= self.limit:
                return
        if yielded == 0:
            raise DataError(f"{self.name}: no readable RGB images ({self.skipped} skipped)")

    def batches(self, batch_size: int) -> Iterator[list[Image.Image]]:
        """Lists of up to ``batch_size`` images (the last one may be shorter)."""
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

    def __init__(self, limit: int = 2000, seed: int = 0, device: Any = None) -> None:
        from .mosaics import load_photos

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
        from .mosaics import atlas, mosaics

        return mosaics(self.seed, atlas(self.device))

    def _generate(self) -> Iterator[Image.Image]:
        for chunk in self.arrays():
            for array in chunk.cpu().numpy():
                yield Image.fromarray(array, "RGB")


class ImageFolder(ImageSource):
    """Image files under a folder (recursive, common extensions, sorted by relative path)."""

    def __init__(self, root: Path, limit: int = 2000) -> None:
        self.root = root
        try:
            files = [
                p for p in root.rglob("*")
                if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(root).parts)
            ]
        except OSError as exc:
            raise DataError(f"cannot list image folder {root}: {one_line(exc, 300, first_line=True)}") from None
        if not files:
            exts = ", ".join(sorted(e.lstrip(".") for e in IMAGE_EXTENSIONS))
            raise DataError(f"image folder {root} holds no image files ({exts})")
        self.files = sorted(files, key=lambda p: p.relative_to(root).as_posix())
        super().__init__(
            f"image folder {root} ({len(self.files)} files, RGB only)", limit,
            total=min(limit, len(self.files)),
        )

    def _generate(self) -> Iterator[Image.Image]:
        for image in ordered_map(_decode, self.files):
            if image is None:
                self.skipped += 1
                continue
            yield image


def _image_column_of(schema, wanted: str | None, label: str) -> str:
    import pyarrow as pa

    names = list(schema.names)
    if wanted is not None:
        if wanted not in names:
            raise InputError(f"{label} has no column '{wanted}'; its columns: {', '.join(names)}")
        return wanted

    def holds_bytes(name: str) -> bool:
        t = schema.field(name).type
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return True
        return pa.types.is_struct(t) and any(t.field(i).name == "bytes" for i in range(t.num_fields))

    for name in ("image", "img", "images", "picture", "jpg", "jpeg", "png"):
        if name in names and holds_bytes(name):
            return name
    for name in names:
        if holds_bytes(name):
            return name
    raise DataError(f"{label} has no column of image bytes; its columns: {', '.join(names)} "
                    "(name one with image_column)")


class ParquetImages(ImageSource):
    """A column of encoded images in a parquet file: ``{"bytes": ..., "path": ...}`` structs as
    Hugging Face writes them, or raw bytes. Read one record batch at a time."""

    def __init__(self, path: Path, limit: int = 2000, image_column: str | None = None) -> None:
        import pyarrow.parquet as pq

        self.path = path
        try:
            meta = pq.ParquetFile(path)
        except Exception as exc:
            raise DataError(f"cannot read parquet file {path}: {one_line(exc, 300, first_line=True)}") from None
        self.column = _image_column_of(meta.schema_arrow, image_column, f"parquet file {path}")
        rows = meta.metadata.num_rows
        super().__init__(
            f"parquet file {path}, column '{self.column}' ({rows} rows, RGB only)", limit,
            total=min(limit, rows),
        )

    def _generate(self) -> Iterator[Image.Image]:
        import pyarrow.parquet as pq

        try:
            reader = pq.ParquetFile(self.path)
            values = (v for batch in reader.iter_batches(batch_size=64, columns=[self.column])
                      for v in batch.column(0).to_pylist())
            for image in ordered_map(lambda v: _decode(v, base=self.path.parent), values):
                if image is None:
                    self.skipped += 1
                    continue
                yield image
        except OSError as exc:
            raise DataError(f"reading parquet file {self.path} failed: {one_line(exc, 300, first_line=True)}") from None


class HubImages(ImageSource):
    """A Hugging Face dataset (hub id or local dataset folder), streamed in its own order."""

    def __init__(self, data: str, split: str = "train", limit: int = 2000,
                 image_column: str | None = None) -> None:
        dataset = open_hf_dataset(data, split=split, what="image", instead=_OFFLINE_IMAGES)
        import datasets  # after the offline check: importing it takes seconds

        features = dataset.features
        if image_column is not None:
            if features is not None and image_column not in features:
                raise InputError(f"dataset '{data}' has no column '{image_column}'; "
                                 f"its columns: {', '.join(features)}")
            column = image_column
        elif features is not None:
            candidates = [c for c in ("image", "img") if c in features]
            candidates += [c for c, f in features.items() if isinstance(f, datasets.Image)]
            if not candidates:
                raise DataError(f"dataset '{data}' has no 'image' or 'img' column; its columns: "
                                f"{', '.join(features)} (name one with image_column)")
            column = candidates[0]
        else:
            column = None  # features unknown until the first row: "image", else "img"
        if features is not None:
            if isinstance(features[column], datasets.Image):
                # decode here, so that one corrupt image is skipped instead of ending the stream
                dataset = dataset.cast_column(column, datasets.Image(decode=False))
            dataset = dataset.select_columns([column])
        self.data, self.split, self.column = data, split, column
        self.dataset = dataset
        where = f"dataset folder {data}" if is_local(data) else f"hub dataset {data}"
        super().__init__(f"{where} split {split} (streamed, RGB only)", limit)

    def _values(self) -> Iterator[Any]:
        for row in stream_rows(self.dataset, self.data):
            if self.column is None:
                self.column = next((c for c in ("image", "img") if c in row), None)
            if self.column is None or self.column not in row:
                wanted = f"column '{self.column}'" if self.column else "'image' or 'img' column"
                raise DataError(f"dataset '{self.data}' has no {wanted}; its columns: "
                                f"{', '.join(row)} (name one with image_column)")
            yield row[self.column]

    def _generate(self) -> Iterator[Image.Image]:
        for image in ordered_map(_decode, self._values()):
            if image is None:
                self.skipped += 1
                continue
            yield image


_DATASET_SUFFIXES = frozenset({".parquet", ".arrow"})


def _has_image_files(root: Path) -> bool:
    return any(p.suffix.lower() in IMAGE_EXTENSIONS for p in root.rglob("*"))


def _has_dataset_files(root: Path) -> bool:
    return any(p.suffix.lower() in _DATASET_SUFFIXES for p in root.rglob("*"))


def image_source(data: str | None = None, *, split: str = "train", limit: int = 2000, seed: int = 0,
                 image_column: str | None = None, device: Any = None) -> ImageSource:
    """The image source that ``data`` names.

    - ``None`` or ``"builtin"``: the built-in offline default (:class:`BuiltinImages`; uses ``seed``,
      synthesised on ``device``, the CPU by default: the same images on every device);
    - an existing folder: its image files, recursively (:class:`ImageFolder`); a folder with no
      image files but parquet/arrow files is read as a Hugging Face dataset folder (below);
    - a ``.parquet`` file: a column of encoded images (:class:`ParquetImages`; ``image_column``);
    - anything else (or a string prefixed ``hf:``): a Hugging Face dataset id, or a local dataset
      folder after ``hf:``, streamed with ``datasets.load_dataset(data, split=split,
      streaming=True)``, images from the ``image``/``img`` column (:class:`HubImages`).

    ``limit`` caps the number of images yielded. Folder, parquet and hub sources keep their own
    order (``seed`` is not used). Raises DataError for a missing path, an empty folder or an
    unknown split, OfflineError for a hub id while offline, InputError for bad arguments.
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InputError(f"limit must be a positive number of images, got {limit!r}")
    if is_builtin(data):
        return BuiltinImages(limit=limit, seed=seed, device=device)
    kind, target = classify(data)
    if kind == "dir":
        if not _has_image_files(target) and _has_dataset_files(target):
            # a dataset folder as the hub stores them (data/*.parquet ...): the datasets library reads it
            return HubImages(str(target), split=split, limit=limit, image_column=image_column)
        return ImageFolder(target, limit=limit)
    if kind == "file":
        if target.suffix.lower() == ".parquet":
            return ParquetImages(target, limit=limit, image_column=image_column)
        if target.suffix.lower() in IMAGE_EXTENSIONS:
            raise InputError(f"{target} is a single image; give the folder that holds the images")
        raise InputError(f"{target}: not an image source (give an image folder, a .parquet file, "
                         "a Hugging Face dataset id, or nothing for the built-in default)")
    return HubImages(target, split=split, limit=limit, image_column=image_column)
