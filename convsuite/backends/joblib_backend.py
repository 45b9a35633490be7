"""The ``joblib`` backend: the single-core Cython kernels over independent pieces.

Every algorithm here is an algorithm of the ``cython`` backend (``direct``
and ``gemm``), run unchanged on pieces of the call: each piece is planned as
a convolution of its own (:class:`~convsuite._spec.ConvSpec`) and launched
through the Cython backend's own record, so the joblib rung runs exactly the
kernels of the single-core rung, with their tunables, and
``algorithm="auto"`` follows the Cython rule (:meth:`JoblibBackend.choose_algorithm`).

The Cython kernels release the GIL, so plain threads run them in parallel.
One call is cut into independent pieces of work: batch slices when the batch
is large enough to keep every worker busy, else output rows (2-D) or output
segments (1-D) of the images, each with the input rows it reads (its halo)
and its own padding (:mod:`convsuite._tiling`). No joblib
backend is named here, so ``joblib.parallel_config(backend=...)`` picks
threads, processes (loky) or a Dask cluster; with no configuration active
the default is threads, with :func:`convsuite.get_num_threads` workers.
Threads run the pieces on a persistent pool of that size, every other
backend under ``joblib.Parallel`` (:class:`_Runner` says why). The ``gemm`` pieces call BLAS on
one thread each (the Cython launch limits it): the workers are the parallelism.

A piece is sent to a worker as its algorithm name, its spec and its
parameter values (all picklable) and planned there once (a per-process
cache), which is what lets the same code run in worker processes. How many
pieces each worker gets is every algorithm's tunable ``pieces_per_worker``
(default :data:`PIECES_PER_WORKER`). Backward: batch pieces give disjoint
slices of ``grad_x``; row pieces give overlapping slab gradients that are
summed, and every piece's weight and bias gradients are summed.
"""

from __future__ import annotations

import functools
from concurrent.futures import wait
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from .._spec import ConvSpec
from .._thread_pools import shared_pool
from .._threads import get_num_threads
from .._tiling import even_bounds, pieces
from .base import Algorithm, Backend, Launch, Tunable, Verdict
from .cython_backend import CythonBackend

__all__ = ["JoblibBackend", "PieceTask", "backward_piece", "forward_piece"]

#: The Cython backend whose algorithms run on the pieces.
#: Pieces per worker: a few, so that a slow worker (a shared machine) is balanced by the others.
PIECES_PER_WORKER = 2
#: Cython algorithms that call BLAS: one limit to one BLAS thread is held over all their pieces.
_CALLS_BLAS = frozenset({"gemm"})

_PIECES = Tunable(
    "pieces_per_worker",
    (1, 2, 4, 8, 16),
    PIECES_PER_WORKER,
    "pieces of work (batch slices, or row/segment slabs with their halo) per worker: "
    "more balance a slow worker, fewer copy fewer halos and dispatch fewer tasks",
)


@functools.cache
def _cython() -> CythonBackend:
    """The Cython backend whose kernels the pieces run: this rung's own instance, so it needs no registry."""
    return CythonBackend()


@dataclass(frozen=True)
class PieceTask:
    """What a worker needs to plan one piece: picklable, and a cache key.

    Attributes
    ----------
    algorithm : str
        The Cython algorithm (``"direct"`` or ``"gemm"``).
    spec : ConvSpec
        The piece as a 2-D convolution of its own (its batch, or its slab with its padding).
    params : tuple of (str, object)
        The Cython algorithm's parameter values, sorted by name.
    """

    algorithm: str
    spec: ConvSpec
    params: tuple


@functools.lru_cache(maxsize=512)
def _launch(task: PieceTask, direction: str) -> Launch:
    """The Cython backend's launch of one piece, planned once per process."""
    return _cython().plan(task.spec, task.algorithm, direction, dict(task.params))


def forward_piece(task: PieceTask, x, w, bias, out=None):
    """Run the Cython forward kernel of ``task`` on one piece; returns its output, or writes ``out`` (shared memory)."""
    target = np.empty(task.spec.y_shape, dtype=x.dtype) if out is None else out
    _launch(task, "forward")(np.ascontiguousarray(x), w, bias, target)  # a row slab is a copy
    return target if out is None else None


