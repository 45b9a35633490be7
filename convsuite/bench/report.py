"""Reports of a comparison: JSON, CSV, Markdown, PNG plots and the console table."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from .._files import atomic_write_bytes, atomic_write_json, atomic_write_text, check_writable_file
from ._arguments import check_output_dir
from .measure import Result

__all__ = [
    "REPORT_FILES",
    "check_report_files",
    "csv_row",
    "print_ratios",
    "print_table",
    "ratios_to_saved",
    "speedups",
    "write_reports",
]

#: The files :func:`write_reports` writes into its folder, by kind.
REPORT_FILES = {
    "json": "results.json",
    "csv": "results.csv",
    "markdown": "report.md",
    "time_vs_size.png": "time_vs_size.png",
    "speedup.png": "speedup.png",
    "roofline.png": "roofline.png",
}


def speedups(results: list[Result], baseline: str) -> dict[tuple[str, str], float]:
    """Throughput ratio of each result over the baseline's on the same case.

    Throughput (FLOP/s) rather than time, so a backend that ran a reduced size
    is still compared fairly; at equal sizes it is exactly the time ratio.
    """
    base = {r.case: r.gflops for r in results if r.contender == baseline and r.status == "ok"}
    out = {}
    for r in results:
        if r.status == "ok" and base.get(r.case):
            out[(r.case, r.contender)] = r.gflops / base[r.case]
    return out


def ratios_to_saved(results: list[Result], saved: list[dict]) -> list[dict]:
    """Speed of each result relative to the same case and contender in a saved run.

    ``ratio`` is this run's throughput over the saved one's (> 1: faster
    now); throughput, so a reduced-size row compares fairly with a full one.
    Results are matched on case, contender, direction and dtype.
    """

    def key(row):
        return (row["case"], row["contender"], row["direction"], row["dtype"])

    old = {
        key(row): row
        for row in saved
        if isinstance(row, dict) and row.get("status") == "ok" and row.get("gflops") and row.get("end_to_end_s")
    }
    ratios = []
    for r in results:
        before = old.get(key(r.as_dict()))
        if r.status != "ok" or before is None:
            continue
        ratios.append(
            dict(
                case=r.case,
                contender=r.contender,
                saved_ms=before["end_to_end_s"] * 1e3,
                now_ms=r.end_to_end_s * 1e3,
                ratio=r.gflops / before["gflops"],
                same_size=list(before.get("x_shape", [])) == list(r.x_shape),
            )
        )
    return ratios


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3g}"


def _reduced(r: Result) -> bool:
    """Whether the result was measured on a smaller version of its case."""
    return r.note.startswith("reduced to")


def _rows(results: list[Result], baseline: str):
    ratio = speedups(results, baseline)
    for r in results:
        if r.status == "skipped":
            yield [r.case, r.contender, "-", "-", "-", "-", "-", "-", f"skipped: {r.reason}"]
            continue
        note = r.note
        if _reduced(r):
            # Its times are for less work than the other rows: show them in the
            # note, per unit of work in the table (GFLOP/s, speedup).
            note = f"{r.note}: {_ms(r.end_to_end_s)} ms for {r.flops:.3g} FLOP; compare by GFLOP/s and speedup"
        yield [
            r.case,
            r.contender,
            "-" if _reduced(r) else _ms(r.end_to_end_s),
            "-" if _reduced(r) else _ms(r.kernel_s),
            f"{ratio[(r.case, r.contender)]:.2f}x" if (r.case, r.contender) in ratio else "-",
            f"{r.gflops:.3g}",
            "-" if r.frac_roof is None else f"{100 * r.frac_roof:.1f}%",
            f"{r.max_rel_error:.1e}" + ("" if r.error_ok else " WRONG"),
            "; ".join(
                filter(
                    None,
                    [note, None if r.h2d_s is None else f"copies: to GPU {_ms(r.h2d_s)} ms, back {_ms(r.d2h_s)} ms"],
                )
            ),
        ]


HEADERS = [
    "case",
    "contender",
    "ms (end to end)",
    "ms (kernel)",
    "speedup",
    "GFLOP/s",
    "% of roof",
    "max rel. error",
    "note",
]
#: A GPU result's note also gives its transfer times (NumPy in, NumPy out).


def _console():
    """A rich console that does not fold logs and pipes to 80 columns."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=160)


def print_table(results: list[Result], baseline: str, title: str) -> None:
    """The seed reports' table, in the terminal: one section per case."""
    from rich.markup import escape
    from rich.table import Table

    console = _console()
    table = Table(title=escape(title), title_justify="left")
    for header in ("case", "contender", "ms", "kernel ms", "speedup", "GFLOP/s", "% roof", "rel. error", "note"):
        table.add_column(header, overflow="fold")
    previous = None
    for row, r in zip(_rows(results, baseline), results):
        if r.status == "skipped" and r.kind == "anchor":
            continue  # anchors that do not apply: listed in the files, not here
        if previous is not None and row[0] != previous:
            table.add_section()
        cells = [row[0] if row[0] != previous else "", *row[1:]]
        table.add_row(*(escape(str(c)) for c in cells))  # case names and reasons may hold [brackets]
        previous = row[0]
    console.print(table)


