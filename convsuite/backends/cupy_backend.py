"""The ``cupy`` backend: hand-written CUDA kernels run through ``cupy.RawModule``.

Each way of computing is a named algorithm a user can pin with
``algorithm=``; each record (name, summary, directions, the cases it
declines and why, its launch plan, every flag read here) lives in its
algorithm module beside its ``.cu`` files (:mod:`.cupy.algorithms`, found by
a naming convention; the tables are derived in :mod:`.cupy._catalog`), the
CUDA plumbing (NVRTC modules built once per device with the shared ``-D``
constants, kernel handles, timing) in :mod:`._cupy_runtime`. cupy is imported
only when the backend is first used.

``algorithm="auto"`` picks one kernel per class of layer (the FA19 report's
"one kernel per layer" idea), first match wins; the rule and the measurement
behind each threshold are in :mod:`._cupy_rule` (:meth:`CupyBackend.choose_algorithm`):

forward
    1. 1-D, stride 1, at most 64 input x output channel pairs per group (one
       long signal): ``blocked`` (register-blocked, bound by bandwidth).
    2. 1x1, stride 1, no padding: ``pointwise_splitk`` (float32, from 32 input
       channels per group, at most 264 32x32 output tiles: the reduction split
       across blocks); past those tiles, with more than 32 output channels per
       group, ``tf32x3``; ``pointwise`` up to 32 input channels per group;
       ``igemm_big`` with at least 128 big block tiles of work;
       ``pointwise_gemm`` (cuBLAS) from 256 input channels; else ``fused_gemm``.
    3. depthwise (one input channel per group, groups > 1): ``depthwise``.
    4. narrow stride-1 layers whose image fits shared memory: ``tf32x3_image``.
    5. at most 24 output channels per group, a kernel larger than 1x1, and
       enough thread blocks of ``register_tiled``: ``register_tiled``.
    6. one input channel (a first layer): ``depthwise``.
    7. small stride-1 layers (at most 32 channels per group in and out, under
       128 big tiles, 25 taps or more): ``tiled_shared``.
    8. float32 with 64 output channels per group or more, and at least 128
       big block tiles of work or stride 1: ``tf32x3`` (error-compensated TF32
       on the tensor cores; it declines reductions under 32 products).
    9. float32 with at least 128 big block tiles of work: ``igemm_big`` (pipelined
       128x128 / 64x128 implicit GEMM).
    10. otherwise: ``fused_gemm`` (64x64 implicit GEMM, any dtype).

backward
    1. depthwise: ``depthwise``.
    2. a first layer (at most 3 input channels) or non-overlapping patches
       (kernel = stride), and strided 1-D layers: ``im2col_gemm`` (the weight
       gradient is one long GEMM that cuBLAS splits).
    3. float32 with at least 64 big block tiles: ``tf32x3`` (dX and dW on the
       tensor cores).
    4. then the forward's GEMM lines (8 to 10).

The tensor-core lines (``tf32x3``, ``tf32x3_image``) are of precision class
"high": under the "highest" policy the rule takes the next line that applies.

The weight-gradient ladder of the "Optimizing a CNN in CUDA" write-up
(``wgrad_atomic``, ``wgrad_shuffle``, ``wgrad_registers``, ``wgrad_padded``)
is pinnable only: it sums with atomics (not bit-reproducible), so its
records say ``deterministic=False`` and neither auto's rule nor measured
selection (autotune, ``cs.tune``) ever picks it. ``activation="relu"`` and
``"relu6"`` are fused into the epilogue of ``fused_gemm``, ``igemm_big``,
``tf32x3``, ``depthwise``, ``pointwise`` and ``pointwise_splitk``
(:meth:`CupyBackend.fuses_activation`). ``relu_output=`` (the
gradient through that ReLU) can be read at every grad_y load of the backward
kernels of ``fused_gemm``, ``igemm_big``, ``depthwise`` and the dW ladder, db
included; it was slower than one masked copy of grad_y on the measured layers,
so it runs only with :attr:`CupyBackend.relu_mask_in_kernels` set.
"""

from __future__ import annotations

import operator
import time
from collections import OrderedDict

from .. import _forksafe
from .._capture import capturing
from .._epilogue import ACTIVATION_CODES
from .._precision import admits, get_precision
from .._spec import ConvSpec
from . import _cupy_runtime as rt
from ._cupy_rule import choose
from .base import Backend, Launch, Verdict
from .cupy._catalog import (
    ALGORITHMS,
    CALLS_CUBLAS,
    FUSED_ACTIVATION,
    FUSED_RELU_MASK,
    ONE_D_ALGORITHMS,
    RECORDS,
    SOURCES,
    TWO_D_ALGORITHMS,
    plan_backward_relu,
    plan_forward_activation,
)

