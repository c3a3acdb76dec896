"""The package's version, stated once (pyproject.toml reads it from here). Between releases it is a development
release of the next one (``0.2.0.dev0`` after 0.1.0): a results file stamped with it was not written by a release,
and one a release wrote is that release's (``as_stored`` reads it as it stands)."""

__version__ = "0.2.0.dev0"
