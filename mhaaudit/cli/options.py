"""What the commands share: their common options, the one ``--format`` enum, and the one output path.

Every command ends in :func:`emit`: strict JSON or parquet on stdout, the records also written
to ``--out`` when asked, or the command's renderer for people. Output paths are checked by
:func:`prepare_outputs` before any work, so a bad path costs nothing and writes nothing.

The options several commands share are one table: :class:`Options` (each option's ``Annotated``
type: flag, help, panel) with its defaults :data:`DEFAULTS`; :func:`command_options` gives each
command those it lists, in the order of its ``--help``, beside the options that are its own
(:mod:`.flags`, each alias with its :class:`Default`).

No option is silently ignored: :func:`given` tells which options the user typed and
:func:`refuse_unused` turns one that has no effect in the combination given into an input error
naming the conflict. A renamed option keeps its old name for one release through
:func:`renamed`, which warns on stderr.
"""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Callable, Collection, Mapping
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, TypedDict, TypeVar, get_type_hints

import typer

from ..defaults import BACKENDS, DEFAULT_SAMPLES, DEFAULT_THRESHOLD, SEEDS_VARY
from ..stdio import say

if TYPE_CHECKING:  # the library is imported only when a command runs
    from ..request import Requests
    from ..settings import Settings


class Format(str, Enum):
    """The output of every command: a table for people, or JSON / parquet for programs (stdout)."""

    table = "table"
    json = "json"
    parquet = "parquet"


# The enums of the library's choices, each member named as its value, built from the library's one tuple of
# them; mypy cannot list members built at import: ``Vary("both")``, not ``Vary.both``.
Backend = Enum("Backend", {v: v for v in BACKENDS}, type=str)  # type: ignore[misc]
Vary = Enum("Vary", {v: v for v in SEEDS_VARY}, type=str)  # type: ignore[misc]

SeedsOpt = Annotated[
    str | None,
    typer.Option(
        "--seeds",
        help="Run once per seed (e.g. 0-4 or 0,3,7; instead of --seed) and report each cell's median and range over "
        "the seeds, and the differences between columns with their range.",
    ),
]
VaryOpt = Annotated[
    Vary,
    typer.Option(
        "--vary",
        help="With --seeds: what the seeds vary: both (weights and data, as --seed), weights (the data seed held "
        "fixed) or data (the weights seed held fixed).",
    ),
]
WeightsSeed = Annotated[
    int | None,
    typer.Option(
        "--weights-seed",
        help="Seed of the random weights (default: --seed; trained weights have none).",
        show_default=False,
    ),
]
DataSeed = Annotated[
    int | None,
    typer.Option(
        "--data-seed",
        help="Seed of the data: the built-in images or text and the choice of examples (default: --seed).",
        show_default=False,
    ),
]
KeepDuplicates = Annotated[
    bool,
    typer.Option(
        "--keep-duplicates",
        help="Keep exact duplicate inputs (by default they are found before the forward pass, reported and dropped, "
        "the same ones in every column).",
    ),
]
FormatOpt = Annotated[Format, typer.Option("--format", help="table (people), json or parquet (stdout).")]
Samples = Annotated[int, typer.Option("--samples", "-N", help="Monte-Carlo draws per candidate size.")]
Threshold = Annotated[
    float,
    typer.Option(
        "--threshold", help="Satisfied fraction at which a size counts as independent (0.99 reproduces the paper)."
    ),
]
Seed = Annotated[
    int, typer.Option("--seed", help="Seed from which all sampling derives (the same seed gives the same results).")
]
Rtol = Annotated[
    float | None,
    typer.Option("--rtol", help="Relative rank tolerance (default: max(rows, cols) * eps of the features' dtype)."),
]
Atol = Annotated[float | None, typer.Option("--atol", help="Absolute rank tolerance (default 0).")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")]
Out = Annotated[Path | None, typer.Option("--out", help="Write the records to this parquet file (atomically).")]
Plot = Annotated[Path | None, typer.Option("--plot", help="Draw the sweep curve(s) to this .png/.pdf/.svg file.")]
Quiet = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress on stderr (shown only when stderr is a terminal).")
]

