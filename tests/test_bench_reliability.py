"""The benchmark suite's reliability: error checks that cover what they claim, and clear refusals.

Each test here failed before its fix: a corrupted output tail reported ``ok``,
long backward signals that crashed on a shape mismatch, raw ``KeyError``,
``TypeError`` and ``RecursionError`` where a request or a file was bad, and
timing settings that were silently misread.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import replace

import numpy as np
import pytest

import convsuite as cs
from convsuite._errors import BackendUnavailableError
from convsuite._registry import register_backend, unregister_backend
from convsuite._timing import Contender, measure_side_by_side
from convsuite.backends.base import Algorithm, Backend, Tunable
from convsuite.backends.numpy_backend import NumpyBackend
from convsuite.bench import crossover
from convsuite.bench import measure as measure_module
from convsuite.bench._arguments import gpu_unavailable
from convsuite.bench.ceilings import Ceilings
from convsuite.bench.compare import check_request, load_saved_run, run_comparison
from convsuite.bench.crossover import Problem
from convsuite.bench.measure import measure
from convsuite.bench.report import write_reports
from convsuite.bench.sweep import SweepResult, run_sweep
from convsuite.bench.sweep_output import write_sweep
from convsuite.bench.timing import events_median, time_side_by_side
from convsuite.bench.user_cases import load_cases_file
from convsuite.bench.workloads import Case, get_workload, layer
from convsuite.nets.profile import NetworkProfile
from convsuite.testing import reference_backward, reference_forward

#: A prefix of this many samples is what the check keeps of a longer plain signal here (10**6 in use).
SLICE = 500


@pytest.fixture(autouse=True)
def _no_settling(monkeypatch):
    """No quarter-second pause between blocks: these tests check outcomes, not speed."""
    monkeypatch.setattr(measure_module, "SETTLE_S", 0.0)


@pytest.fixture
def short_slice(monkeypatch):
    """Check only the first SLICE samples of a plain signal, so a 'long' one is a few thousand samples."""
    monkeypatch.setattr(measure_module, "_SLICE_SAMPLES", SLICE)


def _corrupting(name: str, where: slice, direction: str = "forward") -> Backend:
    """NumPy, with ``where`` of the output (forward) or of grad_x (backward) overwritten by garbage."""

    class Corrupt(NumpyBackend):
        def plan(self, spec, algorithm, asked, params=None):
            launch = super().plan(spec, algorithm, asked, params)
            if asked != direction:
                return launch
            if asked == "forward":

                def forward(x, w, bias, out):
                    launch(x, w, bias, out)
                    out[..., where] = 12345.0

                return forward

            def backward(grad_y, x, w, grad_x, grad_w, grad_b):
                launch(grad_y, x, w, grad_x, grad_w, grad_b)
                grad_x[..., where] = 12345.0

            return backward

    Corrupt.name = name
    return Corrupt()


@pytest.fixture
def corrupting():
    """Register corrupting backends on demand; unregister them afterwards."""
    names = []

    def make(where: slice, direction: str = "forward") -> str:
        name = f"corrupt-{len(names)}"
        register_backend(_corrupting(name, where, direction))
        names.append(name)
        return name

    yield make
    for name in names:
        unregister_backend(name)


def _signal(n: int, k: int = 7, padding="same", dilation: int = 1, stride: int = 1, direction="forward") -> Case:
    geometry = dict(padding=padding, dilation=dilation, stride=stride)
    return Case("test", "s", "conv1d", (n,), (k,), bias=False, direction=direction, **geometry)


def _prefix_outputs(case: Case) -> int:
    """How many leading outputs read only the first SLICE samples (and the leading padding)."""
    spec = case.spec("float32")
    (before, _), k, d, s = spec.padding[0], spec.kernel_size[0], spec.dilation[0], spec.stride[0]
    # Output j reads samples j*s - before + t*d for t < k: the last of them must be < SLICE.
    return (SLICE - 1 + before - (k - 1) * d) // s + 1


PADDINGS = [("same", 1), ("valid", 1), ("full", 1), ("same", 3), ("valid", 3), ("full", 3)]


# --- 1. every output the check claims to cover is compared ----------------------------------------------------------


@pytest.mark.parametrize("padding, dilation", PADDINGS)
def test_a_corrupted_right_tail_of_a_plain_signal_is_wrong(corrupting, padding, dilation):
    name = corrupting(slice(-10, None))
    r = measure(_signal(1000, padding=padding, dilation=dilation), name, "backend", "float32", 1, None)
    assert r.status == "wrong" and r.error_ok is False


@pytest.mark.parametrize("padding, dilation", PADDINGS)
def test_a_corrupted_left_tail_of_a_plain_signal_is_wrong(corrupting, padding, dilation):
    name = corrupting(slice(0, 3))
    r = measure(_signal(1000, padding=padding, dilation=dilation), name, "backend", "float32", 1, None)
    assert r.status == "wrong"


@pytest.mark.parametrize("padding, dilation", PADDINGS)
def test_the_last_outputs_of_a_checked_prefix_are_compared(short_slice, corrupting, padding, dilation):
    """A long signal is checked on a prefix: the prefix's last outputs count, computed with the right halo."""
    case = _signal(3 * SLICE, padding=padding, dilation=dilation)
    m = _prefix_outputs(case)
    name = corrupting(slice(m - 3, m))
    assert measure(case, name, "backend", "float32", 1, None).status == "wrong"


