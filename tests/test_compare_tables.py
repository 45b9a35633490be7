"""compare's terminal tables at 80 and 120 columns: nothing split, unavailable contenders listed once."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from convsuite.bench.measure import Result
from convsuite.bench.report import LAYOUTS, _cells, _markdown, print_table, speedups

CASES = ["3x3 C16->32 32x32 B=8", "3x3 C16->16 24x24 B=4 backward", "1-D N=1e6 K=31"]
CONTENDERS = ["numba", "cython", "joblib", "numpy", "python", "torch", "scipy.signal.correlate"]
CUPY_REASON = (
    "cupy is not installed (No module named 'cupy'); install it with `pip install 'convsuite[cuda]'` (cupy-cuda13x)"
)


def _ok(case: str, name: str, ms: float, **fields) -> Result:
    kind = "anchor" if name in ("torch", "scipy.signal.correlate") else "backend"
    r = Result("default", case, "forward", name, kind, "float32", x_shape=(8, 16, 32, 32), flops=int(4.7e7))
    r.end_to_end_s, r.kernel_s = ms / 1e3, 0.97 * ms / 1e3
    r.end_to_end_range_s = r.kernel_range_s = (ms / 1e3, ms / 1e3)
    r.gflops, r.frac_roof, r.max_rel_error, r.error_ok = 4.7e7 / (ms / 1e3) / 1e9, 0.683, 5.6e-07, True
    r.first_call_s, r.warmup_s, r.warmup_calls, r.warmup_stable, r.repeats = 7.94, 0.318, 31, True, 5
    for key, value in fields.items():
        setattr(r, key, value)
    return r


def _results() -> list[Result]:
    results = []
    for case in CASES:
        results.append(
            Result(
                "default",
                case,
                "forward",
                "cupy",
                "backend",
                "float32",
                status="skipped",
                reason=f"unavailable: {CUPY_REASON}",
            )
        )
        for i, name in enumerate(CONTENDERS):
            if name == "scipy.signal.correlate" and not case.startswith("1-D"):
                results.append(
                    Result(
                        "default",
                        case,
                        "forward",
                        name,
                        "anchor",
                        "float32",
                        status="skipped",
                        reason="plain 1-D signals only (forward)",
                    )
                )
                continue
            extra = {}
            if name == "python":
                extra = dict(note="reduced to batch 1 (from 8)", x_shape=(1, 16, 32, 32))
            if name == "joblib":
                extra = dict(drift="rounds drift, still warming up (fastest call per round 8 -> 5 -> 2 ms): not steady")
            if name == "torch":
                extra = dict(precision="medium")
            results.append(_ok(case, name, [0.451, 0.877, 31.9, 7.99, 483.0, 0.0984, 11.7][i], **extra))
    return results


def _render(width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=False, color_system=None)
    results = _results()
    print_table(results, "numpy", "default, float32, on AMD EPYC, 2 logical cores", {}, console)
    return out.getvalue()


@pytest.mark.parametrize("width", [80, 120])
def test_tables_fit_the_terminal_and_split_nothing(width):
    text = _render(width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    layout = "wide" if width >= 120 else "compact"
    header_lines = [line for line in lines if line.lstrip().startswith("contender ")]
    assert len(header_lines) == len(CASES)  # one table per case, its header on one line
    for _, header in LAYOUTS[layout]:  # every header whole
        assert all(header in line for line in header_lines), header
    results = _results()
    ratio = speedups(results, "numpy")
    for r in results:
        if r.status != "ok":
            continue
        cells = _cells(r, ratio)
        row = next(line for line in lines if line.lstrip().startswith(cells["contender"] + " "))
        for key, _ in LAYOUTS[layout]:
            if key not in ("contender", "note"):
                assert cells[key] in row, (key, cells[key], row)  # each number whole, on its row


def test_an_unavailable_contender_is_listed_once_not_in_every_case():
    text = _render(80)
    assert text.count("No module named 'cupy'") == 1  # under the tables, not a row (and a wrapped note) per case
    assert not any(line.lstrip().startswith("cupy ") for line in text.splitlines())  # no table row
    assert "not available here" in text and CUPY_REASON in " ".join(text.split())
    markdown = _markdown(
        _results(),
        dict(workload="default", dtype="float32", date="d", machine=dict(cpu="c", gpu="g"), repeat=5),
        "numpy",
        [],
    )
    assert markdown.count("cupy is not installed") == 1


def test_rows_name_their_precision_class_where_it_is_not_highest():
    text = _render(120)
    assert "torch (medium)" in text
    assert "numba (highest)" not in text and "numba " in text


def test_notes_are_numbered_under_their_table():
    text = _render(80)
    assert "reduced to batch 1 (from 8)" in text and "rounds drift, still warming up" in text
    assert "scipy.signal.correlate" in text  # its skip on the 2-D cases is a note, its row on the 1-D case
