"""``convsuite sweep``: the library, its files and plots, the command line, the seed report."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from convsuite import cli
from convsuite._registry import get_backend, list_backends, register_backend, unregister_backend
from convsuite.backends.base import Algorithm, Backend, Tunable
from convsuite.bench import sweep_report
from convsuite.bench.sweep import parse_grid, parse_param, run_sweep, sample_configurations
from convsuite.bench.sweep_output import CSV_COLUMNS, format_table, summary_lines, table, write_sweep
from convsuite.bench.workloads import Case
from convsuite.testing import reference_backward, reference_forward

FAKE = "sweep-test-fake"

#: Seconds of deliberate extra work per unit of ``spin``: far above the noise
#: of a shared machine, so the fastest configuration is known in advance.
SPIN_S = 0.004


def _spin(units: int) -> None:
    """Busy-wait ``units * SPIN_S`` seconds (extra work that changes nothing)."""
    end = time.perf_counter() + units * SPIN_S
    while time.perf_counter() < end:
        pass


def _constraint(spec, direction, params):
    """``tile`` must divide the output channels."""
    if spec.out_channels % params["tile"]:
        return f"tile {params['tile']} does not divide the output channels M={spec.out_channels}"
    return True


def _plan(spec, direction, params):
    """Compute with the float64 reference, in ``tile``-channel blocks; ``spin`` adds work, ``sloppy`` is wrong."""
    tile, spin, mode = params["tile"], params["spin"], params["mode"]

    def forward(x, w, bias, out):
        _spin(spin)
        y = reference_forward(spec, x, w, bias)
        for m in range(0, spec.out_channels, tile):  # the tiles must cover every channel
            out[:, m : m + tile] = y[:, m : m + tile]
        if mode == "sloppy":  # deliberately wrong: the last output channel is left at zero
            out[:, -1] = 0

    def backward(grad_y, x, w, grad_x, grad_w, grad_b):
        _spin(spin)
        gx, gw, gb = reference_backward(spec, grad_y, x, w)
        grad_x[...], grad_w[...], grad_b[...] = gx, gw, gb
        if mode == "sloppy":
            grad_w[-1] = 0

    return forward if direction == "forward" else backward


TOY = Algorithm(
    "toy",
    "the float64 reference, with knobs that cost time or break it",
    _plan,
    directions=("forward", "backward"),
    ndims=(2,),
    tunables=(
        Tunable("tile", (1, 2, 3), 1, "output channels per block"),
        Tunable("spin", (0, 1, 3), lambda spec, direction: 1, "units of deliberate extra work"),
        Tunable("mode", ("exact", "sloppy"), "exact", "sloppy leaves a channel at zero"),
    ),
    constraint=_constraint,
)


class FakeBackend(Backend):
    """A CPU backend with one algorithm whose best configuration is known."""

    name = FAKE
    algorithms = ("toy",)
    description = "test-only backend for sweeps"

    def algorithm_table(self):
        return {"toy": TOY}


CASES = [
    Case("toy", "six channels", "conv2d", (2, 3, 9, 9), (6, 3, 3, 3), padding=1),
    Case("toy", "four channels s2", "conv2d", (3, 4, 8, 8), (4, 4, 3, 3), stride=2, padding=1, dilation=1),
]

FAST = dict(repeat=3, rounds=3, warmup=0, settle_s=0.0)


@pytest.fixture
def fake_backend():
    register_backend(FakeBackend())
    try:
        yield get_backend(FAKE)
    finally:
        unregister_backend(FAKE)


@pytest.fixture
def swept(fake_backend):
    return run_sweep(FAKE, "toy", CASES, **FAST)  # no grid: every combination of every parameter


# --- the library --------------------------------------------------------------


def test_sweep_finds_the_known_best(swept):
    """Spin 0, exact: the only fast correct configurations; tile costs nothing, so any allowed tile wins."""
    assert swept.best["spin"] == 0 and swept.best["mode"] == "exact"
    assert swept.best["tile"] in (1, 2)  # 3 does not divide 4 channels, so it has no total
    for layer in swept.layers:
        assert layer.best["spin"] == 0 and layer.best["mode"] == "exact"
        assert layer.default == {"tile": 1, "spin": 1, "mode": "exact"}
        # The default spins one unit more than the best: at least SPIN_S slower.
        assert layer.default_s - layer.best_s > 0.5 * SPIN_S
        assert layer.speedup > 1
    assert swept.best_total_s < swept.default_total_s
    assert len(swept.rows) == 3 * 3 * 2


def test_refused_configurations_carry_their_reason(swept):
    assert "modules_built" not in swept.meta  # nothing compiled per configuration: no build line
    row = swept.row_for({"tile": 3, "spin": 0, "mode": "exact"})
    six, four = (layer.label for layer in swept.layers)
    assert row.cells[six].status == "ok"
    cell = row.cells[four]
    assert cell.status == "refused" and "tile 3 does not divide the output channels M=4" in cell.reason
    assert row.total_s is None
    header, rows = table(swept)
    line = next(r for r in rows if r[:3] == ["3", "0", "exact"])
    assert line[header.index(f"{four} ms")] == "-" and line[header.index("total ms")] == "-"


def test_a_wrong_configuration_is_failed_never_best(swept):
    for row in swept.rows:
        for label, cell in row.cells.items():
            if row.params["mode"] == "sloppy" and cell.status != "refused":
                assert cell.status == "failed", (row.params, label)
                assert "disagrees with the float64 reference" in cell.reason
                assert cell.median_s is None and cell.compile_s is not None
    assert swept.best["mode"] == "exact"
    assert all(layer.best["mode"] == "exact" for layer in swept.layers)
    failures = swept.failures()
    assert failures and all(params["mode"] == "sloppy" for params, _, _ in failures)
    assert any(line.startswith("FAILED: tile=1 spin=0 mode=sloppy") for line in summary_lines(swept))


def test_backward_sweep_checks_gradients(fake_backend):
    grid = {"spin": (0,), "tile": (1,), "mode": ("exact", "sloppy")}
    result = run_sweep(FAKE, "toy", CASES[:1], grid=grid, direction="backward", **FAST)
    exact = result.row_for({"tile": 1, "spin": 0, "mode": "exact"})
    sloppy = result.row_for({"tile": 1, "spin": 0, "mode": "sloppy"})
    label = result.layers[0].label
    assert label.endswith("backward")
    assert exact.cells[label].status == "ok" and exact.cells[label].max_rel_error < 1e-5
    assert sloppy.cells[label].status == "failed"


def test_the_default_is_measured_even_outside_the_grid(fake_backend):
    result = run_sweep(FAKE, "toy", CASES[:1], grid={"spin": (0,), "mode": ("exact",), "tile": (2,)}, **FAST)
    layer = result.layers[0]
    assert layer.default == {"tile": 1, "spin": 1, "mode": "exact"}
    assert result.row_for(layer.default).cells[layer.label].status == "ok"
    assert layer.best == {"tile": 2, "spin": 0, "mode": "exact"} and layer.speedup > 1


def test_a_grid_varies_only_the_parameters_it_names(fake_backend):
    """--param tile=1,2 sweeps tile alone: spin and mode stay at each layer's hand-chosen value."""
    result = run_sweep(FAKE, "toy", CASES, grid={"tile": (1, 2)}, **FAST)
    measured = [row.params for row in result.rows]
    assert measured == [{"tile": 1, "spin": 1, "mode": "exact"}, {"tile": 2, "spin": 1, "mode": "exact"}]
    assert result.meta["varied"] == ["tile"] and result.meta["configurations"] == 2
    assert all(cell.status in ("ok", "refused") for row in result.rows for cell in row.cells.values())


