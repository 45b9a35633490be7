"""The ``joblib`` backend: the single-core Cython kernels over independent pieces.

The Cython kernels release the GIL, so plain threads run them in parallel.
One call is cut into independent pieces of work: batch slices when the batch
is large enough to keep every worker busy, else output rows (2-D) or output
segments (1-D) of the images, each with the input rows it reads (its halo)
and its own padding (:mod:`convsuite.distributed._tiling`). The pieces run
under ``joblib.Parallel`` with no backend named here, so
``joblib.parallel_config(backend=...)`` picks threads, processes (loky) or a
Dask cluster; with no configuration active the default is threads, with
:func:`convsuite.get_num_threads` workers.

Each piece returns its output (no writes into shared buffers), which is what
lets the same code run in worker processes. How many pieces each worker gets
is the ``direct`` algorithm's tunable ``pieces_per_worker`` (default
:data:`PIECES_PER_WORKER`). Backward: batch pieces give
disjoint slices of ``grad_x``; row pieces give overlapping slab gradients
that are summed, and every piece's weight and bias gradients are summed.
"""

from __future__ import annotations

import importlib

import numpy as np

from .._spec import ConvSpec
from .._threads import get_num_threads
from ..distributed._tiling import Piece, even_bounds, pieces
from .base import Algorithm, Backend, Launch, Tunable, Verdict

__all__ = ["JoblibBackend", "backward_piece", "forward_piece"]

_KERNELS = "convsuite._cython._conv_cy"
#: Pieces per worker: a few, so that a slow worker (a shared machine) is balanced by the others.
PIECES_PER_WORKER = 2

_PIECES = Tunable(
    "pieces_per_worker",
    (1, 2, 4, 8, 16),
    PIECES_PER_WORKER,
    "pieces of work (batch slices, or row/segment slabs with their halo) per worker: "
    "more balance a slow worker, fewer copy fewer halos and dispatch fewer tasks",
)


def _kernels():
    return importlib.import_module(_KERNELS)


def _geometry(s: ConvSpec, pad_top: int, pad_left: int) -> tuple:
    (sh, sw), (dh, dw) = s.stride, s.dilation
    return (sh, sw, dh, dw, pad_top, pad_left, s.groups)


def forward_piece(x, w, bias, out_shape, geometry, out=None):
    """Run the Cython forward kernel on one piece; returns its output, or writes ``out`` (shared memory)."""
    target = np.empty(out_shape, dtype=x.dtype) if out is None else out
    _kernels().forward(np.ascontiguousarray(x), w, bias, target, *geometry)  # a row slab is a copy
    return target if out is None else None


def _along(axis: int, lo: int, hi: int) -> tuple:
    """The index of ``[lo, hi)`` along spatial ``axis`` (0: rows, 1: columns) of a ``(B, C, H, W)`` array."""
    return (slice(None), slice(None)) + ((slice(lo, hi),) if axis == 0 else (slice(None), slice(lo, hi)))


def _shares_memory(parallel) -> bool:
    """Whether the workers of ``parallel`` see this process's arrays (threads), so pieces can write in place."""
    return bool(getattr(getattr(parallel, "_backend", None), "supports_sharedmem", False))


def backward_piece(grad_y, x, w, geometry):
    """Run the Cython backward kernel on one piece; returns ``(grad_x, grad_w, grad_b)`` of it."""
    x = np.ascontiguousarray(x)
    grad_x = np.empty_like(x)
    grad_w = np.empty_like(w)
    grad_b = np.empty(w.shape[0], dtype=w.dtype)
    _kernels().backward(np.ascontiguousarray(grad_y), x, w, grad_x, grad_w, grad_b, *geometry)
    return grad_x, grad_w, grad_b


def _parallel():
    """``joblib.Parallel`` under the active ``parallel_config``; threads when none is active."""
    import joblib
    from joblib.parallel import get_active_backend

    # prefer="threads" is only a hint: a backend set by parallel_config wins.
    # The kernels release the GIL, so threads need no copies and start at once.
    _, n_jobs = get_active_backend()
    return joblib.Parallel(prefer="threads", n_jobs=n_jobs if n_jobs is not None else get_num_threads())


