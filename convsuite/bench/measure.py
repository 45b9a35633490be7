"""Measure the contenders of one case (backends and external anchors), side by side.

The timing taxonomy of DESIGN.md, per result: the first call (JIT compile,
module build, NVRTC compile, cache load) apart from steady state, and the
warm-up after it: each contender is called until its time per call is stable
(:func:`convsuite.bench.timing.warm_up`: later specialisations, on-disk
caches, BLAS and thread pools), with a cap, before any timed call. Then every
contender of the case is timed interleaved, in rounds of alternating blocks
(:func:`convsuite._timing.measure_side_by_side`), so a slow moment of a shared
machine hits them alike; each call is timed end to end with the backend's own
call (the kernel; CUDA events on a GPU) timed inside it, so end to end >=
kernel holds call by call; medians and ranges of both. A contender whose
rounds still trend one way is flagged (``drift``), not reported silently. A GPU
backend, like the GPU anchors, runs on device-resident inputs with the device
synchronised inside the timed call, and the copies of the inputs to the device
and of the output back are timed apart (columns that stay empty on CPU
backends). Rates (GFLOP/s, GB/s of compulsory traffic) use the end-to-end
median, the same clock for every contender, and are set against the measured
ceilings.

Correctness travels with every figure: every element of the output is
compared with the float64 reference (:mod:`convsuite.testing`), or, for a
large case, every output of its first batch items (of the leading 10^6
samples of a long signal, the reference computed for exactly that prefix, so
its edge outputs are compared too); a backward pass, whose weight gradient
sums over the whole batch, is re-run on those items (that prefix) for the
comparison.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, replace

import numpy as np

import convsuite as cs

from .._errors import BackendUnavailableError, UnsupportedCaseError
from .._instrument import record_kernel_times
from .._registry import get_backend, select
from .._timing import Contender, check_settings, measure_side_by_side, wall_timer
from .._validation import _show, prepare_forward
from ..testing import backward_tolerances, forward_tolerance, reference_backward, reference_forward
from ._arguments import one_of
from .anchors import anchor_callable, anchor_names, anchor_precision
from .ceilings import Ceilings
from .timing import SETTLE_S, openmp_waits, round_drift, warm_up
from .workloads import Case

__all__ = ["Result", "measure", "measure_case"]

#: Interleaved rounds per case (at most ``repeat``): three show a trend (:func:`round_drift`).
ROUNDS = 3
#: Pause before each block when OpenMP waits are passive: no pool spins after its call, and
#: convsuite shortens OpenBLAS's spin at import. With spinning waits, the suite's SETTLE_S
#: (numba's median doubled on 2 cores without it).
PASSIVE_SETTLE_S = 0.05

#: The error check covers the first batch items of a batched case, and the
#: first samples of a plain signal (image) longer than this (:func:`_check_slice`).
_SLICE_ITEMS = 2
_SLICE_SAMPLES = 10**6
#: What ``measure``'s ``contender`` names.
_KINDS = ("backend", "anchor")

#: Multiply-adds per call above which a slow backend runs a reduced case in a
#: comparison (a few tenths of a second for the pure-Python loops).
SLOW_BACKEND_MACS = {"python": 5_000_000}


@dataclass
class Result:
    """One contender on one case: times, rates, error, and what happened."""

    workload: str
    case: str
    direction: str
    contender: str
    kind: str  # "backend" or "anchor"
    dtype: str
    status: str = "ok"  # "ok", "skipped" (with reason) or "wrong" (failed the error check)
    reason: str = ""
    note: str = ""  # e.g. a reduced size for a slow backend
    x_shape: tuple = ()
    flops: int = 0
    bytes: int = 0
    first_call_s: float | None = None
    kernel_s: float | None = None
    kernel_range_s: tuple | None = None
    end_to_end_s: float | None = None
    end_to_end_range_s: tuple | None = None
    h2d_s: float | None = None
    d2h_s: float | None = None
    repeats: int = 0
    gflops: float | None = None
    gbs: float | None = None
    intensity: float | None = None
    frac_gemm: float | None = None
    frac_copy: float | None = None
    frac_roof: float | None = None
    max_rel_error: float | None = None
    error_ok: bool | None = None
    warmup_s: float | None = None  # calls after the first until the time per call was stable
    warmup_calls: int = 0
    warmup_stable: bool | None = None  # False: the warm-up reached its cap first
    rounds: int = 0  # interleaved rounds the timed calls were spread over
    drift: str = ""  # the rounds still trend one way: a note (convsuite.bench.timing.round_drift)
    precision: str = "highest"  # the float32 precision class (convsuite.explain(...).precision)

    def as_dict(self) -> dict:
        """The fields as a plain dict (for JSON)."""
        return asdict(self)


def _host(array):
    """A result as a NumPy array, whether NumPy, CuPy or a torch tensor."""
    if hasattr(array, "get"):
        return array.get()
    if hasattr(array, "detach"):
        return array.detach().cpu().numpy()
    return np.asarray(array)


def _transfer_times(backend, x, w, bias, out, repeat: int) -> tuple[float, float]:
    """Median seconds to copy the inputs to the backend's device, and the output back."""

    def to_device():
        arrays = [backend.to_device(a) for a in (x, w, bias) if a is not None]
        backend.synchronize()
        return arrays

    on_device = backend.to_device(_host(out[0] if isinstance(out, tuple) else out))
    backend.synchronize()
    timings = measure_side_by_side(
        {"h2d": to_device, "d2h": lambda: backend.to_host(on_device)}, repeat=repeat, warmup=0, rounds=1
    )
    return timings["h2d"].median, timings["d2h"].median


