"""Per-call overhead: convolutions so small that validation, selection and dispatch dominate."""

import convsuite as cs

from .common import BACKENDS, ConvBenchmark, device_arrays, random_arrays

#: name: (x shape, w shape, keywords) — a few hundred multiply-adds each.
TINY = {
    "conv2d 1x1x8x8 * 1x1x3x3": ((1, 1, 8, 8), (1, 1, 3, 3), {}),
    "conv1d N=64 K=3 same": ((64,), (3,), {"padding": "same"}),
}


class CallOverhead(ConvBenchmark):
    """One tiny call: the fixed cost a user pays per call on each backend."""

    params = (BACKENDS, list(TINY))
    param_names = ["backend", "case"]

    def build(self, backend, name):
        x_shape, w_shape, keywords = TINY[name]
        x, w = device_arrays(backend, *random_arrays(0, "float32", x_shape, w_shape))
        fn = cs.conv1d if len(w_shape) == 1 else cs.conv2d
        return lambda: fn(x, w, backend=backend, **keywords)

    def time_call(self, backend, name):
        self.run()
