"""The contract every backend fulfils.

A backend receives a validated :class:`~convsuite._spec.ConvSpec` and
contiguous arrays of the spec's dtype, in canonical layout (``(B, C, ...)``),
plus output buffers allocated by the front end. It writes every element of
those buffers and nothing else. It never re-validates user input; when it
cannot handle a case it says so beforehand through :meth:`Backend.can_run`.

"Yes" is ``True``; "no" is a string that says why. That string is what
``list_backends()`` prints, what ``explain()`` reports, what an explicit
request raises and what a skipped test shows.

Algorithms are records. Each named way a backend computes a convolution is
one :class:`Algorithm`: its name, what it shows, the directions it
implements, the cases it declines (with the reason) and a ``plan`` function
that does everything that depends only on the spec once (launch geometry,
kernel handles, packed integer arguments) and returns a :data:`Launch`, the
callable the front end caches and runs on every call. Tuning, ``explain``,
the ablation and the docs all read the same table, :meth:`Backend.algorithm_table`.

The device protocol (:meth:`Backend.array_module`, :meth:`Backend.to_device`,
:meth:`Backend.to_host`, :meth:`Backend.synchronize`, :meth:`Backend.timer`,
:meth:`Backend.memory_limit`, :meth:`Backend.warm_up`) is how the front end
and the measuring tools move arrays and time work without knowing the device.
"""

from __future__ import annotations

import abc
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal, Mapping, Union

import numpy as np

from .._spec import ConvSpec

__all__ = [
    "Algorithm",
    "Backend",
    "COMPUTE_DTYPES",
    "Constraint",
    "DIRECTIONS",
    "Launch",
    "Tunable",
    "Verdict",
    "WallTimer",
]

#: ``True`` for yes, or a sentence saying why not.
Verdict = Union[Literal[True], str]

DIRECTIONS = ("forward", "backward")

#: The dtypes a backend computes in: the front end reads float32 operands as
#: float32 and every other real dtype as float64 (``_validation.compute_dtype``),
#: so these are all a kernel is ever given (:attr:`Backend.dtypes`).
COMPUTE_DTYPES = ("float32", "float64")

#: What :meth:`Backend.plan` returns: called with the operands of one call,
#: ``(x, w, bias, out)`` forward or ``(grad_y, x, w, grad_x, grad_w, grad_b)``
#: backward, all on the backend's device, C-contiguous, of the spec's shapes
#: and dtype (kernels write the outputs through raw pointers).
Launch = Callable[..., None]


#: ``constraint(spec, direction, params) -> Verdict``: whether one full set
#: of parameter values is possible together and on this case (shared memory,
#: registers, divisibility), or why not.
Constraint = Callable[[ConvSpec, str, Mapping[str, Any]], "Verdict"]


@dataclass(frozen=True)
class Tunable:
    """A kernel parameter an algorithm exposes to sweeps and the tuner.

    Attributes
    ----------
    name : str
        Parameter name, e.g. ``"tile_w"``.
    values : tuple
        The values sweeps and the tuner try, in increasing order (the pruned
        search's neighbours are the adjacent values).
    default : object or callable
        The hand-chosen value used when nothing was tuned, or a function
        ``default(spec, direction) -> value`` when the hand rule depends on
        the case (e.g. a tile as wide as the output row). A rule may pick a
        value outside ``values`` on some cases (a block as wide as a 44-pixel
        row); that value is then accepted on that case too.
    doc : str
        What the parameter controls, one line (sweep tables and docs).
    follows : tuple of str
        Other tunables of the same algorithm the hand rule reads (e.g. a
        block height that fills the rest of 256 threads reads the block
        width). The default is then ``default(spec, direction, chosen)``
        with ``chosen`` their values in this resolution, so pinning the width
        gives the rule's height for that width, not for the default width.
    """

    name: str
    values: tuple
    default: Any
    doc: str = ""
    follows: tuple = ()

    def default_for(self, spec: ConvSpec, direction: str, chosen: Mapping[str, Any] | None = None) -> Any:
        """The hand-chosen value on this case (given ``chosen`` values of the tunables it follows)."""
        if not callable(self.default):
            return self.default
        if self.follows:
            return self.default(spec, direction, {name: (chosen or {})[name] for name in self.follows})
        return self.default(spec, direction)


