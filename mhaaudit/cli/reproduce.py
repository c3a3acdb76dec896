"""``mhaaudit reproduce TARGET``: run one of the paper's experiments and set ours beside the published values."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from ..defaults import REPRODUCE_TARGETS
from ..stdio import say
from . import options as shared
from .flags import ReproduceOptions, TargetArg

if TYPE_CHECKING:  # the options, typed for mypy
    from typing_extensions import Unpack

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


@shared.command_options(
    ReproduceOptions,
    "target data split model weights context_length models limit batch_size samples threshold seed seeds vary"
    " weights_seed data_seed device all_draws preset values sizes max_steps fmt out plot quiet",
)
def reproduce(ctx: typer.Context, target: TargetArg, **options: Unpack[ReproduceOptions]) -> None:
    """Run one of the paper's experiments with its settings and print each published value beside ours.

    Online, the data are the paper's (imagenet-1k train, Wikipedia) and the trained columns use the
    paper's checkpoints; offline, the built-in data and random weights (trained columns need --weights).
    A row matches when the verdicts agree; every difference comes with its reason, taken from the run.
    \f

    Raises:
        InputError: before any work, when ``target`` is not a published target, an option given does not apply
            to it, a setting is out of range, a ``KEY=VALUE`` option is malformed, or ``--plot`` is given with
            ``--seeds``.
        OutputError: before any work, when ``--out`` or ``--plot`` cannot be written or is one of the inputs.
    """
    with shared.importing(options["quiet"]):  # the library, torch with it: seconds
        from .. import validate
        from ..errors import InputError
        from ..io import refuse_inputs
        from ..progress import progress_enabled
        from ..reproduce import Reproduction, reproduce_paper
        from ..settings import Settings

    target = validate.choice("target", target, TARGETS)
    _refuse_inapplicable(ctx, target)
    Settings.resolve(
        device=options["device"],
        samples=options["samples"],
        threshold=options["threshold"],
        seed=options["seed"],
        weights_seed=options["weights_seed"],
        data_seed=options["data_seed"],
    )  # bad values: before any work
    fmt, out, plot = options["fmt"], options["out"], options["plot"]
    weights = [w.partition("=")[2] or w for w in options["weights"] or []]
    refuse_inputs({"--out": out, "--plot": plot}, [options["data"], *weights])
    shared.prepare_outputs(out, plot, fmt)
    keywords = _options(target, ctx.params, progress_enabled(options["quiet"]))
    seeds = options["seeds"]
    if seeds is not None and plot is not None:
        raise InputError(
            "--plot has no effect with --seeds: it draws one run's curves; run that seed alone with --seed"
        )
    result = reproduce_paper(target, seeds=seeds, vary=options["vary"].value, **keywords)
    if not isinstance(result, Reproduction):  # --seeds: one run per seed
        from ..render_seeds import render_seeds

        seeds_result = result
        shared.emit(
            fmt,
            result.meta(),
            result.records(),
            sweep=result.sweep_rows() or None,
            out=out,
            render=lambda: render_seeds(seeds_result),
        )
        return
    written = _plot(result, plot)
    meta = result.meta()
    shared.emit(
        fmt,
        meta,
        result.records(),
        sweep=result.sweep_rows() or None,
        document=result.document(meta),
        out=out,
        render=lambda: _render(result, out, written),
    )


def _options(target: str, params: dict, progress: bool) -> dict:
    """The keywords of ``target``'s library function from the command's options (``params``)."""
    from .. import validate

    p = params
    from ..reproduce import target_spec

    options = dict(seed=p["seed"], device=p["device"], progress=progress)
    if target == "figure2":
        preset = p["preset"] if p["preset"] is not None or p["values"] is not None else "cpu"
        return options | dict(preset=preset, values=p["values"], sizes=p["sizes"], max_steps=p["max_steps"])
    keys = tuple(target_spec(target)["models"])
    options |= {name: p[name] for name in ("data", "split", "limit", "batch_size", "samples", "threshold")}
    options |= dict(model=keyed("--model", p["model"], keys), weights_seed=p["weights_seed"], data_seed=p["data_seed"])
    if target in ("table1", "table3"):
        options |= dict(
            weights=keyed("--weights", p["weights"], keys),
            stop_when_decided=not p["all_draws"],
            on_note=lambda m: say(f"Note: {m}"),
        )
    if target == "table3":
        lengths = keyed("--context-length", p["context_length"], keys)
        options |= dict(
            models=validate.split_list(p["models"]),
            context_length={k: validate.integer("--context-length", v) for k, v in lengths.items()},
        )
    return options


def keyed(name: str, values: list[str] | None, keys: tuple[str, ...]) -> dict:
    """``KEY=VALUE`` options (``VALUE`` alone when the target has one model) -> {key: value}.

    Raises:
        InputError: when a value names no key of ``keys`` (and the target has several models), has no value
            after ``=``, or a key is given twice; ``name`` (the option) begins the message.
    """
    from ..errors import InputError

    out: dict = {}
    for raw in values or []:
        key, sep, value = raw.partition("=")
        if sep and key.strip().lower() in keys:
            key, value = key.strip().lower(), value.strip()
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
