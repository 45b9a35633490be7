"""What every convsuite benchmark shares: fixed parameter lists, setup, skipping, sync, ratios.

asv discovers the benchmarks once, from this checkout, and then runs them
against every commit it measures; results of different commits are matched
by parameter *position*. So every list here is written out and never
computed from what is installed: a backend that a commit lacks, or that
cannot run on this machine, is skipped in ``setup`` (``NotImplementedError``)
instead of changing the list. New names are appended at the end, never
inserted or removed (``tests/test_bench_suite.py`` checks this).

:class:`RatioBenchmark` is the base of the ``track_*`` ratios (convsuite
against torch, N threads against one): both sides are built and checked in
``setup`` and timed interleaved by convsuite's own measuring core.
"""

import hashlib
import inspect
import os

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

#: The seed reports' layers (convsuite/bench/workloads.json, the GPU targets of the CUDA
#: write-ups): name -> x shape without the batch, w shape, keywords, and the batch on each
#: device. CPU batches are small, so one call takes milliseconds; GPU batches are the
#: reports' own (ECE408: 10,000 images). Written out here, so that a change to the
#: workload file cannot silently change what a recorded series measures.
SEED_LAYERS = {
    "fa19-conv1": ((1, 48, 48), (12, 1, 5, 5), {}, {"cpu": 16, "gpu": 10000}),
    "fa19-conv2": ((12, 22, 22), (24, 12, 5, 5), {}, {"cpu": 16, "gpu": 10000}),
    "fa21-conv1": ((1, 86, 86), (4, 1, 7, 7), {}, {"cpu": 16, "gpu": 10000}),
    "fa21-conv2": ((4, 40, 40), (16, 4, 7, 7), {}, {"cpu": 16, "gpu": 10000}),
    "3x3 C64 56x56": ((64, 56, 56), (64, 64, 3, 3), {"padding": 1}, {"cpu": 1, "gpu": 64}),
    "1x1 C96->24 56x56": ((96, 56, 56), (24, 96, 1, 1), {}, {"cpu": 2, "gpu": 64}),
    "dw3x3 s2 C144 56x56": (
        (144, 56, 56),
        (144, 1, 3, 3),
        {"stride": 2, "padding": 1, "groups": 144},
        {"cpu": 2, "gpu": 64},
    ),
}

#: Timed calls per side of a ratio, spread over ``RATIO_ROUNDS`` alternating blocks.
RATIO_REPEAT = 9
RATIO_ROUNDS = 3
#: Pause before each block. Short: with OMP_WAIT_POLICY=PASSIVE (``passive_openmp``) no
#: OpenMP pool spins after its last call, and convsuite shortens OpenBLAS's spin at import.
RATIO_SETTLE_S = 0.05


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


def seed_layer(name, device, seed=0):
    """``(x, w, bias, keywords)`` of a seed layer at its batch for ``device`` (random float32 NumPy arrays)."""
    x_shape, w_shape, keywords, batch = SEED_LAYERS[name]
    x, w, bias = random_arrays(seed, "float32", (batch[device], *x_shape), w_shape, (w_shape[0],))
    return x, w, bias, dict(keywords)


try:
    # The one definition, shared with convsuite compare and the bench harness.
    from convsuite.bench.timing import passive_openmp
except ImportError:  # a commit older than it (asv measures history): the same setting, written out

    def passive_openmp():
        """OMP_WAIT_POLICY=PASSIVE unless the user chose a policy: call before torch or numba start a pool.

        torch and numba each bring an OpenMP runtime; run side by side in one
        process, a pool that spins after its call takes cores from the other
        side's next call. Both runtimes read the variable when they load, so this
        must come before torch is imported and before numba's first parallel call
        (a fresh process per benchmark: asv's ``spawn`` launch method).
        """
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def require_torch(device="cpu"):
    """torch, set up for a fair comparison on ``device`` (TF32 off, cuDNN benchmark mode); skip if absent."""
    passive_openmp()
    try:
        import torch
    except ImportError:
        raise NotImplementedError("torch is not installed (the anchor of the ratios)") from None
    if device == "gpu":
        if not torch.cuda.is_available():
            raise NotImplementedError(f"torch {torch.__version__} has no CUDA device")
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    return torch


def measuring_core():
    """convsuite's ``(Contender, measure_side_by_side)``; skip on a version without them."""
    try:
        from convsuite._timing import Contender, measure_side_by_side
    except ImportError:
        raise NotImplementedError("no measuring core (convsuite._timing) in this version of convsuite") from None
    return Contender, measure_side_by_side


class TorchEvents:
    """A timer on torch's CUDA events (its current stream), for torch's own GPU calls."""

    def __init__(self):
        import torch

        self._start = torch.cuda.Event(enable_timing=True)
        self._stop = torch.cuda.Event(enable_timing=True)

    def start(self):
        self._start.record()

    def stop(self):
        self._stop.record()
        self._stop.synchronize()
        return self._start.elapsed_time(self._stop) / 1e3


class RatioBenchmark:
    """Base class of the ``track_*`` ratios: convsuite's median time over a reference's, lower is better.

    Subclasses implement :meth:`build`, which returns the two sides as
    ``(ours, reference)``: zero-argument callables, or convsuite Contenders
    (a callable with the timer that brackets its device work). ``setup``
    builds them, runs each once (JIT compilation, kernel loading and cuDNN's
    algorithm search stay out of the samples) and leaves the check of the
    results to ``build``. The ``track_`` method returns :meth:`ratio`: both
    sides timed by convsuite's measuring core, interleaved in alternating
    blocks after a warm-up call, and the ratio of their medians. asv counts a
    rise of a tracked value as a regression, as for a time, so every ratio is
    convsuite's time over the reference's.
    """

    timeout = 300
    unit = "ratio"
    sides = None

    def __init_subclass__(cls, **kwargs):
        """Version each subclass by the code that decides what it measures (see ConvBenchmark)."""
        super().__init_subclass__(**kwargs)
        tracked = [getattr(cls, name) for name in sorted(vars(cls)) if name.startswith("track_")]
        code = [RatioBenchmark.setup, RatioBenchmark.ratio, cls.build, *tracked]
        cls.version = hashlib.sha256("".join(inspect.getsource(f) for f in code).encode()).hexdigest()

    def setup(self, *params):
        try:
            self.sides = self.build(*params)
            for side in self.sides:
                synchronize((side.run if hasattr(side, "run") else side)())
        except (cs.UnsupportedCaseError, cs.BackendUnavailableError) as exc:
            raise NotImplementedError(str(exc)) from None

    def build(self, *params):  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def ratio(self):
        """Median seconds of ``ours`` over the reference's, both measured side by side."""
        _, measure = measuring_core()
        ours, reference = self.sides
        timings = measure(
            {"ours": ours, "reference": reference},
            repeat=RATIO_REPEAT,
            rounds=RATIO_ROUNDS,
            warmup=1,
            settle_s=RATIO_SETTLE_S,
        )
        return timings["ours"].median / timings["reference"].median
