"""convsuite: one convolution API over a ladder of interchangeable backends.

>>> import numpy as np, convsuite as cs
>>> x = np.random.default_rng(0).standard_normal((2, 3, 8, 8), dtype=np.float32)
>>> w = np.ones((4, 3, 3, 3), dtype=np.float32)
>>> cs.conv2d(x, w, padding="same").shape
(2, 4, 8, 8)

Importing this package imports NumPy only; backends (and numba, cupy, the
compiled extension) load the first time a call needs them.
"""

# Before anything imports NumPy (and with it OpenBLAS): see _blas_spin.
from ._blas_spin import shorten_openblas_spin as _shorten_openblas_spin

_shorten_openblas_spin()

from . import nets, nn  # networks on top of the functions above (imports numpy only)
from ._api import Explanation, conv1d, conv1d_backward, conv2d, conv2d_backward, explain, plan, tune
from ._calibrate import Calibration, calibrate
from ._errors import BackendUnavailableError, UnsupportedCaseError
from ._plan_cache import clear_plan_cache
from ._plans import Plan
from ._precision import get_precision, set_precision, use_precision
from ._registry import (
    BackendInfo,
    get_backend,
    list_backends,
    register_backend,
    set_backend,
    unregister_backend,
    use_backend,
)
from ._spec import ConvSpec
from ._threads import get_num_threads, set_num_threads
from ._tuning import TuneResult, clear_tuning_cache, set_autotune, use_autotune
from ._version import __version__
from .nn import Conv1D, Conv2D  # the one layer family: convsuite.Conv2D is convsuite.nn.Conv2D

__all__ = [
    "__version__",
    "BackendInfo",
    "BackendUnavailableError",
    "Calibration",
    "Conv1D",
    "Conv2D",
    "ConvSpec",
    "Explanation",
    "Plan",
    "TuneResult",
    "UnsupportedCaseError",
    "calibrate",
    "clear_plan_cache",
    "clear_tuning_cache",
    "conv1d",
    "conv1d_backward",
    "conv2d",
    "conv2d_backward",
    "explain",
    "get_backend",
    "get_num_threads",
    "get_precision",
    "list_backends",
    "plan",
    "nets",
    "nn",
    "register_backend",
    "set_autotune",
    "set_backend",
    "set_num_threads",
    "set_precision",
    "tune",
    "unregister_backend",
    "use_autotune",
    "use_backend",
    "use_precision",
]