@pytest.mark.parametrize("padding, dilation", PADDINGS)
@pytest.mark.parametrize("stride", [1, 2])
def test_a_correct_backend_passes_the_prefix_check(short_slice, padding, dilation, stride):
    case = _signal(3 * SLICE + 1, padding=padding, dilation=dilation, stride=stride)
    for direction in ("forward", "backward"):
        r = measure(replace(case, direction=direction), "numpy", "backend", "float32", 1, None)
        assert r.status == "ok", (direction, r.max_rel_error)


@pytest.mark.parametrize("padding, dilation", PADDINGS)
@pytest.mark.parametrize("n", [SLICE - 100, 3 * SLICE])
def test_a_corrupted_backward_tail_is_wrong(short_slice, corrupting, padding, dilation, n):
    """Backward re-runs its check on the same prefix: every gradient of it is compared, tails included."""
    name = corrupting(slice(-10, None), "backward")
    case = _signal(n, padding=padding, dilation=dilation, direction="backward")
    assert measure(case, name, "backend", "float32", 1, None).status == "wrong"


def test_plain_images_and_unbatched_inputs_are_checked_whole():
    """No batch axis to slice: an image (H, W) or an item (C, N) is checked as it is, in both directions."""
    cases = [
        Case("test", "image", "conv2d", (20, 24), (3, 5), padding="same", bias=False),
        Case("test", "image valid", "conv2d", (20, 24), (3, 3), padding="valid", bias=False),
        Case("test", "item", "conv1d", (3, 40), (4, 3, 5), padding="same"),
    ]
    for case in cases:
        for direction in ("forward", "backward"):
            r = measure(replace(case, direction=direction), "numpy", "backend", "float32", 1, None)
            assert r.status == "ok", (case.name, direction, r.max_rel_error)


def _line_plan(spec, direction, params):
    """The float64 reference; ``bug`` writes garbage into the last outputs (gradients)."""

    def forward(x, w, bias, out):
        out[...] = reference_forward(spec, x, w, bias)
        if params["bug"]:
            out[..., -10:] = 12345.0

    def backward(grad_y, x, w, grad_x, grad_w, grad_b):
        grad_x[...], grad_w[...], grad_b[...] = reference_backward(spec, grad_y, x, w)
        if params["bug"]:
            grad_x[..., -10:] = 12345.0

    return forward if direction == "forward" else backward


LINE = Algorithm(
    "line",
    "the float64 reference, or garbage in its tail",
    _line_plan,
    directions=("forward", "backward"),
    ndims=(1,),
    tunables=(Tunable("bug", (False, True), False, "garbage in the last outputs"),),
)


class _LineBackend(Backend):
    name = "reliability-line"
    algorithms = ("line",)
    description = "test-only 1-D backend for sweeps"

    def algorithm_table(self):
        return {"line": LINE}


@pytest.fixture
def line_backend():
    register_backend(_LineBackend())
    yield _LineBackend.name
    unregister_backend(_LineBackend.name)


FAST = dict(repeat=1, rounds=1, warmup=0, settle_s=0.0)


