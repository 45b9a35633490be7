"""convsuite's version: one source, read by the package, the packaging metadata and the tuning cache."""

#: The version of convsuite, PEP 440.
__version__ = "0.1.0"