# Options of the commands that run a model over data (check, capacity).
ModelArg = Annotated[
    str,
    typer.Argument(
        help="An alias (vit-base, bert-base, bert-large, gpt2, gpt2-large), a Hugging Face id, a local folder, or "
        "timm:<name>."
    ),
]
BackendOpt = Annotated[Backend | None, typer.Option("--backend", help="Force transformers (hf) or timm.")]
Weights = Annotated[
    str | None,
    typer.Option(
        "--weights", help="Local folder (transformers) or file (timm) with trained weights for the trained column."
    ),
]
Data = Annotated[
    str | None,
    typer.Option(
        "--data",
        help="Image folder; .parquet or .arrow file; .txt, .jsonl, .csv or .tsv text file; a folder written by "
        "save_to_disk; a Hugging Face dataset id (wikipedia, imagenet-1k, ...). Default: built-in offline data.",
    ),
]
Split = Annotated[
    str, typer.Option("--split", help="Split of a Hugging Face dataset or of a DatasetDict saved with save_to_disk.")
]
TextColumn = Annotated[
    str | None,
    typer.Option(
        "--text-column",
        help="Column (or .jsonl field) holding the text. Default: one named text, content, body, sentence, document, "
        "..., else the only string column.",
    ),
]
ImageColumn = Annotated[
    str | None,
    typer.Option(
        "--image-column",
        help="Column holding the images. Default: one named image, img, ..., else the only image column.",
    ),
]
ConvertRgb = Annotated[
    bool,
    typer.Option(
        "--convert-rgb",
        help="Convert grayscale, RGBA, paletted and other images to RGB, as torchvision's ImageFolder does (by "
        "default only RGB images are kept, as in the paper, and the others are counted as skipped).",
    ),
]
BatchSize = Annotated[
    str,
    typer.Option(
        "--batch-size",
        help="Examples per forward pass: an integer, or auto (on a GPU the largest batch that fits, on the CPU from "
        "the memory available).",
    ),
]
Revision = Annotated[
    str | None,
    typer.Option(
        "--revision", help="Branch, tag or commit of a Hugging Face hub model (config, weights and tokenizer)."
    ),
]
TrustRemoteCode = Annotated[
    bool,
    typer.Option(
        "--trust-remote-code",
        help="Let a hub model whose repository carries its own modelling code run that code on this machine (off by "
        "default).",
    ),
]
ContextLength = Annotated[int | None, typer.Option("--context-length", help="Text models: tokens per example n.")]


# --------------------------------------------------------------------------- options and request objects of
# the commands that run checks (check, capacity, kruskal)

AllDraws = Annotated[
    bool,
    typer.Option(
        "--all-draws",
        help="Always make every draw (by default a test stops once its verdict can no longer change).",
    ),
]


def run_settings(options: Mapping[str, Any], *, stop_when_decided: bool) -> Settings:
    """The run's :class:`~mhaaudit.settings.Settings` from a command's options, by their Python names
    (``device``, ``samples``, ..., ``quiet``: progress only for a watched terminal)."""
    from ..progress import progress_enabled
    from ..request import SETTINGS_KEYWORDS, build_settings

    keywords = {k: v for k, v in options.items() if k in SETTINGS_KEYWORDS}
    keywords |= {"stop_when_decided": stop_when_decided, "progress": progress_enabled(options.get("quiet", False))}
    return build_settings(None, keywords)


def request_keywords(options: Mapping[str, Any]) -> dict[str, Any]:
    """A command's model and data options, by their Python names, as :func:`mhaaudit.request.build_requests`
    takes them (an enum choice as its value)."""
    from ..request import DATA_KEYWORDS, MODEL_KEYWORDS

    return library_values(options, MODEL_KEYWORDS.keys() | DATA_KEYWORDS.keys())


def library_values(options: Mapping[str, Any], names: Collection[str]) -> dict[str, Any]:
    """The options among ``names`` (their Python names, the library's parameters) as the library takes
    them: an enum choice as its value."""
    return {k: getattr(v, "value", v) for k, v in options.items() if k in names}


def run_requests(model: str, data: str | None, settings: Settings, options: Mapping[str, Any]) -> Requests:
    """The model and data requests of ``check`` and ``capacity``, built from the options (by their
    Python names) in the library's one place (:func:`mhaaudit.request.build_requests`)."""
    from ..request import build_requests

    return build_requests(model, data, settings, request_keywords(options))


class CommandTimes(NamedTuple):
    """When a command ran what (``time.perf_counter()`` values, and seconds): ``startup_s``, the
    process's start-up before the command, when the process runs the command line
    (:func:`mhaaudit.phases.startup_seconds`); ``begun``, the command's start; ``imported``, the
    library imported; ``rendering``, the outputs begun."""

    startup_s: float
    begun: float
    imported: float
    rendering: float


