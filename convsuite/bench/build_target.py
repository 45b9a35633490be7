"""What the Cython extension's CPU target costs: portable build vs ``-march=native``.

Run from a source checkout: ``python -m convsuite.bench.build_target [--out DIR] [--rounds N]``.

It compiles the extension twice, into temporary folders, once portable (the
default: the architecture's baseline instruction set, safe on every x86-64)
and once with ``CONVSUITE_NATIVE_BUILD=1`` (``-march=native``), then times the
``cython`` backend with each build on the default workload of ``convsuite
compare``. Each build runs in its own process (an extension cannot be loaded
twice under one name, and kernels may be cached by plans); the processes
alternate, portable, native, portable, native..., so a slow moment of a
shared machine hits both alike; every process checks its results against the
float64 reference before timing. The figure per case is the median of all
rounds' medians, and the ratio native/portable is formed within this run.
Prints the table and writes ``build-target-<date>.md`` and ``.json`` to DIR.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["build", "main", "time_build"]

#: Timed in each process: every case of the default workload, on the cython backend.
_CHILD = r"""
import json, sys
import convsuite._cython as pkg
pkg.__path__[:0] = [sys.argv[1]]  # this build's extension modules shadow the installed ones
import convsuite as cs
from convsuite.bench.timing import time_side_by_side
from convsuite.bench.workloads import get_workload
from convsuite.testing import forward_tolerance, reference_forward
import numpy as np

calls = {}
for case in get_workload("default"):
    x, w, bias, rng = case.arrays("float32")
    spec = case.spec("float32")
    if case.direction == "forward":
        fn = cs.conv1d if case.op == "conv1d" else cs.conv2d
        y = fn(x, w, bias, backend="cython", **case.keywords)
        ref = np.asarray(reference_forward(spec, x, w, bias)).reshape(-1)
        tol = np.asarray(forward_tolerance(spec, x, w, bias)).reshape(-1)
        assert np.all(np.abs(y.reshape(-1) - ref) <= tol), case.label
        calls[case.label] = lambda fn=fn, x=x, w=w, b=bias, k=case.keywords: fn(
            x, w, b, backend="cython", **k)
    else:
        gy = rng.standard_normal(spec.y_shape).astype("float32")
        calls[case.label] = lambda x=x, w=w, gy=gy, k=case.keywords: cs.conv2d_backward(
            gy, x, w, backend="cython", **k)
loaded = sorted(
    m.__file__ for n, m in sys.modules.items() if n.startswith("convsuite._cython.") and getattr(m, "__file__", None)
)
assert loaded and all(f.startswith(sys.argv[1]) for f in loaded), loaded
timings = time_side_by_side(calls, repeat=int(sys.argv[2]), rounds=1)
print(json.dumps({name: t.median for name, t in timings.items()}))
"""


#: What setup.py's cpu_target_flags() adds to -O3 for each target.
_FLAGS = {"portable": "-O3", "native": "-O3 -march=native -mprefer-vector-width=256 (x86-64)"}


def build(native: bool, where: Path, source: Path) -> Path:
    """Compile the extension from ``source`` into ``where``; the folder holding its modules."""
    env = dict(os.environ, CONVSUITE_REQUIRE_EXTENSION="1")
    env.pop("CONVSUITE_NATIVE_BUILD", None)
    if native:
        env["CONVSUITE_NATIVE_BUILD"] = "1"
    subprocess.run(
        [
            sys.executable,
            "setup.py",
            "-q",
            "build_ext",
            "--force",
            "--build-lib",
            str(where / "lib"),
            "--build-temp",
            str(where / "tmp"),
        ],
        cwd=source,
        env=env,
        check=True,
        capture_output=True,
    )
    return where / "lib" / "convsuite" / "_cython"


def time_build(modules: Path, repeat: int) -> dict[str, float]:
    """Median seconds per case of the cython backend running the build in ``modules`` (one process)."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(modules), str(repeat)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _markdown(data: dict) -> str:
    lines = [
        f"# Cython build target: portable vs native ({data['date']})",
        "",
        f"Machine: {data['machine']['cpu']}; vector extensions {' '.join(data['machine']['cpu_flags'])}. "
        f"{data['rounds']} alternating rounds per build, {data['repeat']} timed calls per case and round; "
        "figures are medians of the round medians. The machine was shared with other work while this ran, "
        "so single figures are noisy; the ratio is formed within one run.",
        "",
        f"Flags: portable `{data['flags']['portable']}`, native `{data['flags']['native']}`.",
        "",
        "| case (cython backend, float32) | portable ms | native ms | native speedup "
        "| rounds' spread (portable / native) |",
        "|---|---|---|---|---|",
    ]
    for row in data["rows"]:
        lines.append(
            f"| {row['case']} | {row['portable_ms']:.3g} | {row['native_ms']:.3g} | {row['speedup']:.2f}x | "
            f"{row['portable_spread']:.0%} / {row['native_spread']:.0%} |"
        )
    lines += ["", "Re-run: `python -m convsuite.bench.build_target` from a source checkout.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Build both targets, time them alternately, print and write the table."""
    from ._arguments import folder, positive
    from .machine import machine_metadata

    parser = argparse.ArgumentParser(
        prog="python -m convsuite.bench.build_target", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--out",
        type=folder,
        default="docs/measurements",
        help="folder for the .md and .json (default docs/measurements)",
    )
    parser.add_argument("--rounds", type=positive, default=3, help="alternations of the two builds (default 3)")
    parser.add_argument("--repeat", type=positive, default=7, help="timed calls per case and round (default 7)")
    args = parser.parse_args(argv)
    source = Path(__file__).resolve().parents[2]
    if not (source / "setup.py").is_file():
        parser.error(f"needs a source checkout with setup.py; {source} has none")
    with tempfile.TemporaryDirectory(prefix="convsuite-build-target-") as tmp:
        builds = {name: build(name == "native", Path(tmp) / name, source) for name in ("portable", "native")}
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in builds}
        for _ in range(args.rounds):
            for name, modules in builds.items():
                for case, seconds in time_build(modules, args.repeat).items():
                    samples[name].setdefault(case, []).append(seconds)
    rows = []
    for case, portable in samples["portable"].items():
        native = samples["native"][case]
        p, n = statistics.median(portable), statistics.median(native)
        rows.append(
            dict(
                case=case,
                portable_ms=p * 1e3,
                native_ms=n * 1e3,
                speedup=p / n,
                portable_spread=(max(portable) - min(portable)) / p,
                native_spread=(max(native) - min(native)) / n,
            )
        )
    data = dict(
        date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        machine=machine_metadata(),
        rounds=args.rounds,
        repeat=args.repeat,
        flags=_FLAGS,
        rows=rows,
    )
    text = _markdown(data)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"build-target-{data['date'][:10]}"
    (out / f"{stem}.md").write_text(text)
    (out / f"{stem}.json").write_text(json.dumps(data, indent=2))
    print(f"written: {out / stem}.md, .json")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
