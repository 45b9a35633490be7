"""The convsuite command."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from convsuite import cli


def test_info_lists_backends_and_machine(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for fragment in ("CPU:", "GPU:", "numpy", "python", "versions:"):
        assert fragment in out


@pytest.mark.parametrize("argv", [[], ["nonsense"], ["compare", "--repeat", "x"], ["info", "--bogus"]])
def test_bad_arguments_exit_with_usage(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert "usage" in capsys.readouterr().err


def test_console_script_module_entry():
    result = subprocess.run([sys.executable, "-m", "convsuite.cli", "info"], capture_output=True, text=True)
    assert result.returncode == 0 and "backends" in result.stdout


# --- basics -----------------------------------------------------------------


def test_version_flag_and_module_entry():
    import convsuite

    for module in ("convsuite", "convsuite.cli"):
        argv = [sys.executable, "-m", module, "--version"]
        result = subprocess.run(argv, capture_output=True, text=True)
        assert result.returncode == 0 and result.stdout.strip() == f"convsuite {convsuite.__version__}"


def test_version_has_one_source():
    from importlib import metadata

    import convsuite

    assert metadata.version("convsuite") == convsuite.__version__


def test_messages_keep_their_brackets(capsys, monkeypatch):
    """rich would swallow `[cuda]` as markup; every printed message is escaped."""
    monkeypatch.setenv("COLUMNS", "400")
    cli._print("install it with `pip install 'convsuite[cuda]'`")
    assert "convsuite[cuda]" in capsys.readouterr().out
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    cupy = {b.name: b for b in __import__("convsuite").list_backends()}["cupy"]
    if not cupy.available and "convsuite[cuda]" in cupy.reason:
        assert "convsuite[cuda]" in out


# --- compare: usage errors exit 2 with one line, before anything is measured ------


@pytest.fixture
def no_measuring(monkeypatch):
    """Fail the test if a usage error lets the comparison start measuring."""

    def forbidden(*args, **kwargs):
        raise AssertionError("measured before rejecting the arguments")

    monkeypatch.setattr("convsuite.bench.compare.measure_case", forbidden)
    monkeypatch.setattr("convsuite.bench.compare.measure_cpu_ceilings", forbidden)


def _usage_error(argv, capsys) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("convsuite compare: error:"), err
    return err


def test_unwritable_out_is_refused_before_measuring(tmp_path, no_measuring, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert "is a file" in _usage_error(["compare", "--out", str(blocker)], capsys)
    assert "not writable" in _usage_error(["compare", "--out", str(blocker / "sub")], capsys)


def test_bogus_baseline_is_refused_before_measuring(no_measuring, tmp_path, capsys):
    err = _usage_error(["compare", "--baseline", "bogus", "--out", str(tmp_path)], capsys)
    assert "--baseline must be one of the contenders" in err and "'bogus'" in err


def test_unavailable_or_unknown_backend_is_an_error(no_measuring, tmp_path, capsys, monkeypatch):
    from convsuite.backends.base import Backend

    class Missing(Backend):
        name = "missing"
        algorithms = ("x",)
        description = "never available"

        def available(self):
            return "its library is not installed (pip install 'missing[extra]')"

        def forward(self, *args):
            raise AssertionError("unreachable")

        def backward(self, *args):
            raise AssertionError("unreachable")

    import convsuite as cs

    cs.register_backend(Missing())
    try:
        monkeypatch.setenv("COLUMNS", "400")
        err = _usage_error(["compare", "--backends", "numpy,missing", "--out", str(tmp_path)], capsys)
        assert "unavailable backend: missing" in err and "'missing[extra]'" in err
    finally:
        cs.unregister_backend("missing")
    assert "unknown gpu9000" in _usage_error(["compare", "--backends", "numpy,gpu9000", "--out", str(tmp_path)], capsys)


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--x", "8,64,56,56"], "--x and --w go together"),
        (["--stride", "2"], "need --x and --w"),
        (["--workload", "default", "--x", "1,1,8,8", "--w", "1,1,3,3"], "not both"),
        (["--x", "8,64,56,56", "--w", "64,32,3,3"], "channel mismatch"),
        (["--x", "8,64,56,56", "--w", "64,64,3,3", "--padding", "sme"], "`padding` must be"),
        (["--x", "1,1,8,8", "--w", "1,1,3,3", "--stride", "two"], "`stride` must be"),
        (["--x", "1,1,8,8", "--w", "1,1,3,3", "--stride", "2.5"], "--stride must be"),
        (["--x", "1,1,8,8", "--w", "1,1,3,3", "--groups", "x"], "--groups must be"),
        (["--x", "8,-1", "--w", "3"], "--x must be"),
        (["--x", "1,1,8,8", "--w", "1,1,3,3", "--op", "conv1d"], "conv1d takes a weight"),
        (["--x", "1,1,8,8", "--w", "1,1,3,3", "--sweep", "Q=1,2"], "--sweep must be VAR="),
        (["--x", "1,1,8,8", "--w", "1,1,3,3", "--sweep", "N=10,20"], "plain 1-D signal"),
        (["--x", "1,1,8,8", "--w", "1,1,3,3", "--sweep", "B=1,0"], "positive integers"),
        (["--cases", "/no/such/file.json"], "no such file"),
        (["--compare-to", "/no/such/results.json"], "cannot be read"),
    ],
)
def test_bad_compare_arguments_fail_fast(extra, fragment, no_measuring, tmp_path, capsys):
    err = _usage_error(["compare", "--out", str(tmp_path), *extra], capsys)
    assert fragment in err, err


def test_bad_cases_file_and_saved_run(tmp_path, no_measuring, capsys):
    bad = tmp_path / "cases.json"
    bad.write_text('[{"x": [1, 3, 8, 8], "w": [4, 3, 3, 3], "stirde": 2}]')
    assert "keys must include x and w" in _usage_error(["compare", "--cases", str(bad), "--out", str(tmp_path)], capsys)
    bad.write_text("{not json")
    assert "not valid JSON" in _usage_error(["compare", "--cases", str(bad), "--out", str(tmp_path)], capsys)
    saved = tmp_path / "old.json"
    saved.write_text('{"something": "else"}')
    assert "not a results.json" in _usage_error(["compare", "--compare-to", str(saved), "--out", str(tmp_path)], capsys)


def test_ctrl_c_prints_one_line_and_exits_130(monkeypatch, tmp_path, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("convsuite.bench.compare.measure_cpu_ceilings", interrupted)
    assert cli.main(["compare", "--backends", "numpy", "--out", str(tmp_path)]) == 130
    captured = capsys.readouterr()
    assert captured.err.strip() == "convsuite: interrupted" and "Traceback" not in captured.err


def test_ctrl_c_in_a_real_process_exits_130(tmp_path):
    """SIGINT while measuring: one line on stderr, status 130, no traceback."""
    import signal
    import time

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "convsuite",
            "compare",
            "--backends",
            "python",
            # A case the python backend accepts (4.5M multiply-adds, ~0.5 s a call on the 2-core
            # machine) timed 100 times: still measuring when the signal comes, however fast the machine.
            "--x",
            "1,16,44,44",
            "--w",
            "16,16,3,3",
            "--padding",
            "1",
            "--repeat",
            "100",
            "--no-anchors",
            "--out",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(8)  # past the imports, into the ceilings or the measurements
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "convsuite: interrupted"


# --- compare: the user's own problem --------------------------------------------


def test_compare_own_shape_with_sweep(tmp_path, monkeypatch, capsys):
    import csv
    import json

    from convsuite.bench.ceilings import Ceilings

    monkeypatch.setattr(
        "convsuite.bench.compare.measure_cpu_ceilings",
        lambda: Ceilings(device="cpu", copy_gbs=20.0, gemm_gflops=100.0, how="fixed for tests"),
    )
    argv = [
        "compare",
        "--op",
        "conv2d",
        "--x",
        "2,4,12,12",
        "--w",
        "6,2,3,3",
        "--stride",
        "2",
        "--padding",
        "same",
        "--dilation",
        "1",
        "--groups",
        "2",
        "--sweep",
        "B=1,3",
        "--backends",
        "numpy",
        "--repeat",
        "1",
        "--no-anchors",
        "--out",
        str(tmp_path),
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "(B=1)" in out and "(B=3)" in out
    data = json.loads((tmp_path / "results.json").read_text())
    assert [c["x_shape"] for c in data["meta"]["cases"]] == [[1, 4, 12, 12], [3, 4, 12, 12]]
    assert {c["family"] for c in data["meta"]["cases"]} == {data["meta"]["cases"][0]["family"]}
    assert all(r["status"] == "ok" and r["error_ok"] for r in data["results"])
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert [row["x_shape"] for row in rows] == ["1x4x12x12", "3x4x12x12"]


def test_compare_cases_file_json_and_yaml(tmp_path, monkeypatch):
    import json

    from convsuite.bench.ceilings import Ceilings
    from convsuite.bench.user_cases import load_cases_file

    monkeypatch.setattr(
        "convsuite.bench.compare.measure_cpu_ceilings",
        lambda: Ceilings(device="cpu", copy_gbs=20.0, gemm_gflops=100.0, how="fixed for tests"),
    )
    cases = [
        {"name": "strided", "x": [2, 3, 11, 11], "w": [4, 3, 3, 3], "stride": [2, 1], "padding": [[1, 0], [0, 1]]},
        {"x": "1000", "w": "5", "padding": "same", "direction": "forward"},
        {
            "name": "dilated 1-D",
            "op": "conv1d",
            "x": [2, 3, 50],
            "w": [3, 3, 4],
            "dilation": 3,
            "bias": False,
            "direction": "backward",
        },
    ]
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"cases": cases}))
    yaml_path = tmp_path / "cases.yaml"
    yaml = pytest.importorskip("yaml")
    yaml_path.write_text(yaml.safe_dump(cases))
    assert load_cases_file(yaml_path) == load_cases_file(path)
    loaded = load_cases_file(path)
    assert loaded[0].padding == ((1, 0), (0, 1)) and loaded[2].dilation == 3 and loaded[2].direction == "backward"
    out = tmp_path / "out"
    assert cli.main(["compare", "--cases", str(path), "--backends", "numpy", "--repeat", "1", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    ours = [r for r in data["results"] if r["contender"] == "numpy"]
    assert len(ours) == 3 and all(r["error_ok"] for r in ours)
    assert any(r["contender"] == "np.convolve" and r["status"] == "ok" for r in data["results"])


# --- arguments that crashed, ran forever or changed meaning (session 27's probe) -------


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--x", str(10**30), "--w", "3"], "--x must be 1 to 4 comma-separated positive integers below 2**62"),
        (["--x", str(10**19), "--w", "3"], "below 2**62"),  # NumPy's shape type overflowed
        (["--x", str(10**12), "--w", "3"], "would need"),  # the output's memory: a usage error, not a traceback
        (["--x", "8", "--w", "3", "--sweep", f"B={10**30}"], "--sweep B must be comma-separated positive integers"),
        (["--x", "1,2,8,8", "--w", "2,2,3,3", "--out", ""], "--out must name a folder"),
    ],
)
def test_compare_shapes_and_folders_past_every_limit_are_usage_errors(argv, fragment, no_measuring, capsys):
    assert fragment in _usage_error(["compare", "--backends", "numpy", "--no-anchors", *argv], capsys)


@pytest.mark.parametrize(
    "entry, fragment",
    [
        ({"x": [1e30], "w": [3]}, "below 2**62"),
        ({"x": [1.5, 2, 8, 8], "w": [4, 2, 3, 3]}, "--x must be"),  # int() truncated it to 1
        ({"x": [1, 2, 8, 8], "w": [4, 2, 3, 3], "bias": "false"}, "bias must be true or false"),  # bool("false")
        ({"x": [1, 4, 8, 8], "w": [4, 2, 3, 3], "groups": 2.5}, "--groups must be a positive integer"),
    ],
)
def test_cases_file_values_keep_their_meaning(entry, fragment, tmp_path, no_measuring, capsys):
    import json

    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([entry]))
    assert fragment in _usage_error(["compare", "--cases", str(cases), "--out", str(tmp_path / "out")], capsys)


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["compare", "--repeat", str(10**30)], "must be a positive integer up to 100000"),
        (["compare", "--backends", "numpy,numpy"], "must name each backend once"),
        (["sweep", "--backend", "numpy", "--repeat", str(10**7)], "up to 100000"),
    ],
)
def test_repeat_bounds_and_duplicate_backends_are_usage_errors(argv, fragment, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2 and fragment in capsys.readouterr().err


def test_sweep_that_can_time_nothing_is_a_usage_error(tmp_path, capsys):
    """A 1-D algorithm on a 2-D workload exited 0 with empty tables, files and plots."""
    import convsuite as cs

    if not {b.name: b for b in cs.list_backends()}["numba"].available:
        pytest.skip("numba is not installed")
    out = tmp_path / "out"
    argv = ["sweep", "--backend", "numba", "--algorithm", "line1d", "--workload", "ece408-fa19", "--repeat", "1"]
    assert cli.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "ran on none of ece408-fa19's layers" in err and "1-D algorithm" in err
    assert not any(out.iterdir())


# --- compare: outputs and saved runs checked before measuring; files atomic and strict ------------------------


def _strict_json(text: str):
    """Parse as strict JSON: NaN, Infinity and -Infinity are refused."""

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def fixed_ceilings(monkeypatch):
    """No ceilings measured: fixed ones (the tests check files, not speed)."""
    from convsuite.bench.ceilings import Ceilings

    monkeypatch.setattr(
        "convsuite.bench.compare.measure_cpu_ceilings",
        lambda: Ceilings(device="cpu", copy_gbs=20.0, gemm_gflops=100.0, how="fixed for tests"),
    )


#: A tiny case, quick for every contender: the measuring is not what these tests are about.
_TINY = ["--x", "1,1,8,8", "--w", "1,1,3,3", "--backends", "numpy", "--no-anchors", "--repeat", "1"]


@pytest.mark.parametrize("blocked", ["results.json", "results.csv", "report.md", "speedup.png", "roofline.png"])
def test_compare_checks_every_report_file_before_measuring(blocked, tmp_path, no_measuring, capsys):
    """A folder where a report goes used to fail after the whole run, with nothing (or half) saved."""
    (tmp_path / blocked).mkdir()
    err = _usage_error(["compare", *_TINY, "--out", str(tmp_path)], capsys)
    assert f"--out '{tmp_path / blocked}' is a folder, not a file that can be written" in err


_ROW = dict(
    case="c", contender="numpy", direction="forward", dtype="float32", status="ok", gflops=1.0, end_to_end_s=0.1
)


@pytest.mark.parametrize(
    "text, fragment",
    [
        (
            json.dumps({"meta": {}, "results": [{k: v for k, v in _ROW.items() if k != "direction"}]}),
            "result 1 has no text 'direction' field (written by an older convsuite?",
        ),
        (json.dumps({"results": []}), "not a results.json of convsuite compare (no 'meta' and 'results' list)"),
        (json.dumps({"meta": {}, "results": []}), "has no results to compare with"),
        (json.dumps({"meta": None, "results": [_ROW]}), "'meta' is not an object"),
        (json.dumps({"meta": {"machine": "a cpu"}, "results": [_ROW]}), "'meta' is not an object with a 'machine'"),
        (json.dumps({"meta": {}, "results": [3]}), "result 1 is a int, not an object"),
        (json.dumps({"meta": {}, "results": [_ROW, {**_ROW, "case": None}]}), "result 2 has no text 'case' field"),
        (json.dumps({"meta": {}, "results": [{**_ROW, "gflops": "fast"}]}), "'gflops' that is not a positive number"),
        (json.dumps({"meta": {}, "results": [{**_ROW, "x_shape": "1x8"}]}), "'x_shape' that is not a list"),
        (json.dumps({"meta": {}, "results": [_ROW]}).replace("1.0", "NaN"), "'gflops' that is not a positive"),
        (json.dumps({"meta": {}, "results": [_ROW]})[:-20], "not JSON: it ends early (cut short?"),
    ],
)
def test_a_foreign_old_or_cut_short_compare_to_is_a_usage_error_before_measuring(
    text, fragment, tmp_path, no_measuring, capsys
):
    """Rows without "direction" (an older file) or an empty run measured everything, then raised KeyError."""
    saved = tmp_path / "old.json"
    saved.write_text(text)
    err = _usage_error(["compare", *_TINY, "--compare-to", str(saved), "--out", str(tmp_path / "out")], capsys)
    assert err.startswith(f"convsuite compare: error: --compare-to '{saved}': ") and fragment in err


def test_an_older_compare_to_is_refused_before_measuring_in_a_real_process(tmp_path):
    saved = tmp_path / "old.json"
    saved.write_text(json.dumps({"meta": {}, "results": [{k: v for k, v in _ROW.items() if k != "direction"}]}))
    argv = [sys.executable, "-m", "convsuite", "compare", *_TINY, "--compare-to", str(saved), "--out", str(tmp_path)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "no text 'direction' field" in result.stderr
    assert not (tmp_path / "results.json").exists()  # nothing measured, nothing written


def test_compare_to_a_saved_run_with_an_unmeasured_row_still_compares(tmp_path, fixed_ceilings, capsys):
    """A null figure (written for a NaN) is a row with nothing to compare, not a broken file."""
    first = tmp_path / "first"
    assert cli.main(["compare", *_TINY, "--out", str(first)]) == 0
    data = _strict_json((first / "results.json").read_text())
    data["results"].append({**data["results"][0], "case": "other", "gflops": None})
    (first / "results.json").write_text(json.dumps(data))
    assert cli.main(["compare", *_TINY, "--compare-to", str(first), "--out", str(tmp_path / "second")]) == 0
    ratios = _strict_json((tmp_path / "second" / "results.json").read_text())["meta"]["compare_to"]["ratios"]
    assert [r["case"] for r in ratios] == [data["results"][0]["case"]]


def test_compare_reports_that_cannot_be_written_are_saved_elsewhere_and_said(
    tmp_path, fixed_ceilings, monkeypatch, capsys
):
    """A write that fails after the measuring keeps the results: beside the file, named in one line; exit 2."""
    from convsuite import _files

    original = _files._replace_atomically

    def full_for_results(target, data):
        if target.name == "results.json":
            raise OSError(28, "No space left on device")
        original(target, data)

    monkeypatch.setattr(_files, "_replace_atomically", full_for_results)
    assert cli.main(["compare", *_TINY, "--out", str(tmp_path)]) == 2
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and f"could not write {tmp_path / 'results.json'} (No space left" in warnings[0]
    fallback = warnings[0].split("saved it to ")[1].removesuffix(" instead")
    assert _strict_json(open(fallback).read())["results"][0]["contender"] == "numpy"
    assert (tmp_path / "results.csv").exists() and (tmp_path / "report.md").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# --- compare --cases: bounded reading, every field checked ----------------------------------------------------


_LAUGHS = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(f"{b}: &{b} [{','.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")),
        "cases: [*i]",
    ]
)


def test_billion_laughs_cases_file_is_refused_quickly_in_one_short_line(tmp_path):
    """A few hundred bytes of nested YAML aliases printed a 17 MB error line and grew 9x in memory a level."""
    pytest.importorskip("yaml")
    cases = tmp_path / "laughs.yaml"
    cases.write_text(_LAUGHS)
    argv = [sys.executable, "-m", "convsuite", "compare", "--cases", str(cases), "--out", str(tmp_path / "out")]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr[:500]
    assert len(result.stderr) < 400 and len(result.stderr.strip().splitlines()) == 1
    assert "describes more than 500,000 values (aliases counted where they are used)" in result.stderr


def test_a_sweep_past_the_case_limit_is_refused_before_building_the_cases(tmp_path):
    """--sweep multiplies: a product of long lists was built (and checked) one case at a time, for ever."""
    many = ",".join(str(v) for v in range(1, 1001))
    argv = [sys.executable, "-m", "convsuite", "compare", "--x", "1,1,8,8", "--w", "1,1,3,3"]
    argv += ["--sweep", f"B={many}", "--sweep", f"C={many}", "--sweep", f"M={many}", "--out", str(tmp_path)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-500:]
    assert "--sweep would make 1,000,000,000 cases (1 case(s) x 1000 B x 1000 C x 1000 M); at most 10,000" in (
        result.stderr
    )


def test_help_is_plain_text_and_names_every_command(capsys):
    """`convsuite --help` showed the module docstring's reST and named three of the five commands."""
    parser = cli.build_parser()
    text = parser.format_help()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) >= {"info", "compare", "sweep", "train", "calibrate"}
    description = text.split("positional arguments")[0]
    for name in commands:
        assert name in description, name
    for name, sub in commands.items():
        assert "``" not in sub.format_help(), name
    assert "``" not in text and ":func:" not in text and "exit status: 0 success" in text
