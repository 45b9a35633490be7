"""Forward passes on the shapes ``convsuite compare`` measures, per backend.

All results are times (lower is better); the work of each case is in its
label (shapes), so a rate can always be derived from a time.
"""

import convsuite as cs

from .common import BACKENDS, DEFAULT_FORWARD, PYTHON_BACKEND_MACS, ConvBenchmark, device_arrays, macs, preset_case


class Conv2DForward(ConvBenchmark):
    """The default workload's forward cases (conv1d and conv2d), float32."""

    params = (BACKENDS, DEFAULT_FORWARD, ["float32"])
    param_names = ["backend", "case", "dtype"]

    def build(self, backend, label, dtype):
        case = preset_case(label)
        x, w, bias, _ = case.arrays(dtype)
        if backend == "python" and macs(x, w, **case.keywords) > PYTHON_BACKEND_MACS:
            raise NotImplementedError("too slow for the pure-Python backend")
        x, w, bias = device_arrays(backend, x, w, bias)
        fn = cs.conv1d if case.op == "conv1d" else cs.conv2d
        return lambda: fn(x, w, bias, backend=backend, **case.keywords)

    def time_forward(self, backend, label, dtype):
        self.run()


class Conv1DSignal(ConvBenchmark):
    """A plain signal with a 'same' mask; the parameters are those of the first suite (comparable)."""

    params = (BACKENDS, [10**4, 10**6], [3, 31], ["float32"])
    param_names = ["backend", "N", "K", "dtype"]

    def build(self, backend, n, k, dtype):
        from .common import random_arrays

        if backend == "python" and n * k > PYTHON_BACKEND_MACS:
            raise NotImplementedError("too slow for the pure-Python backend")
        x, w = device_arrays(backend, *random_arrays(0, dtype, (n,), (k,)))
        return lambda: cs.conv1d(x, w, padding="same", backend=backend)

    def time_conv1d(self, backend, n, k, dtype):
        self.run()


def timeraw_import_convsuite():
    """Cost of `import convsuite` in a fresh interpreter (no optional dependency)."""
    return "import convsuite"


def timeraw_numba_first_call():
    """First numba call in a fresh process with an empty cache: JIT compile time."""
    return (
        "cs.conv2d(x, w, backend='numba')",
        "import os, tempfile; os.environ['NUMBA_CACHE_DIR'] = tempfile.mkdtemp()\n"
        "import numpy as np, convsuite as cs\n"
        "info = {b.name: b for b in cs.list_backends()}['numba']\n"
        "if not info.available: raise NotImplementedError(info.reason)\n"
        "x = np.ones((1, 1, 8, 8), np.float32); w = np.ones((1, 1, 3, 3), np.float32)",
    )


timeraw_numba_first_call.repeat = 1
timeraw_numba_first_call.number = 1
# Compiling every kernel from an empty cache: over asv's default 60 s on a loaded 2-core machine.
timeraw_numba_first_call.timeout = 600
