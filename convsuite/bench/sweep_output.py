"""What a sweep shows: the seed-style table, ``sweep.json``, ``sweep.csv`` and plots.

The table has one row per configuration: its parameter values, the median
time on each layer (``-`` where the algorithm refuses the configuration or it
was not swept, ``FAILED`` where it disagrees with the reference), the total
over the layers, and marks for the best configuration overall and each
layer's hand-chosen default. Nothing here measures.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from .._files import atomic_write_bytes, atomic_write_json, atomic_write_text, check_writable_file
from ._arguments import check_output_dir
from .plotting import PALETTE, png_bytes, pyplot
from .sweep import Cell, Row, SweepResult

__all__ = [
    "CSV_COLUMNS",
    "check_sweep_files",
    "format_table",
    "summary_lines",
    "sweep_files",
    "table",
    "varied_parameters",
    "write_sweep",
]

#: Columns of ``sweep.csv`` after the parameter columns (one row per configuration and layer).
CSV_COLUMNS = (
    "status",
    "reason",
    "median_s",
    "low_s",
    "high_s",
    "iqr_rel",
    "repeats",
    "compile_s",
    "max_rel_error",
    "abandoned",
    "is_default",
    "is_best_for_layer",
    "is_best_overall",
)


def _ms(seconds: float | None) -> str:
    """Milliseconds with three significant digits."""
    return "-" if seconds is None else f"{seconds * 1e3:.3g}"


def _cell_text(cell: Cell) -> str:
    """One table cell: the median in ms, ``-`` (refused, not swept) or ``FAILED``."""
    if cell.status == "ok":
        return _ms(cell.median_s) + ("*" if cell.abandoned else "")
    return "FAILED" if cell.status == "failed" else "-"


def _marks(result: SweepResult, row: Row) -> str:
    """``best`` and/or ``default`` (naming the layers when the default differs per layer)."""
    marks = []
    if result.best is not None and row.params == result.best:
        marks.append("best")
    default_on = [layer.label for layer in result.layers if layer.default == row.params]
    if default_on and len(default_on) == len(result.layers):
        marks.append("default")
    elif default_on:
        marks.append(f"default on {', '.join(default_on)}")
    return ", ".join(marks)


def table(result: SweepResult) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the seed-style table (times in ms)."""
    names = result.parameter_names
    header = [*names, *(f"{layer.label} ms" for layer in result.layers), "total ms", ""]
    rows = []
    for row in result.rows:
        cells = [_cell_text(row.cells[layer.label]) for layer in result.layers]
        rows.append([*(str(row.params.get(n)) for n in names), *cells, _ms(row.total_s), _marks(result, row)])
    return header, rows


