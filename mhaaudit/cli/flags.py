"""Each command's own options: those only one command takes, or that it words its own way.

The rest of the table of :mod:`.options`: each option an ``Annotated`` alias (its flag, its help
and, unless it is None, its :class:`~.options.Default`), and each command's options a TypedDict
(``CheckOptions``, ...), its own beside the shared groups it takes: the TypedDict its ``**options``
unpack and :func:`~.options.command_options` reads. An option that two commands word differently
(``--limit``, ``--sweep``, ``--plot``) has an alias for each.

The choices of an enum option are the library's one tuple of them (:mod:`mhaaudit.defaults`),
so a choice is added in one place, and the command line still imports no torch.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from ..defaults import (
    CAPACITY_ATTENTION,
    KRUSKAL_VECTORS,
    MEMORIZE_CONTEXTS,
    MEMORIZE_PRESETS,
    MEMORIZE_TASKS,
    MEMORIZE_VARY,
)
from .options import Capture, Checking, Common, Default, Draws, Plotting, Reading, Run, Source

# The enums of the choices, each member named as its value, from the library's tuple (as options.Backend).
Attention = Enum("Attention", {v: v for v in CAPACITY_ATTENTION}, type=str)  # type: ignore[misc]
Vectors = Enum("Vectors", {v: v for v in KRUSKAL_VECTORS}, type=str)  # type: ignore[misc]
Preset = Enum("Preset", {name: name for name in MEMORIZE_PRESETS}, type=str)  # type: ignore[misc]
Task = Enum("Task", {v: v for v in MEMORIZE_TASKS}, type=str)  # type: ignore[misc]
Context = Enum("Context", {v: v for v in MEMORIZE_CONTEXTS}, type=str)  # type: ignore[misc]
Varied = Enum("Varied", {v: v for v in MEMORIZE_VARY}, type=str)  # type: ignore[misc]


# --------------------------------------------------------------------------- check

CheckVariants = Annotated[
    list[str] | None,
    typer.Option(
        "--variants",
        help="Columns: embedding, random-attention, random, trained (images; default all); random and/or trained "
        "with --layers or for text.",
    ),
]
CheckLayer = Annotated[
    int | None,
    typer.Option(
        "--layer",
        help="Depth K of the random and trained image columns: the tokens read are the output of block K "
        "(default 1 = after the first block; --layers 0 reads the embedding output).",
        show_default=False,
    ),
]
CheckLayers = Annotated[
    str | None,
    typer.Option(
        "--layers",
        help="Audit several depths in one pass, e.g. 0-6 or 0,1: the output of each block K (0 = embedding "
        "output). Text default: 0,1.",
    ),
]
CheckLimit = Annotated[int, typer.Option("--limit", help="Number of examples T."), Default(2000)]
CheckQueryIndex = Annotated[
    int | None,
    typer.Option("--query-index", help="Token used as the query (default: 0 = [CLS] for encoders, last for decoders)."),
]
CheckSweep = Annotated[
    bool, typer.Option("--sweep", help="Also compute the Kruskal-rank curve (Figure 1) of each column."), Default(False)
]
SaveFeatures = Annotated[
    Path | None,
    typer.Option("--save-features", help="Write each column's reduced features here, for mhaaudit kruskal."),
]
Checkpoints = Annotated[
    str | None,
    typer.Option(
        "--checkpoints",
        help="Audit a series of checkpoints, each as --weights would: a comma list of folders or weights files, or a "
        "glob ('runs/ckpt-*', ordered by the step number in each name). A comma list in --revision audits hub "
        "revisions the same way.",
        show_default=False,
    ),
]
FailOn = Annotated[
    list[str] | None,
    typer.Option(
        "--fail-on",
        help="Exit 1 when this check fails in any column: general_position, assumption_1, assumption_2, "
        "assumption_3 or any.",
    ),
]


class CheckOptions(Checking, Capture, Draws):
    """The options of ``check``: the groups it shares, and its own: the columns, depths and examples, and
    what a run writes."""

    variants: CheckVariants
    layer: CheckLayer
    layers: CheckLayers
    limit: CheckLimit
    query_index: CheckQueryIndex
    sweep: CheckSweep
    save_features: SaveFeatures
    fail_on: FailOn
    checkpoints: Checkpoints


# --------------------------------------------------------------------------- capacity

CapacityLimit = Annotated[int, typer.Option("--limit", help="Number of examples T (rows of Z)."), Default(2000)]
CapacityHeads = Annotated[
    str | None,
    typer.Option(
        "--heads",
        help="Certificate with the first h heads for each h: 1-12, 3 or 1,2,4 (default: all heads of the block).",
    ),
]
AttentionOpt = Annotated[
    Attention,
    typer.Option(
        "--attention", help="Key/query weights of Z: the model's own attention block, or random (Xavier, seeded)."
    ),
    Default(Attention("model")),
]
SharedContext = Annotated[
    bool,
    typer.Option(
        "--shared-context",
        help="Proposition 2: every example uses the context of example 0 with its own query; checks rank(Z) <= H "
        "(n - 1) + 1.",
    ),
    Default(False),
]
FromPath = Annotated[
    Path | None,
    typer.Option(
        "--from",
        help="Read the Assumption 1/2 verdicts from a parquet file written by 'mhaaudit check --out' instead of "
        "auditing.",
    ),
]
CapacityVariants = Annotated[
    list[str] | None,
    typer.Option(
        "--variants", help="Columns: random and/or trained (default both; trained needs the hub or --weights)."
    ),
]
Block = Annotated[
    int | None,
    typer.Option(
        "--block",
        help="Attention block K whose heads build Z (default 2: the paper applies Theorem 1 to the second "
        "attention layer, whose input satisfies Assumptions 1 and 2). The tokens read, audited and "
        "certified, are its input: the output of block K-1 (for K = 1, the embedding output).",
    ),
]
CapacityLayer = Annotated[
    int | None,
    typer.Option(
        "--layer",
        help="Deprecated alias of --block (same meaning: the tokens read are the input of block K, the output of "
        "block K-1).",
    ),
]
CapacityPlot = Annotated[
    Path | None,
    typer.Option(
        "--plot", help="Draw rank(Z) against the number of heads, with the bound lines, to this .png/.pdf/.svg file."
    ),
]


class CapacityOptions(Checking, Capture):
    """The options of ``capacity``: the groups it shares, and its own: the heads and block certified, and
    where the verdicts come from."""

    heads: CapacityHeads
    attention: AttentionOpt
    shared_context: SharedContext
    from_path: FromPath
    variants: CapacityVariants
    block: Block
    layer: CapacityLayer
    limit: CapacityLimit
    plot: CapacityPlot


# --------------------------------------------------------------------------- kruskal

FeaturesArg = Annotated[
    Path | None,
    typer.Argument(
        help="A T x d matrix (.npy, .pt, .safetensors, .parquet), T x n x d tokens with --query-index, or a "
        "folder written by --save-features. Omit it to capture query vectors from --model.",
        show_default=False,
    ),
]
K = Annotated[
    list[int] | None,
    typer.Option("--k", help="Candidate size (repeatable). Default: n and min(T, d) when n is known, else --sweep."),
]
KruskalSweep = Annotated[
    bool,
    typer.Option("--sweep", help="Satisfied fraction for every k from 1 to min(T, d) (the paper's Figure 1)."),
    Default(False),
]
KruskalSeeds = Annotated[
    str | None,
    typer.Option(
        "--seeds",
        help="With --model: capture and estimate once per seed (e.g. 0-4 or 0,3,7; instead of --seed) and report "
        "the median and range over the seeds.",
    ),
]
KruskalQueryIndex = Annotated[
    int | None,
    typer.Option(
        "--query-index",
        help="Token used as the query: its row in a T x n x d array, or, with --model, in the model's tokens (0 "
        "= [CLS], -1 = last).",
    ),
]
Key = Annotated[
    str | None,
    typer.Option("--key", help="Tensor name (.pt/.safetensors holding several) or column (.parquet) to read."),
]
VectorsOpt = Annotated[
    Vectors | None,
    typer.Option(
        "--vectors",
        help="With a saved feature folder or --model: the query vectors or the Assumption 3 vectors (default: "
        "queries).",
        show_default=False,
    ),
]
KruskalN = Annotated[
    int | None,
    typer.Option(
        "--n",
        "--context-length",
        help="Context length n: tested by default and marked on the plot. With --model it sets a text model's n "
        "(as check --context-length); a saved feature folder knows its n.",
    ),
]
KruskalModel = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="With no FEATURES: the model to capture query vectors from (default: vit-base).",
        show_default=False,
    ),
]
KruskalVariants = Annotated[
    str | None,
    typer.Option(
        "--variants",
        help="With no FEATURES: the one column to capture: embedding, random-attention, random, trained, "
        "random-L<k> or trained-L<k> (default: random).",
        show_default=False,
    ),
]
Variant = Annotated[str | None, typer.Option("--variant", hidden=True, help="Deprecated name of --variants.")]
KruskalWeights = Annotated[
    str | None,
    typer.Option(
        "--weights",
        help="With no FEATURES and a trained column: local folder (transformers) or file (timm) with the trained "
        "weights.",
    ),
]
KruskalData = Annotated[
    str | None, typer.Option("--data", help="With no FEATURES: data source (default: the built-in offline data).")
]
KruskalSplit = Annotated[
    str, typer.Option("--split", help="With no FEATURES: dataset split for Hugging Face datasets."), Default("train")
]
KruskalLimit = Annotated[int, typer.Option("--limit", help="With no FEATURES: number of examples T."), Default(2000)]
KruskalBatchSize = Annotated[
    str,
    typer.Option("--batch-size", help="With no FEATURES: examples per forward pass, an integer or auto."),
    Default("32"),
]
KruskalKeepDuplicates = Annotated[
    bool,
    typer.Option(
        "--keep-duplicates",
        help="With no FEATURES: keep exact duplicate inputs (by default they are found before the forward pass, "
        "reported and dropped).",
    ),
    Default(False),
]


class KruskalOptions(Checking, Reading, Draws):
    """The options of ``kruskal``: the groups it shares, and its own: its file's, and how it captures one
    column without one."""

    k: K
    sweep: KruskalSweep
    seeds: KruskalSeeds
    query_index: KruskalQueryIndex
    key: Key
    vectors: VectorsOpt
    n: KruskalN
    model: KruskalModel
    variants: KruskalVariants
    variant: Variant
    weights: KruskalWeights
    data: KruskalData
    split: KruskalSplit
    limit: KruskalLimit
    batch_size: KruskalBatchSize
    keep_duplicates: KruskalKeepDuplicates


# --------------------------------------------------------------------------- memorize

_RANGE = "one value, a range or a list: 4, 1-8 or 1,2,4,8; several values vary it"

VariedOpt = Annotated[
    Varied | None,
    typer.Option(
        "--vary",
        help="Parameter to vary (omit for one setting); the same as giving several values to --heads, --n or "
        "--head-dim.",
        show_default=False,
    ),
]
Values = Annotated[
    str | None, typer.Option("--values", help="Values of the varied parameter, comma-separated integers, e.g. 1,2,4,8.")
]
MemorizeN = Annotated[
    str | None, typer.Option("--n", "--context-length", help=f"Context length n (default 32): {_RANGE}.")
]
MemorizeHeads = Annotated[str | None, typer.Option("--heads", help=f"Number of heads H (default 4): {_RANGE}.")]
HeadDim = Annotated[str | None, typer.Option("--head-dim", help=f"Key/query dimension d_h (default 64): {_RANGE}.")]
Sizes = Annotated[str | None, typer.Option("--sizes", help="Training-set sizes T, comma-separated, e.g. 500,1000.")]
PresetOpt = Annotated[
    Preset | None,
    typer.Option("--preset", help="A ready grid (see above). Explicit options override it.", show_default=False),
]
TaskOpt = Annotated[
    Task,
    typer.Option("--task", help="classification (random classes) or regression (U[0,1] labels)."),
    Default(Task("classification")),
]
ContextOpt = Annotated[
    Context,
    typer.Option("--context", help="shared (one context for all examples) or per-example."),
    Default(Context("shared")),
]
Classes = Annotated[int, typer.Option("--classes", help="Number of classes (classification only)."), Default(100)]
Tolerance = Annotated[
    float,
    typer.Option("--tolerance", help="Regression only: an example is memorised when |error| < tolerance."),
    Default(0.01),
]
Epochs = Annotated[
    int | None,
    typer.Option("--epochs", help="Epochs per point (default: max(500 epochs, 50k steps), the paper's rule)."),
]
MaxSteps = Annotated[int | None, typer.Option("--max-steps", help="Cap on optimisation steps per point.")]
Lr = Annotated[
    float, typer.Option("--lr", help="Adam learning rate (peak of the warm-up/cosine schedule)."), Default(1e-3)
]
CheckEvery = Annotated[
    int,
    typer.Option("--check-every", help="Check for full memorisation (and stop) every this many steps."),
    Default(200),
]
TrainingBatchSize = Annotated[int, typer.Option("--batch-size", help="Training batch size."), Default(256)]
MemorizeSeeds = Annotated[
    str | None,
    typer.Option(
        "--seeds",
        help="Train every point for several seeds (e.g. 0-5 or 0,3,7) and report the mean and spread; instead of "
        "--seed.",
    ),
]
MemorizePlot = Annotated[
    Path | None,
    typer.Option(
        "--plot", help="Memorisation vs the varied parameter, one line per size, to this .png/.pdf/.svg file."
    ),
]
MemorizeOut = Annotated[
    Path | None, typer.Option("--out", help="Parquet file of results; existing points in it are not recomputed.")
]
Saturation = Annotated[
    bool,
    typer.Option("--saturation", help="Count saturated heads (softmax weight > 0.99) per example."),
    Default(False),
]
MaxMinutes = Annotated[
    float | None,
    typer.Option(
        "--max-minutes",
        help="Run the grid in parts: start no group after this many minutes and stop the one still training then; "
        "the points trained are kept in --out (required), and the same command again trains the rest.",
    ),
]
MaxGroup = Annotated[
    int | None,
    typer.Option(
        "--max-group",
        help="At most this many points trained together in one stacked group (default: as many as fit in memory); "
        "smaller groups each finish sooner, for --max-minutes.",
    ),
]


class MemorizeOptions(Common):
    """The options of ``memorize``: the common ones, and its own: its grid, how each point trains, and its
    results file."""

    vary: VariedOpt
    values: Values
    n: MemorizeN
    heads: MemorizeHeads
    head_dim: HeadDim
    sizes: Sizes
    preset: PresetOpt
    task: TaskOpt
    context: ContextOpt
    classes: Classes
    tolerance: Tolerance
    epochs: Epochs
    max_steps: MaxSteps
    lr: Lr
    batch_size: TrainingBatchSize
    check_every: CheckEvery
    seeds: MemorizeSeeds
    saturation: Saturation
    out: MemorizeOut
    plot: MemorizePlot
    max_minutes: MaxMinutes
    max_group: MaxGroup


# --------------------------------------------------------------------------- reproduce

TargetArg = Annotated[
    str,
    typer.Argument(
        help="table1 (ViT, Table 1), table3 (BERT/GPT-2, Table 3), figure1 (Kruskal-rank sweep) or figure2 "
        "(memorisation against H)."
    ),
]
TargetModel = Annotated[
    list[str] | None,
    typer.Option(
        "--model",
        help="KEY=NAME: run the protocol on another model in place of the paper's (keys: vit for table1/figure1; "
        "bert, gpt2 for table3).",
    ),
]
TargetWeights = Annotated[
    list[str] | None,
    typer.Option(
        "--weights",
        help="[KEY=]PATH: local trained weights for the trained column(s); without them offline, those columns "
        "are unavailable.",
    ),
]
TargetContextLength = Annotated[
    list[str] | None,
    typer.Option("--context-length", help="table3: [KEY=]N tokens per example (the paper: bert 512, gpt2 1024)."),
]
Models = Annotated[
    list[str] | None, typer.Option("--models", help="table3: which of bert, gpt2 to run (default both).")
]
TargetLimit = Annotated[
    int | None, typer.Option("--limit", help="Examples T (default: the paper's, 1973 images or 2000 texts).")
]
TargetSeeds = Annotated[
    str | None,
    typer.Option(
        "--seeds",
        help="table1, table3, figure1: run once per seed (e.g. 0-2; instead of --seed) and set each published value "
        "beside the between-seed range of ours.",
    ),
]
TargetAllDraws = Annotated[
    bool,
    typer.Option(
        "--all-draws", help="Always make every draw (by default a failing test stops once its verdict is settled)."
    ),
    Default(False),
]
TargetPreset = Annotated[
    str | None,
    typer.Option(
        "--preset",
        help="figure2: the memorize grid (default cpu: minutes on a laptop; paper-fig2a is the paper's).",
    ),
]
TargetValues = Annotated[str | None, typer.Option("--values", help="figure2: the numbers of heads H, e.g. 1,2,4,8.")]
TargetSizes = Annotated[str | None, typer.Option("--sizes", help="figure2: training-set sizes T, e.g. 500,1000.")]
TargetMaxSteps = Annotated[
    int | None, typer.Option("--max-steps", help="figure2: cap on optimisation steps per point.")
]


class ReproduceOptions(Run, Source, Plotting):
    """The options of ``reproduce``: the groups it shares, and its own: the models of a target, and
    figure2's memorize grid."""

    model: TargetModel
    weights: TargetWeights
    context_length: TargetContextLength
    models: Models
    limit: TargetLimit
    seeds: TargetSeeds
    all_draws: TargetAllDraws
    preset: TargetPreset
    values: TargetValues
    sizes: TargetSizes
    max_steps: TargetMaxSteps
