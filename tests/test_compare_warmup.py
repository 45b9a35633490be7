"""compare's measurement: every contender warm before its timed calls, contenders interleaved, drift flagged."""

from __future__ import annotations

import time

import numpy as np
import pytest

import convsuite as cs
from convsuite._timing import Timing
from convsuite.backends.base import Backend
from convsuite.bench import measure as measure_module
from convsuite.bench.ceilings import Ceilings
from convsuite.bench.measure import measure_case
from convsuite.bench.timing import round_drift, warm_up
from convsuite.bench.workloads import Case

FIXED = Ceilings(device="cpu", copy_gbs=20.0, gemm_gflops=100.0, how="fixed for tests")
SMALL = Case("test", "3x3 C4->8 16x16 B=2", "conv2d", (2, 4, 16, 16), (8, 4, 3, 3), padding="same")


class Scripted:
    """A contender whose n-th call "takes" ``times[n]`` seconds on its own clock (the last one thereafter)."""

    def __init__(self, times):
        self.times, self.calls = list(times), 0

    def run(self):
        self.calls += 1

    def timer(self):
        owner = self

        class Clock:
            def start(clock):
                clock.at = owner.calls

            def stop(clock):
                return owner.times[min(clock.at, len(owner.times) - 1)]

        return Clock()


def test_warm_up_lasts_until_the_time_per_call_stops_falling():
    # A JIT compile, then a few slow calls (cold caches, pools starting), then steady at 1 ms.
    script = Scripted([2.0, 0.05, 0.03, 0.02, 0.01, 0.005, 0.002, 0.001])
    warm = warm_up(script.run, script.timer, block_s=0.0)
    assert warm.first_call_s == 2.0 and warm.stable
    assert warm.per_call_s == 0.001
    # Not stopped while the time still fell: the window before the last one was already at 1 ms or near it.
    assert script.calls >= 1 + 7 + 3


def test_long_calls_settle_on_windows_of_two():
    """A call of a fifth of a second is steady on its own: four blocks, not six, once it stops falling."""
    slow = Scripted([1.0, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2])
    warm = warm_up(slow.run, slow.timer, block_s=0.0)
    assert warm.stable and warm.calls == 4


def test_warm_up_stops_at_its_cap_and_says_so():
    falling = Scripted([1.0 * 0.7**n for n in range(100)])  # never settles
    warm = warm_up(falling.run, falling.timer, block_s=0.0, max_blocks=8)
    assert not warm.stable and warm.calls == 8


def test_warm_up_does_not_wait_out_noise_that_only_adds_time():
    noisy = Scripted([0.5, *([0.001, 0.003, 0.001, 0.001, 0.004, 0.001] * 10)])
    warm = warm_up(noisy.run, noisy.timer, block_s=0.0)
    assert warm.stable and warm.calls <= 12


def _timing(samples):
    return Timing(0.0, float(np.median(samples)), min(samples), max(samples), 0.0, len(samples), samples=tuple(samples))


def test_round_drift_flags_a_trend_and_not_one_slow_round():
    assert "still warming up" in round_drift(_timing([8e-3, 8.2e-3, 5e-3, 5.1e-3, 2e-3, 2.1e-3]), 3)
    assert "busier" in round_drift(_timing([1e-3, 1e-3, 2e-3, 2e-3, 4e-3, 4e-3]), 3)
    assert round_drift(_timing([1e-3, 1e-3, 1.2e-3, 1.2e-3, 1.6e-3, 1.6e-3]), 3) is None  # a small rise: noise
    assert round_drift(_timing([1e-3, 1e-3, 9e-3, 9e-3, 1.05e-3, 1e-3]), 3) is None  # one disturbed block
    assert round_drift(_timing([1e-3, 1.1e-3, 1.05e-3, 1e-3, 1.08e-3, 1e-3]), 3) is None  # steady
    assert round_drift(_timing([3e-3, 1e-3]), 1) is None  # one round: no trend to see


