"""convsuite's version: one source, read by the package, the packaging metadata and the tuning cache."""

__version__ = "0.1.0"
