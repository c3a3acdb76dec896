"""``mhaaudit reproduce TARGET``: run one of the paper's experiments and set ours beside the published values."""

from __future__ import annotations

from typing import Annotated

import typer

from ..defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_DEVICE,
    DEFAULT_SAMPLES,
    DEFAULT_SEED,
    DEFAULT_SEEDS_VARY,
    DEFAULT_SPLIT,
    DEFAULT_THRESHOLD,
    REPRODUCE_TARGETS,
)
from ..stdio import say
from .given import refuse_seed
from .library import importing
from .names import flagged, with_flags
from .options import (
    AllDraws,
    BatchSize,
    Data,
    DataSeed,
    Device,
    Format,
    FormatOpt,
    Out,
    Plot,
    Quiet,
    Samples,
    Seed,
    Split,
    Threshold,
    Vary,
    VaryOpt,
    WeightsSeed,
    integer_option,
)
from .output import emit, prepare_outputs

TARGETS = REPRODUCE_TARGETS
# The command's own options, with the targets they apply to. Every other option is a keyword of
# the target's library function (all_draws: stop_when_decided) and applies to the targets whose
# function takes it (see applies); the others refuse it: it would be silently ignored.
COMMAND_OPTIONS = {
    "plot": ("table3", "figure1", "figure2"),
    "seeds": ("table1", "table3", "figure1"),
    "vary": ("table1", "table3", "figure1"),
}
KEYWORD = {"all_draws": "stop_when_decided"}
EVERY_TARGET = ("target", "fmt", "out", "quiet")


