"""The built-in images: seeded mosaics of random crops of photographs that ship inside installed
packages, synthesised with vectorised integer torch operations.

Each image is a 3 x 3 grid of 75 x 75 tiles (cropped to 224 x 224); each tile is an independent
square crop of a photograph chosen uniformly (side uniform in ``TILE_SIDE`` of the photograph's
shorter side, uniform position), resampled to 75 x 75, turned by a multiple of 90 degrees,
flipped with probability 0.5 and jittered in colour saturation, brightness and contrast (factors
uniform in ``JITTER``, applied in that order as PIL's ``ImageEnhance`` does).

**Same bits on every device.** The random parameters are drawn on the CPU with numpy
(:func:`~._common.data_rng`), in chunks of ``CHUNK`` images whatever the consumer's batch size,
so the images of a seed do not depend on how they are read, and the first m of ``limit`` images
are those of any larger ``limit``. Every step that produces pixel values is exact integer
arithmetic: the photographs are kept as mipmap pyramids (each level the rounded 2 x 2 mean of the
one below); a tile is resampled bilinearly from the level that leaves a shrink factor in [1, 2),
with sample positions and weights in integer arithmetic (weights in units of 1/64 per axis, the
three colour lanes of a packed int64 pixel blended at once, rounded once at the end); the colour
jitter is one integer affine map per tile over PIL's integer luma and its rounded mean
(:func:`_colour_coefficients`). Integer gathers, products, sums, shifts and floor divisions give
the same result on any device and in any summation order, so :func:`synthesize` gives the same
uint8 images on the CPU and on a GPU (the test suite checks every device it finds). The images
of version 1 (PIL resizes and ``ImageEnhance``, one tile at a time) differ.

``VERSION`` names this synthesis; it changes whenever the images of a seed change.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import itertools
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from ..numerics.threads import intra_op_threads
from ..workers import helper_thread
from ._common import data_rng

__all__ = [
    "AHEAD_IMAGES",
    "BUILTIN_PHOTOS",
    "CHUNK",
    "CROP_SIZE",
    "GRID",
    "JITTER",
    "SLICE",
    "TILE",
    "TILE_SIDE",
    "VERSION",
    "Atlas",
    "atlas",
    "draw_params",
    "load_photos",
    "make_ahead",
    "mosaics",
    "mosaics_for",
    "synthesize",
]

VERSION = 2
CROP_SIZE = 224
GRID = 3
TILE = -(-CROP_SIZE // GRID)  # 75: the 3 x 3 grid is 225 pixels wide, cropped to 224
TILE_SIDE = (0.14, 0.7)  # side of a tile's square crop, as a fraction of the photograph's shorter side
JITTER = (0.6, 1.4)  # colour saturation, brightness and contrast factors
CHUNK = 32  # images whose parameters are drawn together
SLICE = 8  # images synthesised together (about 25 MB of temporaries)
MIN_SIDE = 16

_W = 1 << 6  # unit of the bilinear weights (per axis): samples are placed to 1/64 pixel
_LANE = 20  # bits per colour lane of a packed pixel: 255 * _W**2 < 2**20
_F = 1 << 12  # unit of the colour coefficients
_LUMA = (19595, 38470, 7471)  # PIL's ITU-R 601-2 luma in units of 1/65536

# The colour photographs that ship inside the scikit-image and scikit-learn wheels, found by
# file path (nothing is imported). Grayscale pictures (camera, moon, coins, ...) are left out, in
# line with the paper keeping RGB images only; so are drawings and synthetic images (logo,
# colorwheel). A photograph that is missing or not RGB is skipped and left out of the name.
BUILTIN_PHOTOS: tuple[tuple[str, str, str], ...] = (
    ("astronaut", "skimage", "data/astronaut.png"),
    ("chelsea", "skimage", "data/chelsea.png"),
    ("coffee", "skimage", "data/coffee.png"),
    ("rocket", "skimage", "data/rocket.jpg"),
    ("hubble_deep_field", "skimage", "data/hubble_deep_field.jpg"),
    ("immunohistochemistry", "skimage", "data/ihc.png"),
    ("retina", "skimage", "data/retina.jpg"),
    ("motorcycle_left", "skimage", "data/motorcycle_left.png"),
    ("motorcycle_right", "skimage", "data/motorcycle_right.png"),
    ("china.jpg", "sklearn", "datasets/images/china.jpg"),
    ("flower.jpg", "sklearn", "datasets/images/flower.jpg"),
)


def _package_file(package: str, relative: str) -> Path | None:
    """A data file of an installed package, found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(root) / relative
        if path.is_file():
            return path
    return None


