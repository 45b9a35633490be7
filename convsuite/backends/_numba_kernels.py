"""Numba kernels of the ``numba`` backend (imports numba; loaded lazily).

Parallelism. Every ``prange`` iteration owns a disjoint block of outputs, so
there are no races by construction and no reductions across iterations:

- forward: one iteration = (batch, group, block of MB output channels, output
  row, tile of ``tile_w`` output columns). Flattening all five makes enough
  independent work for every seed shape: large batches with few channels
  (ECE408), many channels on small images (MobileNetV2), or a single very long
  signal (the 1-D report), whose columns are split into tiles.
- backward: grad_x by (batch, input channel), grad_w by (output channel,
  input channel of its group), grad_b by output channel.

Inside an iteration the loops are those of the Cython kernel (see
``cython_src/_conv_cy.pyx``): AXPYs over contiguous output columns that LLVM
vectorises, MB output channels sharing each input load, halo taps skipped.
Two numba-specific details make LLVM vectorise them (measured: 1.6x): the
accumulator is a private array allocated once per chunk of items (so it
provably aliases neither x nor out), and inner-loop offsets are unsigned (so
numba emits no negative-index wraparound check).

Index arithmetic. Geometry arrives as Python ints below 2**62 (validation's
INDEX_LIMIT), so numba types every argument int64 on every call (a larger
int would change the signature or overflow); the widest value formed is a sum
of two such quantities (``shift + sw - 1``, ``W - 1 + shift``), below 2**63.
The unsigned offsets below are differences known to be non-negative.

Threading layer. Numba's default ``workqueue`` layer aborts the process when
two Python threads launch parallel kernels at once (joblib's threading
backend, a Dask threaded worker). Unless the user chose a layer with
``NUMBA_THREADING_LAYER``, we ask for ``threadsafe`` (OpenMP or TBB). If only
``workqueue`` can be had, calls are serialised by a lock instead: slower under
concurrency, never a crash.

Fork safety. GNU OpenMP cannot be used in a child forked from a process
that already started its thread pool: numba's ``omp`` layer then terminates
the child ("fork() called from a process already using GNU OpenMP"), and a
``multiprocessing`` pool waiting for it hangs. Importing this module starts
the layer, so any fork after the numba backend was loaded is concerned. A
handler run after fork (:mod:`convsuite._forksafe`) marks such children, and in them the
kernels run as serial builds of the same functions (``parallel=False``
turns ``prange`` into ``range``), compiled or loaded from cache on first use:
one core per child, which is what a process pool wants anyway. TBB and
workqueue are fork-safe and keep their parallel kernels. A child forked
while another parent thread was compiling inherits numba's compiler lock
held by a thread it does not have: every compile or cache load there would
wait forever, so the backend says it is unavailable in that child
(:func:`fork_refusal`) and ``"auto"`` uses the others.
"""

from __future__ import annotations

import os
import time
import types

import numba
import numpy as np
from numba import njit, prange

from .. import _forksafe, _threads
from ._numba_cache import kernel_jit

__all__ = [
    "backward",
    "fork_refusal",
    "forward",
    "run_serialised",
    "schedule_dynamically",
    "threading_layer",
    "warm_up",
]

MB = 4  # output channels per iteration: each input load feeds MB FMAs
TILE_W = 256  # default output columns per work item (the ``tile_w`` argument)
# The accumulator rows are TILE_W_MAX apart whatever ``tile_w``: a constant
# row pitch tells LLVM that the MB rows never overlap, which it needs to
# vectorise the column loop (a pitch of ``tile_w``, a runtime value, measured
# 2.7x slower on fa19 conv1). Only the first ``tile_w`` columns are touched.
TILE_W_MAX = 2048

_kernel_lock = _forksafe.lock()
_serialise = False
#: True in a child forked after GNU OpenMP started: parallel kernels would kill it.
_serial_only = False
#: True in a child forked while another thread held numba's compiler lock: nothing can compile here.
_compiler_held = False
_serial_kernels: dict = {}
#: Iterations of a ``prange`` loop a thread takes at a time (numba's chunk
#: size; 0 is its static schedule) in the kernels marked by
#: :func:`schedule_dynamically`: those whose parallel loop runs over a few
#: coarse pieces of disjoint outputs (``chunks`` per thread), so taking them
#: one at a time from a shared counter costs a few atomic operations a call,
#: and a thread that loses its core for a time slice (2 shared vCPUs, a busy
#: neighbour) no longer holds the whole call back by a fixed share: its
#: partner takes the pieces it has not started. Which thread computes a piece
#: changes no bit. Measured on the 2-core EPYC VM, 2026-11-27, 1-D N=1e7 K=31
#: on 2 threads: median 9.44 -> 9.47 ms with the cores quiet, slowest of 40
#: calls 33.4 -> 10.2 ms; with a neighbour busy half the time on one core, 90th
#: percentile 41.2 -> 15.4 ms. Not for every kernel: the gemm backward (3x3
#: C=32 B=4) ran 7.6 -> 23.8 ms under it, so it stays opt-in.
DYNAMIC_CHUNK = 1
_dynamic_kernels: set = set()
_set_chunksize = numba.set_parallel_chunksize