def _prepare(case: Case, x, w, bias):
    """The validated call of ``case`` on these operands (its spec, and the caller's layout)."""
    ndim = 1 if case.op == "conv1d" else 2
    return prepare_forward(case.op, ndim, x, w, bias, case.stride, case.padding, case.dilation, case.groups)


def _spec(case: Case, x, w, bias):
    return _prepare(case, x, w, bias).spec


def _call_backend(case: Case, name: str, x, w, bias, grad_y):
    if case.direction == "forward":
        fn = cs.conv1d if case.op == "conv1d" else cs.conv2d
        return lambda: fn(x, w, bias, backend=name, **case.keywords)
    fn = cs.conv1d_backward if case.op == "conv1d" else cs.conv2d_backward
    return lambda: fn(grad_y, x, w, backend=name, **case.keywords)


def _reductions(case: Case):
    """Smaller versions of a case for a backend too slow for the full size."""
    if case.batch > 1:
        yield case.with_batch(1, f"reduced to batch 1 (from {case.batch})")
    if case.op == "conv1d" and len(case.x_shape) == 1 and case.x_shape[0] > 10**4:
        yield case.with_signal_length(10**4, f"reduced to N=1e4 (from {case.x_shape[0]:.0e})")


def _fit_backend(case: Case, name: str, dtype):
    """The case, or a reduction of it, that the backend can run; or a reason."""
    try:
        backend = get_backend(name)
    except ValueError as exc:
        return None, str(exc)
    verdict = backend.available()
    if verdict is not True:
        return None, f"unavailable: {verdict}"
    reason = ""
    for candidate in (case, *_reductions(case)):
        spec = candidate.spec(dtype)
        work = spec.macs * (2 if candidate.direction == "backward" else 1)
        if work > SLOW_BACKEND_MACS.get(name, float("inf")):
            reason = f"{work:.2g} multiply-adds is more than a comparison gives the {name} backend"
            continue
        try:
            select(spec, name, "auto", candidate.direction)
            return candidate, ""
        except (UnsupportedCaseError, BackendUnavailableError) as exc:
            reason = str(exc)
    return None, reason


def _is_plain(case: Case) -> bool:
    """A signal ``(N,)`` or an image ``(H, W)`` without batch or channel axes."""
    return len(case.x_shape) == len(case.w_shape) <= 2


