"""Ratios tracked over time on the CPU: convsuite against torch, per-call overhead, threads.

Each ``track_`` returns convsuite's median time over a reference's, both
sides measured in the same process, interleaved, after a warm-up, by
convsuite's measuring core (:class:`~benchmarks.common.RatioBenchmark`);
lower is better, 1 is parity. Every convsuite result is checked against the
float64 reference (``convsuite.testing``) before it is timed.

- ``VsTorchForward``: the seed layers (ECE408 fa19/fa21 conv1/conv2, 3x3
  C=64, 1x1, depthwise) through ``cs.conv2d`` against
  ``torch.nn.functional.conv2d`` on as many threads.
- ``VsTorchBackward``: ``cs.conv2d_backward`` (dX, dW, db) against torch
  autograd's backward of the same convolution (its forward taken once, in
  ``setup``).
- ``CallOverhead``: a tiny convolution, where validation, selection and
  dispatch are the whole cost, per call (through ``cs.conv2d`` and through a
  held ``cs.plan``) against torch's per call, both on one thread: a pool of
  two waking for a few thousand multiply-adds costs torch ~90 us a call on
  the 2-core VM (4 us on one), which would swamp the dispatch being measured.
- ``ThreadScaling``: the multicore rungs on all usable cores over the same
  call on one thread (ideal: 1/N).

torch and numba share the process: OpenMP waits are passive
(``common.passive_openmp``), so neither side's idle pool spins on the cores
the other needs.
"""

import numpy as np

import convsuite as cs

from .common import (
    SEED_LAYERS,
    RatioBenchmark,
    random_arrays,
    require_backend,
    require_torch,
    seed_layer,
)

#: The multicore rungs' thread count in these ratios: all usable cores (convsuite's default).
ALL_CORES = None


def _checked_forward(y, x, w, bias, keywords):
    """Raise AssertionError unless ``y`` is the convolution within float32 rounding of the float64 reference."""
    from convsuite.testing import assert_within, forward_tolerance, reference_forward

    spec = cs.explain(x, w, bias, **keywords).spec
    expected = reference_forward(spec, x, w, bias)  # canonical (B, C, ...) shape: a plain signal's y is (N,)
    assert_within(np.reshape(y, expected.shape), expected, forward_tolerance(spec, x, w, bias), "convsuite's y")


def _checked_backward(grads, grad_y, x, w, keywords):
    """Raise AssertionError unless dX, dW, db are within float32 rounding of the float64 reference."""
    from convsuite.testing import assert_within, backward_tolerances, reference_backward

    spec = cs.explain(x, w, direction="backward", **keywords).spec
    expected = reference_backward(spec, grad_y, x, w)
    tolerances = backward_tolerances(spec, grad_y, x, w)
    for name, got, want, tol in zip(("dx", "dw", "db"), grads, expected, tolerances):
        assert_within(np.reshape(got, np.shape(want)), want, tol, f"convsuite's {name}")


def _torch_threads(torch):
    """torch on the cores convsuite's multicore rungs use, so both sides have the same machine."""
    torch.set_num_threads(cs.get_num_threads())


class VsTorchForward(RatioBenchmark):
    """Forward, float32, CPU: convsuite's time over torch's on the seed layers."""

    params = (["auto", "numba"], list(SEED_LAYERS))
    param_names = ["backend", "layer"]
    unit = "convsuite time / torch time"

    def build(self, backend, layer):
        if backend != "auto":
            require_backend(backend)
        torch = require_torch("cpu")
        _torch_threads(torch)
        x, w, bias, keywords = seed_layer(layer, "cpu")
        _checked_forward(cs.conv2d(x, w, bias, backend=backend, **keywords), x, w, bias, keywords)
        tx, tw, tb = (torch.from_numpy(a) for a in (x, w, bias))

        def reference():
            with torch.no_grad():
                return torch.nn.functional.conv2d(tx, tw, tb, **keywords)

        return (lambda: cs.conv2d(x, w, bias, backend=backend, **keywords)), reference

    def track_vs_torch(self, backend, layer):
        return self.ratio()


class VsTorchBackward(RatioBenchmark):
    """Backward (dX, dW, db), float32, CPU: convsuite's time over torch autograd's."""

    params = (["auto", "numba"], ["fa19-conv2", "fa21-conv1", "3x3 C64 56x56", "dw3x3 s2 C144 56x56"])
    param_names = ["backend", "layer"]
    unit = "convsuite time / torch autograd time"

    def build(self, backend, layer):
        if backend != "auto":
            require_backend(backend)
        torch = require_torch("cpu")
        _torch_threads(torch)
        x, w, bias, keywords = seed_layer(layer, "cpu")
        (grad_y,) = random_arrays(1, "float32", cs.explain(x, w, **keywords).spec.y_shape)
        _checked_backward(cs.conv2d_backward(grad_y, x, w, backend=backend, **keywords), grad_y, x, w, keywords)
        tx, tw, tb = (torch.from_numpy(a).requires_grad_(True) for a in (x, w, bias))
        y = torch.nn.functional.conv2d(tx, tw, tb, **keywords)  # the graph autograd walks back, built once
        tgy = torch.from_numpy(grad_y)

        def reference():
            return torch.autograd.grad(y, (tx, tw, tb), tgy, retain_graph=True)

        return (lambda: cs.conv2d_backward(grad_y, x, w, backend=backend, **keywords)), reference

    def track_vs_torch_autograd(self, backend, layer):
        return self.ratio()


