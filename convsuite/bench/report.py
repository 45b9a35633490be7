"""Reports of a comparison: JSON, CSV, Markdown, PNG plots and the console table."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from .._files import atomic_write_bytes, atomic_write_json, atomic_write_text, check_writable_file
from ._arguments import check_output_dir
from .measure import Result
from .plotting import compare_plots, pyplot

__all__ = [
    "LAYOUTS",
    "REPORT_FILES",
    "check_report_files",
    "contender_label",
    "csv_row",
    "print_ratios",
    "print_table",
    "ratios_to_saved",
    "size_series",
    "speedups",
    "unavailable_contenders",
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


def _s(seconds) -> str:
    """Seconds, short: ``7.9``, ``0.12``, ``0.003``."""
    return "-" if seconds is None else f"{seconds:.2g}" if seconds < 10 else f"{seconds:.0f}"


def _reduced(r: Result) -> bool:
    """Whether the result was measured on a smaller version of its case."""
    return r.note.startswith("reduced to")


def contender_label(r: Result) -> str:
    """The contender's name, with its float32 precision class where it is not ``"highest"``."""
    return r.contender if r.precision == "highest" else f"{r.contender} ({r.precision})"


def _unavailable_reason(r: Result) -> str | None:
    """Why ``r``'s contender cannot take part here at all (not this case: this machine), or None."""
    if r.status != "skipped":
        return None
    if r.kind == "backend" and r.reason.startswith("unavailable: "):
        return r.reason[len("unavailable: ") :]
    if r.kind == "anchor" and ("not installed" in r.reason or "sees no CUDA device" in r.reason):
        return r.reason
    return None


def unavailable_contenders(results: list[Result]) -> dict[str, str]:
    """Each contender that could run no case on this machine (not available, not installed), and why.

    Listed once, under the tables, instead of a skipped row in every case.
    """
    reasons: dict[str, list[str | None]] = {}
    for r in results:
        reasons.setdefault(r.contender, []).append(_unavailable_reason(r))
    return {name: found[0] for name, found in reasons.items() if all(found) and found[0] is not None}


def _notes(r: Result) -> list[str]:
    """What a reader must know about one row: skipped or reduced, drift, a capped warm-up, copies to a GPU."""
    if r.status == "skipped":
        return [f"skipped: {r.reason}"]
    notes = []
    if _reduced(r):
        # Its times are for less work than the other rows: shown here, per unit of work in the table.
        notes.append(f"{r.note}: {_ms(r.end_to_end_s)} ms for {r.flops:.3g} FLOP; compare by GFLOP/s and speedup")
    elif r.note:
        notes.append(r.note)
    if r.drift:
        notes.append(r.drift)
    if r.warmup_stable is False:
        notes.append(
            f"time per call still unsteady when the warm-up stopped at its cap ({r.warmup_calls} calls, "
            f"{_s(r.warmup_s)} s)"
        )
    if r.h2d_s is not None:
        notes.append(f"copies: to GPU {_ms(r.h2d_s)} ms, back {_ms(r.d2h_s)} ms")
    if r.status == "wrong":
        notes.append(r.reason)
    return notes


def _cells(r: Result, ratio: dict) -> dict[str, str]:
    """One result's table cells, by column key."""
    if r.status == "skipped":
        return {"contender": contender_label(r)}
    speed = ratio.get((r.case, r.contender))
    return {
        "contender": contender_label(r),
        "ms": "-" if _reduced(r) else _ms(r.end_to_end_s),
        "kernel": "-" if _reduced(r) else _ms(r.kernel_s),
        "speedup": "-" if speed is None else f"{speed:.2f}x",
        "gflops": f"{r.gflops:.3g}",
        "roof": "-" if r.frac_roof is None else f"{100 * r.frac_roof:.1f}%",
        "error": "-" if r.max_rel_error is None else f"{r.max_rel_error:.1e}" + ("" if r.error_ok else " WRONG"),
        "first": _s(r.first_call_s),
        "warmup": _s(r.warmup_s),
        "warm": _s(None if r.first_call_s is None else r.first_call_s + (r.warmup_s or 0.0)),
    }