def _aligned(header: list[str], rows: list[list[str]]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart, a rule under the header."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def format_table(result: SweepResult, width: int | None = None) -> str:
    """The table as aligned plain text, within ``width`` columns where it can be.

    Too wide with the layers' names as headers, the layers become ``L1``,
    ``L2``, ... with a key under the table; the marks column (best, default)
    is last, so a still wider table loses only its end to the terminal's wrap.
    """
    header, rows = table(result)
    lines = _aligned(header, rows)
    if width is None or max(map(len, lines)) <= width:
        return "\n".join(lines)
    names = result.parameter_names
    short = [*names, *(f"L{i} ms" for i in range(1, len(result.layers) + 1)), "total ms", ""]
    key = [f"L{i}: {layer.label}" for i, layer in enumerate(result.layers, 1)]
    return "\n".join([*_aligned(short, rows), *key])


def _params_text(params: dict | None) -> str:
    """``tile_w=16 tile_h=8``."""
    return "none" if params is None else " ".join(f"{k}={v}" for k, v in params.items()) or "(no parameters)"


def summary_lines(result: SweepResult) -> list[str]:
    """One line per layer answering the seed's question, then the best overall, then failures."""
    lines = []
    for layer in result.layers:
        if layer.speedup is not None:
            best, default = (result.row_for(p).cells[layer.label] for p in (layer.best, layer.default))
            lines.append(
                f"{layer.label}: best vs default: x{layer.speedup:.2f} "
                f"({_ms(layer.best_s)} ms, IQR {best.iqr_rel:.0%}, with {_params_text(layer.best)}; "
                f"default {_params_text(layer.default)} {_ms(layer.default_s)} ms, IQR {default.iqr_rel:.0%})"
            )
        elif layer.best is not None:
            best = f"{_params_text(layer.best)} {_ms(layer.best_s)} ms"
            lines.append(f"{layer.label}: best {best}; the default did not run")
        else:
            lines.append(f"{layer.label}: no configuration ran")
    if result.best is not None:
        ratio = ""
        if result.default_total_s is not None:
            gain = result.default_total_s / result.best_total_s
            ratio = f"; defaults total {_ms(result.default_total_s)} ms, x{gain:.2f}"
        lines.append(f"best over the workload: {_params_text(result.best)}, total {_ms(result.best_total_s)} ms{ratio}")
    else:
        lines.append("best over the workload: none (no configuration ran on every layer)")
    compile_s = sum(c.compile_s or 0.0 for r in result.rows for c in r.cells.values())
    seconds = result.meta.get("seconds")
    if seconds is not None:
        timed = sum(c.status == "ok" for r in result.rows for c in r.cells.values())
        lines.append(
            f"sweep time: {seconds:.1f} s for {timed} (configuration, layer) pairs timed, of which "
            f"{compile_s:.1f} s plan + first calls (compilation of new configurations included), "
            f"{max(seconds - compile_s, 0.0):.1f} s checking and measuring"
        )
    if "modules_built" in result.meta:
        cache = result.meta.get("compile_cache") or {}
        where = (
            f"read back from {cache['directory']}"
            if cache.get("reads_templates")
            else f"not read back across processes (CuPy {cache.get('cupy', '?')}; needs >= 14.2)"
        )
        lines.append(
            f"module builds: {result.meta['modules_built']} new module(s) built in "
            f"{result.meta['module_build_s']:.1f} s (NVRTC, or loaded from the disk cache: {where})"
        )
    for params, label, reason in result.failures():
        lines.append(f"FAILED: {_params_text(params)} on {label}: {reason}")
    if any(c.abandoned for r in result.rows for c in r.cells.values()):
        lines.append("* timed for one round only: far slower than the best (abandoned)")
    return lines


def _csv_text(result: SweepResult) -> str:
    """``sweep.csv``: one line per configuration and layer."""
    names = result.parameter_names
    handle = io.StringIO(newline="")
    writer = csv.writer(handle)
    writer.writerow(["backend", "algorithm", "workload", "direction", "dtype", "layer", *names, *CSV_COLUMNS])
    for row in result.rows:
        for layer in result.layers:
            cell = row.cells[layer.label]
            writer.writerow(
                [
                    result.backend,
                    result.algorithm,
                    result.workload,
                    result.direction,
                    result.dtype,
                    layer.label,
                    *(row.params.get(n) for n in names),
                    *(getattr(cell, c) for c in CSV_COLUMNS[:10]),
                    row.params == layer.default,
                    row.params == layer.best,
                    row.params == result.best,
                ]
            )
    return handle.getvalue()


def _series(result: SweepResult, layer, name: str):
    """Values of ``name`` and this layer's times with the other parameters at the layer's best."""
    others = {k: v for k, v in (layer.best or {}).items() if k != name}
    points = []
    for row in result.rows:
        cell = row.cells[layer.label]
        if cell.status == "ok" and all(row.params.get(k) == v for k, v in others.items()):
            points.append((row.params[name], cell.median_s, cell.low_s, cell.high_s))
    return sorted(points, key=lambda p: p[0])


def varied_parameters(result: SweepResult) -> list[str]:
    """The parameters the sweep varied (with a grid, those it names; the others stayed at their defaults)."""
    varied = result.meta.get("varied")
    return [n for n in result.parameter_names if varied is None or n in varied]


def _plot_parameters(result: SweepResult, plt) -> dict[str, bytes]:
    """Time against each varied parameter, one panel per layer (others at that layer's best): name -> PNG."""
    images = {}
    for name in varied_parameters(result):
        columns = min(len(result.layers), 3)
        rows = -(-len(result.layers) // columns)
        fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.3 * rows), squeeze=False)
        for ax in axes.flat[len(result.layers) :]:
            ax.set_visible(False)
        for ax, layer in zip(axes.flat, result.layers):
            points = _series(result, layer, name)
            if points:
                xs = [str(p[0]) for p in points]
                med = [p[1] * 1e3 for p in points]
                err = [[(p[1] - p[2]) * 1e3 for p in points], [(p[3] - p[1]) * 1e3 for p in points]]
                ax.errorbar(xs, med, yerr=err, marker="o", capsize=3, color=PALETTE[0], label="median (range)")
                if layer.default and layer.default.get(name) in [p[0] for p in points]:
                    at = [p[0] for p in points].index(layer.default[name])
                    # A box around the default's point, as in the heat map (a line at an axis' end hides).
                    ax.plot(
                        xs[at],
                        med[at],
                        "s",
                        markersize=14,
                        markerfacecolor="none",
                        markeredgecolor="black",
                        markeredgewidth=1.6,
                        label="default",
                        zorder=3,
                    )
                if layer.best and layer.best.get(name) in [p[0] for p in points]:
                    at = [p[0] for p in points].index(layer.best[name])
                    ax.plot(
                        xs[at],
                        med[at],
                        "*",
                        markersize=14,
                        color=PALETTE[5],
                        markeredgecolor="black",
                        label="best",
                        zorder=4,
                    )
            else:
                ax.text(0.5, 0.5, "nothing ran", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(layer.label, fontsize=9)
            ax.set_xlabel(name)
            ax.set_ylabel("ms per call")
            ax.tick_params(axis="x", labelsize=8)
            ax.margins(x=0.15)
            ax.grid(True, axis="y", alpha=0.3)
        handles: dict = {}
        for ax in axes.flat:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(label, handle)
        fig.legend(
            list(handles.values()),
            list(handles),
            loc="upper center",
            ncol=3,
            fontsize=8,
            frameon=False,
            bbox_to_anchor=(0.5, 0.0),
        )
        others = [n for n in result.parameter_names if n != name]
        where = f"; {', '.join(others)} at each layer's best" if others else ""
        fig.suptitle(f"{result.backend}/{result.algorithm}: time vs {name}{where}", fontsize=10)
        fig.tight_layout()
        images[f"sweep-{name}.png"] = png_bytes(fig, plt)
    return images


def _plot_heatmap(result: SweepResult, plt) -> bytes | None:
    """Total time over the layers for every pair of the two varied parameters; best a star, default a box."""
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    varied = varied_parameters(result)
    if len(varied) != 2:
        return None
    a, b = varied
    # Axes from the configurations that ran on every layer: a layer's default
    # outside the grid (measured on that layer only) has no total to show.
    complete = [r for r in result.rows if r.total_s is not None] or result.rows
    xs = sorted({r.params[a] for r in complete})
    ys = sorted({r.params[b] for r in complete})
    grid = np.full((len(ys), len(xs)), np.nan)
    for row in complete:
        if row.total_s is not None:
            grid[ys.index(row.params[b]), xs.index(row.params[a])] = row.total_s * 1e3
    fig, ax = plt.subplots(figsize=(2.2 + 0.95 * len(xs), 1.8 + 0.6 * len(ys)))
    cmap = plt.get_cmap("viridis_r")  # perceptually uniform and colour-blind safe; light = fast
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, origin="lower", aspect="auto")
    for (i, j), value in np.ndenumerate(grid):
        if np.isnan(value):
            ax.text(j, i, "-", ha="center", va="center", fontsize=7, color="black")
            continue
        red, green, blue, _ = cmap(image.norm(value))
        dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5  # readable text on every cell
        ax.text(j, i - 0.22, f"{value:.3g}", ha="center", va="center", fontsize=8, color="white" if dark else "black")
    legend = []
    if result.best is not None and result.best.get(a) in xs and result.best.get(b) in ys:
        ax.plot(
            xs.index(result.best[a]),
            ys.index(result.best[b]) + 0.12,
            marker="*",
            markersize=15,
            color="white",
            markeredgecolor="black",
            markeredgewidth=1.2,
            linestyle="none",
        )
        legend.append(
            Line2D(
                [],
                [],
                marker="*",
                markersize=12,
                color="white",
                markeredgecolor="black",
                linestyle="none",
                label="best total",
            )
        )
    everywhere = [layer.default for layer in result.layers]
    defaults = {(d[a], d[b]) for d in everywhere if d and a in d and b in d}
    for da, db in defaults:
        if da in xs and db in ys:
            shared = all(layer.default.get(a) == da and layer.default.get(b) == db for layer in result.layers)
            for width, colour in ((4.0, "white"), (2.0, "black")):  # a double outline shows on any cell
                ax.add_patch(
                    Rectangle(
                        (xs.index(da) - 0.46, ys.index(db) - 0.46),
                        0.92,
                        0.92,
                        fill=False,
                        linewidth=width,
                        edgecolor=colour,
                        linestyle="-" if shared else "--",
                    )
                )
    if defaults:
        legend.append(
            Rectangle(
                (0, 0), 1, 1, fill=False, linewidth=2.0, edgecolor="black", label="default (dashed: on some layers)"
            )
        )
    ax.set_xticks(range(len(xs)), [str(v) for v in xs])
    ax.set_yticks(range(len(ys)), [str(v) for v in ys])
    ax.set_xlabel(a)
    ax.set_ylabel(b)
    ax.set_title(f"{result.backend}/{result.algorithm}: total ms over {len(result.layers)} layers", fontsize=9)
    fig.colorbar(image, ax=ax, label="total ms (lighter is faster)")
    if legend:
        ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    return png_bytes(fig, plt)


