"""The ``convsuite`` command: ``info`` (machine and backends) and ``demo``."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from importlib import metadata

import numpy as np

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


def _median_seconds(fn, repeat: int) -> float:
    fn()  # warm-up: JIT compilation, caches, allocator
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def cmd_demo(args: argparse.Namespace) -> int:
    """Run one small conv2d on every available backend and check it."""
    import convsuite
    from convsuite._validation import prepare_forward
    from convsuite.testing import forward_tolerance, reference_forward

    rng = np.random.default_rng(0)
    full = dict(B=4, C=16, M=32, H=32, W=32, K=3)
    small = dict(B=1, C=4, M=8, H=16, W=16, K=3)  # for the pure-Python backend
    rows = []
    baseline = None
    for info in convsuite.list_backends():
        if not info.available:
            rows.append([info.name, "-", "-", "-", f"unavailable: {info.reason}"])
            continue
        size = small if info.name == "python" else full
        x = rng.standard_normal((size["B"], size["C"], size["H"], size["W"]), dtype=np.float32)
        w = rng.standard_normal((size["M"], size["C"], size["K"], size["K"]), dtype=np.float32)
        bias = rng.standard_normal(size["M"], dtype=np.float32)
        spec = prepare_forward("conv2d", 2, x, w, bias, 1, "same", 1, 1).spec

        def run(x=x, w=w, bias=bias, name=info.name):
            return convsuite.conv2d(x, w, bias, padding="same", backend=name)

        seconds = _median_seconds(run, args.repeat)
        y = run()
        ref = reference_forward(spec, x, w, bias)
        ok = bool(np.all(np.abs(y - ref) <= forward_tolerance(spec, x, w, bias)))
        gflops = spec.flops / seconds / 1e9
        if info.name == "numpy":
            baseline = (gflops, spec)
        note = "reduced size" if size is small else ""
        rows.append(
            [
                info.name,
                f"{seconds * 1e3:.3f}",
                f"{gflops:.2f}",
                f"{float(np.max(np.abs(y - ref))):.2e} ({'ok' if ok else 'FAIL'})",
                f"B={size['B']} C={size['C']} M={size['M']} {size['H']}x{size['W']} K={size['K']} {note}",
            ]
        )
        if not ok:
            print(f"backend {info.name} disagrees with the float64 reference", file=sys.stderr)
    _table(
        "conv2d float32, padding 'same', median of warm runs (GFLOP/s compares across sizes)",
        ["backend", "ms", "GFLOP/s", "max |err| vs float64", "case"],
        rows,
    )
    failed = any("FAIL" in r[3] for r in rows)
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``convsuite`` command."""
    parser = argparse.ArgumentParser(prog="convsuite", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="machine, versions, backends and why any is unavailable").set_defaults(
        func=cmd_info
    )
    demo = sub.add_parser("demo", help="run a small conv2d on every available backend")
    demo.add_argument("--repeat", type=_positive, default=5, help="timed repeats after one warm-up (default 5)")
    demo.set_defaults(func=cmd_demo)
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