def print_ratios(compare_to: dict) -> None:
    """Print this run against a saved one: one row per case and contender found in both."""
    from rich.markup import escape
    from rich.table import Table

    title = f"against {compare_to['path']} ({compare_to.get('date')}, {compare_to.get('machine')}): > 1 is faster now"
    table = Table(title=escape(title), title_justify="left")
    for header in ("case", "contender", "ms then", "ms now", "speed ratio"):
        table.add_column(header, overflow="fold")
    for row in compare_to["ratios"]:
        table.add_row(
            escape(row["case"]),
            escape(row["contender"]),
            f"{row['saved_ms']:.3g}",
            f"{row['now_ms']:.3g}",
            f"{row['ratio']:.2f}x" + ("" if row["same_size"] else " (other size: per unit of work)"),
        )
    _console().print(table)


def _markdown(results: list[Result], meta: dict, baseline: str, plots: list[str]) -> str:
    ceilings = meta.get("ceilings") or {}
    lines = [
        f"# convsuite compare: {meta['workload']} ({meta['dtype']})",
        "",
        f"{meta['date']} on {meta['machine']['cpu']}; GPU: {meta['machine']['gpu']}.",
        f"Ceilings measured in this run: copy {ceilings.get('copy_gbs', 0):.1f} GB/s, "
        f"GEMM {ceilings.get('gemm_gflops', 0):.1f} GFLOP/s ({ceilings.get('how', '')}).",
        f"Each time is the median of {meta['repeat']} runs after a first call and a warm-up; speedup is the "
        f"throughput ratio over `{baseline}` on the same case; % of roof is GFLOP/s over "
        "min(GEMM rate, copy bandwidth x arithmetic intensity); the error is against the float64 reference.",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "---|" * len(HEADERS),
    ]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in _rows(results, baseline)]
    if meta.get("notes"):
        lines += ["", *[f"- {note}" for note in meta["notes"]]]
    saved = meta.get("compare_to")
    if saved:
        lines += [
            "",
            f"## Against {saved['path']} ({saved.get('date')}, {saved.get('machine')})",
            "",
            "Speed ratio: this run's throughput over the saved run's, > 1 is faster now.",
            "",
            "| case | contender | ms then | ms now | speed ratio |",
            "|---|---|---|---|---|",
            *[
                f"| {r['case']} | {r['contender']} | {r['saved_ms']:.3g} | {r['now_ms']:.3g} | {r['ratio']:.2f}x |"
                for r in saved["ratios"]
            ],
        ]
    lines += ["", *[f"![{p}]({p})" for p in plots], ""]
    return "\n".join(lines)


def size_series(results: list[Result], meta: dict) -> list[tuple[str, list[tuple[float, float]]]]:
    """The time-vs-size plot's series: (contender, [(FLOP, seconds), ...]) per family.

    A line only joins cases of one family (one shape at several sizes, from
    a sweep or a preset such as the signal lengths); every other case is a
    series of one point, since a line between different layers means nothing.
    """
    family = {}
    for c in meta.get("cases", []):
        label = f"{c['name']} backward" if c.get("direction") == "backward" else c["name"]
        family[label] = c.get("family") or ""
    series: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in results:
        if r.status != "ok":
            continue
        # A reduced-size row measured another size than its family's member: a point of its own.
        joined = family.get(r.case) if not _reduced(r) else None
        key = (r.contender, joined or f"single: {r.case}")
        series.setdefault(key, []).append((r.flops, r.end_to_end_s))
    return [(name, sorted(points)) for (name, _), points in series.items()]


