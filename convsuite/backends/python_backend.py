"""The ``python`` backend: the convolution definition as plain nested loops.

This is the readable rung of the ladder and the oracle the others are argued
from: no vectorisation, no tricks. Arrays are turned into nested lists first
because indexing a list is several times faster than indexing a NumPy array
element by element; sums are accumulated in Python floats (double precision).
1-D cases run through the same loops as 2-D with a unit height axis.
"""

from __future__ import annotations

from .._spec import ConvSpec
from .base import Algorithm, Backend, Launch, Verdict

__all__ = ["ALGORITHMS", "PythonBackend"]

#: Multiply-adds above which a call would take minutes; such calls are refused
#: with a reason instead of appearing to hang.
MAX_MULTIPLY_ADDS = 100_000_000


def _forward(s: ConvSpec, x, w, bias, out) -> None:
    """Write the forward of the 2-D view ``s`` into ``out``, loop by loop."""
    xs = x.reshape(s.x_shape).tolist()
    ws = w.reshape(s.w_shape).tolist()
    bs = bias.tolist() if bias is not None else [0.0] * s.out_channels
    out4 = out.reshape(s.y_shape)
    H, W = s.in_size
    KH, KW = s.kernel_size
    (sh, sw), (dh, dw) = s.stride, s.dilation
    top, left = s.padding[0][0], s.padding[1][0]
    Ho, Wo = s.out_size
    Cg, Mg = s.channels_per_group, s.out_channels_per_group

    for b in range(s.batch):
        for m in range(s.out_channels):
            g = m // Mg  # the group this output channel belongs to
            plane = []
            for oh in range(Ho):
                row = []
                for ow in range(Wo):
                    acc = bs[m]
                    for c in range(Cg):
                        x_channel = xs[b][g * Cg + c]
                        w_channel = ws[m][c]
                        for p in range(KH):
                            ih = oh * sh + p * dh - top
                            if not 0 <= ih < H:
                                continue  # a halo row: zero padding
                            for q in range(KW):
                                iw = ow * sw + q * dw - left
                                if 0 <= iw < W:
                                    acc += x_channel[ih][iw] * w_channel[p][q]
                    row.append(acc)
                plane.append(row)
            out4[b, m] = plane


def _backward(s: ConvSpec, grad_y, x, w, grad_x, grad_w, grad_b) -> None:
    """Write the three gradients of the 2-D view ``s``, loop by loop."""
    xs = x.reshape(s.x_shape).tolist()
    ws = w.reshape(s.w_shape).tolist()
    gys = grad_y.reshape(s.y_shape).tolist()
    H, W = s.in_size
    KH, KW = s.kernel_size
    (sh, sw), (dh, dw) = s.stride, s.dilation
    top, left = s.padding[0][0], s.padding[1][0]
    Ho, Wo = s.out_size
    Cg, Mg = s.channels_per_group, s.out_channels_per_group

    gx = [[[[0.0] * W for _ in range(H)] for _ in range(s.in_channels)] for _ in range(s.batch)]
    gw = [[[[0.0] * KW for _ in range(KH)] for _ in range(Cg)] for _ in range(s.out_channels)]
    gb = [0.0] * s.out_channels
    # Every product x[i] * w[k] that fed y[o] sends g = grad_y[o] back to
    # both factors: grad_x[i] += g * w[k] and grad_w[k] += g * x[i].
    for b in range(s.batch):
        for m in range(s.out_channels):
            g_first = (m // Mg) * Cg
            for oh in range(Ho):
                for ow in range(Wo):
                    g = gys[b][m][oh][ow]
                    gb[m] += g
                    for c in range(Cg):
                        for p in range(KH):
                            ih = oh * sh + p * dh - top
                            if not 0 <= ih < H:
                                continue
                            for q in range(KW):
                                iw = ow * sw + q * dw - left
                                if 0 <= iw < W:
                                    gx[b][g_first + c][ih][iw] += g * ws[m][c][p][q]
                                    gw[m][c][p][q] += g * xs[b][g_first + c][ih][iw]
    grad_x.reshape(s.x_shape)[...] = gx
    grad_w.reshape(s.w_shape)[...] = gw
    grad_b[...] = gb


def _check(spec: ConvSpec, direction: str) -> Verdict:
    """Refuse work that would take minutes, saying so."""
    work = spec.macs * (2 if direction == "backward" else 1)
    if work > MAX_MULTIPLY_ADDS:
        return (
            f"{work:.3g} multiply-adds would take minutes in pure Python (limit "
            f"{MAX_MULTIPLY_ADDS:.0e}); use the 'numpy' backend or a smaller case"
        )
    return True


def _plan_direct(spec: ConvSpec, direction: str) -> Launch:
    """Resolve the 2-D view once; the launch runs the loops."""
    s = spec.as_2d()
    if direction == "forward":
        return lambda x, w, bias, out: _forward(s, x, w, bias, out)
    return lambda grad_y, x, w, grad_x, grad_w, grad_b: _backward(s, grad_y, x, w, grad_x, grad_w, grad_b)


ALGORITHMS = {
    "direct": Algorithm(
        name="direct",
        summary="the definition as nested Python loops over lists",
        plan=_plan_direct,
        directions=("forward", "backward"),
        check=_check,
    ),
}


class PythonBackend(Backend):
    """Pure-Python loops over the definition (slow; for reading and checking)."""

    name = "python"
    device = "cpu"
    priority = 0
    algorithms = tuple(ALGORITHMS)
    description = "pure-Python nested loops: the definition, readable, slow"
    single_core = True
    #: Never a contender in measured selection or the crossover map: it is the
    #: readable definition, thousands of times slower, and one timed call of a
    #: mid-sized layer would cost seconds.
    contender = False

    def algorithm_table(self):
        """The one record, ``direct``."""
        return ALGORITHMS