@pytest.mark.parametrize(
    "direction, n",
    # Backward re-runs its check on the prefix of a long signal, so its tail is checked there too.
    [("forward", SLICE - 100), ("backward", SLICE - 100), ("backward", 3 * SLICE)],
)
def test_a_sweep_fails_a_configuration_that_corrupts_the_tail(short_slice, line_backend, direction, n):
    case = _signal(n, padding="valid", dilation=2, direction=direction)
    result = run_sweep(line_backend, "line", [case], direction=direction, **FAST)
    assert result.row_for({"bug": False}).cells[case.label].status == "ok"
    assert result.row_for({"bug": True}).cells[case.label].status == "failed"


# --- 2. long backward signals: shapes agree for every padding --------------------------------------------------------


@pytest.mark.parametrize("padding", ["same", "valid", "full"])
@pytest.mark.parametrize("contender, kind", [("numpy", "backend"), ("torch", "anchor")])
def test_long_backward_signals_are_checked_for_every_padding(short_slice, padding, contender, kind):
    if kind == "anchor":
        pytest.importorskip("torch")
    r = measure(_signal(3 * SLICE + 3, padding=padding, direction="backward"), contender, kind, "float32", 1, None)
    assert r.status == "ok" and r.error_ok


def test_a_backward_signal_over_a_million_samples_with_valid_padding():
    """The reported case itself, at its real length (a few tens of milliseconds of work)."""
    r = measure(_signal(1_000_100, padding="valid", direction="backward"), "numpy", "backend", "float32", 1, None)
    assert r.status == "ok"


# --- 3. measure refuses a bad request before timing -------------------------------------------------------------------

SMALL = _signal(64)


@pytest.fixture
def no_timing(monkeypatch):
    """Fail if anything gets timed: the refusals must come first."""

    def timed(*args, **kwargs):
        raise AssertionError("timed before the request was checked")

    monkeypatch.setattr(measure_module, "warm_up", timed)
    monkeypatch.setattr(measure_module, "measure_side_by_side", timed)


@pytest.mark.parametrize(
    "contender, kind, error, message",
    [
        ("nope", "anchor", ValueError, r"`contender` \(an anchor\) must be one of 'torch', 'np.convolve'"),
        (["torch"], "anchor", ValueError, r"`contender` \(an anchor\) must be one of"),
        ("numpy", "Backend", ValueError, r"`kind` must be one of 'backend', 'anchor'; got 'Backend'"),
        ("numpy", None, ValueError, r"`kind` must be one of"),
        (["numpy"], "backend", TypeError, r"`contender` must be a backend name"),
    ],
)
def test_measure_refuses_unknown_names(no_timing, contender, kind, error, message):
    with pytest.raises(error, match=message):
        measure(SMALL, contender, kind, "float32", 1, None)


@pytest.mark.parametrize(
    "repeat, error", [(1.5, TypeError), (float("nan"), TypeError), ("3", TypeError), (True, TypeError), (0, ValueError)]
)
def test_measure_refuses_a_bad_repeat(no_timing, repeat, error):
    with pytest.raises(error, match=r"`repeat` must be an int >= 1"):
        measure(SMALL, "numpy", "backend", "float32", repeat, None)


def test_measure_refuses_a_case_that_is_not_one(no_timing):
    with pytest.raises(TypeError, match="`case` must be a convsuite.bench.workloads.Case"):
        measure({"x": (64,)}, "numpy", "backend", "float32", 1, None)


# --- 4. the timing core validates its settings -----------------------------------------------------------------------


class _Counting:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1


@pytest.mark.parametrize(
    "settings, error, message",
    [
        (dict(repeat=float("nan")), TypeError, "`repeat` must be an int >= 1; got nan"),
        (dict(repeat=2.5), TypeError, "`repeat` must be an int >= 1; got 2.5"),
        (dict(repeat="3"), TypeError, "`repeat` must be an int >= 1; got '3'"),
        (dict(repeat=True), TypeError, "`repeat` must be an int >= 1; got True"),
        (dict(repeat=0), ValueError, "`repeat` must be an int >= 1; got 0"),
        (dict(rounds=0), ValueError, "`rounds` must be an int >= 1"),
        (dict(warmup=-1), ValueError, "`warmup` must be an int >= 0"),
        (dict(warmup=1.0), TypeError, "`warmup` must be an int >= 0"),
        (dict(settle_s=-1), ValueError, "`settle_s` must be a finite number of seconds >= 0; got -1"),
        (dict(settle_s=float("inf")), ValueError, "`settle_s` must be a finite number"),
        (dict(settle_s=None), TypeError, "`settle_s` must be a finite number"),
        (dict(min_block_s=float("nan")), ValueError, "`min_block_s` must be a finite number"),
        (dict(abandon_ratio=0.5), ValueError, r"`abandon_ratio` must be a number > 1 .*; got 0.5"),
        (dict(abandon_ratio=1), ValueError, "`abandon_ratio` must be a number > 1"),
        (dict(abandon_ratio=float("nan")), ValueError, "`abandon_ratio` must be a number > 1"),
        (dict(abandon_ratio="3"), TypeError, "`abandon_ratio` must be a number > 1"),
    ],
)
def test_measure_side_by_side_refuses_bad_settings_before_running(settings, error, message):
    fn = _Counting()
    with pytest.raises(error, match=message):
        measure_side_by_side({"fn": fn}, **settings)
    assert fn.calls == 0


