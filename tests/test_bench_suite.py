"""The asv suite: parameter lists that do not depend on what is installed, and skips that say why."""

from __future__ import annotations

import importlib
import inspect

import pytest

import convsuite as cs
from convsuite.bench.workloads import get_workload

MODULES = ["benchmarks.bench_conv", "benchmarks.bench_backward", "benchmarks.bench_overhead"]


def _parameterised():
    """(module, class name, params) of every parameterised benchmark class."""
    found = []
    for name in MODULES:
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if inspect.isclass(obj) and getattr(obj, "params", None) and obj.__module__ == name:
                found.append((name, attr, obj.params))
    return found


def test_every_module_has_benchmarks():
    assert {m for m, _, _ in _parameterised()} == set(MODULES)


def test_parameters_do_not_depend_on_what_is_installed(monkeypatch):
    """Reload the suite in a world with no backends and a different set: the lists must not move."""
    before = _parameterised()
    import benchmarks.common

    def no_backends():
        raise AssertionError("the benchmark parameters must not be computed from list_backends()")

    monkeypatch.setattr(cs, "list_backends", no_backends)
    try:
        for name in ["benchmarks.common", *MODULES]:
            importlib.reload(importlib.import_module(name))
        after = _parameterised()
    finally:
        monkeypatch.undo()
        for name in ["benchmarks.common", *MODULES]:
            importlib.reload(importlib.import_module(name))
    assert before == after
    assert benchmarks.common.BACKENDS is not None


def test_backend_list_is_append_only_and_complete():
    from benchmarks.common import BACKENDS

    # The history: these five in this order, forever; new names go after them.
    assert BACKENDS[:5] == ["cupy", "numba", "cython", "numpy", "python"]
    assert len(set(BACKENDS)) == len(BACKENDS)
    missing = {b.name for b in cs.list_backends()} - set(BACKENDS)
    assert not missing, f"append {sorted(missing)} to benchmarks.common.BACKENDS"


def test_cases_follow_the_compare_presets():
    from benchmarks.common import DEFAULT_BACKWARD, DEFAULT_FORWARD

    labels = {c.label for c in get_workload("default")}
    forward = {c.label for c in get_workload("default") if c.direction == "forward"}
    assert forward <= set(DEFAULT_FORWARD), "append new default-workload cases to DEFAULT_FORWARD"
    assert labels - forward <= set(DEFAULT_BACKWARD)


@pytest.mark.parametrize("backend", ["no-such-backend", "cupy"])
def test_missing_or_unavailable_backend_skips(backend):
    from benchmarks.bench_conv import Conv2DForward

    info = {b.name: b for b in cs.list_backends()}.get(backend)
    if info is not None and info.available:
        pytest.skip(f"{backend} is available here")
    with pytest.raises(NotImplementedError):
        Conv2DForward().setup(backend, "fa21-conv1 B=16", "float32")


def test_slow_backend_and_unknown_case_skip():
    from benchmarks.bench_backward import Conv2DBackwardPreset
    from benchmarks.bench_conv import Conv2DForward

    with pytest.raises(NotImplementedError, match="too slow"):
        Conv2DForward().setup("python", "3x3 C16->32 32x32 B=8", "float32")
    with pytest.raises(NotImplementedError, match="no case"):
        Conv2DBackwardPreset().setup("numpy", "a case that was renamed", "float32")


def test_a_benchmark_runs_and_times_the_right_call():
    from benchmarks.bench_backward import Conv2DBackwardPreset
    from benchmarks.bench_overhead import CallOverhead

    bench = Conv2DBackwardPreset()
    bench.setup("numpy", "fa21-conv1 B=16 backward", "float32")
    grads = bench.call()
    assert [g.shape for g in grads] == [(16, 1, 86, 86), (4, 1, 7, 7), (4,)]
    bench.time_backward("numpy", "fa21-conv1 B=16 backward", "float32")
    tiny = CallOverhead()
    tiny.setup("python", "conv1d N=64 K=3 same")
    assert tiny.call().shape == (64,)


def test_version_follows_what_is_measured_not_the_parameter_lists():
    """asv compares only results of equal versions: a changed build() must change it, an appended name not."""
    from benchmarks.common import ConvBenchmark

    class First(ConvBenchmark):
        params = (["numpy"],)

        def build(self, backend):
            return lambda: cs.conv1d([1.0, 2.0], [1.0], backend=backend)

        def time_it(self, backend):
            self.run()

    class MoreParams(ConvBenchmark):
        params = (["numpy", "a-new-backend"],)

        def build(self, backend):
            return lambda: cs.conv1d([1.0, 2.0], [1.0], backend=backend)

        def time_it(self, backend):
            self.run()

    class OtherWork(ConvBenchmark):
        params = (["numpy"],)

        def build(self, backend):
            return lambda: cs.conv1d([1.0, 2.0, 3.0], [1.0], backend=backend)

        def time_it(self, backend):
            self.run()

    assert First.version == MoreParams.version
    assert First.version != OtherWork.version
