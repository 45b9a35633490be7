"""Compiled Cython kernels (built from cython_src/ by setup.py)."""
