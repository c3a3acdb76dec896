"""Shared test setup: offline hub, tiny random models saved to temporary folders, small data.

Nothing here reaches the network. The tiny models' configurations are the files in
``fixtures/models``; ``fixtures/tiny.py`` builds them with a fixed seed and saves them with their
libraries' own writers, so the real loading code runs on them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import threading
from pathlib import Path

# Set before any hub library is imported by a test module.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.pop("MHAAUDIT_DEBUG", None)

import pytest

from mhaaudit import hub

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def devices() -> list[str]:
    """The devices a test runs on here: the CPU, and CUDA where this machine has it."""
    import torch

    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def load_script(path: Path, name: str, *, fresh: bool = False):
    """A Python file that is no package's module (a fixture maker, a benchmark, a docs hook), imported by path
    as ``name``: once, and again with ``fresh`` (a test that changes the module's globals)."""
    if fresh or name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def fixture_module(name: str):
    """A module of ``fixtures/`` (not a package: ``tiny``, ``make_fixtures``), imported by path once."""
    return load_script(FIXTURES / f"{name}.py", f"mhaaudit_fixtures_{name}")


tiny = fixture_module("tiny")

TINY_VIT = tiny.model_args("vit")
TINY_VIT_N = 1 + (TINY_VIT["image_size"] // TINY_VIT["patch_size"]) ** 2  # 17 tokens: [CLS] + 4 x 4 patches
TINY_VIT_D = TINY_VIT["hidden_size"]  # 32
TIMM_ARGS = tiny.model_args("timm-vit")


@pytest.fixture(autouse=True)
def _offline_hub(monkeypatch):
    """Offline hub for every test; the cached offline decision is recomputed around each test."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv("MHAAUDIT_DEBUG", raising=False)
    hub.is_offline.cache_clear()
    yield
    hub.is_offline.cache_clear()


def save_tiny_vit(folder, seed: int = 0, **overrides):
    """A tiny random transformers ViT saved with ``save_pretrained`` (n = 17, d = 32 by default)."""
    return tiny.save_model("vit", folder, seed=seed, **overrides)


@pytest.fixture(scope="session")
def vit_dir(tmp_path_factory):
    """Tiny ViT folder: hidden size 32, 2 blocks, 32 x 32 images in 8 x 8 patches."""
    return save_tiny_vit(tmp_path_factory.mktemp("tiny_vit"))


@pytest.fixture(scope="session")
def vit_dir_wide(tmp_path_factory):
    """Same layout with hidden size 48: weights that do not fit ``vit_dir``."""
    return save_tiny_vit(tmp_path_factory.mktemp("tiny_vit_wide"), hidden_size=48, intermediate_size=96)


@pytest.fixture(scope="session")
def vit4(tmp_path_factory):
    """Tiny ViT with 4 heads of d_h = 8 (n = 17, d = 32): the capacity tests' model, built once."""
    return save_tiny_vit(tmp_path_factory.mktemp("tiny_vit4"), num_attention_heads=4)


@pytest.fixture(scope="session")
def timm_dir(tmp_path_factory):
    """A tiny timm ViT: ``model.safetensors`` plus a timm-style ``config.json`` beside it."""
    return tiny.save_model("timm-vit", tmp_path_factory.mktemp("tiny_timm"))


@pytest.fixture(scope="session")
def bert_dir(tmp_path_factory):
    """A tiny BERT folder (d = 32, 2 blocks of 2 heads) with its 100-token WordPiece tokenizer."""
    return tiny.save_model("bert", tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="session")
def image_dir(tmp_path_factory):
    """60 small RGB images of varied sizes, made with PIL from seeded noise and gradients."""
    return tiny.save_images(tmp_path_factory.mktemp("images"))


def tmp_leftovers(folder) -> list[str]:
    """Names of temporary files that an atomic write may have left in ``folder``."""
    return sorted(p.name for p in os.scandir(folder) if p.name.startswith(".") or p.name.endswith(".tmp"))


@contextlib.contextmanager
def pipe_writer(*pipes):
    """Meet every reader of the named ``pipes`` with an empty stream, and every writer with a reader: a
    process that opens one goes on at once (a case then fails with a wrong message instead of hanging)."""
    stop = threading.Event()
    readers = [os.open(p, os.O_RDONLY | os.O_NONBLOCK) for p in pipes]  # a writer's open returns at once

    def serve() -> None:
        while not stop.is_set():
            for p in pipes:
                with contextlib.suppress(OSError):  # a reader is always open (above), so this open returns at once
                    os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))
            stop.wait(0.01)

    writer = threading.Thread(target=serve, daemon=True)
    writer.start()
    try:
        yield
    finally:
        stop.set()
        writer.join(timeout=5)
        for fd in readers:
            os.close(fd)


def strict_json(text: str):
    """Parse JSON as the standard defines it: NaN and Infinity are not JSON."""

    def refuse(const):
        raise ValueError(f"{const} is not valid JSON")

    return json.loads(text, parse_constant=refuse)


def full_gram_limit(monkeypatch, nbytes: int) -> None:
    """Set the byte limit of the full T x T Gram for whichever device the run takes: the CPU's
    (``FULL_GRAM_MAX_BYTES``) and a GPU's (``DEVICE_FULL_GRAM_MAX_BYTES``), so that a test forcing
    the per-draw route forces it on a GPU machine too."""
    from mhaaudit.kruskal import sampling

    monkeypatch.setattr(sampling, "FULL_GRAM_MAX_BYTES", nbytes)
    monkeypatch.setattr(sampling, "DEVICE_FULL_GRAM_MAX_BYTES", nbytes)