def sweep_files(parameter_names: Sequence[str]) -> list[str]:
    """The names of the files :func:`write_sweep` may write for a sweep of these parameters."""
    return ["sweep.json", "sweep.csv", *(f"sweep-{name}.png" for name in parameter_names), "sweep-heatmap.png"]


def check_sweep_files(out: str | Path, parameter_names: Sequence[str], what: str = "--out") -> Path:
    """The folder ``out`` (created if needed), once every file of :func:`sweep_files` is known to be writable.

    Checked before the sweep: a folder in the way of one file would otherwise fail after every measurement.

    Raises
    ------
    ValueError
        Naming ``what`` and the file that cannot be written.
    """
    out = check_output_dir(out, what)
    for name in sweep_files(parameter_names):
        check_writable_file(out / name, what)
    return out


def write_sweep(result: SweepResult, out: str | Path) -> dict[str, Path]:
    """Write ``sweep.json``, ``sweep.csv`` and the plots to ``out``; the paths by kind.

    Plots need matplotlib (``convsuite[bench]``); without it only the data
    files are written and ``result.meta["notes"]`` says so. Every file is
    written atomically (strict JSON: a NaN or infinity is ``null``, noted in
    the file); one that cannot be written is saved next to it or in the
    temporary folder instead, its path is the one returned, and
    ``result.meta["not_saved"]`` has one line per such file saying where.

    Raises
    ------
    ValueError
        ``out`` is an empty string, a file, under a file, or not writable,
        or one of the files is in the way (``Path("")`` is ``Path(".")``,
        the current folder, and is taken as it); checked before anything is
        written.
    """
    out = check_sweep_files(out, result.parameter_names, "`out`")
    plt = pyplot()
    if plt is None:
        result.meta.setdefault("notes", []).append("plots skipped: matplotlib is not installed")
    # The data first: whatever happens to the pictures after, the measurements are on disk.
    saved = {
        "json": atomic_write_json(out / "sweep.json", result.as_dict(), indent=1, fallback=True),
        "csv": atomic_write_text(out / "sweep.csv", _csv_text(result), fallback=True),
    }
    if plt is not None:
        images = _plot_parameters(result, plt)
        heatmap = _plot_heatmap(result, plt)
        if heatmap is not None:
            images["sweep-heatmap.png"] = heatmap
        for name, png in images.items():
            kind = "heatmap" if name == "sweep-heatmap.png" else f"plot {name[:-4]}"
            saved[kind] = atomic_write_bytes(out / name, png, fallback=True)
    problems = [s.warning for s in saved.values() if s.warning]
    if problems:
        result.meta["not_saved"] = problems
    return {kind: s.path for kind, s in saved.items()}
