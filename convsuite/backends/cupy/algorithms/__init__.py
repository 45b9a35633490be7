"""The cupy backend's algorithms, one module per algorithm or per family sharing a kernel file.

The convention the backend discovers them by (``_catalog``): every module of
this package whose name does not start with an underscore is an algorithm
module, and declares

``ALGORITHMS``
    a tuple of :class:`~convsuite.backends.cupy._record.CudaAlgorithm`
    records, in the order the backend lists them: each with its check, plan,
    tunables, constraint and every flag the backend reads (the sources it
    launches, fused activation, ReLU mask, IEEE padding, cuBLAS).

Its ``.cu`` files lie beside it, each declared there as a
:class:`~convsuite.backends.cupy._sources.CudaSource` (kernel templates,
``-D`` constants, overridable constants, architecture target). Modules
whose names start with an underscore are shared helpers (``_common``: packed
arguments, the bias gradient and ``backward_util.cu``). Adding an algorithm
is one module here, its ``.cu`` file and its tests: the backend's tables,
``list_backends`` and the docs pick it up.
"""
