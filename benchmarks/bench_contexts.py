"""Benchmark: Assumption 2 (the rank of each example's context matrix), ours against the naive way.

Naive: one ``torch.linalg.matrix_rank`` (an SVD) per example, on the device the batch is on, as a
loop over the examples would run it. Ours: ``ContextRanks.update`` on each batch, as a ``check`` run
feeds it, and its arrays read at the end. On the CPU each batch is decided as it comes (its Gram
matrices and their extreme eigenvalues on the host's cores); on a GPU the batches are kept, their Gram
matrices reduced to tridiagonal form there all at once, and the extremes of those forms found on the
host's threads. Both decide under the same rule; the ranks are compared example by example.

Also timed, to show where ours goes: the same with one host thread (torch's intra-op count 1, so one
worker), and its two parts alone. On the CPU: each batch's float64 Gram matrices, and their extreme
eigenvalues on one thread. On a GPU: the Gram matrices and their tridiagonal forms, formed on the
device and copied to the host, and the extremes of those forms on one thread.

Prints the times and the ratio; asserts nothing. Run:

    python benchmarks/bench_contexts.py [--batch 32] [--batches 8] [--n 197] [--d 768] [--device cpu|cuda|auto]

The naive loop is timed on ``--naive-examples`` examples (64) and scaled to all of them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from bench_kruskal import timed

from mhaaudit.contexts import ContextRanks
from mhaaudit.numerics import RankRule
from mhaaudit.numerics.batch_ranks import tridiagonal_forms
from mhaaudit.numerics.extremes import extreme_eigenvalues, tridiagonal_extremes
from mhaaudit.numerics.threads import intra_op_threads
from mhaaudit.settings import device_name, resolve_device


def batches_of(device: torch.device, *, batch: int, batches: int, n: int, d: int, seed: int = 0) -> list[torch.Tensor]:
    """``batches`` float32 batches of ``batch`` Gaussian (n, d) context matrices on ``device`` (full rank)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, n, d, generator=g).to(device) for _ in range(batches)]


def measure(
    device: torch.device, *, batch: int = 32, batches: int = 8, n: int = 197, d: int = 768, naive_examples: int = 64
) -> dict:
    """The naive loop's and ours' seconds over ``batch * batches`` examples, ours' parts, and the ranks checked."""
    data = batches_of(device, batch=batch, batches=batches, n=n, d=d)
    rule = RankRule.for_dtype(torch.float32)
    T = batch * batches

    def ours() -> dict:
        acc = ContextRanks(rule)
        for E in data:
            acc.update(E)
        return acc.arrays()  # (a GPU's batches are decided here)

    ours()  # warm-up: the LAPACK routines' self-test, the device's kernels
    ours_s, arrays = timed(ours, device)
    with intra_op_threads(1):
        one_thread_s, _ = timed(ours, device)
    parts = _parts(data, device)

    m = min(naive_examples, T)
    flat = torch.cat(data)[:m]
    rtol = rule.rtol_for(n, d)

    def naive() -> list[int]:
        return [int(torch.linalg.matrix_rank(flat[i].double(), rtol=rtol)) for i in range(m)]

    naive()  # warm-up (the device's SVD)
    naive_m_s, naive_ranks = timed(naive, device)
    ranks = arrays["context_rank"][:m].tolist()
    return {
        "device": device_name(device),
        "threads": torch.get_num_threads(),
        "T": T,
        "batch": batch,
        "batches": batches,
        "n": n,
        "d": d,
        "naive_examples": m,
        "naive_s": naive_m_s * T / m,
        "ours_s": ours_s,
        "per_call_ms": 1e3 * ours_s / batches,
        "one_thread_s": one_thread_s,
        **parts,
        "ranks_equal": ranks == naive_ranks,
        "full_rank": int(sum(r == n for r in ranks)),
    }


def _parts(data: list[torch.Tensor], device: torch.device) -> dict:
    """The seconds of ours' two parts alone: on the CPU ``gram_s`` (each batch's float64 Gram matrices) and
    ``extremes_one_thread_s`` (their extreme eigenvalues); on a GPU ``forms_s`` (the Gram matrices and their
    tridiagonal forms, on the device and copied to the host) and ``form_extremes_one_thread_s`` (the extremes
    of the forms). The host's part on one thread: torch's and every BLAS library's."""
    if device.type == "cpu":

        def grams() -> list:
            return [(E.double() @ E.double().transpose(1, 2)) for E in data]

        grams()
        gram_s, G = timed(grams, device)
        with intra_op_threads(1):
            t0 = time.perf_counter()
            for g_ in G:
                extreme_eigenvalues(g_.numpy())
            return {"gram_s": gram_s, "extremes_one_thread_s": time.perf_counter() - t0}

    def forms() -> list:
        return tridiagonal_forms(torch.cat([E.double() @ E.double().transpose(1, 2) for E in data]))

    forms()
    forms_s, host = timed(forms, device)
    t0 = time.perf_counter()
    tridiagonal_extremes(*host)  # no BLAS: one thread
    return {"forms_s": forms_s, "form_extremes_one_thread_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--n", type=int, default=197)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--naive-examples", type=int, default=64)
    ap.add_argument("--device", default="auto", help="cpu, cuda (or cuda:N) or auto")
    ap.add_argument("--json", help="also write the figures to this result file (the docs' Benchmarks page)")
    args = ap.parse_args()
    from resultfiles import Run, seconds

    run = Run("bench_contexts.py", sys.argv[1:])
    device = resolve_device(args.device)
    r = measure(device, batch=args.batch, batches=args.batches, n=args.n, d=args.d, naive_examples=args.naive_examples)
    gpu = f" ({torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda})" if device.type == "cuda" else ""
    print(f"device: {r['device']}{gpu}, torch {torch.__version__}, threads {r['threads']}")
    shape = f"{r['n']} x {r['d']} (float32), {r['batches']} batches of {r['batch']}"
    print(f"{r['T']} Gaussian context matrices of {shape}")
    print(f"naive matrix_rank loop   : {r['naive_s']:8.3f} s (timed on {r['naive_examples']} examples, scaled)")
    print(f"ContextRanks.update      : {r['ours_s']:8.3f} s   ratio {r['naive_s'] / r['ours_s']:6.1f}x")
    print(f"  per call               : {r['per_call_ms']:8.1f} ms")
    print(f"  with one host thread   : {r['one_thread_s']:8.3f} s")
    if "gram_s" in r:
        print(f"  Gram matrices          : {r['gram_s']:8.3f} s (float64)")
        print(f"  extreme eigenvalues    : {r['extremes_one_thread_s']:8.3f} s (on one thread)")
    else:
        print(f"  tridiagonal forms      : {r['forms_s']:8.3f} s (Gram matrices and their forms: the device's part)")
        print(f"  extremes of the forms  : {r['form_extremes_one_thread_s']:8.3f} s (the host's part, on one thread)")
    print(f"ranks equal to the loop's on {r['naive_examples']} examples: {r['ranks_equal']}")
    if args.json:
        row = {
            "what": f"Assumption 2, {r['T']} context matrices of {r['n']} x {r['d']} ({r['device']})",
            "naive": f"{seconds(r['naive_s'])} (`matrix_rank` loop, timed on {r['naive_examples']} examples)",
            "mhaaudit": seconds(r["ours_s"]),
            "ratio": f"{r['naive_s'] / r['ours_s']:.1f}x",
            "checked": "ranks equal" if r["ranks_equal"] else "ranks DIFFER",
        }
        run.write(args.json, [row], r)


if __name__ == "__main__":
    main()
