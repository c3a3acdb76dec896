"""How a command reaches the library: imported only when it runs, its options made into request objects.

``mhaaudit --help`` answers without torch: a command imports the library in its body, under
:func:`importing`. ``check`` and ``capacity`` hand the library the objects it takes
(:func:`run_settings`, :func:`run_requests`), built in the library's one place for that
(:func:`mhaaudit.request.build_requests`).
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the library is imported only when a command runs
    from ..request import Requests
    from ..settings import Settings


def importing(quiet: bool):
    """A spinner on stderr while a command imports the library (torch and the model libraries take
    seconds); nothing when nobody watches (see :func:`mhaaudit.progress.progress_enabled`). A command
    run as one process imports no distributed-training packages (:mod:`mhaaudit.imports`)."""
    from .. import imports
    from ..progress import progress_enabled, status

    imports.LIGHT = True
    return status("Starting: importing torch and the model libraries", progress_enabled(quiet))


def value_of(choice: Enum | None) -> str | None:
    """An enum option's choice as the library takes it: its value (None stays None)."""
    return None if choice is None else choice.value


def run_settings(
    *,
    device: str,
    samples: int,
    threshold: float,
    seed: int,
    weights_seed: int | None,
    data_seed: int | None,
    rtol: float | None,
    atol: float | None,
    stop_when_decided: bool,
    quiet: bool,
) -> Settings:
    """The run's :class:`~mhaaudit.settings.Settings` from a command's options (``quiet``: progress
    only for a watched terminal). On a GPU its context starts to be made on a helper thread now, while
    the model libraries are imported (:func:`mhaaudit.runtime.warm_up`)."""
    from ..progress import progress_enabled
    from ..request import build_settings
    from ..runtime import warm_up

    keywords = {
        "device": device,
        "samples": samples,
        "threshold": threshold,
        "seed": seed,
        "rtol": rtol,
        "atol": atol,
        "weights_seed": weights_seed,
        "data_seed": data_seed,
        "stop_when_decided": stop_when_decided,
        "progress": progress_enabled(quiet),
    }
    settings = build_settings(None, keywords)
    warm_up(settings.device)
    return settings


def run_requests(
    model: str,
    data: str | None,
    settings: Settings,
    *,
    backend: Enum | None,
    weights: str | None,
    revision: str | None,
    trust_remote_code: bool,
    context_length: int | None,
    split: str,
    limit: int,
    batch_size: str,
    keep_duplicates: bool,
    text_column: str | None,
    image_column: str | None,
    convert_rgb: bool,
    query_index: int | None = None,
) -> Requests:
    """The model and data requests of ``check`` and ``capacity``, and their settings, from the options
    that say how the model and its data are read."""
    from ..request import build_requests

    keywords = {
        "backend": value_of(backend),
        "weights": weights,
        "revision": revision,
        "trust_remote_code": trust_remote_code,
        "context_length": context_length,
        "query_index": query_index,
        "split": split,
        "limit": limit,
        "batch_size": batch_size,
        "keep_duplicates": keep_duplicates,
        "text_column": text_column,
        "image_column": image_column,
        "convert_rgb": convert_rgb,
    }
    return build_requests(model, data, settings, keywords)
