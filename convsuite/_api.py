"""The public functions: conv1d / conv2d, their backward passes, plan(), tune() and explain().

Each function checks what is particular to it and hands the call to the
planner (:mod:`._planner`): in-memory operands run a cached or newly built
plan; Dask operands become lazy Dask arrays (:mod:`.distributed`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Union

import numpy as np

from . import _epilogue, _select, _tuning, distributed
from ._planner import (
    OPS,
    build,
    check_algorithm_type,
    check_params,
    ndim_of,
    resolved_params,
    run_backward,
    run_forward,
)
from ._plans import Decision, Plan
from ._precision import get_precision
from ._registry import check_algorithm_exists, home_backend, requested_backend
from ._spec import ConvSpec
from ._validation import as_real_array, check_activation, check_input_grad, prepare_forward

__all__ = [
    "Explanation",
    "conv1d",
    "conv1d_backward",
    "conv2d",
    "conv2d_backward",
    "explain",
    "plan",
    "tune",
]

#: An operand: a NumPy array, a device array a backend owns, or nested lists of numbers.
ArrayLike = Any
#: An int, or one int per spatial dimension.
IntOrTuple = Union[int, "tuple[int, ...]"]
#: An int, a tuple, per-side pairs, or 'valid' / 'same' / 'full'.
Padding = Union[int, str, "tuple[int | tuple[int, int], ...]"]


def _read_beside_dask(names: tuple[str, ...], operands: tuple) -> tuple:
    """Operands next to a Dask array: Dask ones as they are, array-likes read as the in-memory path reads them."""
    # The same reader as the in-memory path: a list of grad_y or w means what it means beside a NumPy x.
    is_dask = distributed.is_dask_array
    return tuple(a if a is None or is_dask(a) else as_real_array(a, name) for name, a in zip(names, operands))


def _lazy_forward(
    ndim: int,
    x: Any,
    w: ArrayLike,
    bias: ArrayLike | None,
    stride: IntOrTuple,
    padding: Padding,
    dilation: IntOrTuple,
    groups: int,
    backend: str | None,
    algorithm: str,
    activation: str | None = None,
) -> Any:
    """The forward of a Dask ``x`` as a lazy Dask array (``convsuite.distributed``)."""
    check_activation(activation)
    w, bias = _read_beside_dask(("w", "bias"), (w, bias))
    args = (stride, padding, dilation, groups, backend, algorithm)
    y = distributed.conv(OPS[ndim], ndim, x, w, bias, *args)
    return y if activation is None else _epilogue.apply_activation_lazy(activation, y)


def _lazy_backward(
    ndim: int,
    grad_y: ArrayLike,
    x: ArrayLike,
    w: ArrayLike,
    stride: IntOrTuple,
    padding: Padding,
    dilation: IntOrTuple,
    groups: int,
    backend: str | None,
    algorithm: str,
    relu_output: ArrayLike | None = None,
    input_grad: bool = True,
) -> tuple[Any, Any, Any]:
    """The gradients for a Dask ``x`` or ``grad_y`` as lazy Dask arrays (``convsuite.distributed``)."""
    input_grad = check_input_grad(input_grad)
    names = ("grad_y", "x", "w", "relu_output")
    grad_y, x, w, relu_output = _read_beside_dask(names, (grad_y, x, w, relu_output))
    if relu_output is not None:
        grad_y = _epilogue.mask_relu_gradient_lazy(grad_y, relu_output)
    args = (grad_y, x, w, stride, padding, dilation, groups, backend, algorithm)
    grad_x, grad_w, grad_b = distributed.conv_backward(OPS[ndim], ndim, *args)
    return (grad_x if input_grad else None), grad_w, grad_b  # lazy: dX's tasks never run


_FORWARD_DOC = """{ndim}-D convolution (deep-learning cross-correlation, as in PyTorch).

    ``y[b, m, {o}] = bias[m] + sum over c, {k} of
    x[b, g*C/groups + c, {i}] * w[m, c, {k}]`` with zeros outside the input.

    Parameters
    ----------
    x : array_like
        Input ``(B, C, {sp})``; also ``(C, {sp})`` without a batch axis, or a
        plain {plain} ``({sp})`` together with a plain kernel ``w ({ks})``.
        Array-likes: NumPy and CuPy arrays, torch tensors (CPU, or CUDA with
        CuPy), objects with ``__array__`` or (CPU) ``__dlpack__``, nested
        lists; each is read once per call. Masked arrays and tensors that
        require grad are refused (TypeError); byte order does not matter.
        A Dask array gives a lazy Dask array (see :mod:`convsuite.distributed`).
    w : array_like
        Weights ``(M, C/groups, {ks})`` (or ``({ks})`` for the plain form).
    bias : array_like, optional
        ``(M,)``, added to every output position of channel ``m``.
    stride, dilation : int or tuple of {ndim} int, default 1
        Step between outputs and between kernel taps, per dimension.
    padding : int, tuple, per-side pairs, 'valid', 'same' or 'full', default 0
        Zero padding. An int or one int per dimension pads both sides; per-side
        pairs give ``(before, after)`` per dimension. ``'same'`` gives
        ``ceil(n / stride)`` outputs with any stride (the odd pixel of padding
        goes after, as in TensorFlow); ``'full'`` pads ``dilation*(k-1)`` on
        both sides.
    groups : int, default 1
        Channel groups; must divide C and M. ``groups == C`` is depthwise.
    backend : str, optional
        Backend name (see :func:`convsuite.list_backends`) or ``'auto'``; by
        default ``use_backend``/``set_backend``/``$CONVSUITE_BACKEND``/auto.
    algorithm : str, default 'auto'
        Pin one of the backend's algorithms.
    activation : {{None, 'relu', 'relu6'}}, default None
        An epilogue applied to ``y`` (after the bias): ``'relu'`` returns
        ``relu(conv + bias)`` (``v < 0 -> 0``; NaN stays NaN, as ``torch.relu``),
        ``'relu6'`` ``min(relu(conv + bias), 6)`` (as ``torch.nn.ReLU6``).
        The cupy backend fuses it into the kernel of its implicit-GEMM,
        depthwise and pointwise algorithms; other backends and algorithms
        apply it after the kernel, in place. The gradient through the ReLU:
        ``conv{ndim}d_backward(..., relu_output=y)`` (ReLU only: for ReLU6, mask
        ``grad_y`` where ``y <= 0`` or ``y >= 6`` first, as ``nn.Conv2D`` does).

    Returns
    -------
    y : ndarray or tensor
        ``(B, M, {so})`` (or without the axes the input left out), of the
        kind of ``x``: NumPy in gives NumPy out, CuPy in gives CuPy out, a
        torch tensor gives a torch tensor on its device (zero-copy, DLPack).
        Its dtype is NumPy's promotion of the operands' (integers read as
        float64): float32 with float32 gives float32, with float64 float64;
        float16 and bfloat16 keep their dtype and are computed in float32.

    Raises
    ------
    TypeError, ValueError
        Bad input; the message names the parameter and what is accepted.
    BackendUnavailableError, UnsupportedCaseError
        An explicitly requested backend is missing or cannot run the case.
    MemoryError
        The output, operand copies and the backend's workspace would not fit
        in the memory available now (nothing allocated).

    Notes
    -----
    Non-finite values follow IEEE arithmetic on the zero-padded input, as in
    PyTorch, on every backend: a NaN or infinite weight meeting a padding
    zero gives NaN (``inf * 0``), also in the weight gradient of backward.
    """


def conv1d(
    x: ArrayLike,
    w: ArrayLike,
    bias: ArrayLike | None = None,
    *,
    stride: IntOrTuple = 1,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
    backend: str | None = None,
    algorithm: str = "auto",
    activation: str | None = None,
) -> Any:
    if distributed.is_dask_array(x):  # Dask in, Dask out (lazy); convsuite.distributed
        return _lazy_forward(1, x, w, bias, stride, padding, dilation, groups, backend, algorithm, activation)
    return run_forward(1, x, w, bias, stride, padding, dilation, groups, backend, algorithm, activation)


def conv2d(
    x: ArrayLike,
    w: ArrayLike,
    bias: ArrayLike | None = None,
    *,
    stride: IntOrTuple = 1,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
    backend: str | None = None,
    algorithm: str = "auto",
    activation: str | None = None,
) -> Any:
    if distributed.is_dask_array(x):  # Dask in, Dask out (lazy); convsuite.distributed
        return _lazy_forward(2, x, w, bias, stride, padding, dilation, groups, backend, algorithm, activation)
    return run_forward(2, x, w, bias, stride, padding, dilation, groups, backend, algorithm, activation)


conv1d.__doc__ = _FORWARD_DOC.format(
    ndim=1, o="o", k="k", i="o*stride + k*dilation - pad", sp="W", ks="K", so="W_out", plain="signal"
)
conv2d.__doc__ = _FORWARD_DOC.format(
    ndim=2,
    o="oh, ow",
    k="p, q",
    i="oh*sh + p*dh - pad_top, ow*sw + q*dw - pad_left",
    sp="H, W",
    ks="KH, KW",
    so="H_out, W_out",
    plain="image",
)

_BACKWARD_DOC = """Gradients of a {ndim}-D convolution with respect to x, w and bias.

    Given ``grad_y`` = dL/dy for ``y = conv{ndim}d(x, w, bias, ...)``, returns
    ``(grad_x, grad_w, grad_b)`` with the shapes of ``x``, ``w`` and ``(M,)``.
    ``grad_b`` is returned whether or not the forward used a bias. Keywords are
    those of :func:`conv{ndim}d`, with the same validation and dtype rules.

    ``relu_output``: for ``y = conv{ndim}d(..., activation='relu')``, pass that
    ``y`` (shape of ``grad_y``, where ``x`` lives, any real dtype) and
    ``grad_y = dL/dy``; the gradients are then taken through the ReLU:
    ``grad_y`` counts as 0 where ``y <= 0`` (as ``torch.threshold_backward``;
    a NaN in ``y`` passes its gradient) in dX, dW and db alike. ``grad_y`` is
    masked once, before the kernels; where a backend says it applies the mask
    inside its backward kernels (``fuses_relu_mask``: the ``cupy`` backend's
    ``fused_gemm``, ``igemm_big``, ``depthwise`` and the dW ladder when its
    ``relu_mask_in_kernels`` is set; off by default, measured slower) no
    masked copy is made. Both give the same gradients.

    ``input_grad=False`` returns ``(None, grad_w, grad_b)``: the gradient of
    a network's first layer, whose input needs none (as torch skips it when
    the input does not require grad). Backends that can leave dX's work out
    do (``skips_input_grad``: the ``numba`` backend's ``gemm``); the others
    compute it and drop it.
    """


def conv1d_backward(
    grad_y: ArrayLike,
    x: ArrayLike,
    w: ArrayLike,
    *,
    stride: IntOrTuple = 1,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
    backend: str | None = None,
    algorithm: str = "auto",
    relu_output: ArrayLike | None = None,
    input_grad: bool = True,
) -> tuple[Any, Any, Any]:
    if distributed.is_dask_array(x) or distributed.is_dask_array(grad_y):  # Dask in, Dask out (lazy)
        args = (stride, padding, dilation, groups, backend, algorithm, relu_output, input_grad)
        return _lazy_backward(1, grad_y, x, w, *args)
    return run_backward(1, grad_y, x, w, stride, padding, dilation, groups, backend, algorithm, relu_output, input_grad)


def conv2d_backward(
    grad_y: ArrayLike,
    x: ArrayLike,
    w: ArrayLike,
    *,
    stride: IntOrTuple = 1,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
    backend: str | None = None,
    algorithm: str = "auto",
    relu_output: ArrayLike | None = None,
    input_grad: bool = True,
) -> tuple[Any, Any, Any]:
    if distributed.is_dask_array(x) or distributed.is_dask_array(grad_y):  # Dask in, Dask out (lazy)
        args = (stride, padding, dilation, groups, backend, algorithm, relu_output, input_grad)
        return _lazy_backward(2, grad_y, x, w, *args)
    return run_backward(2, grad_y, x, w, stride, padding, dilation, groups, backend, algorithm, relu_output, input_grad)


conv1d_backward.__doc__ = _BACKWARD_DOC.format(ndim=1)
conv2d_backward.__doc__ = _BACKWARD_DOC.format(ndim=2)


def _check_direction(direction: Any) -> None:
    if direction not in ("forward", "backward"):
        raise ValueError(f"`direction` must be 'forward' or 'backward'; got {direction!r}")


def _check_backward_bias(direction: str, bias: Any) -> None:
    """A bias is a forward operand: plan() and tune() refuse one for the backward direction alike."""
    if direction == "backward" and bias is not None:
        raise ValueError("`bias` does not take part in a backward plan (grad_b is always returned)")


def _check_in_memory(operands: Mapping[str, Any], what: str = "a plan", accepted: str = " or a shape") -> None:
    """Refuse Dask operands where one in-memory problem is meant (a plan, ``explain``, ``tune``).

    Dask calls are planned per block; reading a Dask operand here would compute the whole array.
    """
    for name, value in operands.items():
        if distributed.is_dask_array(value):
            raise TypeError(
                f"`{name}` must be an in-memory array (NumPy, or a device array a backend owns){accepted} "
                f"for {what}; got a Dask array. Pass Dask arrays to cs.conv1d/cs.conv2d (or their backward "
                "passes), which return lazy Dask arrays and plan each block"
            )


@dataclass(frozen=True)
class Explanation:
    """What :func:`explain` found: the backend and algorithm a call would use.

    Attributes
    ----------
    op, direction : str
        ``"conv1d"``/``"conv2d"`` and ``"forward"``/``"backward"``.
    backend, algorithm : str
        The choice.
    source : str
        Which setting asked for the backend (argument, use_backend, ...).
    decided_by : str
        ``"measurement"`` (autotune or :func:`tune`), ``"rule"`` (the fitted
        default rule, or a named backend's own algorithm rule), ``"priority"``
        (no fitted data for this device) or ``"request"`` (all pinned).
    reason : str
        Why this backend and algorithm.
    considered : tuple of (str, str)
        Backends skipped, with why.
    measured : tuple
        For a measured choice, ``(backend, algorithm, median_s, spread, status)``
        of every candidate, the chosen first, then fastest first; empty otherwise.
    spec : ConvSpec
        The normalised problem (shapes, padding, output size, dtype).
    params : dict
        The value of each of the algorithm's tunable parameters the call
        would use (empty when it has none).
    params_source : str
        ``"measured"`` (a tuning search chose them), ``"defaults"`` (the
        hand-chosen values) or ``""`` (no tunables).
    param_table : tuple
        For measured parameters, ``("backend/algorithm", params, median_s, spread,
        status)`` of every configuration searched, fastest first.
    precision : str
        The float32 precision class of the chosen algorithm (``"highest"``,
        ``"high"``, ``"medium"``; see :func:`convsuite.set_precision`).
    policy : str
        The precision policy in force, which bounded what ``auto`` could choose.
    """

    op: str
    direction: str
    backend: str
    algorithm: str
    source: str
    decided_by: str
    reason: str
    considered: tuple[tuple[str, str], ...]
    measured: tuple[tuple[str, str, float | None, float | None, str], ...]
    spec: ConvSpec
    params: dict = field(default_factory=dict)
    params_source: str = ""
    param_table: tuple = ()
    precision: str = "highest"
    policy: str = "highest"

    def __str__(self) -> str:
        s = self.spec
        why, *more = _clauses(self.reason)
        close = [c for c in more if c.startswith("close: ")]
        more = [c for c in more if not c.startswith("close: ")]
        if not close and self.measured:
            close = _measured_close(self.measured)
        lines = [
            f"runs: backend {self.backend!r}, algorithm {self.algorithm!r}, for this {self.op} {self.direction} "
            f"(decided by {_DECIDED_BY.get(self.decided_by, self.decided_by)})",
            f"why: {why}",
            *close,
            f"problem: x {s.x_shape} * w {s.w_shape} -> y {s.y_shape} [{s.dtype}, stride {s.stride}, "
            f"padding {s.padding}, dilation {s.dilation}, groups {s.groups}]",
            *more,
        ]
        if s.dtype == "float32":
            lines.append(f"precision: {self.precision} (the algorithm's class; the policy in force is {self.policy!r})")
        best = min((row[2] for row in self.measured if row[2] is not None), default=None)  # ratios to the fastest
        for backend, algorithm, median, spread, status in self.measured:
            if median is None or best is None:  # best is None only when no row has a median
                lines.append(f"  measured {backend}/{algorithm}: {status}")
            else:
                lines.append(
                    f"  measured {backend}/{algorithm}: {median * 1e6:.1f} us (x{median / best:.2f}, "
                    f"spread {spread:.0%}) {status}"
                )
        if self.params:
            values = ", ".join(f"{k}={v}" for k, v in self.params.items())
            lines.append(f"parameters ({self.params_source}): {values}")
        lines += _tuning.format_param_table(self.param_table)
        lines += [f"skipped {name}: {why}" for name, why in self.considered]
        return "\n".join(lines)


#: How each way of deciding reads on the first line of an explanation.
_DECIDED_BY = {
    "rule": "a rule, without timing anything",
    "measurement": "timing the candidates on this machine",
    "priority": "the backends' priority order: no measurements for this device",
    "request": "your request",
}


def _clauses(reason: str) -> list[str]:
    """``reason`` cut at each ``"; "`` outside parentheses: the first clause says why, the others add detail."""
    clauses, depth, start = [], 0, 0
    for i, char in enumerate(reason):
        depth += (char == "(") - (char == ")")
        if depth == 0 and reason.startswith("; ", i):
            clauses.append(reason[start:i])
            start = i + 2
    return clauses + [reason[start:]]


def _measured_close(measured: tuple) -> list[str]:
    """The ``close:`` line of a measured choice: up to three other candidates, fastest first."""
    best = min((row[2] for row in measured if row[2] is not None), default=None)
    others = [(f"{b}/{a}", median / best) for b, a, median, _, _ in measured[1:] if median is not None][:3]
    if not others:
        return []
    (label, ratio), rest = others[0], others[1:]
    return [f"close: {label} (x{ratio:.2f} the fastest's time)" + "".join(f", {lbl} (x{r:.2f})" for lbl, r in rest)]


def explain(
    x: ArrayLike,
    w: ArrayLike,
    bias: ArrayLike | None = None,
    *,
    stride: IntOrTuple = 1,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
    backend: str | None = None,
    algorithm: str = "auto",
    direction: str = "forward",
) -> Explanation:
    """Say which backend and algorithm a call would use, and why; run nothing.

    Takes the arguments of :func:`conv1d`/:func:`conv2d` (the operation is told
    by the rank of ``w``: 1 or 3 for 1-D, 2 or 4 for 2-D). ``direction`` is
    ``"forward"`` or ``"backward"``. Under autotune, a problem already
    measured reports the measurement and its table; one not yet measured
    reports the rule (its first call will measure).

    Returns
    -------
    Explanation
        Printable; its fields give the choice, how it was decided and the skipped backends.
    """
    check_algorithm_type(algorithm)
    _check_direction(direction)
    _check_in_memory({"x": x, "w": w, "bias": bias}, "explain", accepted="")
    ndim = ndim_of(w)
    op = OPS[ndim]
    call = prepare_forward(op, ndim, x, w, bias, stride, padding, dilation, groups, convert=False)
    name, source = requested_backend(backend)
    home = home_backend(call.x)
    chosen, algo, decision = _select.choose(call.spec, direction, name, source, algorithm, home, measure=False)
    params = resolved_params(chosen, call.spec, algo, direction, dict(decision.params) or None)
    record = (chosen.algorithm_table() or {}).get(algo)
    explanation = _explanation(op, direction, chosen.name, algo, decision, call.spec, params)
    precision = "highest" if record is None else record.precision
    return replace(explanation, precision=precision, policy=get_precision())


def _explanation(
    op: str,
    direction: str,
    backend: str,
    algorithm: str,
    decision: Decision,
    spec: ConvSpec,
    params: dict | None = None,
) -> Explanation:
    params = params or {}
    if not params:
        source = ""
    elif not decision.params:
        source = "defaults"
    else:
        source = "measured" if decision.decided_by == "measurement" else "given"
    return Explanation(
        params=params,
        params_source=source,
        param_table=decision.param_table,
        op=op,
        direction=direction,
        backend=backend,
        algorithm=algorithm,
        source=decision.source,
        decided_by=decision.decided_by,
        reason=decision.reason,
        considered=decision.considered,
        measured=decision.measured,
        spec=spec,
    )


def _operands_for(
    x_or_shape: ArrayLike | tuple[int, ...],
    w_or_shape: ArrayLike | tuple[int, ...],
    bias: ArrayLike | tuple[int, ...] | None,
    dtype: np.dtype,
) -> tuple[Any, Any, Any]:
    """Arrays from arrays, or zero-strided stand-ins from shapes (nothing allocated)."""

    def stand_in(value: ArrayLike | tuple[int, ...], name: str) -> Any:
        if isinstance(value, tuple):
            if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) for n in value):
                raise TypeError(f"`{name}` must be an array or a shape (tuple of ints); got {value!r}")
            if any(n < 0 for n in value):
                raise ValueError(f"`{name}`'s shape must have entries >= 0; got {value!r}")
            # NumPy's own bound on any array (a stand-in allocates nothing, but its size must be representable;
            # each entry too, where another is 0)
            limit = np.iinfo(np.intp).max
            if any(n > limit for n in value) or math.prod(int(n) for n in value) * dtype.itemsize > limit:
                raise ValueError(f"`{name}`'s shape {value!r} holds more bytes than any array can address")
            return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), tuple(value), (0,) * len(value))
        return value

    b = stand_in(bias, "bias") if bias is not None else None
    return stand_in(x_or_shape, "x"), stand_in(w_or_shape, "w"), b


def plan(
    x: ArrayLike | tuple[int, ...],
    w: ArrayLike | tuple[int, ...],
    bias: ArrayLike | tuple[int, ...] | None = None,
    *,
    stride: IntOrTuple = 1,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
    backend: str | None = None,
    algorithm: str = "auto",
    direction: str = "forward",
    dtype: Any = "float32",
    params: Mapping[str, Any] | None = None,
) -> Plan:
    """Validate and choose once; return a callable that runs the problem.

    Parameters
    ----------
    x, w : array or tuple of int
        The operands, or their shapes (then ``dtype`` gives their dtype and
        the plan takes NumPy arrays). The operation is told by the rank of ``w``.
        A plan runs in-memory arrays: a Dask array is refused (TypeError);
        :func:`conv1d`/:func:`conv2d` and their backward passes take Dask
        arrays and return lazy ones, planning each block.
    bias : array, tuple of int or None
        The bias (or its shape ``(M,)``); forward only.
    stride, padding, dilation, groups, backend, algorithm
        As for :func:`conv2d`; resolved now, including the backend settings
        in force (later ``use_backend``/``set_backend`` changes do not affect
        the plan).
    direction : {'forward', 'backward'}
        What the plan computes.
    dtype : {'float32', 'float64'}
        dtype of operands given by shape.
    params : mapping, optional
        Tunable parameters of the named algorithm (see
        ``get_backend(name).tunables(algorithm)``); those not given take
        their defaults. Needs a named backend and algorithm. An unknown name
        or a value outside the parameter's list is a ValueError; a set the
        algorithm cannot run on this case is an UnsupportedCaseError with
        the reason. ``plan.params`` shows every value used.

    Returns
    -------
    Plan
        ``plan(x, w, bias=None, out=None) -> y`` (forward; ``out``: a buffer
        to write the result into) or ``plan(grad_y, x, w) -> (grad_x, grad_w,
        grad_b)`` (backward); it checks that operands match its shapes, dtype
        and array type. ``plan.spec``, ``plan.backend``,
        ``plan.algorithm`` and ``plan.decision`` say what it runs and why.
        A plan pickles (and deep-copies) as the recipe it was built from and
        is planned again when loaded, on the same backend, algorithm and
        parameters (:class:`~convsuite._plans.PlanRecipe`).
    """
    _check_direction(direction)
    _check_backward_bias(direction, bias)
    _check_in_memory({"x": x, "w": w, "bias": bias})
    received = dtype
    try:
        dtype = None if dtype is None else np.dtype(dtype)  # np.dtype(None) would be float64
    except TypeError:
        dtype = None
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"`dtype` must be 'float32' or 'float64'; got {received!r}")
    xs, ws, bs = _operands_for(x, w, bias, dtype)
    ndim = ndim_of(w, is_shape=True) if isinstance(w, tuple) else ndim_of(ws)
    name, source = requested_backend(backend)
    check_algorithm_type(algorithm)
    params = check_params(params, name, algorithm)
    geometry = (stride, padding, dilation, groups, name, source, algorithm)
    if direction == "forward":
        return build(ndim, direction, xs, ws, bs, *geometry, params=params)
    call = prepare_forward(OPS[ndim], ndim, xs, ws, None, stride, padding, dilation, groups, convert=False)
    # A zero-strided grad_y stand-in in the array library of x (a CuPy x needs a CuPy grad_y).
    home = home_backend(xs)
    xp = np if home is None else home.array_module()
    gy = xp.broadcast_to(xp.zeros((), xs.dtype), call.user_shape(call.spec.y_shape))
    return build(ndim, direction, gy, xs, ws, *geometry, params=params)


def tune(
    x: ArrayLike,
    w: ArrayLike,
    bias: ArrayLike | None = None,
    *,
    stride: IntOrTuple = 1,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
    backend: str | None = None,
    algorithm: str = "auto",
    direction: str = "forward",
    budget_s: float = _tuning.TUNE_BUDGET_S,
) -> _tuning.TuneResult:
    """Time every backend and algorithm that can run this problem now, and remember the fastest.

    Candidates are those of the request (every backend on the data's device
    for ``backend="auto"``, or the algorithms of a named backend), measured
    with warm-up, interleaved repeats and early abandon of far slower ones on
    random operands of the problem's shapes. Then the tunable parameters of
    the fastest algorithms are searched within ``budget_s`` seconds
    (exhaustively when every valid configuration fits, otherwise random
    sampling plus local search; see :mod:`convsuite._param_search`). The
    winner and its parameters are stored in the persistent tuning cache and
    used by later calls under autotune.

    Parameters
    ----------
    budget_s : float, default 10
        Seconds the parameter search may take (0: algorithms only, at their
        default parameters). Compilation of new configurations counts.

    Returns
    -------
    TuneResult
        The winner, its parameters, the table of ``(backend, algorithm,
        median_s, spread, status)`` and the table of the configurations searched.
    """
    check_algorithm_type(algorithm)
    _check_direction(direction)
    _check_backward_bias(direction, bias)
    _check_in_memory({"x": x, "w": w, "bias": bias}, "tune", accepted="")
    budget_s = _tuning.check_budget(budget_s)
    ndim = ndim_of(w)
    call = prepare_forward(OPS[ndim], ndim, x, w, bias, stride, padding, dilation, groups, convert=False)
    name, _ = requested_backend(backend)
    if name == "auto" and algorithm != "auto":
        check_algorithm_exists(algorithm)
    return _tuning.tune_now(call.spec, direction, name, algorithm, home_backend(call.x), budget_s)