def _choose_threading_layer() -> None:
    """Prefer a thread-safe layer; fall back to workqueue behind a lock."""
    global _serialise
    if "NUMBA_THREADING_LAYER" not in os.environ:
        numba.config.THREADING_LAYER = "threadsafe"
    try:
        _probe(np.zeros(4))
    except ValueError:  # neither OpenMP nor TBB could be loaded
        numba.config.THREADING_LAYER = "workqueue"
        _probe(np.zeros(4))
    _serialise = numba.threading_layer() == "workqueue"
    global _set_chunksize
    from numba.np.ufunc import parallel

    # The layer's own setter (0.5 us for a set and a reset) where numba has it,
    # not the public wrapper that re-checks its argument on every call (2 us).
    _set_chunksize = getattr(parallel, "_set_parallel_chunksize", numba.set_parallel_chunksize)


@kernel_jit(parallel=True)
def _probe(a):
    """A trivial parallel kernel whose first call makes numba load its threading layer."""
    for i in prange(a.shape[0]):
        a[i] = i


def threading_layer() -> str:
    """The numba threading layer in use, and whether calls are serialised."""
    if _serial_only:
        return f"{numba.threading_layer()} unusable after fork: serial kernels in this child"
    layer = numba.threading_layer()
    return f"{layer} (calls serialised by a lock)" if _serialise else layer


def _fork_unsafe_layer() -> bool:
    """Whether the running layer is GNU OpenMP, which a forked child cannot use."""
    try:
        layer = numba.threading_layer()
    except ValueError:  # no layer started yet: the child will start its own
        return False
    if layer != "omp":
        return False
    from numba.np.ufunc import omppool

    return getattr(omppool, "openmp_vendor", "GNU") == "GNU"


def _after_fork_in_child() -> None:
    """In a forked child: use serial kernels when the inherited layer cannot run; note a held compiler lock."""
    global _serial_only, _compiler_held
    if _fork_unsafe_layer():
        _serial_only = True
    _compiler_held = _compiler_lock_held()


def _compiler_lock_held() -> bool:
    """Whether numba's global compiler lock is held by another thread (in a child: one that does not exist)."""
    from numba.core.compiler_lock import global_compiler_lock

    lock = getattr(global_compiler_lock, "_lock", None)
    if lock is None:  # a numba without it: nothing to check
        return False
    if not lock.acquire(blocking=False):
        return True
    lock.release()
    return False


def fork_refusal() -> str | None:
    """Why numba cannot be used in this forked child (None: it can)."""
    if not _compiler_held:
        return None
    return (
        "this process was forked while another thread of its parent was compiling with numba: numba's "
        "compiler lock stays held in the child, so no kernel can be compiled or loaded here; fork while no "
        "thread compiles, or start worker processes with the 'spawn' or 'forkserver' method"
    )


def _serial(kernel):
    """A ``parallel=False`` build of ``kernel`` (same source, its own cache entry)."""
    serial = _serial_kernels.get(kernel)
    if serial is None:
        source = kernel.py_func
        name = f"{source.__name__}_serial"
        clone = types.FunctionType(source.__code__, source.__globals__, name, source.__defaults__, source.__closure__)
        clone.__qualname__ = name  # numba's on-disk cache is keyed by qualified name
        clone.__doc__ = source.__doc__
        serial = _serial_kernels[kernel] = kernel_jit(**{**_FLAGS, "parallel": False})(clone)
    return serial


def run_serialised(kernel, *args) -> None:
    """Call ``kernel``, under the lock when the layer is not thread-safe.

    A kernel marked by :func:`schedule_dynamically` has its parallel loop
    scheduled dynamically (:data:`DYNAMIC_CHUNK`); the caller's own numba chunk
    size is restored afterwards. In a child forked after GNU OpenMP started,
    the serial build runs instead.
    """
    if _serial_only or _compiler_held:
        if _compiler_held:  # a launch would wait forever for the compiler: say why instead
            raise RuntimeError(fork_refusal())
        _serial(kernel)(*args)
        return
    if kernel not in _dynamic_kernels:
        _run_locked(kernel, args)
        return
    previous = _set_chunksize(DYNAMIC_CHUNK)  # the calling thread's setting, restored after
    try:
        _run_locked(kernel, args)
    finally:
        _set_chunksize(previous)


