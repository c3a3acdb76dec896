"""The package's version, stated once (pyproject.toml reads it from here)."""

__version__ = "0.1.0"