def reproduce(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            help="table1 (ViT, Table 1), table3 (BERT/GPT-2, Table 3), figure1 (Kruskal-rank sweep) or figure2 "
            "(memorisation against H)."
        ),
    ],
    data: Data = None,
    split: Split = DEFAULT_SPLIT,
    model: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            help="KEY=NAME: run the protocol on another model in place of the paper's (keys: vit for "
            "table1/figure1; bert, gpt2 for table3).",
        ),
    ] = None,
    weights: Annotated[
        list[str] | None,
        typer.Option(
            "--weights",
            help="[KEY=]PATH: local trained weights for the trained column(s); without them offline, those "
            "columns are unavailable.",
        ),
    ] = None,
    context_length: Annotated[
        list[str] | None,
        typer.Option("--context-length", help="table3: [KEY=]N tokens per example (the paper: bert 512, gpt2 1024)."),
    ] = None,
    models: Annotated[
        list[str] | None, typer.Option("--models", help="table3: which of bert, gpt2 to run (default both).")
    ] = None,
    limit: Annotated[
        int | None, integer_option("--limit", help="Examples T (default: the paper's, 1973 images or 2000 texts).")
    ] = None,
    batch_size: BatchSize = str(DEFAULT_BATCH_SIZE),
    samples: Samples = DEFAULT_SAMPLES,
    threshold: Threshold = DEFAULT_THRESHOLD,
    seed: Seed = DEFAULT_SEED,
    seeds: Annotated[
        str | None,
        typer.Option(
            "--seeds",
            help="table1, table3, figure1: run once per seed (e.g. 0-2; instead of --seed) and set each published "
            "value beside the between-seed range of ours.",
        ),
    ] = None,
    vary: VaryOpt = Vary[DEFAULT_SEEDS_VARY],
    weights_seed: WeightsSeed = None,
    data_seed: DataSeed = None,
    device: Device = DEFAULT_DEVICE,
    all_draws: AllDraws = False,
    preset: Annotated[
        str | None,
        typer.Option(
            "--preset",
            help="figure2: the memorize grid (default cpu: about a minute on 2 cores; paper-fig2a is the paper's).",
        ),
    ] = None,
    values: Annotated[
        str | None, typer.Option("--values", help="figure2: the numbers of heads H, e.g. 1,2,4,8.")
    ] = None,
    sizes: Annotated[str | None, typer.Option("--sizes", help="figure2: training-set sizes T, e.g. 500,1000.")] = None,
    max_steps: Annotated[
        int | None, integer_option("--max-steps", help="figure2: cap on optimisation steps per point.")
    ] = None,
    fmt: FormatOpt = Format.table,
    out: Out = None,
    plot: Plot = None,
    quiet: Quiet = False,
) -> None:
    """Run one of the paper's experiments with its settings and print each published value beside ours.

    Online, the data are the paper's (imagenet-1k train, Wikipedia) and the
    trained columns use the paper's checkpoints; offline, the built-in data and
    random weights (trained columns need --weights). A row matches when the
    verdicts agree; every difference comes with its reason, taken from the run.
    \f

    Raises:
        InputError: before any work, when ``target`` is not a published target, an option given does not apply
            to it, a setting is out of range, a ``KEY=VALUE`` option is malformed, or ``--plot`` is given with
            ``--seeds``.
        OutputError: before any work, when ``--out`` or ``--plot`` cannot be written or is one of the inputs.
    """
    with importing(quiet):  # the library, torch with it: seconds
        from .. import validate
        from ..errors import InputError
        from ..io import refuse_inputs
        from ..progress import progress_enabled
        from ..reproduce import Reproduction, reproduce_paper
        from ..settings import Settings

    target = validate.choice("target", target, TARGETS)
    _refuse_inapplicable(ctx, target)
    Settings.resolve(
        device=device,
        samples=samples,
        threshold=threshold,
        seed=seed,
        weights_seed=weights_seed,
        data_seed=data_seed,
    )  # bad values: before any work
    # KEY=PATH or PATH alone (a name that is no local path is passed over)
    paths = [p for w in [*(weights or []), *(model or [])] for p in (w, w.partition("=")[2]) if p]
    refuse_inputs({"--out": out, "--plot": plot}, [data, *paths])
    prepare_outputs(out, plot, fmt)
    keywords = _options(target, ctx.params, progress_enabled(quiet))
    refuse_seed(ctx, seeds)
    if seeds is not None and plot is not None:
        raise InputError(
            "--plot has no effect with --seeds: it draws one run's curves; run that seed alone with --seed"
        )
    result = reproduce_paper(target, seeds=seeds, vary=vary.value, **keywords)
    if not isinstance(result, Reproduction):  # --seeds: one run per seed
        from ..render import print_report, seeds_report

        seeds_result = with_flags(result)
        emit(
            fmt,
            result.meta(),
            result.records(),
            sweep=result.sweep_rows() or None,
            out=out,
            render=lambda: print_report(with_flags(seeds_report(seeds_result))),
        )
        return
    with_flags(result)
    written = _plot(result, plot)
    meta = result.meta()
    emit(
        fmt,
        meta,
        result.records(),
        sweep=result.sweep_rows() or None,
        document=result.document(meta),
        out=out,
        render=lambda: _render(result, out, written),
    )


def _options(target: str, params: dict, progress: bool) -> dict:
    """The keywords of ``target``'s library function from the command's options (``params``).

    Raises:
        InputError: when ``--models`` names no model (``""`` or ``","``), or a keyed option is malformed.
    """
    from .. import validate

    p = params
    from ..reproduce import target_spec

    options = dict(seed=p["seed"], device=p["device"], progress=progress)
    if target == "figure2":
        preset = p["preset"] if p["preset"] is not None or p["values"] is not None else "cpu"
        return options | dict(preset=preset, values=p["values"], sizes=p["sizes"], max_steps=p["max_steps"])
    keys = tuple(target_spec(target)["models"])
    others = tuple(k for t in REPRODUCE_TARGETS if t != target for k in target_spec(t)["models"] if k not in keys)
    options |= {name: p[name] for name in ("data", "split", "limit", "batch_size", "samples", "threshold")}
    model = keyed("--model", p["model"], keys, others)
    options |= dict(model=model, weights_seed=p["weights_seed"], data_seed=p["data_seed"])
    if target in ("table1", "table3"):
        options |= dict(
            weights=keyed("--weights", p["weights"], keys, others),
            stop_when_decided=not p["all_draws"],
            on_note=lambda m: say(f"Note: {flagged(m)}"),
        )
    if target == "table3":
        lengths = keyed("--context-length", p["context_length"], keys)
        models = validate.split_list(p["models"])
        if p["models"] and models is None:  # "" or ",": no model named, not the default (both)
            from ..errors import InputError

            given = ",".join(p["models"])
            raise InputError(f"--models {given!r} names no model (use {', '.join(keys)} or {','.join(keys)})")
        options |= dict(
            models=models,
            context_length={k: validate.integer("--context-length", v) for k, v in lengths.items()},
        )
    return options