__all__ = ["CupyBackend", "ALGORITHMS", "ONE_D_ALGORITHMS", "TWO_D_ALGORITHMS"]

_PLAN_CACHE_SIZE = 256


def _int32_geometry(spec: ConvSpec) -> int:
    """The largest geometry value or derived offset the kernels form in int arithmetic."""
    values = [*spec.stride, *spec.dilation]
    for n, k, d, (before, after) in zip(spec.in_size, spec.kernel_size, spec.dilation, spec.padding):
        values += [before, after, n + before + after, d * (k - 1) + 1]
    return max(values)


class CupyBackend(Backend):
    """CUDA kernels through CuPy: the course reports' strategies and the layer-class kernels as named algorithms."""

    name = "cupy"
    device = "gpu"
    priority = 40
    algorithms = ALGORITHMS
    description = (
        "CUDA kernels via cupy.RawModule: direct, tiled, register-tiled, implicit GEMM, depthwise, "
        "pointwise GEMM, im2col+cuBLAS, the dW ladder (pinnable)"
    )

    def __init__(self) -> None:
        self._plans: OrderedDict[tuple, Launch] = OrderedDict()
        self._plans_lock = _forksafe.lock()
        _forksafe.at_fork_in_child(self._forget_plans)

    def _forget_plans(self) -> None:
        """In a forked child: the plans hold the parent's kernel handles and device buffers."""
        self._plans.clear()

    def algorithm_table(self):
        """The cupy algorithm records (:data:`.cupy._catalog.RECORDS`)."""
        return RECORDS

    def available(self) -> Verdict:
        """True when cupy imports and a CUDA device answers, else why not (also in a child forked after CUDA)."""
        refusal = rt.fork_refusal()
        if refusal is not None:
            return refusal
        try:
            cp = rt.cupy()
        except ImportError as exc:
            return f"cupy is not installed ({exc}); install it with `pip install 'convsuite[cuda]'` (cupy-cuda13x)"
        except Exception as exc:  # installed but refusing to load (a broken CUDA setup): other backends still run
            return f"cupy is installed but cannot be imported ({type(exc).__name__}: {exc})"
        try:
            count = cp.cuda.runtime.getDeviceCount()
        except Exception as exc:  # no driver, or a driver/toolkit mismatch
            return f"no usable CUDA device ({type(exc).__name__}: {exc})"
        if count == 0:
            return "no CUDA device found"
        rt.note_cuda_initialised()  # the device count initialised the driver: a fork from now on cannot use it
        return True

    # --- device protocol ---------------------------------------------------

    def array_module(self):
        """The cupy module."""
        return rt.cupy()

    def owns(self, array) -> bool:
        """Whether ``array`` is a cupy array."""
        return isinstance(array, rt.cupy().ndarray)

    def is_c_contiguous(self, array) -> bool:
        """CuPy's own flag: ``array.flags`` builds a Flags object per access (0.63 us against 0.09, H100 host)."""
        try:
            return array._c_contiguous
        except AttributeError:  # a CuPy without the attribute: the public flag
            return array.flags.c_contiguous

    def c_contiguity_test(self):
        """CuPy's own flag read by ``operator.attrgetter``: no Python frame per operand on a plan's call."""
        if hasattr(rt.cupy().ndarray, "_c_contiguous"):
            return operator.attrgetter("_c_contiguous")
        return self.is_c_contiguous

    def to_device(self, array):
        """``array`` copied to the current device."""
        return rt.cupy().asarray(array)

    def to_host(self, array):
        """``array`` copied to a NumPy array."""
        return rt.cupy().asnumpy(array)

    def synchronize(self) -> None:
        """Wait for the current stream."""
        rt.cupy().cuda.get_current_stream().synchronize()

    def timer(self) -> rt.EventTimer:
        """A CUDA-event timer on the current stream."""
        return rt.EventTimer()

    def memory_limit(self) -> int | None:
        """Total memory of the current device, in bytes."""
        return int(rt.cupy().cuda.Device().mem_info[1])

    def device_name(self) -> str:
        """The current GPU as the tuning cache and the records name it: model, compute capability, memory.

        The memory size alone (the fallback of ``_tuning.device_name``) cannot
        tell two 80 GB models apart, and it left the GPU records without a name.
        """
        cp = rt.cupy()
        device = cp.cuda.Device()
        name = cp.cuda.runtime.getDeviceProperties(device.id)["name"]
        name = name.decode() if isinstance(name, bytes) else name
        return f"{name} (sm_{device.compute_capability}, {device.mem_info[1]} B)"

    def warm_up(self, dtype=None) -> float:
        """Compile every CUDA module for the current device; the seconds it took (0 once built).

        ``dtype`` is checked as by every backend (:meth:`Backend.warm_up`); the
        modules of both dtypes are built whichever is named.
        """
        self.warm_up_dtypes(dtype)
        t0 = time.perf_counter()
        rt.compile_all(SOURCES)
        return time.perf_counter() - t0

    # --- which algorithm can run what ------------------------------------

    def compiled_modules(self) -> dict:
        """``{(file, overrides, kernel): seconds}`` of every module built in this process.

        A build is a compile or a disk-cache load; there is one module per
        kernel and ``-D`` configuration.
        """
        return rt.module_seconds()

    def compile_cache(self) -> dict:
        """CuPy's kernel cache: its directory and whether it reads our template modules back (CuPy >= 14.2)."""
        return rt.disk_cache()

    def can_run(self, spec: ConvSpec, algorithm: str, direction: str, params=None) -> Verdict:
        """The record's verdict (with ``params``, default the hand-chosen ones), after the limit every kernel shares.

        Raises
        ------
        ValueError
            ``params`` names a parameter ``algorithm`` does not have, or a
            value outside its allowed values.
        """
        if max(spec.x_shape + spec.w_shape + spec.y_shape) >= 2**31:
            return "a single dimension of 2^31 or more does not fit the kernels' int dimensions"
        # The kernels take geometry as 32-bit ints and add two such values
        # (e.g. pad + stride), so each must stay below 2^30.
        if _int32_geometry(spec) >= 2**30:
            return (
                "stride, dilation, padding or a padded/dilated extent of 2^30 or more overflows "
                "the kernels' 32-bit int geometry; the 'cython' and 'numba' backends index with 64 bits"
            )
        if algorithm in CALLS_CUBLAS and capturing():
            return "calls cuBLAS, which CuPy refuses during CUDA-graph stream capture"
        return super().can_run(spec, algorithm, direction, params)

    def ieee_padding(self, spec: ConvSpec, algorithm: str, direction: str) -> bool:
        """Kernels that load padding as zeros into their tiles or registers and multiply them.

        Those give IEEE results with non-finite weights (as torch), so the
        front end's fix-up, which would synchronise with the host (and break
        CUDA-graph capture), is skipped for them.
        """
        record = RECORDS.get(algorithm)
        return record is not None and record.multiplies_padding(spec, direction)

    def choose_algorithm(self, spec: ConvSpec, direction: str) -> tuple[str, str]:
        """The algorithm of the first class rule that applies, can run and is admitted by the precision policy
        (:func:`._cupy_rule.choose`), with why.
        """
        policy = get_precision()

        def admitted(spec: ConvSpec, name: str, direction: str) -> Verdict:
            precision = RECORDS[name].precision
            if not admits(policy, precision):
                return f"{name} is of precision class {precision!r}; the policy is {policy!r}"
            return self.can_run(spec, name, direction)

        return choose(spec, direction, admitted)

    # --- running ---------------------------------------------------------

    def plan(self, spec: ConvSpec, algorithm: str, direction: str, params=None) -> Launch:
        """The launch of ``algorithm`` for ``spec`` on the current device, built once and kept (LRU).

        ``params`` sets some of the algorithm's tunable parameters (the rest
        take the hand-chosen defaults); ``direction`` ``"forward+relu"`` or
        ``"forward+relu6"`` (the activation in the epilogue: :meth:`fuses_activation`)
        and ``"backward+relu"`` (grad_y read through
        the ReLU output, a seventh operand: :meth:`fuses_relu_mask`) honour
        them too. Plans are cached per resolved parameter set, so
        ``params=None`` and the defaults spelled out share one plan.

        Raises
        ------
        ValueError
            ``params`` names a parameter ``algorithm`` does not have, or a
            value outside its allowed values.
        """
        record = RECORDS[algorithm]
        resolved = record.resolve(spec, direction.partition("+")[0], params)
        key = (spec, algorithm, direction, rt.device_id(), tuple(sorted(resolved.items())))
        with self._plans_lock:
            launch = self._plans.get(key)
            if launch is not None:
                self._plans.move_to_end(key)
                return launch
        if direction.startswith("forward+"):
            launch = plan_forward_activation(spec, algorithm, direction[len("forward+") :], resolved)
        elif direction == "backward+relu":
            launch = plan_backward_relu(spec, algorithm, resolved)
        elif record.tunables:
            launch = record.plan(spec, direction, resolved)
        else:
            launch = record.plan(spec, direction)
        with self._plans_lock:
            self._plans[key] = launch
            while len(self._plans) > _PLAN_CACHE_SIZE:
                self._plans.popitem(last=False)
        return launch

    def fuses_activation(self, spec: ConvSpec, algorithm: str, activation: str) -> bool:
        """Whether ``algorithm``'s forward kernel applies ``activation`` ("relu", "relu6") in its epilogue."""
        return ACTIVATION_CODES.get(activation, 0) > 0 and algorithm in FUSED_ACTIVATION

    #: Whether ``relu_output=`` runs the masked kernels (True) or a masked copy
    #: of grad_y then the plain kernels (False, the default). The algorithms of
    #: :data:`.cupy._catalog.FUSED_RELU_MASK` can read grad_y through the
    #: ReLU output at every load, but on the cnn-train-3x3 layers (H100,
    #: 2026-11-22, docs/measurements/backward-ladder-i17-2026-11-22b.md at tag notebook-2026-11-28) that
    #: was slower than one masked copy: fused_gemm 0.74-0.78x, igemm_big
    #: 0.81-0.93x. The implicit GEMMs read each grad_y element once per
    #: filter tap (dX) and per tile column (dW), so the mask is read many times
    #: over instead of once. Set it on the backend object (then
    #: ``convsuite.clear_plan_cache()``: plans keep their choice) to run the
    #: masked kernels; the ablation runs them through ``plan_backward_relu``.
    relu_mask_in_kernels = False

    def fuses_relu_mask(self, spec: ConvSpec, algorithm: str) -> bool:
        """Whether ``relu_output=`` is applied inside ``algorithm``'s backward kernels.

        Only with :attr:`relu_mask_in_kernels` set and for
        :data:`.cupy._catalog.FUSED_RELU_MASK` (the implicit GEMMs,
        depthwise, the dW ladder): their dX and dW kernels and the db
        reduction then apply ``0 if relu_output <= 0 else grad_y`` at every
        load, so no masked copy of grad_y is written and read back. The cuBLAS
        algorithms (``pointwise_gemm``, ``im2col_gemm``) and tf32x3 cannot:
        the front end masks grad_y before them, as it does for every
        algorithm by default.
        """
        return self.relu_mask_in_kernels and algorithm in FUSED_RELU_MASK

    def forward(self, spec, x, w, bias, out, algorithm, activation=None):
        """Run the plan of ``algorithm`` (with ``activation`` fused, see :meth:`fuses_activation`);
        running out of device memory is a ``MemoryError``.
        """
        cp = rt.cupy()
        if activation is not None and not self.fuses_activation(spec, algorithm, activation):
            raise ValueError(f"{algorithm!r} does not fuse activation={activation!r}; apply it after the kernel")
        try:
            launch = self.plan(spec, algorithm, "forward" if activation is None else f"forward+{activation}")
            launch(x, w, bias, out)
        except cp.cuda.memory.OutOfMemoryError as exc:
            raise MemoryError(f"GPU out of memory running {algorithm!r}: {exc}") from exc

    def backward(self, spec, grad_y, x, w, grad_x, grad_w, grad_b, algorithm, relu_output=None):
        """Run the backward plan of ``algorithm``; running out of device memory is a ``MemoryError``.

        ``relu_output`` (grad_y's shape and dtype, contiguous): the gradients
        are taken through that ReLU, the mask applied inside the kernels
        (:meth:`fuses_relu_mask`).
        """
        if relu_output is not None and algorithm not in FUSED_RELU_MASK:
            raise ValueError(
                f"`relu_output`: {algorithm!r} does not read grad_y through a ReLU mask (those that do: "
                f"{', '.join(FUSED_RELU_MASK)}); mask grad_y before the kernel"
            )
        cp = rt.cupy()
        try:
            if relu_output is None:
                self.plan(spec, algorithm, "backward")(grad_y, x, w, grad_x, grad_w, grad_b)
            else:
                self.plan(spec, algorithm, "backward+relu")(grad_y, x, w, grad_x, grad_w, grad_b, relu_output)
        except cp.cuda.memory.OutOfMemoryError as exc:
            raise MemoryError(f"GPU out of memory in the backward pass ({algorithm!r}): {exc}") from exc