#: Console layouts, widest first: (column key, header). The first whose tables fit the terminal is used;
#: every column keeps its cells whole (no header or number split over two lines).
LAYOUTS = {
    "wide": [
        ("contender", "contender"),
        ("ms", "ms"),
        ("kernel", "kernel ms"),
        ("speedup", "speedup"),
        ("gflops", "GFLOP/s"),
        ("roof", "% roof"),
        ("error", "rel. error"),
        ("first", "1st call s"),
        ("warmup", "warm-up s"),
        ("note", "note"),
    ],
    "compact": [
        ("contender", "contender"),
        ("ms", "ms"),
        ("speedup", "speedup"),
        ("gflops", "GFLOP/s"),
        ("error", "error"),
        ("warm", "warm s"),
        ("note", "note"),
    ],
}
#: What the compact layout leaves out (the files have every column).
_COMPACT_OMITS = "kernel ms, % of roof and the first call apart from the warm-up are in report.md"


def _console(width: int | None = None):
    """A rich console that does not fold logs and pipes to 80 columns."""
    from rich.console import Console

    if width is not None:
        return Console(width=width)
    console = Console()
    return console if console.is_terminal else Console(width=160)


def _case_table(rows: list[Result], layout: str, ratio: dict, case: str):
    """One case's table in ``layout``, and its numbered notes."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(case), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    for key, header in LAYOUTS[layout]:
        numeric = key not in ("contender", "note")
        table.add_column(header, justify="right" if numeric else "left", no_wrap=True)
    notes: list[str] = []
    for r in rows:
        cells = _cells(r, ratio)
        marks = []
        for note in _notes(r):
            notes.append(f"{contender_label(r)}: {note}")
            marks.append(str(len(notes)))
        cells["note"] = ",".join(marks)
        table.add_row(*(escape(cells.get(key, "-")) for key, _ in LAYOUTS[layout]))
    return table, notes


def _natural_width(table) -> int:
    """The width ``table`` takes with every cell on one line (drawn on a console as wide as it needs)."""
    from rich.console import Console

    wide = Console(file=io.StringIO(), width=10_000, color_system=None)
    with wide.capture() as captured:
        wide.print(table)
    return max((len(line.rstrip()) for line in captured.get().splitlines()), default=0)


def _fits(tables: list, console) -> bool:
    """Whether every table fits the console's width with every cell whole."""
    return all(_natural_width(t) <= console.width for t in tables)


def print_table(results: list[Result], baseline: str, title: str, meta: dict | None = None, console=None) -> None:
    """The comparison in the terminal: a table per case, its notes under it, unavailable contenders once.

    The widest layout whose tables fit the terminal is used (:data:`LAYOUTS`);
    no header or number is split over two lines. Contenders that could run
    nowhere here (not installed, no GPU) are listed once at the end, not in
    every table.
    """
    from rich.padding import Padding
    from rich.text import Text

    console = console or _console()
    meta = meta or {}
    unavailable = meta.get("unavailable") or unavailable_contenders(results)
    ratio = speedups(results, baseline)
    shown = [
        r for r in results if r.contender not in unavailable and not (r.status == "skipped" and r.kind == "anchor")
    ]
    cases = list(dict.fromkeys(r.case for r in shown))
    chosen = None
    for layout in LAYOUTS:
        built = [_case_table([r for r in shown if r.case == c], layout, ratio, c) for c in cases]
        chosen = layout, built
        if _fits([t for t, _ in built], console):
            break
    layout, built = chosen
    console.print(Text(title, style="bold"))
    console.print(
        Text(
            f"ms: median time per call, end to end; speedup: throughput over {baseline}'s; warm s: first call and "
            "warm-up before the timed calls (not in ms)"
            if layout == "compact"
            else f"ms: median time per call, end to end; speedup: throughput over {baseline}'s; 1st call s and "
            "warm-up s: the calls before the timed ones (not in ms)"
        )
    )
    for table, notes in built:
        console.print(table)
        for i, note in enumerate(notes, 1):
            console.print(Padding(Text(f"{i}. {note}", style="dim"), (0, 0, 0, 2), expand=False))
    if layout == "compact":
        console.print(Text(f"({_COMPACT_OMITS})", style="dim"))
    if unavailable:
        console.print(Text("not available here (left out of every case):"))
        for name, reason in unavailable.items():
            console.print(Padding(Text(f"{name}: {reason}"), (0, 0, 0, 2), expand=False))
    if meta.get("isolation"):
        console.print(Text(f"isolation: {meta['isolation']}", style="dim"))