def _run_locked(kernel, args) -> None:
    if _serialise:
        with _kernel_lock:
            kernel(*args)
    else:
        kernel(*args)


def schedule_dynamically(kernel):
    """Mark ``kernel`` (a parallel njit dispatcher) for dynamic scheduling in :func:`run_serialised`
    (see :data:`DYNAMIC_CHUNK`); returns it.
    """
    _dynamic_kernels.add(kernel)
    return kernel


# fastmath "contract" only: lets LLVM fuse a*b+c into one FMA (one rounding
# instead of two, inside the tolerance bound); no reassociation.
_FLAGS = dict(parallel=True, nogil=True, error_model="numpy", fastmath={"contract"})


@kernel_jit(**_FLAGS)
def forward(x, w, bias, out, sh, sw, dh, dw, pad_top, pad_left, groups, tile_w, chunks):
    """out[b, m] = bias[m] + sum_{c,p,q} x[b, g*Cg + c, ...] * w[m, c, p, q].

    ``tile_w`` is the output columns per work item and ``chunks`` how many
    pieces the work is dealt into (a few per thread). Both are runtime
    arguments (int64 like the geometry), so changing them recompiles nothing.
    """
    B = x.shape[0]
    M, Cg = w.shape[0], w.shape[1]
    Ho, Wo = out.shape[2], out.shape[3]
    Mg = M // groups
    blocks = (Mg + MB - 1) // MB
    if tile_w < 1 or tile_w > TILE_W_MAX:
        raise ValueError("tile_w must be between 1 and TILE_W_MAX")
    tiles = (Wo + tile_w - 1) // tile_w
    items = B * groups * blocks * Ho * tiles
    # Work items are dealt out in chunks so that each chunk allocates its
    # private accumulator once: a fresh array that LLVM knows aliases neither
    # x nor out, the condition for vectorising the AXPYs.
    chunks = max(1, min(items, chunks))
    for chunk in prange(chunks):
        acc = np.empty((MB, TILE_W_MAX), dtype=out.dtype)
        for item in range(chunk * items // chunks, (chunk + 1) * items // chunks):
            t = item % tiles
            rest = item // tiles
            r = rest % Ho
            rest //= Ho
            blk = rest % blocks
            rest //= blocks
            g = rest % groups
            b = rest // groups
            m0 = g * Mg + blk * MB
            m1 = min(m0 + MB, (g + 1) * Mg)
            t0 = t * tile_w
            t1 = min(t0 + tile_w, Wo)
            _tile(x, w, bias, out, acc, b, g * Cg, m0, m1, r, t0, t1, sh, sw, dh, dw, pad_top, pad_left)


@njit(inline="always", fastmath={"contract"}, error_model="numpy")
def _tile(x, w, bias, out, acc, b, c0, m0, m1, r, t0, t1, sh, sw, dh, dw, pad_top, pad_left):
    """Outputs out[b, m0:m1, r, t0:t1], accumulated in acc (halo taps skipped).

    Generated code (``inspect_asm``, float32, numba 0.68 / LLVM on the AVX-512 EPYC VM,
    2026-11-26): the column loop is 16-wide, ``vfmadd213ps`` on zmm registers unrolled 4x,
    each FMA reading its accumulator from ``acc`` (L1) and storing it back, the weight
    broadcast in a register; the MB=4 channel block reuses one zmm input load for four
    ``vfmadd231ps``. Remainder columns run scalar (``vfmadd231ss``). One load and one store
    per FMA is the cost the register-blocked ``blocked`` algorithm removes.
    """
    H, W = x.shape[2], x.shape[3]
    Cg, KH, KW = w.shape[1], w.shape[2], w.shape[3]
    n_out = t1 - t0
    for i in range(m1 - m0):
        for k in range(n_out):
            acc[i, k] = bias[m0 + i]
    for c in range(Cg):
        for p in range(KH):
            ih = r * sh + p * dh - pad_top
            if ih < 0 or ih >= H:
                continue  # halo row: zero padding contributes nothing
            xrow = x[b, c0 + c, ih]
            for q in range(KW):
                shift = pad_left - q * dw  # input column = ow*sw - shift
                lo = max(t0, (shift + sw - 1) // sw) if shift > 0 else t0
                last = W - 1 + shift
                hi = min(t1, last // sw + 1) if last >= 0 else t0
                if hi <= lo:
                    continue
                # Unsigned offsets: numba then emits no negative-index
                # wraparound check, which would block vectorisation.
                n = hi - lo
                ua = np.uint64(lo - t0)
                if sw == 1:
                    ux = np.uint64(lo - shift)
                    if m1 - m0 == MB:
                        w0, w1, w2, w3 = w[m0, c, p, q], w[m0 + 1, c, p, q], w[m0 + 2, c, p, q], w[m0 + 3, c, p, q]
                        for k in range(n):
                            uk = np.uint64(k)
                            xv = xrow[ux + uk]
                            acc[0, ua + uk] += w0 * xv
                            acc[1, ua + uk] += w1 * xv
                            acc[2, ua + uk] += w2 * xv
                            acc[3, ua + uk] += w3 * xv
                    else:
                        for i in range(m1 - m0):
                            wv = w[m0 + i, c, p, q]
                            for k in range(n):
                                uk = np.uint64(k)
                                acc[i, ua + uk] += wv * xrow[ux + uk]
                else:
                    for i in range(m1 - m0):
                        wv = w[m0 + i, c, p, q]
                        for k in range(n):
                            acc[i, ua + np.uint64(k)] += wv * xrow[(lo + k) * sw - shift]
    for i in range(m1 - m0):
        for k in range(n_out):
            out[b, m0 + i, r, t0 + k] = acc[i, k]


@kernel_jit(**_FLAGS)
def backward(grad_y, x, w, grad_x, grad_w, grad_b, sh, sw, dh, dw, pad_top, pad_left, groups):
    """Gradients of sum(y * grad_y) with respect to x, w and bias."""
    B, C, H, W = x.shape
    M, Cg, KH, KW = w.shape
    Ho, Wo = grad_y.shape[2], grad_y.shape[3]
    Mg = M // groups

    for m in prange(M):
        total = grad_y.dtype.type(0)
        for b in range(B):
            for r in range(Ho):
                for ow in range(Wo):
                    total += grad_y[b, m, r, ow]
        grad_b[m] = total

    # grad_w[m, c]: owned by one iteration; a dot product per tap and row.
    for item in prange(M * Cg):
        m = item // Cg
        c = item % Cg
        ci = (m // Mg) * Cg + c
        for p in range(KH):
            for q in range(KW):
                shift = pad_left - q * dw
                lo = (shift + sw - 1) // sw if shift > 0 else 0
                last = W - 1 + shift
                hi = min(Wo, last // sw + 1) if last >= 0 else 0
                total = grad_y.dtype.type(0)
                for b in range(B):
                    for r in range(Ho):
                        ih = r * sh + p * dh - pad_top
                        if ih < 0 or ih >= H:
                            continue
                        for ow in range(lo, hi):
                            total += grad_y[b, m, r, ow] * x[b, ci, ih, ow * sw - shift]
                grad_w[m, c, p, q] = total

    # grad_x[b, ci]: owned by one iteration; AXPYs of gradient rows into input rows.
    for item in prange(B * C):
        b = item // C
        ci = item % C
        g = ci // Cg
        c = ci % Cg
        gx = grad_x[b, ci]
        for i in range(H):
            for j in range(W):
                gx[i, j] = 0
        for m in range(g * Mg, (g + 1) * Mg):
            for r in range(Ho):
                gyrow = grad_y[b, m, r]
                for p in range(KH):
                    ih = r * sh + p * dh - pad_top
                    if ih < 0 or ih >= H:
                        continue
                    gxrow = gx[ih]
                    for q in range(KW):
                        shift = pad_left - q * dw
                        lo = (shift + sw - 1) // sw if shift > 0 else 0
                        last = W - 1 + shift
                        hi = min(Wo, last // sw + 1) if last >= 0 else 0
                        wv = w[m, c, p, q]
                        for ow in range(lo, hi):
                            gxrow[ow * sw - shift] += wv * gyrow[ow]


def warm_up(dtype) -> float:
    """Compile (or load from numba's cache) both kernels for ``dtype``; seconds spent."""
    start = time.perf_counter()
    x = np.ones((1, 1, 3, 3), dtype=dtype)
    w = np.ones((1, 1, 2, 2), dtype=dtype)
    out = np.empty((1, 1, 2, 2), dtype=dtype)
    run_serialised(forward, x, w, np.zeros(1, dtype=dtype), out, 1, 1, 1, 1, 0, 0, 1, TILE_W, 1)
    run_serialised(
        backward, out, x, w, np.empty_like(x), np.empty_like(w), np.empty(1, dtype=dtype), 1, 1, 1, 1, 0, 0, 1
    )
    return time.perf_counter() - start


_choose_threading_layer()
# The probe started numba's thread pool: its size, fixed from now on, caps convsuite's counts
# (a larger one would make numba.set_num_threads raise on every launch).
_threads.numba_pool_started(numba.config.NUMBA_NUM_THREADS)
_forksafe.at_fork_in_child(_after_fork_in_child)
