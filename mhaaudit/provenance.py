"""The provenance every output carries: the tool's version and the versions of the libraries it ran with."""

from __future__ import annotations

import contextlib
import platform
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import torch

from ._version import __version__


def library_versions() -> dict[str, str]:
    """The versions of mhaaudit, Python, torch, NumPy and the optional libraries installed, by name.

    Libraries not installed are left out; versions are read from package metadata, nothing is imported.
    """
    out = {
        "mhaaudit": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
    }

    for name in ("transformers", "timm", "datasets", "pyarrow", "scipy"):
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)  # read from metadata: no slow imports
    return out


def stamp(**extra) -> dict:
    """The provenance every output carries: tool and library versions plus the caller's facts."""
    return {"tool": "mhaaudit", "version": __version__, "versions": library_versions(), **extra}
