"""Tests for mhaaudit.sources.duplicates: exact duplicate inputs planted among images, token
sequences and preprocessed batches are found, named and dropped (or kept when asked)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from mhaaudit.sources import DuplicateFinder, Duplicates, find_duplicates, image_source
from mhaaudit.sources.duplicates import batch_keys, input_key, sequence_key


def _image(seed: int, size=(16, 12)) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8), "RGB")


def test_token_sequences_with_planted_duplicates():
    seqs = [[5, 6, 7], [1, 2, 3], [5, 6, 7], [9], [1, 2, 3], [5, 6, 7], [5, 6]]
    found = find_duplicates(seqs)
    assert isinstance(found, Duplicates)
    assert found.kept == (0, 1, 3, 6) and found.total == 7
    assert found.repeats == found.dropped == 3
    assert found.example == (0, 2)  # the first repeat found, with its earlier twin
    assert found.describe("token windows") == (
        "3 of 7 token windows repeat an earlier one exactly (e.g. #2 = #0); dropped, 4 kept"
    )
    assert found.as_dict() == {"total": 7, "repeats": 3, "dropped": 3, "example": [0, 2]}
    # the integer type does not matter, the order of the tokens does
    assert sequence_key(np.array([5, 6, 7], dtype=np.int32)) == sequence_key([5, 6, 7])
    assert sequence_key([7, 6, 5]) != sequence_key([5, 6, 7])


def test_no_duplicates():
    found = find_duplicates([[1], [2], [3]])
    assert found.kept == (0, 1, 2) and found.repeats == 0 and found.example is None
    assert found.describe() == "no duplicate inputs: all 3 are distinct"
    assert find_duplicates([]).total == 0


def test_images_with_planted_duplicates(tmp_path):
    images = [_image(1), _image(2), _image(1), _image(3), _image(2)]
    found = find_duplicates(images)
    assert found.kept == (0, 1, 3) and found.example == (0, 2) and found.repeats == 2
    # same pixels read back from files; a one-pixel change is another image
    for i, im in enumerate(images):
        im.save(tmp_path / f"img_{i}.png")
    changed = np.asarray(_image(3)).copy()
    changed[0, 0, 0] ^= 1
    Image.fromarray(changed, "RGB").save(tmp_path / "img_5.png")
    from_folder = find_duplicates(image_source(str(tmp_path)))
    assert from_folder.kept == (0, 1, 3, 5) and from_folder.total == 6
    # the same bytes in another mode or shape are not the same image
    gray = Image.frombytes("L", (48, 12), _image(1).tobytes())
    assert input_key(gray) != input_key(_image(1))


def _preprocess(images: list[Image.Image], side: int = 8) -> dict[str, torch.Tensor]:
    """A stand-in for a model's image processor: resize to side x side, scale to [0, 1]."""
    arrays = [np.asarray(im.resize((side, side), Image.Resampling.NEAREST), dtype=np.float32) / 255 for im in images]
    return {"pixel_values": torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous()}


def test_duplicates_after_resizing_are_found_on_what_the_model_sees():
    base = np.asarray(_image(4, size=(16, 16))).copy()
    other = base.copy()
    other[0::2, :] = 0  # rows that nearest-neighbour resizing to 8 x 8 never reads (it samples odd rows)
    images = [Image.fromarray(base, "RGB"), Image.fromarray(other, "RGB"), _image(5, size=(16, 16))]
    assert find_duplicates(images).repeats == 0  # different files
    batch = _preprocess(images)
    assert np.array_equal(batch["pixel_values"][0], batch["pixel_values"][1])
    keys = batch_keys(batch)
    assert keys[0] == keys[1] != keys[2]
    assert find_duplicates(batch["pixel_values"]).kept == (0, 2)


def test_finder_over_a_stream_of_batches():
    images = [_image(i % 5) for i in range(12)]  # 5 distinct images, each repeated
    finder = DuplicateFinder()
    kept_rows = []
    for start in range(0, 12, 4):
        batch = _preprocess(images[start : start + 4])
        batch["attention_like"] = torch.ones(4, 3, dtype=torch.long)
        batch["scale"] = 0.5  # not a batch axis: passed through
        out, mask = finder.filter(batch)
        assert len(mask) == 4 and out["scale"] == 0.5
        assert len(out["pixel_values"]) == len(out["attention_like"]) == sum(mask)
        kept_rows.extend(out["pixel_values"])
    result = finder.result()
    assert result.kept == (0, 1, 2, 3, 4) and result.total == 12 and result.repeats == 7
    assert result.example == (0, 5)  # across batches: input 5 is input 0 again
    want = _preprocess(images[:5])["pixel_values"]
    assert torch.equal(torch.stack(kept_rows), want)
    # another pass over the same inputs (another model's weights) drops the same examples
    again = [result.select(_preprocess(images[s : s + 4]), s)["pixel_values"] for s in range(0, 12, 4)]
    assert torch.equal(torch.cat(again), want)
    whole = _preprocess(images[:4])
    assert result.select(whole, 0) is whole  # nothing to drop: the batch itself


