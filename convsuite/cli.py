"""The ``convsuite`` command: ``info``, ``compare``, ``sweep``, ``train`` and ``calibrate``.

The text ``convsuite --help`` shows is :data:`DESCRIPTION` and :data:`EXIT_STATUS`
(plain text, not this docstring), with every command the parser has listed.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sys

from convsuite.bench._arguments import names_among, positive
from convsuite.bench.machine import blas_description, cpu_description, cpu_flags, gpu_description, library_versions
from convsuite.bench.timing import passive_openmp

__all__ = ["build_parser", "cpu_description", "gpu_description", "main"]

#: The libraries ``convsuite info`` lists.
_PACKAGES = ("numpy", "scipy", "numba", "cupy-cuda13x", "torch", "joblib", "rich", "asv")

#: The first lines of ``convsuite --help`` (plain text: a terminal shows it as written).
DESCRIPTION = (
    "convsuite: one convolution API over a ladder of backends (python, numpy, cython, numba, joblib, cupy), "
    "and the tools to check and measure them on this machine."
)
#: The end of ``convsuite --help``.
EXIT_STATUS = (
    "exit status: 0 success; 1 a comparison found a WRONG result, or a sweep a FAILED configuration (and only "
    "that); 2 a usage error, reported in one line before anything is measured (every input file is read and "
    "every output file checked first), or a finished run's file that could not be written where asked (it is "
    "saved next to it or in the temporary folder instead, and one line says where); 130 interrupted with Ctrl-C."
)

#: Exit status of a usage error (argparse's) and of Ctrl-C (128 + SIGINT).
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def _print(*lines: str, err: bool = False) -> None:
    """Print through rich with markup escaped, so `[cuda]` stays `[cuda]`."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=err, highlight=False)
    # A terminal gets lines wrapped between words (its own wrap splits them anywhere); a pipe or a
    # file gets each line whole.
    console.soft_wrap = not console.is_terminal
    for line in lines:
        console.print(escape(line))


def _written(paths) -> str:
    """``written to DIR/: a, b, c``: each folder once, so that a line of many files still reads at 80 columns."""
    from pathlib import Path

    folders: dict[str, list[str]] = {}
    for path in map(Path, paths):
        folders.setdefault(str(path.parent), []).append(path.name)
    return "; ".join(f"written to {folder}/: {', '.join(names)}" for folder, names in folders.items())


def _numba_layer() -> str:
    """The numba threading layer, if the numba backend is available."""
    import convsuite

    info = {b.name: b for b in convsuite.list_backends()}.get("numba")
    if info is None or not info.available:
        return "numba unavailable"
    from convsuite.backends import _numba_kernels

    return f"threading layer {_numba_kernels.threading_layer()}"


def _table(title: str, columns: list[str], rows: list[list[str]], whole: tuple[str, ...] | None = None) -> None:
    """A rich table; with ``whole``, light rules (room at 80 columns) and its columns never split a cell."""
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    if whole is None:
        table = Table(title=escape(title))
    else:
        table = Table(title=escape(title), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    whole = whole or ()
    for column in columns:
        table.add_column(column, no_wrap=column in whole)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))  # reasons quote `pip install 'convsuite[cuda]'`
    Console().print(table)


def _kernel_blas() -> str:
    """Which sgemm/dgemm the compiled rungs' gemm calls (``_blas_routines``), or why none."""
    from convsuite.backends._blas_routines import gemm_routines

    try:
        routines = gemm_routines()
    except (ValueError, ImportError) as exc:
        return f"none ({exc})"
    return routines.source + (f" ({routines.why})" if routines.why else "")