def add_command_times(timings: dict[str, float], times: CommandTimes) -> None:
    """Put the command line's own phases into a result's ``timings`` (in place): ``imports`` (the
    start-up and the library's import, with the model libraries' own), ``render`` (the outputs
    written and the records made, up to the moment the timings themselves are written) and
    ``total``, the command's wall time with the start-up; ``other`` is what no phase claimed."""
    from .. import phases

    now = time.perf_counter()
    spent = {k: v for k, v in timings.items() if k not in (phases.OTHER, "total")}
    spent["imports"] = spent.get("imports", 0.0) + times.startup_s + (times.imported - times.begun)
    spent["render"] = spent.get("render", 0.0) + (now - times.rendering)
    timings.clear()
    timings.update(phases.timings(spent, times.startup_s + (now - times.begun)))


def emit_result(
    fmt: Format,
    result,
    out: Path | None,
    render: Callable[[], None],
    sweep: bool = True,
    times: CommandTimes | None = None,
) -> None:
    """:func:`emit` of a result object (an audit, a capacity audit, an estimate, or their seeds):
    its meta, its records and (``sweep``) its sweep rows. With ``times``, the command line's own
    phases join the result's timings (:func:`add_command_times`) before they are written."""
    rows = result.sweep_rows() if sweep else None
    records = result.records()
    if times is not None:
        add_command_times(result.timings, times)
    emit(fmt, result.meta(), records, sweep=rows, out=out, render=render)


def emit_seeds(fmt: Format, result, out: Path | None) -> None:
    """:func:`emit` of a :class:`~mhaaudit.seeds.SeedsResult`: its records, and its sweep rows when it has any."""
    from ..render_seeds import render_seeds

    rows = result.sweep_rows() or None
    emit(fmt, result.meta(), result.records(), sweep=rows, out=out, render=lambda: render_seeds(result))


# --------------------------------------------------------------------------- the shared options, one table


class Common(TypedDict):
    """The options every command takes."""

    seed: Seed
    device: Device
    fmt: FormatOpt
    quiet: Quiet


class Run(Common):
    """The options of the commands that run the audit's checks (check, capacity, kruskal, reproduce)."""

    samples: Samples
    threshold: Threshold
    vary: VaryOpt
    weights_seed: WeightsSeed
    data_seed: DataSeed
    out: Out


class Checking(Run):
    """The options of the commands that take the rank tolerances (check, capacity, kruskal)."""

    rtol: Rtol
    atol: Atol


class Reading(TypedDict):
    """How a model and its data are read (check, capacity, kruskal)."""

    backend: BackendOpt
    revision: Revision
    trust_remote_code: TrustRemoteCode
    text_column: TextColumn
    image_column: ImageColumn
    convert_rgb: ConvertRgb


class Source(TypedDict):
    """The data and how they are batched (check, capacity, reproduce)."""

    data: Data
    split: Split
    batch_size: BatchSize


class Capture(Reading, Source):
    """The options of the commands that capture a model's features over data (check, capacity)."""

    weights: Weights
    keep_duplicates: KeepDuplicates
    context_length: ContextLength
    seeds: SeedsOpt


class Plotting(TypedDict):
    """The figure of a run (check, kruskal, reproduce)."""

    plot: Plot


class Draws(Plotting):
    """How many Monte-Carlo draws a test makes, and the figure (check, kruskal; reproduce words its own
    ``--all-draws``)."""

    all_draws: AllDraws


class Options(Checking, Capture, Draws):
    """Every option that commands share, each typed by its ``Annotated`` alias (its flag, help and
    panel), with their defaults in :data:`DEFAULTS`. A command takes its share of them (a subclass,
    or one of the groups above) in ``**options`` through :func:`command_options`."""


#: The defaults of :class:`Options`.
DEFAULTS: Options = {
    "backend": None,
    "weights": None,
    "data": None,
    "split": "train",
    "text_column": None,
    "image_column": None,
    "convert_rgb": False,
    "batch_size": "32",
    "keep_duplicates": False,
    "context_length": None,
    "revision": None,
    "trust_remote_code": False,
    "samples": DEFAULT_SAMPLES,
    "threshold": DEFAULT_THRESHOLD,
    "seed": 0,
    "seeds": None,
    "vary": Vary("both"),
    "weights_seed": None,
    "data_seed": None,
    "rtol": None,
    "atol": None,
    "device": "auto",
    "all_draws": False,
    "fmt": Format.table,
    "out": None,
    "plot": None,
    "quiet": False,
}

_Command = TypeVar("_Command", bound=Callable[..., None])


class Default(NamedTuple):
    """The default of an option that a command words its own way (:mod:`.flags`), in its alias beside
    its flag and help: ``Annotated[int, typer.Option("--limit", help=...), Default(2000)]``. Such an
    option without one defaults to None (not given); a shared option's default is in :data:`DEFAULTS`."""

    value: Any


