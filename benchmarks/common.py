"""What every convsuite benchmark shares: fixed parameter lists, setup, skipping, sync.

asv discovers the benchmarks once, from this checkout, and then runs them
against every commit it measures; results of different commits are matched
by parameter *position*. So every list here is written out and never
computed from what is installed: a backend that a commit lacks, or that
cannot run on this machine, is skipped in ``setup`` (``NotImplementedError``)
instead of changing the list. New names are appended at the end, never
inserted or removed (``tests/test_bench_suite.py`` checks this).
"""

import hashlib
import inspect

import numpy as np

import convsuite as cs

#: Every backend name the project has had, in the order of its history;
#: append new ones at the end.
BACKENDS = ["cupy", "numba", "cython", "numpy", "python", "joblib"]

#: The forward cases of ``convsuite compare``'s default workload, by label
#: (``convsuite.bench.workloads.get_workload("default")``): the same shapes
#: the comparison measures. A preset whose shape changes gets a new label,
#: which is appended here; the old one then skips on new commits.
DEFAULT_FORWARD = [
    "3x3 C16->32 32x32 B=8",
    "dw3x3 s2 C32 56x56 B=4",
    "fa21-conv1 B=16",
    "1-D N=1e5 K=7",
    "1-D N=1e6 K=31",
]

#: The default workload's backward case, plus one forward layer run backward.
DEFAULT_BACKWARD = [
    "3x3 C16->16 24x24 B=4 backward",
    "fa21-conv1 B=16 backward",
]

#: Multiply-adds above which the pure-Python backend is skipped (seconds per call).
PYTHON_BACKEND_MACS = 5_000_000


def synchronize(result):
    """Block until GPU work behind ``result`` is done (CuPy arrays only; CPU results are ready)."""
    first = result[0] if isinstance(result, tuple) else result
    if type(first).__module__.startswith("cupy"):
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def require_backend(name):
    """Skip (NotImplementedError) unless this commit has backend ``name`` and it is available here."""
    info = {b.name: b for b in cs.list_backends()}.get(name)
    if info is None:
        raise NotImplementedError(f"no backend {name!r} in this version of convsuite")
    if not info.available:
        raise NotImplementedError(f"{name} unavailable: {info.reason}")


def preset_case(label, direction="forward"):
    """The default workload's case of this label (a forward case run backward if asked); skip if absent."""
    try:
        from convsuite.bench.workloads import get_workload
    except ImportError:
        raise NotImplementedError("no workload presets in this version of convsuite") from None
    for case in get_workload("default"):
        if case.label == label:
            return case
        if direction == "backward" and f"{case.label} backward" == label:
            from dataclasses import replace

            return replace(case, direction="backward")
    raise NotImplementedError(f"no case {label!r} in this version's default workload")


def device_arrays(backend, *arrays):
    """The inputs on the backend's device: CuPy arrays for the GPU backend, as compare times it."""
    if backend != "cupy":
        return arrays
    import cupy

    return tuple(None if a is None else cupy.asarray(a) for a in arrays)


class ConvBenchmark:
    """Base class: build one case's inputs in ``setup``, run it once, time one call.

    Subclasses set ``params``/``param_names`` (backend first) and implement
    :meth:`build`, which returns the zero-argument call to time. The first
    call happens in ``setup``, so JIT compilation and device warm-up never
    reach a timed sample; GPU work is synchronised inside the timed call.
    """

    timeout = 300
    call = None

    def __init_subclass__(cls, **kwargs):
        """Version each subclass by the code that decides what it measures.

        asv hashes only the timed method and ``setup`` (which lives here),
        so a change to ``build`` would keep the old version and be compared
        with results of other code. The parameter lists are left out on
        purpose: appending a backend must not make history incomparable.
        """
        super().__init_subclass__(**kwargs)
        timed = [getattr(cls, name) for name in sorted(vars(cls)) if name.startswith("time_")]
        code = [ConvBenchmark.setup, ConvBenchmark.run, cls.build, *timed]
        cls.version = hashlib.sha256("".join(inspect.getsource(f) for f in code).encode()).hexdigest()

    def setup(self, backend, *args):
        require_backend(backend)
        self.call = self.build(backend, *args)
        try:
            synchronize(self.call())
        except (cs.UnsupportedCaseError, cs.BackendUnavailableError) as exc:
            raise NotImplementedError(str(exc)) from None

    def build(self, backend, *args):  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def run(self):
        """One synchronised call: what every ``time_`` method measures."""
        synchronize(self.call())


def macs(x, w, **keywords):
    """Multiply-adds of a forward call, through convsuite's own geometry."""
    return cs.explain(x, w, **keywords).spec.macs


def random_arrays(seed, dtype, *shapes):
    """Random arrays (never zeros, never np.empty) of the given shapes."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype) for shape in shapes)