def backward_piece(task: PieceTask, grad_y, x, w):
    """Run the Cython backward kernel of ``task`` on one piece; returns ``(grad_x, grad_w, grad_b)`` of it."""
    x = np.ascontiguousarray(x)
    grad_x = np.empty_like(x)
    grad_w = np.empty_like(w)
    grad_b = np.empty(w.shape[0], dtype=w.dtype)
    _launch(task, "backward")(np.ascontiguousarray(grad_y), x, w, grad_x, grad_w, grad_b)
    return grad_x, grad_w, grad_b


def _along(axis: int, lo: int, hi: int) -> tuple:
    """The index of ``[lo, hi)`` along spatial ``axis`` (0: rows, 1: columns) of a ``(B, C, H, W)`` array."""
    return (slice(None), slice(None)) + ((slice(lo, hi),) if axis == 0 else (slice(None), slice(lo, hi)))


def _shares_memory(parallel) -> bool:
    """Whether the workers of ``parallel`` see this process's arrays (threads), so pieces can write in place."""
    return bool(getattr(getattr(parallel, "_backend", None), "supports_sharedmem", False))


def _parallel():
    """``joblib.Parallel`` under the active ``parallel_config``; threads when none is active."""
    import joblib
    from joblib.parallel import get_active_backend

    # prefer="threads" is only a hint: a backend set by parallel_config wins.
    # The kernels release the GIL, so threads need no copies and start at once.
    _, n_jobs = get_active_backend()
    return joblib.Parallel(prefer="threads", n_jobs=n_jobs if n_jobs is not None else get_num_threads())


class _Runner:
    """Runs the pieces of one call the way the active ``parallel_config`` says.

    Processes (loky), a Dask cluster or any other backend: ``joblib.Parallel``.
    joblib's own threading backend (the default here): the same number of
    threads, from a persistent pool whose futures the caller waits on. Why
    not ``Parallel`` there: its result loop sleeps 10 ms whenever the next
    result is not ready, so every call paid up to 10 ms (measured 10.4 ms
    for two empty pieces with joblib 1.6, against 30-100 ms calls on the
    ECE408 layers), and it starts a new pool per call.
    """

    def __init__(self):
        from joblib.parallel import ThreadingBackend

        self.parallel = _parallel()
        self.workers = max(self.parallel._effective_n_jobs(), 1)
        self.threads = type(self.parallel._backend) is ThreadingBackend
        self.shares_memory = _shares_memory(self.parallel)

    def __call__(self, jobs) -> list:
        """The results of ``jobs`` (``joblib.delayed`` calls), in order; a piece's error is raised as it was."""
        if not self.threads:
            return self.parallel(jobs)
        if self.workers == 1:
            return [function(*args, **kwargs) for function, args, kwargs in jobs]
        pool = shared_pool("joblib", self.workers)
        futures = [pool.submit(function, *args, **kwargs) for function, args, kwargs in jobs]
        try:
            return [f.result() for f in futures]
        finally:
            for f in futures:  # on an error, drop what has not started; wait for what has (it writes our buffers)
                f.cancel()
            wait(futures)


def _one_blas_thread(algorithm: str):
    """The one-BLAS-thread limit held over a whole call of a BLAS algorithm (not set and lifted per piece)."""
    if algorithm not in _CALLS_BLAS:
        return nullcontext()
    from ._blas_threads import one_blas_thread

    return one_blas_thread()


@dataclass(frozen=True)
class _Cut:
    """One call cut for a number of workers: batch spans, or row pieces along one axis."""

    batch: list | None  # [((a, b), task)], or None: row pieces
    axis: int
    rows: list  # [(piece, task or None)] (None: the piece reads only padding)


