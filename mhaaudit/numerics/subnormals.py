"""Subnormals kept for a moment in the calling thread, where rank computations flush them.

Flushing subnormals to zero is a per-thread CPU setting (``rule.numerics`` turns it on); data whose
entries may be subnormal are converted and rescaled inside :func:`subnormals_kept`, before anything
squares them.
"""

from __future__ import annotations

import contextlib

import torch

__all__ = ["subnormals_kept"]


def _flushing() -> bool:
    """Does this thread flush subnormals now? (New threads inherit the setting of their creator.)"""
    tiny = _SUBNORMAL
    return tiny * 1.0 == 0.0


_SUBNORMAL = 5e-324


@contextlib.contextmanager
def subnormals_kept():
    """Keep subnormals for a moment in this thread (undoing ``numerics``' flushing if it is on), to
    convert or rescale data whose entries may be subnormal before anything squares them."""
    flushing = _flushing()
    if flushing:
        torch.set_flush_denormal(False)
    try:
        yield
    finally:
        if flushing:
            torch.set_flush_denormal(True)
