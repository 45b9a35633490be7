"""Which rule table decides: this machine's calibrated one, else the nearest machine's shipped one; the thread
count as a feature; format versions; unusable files warned about once and skipped."""

from __future__ import annotations

import dataclasses
import json
import math
import warnings

import numpy as np
import pytest

import convsuite as cs
from convsuite import _machine, _rule
from convsuite._grid import Problem, spec_of
from convsuite._machine import Machine

PROBLEM = Problem("p", (1, 8, 12, 12), (16, 8, 3, 3), padding=1)
SPEC = spec_of(PROBLEM)
LABELS = ["cython/direct", "numba/direct"]

VM = Machine("AMD EPYC", "x86_64", 2, 2, "AVX-512", 512, 2**20, 32 * 2**20, "openblas Haswell", "scipy-openblas32")
XEON = Machine(
    "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
    "x86_64",
    16,
    16,
    "AVX-512",
    512,
    1280 * 2**10,
    48 * 2**20,
    "openblas SkylakeX",
    "scipy-openblas32",
)


def _case(threads, times, name="p", problem=PROBLEM):
    return {
        "name": name,
        "direction": problem.direction,
        "threads": threads,
        "features": list(_rule.features(spec_of(problem), threads)),
        "times": times,
    }


def _table(machine, cases, kind="shipped", date="2026-11-28 10:00 UTC", neighbours=1):
    table = _rule.make_table(
        "cpu", cases, machine=machine, host="test", date=date, seconds=1.0, command="test", kind=kind
    )
    return table | {"neighbours": neighbours}


@pytest.fixture
def shipped(monkeypatch):
    """Two shipped tables that disagree: the 2-core VM's (cython wins) and the 16-core Xeon's (numba wins)."""
    monkeypatch.delitem(_rule._tables, "cpu", raising=False)
    tables = [
        _rule.RuleTable(_table(VM, [_case(2, {"cython/direct": 1.0, "numba/direct": 3.0})]), "shipped", "vm.json"),
        _rule.RuleTable(
            _table(XEON, [_case(16, {"cython/direct": 4.0, "numba/direct": 1.0})], date="2026-12-01 10:00 UTC"),
            "shipped",
            "xeon.json",
        ),
    ]
    monkeypatch.setattr(_rule, "_shipped", {"cpu": tables})
    monkeypatch.setattr(_rule, "_calibrated", {})
    return tables


def _here(monkeypatch, machine):
    monkeypatch.setattr(_machine, "current", lambda: machine)


def test_the_shipped_table_of_the_nearest_machine_decides(shipped, monkeypatch):
    eight_core = dataclasses.replace(XEON, logical_cores=8, usable_cores=8, model="Intel(R) Xeon(R) Silver 4314")
    _here(monkeypatch, eight_core)
    ranking = _rule.rank(SPEC, "forward", LABELS, "cpu", threads=8)
    assert ranking[0][0] == "numba/direct" and ranking.table.path == "xeon.json"
    reason = ranking.reason()
    assert "the shipped table of a 16-core AVX-512 machine (Intel Xeon Gold 6338), nearest to this one" in reason
    assert "(8-core AVX-512 machine (Intel Xeon Silver 4314))" in reason and "measured on 2026-12-01" in reason
    assert "at 16 threads (this call uses 8)" in reason and "predicted" not in reason
    _here(monkeypatch, dataclasses.replace(VM, model="AMD EPYC 7B13"))
    ranking = _rule.rank(SPEC, "forward", LABELS, "cpu", threads=2)
    assert ranking[0][0] == "cython/direct" and ranking.table.path == "vm.json"
    _here(monkeypatch, VM)
    assert "the same kind as this one" in _rule.rank(SPEC, "forward", LABELS, "cpu", threads=2).reason()


def test_the_thread_count_moves_the_choice():
    table = _table(
        VM,
        [
            _case(1, {"cython/direct": 1.0, "numba/direct": 2.0}),
            _case(16, {"cython/direct": 3.0, "numba/direct": 1.0}),
        ],
    )
    rows, points = _rule.RuleTable(table, "set").rows("forward")

    def first(threads):
        point = _rule.features(SPEC, threads)
        return _rule._rank_rows(point, rows, LABELS, 1, table["thread_weight"], points)[0][0]

    assert first(1) == "cython/direct" and first(16) == "numba/direct" and first(8) == "numba/direct"


def test_explain_follows_the_thread_count_in_use(monkeypatch):
    threads = cs.get_num_threads()
    cases = [_case(threads, {"numpy/im2col": 1.0, "cython/direct": 2.0})]
    cases.append(_case(threads * 8, {"numpy/im2col": 2.0, "cython/direct": 1.0}))
    monkeypatch.setitem(_rule._tables, "cpu", _table(VM, cases))
    x, w = np.zeros(PROBLEM.x_shape, np.float32), np.zeros(PROBLEM.w_shape, np.float32)
    assert cs.explain(x, w, padding=1).backend == "numpy"
    original = _rule.get_num_threads
    monkeypatch.setattr(_rule, "get_num_threads", lambda: original() * 8)  # as if set_num_threads(8 x) were possible
    explanation = cs.explain(x, w, padding=1)
    assert (explanation.backend, explanation.decided_by) == ("cython", "rule")


