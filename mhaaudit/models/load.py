"""load_model: a model name becomes a :class:`~.probe.ProbedModel`, through the backend it resolves to.

The arguments are checked where they become a :class:`~.plan.LoadPlan`, the name is resolved by the registry
(:func:`~.resolution.resolve`), and the backend (:mod:`.hf` or :mod:`.timm_backend`) builds
the model while library progress bars, warnings and info logs are silenced. Everything a user
can get wrong ends in :class:`~mhaaudit.errors.ModelError`,
:class:`~mhaaudit.errors.OfflineError` or :class:`~mhaaudit.errors.InputError` with a one-line
message; the libraries' own exceptions are mapped to these here.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import pickle
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .. import imports, phases
from ..errors import InputError, MhaauditError, ModelError, OfflineError, Param, joined, one_line
from . import hf, timm_backend
from .file_reads import read_once
from .plan import LoadPlan, check_revision
from .probe import ProbedModel
from .resolution import resolve
from .shards import saved_names

__all__ = ["LoadPlan", "check_hub_options", "check_revision", "check_weights_fit", "load_model"]

# A corrupt weights file surfaces as an UnpicklingError or EOFError from torch.load, inside the libraries.
_LIBRARY_ERRORS = (
    OSError,
    RuntimeError,
    ValueError,
    KeyError,
    TypeError,
    ImportError,
    AttributeError,
    AssertionError,
    pickle.UnpicklingError,
    EOFError,
)


def load_model(name: str, **options: Any) -> ProbedModel:
    """Load a model by alias, hub id, local folder or file, or timm name, ready for probing.

    Random weights are drawn from ``derive_seed(seed, "model-init")`` (see :mod:`.random_init`).
    Trained weights come from ``weights_path``, else the hub online or the local cache offline.
    Trained safetensors weights are read only as far as ``max_layer`` needs (``info.weights_read``).

    Args:
        name: the model's alias, hub id, local folder or file, or timm name.
        **options: the fields of a :class:`~.plan.LoadPlan` by name (``weights``, ``backend``, ``device``, ...).

    Returns:
        The :class:`~.probe.ProbedModel`: the model, its facts (``info``) and the hooks that capture
        its probe points.

    Raises:
        InputError: when ``name`` is empty or not a string, an option is invalid or cannot apply
            to the backend the name resolves to, or the hub has no such ``revision``.
        ModelError: when the model cannot be built or loaded (the libraries' errors, out of GPU
            memory), or its weights hold NaN or infinite values.
        MhaauditError: any of the project's errors from resolving or building, as raised (an
            :class:`~mhaaudit.errors.OfflineError` when the weights are neither given nor cached
            offline).
    """
    name, plan, spec = _resolved(name, options)
    builder = timm_backend if spec.backend == "timm" else hf
    with read_once():  # a weights file's shapes, checked before the build, and the tensors it lists: one read
        pm = _built(name, plan, spec, builder, lambda: builder.load(spec, plan))
    check_finite_weights(pm, _weights_name(name, plan))
    return pm


def check_weights_fit(name: str, **options: Any) -> None:
    """Before any model is built, what :func:`load_model` checks of trained weights in a single file: that its
    tensors' shapes fit the model the configuration builds (``models.hf.check_weights``; for a timm model, a
    safetensors file against the model built on the meta device: ``models.timm_backend.check_weights``), so that a
    run refuses a file of another width before its first column. Nothing where the weights are no single file, or
    where the configuration cannot be had offline (the load says so).

    Args:
        name: the model's alias, hub id, local folder or file, or timm name (as :func:`load_model`).
        **options: the fields of a :class:`~.plan.LoadPlan` by name, as :func:`load_model` takes them.

    Raises:
        InputError: as :func:`load_model`.
        ModelError: when the configuration cannot build a model, or the weights file does not fit it.
    """
    name, plan, spec = _resolved(name, options)
    if plan.weights_path is None or not os.path.isfile(plan.weights_path):
        return
    builder = timm_backend if spec.backend == "timm" else hf
    try:
        _built(name, plan, spec, builder, lambda: builder.check_weights(spec, plan))
    except OfflineError:  # the configuration is not here: the load says so, where it makes its column unavailable
        return


def _resolved(name: Any, options: dict) -> tuple[str, LoadPlan, Any]:
    """The name, stripped; the load's plan; and the spec it resolves to, its hub options checked.

    Raises:
        InputError: when ``name`` is empty or not a string, or an option is invalid.
    """
    if not isinstance(name, str) or not name.strip():
        raise InputError("a model name is required (an alias such as vit-base, a hub id, a folder or a timm name)")
    name = name.strip()
    plan = LoadPlan(**options)
    spec = resolve(name, backend=plan.backend, weights_path=plan.weights_path)
    check_hub_options(spec, plan.revision, plan.trust_remote_code)
    return name, plan, spec


def _built(name: str, plan: LoadPlan, spec: Any, builder: Any, work: Callable[[], Any]) -> Any:
    """``work()`` (a backend's load, or its checks) in the window a model is built in: the libraries imported
    first (timed as imports, no distributed packages for a single-process command), their messages quieted, and
    their errors said in one line.

    Raises:
        ModelError: for the libraries' errors (out of GPU memory too).
        MhaauditError: the project's own errors, as raised.
    """
    try:
        with contextlib.ExitStack() as window:
            with phases.phase("imports"):  # the window imports transformers' own utilities, then the libraries
                window.enter_context(imports.light())  # a single-process command imports no distributed packages
                builder.import_libraries()
            with _quiet():
                return work()
    except MhaauditError:
        raise
    except torch.cuda.OutOfMemoryError as exc:
        raise ModelError(
            f"{name}: out of GPU memory while loading ({one_line(exc, 120)}); try " + Param("device") + " cpu"
        ) from exc
    except _LIBRARY_ERRORS as exc:
        problem = hf.hub_problem(exc, name, plan.revision) if spec.backend != "timm" else None
        raise (problem or ModelError(f"cannot load {name}: {one_line(exc, 240)}")) from exc


def _weights_name(name: str, plan: LoadPlan) -> str:
    """Where the weights came from, in words: the weights file or folder given, else the model at its revision."""
    if plan.weights_path is not None:
        return plan.weights_path
    return name if plan.revision is None else f"{name} at revision {plan.revision}"


def check_finite_weights(pm: ProbedModel, name: str) -> None:
    """A ModelError naming the first parameter that holds NaN or infinite values (a rank decision on
    what such weights compute would mean nothing).

    Raises:
        ModelError: when a floating or complex parameter holds NaN or infinite values.
    """
    named = [
        (pname, t)
        for pname, t in pm.module.named_parameters()
        if not t.is_meta and (t.is_floating_point() or t.is_complex()) and t.numel()
    ]
    if not named:
        return
    # one pass over each tensor (its largest magnitude: NaN or infinite when any entry is) and one read of
    # them all, on whatever device the weights are; the offender is looked for only when there is one
    tops = torch.stack([torch.linalg.vector_norm(t.detach(), ord=math.inf).to(torch.float64) for _, t in named]).cpu()
    if bool(torch.isfinite(tops).all()):
        return
    for (pname, _), top in zip(named, tops.tolist(), strict=True):
        if not math.isfinite(top):
            what = "NaN" if math.isnan(top) else "infinite"
            # named as a checkpoint stores it, to be found there: recent transformers releases renamed some
            # modules (ViT's encoder.layer.0.attention.attention.query is layers.0.attention.q_proj)
            stored = saved_names(pm.module, {pname}).get(pname, pname)
            raise ModelError(
                f"the weights of {name} hold {what} values (e.g. {stored}); "
                f"the checkpoint is corrupt or was saved after training diverged"
            )


def check_hub_options(spec, revision: str | None, trust_remote_code: bool) -> dict:
    """The hub options of the backend ``spec`` resolves to; options that cannot apply are input errors.

    Returns ``{"revision": ..., "trust_remote_code": ...}`` for a transformers model, ``{}`` for a timm model.

    Raises:
        InputError: when ``revision`` or ``trust_remote_code`` is given for a timm model, or
            ``revision`` for a local folder.
    """
    options = {"revision": revision, "trust_remote_code": bool(trust_remote_code)}
    if spec.backend == "timm":
        used = [Param(k) for k, v in options.items() if v]
        if used:
            raise InputError(joined(used) + f" applies to transformers models; {spec.name} is a timm model")
        return {}
    if spec.local and revision is not None:
        raise InputError(
            Param("revision") + f" names a branch, tag or commit of a hub model; {spec.name} is a local folder"
        )
    return options


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence library progress bars, warnings and info logs while loading."""
    restore: list[Callable[[], object]] = []
    try:
        from transformers.utils import logging as tlog

        was_bar = tlog.is_progress_bar_enabled()
        old_level = tlog.get_verbosity()
        tlog.disable_progress_bar()
        tlog.set_verbosity_error()

        def restore_transformers() -> None:
            tlog.set_verbosity(old_level)
            if was_bar:
                tlog.enable_progress_bar()

        restore.append(restore_transformers)
    except Exception:  # noqa: BLE001  # pragma: no cover - transformers missing or changed
        pass
    try:
        from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

        hub_was = are_progress_bars_disabled()
        disable_progress_bars()
        restore.append(lambda: None if hub_was else enable_progress_bars())
    except Exception:  # noqa: BLE001  # pragma: no cover - a hub client without these switches: nothing to silence
        pass
    tlogger = logging.getLogger("timm")
    old_timm = tlogger.level
    tlogger.setLevel(logging.ERROR)
    restore.append(lambda: tlogger.setLevel(old_timm))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for fn in reversed(restore):
            fn()
