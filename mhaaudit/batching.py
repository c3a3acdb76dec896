"""``--batch-size auto``: how many examples one forward pass takes.

On a GPU the batch is the largest that fits, found by halving: a batch of synthetic inputs of
the model's shape runs as far as the deepest probe point, starting at
:data:`AUTO_MAX_BATCH` (or the number of examples, if fewer); on out-of-memory the batch is
halved and tried again. On the CPU, where running out of memory means swapping or being killed
rather than an exception, the batch is computed: the memory one example's activations need (see
:func:`example_bytes`) against half the memory available. Either way the choice and how it was
made are a :class:`~mhaaudit.facts.BatchChoice`, which ``meta`` carries. An explicit integer is used as given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from . import validate
from .errors import InputError, ModelError, Param
from .facts import BatchChoice
from .hostmem import available_memory
from .sizes import human_bytes

__all__ = [
    "AUTO",
    "AUTO_MAX_BATCH",
    "BatchChoice",
    "available_memory",
    "choose_batch_size",
    "example_bytes",
    "halve_until_fits",
    "parse_batch_size",
]

AUTO = "auto"
AUTO_MAX_BATCH = 512  # the most examples one automatic batch holds (more gains little and delays progress)
CPU_MEMORY_SHARE = 0.5  # the share of the available memory one batch's activations may take on the CPU


def parse_batch_size(value) -> int | str:
    """A positive integer, or ``"auto"`` (any case, spaces around ignored).

    Raises:
        InputError: when ``value`` is neither ``auto`` nor a positive integer.
    """
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    try:
        return validate.integer(Param("batch_size"), value)
    except InputError as exc:
        raise InputError(Param("batch_size") + f" takes a positive integer or auto, got {value!r}") from exc


def choose_batch_size(
    pm, layers: Sequence[int], asked: int | str, limit: int, *, halving: bool | None = None, memory: int | None = None
) -> BatchChoice:
    """The batch size for running ``pm`` to ``max(layers)`` over ``limit`` examples.

    ``halving`` (default: on a CUDA device) finds the largest batch that fits by halving on
    out-of-memory; otherwise the batch is computed from :func:`example_bytes` and ``memory``
    (default: :func:`available_memory`). A size given is used as it is.

    Raises:
        InputError: on the CPU, when a batch of the size given (or of ``limit`` examples, if fewer) would need
            more memory than is available.
        ModelError: when halving reaches one example and it still runs out of memory.
    """
    if asked != AUTO:
        if getattr(getattr(pm, "device", None), "type", "cpu") == "cpu":  # refused before the work, not killed later
            per = example_bytes(pm, layers)
            avail = available_memory() if memory is None else int(memory)
            most = max(1, avail // max(per, 1))
            if min(int(asked), int(limit)) > most:
                raise InputError(
                    Param("batch_size") + f" {asked}: one batch would need about "
                    f"{min(int(asked), int(limit)) * per / 2**30:.3g} GiB of activations; the largest "
                    + Param("batch_size")
                    + f" that fits in the memory available here is {most}"
                )
        return BatchChoice(int(asked), asked, "given")
    start = max(1, min(AUTO_MAX_BATCH, int(limit)))
    if halving is None:
        halving = pm.device.type == "cuda"
    if halving:
        one = _one_example(pm)
        deepest = max(layers)

        def run(b: int) -> None:
            pm.capture({k: v.expand(b, *v.shape[1:]).contiguous() for k, v in one.items()}, [deepest])

        size, tried = halve_until_fits(run, start)
        where = str(pm.device)
        steps = " -> ".join(str(t) for t in tried)
        return BatchChoice(size, AUTO, f"largest that fits on {where}, found by halving on out-of-memory ({steps})")
    per = example_bytes(pm, layers)
    avail = available_memory() if memory is None else int(memory)
    size = max(1, min(start, int(avail * CPU_MEMORY_SHARE) // max(per, 1)))
    return BatchChoice(
        size,
        AUTO,
        f"{_mib(per)} of activations per example, {_mib(avail)} of memory available "
        f"({CPU_MEMORY_SHARE:.0%} used), at most {start}",
    )


def halve_until_fits(run: Callable[[int], None], start: int) -> tuple[int, list[int]]:
    """The first of ``start, start/2, ...`` for which ``run(b)`` does not run out of memory, and the sizes tried.

    Raises:
        ModelError: when a batch of one example runs out of CUDA memory too.
    """
    b, tried = int(start), []
    while True:
        tried.append(b)
        try:
            run(b)
            return b, tried
        except torch.cuda.OutOfMemoryError:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            if b == 1:
                raise ModelError("out of memory with a batch of one example; try " + Param("device") + " cpu") from None
            b = max(1, b // 2)


def example_bytes(pm, layers: Sequence[int]) -> int:
    """The float32 memory one example needs in a forward pass to ``max(layers)`` without gradients.

    A block holds its input, the query/key/value projections, the attention scores and softmax
    of every head (n x n each) and the MLP's hidden layer while it runs; the captured token
    matrices of the requested layers are kept. Twice that leaves room for temporaries.
    """
    info = pm.info
    n, d, heads = max(1, int(info.n)), int(info.d), max(1, int(info.num_heads))
    ffn = _ffn_width(pm.config, d)
    per_block = n * d * 5 + 2 * heads * n * n + 2 * n * ffn
    kept = n * d * len(set(layers))
    return 4 * 2 * (per_block + kept)


def _ffn_width(cfg, d: int) -> int:
    for name in ("intermediate_size", "n_inner", "ffn_dim", "dim_feedforward"):
        v = getattr(cfg, name, None)
        if isinstance(v, int) and v > 0:
            return v
    ratio = getattr(cfg, "mlp_ratio", None)
    return int(d * ratio) if isinstance(ratio, (int, float)) and ratio > 0 else 4 * d


def _one_example(pm) -> dict[str, torch.Tensor]:
    """Model inputs of one synthetic example of the model's shape."""
    if pm.info.modality == "image":
        from PIL import Image

        return pm.preprocess([Image.new("RGB", (256, 256), (128, 128, 128))])
    return pm.preprocess(torch.zeros((1, pm.info.n), dtype=torch.long))


def _mib(n: int) -> str:
    return human_bytes(n)
