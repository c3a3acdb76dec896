"""Random weights: how a model's random initialisation derives from the user's seed.

A random-init model is drawn with the model's own init scheme (transformers' ``_init_weights``,
timm's ``init_weights``), but re-drawn unit by unit so that the weights do not depend on how
many blocks were built: the modules outside the blocks are drawn from
``derive_seed(seed, "model-init")``, block k (1-based) from ``derive_seed(seed, "model-init", k)``
(:func:`init_seed`; the one seed rule is documented in :mod:`mhaaudit.settings`).
A model built with ``max_layer=k`` then holds exactly the first k blocks of the full-depth model
of that seed, so probing a truncated model gives the same features as probing the whole one.

The caller's global RNG state is never disturbed (:func:`seeded` forks it).

**Drawn once, on the CPU; the same weights on every device.** :func:`build_random` builds the
module on the ``meta`` device (nothing allocated, nothing drawn), gives it uninitialised CPU
storage filled with a sentinel (NaN; the smallest integer for integer buffers) and lets the
re-draw above write every tensor, so the weights are drawn once instead of twice. The draws
come from the CPU generator whatever the run's device, so a seed gives bit-identical weights on
the CPU and on a GPU; the module then moves to the device as a whole. When the model's own init
leaves any tensor unwritten (a sentinel survives: older transformers that do not initialise
buffers, timm's layer norms), the module is built the ordinary way instead, with the same
result. Drawing on the device itself would use the device's generator, whose stream differs from
the CPU's, and so would give other weights on a GPU.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ..runtime import derive_seed

__all__ = ["build_random", "init_seed", "reinit_hf", "reinit_timm", "seeded"]


def init_seed(seed: int, block: int | None = None) -> int:
    """The seed of the modules outside the blocks (``block=None``) or of block ``block`` (1-based)."""
    return derive_seed(seed, "model-init") if block is None else derive_seed(seed, "model-init", block)


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed the global RNG for a random init without disturbing the caller's RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield


def _postorder(module: nn.Module, skip: set[int]) -> list[nn.Module]:
    out: list[nn.Module] = []

    def rec(m: nn.Module) -> None:
        if id(m) in skip:
            return
        for c in m.children():
            rec(c)
        out.append(m)

    rec(module)
    return out


def reinit_hf(model: nn.Module, blocks: nn.ModuleList, seed: int, full_layers: int) -> None:
    """Re-draw a transformers model's random init, unit by unit (see the module docstring).

    The model's own ``_init_weights`` runs once more, children before parents as transformers
    does, with the config's full depth (GPT-2 scales its residual projections by the depth).
    """
    init_fn = getattr(model, "_init_weights", None)
    cfg = getattr(model, "config", None)
    if init_fn is None or cfg is None:
        return
    units: list[tuple[int | None, list[nn.Module]]] = [(None, _postorder(model, {id(b) for b in blocks}))]
    units += [(i + 1, _postorder(b, set())) for i, b in enumerate(blocks)]
    try:
        from transformers import initialization as hf_init

        guard: Any = hf_init.guard_torch_init_functions()
    except Exception:  # noqa: BLE001 - older transformers
        guard = contextlib.nullcontext()
    saved = cfg.num_hidden_layers
    cfg.num_hidden_layers = full_layers
    try:
        with guard, torch.no_grad():
            for block, mods in units:
                for m in mods:
                    for t in list(m.parameters(recurse=False)) + list(m.buffers(recurse=False)):
                        if hasattr(t, "_is_hf_initialized"):
                            delattr(t, "_is_hf_initialized")
                with seeded(init_seed(seed, block)):
                    for m in mods:
                        init_fn(m)
    finally:
        cfg.num_hidden_layers = saved


def reinit_timm(model: nn.Module, seed: int) -> None:
    """Re-draw a timm ViT's random init, unit by unit (see the module docstring).

    timm's own scheme runs again: the whole model from the outside seed (position embedding and
    class token first, then the modules in order), then each block once more from its own seed.
    Models other than timm's VisionTransformer keep their init.
    """
    from timm.models._manipulate import named_apply
    from timm.models.vision_transformer import VisionTransformer, get_init_weights_vit

    if not isinstance(model, VisionTransformer) or not hasattr(model, "weight_init_mode"):
        return
    mode = model.weight_init_mode
    with torch.no_grad():
        with seeded(init_seed(seed)):
            model.init_weights(mode, needs_reset=True)
        fn = get_init_weights_vit(mode, 0.0, needs_reset=True)
        blk: Any  # a timm block: its attn.proj and mlp.fc2 are looked up by name
        for i, blk in enumerate(model.blocks):
            with seeded(init_seed(seed, i + 1)):
                named_apply(fn, blk, name=f"blocks.{i}")
            if getattr(model, "fix_init", False):
                scale = math.sqrt(2.0 * (i + 1))
                blk.attn.proj.weight.div_(scale)
                blk.mlp.fc2.weight.div_(scale)


def _fill_sentinel(module: nn.Module) -> None:
    with torch.no_grad():
        for t in list(module.parameters()) + list(module.buffers()):
            t.fill_(
                float("nan")
                if t.is_floating_point() or t.is_complex()
                else (False if t.dtype == torch.bool else torch.iinfo(t.dtype).min)
            )


def _all_written(module: nn.Module) -> bool:
    """Whether no sentinel survives: a NaN in a floating tensor (its largest magnitude is NaN then:
    one pass each, no temporary), the smallest integer in an integer one."""
    tops, ints = [], []
    for t in list(module.parameters()) + list(module.buffers()):
        if t.dtype == torch.bool or t.numel() == 0:
            continue
        if t.is_floating_point() or t.is_complex():
            tops.append(torch.linalg.vector_norm(t, ord=math.inf).to(torch.float64))
        else:
            ints.append(t)
    if tops and bool(torch.isnan(torch.stack(tops)).any()):
        return False
    return not any(bool((t == torch.iinfo(t.dtype).min).any()) for t in ints)


def build_random(build: Callable[[], nn.Module], redraw: Callable[[nn.Module], None], seed: int) -> nn.Module:
    """A random-init module drawn once (see the module docstring): ``build()`` on the meta device,
    CPU storage, ``redraw(module)`` (:func:`reinit_hf` or :func:`reinit_timm` bound to the seed);
    if any tensor is left unwritten, ``build()`` on the CPU under ``init_seed(seed)`` followed by
    ``redraw`` (the ordinary way, same weights)."""
    try:
        with torch.device("meta"):
            module = build()
        module = module.to_empty(device="cpu")
        _fill_sentinel(module)
        redraw(module)
        if _all_written(module):
            return module
    except (NotImplementedError, RuntimeError, TypeError, ValueError):  # a module that cannot be built on meta
        pass
    with seeded(init_seed(seed)):
        module = build()
    redraw(module)
    return module
