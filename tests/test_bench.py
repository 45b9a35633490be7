"""The comparison harness: taxonomy, error check, reports, CLI, workloads."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import convsuite as cs
from convsuite import cli
from convsuite.backends.base import Backend
from convsuite.bench.ceilings import Ceilings
from convsuite.bench.compare import run_comparison
from convsuite.bench.measure import measure
from convsuite.bench.workloads import Case, get_workload, workload_names

FIXED = Ceilings(device="cpu", copy_gbs=20.0, gemm_gflops=100.0, how="fixed for tests")
SMALL = Case("test", "3x3 C4->8 16x16 B=2", "conv2d", (2, 4, 16, 16), (8, 4, 3, 3), padding="same")


def test_taxonomy_fields_are_consistent():
    r = measure(SMALL, "numpy", "backend", "float32", 5, FIXED)
    assert r.status == "ok" and r.error_ok
    assert r.first_call_s > 0 and r.repeats == 5
    assert 0 < r.kernel_s <= r.end_to_end_s  # the kernel window lies inside every call
    assert r.kernel_range_s[0] <= r.kernel_s <= r.kernel_range_s[1]
    assert r.h2d_s is None and r.d2h_s is None  # CPU backend: no transfers
    assert r.flops == cs.explain(*SMALL.arrays("float32")[:2], **SMALL.keywords).spec.flops
    assert r.gflops == pytest.approx(r.flops / r.end_to_end_s / 1e9)
    assert r.frac_roof == pytest.approx(r.gflops / FIXED.roof(r.intensity))


def test_backward_and_anchor_rows():
    backward = Case("test", "b", "conv2d", (2, 3, 9, 9), (4, 3, 3, 3), padding=1, direction="backward")
    r = measure(backward, "numpy", "backend", "float64", 2, FIXED)
    assert r.status == "ok" and r.error_ok and r.flops == 2 * 2 * 4 * 81 * 27 * 2
    signal = Case("test", "s", "conv1d", (5000,), (7,), padding="same", bias=False)
    a = measure(signal, "np.convolve", "anchor", "float32", 2, FIXED)
    assert a.status == "ok" and a.error_ok and a.kernel_s is None
    skipped = measure(SMALL, "np.convolve", "anchor", "float32", 2, FIXED)
    assert skipped.status == "skipped" and "1-D" in skipped.reason


def test_slow_backend_runs_a_reduced_size_and_says_so():
    big = Case("test", "big", "conv2d", (64, 16, 32, 32), (16, 16, 3, 3), padding=1)
    r = measure(big, "python", "backend", "float32", 1, FIXED)
    assert r.status == "ok" and "reduced to batch 1" in r.note and r.x_shape[0] == 1


class OffByOne(Backend):
    """A deliberately wrong backend: the right answer plus one."""

    name = "off_by_one"
    algorithms = ("wrong",)
    description = "returns conv + 1"

    def forward(self, spec, x, w, bias, out, algorithm):
        from convsuite.backends.numpy_backend import NumpyBackend

        NumpyBackend().forward(spec, x, w, bias, out, "im2col")
        out += 1

    def backward(self, spec, grad_y, x, w, grad_x, grad_w, grad_b, algorithm):
        grad_x[...] = grad_w[...] = grad_b[...] = 0


@pytest.fixture
def wrong_backend():
    cs.register_backend(OffByOne())
    yield "off_by_one"
    cs.unregister_backend("off_by_one")


def test_wrong_backend_is_caught(wrong_backend):
    r = measure(SMALL, wrong_backend, "backend", "float32", 1, FIXED)
    assert r.status == "wrong" and r.error_ok is False and r.max_rel_error > 1e-3


def test_compare_writes_readable_reports(tmp_path, wrong_backend):
    import matplotlib.image

    results, meta = run_comparison(
        workload="default",
        backends=["numpy", wrong_backend],
        anchors=True,
        repeat=1,
        out=tmp_path,
        progress=False,
        ceilings=FIXED,
    )
    data = json.loads((tmp_path / "results.json").read_text())
    assert {"date", "machine", "ceilings", "workload", "dtype", "repeat"} <= set(data["meta"])
    assert {"cpu", "gpu", "versions", "threads"} <= set(data["meta"]["machine"])
    assert len(data["results"]) == len(results)
    assert {"cpu_flags", "blas", "driver"} <= set(data["meta"]["machine"])
    assert data["meta"]["machine"]["versions"]["convsuite"] == cs.__version__
    assert [c["name"] for c in data["meta"]["cases"]] == [c.name for c in get_workload("default")]
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert rows and {"contender", "end_to_end_s", "kernel_s", "max_rel_error"} <= set(rows[0])
    assert {"end_to_end_min_s", "end_to_end_max_s", "kernel_min_s", "kernel_max_s"} <= set(rows[0])
    # Flat cells only: no Python tuples or lists in the CSV.
    assert not any(str(v).startswith(("(", "[")) for row in rows for v in row.values())
    assert {row["x_shape"] for row in rows} >= {"8x16x32x32", "100000"}
    report = (tmp_path / "report.md").read_text()
    assert "| case |" in report and "WRONG" in report and "roofline.png" in report
    for name in ("time_vs_size.png", "speedup.png", "roofline.png"):
        image = matplotlib.image.imread(tmp_path / name)
        assert image.ndim == 3 and image.shape[0] > 100
    assert any(r.status == "wrong" for r in results)
    assert set(meta["files"]) >= {"json", "csv", "markdown", "time_vs_size.png"}


def test_cli_compare_exit_code_flags_wrong_results(tmp_path, wrong_backend, monkeypatch):
    monkeypatch.setattr("convsuite.bench.compare.measure_cpu_ceilings", lambda: FIXED)
    argv = ["compare", "--backends", f"numpy,{wrong_backend}", "--repeat", "1", "--no-anchors", "--out", str(tmp_path)]
    assert cli.main(argv) == 1
    assert cli.main(["compare", "--backends", "numpy", "--repeat", "1", "--no-anchors", "--out", str(tmp_path)]) == 0


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["compare", "--workload", "nope"], "invalid choice: 'nope'"),
        (["compare", "--repeat", "0"], "must be a positive integer"),
        (["compare", "--dtype", "int8"], "invalid choice: 'int8'"),
        (["compare", "--device", "tpu"], "invalid choice: 'tpu'"),
    ],
)
def test_cli_rejects_bad_arguments(argv, fragment, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.parametrize("name", workload_names())
@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_every_workload_case_is_valid(name, device):
    cases = get_workload(name, device)
    assert cases
    for case in cases:
        x = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), case.x_shape, (0,) * len(case.x_shape))
        w = np.zeros(case.w_shape, np.float32)
        spec = cs.explain(x, w, **case.keywords).spec  # validates without allocating x
        assert spec.macs > 0


def test_workload_presets_follow_the_seed_file():
    fa19 = get_workload("ece408-fa19", "cpu")
    assert [c.x_shape for c in fa19] == [(1000, 1, 48, 48), (1000, 12, 22, 22)]
    assert get_workload("ece408-fa19", "gpu")[0].x_shape[0] == 10000
    assert max(c.x_shape[0] for c in get_workload("conv1d-signal", "cpu")) == 10**7
    assert max(c.x_shape[0] for c in get_workload("conv1d-signal", "gpu")) == 10**9
    assert {c.direction for c in get_workload("cnn-train-3x3", "cpu")} == {"forward", "backward"}
    assert sum(c.groups > 1 for c in get_workload("mobilenetv2")) == 3
    with pytest.raises(ValueError, match="`workload` must be one of"):
        get_workload("nope")


def test_gpu_comparison_without_a_gpu_says_why(capsys):
    if any(b.available for b in cs.list_backends() if b.device == "gpu"):
        pytest.skip("a GPU backend is available here")
    assert cli.main(["compare", "--device", "gpu", "--out", "unused"]) == 2
    assert "needs an available GPU backend" in capsys.readouterr().err


def test_reduced_rows_are_shown_per_unit_of_work():
    from convsuite.bench.report import _cells, _notes, speedups

    big = Case("test", "big", "conv2d", (16, 8, 24, 24), (8, 8, 3, 3), padding=1)  # > 5e6 MACs
    results = [measure(big, name, "backend", "float32", 1, FIXED) for name in ("numpy", "python")]
    ratio = speedups(results, "numpy")
    rows = {r.contender: (_cells(r, ratio), " ".join(_notes(r))) for r in results}
    assert rows["numpy"][0]["ms"] != "-"  # full size: its time
    assert rows["python"][0]["ms"] == "-" and rows["python"][0]["kernel"] == "-"  # not beside full-size times
    assert "reduced to batch 1" in rows["python"][1] and "GFLOP/s" in rows["python"][1]
    assert rows["python"][0]["speedup"].endswith("x")  # the speedup is per unit of work


def test_time_vs_size_lines_join_only_one_family():
    from convsuite.bench.report import size_series
    from convsuite.bench.user_cases import apply_sweep, custom_case

    swept = apply_sweep([custom_case("1,4,12,12", "4,4,3,3", padding=1)], {"B": (1, 2, 4)})
    other = custom_case("2,3,10,10", "5,3,3,3")
    cases = [*swept, other]
    results = [measure(c, "numpy", "backend", "float32", 1, FIXED) for c in cases]
    meta = {"cases": [c.as_dict() for c in cases]}
    series = size_series(results, meta)
    lengths = sorted(len(points) for _, points in series)
    assert lengths == [1, 3]  # the family is one line, the other layer a lone point
    line = next(points for _, points in series if len(points) == 3)
    assert [p[0] for p in line] == sorted(p[0] for p in line)


def test_compare_to_a_saved_run(tmp_path):
    from convsuite.bench.user_cases import custom_case

    case = custom_case("2,3,12,12", "4,3,3,3", padding="same")
    run_comparison(cases=[case], backends=["numpy"], anchors=False, repeat=1, out=tmp_path / "old", ceilings=FIXED)
    _, meta = run_comparison(
        cases=[case],
        backends=["numpy", "python"],
        anchors=False,
        repeat=1,
        out=tmp_path / "new",
        ceilings=FIXED,
        compare_to=tmp_path / "old" / "results.json",
    )
    ratios = meta["compare_to"]["ratios"]
    assert [(r["case"], r["contender"]) for r in ratios] == [(case.name, "numpy")]  # only what both runs have
    assert ratios[0]["ratio"] > 0 and ratios[0]["same_size"]
    report = (tmp_path / "new" / "report.md").read_text()
    assert "## Against" in report
    saved = json.loads((tmp_path / "new" / "results.json").read_text())
    assert saved["meta"]["compare_to"]["path"].endswith("results.json")


def test_plots_skipped_without_matplotlib_is_said(tmp_path, monkeypatch):
    import sys

    import convsuite.bench.report as report

    for module in ("matplotlib", "matplotlib.pyplot"):  # `import matplotlib` now raises ImportError
        monkeypatch.setitem(sys.modules, module, None)
    case = Case("test", "s", "conv1d", (500,), (3,), padding="same", bias=False)
    _, meta = run_comparison(cases=[case], backends=["numpy"], anchors=False, repeat=1, out=tmp_path, ceilings=FIXED)
    assert report.PLOTS_SKIPPED in meta["notes"]
    assert not list(tmp_path.glob("*.png"))
    assert report.PLOTS_SKIPPED in json.loads((tmp_path / "results.json").read_text())["meta"]["notes"]


def test_anchor_not_installed_is_listed_once(monkeypatch):
    import convsuite.bench.anchors as anchors
    from convsuite.bench.measure import Result
    from convsuite.bench.report import unavailable_contenders

    def skipped(case, name, kind, reason):
        return Result("w", case, "forward", name, kind, "float32", status="skipped", reason=reason)

    results = [
        skipped("a", "torch", "anchor", "torch is not installed"),
        skipped("b", "torch", "anchor", "torch is not installed"),
        skipped("a", "cupy", "backend", "unavailable: cupy is not installed"),
        skipped("b", "cupy", "backend", "unavailable: cupy is not installed"),
        skipped("a", "python", "backend", "9.4e+06 multiply-adds is more than a comparison gives"),  # this case only
    ]
    assert unavailable_contenders(results) == {"torch": "torch is not installed", "cupy": "cupy is not installed"}
    assert "torch" in anchors.ANCHORS


def test_cpu_description_names_the_cores_a_process_may_use(monkeypatch):
    """Under taskset (fewer usable cores than the host has) the description says how many; otherwise not."""
    import os

    from convsuite.bench import machine

    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert machine.cpu_description().endswith("16 logical cores (2 usable by this process)")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert machine.cpu_description().endswith("16 logical cores")


def test_gpu_anchors_set_their_own_tf32_switch_on_every_call(monkeypatch):
    """cuDNN with TF32 off and on are timed interleaved, and TF32 is one process-wide switch of torch:
    each call must set its own and leave torch's as it was (checked without a GPU: the call is a probe)."""
    torch = pytest.importorskip("torch")
    import convsuite.bench.anchors as anchors

    def probe(case, x, w, bias, grad_y, spec, where="cpu"):
        return lambda: (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)

    monkeypatch.setattr(anchors, "_torch", probe)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    before = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    off = anchors.GPU_ANCHORS["cuDNN (TF32 off)"](SMALL, None, None, None, None, None)
    on = anchors.GPU_ANCHORS["cuDNN (TF32 on)"](SMALL, None, None, None, None, None)
    assert [off(), on(), off()] == [(False, False), (True, True), (False, False)]
    assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == before
    assert anchors.anchor_precision("cuDNN (TF32 on)") == "medium"
    assert anchors.anchor_precision("cuDNN (TF32 off)") == anchors.anchor_precision("torch") == "highest"