def test_abandon_ratio_none_or_inf_never_drops():
    for ratio in (None, float("inf")):
        timings = measure_side_by_side({"a": _Counting(), "b": _Counting()}, repeat=2, rounds=2, abandon_ratio=ratio)
        assert not any(t.abandoned for t in timings.values())


def test_a_contender_that_is_not_callable_is_refused():
    with pytest.raises(TypeError, match=r"`contenders\['a'\]` must be a Contender or a zero-argument callable"):
        measure_side_by_side({"a": 3})
    with pytest.raises(TypeError, match="`contenders` must be a mapping"):
        measure_side_by_side([_Counting()])


@pytest.mark.parametrize("repeat", [float("nan"), 2.5, "3"])
def test_the_bench_timing_shapes_refuse_a_bad_repeat(repeat):
    fn = _Counting()
    with pytest.raises(TypeError, match="`repeat`"):
        time_side_by_side({"fn": fn}, repeat=repeat)
    with pytest.raises(TypeError, match="`repeat`"):
        events_median(fn, Contender(fn).timer, repeat)
    assert fn.calls == 0


@pytest.mark.parametrize(
    "settings, error, message",
    [
        (dict(repeat=float("nan")), TypeError, "`repeat`"),
        (dict(settle_s=-1.0), ValueError, "`settle_s`"),
        (dict(abandon_ratio=0.5), ValueError, "`abandon_ratio`"),
        (dict(max_configs=1.5), TypeError, "`max_configs`"),
    ],
)
def test_run_sweep_refuses_bad_timing_settings_before_running(line_backend, settings, error, message):
    with pytest.raises(error, match=message):
        run_sweep(line_backend, "line", [_signal(50)], **{**FAST, **settings})


# --- 5. the crossover map's inputs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "count, error, message",
    [
        (-1, ValueError, r"`forward` must be an int >= 0; got -1"),
        (2.5, TypeError, r"`forward` must be an int >= 0; got 2.5"),
        (float("nan"), TypeError, r"`forward` must be an int >= 0"),
        (True, TypeError, r"`forward` must be an int >= 0"),
        (10**6, ValueError, r"`forward` asks for more problems than its axes hold"),
    ],
)
def test_fit_grid_refuses_bad_counts(count, error, message):
    with pytest.raises(error, match=message):
        crossover.fit_grid(forward=count)


def test_the_crossover_command_reports_an_oversized_grid_as_a_usage_error(capsys, monkeypatch):
    def measured(*args, **kwargs):
        raise AssertionError("the grid was measured")

    monkeypatch.setattr(crossover, "run", measured)
    with pytest.raises(SystemExit) as exit_info:
        crossover.main(["--forward", "1000000"])
    assert exit_info.value.code == 2
    assert "--forward asks for more problems than its axes hold" in capsys.readouterr().err


def _row(name, times):
    return {"name": name, "direction": "forward", "features": [float(len(name)), 0.0], "times": times}


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), None, "1"])
def test_fit_table_refuses_times_that_are_not_finite_and_positive(bad):
    rows = [_row("a", {"p/x": 1.0, "q/y": 2.0}), _row("bb", {"p/x": bad, "q/y": 2.0})]
    with pytest.raises(ValueError, match=r"`rows`: row 'bb' has time .* for 'p/x'; times must be finite"):
        crossover.fit_table("cpu", rows, "m", "d", None)


