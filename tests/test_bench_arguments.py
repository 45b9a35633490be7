"""Bad options of the ``python -m convsuite.bench.<module>`` command lines are usage errors.

Each case must end with exit status 2 and a message naming the option,
before any measuring starts (so every case here is quick).
"""

from __future__ import annotations

import importlib
import time

import pytest

import convsuite

FILE = "{file}"  # replaced by an existing file
UNDER_FILE = "{file}/x"  # a path under an existing file
MISSING = "{missing}"  # a folder that does not exist

CASES = [
    ("networks", ["--repeat", "0"], "--repeat"),
    ("networks", ["--threads", "0"], "--threads"),
    ("networks", ["--backends", "foo"], "--backends"),
    ("networks", ["--backends", "cupy"], "--backends"),
    ("regret", ["--batch", "0"], "--batch"),
    ("regret", ["--batch", "-1"], "--batch"),
    ("regret", ["--skip", "foo"], "--skip"),
    ("regret", ["--docs", UNDER_FILE], "--docs"),
    ("sweep_report", ["--device", "cpu", "--out", FILE], "--out"),
    ("sweep_report", ["--summarise", MISSING], "--summarise"),
    ("sweep_report", ["--summarise", FILE], "--summarise"),
    ("sweep_report", ["--summarise", "{empty}"], "--summarise"),
    ("sweep_report", ["--device", "cpu", "--out", "{empty}", "--backends", "foo"], "--backends"),
    ("sweep_report", ["--device", "cpu", "--out", "{empty}", "--backends", "cupy"], "--backends"),
    ("sweep_report", ["--out", "{empty}"], "--device is required"),
    ("sweep_report", ["--device", "cpu"], "--out is required"),
    ("sweep_report", ["--device", "cpu", "--out", "{empty}", "--budget-s", "0"], "--budget-s"),
    ("crossover", ["--skip", "foo"], "--skip"),
    ("crossover", ["--data", "{file}/rule.json"], "--data"),
    (
        "crossover",
        [
            *("--forward", "0", "--backward", "0", "--depthwise-forward", "0"),
            *("--depthwise-backward", "0", "--first-forward", "0", "--first-backward", "0"),
        ],
        "--forward",
    ),
]


@pytest.mark.parametrize("module, args, option", CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_a_bad_option_is_a_usage_error_before_measuring(module, args, option, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    (tmp_path / "empty").mkdir()
    places = {"file": afile, "missing": tmp_path / "missing", "empty": tmp_path / "empty"}
    args = [a.format(**places) for a in args]
    main = importlib.import_module(f"convsuite.bench.{module}").main
    start = time.perf_counter()
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err and len([line for line in err.splitlines() if "error:" in line]) == 1
    assert option in err, err
    assert time.perf_counter() - start < 5, "the check must come before any measuring"


def test_unknown_backend_names_list_the_known_ones(capsys):
    from convsuite.bench import networks

    with pytest.raises(SystemExit):
        networks.main(["--backends", "numpy,foo"])
    err = capsys.readouterr().err
    assert "'foo'" in err and all(b.name in err for b in convsuite.list_backends())
