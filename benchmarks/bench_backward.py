"""Backward passes (input, weight and bias gradients) per backend."""

import convsuite as cs

from .common import BACKENDS, DEFAULT_BACKWARD, PYTHON_BACKEND_MACS, ConvBenchmark, device_arrays, macs, preset_case


class Conv2DBackwardPreset(ConvBenchmark):
    """The default workload's backward case and the fa21 layer run backward, float32."""

    params = (BACKENDS, DEFAULT_BACKWARD, ["float32"])
    param_names = ["backend", "case", "dtype"]

    def build(self, backend, label, dtype):
        import numpy as np

        case = preset_case(label, "backward")
        x, w, _, rng = case.arrays(dtype)
        if backend == "python" and 2 * macs(x, w, **case.keywords) > PYTHON_BACKEND_MACS:
            raise NotImplementedError("too slow for the pure-Python backend")
        y_shape = cs.explain(x, w, **case.keywords).spec.y_shape
        grad_y = rng.standard_normal(y_shape).astype(dtype)
        grad_y, x, w = device_arrays(backend, np.asarray(grad_y), x, w)
        return lambda: cs.conv2d_backward(grad_y, x, w, backend=backend, **case.keywords)

    def time_backward(self, backend, label, dtype):
        self.run()
