"""The defaults the library and the command line share, in a module that imports nothing heavy.

Each command of the command line names these values as its options' defaults, in its own
signature (``mhaaudit --help`` must not import torch), and the library's functions take the same
values as their keyword defaults, so a run through either gets the same settings. The choices of a parameter
with a fixed set of values are here too, one tuple each: the library validates against it and the
command line offers it, so a choice is added in one place.
"""

from __future__ import annotations

from .errors import Param

__all__ = [
    "BACKENDS",
    "CAPACITY_ATTENTION",
    "CAPACITY_BLOCK",
    "CAPACITY_BLOCK_WHY",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_DEVICE",
    "DEFAULT_LIMIT",
    "DEFAULT_SAMPLES",
    "DEFAULT_SEED",
    "DEFAULT_SPLIT",
    "DEFAULT_STOP_WHEN_DECIDED",
    "DEFAULT_THRESHOLD",
    "KRUSKAL_VECTORS",
    "MEMORIZE_CONTEXTS",
    "MEMORIZE_PRESETS",
    "MEMORIZE_TASKS",
    "MEMORIZE_VARY",
    "PAPER_VALUES",
    "REPRODUCE_TARGETS",
    "SEEDS_VARY",
]

#: Monte-Carlo draws per candidate size of a Kruskal test (the paper's).
DEFAULT_SAMPLES = 5000
#: Satisfied fraction at which a size counts as independent (the paper's).
DEFAULT_THRESHOLD = 0.99
#: The split of a hub data set that is read.
DEFAULT_SPLIT = "train"
#: The most examples read (T).
DEFAULT_LIMIT = 2000
#: Examples per forward pass.
DEFAULT_BATCH_SIZE = 32
#: The run's seed.
DEFAULT_SEED = 0
#: The device: the first CUDA device when there is one, else the CPU.
DEFAULT_DEVICE = "auto"
#: Whether a Monte-Carlo test stops once its verdict can no longer change (the command line's
#: default, without ``--all-draws``). A ``Settings`` made by hand makes every draw unless it says so.
DEFAULT_STOP_WHEN_DECIDED = True

#: The model libraries a model may be loaded with: Hugging Face transformers, or timm.
BACKENDS = ("hf", "timm")
#: What several seeds vary: the weights and data seeds together (as one seed), or one of them.
SEEDS_VARY = ("both", "weights", "data")
#: The vectors a Kruskal rank is estimated for: the query vectors, or the Assumption 3 vectors
#: (query + mean of context rows).
KRUSKAL_VECTORS = ("queries", "a3")
#: The key/query weights of capacity's Z: the model's own attention block, or random ones.
CAPACITY_ATTENTION = ("model", "random")

#: The attention block whose heads ``capacity`` certifies by default. Theorem 1 speaks of an
#: attention layer whose inputs satisfy Assumptions 1 and 2. The paper finds them holding at the
#: output of the first block (Tables 1 and 3) and failing at the embedding output for images (every
#: [CLS] query is the same vector), and applies the theorem to "the second layer of Attention"
#: (Section 4.4): block 2, whose input is the output of block 1. Block 1 would read the embedding
#: output, where the bound for images is a single example.
CAPACITY_BLOCK = 2
CAPACITY_BLOCK_WHY = (
    "block 2 is the default: the paper applies Theorem 1 to the second attention layer, whose input "
    "(the output of block 1) satisfies Assumptions 1 and 2 in its Tables 1 and 3; block 1 reads the "
    "embedding output, where the image queries are one vector (" + Param("block") + " K chooses another)"
)

#: The labels a memorize run learns: random classes, or numbers in [0, 1] to regress.
MEMORIZE_TASKS = ("classification", "regression")
#: The contexts of a memorize run: one context for every example, or one per example.
MEMORIZE_CONTEXTS = ("shared", "per-example")
#: The parameter a memorize grid varies: the number of heads H, the context length n, or the head dimension d_h.
MEMORIZE_VARY = ("heads", "n", "head-dim")

