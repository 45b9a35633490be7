"""The ``cupy`` backend: hand-written CUDA kernels run through ``cupy.RawModule``.

The kernels are the strategies of the seed reports, each a named algorithm a
user can pin with ``algorithm=`` (see :data:`ALGORITHMS`). Sources are the
``.cu`` files shipped in ``convsuite/cuda_src``, compiled by NVRTC once per
device and cached; launch geometry is computed here. cupy is imported only
when the backend is first used.

``algorithm="auto"`` picks one kernel per layer shape (the FA19 report's
"one kernel per layer" idea), first match wins:

1. 1-D with stride 1: ``blocked`` (register-blocked, bandwidth-bound).
2. depthwise (one input channel per group): ``depthwise``.
3. at most 24 output channels per group (ECE408 conv1 and conv2):
   ``register_tiled``.
4. otherwise: ``fused_gemm`` (implicit GEMM), which beat im2col + cuBLAS on
   every seed layer measured (docs/measurements/gpu-targets.md).

The backward pass runs as ``im2col_gemm`` (im2col, two cuBLAS products and a
gather-form col2im, no atomics).
"""

from __future__ import annotations

import math
import threading

import numpy as np

from .._spec import ConvSpec
from ._cuda_sources import BLOCKED_WIDTHS, REGISTER_TILES, name_expression, name_expressions, source_dir, source_text
from .base import Backend, Verdict

__all__ = ["CupyBackend", "ALGORITHMS", "ONE_D_ALGORITHMS"]

ONE_D_ALGORITHMS = ("naive", "const_mask", "tiled_halo", "tiled_cached_halo", "blocked")
TWO_D_ALGORITHMS = (
    "direct",
    "const_weights",
    "tiled_shared",
    "im2col_gemm",
    "fused_gemm",
    "register_tiled",
    "depthwise",
)
ALGORITHMS = TWO_D_ALGORITHMS + ONE_D_ALGORITHMS

THREADS = 256
SMEM_LIMIT = 48 * 1024  # static per-block shared memory without opt-in
CONST_BYTES = 65536
GRID_Y_MAX = 65535
BLOCKED_V = 9  # outputs per thread in conv1d_blocked (must match the .cu)
WORKSPACE_BYTES = 512 * 2**20  # im2col columns per chunk

_modules: dict[tuple[int, str], object] = {}
_modules_lock = threading.Lock()


def _cupy():
    import cupy

    return cupy


def _module(filename: str):
    """The compiled module of ``filename`` on the current device (built once)."""
    cp = _cupy()
    key = (cp.cuda.Device().id, filename)
    with _modules_lock:
        module = _modules.get(key)
        if module is None:
            module = cp.RawModule(
                code=source_text(filename),
                options=("-std=c++17", f"-I{source_dir()}"),
                name_expressions=name_expressions(filename),
            )
            module.compile()
            _modules[key] = module
        return module


_functions: dict[tuple, object] = {}


def _kernel(filename: str, kernel: str, dtype: str, total: int | None = None):
    """A compiled kernel; ``total`` picks the 64-bit-index instantiation when needed.

    Functions are cached: looking one up in the module costs a driver call,
    which at a few microseconds matters for small layers.
    """
    if total is not None:
        kernel += "|I"
    wide = total is not None and total >= 2**31 - 1
    key = (_cupy().cuda.Device().id, filename, kernel, dtype, wide)
    function = _functions.get(key)
    if function is None:
        function = _functions[key] = _module(filename).get_function(name_expression(kernel, dtype, wide))
    return function


_zero_bias: dict[tuple, object] = {}


def _zeros(n: int, dtype):
    """A cached zero bias: allocating and filling one per call would add a kernel launch."""
    cp = _cupy()
    key = (cp.cuda.Device().id, n, str(dtype))
    array = _zero_bias.get(key)
    if array is None:
        array = _zero_bias[key] = cp.zeros(n, dtype=dtype)
    return array


def _int32_geometry(spec: ConvSpec) -> int:
    """The largest geometry value or derived offset the kernels form in int arithmetic."""
    values = [*spec.stride, *spec.dilation]
    for n, k, d, (before, after) in zip(spec.in_size, spec.kernel_size, spec.dilation, spec.padding):
        values += [before, after, n + before + after, d * (k - 1) + 1]
    return max(values)


def _i32(*values) -> tuple:
    return tuple(np.int32(v) for v in values)