def test_fit_table_refuses_a_row_without_times():
    with pytest.raises(ValueError, match="`rows`: row 'a' must have `times`"):
        crossover.fit_table("cpu", [_row("a", {})], "m", "d", None)


def test_crossover_refuses_an_unknown_device_or_direction():
    problem = Problem("tiny", (1, 2, 6, 6), (3, 2, 3, 3), padding=1)
    with pytest.raises(ValueError, match="`device` must be 'cpu' or 'gpu'; got 'tpu'"):
        crossover.measure_problem(problem, "tpu")
    with pytest.raises(ValueError, match="`direction` must be 'forward' or 'backward'; got 'sideways'"):
        Problem("tiny", (1, 2, 6, 6), (3, 2, 3, 3), direction="sideways")


@pytest.mark.parametrize("w_shape", [(), (1, 1, 1, 3, 3)])
def test_spec_of_refuses_a_weight_of_another_rank(w_shape):
    with pytest.raises(ValueError, match=r"`w_shape` must be \(K,\), \(KH, KW\), .*; got"):
        crossover.spec_of(Problem("odd", (1, 1, 1, 8, 8), w_shape))


def test_unhashable_names_are_value_errors_naming_the_parameter():
    with pytest.raises(ValueError, match="`workload` must be one of"):
        get_workload(["default"])
    with pytest.raises(ValueError, match="`workload` must be one of"):
        layer(["ece408-fa19"], "conv1")
    with pytest.raises(ValueError, match="`workload` must be one of"):
        check_request(workload=["default"], out=None)
    with pytest.raises(ValueError, match="--baseline must be one of the contenders"):
        check_request(baseline=["numpy"], out=None)
    with pytest.raises(ValueError, match=r"--backends must be names from .*; got unknown \['numpy'\]"):
        check_request(backends=[["numpy"]], out=None)
    with pytest.raises(ValueError, match="--algorithm must be one of"):
        run_sweep("numpy", ["im2col"], [_signal(50)], **FAST)


# --- 6. the report writers take str or Path and check the folder ----------------------------------------------------


@pytest.fixture
def comparison():
    """The results and metadata of a one-case comparison, written nowhere."""
    ceilings = Ceilings(device="cpu", copy_gbs=20.0, gemm_gflops=100.0, how="fixed for tests")
    return run_comparison(cases=[_signal(64)], backends=["numpy"], anchors=False, repeat=1, out=None, ceilings=ceilings)


def test_write_reports_takes_a_str(comparison, tmp_path):
    results, meta = comparison
    paths = write_reports(results, meta, "numpy", str(tmp_path / "reports"))
    assert paths["json"].parent == tmp_path / "reports"
    assert json.loads(paths["json"].read_text())["results"][0]["contender"] == "numpy"


def _empty_sweep() -> SweepResult:
    return SweepResult("numpy", "im2col", "w", "cpu", "forward", "float32", [], [], [], None, None, None, {})


def _writers():
    return [
        ("write_reports", lambda out, comparison: write_reports(*comparison, "numpy", out)),
        ("write_sweep", lambda out, comparison: write_sweep(_empty_sweep(), out)),
    ]


@pytest.mark.parametrize("writer", [w for _, w in _writers()], ids=[n for n, _ in _writers()])
def test_writers_refuse_a_folder_they_cannot_use(writer, comparison, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="`out` .*file' is a file, not a folder"):
        writer(blocker, comparison)
    with pytest.raises(ValueError, match="`out` .*sub' is not writable"):
        writer(str(blocker / "sub"), comparison)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="`out` must name a folder; got an empty string"):
        writer("", comparison)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing written into the current folder


# --- 7. the file loaders say which file is bad and why ---------------------------------------------------------------


@pytest.fixture
def bad_files(tmp_path):
    files = {}
    for suffix in (".json", ".yaml"):
        files[f"binary{suffix}"] = tmp_path / f"binary{suffix}"
        files[f"binary{suffix}"].write_bytes(b"\xff\xfe\x00 not text")
        files[f"deep{suffix}"] = tmp_path / f"deep{suffix}"
        files[f"deep{suffix}"].write_text("[" * 100_000 + "]" * 100_000)
    return files


