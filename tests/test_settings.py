"""The run settings and the one seed-derivation rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mhaaudit.errors import InputError
from mhaaudit.settings import PURPOSES, Settings, derive_seed, device_name, resolve_device


def test_derive_seed_is_the_documented_rule():
    import zlib

    want = int(np.random.SeedSequence([7, zlib.crc32(b"draws"), 3]).generate_state(1, np.uint64)[0])
    assert derive_seed(7, "draws", 3) == want


def test_derive_seed_separates_purposes_and_parts():
    seeds = {derive_seed(0, p) for p in PURPOSES}
    assert len(seeds) == len(PURPOSES)
    blocks = [derive_seed(0, "draws", b) for b in range(100)]
    assert len(set(blocks)) == 100
    assert derive_seed(1, "draws", 0) != derive_seed(0, "draws", 0)
    assert derive_seed(0, "draws", 5) == derive_seed(0, "draws", 5)  # deterministic


def test_derive_seed_feeds_every_generator():
    s = derive_seed(2**63 + 5, "model-init")
    assert 0 <= s < 2**64
    torch.Generator().manual_seed(s)
    np.random.default_rng(s)


def test_unknown_purpose_is_a_bug_not_a_silent_stream():
    with pytest.raises(ValueError):
        derive_seed(0, "typo")


def test_resolve_checks_every_field_and_the_device():
    s = Settings.resolve(device="cpu", samples=10, threshold=0.5, seed=3, rtol=1e-3, atol=None)
    assert s.device == torch.device("cpu") and s.samples == 10 and s.threshold == 0.5 and s.seed == 3
    assert s.rule(torch.float64).rtol == 1e-3 and s.rule().dtype == "float32"
    assert s.seed_for("draws", 1) == derive_seed(3, "draws", 1)
    assert s.as_dict()["tolerance"]["rtol"] == 1e-3 and s.as_dict()["device"] == "cpu"
    for kw, match in (
        (dict(samples=0), "^samples must"),
        (dict(threshold=1.5), "^threshold must"),
        (dict(threshold=0), "^threshold must"),
        (dict(seed=-1), "^seed must"),
        (dict(rtol=-1.0), "^rtol must"),
        (dict(atol=float("nan")), "^atol must"),
        (dict(device="tpu"), "not a device"),
    ):
        with pytest.raises(InputError, match=match):
            Settings.resolve(**kw)


def test_device_is_resolved_once():
    auto = resolve_device("auto")
    s = Settings.resolve(device="auto")
    assert s.device == auto and s.device_name == device_name(auto)
    assert s.with_(samples=5).device is s.device
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="no CUDA device"):
            resolve_device("cuda")


def test_a_gpu_context_is_made_ahead_only_for_a_cuda_device_in_one_process(monkeypatch):
    """``warm_up`` starts a helper thread for a CUDA device not yet initialised in a process that runs alone, and
    nothing for the CPU, under torchrun, or on a machine without CUDA; the thread leaves the context made."""
    from mhaaudit.runtime import warm_up

    assert warm_up(torch.device("cpu")) is None
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert warm_up(torch.device("cuda")) is None
    monkeypatch.delenv("WORLD_SIZE")
    if not torch.cuda.is_available():
        assert warm_up(torch.device("cuda")) is None
        return
    thread = warm_up(torch.device("cuda"))
    if thread is not None:  # None: another test of this process made the context already
        thread.join(timeout=120)
        assert not thread.is_alive() and torch.cuda.is_initialized()
    assert warm_up(torch.device("cuda")) is None  # made: nothing more to do


def test_the_first_use_calls_each_linear_algebra_library_the_checks_use(monkeypatch):
    """``first_use`` (what ``warm_up``'s thread runs) calls, once each and on the device given, every
    ``torch.linalg`` routine that calls a solver library and that the package uses, and a float64 product."""
    import re

    from mhaaudit import runtime

    used = set()
    for path in (Path(runtime.__file__).parent).rglob("*.py"):
        used |= set(re.findall(r"torch\.linalg\.(\w+)", path.read_text()))
    elementwise = {"vector_norm", "matrix_norm", "vecdot"}  # no solver library behind them
    composite = {"matrix_rank"}  # svdvals underneath
    called = []
    for name in used - elementwise - composite:
        real = getattr(torch.linalg, name)
        monkeypatch.setattr(
            torch.linalg, name, lambda *a, _n=name, _r=real, **k: called.append((_n, a[0].device)) or _r(*a, **k)
        )
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    for device in devices:
        called.clear()
        runtime.first_use(device)
        assert sorted(n for n, _ in called) == sorted(used - elementwise - composite)
        assert all(d.type == device.type for _, d in called)