def _check_slice(case: Case, x, grad_y) -> tuple[Case, object, object]:
    """The sub-problem the error check computes: its case, input and output gradient (None for forward).

    Batch items are independent, so the first :data:`_SLICE_ITEMS` are a case
    of their own. A plain signal (or image) of more than
    :data:`_SLICE_SAMPLES` samples keeps its leading samples (rows), with the
    case's padding at the start and none at the cut: it keeps only the
    outputs that read no sample past the cut, so they are exactly the first
    outputs of the whole problem, both edges included, and its output
    gradient is the first rows of the whole one. Anything else (a single
    item, a short signal) is checked whole.
    """
    if case.batch > _SLICE_ITEMS:
        k = _SLICE_ITEMS
        return case.with_batch(k, case.note), x[:k], None if grad_y is None else grad_y[:k]
    if not _is_plain(case) or math.prod(case.x_shape) <= _SLICE_SAMPLES:
        return case, x, grad_y
    spec = case.spec(x.dtype)
    (before, _), kernel = spec.padding[0], spec.kernel_size[0]
    stride, extent = spec.stride[0], spec.dilation[0] * (kernel - 1) + 1
    row = math.prod(case.x_shape[1:])
    # At least one output row: the dilated kernel must fit in the kept rows and the leading padding.
    rows = max(-(-_SLICE_SAMPLES // row), extent - before)
    if rows >= case.x_shape[0]:
        return case, x, grad_y
    outputs = (rows + before - extent) // stride + 1
    padding = ((before, 0), *spec.padding[1:])
    sub = replace(case, x_shape=(rows, *case.x_shape[1:]), padding=padding)
    return sub, x[:rows], None if grad_y is None else grad_y[:outputs]


def _relative_error(got, ref, tol) -> tuple[float, bool]:
    """Largest error over the reference's largest magnitude, and whether every element is within ``tol``."""
    err = np.abs(got - ref)
    scale = max(float(np.abs(ref).max(initial=0.0)), np.finfo(np.float64).tiny)
    return float(err.max(initial=0.0) / scale), bool(np.all(err <= tol))


def _check_forward(case: Case, x, w, bias, y) -> tuple[float, bool]:
    """Compare every output of the check's sub-problem (:func:`_check_slice`) with the float64 reference."""
    if math.prod(y.shape) != math.prod(case.spec(x.dtype).y_shape):
        return float("inf"), False  # an output of the wrong size (an anchor's other convention): wrong
    sub, xs, _ = _check_slice(case, x, None)
    spec = _spec(sub, xs, w, bias)
    ref = reference_forward(spec, xs, w, bias).reshape(-1)
    tol = forward_tolerance(spec, xs, w, bias).reshape(-1)
    # The sub-problem's outputs lead the whole output in memory (first items,
    # first rows), and only they leave the device: a GPU output of a batch of
    # 10,000 is a gigabyte, and copying and widening all of it took seconds.
    got = _host(y.reshape(-1)[: ref.size]).astype(np.float64)
    return _relative_error(got, ref, tol)


def _check_backward(sub: Case, xs, gys, w, run) -> tuple[float, bool]:
    """Re-run backward on the check's sub-problem (``run(sub, xs, gys)``) and compare all three gradients.

    The weight gradient sums over the whole batch (signal), so the sub-problem
    is run on its own rather than read off the timed call.
    """
    grads = run(sub, xs, gys)
    spec = _spec(sub, xs, w, None)
    refs = reference_backward(spec, gys, xs, w)
    tols = backward_tolerances(spec, gys, xs, w)
    worst, ok = 0.0, True
    for got, ref, tol in zip(grads, refs, tols):
        if math.prod(got.shape) != ref.size:
            return float("inf"), False
        error, within = _relative_error(_host(got).astype(np.float64).reshape(ref.shape), ref, tol)
        worst, ok = max(worst, error), ok and within
    return worst, ok


def _check_request(case: Case, contender: str, kind: str, repeat: int) -> None:
    """Refuse a request that cannot be measured, naming the parameter, before anything is built or timed."""
    if not isinstance(case, Case):
        raise TypeError(f"`case` must be a convsuite.bench.workloads.Case; got {_show(case)}")
    one_of(kind, _KINDS, "`kind`")
    if kind == "anchor":
        one_of(contender, anchor_names(), "`contender` (an anchor)")
    elif not isinstance(contender, str):
        raise TypeError(f"`contender` must be a backend name (a str); got {_show(contender)}")
    check_settings(repeat=repeat)


class _Entry:
    """One contender made ready to time on a case: its call, its check, and what it recorded."""

    def __init__(self, result: Result, case: Case, operands: tuple, spec, fn, on_slice, backend=None) -> None:
        self.result, self.case, self.operands, self.spec = result, case, operands, spec
        self.fn, self.on_slice, self.backend = fn, on_slice, backend
        self.on_device = backend is not None and not backend.owns(operands[0])
        self.kernels: list[float | None] = []
        self.armed = False
        self.out = None

    def run(self) -> None:
        """One call; its kernel time is kept when the measuring core timed it (the timer armed it)."""
        with record_kernel_times() as inner:
            self.out = self.fn()
        if self.armed:
            self.kernels.append(sum(inner) if inner else None)
            self.armed = False

    def timer(self):
        """A wall-clock timer that marks the next call as a timed one."""
        self.armed = True
        return wall_timer()


def _operands(case: Case, dtype: str, cache: dict) -> tuple:
    """x, w, bias and grad_y (None for forward) of ``case``: made once per case and shared by its contenders."""
    key = repr(case)  # a Case may hold lists (a user's cases file): not hashable, but its repr is exact
    if key not in cache:
        x, w, bias, rng = case.arrays(dtype)
        grad_y = None
        if case.direction == "backward":
            prepared = _prepare(case, x, w, bias)
            # In the caller's layout, like the output of the forward call: (N_out,) for a plain signal.
            grad_y = rng.standard_normal(prepared.user_shape(prepared.spec.y_shape)).astype(dtype)
        cache[key] = (x, w, bias, grad_y)
    return cache[key]


def _backend_precision(case: Case, name: str, x, w, bias) -> str:
    """The float32 precision class of the algorithm ``auto`` picks on this backend (explain's answer)."""
    try:
        return cs.explain(x, w, bias, backend=name, direction=case.direction, **case.keywords).precision
    except (UnsupportedCaseError, BackendUnavailableError, ValueError):
        return "highest"


def _entry(case: Case, contender: str, kind: str, dtype: str, cache: dict) -> _Entry | Result:
    """The contender ready to time on ``case``, or its skipped Result (unavailable, cannot run it)."""
    result = Result(case.workload, case.label, case.direction, contender, kind, dtype, x_shape=tuple(case.x_shape))
    if kind == "backend":
        fitted, reason = _fit_backend(case, contender, dtype)
        if fitted is None:
            result.status, result.reason = "skipped", reason
            return result
        case = fitted
        result.note, result.x_shape = case.note, tuple(case.x_shape)
    x, w, bias, grad_y = _operands(case, dtype, cache)
    spec = _spec(case, x, w, bias)
    if kind == "anchor":
        fn = anchor_callable(contender, case, x, w, bias, grad_y, spec)
        if isinstance(fn, str):
            result.status, result.reason = "skipped", fn
            return result
        result.precision = anchor_precision(contender)

        def on_anchor_slice(sub, xs, gys):
            return anchor_callable(contender, sub, xs, w, None, gys, _spec(sub, xs, w, None))()

        return _Entry(result, case, (x, w, bias, grad_y), spec, fn, on_anchor_slice)
    backend = get_backend(contender)
    result.precision = _backend_precision(case, contender, x, w, bias)
    if not backend.owns(x):
        # Like the GPU anchors, start from device-resident data and finish
        # the device work inside the timed call; the copies to and from the
        # device are timed on their own (h2d_s, d2h_s).
        dev = [None if a is None else backend.to_device(a) for a in (x, w, bias, grad_y)]
        call = _call_backend(case, contender, *dev)

        def fn():
            out = call()
            backend.synchronize()
            return out

    else:
        fn = _call_backend(case, contender, x, w, bias, grad_y)

    def on_slice(sub, xs, gys):
        return _call_backend(sub, contender, xs, w, None, gys)()

    return _Entry(result, case, (x, w, bias, grad_y), spec, fn, on_slice, backend)


def _finish(entry: _Entry, timing, rounds: int, repeat: int, ceilings: Ceilings | None) -> Result:
    """Fill the entry's Result from its timing: times, drift, transfers, rates and the error check."""
    result, case, spec = entry.result, entry.case, entry.spec
    x, w, bias, grad_y = entry.operands
    e2e = list(timing.samples)
    kernel = entry.kernels[1:]  # the core's first call was timed (and armed) too: not a sample
    result.repeats, result.rounds = len(e2e), rounds
    result.end_to_end_s = statistics.median(e2e)
    result.end_to_end_range_s = (min(e2e), max(e2e))
    if kernel and all(k is not None for k in kernel):
        result.kernel_s = statistics.median(kernel)
        result.kernel_range_s = (min(kernel), max(kernel))
    result.drift = round_drift(timing, rounds) or ""
    if entry.on_device:
        result.h2d_s, result.d2h_s = _transfer_times(entry.backend, x, w, bias, entry.out, repeat)
    flops = spec.flops * (2 if case.direction == "backward" else 1)
    traffic = spec.compulsory_bytes * (2 if case.direction == "backward" else 1)
    result.flops, result.bytes = flops, traffic
    result.gflops = flops / result.end_to_end_s / 1e9
    result.gbs = traffic / result.end_to_end_s / 1e9
    result.intensity = flops / traffic
    if ceilings is not None:
        result.frac_gemm = result.gflops / ceilings.gemm_gflops
        result.frac_copy = result.gbs / ceilings.copy_gbs
        result.frac_roof = result.gflops / ceilings.roof(result.intensity)
    if case.direction == "forward":
        result.max_rel_error, result.error_ok = _check_forward(case, x, w, bias, entry.out)
    else:
        result.max_rel_error, result.error_ok = _check_backward(*_check_slice(case, x, grad_y), w, entry.on_slice)
    if not result.error_ok:
        result.status, result.reason = "wrong", "disagrees with the float64 reference beyond tolerance"
    return result


def settle_seconds() -> float:
    """The pause before each interleaved block: short when OpenMP waits are passive, else SETTLE_S."""
    return PASSIVE_SETTLE_S if openmp_waits().passive else SETTLE_S


def measure_case(
    case: Case,
    contenders: list[tuple[str, str]],
    dtype: str,
    repeat: int,
    ceilings: Ceilings | None,
    *,
    rounds: int = ROUNDS,
) -> list[Result]:
    """Measure every contender on ``case``: warmed one by one, then timed interleaved (the module's description).

    Parameters
    ----------
    case : Case
        The convolution to measure.
    contenders : list of (str, str)
        ``(name, kind)`` pairs: a backend name with ``"backend"``, or an
        anchor name among :func:`~convsuite.bench.anchors.anchor_names` with
        ``"anchor"``.
    dtype : str
        ``"float32"`` or ``"float64"``.
    repeat : int
        Timed calls per contender, a positive int.
    ceilings : Ceilings, optional
        The machine's measured rates the results are set against.
    rounds : int
        Interleaved rounds the timed calls are spread over (at most ``repeat``).

    Returns
    -------
    list of Result
        One per contender, in order: ``status`` is ``"ok"``, ``"skipped"``
        (an unknown or unavailable backend, a case an anchor has no mode
        for; ``reason`` says why) or ``"wrong"`` (the output disagrees with
        the float64 reference). ``first_call_s`` and ``warmup_s`` give the
        warm-up's cost; ``drift`` is set when the rounds still trend.

    Raises
    ------
    TypeError, ValueError
        An unknown ``kind`` or anchor, or a ``repeat`` that is not a positive
        int; before anything is timed.
    """
    for name, kind in contenders:
        _check_request(case, name, kind, repeat)
    check_settings(repeat=repeat, rounds=rounds)
    rounds = min(rounds, repeat)
    cache: dict = {}
    made = [_entry(case, name, kind, dtype, cache) for name, kind in contenders]
    ready = [e for e in made if isinstance(e, _Entry)]
    for entry in ready:
        warm = warm_up(entry.run)
        entry.result.first_call_s = warm.first_call_s
        entry.result.warmup_s, entry.result.warmup_calls, entry.result.warmup_stable = (
            warm.seconds,
            warm.calls,
            warm.stable,
        )
    timings = {}
    if ready:
        contenders_now = {str(i): Contender(e.run, e.timer) for i, e in enumerate(ready)}
        timings = measure_side_by_side(
            contenders_now, repeat=repeat, warmup=1, rounds=rounds, settle_s=settle_seconds()
        )
    for i, entry in enumerate(ready):
        _finish(entry, timings[str(i)], rounds, repeat, ceilings)
    return [e.result if isinstance(e, _Entry) else e for e in made]


def measure(case: Case, contender: str, kind: str, dtype: str, repeat: int, ceilings: Ceilings | None) -> Result:
    """Measure ``contender`` on ``case`` alone: :func:`measure_case` with one contender.

    Parameters
    ----------
    case : Case
        The convolution to measure.
    contender : str
        A backend name (``kind="backend"``) or an anchor name among
        :func:`~convsuite.bench.anchors.anchor_names` (``kind="anchor"``).
    kind : {"backend", "anchor"}
        What ``contender`` names.
    dtype : str
        ``"float32"`` or ``"float64"``.
    repeat : int
        Timed calls, a positive int.
    ceilings : Ceilings, optional
        The machine's measured rates the result is set against.

    Returns
    -------
    Result
        As :func:`measure_case` returns each.

    Raises
    ------
    TypeError, ValueError
        An unknown ``kind`` or anchor, or a ``repeat`` that is not a positive
        int; before anything is timed.
    """
    return measure_case(case, [(contender, kind)], dtype, repeat, ceilings)[0]