class JoblibBackend(Backend):
    """The Cython kernels on independent pieces of the work under ``joblib.Parallel``."""

    name = "joblib"
    device = "cpu"
    # Below cython: "auto" never prefers it (its overhead loses on small
    # calls); ask for it by name, or let measured selection pick it.
    priority = 15
    algorithms = ("direct",)
    description = "Cython kernels (GIL released) on batch or row pieces under joblib.Parallel (threads by default)"

    def available(self) -> Verdict:
        """True when joblib is installed and the Cython extension is built, else why not."""
        try:
            import joblib  # noqa: F401
        except ImportError as exc:
            return f"joblib is not installed; `pip install joblib` ({exc})"
        try:
            _kernels()
        except ImportError as exc:
            return f"the Cython extension is not built; reinstall with `pip install .` ({exc})"
        return True

    # --- the algorithm record --------------------------------------------------

    def algorithm_table(self):
        """The one record, ``direct``, with its tunable ``pieces_per_worker``."""
        table = self.__dict__.get("_table")
        if table is None:
            record = Algorithm(
                name="direct",
                summary="the Cython direct kernel on batch or row pieces under joblib.Parallel",
                plan=self._plan,
                directions=("forward", "backward"),
                tunables=(_PIECES,),
            )
            table = self.__dict__["_table"] = {"direct": record}
        return table

    def _plan(self, spec: ConvSpec, direction: str, params) -> Launch:
        """The launch of one call, cut into ``params["pieces_per_worker"]`` pieces per worker."""
        per_worker = params["pieces_per_worker"]
        if direction == "forward":
            return lambda x, w, bias, out: self._forward(spec, x, w, bias, out, per_worker)
        return lambda gy, x, w, gx, gw, gb: self._backward(spec, gy, x, w, gx, gw, gb, per_worker)

    # --- how a call is cut ---------------------------------------------------

    @staticmethod
    def _batch_bounds(spec: ConvSpec, workers: int, per_worker: int) -> list[int] | None:
        """Batch boundaries when the batch alone gives every worker work, else None."""
        if spec.batch < workers:
            return None
        return even_bounds(spec.batch, workers * per_worker)

    @staticmethod
    def _row_pieces(s: ConvSpec, workers: int, per_worker: int) -> tuple[int, list[Piece]]:
        """Pieces of the last-but-one axis of the 2-D view: rows (2-D) or, for 1-D, segments."""
        axis = 0 if s.out_size[0] > 1 else 1  # a 1-D problem as 2-D has one output row
        bounds = even_bounds(s.out_size[axis], workers * per_worker)
        return axis, pieces(
            bounds, s.in_size[axis], s.padding[axis][0], s.kernel_size[axis], s.stride[axis], s.dilation[axis]
        )

    # --- directions --------------------------------------------------------------

    def _forward(self, spec, x, w, bias, out, per_worker: int) -> None:
        """Write ``conv(x, w) + bias`` into ``out``, cut into batch or row pieces run under joblib."""
        s = spec.as_2d()
        x, w, out = x.reshape(s.x_shape), w.reshape(s.w_shape), out.reshape(s.y_shape)
        if bias is None:
            bias = np.zeros(s.out_channels, dtype=x.dtype)
        parallel = _parallel()
        workers = max(parallel._effective_n_jobs(), 1)
        geometry = _geometry(s, s.padding[0][0], s.padding[1][0])
        bounds = self._batch_bounds(s, workers, per_worker)
        if bounds is not None:
            spans = list(zip(bounds, bounds[1:]))
            if _shares_memory(parallel):  # threads: each piece writes its own batch slice of `out`
                parallel(_delayed(forward_piece)(x[a:b], w, bias, None, geometry, out[a:b]) for a, b in spans)
                return
            results = parallel(
                _delayed(forward_piece)(x[a:b], w, bias, (b - a, *s.y_shape[1:]), geometry) for a, b in spans
            )
            for (a, b), part in zip(spans, results):
                out[a:b] = part
            return
        axis, cuts = self._row_pieces(s, workers, per_worker)
        jobs, targets = [], []
        for p in cuts:
            index = _along(axis, p.out_lo, p.out_hi)
            shape = list(s.y_shape)
            shape[2 + axis] = p.out_size
            if p.in_size == 0:  # only padding under these outputs: the bias
                out[index] = bias.reshape(-1, 1, 1)
                continue
            x_index = _along(axis, p.in_lo, p.in_hi)
            pads = [s.padding[0][0], s.padding[1][0]]
            pads[axis] = p.pad_before
            jobs.append((x[x_index], w, bias, tuple(shape), _geometry(s, *pads)))
            targets.append(index)
        for index, part in zip(targets, parallel(_delayed(forward_piece)(*job) for job in jobs)):
            out[index] = part

    def _backward(self, spec, grad_y, x, w, grad_x, grad_w, grad_b, per_worker: int) -> None:
        """Fill ``grad_x``, ``grad_w`` and ``grad_b`` from ``grad_y``, pieces run under joblib and summed."""
        s = spec.as_2d()
        grad_y, x, w = grad_y.reshape(s.y_shape), x.reshape(s.x_shape), w.reshape(s.w_shape)
        grad_x, grad_w = grad_x.reshape(s.x_shape), grad_w.reshape(s.w_shape)
        parallel = _parallel()
        workers = max(parallel._effective_n_jobs(), 1)
        geometry = _geometry(s, s.padding[0][0], s.padding[1][0])
        bounds = self._batch_bounds(s, workers, per_worker)
        grad_w[...] = 0
        grad_b[...] = 0
        # Non-finite operands give NaN and inf by IEEE rules, as the kernels do: no warnings.
        with np.errstate(invalid="ignore", over="ignore"):
            if bounds is not None:
                spans = list(zip(bounds, bounds[1:]))
                results = parallel(_delayed(backward_piece)(grad_y[a:b], x[a:b], w, geometry) for a, b in spans)
                for (a, b), (gx, gw, gb) in zip(spans, results):
                    grad_x[a:b] = gx
                    grad_w += gw
                    grad_b += gb
                return
            axis, cuts = self._row_pieces(s, workers, per_worker)
            grad_x[...] = 0
            jobs, slabs = [], []
            for p in cuts:
                y_index = _along(axis, p.out_lo, p.out_hi)
                if p.in_size == 0:  # outputs of pure padding: only the bias saw them
                    grad_b += grad_y[y_index].sum(axis=(0, 2, 3), dtype=grad_b.dtype)
                    continue
                x_index = _along(axis, p.in_lo, p.in_hi)
                pads = [s.padding[0][0], s.padding[1][0]]
                pads[axis] = p.pad_before
                jobs.append((grad_y[y_index], x[x_index], w, _geometry(s, *pads)))
                slabs.append(x_index)
            # Neighbouring slabs share their halo: their input gradients add up there.
            for x_index, (gx, gw, gb) in zip(slabs, parallel(_delayed(backward_piece)(*job) for job in jobs)):
                grad_x[x_index] += gx
                grad_w += gw
                grad_b += gb


def _delayed(function):
    import joblib

    return joblib.delayed(function)