@dataclass(frozen=True)
class Algorithm:
    """One named algorithm of a backend: the single record every tool reads.

    Attributes
    ----------
    name : str
        What ``algorithm=`` accepts.
    summary : str
        One line: what this algorithm shows (for ``list_backends``, docs, tables).
    plan : callable
        ``plan(spec, direction) -> Launch``: everything that depends only on
        the spec, done once; the returned callable runs one call. An
        algorithm with tunables is planned as ``plan(spec, direction,
        params)``, ``params`` a dict giving a value to every tunable.
    directions : tuple of str
        Directions implemented (``"forward"``, ``"backward"``).
    ndims : tuple of int
        Spatial ranks handled (1 and/or 2).
    check : callable, optional
        ``check(spec, direction) -> Verdict``: cases this algorithm declines
        whatever its parameters, with the reason. Called only for a
        supported direction and rank.
    tunables : tuple of Tunable
        Parameters a sweep or the tuner may vary (empty: none).
    constraint : callable, optional
        ``constraint(spec, direction, params) -> Verdict``: parameter sets
        impossible together or on this case, with the reason (see
        :data:`Constraint`). :meth:`can_run` applies it to the defaults.
    deterministic : bool
        False when results depend on the order of atomic additions (not
        bit-reproducible from run to run). Such an algorithm runs only when
        asked for by name: ``algorithm="auto"``, its rule and measured
        selection never pick it (:func:`convsuite._registry.selectable`).
    precision : {"highest", "high", "medium"}
        Its float32 accuracy class (:mod:`convsuite._precision`): ``"highest"``
        for IEEE float32 arithmetic, ``"high"`` for error-compensated TF32,
        ``"medium"`` for one TF32 product. ``auto`` picks it only under a
        policy that admits its class.
    """

    name: str
    summary: str
    plan: Callable[..., Launch]
    directions: tuple[str, ...] = ("forward",)
    ndims: tuple[int, ...] = (1, 2)
    check: Callable[[ConvSpec, str], Verdict] | None = None
    tunables: tuple[Tunable, ...] = field(default=())
    constraint: Constraint | None = None
    deterministic: bool = True
    precision: str = "highest"

    def __post_init__(self) -> None:
        if self.precision not in ("highest", "high", "medium"):
            raise ValueError(
                f"Algorithm {self.name!r}: `precision` must be 'highest', 'high' or 'medium'; got {self.precision!r}"
            )

    def can_run(self, spec: ConvSpec, direction: str, params: Mapping[str, Any] | None = None) -> Verdict:
        """Whether this algorithm runs ``spec`` in ``direction`` (with ``params``, default the defaults), or why not."""
        if direction not in self.directions:
            return f"{self.name!r} implements {' and '.join(self.directions)} only, not {direction}"
        if spec.ndim not in self.ndims:
            return f"{self.name!r} is a {'/'.join(map(str, self.ndims))}-D algorithm; this case is {spec.ndim}-D"
        verdict = True if self.check is None else self.check(spec, direction)
        if verdict is not True or not self.tunables:
            return verdict
        return self.check_params(spec, direction, self.resolve(spec, direction, params))

    # --- tunable parameters ---------------------------------------------

    def defaults(self, spec: ConvSpec, direction: str, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The hand-chosen value of every tunable on this case (of those not ``given``: those follow the given).

        Tunables that follow others are resolved after them, whatever the
        declaration order; the result keeps the declaration order.
        """
        given = given or {}
        chosen = {
            t.name: given[t.name] if t.name in given else t.default_for(spec, direction)
            for t in self.tunables
            if not t.follows
        }
        for t in self.tunables:
            if t.follows:
                chosen[t.name] = given[t.name] if t.name in given else t.default_for(spec, direction, chosen)
        return {t.name: (given[t.name] if t.name in given else chosen[t.name]) for t in self.tunables}

    def resolve(self, spec: ConvSpec, direction: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``params`` completed with the defaults; unknown names and values outside a tunable's list raise.

        Raises
        ------
        ValueError
            A name that is not a tunable of this algorithm, or a value not
            among its allowed values; the message lists what is accepted.
        """
        given = dict(params or {})
        known = {t.name: t for t in self.tunables}
        unknown = sorted(set(given) - set(known))
        if unknown:
            accepted = ", ".join(known) if known else "none"
            raise ValueError(
                f"`params`: {self.name!r} has no tunable parameter {', '.join(map(repr, unknown))} "
                f"(its parameters: {accepted})"
            )
        for name, value in given.items():
            if isinstance(value, np.integer):  # numpy's ints (from np.arange, a grid) mean the same values
                given[name] = int(value)
        own = self.defaults(spec, direction)  # the case's own defaults: accepted even where off the list
        for name, value in given.items():
            allowed = known[name].values
            if not _same(value, own[name]) and not any(_same(value, v) for v in allowed):
                raise ValueError(
                    f"`params`: {self.name!r} parameter {name!r} accepts {', '.join(map(repr, allowed))}; got {value!r}"
                )
        full = self.defaults(spec, direction, given)
        for name, value in given.items():
            if _same(value, own[name]):
                full[name] = own[name]  # keep the default's own spelling (a plan key, a cache entry)
        return full

    def check_params(self, spec: ConvSpec, direction: str, params: Mapping[str, Any]) -> Verdict:
        """Whether a full parameter set is possible on this case, or why not."""
        return True if self.constraint is None else self.constraint(spec, direction, params)

    def configurations(self, grid: Mapping[str, tuple] | None = None) -> list[dict[str, Any]]:
        """Every combination of the tunables' values (``grid`` narrows some), constraint not applied.

        Raises
        ------
        ValueError
            A grid name that is not a tunable, or a value outside its list.
        """
        known = {t.name: t for t in self.tunables}
        grid = dict(grid or {})
        unknown = sorted(set(grid) - set(known))
        if unknown:
            raise ValueError(
                f"{self.name!r} has no tunable parameter {', '.join(map(repr, unknown))} "
                f"(its parameters: {', '.join(known) or 'none'})"
            )
        axes = []
        for t in self.tunables:
            values = tuple(grid.get(t.name, t.values))
            bad = [v for v in values if not any(_same(v, a) for a in t.values)]
            if bad:
                raise ValueError(
                    f"{self.name!r} parameter {t.name!r} accepts {', '.join(map(repr, t.values))}; "
                    f"got {', '.join(map(repr, bad))}"
                )
            axes.append([(t.name, v) for v in values])
        return [dict(combo) for combo in itertools.product(*axes)]

    def build(self, spec: ConvSpec, direction: str, params: Mapping[str, Any] | None = None) -> Launch:
        """The launch of this algorithm on ``spec`` with ``params`` (defaults where not given).

        The caller has checked :meth:`can_run` (with the same ``params``).
        """
        if not self.tunables:
            if params:
                self.resolve(spec, direction, params)  # raises: names no tunable
            return self.plan(spec, direction)
        return self.plan(spec, direction, self.resolve(spec, direction, params))


def _same(a: Any, b: Any) -> bool:
    """Equal and of one type: ``2.0`` or ``True`` is not the value ``2`` or ``1``."""
    return type(a) is type(b) and a == b


class WallTimer:
    """Host wall-clock timer (``perf_counter``), for CPU backends.

    ``start()`` then ``stop()`` returns the seconds between them; the GPU
    backends return a timer built on device events instead.
    """

    __slots__ = ("_t0",)

    def start(self) -> None:
        """Record the start time."""
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        """Seconds since :meth:`start`."""
        return time.perf_counter() - self._t0


class Backend(abc.ABC):
    """Base class of convsuite backends.

    A backend either lists :class:`Algorithm` records (override
    :meth:`algorithm_table`) or, in the older style, overrides
    :meth:`forward`/:meth:`backward` (and :meth:`can_run`) directly; the
    front end only calls :meth:`plan`, which works for both.

    Attributes
    ----------
    name : str
        Registry name, e.g. ``"numpy"``.
    device : str
        ``"cpu"`` or ``"gpu"``.
    priority : int
        Order of ``list_backends()``; ``backend="auto"`` breaks ties with it.
    algorithms : tuple of str
        Names accepted by ``algorithm=``; the first is the default.
    description : str
        One line for ``list_backends()`` and ``convsuite info``.
    single_core : bool
        Whether every kernel runs on the calling thread alone (no thread
        pool, BLAS at one thread). Measured selection prefers such a
        backend when its median is within 5% of a multicore fastest.
    dtypes : tuple of str
        The dtypes its kernels compute in (what :meth:`warm_up` accepts);
        :data:`COMPUTE_DTYPES` by default.
    """

    name: ClassVar[str]
    device: ClassVar[str] = "cpu"
    priority: ClassVar[int] = 0
    algorithms: ClassVar[tuple[str, ...]] = ("direct",)
    description: ClassVar[str] = ""
    single_core: ClassVar[bool] = False
    dtypes: ClassVar[tuple[str, ...]] = COMPUTE_DTYPES

    # --- algorithms ----------------------------------------------------

    def algorithm_table(self) -> Mapping[str, Algorithm] | None:
        """The backend's algorithm records by name, or None for an old-style backend."""
        return None

    def available(self) -> Verdict:
        """Whether the backend can run on this machine, or why not."""
        return True

    def can_run(
        self, spec: ConvSpec, algorithm: str, direction: str, params: Mapping[str, Any] | None = None
    ) -> Verdict:
        """Whether ``algorithm`` (never ``"auto"``) can run this case (with ``params``), or why not."""
        table = self.algorithm_table()
        if table is None:
            return True
        record = table.get(algorithm)
        if record is None:
            return f"unknown algorithm {algorithm!r}; {self.name!r} has {', '.join(table)}"
        return record.can_run(spec, direction, params)

    def tunables(self, algorithm: str) -> tuple[Tunable, ...]:
        """The tunable parameters of ``algorithm`` (empty for none, or an old-style backend)."""
        table = self.algorithm_table()
        record = None if table is None else table.get(algorithm)
        return () if record is None else record.tunables

    def choose_algorithm(self, spec: ConvSpec, direction: str) -> tuple[str, str]:
        """The algorithm ``algorithm="auto"`` picks for this case, and why."""
        for name in self.algorithms:
            if self.can_run(spec, name, direction) is True:
                reason = "the only algorithm" if len(self.algorithms) == 1 else "first that can run"
                return name, reason
        return self.algorithms[0], "no algorithm can run this case"

    def plan(self, spec: ConvSpec, algorithm: str, direction: str, params: Mapping[str, Any] | None = None) -> Launch:
        """A callable that runs ``algorithm`` on operands of ``spec`` (see :data:`Launch`).

        ``params`` sets some of the algorithm's tunable parameters (the rest
        take their defaults). The caller has checked :meth:`can_run`. The
        default builds it from the algorithm record, or wraps
        :meth:`forward`/:meth:`backward`.
        """
        table = self.algorithm_table()
        if table is not None:
            return table[algorithm].build(spec, direction, params)
        if params:
            raise ValueError(f"`params`: backend {self.name!r} declares no tunable parameters; got {dict(params)!r}")
        self._check_old_style(direction)
        if direction == "forward":
            return lambda x, w, bias, out: self.forward(spec, x, w, bias, out, algorithm)
        return lambda gy, x, w, gx, gw, gb: self.backward(spec, gy, x, w, gx, gw, gb, algorithm)

    def _check_old_style(self, direction: str) -> None:
        """Raise unless a backend without algorithm records overrides the method of ``direction``.

        The default :meth:`plan` wraps :meth:`forward`/:meth:`backward` and
        their defaults call :meth:`plan`: a backend overriding neither would
        recurse until ``RecursionError``.
        """
        method = "forward" if direction == "forward" else "backward"
        if getattr(type(self), method) is getattr(Backend, method):
            raise NotImplementedError(
                f"backend {self.name!r} must implement `plan` (or `algorithm_table`) or `{method}` to run "
                f"{direction}; {type(self).__name__} implements none of them"
            )

    def forward(self, spec: ConvSpec, x: Any, w: Any, bias: Any, out: Any, algorithm: str) -> None:
        """Write ``conv(x, w) + bias`` into ``out`` (shape ``spec.y_shape``)."""
        self.plan(spec, algorithm, "forward")(x, w, bias, out)

    def backward(
        self,
        spec: ConvSpec,
        grad_y: Any,
        x: Any,
        w: Any,
        grad_x: Any,
        grad_w: Any,
        grad_b: Any,
        algorithm: str,
    ) -> None:
        """Write the gradients of ``sum(y * grad_y)`` into the three buffers."""
        self.plan(spec, algorithm, "backward")(grad_y, x, w, grad_x, grad_w, grad_b)

    # --- device protocol -------------------------------------------------

    def array_module(self):
        """The array library of this backend's device (numpy for CPU backends)."""
        return np

    def owns(self, array: Any) -> bool:
        """Whether ``array`` already lives on this backend's device."""
        return isinstance(array, np.ndarray)

    def is_c_contiguous(self, array: Any) -> bool:
        """Whether ``array``, of this backend's array type, is C-contiguous (asked on every call of a plan)."""
        return array.flags.c_contiguous

    def c_contiguity_test(self) -> Callable[[Any], bool]:
        """The callable a plan asks on every call whether an operand is C-contiguous.

        :meth:`is_c_contiguous` by default; a backend whose array type keeps
        the flag as an attribute may return a C-level reader of it instead
        (no Python frame per operand).
        """
        return self.is_c_contiguous

    def to_device(self, array: Any) -> Any:
        """``array`` (a NumPy array) moved to this backend's device."""
        return array

    def to_host(self, array: Any) -> np.ndarray:
        """``array`` from this backend's device as a NumPy array."""
        return np.asarray(array)

    def synchronize(self) -> None:
        """Wait until work queued on the device has finished (no-op on the CPU)."""
        return None  # CPU backends run synchronously; GPU backends override this

    def timer(self) -> WallTimer:
        """A fresh timer whose ``start()``/``stop()`` bracket device work."""
        return WallTimer()

    def ieee_padding(self, spec: ConvSpec, algorithm: str, direction: str) -> bool:
        """Whether ``algorithm`` multiplies padding zeros like any other input (IEEE, as torch).

        Kernels that skip halo taps instead (faster) answer False, and the
        front end then applies the fix-up of :mod:`convsuite._nonfinite` after
        them, with the backend's own array module, when an operand is
        non-finite. Default: False (the fix-up is idempotent, so it is always
        correct).
        """
        return False

    def skips_input_grad(self, spec: ConvSpec, algorithm: str) -> bool:
        """Whether ``algorithm`` plans ``"backward+weights"``: dW and db only, ``grad_x`` untouched.

        ``conv2d_backward(..., input_grad=False)`` then saves dX's work (a
        network's first layer); otherwise the front end runs the full
        backward and drops ``grad_x``. Default: False.
        """
        return False

    def workspace_bytes(self, spec: ConvSpec, algorithm: str, direction: str) -> int:
        """Host bytes of scratch memory one call allocates beyond its outputs.

        The front end counts it with the outputs and operand copies against
        available memory before anything is allocated. Default: none.
        """
        return 0

    def memory_limit(self) -> int | None:
        """Bytes this device can hold for outputs, or None to use host memory checks."""
        return None

    def warm_up(self, dtype: Any = None) -> float:
        """Compile or load whatever the first call in ``dtype`` would; returns the seconds spent.

        Parameters
        ----------
        dtype : str, numpy dtype or type, or None
            One of :attr:`dtypes` (byte order is not a dtype: ``'>f4'`` is
            float32); None warms every one of them.

        Returns
        -------
        float
            Seconds spent (close to 0 where nothing is compiled, or already was).

        Raises
        ------
        TypeError
            ``dtype`` names no NumPy dtype.
        ValueError
            ``dtype`` is a dtype this backend does not compute in.

        Notes
        -----
        A backend that compiles overrides :meth:`_warm_up`, called once per
        checked dtype, so every backend accepts and refuses the same values.
        """
        chosen = self.warm_up_dtypes(dtype)
        start = time.perf_counter()
        for each in chosen:
            self._warm_up(each)
        return time.perf_counter() - start

    def warm_up_dtypes(self, dtype: Any) -> tuple[np.dtype, ...]:
        """The native dtypes :meth:`warm_up` of ``dtype`` prepares: all of :attr:`dtypes` for None.

        Raises
        ------
        TypeError
            ``dtype`` names no NumPy dtype.
        ValueError
            ``dtype`` is a dtype this backend does not compute in.
        """
        if dtype is None:
            return tuple(np.dtype(name) for name in self.dtypes)
        accepted = (
            f"`dtype` must be {' or '.join(map(repr, self.dtypes))} (what backend {self.name!r} computes in; "
            "any byte order, or the NumPy types) or None (all of them)"
        )
        try:
            resolved = np.dtype(dtype)
        except (TypeError, ValueError):  # not a dtype at all ('junk', 5, a malformed spec string)
            raise TypeError(f"{accepted}; got {dtype!r}") from None
        # The name leaves out byte order: '>f4' is float32, and the kernels get native copies.
        if resolved.name not in self.dtypes:
            raise ValueError(f"{accepted}; got {dtype!r}")
        return (np.dtype(resolved.name),)

    def _warm_up(self, dtype: np.dtype) -> None:
        """Compile or load what a first call in the native ``dtype`` would (nothing by default)."""
        return None

    def compiled_modules(self) -> dict:
        """Seconds each configuration's module took to build in this process (empty: none is compiled).

        A backend that compiles one module per parameter configuration (the
        ``-D`` constants of the cupy backend) returns ``{key: seconds}``, so
        a sweep can report build time apart from run time.
        """
        return {}

    def compile_cache(self) -> dict | None:
        """Where compiled configurations persist across processes, or None when nothing is compiled."""
        return None

    def __repr__(self) -> str:
        return f"<convsuite backend {self.name!r} ({self.device})>"
