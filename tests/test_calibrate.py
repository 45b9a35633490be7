"""Calibration: a budgeted measurement of part of the grid, written atomically per machine, used by auto from then
on and reported by explain(); what is measured first; bad arguments; the ``convsuite calibrate`` command."""

from __future__ import annotations

import json
import math
import time
from datetime import datetime, timezone
from types import SimpleNamespace

import numpy as np
import pytest

import convsuite as cs
from convsuite import _calibrate, _machine, _plan_cache, _rule
from convsuite._grid import Problem, spec_of
from convsuite.cli import main as cli_main

TINY = [
    Problem("tiny fwd", (1, 2, 6, 6), (3, 2, 3, 3), padding=1),
    Problem("tiny bwd", (1, 2, 6, 6), (3, 2, 3, 3), padding=1, direction="backward"),
]
X = np.zeros(TINY[0].x_shape, np.float32)
W = np.zeros(TINY[0].w_shape, np.float32)
#: What the fake measurement reports: numpy fastest, which the shipped table never picks for so tiny a problem.
FAKE_TIMES = {"numpy/im2col": 1e-6, "cython/direct": 9e-6, "cython/gemm": 9e-6, "numba/direct": 9e-6}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder, the two-problem grid, and a measurement that returns FAKE_TIMES (and counts)."""
    monkeypatch.setenv("CONVSUITE_CACHE_DIR", str(tmp_path))
    monkeypatch.delitem(_rule._tables, "cpu", raising=False)
    monkeypatch.setattr(_calibrate, "fit_grid", lambda: list(TINY))
    measured = []

    def fake_measure(problem, device, skip=(), *, settings="full"):
        measured.append((problem.name, cs.get_num_threads(), settings))
        time.sleep(0.01)  # longer than the tests' 1 ms budgets: the run stops after the first problem
        return dict(FAKE_TIMES)

    monkeypatch.setattr(_calibrate, "measure_problem", fake_measure)
    return SimpleNamespace(dir=tmp_path, measured=measured)


def test_a_tiny_budget_writes_a_table_that_auto_uses_and_explain_reports(cache):
    before = _plan_cache.generation()
    result = cs.calibrate(budget_s=1e-3)
    assert result.measured == 1 and result.left == 1 and result.cases == 1  # the first problem always runs
    path = _rule.calibrated_path(cache.dir, "cpu", _machine.current().key())
    assert result.path == path and path.is_file() and _plan_cache.generation() > before
    assert [p.name for p in cache.dir.iterdir()] == [path.name]  # no temporary file left
    table = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in strict JSON"))
    _rule.checked_table(table, "cpu")
    assert table["kind"] == "calibrated" and table["machine"]["key"] == _machine.current().key()
    assert table["command"] == "convsuite calibrate" and table["threads"] == [cs.get_num_threads()]
    ((name, threads, settings),) = cache.measured
    assert threads == cs.get_num_threads() and settings == "quick"
    direction = "forward" if name == "tiny fwd" else "backward"
    explanation = cs.explain(X, W, padding=1, direction=direction)
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    assert (explanation.backend, explanation.algorithm, explanation.decided_by) == ("numpy", "im2col", "rule")
    assert f"measured on this machine by `convsuite calibrate` on {today}" in explanation.reason
    assert name in explanation.reason
    assert "measured now" not in str(result) and str(path) in str(result)
    # a second calibration measures the problem the first left, and keeps the first one's
    again = cs.calibrate(budget_s=1e-3)
    assert again.cases == 2 and again.left == 0 and {n for n, _, _ in cache.measured} == {"tiny fwd", "tiny bwd"}
    other = "backward" if direction == "forward" else "forward"
    assert "`convsuite calibrate`" in cs.explain(X, W, padding=1, direction=other).reason
    assert cs.calibrate(budget_s=1e-3, fresh=True).cases == 1  # a fresh table forgets them


def test_calibration_measures_at_each_thread_count_asked(cache):
    result = cs.calibrate(budget_s=60, threads=[1, 1])
    assert result.threads == (1,) and {t for _, t, _ in cache.measured} == {1}
    assert result.measured == 2 and result.left == 0


def test_a_real_calibration_of_one_problem_measures_every_candidate_left(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVSUITE_CACHE_DIR", str(tmp_path))
    threads = [cs.get_num_threads()]
    result = _calibrate.run_calibration(TINY[:1], 30.0, "cpu", threads, skip=("numba", "joblib", "python"))
    (case,) = json.loads(result.path.read_text())["cases"]
    assert {"numpy/im2col", "cython/direct"} <= set(case["times"]) and not {"numba/direct"} & set(case["times"])
    assert all(t > 0 for t in case["times"].values())
    assert case["features"] == list(_rule.features(spec_of(TINY[0]), threads[0]))


def test_the_budget_stops_before_a_problem_that_would_end_past_it(monkeypatch):
    clock = [0.0]

    class FakeTime:
        @staticmethod
        def perf_counter():
            return clock[0]

    def one_second(problem, device, skip=(), *, settings="full"):
        clock[0] += 1.0
        return {"a/x": 1.0}

    monkeypatch.setattr(_calibrate, "time", FakeTime)
    monkeypatch.setattr(_calibrate, "measure_problem", one_second)
    problems = [Problem(f"p{i}", (1, 2, 6, 6), (3, 2, 3, 3)) for i in range(5)]
    rows, seconds, left = _calibrate.measure_grid(problems, "cpu", [1, 2], budget_s=4.5)
    # each problem costs 2 s (two thread counts): after two, 4 + 2 > 4.5
    assert [(r["name"], r["threads"]) for r in rows] == [("p0", 1), ("p0", 2), ("p1", 1), ("p1", 2)]
    assert (seconds, left) == (4.0, 3)


def test_the_most_uncertain_problems_come_first_and_spread_out(monkeypatch):
    measured = Problem("A", (16, 256, 28, 28), (256, 256, 3, 3), padding=1)
    b = Problem("B", (1, 8, 12, 12), (16, 8, 3, 3), padding=1)
    near_b = Problem("B'", (1, 12, 12, 12), (16, 12, 3, 3), padding=1)  # under a doubling from B
    c = Problem("C", (4, 64, 28, 28), (64, 64, 5, 5), padding=2)
    threads = cs.get_num_threads()
    rows = [
        {
            "name": "A",
            "direction": "forward",
            "threads": threads,
            "features": list(_rule.features(spec_of(measured), threads)),
            "times": {"numpy/im2col": 1.0, "cython/direct": 10.0},  # a sure choice there
        }
    ]
    reference = _rule.RuleTable({"cases": rows, "neighbours": 1}, "shipped")
    order = _calibrate.priority_order([measured, b, near_b, c], "cpu", [threads], reference)
    assert [p.name for p in order] == ["B", "C", "B'", "A"]
    reach, closeness = _calibrate.uncertainty(rows[0]["features"], "forward", ["numpy/im2col"], reference)
    assert reach == 0.0 and closeness == 1.0  # one candidate measured: nothing to be sure about
    assert _calibrate.uncertainty(rows[0]["features"], "forward", [], None) == (math.inf, 1.0)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"budget_s": -1}, ValueError, "`budget_s` must be a finite number of seconds > 0; got -1"),
        ({"budget_s": 0}, ValueError, "`budget_s` must be a finite number of seconds > 0; got 0"),
        ({"budget_s": math.nan}, ValueError, "`budget_s` must be a finite number of seconds > 0; got nan"),
        ({"budget_s": math.inf}, ValueError, "`budget_s` must be a finite number of seconds > 0; got inf"),
        ({"budget_s": "60"}, TypeError, "`budget_s` must be a number of seconds > 0; got '60'"),
        ({"budget_s": True}, TypeError, "`budget_s` must be a number of seconds > 0; got True"),
        ({"device": "tpu"}, ValueError, "`device` must be 'cpu'; got 'tpu'"),
        ({"device": None}, ValueError, "`device` must be 'cpu'; got None"),
        ({"device": "gpu"}, ValueError, "`device` must be 'cpu': on a GPU, auto follows the cupy backend's hand"),
        ({"threads": 0}, ValueError, "`threads` must be"),
        ({"threads": "2"}, TypeError, "`threads` must be"),
        ({"threads": []}, ValueError, "`threads` must name at least one thread count"),
        ({"threads": 10**6}, ValueError, "`threads` must be at most"),
        ({"fresh": "yes"}, TypeError, "`fresh` must be True or False; got 'yes'"),
        ({"progress": 1}, TypeError, "`progress` must be True or False; got 1"),
    ],
)
def test_bad_arguments_are_clear_errors_naming_the_parameter(cache, kwargs, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        cs.calibrate(**kwargs)
    assert cache.measured == []  # refused before anything was measured


def test_an_unwritable_cache_folder_is_an_error_before_measuring(cache, monkeypatch):
    blocker = cache.dir / "a file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("CONVSUITE_CACHE_DIR", str(blocker))
    with pytest.raises(OSError):
        cs.calibrate(budget_s=1)
    assert cache.measured == []


def test_the_calibrate_command(cache, capsys):
    assert cli_main(["calibrate", "--budget-s", "0.001", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "calibrated the rule of `auto`" in out and "wrote " in out and "1 problems measured" in out
    assert cli_main(["calibrate", "--device", "gpu"]) == 2
    assert "convsuite calibrate: error: --device must be 'cpu'" in capsys.readouterr().err
    blocker = cache.dir / "a file"
    blocker.write_text("")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CONVSUITE_CACHE_DIR", str(blocker))
        assert cli_main(["calibrate", "--budget-s", "1"]) == 2
    assert "cannot write the calibrated table" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--budget-s", "-1"], "--budget-s: must be a finite number > 0; got '-1'"),
        (["--budget-s", "soon"], "--budget-s: must be a finite number > 0; got 'soon'"),
        (["--threads", "0"], "--threads: must be comma-separated thread counts >= 1"),
    ],
)
def test_the_calibrate_command_refuses_bad_options(cache, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["calibrate", *args])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert cache.measured == []
