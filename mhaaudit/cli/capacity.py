"""``mhaaudit capacity MODEL``: the Theorem 1 bound from the audit, and a memorisation certificate."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ._common import (
    DEFAULTS,
    Atol,
    BackendOpt,
    BatchSize,
    ContextLength,
    Data,
    FormatOpt,
    Split,
    Weights,
    Device,
    Format,
    Rtol,
    Samples,
    Seed,
    Threshold,
    prepare_outputs,
    validate_common,
)
from .app import app


class Attention(str, Enum):
    model = "model"
    random = "random"


@app.command("capacity")
def capacity_cmd(
    model: Annotated[str, typer.Argument(help="An alias (vit-base, bert-base, bert-large, gpt2, gpt2-large), a Hugging Face id, a local folder, or timm:<name>.")],
    heads: Annotated[Optional[str], typer.Option("--heads", help="Certificate with the first h heads for each h: 1-12, 3 or 1,2,4 (default: all heads of the layer).")] = None,
    attention: Annotated[Attention, typer.Option("--attention", help="Key/query weights of Z: the model's own attention block, or random (Xavier, seeded).")] = Attention.model,
    shared_context: Annotated[bool, typer.Option("--shared-context", help="Proposition 2: every example uses the context of example 0 with its own query; checks rank(Z) <= H (n - 1) + 1.")] = False,
    from_path: Annotated[Optional[Path], typer.Option("--from", help="Read the Assumption 1/2 verdicts from a parquet file written by 'mhaaudit check --out' instead of auditing.")] = None,
    variants: Annotated[Optional[list[str]], typer.Option("--variants", help="Columns: random and/or trained (default both; trained needs the hub or --weights).")] = None,
    weights: Weights = None,
    layer: Annotated[int, typer.Option("--layer", help="Attention block K whose input (layer K-1 tokens) is audited and certified; 1 = the first block on the embedding output.")] = 1,
    backend: BackendOpt = None,
    data: Data = None,
    split: Split = "train",
    limit: Annotated[int, typer.Option("--limit", help="Number of examples T (rows of Z).")] = 2000,
    batch_size: BatchSize = 32,
    context_length: ContextLength = None,
    samples: Samples = DEFAULTS["samples"],
    threshold: Threshold = DEFAULTS["threshold"],
    seed: Seed = DEFAULTS["seed"],
    rtol: Rtol = None,
    atol: Atol = None,
    device: Device = DEFAULTS["device"],
    fmt: FormatOpt = Format.table,
    out: Annotated[Optional[Path], typer.Option("--out", help="Write the records to this parquet file (atomically).")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Draw rank(Z) against the number of heads, with the bound lines, to this .png/.pdf/.svg file.")] = None,
) -> None:
    """Memorisation capacity: the Theorem 1 bound from the audited assumptions, and a certificate.

    The bound (reconstructed from the paper's proof) is H (min(n, d_h) - 1) + 1 when Assumptions
    1 and 2 hold on the tokens the attention block sees, H (min(k, d_h) - 1) + 1 (Remark 1) with
    an estimated Kruskal rank k < n, and nothing when Assumption 2 fails or n >= d. The
    certificate is the rank r of the matrix Z of per-head convex combinations: one attention layer
    with those key/query weights memorises r of the examples for any labels (value/output weights
    solved for random labels; the residual is printed).
    """
    from ..capacity import capacity_audit
    from ..plot import plot_capacity
    from ..io import parquet_bytes, write_parquet
    from ..progress import progress_enabled

    validate_common(samples, threshold, rtol, atol)
    prepare_outputs(out, plot, fmt)
    vs = [v.strip() for item in (variants or []) for v in item.split(",") if v.strip()] or None
    result = capacity_audit(
        model, heads=heads, attention=attention.value, shared_context=shared_context, from_path=from_path,
        variants=vs, weights=weights, block=layer, data=data, split=split, limit=limit, batch_size=batch_size,
        samples=samples, threshold=threshold, seed=seed, rtol=rtol, atol=atol, device=device,
        backend=backend.value if backend else None, context_length=context_length, progress=progress_enabled(fmt.value),
    )
    records = result.records()
    meta = result.meta()
    if out is not None:
        write_parquet(records, out, meta)
    if plot is not None:
        plot_capacity(result, plot)
    if fmt == Format.json:
        from ..report import print_json

        print_json({"meta": meta, "records": records})  # strict JSON: non-finite numbers become null
    elif fmt == Format.parquet:
        sys.stdout.buffer.write(parquet_bytes(records, meta))
        sys.stdout.flush()
    else:
        render_capacity(result, out=out, plot=plot)


# --------------------------------------------------------------------------------------------
# Table rendering (here rather than in report.py, which other work is changing)
# --------------------------------------------------------------------------------------------


def render_capacity(result, *, out=None, plot=None) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ..capacity import shared_context_rank_bound
    from ..report import stdout_console, verdict_text

    con = stdout_console()
    info, s = result.info, result.settings
    n, d, dh, H = info.get("n"), info.get("d"), s.get("head_dim"), info.get("num_heads")
    title = (f"{result.model}: memorisation capacity of the attention of block {s['layer']} "
             f"(n = {n}, d = {d}, H = {H}, d_h = {dh}; {s['attention']} key/query weights"
             + ("; shared context" if s["shared_context"] else "") + ")")
    t = Table(title=title, title_justify="left")
    cols = ["column", "heads h", "T", "rank(Z) = certified", "min(T, h d)", "bound", "bound from", "residual"]
    if s["shared_context"]:
        cols += ["h (n - 1) + 1", "Prop. 2"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("column", "bound from", "Prop. 2") else "right")
    for c in result.columns:
        if c.status != "ok":
            row = [c.variant, "-", "-", verdict_text("unavailable"), "-", "-", "-", "-"]
            if s["shared_context"]:
                row += ["-", "-"]
            t.add_row(*row)
            continue
        for cert in c.certificates:
            b = c.bounds[cert.heads]
            row = [c.variant, str(cert.heads), str(c.T), str(cert.rank), str(cert.rank_cap),
                   str(b.count) if b.applies else "none", b.which, f"{cert.residual:.1e}"]
            if s["shared_context"]:
                p2 = shared_context_rank_bound(cert.heads, n)
                row += [str(p2), verdict_text("holds" if cert.rank <= p2 else "fails")]
            t.add_row(*row)
    con.print(t)
    lines: list[str] = ["[bold]The bound[/bold] (Theorem 1 / Remark 1; the counts H (min(n, d_h) - 1) + 1 and "
                        "H (min(k, d_h) - 1) + 1 are reconstructed from the paper's proof, not read verbatim)"]
    for c in result.columns:
        if c.status != "ok":
            lines.append(f"  [yellow]{c.variant} unavailable[/yellow]: {escape(c.reason)}")
            continue
        a = c.assumptions
        b = c.bounds[max(c.bounds)]
        if b.applies:
            lines.append(escape(f"  {c.variant}: {b.count} examples with H = {b.heads} heads ({b.formula}); {b.reason}"))
        else:
            lines.append(escape(f"  {c.variant}: the theorem does not apply: {b.reason}"))
        if a is not None:
            frac = f" (satisfied fraction {a.a1_fraction:.4f})" if a.a1_fraction is not None else ""
            lines.append(escape(f"    Assumption 1 (k = n = {n}): {a.a1 or 'not checked'}{frac}; {a.a1_reason}"))
            lines.append(escape(f"    Assumption 2 (rank E_t = n): {a.a2 or 'not checked'}; {a.a2_reason}"))
            if a.kruskal_estimate is not None:
                lines.append(escape(f"    Kruskal-rank estimate k = {a.kruskal_estimate}: {a.estimate_note}"))
            lines.append(escape(f"    assumptions {a.source}"))
        for note in b.notes[1:]:
            lines.append(escape(f"    note: {note}"))
        if a is not None and a.kruskal_estimate == 1 and s["layer"] == 1:
            lines.append(escape("    hint: the queries are numerically one vector (e.g. a [CLS] token before any attention, "
                                "the same for every input), so Remark 1 guarantees a single example; --layer 2 audits and "
                                "certifies block 2's attention on the output of block 1, where the paper finds Assumption 1 holding"))
    lines.append("[bold]The certificate[/bold]")
    lines.append("  rank(Z) = r: one attention layer with these key/query weights memorises the r chosen examples for ANY "
                 "labels; checked by solving the value/output weights for random N(0, 1) labels (residual = max |Z_S w - y| / max |y|).")
    for c in result.columns:
        if c.status != "ok" or not c.certificates:
            continue
        last = c.certificates[-1]
        b = c.bounds[last.heads]
        cmp = ""
        if b.applies and last.rank >= b.count:
            cmp = f"; at least the bound {b.count}"
        elif b.applies and last.rank == c.T:
            cmp = f"; the bound {b.count} exceeds T = {c.T}, so every example is certified (raise --limit to compare)"
        elif b.applies:
            cmp = (f"; below the bound {b.count} (the theorem speaks of the best key/query weights; these certify fewer)")
        lines.append(escape(f"  {c.variant}: r = {last.rank} of T = {c.T} examples with h = {last.heads} heads "
                            f"(at most min(T, h d) = {last.rank_cap}){cmp}; residual {last.residual:.2e}; "
                            f"method: {last.method}"))
        if last.rank == c.T:
            lines.append(escape(f"    the rank is capped by T: the certificate memorises all {c.T} examples; "
                                "more examples could certify more"))
    lines.append("[bold]Evidence[/bold]")
    lines.append(escape(f"  tokens: {s['tokens']}; query = token {info.get('query_index')}; data: {result.data}"))
    lines.append(escape(f"  Z rank rule: {s['z_tolerance']}"))
    lines.append(escape(f"  assumption rank rule: {s['assumption_tolerance']}"))
    if result.settings.get("from_path") is None:
        lines.append(f"  Assumption 1: {s['samples']} draws (stopping once decided), threshold {s['threshold']}, seed {s['seed']}, "
                     f"device {s['device']}")
    for note in result.notes:
        lines.append(escape(f"  note: {note}"))
    tm = ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items())
    lines.append(f"  time: {tm}")
    for c in result.columns:
        if c.timings:
            lines.append(f"    {c.variant}: " + ", ".join(f"{k} {v:.1f} s" for k, v in c.timings.items()))
    for line in lines:
        con.print(line, highlight=False)
    written = [str(p) for p in (out, plot) if p is not None]
    if written:
        con.print(escape(f"Wrote {', '.join(written)}"), highlight=False)