def test_keep_duplicates_counts_but_drops_nothing():
    finder = DuplicateFinder(keep=True)
    batch = {"input_ids": torch.tensor([[1, 2], [3, 4], [1, 2]])}
    out, mask = finder.filter(batch)
    assert mask == [True, True, True] and out is batch
    result = finder.result()
    assert result.kept == (0, 1, 2) and result.repeats == 1 and result.dropped == 0
    assert result.describe("token windows").endswith("kept (asked for)")


def test_keys_of_one_example_and_of_rows_agree():
    ids = torch.tensor([[4, 5, 6], [4, 5, 6]])
    segments = torch.tensor([[0, 0, 1], [0, 1, 1]])
    keys = batch_keys({"input_ids": ids, "token_type_ids": segments})
    assert keys[0] != keys[1]  # same tokens, different segments: different inputs for BERT
    assert keys[0] == input_key({"token_type_ids": segments[0], "input_ids": ids[0]})
    # the dtype is part of the input; bfloat16 tensors are keyed too
    assert input_key(torch.zeros(3, dtype=torch.float32)) != input_key(torch.zeros(3, dtype=torch.float64))
    half = torch.tensor([[1.5, 2.0], [1.5, 2.0]], dtype=torch.bfloat16)
    assert find_duplicates(half).kept == (0,)
    with pytest.raises(ValueError, match="first axis"):
        batch_keys({"a": torch.zeros(2, 3), "b": torch.zeros(3, 3)})
    with pytest.raises(TypeError):
        input_key(object())


def test_images_from_an_encoded_parquet_style_source_are_keyed_after_decoding():
    raw = io.BytesIO()
    _image(7).save(raw, "PNG")
    again = io.BytesIO()
    _image(7).save(again, "PNG", compress_level=1)  # other bytes on disk, same pixels
    assert raw.getvalue() != again.getvalue()
    decoded = [Image.open(io.BytesIO(b)).convert("RGB") for b in (raw.getvalue(), again.getvalue())]
    assert find_duplicates(decoded).kept == (0,)


# --------------------------------------------------------------------------- keys computed where the batch lies


def _classes(keys) -> list[int]:
    """Each key's first index: the partition the keys make."""
    first: dict = {}
    return [first.setdefault(k, i) for i, k in enumerate(keys)]


def _byte_classes(rows) -> list[int]:
    first: dict = {}
    return [first.setdefault(np.ascontiguousarray(r).tobytes(), i) for i, r in enumerate(rows)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.uint8, torch.bool])
def test_fingerprints_partition_a_batch_as_its_bytes_do(dtype):
    """Equal examples, and only they, get equal keys: checked against the bytes themselves, on a
    batch with planted repeats, of every width of dtype."""
    from mhaaudit.sources.duplicates import Fingerprints

    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 3, (12, 5, 4), generator=g).to(dtype)  # few values: near-misses are common
    x[7], x[9], x[11] = x[1], x[4], x[1]
    keys = Fingerprints(secret=5).keys({"pixel_values": x})
    assert _classes(keys) == _byte_classes(x.contiguous().view(torch.uint8).numpy())
    assert keys[7] == keys[1] == keys[11] and keys[9] == keys[4]


def test_fingerprints_read_bits_not_values():
    from mhaaudit.sources.duplicates import Fingerprints

    f = Fingerprints(secret=1)
    zeros = torch.zeros(2, 3)
    zeros[1, 2] = -0.0  # equal values, other bits: other inputs
    assert f.keys({"pixel_values": zeros})[0] != f.keys({"pixel_values": zeros})[1]
    nans = torch.full((2, 3), float("nan"))  # the same bits: the same input, though NaN != NaN
    keys = f.keys({"pixel_values": nans})
    assert keys[0] == keys[1]
    # the dtype, the shape of an example and the column's name are part of the key
    a = f.keys({"pixel_values": torch.zeros(1, 4)})[0]
    assert a != f.keys({"pixel_values": torch.zeros(1, 4, dtype=torch.float64)})[0]
    assert a != f.keys({"pixel_values": torch.zeros(1, 2, 2)})[0]
    assert a != f.keys({"other": torch.zeros(1, 4)})[0]
    # the secret changes the keys, not the partition; one secret gives the same keys every time
    assert f.keys({"pixel_values": torch.ones(1, 4)}) == Fingerprints(secret=1).keys({"pixel_values": torch.ones(1, 4)})
    assert f.keys({"pixel_values": torch.ones(1, 4)}) != Fingerprints(secret=2).keys({"pixel_values": torch.ones(1, 4)})
    assert f.keys({"pixel_values": torch.zeros(0, 4)}) == []
    assert len(set(f.keys({"pixel_values": torch.zeros(3, 0, 4)}))) == 1  # examples of no values are all equal
    with pytest.raises(ValueError, match="first axis"):
        f.keys({"a": torch.zeros(2, 3), "b": torch.zeros(3, 3)})
    with pytest.raises(TypeError):
        f.keys({"scale": 0.5})