@pytest.mark.parametrize("kind, message", [("binary", "not UTF-8 text"), ("deep", "nested too deeply")])
def test_load_saved_run_raises_value_errors_naming_the_file(bad_files, kind, message):
    path = bad_files[f"{kind}.json"]
    with pytest.raises(ValueError, match=f"--compare-to '{re.escape(str(path))}': .*{message}"):
        load_saved_run(path)


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
@pytest.mark.parametrize("kind, message", [("binary", "not UTF-8 text"), ("deep", "nested too deeply")])
def test_load_cases_file_raises_value_errors_naming_the_file(bad_files, suffix, kind, message):
    if suffix == ".yaml":
        pytest.importorskip("yaml")
    path = bad_files[f"{kind}{suffix}"]
    with pytest.raises(ValueError, match=f"--cases {re.escape(str(path))}: {message}"):
        load_cases_file(path)


def test_load_cases_file_refuses_a_geometry_nested_too_deeply(tmp_path):
    depth = sys.getrecursionlimit() - 100  # decodes, but is deeper than the geometry's reader can follow
    path = tmp_path / "cases.json"
    path.write_text('[{"x": "64", "w": "3", "stride": ' + "[" * depth + "1" + "]" * depth + "}]")
    with pytest.raises(ValueError, match=f"--cases {re.escape(str(path))}.*nested too deeply"):
        load_cases_file(path)


# --- 8. np.convolve's 'same' with a mask longer than the signal ------------------------------------------------------


def test_np_convolve_is_skipped_for_same_with_a_mask_longer_than_the_signal():
    r = measure(_signal(5, k=7), "np.convolve", "anchor", "float32", 1, None)
    assert r.status == "skipped" and "longer than the signal" in r.reason
    assert measure(_signal(7, k=7), "np.convolve", "anchor", "float32", 1, None).status == "ok"


def test_an_output_of_the_wrong_size_is_wrong_not_a_crash(monkeypatch):
    """An anchor of another convention (np.convolve's max(N, K) samples) is caught by the size, not by luck."""
    from convsuite.bench import anchors

    monkeypatch.setitem(anchors.ANCHORS, "np.convolve", lambda case, x, w, *rest: lambda: np.zeros(x.size + 2))
    r = measure(_signal(64), "np.convolve", "anchor", "float32", 1, None)
    assert r.status == "wrong" and math.isinf(r.max_rel_error)


# --- 9. no GPU, bad sweep requests, profile directions ----------------------------------------------------------------


def test_visible_gpus_is_empty_without_cupy(monkeypatch):
    from convsuite.distributed.multigpu import visible_gpus

    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy now raises ImportError
    assert visible_gpus() == []


def test_gpu_timing_without_a_gpu_says_what_is_needed():
    if gpu_unavailable() is None:
        pytest.skip("a GPU is available here")
    from convsuite.bench.ceilings import measure_gpu_ceilings
    from convsuite.bench.timing import cuda_events_median

    with pytest.raises(BackendUnavailableError, match="measure_gpu_ceilings needs CuPy and a CUDA GPU"):
        measure_gpu_ceilings()
    with pytest.raises(BackendUnavailableError, match="cuda_events_median needs CuPy and a CUDA GPU"):
        cuda_events_median(_Counting(), 3)


def test_run_sweep_refuses_bad_requests_clearly():
    with pytest.raises(
        TypeError, match="`backend` must be a registered backend's name or a Backend instance; got None"
    ):
        run_sweep(None, "im2col", "default", **FAST)
    with pytest.raises(TypeError, match=r"`workload` must be a workload name or a sequence of Case .*item 0 is 3"):
        run_sweep("numpy", "im2col", [3], **FAST)
    with pytest.raises(TypeError, match="`workload` must be a workload name or a sequence of Case"):
        run_sweep("numpy", "im2col", 3, **FAST)
    with pytest.raises(TypeError, match=r"`grid\['tile_kib'\]` must be a sequence of values, e.g. \(256,\)"):
        run_sweep("numpy", "im2col", [_signal(50)], grid={"tile_kib": 256}, **FAST)
    with pytest.raises(TypeError, match="`grid` must be a mapping"):
        run_sweep("numpy", "im2col", [_signal(50)], grid=[("tile_kib", (256,))], **FAST)


def _profile(directions=("forward",)) -> NetworkProfile:
    row = {"name": "0", "type": "Conv2D", "category": "convolution", **{f"{d}_s": 1e-3 for d in directions}}
    return NetworkProfile([row], {d: 2e-3 for d in directions}, {}, "cpu", 1)


