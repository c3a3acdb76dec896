"""Tests for mhaaudit.sources.mosaics: the built-in images' integer synthesis (same bits on every
device, exact orientation, bilinear sampling against a float reference) and its imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import devices

from mhaaudit.sources import mosaics as M
from mhaaudit.sources._common import data_rng

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def atlas():
    return M.atlas("cpu")


def _params(atlas, count=4, seed=7):
    return M.draw_params(data_rng(seed), count, atlas.sizes)


def test_photos_found_without_importing_their_packages():
    code = (
        "import sys; from mhaaudit.sources.images import BuiltinImages; "
        "s = BuiltinImages(limit=3); imgs = list(s); "
        "print(len(imgs), len(s.photos), 'sklearn' in sys.modules, 'skimage' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "3" and int(out[1]) >= 8
    assert out[2:] == ["False", "False"]


@pytest.mark.parametrize("device", devices())
def test_same_bits_on_every_device(atlas, device):
    params = _params(atlas, count=8)
    reference = M.synthesize(params, atlas)
    assert reference.dtype == torch.uint8 and reference.shape == (8, 224, 224, 3) and reference.device.type == "cpu"
    other = M.synthesize(params, M.atlas(device))
    assert other.device.type == torch.device(device).type
    assert torch.equal(other.cpu(), reference)


def test_images_do_not_depend_on_the_reader(atlas):
    first = torch.cat([x for _, x in zip(range(6), M.mosaics(5, atlas), strict=False)])
    again = torch.cat([x for _, x in zip(range(6), M.mosaics(5, atlas), strict=False)])
    assert torch.equal(first, again) and first.shape[0] == 6 * M.SLICE
    assert not torch.equal(first[:4], next(M.mosaics(6, atlas))[:4])
    # whatever the consumer's batch size, the source yields the same images
    from mhaaudit.sources import image_source

    def digests(batch):
        return [im.tobytes() for b in image_source(limit=37, seed=5).batches(batch) for im in b]

    assert digests(5) == digests(32) == [bytes(x.numpy().tobytes()) for x in first[:37]]


def _top_left(params, atlas):
    return M.synthesize(params, atlas)[0, : M.TILE, : M.TILE]


@pytest.mark.parametrize("turns", [0, 1, 2, 3])
@pytest.mark.parametrize("flip", [False, True])
def test_turns_and_flips_sample_the_turned_tile(atlas, turns, flip):
    params = {k: v[:1].copy() for k, v in _params(atlas).items()}
    params["turns"][:] = 0
    params["flip"][:] = False
    plain = _top_left(params, atlas)
    params["turns"][:] = turns
    params["flip"][:] = flip
    expected = torch.rot90(plain, turns, dims=(0, 1))
    if flip:
        expected = expected.flip(1)
    assert torch.equal(_top_left(params, atlas), expected)


def test_bilinear_sampling_matches_a_float_reference(atlas):
    photo = np.asarray([name for name, _, _ in M.load_photos()].index("astronaut"))
    params = {k: v[:1].copy() for k, v in _params(atlas).items()}
    params["photo"][:] = photo
    params["side"][:] = 120  # level 0: shrink factor 1.6
    params["left"][:], params["top"][:] = 100, 60
    params["turns"][:], params["flip"][:] = 0, False
    params["jitter"][:] = 1.0  # the identity colour map: A = 4096, B = C = 0
    got = _top_left(params, atlas).numpy().astype(float)
    image = M.load_photos()[int(photo)][2].astype(float)
    pos = (np.arange(M.TILE) + 0.5) * 120 / M.TILE - 0.5
    ys, xs = 60 + pos, 100 + pos
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    ref = (1 - fy) * ((1 - fx) * image[y0][:, x0] + fx * image[y0][:, x0 + 1]) + fy * (
        (1 - fx) * image[y0 + 1][:, x0] + fx * image[y0 + 1][:, x0 + 1]
    )
    assert np.abs(got - ref).max() <= 4.5  # weights in steps of 1/64 pixel
    assert np.abs(got - ref).mean() < 0.6


def test_colour_coefficients_compose_the_three_enhancements():
    jitter = np.array([[[1.0, 1.0, 1.0], [0.5, 1.0, 1.0], [1.0, 1.2, 0.8]]])
    a, b, c = M._colour_coefficients(jitter).T
    assert (a[0], b[0], c[0]) == (4096, 0, 0)
    assert (a[1], b[1], c[1]) == (2048, 2048, 0)  # half saturation: half the colour, half the luma
    assert (a[2], b[2], c[2]) == (round(0.96 * 4096), 0, round(0.2 * 1.2 * 4096))


def test_pyramid_levels_are_rounded_means(atlas):
    i = 0
    h, w = atlas.heights[i, 1], atlas.widths[i, 1]
    level1 = atlas.table[atlas.offsets[i, 1] : atlas.offsets[i, 1] + h * w]
    mask = (1 << M._LANE) - 1
    red = (level1 & mask).view(h, w)
    photo = torch.as_tensor(M.load_photos()[i][2][: 2 * h, : 2 * w, 0].astype(np.int64))
    expected = (photo.view(h, 2, w, 2).sum((1, 3)) + 2) // 4
    assert torch.equal(red, expected)


def _first(images, count: int) -> list[bytes]:
    return [next(images).numpy().tobytes() for _ in range(count)]


def test_images_made_ahead_are_the_images_of_the_seed():
    """Images made ahead on a helper thread, then the rest of their generator: the same images as a source
    that made them all itself; taken once (the next source makes its own)."""
    seed = 11
    M.make_ahead(seed, "cpu", images=20)
    M.make_ahead(seed, "cpu", images=20)  # already being made: nothing more
    assert len([k for k in M._AHEAD if k == (seed, "cpu")]) == 1
    assert M._AHEAD[(seed, "cpu")].slices == 3  # whole slices of 8 holding 20 images
    ahead = M.mosaics_for(seed, "cpu")
    assert (seed, "cpu") not in M._AHEAD
    assert _first(ahead, 5) == _first(M.mosaics(seed, M.atlas("cpu")), 5)
    assert _first(M.mosaics_for(seed, "cpu"), 2) == _first(M.mosaics(seed, M.atlas("cpu")), 2)
    M.make_ahead(seed + 1, "cpu", images=10**6)  # never more than AHEAD_IMAGES
    assert M._AHEAD[(seed + 1, "cpu")].slices == M.AHEAD_IMAGES // M.SLICE
    M.mosaics_for(seed + 1, "cpu")


def test_images_nobody_reads_are_stopped_before_the_interpreter_ends():
    """A run that fails before it reads its images (a model that cannot be loaded) leaves its helper making
    them: the exit (workers.stop_helpers) stops it after its slice and waits. Without it, the helper was torn
    down inside torch's native code at the interpreter's end, and the process died of SIGABRT ("terminate
    called without an active exception") in about one exit in three, instead of ending with the run's status."""
    from mhaaudit import workers

    M.make_ahead(21, "cpu")
    ahead = M._AHEAD[(21, "cpu")]
    assert ahead.thread in workers._HELPERS
    workers.stop_helpers()
    assert not ahead.thread.is_alive() and ahead.thread not in workers._HELPERS
    assert _first(M.mosaics_for(21, "cpu"), 2) == _first(M.mosaics(21, M.atlas("cpu")), 2)  # the reader makes its own
    script = (
        "import sys, time\n"
        "from mhaaudit.sources.mosaics import make_ahead\n"
        "make_ahead(0, 'cpu')\n"
        "time.sleep(float(sys.argv[1]))\n"
        "sys.exit(2)\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(0.1 * i)], cwd=ROOT, stderr=subprocess.PIPE)
        for i in range(6)
    ]
    ends = [(p.wait(timeout=120), p.stderr.read().decode()) for p in procs]
    assert all(code == 2 for code, _ in ends), ends


def test_a_failure_ahead_is_met_again_by_the_reader(monkeypatch):
    """Making images ahead fails quietly (nothing on stderr); the source then makes them itself and meets the
    same error there."""
    calls = []

    def broken(device="cpu"):
        calls.append(device)
        raise OSError("no photographs")

    monkeypatch.setattr(M, "atlas", broken)
    M.make_ahead(12, "cpu")
    with pytest.raises(OSError, match="no photographs"):
        M.mosaics_for(12, "cpu")
    assert calls == ["cpu", "cpu"] and (12, "cpu") not in M._AHEAD


def test_a_run_makes_its_first_images_ahead_only_with_the_built_in_images_on_the_cpu(monkeypatch):
    from mhaaudit import capture
    from mhaaudit.request import DataRequest
    from mhaaudit.settings import Settings
    from mhaaudit.sources import images

    started = []
    monkeypatch.setattr(images, "make_ahead", lambda seed, device, images: started.append((seed, device, images)))
    settings = Settings.resolve(device="cpu", data_seed=5)
    capture.images_ahead(DataRequest(), settings)
    capture.images_ahead(DataRequest(data="builtin", limit=10), settings)
    capture.images_ahead(DataRequest(data="some/folder"), settings)
    assert started == [(5, "cpu", DataRequest().limit), (5, "cpu", 10)]


def test_no_images_are_made_ahead_when_a_pass_s_inputs_are_fed_again(monkeypatch):
    """The checkpoints of a series after the first feed the inputs the first pass kept: the data is not read
    again, so no image is made ahead for it."""
    from mhaaudit import capture, pipeline
    from mhaaudit.request import DataRequest
    from mhaaudit.settings import Settings
    from mhaaudit.sources import images

    started = []
    monkeypatch.setattr(images, "make_ahead", lambda seed, device, images: started.append((seed, device)))
    settings = Settings.resolve(device="cpu", data_seed=3)
    with pipeline.kept_inputs() as kept:
        capture.images_ahead(DataRequest(), settings)  # the first pass reads the data
        kept.info = object()  # what a first pass keeps
        capture.images_ahead(DataRequest(), settings)
    assert started == [(3, "cpu")]
