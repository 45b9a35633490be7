"""The GPU rung against cuDNN, and the backward algorithms of the CUDA write-up, on the seed layers.

- ``VsCudnn``: ``cs.conv2d`` / ``cs.conv2d_backward`` as a user calls them
  (``auto``, operands already on the GPU, the default 'highest' precision)
  over cuDNN through torch (TF32 off, ``cudnn.benchmark`` on: its fastest
  algorithm for the shape, searched in ``setup``), at the reports' batches;
  backward is compared with torch autograd's backward of the same
  convolution. Both sides are timed between CUDA events, interleaved, by
  convsuite's measuring core; lower is better. Results are checked against
  torch in float64 on the GPU first (an implementation independent of
  convsuite; the CPU reference would take minutes at these sizes).
- ``BackwardAlgorithms``: each backward algorithm of the weight-gradient
  ladder (atomicAdd, warp shuffle, registers, padded) and the implicit-GEMM
  ones, pinned by name, on the write-up's 3x3 layers and the ECE408 layers.

Without CuPy, a GPU, or torch with CUDA, every case is skipped
(NotImplementedError) with the reason.
"""

import convsuite as cs

from .common import (
    SEED_LAYERS,
    ConvBenchmark,
    RatioBenchmark,
    TorchEvents,
    measuring_core,
    random_arrays,
    require_backend,
    require_torch,
    seed_layer,
)

#: Largest relative L2 error of a float32 result against float64 taken as right: float32
#: rounding over these reductions (at most ~10^5 terms for dW) stays near 10^-6.
MAX_RELATIVE_ERROR = 1e-4


def _relative_error(got, expected):
    """||got - expected|| / ||expected||, in float64 (torch tensors of any dtype)."""
    difference = (got.double() - expected).norm()
    return float(difference / max(float(expected.norm()), 1e-300))


def _check(name, got, expected):
    error = _relative_error(got, expected)
    if not error <= MAX_RELATIVE_ERROR:
        raise AssertionError(
            f"{name}: relative L2 error {error:.2e} against torch float64 (at most {MAX_RELATIVE_ERROR})"
        )


class VsCudnn(RatioBenchmark):
    """float32 on the GPU: convsuite's time over cuDNN's (torch, TF32 off), forward and backward."""

    params = (["forward", "backward"], list(SEED_LAYERS))
    param_names = ["direction", "layer"]
    unit = "convsuite time / cuDNN time"

    def build(self, direction, layer):
        Contender, _ = measuring_core()
        require_backend("cupy")
        torch = require_torch("gpu")
        import cupy

        F = torch.nn.functional
        x, w, bias, keywords = seed_layer(layer, "gpu")
        x, w, bias = (cupy.asarray(a) for a in (x, w, bias))
        tx, tw, tb = (torch.from_dlpack(a) for a in (x, w, bias))
        timer = cs.get_backend("cupy").timer
        if direction == "forward":
            _check(
                "y",
                torch.from_dlpack(cs.conv2d(x, w, bias, **keywords)),
                F.conv2d(tx.double(), tw.double(), tb.double(), **keywords),
            )

            def reference():
                with torch.no_grad():
                    return F.conv2d(tx, tw, tb, **keywords)

            return Contender(lambda: cs.conv2d(x, w, bias, **keywords), timer), Contender(reference, TorchEvents)
        (grad_y,) = random_arrays(1, "float32", cs.explain(x, w, **keywords).spec.y_shape)
        grad_y = cupy.asarray(grad_y)
        tgy = torch.from_dlpack(grad_y)
        leaves64 = [t.double().requires_grad_(True) for t in (tx, tw, tb)]
        expected = torch.autograd.grad(F.conv2d(*leaves64, **keywords), leaves64, tgy.double())
        got = cs.conv2d_backward(grad_y, x, w, **keywords)
        for name, g, e in zip(("dx", "dw", "db"), got, expected):
            _check(name, torch.from_dlpack(g).reshape(e.shape), e)
        leaves = [t.detach().requires_grad_(True) for t in (tx, tw, tb)]
        y = F.conv2d(*leaves, **keywords)  # the graph autograd walks back, built once

        def reference():
            return torch.autograd.grad(y, leaves, tgy, retain_graph=True)

        return Contender(lambda: cs.conv2d_backward(grad_y, x, w, **keywords), timer), Contender(reference, TorchEvents)

    def track_vs_cudnn(self, direction, layer):
        return self.ratio()


#: The write-up's training layers (cnn-train-3x3, batch 64) and two ECE408 layers at batch 1,000.
LADDER_LAYERS = {
    "cnn-train c1 B=64": ((64, 32, 64, 64), (64, 32, 3, 3), {"padding": 1}),
    "cnn-train c2 B=64": ((64, 64, 56, 56), (64, 64, 3, 3), {"padding": 1}),
    "fa19-conv2 B=1000": ((1000, 12, 22, 22), (24, 12, 5, 5), {}),
    "fa21-conv2 B=1000": ((1000, 4, 40, 40), (16, 4, 7, 7), {}),
}


class BackwardAlgorithms(ConvBenchmark):
    """dX + dW + db, float32, each backward algorithm pinned: the ladder's steps beside the implicit GEMMs."""

    params = (
        ["cupy"],
        ["wgrad_atomic", "wgrad_shuffle", "wgrad_registers", "wgrad_padded", "fused_gemm", "igemm_big"],
        list(LADDER_LAYERS),
    )
    param_names = ["backend", "algorithm", "layer"]

    def build(self, backend, algorithm, layer):
        import cupy

        x_shape, w_shape, keywords = LADDER_LAYERS[layer]
        x, w = (cupy.asarray(a) for a in random_arrays(0, "float32", x_shape, w_shape))
        (grad_y,) = random_arrays(1, "float32", cs.explain(x, w, **keywords).spec.y_shape)
        grad_y = cupy.asarray(grad_y)
        return lambda: cs.conv2d_backward(grad_y, x, w, backend=backend, algorithm=algorithm, **keywords)

    def time_backward(self, backend, algorithm, layer):
        self.run()
