"""Deciding quickly whether the Hugging Face hub can be reached.

Without this, a hub call on a machine with no network retries for 30 to 50 seconds before it
fails. We decide once per process: ``HF_HUB_OFFLINE=1`` means offline; otherwise a single TCP
connection to the hub endpoint with a short timeout decides.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
from urllib.parse import urlparse

_TRUE = {"1", "true", "yes", "on"}


def hub_endpoint() -> str:
    """The Hugging Face hub's URL: ``HF_ENDPOINT`` when set, else https://huggingface.co."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


@functools.lru_cache(maxsize=1)
def is_offline(timeout: float = 1.5) -> bool:
    """True when the hub cannot be reached (or offline mode was asked for)."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in _TRUE:
            return True
    url = urlparse(hub_endpoint())
    host = url.hostname or "huggingface.co"
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return False
    except OSError:
        return True


def force_offline_env() -> None:
    """Put the hub libraries in offline mode so they fail at once instead of retrying."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    # Libraries imported before this call read the flag at their import; those imported later read the
    # environment. So only what is already imported is set here: importing datasets just to set its
    # flag took most of a second of a run that reads no data set.
    for module, flags in (
        ("huggingface_hub.constants", ("HF_HUB_OFFLINE",)),
        ("datasets.config", ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")),
    ):
        imported = sys.modules.get(module)
        for flag in flags if imported is not None else ():
            setattr(imported, flag, True)
