"""The pictures: every case named, legends off the data, a colour-blind-safe palette, best and default marked."""

from __future__ import annotations

import pytest

matplotlib = pytest.importorskip("matplotlib")

from matplotlib.colors import to_hex  # noqa: E402

from convsuite.bench import plotting, sweep_output  # noqa: E402
from convsuite.bench.sweep import Cell, Layer, Row, SweepResult  # noqa: E402
from tests.test_compare_tables import CASES, _results  # noqa: E402


@pytest.fixture
def figures(monkeypatch):
    """The figures the plotting code draws, kept open instead of turned into PNG bytes."""
    drawn = []
    monkeypatch.setattr(plotting, "png_bytes", lambda fig, plt: drawn.append(fig) or b"")
    monkeypatch.setattr(sweep_output, "png_bytes", lambda fig, plt: drawn.append(fig) or b"")
    yield drawn
    plt = plotting.pyplot()
    for fig in drawn:
        plt.close(fig)


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_compare_plots_name_every_case_and_keep_legends_off_the_data(figures):
    results = _results()
    for r in results:
        r.intensity = 10.0 if r.status == "ok" else None
    meta = dict(workload="default", ceilings=dict(gemm_gflops=100.0, copy_gbs=20.0))
    ratio = {(r.case, r.contender): 1.5 for r in results if r.status == "ok"}
    names = plotting.compare_plots(results, meta, ratio, "numpy", plotting.pyplot())
    assert list(names) == ["time_vs_size.png", "speedup.png", "roofline.png"]
    for fig in figures:
        fig.canvas.draw()
        (ax,) = [a for a in fig.axes if a.get_visible()]
        legend = ax.get_legend()
        assert legend is not None
        assert not _overlap(legend.get_window_extent(), ax.get_window_extent()), fig.axes[0].get_title()
        colours = {to_hex(c) for coll in ax.collections for c in coll.get_facecolors()}
        colours |= {to_hex(p.get_facecolor()) for p in ax.patches}
        assert colours <= {c.lower() for c in plotting.PALETTE}  # Okabe-Ito only (no tab10 defaults)
    time_plot, speedup_plot, _ = figures
    for fig in (time_plot, speedup_plot):
        labels = " ".join(t.get_text() for t in fig.axes[0].get_yticklabels())
        assert all(case in labels for case in CASES)  # each case named where its data is


def _sweep(best, default) -> SweepResult:
    rows = []
    for a in (1, 2, 3):
        for b in (8, 16):
            t = 1e-3 * (a + b / 8)
            rows.append(Row({"a": a, "b": b}, {"L": Cell("ok", median_s=t, low_s=0.9 * t, high_s=1.1 * t)}))
    layer = Layer("L", {}, default, best, 2e-3, 1e-3)
    return SweepResult(
        "fake",
        "algo",
        "w",
        "cpu",
        "forward",
        "float32",
        [dict(name="a", values=[1, 2, 3], doc=""), dict(name="b", values=[8, 16], doc="")],
        [layer],
        rows,
        best,
        1e-3,
        2e-3,
        {},
    )


def test_the_heat_map_marks_best_with_a_star_and_default_with_a_box(figures):
    result = _sweep(best={"a": 1, "b": 8}, default={"a": 2, "b": 16})
    sweep_output._plot_heatmap(result, plotting.pyplot())
    (fig,) = figures
    ax = fig.axes[0]
    stars = [line for line in ax.get_lines() if line.get_marker() == "*"]
    assert len(stars) == 1 and stars[0].get_xdata()[0] == 0 and round(stars[0].get_ydata()[0]) == 0
    boxes = [p for p in ax.patches if type(p).__name__ == "Rectangle"]
    assert boxes and all(round(p.get_x() + p.get_width() / 2) == 1 for p in boxes)  # column a=2
    assert all(round(p.get_y() + p.get_height() / 2) == 1 for p in boxes)  # row b=16
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0] == "best total" and labels[1].startswith("default")
    texts = [t.get_text() for t in ax.texts]
    assert "red" not in {t.get_color() for t in ax.texts} and not any("best" in t for t in texts)


def test_a_sweep_of_one_parameter_draws_no_heat_map(figures):
    result = _sweep(best={"a": 1, "b": 8}, default={"a": 2, "b": 8})
    result.meta["varied"] = ["a"]  # b stayed at its default: one axis only
    assert sweep_output._plot_heatmap(result, plotting.pyplot()) is None
    images = sweep_output._plot_parameters(result, plotting.pyplot())
    assert list(images) == ["sweep-a.png"]
