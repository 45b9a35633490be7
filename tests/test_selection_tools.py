"""The crossover and regret commands: grids valid, held-out disjoint, tables written."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

import convsuite as cs
from convsuite import _rule
from convsuite.bench import crossover, regret
from convsuite.bench.crossover import Problem


def test_fit_grid_is_valid_and_bounded():
    grid = crossover.fit_grid()
    assert len(grid) >= 60
    directions = {p.direction for p in grid}
    assert directions == {"forward", "backward"}
    for problem in grid:
        spec = crossover.spec_of(problem)
        assert spec.macs <= crossover.MAX_MACS
    assert any(crossover.spec_of(p).is_depthwise for p in grid)
    assert any(p.stride == 2 for p in grid) and any(p.ndim == 1 for p in grid)


def test_held_out_set_is_not_in_the_fitting_grid():
    fitted = {(p.x_shape, p.w_shape, p.stride, p.groups, p.direction) for p in crossover.fit_grid()}
    held = regret.held_out()
    assert len(held) >= 20
    names = " ".join(p.name for p in held)
    for family in ("ece408", "mnv2", "strided", "dw", "1x1", "bwd", "1-D"):
        assert family in names
    for problem in held:
        crossover.spec_of(problem)  # valid
        assert (problem.x_shape, problem.w_shape, problem.stride, problem.groups, problem.direction) not in fitted


def test_features_include_the_work():
    spec = crossover.spec_of(Problem("p", (2, 8, 10, 10), (16, 8, 3, 3), padding=1))
    point = _rule.features(spec, threads=4)
    assert len(point) == len(_rule.FEATURE_NAMES) and _rule.FEATURE_NAMES[-2:] == ("macs", "threads")
    assert point[-2] == math.log2(spec.macs) == math.log2(2 * 16 * 100 * 8 * 9)
    assert point[-1] == 2.0  # log2 of the thread count


def test_a_table_fitted_on_other_features_is_refused_with_a_warning_naming_it(tmp_path, monkeypatch):
    bad = tmp_path / "rule-cpu-other.json"
    bad.write_text(json.dumps({"format": 2, "features": list(_rule.FEATURE_NAMES[:-2]), "cases": []}))
    good = tmp_path / "rule-cpu.json"
    good.write_text((_rule.table_path("cpu")).read_text())
    monkeypatch.setattr(_rule, "shipped_paths", lambda device: [good, bad])
    monkeypatch.delitem(_rule._tables, "cpu", raising=False)
    monkeypatch.setattr(_rule, "_shipped", {})
    with pytest.warns(RuntimeWarning, match=r"rule-cpu-other\.json is not used: it was fitted on features"):
        found = _rule.tables("cpu")
    assert [t.path for t in found] == [str(good)]  # the usable one still decides
    monkeypatch.setattr(_rule, "_shipped", {})
    bad.write_text("{not json")
    with pytest.warns(RuntimeWarning, match=r"rule-cpu-other\.json is not used"):
        assert _rule.load_table("cpu")["cases"]


def test_fit_grid_reaches_the_class_of_the_held_out_set():
    grid = crossover.fit_grid()
    keys = [(p.x_shape, p.w_shape, p.stride, p.groups, p.direction) for p in grid]
    assert len(keys) == len(set(keys))  # no problem measured twice
    specs = [(p, crossover.spec_of(p)) for p in grid]
    # the deep end of a network: 1x1 convolutions on 1 and 7 pixels with 1024 channels
    for pixels in (1, 49):
        assert any(
            s.kernel_size == (1, 1)
            and s.in_channels >= 1024
            and s.out_channels >= 1024
            and s.out_size[0] ** 2 == pixels
            for p, s in specs
        )
    # depthwise with stride 2 in both directions, large kernels on few channels
    for direction in ("forward", "backward"):
        assert any(s.is_depthwise and p.stride == 2 and p.direction == direction for p, s in specs)
    assert any(s.kernel_size == (7, 7) and s.in_channels <= 16 for p, s in specs)


def test_deep_end_held_out_layers_have_a_near_fitted_neighbour():
    # The classifier (1x1 C1280->1000 on 1 pixel) had no fitted problem within
    # log2-distance 4.6 before the deep-end block; now its nearest is within 1.
    fitted = [(_rule.features(crossover.spec_of(p)), p.direction) for p in crossover.fit_grid()]
    for problem in regret.held_out():
        if "classifier" in problem.name or "C576->160 7" in problem.name:
            point = _rule.features(crossover.spec_of(problem))
            nearest = min(_rule._distance(point, f) for f, d in fitted if d == problem.direction)
            assert nearest < 1.0, problem.name


def test_crossover_writes_the_rule_table_the_rule_reads(tmp_path, monkeypatch):
    tiny = [
        Problem("tiny fwd", (1, 2, 6, 6), (3, 2, 3, 3), padding=1),
        Problem("tiny bwd", (1, 2, 6, 6), (3, 2, 3, 3), padding=1, direction="backward"),
    ]
    monkeypatch.setattr(crossover, "fit_grid", lambda **kw: tiny)
    data = tmp_path / "rule-cpu.json"
    assert crossover.main(["--data", str(data), "--docs", str(tmp_path)]) == 0
    table = json.loads(data.read_text())
    assert [c["name"] for c in table["cases"]] == ["tiny fwd", "tiny bwd"]
    assert table["format"] == _rule.FORMAT and table["kind"] == "shipped" and table["machine"]["key"]
    assert {c["threads"] for c in table["cases"]} == {cs.get_num_threads()}
    assert {"numpy/im2col", "cython/direct"} <= set(table["cases"][0]["times"])
    assert "python/direct" not in table["cases"][0]["times"]  # skipped by default
    text = (tmp_path / "crossover-cpu.md").read_text()
    assert "tiny fwd" in text and "Wins:" in text
    monkeypatch.setitem(_rule._tables, "cpu", table)
    spec = crossover.spec_of(tiny[0])
    ranking = _rule.rank(spec, "forward", list(table["cases"][0]["times"]), "cpu")
    winner = min(table["cases"][0]["times"], key=table["cases"][0]["times"].get)
    assert ranking[0][0] == winner  # on a measured point the rule returns its measured winner
    # --refit measures nothing: same times, features recomputed from the grid's problems
    for case in table["cases"]:
        case["features"] = [0.0] * len(case["features"])
    data.write_text(json.dumps(table))
    assert crossover.main(["--refit", "--data", str(data), "--docs", str(tmp_path)]) == 0
    refitted = json.loads(data.read_text())
    assert "refitted" in refitted
    for before, after, problem in zip(table["cases"], refitted["cases"], tiny):
        assert after["times"] == before["times"]
        assert after["features"] == list(_rule.features(crossover.spec_of(problem), before["threads"]))
    assert refitted["machine"] == table["machine"]


def test_refit_rejects_a_case_the_grid_no_longer_has():
    table = {"device": "cpu", "machine": "m", "date": "d", "cases": [{"name": "gone", "direction": "forward"}]}
    with pytest.raises(ValueError, match="'gone' .* not in the fitting grid"):
        crossover.refit(table, [Problem("tiny fwd", (1, 2, 6, 6), (3, 2, 3, 3), padding=1)])


def test_fit_table_picks_the_neighbour_count_with_fewest_misses():
    # Three near twins and one far odd problem whose loser has a x40 spike.
    def case(name, point, times):
        return {"name": name, "direction": "forward", "features": point, "times": times}

    rows = [
        case("a", [0.0, 0.0], {"p/x": 1.0, "q/y": 1.2}),
        case("b", [0.1, 0.0], {"p/x": 1.0, "q/y": 1.3}),
        case("c", [0.2, 0.0], {"p/x": 1.0, "q/y": 1.1}),
        case("d", [5.0, 0.0], {"p/x": 40.0, "q/y": 1.0}),
    ]
    table = crossover.fit_table("cpu", rows, "m", "d", None)
    stats = table["leave_one_out"]
    chosen = stats[str(table["neighbours"])]
    for other in stats.values():
        assert (chosen["over_1.5"], chosen["geomean"]) <= (other["over_1.5"], other["geomean"])
    assert set(stats) == {str(k) for k in crossover.NEIGHBOUR_CHOICES}
    assert table["seconds"] is None and table["features"] == list(_rule.FEATURE_NAMES)
    assert table["thread_weight"] == 1.0  # one thread count: nothing to weigh


def test_regret_rows_are_consistent():
    rows = regret.regrets([Problem("tiny", (1, 2, 6, 6), (3, 2, 3, 3), padding=1)], "cpu", ("python",), progress=False)
    (row,) = rows
    assert row["rule_regret"] >= 1.0 and row["tuned_regret"] >= 1.0 and row["priority_regret"] >= 1.0
    for pick in ("rule", "tuned", "priority"):
        if row[pick] == row["best"]:
            assert row[f"{pick}_regret"] == 1.0
    text = regret._markdown("cpu", rows, "machine", "date")
    assert "| tiny |" in text
    assert row["rule_reason"]  # why the rule chose, for the misses section


def test_regret_table_lists_the_misses_with_the_rule_reason():
    row = {
        "name": "miss",
        "direction": "forward",
        "best": "a/x",
        "best_s": 1e-4,
        "rule": "b/y",
        "rule_regret": 2.0,
        "rule_reason": "fitted rule: predicted x1.00 of the best on its 2 nearest measured problems (p, q)",
        "tuned": "a/x",
        "tuned_regret": 1.0,
        "priority": "a/x",
        "priority_regret": 1.0,
    }
    hit = dict(row, name="hit", rule="a/x", rule_regret=1.0)
    text = regret._markdown("cpu", [row, hit], "machine", "date")
    assert "Over target" in text
    assert "- miss (forward): rule x2.00, autotune x1.00; fitted rule" in text
    assert "- hit" not in text
    assert "Over target" not in regret._markdown("cpu", [hit], "machine", "date")


def test_the_rule_pick_on_a_device_is_made_among_that_devices_backends():
    """On a GPU the regret's rule pick is what cs.conv2d would choose for arrays living there, never a CPU
    backend (whose time the GPU measurement does not have: a NaN regret)."""
    import convsuite as cs
    from convsuite.backends.base import Algorithm, Backend

    class Gpu(Backend):
        name, device, algorithms = "fake_gpu_for_regret", "gpu", ("one", "two")

        def algorithm_table(self):
            plan = cs.get_backend("numpy").algorithm_table()["im2col"].plan
            return {a: Algorithm(a, a, plan, directions=("forward", "backward")) for a in self.algorithms}

        def choose_algorithm(self, spec, direction):
            return "two", "the fake's hand rule"

    cs.register_backend(Gpu())
    try:
        problem = Problem("tiny", (1, 2, 6, 6), (3, 2, 3, 3), padding=1)
        assert regret._rule_pick(problem, "gpu")[0] == "fake_gpu_for_regret/two"
        assert not regret._rule_pick(problem, "cpu")[0].startswith("fake_gpu")
    finally:
        cs.unregister_backend("fake_gpu_for_regret")


def test_machine_line_states_the_load_before_and_after():
    line = crossover._machine("cpu", "0.10/0.20/0.30")
    assert "threads" in line and "load average 0.10/0.20/0.30 before, " in line and line.endswith(" after")
    assert "load average" not in crossover._machine("cpu")
    assert len(crossover._load().split("/")) == 3


def test_refit_without_a_readable_table_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        crossover.main(["--refit", "--data", str(tmp_path / "missing.json"), "--docs", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "--refit needs a measured table at" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--forward", "--backward", "--depthwise-forward", "--first-backward"])
def test_grid_counts_must_not_be_negative(option, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        crossover.main([option, "-1", "--data", str(tmp_path / "t.json"), "--docs", str(tmp_path)])
    assert exit_info.value.code == 2
    assert f"{option} must be a count >= 0; got -1" in capsys.readouterr().err


def test_refit_upgrades_a_format_1_table_at_its_recorded_thread_count():
    tiny = Problem("tiny fwd", (1, 2, 6, 6), (3, 2, 3, 3), padding=1)
    old = {
        "device": "cpu",
        "machine": "AMD EPYC x2; Linux; threads 2; load average 0.1/0.1/0.1",
        "date": "2026-11-25 22:54 UTC",
        "cases": [{"name": "tiny fwd", "direction": "forward", "features": [0.0] * 9, "times": {"a/x": 1.0}}],
    }
    table = crossover.refit(old, [tiny])
    assert table["format"] == 2 and table["threads"] == [2] and table["host"].startswith("AMD EPYC x2")
    assert table["cases"][0]["features"] == list(_rule.features(crossover.spec_of(tiny), 2))


def test_crossover_measures_at_each_thread_count_within_a_budget(tmp_path, monkeypatch):
    tiny = [
        Problem("tiny fwd", (1, 2, 6, 6), (3, 2, 3, 3), padding=1),
        Problem("tiny bwd", (1, 2, 6, 6), (3, 2, 3, 3), padding=1, direction="backward"),
    ]
    monkeypatch.setattr(crossover, "fit_grid", lambda **kw: tiny)
    out = tmp_path / "xeon.json"
    args = ["--threads", "1", "--budget-s", "600", "--out", str(out), "--docs", str(tmp_path)]
    assert crossover.main([*args, "--skip", "numba,joblib"]) == 0
    table = json.loads(out.read_text())
    assert {(c["name"], c["threads"]) for c in table["cases"]} == {("tiny fwd", 1), ("tiny bwd", 1)}
    assert table["threads"] == [1] and "--threads 1 --budget-s 600" in table["command"]
    assert (tmp_path / "crossover-cpu-xeon.md").is_file()
    _rule.checked_table(table, "cpu")  # a table the rule can read


def test_crossover_resume_adds_the_problems_a_table_lacks(tmp_path, monkeypatch, capsys):
    fwd = Problem("tiny fwd", (1, 2, 6, 6), (3, 2, 3, 3), padding=1)
    bwd = Problem("tiny bwd", (1, 2, 6, 6), (3, 2, 3, 3), padding=1, direction="backward")
    out = tmp_path / "t.json"
    args = ["--skip", "numba,joblib", "--threads", "1", "--out", str(out), "--docs", str(tmp_path)]
    monkeypatch.setattr(crossover, "fit_grid", lambda **kw: [fwd])
    assert crossover.main(args) == 0
    first = json.loads(out.read_text())
    monkeypatch.setattr(crossover, "fit_grid", lambda **kw: [fwd, bwd])
    assert crossover.main([*args, "--resume"]) == 0
    table = json.loads(out.read_text())
    assert [c["name"] for c in table["cases"]] == ["tiny fwd", "tiny bwd"]
    assert table["cases"][0] == first["cases"][0]  # kept, not measured again
    from convsuite import _machine

    other = dataclasses.replace(_machine.current(), logical_cores=64)
    monkeypatch.setattr(_machine, "current", lambda: other)
    with pytest.raises(SystemExit) as exit_info:
        crossover.main([*args, "--resume"])
    assert exit_info.value.code == 2 and "measured on another machine" in capsys.readouterr().err


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--threads", "0", "--threads: must be comma-separated thread counts >= 1"),
        ("--threads", "1,x", "--threads: must be comma-separated thread counts >= 1"),
        ("--threads", "100000", "each count must be at most"),
        ("--budget-s", "-1", "--budget-s: must be a finite number > 0; got '-1'"),
        ("--budget-s", "nan", "--budget-s: must be a finite number > 0; got 'nan'"),
    ],
)
def test_crossover_refuses_bad_threads_and_budgets(option, value, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        crossover.main([option, value, "--out", str(tmp_path / "t.json"), "--docs", str(tmp_path)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_default_output_of_another_machine_is_a_table_of_its_own(monkeypatch):
    from convsuite import _machine

    shipped = json.loads(_rule.table_path("cpu").read_text())
    recorded = _machine.Machine.from_dict(shipped["machine"])
    monkeypatch.setattr(_machine, "current", lambda: recorded)
    assert crossover.default_out("cpu").name == "rule-cpu.json"
    other = dataclasses.replace(recorded, logical_cores=16, usable_cores=16)
    monkeypatch.setattr(_machine, "current", lambda: other)
    assert crossover.default_out("cpu").name == f"rule-cpu-{other.key()}.json"


# --- leave one network out ---------------------------------------------------------------------


def _net_case(network, name, point, times, direction="forward"):
    return {"network": network, "name": name, "direction": direction, "features": point, "times": times}


SYNTHETIC_NETWORKS = [
    _net_case("A", "a1", [0.0, 0.0], {"p/x": 1.0, "q/y": 2.0}),
    _net_case("A", "a2", [10.0, 0.0], {"p/x": 3.0, "q/y": 1.0}),
    _net_case("B", "b1", [0.5, 0.0], {"p/x": 1.0, "q/y": 4.0}),
    _net_case("B", "b2", [10.5, 0.0], {"p/x": 1.0, "q/y": 2.0}),
    _net_case("C", "c1", [20.0, 0.0], {"p/x": 1.0, "q/y": 1.5}),
]


def test_leave_one_network_out_equals_the_hand_computation():
    # One voting neighbour, from the other networks only:
    #   without A: a1's nearest is b1 (p wins there) -> p, 1/1 = 1; a2's nearest is b2 (p) -> p, 3/1 = 3
    #   without B: b1's nearest is a1 (p) -> 1; b2's nearest is a2 (q wins there) -> q, 2/1 = 2
    #   without C: c1's nearest is b2 (9.5 away, a2 is 10) -> p, 1/1 = 1
    result = regret.leave_one_network_out(SYNTHETIC_NETWORKS, neighbours=1)
    nets = result["networks"]
    assert [r[1:] for r in nets["A"]["regrets"]] == [("p/x", 1.0), ("p/x", 3.0)]
    assert nets["A"]["geomean"] == pytest.approx(math.sqrt(3)) and nets["A"]["worst"] == 3.0
    assert nets["A"]["worst_layer"] == "a2" and nets["A"]["over_1.5"] == 1
    assert nets["B"]["geomean"] == pytest.approx(math.sqrt(2)) and nets["B"]["worst"] == 2.0
    assert nets["C"]["geomean"] == 1.0 and nets["C"]["layers"] == 1
    overall = result["overall"]
    assert overall["geomean"] == pytest.approx(6 ** (1 / 5)) and overall["worst"] == 3.0
    assert overall["worst_layer"] == "A: a2" and overall["layers"] == 5 and result["unjudged"] == []
    text = regret.network_markdown(result, "machine", "date", "synthetic")
    assert "| A | 2 | 1.73 | 3.00 | a2 | 1 |" in text and "| all | 5 | 1.43 | 3.00 | A: a2 | 2 |" in text


def test_leave_one_network_out_trains_on_the_base_and_fits_the_neighbours():
    # A base case right on a2 where q wins turns a2's pick to q: regret 1 instead of 3.
    base = [{"name": "grid", "direction": "forward", "features": [10.0, 0.1], "times": {"p/x": 2.0, "q/y": 1.0}}]
    result = regret.leave_one_network_out(SYNTHETIC_NETWORKS, neighbours=1, base=base)
    assert result["networks"]["A"]["regrets"][1][1:] == ("q/y", 1.0)
    fitted = regret.leave_one_network_out(SYNTHETIC_NETWORKS)  # neighbours fitted per fold
    assert set(fitted["networks"]) == {"A", "B", "C"}
    assert all(r >= 1.0 for net in fitted["networks"].values() for _, _, r in net["regrets"])
    # a layer of a direction no other network has cannot be judged, and says so
    lone = [*SYNTHETIC_NETWORKS, _net_case("C", "c-bwd", [1.0, 0.0], {"p/x": 1.0}, direction="backward")]
    assert regret.leave_one_network_out(lone, neighbours=1)["unjudged"] == ["c-bwd"]


@pytest.mark.parametrize(
    "cases, kwargs, error, message",
    [
        ([dict(SYNTHETIC_NETWORKS[0], network="")] + SYNTHETIC_NETWORKS[1:], {}, ValueError, "`network`"),
        (SYNTHETIC_NETWORKS[:2], {}, ValueError, "at least two networks"),
        (SYNTHETIC_NETWORKS, {"neighbours": 0}, ValueError, "`neighbours` must be an int >= 1"),
        ([dict(SYNTHETIC_NETWORKS[0], times={"p/x": float("nan")})] + SYNTHETIC_NETWORKS[1:], {}, ValueError, "nan"),
        ("A", {}, TypeError, "`cases` must be a list"),
        ([dict(SYNTHETIC_NETWORKS[0], features=[1.0])] + SYNTHETIC_NETWORKS[1:], {}, ValueError, "one length"),
    ],
)
def test_leave_one_network_out_refuses_bad_cases(cases, kwargs, error, message):
    with pytest.raises(error, match=message):
        regret.leave_one_network_out(cases, **kwargs)


def test_regret_command_leaves_one_network_out_of_a_file(tmp_path, capsys):
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps(SYNTHETIC_NETWORKS))
    assert regret.main(["--by-network", str(cases), "--neighbours", "1", "--docs", str(tmp_path)]) == 0
    text = (tmp_path / "regret-by-network-cpu.md").read_text()
    assert "| A | 2 | 1.73 | 3.00 | a2 | 1 |" in text and text in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        regret.main(["--by-network", str(tmp_path / "missing.json"), "--docs", ""])
    assert exit_info.value.code == 2 and "--by-network" in capsys.readouterr().err


def test_held_out_layers_are_labelled_by_network():
    networks = {regret.network_of(p) for p in regret.held_out()}
    assert {"ece408-fa19", "ece408-fa21", "mobilenet_v2", "synthetic"} == networks