def print_ratios(compare_to: dict, console=None) -> None:
    """Print this run against a saved one: one row per case and contender found in both."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    title = f"against {compare_to['path']} ({compare_to.get('date')}, {compare_to.get('machine')}): > 1 is faster now"
    table = Table(title=escape(title), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
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
    (console or _console()).print(table)


#: report.md's table: (column key, header).
MARKDOWN_COLUMNS = [
    ("case", "case"),
    ("contender", "contender"),
    ("ms", "ms (end to end)"),
    ("kernel", "ms (kernel)"),
    ("speedup", "speedup"),
    ("gflops", "GFLOP/s"),
    ("roof", "% of roof"),
    ("error", "max rel. error"),
    ("first", "first call s"),
    ("warmup", "warm-up s"),
    ("note", "note"),
]


def _markdown(results: list[Result], meta: dict, baseline: str, plots: list[str]) -> str:
    ceilings = meta.get("ceilings") or {}
    unavailable = meta.get("unavailable") or unavailable_contenders(results)
    ratio = speedups(results, baseline)
    method = meta.get("method") or f"each time is the median of {meta['repeat']} runs after a warm-up"
    lines = [
        f"# convsuite compare: {meta['workload']} ({meta['dtype']})",
        "",
        f"{meta['date']} on {meta['machine']['cpu']}; GPU: {meta['machine']['gpu']}.",
        f"Ceilings measured in this run: copy {ceilings.get('copy_gbs', 0):.1f} GB/s, "
        f"GEMM {ceilings.get('gemm_gflops', 0):.1f} GFLOP/s ({ceilings.get('how', '')}).",
        f"Method: {method}. "
        f"Speedup is the throughput ratio over `{baseline}` on the same case; % of roof is GFLOP/s over "
        "min(GEMM rate, copy bandwidth x arithmetic intensity); the error is against the float64 reference; "
        "first call and warm-up are the calls before the timed ones, not part of ms. A contender's float32 "
        "precision class follows its name where it is not 'highest'.",
    ]
    if meta.get("isolation"):
        lines.append(f"Isolation: {meta['isolation']}.")
    lines += [
        "",
        "| " + " | ".join(h for _, h in MARKDOWN_COLUMNS) + " |",
        "|" + "---|" * len(MARKDOWN_COLUMNS),
    ]
    for r in results:
        if r.contender in unavailable:
            continue
        cells = {**_cells(r, ratio), "case": r.case, "note": "; ".join(_notes(r))}
        lines.append("| " + " | ".join(cells.get(k, "-").replace("|", "/") for k, _ in MARKDOWN_COLUMNS) + " |")
    if unavailable:
        lines += ["", "Not available here (left out of every case):", ""]
        lines += [f"- {name}: {reason}" for name, reason in unavailable.items()]
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
    plt = pyplot()
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
    images = {} if plt is None else compare_plots(results, meta, speedups(results, baseline), baseline, plt)
    for name, png in images.items():
        saved[name] = atomic_write_bytes(out / name, png, fallback=True)
    saved["markdown"] = atomic_write_text(
        out / REPORT_FILES["markdown"], _markdown(results, meta, baseline, list(images)), fallback=True
    )
    problems = [s.warning for s in saved.values() if s.warning]
    if problems:
        meta["not_saved"] = problems
    return {kind: s.path for kind, s in saved.items()}