def test_a_grid_keeps_a_per_layer_default_per_layer(fake_backend):
    """A parameter whose hand rule depends on the case keeps each layer's own value, not one value for all."""
    per_layer = Algorithm(
        "per_layer",
        "spin by the layer's channels",
        TOY.plan,
        ndims=(2,),
        tunables=(
            TOY.tunables[0],
            Tunable("spin", (0, 1, 3), lambda spec, direction: 0 if spec.out_channels == 6 else 1, "extra work"),
            TOY.tunables[2],
        ),
        constraint=_constraint,
    )

    class PerLayer(FakeBackend):
        name = FAKE + "-per-layer"
        algorithms = ("per_layer",)

        def algorithm_table(self):
            return {"per_layer": per_layer}

    register_backend(PerLayer())
    try:
        result = run_sweep(FAKE + "-per-layer", "per_layer", CASES, grid={"tile": (1, 2)}, **FAST)
    finally:
        unregister_backend(FAKE + "-per-layer")
    six, four = (layer.label for layer in result.layers)
    ran = {label: [row.params for row in result.rows if row.cells[label].status == "ok"] for label in (six, four)}
    assert ran[six] == [{"tile": 1, "spin": 0, "mode": "exact"}, {"tile": 2, "spin": 0, "mode": "exact"}]
    assert ran[four] == [{"tile": 1, "spin": 1, "mode": "exact"}, {"tile": 2, "spin": 1, "mode": "exact"}]


