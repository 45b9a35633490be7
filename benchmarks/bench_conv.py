"""asv benchmarks: one class per operation, params over backend x size x dtype.

Inputs are built in ``setup`` (random, never timed), which also runs the
operation once so JIT compilation and device warm-up stay out of the timed
call; GPU results are synchronised inside the timed call; a backend that is
unavailable or cannot run a case raises NotImplementedError, which asv
reports as skipped.
"""

import numpy as np

import convsuite as cs

BACKENDS = [b.name for b in cs.list_backends()]
#: The pure-Python backend gets only the smallest size of each benchmark.
SLOW = {"python"}


def _sync(result):
    """Block until GPU work behind ``result`` is done (CuPy arrays only)."""
    first = result[0] if isinstance(result, tuple) else result
    if type(first).__module__.startswith("cupy"):
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def _require(backend, spec_args, size_index):
    info = {b.name: b for b in cs.list_backends()}[backend]
    if not info.available:
        raise NotImplementedError(info.reason)
    if backend in SLOW and size_index > 0:
        raise NotImplementedError("too slow for this size")
    try:
        cs.explain(*spec_args[0], backend=backend, **spec_args[1])
    except (cs.UnsupportedCaseError, cs.BackendUnavailableError) as exc:
        raise NotImplementedError(str(exc)) from None


CONV2D_SIZES = {
    # name: (x shape, w shape, keywords)
    "3x3 C16 32x32 B2": ((2, 16, 32, 32), (16, 16, 3, 3), dict(padding=1)),
    "fa21-conv1 B64": ((64, 1, 86, 86), (4, 1, 7, 7), {}),
    "dw3x3 s2 C144 56x56 B4": ((4, 144, 56, 56), (144, 1, 3, 3), dict(stride=2, padding=1, groups=144)),
}


def _conv2d_inputs(bench, backend, case, dtype):
    """Random inputs of a CONV2D_SIZES case on the benchmark object; skips what cannot run."""
    x_shape, w_shape, kw = CONV2D_SIZES[case]
    bench.rng = np.random.default_rng(0)
    bench.x = bench.rng.standard_normal(x_shape).astype(dtype)
    bench.w = bench.rng.standard_normal(w_shape).astype(dtype)
    bench.kw = kw
    _require(backend, ((bench.x, bench.w), kw), list(CONV2D_SIZES).index(case))


class Conv2DForward:
    params = (BACKENDS, list(CONV2D_SIZES), ["float32", "float64"])
    param_names = ["backend", "case", "dtype"]

    def setup(self, backend, case, dtype):
        _conv2d_inputs(self, backend, case, dtype)
        self.flops = cs.explain(self.x, self.w, **self.kw).spec.flops
        _sync(cs.conv2d(self.x, self.w, backend=backend, **self.kw))  # compile / warm up

    def time_forward(self, backend, case, dtype):
        _sync(cs.conv2d(self.x, self.w, backend=backend, **self.kw))

    def track_gflops(self, backend, case, dtype):
        import time

        runs = []
        for _ in range(3):
            start = time.perf_counter()
            _sync(cs.conv2d(self.x, self.w, backend=backend, **self.kw))
            runs.append(time.perf_counter() - start)
        return self.flops / sorted(runs)[1] / 1e9

    track_gflops.unit = "GFLOP/s"


class Conv2DBackward:
    params = (BACKENDS, ["3x3 C16 32x32 B2", "fa21-conv1 B64"], ["float32"])
    param_names = ["backend", "case", "dtype"]

    def setup(self, backend, case, dtype):
        _conv2d_inputs(self, backend, case, dtype)
        y = cs.conv2d(self.x, self.w, backend="numpy", **self.kw)
        self.gy = self.rng.standard_normal(y.shape).astype(dtype)
        _sync(cs.conv2d_backward(self.gy, self.x, self.w, backend=backend, **self.kw))

    def time_backward(self, backend, case, dtype):
        _sync(cs.conv2d_backward(self.gy, self.x, self.w, backend=backend, **self.kw))


class Conv1DSignal:
    params = (BACKENDS, [10**4, 10**6], [3, 31], ["float32"])
    param_names = ["backend", "N", "K", "dtype"]

    def setup(self, backend, n, k, dtype):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal(n).astype(dtype)
        self.w = rng.standard_normal(k).astype(dtype)
        _require(backend, ((self.x, self.w), dict(padding="same")), 0 if n <= 10**4 else 1)
        _sync(cs.conv1d(self.x, self.w, padding="same", backend=backend))

    def time_conv1d(self, backend, n, k, dtype):
        _sync(cs.conv1d(self.x, self.w, padding="same", backend=backend))

    def track_gbs(self, backend, n, k, dtype):
        import time

        start = time.perf_counter()
        _sync(cs.conv1d(self.x, self.w, padding="same", backend=backend))
        return 2 * self.x.nbytes / (time.perf_counter() - start) / 1e9

    track_gbs.unit = "GB/s"


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
