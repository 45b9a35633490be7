"""The measuring core's decisions under noise, on a scripted clock: no real timing.

Each fake contender's timer reports durations from a script (its first call,
then one per timed call), so the tests say exactly which block was disturbed
and check what :func:`convsuite._timing.measure_side_by_side` abandons and
what :func:`convsuite._timing.confirm_close_call` re-times and concludes.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import convsuite as cs
from convsuite import _tuning
from convsuite._timing import (
    NOISE_FLOOR,
    Contender,
    Timing,
    _summarise,
    confirm_close_call,
    measure_side_by_side,
    within_noise,
)
from convsuite.backends.base import Algorithm, Backend


class Script:
    """A contender whose timer reports the scripted durations, call by call; counts its runs."""

    def __init__(self, *durations, then=None):
        self._durations = iter(durations) if then is None else itertools.chain(durations, itertools.repeat(then))
        self.runs = 0
        self.timed = 0

    def run(self):
        self.runs += 1

    def timer(self):
        script = self

        class _Timer:
            def start(self):
                pass

            def stop(self):
                script.timed += 1
                return next(script._durations)

        return _Timer()

    def contender(self) -> Contender:
        return Contender(self.run, self.timer)


def _measure(scripts, **kw):
    kw = {"repeat": 6, "rounds": 3, "warmup": 0, "abandon_ratio": 3.0, **kw}
    return measure_side_by_side({name: s.contender() for name, s in scripts.items()}, **kw)


def test_one_disturbed_block_does_not_abandon_a_contender():
    """Slow through its whole first block (the other process held a core), fast after: it is kept and wins."""
    steady = Script(then=1.0)
    disturbed = Script(1.0, 10.0, 10.0, then=0.9)  # first call, then round 0's two calls, then rounds 1-2
    timings = _measure({"steady": steady, "disturbed": disturbed})
    assert not timings["disturbed"].abandoned and timings["disturbed"].repeats == 6
    assert timings["disturbed"].median == 0.9 < timings["steady"].median == 1.0
    assert timings["disturbed"].samples == (10.0, 10.0, 0.9, 0.9, 0.9, 0.9)


def test_slow_in_two_rounds_is_abandoned_after_the_second():
    fast = Script(then=1.0)
    slow = Script(then=5.0)
    timings = _measure({"fast": fast, "slow": slow})
    assert timings["slow"].abandoned and not timings["fast"].abandoned
    assert timings["slow"].repeats == 4 and slow.runs == 1 + 4  # the first call and two rounds of two
    assert timings["fast"].repeats == 6
    assert timings["slow"].median == 5.0


def test_slow_only_in_the_second_round_is_not_abandoned():
    """Only a contender over the ratio in the first round is a suspect; the second round re-times suspects."""
    fast = Script(then=1.0)
    late = Script(1.0, 1.1, 1.1, 9.0, 9.0, then=1.1)
    timings = _measure({"fast": fast, "late": late})
    assert not timings["late"].abandoned and timings["late"].repeats == 6


def test_abandon_compares_fastest_calls_of_the_same_round():
    """The best of the round sets the bar: a round where everyone is slow drops no one."""
    a = Script(1.0, 1.0, 1.0, 4.0, 4.0, then=1.0)
    b = Script(1.0, 4.0, 4.0, 4.0, 4.0, then=1.0)  # over 3x in round 0; in round 1 equal to a's slow block
    timings = _measure({"a": a, "b": b})
    assert not timings["b"].abandoned and timings["b"].repeats == 6


def test_one_round_marks_after_it_and_no_ratio_never_drops():
    fast, slow = Script(then=1.0), Script(then=5.0)
    assert _measure({"fast": fast, "slow": slow}, rounds=1, repeat=2)["slow"].abandoned
    fast, slow = Script(then=1.0), Script(then=50.0)
    timings = _measure({"fast": fast, "slow": slow}, abandon_ratio=None)
    assert not timings["slow"].abandoned and timings["slow"].repeats == 6


def test_within_noise_takes_the_larger_spread_or_the_floor():
    def t(median, iqr):
        return Timing(median, median, median, median, iqr, 5)

    assert within_noise(t(1.0, 0.0), t(1.0 + NOISE_FLOOR / 2, 0.0))
    assert not within_noise(t(1.0, 0.0), t(1.0 + 2 * NOISE_FLOOR, 0.0))
    assert within_noise(t(1.0, 0.30), t(1.25, 0.02))  # a spread of 30% makes 25% apart a coin toss
    assert within_noise(t(1.25, 0.02), t(1.0, 0.30))  # in either order
    assert not within_noise(t(1.0, 0.10), t(1.25, 0.10))


def _timing(*samples, abandoned=False):
    return _summarise(samples[0], list(samples), abandoned)


def test_close_call_is_retimed_and_decided_on_both_measurements():
    """a looked 2% faster than b; the re-timing says b is faster: on the pooled calls b wins."""
    timings = {
        "a": _timing(1.00, 1.00, 1.00, 1.01),
        "b": _timing(1.02, 1.02, 1.02, 1.02),
        "c": _timing(1.50, 1.50, 1.50, 1.50),
    }
    asked = []

    def retime(names):
        asked.append(sorted(names))
        return {"a": _timing(1.10, 1.10, 1.10, 1.10), "b": _timing(0.95, 0.95, 0.95, 0.95)}

    out = confirm_close_call(timings, retime)
    assert asked == [["a", "b"]]
    assert out["a"].retimed and out["b"].retimed and not out["c"].retimed
    assert out["a"].repeats == out["b"].repeats == 8
    assert out["b"].median < out["a"].median
    assert out["c"] == timings["c"]


def test_clear_winner_abandoned_and_lone_contenders_are_not_retimed():
    def never(names):
        raise AssertionError(f"re-timed {names}")

    clear = {"a": _timing(1.0, 1.0, 1.0, 1.0), "b": _timing(1.3, 1.3, 1.3, 1.3)}
    assert confirm_close_call(clear, never) == clear
    assert confirm_close_call({"a": _timing(1.0, 1.0, 1.0)}, never)["a"].retimed is False
    # an abandoned contender is never one of the two compared: here only one is left
    with_dropped = {"a": _timing(1.0, 1.0, 1.0, 1.0), "b": _timing(1.01, 1.01, 1.01, 1.01, abandoned=True)}
    assert confirm_close_call(with_dropped, never) == with_dropped


def test_close_call_uses_the_spread_as_the_margin():
    """20% apart but with a 40% spread: re-timed; with a tight spread it stands."""
    noisy = {"a": _timing(0.6, 1.0, 1.0, 1.4), "b": _timing(0.72, 1.2, 1.2, 1.68)}
    assert noisy["a"].iqr_rel > 0.2
    calls = []
    confirm_close_call(noisy, lambda names: calls.append(names) or {n: noisy[n] for n in names})
    assert calls == [["a", "b"]]


# --- measured selection: measure_candidates re-times a close call ---------------------------


class _Scripted(Backend):
    """A CPU backend whose one algorithm does nothing and whose timer reports a script."""

    device, priority, algorithms = "cpu", 0, ("x",)

    def __init__(self, name, script):
        self.name = name
        self.script = script

    def algorithm_table(self):
        return {"x": Algorithm("x", "does nothing", lambda spec, direction: lambda *operands: None)}

    def timer(self):
        return self.script.timer()


def test_measure_candidates_retimes_the_two_closest_and_ranks_on_both():
    spec = cs.explain(np.empty((1, 2, 6, 6), np.float32), np.empty((2, 2, 3, 3), np.float32), backend="numpy").spec
    # first measurement: a 1.00 vs b 1.02 (within the 5% floor); c far behind.
    # re-timing (a and b only): a 1.20, b 0.90 -> pooled, b is the faster.
    a = Script(1.0, 1.0, 1.0, 1.0, 1.0, then=1.2)  # first call + 4 timed calls, then the re-timing
    b = Script(1.0, 1.02, 1.02, 1.02, 1.02, then=0.9)
    c = Script(then=2.0)
    pairs = [(_Scripted(n, s), "x") for n, s in (("a", a), ("b", b), ("c", c))]
    rows = _tuning.measure_candidates(spec, "forward", pairs, repeat=4, rounds=2, min_block_s=0, settle_s=0)
    assert [row[0] for row in rows] == ["b", "a", "c"]
    assert a.timed == b.timed == 1 + 4 + 1 + 4 and c.timed == 1 + 4  # a and b timed twice, c once
    rows = _tuning.measure_candidates(
        spec, "forward", pairs, repeat=4, rounds=2, min_block_s=0, settle_s=0, confirm=False
    )
    assert c.timed == 2 * (1 + 4)


@pytest.mark.parametrize("floor", [0.0, NOISE_FLOOR])
def test_identical_contenders_are_always_a_close_call(floor):
    same = {"a": _timing(1.0, 1.0, 1.0, 1.0), "b": _timing(1.0, 1.0, 1.0, 1.0)}
    calls = []
    confirm_close_call(same, lambda names: calls.append(names) or dict(same), floor=floor)
    assert calls == [["a", "b"]]
