"""Benchmark: ``mhaaudit check`` end to end against the paper's naive procedure, in one process.

Both sides audit the same columns (``embedding``: the embedding output, ``random``: the output of
block 1 of the random model) of the same model with the same random weights on the same built-in
images, and time everything from building the model to the verdicts:

- ours: :func:`mhaaudit.audit` (builds only block 1, streams the batches through the capture
  pipeline and the O(T d) reduction, decides the Monte-Carlo draws with certified Cholesky
  factorisations, stops a test once its verdict is settled);
- naive (the paper's procedure): the whole model built, one forward pass over every image with
  ``output_hidden_states=True`` keeping ``hidden_states[0]`` and ``hidden_states[1]``, then one
  ``torch.linalg.matrix_rank`` per Monte-Carlo draw (Assumptions 1 and 3: k = n rows of the query
  / Assumption-3 vectors; General Position: k = min(T, d) rows, the whole set once when T <= d) and one
  per example (Assumption 2), all draws made.

The draws of the two sides differ (each has its own sampler), so only the verdicts are compared.
Imports are done before either side is timed. Prints both times, the ratio and the verdicts;
asserts nothing. Small defaults run on a 2-core CPU in a minute or two; the paper's size is
``--limit 2000 --samples 5000``. Run:

    python benchmarks/bench_check.py [--device cpu|cuda|auto] [--limit 200] [--samples 300]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from mhaaudit.settings import device_name, resolve_device


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _fraction_independent(rows: torch.Tensor, k: int, draws: int, rng: np.random.Generator) -> float:
    """The paper's estimate: one ``matrix_rank`` per draw of k rows (the whole set once when k = T)."""
    if k >= rows.shape[0]:
        return float(int(torch.linalg.matrix_rank(rows)) >= k)
    full = 0
    for _ in range(draws):
        pick = torch.as_tensor(rng.choice(rows.shape[0], size=k, replace=False), device=rows.device)
        full += int(torch.linalg.matrix_rank(rows[pick])) == k
    return full / draws


def naive(
    model: str, limit: int, batch: int, samples: int, threshold: float, seed: int, device: torch.device
) -> tuple[float, dict]:
    """The paper's procedure; returns (seconds, {column: {check: holds}})."""
    from mhaaudit.models import load_model
    from mhaaudit.models.probe import full_float32
    from mhaaudit.sources import image_source

    t0 = time.perf_counter()
    pm = load_model(model, weights="random", device=device, seed=seed)  # every block
    n, qi = pm.info.n, pm.info.query_index
    feats: dict[int, dict[str, list]] = {0: {"q": [], "a3": [], "ctx": []}, 1: {"q": [], "a3": [], "ctx": []}}
    with torch.no_grad(), full_float32():
        for images in image_source(None, limit=limit, seed=seed).batches(batch):
            hidden = pm.module(**pm.preprocess(images), output_hidden_states=True).hidden_states
            for layer in (0, 1):
                h = hidden[layer].float()
                feats[layer]["q"].append(h[:, qi])
                feats[layer]["a3"].append(h[:, qi] + h.mean(1))
                feats[layer]["ctx"].append(torch.linalg.matrix_rank(h) == n)  # Assumption 2, one rank per example
        rng = np.random.default_rng(seed)
        verdicts = {}
        for layer, name in ((0, "embedding"), (1, "random")):
            q, a3 = torch.cat(feats[layer]["q"]), torch.cat(feats[layer]["a3"])
            d = q.shape[1]
            verdicts[name] = {
                "GP": _fraction_independent(q, min(d, q.shape[0]), samples, rng) >= threshold,
                "A1": _fraction_independent(q, n, samples, rng) >= threshold,
                "A2": bool(torch.cat(feats[layer]["ctx"]).all()),
                "A3": _fraction_independent(a3, n, samples, rng) >= threshold,
            }
    _sync(device)
    return time.perf_counter() - t0, verdicts


def ours(
    model: str, limit: int, batch: int, samples: int, threshold: float, seed: int, device: torch.device
) -> tuple[float, dict, dict]:
    from mhaaudit.auditing import audit

    t0 = time.perf_counter()
    result = audit(
        model,
        variants=["embedding", "random"],
        limit=limit,
        batch_size=batch,
        samples=samples,
        threshold=threshold,
        seed=seed,
        device=str(device),
        stop_when_decided=True,
    )
    _sync(device)
    seconds = time.perf_counter() - t0
    verdicts = {}
    names = {"general_position": "GP", "assumption_1": "A1", "assumption_2": "A2", "assumption_3": "A3"}
    for col in result.columns:
        verdicts[col.probe.variant] = {names.get(k, k): t.verdict == "holds" for k, t in col.tests.items()}
    return seconds, verdicts, result.timings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vit-base")
    ap.add_argument("--device", default="auto", help="cpu, cuda or auto")
    ap.add_argument("--limit", type=int, default=200, help="images T, at least n = 197 (the paper: 2000)")
    ap.add_argument("--samples", type=int, default=300, help="Monte-Carlo draws per test (the paper: 5000)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threshold", type=float, default=0.99)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the figures to this result file (the docs' Benchmarks page)")
    args = ap.parse_args()
    from resultfiles import Run, seconds

    run = Run("bench_check.py", sys.argv[1:])
    device = resolve_device(args.device)
    import transformers  # noqa: F401  - imports paid before either side is timed
    from transformers import ViTModel  # noqa: F401

    from mhaaudit.sources.mosaics import load_photos

    load_photos()
    where = device_name(device)
    if device.type == "cuda":
        where += f" ({torch.cuda.get_device_name(device)})"
    print(
        f"device {where}, torch {torch.__version__}, {torch.get_num_threads()} CPU threads; "
        f"{args.model}, T = {args.limit}, {args.samples} draws per test, batch {args.batch}"
    )
    t_ours, v_ours, timings = ours(args.model, args.limit, args.batch, args.samples, args.threshold, args.seed, device)
    t_naive, v_naive = naive(args.model, args.limit, args.batch, args.samples, args.threshold, args.seed, device)
    print(f"naive (full forward with output_hidden_states, one matrix_rank per draw): {t_naive:8.2f} s")
    print(f"mhaaudit check (audit facade, embedding + random columns):               {t_ours:8.2f} s")
    print(f"ratio: {t_naive / t_ours:.1f}x")
    print("ours, by phase: " + ", ".join(f"{k} {v:.2f} s" for k, v in timings.items()))
    for col in ("embedding", "random"):
        a, b = v_ours.get(col, {}), v_naive[col]
        line = ", ".join(f"{c} {'holds' if a.get(c) else 'fails'}/{'holds' if b[c] else 'fails'}" for c in b)
        print(f"verdicts {col:9s} (ours/naive): {line}" + ("" if all(a.get(c) == b[c] for c in b) else "  DIFFER"))
    if args.json:
        same = all(v_ours.get(col, {}).get(c) == v for col in ("embedding", "random") for c, v in v_naive[col].items())
        row = {
            "what": f"`check` end to end, embedding + random columns of a random {args.model}, T = {args.limit} "
            f"built-in images, {args.samples} draws ({device_name(device)})",
            "naive": f"{seconds(t_naive)} (whole model, `output_hidden_states=True`, one `matrix_rank` per draw)",
            "mhaaudit": seconds(t_ours),
            "ratio": f"{t_naive / t_ours:.1f}x",
            "checked": "same verdicts" if same else "verdicts DIFFER",
        }
        run.write(args.json, [row], {"naive_s": t_naive, "ours_s": t_ours, "timings": timings})


if __name__ == "__main__":
    main()