@functools.lru_cache(maxsize=1)
def load_photos() -> tuple[tuple[str, str, np.ndarray], ...]:
    """``(name, package, H x W x 3 uint8 array)`` for each photograph of ``BUILTIN_PHOTOS`` found."""
    from PIL import Image

    photos = []
    for name, package, relative in BUILTIN_PHOTOS:
        path = _package_file(package, relative)
        if path is None:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with Image.open(path) as image:
                    if image.mode != "RGB":
                        continue
                    array = np.asarray(image, dtype=np.uint8)
        except (OSError, ValueError, SyntaxError):
            continue
        if array.ndim == 3 and array.shape[2] == 3 and min(array.shape[:2]) >= TILE:
            photos.append((name, package, np.ascontiguousarray(array)))
    return tuple(photos)


class Atlas:
    """Every level of every photograph's pyramid in one flat int64 table of packed pixels on a device
    (red, green and blue in 20-bit lanes, so that a bilinear blend of packed pixels blends each lane
    without carries).

    Level 0 is the photograph; level l + 1 is the rounded mean of 2 x 2 blocks of level l (an odd
    last row or column dropped), made while its shorter side stays at least ``TILE``.
    ``offsets``, ``heights`` and ``widths`` are ``(photos, levels)`` arrays (a photograph with
    fewer levels repeats its last one there); ``depth`` counts each photograph's own levels.
    """

    def __init__(self, photos: list[np.ndarray], device) -> None:
        self.device = torch.device(device)
        self.sizes = [(int(p.shape[0]), int(p.shape[1])) for p in photos]  # level-0 (height, width)
        pyramids = []  # packed int64 levels, built one at a time with numpy (exact integers)
        for p in photos:
            level = p.astype(np.uint16)
            pyramid = [_pack(level)]
            while min(level.shape[:2]) // 2 >= TILE:
                level = _halved(level)
                pyramid.append(_pack(level))
            pyramids.append(pyramid)
        self.depth = np.array([len(p) for p in pyramids], dtype=np.int64)
        self.levels = int(self.depth.max())
        shape = (len(photos), self.levels)
        self.offsets, self.heights, self.widths = (np.zeros(shape, dtype=np.int64) for _ in range(3))
        at = 0
        for i, pyramid in enumerate(pyramids):
            for lev in range(self.levels):
                level = pyramid[min(lev, len(pyramid) - 1)]
                if lev < len(pyramid):
                    start, at = at, at + level.size
                self.offsets[i, lev], (self.heights[i, lev], self.widths[i, lev]) = start, level.shape
        self.table = torch.from_numpy(np.concatenate([lv.reshape(-1) for pyr in pyramids for lv in pyr])).to(
            self.device
        )


def _halved(level: np.ndarray) -> np.ndarray:
    """The rounded mean of each 2 x 2 block of the ``(H, W, 3)`` uint16 ``level`` (an odd last row or column
    dropped): four strided sums, at most 4 x 255 + 2, exact in uint16."""
    h, w = level.shape[0] // 2 * 2, level.shape[1] // 2 * 2
    out = level[0:h:2, 0:w:2] + level[1:h:2, 0:w:2]
    out += level[0:h:2, 1:w:2]
    out += level[1:h:2, 1:w:2]
    out += 2
    out //= 4
    return out


def _pack(level: np.ndarray) -> np.ndarray:
    """``(H, W)`` int64 pixels with red, green and blue in 20-bit lanes."""
    out = level[..., 0].astype(np.int64)
    out |= level[..., 1].astype(np.int64) << _LANE
    out |= level[..., 2].astype(np.int64) << (2 * _LANE)
    return out


