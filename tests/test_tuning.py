"""Measured selection: the switch, the persistent cache, explain, and the fitted rule."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest

import convsuite
import convsuite as cs
from convsuite import _rule, _tuning
from convsuite._timing import Contender, Timing, measure_side_by_side

X = np.random.default_rng(3).standard_normal((1, 2, 6, 6)).astype(np.float32)
W = np.random.default_rng(4).standard_normal((3, 2, 3, 3)).astype(np.float32)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A private tuning cache for the test, empty in memory and on disk."""
    monkeypatch.setenv(_tuning.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(_tuning.AUTOTUNE_ENV, raising=False)
    cs.set_autotune(None)  # re-read the environment
    cs.clear_tuning_cache()
    yield tmp_path
    cs.set_autotune(None)
    cs.clear_tuning_cache()


def _count_measurements(monkeypatch) -> list:
    calls = []
    real = _tuning.measure_candidates

    def counting(spec, direction, pairs, **kw):
        calls.append(len(pairs))
        return real(spec, direction, pairs, **kw)

    monkeypatch.setattr(_tuning, "measure_candidates", counting)
    return calls


# --- the switch ----------------------------------------------------------------


def test_switch_precedence(cache_dir, monkeypatch):
    assert not _tuning.autotune_enabled()
    monkeypatch.setenv(_tuning.AUTOTUNE_ENV, "1")
    assert not _tuning.autotune_enabled()  # read once, not on every call
    cs.set_autotune(None)  # ... and again here
    assert _tuning.autotune_enabled()
    cs.set_autotune(False)
    assert not _tuning.autotune_enabled()  # set_autotune beats the environment
    with cs.use_autotune(True):
        assert _tuning.autotune_enabled()  # the block beats set_autotune
        with cs.use_autotune(False):
            assert not _tuning.autotune_enabled()
        assert _tuning.autotune_enabled()
    cs.set_autotune(None)
    assert _tuning.autotune_enabled()
    with pytest.raises(TypeError, match="`enabled`"):
        cs.set_autotune("yes")


@pytest.mark.parametrize("raw, on", [("yes", True), (" ON ", True), ("0", False), ("off", False), ("", False)])
def test_environment_switch_values(cache_dir, monkeypatch, raw, on):
    monkeypatch.setenv(_tuning.AUTOTUNE_ENV, raw)
    cs.set_autotune(None)  # read the environment again
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a value it knows: no warning
        assert _tuning.autotune_enabled() is on


@pytest.mark.parametrize("raw", ["bogus", "2", "enable"])
def test_an_unknown_environment_switch_warns_and_stays_off(cache_dir, monkeypatch, raw):
    monkeypatch.setenv(_tuning.AUTOTUNE_ENV, raw)
    cs.set_autotune(None)
    with pytest.warns(UserWarning, match=f"CONVSUITE_AUTOTUNE must be one of .*; got '{raw}'; autotune stays off"):
        assert _tuning.autotune_enabled() is False
    cs.set_autotune(None)


def test_tune_names_what_keeps_a_pinned_algorithm_from_running(cache_dir):
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    with pytest.raises(cs.UnsupportedCaseError, match="numba/line1d: 'line1d' is a 1-D algorithm"):
        cs.tune(x, w, backend="numba", algorithm="line1d", budget_s=0)


@pytest.mark.parametrize("budget", [10**400, -(10**400)])
def test_tune_refuses_a_budget_beyond_float(budget):
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    with pytest.raises(ValueError, match="`budget_s` must be a finite number of seconds >= 0"):
        cs.tune(x, w, budget_s=budget)


def test_use_autotune_is_thread_local(cache_dir):
    seen = {}
    inside, release = threading.Event(), threading.Event()

    def other():
        inside.wait()
        seen["other"] = _tuning.autotune_enabled()
        release.set()

    t = threading.Thread(target=other)
    t.start()
    with cs.use_autotune(True):
        inside.set()
        release.wait()
        seen["mine"] = _tuning.autotune_enabled()
    t.join()
    assert seen == {"other": False, "mine": True}


def test_use_autotune_is_task_local(cache_dir):
    async def task(flag, started, results):
        with cs.use_autotune(flag):
            started.set()
            await asyncio.sleep(0.01)
            results[flag] = _tuning.autotune_enabled()

    async def main():
        results = {}
        a, b = asyncio.Event(), asyncio.Event()
        await asyncio.gather(task(True, a, results), task(False, b, results))
        return results

    assert asyncio.run(main()) == {True: True, False: False}


# --- measuring and remembering ------------------------------------------------------


def test_tune_times_every_candidate_and_persists(cache_dir):
    result = cs.tune(X, W, padding=1)
    labels = {(b, a) for b, a, *_ in result.table}
    spec = cs.explain(X, W, padding=1).spec
    pairs = _tuning._registry.candidates(spec, "auto", "forward", "cpu")[0]
    expected = {(b.name, a) for b, a in pairs if getattr(b, "contender", True)}
    assert labels == expected and len(labels) >= 3
    assert "python" not in {b for b, _ in labels}  # the readable definition declares itself no contender
    medians = [row[2] for row in result.table if row[2] is not None]
    # Fastest first, except a single-core contender that ties with a multicore fastest goes first.
    assert medians[1:] == sorted(medians[1:]) and (result.backend, result.algorithm) == result.table[0][:2]
    if medians[0] > min(medians):
        assert result.backend == "cython" and medians[0] <= min(medians) * (1 + _tuning.SINGLE_CORE_TIE)
        assert "chosen: cython/" in str(result)
    data = json.loads((cache_dir / "tuning.json").read_text())
    assert data["format"] == _tuning.CACHE_FORMAT and result.key in data["entries"]
    assert "threads=" in result.key and "numpy=" in result.key and "convsuite=" in result.key
    assert str(result).startswith("measured on cpu")


def test_a_single_core_contender_goes_first_only_on_a_tie():
    def t(median, iqr=0.0, abandoned=False):
        return Timing(median, median, median, median, iqr, 5, abandoned)

    single = {"numba/depthwise": False, "numpy/gemm": False, "cython/depthwise": True}

    def order(**timing_of):
        timings = {label: timing_of[label.split("/")[0]] for label in single}
        ranked = sorted(timings, key=lambda label: timings[label].median)
        return _tuning.single_core_on_a_tie(ranked, timings, single)

    # Within 5% of the fastest, past a multicore runner-up also within it: promoted.
    assert order(numba=t(1.00), numpy=t(1.01), cython=t(1.04)) == ["cython/depthwise", "numba/depthwise", "numpy/gemm"]
    # Beyond the floor and the spreads: the order stands.
    assert order(numba=t(1.00), numpy=t(1.01), cython=t(1.08)) == ["numba/depthwise", "numpy/gemm", "cython/depthwise"]
    # A fixed margin: a wide spread of the fastest does not make 20% a tie.
    assert order(numba=t(1.00, iqr=0.30), numpy=t(1.3), cython=t(1.20))[0] == "numba/depthwise"
    assert order(numba=t(1.00, iqr=0.30), numpy=t(1.3), cython=t(1.05))[0] == "cython/depthwise"
    # A multicore contender ahead of it beyond the tie ends the search.
    assert order(numba=t(1.00), numpy=t(1.10), cython=t(1.30))[0] == "numba/depthwise"
    # An abandoned single-core contender never moves; a single-core fastest stays first.
    assert order(numba=t(1.00), numpy=t(1.01), cython=t(1.02, abandoned=True))[0] == "numba/depthwise"
    single_first = ["cython/depthwise", "numba/depthwise"]
    timings = {"cython/depthwise": t(1.0), "numba/depthwise": t(1.01)}
    assert _tuning.single_core_on_a_tie(single_first, timings, single) == single_first


def test_a_promoted_single_core_choice_is_reported_as_such():
    table = [["cython", "depthwise", 1.03e-4, 0.01, "ok"], ["numba", "depthwise", 1.0e-4, 0.01, "ok"]]
    decision = _tuning._decision_of({"table": table, "params": {}}, "cpu", "measured now")
    assert decision.reason.startswith("single-core, within 5% of the fastest of 2 candidates")
    result = _tuning.TuneResult("cython", "depthwise", tuple(map(tuple, table)), "cpu (test)", "key")
    text = str(result)
    assert "chosen: cython/depthwise" in text and "(x1.03," in text and "(x1.00," in text  # ratios to the fastest
    fastest_first = [table[1], ["cython", "depthwise", 1.2e-4, 0.01, "ok"]]
    assert _tuning._decision_of({"table": fastest_first}, "cpu", "now").reason.startswith("fastest of 2")


def test_only_the_single_core_rungs_say_so():
    names = [info.name for info in cs.list_backends()]
    assert {name for name in names if cs.get_backend(name).single_core} == {"cython", "python"} & set(names)


def test_autotune_measures_once_then_uses_the_cache(cache_dir, monkeypatch):
    calls = _count_measurements(monkeypatch)
    with cs.use_autotune(True):
        y = cs.conv2d(X, W, padding=1)
        cs.conv2d(X, W, padding=1)
        explanation = cs.explain(X, W, padding=1)
    assert calls and len(calls) == 1
    assert explanation.decided_by == "measurement" and explanation.measured
    assert (explanation.backend, explanation.algorithm) == explanation.measured[0][:2]
    assert "measured" in str(explanation)
    np.testing.assert_allclose(y, cs.conv2d(X, W, padding=1, backend="numpy"), rtol=1e-5, atol=1e-5)
    cs.clear_plan_cache()
    with cs.use_autotune(True):
        cs.conv2d(X, W, padding=1)  # a new plan, but the winner comes from the tuning cache
    assert len(calls) == 1


def test_explain_without_autotune_reports_the_rule(cache_dir):
    cs.tune(X, W, padding=1)
    explanation = cs.explain(X, W, padding=1)
    assert explanation.decided_by in ("rule", "priority") and explanation.measured == ()
    explicit = cs.explain(X, W, padding=1, backend="numpy", algorithm="im2col")
    assert explicit.decided_by == "request"


def test_explain_does_not_measure_an_untuned_problem(cache_dir, monkeypatch):
    calls = _count_measurements(monkeypatch)
    with cs.use_autotune(True):
        explanation = cs.explain(X, W, padding=2)
    assert calls == [] and explanation.decided_by in ("rule", "priority")


def test_autotune_on_a_named_backend_tunes_its_algorithms_only(cache_dir, monkeypatch):
    calls = _count_measurements(monkeypatch)
    with cs.use_autotune(True):
        cs.conv2d(X, W, padding=1, backend="python")  # one algorithm, no tunables: nothing to measure
    assert calls == []
    with cs.use_autotune(True):
        cs.conv2d(X, W, padding=1, backend="numpy")  # one algorithm, whose tile is tunable: searched
        e = cs.explain(X, W, padding=1, backend="numpy")
    assert calls == [1]  # the numpy backend's one algorithm, not every backend's
    assert e.decided_by == "measurement" and set(e.params) == {"tile_kib"}


def test_persistence_across_processes(cache_dir):
    result = cs.tune(X, W, padding=1)
    script = textwrap.dedent(
        """
        import numpy as np, convsuite as cs
        from convsuite import _tuning
        def refuse(*a, **k):
            raise AssertionError("measured again instead of using the cache")
        _tuning.measure_candidates = refuse
        x = np.random.default_rng(3).standard_normal((1, 2, 6, 6)).astype(np.float32)
        w = np.random.default_rng(4).standard_normal((3, 2, 3, 3)).astype(np.float32)
        with cs.use_autotune(True):
            cs.conv2d(x, w, padding=1)
            e = cs.explain(x, w, padding=1)
        print(e.decided_by, e.backend, e.algorithm)
        """
    )
    env = {**os.environ, _tuning.CACHE_DIR_ENV: str(cache_dir)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["measurement", result.backend, result.algorithm]


def test_concurrent_writers_lose_nothing(cache_dir):
    script = textwrap.dedent(
        """
        import sys
        from convsuite import _tuning
        who = sys.argv[1]
        for i in range(15):
            _tuning._store(f"{who}-{i}", {"backend": "numpy", "algorithm": "im2col", "table": []})
        """
    )
    env = {**os.environ, _tuning.CACHE_DIR_ENV: str(cache_dir)}
    procs = [
        subprocess.Popen([sys.executable, "-c", script, f"writer{n}"], env=env, stderr=subprocess.PIPE)
        for n in range(4)
    ]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    entries = json.loads((cache_dir / "tuning.json").read_text())["entries"]
    assert {f"writer{n}-{i}" for n in range(4) for i in range(15)} <= set(entries)
    assert not [f for f in os.listdir(cache_dir) if f.endswith(".tmp")]


def test_corrupt_cache_is_ignored_with_a_warning_and_rewritten(cache_dir, monkeypatch):
    (cache_dir / "tuning.json").write_text("{ this is not json")
    calls = _count_measurements(monkeypatch)
    with pytest.warns(UserWarning, match="corrupt"):
        with cs.use_autotune(True):
            y = cs.conv2d(X, W, padding=1)
    assert calls and y.shape == (1, 3, 6, 6)
    data = json.loads((cache_dir / "tuning.json").read_text())
    assert len(data["entries"]) == 1


def test_a_version_change_makes_entries_stale(cache_dir, monkeypatch):
    cs.tune(X, W, padding=1)
    _tuning._memory.clear()
    monkeypatch.setattr(convsuite._version, "__version__", "999.0")
    monkeypatch.setattr(_tuning, "_fingerprints", {})
    with cs.use_autotune(True):
        assert cs.explain(X, W, padding=1).decided_by != "measurement"
    monkeypatch.undo()
    _tuning._fingerprints.clear()


def test_a_thread_count_change_makes_entries_stale(cache_dir):
    cs.set_num_threads(1)
    try:
        cs.tune(X, W, padding=1)
        with cs.use_autotune(True):
            assert cs.explain(X, W, padding=1).decided_by == "measurement"
        cs.set_num_threads(None)
        if cs.get_num_threads() != 1:
            with cs.use_autotune(True):
                assert cs.explain(X, W, padding=1).decided_by != "measurement"
    finally:
        cs.set_num_threads(None)


def test_clear_tuning_cache_forgets(cache_dir):
    cs.tune(X, W, padding=1)
    cs.clear_tuning_cache()
    assert not (cache_dir / "tuning.json").exists()
    with cs.use_autotune(True):
        assert cs.explain(X, W, padding=1).decided_by != "measurement"


def test_unwritable_cache_dir_warns_but_works(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(_tuning.CACHE_DIR_ENV, str(blocker / "sub"))
    _tuning._memory.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = cs.tune(X, W, padding=1)
    assert result.table and any("could not write" in str(w.message) for w in caught)
    _tuning._memory.clear()
    cs.clear_plan_cache()


@pytest.mark.parametrize("where", ["file", "file/sub", "missing/sub"])
def test_clear_tuning_cache_where_no_cache_folder_can_exist(tmp_path, monkeypatch, where):
    """CONVSUITE_CACHE_DIR naming a file (or a folder under one): nothing on disk to forget, no error
    (it raised NotADirectoryError from the lock file); the choices in memory are forgotten."""
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv(_tuning.CACHE_DIR_ENV, str(tmp_path / where))
    _tuning._memory["a problem"] = {"made up": True}
    cs.clear_tuning_cache()
    assert not _tuning._memory
    assert (tmp_path / "file").read_text() == "not a directory"


# --- the fitted rule ------------------------------------------------------------------


def _table(times_near: dict, times_far: dict) -> dict:
    small = list(_rule.features(cs.explain(X, W, padding=1).spec))
    large = [f + 6 for f in small]
    return {
        "device": "cpu",
        "cases": [
            {"name": "small", "direction": "forward", "features": small, "times": times_near},
            {"name": "large", "direction": "forward", "features": large, "times": times_far},
        ],
    }


def test_rule_follows_its_data(monkeypatch, cache_dir):
    monkeypatch.setitem(
        _rule._tables,
        "cpu",
        _table({"numpy/im2col": 1.0, "cython/direct": 5.0}, {"numpy/im2col": 5.0, "cython/direct": 1.0}),
    )
    monkeypatch.setattr(_rule, "NEIGHBOURS", 1)
    cs.clear_plan_cache()
    explanation = cs.explain(X, W, padding=1)
    assert (explanation.backend, explanation.decided_by) == ("numpy", "rule")
    assert "small" in explanation.reason
    monkeypatch.setitem(
        _rule._tables,
        "cpu",
        _table({"numpy/im2col": 5.0, "cython/direct": 1.0}, {"numpy/im2col": 1.0, "cython/direct": 5.0}),
    )
    cs.clear_plan_cache()
    assert cs.explain(X, W, padding=1).backend == "cython"
    y = cs.conv2d(X, W, padding=1)
    np.testing.assert_allclose(y, cs.conv2d(X, W, padding=1, backend="numpy"), rtol=1e-5, atol=1e-5)


def test_rule_ranks_unmeasured_candidates_last(monkeypatch):
    monkeypatch.setitem(_rule._tables, "cpu", _table({"numpy/im2col": 1.0}, {"numpy/im2col": 1.0}))
    spec = cs.explain(X, W, padding=1).spec
    ranking = _rule.rank(spec, "forward", ["brand_new/algo", "numpy/im2col"], "cpu")
    assert [label for label, _ in ranking] == ["numpy/im2col", "brand_new/algo"] and ranking[1][1] is None
    assert _rule.rank(spec, "backward", ["numpy/im2col"], "cpu") is None  # no backward data


def test_without_a_table_auto_takes_priority(monkeypatch):
    monkeypatch.setitem(_rule._tables, "cpu", None)
    cs.clear_plan_cache()
    explanation = cs.explain(X, W, padding=1)
    assert explanation.decided_by == "priority"
    cs.clear_plan_cache()


def test_shipped_cpu_table_is_well_formed():
    table = _rule.load_table("cpu")
    if table is None:
        pytest.fail("convsuite/data/rule-cpu.json is missing: run python -m convsuite.bench.crossover")
    assert table["cases"] and {"forward", "backward"} <= {c["direction"] for c in table["cases"]}
    for case in table["cases"]:
        assert len(case["features"]) == len(_rule.FEATURE_NAMES) and case["times"]
        assert all(t > 0 for t in case["times"].values())


# --- the measuring core ----------------------------------------------------------------


def test_core_keeps_the_first_call_apart_and_abandons_the_slow():
    calls = {"fast": 0, "slow": 0}

    def fast():
        calls["fast"] += 1
        if calls["fast"] == 1:
            time.sleep(0.02)  # a "compile" on the first call only

    def slow():
        calls["slow"] += 1
        time.sleep(0.01)

    timings = measure_side_by_side({"fast": fast, "slow": Contender(slow)}, repeat=6, rounds=3, abandon_ratio=2.0)
    assert timings["fast"].first_call >= 0.02 > timings["fast"].median
    assert timings["slow"].abandoned and not timings["fast"].abandoned
    assert timings["fast"].repeats == 6 and timings["slow"].repeats == 4  # re-timed in round 2, then dropped
    assert timings["slow"].low >= 0.01 and timings["slow"].median >= 0.01
    with pytest.raises(ValueError):
        measure_side_by_side({"fast": fast}, repeat=0)


def test_leave_one_out_regret_of_the_rule():
    def case(name, point, times):
        return {"name": name, "direction": "forward", "features": point, "times": times}

    cases = [
        case("a", [0.0, 0.0], {"fast/x": 1.0, "slow/y": 3.0}),
        case("b", [0.1, 0.0], {"fast/x": 1.0, "slow/y": 2.0}),
        case("c", [9.0, 9.0], {"fast/x": 4.0, "slow/y": 1.0}),
        case("d", [9.1, 9.0], {"fast/x": 5.0, "slow/y": 1.0}),
    ]
    assert _rule.leave_one_out(cases, 1) == [1.0, 1.0, 1.0, 1.0]  # each predicted by its close twin
    # a problem whose near neighbours disagree with its own measurement: the pick costs 2x there
    odd = case("e", [0.05, 0.0], {"fast/x": 2.0, "slow/y": 1.0})
    assert _rule.leave_one_out([*cases, odd], 1)[-1] == 2.0
    assert _rule.leave_one_out([*cases, odd], 3)[-1] == 2.0  # distance weights keep the far pair out


def test_a_non_deterministic_algorithm_is_never_chosen_unless_named(cache_dir):
    """An algorithm whose record says it is not bit-reproducible (atomics) is left out of auto's candidates,
    measured selection included, even where it is the fastest; asked for by name it runs."""
    import time as _time

    from convsuite._registry import candidates, register_backend, unregister_backend
    from convsuite.backends.base import Algorithm, Backend

    im2col = cs.get_backend("numpy").algorithm_table()["im2col"]

    def numpy_plan(spec, direction):
        return im2col.build(spec, direction)  # its hand-chosen parameters

    def slow_plan(spec, direction):
        launch = numpy_plan(spec, direction)

        def run(*operands):
            _time.sleep(0.002)
            launch(*operands)

        return run

    class Racy(Backend):
        name, device, priority, algorithms = "racy_for_test", "cpu", 10_000, ("ordered", "atomic")

        def algorithm_table(self):
            return {
                "ordered": Algorithm("ordered", "fixed-order sums", slow_plan, directions=("forward", "backward")),
                "atomic": Algorithm(
                    "atomic", "atomic sums", numpy_plan, directions=("forward", "backward"), deterministic=False
                ),
            }

    register_backend(Racy())
    try:
        spec = cs.explain(X, W, padding=1).spec
        pairs, _ = candidates(spec, "auto", "forward", "cpu")
        assert ("racy_for_test", "ordered") in {(b.name, a) for b, a in pairs}
        assert ("racy_for_test", "atomic") not in {(b.name, a) for b, a in pairs}
        result = cs.tune(X, W, padding=1)  # every CPU candidate of auto, measured side by side
        assert {row[:2] for row in result.table} >= {("racy_for_test", "ordered")}
        assert ("racy_for_test", "atomic") not in {row[:2] for row in result.table}
        with cs.use_autotune(True):
            assert cs.explain(X, W, padding=1).algorithm != "atomic"
        y = cs.conv2d(X, W, padding=1, backend="racy_for_test", algorithm="atomic")
        np.testing.assert_allclose(y, cs.conv2d(X, W, padding=1, backend="numpy"), rtol=1e-6)
    finally:
        unregister_backend("racy_for_test")


def test_a_candidate_that_raises_is_reported_and_the_others_chosen(cache_dir, monkeypatch):
    """A candidate that raises on the case (a limit its can_run missed) used to end tune() and every
    autotuned call with its exception; it is a row of the table, and the choice is among the others."""
    numpy_backend = cs.get_backend("numpy")
    broken_algorithm = numpy_backend.algorithms[0]
    original = numpy_backend.plan

    def plan(spec, algorithm, direction, *rest):
        launch = original(spec, algorithm, direction, *rest)
        if algorithm != broken_algorithm:
            return launch

        def broken(*operands):
            raise RuntimeError("a limit can_run missed")

        return broken

    monkeypatch.setattr(numpy_backend, "plan", plan)
    result = cs.tune(X, W, padding=1)
    rows = {f"{row[0]}/{row[1]}": row for row in result.table}
    failed = rows[f"numpy/{broken_algorithm}"]
    assert failed[2] is None and "failed to run" in failed[4] and "a limit can_run missed" in failed[4]
    assert result.table[0][2] is not None and result.table[0][:2] != ("numpy", broken_algorithm)


def test_explain_of_a_measured_choice_says_what_came_close():
    measured = (
        ("numba", "gemm", 1.0e-4, 0.02, "ok"),
        ("numpy", "im2col", 1.5e-4, 0.03, "ok"),
        ("python", "direct", None, None, "abandoned: over budget"),
        ("cython", "direct", 3.0e-4, 0.01, "ok"),
    )
    explanation = dataclasses.replace(
        cs.explain(X, W, padding=1, backend="numpy"),
        backend="numba",
        algorithm="gemm",
        decided_by="measurement",
        reason="fastest of 4 candidates timed on this cpu (measured now); parameters: 3 configurations in 0.2 s",
        measured=measured,
    )
    lines = str(explanation).splitlines()
    assert lines[:3] == [
        "runs: backend 'numba', algorithm 'gemm', for this conv2d forward (decided by timing the candidates on "
        "this machine)",
        "why: fastest of 4 candidates timed on this cpu (measured now)",
        "close: numpy/im2col (x1.50 the fastest's time), cython/direct (x3.00)",
    ]
    assert lines[3].startswith("problem: x ") and lines[4] == "parameters: 3 configurations in 0.2 s"
    assert "  measured python/direct: abandoned: over budget" in lines