def _params(s: ConvSpec) -> tuple:
    """The CONV_PARAMS of a 2-D spec, in kernel argument order."""
    H, W = s.in_size
    KH, KW = s.kernel_size
    Ho, Wo = s.out_size
    (sh, sw), (dh, dw) = s.stride, s.dilation
    return _i32(
        s.batch, s.in_channels, H, W, s.out_channels, s.channels_per_group, KH, KW, Ho, Wo,
        sh, sw, dh, dw, s.padding[0][0], s.padding[1][0],
    )


def _params_1d(s: ConvSpec) -> tuple:
    return _i32(
        s.batch, s.in_channels, s.in_size[0], s.out_channels, s.channels_per_group, s.kernel_size[0],
        s.out_size[0], s.stride[0], s.dilation[0], s.padding[0][0],
    )


_sm_counts: dict[int, int] = {}


def _grid_stride_blocks(total: int) -> int:
    """Enough blocks to fill the device (32 per SM); the kernels loop over the rest."""
    cp = _cupy()
    device = cp.cuda.Device().id
    if device not in _sm_counts:  # the attribute query is slow: once per device
        _sm_counts[device] = cp.cuda.runtime.getDeviceProperties(device)["multiProcessorCount"]
    return max(1, min(math.ceil(total / THREADS), _sm_counts[device] * 32))


def _span(threads: int, stride: int, kernel: int, dilation: int) -> int:
    """Inputs a row of ``threads`` consecutive outputs reads."""
    return (threads - 1) * stride + (kernel - 1) * dilation + 1


REGISTER_PX = 4  # adjacent outputs per thread in conv2d_register_tiled (RT_PX in the .cu)


def _balanced(n: int, most: int) -> int:
    """The smallest block extent covering n in as few blocks of at most ``most`` as possible."""
    most = max(1, min(most, n))
    return math.ceil(n / math.ceil(n / most))