def command_options(options: type, order: str) -> Callable[[_Command], _Command]:
    """Give a command the options it takes, ``options`` (a TypedDict of :class:`Options`' fields, and of
    the command's own from :mod:`.flags`), with their defaults: a shared option's from :data:`DEFAULTS`,
    one of the command's own from its alias (:class:`Default`).

    ``order`` names, space-separated and in the order of the command's ``--help``, every parameter
    of the command (its ``typer.Context`` aside): a parameter the command declares itself (its
    argument) stands where it is named, and each field of ``options`` where it is named; the command
    takes those in ``**options: Unpack[...]`` of the same TypedDict. The command's ``__signature__``
    and ``__annotations__`` are made to show them all, as Typer reads them (``inspect.signature``,
    ``typing.get_type_hints``), so its ``--help`` lists each option once, in that order.

    Raises:
        TypeError: when ``order`` names a parameter twice, or does not name exactly the command's own
            parameters and the fields of ``options``; when a field of ``options`` is neither typed as in
            :class:`Options` nor by an option's ``Annotated`` alias; when the command declares a field of
            ``options`` itself, or has no ``**options`` to take them in.
    """
    names = order.split()
    fields = get_type_hints(options, include_extras=True)
    defaults = _defaults(options, fields)

    def build(command: _Command) -> _Command:
        sig = inspect.signature(command)
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        declared = {p.name: p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD}
        context = [p.name for p in declared.values() if p.annotation in ("typer.Context", typer.Context)]
        takes = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()) or not fields
        if len(set(names)) < len(names) or set(names) != set(declared).union(fields).difference(context):
            raise TypeError(f"{command.__name__}: its order must name each of its options once: {order!r}")
        if set(declared) & set(fields) or not takes:
            raise TypeError(f"{command.__name__}: it takes {options.__name__} in **options, and only there")
        params = [declared[n] for n in context] + [
            declared[n] if n in declared else inspect.Parameter(n, kind, default=defaults[n], annotation=fields[n])
            for n in names
        ]
        # Under ``from __future__ import annotations`` the command's own annotations are strings: evaluated
        # in its module, as inspect.signature(eval_str=True) would (``**options`` is typing only).
        params = [p.replace(annotation=_evaluated(p.annotation, command)) for p in params]
        command.__signature__ = sig.replace(parameters=params, return_annotation=None)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
        return command

    return build


