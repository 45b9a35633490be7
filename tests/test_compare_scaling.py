"""``convsuite compare --scaling``: parsing, usage errors, the points, a real tiny run."""

from __future__ import annotations

import csv
import json

import pytest

from convsuite import cli
from convsuite.bench import scaling, scaling_view


def _parse(*argv):
    return cli.build_parser().parse_args(["compare", *argv])


# --- parsing and usage errors -------------------------------------------------------


def test_scaling_flag_parses_sections_and_defaults_to_all():
    assert _parse().scaling is None and not _parse().quick
    assert _parse("--scaling").scaling == ["joblib", "dask", "gpus"]
    assert _parse("--scaling", "dask, joblib,dask").scaling == ["dask", "joblib"]  # order kept, repeats dropped
    args = _parse("--scaling", "joblib", "--quick", "--repeat", "2", "--out", "here")
    assert (args.scaling, args.quick, args.repeat, args.out) == (["joblib"], True, 2, "here")


@pytest.mark.parametrize("value, named", [("jobli", "'jobli'"), ("dask,gpu", "'gpu'"), (",", "','")])
def test_unknown_section_is_a_usage_error_naming_it(value, named, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["compare", "--scaling", value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--scaling" in err and "joblib, dask, gpus" in err and f"got {named}" in err


@pytest.fixture
def no_measuring(monkeypatch):
    """Fail the test if a usage error lets the scaling run start."""

    def forbidden(*args, **kwargs):
        raise AssertionError("measured before rejecting the arguments")

    monkeypatch.setattr(scaling_view, "scaling_rows", forbidden)
    monkeypatch.setattr("convsuite.bench.compare.measure_case", forbidden)


@pytest.mark.parametrize(
    "extra, named",
    [
        (["--workload", "ece408-fa19"], "--workload"),
        (["--x", "8", "--w", "3"], "--x, --w"),
        (["--backends", "numpy"], "--backends"),
        (["--dtype", "float64"], "--dtype"),
        (["--device", "gpu"], "--device"),
        (["--compare-to", "old.json"], "--compare-to"),
    ],
)
def test_options_that_do_not_apply_to_scaling_are_refused(extra, named, no_measuring, tmp_path, capsys):
    assert cli.main(["compare", "--scaling", "dask", "--out", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("convsuite compare: error: --scaling")
    assert f"leave out {named}" in err


def test_quick_without_scaling_and_an_unwritable_out_are_refused(no_measuring, tmp_path, capsys):
    assert cli.main(["compare", "--quick", "--out", str(tmp_path)]) == 2
    assert "--quick sizes the --scaling sections" in capsys.readouterr().err
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert cli.main(["compare", "--scaling", "joblib", "--out", str(blocker)]) == 2
    assert "is a file" in capsys.readouterr().err


# --- points: one per case and worker count ------------------------------------------


def _row(section, case, ours, ours_n, ours_ms, baseline, base_n, base_ms):
    ratio = base_ms / ours_ms
    return dict(
        section=section,
        case=case,
        ours=ours,
        ours_workers=ours_n,
        ours_ms=ours_ms,
        ours_spread_ms=[ours_ms * 0.9, ours_ms * 1.1],
        baseline=baseline,
        baseline_workers=base_n,
        baseline_ms=base_ms,
        baseline_spread_ms=[base_ms * 0.9, base_ms * 1.1],
        ratio=ratio,
    )


def test_points_put_workers_on_the_axis_with_speedup_over_one_worker():
    rows = [
        _row("dask", "N", "dask, 2 workers", 2, 50.0, "dask, 1 worker", 1, 90.0),
        _row("dask", "N", "dask, 2 workers", 2, 50.0, "in-memory numba (2 thr)", 2, 30.0),
        _row("dask", "small", "200 chunks", 2, 40.0, "2 chunks", 2, 10.0),
    ]
    points = scaling_view.scaling_points(rows)
    assert [(p["case"], p["contender"], p["workers"]) for p in points] == [
        ("N", "dask, 1 worker", 1),
        ("N", "dask, 2 workers", 2),
        ("N", "in-memory numba (2 thr)", 2),
        ("small", "200 chunks", 2),
        ("small", "2 chunks", 2),
    ]
    one, two, memory, many, few = points
    assert one["speedup"] == 1.0 and two["speedup"] == pytest.approx(1.8)
    assert memory["speedup"] == pytest.approx(3.0)
    assert two["against"] == ["0.60x vs in-memory numba (2 thr)"] and one["against"] == []
    assert many["speedup"] is None and few["speedup"] is None  # no one-worker contender in that case
    cells = scaling_view.table_cells(two)
    assert cells[3:8] == ["2", "50.0", "45.0-55.0", "1.80x", "0.60x vs in-memory numba (2 thr)"]
    assert "goal" not in scaling_view.COLUMNS and "goal" not in points[1]


# --- a real run of the joblib and dask sections, on tiny sizes ------------------------


def test_compare_scaling_runs_joblib_and_dask_and_writes_the_table(tmp_path, monkeypatch, capsys):
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    # Tiny problems so CI stays short; everything else is the real measurement.
    monkeypatch.setitem(scaling.SIZES, "quick", dict(joblib_batch=2, dask_n=20_000, dask_chunk=2_000, gpu_batch=2))
    monkeypatch.setattr(scaling, "ECE408_LAYERS", scaling.ECE408_LAYERS[:1])
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps the table to the terminal's width
    argv = ["compare", "--scaling", "joblib,dask", "--quick", "--repeat", "1", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "scaling.json").read_text())
    assert data["meta"]["sections"] == ["joblib", "dask"] and data["meta"]["quick"] is True
    points = {(p["case"], p["contender"]): p for p in data["points"]}

    joblib_case = "ece408-fa19 conv1 B=2"
    cython, threads = points[(joblib_case, "cython (1 core)")], points[(joblib_case, "joblib (2 threads)")]
    assert (cython["workers"], threads["workers"]) == (1, 2)
    assert cython["speedup"] == 1.0
    assert threads["speedup"] == pytest.approx(cython["ms"] / threads["ms"])
    (vs_numba,) = [r for r in data["rows"] if r["case"] == joblib_case and r["baseline"] == "numba (2 threads)"]
    assert threads["against"] == [f"{vs_numba['ratio']:.2f}x vs numba (2 threads)"]

    dask_case = "N=2e+04 K=31 chunks 2e+03"
    one, two = points[(dask_case, "dask, 1 worker")], points[(dask_case, "dask, 2 workers")]
    assert (one["workers"], two["workers"]) == (1, 2)
    assert two["speedup"] == pytest.approx(one["ms"] / two["ms"])
    assert any("vs in-memory numba (2 thr)" in a for a in two["against"])
    # Two workers as threads of one LocalCluster process: an information row against the in-memory call.
    (as_threads,) = [r for r in data["rows"] if r["case"] == dask_case and r["ours"] == "dask, 2 worker threads"]
    assert as_threads["baseline"] == "in-memory numba (2 thr)"
    # The same graph on Dask's threaded scheduler: information rows.
    threaded_case = "N=2e+04 K=31 threaded"
    t1, t2 = points[(threaded_case, "dask threads, 1")], points[(threaded_case, "dask threads, 2")]
    assert (t1["workers"], t2["workers"]) == (1, 2) and t2["speedup"] == pytest.approx(t1["ms"] / t2["ms"])
    assert any("vs in-memory numba (2 thr)" in a for a in t2["against"])
    assert ("N=2e+04 K=31", "200 chunks") in points  # the per-chunk overhead case
    for p in data["points"]:
        low, high = p["spread_ms"]
        assert 0 < low <= p["ms"] <= high

    # The printed table and the files carry the same rows.
    assert "speed-up vs 1" in out and f"written to {tmp_path}/: " in out and "scaling.csv" in out
    # The table's body (the measuring log is above it), one row per point, in order.
    body = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    assert body == [scaling_view.table_cells(p) for p in data["points"]]
    with (tmp_path / "scaling.csv").open() as handle:
        table = list(csv.reader(handle))
    assert table[0] == list(scaling_view.COLUMNS) and len(table) == 1 + len(data["points"])
    assert [r[2] for r in table[1:]] == [p["contender"] for p in data["points"]]
    assert "| dask | N=2e+04 K=31 chunks 2e+03 | dask, 2 workers | 2 |" in (tmp_path / "scaling.md").read_text()
