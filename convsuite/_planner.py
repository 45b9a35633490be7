"""The planner: a call's key, and the plan built for it on a miss.

Every call is a plan lookup: :func:`plan_key` gathers everything that
determines the choice, and a hit in the plan cache (:mod:`._plan_cache`)
runs the stored plan at once. A miss validates the call
(:mod:`._validation`), chooses a backend and algorithm (:mod:`._select`:
requested, measured, fitted rule or priority), asks the backend for its
launch and caches the resulting :class:`~._plans.Plan`, which is handed
:func:`from_recipe` to plan itself again when unpickled. Nothing here knows
an array library by name: the backends' device protocol moves operands and
results. The public functions (:mod:`._api`) and the Dask blocks
(:mod:`.distributed`) call :func:`run_forward`, :func:`run_backward` and
:func:`planned`.
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping

import numpy as np

from . import _capture, _epilogue, _plan_cache, _select, _threads, _tuning
from ._arrays import is_cupy_array
from ._errors import UnsupportedCaseError
from ._interop import result_converter
from ._plans import Decision, Plan, PlanRecipe
from ._precision import get_precision
from ._registry import home_backend, registry_name, requested_backend
from ._spec import ConvSpec
from ._validation import (
    as_real_array,
    check_activation,
    check_input_grad,
    check_memory,
    check_relu_output,
    prepare_backward,
    prepare_forward,
    reserve_memory,
    result_dtype,
)
from .backends.base import Backend

__all__ = [
    "OPS",
    "backward",
    "build",
    "check_algorithm_type",
    "check_params",
    "forward",
    "forward_plan",
    "from_recipe",
    "ndim_of",
    "plan_key",
    "planned",
    "read_operand",
    "resolved_params",
    "run_backward",
    "run_forward",
]

#: The operation of each number of spatial dimensions.
OPS = {1: "conv1d", 2: "conv2d"}
_CACHE = _plan_cache.cache()


def check_algorithm_type(algorithm: Any) -> None:
    if not isinstance(algorithm, str):
        raise TypeError(f"`algorithm` must be a string such as 'auto'; got {algorithm!r}")


def _freeze(value: Any) -> Any:
    """A hashable stand-in for a geometry keyword that keeps its types.

    ``1``, ``True`` and ``1.0`` compare equal in Python but only the first is
    a valid stride; tagging non-int values with their type keeps an invalid
    call from hitting a valid call's plan. Unhashable values raise TypeError.
    """
    kind = type(value)
    if kind is int or kind is str:
        return value
    if kind is tuple or kind is list:
        # Plain ints inline: nn layers pass ((1, 1), (1, 1)) paddings, 3 calls instead of 7.
        return (kind, *[v if type(v) is int else _freeze(v) for v in value])
    return (kind, value)


def _operand_key(array: Any) -> tuple:
    """Type, shape and dtype of one operand (AttributeError for non-arrays)."""
    return (type(array), array.shape, array.dtype)


def _device_id(array: Any) -> Any:
    """The ordinal of the device a (non-NumPy) array lives on, e.g. a CuPy array's GPU; None if it has none."""
    # CuPy: the ordinal its memory pointer holds (``array.device`` builds a Device object on every read).
    ordinal = getattr(getattr(array, "data", None), "device_id", None)
    if ordinal is not None:
        return ordinal
    device = getattr(array, "device", None)
    return getattr(device, "id", device)


def plan_key(
    ndim: int,
    direction: str,
    a: Any,
    b: Any,
    c: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: Any,
    name: str,
    source: str,
    algorithm: Any,
    activation: str | None = None,
    input_grad: bool = True,
) -> tuple:
    """Everything that determines a plan; raises AttributeError/TypeError when it cannot be keyed."""
    return (
        ndim,
        direction,
        type(a),
        # A plan holds kernel handles of the device current when it was built: an array on another
        # GPU gets its own plan (made and run in that GPU's context, as convsuite.distributed does).
        None if type(a) is np.ndarray else _device_id(a),
        a.shape,
        a.dtype,
        b.shape,
        b.dtype,
        type(b),
        None if c is None else _operand_key(c),
        # _freeze inlined for the common plain int: four calls saved on every call.
        stride if type(stride) is int else _freeze(stride),
        padding if type(padding) is int else _freeze(padding),
        dilation if type(dilation) is int else _freeze(dilation),
        groups if type(groups) is int else _freeze(groups),
        name,
        source,
        algorithm,
        _threads._requested,  # the thread setting (None: all), read without a call
        _threads._local.n,  # a Dask task's own count (numba plans size their chunks by it)
        _tuning.autotune_enabled(),
        _plan_cache._generation,
        activation,
        input_grad,
        _capture._CAPTURING.get(),  # CUDA-graph capture chooses among capturable kernels only
        get_precision(),  # the precision policy bounds what auto may choose
    )