#: The tiny convolution of the per-call ratio: x 1x4x8x8, w 4x4x3x3, padding 1 (a few thousand MACs).
TINY = ((1, 4, 8, 8), (4, 4, 3, 3), {"padding": 1})
#: Calls per timed sample of the tiny convolution (a sample of one call would be timer noise).
TINY_CALLS = 100


class _Block:
    """``fn`` called ``calls`` times in a row, then ``sync()``: one sample of a per-call ratio."""

    def __init__(self, fn, calls, sync):
        self.fn, self.calls, self.sync = fn, calls, sync

    def __call__(self):
        fn = self.fn
        for _ in range(self.calls):
            fn()
        self.sync()


class CallOverhead(RatioBenchmark):
    """A tiny convolution, float32: convsuite's time per call over torch's (on the backend's device)."""

    params = (["auto", "numpy", "numba", "cython", "cupy"], ["cs.conv2d", "held cs.plan"])
    param_names = ["backend", "path"]
    unit = "convsuite time per call / torch time per call"

    def build(self, backend, path):
        from .common import measuring_core

        Contender, _ = measuring_core()
        if backend != "auto":
            require_backend(backend)
        device = "gpu" if backend == "cupy" else "cpu"
        torch = require_torch(device)
        cs.set_num_threads(1)
        torch.set_num_threads(1)
        x_shape, w_shape, keywords = TINY
        x, w = random_arrays(0, "float32", x_shape, w_shape)
        _checked_forward(cs.conv2d(x, w, backend=backend, **keywords), x, w, None, keywords)
        home = cs.get_backend(backend if backend != "auto" else "numpy")
        xd, wd = home.to_device(x), home.to_device(w)
        if path == "held cs.plan":
            held = cs.plan(xd, wd, backend=backend, **keywords)
            call = lambda: held(xd, wd)  # noqa: E731
        else:
            call = lambda: cs.conv2d(xd, wd, backend=backend, **keywords)  # noqa: E731
        where = "cuda" if device == "gpu" else "cpu"
        tx, tw = torch.from_numpy(x).to(where), torch.from_numpy(w).to(where)
        if device == "gpu":
            from .common import TorchEvents

            torch_sync, torch_timer = torch.cuda.synchronize, TorchEvents
        else:
            torch_sync, torch_timer = (lambda: None), home.timer

        def reference():
            with torch.no_grad():
                return torch.nn.functional.conv2d(tx, tw, **keywords)

        return (
            Contender(_Block(call, TINY_CALLS, home.synchronize), home.timer),
            Contender(_Block(reference, TINY_CALLS, torch_sync), torch_timer),
        )

    def teardown(self, backend, path):
        cs.set_num_threads(None)

    def track_per_call_vs_torch(self, backend, path):
        return self.ratio()


#: The thread-scaling cases: two ECE408 layers at the CPU batch, and a 1-D signal.
SCALING_CASES = {
    "fa19-conv2": None,
    "fa21-conv1": None,
    "1-D N=1e6 K=31 same": ((10**6,), (31,), {"padding": "same"}),
}


class ThreadScaling(RatioBenchmark):
    """The multicore rungs on every usable core: their time over the same call on one thread (ideal 1/N)."""

    params = (["numba", "joblib"], list(SCALING_CASES))
    param_names = ["backend", "case"]
    unit = "time on all cores / time on 1 thread"

    def build(self, backend, case):
        require_backend(backend)
        cores = cs.get_num_threads()
        if cores < 2:
            raise NotImplementedError(f"{cores} usable core: no thread scaling to measure")
        if SCALING_CASES[case] is None:
            x, w, _, keywords = seed_layer(case, "cpu")
        else:
            x_shape, w_shape, keywords = SCALING_CASES[case]
            x, w = random_arrays(0, "float32", x_shape, w_shape)
        fn = cs.conv1d if w.ndim == 1 else cs.conv2d

        def on(threads):
            def call():
                cs.set_num_threads(threads)  # one number per call: microseconds against milliseconds of work
                return fn(x, w, backend=backend, **keywords)

            return call

        _checked_forward(on(ALL_CORES)(), x, w, None, keywords)
        _checked_forward(on(1)(), x, w, None, keywords)
        return on(ALL_CORES), on(1)

    def teardown(self, backend, case):
        cs.set_num_threads(None)

    def track_all_cores_vs_one(self, backend, case):
        return self.ratio()
