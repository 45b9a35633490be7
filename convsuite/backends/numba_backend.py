"""The ``numba`` backend: ``prange`` kernels that use every core.

numba is optional: its kernels (``_numba_kernels`` and the other
``_numba_*`` modules, which import numba) are imported only when the backend
is first asked for, so ``import convsuite`` never does. Kernels are compiled
on first use for each dtype and cached on disk (``cache=True``);
:meth:`NumbaBackend.warm_up` does that up front and returns the seconds it
took, which benchmarks report apart from kernel time.

Algorithms (``algorithm=``; ``"auto"`` follows :meth:`NumbaBackend.choose_algorithm`):

- ``direct``: AXPY tiles over output columns, accumulators in L1; chosen
  where the product is too thin for BLAS (fewer than 8 output channels per
  group, e.g. depthwise layers) or the reduction is short.
- ``gemm``: im2col tiles and one BLAS ``gemm`` per work item (``_numba_blas``); the fastest
  wherever the reduction ``C/g * KH * KW`` is long, pointwise (1x1) included,
  and the basis of the backward pass.
- ``blocked``: register-blocked direct convolution (4 output channels x a
  vector of columns in registers, a kernel row per pass); faster than
  ``direct``, slower than ``gemm`` on long reductions; left to the tuner.
- ``line1d``: one-pass 1-D kernel for single-channel signals, taps in
  registers; a long signal at memory speed.
- ``depthwise``: one input channel per group (depthwise layers, and a
  single-channel input with several filters): the input copied once into
  zero-padded phase planes, then one flat AXPY per tap over whole bands of
  rows, so short rows and strides cost no per-row overhead (forward).

Tunable parameters (``params=``, swept by ``convsuite sweep`` and the
tuner): ``direct`` and ``blocked`` take ``tile_w`` (output columns per work
item) and ``chunks_per_thread``; ``line1d`` takes ``tile`` and
``chunks_per_thread``; ``depthwise`` takes ``band_kib`` (its planes'
budget) and ``chunks_per_thread``; ``gemm`` takes ``tile_kib`` (the im2col tile budget
that sets its rows) and, backward, ``max_partials``. All are runtime
arguments of kernels compiled once per dtype: a sweep recompiles nothing.
Where a direction does not use a parameter, the constraint accepts only
its default there, so a sweep never times the same kernel twice.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from .._spec import ConvSpec
from .._threads import get_num_threads
from . import _tiles
from ._depthwise_bands import BAND, DEPTHWISE_WHY, SUMMARY, bands, depthwise_check
from ._depthwise_bands import prefer as _prefer_depthwise
from ._kernel_module import KernelModuleBackend, KernelSpec
from ._tiles import GEMM_MIN_REDUCTION, TILE_KIB_VALUES, gemm_check, prefer_gemm
from .base import Backend, Tunable

__all__ = ["NumbaBackend"]

#: Work chunks per thread: enough to balance uneven items, few enough that the
#: per-chunk accumulator allocation stays negligible (default of ``chunks_per_thread``).
CHUNKS_PER_THREAD = 16

#: Partial sums of dW per backward launch at most (fixed by the problem, not
#: by the thread count, so the reduction order, hence the bits, never change;
#: default of ``max_partials``).
MAX_PARTIALS = 32
#: Bytes all dW partials together may take.
PARTIALS_BYTES = 64 * 2**20

_DIRECT = "convsuite.backends._numba_kernels"
_GEMM = "convsuite.backends._numba_gemm"

#: Forward, one input channel and few filters: from this many outputs (batch x
#: pixels x filters) ``gemm`` beats ``depthwise`` (2-core VM, 2026-11-24: LeNet conv1
#: at batch 64, 301k outputs, 174 vs 236 us; 1 -> 8 7x7 on 2 x 86x86, 118k, 113 vs
#: 150; 1 -> 6 5x5 at batch 2, 12k, 29 vs 22 us).
LARGE_SINGLE_CHANNEL_OUTPUTS = 2**16
#: Forward, few filters per group (below ``GEMM_MIN_OUT_CHANNELS``): from this many
#: output pixels ``gemm`` beats ``blocked`` (16 x 4 -> 4 7x7 on 40x40, 18k pixels: 448
#: vs 497 us; 2 x 3 -> 2 7x7 on 56x56, 6k: 111 vs 96).
LARGE_THIN_PIXELS = 2**13
#: Forward, a product too thin or short for ``prefer_gemm``: from this many outputs
#: (pixels x filters per group) ``gemm`` still wins (see ``_thin_forward``).
THIN_GEMM_OUTPUTS = 2**15
_LINE = "convsuite.backends._numba_line"
_BLOCKED = "convsuite.backends._numba_blocked"
_DEPTHWISE = "convsuite.backends._numba_depthwise"

# --- tunable parameters ------------------------------------------------------
# Every one reaches the kernels as a runtime argument: numba compiles each
# kernel once per dtype, so a sweep over these values recompiles nothing.

_CHUNKS = Tunable(
    "chunks_per_thread",
    (1, 2, 4, 8, 16, 32, 64),
    CHUNKS_PER_THREAD,
    "work chunks per thread: more balance uneven items, fewer allocate fewer accumulators",
)
_DIRECT_TILE = Tunable(
    "tile_w",
    (32, 64, 128, 256, 512, 1024, 2048),
    256,  # _numba_kernels.TILE_W (not imported: that module imports numba)
    "output columns per work item: MB=4 accumulator rows of this length stay in L1",
)
_BLOCKED_TILE = Tunable(
    "tile_w",
    (32, 64, 128, 256, 512, 1024, 2048),
    512,  # _numba_blocked.TILE_W
    "output columns per work item: 4 accumulator rows and KH input rows of this span per chunk",
)
_LINE_TILE = Tunable(
    "tile",
    (256, 512, 1024, 2048, 4096, 8192, 16384),
    4096,  # _numba_line.TILE
    "outputs per work item: the accumulator of a long kernel (K > 4) has this length",
)
_GEMM_TILE = Tunable(
    "tile_kib",
    TILE_KIB_VALUES,
    lambda s, direction: _default_tile_kib(s.as_2d(), direction),
    "KiB budget of one im2col tile (forward: with its block of results): its output rows are as many "
    "as fit (at least one; forward also keeps >= 2 tiles per thread); by default 256, more where a "
    "tile would have fewer than 256 columns",
)
_GEMM_PARTIALS = Tunable(
    "max_partials",
    (1, 2, 4, 8, 16, 32, 64),
    MAX_PARTIALS,
    "backward: private dW partial sums at most (the parallelism of the dW reduction; "
    "also capped by a 64 MiB budget); forward ignores it",
)


def _chunks(params) -> int:
    return params["chunks_per_thread"] * get_num_threads()


def _direct_extra(s: ConvSpec, direction: str, params) -> tuple:
    return (params["tile_w"], _chunks(params)) if direction == "forward" else ()


#: Bytes of the zero-padded input rows the ``blocked`` kernel copies per chunk of work: KH rows of
#: span = (columns - 1) * stride + (KW - 1) * dilation + 1 elements, dense, skipped columns included.
#: Past this (a huge stride or dilation) the copy is mostly columns no tap reads, and its size, once an
#: int64 product in the kernel, wrapped near a width stride of 2**54 (an out-of-bounds write): such
#: cases are the other algorithms'. Ordinary layers need a few KiB to ~200 KiB (tile_w 2048, KW 11).
BLOCKED_ROWS_BYTES = 4 * 2**20


def blocked_rows_bytes(s: ConvSpec, tile_w: int) -> int:
    """Bytes of ``blocked``'s row buffer on ``s`` with ``tile_w`` columns per item (Python ints: exact)."""
    s2 = s.as_2d()
    columns = max(1, min(tile_w, s2.out_size[1]))
    span = (columns - 1) * s2.stride[1] + (s2.kernel_size[1] - 1) * s2.dilation[1] + 1
    return s2.kernel_size[0] * span * s.itemsize


