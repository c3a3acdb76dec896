"""Device selection shared by every command."""

from __future__ import annotations

import torch

from .errors import InputError


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """Turn ``auto``/``cpu``/``cuda``/``cuda:N`` into a ``torch.device``.

    ``auto`` picks the first CUDA device when one is available, else the CPU. Asking for CUDA
    on a machine without it is an error, not a silent fallback.
    """
    if isinstance(spec, torch.device):
        return spec
    spec = (spec or "auto").strip().lower()
    if spec == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError(f"--device {spec} was asked for but no CUDA device is available; use --device cpu or auto")
        try:
            dev = torch.device(spec)
        except RuntimeError as exc:  # e.g. "cuda:x"
            raise InputError(f"not a device: {spec!r} (use auto, cpu, cuda or cuda:N)") from exc
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InputError(f"--device {spec}: only {torch.cuda.device_count()} CUDA device(s) present")
        return dev
    raise InputError(f"not a device: {spec!r} (use auto, cpu, cuda or cuda:N)")


def device_name(device: torch.device) -> str:
    """A human description of a device, for reports and file metadata."""
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{idx} ({torch.cuda.get_device_name(idx)})"
    return "cpu"