def cmd_info(args: argparse.Namespace) -> int:
    """Print the machine, library versions and every backend's availability."""
    import convsuite

    versions = library_versions()
    blas = ", ".join(
        f"{pool.get('internal_api')} {pool.get('version') or ''} ({pool.get('user_api')}, "
        f"{pool.get('num_threads')} threads)"
        for pool in blas_description()
    )
    _print(
        f"convsuite {convsuite.__version__} on Python {platform.python_version()} ({sys.executable})",
        f"CPU: {cpu_description()}; vector extensions: {' '.join(cpu_flags()) or 'none reported'}",
        f"BLAS/OpenMP: {blas or 'unknown (threadpoolctl not installed)'}",
        f"BLAS of the cython/numba gemm: {_kernel_blas()}",
        f"GPU: {gpu_description()}",
        "versions: " + ", ".join(f"{p} {versions[p]}" for p in _PACKAGES),
        f"threads: numba backend uses {convsuite.get_num_threads()} (convsuite.set_num_threads), {_numba_layer()}",
    )
    backends = convsuite.list_backends()
    rows = [[b.name, b.device, "yes" if b.available else "no (below)", ", ".join(b.algorithms)] for b in backends]
    _table(
        "backends (auto tries them top to bottom)",
        ["backend", "device", "available", "algorithms"],
        rows,
        whole=("backend", "device", "available"),
    )
    # The long texts under the table, one paragraph each, so that no table cell holds a sentence.
    _print(*(f"{b.name}: {b.description}" for b in backends))
    _print(*(f"{b.name} is not available: {b.reason}" for b in backends if not b.available))
    return 0


def _user_cases(args: argparse.Namespace):
    """The cases the arguments describe (None: the workload preset); ValueError if invalid."""
    from convsuite.bench.user_cases import apply_sweep, custom_case, load_cases_file, parse_sweep
    from convsuite.bench.workloads import get_workload

    shape_given = args.x is not None or args.w is not None
    geometry = {k: getattr(args, k) for k in ("op", "stride", "padding", "dilation", "groups")}
    if args.cases and shape_given:
        raise ValueError("give either --x/--w or --cases, not both")
    if (args.cases or shape_given) and args.workload is not None:
        raise ValueError("give either --workload or your own cases (--x/--w, --cases), not both")
    if not shape_given and not args.cases:
        stray = [f"--{k}" for k, v in geometry.items() if v is not None]
        if stray:
            raise ValueError(f"{', '.join(stray)} describe your own case and need --x and --w")
    sweep = parse_sweep(args.sweep or [])
    directions = ["forward", "backward"] if args.direction == "both" else [args.direction]
    if shape_given:
        if args.x is None or args.w is None:
            raise ValueError("--x and --w go together: give both shapes")
        defaults = dict(stride=1, padding=0, dilation=1, groups=1)
        given = {k: (v if v is not None else defaults.get(k)) for k, v in geometry.items()}
        cases = [
            custom_case(args.x, args.w, bias=not args.no_bias, direction=d, dtype=args.dtype, **given)
            for d in directions
        ]
    elif args.cases:
        cases = load_cases_file(args.cases, args.dtype)
        if args.direction != "forward":
            from dataclasses import replace

            cases = [replace(c, direction=d) for c in cases for d in directions]
    elif sweep:
        cases = get_workload(args.workload or "default", args.device)
    else:
        return None
    return apply_sweep(cases, sweep, args.dtype)


def cmd_compare(args: argparse.Namespace) -> int:
    """Compare every backend (and installed anchor) on a workload or the user's cases; write reports."""
    from convsuite.bench.compare import check_request, run_comparison
    from convsuite.bench.report import print_ratios, print_table

    if args.scaling is not None:
        return cmd_scaling(args)
    if args.model is not None:
        return cmd_model(args)
    workload = args.workload or "default"
    # Every argument is checked here, before the first measurement.
    try:
        if args.quick:
            raise ValueError("--quick sizes the --scaling sections; give it with --scaling")
        cases = _user_cases(args)
        request = check_request(
            workload, args.backends, not args.no_anchors, args.baseline, args.out, args.device, cases, args.compare_to
        )
    except ValueError as exc:
        _print(f"convsuite compare: error: {exc}", err=True)
        return EXIT_USAGE
    from rich.progress import Progress

    with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("measuring", total=None)

        def progress(done: int, total: int, description: str) -> None:
            bar.update(task, completed=done, total=total, description=description)

        try:
            results, meta = run_comparison(
                workload=workload,
                dtype=args.dtype,
                repeat=args.repeat,
                device=args.device,
                progress=progress,
                cases=cases,
                request=request,
            )
        except OSError as exc:  # the folder was writable a moment ago; say what failed, in one line
            _print(f"convsuite compare: error: could not write the reports: {exc}", err=True)
            return EXIT_USAGE
    where = meta["machine"]["cpu"] if args.device == "cpu" else meta["machine"]["gpu"]
    ceilings = meta["ceilings"]
    print_table(
        results,
        request.baseline,
        f"{meta['workload']}, {args.dtype}, on {where} (copy {ceilings['copy_gbs']:.1f} GB/s, "
        f"GEMM {ceilings['gemm_gflops']:.0f} GFLOP/s)",
        meta,
    )
    if "compare_to" in meta:
        print_ratios(meta["compare_to"])
    for note in meta["notes"]:
        _print(f"note: {note}")
    if "files" in meta:
        _print(_written(meta["files"].values()))
    for line in meta.get("not_saved", []):
        _print(f"convsuite compare: warning: {line}", err=True)
    wrong = [r for r in results if r.status == "wrong"]
    for r in wrong:
        _print(f"WRONG: {r.contender} on {r.case}: {r.reason}", err=True)
    if wrong:
        return 1
    return EXIT_USAGE if meta.get("not_saved") else 0