@pytest.mark.parametrize("method", ["table", "by_category", "layer_sum"])
def test_profile_readers_refuse_a_direction_alike(method):
    forward_only = _profile()
    with pytest.raises(ValueError, match=r"`direction` must be 'forward', the directions profiled .*; got 'sideways'"):
        getattr(forward_only, method)("sideways")
    with pytest.raises(ValueError, match=r"backward=True.*; got 'backward'"):
        getattr(forward_only, method)("backward")
    both = _profile(("forward", "backward"))
    getattr(both, method)("backward")  # timed: no error
    with pytest.raises(ValueError, match="`direction` must be 'forward' or 'backward', the directions profiled"):
        getattr(both, method)(["forward"])


def test_the_checks_change_nothing_for_good_requests():
    """The default grid keeps its size, and a plain measurement still passes."""
    assert len(crossover.fit_grid()) == 161
    r = measure(_signal(1000), "numpy", "backend", "float32", 2, None)
    assert r.status == "ok" and r.repeats == 2
    assert cs.conv1d(np.ones(8, np.float32), np.ones(3, np.float32)).shape == (6,)


# --- 10. a cases file: bounded reading, every field of a case checked, short messages ----------------------


_GOOD = {"x": [1, 3, 8, 8], "w": [4, 3, 3, 3]}


@pytest.mark.parametrize(
    "extra, fragment",
    [
        ({"name": ["stem"]}, "`name` must be text (a label for the tables); got ['stem']"),  # was: unhashable type
        ({"name": 3}, "`name` must be text"),
        ({"name": {"a": 1}}, "`name` must be text"),
        ({"name": "a\nb"}, "`name` must be one line of at most 200 printable characters"),
        ({"name": "n" * 201}, "`name` must be one line of at most 200"),
        ({"op": ["conv2d"]}, "--op must be conv1d or conv2d; got ['conv2d']"),
        ({"direction": {"d": 1}}, "direction must be forward or backward"),
        ({"groups": "9" * 4000}, "--groups must be a positive integer below 2**62"),
        ({"groups": 10**30}, "--groups must be a positive integer below 2**62"),
        ({"stride": "9" * 5000}, "--stride must be an integer, integers separated by commas"),
        ({"stride": list(range(10_000))}, "`stride` must be an int or a tuple of 2 ints"),
        ({"padding": "x" * 100_000}, "--padding must be an integer, integers separated by commas"),
        ({"dilation": {"a": [1]}}, "`dilation` must be an int or a tuple of 2 ints"),
        ({"x": "1," * 100_000}, "--x must be 1 to 4 comma-separated positive integers"),
        ({"x": "1_0,3,8,8"}, "--x must be 1 to 4"),  # int() read it as 10
        ({"x": "\u0661,3,8,8"}, "--x must be 1 to 4"),  # int() read the Arabic-Indic digit as 1
        ({"bias": [True]}, "bias must be true or false"),
    ],
)
def test_every_field_of_a_case_is_checked_with_a_short_message(extra, fragment, tmp_path):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([{**_GOOD, **extra}]))
    with pytest.raises(ValueError) as info:
        load_cases_file(path)
    message = str(info.value)
    assert message.startswith(f"--cases {path}, case 1: ") and fragment in message
    assert len(message) < 300 + len(str(path)), message  # the value is echoed cut short, never whole


#: Aliases nested nine deep: 9**9 values from 300 bytes; and the same through merge keys.
_ALIAS_BOMBS = {
    "lists": "\n".join(
        [
            'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
            *(f"{b}: &{b} [{','.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")),
            "cases: [*i]",
        ]
    ),
    "merge keys": "\n".join(
        [
            "a: &a {x: [1, 3, 8, 8], w: [4, 3, 3, 3]}",
            *(f"{b}: &{b} {{<<: [{', '.join([f'*{a}'] * 9)}]}}" for a, b in zip("abcdefgh", "bcdefghi")),
            "cases: [*i]",
        ]
    ),
}