def keyed(name: str, values: list[str] | None, keys: tuple[str, ...], others: tuple[str, ...] = ()) -> dict:
    """``KEY=VALUE`` options (``VALUE`` alone when the target has one model) -> {key: value}. ``others``: the
    model keys of the other targets, which a target of one model refuses (``bert=NAME`` for table1) where the
    whole value names no existing path.

    Raises:
        InputError: when a value is empty, names no key of ``keys`` (and the target has several models, or the
            key is one of ``others``), has no value after ``=``, or a key is given twice; ``name`` (the option)
            begins the message.
    """
    import os

    from ..errors import InputError

    out: dict = {}
    for raw in values or []:
        if not raw.strip():  # no '=' to have nothing after, no model to name
            keyed_form = f" ({' or '.join(f'{k}=...' for k in keys)})" if len(keys) > 1 else ""
            raise InputError(f"{name} is empty: give a value{keyed_form}")
        key, sep, value = raw.partition("=")
        if sep and key.strip().lower() in keys:
            key, value = key.strip().lower(), value.strip()
        elif len(keys) == 1 and sep and key.strip().lower() in others and not os.path.exists(raw):
            raise InputError(
                f"{name} {raw!r}: {key.strip().lower()} is not a model of this target, whose model is {keys[0]} "
                f"(give {keys[0]}=VALUE or VALUE)"
            )
        elif len(keys) == 1:
            key, value = keys[0], raw.strip()
        else:
            want = " or ".join(f"{k}=..." for k in keys)
            raise InputError(f"{name} {raw!r}: name the model it is for ({want})")
        if not value:
            raise InputError(f"{name} {raw!r}: no value after '='")
        if key in out:
            raise InputError(f"{name} is given twice for {key}")
        out[key] = value
    return out


def applies(param: str) -> tuple[str, ...]:
    """The targets the option ``param`` (its Python name) applies to."""
    import inspect

    from ..reproduce.targets import TARGET_FUNCTIONS

    if param in COMMAND_OPTIONS:
        return COMMAND_OPTIONS[param]
    name = KEYWORD.get(param, param)
    return tuple(t for t in TARGETS if name in inspect.signature(TARGET_FUNCTIONS[t]).parameters)


def _refuse_inapplicable(ctx: typer.Context, target: str) -> None:
    from ..errors import InputError

    for param in ctx.params:
        source = ctx.get_parameter_source(param)  # typer's vendored click has its own enum: compare by name
        if param in EVERY_TARGET or getattr(source, "name", "") != "COMMANDLINE":
            continue
        targets = applies(param)
        if target not in targets:
            flag = "--" + param.replace("_", "-")
            raise InputError(f"{flag} does not apply to {target} (it applies to {', '.join(targets)})")


def _plot(result, plot):
    if plot is None:
        return None
    from ..reproduce.figures import plot_reproduction

    return plot_reproduction(result, plot)


def _render(result, out, plot) -> None:
    from ..render import render_reproduction

    render_reproduction(result, written=[str(p) for p in (out, plot) if p is not None])