#: compare's options that --model does not use, with their defaults.
_NOT_FOR_MODEL = dict(
    workload=None,
    op=None,
    w=None,
    stride=None,
    padding=None,
    dilation=None,
    groups=None,
    no_bias=False,
    direction="forward",
    cases=None,
    sweep=None,
    dtype="float32",
    baseline=None,
    no_anchors=False,
    compare_to=None,
    quick=False,
)


def _options_given(args: argparse.Namespace, defaults: dict) -> list[str]:
    """The options of ``defaults`` that ``args`` sets to something else, spelled as on the command line."""
    return [f"--{k.replace('_', '-')}" for k, default in defaults.items() if getattr(args, k) != default]


def _model_request(args: argparse.Namespace):
    """The input shape and output folder of a --model run; ValueError naming any option that does not apply."""
    from convsuite.bench._arguments import check_output_dir
    from convsuite.bench.model_compare import MODEL_INPUT
    from convsuite.bench.user_cases import parse_shape

    stray = _options_given(args, _NOT_FOR_MODEL)
    if stray:
        raise ValueError(
            f"--model times the model's forward pass in float32 against torch (--x sets its input shape, "
            f"--backends its convsuite backends); leave out {', '.join(stray)}"
        )
    shape = MODEL_INPUT if args.x is None else tuple(parse_shape(args.x, "--x"))
    return shape, None if args.out is None else check_output_dir(args.out)


def cmd_model(args: argparse.Namespace) -> int:
    """``compare --model NAME``: a torchvision model's forward pass, torch against convsuite; writes model.json."""
    from convsuite._files import atomic_write_json
    from convsuite.bench.model_compare import compare_model, load_model, speedup_over_torch

    try:
        shape, out = _model_request(args)
        if args.backends is not None:
            import convsuite

            rows = {b.name: b for b in convsuite.list_backends()}
            bad = [
                f"{n} ({'not a backend' if n not in rows else rows[n].reason})"
                for n in args.backends
                if n not in rows or not rows[n].available
            ]
            if bad:
                raise ValueError(f"--backends names an unknown or unavailable backend: {'; '.join(bad)}")
        model = load_model(args.model)
    except ValueError as exc:
        _print(f"convsuite compare: error: {exc}", err=True)
        return EXIT_USAGE
    try:
        results, meta = compare_model(model, shape, args.backends, repeat=args.repeat, device=args.device)
    except (TypeError, ValueError) as exc:  # a backend that cannot run on this device, say
        _print(f"convsuite compare: error: {exc}", err=True)
        return EXIT_USAGE
    speed = speedup_over_torch(results)
    rows = [
        [
            r.contender,
            f"{r.median_s * 1e3:.3g}",
            f"{speed[r.contender]:.2f}x",
            "-" if r.backend is None else f"{r.max_rel_diff:.1e}",
            f"{r.first_call_s + r.warmup_s:.2g}",
            "; ".join(filter(None, [r.drift, "" if r.warmup_stable else "warm-up reached its cap"])),
        ]
        for r in results
    ]
    _table(
        f"{args.model}, input {'x'.join(map(str, shape))}, float32, {args.device}: one forward pass "
        f"(median of {args.repeat}, interleaved, after warm-up)",
        ["contender", "ms", "vs torch", "logits rel. diff", "warm s", "note"],
        rows,
        whole=("contender", "ms", "vs torch", "logits rel. diff", "warm s"),
    )
    _print(f"isolation: {meta['isolation']}")
    if out is not None:
        document = dict(meta={**meta, "model_name": args.model}, results=[r.as_dict() for r in results])
        saved = atomic_write_json(out / "model.json", document, fallback=True)
        _print(f"written: {saved.path}")
        if saved.warning:
            _print(f"convsuite compare: warning: {saved.warning}", err=True)
            return EXIT_USAGE
    return 0