def build(
    ndim: int,
    direction: str,
    a: Any,
    b: Any,
    c: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: Any,
    name: str,
    source: str,
    algorithm: Any,
    measure: bool | None = None,
    activation: str | None = None,
    params: dict | None = None,
    input_grad: bool = True,
) -> Plan:
    """Validate, choose and plan one problem (a plan-cache miss); ``params`` pins tunable parameters."""
    check_algorithm_type(algorithm)
    op = OPS[ndim]
    grad_y = None
    # Shapes of the arrays the plan computes with, never an object's own ``.shape`` (which need not match its data).
    a, b = (
        read_operand(a, "x" if direction == "forward" else "grad_y"),
        read_operand(b, "w" if direction == "forward" else "x"),
    )
    c = read_operand(c, "bias" if direction == "forward" else "w")
    if direction == "forward":
        call = prepare_forward(op, ndim, a, b, c, stride, padding, dilation, groups, convert=False)
        user_shapes = (tuple(a.shape), tuple(b.shape), None if c is None else tuple(c.shape))
    else:
        call, grad_y = prepare_backward(op, ndim, a, b, c, stride, padding, dilation, groups, convert=False)
        user_shapes = (tuple(b.shape), tuple(c.shape), None)
    spec = call.spec
    # float16 operands compute in float32 (spec.dtype) and their results are converted back once.
    result = result_dtype(call.x, call.w, call.bias, grad_y)
    home = home_backend(call.x)
    if params is not None:  # explicit parameters: the request names one algorithm; nothing to choose
        backend, algo, decision = _select.choose(spec, direction, name, source, algorithm, home, measure=False)
        verdict = backend.can_run(spec, algo, direction, params)
        if verdict is not True:
            raise UnsupportedCaseError(f"{backend.name}/{algo} cannot run this case with params={params!r}: {verdict}")
        given = ", ".join(f"{k}={v!r}" for k, v in sorted(params.items()))
        decision = Decision(
            decision.source,
            "request",
            f"parameters given: {given}",
            decision.considered,
            params=tuple(sorted(params.items())),
        )
    else:
        backend, algo, decision = _select.choose(spec, direction, name, source, algorithm, home, measure=measure)
    chosen = dict(decision.params) or None
    # Copies, outputs and workspace of this first call, against memory available
    # now, before anything is allocated; later calls re-check only large plans.
    reserve_memory(call, backend, algo, direction, grad_y)
    limit = backend.memory_limit()
    if limit is not None:
        shapes = [spec.y_shape] if direction == "forward" else [spec.x_shape, spec.w_shape, (spec.out_channels,)]
        nbytes = sum(int(np.prod(s, dtype=object)) for s in shapes) * spec.itemsize
        check_memory(nbytes, f"outputs of shapes {shapes}", device=backend.device, limit=limit)
    # An activation epilogue runs inside the kernel where the backend fuses it,
    # otherwise after it (Plan._run_forward). Backward, activation="relu" is the
    # gradient through that ReLU (relu_output=): its mask is applied inside the
    # kernels where the backend fuses it, otherwise to grad_y first (Plan._run_backward).
    if direction == "forward":
        fused = _epilogue.backend_fuses(backend, spec, algo, activation)
    else:
        fused = activation == "relu" and _epilogue.backend_fuses_relu_mask(backend, spec, algo)
    planned = f"{direction}+{activation}" if fused else direction
    # Without an input gradient, a backend that can leave dX out plans dW and db only;
    # any other runs its full backward and the plan drops grad_x.
    if not input_grad and backend.skips_input_grad(spec, algo):
        planned += "+weights"
    # Only a parameter set is passed on: a backend of the older contract may take three arguments.
    launch = backend.plan(spec, algo, planned) if chosen is None else backend.plan(spec, algo, planned, chosen)
    # Where operands move and results go back: asked of the backends, never by library name.
    if backend.owns(call.x):
        to_device = to_caller = None
    elif home is None:
        to_device, to_caller = backend.to_device, backend.to_host
    else:

        def to_device(array: Any, home: Backend = home, backend: Backend = backend) -> Any:
            return backend.to_device(home.to_host(array))

        def to_caller(array: Any, home: Backend = home, backend: Backend = backend) -> Any:
            return home.to_device(backend.to_host(array))

    return Plan(
        activation=activation,
        fused_activation=fused,
        input_grad=input_grad,
        op=op,
        direction=direction,
        spec=spec,
        backend=backend,
        algorithm=algo,
        decision=decision,
        layout=call.layout,
        launch=launch,
        user_shapes=user_shapes,
        in_type=type(call.x) if home is not None else np.ndarray,
        xp_in=np if home is None else home.array_module(),
        contiguous=None if home is None else home.c_contiguity_test(),
        to_device=to_device,
        to_caller=to_caller,
        params=resolved_params(backend, spec, algo, direction, chosen),
        registry_name=registry_name(backend),
        rebuild=from_recipe,
        result_dtype=None if result == spec.dtype else result,
    )