class ColdStart(Backend):
    """numpy's answer, with the first calls slow (a JIT compile, then cold caches), as numba's on a fresh machine."""

    name = "cold_start"
    algorithms = ("im2col",)
    description = "numpy, slow until warm"
    slow_calls = 6

    def __init__(self):
        self.calls = 0

    def forward(self, spec, x, w, bias, out, algorithm):
        from convsuite.backends.numpy_backend import NumpyBackend

        self.calls += 1
        if self.calls <= self.slow_calls:
            time.sleep(0.3 if self.calls == 1 else 0.06)
        NumpyBackend().forward(spec, x, w, bias, out, "im2col")


@pytest.fixture
def cold_backend():
    backend = ColdStart()
    cs.register_backend(backend)
    yield backend
    cs.unregister_backend(backend.name)


def test_compilation_and_cold_calls_stay_out_of_the_timed_rounds(cold_backend):
    """The first run's wrong winner: slow early calls used to be timed (the first call apart, one warm-up)."""
    (r,) = measure_case(SMALL, [("cold_start", "backend")], "float32", 5, FIXED)
    assert r.status == "ok" and r.error_ok
    assert r.first_call_s >= 0.3  # the compile, reported apart
    assert r.warmup_calls >= ColdStart.slow_calls - 1 and r.warmup_s >= 0.25  # the cold calls, reported apart
    assert r.warmup_stable
    assert r.end_to_end_range_s[1] < 0.03  # no timed call was a cold one (they slept 60 ms)
    assert "still warming" not in r.drift  # (a busier machine may still show: noise only adds time)


def test_the_contenders_of_a_case_are_warmed_then_timed_interleaved(monkeypatch):
    events = []
    real_warm, real_measure = measure_module.warm_up, measure_module.measure_side_by_side

    def spy_warm(run, *args, **kwargs):
        events.append("warm")
        return real_warm(run, *args, **kwargs)

    def spy_measure(contenders, **settings):
        events.append(("timed", len(contenders), settings["rounds"]))
        return real_measure(contenders, **settings)

    monkeypatch.setattr(measure_module, "warm_up", spy_warm)
    monkeypatch.setattr(measure_module, "measure_side_by_side", spy_measure)
    contenders = [("numpy", "backend"), ("cython", "backend"), ("np.convolve", "anchor")]
    results = measure_case(SMALL, contenders, "float32", 6, FIXED)
    ran = [r for r in results if r.status == "ok"]
    assert [r.contender for r in results] == ["numpy", "cython", "np.convolve"]
    assert results[2].status == "skipped"  # a 1-D anchor on a 2-D case: not timed, not warmed
    # Every contender that runs is warmed first, then all are timed together: one interleaved measurement.
    assert events == ["warm"] * len(ran) + [("timed", len(ran), 3)]
    assert all(r.rounds == 3 and r.repeats == 6 and r.warmup_calls > 0 for r in ran)


def test_a_contender_still_drifting_is_flagged_in_the_table(monkeypatch, cold_backend):
    import io

    from rich.console import Console

    from convsuite.bench.report import print_table

    cold_backend.slow_calls = 10**9  # every call slow ...
    times = iter(0.04 * 0.7**n for n in range(10**6))  # ... and faster than the one before: it never settles
    real_sleep = time.sleep

    def falling_sleep(seconds):
        real_sleep(next(times))

    monkeypatch.setattr(time, "sleep", falling_sleep)
    monkeypatch.setattr(measure_module, "warm_up", lambda run: warm_up(run, max_blocks=3, block_s=0.0))
    monkeypatch.setattr(measure_module, "settle_seconds", lambda: 0.0)
    (r,) = measure_case(SMALL, [("cold_start", "backend")], "float32", 6, FIXED)
    assert r.drift.startswith("rounds drift") and r.warmup_stable is False
    out = io.StringIO()
    print_table([r], "cold_start", "drift", {}, Console(file=out, width=100))
    assert "rounds drift" in out.getvalue() and "still unsteady" in out.getvalue()