def _png(fig, plt) -> bytes:
    """The figure as PNG bytes (written atomically by the caller), then closed."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def _pyplot():
    """The pyplot of matplotlib on the Agg backend, or None without matplotlib (the bench extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _plots(results: list[Result], meta: dict, baseline: str, plt) -> dict[str, bytes]:
    """The PNG plots, drawn in memory: name -> bytes."""
    ok = [r for r in results if r.status == "ok"]
    contenders = sorted({r.contender for r in ok})
    images = {}

    fig, ax = plt.subplots(figsize=(7, 5))
    colours = {name: f"C{i % 10}" for i, name in enumerate(contenders)}
    labelled = set()
    for name, points in size_series(results, meta):
        style = "o-" if len(points) > 1 else "o"
        ax.loglog(
            [p[0] for p in points],
            [p[1] for p in points],
            style,
            color=colours[name],
            label=None if name in labelled else name,
        )
        labelled.add(name)
    ax.set_xlabel("work (FLOP; reduced-size rows at their own work)")
    ax.set_ylabel("time, end to end (s)")
    ax.set_title(f"{meta['workload']}: time vs size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    images["time_vs_size.png"] = _png(fig, plt)

    ratio = speedups(results, baseline)
    cases = list(dict.fromkeys(r.case for r in ok))
    fig, ax = plt.subplots(figsize=(max(7, 1.2 * len(cases)), 5))
    width = 0.8 / max(len(contenders), 1)
    for i, name in enumerate(contenders):
        values = [ratio.get((c, name), 0.0) for c in cases]
        ax.bar([j + i * width for j in range(len(cases))], values, width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))])
    ax.set_xticklabels(cases, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"speedup over {baseline}")
    ax.set_title(f"{meta['workload']}: speedup")
    ax.legend(fontsize=8)
    fig.tight_layout()
    images["speedup.png"] = _png(fig, plt)

    ceilings = meta.get("ceilings")
    if ceilings:
        fig, ax = plt.subplots(figsize=(7, 5))
        lo = min((r.intensity for r in ok), default=0.1) / 4
        hi = max((r.intensity for r in ok), default=100) * 4
        xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        ax.loglog(
            xs, [min(ceilings["gemm_gflops"], ceilings["copy_gbs"] * x) for x in xs], "k-", label="roof (measured)"
        )
        for name in contenders:
            pts = [(r.intensity, r.gflops) for r in ok if r.contender == name]
            ax.loglog([p[0] for p in pts], [p[1] for p in pts], "o", label=name)
        ax.set_xlabel("arithmetic intensity (FLOP / compulsory byte)")
        ax.set_ylabel("GFLOP/s")
        ax.set_title(f"{meta['workload']}: roofline")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        images["roofline.png"] = _png(fig, plt)
    return images


def csv_row(result: Result) -> dict:
    """One result as flat CSV cells: ranges split into low/high, shapes as ``8x64x56x56``."""
    row = {}
    for key, value in result.as_dict().items():
        if key.endswith("_range_s"):
            stem = key[: -len("_range_s")]
            row[f"{stem}_min_s"], row[f"{stem}_max_s"] = value if value is not None else (None, None)
        elif key == "x_shape":
            row[key] = "x".join(str(v) for v in value)
        else:
            row[key] = value
    return row


#: Why plots are missing, for the notes of a run without matplotlib.
PLOTS_SKIPPED = "plots skipped: matplotlib is not installed (pip install 'convsuite[bench]')"


def check_report_files(out: str | Path, what: str = "--out") -> Path:
    """The folder ``out`` (created if needed), once every file of :data:`REPORT_FILES` is known to be writable there.

    Checked before anything is measured: a folder in the way of one file
    (``results.json/``, say) would otherwise fail after the whole run.

    Raises
    ------
    ValueError
        Naming ``what`` and the file that cannot be written.
    """
    out = check_output_dir(out, what)
    for name in REPORT_FILES.values():
        check_writable_file(out / name, what)
    return out


def write_reports(results: list[Result], meta: dict, baseline: str, out: str | Path) -> dict[str, Path]:
    """Write results.json, results.csv, report.md and the PNG plots to the folder ``out``; the paths by kind.

    Without matplotlib the plots are skipped and ``meta["notes"]`` says so.
    Every file is written atomically (strict JSON: a NaN or infinity is
    ``null``, noted in the file). A file that cannot be written is saved next
    to it or in the temporary folder instead: its path is the one returned,
    and ``meta["not_saved"]`` has one line per such file saying where it went.

    Raises
    ------
    ValueError
        ``out`` is an empty string, a file, under a file, or not writable,
        or one of the files is in the way (a folder named ``results.json``)
        (``Path("")`` is ``Path(".")``, the current folder, and is taken as
        it); checked before anything is drawn or written.
    """
    out = check_report_files(out, "`out`")
    plt = _pyplot()
    if plt is None:
        meta.setdefault("notes", []).append(PLOTS_SKIPPED)
    rows = [csv_row(r) for r in results]
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=list(rows[0]) if rows else [], extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    # The data first: whatever happens to the pictures after, the measurements are on disk.
    document = dict(meta=meta, results=[r.as_dict() for r in results])
    saved = {
        "json": atomic_write_json(out / REPORT_FILES["json"], document, fallback=True),
        "csv": atomic_write_text(out / REPORT_FILES["csv"], table.getvalue(), fallback=True),
    }
    images = {} if plt is None else _plots(results, meta, baseline, plt)
    for name, png in images.items():
        saved[name] = atomic_write_bytes(out / name, png, fallback=True)
    saved["markdown"] = atomic_write_text(
        out / REPORT_FILES["markdown"], _markdown(results, meta, baseline, list(images)), fallback=True
    )
    problems = [s.warning for s in saved.values() if s.warning]
    if problems:
        meta["not_saved"] = problems
    return {kind: s.path for kind, s in saved.items()}
