"""What the cupy algorithm modules share: packed arguments, block geometry, the bias and chunk sums,
constant memory, and the sources of the backward utility kernels (``backward_util.cu``).

The geometry helpers here are pure Python: nothing imports cupy until a plan
is built.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np

from ...._spec import ConvSpec
from ... import _cupy_runtime as rt
from ...base import Launch, Verdict
from .._sources import SHARED_DEFINES, CudaSource

#: The folder of the algorithm modules and their ``.cu`` files.
HERE = Path(__file__).resolve().parent

#: Activation epilogue codes the forward kernels are compiled for (template
#: argument ACT; ``convsuite._epilogue.ACTIVATION_CODES``): 0 none, 1 ReLU, 2 ReLU6.
EPILOGUES = (0, 1, 2)

#: The bias gradient's partial sums, their fixed-order total, and the flipped filters of a stride-1 dX.
BACKWARD_UTIL_CU = CudaSource("backward_util.cu", HERE, ("bias_grad_partial", "chunk_sums", "flip_weights"))

#: The masked bias gradient (grad_y read through the ReLU output); chunk_sums and flip_weights read no
#: grad_y: named here so a masked backward needs no plain module.
BACKWARD_UTIL_MASKED_CU = CudaSource(
    "backward_util_masked.cu",
    HERE,
    ("bias_grad_partial_masked", "chunk_sums", "flip_weights"),
    includes=(BACKWARD_UTIL_CU,),
)

#: Every algorithm whose backward sums the bias gradient (or flips filters) launches these.
BACKWARD_UTIL = (BACKWARD_UTIL_CU, BACKWARD_UTIL_MASKED_CU)

THREADS = rt.THREADS
ARG = rt.ARG
#: x, w, bias, out: the per-call arrays of a forward kernel, in its argument order (see rt.bind).
_ARRAYS4 = (ARG, ARG, ARG, ARG)
SMEM_LIMIT = 48 * 1024  # static per-block shared memory without opt-in
CONST_BYTES = SHARED_DEFINES["CS_CONST_BYTES"]
GRID_YZ_MAX = 65535
WORKSPACE_BYTES = 512 * 2**20  # im2col columns per chunk; split-K partial sums
MAX_THREADS = 1024  # threads per block (every CUDA device since compute capability 2.0)
#: Accumulator registers (32-bit) a thread may hold: beyond this a kernel would
#: spill its accumulators to local memory (255 registers per thread, minus
#: addresses and operands) -- still correct, but never worth offering.
ACCUMULATOR_REGISTERS = 192
#: Block extents sweeps and the tuner try: FA19's tile widths (8-32) and
#: powers of two up to THREADS. The hand rule may choose any extent up to
#: THREADS (a block as wide as a 44-pixel row); that value is accepted too.
BLOCK_EXTENTS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128, 256)


# --- packed arguments and geometry --------------------------------------------


def _params(s: ConvSpec) -> tuple:
    """The CONV_PARAMS of a 2-D spec, in kernel argument order."""
    H, W = s.in_size
    KH, KW = s.kernel_size
    Ho, Wo = s.out_size
    (sh, sw), (dh, dw) = s.stride, s.dilation
    return rt.i32(
        s.batch,
        s.in_channels,
        H,
        W,
        s.out_channels,
        s.channels_per_group,
        KH,
        KW,
        Ho,
        Wo,
        sh,
        sw,
        dh,
        dw,
        s.padding[0][0],
        s.padding[1][0],
    )


def _params_1d(s: ConvSpec) -> tuple:
    """The CONV1D_PARAMS of a 1-D spec."""
    return rt.i32(
        s.batch,
        s.in_channels,
        s.in_size[0],
        s.out_channels,
        s.channels_per_group,
        s.kernel_size[0],
        s.out_size[0],
        s.stride[0],
        s.dilation[0],
        s.padding[0][0],
    )


def _span(threads: int, stride: int, kernel: int, dilation: int) -> int:
    """Inputs a row of ``threads`` consecutive outputs reads."""
    return (threads - 1) * stride + (kernel - 1) * dilation + 1


def _balanced(n: int, most: int) -> int:
    """The smallest block extent covering n in as few blocks of at most ``most`` as possible."""
    most = max(1, min(most, n))
    return math.ceil(n / math.ceil(n / most))


def _with_bias(spec: ConvSpec, launch: Callable) -> Launch:
    """A forward launch that passes a cached zero vector when there is no bias."""
    zero = []  # the device's zero vector, looked up once: the lookup (str(dtype), device id) cost ~8 us a call

    def run(x, w, bias, out):
        if bias is None:
            if not zero:
                zero.append(rt.zeros(spec.out_channels, x.dtype))
            bias = zero[0]
        launch(x, w, bias, out)

    return run


def _reduction_chunks(channels: int, values: int, most: int = GRID_YZ_MAX) -> int:
    """Chunks to cut each channel's ``values`` into for a fixed-order block reduction.

    Enough (channel, chunk) blocks to fill the device (8 per multiprocessor), each
    summing >= 4096 values, at most ``most`` (the grid's y limit, or fewer units).
    """
    return max(1, min(math.ceil(8 * rt.sm_count() / channels), math.ceil(values / 4096), most))


def _chunk_sums(dtype: str, chunks: int, n: int, masked: bool = False):
    """A packed launch ``(partial, out)``: ``out`` (n values) = ``partial`` (chunks x n, contiguous)
    summed over its chunks in order (``masked``: the kernel from the masked module, for a backward
    through a ReLU, which compiles no plain module).
    """
    suffix = "_masked" if masked else ""
    fn = rt.kernel(f"backward_util{suffix}.cu", "chunk_sums", dtype)
    return rt.bind(fn, (rt.grid_stride_blocks(n),), (THREADS,), (ARG, ARG, np.int32(chunks), np.int64(n)))


def _bias_gradient(s: ConvSpec, masked: bool = False) -> Callable:
    """``run(grad_y, grad_b, relu_output=None)``: grad_b = grad_y summed over the batch and the output
    pixels (where ``masked``, only where relu_output is not <= 0: a NaN output passes its gradient, as
    torch.threshold_backward), in two packed launches of fixed order.

    Per channel, the B x pixels values are cut into chunks, enough that a few channels still fill
    the device (CuPy's reductions give one block per output: summing straight to M values ran M
    blocks over the whole gradient, H200 1.07 ms for a 74 MB gradient with M=16); their partial sums
    are then added in order. Two packed launches replace four CuPy calls (two reductions, a reshape
    copy and an assignment), whose host time small backward problems were bound by.
    """
    cp = rt.cupy()
    suffix = "_masked" if masked else ""
    M, L = s.out_channels, math.prod(s.out_size)
    chunks = _reduction_chunks(M, s.batch * L)
    fn = rt.kernel(f"backward_util{suffix}.cu", f"bias_grad_partial{suffix}", s.dtype)
    operands = (ARG, ARG, ARG) if masked else (ARG, ARG)  # grad_y[, relu_output], partial
    partial_sums = rt.bind(fn, (M, chunks), (THREADS,), (*operands, *rt.i32(s.batch, M), np.int64(L), np.int32(chunks)))
    total = _chunk_sums(s.dtype, chunks, M, masked)

    def run(grad_y, grad_b, relu_output=None):
        partial = cp.empty(chunks * M, dtype=grad_y.dtype)  # every element written by its block
        if masked:
            partial_sums(grad_y, relu_output, partial)
        else:
            partial_sums(grad_y, partial)
        total(partial, grad_b)

    return run


# --- constant memory (const_mask, const_weights) ------------------------------------


def _check_const(s: ConvSpec, direction: str) -> Verdict:
    need = math.prod(s.w_shape) * s.itemsize
    return True if need <= CONST_BYTES else f"the weights need {need} bytes; constant memory holds {CONST_BYTES}"


def _upload_constant(filename: str, kernel: str, w) -> None:
    """Copy the weights into the constant memory of ``kernel``'s module (the copy its launches read)."""
    cp = rt.cupy()
    symbol = rt.module(filename, kernel=kernel).get_global("c_weights")
    symbol.copy_from_device_async(w.data, w.nbytes, cp.cuda.get_current_stream())
