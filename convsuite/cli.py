"""The ``convsuite`` command: ``info`` (machine and backends) and ``compare``."""

from __future__ import annotations

import argparse
import os
import platform
import sys
from importlib import metadata

__all__ = ["main"]

_PACKAGES = ("numpy", "scipy", "numba", "cupy-cuda13x", "torch", "joblib", "rich", "asv")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_description() -> str:
    """CPU model name and logical core count, as far as the OS tells."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} logical cores"


def gpu_description() -> str:
    """The first CUDA device through CuPy, or why none was found."""
    try:
        import cupy
    except Exception as exc:  # not installed, or a broken CUDA install
        return f"none found (cupy not importable: {type(exc).__name__})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
        if count == 0:
            return "none found (no CUDA device)"
        props = cupy.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        return f"{name} ({count} device{'s' if count > 1 else ''}), {props['totalGlobalMem'] / 2**30:.0f} GiB"
    except Exception as exc:
        return f"none found ({type(exc).__name__}: {exc})"


def _numba_layer() -> str:
    """The numba threading layer, if the numba backend is available."""
    import convsuite

    info = {b.name: b for b in convsuite.list_backends()}.get("numba")
    if info is None or not info.available:
        return "numba unavailable"
    from convsuite.backends import _numba_kernels

    return f"threading layer {_numba_kernels.threading_layer()}"


def _table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def cmd_info(args: argparse.Namespace) -> int:
    """Print the machine, library versions and every backend's availability."""
    import convsuite

    print(f"convsuite {convsuite.__version__} on Python {platform.python_version()} ({sys.executable})")
    print(f"CPU: {cpu_description()}")
    print(f"GPU: {gpu_description()}")
    print("versions: " + ", ".join(f"{p} {_version(p)}" for p in _PACKAGES))
    print(f"threads: numba backend uses {convsuite.get_num_threads()} (convsuite.set_num_threads), {_numba_layer()}")
    rows = [
        [b.name, b.device, "yes" if b.available else f"no: {b.reason}", ", ".join(b.algorithms), b.description]
        for b in convsuite.list_backends()
    ]
    _table("backends (auto tries them top to bottom)", ["backend", "device", "available", "algorithms", "what"], rows)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Compare every backend (and installed anchor) on a workload; write reports."""
    from convsuite.bench.compare import run_comparison

    try:
        results, _ = run_comparison(
            workload=args.workload,
            backends=args.backends,
            anchors=not args.no_anchors,
            dtype=args.dtype,
            repeat=args.repeat,
            baseline=args.baseline,
            out=args.out,
            device=args.device,
        )
    except ValueError as exc:
        print(f"convsuite compare: error: {exc}", file=sys.stderr)
        return 2
    if args.device == "gpu":  # issue 17: the backward ladder's ablation of its workloads
        from convsuite.bench.backward_ladder import print_ablation

        print_ablation(args.workload, args.repeat, args.out)
    wrong = [r for r in results if r.status == "wrong"]
    for r in wrong:
        print(f"WRONG: {r.contender} on {r.case}: {r.reason}", file=sys.stderr)
    return 1 if wrong else 0


def _backend_list(text: str) -> list[str]:
    import convsuite

    names = [n.strip() for n in text.split(",") if n.strip()]
    valid = [b.name for b in convsuite.list_backends()]
    unknown = [n for n in names if n not in valid]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"must be a comma-separated list of {', '.join(valid)}; got {text!r}"
        )
    return names


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``convsuite`` command."""
    parser = argparse.ArgumentParser(prog="convsuite", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="machine, versions, backends and why any is unavailable").set_defaults(
        func=cmd_info
    )
    from convsuite.bench.workloads import workload_names

    compare = sub.add_parser(
        "compare",
        help="every available backend and installed anchor on a workload: table, JSON, CSV, report, plots",
    )
    compare.add_argument("--workload", choices=workload_names(), default="default", help="(default: default)")
    compare.add_argument("--backends", type=_backend_list, default=None, help="comma-separated (default: all)")
    compare.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    compare.add_argument("--repeat", type=_positive, default=5, help="timed runs after warm-up (default 5)")
    compare.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                         help="size the workload for, and compare on, this device (default cpu)")
    compare.add_argument("--baseline", default=None,
                         help="contender the speedups are relative to (default: numpy on cpu, cuDNN on gpu)")
    compare.add_argument("--out", default="compare-out", help="folder for the reports (default compare-out)")
    compare.add_argument("--no-anchors", action="store_true", help="leave out torch / numpy / scipy rows")
    compare.set_defaults(func=cmd_compare)
    from convsuite.cli_train import add_train_parser  # the `train` command (issue 13)

    add_train_parser(sub)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``convsuite`` console script."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
