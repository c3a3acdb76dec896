"""The options several commands share, each an ``Annotated`` alias: its flag and its help.

A command writes each of its options in its own signature, with its default there, from
:mod:`mhaaudit.defaults` where the library has the same one (``split: Split = DEFAULT_SPLIT``);
an option only one command has, or that it words its own way, is written out in that command.
The choices of an enum option are the library's tuple of them, so a choice is added in one
place, and ``--help`` imports no torch.
"""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from ..defaults import BACKENDS, SEEDS_VARY
from ..validate import digits


def whole_number(value: str | int) -> int:
    """An integer option's value, read as mhaaudit reads every integer (``validate.digits``): ASCII digits, with a
    sign, spaces around and underscores as ``int`` takes them. Left to typer, ``--limit 20.0`` would be 20 in some
    of its releases and ``--limit \u0662\u0660`` 20 in others, where mhaaudit's own options (``--layers``,
    ``--heads``, ...) refuse both.

    Raises:
        typer.BadParameter: when ``value`` is no such text.
    """
    if isinstance(value, int) and not isinstance(value, bool):  # a default, given as an integer
        return value
    try:
        return digits(str(value))
    except ValueError:
        raise typer.BadParameter(f"must be an integer, got {value!r}") from None


def integer_option(*flags: str, **kwargs) -> typer.models.OptionInfo:
    """An option taking one integer (:func:`whole_number`), shown as ``<int>``; ``kwargs`` as ``typer.Option``'s."""
    return typer.Option(*flags, parser=whole_number, metavar="<int>", **kwargs)


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
    integer_option(
        "--weights-seed",
        help="Seed of the random weights (default: --seed; trained weights have none).",
        show_default=False,
    ),
]
DataSeed = Annotated[
    int | None,
    integer_option(
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
Samples = Annotated[int, integer_option("--samples", "-N", help="Monte-Carlo draws per candidate size.")]
Threshold = Annotated[
    float,
    typer.Option(
        "--threshold", help="Satisfied fraction at which a size counts as independent (0.99 reproduces the paper)."
    ),
]
Seed = Annotated[
    int, integer_option("--seed", help="Seed from which all sampling derives (the same seed gives the same results).")
]
Rtol = Annotated[
    float | None,
    typer.Option(
        "--rtol",
        help="Relative rank tolerance (default: max(rows, cols) * eps of the features' dtype; "
        "0 with a positive --atol alone).",
    ),
]
Atol = Annotated[float | None, typer.Option("--atol", help="Absolute rank tolerance (default 0).")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")]


def output_file(value: str | Path) -> Path:
    """The file an output option names, as a ``Path``: a name that ends in a path separator, or whose last part is
    ``.`` or ``..``, names a folder, which ``Path`` would drop (``x.png/`` and ``x.png/.`` would write ``x.png``), so
    it is refused here, where the text is still whole; so is an empty name (``Path`` reads it as the current folder).

    Raises:
        typer.BadParameter: when ``value`` is empty, ends in a path separator or its last part is ``.`` or ``..``.
    """
    if isinstance(value, str) and not value:  # (``Path("")`` is the current folder)
        raise typer.BadParameter("an empty name names no file")
    ending = _folder_ending(value) if isinstance(value, str) else None
    if ending is not None:  # (``Path("x.png/.")`` is ``x.png``)
        raise typer.BadParameter(f"{value} ends in {ending}, which names a folder: give the name of a file")
    return Path(value)


_SEPARATORS = tuple(s for s in (os.sep, os.altsep) if s)


def _folder_ending(value: str) -> str | None:
    """What ends the name ``value`` and makes it name a folder: a path separator, or a last part ``.`` or ``..``
    (``Path`` drops the first two); None when nothing does."""
    if value.endswith(_SEPARATORS):
        return value[-1]
    last = value
    for s in _SEPARATORS:
        last = last.rsplit(s, 1)[-1]
    return last if last in (".", "..") else None


def named_path(value: str | Path) -> Path:
    """A path option's value as a ``Path``, an empty name refused: ``Path("")`` is the current folder, which
    the user did not name (``--save-features ''`` would write there, ``--from ''`` read it). A name that ends in a
    path separator (or whose last part is ``.`` or ``..``) names a folder, which ``Path`` would drop: it is refused
    when what the path names is there and is no folder (``a.npy/`` would read the file ``a.npy``).

    Raises:
        typer.BadParameter: when ``value`` is empty, or names a folder where a file or other non-folder is.
    """
    if isinstance(value, str) and not value:
        raise typer.BadParameter("an empty name names no file or folder")
    path = Path(value)
    folder = isinstance(value, str) and _folder_ending(value) is not None
    if folder and os.path.lexists(path) and not os.path.isdir(path):  # (``Path("a.npy/")`` is ``a.npy``)
        raise typer.BadParameter(f"{value} names a folder, but {path} is not one: give the name of the file")
    return path


def output_option(flag: str, help: str) -> typer.models.OptionInfo:
    """An option naming a file to write (:func:`output_file`), shown as ``<path>`` as other paths are."""
    return typer.Option(flag, parser=output_file, metavar="<path>", help=help)


Out = Annotated[Path | None, output_option("--out", help="Write the records to this parquet file (atomically).")]
Plot = Annotated[Path | None, output_option("--plot", help="Draw the sweep curve(s) to this .png/.pdf/.svg file.")]
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
        "--weights",
        help="Trained weights for the trained column: a local folder, or a weights file (.safetensors, .bin, .pt, "
        "...) whose tensors fit the model.",
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
ContextLength = Annotated[int | None, integer_option("--context-length", help="Text models: tokens per example n.")]
AllDraws = Annotated[
    bool,
    typer.Option(
        "--all-draws",
        help="Always make every draw (by default a failing test stops once its verdict is settled).",
    ),
]
