"""What users would pick instead: torch, numpy.convolve, scipy.signal.

Each anchor answers a case with a zero-argument callable, or with a string
saying why it cannot run it (not installed, a padding it has no mode for).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .workloads import Case

__all__ = ["ANCHORS", "anchor_callable"]


def _torch(case: Case, x, w, bias, grad_y, spec):
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if x.dtype != np.float32 and x.dtype != np.float64:
        return "dtype"
    # torch takes symmetric padding only: asymmetric ("same" with even kernels
    # or stride) is applied as an explicit pad first, as a torch user would.
    pads = spec.padding
    symmetric = all(lo == hi for lo, hi in pads)
    conv = torch.nn.functional.conv1d if spec.ndim == 1 else torch.nn.functional.conv2d
    tx = torch.from_numpy(np.ascontiguousarray(x).reshape(spec.x_shape))
    tw = torch.from_numpy(np.ascontiguousarray(w).reshape(spec.w_shape))
    tb = None if bias is None else torch.from_numpy(bias)
    flat_pad = [p for pair in reversed(pads) for p in pair]

    def forward(inp):
        if symmetric:
            return conv(inp, tw, tb, stride=spec.stride, padding=tuple(lo for lo, _ in pads), dilation=spec.dilation, groups=spec.groups)
        return conv(torch.nn.functional.pad(inp, flat_pad), tw, tb, stride=spec.stride, dilation=spec.dilation, groups=spec.groups)

    if case.direction == "forward":

        def run():
            with torch.no_grad():
                return forward(tx).numpy()

        return run
    tgy = torch.from_numpy(np.ascontiguousarray(grad_y).reshape(spec.y_shape))

    def run_backward():
        xi = tx.detach().requires_grad_(True)
        wi = tw.detach().requires_grad_(True)
        out = conv(xi if symmetric else torch.nn.functional.pad(xi, flat_pad), wi, None, stride=spec.stride,
                   padding=tuple(lo for lo, _ in pads) if symmetric else 0, dilation=spec.dilation, groups=spec.groups)
        out.backward(tgy)
        return xi.grad.numpy(), wi.grad.numpy(), tgy.sum(dim=tuple(d for d in range(tgy.ndim) if d != 1)).numpy()

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
    flipped = np.ascontiguousarray(w[::-1])
    return lambda: np.convolve(x, flipped, mode=mode)  # convolution of the flipped mask = correlation


def _scipy_correlate(case, x, w, bias, grad_y, spec):
    mode, why = _plain_signal_mode(case, spec)
    if mode is None:
        return why
    from scipy.signal import correlate

    return lambda: correlate(x, w, mode=mode, method="auto")  # scipy picks direct or FFT


ANCHORS: dict[str, Callable] = {
    "torch": _torch,
    "np.convolve": _numpy_convolve,
    "scipy.signal.correlate": _scipy_correlate,
}


def anchor_callable(name: str, case: Case, x, w, bias, grad_y, spec):
    """A callable running anchor ``name`` on the case, or a string saying why not."""
    return ANCHORS[name](case, x, w, bias, grad_y, spec)