#: The paper's experiments ``reproduce`` runs: Table 1 (ViT), Table 3 (BERT/GPT-2), the Kruskal-rank
#: sweep of Figure 1 and the memorisation of Figure 2.
REPRODUCE_TARGETS = ("table1", "table3", "figure1", "figure2")

PAPER_VALUES = (1, 5, 10, 20, 30, 40, 50, 60)

#: The paper's grids (Figure 2). The label-set sizes T are this project's choice (the paper does
#: not list them in the text): they straddle the number of examples the model memorises at the
#: ends of each grid (about 140 per head at n = 32 on the paper's App. H numbers), so that each
#: curve rises before it saturates at 1.0. ``cpu`` is a small grid that finishes in under a
#: minute on two CPU cores (its 8 points train in 3 stacked groups): it trains at most 6000
#: steps per point (the paper rule would be 50k), which is enough for clear growth with H but
#: under-trains the larger sizes (doubling to 12000 steps moved the memorised fractions by less
#: than 0.04 on this grid).
MEMORIZE_PRESETS: dict[str, dict] = {
    "paper-fig2a": dict(vary="heads", values=PAPER_VALUES, n=32, head_dim=64, sizes=(1000, 2000, 5000, 10000)),
    "paper-fig2b": dict(vary="n", values=PAPER_VALUES, heads=20, head_dim=64, sizes=(1000, 2000, 5000)),
    "paper-fig2c": dict(
        vary="head-dim", values=(10, 16, 24, 32, 40, 48, 56, 64), heads=30, n=32, sizes=(2000, 5000, 10000)
    ),
    "cpu": dict(vary="heads", values=(1, 2, 4, 8), n=32, head_dim=64, sizes=(500, 1000), max_steps=6000),
}


# --------------------------------------------------------------------------- the commands' option defaults
# The defaults each command names in its own signature; the library takes the same values.

__all__ += [
    "DEFAULT_ATTENTION",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CHECK_EVERY",
    "DEFAULT_CLASSES",
    "DEFAULT_DEVICE",
    "DEFAULT_LIMIT",
    "DEFAULT_LR",
    "DEFAULT_MEMORIZE_CONTEXT",
    "DEFAULT_MEMORIZE_TASK",
    "DEFAULT_SEED",
    "DEFAULT_SEEDS_VARY",
    "DEFAULT_SPLIT",
    "DEFAULT_TOLERANCE",
    "DEFAULT_TRAINING_BATCH_SIZE",
]

#: The seed from which all sampling derives (the weights and data seeds too, unless given).
DEFAULT_SEED = 0
#: Where a run computes: ``auto`` is the GPU when there is one, else the CPU.
DEFAULT_DEVICE = "auto"
#: What several seeds vary unless told: both, as one seed does.
DEFAULT_SEEDS_VARY = "both"

#: The split read from a Hugging Face dataset (or a DatasetDict saved with ``save_to_disk``).
DEFAULT_SPLIT = "train"
#: Examples T read from the data.
DEFAULT_LIMIT = 2000
#: Examples per forward pass; ``"auto"`` is accepted instead, and chooses from the memory available.
DEFAULT_BATCH_SIZE = 32

#: capacity's key/query weights unless told: the model's own.
DEFAULT_ATTENTION = "model"

# How each point of a memorize grid trains (the paper's Appendix A), unless told.
#: The labels learnt: random classes.
DEFAULT_MEMORIZE_TASK = "classification"
#: The contexts: one shared by every example.
DEFAULT_MEMORIZE_CONTEXT = "shared"
#: Number of classes of a classification task.
DEFAULT_CLASSES = 100
#: A regression example counts as memorised when its error is below this.
DEFAULT_TOLERANCE = 0.01
#: Adam's learning rate (the peak of the warm-up/cosine schedule).
DEFAULT_LR = 1e-3
#: Examples per training step.
DEFAULT_TRAINING_BATCH_SIZE = 256
#: Steps between two checks for full memorisation (a point stops at the first one that finds it).
DEFAULT_CHECK_EVERY = 200