class JoblibBackend(Backend):
    """The Cython algorithms on independent pieces of the work, under the joblib backend configured."""

    name = "joblib"
    device = "cpu"
    # Below cython: "auto" never prefers it (its overhead loses on small
    # calls); ask for it by name, or let measured selection pick it.
    priority = 15
    algorithms = ("direct", "gemm", "depthwise")
    description = "Cython kernels (GIL released) on batch or row pieces under the joblib backend configured (threads)"

    def available(self) -> Verdict:
        """True when joblib is installed and the Cython backend is available, else why not."""
        try:
            import joblib  # noqa: F401
        except ImportError as exc:
            return f"joblib is not installed; `pip install joblib` ({exc})"
        verdict = _cython().available()
        if verdict is not True:
            return f"the Cython backend is unavailable: {verdict}"
        return True

    # --- the algorithm records -------------------------------------------------

    def algorithm_table(self):
        """One record per Cython algorithm: its checks and tunables, plus ``pieces_per_worker``."""
        table = self.__dict__.get("_table")
        if table is None:
            table = self.__dict__["_table"] = {
                name: self._record(record) for name, record in _cython().algorithm_table().items()
            }
        return table

    def _record(self, cy: Algorithm) -> Algorithm:
        """The joblib record over the Cython record ``cy``."""

        def plan(spec: ConvSpec, direction: str, params: Mapping[str, Any]) -> Launch:
            return self._plan(cy.name, spec, direction, params)

        def constraint(spec: ConvSpec, direction: str, params: Mapping[str, Any]) -> Verdict:
            return cy.check_params(spec, direction, _kernel_params(params))

        return Algorithm(
            name=cy.name,
            summary=f"the Cython {cy.name!r} kernel on batch or row pieces, run by the configured joblib backend",
            plan=plan,
            directions=cy.directions,
            ndims=cy.ndims,
            check=cy.check,
            tunables=(*cy.tunables, _PIECES),
            constraint=constraint,
        )

    def choose_algorithm(self, spec: ConvSpec, direction: str) -> tuple[str, str]:
        """The Cython rule (:meth:`CythonBackend.choose_algorithm`): each piece runs what one core would."""
        name, why = _cython().choose_algorithm(spec, direction)
        return name, f"the Cython rule: {why}"

    def _plan(self, algorithm: str, spec: ConvSpec, direction: str, params) -> Launch:
        """The launch of one call, cut into ``params["pieces_per_worker"]`` pieces per worker."""
        per_worker = params["pieces_per_worker"]
        kernel_params = tuple(sorted(_kernel_params(params).items()))
        cuts: dict[int, _Cut] = {}  # by worker count, known only at call time (parallel_config)

        def cut(workers: int) -> _Cut:
            found = cuts.get(workers)
            if found is None:
                found = cuts[workers] = self._cut(algorithm, spec.as_2d(), kernel_params, workers, per_worker)
            return found

        if direction == "forward":
            return lambda x, w, bias, out: self._forward(spec, algorithm, cut, x, w, bias, out)
        return lambda gy, x, w, gx, gw, gb: self._backward(spec, algorithm, cut, gy, x, w, gx, gw, gb)

    # --- how a call is cut ---------------------------------------------------

    @staticmethod
    def _batch_bounds(spec: ConvSpec, workers: int, per_worker: int) -> list[int] | None:
        """Batch boundaries when the batch alone gives every worker work, else None."""
        if spec.batch < workers:
            return None
        return even_bounds(spec.batch, workers * per_worker)

    @staticmethod
    def _row_pieces(s: ConvSpec, workers: int, per_worker: int):
        """Pieces of the last-but-one axis of the 2-D view: rows (2-D) or, for 1-D, segments."""
        axis = 0 if s.out_size[0] > 1 else 1  # a 1-D problem as 2-D has one output row
        bounds = even_bounds(s.out_size[axis], workers * per_worker)
        return axis, pieces(
            bounds, s.in_size[axis], s.padding[axis][0], s.kernel_size[axis], s.stride[axis], s.dilation[axis]
        )

    def _cut(self, algorithm: str, s: ConvSpec, kernel_params: tuple, workers: int, per_worker: int) -> _Cut:
        """Batch spans or row pieces of the 2-D spec ``s``, each with the task that plans it."""
        bounds = self._batch_bounds(s, workers, per_worker)
        if bounds is not None:
            spans = [(a, b) for a, b in zip(bounds, bounds[1:])]
            tasks = [PieceTask(algorithm, replace(s, batch=b - a), kernel_params) for a, b in spans]
            return _Cut(list(zip(spans, tasks)), 0, [])
        axis, cuts = self._row_pieces(s, workers, per_worker)
        rows = []
        for p in cuts:
            if p.in_size == 0:  # only padding under these outputs
                rows.append((p, None))
                continue
            piece = replace(
                s,
                in_size=_set(s.in_size, axis, p.in_size),
                out_size=_set(s.out_size, axis, p.out_size),
                padding=_set(s.padding, axis, (p.pad_before, p.pad_after)),
            )
            rows.append((p, PieceTask(algorithm, piece, kernel_params)))
        return _Cut(None, axis, rows)

    # --- directions --------------------------------------------------------------

    def _forward(self, spec, algorithm, cut, x, w, bias, out) -> None:
        """Write ``conv(x, w) + bias`` into ``out``, cut into batch or row pieces run under joblib."""
        s = spec.as_2d()
        x, w, out = x.reshape(s.x_shape), w.reshape(s.w_shape), out.reshape(s.y_shape)
        run = _Runner()
        plan = cut(run.workers)
        with _one_blas_thread(algorithm):
            if plan.batch is not None:
                if run.shares_memory:  # threads: each piece writes its own batch slice of `out`
                    run([_delayed(forward_piece)(t, x[a:b], w, bias, out[a:b]) for (a, b), t in plan.batch])
                    return
                results = run([_delayed(forward_piece)(t, x[a:b], w, bias) for (a, b), t in plan.batch])
                for ((a, b), _), part in zip(plan.batch, results):
                    out[a:b] = part
                return
            jobs, targets = [], []
            for p, task in plan.rows:
                index = _along(plan.axis, p.out_lo, p.out_hi)
                if task is None:  # only padding under these outputs: the bias
                    out[index] = 0 if bias is None else bias.reshape(-1, 1, 1)
                    continue
                jobs.append(_delayed(forward_piece)(task, x[_along(plan.axis, p.in_lo, p.in_hi)], w, bias))
                targets.append(index)
            for index, part in zip(targets, run(jobs)):
                out[index] = part

    def _backward(self, spec, algorithm, cut, grad_y, x, w, grad_x, grad_w, grad_b) -> None:
        """Fill ``grad_x``, ``grad_w`` and ``grad_b`` from ``grad_y``, pieces run under joblib and summed."""
        s = spec.as_2d()
        grad_y, x, w = grad_y.reshape(s.y_shape), x.reshape(s.x_shape), w.reshape(s.w_shape)
        grad_x, grad_w = grad_x.reshape(s.x_shape), grad_w.reshape(s.w_shape)
        run = _Runner()
        plan = cut(run.workers)
        grad_w[...] = 0
        grad_b[...] = 0
        # Non-finite operands give NaN and inf by IEEE rules, as the kernels do: no warnings.
        with np.errstate(invalid="ignore", over="ignore"), _one_blas_thread(algorithm):
            if plan.batch is not None:
                results = run([_delayed(backward_piece)(t, grad_y[a:b], x[a:b], w) for (a, b), t in plan.batch])
                for ((a, b), _), (gx, gw, gb) in zip(plan.batch, results):
                    grad_x[a:b] = gx
                    grad_w += gw
                    grad_b += gb
                return
            grad_x[...] = 0
            jobs, slabs = [], []
            for p, task in plan.rows:
                y_index = _along(plan.axis, p.out_lo, p.out_hi)
                if task is None:  # outputs of pure padding: only the bias saw them
                    grad_b += grad_y[y_index].sum(axis=(0, 2, 3), dtype=grad_b.dtype)
                    continue
                x_index = _along(plan.axis, p.in_lo, p.in_hi)
                jobs.append(_delayed(backward_piece)(task, grad_y[y_index], x[x_index], w))
                slabs.append(x_index)
            # Neighbouring slabs share their halo: their input gradients add up there.
            for x_index, (gx, gw, gb) in zip(slabs, run(jobs)):
                grad_x[x_index] += gx
                grad_w += gw
                grad_b += gb


def _kernel_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters the Cython kernel takes: all but ``pieces_per_worker``."""
    return {k: v for k, v in params.items() if k != _PIECES.name}


def _set(values: tuple, axis: int, value) -> tuple:
    """``values`` with entry ``axis`` replaced."""
    return tuple(value if i == axis else v for i, v in enumerate(values))


def _delayed(function):
    import joblib

    return joblib.delayed(function)