def resolved_params(backend: Backend, spec: ConvSpec, algorithm: str, direction: str, params: dict | None) -> dict:
    """Every tunable parameter's value a plan runs with (empty when the algorithm has none)."""
    table = backend.algorithm_table()
    record = None if table is None else table.get(algorithm)
    if record is None or not record.tunables:
        return {}
    return record.resolve(spec, direction, params)


def from_recipe(recipe: PlanRecipe) -> Plan:
    """A plan built again from its recipe (a pickled plan, loaded): the same backend, algorithm and parameters."""
    xp = importlib.import_module(recipe.array_module)
    dtype = np.dtype(recipe.dtype)
    # Zero-strided stand-ins in the operands' library, as plan() makes from shapes: nothing allocated.
    a, b, c = (None if shape is None else xp.broadcast_to(xp.zeros((), dtype), shape) for shape in recipe.shapes)
    name, source = requested_backend(recipe.backend)  # unknown here: the usual ValueError listing the names
    geometry = (recipe.stride, recipe.padding, recipe.dilation, recipe.groups, name, source, recipe.algorithm)
    rebuilt = build(
        recipe.ndim,
        recipe.direction,
        a,
        b,
        c,
        *geometry,
        activation=recipe.activation,
        # Every value pinned, none chosen: no measurement, and the same kernels as the plan pickled.
        params=dict(recipe.params) or None,
        input_grad=recipe.input_grad,
    )
    rebuilt.decision = recipe.decision  # how the choice was made, not how the copy was rebuilt
    return rebuilt


def check_params(params: Any, name: str, algorithm: str) -> dict | None:
    """``params`` as a dict of str keys, or a TypeError/ValueError saying what is accepted."""
    if params is None:
        return None
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise TypeError(f"`params` must be a mapping of parameter names (str) to values, or None; got {params!r}")
    if name == "auto" or algorithm == "auto":
        raise ValueError(
            "`params` sets one algorithm's tunable parameters: name the backend and the algorithm "
            f"(got backend={name!r}, algorithm={algorithm!r})"
        )
    # numpy's ints (from np.arange, a grid) mean the same values; plan keys and messages show plain ints
    return {k: int(v) if isinstance(v, np.integer) else v for k, v in params.items()}


def planned(
    ndim: int,
    direction: str,
    a: Any,
    b: Any,
    c: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: Any,
    backend: Any,
    algorithm: Any,
    activation: str | None = None,
    input_grad: bool = True,
    params: dict | None = None,
) -> Plan:
    """The cached plan of a call, built on a miss (``params``: pinned tunables of the named algorithm)."""
    name, source = requested_backend(backend)
    geometry = (stride, padding, dilation, groups, name, source, algorithm)
    key: tuple | None
    try:
        key = plan_key(ndim, direction, a, b, c, *geometry, activation, input_grad)
        if params is not None:
            key += (tuple(sorted(params.items())),)
        found = _CACHE.get(key)
    except (AttributeError, TypeError):  # lists, or unhashable keywords: validate every time
        key = found = None
    if found is None:
        if activation is not None:
            check_activation(activation)
        found = build(ndim, direction, a, b, c, *geometry, activation=activation, input_grad=input_grad, params=params)
        # Only operands of exactly the array type the plan runs on are keyed (the callers read the others into
        # arrays first; a subclass reaching here through plan objects is validated on every call).
        kind = found.in_type
        if key is not None and type(a) is kind and type(b) is kind and (c is None or type(c) is kind):
            _CACHE.put(key, found)
    return found


def read_operand(value: Any, name: str) -> Any:
    """An operand as an array, read exactly once: NumPy and CuPy arrays as they are, anything else converted.

    Lists, objects with ``__array__`` or ``__dlpack__`` and torch tensors are
    read here, before validation and planning, and everything after uses the
    array read: an object whose data (or ``.shape``) changes between reads
    cannot give a key of one shape and data of another.
    """
    if value is None or type(value) is np.ndarray or is_cupy_array(value):
        return value
    return as_real_array(value, name)


