"""Base of the compiled CPU backends, whose algorithms are kernels in lazily imported modules.

Every kernel of the Cython extension and of the numba modules has the shape

    forward(x, w, bias, out, sh, sw, dh, dw, pad_top, pad_left, groups, *extra[, act])
    backward(grad_y, x, w, grad_x, grad_w, grad_b, sh, sw, dh, dw, pad_top, pad_left, groups, *extra
             [, input_grad][, relu_output, masked])

on 4-D C-contiguous arrays (1-D problems arrive as 2-D with a unit height).
This class does the lazy import, the availability reason, the reshapes and
the geometry, and turns a :class:`KernelSpec` (module, function names, the
spec-dependent extra arguments) into an :class:`~convsuite.backends.base.Algorithm`
record whose ``plan`` precomputes all of that once per spec.

Tunable parameters (tile widths, chunks per thread, rows per im2col tile)
reach the kernels as ``*extra`` arguments, never as compile-time constants:
a numba kernel is compiled once per dtype and a Cython one once per build,
so a sweep over parameter values recompiles nothing.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from .._epilogue import ACTIVATION_CODES
from .._spec import ConvSpec
from .base import Algorithm, Backend, Constraint, Launch, Tunable, Verdict

__all__ = ["KernelModuleBackend", "KernelSpec"]


@dataclass(frozen=True)
class KernelSpec:
    """Where an algorithm's kernels live and what they need beyond the geometry.

    Attributes
    ----------
    module : str
        Absolute module path, imported on first use.
    forward, backward : str or None
        Function names in that module (None: direction not implemented).
    extra : callable, optional
        ``extra(spec_2d, direction) -> tuple``: arguments after the geometry,
        computed once at plan time (tile sizes, chunk counts). For an
        algorithm with tunables it is ``extra(spec_2d, direction, params)``,
        ``params`` the resolved value of every tunable.
    blas : bool
        The kernels call BLAS: a launch then limits BLAS to one thread (the
        backend's own threads are the parallelism; see ``_blas_threads``).
    activation : bool
        The forward kernel takes a last argument, the code of an activation
        epilogue it applies (``_epilogue.ACTIVATION_CODES``; 0 for none):
        ``activation="relu"`` / ``"relu6"`` then run inside it.
    input_grad : bool
        The backward kernel takes, after ``extra``, a flag: 1 computes all three
        gradients, 0 only dW and db, leaving ``grad_x`` untouched
        (``conv2d_backward(..., input_grad=False)``: :meth:`KernelModuleBackend.skips_input_grad`).
    blas_address : bool
        The kernel takes, as its very last argument, the address of the BLAS
        ``gemm`` for the dtype (``_blas_routines.gemm_address``), looked up in
        the running process at every launch (~0.1 us): never stored in the
        plan, so a plan pickled to another process cannot call a stale address.
    relu_mask : bool
        The backward kernel takes two last arguments, a ReLU's output (shape of
        ``grad_y``; any array of that type when unused) and a flag: 1 reads
        ``grad_y`` as 0 where that output is ``<= 0`` (the gradient through the
        ReLU, with no masked copy first: :meth:`KernelModuleBackend.fuses_relu_mask`).
    """

    module: str
    forward: str | None = "forward"
    backward: str | None = "backward"
    extra: Callable[..., tuple] | None = None
    blas: bool = False
    blas_address: bool = False
    activation: bool = False
    input_grad: bool = False
    relu_mask: bool = False


def _with_one_blas_thread(launch):
    """``launch`` run with BLAS limited to one thread."""
    from ._blas_threads import one_blas_thread

    def run(kernel, *args):
        with one_blas_thread():
            launch(kernel, *args)

    return run


def _with_blas_address(launch, dtype: str):
    """``launch`` with this process's BLAS ``gemm`` address appended to the kernel's arguments."""
    from ._blas_routines import gemm_address

    def run(kernel, *args):
        launch(kernel, *args, gemm_address(dtype))

    return run


class KernelModuleBackend(Backend):
    """A backend whose algorithms call functions of lazily imported kernel modules."""

    #: Absolute module path whose import decides availability.
    kernel_module: str
    #: What to tell the user when that import fails (the error is appended).
    missing_hint: str
    #: The third-party package the kernels are written in (None: none beyond NumPy).
    requires: str | None = None

    def refuses(self) -> str | None:
        """Why the imported :attr:`requires` package cannot run the kernels as configured (None: it can)."""
        return None

    def load_fault(self, exc: Exception) -> str | None:
        """Why the kernels cannot load, where ``exc`` (raised importing them) is the dependency's fault, else None.

        None lets ``exc`` through: an error of convsuite's own kernel module is a bug to see.
        """
        return None

    def kernels(self, module: str | None = None):
        """A kernel module (default: the backend's main one); raises ImportError if unloadable."""
        return importlib.import_module(module or self.kernel_module)

    def available(self) -> Verdict:
        if self.requires is not None:
            try:
                importlib.import_module(self.requires)
            except ImportError as exc:
                return f"{self.missing_hint} ({exc})"
            except Exception as exc:  # installed but refusing to load, e.g. numba with NUMBA_NUM_THREADS=0
                return f"{self.requires} is installed but cannot be imported ({type(exc).__name__}: {exc})"
            refusal = self.refuses()
            if refusal is not None:
                return refusal
        try:
            self.kernels()
        except ImportError as exc:
            return f"{self.missing_hint} ({exc})"
        except Exception as exc:  # the dependency's own fault (load_fault says which) is a reason; any other, a bug
            reason = self.load_fault(exc)
            if reason is None:
                raise
            return reason
        return True

    # --- algorithm records ------------------------------------------------

    def _records(self) -> tuple[Algorithm, ...]:
        """The backend's algorithms; subclasses list them (see :meth:`record`)."""
        raise NotImplementedError

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The names of the records of :meth:`_records`, in their order (the first is the default)."""
        return tuple(self.algorithm_table())

    def algorithm_table(self) -> Mapping[str, Algorithm]:
        table = self.__dict__.get("_table")
        if table is None:
            table = {a.name: a for a in self._records()}
            self.__dict__["_table"] = table
        return table

    def record(
        self,
        name: str,
        summary: str,
        kernels: KernelSpec,
        *,
        ndims=(1, 2),
        check=None,
        tunables: tuple[Tunable, ...] = (),
        constraint: Constraint | None = None,
    ) -> Algorithm:
        """An :class:`Algorithm` whose plan launches ``kernels`` through :meth:`_launch`.

        With ``tunables`` the record is planned as ``plan(spec, direction,
        params)`` and ``kernels.extra`` receives ``params``; without, both
        keep their two-argument form.
        """
        directions = tuple(d for d in ("forward", "backward") if getattr(kernels, d) is not None)
        self.__dict__.setdefault("_kernel_specs", {})[name] = kernels

        if tunables:

            def plan(spec: ConvSpec, direction: str, params: Mapping[str, Any]) -> Launch:
                return self._plan_kernel(spec, direction, kernels, params)

        else:

            def plan(spec: ConvSpec, direction: str) -> Launch:
                return self._plan_kernel(spec, direction, kernels)

        return Algorithm(
            name=name,
            summary=summary,
            plan=plan,
            directions=directions,
            ndims=ndims,
            check=check,
            tunables=tuple(tunables),
            constraint=constraint,
        )

    def _kernel_spec(self, algorithm: str) -> KernelSpec | None:
        """The kernels of ``algorithm`` (None for a name the backend does not have)."""
        self.algorithm_table()  # fills the kernel specs
        return self.__dict__.get("_kernel_specs", {}).get(algorithm)

    def fuses_activation(self, spec: ConvSpec, algorithm: str, activation: str) -> bool:
        """Whether ``algorithm``'s forward kernel applies ``activation`` ("relu", "relu6") itself."""
        kernels = self._kernel_spec(algorithm)
        return kernels is not None and kernels.activation and ACTIVATION_CODES.get(activation, 0) > 0

    def fuses_relu_mask(self, spec: ConvSpec, algorithm: str) -> bool:
        """Whether ``algorithm``'s backward kernel masks ``grad_y`` by a ReLU's output itself."""
        kernels = self._kernel_spec(algorithm)
        return kernels is not None and kernels.relu_mask

    def skips_input_grad(self, spec: ConvSpec, algorithm: str) -> bool:
        """Whether ``algorithm``'s backward kernel can leave out dX (see :class:`KernelSpec`)."""
        kernels = self._kernel_spec(algorithm)
        return kernels is not None and kernels.input_grad

    def plan(self, spec: ConvSpec, algorithm: str, direction: str, params: Mapping[str, Any] | None = None) -> Launch:
        """As :meth:`Backend.plan`; with options after ``+`` too: ``"forward+relu"`` /
        ``"forward+relu6"`` (the activation inside the kernel: :meth:`fuses_activation`),
        ``"backward+relu"`` (the ReLU mask inside: :meth:`fuses_relu_mask`) and
        ``"backward+weights"`` (dW and db only: :meth:`skips_input_grad`), or both.
        """
        base, *options = direction.split("+")
        if not options:
            return super().plan(spec, algorithm, direction, params)
        kernels = self._kernel_spec(algorithm)
        act, input_grad, relu_mask = 0, True, False
        for option in options:
            if base == "forward" and self.fuses_activation(spec, algorithm, option):
                act = ACTIVATION_CODES[option]
            elif base == "backward" and option == "relu" and self.fuses_relu_mask(spec, algorithm):
                relu_mask = True
            elif base == "backward" and option == "weights" and self.skips_input_grad(spec, algorithm):
                input_grad = False
            else:
                raise ValueError(f"{algorithm!r} of backend {self.name!r} does not plan {direction!r}")
        record = self.algorithm_table()[algorithm]
        resolved = record.resolve(spec, base, params)  # raises on a parameter it does not have
        return self._plan_kernel(
            spec,
            base,
            kernels,
            resolved if record.tunables else None,
            act=act,
            input_grad=input_grad,
            relu_mask=relu_mask,
        )

    def _launch(self, kernel, *args) -> None:
        """Run one kernel call; subclasses add thread settings or locks."""
        kernel(*args)

    @staticmethod
    def _geometry(s: ConvSpec) -> tuple:
        (sh, sw), (dh, dw) = s.stride, s.dilation
        return (sh, sw, dh, dw, s.padding[0][0], s.padding[1][0], s.groups)

    def _plan_kernel(
        self,
        spec: ConvSpec,
        direction: str,
        kernels: KernelSpec,
        params: Mapping[str, Any] | None = None,
        act: int = 0,
        input_grad: bool = True,
        relu_mask: bool = False,
    ) -> Launch:
        """Resolve the kernel and every spec-dependent argument once; return the launch
        (``act``: the activation code a forward kernel with an epilogue applies;
        ``input_grad``, ``relu_mask``: a backward kernel's options, see :class:`KernelSpec`).
        """
        s = spec.as_2d()
        kernel = getattr(self.kernels(kernels.module), getattr(kernels, direction))
        if kernels.extra is None:
            extra = ()
        elif params is None:
            extra = kernels.extra(s, direction)
        else:
            extra = kernels.extra(s, direction, params)
        tail = self._geometry(s) + tuple(extra)
        if direction == "forward" and kernels.activation:
            tail += (act,)
        if direction == "backward" and kernels.input_grad:
            tail += (int(input_grad),)
        launch_one = self._launch
        if kernels.blas:
            launch_one = _with_one_blas_thread(self._launch)
        if kernels.blas_address:
            launch_one = _with_blas_address(launch_one, s.dtype)
        x_shape, w_shape, y_shape = s.x_shape, s.w_shape, s.y_shape
        if direction == "forward":
            zeros = np.zeros(s.out_channels, dtype=s.dtype)  # read-only to the kernel: shared by calls
            if spec.ndim == 2:  # operands arrive in their 4-D shapes: no reshapes on the per-call path

                def forward_2d(x, w, bias, out):
                    launch_one(kernel, x, w, zeros if bias is None else bias, out, *tail)

                return forward_2d

            def forward(x, w, bias, out):
                b = zeros if bias is None else bias
                launch_one(kernel, x.reshape(x_shape), w.reshape(w_shape), b, out.reshape(y_shape), *tail)

            return forward

        # A "backward+relu" plan passes the ReLU's output as a seventh operand; a kernel
        # that can mask but is planned without it gets unused mask arguments.
        unused_mask = (np.ones((1, 1, 1, 1), dtype=s.dtype), 0) if kernels.relu_mask else ()

        def backward(grad_y, x, w, grad_x, grad_w, grad_b, *relu_output):
            mask = (relu_output[0].reshape(y_shape), 1) if relu_mask else unused_mask
            launch_one(
                kernel,
                grad_y.reshape(y_shape),
                x.reshape(x_shape),
                w.reshape(w_shape),
                grad_x.reshape(x_shape),
                grad_w.reshape(w_shape),
                grad_b,
                *tail,
                *mask,
            )

        return backward