#: compare's options that describe what --scaling does not measure, with their defaults.
_NOT_FOR_SCALING = dict(
    workload=None,
    op=None,
    x=None,
    w=None,
    stride=None,
    padding=None,
    dilation=None,
    groups=None,
    no_bias=False,
    direction="forward",
    cases=None,
    sweep=None,
    backends=None,
    dtype="float32",
    device="cpu",
    baseline=None,
    no_anchors=False,
    compare_to=None,
)


def _check_scaling_request(args: argparse.Namespace):
    """The output folder of a --scaling run; ValueError naming any option that does not apply."""
    import importlib.util

    from convsuite.bench._arguments import check_output_dir

    stray = _options_given(args, _NOT_FOR_SCALING)
    stray += ["--model"] if args.model is not None else []
    if stray:
        raise ValueError(
            f"--scaling measures its own cases (float32, on the CPU cores, workers and GPUs it names); "
            f"leave out {', '.join(stray)}"
        )
    if "dask" in args.scaling and importlib.util.find_spec("distributed") is None:
        raise ValueError("--scaling dask needs Dask's distributed scheduler: pip install 'convsuite[dask]'")
    return None if args.out is None else check_output_dir(args.out)


def cmd_scaling(args: argparse.Namespace) -> int:
    """``compare --scaling``: the chosen scaling sections, workers on one axis; writes scaling.{json,csv,md}."""
    from convsuite.bench.scaling_view import COLUMNS, run_scaling, table_cells

    try:
        out = _check_scaling_request(args)
    except ValueError as exc:
        _print(f"convsuite compare: error: {exc}", err=True)
        return EXIT_USAGE
    try:
        points, meta = run_scaling(args.scaling, quick=args.quick, repeat=args.repeat, out=out)
    except OSError as exc:  # the folder was writable a moment ago; say what failed, in one line
        _print(f"convsuite compare: error: could not write the reports: {exc}", err=True)
        return EXIT_USAGE
    size = "quick sizes (a smoke run)" if args.quick else "full sizes"
    _table(
        f"scaling: {', '.join(args.scaling)}, {size}, on {meta['machine']['cpu']} "
        f"(load {meta['load_average_before']:.1f} before, {meta['load_average_after']:.1f} after)",
        list(COLUMNS),
        [table_cells(p) for p in points],
    )
    if not points:
        _print("note: no section produced a row (see the lines above for why)")
    if "files" in meta:
        _print(_written(meta["files"].values()))
    return 0


def _tunables_rows(backend) -> list[list[str]]:
    """One row per algorithm of ``backend``: its tunables, their values and defaults."""
    rows = []
    for name, record in (backend.algorithm_table() or {}).items():
        if not record.tunables:
            rows.append([name, "(none)", "", "", record.summary])
        for t in record.tunables:
            default = "per case (a rule)" if callable(t.default) else str(t.default)
            rows.append([name, t.name, ", ".join(map(str, t.values)), default, t.doc])
    return rows


def _tunable_algorithms(backend) -> list[str]:
    """The backend's algorithms that have tunable parameters."""
    return [name for name, record in (backend.algorithm_table() or {}).items() if record.tunables]