def test_the_calibrated_table_of_this_machine_comes_first(shipped, monkeypatch, tmp_path):
    _here(monkeypatch, XEON)
    calibrated = _table(XEON, [_case(16, {"cython/direct": 1.0, "numba/direct": 2.0})], kind="calibrated")
    _rule.write_table(_rule.calibrated_path(tmp_path, "cpu", XEON.key()), calibrated)
    ranking = _rule.rank(SPEC, "forward", LABELS, "cpu", threads=16, calibrated_dir=tmp_path)
    assert ranking[0][0] == "cython/direct" and ranking.table.origin == "calibrated"
    assert ranking.reason() == (
        "cython/direct was the fastest on the 1 measured problem most like this one; close: numba/direct "
        "(x2.00 the fastest's time); data: measured on this machine by `convsuite calibrate` on 2026-11-28; "
        "those problems: p"
    )
    # a direction the calibration did not measure: the shipped table answers
    backward = Problem("p", (1, 8, 12, 12), (16, 8, 3, 3), padding=1, direction="backward")
    shipped[1].data["cases"].append(_case(16, {"cython/direct": 2.0, "numba/direct": 1.0}, problem=backward))
    shipped[1]._by_direction.clear()
    assert _rule.rank(SPEC, "backward", LABELS, "cpu", threads=16, calibrated_dir=tmp_path).table.origin == "shipped"
    # another machine does not see this one's table: its key names another file
    _here(monkeypatch, VM)
    assert _rule.rank(SPEC, "forward", LABELS, "cpu", threads=2, calibrated_dir=tmp_path).table.origin == "shipped"


def test_a_calibrated_table_far_from_the_problem_leaves_it_to_a_nearer_shipped_one(shipped, monkeypatch, tmp_path):
    """A calibration's small grid decides near its problems only: the shipped table's nearer case wins."""
    _here(monkeypatch, XEON)
    far = Problem("far", (64, 512, 56, 56), (512, 512, 3, 3), padding=1)
    calibrated = _table(XEON, [_case(16, {"cython/direct": 1.0, "numba/direct": 2.0}, "far", far)], kind="calibrated")
    _rule.write_table(_rule.calibrated_path(tmp_path, "cpu", XEON.key()), calibrated)
    ranking = _rule.rank(SPEC, "forward", LABELS, "cpu", threads=16, calibrated_dir=tmp_path)
    assert ranking.table.origin == "shipped" and ranking[0][0] == "numba/direct"
    # on the calibrated problem itself, the calibration decides
    ranking = _rule.rank(spec_of(far), "forward", LABELS, "cpu", threads=16, calibrated_dir=tmp_path)
    assert ranking.table.origin == "calibrated" and ranking[0][0] == "cython/direct"


@pytest.mark.parametrize(
    "content, problem",
    [
        ("{not json", "Expecting property name"),
        (json.dumps({"format": 99, "cases": []}), "written by a newer convsuite"),
        (json.dumps([1, 2]), "holds list, not a table"),
        ("FOREIGN", "measured on another machine"),
        ("SHIPPED", "not a calibrated table"),
        ("NAN", "time nan"),
    ],
)
def test_an_unusable_calibrated_file_warns_once_naming_it_then_the_shipped_tables(
    shipped, monkeypatch, tmp_path, content, problem
):
    _here(monkeypatch, XEON)
    path = _rule.calibrated_path(tmp_path, "cpu", XEON.key())
    mine = [_case(16, {"cython/direct": 1.0, "numba/direct": 2.0})]
    if content == "FOREIGN":
        content = json.dumps(_table(VM, mine, kind="calibrated"))
    elif content == "SHIPPED":
        content = json.dumps(_table(XEON, mine, kind="shipped"))
    elif content == "NAN":
        table = _table(XEON, mine, kind="calibrated")
        table["cases"][0]["times"]["cython/direct"] = math.nan
        content = json.dumps(table)
    path.write_text(content)
    with pytest.warns(RuntimeWarning) as caught:
        ranking = _rule.rank(SPEC, "forward", LABELS, "cpu", threads=16, calibrated_dir=tmp_path)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert str(path) in message and problem in message and "auto uses the shipped tables instead" in message
    assert ranking.table.origin == "shipped" and ranking[0][0] == "numba/direct"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same file again: no second warning
        _rule.rank(SPEC, "forward", LABELS, "cpu", threads=16, calibrated_dir=tmp_path)