def test_cli_refuses_options_a_parameter_list_would_drop(fake_backend, capsys):
    """Without --algorithm, --workload and --param used to be dropped (the list printed, exit 0)."""
    assert cli.main(["sweep", "--backend", FAKE, "--workload", "default"]) == 2
    err = capsys.readouterr().err
    assert "--workload applies to one algorithm: add --algorithm NAME" in err and "toy" in err
    assert len(err.strip().splitlines()) == 1
    assert cli.main(["sweep", "--backend", FAKE, "--param", "tile=1"]) == 2
    assert "--param applies to one algorithm" in capsys.readouterr().err
    assert cli.main(["sweep", "--backend", FAKE, "--list", "--workload", "default", "--param", "tile=1"]) == 2
    assert "--list only lists the parameters; leave out --workload and --param" in capsys.readouterr().err


def test_grid_parsing_converts_and_refuses_clearly():
    assert parse_param("tile=1,3", TOY) == ("tile", (1, 3))
    assert parse_grid(["mode=sloppy", "spin=0"], TOY) == {"mode": ("sloppy",), "spin": (0,)}
    with pytest.raises(ValueError, match=r"--param tile accepts 1, 2, 3; got '4'"):
        parse_param("tile=1,4", TOY)
    with pytest.raises(ValueError, match=r"has no tunable parameter 'tile_w' \(its parameters: tile, spin, mode\)"):
        parse_param("tile_w=8", TOY)
    with pytest.raises(ValueError, match=r"--param must be NAME=V1,V2"):
        parse_param("tile", TOY)
    with pytest.raises(ValueError, match=r"given twice"):
        parse_grid(["tile=1", "tile=2"], TOY)
    with pytest.raises(ValueError, match=r"accepts 1, 2, 3; got 'x'"):
        parse_param("tile=x", TOY)


def test_sampling_is_deterministic_and_bounded():
    configs = TOY.configurations()
    a, b = sample_configurations(configs, 5, seed=3), sample_configurations(configs, 5, seed=3)
    assert a == b and len(a) == 5 and all(c in configs for c in a)
    assert sample_configurations(configs, None) == configs


def test_bad_requests_are_value_errors(fake_backend):
    with pytest.raises(ValueError, match="--algorithm must be one of toy"):
        run_sweep(FAKE, "nope", CASES)
    with pytest.raises(ValueError, match="--direction"):
        run_sweep(FAKE, "toy", CASES, direction="sideways")
    with pytest.raises(ValueError, match="accepts 1, 2, 3; got 5"):
        run_sweep(FAKE, "toy", CASES, grid={"tile": (5,)})


# --- files and plots --------------------------------------------------------


