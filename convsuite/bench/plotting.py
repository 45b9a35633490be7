"""The pictures of ``convsuite compare`` and ``convsuite sweep``: one palette, legends off the data.

Every plot here is read by people who may not tell red from green: contenders
are told apart by colour *and* marker, the colours from Okabe and Ito's
colour-blind-safe palette (Okabe & Ito, "Color Universal Design", 2008; the
palette Wong recommends in Nature Methods 8, 441); heat maps use viridis. Legends
sit outside the axes, and every case is named where its data is drawn.
Figures are drawn in memory and returned as PNG bytes; the caller writes them
(atomically). Nothing here measures.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from .measure import Result

__all__ = ["MARKERS", "PALETTE", "compare_plots", "png_bytes", "pyplot", "style_for"]

#: Okabe-Ito, in the order contenders take them: the hues most distinct on white first; yellow
#: (hard to see on white) last but one, always drawn with a dark edge; black last (the roof line's).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
#: One marker per colour, so a contender is told apart in greyscale too.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
#: Dots per inch of the PNGs: a 9-inch figure is about 1000 pixels wide, what a viewer opens at 100%.
DPI = 110


def pyplot():
    """The pyplot of matplotlib on the Agg backend, or None without matplotlib (the bench extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def png_bytes(fig, plt) -> bytes:
    """The figure as PNG bytes (legends outside the axes included), then closed."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    return buffer.getvalue()


def style_for(names: Sequence[str]) -> dict[str, dict]:
    """Colour and marker of each name, in order (cycling past eight, the marker changing first)."""
    return {
        name: dict(color=PALETTE[i % len(PALETTE)], marker=MARKERS[(i + i // len(PALETTE)) % len(MARKERS)])
        for i, name in enumerate(names)
    }


def _outside_legend(ax, title: str | None = None) -> None:
    """The axes' legend to the right of them, off the data (none when nothing labelled was drawn)."""
    if not ax.get_legend_handles_labels()[0]:
        return
    ax.legend(
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
        fontsize=8,
        title=title,
        title_fontsize=8,
        frameon=False,
    )


def _reduced(r: Result) -> bool:
    """Measured on a smaller version of its case (its time is for less work)."""
    return r.note.startswith("reduced to")


def _work(flops: float) -> str:
    """``38 MFLOP``, ``1.2 GFLOP``."""
    for scale, unit in ((1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP")):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.3g} FLOP"


def _case_order(ok: list[Result]) -> list[str]:
    """The cases, least work first (a reduced row's work is not its case's)."""
    work: dict[str, float] = {}
    for r in ok:
        if not _reduced(r):
            work[r.case] = r.flops
    for r in ok:
        work.setdefault(r.case, r.flops)
    return sorted(work, key=lambda c: work[c])


def _time_per_case(ok: list[Result], styles: dict, meta: dict, plt) -> bytes:
    """Median time of every contender on every case: one labelled row per case, least work at the bottom."""
    cases = _case_order(ok)
    work = {r.case: r.flops for r in ok if not _reduced(r)}
    fig, ax = plt.subplots(figsize=(9, 1.4 + 0.6 * len(cases)))
    # A small vertical offset per contender, so equal times stay visible side by side (first on top).
    offsets = {name: ((len(styles) - 1) / 2 - i) * 0.09 for i, name in enumerate(styles)}
    reduced_shown = False
    for name, style in styles.items():
        rows = [r for r in ok if r.contender == name]
        full = [r for r in rows if not _reduced(r)]
        small = [r for r in rows if _reduced(r)]
        ax.scatter(
            [r.end_to_end_s * 1e3 for r in full],
            [cases.index(r.case) + offsets[name] for r in full],
            s=36,
            color=style["color"],
            marker=style["marker"],
            edgecolors="#333333",
            linewidths=0.5,
            label=name,
            zorder=3,
        )
        if small:
            reduced_shown = True
            ax.scatter(
                [r.end_to_end_s * 1e3 for r in small],
                [cases.index(r.case) + offsets[name] for r in small],
                s=36,
                facecolors="none",
                edgecolors=style["color"],
                marker=style["marker"],
                linewidths=1.2,
                label=None if full else name,
                zorder=3,
            )
    ax.set_yticks(range(len(cases)))
    ax.set_yticklabels([f"{c}  ({_work(work[c])})" if c in work else c for c in cases], fontsize=8)
    ax.set_ylim(-0.6, len(cases) - 0.4)
    ax.set_xscale("log")
    ax.set_xlabel("median time per call, end to end (ms, log scale)")
    ax.set_title(f"{meta.get('workload', '')}: time per case, least work at the bottom", fontsize=10)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    for y in range(len(cases)):
        ax.axhline(y, color="#dddddd", linewidth=0.6, zorder=1)
    if reduced_shown:
        ax.scatter(
            [],
            [],
            s=36,
            facecolors="none",
            edgecolors="#333333",
            marker="o",
            label="hollow: run at a reduced\nsize (less work)",
        )
    _outside_legend(ax, "contender")
    return png_bytes(fig, plt)


def _speedup(ok: list[Result], styles: dict, ratio: dict, baseline: str, meta: dict, plt) -> bytes:
    """Speedup over the baseline per case: bars from 1 (the baseline) to each contender's ratio, cases named."""
    cases = _case_order(ok)
    names = [n for n in styles if n != baseline and any((c, n) in ratio for c in cases)]
    height = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.12 * len(cases) * max(len(names), 1) + 0.3 * len(cases)))
    for i, name in enumerate(names):
        # The first contender on top of its group, as in the legend.
        found = [(j, ratio[(c, name)]) for j, c in enumerate(cases) if (c, name) in ratio]
        ys = [j + 0.4 - (i + 0.5) * height for j, _ in found]
        # From 1 to the ratio: on a log axis a bar from the axis' edge would give its length no meaning.
        widths = [value - 1.0 for _, value in found]
        ax.barh(
            ys, widths, height, left=1.0, color=styles[name]["color"], edgecolor="#333333", linewidth=0.4, label=name
        )
    ax.axvline(1.0, color="black", linewidth=1.2, label=f"{baseline} (= 1)")
    ax.set_xscale("log")
    ax.set_yticks(range(len(cases)))
    ax.set_yticklabels(cases, fontsize=8)
    ax.set_ylim(-0.6, len(cases) - 0.4)
    for y in range(len(cases) - 1):
        ax.axhline(y + 0.5, color="#dddddd", linewidth=0.6)
    ax.set_xlabel(f"speedup over {baseline} (throughput ratio, log scale): right of the line is faster")
    ax.set_title(f"{meta.get('workload', '')}: speedup over {baseline}, least work at the bottom", fontsize=10)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    _outside_legend(ax, "contender")
    return png_bytes(fig, plt)


def _roofline(ok: list[Result], styles: dict, ceilings: dict, meta: dict, plt) -> bytes:
    """GFLOP/s against arithmetic intensity under the measured roof; the cases numbered and keyed."""
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(8, 5))
    lo = min((r.intensity for r in ok), default=0.1) / 4
    hi = max((r.intensity for r in ok), default=100) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    roof = [min(ceilings["gemm_gflops"], ceilings["copy_gbs"] * x) for x in xs]
    ax.loglog(xs, roof, "-", color="black", linewidth=1.2, label="roof (measured)")
    for name, style in styles.items():
        pts = [(r.intensity, r.gflops) for r in ok if r.contender == name]
        ax.scatter(
            [p[0] for p in pts],
            [p[1] for p in pts],
            s=30,
            color=style["color"],
            marker=style["marker"],
            edgecolors="#333333",
            linewidths=0.5,
            label=name,
            zorder=3,
        )
    # Each case numbered above its column of points, the numbers keyed in the legend (a reduced-size
    # row has an intensity of its own and no number).
    where = {r.case: r.intensity for r in ok if not _reduced(r)}
    numbered = {case: i for i, case in enumerate(sorted(where, key=where.get), 1)}
    for case, number in numbered.items():
        top = max(r.gflops for r in ok if r.case == case and not _reduced(r))
        ax.annotate(
            str(number),
            (where[case], top),
            xytext=(0, 5),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
            fontweight="bold",
            color="#333333",
        )
    ax.set_xlabel("arithmetic intensity (FLOP per compulsory byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"{meta.get('workload', '')}: roofline (one point per contender and case)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_ylim(top=ax.get_ylim()[1] * 2)  # room for the case numbers over the highest points
    handles, labels = ax.get_legend_handles_labels()
    for case, number in numbered.items():
        handles.append(Line2D([], [], linestyle="none"))
        labels.append(f"{number}: {case}")
    ax.legend(
        handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8, frameon=False
    )
    return png_bytes(fig, plt)


def compare_plots(results: list[Result], meta: dict, ratio: dict, baseline: str, plt) -> dict[str, bytes]:
    """The PNG plots of a comparison, drawn in memory: file name -> bytes.

    ``ratio`` is the speedup of each ``(case, contender)`` over ``baseline``
    (:func:`convsuite.bench.report.speedups`).
    """
    ok = [r for r in results if r.status == "ok"]
    styles = style_for(list(dict.fromkeys(r.contender for r in ok)))
    images = {
        "time_vs_size.png": _time_per_case(ok, styles, meta, plt),
        "speedup.png": _speedup(ok, styles, ratio, baseline, meta, plt),
    }
    if meta.get("ceilings"):
        images["roofline.png"] = _roofline(ok, styles, meta["ceilings"], meta, plt)
    return images
