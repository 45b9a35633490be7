"""Backends: one module per backend, each fulfilling :class:`.base.Backend`.

Modules here are imported lazily by the registry; none imports an optional
dependency at module level.
"""