def _defaults(options: type, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The default of each of ``fields`` (of ``options``): a shared option's from :data:`DEFAULTS`, a
    command's own from its alias (:class:`Default`; None without one).

    Raises:
        TypeError: when a field is neither typed as in :class:`Options` nor by an option's alias.
    """
    table = get_type_hints(Options, include_extras=True)
    shared: Mapping[str, Any] = DEFAULTS
    out = {}
    for name, hint in fields.items():
        if table.get(name) is hint:
            out[name] = shared[name]
            continue
        metadata = getattr(hint, "__metadata__", ())
        if not any(isinstance(m, typer.models.OptionInfo) for m in metadata):
            raise TypeError(f"{options.__name__}: {name} is neither a shared option nor typed by an option's alias")
        out[name] = next((m.value for m in metadata if isinstance(m, Default)), None)
    return out


def _evaluated(annotation: Any, command: Callable) -> Any:
    return eval(annotation, vars(sys.modules[command.__module__])) if isinstance(annotation, str) else annotation


# --------------------------------------------------------------------------- options given, unused, renamed


def given(ctx: typer.Context, *names: str) -> list[str]:
    """The parameters among ``names`` (Python names) whose value the user gave, not their default."""
    out = []
    for name in names:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            out.append(name)
    return out


def flag(ctx: typer.Context, name: str) -> str:
    """The option a parameter is typed as (``limit`` -> ``--limit``)."""
    for p in ctx.command.params:
        if p.name == name:
            return max(p.opts, key=len)
    return name


def refuse_unused(ctx: typer.Context, names, why: str) -> None:
    """An input error when any of ``names`` was given: they have no effect ``why`` (e.g. "with --from").

    Raises:
        InputError: when any of ``names`` was given on the command line, naming their options.
    """
    from ..errors import InputError

    used = [flag(ctx, n) for n in given(ctx, *names)]
    if used:
        verb = "has" if len(used) == 1 else "have"
        raise InputError(f"{', '.join(used)} {verb} no effect {why}")


def refuse_data_options(ctx: typer.Context, data: str | None) -> None:
    """``--split`` names a split of a Hugging Face dataset: refused with the built-in data or a local file."""
    if data is None:
        refuse_unused(ctx, ("split",), "without --data: the built-in data has no splits")
    elif Path(data).expanduser().is_file():
        refuse_unused(ctx, ("split",), f"on a local file ({data}): it names a split of a Hugging Face dataset")


def deprecation_line(old_flag: str, new_flag: str, note: str = "") -> str:
    """The warning a deprecated option name prints on stderr."""
    return f"Warning: {old_flag} is deprecated and will be removed in the next release; use {new_flag}" + (
        f" ({note})" if note else ""
    )


def renamed(old_flag: str, old_value, new_flag: str, new_value, note: str = ""):
    """The value of an option renamed from ``old_flag`` to ``new_flag`` (both default None).

    The old name still works for one release and warns on stderr; giving both is an input error.

    Raises:
        InputError: when both ``old_flag`` and ``new_flag`` are given.
    """
    from ..errors import InputError

    if old_value is None:
        return new_value
    if new_value is not None:
        raise InputError(f"{old_flag} is the deprecated name of {new_flag}; give {new_flag} only")
    say(deprecation_line(old_flag, new_flag, note))
    return old_value


def importing(quiet: bool):
    """A spinner on stderr while a command imports the library (torch and the model libraries take
    seconds); nothing when nobody watches (see :func:`mhaaudit.progress.progress_enabled`). A command
    run as one process imports no distributed-training packages (:mod:`mhaaudit.imports`)."""
    from .. import imports
    from ..progress import progress_enabled, status

    imports.LIGHT = True
    return status("Starting: importing torch and the model libraries", progress_enabled(quiet))


def parquet_to_stdout(fmt: Format) -> bool:
    """Whether ``--format parquet`` sends its bytes to stdout: not to a terminal (``--out`` gets them)."""
    return fmt == Format.parquet and not sys.stdout.isatty()


def check_stdout(fmt: Format, out: Path | None = None) -> None:
    """Binary parquet is not for a terminal: refuse it before any work, unless ``--out`` takes the records.

    Raises:
        InputError: when ``fmt`` is parquet, stdout is a terminal and ``out`` is None.
    """
    from ..errors import InputError

    if fmt == Format.parquet and sys.stdout.isatty() and out is None:
        raise InputError(
            "--format parquet writes binary data to stdout; redirect it to a file or pipe, or use --out FILE.parquet"
        )


def prepare_outputs(out: Path | None, plot: Path | None, fmt: Format) -> None:
    """Check every output path (``--out`` parquet, ``--plot`` figure, stdout) before any work.

    Raises:
        InputError: when ``out`` is not a ``.parquet`` file name, or parquet would go to a terminal.
        OutputError: when ``out`` or ``plot`` cannot be written, or ``plot`` is not a figure file name.
    """
    from ..errors import InputError
    from ..io import check_writable
    from ..plot import check_plot_path

    if out is not None:
        if out.suffix.lower() != ".parquet":
            raise InputError(f"--out {out}: the records are written as parquet; use a .parquet file name")
        check_writable(out)
    if plot is not None:
        check_plot_path(plot)
    check_stdout(fmt, out)


def emit(
    fmt: Format,
    meta: dict,
    records: list[dict],
    *,
    render: Callable[[], None],
    sweep: list[dict] | None = None,
    document: dict | None = None,
    out: Path | None = None,
    write_out: bool = True,
) -> None:
    """The one output path of every command.

    ``records`` (and the ``sweep`` rows, which follow them in parquet tagged ``check = "sweep"``)
    go to the ``out`` parquet file when one is given, stamped with ``meta``. Then stdout gets the
    JSON ``document`` (default ``{"meta", "records"[, "sweep"]}``) as strict JSON, the same rows
    as parquet (not to a terminal: there ``--out`` has them, and stderr says so), or, for the
    table, whatever ``render()`` prints.
    """
    from ..tables import table_rows

    rows = table_rows(records, sweep)
    if out is not None and write_out:  # write_out=False: the command wrote its --out file itself
        from ..io import write_parquet

        write_parquet(rows, out, meta)
    if fmt == Format.json:
        from ..render import print_json

        if document is None:
            document = {"meta": meta, "records": records} | ({} if sweep is None else {"sweep": sweep})
        print_json(document)
    elif parquet_to_stdout(fmt):
        from ..io import parquet_bytes

        sys.stdout.buffer.write(parquet_bytes(rows, meta))
        sys.stdout.flush()
    elif fmt == Format.parquet:  # stdout is a terminal: the records are in the --out file (prepare_outputs)
        say(f"Wrote {out} (parquet is not printed to a terminal)")
    else:
        render()
