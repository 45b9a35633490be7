"""Max pooling on the host with numba: one pass over the input, all cores.

``convsuite.nn.MaxPool2D`` (and ``MaxPool1D``) run here for NumPy arrays
when numba is installed; NumPy's tap-by-tap expressions remain the path
without it and for CuPy. Those expressions read each tap as a strided view
(no SIMD: ~0.3 ns per element and pass, five passes per tap), and pooling
was a quarter of a LeNet-5 training step on the 2-core VM. In that step
(batch 64, medians in the step, 2026-11-24) the numba kernels took the
first pool's forward from 422 to 119 us and its backward from 323 to 116;
the second's from 232 to 49 and 134 to 62; the step from 4.06 to 3.23 ms.

The planes (image, channel) are dealt out over ``prange``. Within a plane,
each window is visited tap by tap in raster order (row ``p``, then column
``q``), as PyTorch's CPU kernel does, so the results match it bit for bit:
the first maximum of a tie wins, a NaN takes over from any number (the last
NaN of a window wins), and a window whose values are all ``-inf`` keeps its
first tap inside the input. The arg-max is stored as the tap code
``p * kw + q`` in the layer's type on every device (``uint8`` up to 256
taps, ``int32`` while the codes fit, ``int64`` beyond: int32 codes past
``2**31`` wrapped negative and the backward pass wrote out of bounds).
Only taps inside the input are visited, so a huge kernel costs nothing.
Offsets are flat and unsigned: numba wraps negative signed indices (a
compare and select per element that also stops LLVM vectorising; see
``_numba_gemm``).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from .._threads import get_num_threads
from ._numba_cache import kernel_jit
from ._numba_kernels import run_serialised

__all__ = ["max_pool2d_backward", "max_pool2d_forward"]

_FLAGS = dict(parallel=True, nogil=True, error_model="numpy")


@njit(inline="always")
def _take(v, m, code, best):
    """One tap of a window: ``(m, best)`` after seeing value ``v`` of tap ``code`` (torch's rule)."""
    take = (v > m) | (v != v)  # greater, or NaN
    return (v if take else m), (code if take else best)


@kernel_jit(**_FLAGS)
def _max_forward(x, out, arg, kh, kw, sh, sw, ph, pw):
    """out[i, oh, ow] = max over the window's taps of x[i]; arg = the winning tap's code."""
    P, H, W = x.shape
    Ho, Wo = out.shape[1], out.shape[2]
    fx = x.reshape(x.size)
    fo = out.reshape(out.size)
    fa = arg.reshape(arg.size)
    lowest = out.dtype.type(-np.inf)
    for i in prange(P):
        for oh in range(Ho):
            top = oh * sh - ph
            p0 = max(0, -top)
            p1 = min(kh, H - top)
            o = (i * Ho + oh) * Wo
            for ow in range(Wo):
                left = ow * sw - pw
                q0 = max(0, -left)
                q1 = min(kw, W - left)
                m = lowest
                best = p0 * kw + q0  # a window starts at its first tap inside the input
                for p in range(p0, p1):
                    row = np.uint64((i * H + top + p) * W + left)  # + q >= 0 on the valid taps
                    for q in range(q0, q1):
                        m, best = _take(fx[row + np.uint64(q)], m, p * kw + q, best)
                fo[o + ow] = m
                fa[o + ow] = best


@kernel_jit(**_FLAGS)
def _max_forward_2x2(x, out, arg, sh, sw):
    """``_max_forward`` for 2x2 windows without padding (LeNet's, VGG's), the taps unrolled.

    With the four taps known the column loop has no inner loops left: LeNet's
    first pool, 64 images, one thread, 176 us against the general kernel's 530.
    """
    P, H, W = x.shape
    Ho, Wo = out.shape[1], out.shape[2]
    fx = x.reshape(x.size)
    fo = out.reshape(out.size)
    fa = arg.reshape(arg.size)
    st = np.uint64(sw)
    one, two, three = fa.dtype.type(1), fa.dtype.type(2), fa.dtype.type(3)
    for i in prange(P):
        for oh in range(Ho):
            r0 = np.uint64((i * H + oh * sh) * W)
            r1 = r0 + np.uint64(W)
            o = np.uint64((i * Ho + oh) * Wo)
            for ow in range(Wo):
                c = np.uint64(ow) * st
                m = fx[r0 + c]
                best = fa.dtype.type(0)
                m, best = _take(fx[r0 + c + np.uint64(1)], m, one, best)
                m, best = _take(fx[r1 + c], m, two, best)
                m, best = _take(fx[r1 + c + np.uint64(1)], m, three, best)
                fo[o + np.uint64(ow)] = m
                fa[o + np.uint64(ow)] = best


@kernel_jit(**_FLAGS)
def _max_backward(grad_y, arg, grad_x, kw, sh, sw, ph, pw):
    """grad_x[i] = sum over windows of grad_y routed to the window's arg-max input."""
    P, H, W = grad_x.shape
    Ho, Wo = grad_y.shape[1], grad_y.shape[2]
    fg = grad_y.reshape(grad_y.size)
    fa = arg.reshape(arg.size)
    fx = grad_x.reshape(grad_x.size)
    zero = grad_x.dtype.type(0)
    for i in prange(P):
        base = np.uint64(i * H * W)
        for k in range(H * W):
            fx[base + np.uint64(k)] = zero
        for oh in range(Ho):
            o = (i * Ho + oh) * Wo
            top = oh * sh - ph
            for ow in range(Wo):
                code = np.int64(fa[o + ow])
                p = code // kw
                q = code - p * kw
                # The code names a tap inside the input (forward's guarantee): the offset is >= 0.
                fx[base + np.uint64((top + p) * W + ow * sw - pw + q)] += fg[o + ow]


def _launch(kernel, *args) -> None:
    """Run ``kernel`` as the numba backend runs its own: its thread count, its threading layer's lock."""
    numba.set_num_threads(get_num_threads())  # numba's setting is per calling thread
    run_serialised(kernel, *args)


def max_pool2d_forward(
    x: np.ndarray, kernel_size, stride, padding, out_shape, code_dtype
) -> tuple[np.ndarray, np.ndarray]:
    """Window maxima and arg-max tap codes (of type ``code_dtype``) of a ``(B, C, H, W)`` float array.

    ``x`` must be C-contiguous, float32 or float64, with ``H, W >= 1``; the
    geometry is the caller's, already checked (floor mode, padding at most
    half the kernel, so every window holds a tap inside the input), and
    ``code_dtype`` must hold ``kh * kw - 1``.
    """
    (kh, kw), (sh, sw), (ph, pw) = kernel_size, stride, padding
    B, C, H, W = x.shape
    Ho, Wo = out_shape
    out = np.empty((B, C, Ho, Wo), dtype=x.dtype)
    arg = np.empty((B, C, Ho, Wo), dtype=code_dtype)
    planes = B * C
    x3, out3, arg3 = x.reshape(planes, H, W), out.reshape(planes, Ho, Wo), arg.reshape(planes, Ho, Wo)
    if (kh, kw, ph, pw) == (2, 2, 0, 0):
        _launch(_max_forward_2x2, x3, out3, arg3, sh, sw)
    else:
        _launch(_max_forward, x3, out3, arg3, kh, kw, sh, sw, ph, pw)
    return out, arg


def max_pool2d_backward(grad_y: np.ndarray, arg: np.ndarray, x_shape, kernel_size, stride, padding) -> np.ndarray:
    """The input gradient of :func:`max_pool2d_forward` (``grad_y`` C-contiguous, ``x``'s dtype)."""
    (_, kw), (sh, sw), (ph, pw) = kernel_size, stride, padding
    B, C, H, W = x_shape
    Ho, Wo = grad_y.shape[2:]
    grad_x = np.empty((B, C, H, W), dtype=grad_y.dtype)
    planes = B * C
    gy3, arg3, gx3 = grad_y.reshape(planes, Ho, Wo), arg.reshape(planes, Ho, Wo), grad_x.reshape(planes, H, W)
    # One zero fill and a scatter, whatever the windows: a 2x2 tiling kernel that wrote
    # every input once (its gradient or zero) measured 2x slower (153 against 79 us,
    # LeNet's first pool, 2-core VM): four strided stores per window.
    _launch(_max_backward, gy3, arg3, gx3, kw, sh, sw, ph, pw)
    return grad_x
