"""Probe (device tool): can convsuite's CuPy build Hopper ``wgmma`` kernels, and which shared-memory
layout does a TF32 ``wgmma`` read its B operand from?

Groundwork for a ``wgmma`` main loop in tf32x3 (issue 11). Two questions, answered on an sm_90 GPU:

1. Compilation: ``wgmma`` needs the arch-specific target ``sm_90a``; ``cupy.RawModule`` appends its
   own ``-arch=sm_90``. Tried: RawModule with ``-arch=sm_90a`` in the options, then NVRTC directly
   (CuPy's binding) with only ``-arch=sm_90a``, the cubin loaded as a CuPy module.
2. Layout: one ``wgmma.m64n64k8.f32.tf32.tf32`` (A from registers in mma.sync's m16n8k8 fragment
   layout per warp, B from a no-swizzle K-major shared-memory descriptor), issued twice, against
   ``2 A B^T`` in NumPy, for two orders of the 8x16-byte core matrices and both readings of the
   descriptor's two byte offsets (LBO, SBO).

Run: ``python3 tools/wgmma_probe.py`` (prints one line per attempt and a verdict).
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

SOURCE = pathlib.Path(__file__).with_name("wgmma_probe.cu")


def build_rawmodule(source: str):
    import cupy as cp

    module = cp.RawModule(code=source, options=("-std=c++17", "-arch=sm_90a"))
    return module.get_function("probe")


def build_nvrtc(source: str):
    import cupy as cp
    from cupy_backends.cuda.libs import nvrtc

    program = nvrtc.createProgram(source, "wgmma_probe.cu", (), ())
    try:
        try:
            nvrtc.compileProgram(program, ["-std=c++17", "-arch=sm_90a"])
        except nvrtc.NVRTCError:
            print(nvrtc.getProgramLog(program))
            raise
        cubin = nvrtc.getCUBIN(program)
    finally:
        nvrtc.destroyProgram(program)
    module = cp.cuda.function.Module()
    module.load(cubin)
    return module, module.get_function("probe")


def build(source: str):
    """The probe kernel, through RawModule if it can, else NVRTC directly (and which way, as text)."""
    try:
        return build_rawmodule(source), "RawModule with -arch=sm_90a"
    except Exception as error:  # noqa: BLE001 - a probe reports whatever happens
        print(f"RawModule with -arch=sm_90a: {type(error).__name__}: {str(error)[:300]}")
    module, kernel = build_nvrtc(source)
    build.keep = module  # the module must outlive its function
    return kernel, "NVRTC directly, -arch=sm_90a"


CASES = []
for _layout, (_k, _n) in ((0, (128, 256)), (1, (1024, 128))):
    CASES += [(_layout, _k, _n), (_layout, _n, _k)]
NAMES = {0: "[n/8][k/4] core matrices", 1: "[k/4][n/8] core matrices"}


def one(layout: int, lbo: int, sbo: int) -> int:
    """One hypothesis in this process (a wrong descriptor may fault and poison the context)."""
    import cupy as cp

    kernel, how = build(SOURCE.read_text())
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, size=(64, 8)).astype(np.float32)
    b = rng.integers(-4, 5, size=(64, 8)).astype(np.float32)  # B[n][k]
    want = 2 * a @ b.T
    d = cp.full((64, 64), cp.nan, dtype=cp.float32)
    kernel((1,), (128,), (cp.asarray(a), cp.asarray(b), d, np.int32(layout), np.int32(lbo), np.int32(sbo)))
    cp.cuda.runtime.deviceSynchronize()
    got = cp.asnumpy(d)
    wrong = int((got != want).sum())
    verdict = "MATCH" if wrong == 0 else f"{wrong} of 4096 differ"
    print(f"[{how}] layout {NAMES[layout]}, LBO={lbo} SBO={sbo}: {verdict}")
    return 0 if wrong == 0 else 3


def main() -> int:
    import subprocess

    if sys.argv[1:2] == ["--one"]:
        return one(*map(int, sys.argv[2:5]))
    found = []
    for case in CASES:
        done = subprocess.run(
            [sys.executable, __file__, "--one", *map(str, case)], capture_output=True, text=True, timeout=120
        )
        lines = (done.stdout + done.stderr).strip().splitlines()
        print(f"case {case}: rc={done.returncode}: " + (" / ".join(lines[:2] + lines[-1:]) if lines else ""))
        if done.returncode == 0:
            found.append(case)
    print("verdict (layout, LBO, SBO):", found if found else "no hypothesis matched")
    return 0


if __name__ == "__main__":
    sys.exit(main())
