"""What users would pick instead: torch, numpy.convolve, scipy.signal; cuDNN on a GPU.

Each anchor answers a case with a zero-argument callable, or with a string
saying why it cannot run it (not installed, a padding it has no mode for).
Each has a float32 precision class (:func:`anchor_precision`), as convsuite's
algorithms do: cuDNN with TF32 off is ``"highest"`` (IEEE float32), the
anchor of convsuite's ``"highest"`` rows; cuDNN with TF32 on (torch's own
default for convolutions) is ``"medium"``, the like-for-like anchor of
``"high"`` and ``"medium"`` rows.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ._arguments import one_of
from .workloads import Case

__all__ = ["ANCHORS", "GPU_ANCHORS", "anchor_callable", "anchor_names", "anchor_precision"]


def _torch_on(device: str, tf32: bool = False):
    """Torch on the CPU, or on the GPU through cuDNN with TF32 off (strict FP32) or on."""

    def anchor(case: Case, x, w, bias, grad_y, spec):
        try:
            import torch
        except ImportError:
            return "torch is not installed"
        if device == "gpu" and not torch.cuda.is_available():
            return "torch sees no CUDA device"
        run = _torch(case, x, w, bias, grad_y, spec, "cuda" if device == "gpu" else "cpu")
        if device != "gpu" or isinstance(run, str):
            return run

        def synchronised():
            # TF32 is a process-wide switch of torch, and the TF32-on and -off anchors are timed
            # interleaved: each call sets its own, and leaves torch's as it found it.
            with torch.backends.cudnn.flags(enabled=True, benchmark=True, deterministic=False, allow_tf32=tf32):
                previous = torch.backends.cuda.matmul.allow_tf32
                torch.backends.cuda.matmul.allow_tf32 = tf32
                try:
                    result = run()
                    torch.cuda.synchronize()  # the GPU work finishes inside the timed call
                finally:
                    torch.backends.cuda.matmul.allow_tf32 = previous
            return result

        return synchronised

    return anchor


def _torch(case: Case, x, w, bias, grad_y, spec, where: str = "cpu"):
    import torch

    # torch takes symmetric padding only: asymmetric ("same" with even kernels
    # or stride) is applied as an explicit pad first, as a torch user would.
    pads = spec.padding
    symmetric = all(lo == hi for lo, hi in pads)
    conv = torch.nn.functional.conv1d if spec.ndim == 1 else torch.nn.functional.conv2d
    tx = torch.from_numpy(np.ascontiguousarray(x).reshape(spec.x_shape)).to(where)
    tw = torch.from_numpy(np.ascontiguousarray(w).reshape(spec.w_shape)).to(where)
    tb = None if bias is None else torch.from_numpy(bias).to(where)
    flat_pad = [p for pair in reversed(pads) for p in pair]

    def forward(inp):
        if symmetric:
            return conv(
                inp,
                tw,
                tb,
                stride=spec.stride,
                padding=tuple(lo for lo, _ in pads),
                dilation=spec.dilation,
                groups=spec.groups,
            )
        return conv(
            torch.nn.functional.pad(inp, flat_pad),
            tw,
            tb,
            stride=spec.stride,
            dilation=spec.dilation,
            groups=spec.groups,
        )

    if case.direction == "forward":

        def run():
            with torch.no_grad():
                return forward(tx).cpu().numpy() if where == "cpu" else forward(tx)

        return run
    tgy = torch.from_numpy(np.ascontiguousarray(grad_y).reshape(spec.y_shape)).to(where)

    def run_backward():
        xi = tx.detach().requires_grad_(True)
        wi = tw.detach().requires_grad_(True)
        out = conv(
            xi if symmetric else torch.nn.functional.pad(xi, flat_pad),
            wi,
            None,
            stride=spec.stride,
            padding=tuple(lo for lo, _ in pads) if symmetric else 0,
            dilation=spec.dilation,
            groups=spec.groups,
        )
        out.backward(tgy)
        gb = tgy.sum(dim=tuple(d for d in range(tgy.ndim) if d != 1))
        return tuple(g.cpu().numpy() if where == "cpu" else g for g in (xi.grad, wi.grad, gb))

    return run_backward


def _plain_signal_mode(case: Case, spec):
    """numpy/scipy 'same' centres like us only for odd kernels; stride/dilation unsupported."""
    if case.op != "conv1d" or len(case.x_shape) != 1 or case.direction != "forward":
        return None, "plain 1-D signals only (forward)"
    if spec.stride != (1,) or spec.dilation != (1,):
        return None, "no stride or dilation"
    k = spec.kernel_size[0]
    if case.padding == "same" and k % 2 == 0:
        return None, "'same' with an even mask is centred differently"
    mode = case.padding if isinstance(case.padding, str) else None
    if mode is None:
        return None, "numeric padding"
    return mode, None


def _numpy_convolve(case, x, w, bias, grad_y, spec):
    mode, why = _plain_signal_mode(case, spec)
    if mode is None:
        return why
    if mode == "same" and spec.kernel_size[0] > spec.in_size[0]:
        # np.convolve's 'same' returns max(N, K) samples: a mask longer than the signal gives K, not N.
        return "'same' with a mask longer than the signal returns the mask's length"
    flipped = np.ascontiguousarray(w[::-1])
    return lambda: np.convolve(x, flipped, mode=mode)  # convolution of the flipped mask = correlation


def _scipy_correlate(case, x, w, bias, grad_y, spec):
    mode, why = _plain_signal_mode(case, spec)
    if mode is None:
        return why
    from scipy.signal import correlate

    return lambda: correlate(x, w, mode=mode, method="auto")  # scipy picks direct or FFT


def _cupyx_correlate1d(case, x, w, bias, grad_y, spec):
    mode, why = _plain_signal_mode(case, spec)
    if mode != "same":
        return why or "cupyx correlate1d keeps the length: 'same' padding only"
    try:
        import cupy as cp
        from cupyx.scipy.ndimage import correlate1d
    except ImportError:
        return "cupy is not installed"
    xd, wd = cp.asarray(x), cp.asarray(w)

    def run():
        result = correlate1d(xd, wd, mode="constant")
        cp.cuda.get_current_stream().synchronize()
        return result

    return run


#: What users pick instead on the CPU.
ANCHORS: dict[str, Callable] = {
    "torch": _torch_on("cpu"),
    "np.convolve": _numpy_convolve,
    "scipy.signal.correlate": _scipy_correlate,
}

#: What users pick instead on a GPU (inputs already on the device).
GPU_ANCHORS: dict[str, Callable] = {
    "cuDNN (TF32 off)": _torch_on("gpu", tf32=False),
    "cuDNN (TF32 on)": _torch_on("gpu", tf32=True),
    "cupyx correlate1d": _cupyx_correlate1d,
}

#: The float32 precision class of each anchor not computed in IEEE float32 ("highest").
_PRECISION = {"cuDNN (TF32 on)": "medium"}


def anchor_names() -> list[str]:
    """Every anchor's name, CPU ones first."""
    return [*ANCHORS, *GPU_ANCHORS]


def anchor_precision(name: str) -> str:
    """The float32 precision class of anchor ``name``: ``"highest"``, or ``"medium"`` for cuDNN with TF32 on."""
    one_of(name, anchor_names(), "`name` (an anchor)")
    return _PRECISION.get(name, "highest")


def anchor_callable(name: str, case: Case, x, w, bias, grad_y, spec):
    """A callable running anchor ``name`` on the case, or a string saying why not.

    Raises
    ------
    ValueError
        ``name`` is not one of :func:`anchor_names`.
    """
    one_of(name, anchor_names(), "`contender` (an anchor)")
    return {**ANCHORS, **GPU_ANCHORS}[name](case, x, w, bias, grad_y, spec)
