"""im2col + cuBLAS: the input unrolled into columns (``im2col.cu``), multiplied by cuBLAS; backward two
GEMMs and a gather (col2im).
"""

from __future__ import annotations

import math

from ...._spec import ConvSpec
from ... import _cupy_runtime as rt
from ...base import Launch
from .._record import CudaAlgorithm
from .._sources import CudaSource
from ._common import BACKWARD_UTIL_CU, HERE, THREADS, WORKSPACE_BYTES, _bias_gradient, _params

IM2COL_CU = CudaSource("im2col.cu", HERE, ("im2col|I", "col2im"))


# --- im2col + cuBLAS ------------------------------------------------------------


def _chunks(s: ConvSpec) -> list[tuple[int, int]]:
    """Batch chunks whose im2col columns fit the workspace."""
    per_item = s.channels_per_group * math.prod(s.kernel_size) * math.prod(s.out_size) * s.itemsize
    step = max(1, WORKSPACE_BYTES // max(per_item, 1))
    return [(b0, min(step, s.batch - b0)) for b0 in range(0, s.batch, step)]


def _plan_im2col(spec: ConvSpec, direction: str) -> Launch:
    s = spec.as_2d()
    cp = rt.cupy()
    G, Mg, Cg = s.groups, s.out_channels_per_group, s.channels_per_group
    kd, L = Cg * math.prod(s.kernel_size), math.prod(s.out_size)
    p, chunks = _params(s), _chunks(s)
    im2col = {bc: rt.kernel("im2col.cu", "im2col", s.dtype, bc * kd * L) for _, bc in chunks}

    def columns(x, b0, bc, g):
        cols = cp.empty((bc, kd, L), dtype=x.dtype)
        im2col[bc]((rt.grid_stride_blocks(cols.size),), (THREADS,), (x, cols, *rt.i32(b0, bc, g), *p))
        return cols

    if direction == "forward":

        def forward(x, w, bias, out):
            w_mat = w.reshape(G, Mg, -1)
            out4 = out.reshape(s.batch, G, Mg, -1)
            for b0, bc in chunks:
                for g in range(G):
                    out4[b0 : b0 + bc, g] = cp.matmul(w_mat[g], columns(x, b0, bc, g))  # cuBLAS, strict FP32
            if bias is not None:
                out.reshape(s.batch, s.out_channels, -1)[...] += bias.reshape(1, -1, 1)

        return forward

    col2im = rt.kernel("im2col.cu", "col2im", s.dtype)
    bias_gradient = _bias_gradient(s)

    def backward(grad_y, x, w, grad_x, grad_w, grad_b):
        bias_gradient(grad_y, grad_b)
        w_mat = w.reshape(G, Mg, -1)
        grad_w_mat = cp.zeros_like(w_mat)
        gy = grad_y.reshape(s.batch, G, Mg, L)
        for b0, bc in chunks:
            for g in range(G):
                cols = columns(x, b0, bc, g)
                gy_g = cp.ascontiguousarray(gy[b0 : b0 + bc, g])
                grad_w_mat[g] += cp.matmul(gy_g, cols.transpose(0, 2, 1)).sum(axis=0)
                grad_cols = cp.matmul(w_mat[g].T, gy_g)  # (bc, Kd, L)
                blocks = rt.grid_stride_blocks(bc * Cg * math.prod(s.in_size))
                col2im((blocks,), (THREADS,), (grad_cols, grad_x, *rt.i32(b0, bc, g), *p))
        grad_w.reshape(G, Mg, -1)[...] = grad_w_mat

    return backward


IM2COL_GEMM = CudaAlgorithm(
    name="im2col_gemm",
    summary="im2col buffer + cuBLAS GEMM (backward: two GEMMs and a gather col2im)",
    plan=_plan_im2col,
    directions=("forward", "backward"),
    sources=(IM2COL_CU, BACKWARD_UTIL_CU),
    plan_activation=None,
    plan_relu_mask=None,
    ieee_padding=("forward", "backward"),  # zero-filled columns through cuBLAS, forward and weight gradient
    calls_cublas=True,
)

ALGORITHMS = (IM2COL_GEMM,)