def _blocked_rows_verdict(s: ConvSpec, tile_w: int) -> bool | str:
    need = blocked_rows_bytes(s, tile_w)
    if need > BLOCKED_ROWS_BYTES:
        return (
            f"'blocked' copies {need} bytes of input rows per work item at this stride and dilation "
            f"(tile_w {tile_w}; at most {BLOCKED_ROWS_BYTES}): mostly columns no tap reads"
        )
    return True


def _blocked_check(s: ConvSpec, direction: str) -> bool | str:
    return _blocked_rows_verdict(s, _BLOCKED_TILE.default)


def _blocked_constraint(s: ConvSpec, direction: str, params) -> bool | str:
    return _blocked_rows_verdict(s, params["tile_w"])


def _depthwise_extra(s: ConvSpec, direction: str, params) -> tuple:
    return (*bands(s, params["band_kib"], get_num_threads()), _chunks(params))


def _gemm_extra(s: ConvSpec, direction: str, params) -> tuple:
    Ho, Wo = s.out_size
    budget = params["tile_kib"] * 1024
    # Forward: enough work items that every thread gets work even at batch 1.
    min_tiles = -(-2 * get_num_threads() // max(1, s.batch * s.groups)) if direction == "forward" else 1
    if direction == "forward" and _is_pointwise(s) and s.out_channels_per_group > Ho * Wo:
        # A 1x1 layer with more output channels than pixels (late MobileNetV2
        # layers: 960 x 49): whole images split by output channels, with no copy
        # of the pixels. Each item's BLAS call packs the whole (Cg, pixels) input,
        # which is the smaller operand here; with more pixels than channels, row
        # tiles (a copy of their pixels, the weights packed per tile) cost less.
        # 2026-11-24, 2-core VM: 160->960 7x7 216 -> 110 us, 320->1280 7x7 520 -> 216
        # (torch 52 and 131); 144->24 56x56 by channels 511 us, by rows 346.
        Mg = s.out_channels_per_group
        mrows = max(min(Mg, _tiles.GEMM_MIN_OUT_CHANNELS), -(-Mg // min_tiles))
        return (Ho, mrows, 0)
    # Forward, a tile's BLAS result (Mg values per column) shares the budget with its
    # im2col columns, so both stay in cache until the bias pass copies the result out
    # (2026-11-24, 2-core VM, MobileNetV2 layers: 16->96 1x1 112x112 462 -> 362 us,
    # 32->16 1x1 112x112 284 -> 169, the 3->32 3x3 s2 stem 384 -> 289).
    per_column, width = _gemm_tile_shape(s, direction)
    wide = _wide_tiles(s)
    rows = _tiles.rows_per_tile(per_column, width, Ho, s.itemsize, min_tiles, budget)
    if direction == "forward":
        return (rows, s.out_channels_per_group, int(wide))
    per_partial = s.out_channels * s.reduction_length * s.itemsize
    partials = max(1, min(params["max_partials"], PARTIALS_BYTES // max(1, per_partial)))
    return (rows, partials, int(wide))


def _raised_in(exc: BaseException, module: str) -> bool:
    """Whether ``exc`` was raised inside ``module`` (a frame of its traceback runs code of that module)."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__", "").startswith(module):
            return True
        tb = tb.tb_next
    return False


def _default_tile_kib(s: ConvSpec, direction: str) -> int:
    """``gemm``'s default budget: 256 KiB, more where its tiles would be thin (``_tiles.default_tile_kib``)."""
    return _tiles.default_tile_kib(*_gemm_tile_shape(s, direction), s.out_size[0], s.itemsize)


def _gemm_tile_shape(s: ConvSpec, direction: str) -> tuple[int, int]:
    """Elements per column of a ``gemm`` tile's budget, and columns per output row."""
    Wo = s.out_size[1]
    per_column = s.reduction_length + (s.out_channels_per_group if direction == "forward" else 0)
    width = Wo + (s.kernel_size[1] - 1) * s.dilation[1] if _wide_tiles(s) else Wo
    return per_column, width


#: Widest output rows for which ``gemm`` builds wide tiles (see :func:`_wide_tiles`).
WIDE_MAX_OUT_WIDTH = 32


def _wide_tiles(s: ConvSpec) -> bool:
    """Whether ``gemm`` builds its tiles "wide" (see ``_numba_gemm.forward``): stride 1, not
    pointwise, several output rows of at most :data:`WIDE_MAX_OUT_WIDTH` columns.

    A wide tile row is one run of the padded input, where the compact layout
    copies ``Wo`` values per output row and tap: LeNet-5's conv2 (6 -> 16 5x5,
    14x14, 64 images) copied 1,500 runs of 10 values per image. Wide tiles
    cost ``(KW - 1) * dw`` unused columns per row and, when padded, a copy of
    the input; with long rows the compact runs are already cheap. Measured on
    the 2-core VM (2026-11-24, held plans, interleaved medians), wide over
    compact, forward / backward: Wo = 10 (LeNet conv2) 1.70x / 1.29x, Wo = 28
    (LeNet conv1; 3x3 C=32) 1.36x / 1.12x, 1.06x / 1.15x; Wo = 34 1.03x /
    0.98x; Wo = 56 (3x3 C=64) 1.12x / 0.85x; a 1-D signal (one row) 0.93x / 0.90x.
    """
    Ho, Wo = s.out_size
    return s.stride == (1, 1) and not _is_pointwise(s) and Ho > 1 and Wo <= WIDE_MAX_OUT_WIDTH


def _is_pointwise(s: ConvSpec) -> bool:
    """1x1, stride 1, unpadded: the input channels of an image already are the GEMM's matrix."""
    return (
        all(k == 1 for k in s.kernel_size)
        and all(v == 1 for v in s.stride)
        and all(p == (0, 0) for p in s.padding)
        and s.out_size == s.in_size
    )


def _forward_only(*tunables: Tunable):
    """A constraint: ``tunables`` shape the forward kernel only; backward takes their defaults."""

    def constraint(s: ConvSpec, direction: str, params) -> bool | str:
        if direction == "forward":
            return True
        return _only_defaults(s, direction, params, tunables, "the backward kernel")

    return constraint


def _only_defaults(s: ConvSpec, direction: str, params, tunables, where: str) -> bool | str:
    """True when every one of ``tunables`` has its default value in ``params``, else why not."""
    for t in tunables:
        default = t.default_for(s, direction)
        if params[t.name] != default:
            return f"{where} does not use {t.name!r} (only its default, {default!r}); got {params[t.name]!r}"
    return True


def _gemm_constraint(s: ConvSpec, direction: str, params) -> bool | str:
    """The forward kernel has no dW partials: only the default ``max_partials`` there."""
    if direction == "forward":
        return _only_defaults(s, direction, params, (_GEMM_PARTIALS,), "the forward kernel (no dW partials)")
    return True


def _line_check(s: ConvSpec, direction: str) -> bool | str:
    if s.channels_per_group != 1 or s.out_channels_per_group != 1:
        return "'line1d' handles one input and one output channel per group (a signal, or depthwise 1-D)"
    return True


def _thin_forward(s: ConvSpec, pixels: int, why: str) -> tuple[str, str]:
    """Forward, where ``prefer_gemm`` finds the product too thin or short: ``blocked``, ``gemm`` or ``direct``.

    2-core VM, 2026-11-24, 36 random cases (forward, float32): ``blocked`` beat
    ``direct`` on every stride-1 case with a reduction of 16 or more (1.0-2.1x),
    and beat ``gemm`` there on small outputs and with one or two filters per
    group whatever the size (64 x 16 -> 2 7x7 on 86x86: 27 vs 36 ms), or four
    over a long reduction (32 x 32 -> 4 7x7 on 56x56: 15 vs 31 ms); with a
    stride it runs scalar and ``gemm`` won but on tiny cases (4 -> 4 5x5 s2 on
    86x86: 55 vs 116 us); short reductions with many outputs went to ``gemm``
    too (8 x 6 -> 16 1x1 s2 on 56x56: 37 vs direct's 221 us).
    """
    Mg, reduction = s.out_channels_per_group, s.reduction_length
    unit_stride = all(v == 1 for v in s.stride)
    blockable = reduction >= GEMM_MIN_REDUCTION
    if blockable and unit_stride:
        if Mg <= 2 or pixels < LARGE_THIN_PIXELS or (Mg <= 4 and reduction >= 512):
            return "blocked", f"{why}; the register-blocked direct kernel"
        return "gemm", f"{why}, but {pixels} output pixels: im2col + BLAS still wins"
    if blockable and pixels * reduction >= 2**13:  # strided: blocked's scalar path loses but on tiny cases
        return "gemm", f"{why}, but strided ({s.stride}): im2col + BLAS still wins"
    if blockable:
        return "blocked", f"{why}; the register-blocked direct kernel"
    if pixels * Mg >= THIN_GEMM_OUTPUTS:
        return "gemm", f"{why}, but {pixels} output pixels x {Mg} filters: im2col + BLAS still wins"
    return "direct", why


class NumbaBackend(KernelModuleBackend):
    """Multicore JIT kernels: ``@njit(parallel=True)`` with ``prange`` over owned outputs."""

    name = "numba"
    device = "cpu"
    priority = 30
    description = "Numba prange over independent output tiles, all cores (direct, im2col+BLAS, 1-D line)"
    kernel_module = _DIRECT
    missing_hint = "numba is not installed; install it with `pip install 'convsuite[numba]'`"
    requires = "numba"

    def refuses(self) -> str | None:
        """Why numba cannot run the kernels: its compiler switched off, or a fork left it locked (None: it can)."""
        import numba

        # A user debugging their own numba code with the compiler off: the kernels would run as Python
        # (hours for a layer), and no threading layer ever starts (numba.threading_layer() raises).
        if numba.config.DISABLE_JIT:
            return "numba's compiler is switched off (NUMBA_DISABLE_JIT=1): its kernels would run as interpreted Python"
        kernels = sys.modules.get(_DIRECT)  # loaded before a fork: its handler judged this child
        return None if kernels is None else kernels.fork_refusal()

    def load_fault(self, exc: Exception) -> str | None:
        """Why the kernels cannot load when ``exc`` came out of numba's on-disk cache loader, else None.

        ``_numba_cache`` turns a broken cache into a miss; this is the last
        line, for a fault that still escapes it (a numba whose cache it cannot
        wrap): the backend is unavailable with the reason, and ``"auto"`` uses
        the others.
        """
        if not _raised_in(exc, "numba.core.caching"):
            return None
        where = os.environ.get("NUMBA_CACHE_DIR") or "the __pycache__ folders beside convsuite's numba kernels"
        return (
            f"numba could not read its on-disk cache of the kernels ({type(exc).__name__}: {exc}); "
            f"delete the cache ({where}) to rebuild it"
        )

    def _records(self):
        return (
            self.record(
                "direct",
                "AXPY tiles over output columns, MB=4 channels per input load, accumulators in L1",
                KernelSpec(_DIRECT, extra=_direct_extra),
                tunables=(_DIRECT_TILE, _CHUNKS),
                constraint=_forward_only(_DIRECT_TILE, _CHUNKS),
            ),
            self.record(
                "gemm",
                "im2col tile per (image, group, row block) times the weights by BLAS gemm (_blas_routines); "
                "1x1 without a copy; backward dW/dX from the same tile",
                KernelSpec(
                    _GEMM,
                    extra=_gemm_extra,
                    blas=True,
                    blas_address=True,
                    activation=True,
                    input_grad=True,
                    relu_mask=True,
                ),
                check=gemm_check,
                tunables=(_GEMM_TILE, _GEMM_PARTIALS),
                constraint=_gemm_constraint,
            ),
            self.record(
                "blocked",
                "register-blocked direct: 4 output channels x a vector of columns in registers, "
                "a whole kernel row (KW unrolled) per pass",
                KernelSpec(_BLOCKED, backward=None, extra=_direct_extra),
                check=_blocked_check,
                tunables=(_BLOCKED_TILE, _CHUNKS),
                constraint=_blocked_constraint,
            ),
            self.record(
                "line1d",
                "1-D single-channel signal in one pass, the taps' weights in registers",
                KernelSpec(_LINE, backward=None, extra=lambda s, d, params: (params["tile"], _chunks(params))),
                ndims=(1,),
                check=_line_check,
                tunables=(_LINE_TILE, _CHUNKS),
            ),
            self.record(
                "depthwise",
                SUMMARY,
                KernelSpec(_DEPTHWISE, backward=None, extra=_depthwise_extra, activation=True),
                check=depthwise_check,
                tunables=(BAND, _CHUNKS),
            ),
        )

    def choose_algorithm(self, spec: ConvSpec, direction: str) -> tuple[str, str]:
        """The measured rule: ``line1d`` for 1-D signals, ``depthwise`` for one input channel per group
        and few filters each (``gemm`` for a large single-channel image batch), ``gemm`` where the
        product is wide and deep enough for BLAS or the work is large, else ``blocked`` or ``direct``.

        Measured on the 2-core VM (2026-11-24, forward, medians of 9 interleaved calls on 36
        random cases) after im2col's copies got ~4x faster: LeNet conv1 (64 x 1 -> 6, 5x5, 32x32)
        gemm 174 us vs depthwise 236; the thin cases below ``prefer_gemm``'s bounds: see
        :func:`_thin_forward`.
        """
        s = spec.as_2d()
        forward = direction == "forward"
        if forward and spec.ndim == 1 and _line_check(s, direction) is True:
            return "line1d", "1-D, one channel per group: one pass at memory speed"
        pixels = s.batch * s.out_size[0] * s.out_size[1]
        if forward and _prefer_depthwise(s):
            outputs = pixels * s.out_channels
            if s.groups > 1 or outputs < LARGE_SINGLE_CHANNEL_OUTPUTS or gemm_check(s, direction) is not True:
                return "depthwise", DEPTHWISE_WHY
            return "gemm", f"one input channel, {outputs} outputs (>= {LARGE_SINGLE_CHANNEL_OUTPUTS}): BLAS wins"
        gemm, why = prefer_gemm(s, direction)
        name = "gemm" if gemm else "direct"
        if not gemm and forward:
            name, why = _thin_forward(s, pixels, why)
        if name == "gemm":
            verdict = gemm_check(s, direction)
            if verdict is not True:
                return "direct", verdict
        if name == "blocked":
            verdict = _blocked_check(s, direction)
            if verdict is not True:  # a huge stride or dilation: its row copies would be mostly skipped columns
                return "direct", verdict
        return name, why

    def _warm_up(self, dtype: np.dtype) -> None:
        """Compile (or load from numba's cache) every kernel a call in ``dtype`` can reach (checked by
        :meth:`warm_up`): each algorithm in each direction, with and without a bias, the fused
        activation, the ReLU mask and the input gradient, on the smallest case it runs. numba compiles a
        kernel per argument types, never per size, so these are the kernels every later call loads.
        """
        self.kernels().warm_up(dtype)
        for name, record in self.algorithm_table().items():
            case = _warm_case(self, name, dtype)
            if case is None:
                continue
            spec, x, w = case
            for direction in record.directions:
                for planned in _warm_variants(self, spec, name, direction):
                    _warm_run(self.plan(spec, name, planned), planned, spec, x, w)

    def _launch(self, kernel, *args) -> None:
        import numba

        numba.set_num_threads(get_num_threads())  # numba's setting is per calling thread
        run = self.__dict__.get("_run_serialised")
        if run is None:  # looked up once: importlib.import_module costs ~2 us a launch
            run = self.__dict__["_run_serialised"] = self.kernels().run_serialised
        run(kernel, *args)


def _warm_case(backend: Backend, name: str, dtype: np.dtype):
    """The smallest of a few cases (2-D dense, 2-D depthwise, a 1-D signal) that ``name`` runs: (spec, x, w)."""
    from .._validation import prepare_forward

    for x_shape, w_shape, groups in (
        ((1, 2, 6, 6), (2, 2, 3, 3), 1),
        ((1, 2, 6, 6), (2, 1, 3, 3), 2),
        ((1, 1, 9), (1, 1, 3), 1),
    ):
        ndim = len(x_shape) - 2
        x, w = np.ones(x_shape, dtype=dtype), np.ones(w_shape, dtype=dtype)
        spec = prepare_forward(f"conv{ndim}d", ndim, x, w, None, 1, 1, 1, groups).spec
        if any(backend.can_run(spec, name, d) is True for d in ("forward", "backward")):
            return spec, x, w
    return None


def _warm_variants(backend: Backend, spec: ConvSpec, name: str, direction: str) -> list[str]:
    """The planned directions a call of ``direction`` may ask of ``name``: plain, and each option it fuses."""
    if backend.can_run(spec, name, direction) is not True:
        return []
    if direction == "forward":
        return ["forward"] + [f"forward+{a}" for a in ("relu", "relu6") if backend.fuses_activation(spec, name, a)]
    variants = ["backward"]
    if backend.fuses_relu_mask(spec, name):
        variants.append("backward+relu")
    if backend.skips_input_grad(spec, name):
        variants += [v + "+weights" for v in list(variants)]
    return variants


def _warm_run(launch, planned: str, spec: ConvSpec, x: np.ndarray, w: np.ndarray) -> None:
    """One call of ``launch`` on ones (forward with and without a bias; backward with the mask it takes)."""
    dtype = x.dtype
    y = np.empty(spec.y_shape, dtype=dtype)
    if planned.startswith("forward"):
        launch(x, w, None, y)
        launch(x, w, np.zeros(spec.out_channels, dtype=dtype), y)
        return
    grads = (np.empty_like(x), np.empty_like(w), np.empty(spec.out_channels, dtype=dtype))
    mask = (np.ones(spec.y_shape, dtype=dtype),) if "+relu" in planned else ()
    launch(np.ones(spec.y_shape, dtype=dtype), x, w, *grads, *mask)