def test_fingerprints_of_long_examples_stay_exact(monkeypatch):
    """Past ``SEGMENT`` words an example is fingerprinted a segment at a time (every sum stays an
    exact float64 integer): a one-bit change in the last segment is still another input."""
    from mhaaudit.sources.duplicates import Fingerprints

    monkeypatch.setattr(Fingerprints, "SEGMENT", 64)
    monkeypatch.setattr(Fingerprints, "CHUNK", 16)
    monkeypatch.setattr(Fingerprints, "HOST_CHUNK", 16)
    x = torch.randint(0, 256, (3, 1000), dtype=torch.uint8)
    x[1] = x[0]
    x[2] = x[0]
    x[2, 999] ^= 1
    keys = Fingerprints(secret=9).keys({"pixel_values": x})
    assert keys[0] == keys[1] != keys[2]


def test_the_host_and_device_dot_products_are_the_exact_integers():
    """The CPU's products (NumPy's BLAS) and a device's (torch's) are the exact integer dot products,
    at the extreme 16-bit words and over several chunks: equal keys whatever computes them."""
    from mhaaudit.sources.duplicates import _device_dot, _host_dot

    g = torch.Generator().manual_seed(3)
    words = torch.randint(-(1 << 15), 1 << 15, (5, 1000), generator=g, dtype=torch.int64)
    words[0], words[1] = -(1 << 15), (1 << 15) - 1
    w = torch.randint(0, 1 << 16, (1000, 8), generator=g, dtype=torch.int64)
    exact = (words[:, :, None] * w[None]).sum(1)
    words16, w64 = words.to(torch.int16), w.to(torch.float64)
    assert torch.equal(_host_dot(words16, w64, 96), exact)
    assert torch.equal(_device_dot(words16, w64, 96), exact)


def test_a_fingerprint_collision_inside_a_batch_is_caught_by_the_bits(monkeypatch):
    """Rows of one batch whose fingerprints agree are compared bit for bit: a collision (forced
    here: every fingerprint 0) keeps different rows apart, and equal rows stay equal."""
    from mhaaudit.sources.duplicates import Fingerprints

    monkeypatch.setattr(
        Fingerprints, "_fingerprint", lambda self, words: torch.zeros(words.shape[0], 8, dtype=torch.int64)
    )
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0]])
    keys = Fingerprints(secret=0).keys({"pixel_values": x})
    assert keys[0] == keys[2] and keys[1] not in (keys[0], keys[2])


def test_the_capture_loop_drops_what_the_bytes_say(monkeypatch):
    """``pipeline._without_duplicates`` with the device keys drops exactly the examples that the
    byte keys of ``batch_keys`` would drop, across batches, first occurrence kept."""
    from mhaaudit import distributed, pipeline
    from mhaaudit.sources.duplicates import Fingerprints

    images = [_image(i % 5) for i in range(12)]
    by_bytes, by_device = DuplicateFinder(), DuplicateFinder()
    keyer, shard = Fingerprints(), distributed.SingleProcess()
    kept = []
    for b, start in enumerate(range(0, 12, 4)):
        batch = _preprocess(images[start : start + 4])
        by_bytes.add(batch_keys(batch))
        out = pipeline._without_duplicates(by_device, keyer, b, batch, shard)
        kept.append(out["pixel_values"])
    assert by_device.result() == by_bytes.result()
    assert torch.equal(torch.cat(kept), _preprocess(images[:5])["pixel_values"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fingerprints_on_cuda_equal_the_cpu_ones():
    """The keys are exact integers: computed on the GPU the batch lies on, they are the CPU's."""
    from mhaaudit.sources.duplicates import Fingerprints

    x = torch.randn(6, 3, 32, 32)
    x[4] = x[1]
    f = Fingerprints(secret=11)
    assert f.keys({"pixel_values": x.cuda()}) == f.keys({"pixel_values": x})
