"""``mhaaudit capacity MODEL``: the Theorem 1 bound from the audit, and a memorisation certificate."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from . import options as shared
from .flags import CapacityOptions

if TYPE_CHECKING:  # the options, typed for mypy
    from typing_extensions import Unpack

_READS = "the attention of block K builds Z and the tokens read are its input, the output of block K-1"
LAYER_DEPRECATED = shared.deprecation_line("--layer", "--block", f"same meaning: {_READS}")
# The options capacity_audit takes as they are given (the data, model and settings go as its request objects).
_AUDIT = ("heads", "attention", "shared_context", "from_path", "variants", "seeds", "vary")


@shared.command_options(
    CapacityOptions,
    "model heads attention shared_context from_path variants weights block layer backend data split limit batch_size"
    " keep_duplicates text_column image_column convert_rgb context_length revision trust_remote_code samples"
    " threshold seed seeds vary weights_seed data_seed rtol atol device fmt out plot quiet",
)
def capacity(ctx: typer.Context, model: shared.ModelArg, **options: Unpack[CapacityOptions]) -> None:
    """Memorisation capacity: the Theorem 1 bound from the audited assumptions, and a certificate.

    The bound (reconstructed from the paper's proof) is H (min(n, d_h) - 1) + 1 when Assumptions
    1 and 2 hold on the tokens the attention block sees, H (min(k, d_h) - 1) + 1 (Remark 1) with
    an estimated Kruskal rank k < n, and nothing when Assumption 2 fails or n >= d. The
    certificate is the rank r of the matrix Z of per-head convex combinations: one attention layer
    with those key/query weights memorises r of the examples for any labels (value/output weights
    solved for random labels; the residual is printed).

    --block K reads the input of block K (the output of block K-1), where check --layer K reads
    the output of block K: capacity --block K+1 certifies the tokens check --layer K audits.
    """
    with shared.importing(options["quiet"]):  # the library, torch with it: seconds
        from ..capacity import capacity_audit
        from ..io import refuse_inputs
        from ..plot import plot_capacity
        from ..render import render_capacity
        from ..validate import integer

    fmt, out, plot, data, seeds = options["fmt"], options["out"], options["plot"], options["data"], options["seeds"]
    settings = shared.run_settings(options, stop_when_decided=True)
    if seeds is not None:
        shared.refuse_unused(ctx, ("plot",), "with --seeds: it draws one run's ranks; run that seed alone with --seed")
    refuse_inputs({"--out": out, "--plot": plot}, [model, options["weights"], data, options["from_path"]])
    shared.prepare_outputs(out, plot, fmt)
    shared.refuse_data_options(ctx, data)
    if options["from_path"] is not None:
        shared.refuse_unused(
            ctx, ("samples", "threshold"), "with --from: Assumption 1 is read from the file, not sampled"
        )
    layer = None if options["layer"] is None else integer("--layer", options["layer"])
    K = shared.renamed("--layer", layer, "--block", options["block"], note=f"same meaning: {_READS}")
    req = shared.run_requests(model, data, settings, options)
    keywords = shared.library_values(options, _AUDIT)
    result = capacity_audit(req.model, data=req.data, settings=req.settings, block=K, **keywords)
    if seeds is not None:
        shared.emit_seeds(fmt, result, out)
        return
    if plot is not None:
        plot_capacity(result, plot)
    shared.emit_result(fmt, result, out, lambda: render_capacity(result, out=out, plot=plot), sweep=False)
