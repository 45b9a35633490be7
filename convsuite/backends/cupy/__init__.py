"""The cupy backend's CUDA algorithms and their sources.

``algorithms/``
    one module per algorithm (or family sharing a kernel file) with its
    ``.cu`` files beside it; found by a naming convention (see
    :mod:`convsuite.backends.cupy.algorithms`).
``include/``
    the headers every source includes (``common.cuh``, ``tf32x3.cuh``).
``_sources``
    the record of one ``.cu`` file and how it is compiled (no cupy import).
``_record``
    the record of one CUDA algorithm, every flag the backend reads.
``_catalog``
    the backend's tables, derived from the discovered records.
"""
