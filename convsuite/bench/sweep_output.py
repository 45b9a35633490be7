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
from .sweep import Cell, Row, SweepResult

__all__ = ["CSV_COLUMNS", "check_sweep_files", "format_table", "summary_lines", "sweep_files", "table", "write_sweep"]

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


def format_table(result: SweepResult) -> str:
    """The table as aligned plain text."""
    header, rows = table(result)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


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


def _png(fig, plt) -> bytes:
    """The figure as PNG bytes (written atomically by the caller), then closed."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def _series(result: SweepResult, layer, name: str):
    """Values of ``name`` and this layer's times with the other parameters at the layer's best."""
    others = {k: v for k, v in (layer.best or {}).items() if k != name}
    points = []
    for row in result.rows:
        cell = row.cells[layer.label]
        if cell.status == "ok" and all(row.params.get(k) == v for k, v in others.items()):
            points.append((row.params[name], cell.median_s, cell.low_s, cell.high_s))
    return sorted(points, key=lambda p: p[0])


def _plot_parameters(result: SweepResult, plt) -> dict[str, bytes]:
    """Time against each parameter, one panel per layer (other parameters at that layer's best): name -> PNG."""
    images = {}
    for name in result.parameter_names:
        fig, axes = plt.subplots(1, len(result.layers), figsize=(4 * len(result.layers), 3.2), squeeze=False)
        for ax, layer in zip(axes[0], result.layers):
            points = _series(result, layer, name)
            if points:
                xs = [str(p[0]) for p in points]
                med = [p[1] * 1e3 for p in points]
                err = [[(p[1] - p[2]) * 1e3 for p in points], [(p[3] - p[1]) * 1e3 for p in points]]
                ax.errorbar(xs, med, yerr=err, marker="o", capsize=3)
                if layer.default and layer.default.get(name) in [p[0] for p in points]:
                    ax.axvline(str(layer.default[name]), color="grey", linestyle=":", label="default")
                    ax.legend(fontsize=7)
            else:
                ax.text(0.5, 0.5, "nothing ran", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(layer.label, fontsize=9)
            ax.set_xlabel(name)
            ax.set_ylabel("median ms (range)")
        fig.suptitle(f"{result.backend}/{result.algorithm}: time vs {name}", fontsize=10)
        fig.tight_layout()
        images[f"sweep-{name}.png"] = _png(fig, plt)
    return images


def _plot_heatmap(result: SweepResult, plt) -> bytes | None:
    """Total time over the layers for every pair of the two parameters (the FA19 table as a picture)."""
    import numpy as np

    if len(result.parameter_names) != 2:
        return None
    a, b = result.parameter_names
    # Axes from the configurations that ran on every layer: a layer's default
    # outside the grid (measured on that layer only) has no total to show.
    complete = [r for r in result.rows if r.total_s is not None] or result.rows
    xs = sorted({r.params[a] for r in complete})
    ys = sorted({r.params[b] for r in complete})
    grid = np.full((len(ys), len(xs)), np.nan)
    for row in complete:
        if row.total_s is not None:
            grid[ys.index(row.params[b]), xs.index(row.params[a])] = row.total_s * 1e3
    fig, ax = plt.subplots(figsize=(1.0 + 0.9 * len(xs), 1.0 + 0.7 * len(ys)))
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis_r", origin="lower", aspect="auto")
    middle = np.nanmean([np.nanmin(grid), np.nanmax(grid)]) if np.isfinite(grid).any() else 0.0
    for (i, j), value in np.ndenumerate(grid):
        best = result.best is not None and result.best == {a: xs[j], b: ys[i]}
        text = "-" if np.isnan(value) else f"{value:.3g}" + ("\nbest" if best else "")
        colour = "red" if best else ("white" if value > middle else "black")  # readable on dark cells (slow)
        ax.text(j, i, text, ha="center", va="center", fontsize=7, color=colour)
    ax.set_xticks(range(len(xs)), [str(v) for v in xs])
    ax.set_yticks(range(len(ys)), [str(v) for v in ys])
    ax.set_xlabel(a)
    ax.set_ylabel(b)
    ax.set_title(f"{result.backend}/{result.algorithm}: total ms over {len(result.layers)} layers", fontsize=9)
    fig.colorbar(image, ax=ax, label="total ms")
    fig.tight_layout()
    return _png(fig, plt)


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
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
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
