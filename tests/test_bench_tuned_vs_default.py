"""The tuned-vs-default bench: its rows on a tiny layer, and its argument checks."""

from __future__ import annotations

import json

import pytest

from convsuite.bench import tuned_vs_default as tvd
from convsuite.bench.crossover import Problem

TINY = (Problem("tiny 4->4 3x3 12x12", (2, 4, 12, 12), (4, 4, 3, 3), padding=1),)


def test_rows_and_summary_on_a_tiny_layer():
    result = tvd.run("cpu", budget_s=0.5, repeat=2, backends=["numpy"], problems=TINY)
    (row,) = result["rows"]
    assert (row["case"], row["backend"], row["algorithm"]) == (TINY[0].name, "numpy", "im2col")
    assert set(row["default"]) == set(row["tuned"]) == {"tile_kib"}
    assert row["ratio"] > 0 and row["valid"] >= 1
    assert result["summary"]["pairs"] == 1
    assert result["summary"]["gained_10pct"] + result["summary"]["lost_beyond_noise"] <= 1
    assert "| tiny 4->4 3x3 12x12 | numpy/im2col |" in tvd._markdown(result)


def test_lost_counts_only_losses_beyond_the_measured_spread():
    assert not tvd._lost({"ratio": 0.93, "spread": (0.38, 0.44)})
    assert tvd._lost({"ratio": 0.93, "spread": (0.01, 0.02)})
    assert not tvd._lost({"ratio": 1.0})


@pytest.mark.parametrize(
    "args, message",
    [
        (["--budget-s", "-1"], "--budget-s must be >= 0"),
        (["--budget-s", "nan"], "--budget-s must be >= 0"),
        (["--repeat", "0"], "--repeat >= 1"),
        (["--backends", "numpy,nope"], "--backends: unknown nope"),
    ],
)
def test_bad_arguments_are_usage_errors(args, message, capsys):
    with pytest.raises(SystemExit) as info:
        tvd.main(args)
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_main_writes_json_and_markdown(tmp_path, monkeypatch):
    real_run = tvd.run
    monkeypatch.setattr(tvd, "run", lambda *args, **kw: real_run(*args, problems=TINY, **kw))
    out = tmp_path / "tvd"
    assert tvd.main(["--backends", "numpy", "--budget-s", "0.5", "--repeat", "2", "--out", str(out)]) == 0
    assert json.loads(out.with_suffix(".json").read_text())["summary"]["pairs"] == 1
    assert "Of 1 (layer, algorithm) pairs" in out.with_suffix(".md").read_text()
