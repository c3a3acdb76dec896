"""The models runs share: while :func:`shared_loads` is open, a model ``pipeline.load`` gave one run is
handed to the next run that asks for the same weights."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["current", "holding", "shared_loads"]

_SHARED_LOADS: dict | None = None  # while shared_loads() is open: load key -> the loaded model


@contextmanager
def shared_loads():
    """While open, a model :func:`mhaaudit.pipeline.load` gave one run is handed to the next run that asks for the
    same weights (the same model, init, weights seed, depth and device) instead of being loaded
    again: the runs of several seeds share their loads. Trained weights do not depend on the
    seed, so every seed shares them; random weights are shared while the weights seed stays. One
    model per (request, init) is kept: a new weights seed replaces the last one's."""
    global _SHARED_LOADS
    outer = _SHARED_LOADS
    if outer is None:
        _SHARED_LOADS = {}
    try:
        yield
    finally:
        _SHARED_LOADS = outer


@contextmanager
def holding(loads: dict) -> Iterator[None]:
    """While open, the shared loads are ``loads`` (load key -> model), whatever was shared before."""
    global _SHARED_LOADS
    outer = _SHARED_LOADS
    _SHARED_LOADS = loads
    try:
        yield
    finally:
        _SHARED_LOADS = outer


def current() -> dict | None:
    """The loads shared now (load key -> model), or None outside :func:`shared_loads`."""
    return _SHARED_LOADS
