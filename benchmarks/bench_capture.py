"""Benchmark: probing block 1 of a random ViT-Base, ours against the naive way.

Naive: run the whole network with ``output_hidden_states=True`` and keep ``hidden_states[1]``.
Ours: ``load_model("vit-base", max_layer=1)`` builds only the first block, and
``capture(layers=[1])`` runs the embedding and that block. Also shown: the full-depth model
probed through ``capture`` (forward hooks stop the pass after block 1).

Prints the times and the ratio; asserts nothing. Run:

    python benchmarks/bench_capture.py [--batch 16] [--repeats 3] [--device cpu|cuda|auto]

Both sides run with TF32 off (:func:`mhaaudit.models.probe.full_float32`), as a rank decision
needs; on a GPU the name of the GPU is printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from mhaaudit.models import load_model
from mhaaudit.models.probe import full_float32
from mhaaudit.settings import device_name, resolve_device


def _time(fn, repeats: int, device: torch.device) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(device: torch.device, *, model: str = "vit-base", batch: int = 16, repeats: int = 3) -> dict:
    """Load times, the three ways' median times (seconds) and their largest differences to the naive features."""
    t0 = time.perf_counter()
    full = load_model(model, device=device)  # every block
    t_load_full = time.perf_counter() - t0
    t0 = time.perf_counter()
    trunc = load_model(model, device=device, max_layer=1)  # only block 1 is built
    t_load_trunc = time.perf_counter() - t0

    size = getattr(getattr(full.module, "config", None), "image_size", 224)  # transformers' config; 224 otherwise
    g = torch.Generator().manual_seed(0)
    px = torch.randn(batch, 3, size, size, generator=g).to(device)
    inputs = {"pixel_values": px}

    def naive():
        with torch.no_grad(), full_float32():
            return full.module(pixel_values=px, output_hidden_states=True).hidden_states[1]

    def ours_trunc():
        return trunc.capture(inputs, [1])[1]

    def ours_hooks():
        return full.capture(inputs, [1])[1]

    # Same features either way (same weights for the full model; the truncated build is
    # seeded identically, so its block 1 matches too when the init order agrees).
    ref = naive()
    return {
        "model": model,
        "batch": batch,
        "image_size": size,
        "repeats": repeats,
        "load_full_s": t_load_full,
        "load_trunc_s": t_load_trunc,
        "diff_hooks": (ours_hooks() - ref).abs().max().item(),
        "diff_trunc": (ours_trunc() - ref).abs().max().item(),
        "naive_s": _time(naive, repeats, device),
        "ours_s": _time(ours_trunc, repeats, device),
        "hooks_s": _time(ours_hooks, repeats, device),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="auto", help="cpu, cuda (or cuda:N) or auto")
    ap.add_argument("--json", help="also write the figures to this result file (the docs' Benchmarks page)")
    args = ap.parse_args()
    from resultfiles import Run, seconds

    run = Run("bench_capture.py", sys.argv[1:])
    device = resolve_device(args.device)
    r = measure(device, batch=args.batch, repeats=args.repeats)
    t_naive, t_trunc, t_hooks = r["naive_s"], r["ours_s"], r["hooks_s"]

    gpu = f" ({torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda})" if device.type == "cuda" else ""
    print(f"device: {device_name(device)}{gpu}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"random ViT-Base (ViTConfig()), batch {args.batch} x 3 x 224 x 224, median of {args.repeats}")
    print(f"load: full model {r['load_full_s']:.2f} s, max_layer=1 build {r['load_trunc_s']:.2f} s")
    print(f"naive full forward, output_hidden_states=True : {t_naive * 1e3:9.1f} ms")
    print(f"capture(layers=[1]), max_layer=1 build         : {t_trunc * 1e3:9.1f} ms   ratio {t_naive / t_trunc:5.1f}x")
    print(f"capture(layers=[1]), full build + early stop   : {t_hooks * 1e3:9.1f} ms   ratio {t_naive / t_hooks:5.1f}x")
    print(
        f"max |difference| to hidden_states[1]: early stop {r['diff_hooks']:.2e}, truncated build {r['diff_trunc']:.2e}"
    )
    if args.json:
        row = {
            "what": f"First-block capture, random ViT-Base, batch of {args.batch} ({device_name(device)})",
            "naive": f"{seconds(t_naive)} (full forward, `output_hidden_states=True`)",
            "mhaaudit": seconds(t_trunc),
            "ratio": f"{t_naive / t_trunc:.1f}x",
            "checked": f"max difference {max(r['diff_trunc'], r['diff_hooks']):.1e}",
        }
        run.write(args.json, [row], r)


if __name__ == "__main__":
    main()