def _check_sweep_options(args: argparse.Namespace, backend) -> None:
    """Refuse options that listing the parameters would drop: say in one line how to sweep instead."""
    given = [f"--{name}" for name in ("workload", "param") if getattr(args, name)]
    if not given:
        return
    what = " and ".join(given)
    verb = "applies" if len(given) == 1 else "apply"
    if args.list:
        raise ValueError(f"--list only lists the parameters; leave out {what}, or drop --list to sweep")
    if args.algorithm is None:
        names = ", ".join(_tunable_algorithms(backend)) or "none"
        raise ValueError(
            f"{what} {verb} to one algorithm: add --algorithm NAME ({backend.name}'s algorithms with tunable "
            f"parameters: {names}; `convsuite sweep --backend {backend.name}` lists the parameters)"
        )


def _print_tunables(backend: str, rows: list[list[str]]) -> None:
    """The parameter list: a table of short cells, each parameter's description under it (fits 80 columns)."""
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(
        title=escape(f"{backend}: algorithms and their tunable parameters"),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for column in ("algorithm", "parameter", "values", "default"):
        table.add_column(column, overflow="fold")
    for algorithm, name, values, default, _ in rows:
        table.add_row(escape(algorithm), escape(name), escape(values), escape(default))
    console = Console()
    console.print(table)
    for algorithm, name, _, _, what in rows:
        if what:
            console.print(f"[bold]{escape(algorithm)}.{escape(name)}[/bold]: {escape(what)}", highlight=False)
    console.print(
        f"sweep one with: convsuite sweep --backend {escape(backend)} --algorithm NAME --workload W "
        "[--param NAME=V1,V2]",
        highlight=False,
    )


def cmd_sweep(args: argparse.Namespace) -> int:
    """Sweep one algorithm's tunable parameters over a workload: table, best vs default, files."""
    import convsuite
    from convsuite.bench.sweep import algorithm_record, parse_grid, run_sweep
    from convsuite.bench.sweep_output import check_sweep_files, format_table, summary_lines, write_sweep

    names = [b.name for b in convsuite.list_backends()]
    try:
        if args.backend not in names:
            raise ValueError(f"--backend must be one of {', '.join(names)}; got {args.backend!r}")
        backend = convsuite.get_backend(args.backend)
        _check_sweep_options(args, backend)
        if args.list or args.algorithm is None:
            rows = _tunables_rows(backend)
            if not rows:
                raise ValueError(f"backend {backend.name!r} has no algorithm records, so nothing to sweep")
            _print_tunables(backend.name, rows)
            return 0
        record = algorithm_record(backend, args.algorithm)
        grid = parse_grid(args.param or [], record)
        if args.workload is None:
            raise ValueError("--workload is required to sweep (or give --list to see the parameters)")
        out = None if args.out is None else check_sweep_files(args.out, [t.name for t in record.tunables])
    except ValueError as exc:
        _print(f"convsuite sweep: error: {exc}", err=True)
        return EXIT_USAGE
    from rich.progress import Progress

    with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("sweeping", total=None)

        def progress(done: int, total: int, description: str) -> None:
            bar.update(task, completed=done, total=total, description=description)

        try:
            result = run_sweep(
                backend,
                args.algorithm,
                args.workload,
                grid=grid,
                direction=args.direction,
                dtype=args.dtype,
                repeat=args.repeat,
                rounds=min(3, args.repeat),
                progress=progress,
            )
        except ValueError as exc:
            _print(f"convsuite sweep: error: {exc}", err=True)
            return EXIT_USAGE
    if not any(c.status == "ok" for r in result.rows for c in r.cells.values()):
        # Nothing could be timed (e.g. a 1-D algorithm on a 2-D workload): no table or files of nothing.
        reasons = sorted({c.reason or c.status for r in result.rows for c in r.cells.values()})
        _print(
            f"convsuite sweep: error: {result.backend}/{result.algorithm} ran on none of {result.workload}'s "
            f"layers ({'; '.join(reasons)[:300] or 'no layer'})",
            err=True,
        )
        return EXIT_USAGE
    _print(
        f"{result.backend}/{result.algorithm} on {result.workload} ({result.direction}, {result.dtype}), "
        f"{result.meta['device_description']}, {result.meta['date']}",
        format_table(result, shutil.get_terminal_size().columns),
    )
    failures = [line for line in summary_lines(result) if line.startswith("FAILED")]
    _print(*(line for line in summary_lines(result) if not line.startswith("FAILED")))
    not_saved = []
    if out is not None:
        files = write_sweep(result, out)
        _print(_written(files.values()))
        not_saved = result.meta.get("not_saved", [])
        for line in not_saved:
            _print(f"convsuite sweep: warning: {line}", err=True)
    if failures:
        _print(*failures, err=True)
        return 1
    return EXIT_USAGE if not_saved else 0


def _add_sweep(sub) -> None:
    """The ``sweep`` subcommand and its options."""
    from convsuite.bench.workloads import workload_names

    sweep = sub.add_parser(
        "sweep",
        help="one algorithm's tunable parameters on every layer of a workload: table, best vs default, files",
        description="Measure every configuration of an algorithm's tunable parameters (or the grid given with "
        "--param) on every layer of a workload, side by side; every result is checked against a float64 "
        "reference, and each layer's hand-chosen default is measured too.",
    )
    sweep.add_argument("--backend", required=True, help="a registered backend, e.g. numba or cupy")
    sweep.add_argument("--algorithm", default=None, help="one of the backend's algorithms (omit to list them)")
    sweep.add_argument("--list", action="store_true", help="list the backend's algorithms and their parameters")
    sweep.add_argument("--workload", choices=workload_names(), default=None, help="the layers to sweep")
    sweep.add_argument(
        "--param",
        metavar="NAME=V1,V2",
        action="append",
        help="values to try for one parameter (repeatable); the parameters not named stay at each layer's "
        "default (without --param: every combination of every parameter's values)",
    )
    sweep.add_argument("--direction", choices=["forward", "backward"], default="forward")
    sweep.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    sweep.add_argument("--repeat", type=_repeat, default=5, help="timed runs per configuration (default 5)")
    sweep.add_argument("--out", default="sweep-out", help="folder for sweep.json, sweep.csv and plots")
    sweep.set_defaults(func=cmd_sweep)


def _backend_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"must be a comma-separated list of backend names; got {text!r}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # measured twice, listed twice: a table that compares a backend with itself
        raise argparse.ArgumentTypeError(f"must name each backend once; got {', '.join(map(repr, twice))} twice")
    return names


def _scaling_sections() -> tuple[str, ...]:
    from convsuite.bench.scaling import SECTIONS  # imported when --scaling is parsed, not at start-up

    return SECTIONS


#: ``--scaling``'s comma-separated sections, each one of joblib, dask, gpus.
_section_list = names_among(_scaling_sections, "sections")


#: Most timed runs a command takes: past it a run of microsecond calls would outlast any session.
MAX_REPEAT = 100_000


def _repeat(text: str) -> int:
    """``--repeat``: a positive integer up to :data:`MAX_REPEAT`."""
    value = positive(text)
    if value > MAX_REPEAT:
        raise argparse.ArgumentTypeError(f"must be a positive integer up to {MAX_REPEAT}; got {text!r}")
    return value


def _add_compare(sub) -> None:
    """The ``compare`` subcommand and its options."""
    from convsuite.bench.user_cases import SWEEP_VARIABLES
    from convsuite.bench.workloads import workload_names

    compare = sub.add_parser(
        "compare",
        help="every available backend and installed anchor on a workload or your own shapes: table, JSON, CSV, plots",
        description="Measure every available backend (and torch / NumPy / SciPy where installed) side by side, "
        "on a preset workload or on your own shapes; every result is checked against a float64 reference.",
    )
    what = compare.add_argument_group("what to measure (a preset, or your own cases)")
    what.add_argument("--workload", choices=workload_names(), default=None, help="a preset (default: default)")
    what.add_argument(
        "--op",
        choices=["conv1d", "conv2d"],
        default=None,
        help="your case's operation (default: from the weight's rank)",
    )
    what.add_argument("--x", metavar="SHAPE", help="your input shape, e.g. 8,64,56,56 (or N for a plain signal)")
    what.add_argument("--w", metavar="SHAPE", help="your weight shape, e.g. 64,64,3,3 (or K for a plain signal)")
    what.add_argument("--stride", default=None, help="e.g. 1, or 2,1 (default 1)")
    what.add_argument("--padding", default=None, help="e.g. 1, same, valid, full, 1,2 or per side 0:1,1:0 (default 0)")
    what.add_argument("--dilation", default=None, help="e.g. 1, or 2,2 (default 1)")
    what.add_argument("--groups", default=None, help="(default 1)")
    what.add_argument("--no-bias", action="store_true", help="your case without a bias")
    what.add_argument(
        "--direction",
        choices=["forward", "backward", "both"],
        default="forward",
        help="for your cases (default forward)",
    )
    what.add_argument("--cases", metavar="FILE", help="a JSON (or YAML) list of cases: {x, w, stride, padding, ...}")
    what.add_argument(
        "--sweep",
        metavar="VAR=V1,V2",
        action="append",
        help=f"measure each case at several sizes; VAR is one of {', '.join(SWEEP_VARIABLES)} "
        "(repeatable: every combination)",
    )
    how = compare.add_argument_group("how")
    how.add_argument("--backends", type=_backend_list, default=None, help="comma-separated (default: all)")
    how.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    how.add_argument("--repeat", type=_repeat, default=5, help="timed runs after warm-up (default 5)")
    how.add_argument(
        "--device",
        choices=["cpu", "gpu"],
        default="cpu",
        help="size the workload for, and compare on, this device (default cpu)",
    )
    how.add_argument(
        "--baseline", default=None, help="contender the speedups are relative to (default: numpy on cpu, cuDNN on gpu)"
    )
    how.add_argument("--no-anchors", action="store_true", help="leave out torch / numpy / scipy rows")
    model = compare.add_argument_group("a whole model (instead of the above)")
    model.add_argument(
        "--model",
        metavar="NAME",
        default=None,
        help="a torchvision classification model, e.g. resnet18, built without weights: one forward pass in torch "
        "against the same model with its convolutions on convsuite (--backends, default convsuite's choice), "
        "interleaved, and the logits' agreement; --x sets the input (default 1,3,224,224); needs torchvision",
    )
    scaling = compare.add_argument_group("scaling (workers, threads or GPUs on one axis; instead of the above)")
    scaling.add_argument(
        "--scaling",
        metavar="SECTIONS",
        type=_section_list,
        nargs="?",
        const="joblib,dask,gpus",
        default=None,
        help="measure how these scale: joblib (threads over the Cython kernels, ECE408 layers), dask "
        "(1 and 2 worker processes, a 1-D signal of 1e8), gpus (1 and 2 GPUs, ECE408 batch); "
        "comma-separated, default all; --repeat and --out apply",
    )
    scaling.add_argument(
        "--quick", action="store_true", help="with --scaling: small problems (a smoke run, not figures to report)"
    )
    out = compare.add_argument_group("output")
    out.add_argument("--out", default="compare-out", help="folder for the reports (default compare-out)")
    out.add_argument(
        "--compare-to",
        metavar="RESULTS",
        default=None,
        help="a results.json (or its folder) of an earlier run: speed ratios against it",
    )
    compare.set_defaults(func=cmd_compare)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``convsuite`` command."""
    import convsuite

    parser = argparse.ArgumentParser(prog="convsuite", epilog=EXIT_STATUS)
    parser.add_argument("--version", action="version", version=f"convsuite {convsuite.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("info", help="machine, versions, backends and why any is unavailable").set_defaults(func=cmd_info)
    _add_compare(sub)
    _add_sweep(sub)
    from convsuite.cli_train import add_train_parser  # the `train` command

    add_train_parser(sub)
    from convsuite.cli_calibrate import add_calibrate_parser  # the `calibrate` command, in its own module

    add_calibrate_parser(sub)
    # Read from the parser, so a command added later is listed without editing this line.
    parser.description = f"{DESCRIPTION} Commands: {', '.join(sub.choices)}; `convsuite COMMAND --help` describes each."
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``convsuite`` console script and ``python -m convsuite``."""
    # Before anything loads numba's or torch's OpenMP runtime: each reads the policy once, at load.
    passive_openmp()
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except KeyboardInterrupt:
        print("convsuite: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
