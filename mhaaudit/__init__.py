"""mhaaudit: audit transformer features against the assumptions of the memorisation-capacity
theory of multi-head attention (Mahdavi, Liao, Thrampoulidis, ICLR 2024)."""

from ._version import __version__

__all__ = ["__version__"]