def draw_params(rng: np.random.Generator, count: int, sizes: list[tuple[int, int]]) -> dict[str, np.ndarray]:
    """The random parameters of ``count`` images (``GRID ** 2`` tiles each), drawn from ``rng`` in a
    fixed order: photograph, side, left, top, quarter turns, flip, then the three colour factors."""
    shape = (count, GRID * GRID)
    heights = np.array([h for h, _ in sizes], dtype=np.int64)
    widths = np.array([w for _, w in sizes], dtype=np.int64)
    photo = rng.integers(len(sizes), size=shape)
    h, w = heights[photo], widths[photo]
    side = np.maximum(MIN_SIDE, np.rint(np.minimum(h, w) * rng.uniform(*TILE_SIDE, size=shape)).astype(np.int64))
    side = np.minimum(side, np.minimum(h, w))
    left = np.minimum(np.floor(rng.random(shape) * (w - side + 1)).astype(np.int64), w - side)
    top = np.minimum(np.floor(rng.random(shape) * (h - side + 1)).astype(np.int64), h - side)
    turns = rng.integers(4, size=shape)
    flip = rng.random(shape) < 0.5
    jitter = rng.uniform(*JITTER, size=(*shape, 3))
    return {"photo": photo, "side": side, "left": left, "top": top, "turns": turns, "flip": flip, "jitter": jitter}


def _colour_coefficients(jitter: np.ndarray) -> np.ndarray:
    """``(A, B, C)`` per tile, in units of 1/4096, of the colour jitter ``out = A x + B luma(x) + C
    mean(luma(x))``: saturation s, then brightness b, then contrast k (PIL's ``ImageEnhance``
    order) composed into one affine map, rounded once: A = k b s, B = k b (1 - s), C = (1 - k) b.
    Computed with numpy in float64 on the CPU, so every device gets the same integers."""
    s, b, k = (jitter[..., i].reshape(-1) for i in range(3))
    return np.rint(np.stack([k * b * s, k * b * (1 - s), (1 - k) * b], 1) * _F).astype(np.int64)


def _level(side: np.ndarray, photo: np.ndarray, atlas: Atlas) -> np.ndarray:
    """The pyramid level of each tile: the deepest l with side >= TILE * 2**l that its photograph has."""
    level = np.zeros_like(side)
    for lev in range(1, atlas.levels):
        level += (side >= (TILE << lev)) & (atlas.depth[photo] > lev)
    return level