def _tile_geometry(s: ConvSpec, algorithm: str) -> dict:
    """Block shape, output tile, tile count and shared memory of a tiled 2-D kernel.

    Blocks are shaped from the output (at most 256 threads): as wide as the
    output row allows, then as tall as the remaining threads, balanced so the
    last row of tiles is not mostly idle.
    """
    Ho, Wo = s.out_size
    (sh, sw), (dh, dw), (KH, KW) = s.stride, s.dilation, s.kernel_size
    px = REGISTER_PX if algorithm == "register_tiled" else 1
    bx = _balanced(math.ceil(Wo / px), 32 if Ho > 1 else THREADS)
    by = _balanced(Ho, THREADS // bx)
    tile_w, tile_h = bx * px, by
    span_h = (tile_h - 1) * sh + (KH - 1) * dh + 1
    span_w = (tile_w - 1) * sw + (KW - 1) * dw + 1
    smem = span_h * span_w * s.itemsize
    if algorithm == "register_tiled":
        smem += _register_tile(s) * KH * KW * s.itemsize
    tiles = math.ceil(Ho / tile_h) * math.ceil(Wo / tile_w)
    return dict(block=(bx, by), tiles=tiles, smem=smem)


def _register_tile(s: ConvSpec) -> int:
    """MT for register_tiled: the smallest instantiation covering M/g (the largest beyond)."""
    return next((mt for mt in REGISTER_TILES if mt >= s.out_channels_per_group), REGISTER_TILES[-1])


def _upload_constant(filename: str, w) -> None:
    """Copy the weights into the module's constant memory (64 KiB)."""
    cp = _cupy()
    symbol = _module(filename).get_global("c_weights")
    symbol.copy_from_device_async(w.data, w.nbytes, cp.cuda.get_current_stream())


class _EventTimer:
    """CUDA events on the current stream; ``stop()`` synchronises and returns seconds."""

    __slots__ = ("_start", "_end")

    def start(self) -> None:
        cp = _cupy()
        self._start, self._end = cp.cuda.Event(), cp.cuda.Event()
        self._start.record()

    def stop(self) -> float:
        self._end.record()
        self._end.synchronize()
        return _cupy().cuda.get_elapsed_time(self._start, self._end) / 1e3


class CupyBackend(Backend):
    """CUDA kernels through CuPy: the course reports' strategies as named algorithms."""

    name = "cupy"
    device = "gpu"
    priority = 40
    algorithms = ALGORITHMS
    description = "CUDA kernels via cupy.RawModule: direct, tiled, register-tiled, implicit GEMM, im2col+cuBLAS"

    def available(self) -> Verdict:
        try:
            cp = _cupy()
        except ImportError as exc:
            return f"cupy is not installed ({exc}); install it with `pip install 'convsuite[cuda]'` (cupy-cuda13x)"
        try:
            count = cp.cuda.runtime.getDeviceCount()
        except Exception as exc:  # no driver, or a driver/toolkit mismatch
            return f"no usable CUDA device ({type(exc).__name__}: {exc})"
        if count == 0:
            return "no CUDA device found"
        return True

    def memory_limit(self) -> int | None:
        """Total memory of the current device, in bytes."""
        return int(_cupy().cuda.Device().mem_info[1])

    # --- device protocol ---------------------------------------------------

    def array_module(self):
        return _cupy()

    def owns(self, array) -> bool:
        return isinstance(array, _cupy().ndarray)

    def to_device(self, array):
        return _cupy().asarray(array)

    def to_host(self, array):
        return _cupy().asnumpy(array)

    def synchronize(self) -> None:
        _cupy().cuda.get_current_stream().synchronize()

    def timer(self):
        return _EventTimer()

    # --- which algorithm can run what ------------------------------------

    def can_run(self, spec: ConvSpec, algorithm: str, direction: str) -> Verdict:
        if direction == "backward" and algorithm != "im2col_gemm":
            return "the backward pass runs as 'im2col_gemm' (pin that algorithm, or use 'auto')"
        if max(spec.x_shape + spec.w_shape + spec.y_shape) >= 2**31:
            return "a single dimension of 2^31 or more does not fit the kernels' int dimensions"
        # The kernels take geometry as 32-bit ints (_i32) and add two such values
        # (e.g. pad + stride), so each must stay below 2^30.
        if _int32_geometry(spec) >= 2**30:
            return (
                "stride, dilation, padding or a padded/dilated extent of 2^30 or more overflows "
                "the kernels' 32-bit int geometry; the 'cython' and 'numba' backends index with 64 bits"
            )
        if algorithm in ONE_D_ALGORITHMS:
            return self._can_run_1d(spec, algorithm)
        s = spec.as_2d()
        if algorithm in ("direct", "im2col_gemm", "fused_gemm"):
            return True
        if algorithm == "const_weights":
            need = math.prod(s.w_shape) * s.itemsize
            return True if need <= CONST_BYTES else f"weights need {need} bytes; constant memory holds {CONST_BYTES}"
        if algorithm not in ("tiled_shared", "depthwise", "register_tiled"):
            return f"unknown algorithm {algorithm!r}"
        if algorithm == "depthwise" and s.channels_per_group != 1:
            return f"depthwise needs one input channel per group (C/groups = 1); got {s.channels_per_group}"
        geo = _tile_geometry(s, algorithm)
        if geo["tiles"] > GRID_Y_MAX:
            return f"{geo['tiles']} output tiles per plane exceed the grid's y limit ({GRID_Y_MAX})"
        if geo["smem"] > SMEM_LIMIT:
            return f"the input patch (and filters) need {geo['smem']} bytes of shared memory (> {SMEM_LIMIT})"
        return True

    def _can_run_1d(self, spec: ConvSpec, algorithm: str) -> Verdict:
        if spec.ndim != 1:
            return f"{algorithm!r} is a 1-D algorithm; for 2-D use one of {', '.join(TWO_D_ALGORITHMS)}"
        rows = spec.batch * spec.out_channels
        if algorithm != "naive" and algorithm != "const_mask" and rows > GRID_Y_MAX:
            return f"{rows} rows (batch x output channels) exceed the grid's y limit ({GRID_Y_MAX})"
        (s,), (d,), (k,) = spec.stride, spec.dilation, spec.kernel_size
        if algorithm == "const_mask":
            need = math.prod(spec.w_shape) * spec.itemsize
            return True if need <= CONST_BYTES else f"the mask needs {need} bytes; constant memory holds {CONST_BYTES}"
        if algorithm == "tiled_halo":
            need = _span(THREADS, s, k, d) * spec.itemsize
            return True if need <= SMEM_LIMIT else f"tile plus halo needs {need} bytes of shared memory"
        if algorithm == "tiled_cached_halo":
            need = THREADS * s * spec.itemsize
            return True if need <= SMEM_LIMIT else f"the tile needs {need} bytes of shared memory"
        if algorithm == "blocked":
            if s != 1:
                return f"'blocked' computes consecutive outputs from one window: stride 1 only; got {s}"
            need = (THREADS * BLOCKED_V + (k - 1) * d + 8 + k) * spec.itemsize
            return True if need <= SMEM_LIMIT else f"tile, halo and mask need {need} bytes of shared memory"
        return True  # naive

    def choose_algorithm(self, spec: ConvSpec, direction: str) -> tuple[str, str]:
        if direction == "backward":
            return "im2col_gemm", "the backward pass is implemented as im2col + cuBLAS + col2im"
        s = spec.as_2d()
        reduction = spec.reduction_length
        rules = []
        if spec.ndim == 1 and spec.stride == (1,):
            rules.append(("blocked", "1-D, stride 1: register-blocked kernel, bound by memory bandwidth"))
        if spec.is_depthwise:
            rules.append(("depthwise", "one input channel per group: each input plane loaded once for all its outputs"))
        if s.out_channels_per_group <= REGISTER_TILES[-1]:
            rules.append(("register_tiled", f"{s.out_channels_per_group} output channels per group fit one register tile"))
        rules.append(("fused_gemm", f"many output channels per group, reduction {reduction}: implicit GEMM"))
        for name, why in rules:
            if self.can_run(spec, name, direction) is True:
                return name, why
        return "direct", "fallback: one thread per output"

    # --- running ---------------------------------------------------------

    def forward(self, spec, x, w, bias, out, algorithm):
        cp = _cupy()
        if bias is None:
            bias = _zeros(spec.out_channels, x.dtype)
        try:
            if algorithm in ONE_D_ALGORITHMS:
                self._forward_1d(spec, x, w, bias, out, algorithm)
            elif algorithm == "im2col_gemm":
                self._forward_im2col(spec.as_2d(), x, w, bias, out)
            else:
                self._forward_2d(spec.as_2d(), x, w, bias, out, algorithm)
        except cp.cuda.memory.OutOfMemoryError as exc:
            raise MemoryError(f"GPU out of memory running {algorithm!r}: {exc}") from exc

    def _forward_1d(self, s, x, w, bias, out, algorithm):
        dtype = s.dtype
        p = _params_1d(s)
        rows = s.batch * s.out_channels
        wo = s.out_size[0]
        if algorithm in ("naive", "const_mask"):
            blocks = (_grid_stride_blocks(rows * wo),)
            total = rows * wo
            if algorithm == "naive":
                _kernel("conv1d.cu", "conv1d_naive", dtype, total)(blocks, (THREADS,), (x, w, bias, out, *p))
            else:
                _upload_constant("conv1d.cu", w)
                _kernel("conv1d.cu", "conv1d_const_mask", dtype, total)(blocks, (THREADS,), (x, bias, out, *p))
            return
        (st,), (d,), (k,) = s.stride, s.dilation, s.kernel_size
        if algorithm == "blocked":
            per_block = THREADS * BLOCKED_V
            smem = (per_block + (k - 1) * d + 8 + k) * s.itemsize  # tile, float4 slack, mask
        elif algorithm == "tiled_halo":
            per_block, smem = THREADS, _span(THREADS, st, k, d) * s.itemsize
        else:
            per_block, smem = THREADS, THREADS * st * s.itemsize
        grid = (math.ceil(wo / per_block), rows)
        name = f"conv1d_{algorithm}"
        if algorithm == "blocked":  # a width compiled in, if there is one
            name += f"@{k if d == 1 and k in BLOCKED_WIDTHS else 0}"
        _kernel("conv1d.cu", name, dtype)(grid, (THREADS,), (x, w, bias, out, *p), shared_mem=smem)

    def _forward_2d(self, s, x, w, bias, out, algorithm):
        dtype = s.dtype
        p = _params(s)
        if algorithm == "direct":
            total = math.prod(s.y_shape)
            _kernel("conv2d.cu", "conv2d_direct", dtype, total)((_grid_stride_blocks(total),), (THREADS,), (x, w, bias, out, *p))
            return
        if algorithm == "const_weights":
            total = math.prod(s.y_shape)
            _upload_constant("conv2d.cu", w)
            _kernel("conv2d.cu", "conv2d_const_weights", dtype, total)(
                (_grid_stride_blocks(total),), (THREADS,), (x, bias, out, *p)
            )
            return
        if algorithm == "fused_gemm":
            n = s.batch * math.prod(s.out_size)
            grid = (math.ceil(n / 64), math.ceil(s.out_channels_per_group / 64), s.groups)
            _kernel("implicit_gemm.cu", "conv2d_implicit_gemm", dtype)(grid, (THREADS,), (x, w, bias, out, *p))
            return
        geo = _tile_geometry(s, algorithm)
        block, tiles, smem = geo["block"], geo["tiles"], geo["smem"]
        if algorithm == "tiled_shared":
            grid = (s.batch * s.out_channels, tiles)
            _kernel("conv2d.cu", "conv2d_tiled_shared", dtype)(grid, block, (x, w, bias, out, *p), shared_mem=smem)
        elif algorithm == "depthwise":
            grid = (s.batch * s.in_channels, tiles)
            _kernel("conv2d.cu", "conv2d_depthwise", dtype)(grid, block, (x, w, bias, out, *p), shared_mem=smem)
        elif algorithm == "register_tiled":
            mt = _register_tile(s)
            grid = (s.batch * s.groups, tiles, math.ceil(s.out_channels_per_group / mt))
            _kernel("conv2d.cu", f"conv2d_register_tiled@{mt}", dtype)(grid, block, (x, w, bias, out, *p), shared_mem=smem)
        else:  # pragma: no cover - can_run rejects unknown names first
            raise ValueError(f"unknown algorithm {algorithm!r}")

    def _chunks(self, s):
        """Batch chunks whose im2col columns fit the workspace."""
        per_item = s.channels_per_group * math.prod(s.kernel_size) * math.prod(s.out_size) * s.itemsize
        step = max(1, WORKSPACE_BYTES // max(per_item, 1))
        for b0 in range(0, s.batch, step):
            yield b0, min(step, s.batch - b0)

    def _im2col(self, s, x, b0, bc, g):
        cp = _cupy()
        kd = s.channels_per_group * math.prod(s.kernel_size)
        L = math.prod(s.out_size)
        cols = cp.empty((bc, kd, L), dtype=x.dtype)
        blocks = _grid_stride_blocks(cols.size)
        _kernel("im2col.cu", "im2col", s.dtype, cols.size)((blocks,), (THREADS,), (x, cols, *_i32(b0, bc, g), *_params(s)))
        return cols

    def _forward_im2col(self, s, x, w, bias, out):
        cp = _cupy()
        G, Mg = s.groups, s.out_channels_per_group
        w_mat = w.reshape(G, Mg, -1)
        out4 = out.reshape(s.batch, G, Mg, -1)
        for b0, bc in self._chunks(s):
            for g in range(G):
                cols = self._im2col(s, x, b0, bc, g)
                out4[b0 : b0 + bc, g] = cp.matmul(w_mat[g], cols)  # cuBLAS, strict FP32 unless CUPY_TF32=1
        out.reshape(s.batch, s.out_channels, -1)[...] += bias.reshape(1, -1, 1)

    def backward(self, spec, grad_y, x, w, grad_x, grad_w, grad_b, algorithm):
        cp = _cupy()
        s = spec.as_2d()
        G, Mg = s.groups, s.out_channels_per_group
        L = math.prod(s.out_size)
        try:
            grad_b[...] = grad_y.reshape(s.batch, s.out_channels, L).sum(axis=(0, 2))
            w_mat = w.reshape(G, Mg, -1)
            grad_w_mat = cp.zeros_like(w_mat)
            gy = grad_y.reshape(s.batch, G, Mg, L)
            for b0, bc in self._chunks(s):
                for g in range(G):
                    cols = self._im2col(s, x, b0, bc, g)
                    gy_g = cp.ascontiguousarray(gy[b0 : b0 + bc, g])
                    grad_w_mat[g] += cp.matmul(gy_g, cols.transpose(0, 2, 1)).sum(axis=0)
                    grad_cols = cp.matmul(w_mat[g].T, gy_g)  # (bc, Kd, L)
                    blocks = _grid_stride_blocks(bc * s.channels_per_group * math.prod(s.in_size))
                    _kernel("im2col.cu", "col2im", s.dtype)(
                        (blocks,), (THREADS,), (grad_cols, grad_x, *_i32(b0, bc, g), *_params(s))
                    )
            grad_w.reshape(G, Mg, -1)[...] = grad_w_mat
        except cp.cuda.memory.OutOfMemoryError as exc:
            raise MemoryError(f"GPU out of memory in the backward pass: {exc}") from exc