#: Loads a cases file in a fresh process: prints the error and how much the peak memory grew, in MiB.
_LOAD_AND_MEASURE = """
import resource, sys
from convsuite.bench.user_cases import load_cases_file
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    load_cases_file(sys.argv[1])
    print("loaded")
except ValueError as exc:
    print(exc)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""


@pytest.mark.parametrize("kind", list(_ALIAS_BOMBS))
def test_yaml_alias_bombs_are_refused_in_bounded_time_and_memory(kind, tmp_path):
    """A 325-byte file grew 9x in memory a level (274 MB at six) and printed a 17 MB error line."""
    pytest.importorskip("yaml")
    import subprocess

    path = tmp_path / "cases.yaml"
    path.write_text(_ALIAS_BOMBS[kind])
    result = subprocess.run(
        [sys.executable, "-c", _LOAD_AND_MEASURE, str(path)], capture_output=True, text=True, timeout=120
    )
    message, grown_mib = result.stdout.strip().splitlines()
    assert message == (
        f"--cases {path}: describes more than 500,000 values (aliases counted where they are used); "
        "a list of cases is far smaller"
    )
    assert float(grown_mib) < 50, grown_mib


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("s: &s " + "x" * 5000 + "\ncases: [" + ", ".join(["*s"] * 500) + "]", "more than 1,048,576 characters"),
        ("cases: &a [*a]", "an alias refers to a list or object that contains it"),
        ("cases: [{x: [1, 3, 8, 8], w: [4, 3, 3, 3], 1: 2}]", "got unknown '1'"),  # sorted() with a str raised
        ("cases: [{x: [1, 3, 8, 8], w: [4, 3, 3, 3], groups: " + "9" * 5000 + "}]", "not valid YAML"),
        ("cases: " + "[" * 20 + "]" * 20, "nested too deeply (more than 16 levels)"),
    ],
)
def test_a_yaml_cases_file_is_bounded_before_it_is_built(text, fragment, tmp_path):
    pytest.importorskip("yaml")
    path = tmp_path / "cases.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_cases_file(path)
    assert fragment in str(info.value) and str(info.value).startswith(f"--cases {path}")
    assert len(str(info.value)) < 300 + len(str(path))


def test_a_cases_file_past_the_size_cap_is_not_read(tmp_path):
    from convsuite.bench.user_cases import MAX_CASES_FILE_BYTES

    path = tmp_path / "cases.json"
    path.write_text(json.dumps([_GOOD]) + " " * MAX_CASES_FILE_BYTES)
    with pytest.raises(ValueError, match=f"--cases {re.escape(str(path))}: larger than the 1,048,576 bytes"):
        load_cases_file(path)


def test_shared_yaml_anchors_within_the_bounds_still_load(tmp_path):
    pytest.importorskip("yaml")
    path = tmp_path / "cases.yaml"
    path.write_text(
        "- {name: one, x: [1, 3, 8, 8], w: [4, 3, 3, 3], stride: &s [2, 2]}\n"
        "- {name: two, x: [1, 3, 8, 8], w: [4, 3, 3, 3], stride: *s}\n"
    )
    one, two = load_cases_file(path)
    assert (one.name, two.name) == ("one", "two") and one.stride == two.stride == (2, 2)


def test_duplicate_case_names_are_named_not_listed_whole(tmp_path):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([{**_GOOD, "name": f"c{i}"} for i in range(500)] + [{**_GOOD, "name": "c7"}]))
    with pytest.raises(ValueError, match=r"case names must be unique; more than once: 'c7'$"):
        load_cases_file(path)


# --- 11. reports: strict JSON ---------------------------------------------------------------------------------------


def _strict_json(text: str):
    """Parse as strict JSON: NaN, Infinity and -Infinity are refused."""

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_results_json_stays_strict_with_an_infinite_error(comparison, tmp_path):
    """A result too wrong to measure has max_rel_error inf: results.json held a bare Infinity."""
    results, meta = comparison
    results = [replace(results[0], status="wrong", error_ok=False, max_rel_error=math.inf)]
    write_reports(results, meta, "numpy", tmp_path)
    data = _strict_json((tmp_path / "results.json").read_text())
    assert data["results"][0]["max_rel_error"] is None
    assert data["non_finite"]["values"] == {"results[0].max_rel_error": "inf"}


def test_sweep_json_stays_strict(tmp_path):
    result = _empty_sweep()
    result.meta.update(abandon_ratio=math.inf, seconds=math.nan)
    files = write_sweep(result, tmp_path)
    data = _strict_json(files["json"].read_text())
    assert data["meta"]["abandon_ratio"] is None and data["meta"]["seconds"] is None
    assert set(data["non_finite"]["values"]) == {"meta.abandon_ratio", "meta.seconds"}