def test_files_are_written_and_parseable(swept, tmp_path):
    files = write_sweep(swept, tmp_path)
    data = json.loads(files["json"].read_text())
    assert data["best"] == swept.best and data["backend"] == FAKE and data["algorithm"] == "toy"
    assert data["meta"]["machine"] and data["meta"]["date"] and data["dtype"] == "float32"
    assert {t["name"] for t in data["tunables"]} == {"tile", "spin", "mode"}
    assert len(data["rows"]) == len(swept.rows)
    with files["csv"].open() as handle:
        rows = list(csv.DictReader(handle))
    expected = ["backend", "algorithm", "workload", "direction", "dtype", "layer", "tile", "spin", "mode", *CSV_COLUMNS]
    assert list(rows[0]) == expected
    assert len(rows) == len(swept.rows) * len(swept.layers)
    best = [r for r in rows if r["is_best_overall"] == "True"]
    assert len(best) == len(swept.layers) and all(r["status"] == "ok" and float(r["median_s"]) > 0 for r in best)
    assert {r["status"] for r in rows} == {"ok", "refused", "failed"}
    for kind in ("plot sweep-tile", "plot sweep-spin", "plot sweep-mode"):
        assert files[kind].stat().st_size > 1000
    assert "heatmap" not in files  # three parameters: no heat map


def test_two_parameters_give_a_heat_map(fake_backend, tmp_path):
    result = run_sweep(FAKE, "toy", CASES, grid={"mode": ("exact",)}, **FAST)
    # mode has one value but is still a parameter: the heat map needs exactly two.
    assert "heatmap" not in write_sweep(result, tmp_path / "three")

    two = Algorithm(
        "two",
        "two knobs",
        lambda s, d, p: TOY.plan(s, d, {**p, "mode": "exact"}),
        ndims=(2,),
        tunables=TOY.tunables[:2],
        constraint=_constraint,
    )

    class TwoKnobs(FakeBackend):
        name = FAKE + "-two"
        algorithms = ("two",)

        def algorithm_table(self):
            return {"two": two}

    register_backend(TwoKnobs())
    try:
        result = run_sweep(FAKE + "-two", "two", CASES, **FAST)
    finally:
        unregister_backend(FAKE + "-two")
    files = write_sweep(result, tmp_path / "two")
    assert files["heatmap"].stat().st_size > 1000
    text = format_table(result)
    assert "best" in text and "default" in text and "total ms" in text
    assert any("best vs default: x" in line for line in summary_lines(result))
    timing = [line for line in summary_lines(result) if line.startswith("sweep time:")]
    assert len(timing) == 1 and "plan + first calls" in timing[0]


# --- the command line ----------------------------------------------------------


