"""asv benchmarks of whole networks: MobileNetV2 forward at batch 1, one LeNet-5 training step.

Networks and inputs are built in ``setup`` (random, never timed), which
also runs the timed operation once so JIT compilation and kernel loading
stay out of the measurement; GPU work is synchronised inside the timed
call; an unavailable backend raises NotImplementedError (asv: skipped).
The pure-Python backend is left out of the parameter lists: one MobileNetV2
pass takes it minutes.
"""

import numpy as np

import convsuite as cs
from convsuite import nets, nn

from .common import require_backend, synchronize

#: Written out, never computed from what is installed (common.py says why); in the order the
#: list had when it was computed from list_backends(), so earlier results keep their place.
BACKENDS = ["cupy", "numba", "cython", "joblib", "numpy"]


def _require(backend):
    require_backend(backend)
    return {b.name: b for b in cs.list_backends()}[backend]


class MobileNetV2Forward:
    """Inference at batch 1, 224x224 (the kitten report's network), as built and with BN folded."""

    params = (BACKENDS, ["as built", "bn folded"])
    param_names = ["backend", "network"]
    timeout = 300

    def setup(self, backend, network):
        info = _require(backend)
        net = nets.mobilenet_v2(backend=backend, seed=0).eval()
        if network == "bn folded":
            net = nn.fold_batchnorms(net)
        x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
        if info.device == "gpu":
            import cupy

            net.to("gpu")
            x = cupy.asarray(x)
        self.net, self.x = net, x
        self.time_forward(backend, network)

    def time_forward(self, backend, network):
        with nn.no_grad():
            synchronize(self.net(self.x))


class LeNet5TrainingStep:
    """Forward, cross-entropy, backward and SGD (momentum) on a batch of 32x32 images."""

    params = (BACKENDS, [64])
    param_names = ["backend", "batch"]
    timeout = 300

    def setup(self, backend, batch):
        info = _require(backend)
        rng = np.random.default_rng(0)
        self.net = nets.lenet5(backend=backend, seed=0)
        self.x = rng.random((batch, 1, 32, 32), dtype=np.float32)
        self.y = rng.integers(0, 10, batch)
        if info.device == "gpu":
            import cupy

            self.net.to("gpu")
            self.x, self.y = cupy.asarray(self.x), cupy.asarray(self.y)
        self.loss = nn.CrossEntropyLoss()
        self.optimiser = nn.SGD(self.net.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        self.time_step(backend, batch)

    def time_step(self, backend, batch):
        self.optimiser.zero_grad()
        self.loss(self.net(self.x), self.y)
        self.net.backward(self.loss.backward(), input_grad=False)  # as torch: the images need none
        self.optimiser.step()
        synchronize(self.net[0].weight.data)