def test_a_format_1_table_is_read_at_its_recorded_thread_count_and_others_refused():
    old_case = {"name": "p", "direction": "forward", "features": [1.0] * 9, "times": {"a/x": 1.0}}
    old = {"device": "cpu", "machine": "AMD EPYC x2; Linux; threads 4; load average 0.1", "cases": [old_case]}
    upgraded = _rule.checked_table(old, "cpu")
    assert upgraded["format"] == 2 and upgraded["threads"] == [4] and upgraded["machine"] is None
    assert upgraded["cases"][0]["features"] == [1.0] * 9 + [2.0] and upgraded["cases"][0]["threads"] == 4
    assert "measured on AMD EPYC x2 on" in _rule.RuleTable(upgraded, "shipped").describe(VM)
    refusals = [
        (dict(old, machine="AMD EPYC x2"), "records no thread count"),
        (dict(old, features=["batch"]), "fitted on features"),
        (dict(old, device="gpu"), "table of device 'gpu'"),
        (dict(old, format="2"), "not a version number"),
        ({"format": 2, "features": list(_rule.FEATURE_NAMES), "cases": [dict(old_case, threads=1)]}, "10 finite"),
        ({"format": 2, "features": list(_rule.FEATURE_NAMES), "cases": "none"}, "must be a list"),
    ]
    for table, message in refusals:
        with pytest.raises(ValueError, match=message):
            _rule.checked_table(table, "cpu")


def test_the_shipped_cpu_table_is_the_2_core_vm_at_2_threads():
    table = _rule.checked_table(json.loads(_rule.table_path("cpu").read_text()), "cpu")
    machine = Machine.from_dict(table["machine"])
    assert table["format"] == _rule.FORMAT and table["threads"] == [2] and table["kind"] == "shipped"
    assert (machine.logical_cores, machine.model) == (2, "AMD EPYC") and "threads 2" in table["host"]
    assert all(case["features"][-1] == 1.0 for case in table["cases"])  # log2(2)


def test_a_problem_is_held_out_at_every_thread_count():
    far = Problem("q", (16, 256, 28, 28), (256, 256, 3, 3), padding=1)
    cases = [
        _case(1, {"a/x": 1.0, "b/y": 2.0}),
        _case(16, {"a/x": 2.0, "b/y": 1.0}),
        _case(1, {"a/x": 1.0, "b/y": 5.0}, name="q", problem=far),
    ]
    # p at 1 thread is predicted from q alone (a wins), not from p itself at 16 threads (where b wins)
    assert _rule.leave_one_out(cases, 1)[:2] == [1.0, 2.0]


def test_the_fit_weighs_the_thread_feature_only_with_several_thread_counts():
    one = [_case(2, {"a/x": 1.0, "b/y": 2.0}, name=f"p{i}") for i in range(3)]
    assert _rule.fit(one)["thread_weight"] == 1.0
    problems = [Problem(f"p{i}", (1, 8 * 2**i, 12, 12), (16, 8 * 2**i, 3, 3), padding=1) for i in range(4)]
    rows = [_case(n, {"a/x": 1.0, "b/y": 1.0 + n / 4}, name=p.name, problem=p) for p in problems for n in (1, 16)]
    settings = _rule.fit(rows)
    regrets = {(k, w): _rule.leave_one_out(rows, k, w) for k in _rule.NEIGHBOUR_CHOICES for w in _rule.THREAD_WEIGHTS}
    best = min(regrets, key=lambda kw: (sum(r > 1.5 for r in regrets[kw]), _rule.geomean(regrets[kw]), kw[1]))
    assert (settings["neighbours"], settings["thread_weight"]) == best


def test_tables_are_written_whole_and_strict(tmp_path):
    path = tmp_path / "t.json"
    _rule.write_table(path, {"a": 1})
    with pytest.raises(ValueError):
        _rule.write_table(path, {"a": math.nan})
    assert json.loads(path.read_text()) == {"a": 1} and [p.name for p in tmp_path.iterdir()] == ["t.json"]


def test_explain_says_what_runs_why_and_what_was_close_first(shipped, monkeypatch):
    """The first lines read without the code: what runs, why in one sentence, what came close; details after."""
    _here(monkeypatch, VM)
    table = _table(  # numpy and python: the backends every install has
        VM,
        [
            _case(2, {"python/direct": 1.0, "numpy/im2col": 1.5}),
            _case(2, {"python/direct": 1.2, "numpy/im2col": 1.0}, name="q"),
        ],
        neighbours=2,
    )
    monkeypatch.setitem(_rule._shipped, "cpu", [_rule.RuleTable(table, "shipped", "vm.json")])
    x, w = np.zeros(PROBLEM.x_shape, np.float32), np.zeros(PROBLEM.w_shape, np.float32)
    lines = str(cs.explain(x, w, padding=1)).splitlines()
    assert lines[0] == "runs: backend 'python', algorithm 'direct', for this conv2d forward (decided by a rule, " + (
        "without timing anything)"
    )
    # geometric means over the two problems of each one's time over the fastest: 1.2**0.5 and 1.5**0.5
    assert lines[1] == "why: python/direct came closest to the fastest (x1.10 its time) on the 2 measured problems " + (
        "most like this one"
    )
    assert lines[2] == "close: numpy/im2col (x1.22 the fastest's time)"
    assert lines[3].startswith("problem: x (1, 8, 12, 12) * w (16, 8, 3, 3) -> y (1, 16, 12, 12) [float32,")
    assert lines[4] == "data: the shipped table of a 2-core AVX-512 machine (AMD EPYC), measured on 2026-11-28: " + (
        "the same kind as this one"
    )
    assert lines[5] == "those problems: p, q"