def _axis(start, side, level, limit, row_stride):
    """Bilinear taps along one axis for every tile: ``(p0, p1, w1)``, each ``(N, TILE)`` int32;
    ``p`` are the taps' positions times ``row_stride`` (1 along a row, the level's width down a column).

    Output pixel j of a tile covering ``[start, start + side)`` samples the tile's pyramid level at
    ``(start + (j + 1/2) side / TILE) / 2**level - 1/2``, written as an integer fraction; its floor
    and its remainder in units of 1/2048 (rounded half up) are exact integer results.
    """
    j = torch.arange(TILE, device=start.device, dtype=torch.int64)[None, :]
    scale = torch.bitwise_left_shift(torch.ones_like(level), level)[:, None]  # 2**level
    num = 2 * TILE * start[:, None] + (2 * j + 1) * side[:, None] - TILE * scale
    den = 2 * TILE * scale
    i0 = torch.div(num, den, rounding_mode="floor")
    w1 = torch.div((num - i0 * den) * _W + den // 2, den, rounding_mode="floor")
    top, stride = (limit - 1)[:, None], row_stride[:, None]
    p0, p1 = i0.clamp(min=0).minimum(top) * stride, (i0 + 1).clamp(min=0).minimum(top) * stride
    return p0, p1, w1


def _oriented(y, x, turns, flip):
    """The taps of the output's rows and columns once a tile is turned by ``turns`` quarter turns
    counter-clockwise (``torch.rot90``) and then flipped left-right: a turn swaps the axes and
    reverses one, so the turned tile is sampled directly (``y`` and ``x``: tuples of (N, TILE))."""
    odd = (turns % 2 == 1)[:, None]
    rev_rows = ((turns == 1) | (turns == 2))[:, None]
    rev_cols = (((turns == 2) | (turns == 3)) ^ flip)[:, None]
    rows = tuple(torch.where(odd, b, a) for a, b in zip(y, x, strict=False))
    cols = tuple(torch.where(odd, a, b) for a, b in zip(y, x, strict=False))
    rows = tuple(torch.where(rev_rows, r.flip(1), r) for r in rows)
    cols = tuple(torch.where(rev_cols, c.flip(1), c) for c in cols)
    return rows, cols


def _luma(r, g, b):
    """PIL's integer luma (ITU-R 601-2), rounded."""
    return (r * _LUMA[0] + g * _LUMA[1] + b * _LUMA[2] + (1 << 15)) >> 16


def synthesize(params: dict[str, np.ndarray], atlas: Atlas):
    """The ``(count, 224, 224, 3)`` uint8 images of ``params`` (from :func:`draw_params`), computed
    on the atlas's device with integer operations only."""
    dev = atlas.device
    count = params["photo"].shape[0]
    photo, side = params["photo"].reshape(-1), params["side"].reshape(-1)
    level = _level(side, photo, atlas)

    def t(a):
        return torch.as_tensor(np.ascontiguousarray(a), device=dev)

    lv, sd, width = t(level), t(side), t(atlas.widths[photo, level])
    y = _axis(t(params["top"].reshape(-1)), sd, lv, t(atlas.heights[photo, level]), width)
    x = _axis(t(params["left"].reshape(-1)), sd, lv, width, torch.ones_like(width))
    (r0, r1, wr), (c0, c1, wc) = _oriented(y, x, t(params["turns"].reshape(-1)), t(params["flip"].reshape(-1)))
    base = t(atlas.offsets[photo, level])[:, None, None]
    wr, wc = wr[:, :, None], wc[:, None, :]

    def tap(rows, cols, weight):  # (N, TILE, TILE) packed pixels at the given positions, times weight
        where = (base + rows[:, :, None]) + cols[:, None, :]
        return atlas.table.index_select(0, where.view(-1)).view(-1, TILE, TILE).mul_(weight)

    # one bilinear blend of packed pixels blends the three 20-bit lanes at once (no carries: every
    # weight is non-negative and every lane stays below 255 * 64 * 64 < 2**20); in place, so that
    # three (N, TILE, TILE) int64 buffers are alive at most
    packed = tap(r0, c0, _W - wc).add_(tap(r0, c1, wc)).mul_(_W - wr)
    packed.add_(tap(r1, c0, _W - wc).add_(tap(r1, c1, wc)).mul_(wr))
    mask, half = (1 << _LANE) - 1, (_W * _W) // 2
    rgb = [(((packed >> (_LANE * i)) & mask) + half).to(torch.int32) >> 12 for i in range(3)]
    del packed
    luma = _luma(*rgb)
    n = TILE * TILE
    mean = torch.div(luma.sum((1, 2), dtype=torch.int64) + n // 2, n, rounding_mode="floor").to(torch.int32)
    a, b, c = t(_colour_coefficients(params["jitter"])).to(torch.int32).T[:, :, None, None]
    shared = b * luma + (c * mean[:, None, None] + _F // 2)
    tiles = torch.stack([((a * x + shared) >> 12).clamp_(0, 255).to(torch.uint8) for x in rgb], -1)
    grid = tiles.view(count, GRID, GRID, TILE, TILE, 3).transpose(2, 3)
    return grid.reshape(count, GRID * TILE, GRID * TILE, 3)[:, :CROP_SIZE, :CROP_SIZE].contiguous()


@functools.lru_cache(maxsize=2)
def atlas(device: str = "cpu") -> Atlas:
    """The :class:`Atlas` of the photographs found, on ``device`` (kept for the process)."""
    return Atlas([array for _, _, array in load_photos()], device)


@contextlib.contextmanager
def _one_thread(device) -> Iterator[None]:
    """On the CPU, synthesise on one intra-op thread. The synthesis runs on the pipeline's reader
    thread beside the forward pass, which takes the cores; a second team of threads on the same
    cores made it ten times slower on a busy 2-core machine. The count
    (:func:`~mhaaudit.numerics.threads.intra_op_threads`) is the calling thread's (other running
    threads keep theirs) and the default of threads not yet started; it is restored at once."""
    with intra_op_threads(1 if device.type == "cpu" else None):
        yield


def mosaics(seed: int, where: Atlas) -> Iterator:
    """Endless ``(m, 224, 224, 3)`` uint8 tensors (on the atlas's device, m <= ``SLICE``) of
    distinct mosaics for ``seed``; their parameters are drawn ``CHUNK`` images at a time, and a
    drawn image whose parameters repeat an earlier image's is dropped, so all are distinct."""
    rng = data_rng(seed)
    seen: set[bytes] = set()
    while True:
        params = draw_params(rng, CHUNK, where.sizes)
        keys = np.concatenate(
            [
                np.stack([params[k] for k in ("photo", "side", "left", "top", "turns", "flip")], -1).reshape(CHUNK, -1),
                params["jitter"].reshape(CHUNK, -1).view(np.int64),
            ],
            1,
        )
        keep = []
        for i in range(CHUNK):
            key = keys[i].tobytes()
            if key not in seen:
                seen.add(key)
                keep.append(i)
        for i in range(0, len(keep), SLICE):
            with _one_thread(where.device):
                images = synthesize({k: v[keep[i : i + SLICE]] for k, v in params.items()}, where)
            yield images


#: The most images :func:`make_ahead` makes (two batches of 32)
AHEAD_IMAGES = 64


class _Ahead:
    """The first ``slices`` outputs of ``mosaics(seed, atlas(device))``, made on a helper thread, and the
    generator that continues them."""

    def __init__(self, seed: int, device: str, slices: int) -> None:
        self.seed, self.device, self.slices = seed, device, slices
        self.made: list[torch.Tensor] = []
        self.rest: Iterator | None = None
        self.stop = threading.Event()  # set at exit (workers.stop_helpers) when no run read the images
        self.thread = helper_thread(self._make, "mhaaudit-mosaics-ahead", self.stop, AHEAD_EXIT_WAIT_S)

    def _make(self) -> None:
        try:
            images = mosaics(self.seed, atlas(self.device))
            for _ in range(self.slices):
                if self.stop.is_set():  # the process is ending first: nobody will read them
                    raise _Stopped
                self.made.append(next(images))
            self.rest = images
        except Exception:  # noqa: BLE001 - not kept: the reader makes the images itself and meets it there
            self.made, self.rest = [], None

    def images(self) -> Iterator | None:
        """The images made ahead, then the rest; None when making them failed."""
        self.thread.join()
        if self.rest is None:
            return None
        made, self.made = self.made, []
        return itertools.chain(made, self.rest)


class _Stopped(Exception):
    """Making images ahead was stopped: the process is ending."""


_AHEAD: dict[tuple[int, str], _Ahead] = {}
_AHEAD_LOCK = threading.Lock()

#: How long the exit waits for a helper making images no run read (it stops after the slice it is making:
#: a run that fails before it reads its images, a model that cannot be loaded, leaves it running)
AHEAD_EXIT_WAIT_S = 60.0


def make_ahead(seed: int, device: str = "cpu", images: int = AHEAD_IMAGES) -> None:
    """Start making the first ``images`` images of ``seed`` (``AHEAD_IMAGES`` at most, in whole slices) on
    ``device`` on a helper thread, for the next :func:`mosaics_for` of that seed and device to take: a run
    starts this before it loads its model, so its first batch need not wait for them (the atlas too is
    built there). Nothing when they are already being made; an error is not raised here (the reader meets
    it again)."""
    key = (int(seed), str(device))
    slices = max(1, -(-min(int(images), AHEAD_IMAGES) // SLICE))
    with _AHEAD_LOCK:
        if key not in _AHEAD:  # its helper starts here (it never takes the lock)
            _AHEAD[key] = _Ahead(key[0], key[1], slices)


def mosaics_for(seed: int, device: str = "cpu") -> Iterator:
    """``mosaics(seed, atlas(device))``, beginning with the images :func:`make_ahead` made for that seed and
    device, if any (the same images: the generator they came from continues)."""
    with _AHEAD_LOCK:
        ahead = _AHEAD.pop((int(seed), str(device)), None)
    images = ahead.images() if ahead is not None else None
    return images if images is not None else mosaics(seed, atlas(device))
