"""Plans: validation and selection done once per problem, not once per call.

A :class:`Plan` holds everything a call needs that depends only on the
problem and the settings: the validated :class:`~convsuite._spec.ConvSpec`,
the chosen backend and algorithm (and why, a :class:`Decision`), the
backend's launch callable (from :meth:`Backend.plan`, with its geometry and
kernel handles), where the operands must move and how the result is shaped
for the caller. :mod:`convsuite._planner` builds plans and
:mod:`convsuite._plan_cache` keeps them.

A plan holds launch closures and kernel handles, which are not data: it
pickles (and deep-copies) as its :class:`PlanRecipe`, the arguments that
build it again, and is planned afresh when loaded by the function the
planner handed it (``rebuild``), so this module needs nothing above it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import _buffers, _epilogue, _instrument, _nonfinite
from ._spec import ConvSpec
from ._validation import SMALL_CALL_BYTES, check_call_memory
from .backends.base import Backend

__all__ = ["Decision", "Plan", "PlanRecipe"]


@dataclass(frozen=True)
class Decision:
    """How a plan's backend and algorithm were chosen.

    Attributes
    ----------
    source : str
        Which setting asked for the backend (argument, use_backend, ...).
    decided_by : str
        ``"request"`` (a named backend and algorithm), ``"rule"`` (the fitted
        default rule or the backend's own algorithm rule), ``"priority"`` (no
        fitted data for this device), or ``"measurement"`` (autotune).
    reason : str
        One sentence: why this backend and algorithm.
    considered : tuple of (str, str)
        Backends skipped, with why.
    measured : tuple, optional
        For a measured choice, the table ``(backend, algorithm, median_s,
        iqr_rel, status)`` of every candidate, the chosen first, then fastest first.
    params : tuple of (str, object)
        The algorithm's tunable parameters chosen by a measurement or given
        explicitly (sorted items); empty: the algorithm's defaults.
    param_table : tuple, optional
        For a parameter search, ``("backend/algorithm", params, median_s, iqr_rel,
        status)`` of every configuration timed, fastest first.
    """

    source: str
    decided_by: str
    reason: str
    considered: tuple[tuple[str, str], ...] = ()
    measured: tuple[tuple[str, str, float | None, float | None, str], ...] = ()
    params: tuple[tuple[str, Any], ...] = ()
    param_table: tuple = ()


@dataclass(frozen=True)
class PlanRecipe:
    """What a :class:`Plan` is built from: the form it takes in a pickle.

    Loading plans it again with the backend, algorithm and parameters named,
    so the new plan runs the same kernels; nothing is chosen again. A backend
    missing or unavailable where it is loaded raises the usual
    ``ValueError`` / ``BackendUnavailableError``. A device plan is planned on
    the device current where it is loaded (as ``cs.plan`` of shapes is).

    Attributes
    ----------
    ndim : int
        Spatial dimensions, 1 or 2.
    direction : str
        ``"forward"`` or ``"backward"``.
    shapes : tuple
        The operands' shapes in the caller's layout, in call order:
        ``(x, w, bias)`` forward (``bias`` None without one), ``(grad_y, x,
        w)`` backward.
    dtype : str
        ``"float32"`` or ``"float64"``.
    stride, dilation : tuple of int
    padding : tuple of (int, int)
        Resolved per-side padding.
    groups : int
    backend : str
        The registry name of the backend the plan ran on.
    algorithm : str
    params : tuple of (str, object)
        Every tunable parameter's value (sorted items; empty for none).
    activation : str or None
        The forward epilogue, or backward ``"relu"`` for the gradient through a ReLU.
    input_grad : bool
        Whether a backward plan returns grad_x.
    array_module : str
        The module of the operands' array library (``"numpy"``, ``"cupy"``).
    decision : Decision
        How the original choice was made; the loaded plan keeps it.
    """

    ndim: int
    direction: str
    shapes: tuple
    dtype: str
    stride: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]
    dilation: tuple[int, ...]
    groups: int
    backend: str
    algorithm: str
    params: tuple[tuple[str, Any], ...]
    activation: str | None
    input_grad: bool
    array_module: str
    decision: Decision


class Plan:
    """A validated, chosen convolution, ready to run on operands of its shapes.

    Build one with :func:`convsuite.plan`; ``cs.conv2d`` and the layers build
    and cache theirs. Calling a forward plan as ``plan(x, w, bias=None)``
    returns ``y``; a backward plan as ``plan(grad_y, x, w)`` returns
    ``(grad_x, grad_w, grad_b)``. A plan keeps the choice made when it was
    built: later ``set_backend``/``use_backend`` changes do not affect it.
    It pickles and deep-copies as its :meth:`recipe`, planned again on loading.

    Attributes
    ----------
    op, direction : str
        ``"conv1d"``/``"conv2d"`` and ``"forward"``/``"backward"``.
    spec : ConvSpec
        The normalised problem.
    backend : Backend
        The backend that runs it.
    algorithm : str
        Its algorithm.
    decision : Decision
        How the choice was made.
    params : dict
        The value of every tunable parameter of the algorithm this plan runs
        with (empty when the algorithm has none).
    """

    __slots__ = (
        "params",
        "op",
        "direction",
        "spec",
        "backend",
        "algorithm",
        "decision",
        "layout",
        "dtype",
        "_launch",
        "_x_shape",
        "_w_shape",
        "_bias_shape",
        "_gy_shape",
        "_in_type",
        "_xp_in",
        "_contiguous",
        "_xp_out",
        "_alloc",
        "_to_device",
        "_to_caller",
        "_out_shapes",
        "_user_y_shape",
        "_grad_w_shape",
        "_padded",
        "_large",
        "_activation",
        "_requested_activation",
        "_fused_activation",
        "_input_grad",
        "_registry_name",
        "_rebuild",
        "_result_dtype",
    )

    def __init__(
        self,
        *,
        op: str,
        direction: str,
        spec: ConvSpec,
        backend: Backend,
        algorithm: str,
        decision: Decision,
        layout: str,
        launch: Callable[..., None],
        user_shapes: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None],
        in_type: type[Any],
        xp_in: Any,
        to_device: Callable[[Any], Any] | None,
        to_caller: Callable[[Any], Any] | None,
        contiguous: Callable[[Any], bool] | None = None,
        activation: str | None = None,
        fused_activation: bool = False,
        params: dict | None = None,
        input_grad: bool = True,
        registry_name: str | None = None,
        rebuild: Callable[[PlanRecipe], Plan] | None = None,
        result_dtype: Any = None,
    ) -> None:
        self.params = dict(params or {})
        # The name the backend is registered under (a recipe names it) and the function that plans a recipe
        # again: handed in by the planner, which sits above this module.
        self._registry_name = backend.name if registry_name is None else registry_name
        self._rebuild = rebuild
        # float16 operands: computed in float32 (self.dtype), the results converted to this dtype once.
        self._result_dtype = None if result_dtype is None else np.dtype(result_dtype)
        self.op, self.direction, self.spec = op, direction, spec
        self.backend, self.algorithm, self.decision = backend, algorithm, decision
        self.layout = layout
        self.dtype = np.dtype(spec.dtype)
        self._launch = launch
        self._x_shape, self._w_shape, self._bias_shape = user_shapes
        self._in_type = in_type
        self._xp_in = xp_in
        # Whether a device operand is C-contiguous, asked of the backend that owns the caller's arrays
        # (None: NumPy operands, whose flag the per-call path reads inline).
        self._contiguous = contiguous
        self._xp_out = backend.array_module()
        self._alloc = _buffers.allocator(self._xp_out)
        self._to_device = to_device
        self._to_caller = to_caller
        drop = {"batched": 0, "unbatched": 1, "signal": 2}[layout]
        self._user_y_shape = spec.y_shape[drop:]
        self._gy_shape = self._user_y_shape
        self._grad_w_shape = spec.kernel_size if layout == "signal" else spec.w_shape
        self._out_shapes: tuple[tuple[int, ...], ...]
        if direction == "forward":
            self._out_shapes = (spec.y_shape,)
        else:
            self._out_shapes = (spec.x_shape, spec.w_shape, (spec.out_channels,))
        # Non-finite operands meeting padding need the IEEE fix-up (_nonfinite);
        # without padding there is nothing to check on the per-call path.
        self._padded = any(before or after for before, after in spec.padding) and not backend.ieee_padding(
            spec, algorithm, direction
        )
        # Memory was reserved for the first call; a plan whose worst case (every
        # operand copied, outputs, workspace) is small skips the per-call check.
        operands = [self._x_shape, self._w_shape, self._bias_shape, self._gy_shape if direction == "backward" else None]
        worst = sum(int(np.prod(shape, dtype=object)) for shape in operands if shape is not None)
        worst += sum(int(np.prod(shape, dtype=object)) for shape in self._out_shapes)
        worst *= spec.itemsize
        worst += int(backend.workspace_bytes(spec, algorithm, direction)) if backend.device == "cpu" else 0
        # The check counts host buffers only: NumPy operands' copies and a CPU backend's outputs and
        # workspace. Device operands on a GPU backend have none, so their plans skip it (on a warm
        # call after a long kernel it cost ~10 us of host time before the launch, H100 host).
        host_buffers = in_type is np.ndarray or backend.device == "cpu"
        self._large = worst > SMALL_CALL_BYTES and host_buffers
        # The activation epilogue: inside the kernel (fused) or after it; backward,
        # the ReLU mask of grad_y: read inside the kernels (fused) or a masked copy first.
        self._activation = None if fused_activation else activation
        self._requested_activation = activation  # for the recipe: _activation is None where fused
        self._fused_activation = fused_activation
        # Backward without dX: grad_x is returned as None (its buffer is left unwritten
        # by a backend that plans "backward+weights", else computed and dropped).
        self._input_grad = input_grad

    @property
    def user_y_shape(self) -> tuple[int, ...]:
        """The forward output's shape in the caller's layout (also grad_y's)."""
        return self._user_y_shape

    @property
    def xp_in(self) -> Any:
        """The array module of the caller's operands."""
        return self._xp_in

    @property
    def in_type(self) -> type[Any]:
        """The array type the plan's operands must have (NumPy's, or a device array type)."""
        return self._in_type

    # --- the per-call path: operands already known to match the plan ----------

    def _operand(self, array: Any) -> Any:
        """One operand: contiguous, of the plan's dtype, canonical shape, on the backend's device."""
        # Attribute checks first, as in _run_forward: CuPy's ascontiguousarray costs microseconds with nothing
        # to do.
        ready = self._contiguous
        if array.dtype != self.dtype or not (array.flags.c_contiguous if ready is None else ready(array)):
            array = self._xp_in.ascontiguousarray(array, dtype=self.dtype)
        if self._to_device is not None:
            array = self._to_device(array)
        return array

    def _outputs(self) -> list:
        """Fresh output buffers on the backend's device (NaN while poisoning)."""
        outputs = [self._alloc(shape, self.dtype) for shape in self._out_shapes]
        if _buffers.poisoning():
            for buffer in outputs:
                buffer.fill(float("nan"))
        return outputs

    @property
    def accepts_out(self) -> bool:
        """Whether a forward call can write into a caller's ``out=``: the result stays on the backend's device
        in the dtype it is computed in.
        """
        return self.direction == "forward" and self._to_caller is None and self._result_dtype is None

    def _check_out(self, out: Any) -> Any:
        """``out`` as the canonical output buffer; ValueError/TypeError naming what it must be."""
        if self._result_dtype is not None and self.direction == "forward":
            raise ValueError(
                f"`out` is not taken by a plan of {self._result_dtype} operands (computed in {self.dtype}, "
                "converted once at the end); pass none"
            )
        if not self.accepts_out:
            raise ValueError(
                f"`out` needs the operands on the {self.backend.name} backend's device (this plan moves "
                "them there and back); pass none"
            )
        kind = self._xp_out.ndarray
        # Subclasses that are plain buffers (np.memmap) are written like any array; a masked array (whose mask
        # the kernels would ignore) or np.matrix (2-D only) is not.
        if type(out) is not kind and (not isinstance(out, kind) or isinstance(out, (np.ma.MaskedArray, np.matrix))):
            raise TypeError(f"`out` must be a {kind.__module__}.{kind.__name__}; got {type(out).__name__}")
        if tuple(out.shape) not in (self._user_y_shape, self.spec.y_shape):
            raise ValueError(f"`out` must have shape {self._user_y_shape} for this plan; got {tuple(out.shape)}")
        if out.dtype != self.dtype:
            raise TypeError(f"`out` must have dtype {self.dtype} for this plan; got {out.dtype}")
        if not out.flags.c_contiguous:
            raise ValueError("`out` must be C-contiguous (the backends write it as one block); got a strided view")
        if not getattr(out.flags, "writeable", True):  # NumPy's flag (CuPy arrays have none: always writeable)
            raise ValueError("`out` must be writeable; got a read-only array")
        return out.reshape(self.spec.y_shape)

    def _run_forward(self, x: Any, w: Any, bias: Any, out: Any = None) -> Any:
        """Run on operands whose shapes, dtypes and types match the plan: unchecked, so private.

        The callers are the front end after a plan-cache hit (its key holds the
        operands' types, shapes and dtypes), :meth:`__call__` after its checks
        and the Dask blocks (operands cut to the plan's shapes). Kernels index
        the operands by the plan's shapes: an operand that does not match them
        would be read out of bounds. ``out``: see :meth:`__call__` (checked here).
        """
        # The hot path: written out rather than through _operand, one call per call saved.
        contiguous, dtype = self._xp_in.ascontiguousarray, self.dtype
        if self._large:
            check_call_memory(self, "forward", (x, w, bias))
        # Attribute checks first: a conversion call costs microseconds even when
        # it has nothing to do (CuPy's especially), and most operands are ready.
        # NumPy's flag inline (no call); a device array's through its backend (CuPy's flags object is slow).
        ready = self._contiguous
        if x.dtype != dtype or not (x.flags.c_contiguous if ready is None else ready(x)):
            x = contiguous(x, dtype=dtype)
        if w.dtype != dtype or not (w.flags.c_contiguous if ready is None else ready(w)):
            w = contiguous(w, dtype=dtype)
        if bias is not None and (
            bias.dtype != dtype or not (bias.flags.c_contiguous if ready is None else ready(bias))
        ):
            bias = contiguous(bias, dtype=dtype)
        if self._to_device is not None:
            to_device = self._to_device
            x, w = to_device(x), to_device(w)
            bias = None if bias is None else to_device(bias)
        if self.layout != "batched":
            x = x.reshape(self.spec.x_shape)
            w = w.reshape(self.spec.w_shape)
        if out is None:
            out = self._alloc(self._out_shapes[0], dtype)
            if _buffers.poisoning():
                out.fill(float("nan"))
            given = None
        else:
            given, out = out, self._check_out(out)
            if any(a is not None and self._xp_out.may_share_memory(out, a) for a in (x, w, bias)):
                raise ValueError("`out` must not share memory with x, w or bias (the kernel reads them as it writes)")
        if _instrument.RECORDER.get() is None:  # no benchmark recording: the launch itself, one frame less
            self._launch(x, w, bias, out)
        else:
            _instrument.run_kernel(self.backend, self._launch, x, w, bias, out)
        if self._padded:
            _nonfinite.fix_forward(self.spec, w, out, self._xp_out)
        if self._activation is not None:  # not fused into the kernel: one elementwise pass
            _epilogue.apply_activation(self._activation, out, self._xp_out)
        if given is not None:
            return given
        if self.layout != "batched":
            out = out.reshape(self._user_y_shape)
        if self._result_dtype is not None:
            out = out.astype(self._result_dtype)
        return out if self._to_caller is None else self._to_caller(out)

    def _run_backward(self, grad_y: Any, x: Any, w: Any, relu_output: Any = None) -> tuple[Any, ...]:
        """Run on operands whose shapes, dtypes and types match the plan: unchecked, so private (as
        :meth:`_run_forward`).

        ``relu_output`` (checked by the caller): for a plan built for the
        gradient through a ReLU, that ReLU's output; grad_y is masked
        inside the kernels where the backend fuses it, else here, once.
        """
        spec = self.spec
        if self._large:
            check_call_memory(self, "backward", (grad_y, x, w))
        if self._activation is not None:  # the mask not fused: a masked copy, once, for dX, dW and db
            grad_y = _epilogue.mask_relu_gradient(grad_y, relu_output, self._xp_in)
        grad_y = self._operand(grad_y)
        x = self._operand(x)
        w = self._operand(w)
        if self.layout != "batched":
            grad_y = grad_y.reshape(spec.y_shape)
            x = x.reshape(spec.x_shape)
            w = w.reshape(spec.w_shape)
        grad_x, grad_w, grad_b = self._outputs()
        if self._fused_activation:  # the kernels read grad_y through the ReLU output
            relu_output = self._operand(_epilogue.relu_mask_operand(relu_output, self.dtype, self._xp_in))
            relu_output = relu_output.reshape(spec.y_shape)
            _instrument.run_kernel(self.backend, self._launch, grad_y, x, w, grad_x, grad_w, grad_b, relu_output)
        else:
            relu_output = None
            _instrument.run_kernel(self.backend, self._launch, grad_y, x, w, grad_x, grad_w, grad_b)
        if self._padded:
            _nonfinite.fix_backward(spec, grad_y, grad_w, grad_b, self._xp_out, relu_output)
        grad_x = grad_x.reshape(self._x_shape) if self._input_grad else None
        grads: tuple[Any, ...] = (grad_x, grad_w.reshape(self._grad_w_shape), grad_b)
        if self._result_dtype is not None:
            grads = tuple(None if g is None else g.astype(self._result_dtype) for g in grads)
        return grads if self._to_caller is None else tuple(None if g is None else self._to_caller(g) for g in grads)

    # --- the public, checked entry point ---------------------------------------

    def _check(self, name: str, array: Any, expected: tuple[int, ...]) -> None:
        """Refuse an operand that does not match the plan, saying how."""
        shape = getattr(array, "shape", None)
        if type(array) is not self._in_type or shape is None:
            raise TypeError(
                f"`{name}` must be a {self._in_type.__module__}.{self._in_type.__name__} as when the plan "
                f"was built; got {type(array).__name__}"
            )
        if tuple(shape) != tuple(expected):
            raise ValueError(
                f"`{name}` must have shape {tuple(expected)} for this plan; got {tuple(shape)} "
                "(build another plan for other shapes)"
            )
        dtype = array.dtype
        # Byte order is not a dtype ('>f4' is float32, converted with the copy a layout change makes), as in conv2d.
        wanted = self.dtype if self._result_dtype is None else self._result_dtype
        if dtype.kind not in "iuf" or (
            wanted.itemsize < 8 and not (dtype.kind == "f" and dtype.itemsize == wanted.itemsize)
        ):
            raise TypeError(
                f"`{name}` must have dtype {wanted} for this plan; got {array.dtype} "
                "(build another plan for other dtypes)"
            )

    def __call__(self, *operands: Any, bias: Any = None, out: Any = None) -> Any:
        """Run the plan: ``plan(x, w, bias=None, out=None)`` forward, ``plan(grad_y, x, w)`` backward.

        The operands must have the types, shapes and dtypes the plan was built
        for (TypeError or ValueError naming the operand otherwise).

        ``out`` (forward only): where the result is written, and what is
        returned: a C-contiguous, writeable array of the output's shape (the
        caller's layout or the canonical ``(B, M, ...)``) and the plan's dtype,
        of the backend's array type, sharing no memory with the operands; only
        for plans that need no transfer (:attr:`accepts_out`).
        """
        if self.direction == "forward":
            if len(operands) == 3 and bias is None:
                bias = operands[2]
                operands = operands[:2]
            if len(operands) != 2:
                raise TypeError(f"a forward plan takes (x, w, bias=None); got {len(operands)} positional operands")
            x, w = operands
            self._check("x", x, self._x_shape)
            self._check("w", w, self._w_shape)
            if (bias is None) != (self._bias_shape is None):
                raise ValueError(
                    "this plan was built "
                    + ("without a bias; pass none" if self._bias_shape is None else "with a bias; pass one")
                )
            if self._bias_shape is not None:  # bias given: checked just above
                self._check("bias", bias, self._bias_shape)
            return self._run_forward(x, w, bias, out)
        if len(operands) != 3 or bias is not None:
            raise TypeError("a backward plan takes (grad_y, x, w)")
        if out is not None:
            raise TypeError("`out` is for forward plans; a backward plan returns new (grad_x, grad_w, grad_b)")
        grad_y, x, w = operands
        self._check("grad_y", grad_y, self._gy_shape)
        self._check("x", x, self._x_shape)
        self._check("w", w, self._w_shape)
        return self._run_backward(grad_y, x, w)

    # --- pickling: the recipe, planned again when loaded ----------------------

    def recipe(self) -> PlanRecipe:
        """The arguments that build this plan again (what a pickle of it holds).

        Returns
        -------
        PlanRecipe
        """
        spec = self.spec
        if self.direction == "forward":
            shapes = (self._x_shape, self._w_shape, self._bias_shape)
        else:
            shapes = (self._gy_shape, self._x_shape, self._w_shape)
        return PlanRecipe(
            ndim=spec.ndim,
            direction=self.direction,
            shapes=shapes,
            dtype=self.dtype.name,
            stride=spec.stride,
            padding=spec.padding,
            dilation=spec.dilation,
            groups=spec.groups,
            backend=self._registry_name,
            algorithm=self.algorithm,
            params=tuple(sorted(self.params.items())),
            activation=self._requested_activation,
            input_grad=self._input_grad,
            array_module=self._xp_in.__name__,
            decision=self.decision,
        )

    def __reduce__(self) -> tuple[Callable[[PlanRecipe], Plan], tuple[PlanRecipe]]:
        """Pickle (and deep-copy) as :meth:`recipe`: launch closures and kernel handles are not data."""
        if self._rebuild is None:
            raise TypeError("this plan was built without a rebuild function, so it cannot be pickled or copied")
        return (self._rebuild, (self.recipe(),))

    def __repr__(self) -> str:
        s = self.spec
        return (
            f"<convsuite plan {self.op} {self.direction}: x {s.x_shape} * w {s.w_shape} -> {s.y_shape} "
            f"{s.dtype} on {self.backend.name}/{self.algorithm}{_format_params(self.params)} "
            f"({self.decision.decided_by})>"
        )


def _format_params(params: dict) -> str:
    """``[tile_w=16, tile_h=8]``, or nothing for no parameters."""
    return "[" + ", ".join(f"{k}={v}" for k, v in params.items()) + "]" if params else ""