def run_forward(
    ndim: int,
    x: Any,
    w: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: Any,
    backend: Any,
    algorithm: Any,
    activation: Any = None,
) -> Any:
    """One in-memory forward call: operands read once, the cached plan run, the result in the caller's kind."""
    back = None
    if type(x) is not np.ndarray:  # the hot path (NumPy operands) pays three type checks
        back = result_converter(x)
        x = read_operand(x, "x")
    if type(w) is not np.ndarray:
        w = read_operand(w, "w")
    if bias is not None and type(bias) is not np.ndarray:
        bias = read_operand(bias, "bias")
    plan_ = planned(ndim, "forward", x, w, bias, stride, padding, dilation, groups, backend, algorithm, activation)
    y = plan_._run_forward(x, w, bias)
    return y if back is None else back(y)


def run_backward(
    ndim: int,
    grad_y: Any,
    x: Any,
    w: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: Any,
    backend: Any,
    algorithm: Any,
    relu_output: Any = None,
    input_grad: Any = True,
) -> tuple[Any, ...]:
    """One in-memory backward call: operands read once, the cached plan run, gradients in the caller's kind."""
    # The gradient through a ReLU is its own plan: the backend may read grad_y
    # through relu_output inside its kernels (fuses_relu_mask), else the plan masks it first.
    through = None if relu_output is None else "relu"
    if input_grad is not True and input_grad is not False:
        input_grad = check_input_grad(input_grad)
    back = None
    if type(x) is not np.ndarray:
        back = result_converter(x)
        x = read_operand(x, "x")
    if type(grad_y) is not np.ndarray:
        grad_y = read_operand(grad_y, "grad_y")
    if type(w) is not np.ndarray:
        w = read_operand(w, "w")
    geometry = (stride, padding, dilation, groups, backend, algorithm)
    plan_ = planned(ndim, "backward", grad_y, x, w, *geometry, through, input_grad)
    if relu_output is not None:
        relu_output = check_relu_output(relu_output, plan_)
    grads = plan_._run_backward(grad_y, x, w, relu_output)
    return grads if back is None else tuple(None if g is None else back(g) for g in grads)


def ndim_of(w: Any, *, is_shape: bool = False) -> int:
    """1 or 2 spatial dimensions, told by the rank of ``w`` (an array, or a shape when ``is_shape``)."""
    rank = len(w) if is_shape else as_real_array(w, "w").ndim
    ndim = {1: 1, 3: 1, 2: 2, 4: 2}.get(rank)
    if ndim is None:
        raise ValueError(
            "`w` must have rank 3 (conv1d), 4 (conv2d), or 1/2 for a plain signal/image; "
            f"got shape {tuple(w) if is_shape else tuple(np.shape(w))}"
        )
    return ndim


def forward_plan(
    ndim: int,
    x: Any,
    w: Any,
    bias: Any = None,
    *,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: Any = 1,
    backend: Any = None,
    algorithm: Any = "auto",
    params: Any = None,
) -> Plan:
    """The forward plan of in-memory operands (not cached: the caller keeps it), keywords as ``conv2d``'s."""
    name, source = requested_backend(backend)
    check_algorithm_type(algorithm)
    params = check_params(params, name, algorithm)
    geometry = (stride, padding, dilation, groups, name, source, algorithm)
    return build(ndim, "forward", x, w, bias, *geometry, params=params)


def forward(
    ndim: int,
    x: Any,
    w: Any,
    bias: Any = None,
    *,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: Any = 1,
    backend: Any = None,
    algorithm: Any = "auto",
    activation: Any = None,
) -> Any:
    """One in-memory forward call, keywords as ``conv2d``'s (for callers below the public API)."""
    return run_forward(ndim, x, w, bias, stride, padding, dilation, groups, backend, algorithm, activation)


def backward(
    ndim: int,
    grad_y: Any,
    x: Any,
    w: Any,
    *,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: Any = 1,
    backend: Any = None,
    algorithm: Any = "auto",
    relu_output: Any = None,
    input_grad: Any = True,
) -> tuple[Any, ...]:
    """One in-memory backward call, keywords as ``conv2d_backward``'s (for callers below the public API)."""
    geometry = (stride, padding, dilation, groups, backend, algorithm)
    return run_backward(ndim, grad_y, x, w, *geometry, relu_output, input_grad)