def test_cli_sweep_end_to_end(fake_backend, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("convsuite.bench.sweep.SETTLE_S", 0.0)  # the pause between blocks only slows a test
    monkeypatch.setattr("convsuite.bench.sweep._cases", lambda workload, device, direction: ("toy", CASES))
    argv = [
        "sweep",
        "--backend",
        FAKE,
        "--algorithm",
        "toy",
        "--workload",
        "default",
        "--param",
        "mode=exact",
        "--param",
        "spin=0,3",
        "--repeat",
        "3",
        "--out",
        str(tmp_path),
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "total ms" in out and "best vs default: x" in out and "best over the workload" in out
    assert (tmp_path / "sweep.json").exists() and (tmp_path / "sweep.csv").exists()
    assert json.loads((tmp_path / "sweep.json").read_text())["best"]["spin"] == 0


def test_cli_sweep_exits_nonzero_on_a_failed_configuration(fake_backend, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("convsuite.bench.sweep._cases", lambda workload, device, direction: ("toy", CASES[:1]))
    argv = [
        "sweep",
        "--backend",
        FAKE,
        "--algorithm",
        "toy",
        "--workload",
        "default",
        "--param",
        "spin=0",
        "--param",
        "tile=1",
        "--param",
        "mode=exact,sloppy",
        "--repeat",
        "1",
        "--out",
        str(tmp_path),
    ]
    assert cli.main(argv) == 1
    assert "FAILED: tile=1 spin=0 mode=sloppy" in capsys.readouterr().err


def test_cli_lists_tunables(fake_backend, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    assert cli.main(["sweep", "--backend", FAKE, "--list"]) == 0
    out = capsys.readouterr().out
    assert "toy" in out and "tile" in out and "1, 2, 3" in out and "sloppy" in out
    assert "per case" in out  # spin's default is a rule, not a value
    assert cli.main(["sweep", "--backend", FAKE]) == 0  # no --algorithm: the same list


@pytest.mark.parametrize(
    "args, message",
    [
        (["--backend", "nope", "--algorithm", "toy", "--workload", "default"], "--backend must be one of"),
        (["--backend", FAKE, "--algorithm", "nope", "--workload", "default"], "--algorithm must be one of toy"),
        (["--backend", FAKE, "--algorithm", "toy", "--workload", "default", "--param", "tile=9"], "accepts 1, 2, 3"),
        (["--backend", FAKE, "--algorithm", "toy", "--workload", "default", "--param", "size=9"], "no tunable"),
        (["--backend", FAKE, "--algorithm", "toy"], "--workload is required"),
    ],
)
def test_cli_errors_are_one_line(fake_backend, args, message, capsys):
    assert cli.main(["sweep", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_unwritable_out_is_refused_before_measuring(fake_backend, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    argv = ["sweep", "--backend", FAKE, "--algorithm", "toy", "--workload", "default", "--out", str(blocker)]
    assert cli.main(argv) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_cli_unknown_workload_is_a_usage_error(fake_backend, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["sweep", "--backend", FAKE, "--algorithm", "toy", "--workload", "nope"])
    assert info.value.code == 2 and "invalid choice" in capsys.readouterr().err


# --- the seed report -------------------------------------------------------------


def test_seed_report_on_the_fake_backend(fake_backend, tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_report, "seed_cases", lambda device, record, backend: [("toy", "forward", CASES)])
    report = sweep_report.build_report("cpu", tmp_path, budget_s=5.0, backends=[FAKE], repeat=3)
    text = (tmp_path / "README.md").read_text()
    assert report["sweeps"] and "best/default" in text and FAKE in text and "toy" in text
    assert "spin=0" in text  # the best parameters are named
    assert (tmp_path / f"{FAKE}-toy-toy-forward" / "sweep.json").exists()
    # A run cut short keeps its sweeps' files; the summary is rebuilt from them.
    (tmp_path / "README.md").unlink()
    assert sweep_report.main(["--summarise", str(tmp_path), "--note", "cut short after one sweep"]) == 0
    rebuilt = (tmp_path / "README.md").read_text()
    assert "cut short after one sweep" in rebuilt and f"{FAKE} / toy" in rebuilt and "spin=0" in rebuilt
    assert "x" in rebuilt.split("| toy forward |")[1]  # a speedup column per layer
    with pytest.raises(FileNotFoundError):
        sweep_report.summarise_folder(tmp_path / "empty")
    # --algorithms restricts the report (a run split in parts); a name that is no tunable algorithm is an error.
    restricted = sweep_report.build_report("cpu", tmp_path / "b", budget_s=1.0, backends=[FAKE], algorithms=["toy"])
    assert len(restricted["sweeps"]) == 1
    with pytest.raises(ValueError, match=r"--algorithms: 'nope' is not a tunable algorithm .* \(those that are: toy\)"):
        sweep_report.build_report("cpu", tmp_path / "c", budget_s=1.0, backends=[FAKE], algorithms=["nope"])
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())


def test_seed_report_cli_refuses_an_unknown_algorithm(fake_backend, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sweep_report.main(["--device", "cpu", "--out", str(tmp_path), "--backends", FAKE, "--algorithms", "toy,nope"])
    assert exit_info.value.code == 2
    assert "--algorithms: 'nope' is not a tunable algorithm" in capsys.readouterr().err


def test_a_pruned_sweep_measures_the_defaults_neighbours_first():
    """Whatever the seed, the sample holds every one-step neighbour of the default, then random fill."""
    configs = TOY.configurations()
    centre = {"tile": 2, "spin": 1, "mode": "exact"}
    near = [
        {"tile": 1, "spin": 1, "mode": "exact"},
        {"tile": 3, "spin": 1, "mode": "exact"},
        {"tile": 2, "spin": 0, "mode": "exact"},
        {"tile": 2, "spin": 3, "mode": "exact"},
        {"tile": 2, "spin": 1, "mode": "sloppy"},
    ]
    for seed in range(5):
        picked = sample_configurations(configs, 7, seed, [centre])
        assert len(picked) == 7 and all(n in picked for n in near)
        assert picked == [c for c in configs if c in picked]  # grid order
    assert sample_configurations(configs, 7, 1, [centre]) == sample_configurations(configs, 7, 1, [centre])
    # An off-grid default (a hand rule's own value) has the nearest grid values either side as neighbours.
    off = sample_configurations(configs, 2, 0, [{"tile": 2.5, "spin": 0, "mode": "exact"}])
    assert off == [{"tile": 2, "spin": 0, "mode": "exact"}, {"tile": 3, "spin": 0, "mode": "exact"}]
    # Two centres share the limit in turn.
    two = sample_configurations(configs, 2, 0, [centre, {"tile": 1, "spin": 0, "mode": "exact"}])
    assert two == [{"tile": 1, "spin": 0, "mode": "sloppy"}, {"tile": 1, "spin": 1, "mode": "exact"}]  # one each


def test_seed_report_budget_prunes_deterministically():
    configs = TOY.configurations()
    assert len(configs) > 5
    # Below the minimum the budget is exceeded: fewer could not compare values with the default.
    assert sweep_report.configurations_for_budget(len(configs), 0.1, 1.0) == sweep_report.MIN_CONFIGS
    assert sweep_report.configurations_for_budget(3, 0.1, 1.0) is None  # all three
    assert sweep_report.configurations_for_budget(len(configs), 100.0, 1.0) is None
    assert sweep_report.configurations_for_budget(len(configs), 5.0, 1.0) == 5


# --- a real CPU algorithm ------------------------------------------------------


def _first_real_cpu_tunable():
    for info in list_backends():
        if info.device != "cpu" or not info.available or info.name == FAKE:
            continue
        backend = get_backend(info.name)
        for algorithm in info.algorithms:
            if backend.tunables(algorithm):
                return backend, algorithm
    return None


def test_sweep_on_a_real_cpu_algorithm(tmp_path):
    found = _first_real_cpu_tunable()
    assert found is not None, "every CPU backend's algorithms lost their tunables"
    backend, algorithm = found
    record = backend.algorithm_table()[algorithm]
    cases = [
        Case("real", "3x3 C4->8 s1", "conv2d", (2, 4, 12, 12), (8, 4, 3, 3), padding=1),
        Case(
            "real",
            "5x5 C6->6 g2 s2 d2",
            "conv2d",
            (1, 6, 17, 15),
            (6, 3, 5, 5),
            stride=2,
            padding=2,
            dilation=2,
            groups=2,
        ),
    ]
    direction = record.directions[0]
    if record.ndims == (1,):
        cases = [Case("real", "1-D N=5000 K=7", "conv1d", (5000,), (7,), padding="same", bias=False)]
    # A deterministic sample keeps a JIT backend's compilations few; each layer's default is measured too.
    result = run_sweep(backend, algorithm, cases, direction=direction, max_configs=4, **FAST)
    assert result.failures() == []
    statuses = {c.status for r in result.rows for c in r.cells.values()}
    assert "ok" in statuses and statuses <= {"ok", "refused", "not swept"}
    for layer, case in zip(result.layers, cases):
        if record.can_run(case.spec("float32"), direction) is True:
            assert layer.default_s is not None and layer.best is not None and layer.speedup >= 1
    files = write_sweep(result, tmp_path)
    assert files["json"].exists() and np.isfinite(result.best_total_s)


def test_seed_cases_follow_the_algorithm(fake_backend):
    """A 2-D algorithm with both directions: the ECE408 layers forward and cnn-train-3x3 backward, no 1-D signal."""
    plans = sweep_report.seed_cases("cpu", TOY, fake_backend)
    assert [(w, d) for w, d, _ in plans] == [
        ("ece408-fa19", "forward"),
        ("ece408-fa21", "forward"),
        ("cnn-train-3x3", "backward"),
    ]
    assert all(c.direction == d for _, d, cases in plans for c in cases)
    one_d = Algorithm("line", "1-D only", TOY.plan, ndims=(1,), tunables=TOY.tunables)
    [(workload, direction, cases)] = sweep_report.seed_cases("cpu", one_d, fake_backend)
    assert workload == "conv1d-signal" and direction == "forward"
    assert {c.x_shape for c in cases} == {(10**7,)} and len(cases) == 3  # the longest signal, each mask width


def test_backward_check_uses_the_whole_batch_when_the_slice_is_refused():
    """The check re-runs backward on 2 items; a configuration refused at batch 2 is checked on the whole batch."""

    def plan(spec, direction, params):
        if spec.batch % params["batch_block"]:  # like a real kernel, it cannot be built where refused
            raise ValueError("planned on a refused case")

        def backward(grad_y, x, w, grad_x, grad_w, grad_b):
            gx, gw, gb = reference_backward(spec, grad_y, x, w)
            grad_x[...], grad_w[...], grad_b[...] = gx, gw, gb
            if params["batch_block"] == 3:
                grad_w *= 1.01  # wrong, and only checkable on the whole batch of 3

        return backward

    record = Algorithm(
        "batched",
        "batch blocks that must divide the batch",
        plan,
        directions=("backward",),
        ndims=(2,),
        tunables=(Tunable("batch_block", (1, 3), 1, "images per block"),),
        constraint=lambda spec, d, p: True if spec.batch % p["batch_block"] == 0 else "batch_block must divide B",
    )

    class Batched(FakeBackend):
        name = FAKE + "-batched"
        algorithms = ("batched",)

        def algorithm_table(self):
            return {"batched": record}

    register_backend(Batched())
    try:
        case = Case("toy", "three images", "conv2d", (3, 3, 9, 9), (6, 3, 3, 3), padding=1, direction="backward")
        result = run_sweep(FAKE + "-batched", "batched", [case], direction="backward", **FAST)
    finally:
        unregister_backend(FAKE + "-batched")
    label = case.label
    assert result.row_for({"batch_block": 1}).cells[label].status == "ok"
    wrong = result.row_for({"batch_block": 3}).cells[label]
    assert wrong.status == "failed" and "disagrees with the float64 reference" in wrong.reason


def test_module_builds_are_reported_apart_from_running(tmp_path):
    """A backend that compiles one module per configuration: the sweep counts the new builds and their
    seconds (not those built before it started), says where they persist, and prints both."""
    built = {("old.cu", ()): 9.0}

    def plan(spec, direction, params):
        built.setdefault(("toy.cu", (("T", params["tile"]),)), 0.25)  # one module per tile value
        return _plan(spec, direction, params)

    class Compiling(FakeBackend):
        def algorithm_table(self):
            record = Algorithm("toy", TOY.summary, plan, directions=TOY.directions, tunables=TOY.tunables)
            return {"toy": record}

        def compiled_modules(self):
            return dict(built)

        def compile_cache(self):
            return {"directory": str(tmp_path), "reads_templates": True, "cupy": "14.2.0", "in_memory": False}

    register_backend(Compiling())
    try:
        result = run_sweep(FAKE, "toy", CASES[:1], grid={"tile": (1, 2), "spin": (0,), "mode": ("exact",)}, **FAST)
    finally:
        unregister_backend(FAKE)
    assert result.meta["modules_built"] == 2 and result.meta["module_build_s"] == pytest.approx(0.5)
    assert result.meta["compile_cache"]["directory"] == str(tmp_path)
    text = "\n".join(summary_lines(result))
    assert f"2 new module(s) built in 0.5 s (NVRTC, or loaded from the disk cache: read back from {tmp_path})" in (text)


# --- files checked before the sweep, written whole; a cut-short sweep.json skipped by name -------------------


def _forbidden(*args, **kwargs):
    raise AssertionError("swept before the output files were checked")


@pytest.mark.parametrize("blocked", ["sweep.json", "sweep.csv", "sweep-spin.png", "sweep-heatmap.png"])
def test_cli_sweep_checks_every_file_before_measuring(blocked, fake_backend, tmp_path, capsys, monkeypatch):
    """A folder where a file goes failed after every configuration was measured."""
    monkeypatch.setattr("convsuite.bench.sweep.run_sweep", _forbidden)
    (tmp_path / blocked).mkdir()
    argv = ["sweep", "--backend", FAKE, "--algorithm", "toy", "--workload", "default", "--out", str(tmp_path)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"--out '{tmp_path / blocked}' is a folder, not a file that can be written" in err


def test_seed_report_checks_its_files_before_the_first_sweep(fake_backend, tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_report, "seed_cases", lambda device, record, backend: [("toy", "forward", CASES)])
    monkeypatch.setattr(sweep_report, "run_sweep", _forbidden)
    (tmp_path / "README.md").mkdir()
    with pytest.raises(ValueError, match="README.md' is a folder"):
        sweep_report.build_report("cpu", tmp_path, budget_s=1.0, backends=[FAKE])
    (tmp_path / "README.md").rmdir()
    (tmp_path / f"{FAKE}-toy-toy-forward" / "sweep.csv").mkdir(parents=True)
    with pytest.raises(ValueError, match="sweep.csv' is a folder"):
        sweep_report.build_report("cpu", tmp_path, budget_s=1.0, backends=[FAKE])


def _summarise(folder) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "convsuite.bench.sweep_report", "--summarise", str(folder)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_summarise_skips_cut_short_and_foreign_sweep_files_by_name(swept, tmp_path):
    """--summarise is for a run cut short, and a cut-short sweep.json made it fail with a raw JSONDecodeError."""
    write_sweep(swept, tmp_path / "good")
    whole = (tmp_path / "good" / "sweep.json").read_text()
    bad = {"cut": whole[: len(whole) // 2], "foreign": '{"results": []}', "binary": "\udcff"}
    for name, text in bad.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "sweep.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    result = _summarise(tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    warnings = result.stderr.strip().splitlines()
    assert len(warnings) == 3 and all(line.startswith("warning: skipped ") for line in warnings)
    assert f"{tmp_path / 'cut' / 'sweep.json'}: not JSON: it ends early (cut short?" in result.stderr
    assert f"{tmp_path / 'foreign' / 'sweep.json'}: not a sweep.json of this version" in result.stderr
    assert f"{tmp_path / 'binary' / 'sweep.json'}: not UTF-8 text" in result.stderr
    readme = (tmp_path / "README.md").read_text()
    assert f"{FAKE} / toy" in readme and "Skipped 3 sweep file(s) that could not be read" in readme


def test_summarise_with_no_readable_sweep_is_a_usage_error(tmp_path):
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "sweep.json").write_text('{"backend": "numba", "layers": [')
    result = _summarise(tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--summarise: no readable */sweep.json under" in result.stderr and "cut short" in result.stderr
    assert not (tmp_path / "README.md").exists()


def test_a_sweep_file_that_cannot_be_written_is_saved_elsewhere(swept, tmp_path, monkeypatch):
    from convsuite import _files

    def refused(tmp, target):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(_files.os, "replace", refused)
    files = write_sweep(swept, tmp_path)
    assert all(path.parent == tmp_path and path.exists() for path in files.values())
    assert json.loads(files["json"].read_text())["best"] == swept.best
    assert len(swept.meta["not_saved"]) == len(files) and "Permission denied" in swept.meta["not_saved"][0]
    assert not (tmp_path / "sweep.json").exists() and not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]


def test_the_table_fits_a_terminal_by_naming_layers_in_a_key(swept):
    wide = format_table(swept)
    narrow = format_table(swept, width=60)
    assert "six channels ms" in wide.splitlines()[0]
    first = narrow.splitlines()[0]
    assert "L1 ms" in first and "L2 ms" in first and "six channels" not in first
    assert "L1: six channels" in narrow and "L2: four channels s2" in narrow
    assert max(len(line) for line in narrow.splitlines()) < max(len(line) for line in wide.splitlines())
