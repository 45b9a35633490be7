"""The backward ablation of the "Optimizing a CNN in CUDA" write-up.

    python -m convsuite.bench.backward_ladder --sass          # instruction mix; nvcc + cuobjdump, no GPU
    python -m convsuite.bench.backward_ladder --time          # on a GPU: the ablation tables
    python -m convsuite.bench.backward_ladder --time --workload cnn-train-3x3 --repeat 15

Three tables:

* **Instruction mix** (``--sass``, no GPU needed): every kernel a backward
  algorithm runs for the seed's layers (and the fused forward), compiled by
  ``nvcc -cubin -arch=sm_90`` with the backend's own ``-D`` options (the
  ``DEFINES`` table), disassembled by ``cuobjdump -sass``. The *main loop* is
  the loop (a backward branch and its target) holding the most FMA
  instructions (FFMA for float32); the table gives its instruction count, its
  FFMA count and their share, the share over the whole kernel, and the
  registers per thread. Static counts: each instruction of the loop body
  counted once, i.e. the executed mix when every predicated path runs.
* **Ablation** (``--time``): every backward algorithm that runs each layer of
  ``cnn-train-3x3`` and the ECE408 workloads (float32): the whole backward
  (dX + dW + db) and, for the ladder steps, the dW kernel alone (the padded
  step's pad copy included), with its speed-up over the step before it;
  GFLOP/s and the fraction of the measured cuBLAS SGEMM rate (``peak``).
* **Fused epilogue** (``--time``): forward with bias + ReLU in one kernel
  against the unfused pair (the same kernel, then an elementwise ReLU), on
  the ``cnn-train-3x3`` layers, for the implicit-GEMM algorithms.
* **Backward through the ReLU** (``--time``): ``relu_output=`` with the mask
  read inside the backward kernels (``plan_backward_relu``) against a masked
  copy of grad_y then the plain backward (what the API does for a backend
  that cannot fuse it), on the ``cnn-train-3x3`` layers, for every
  deterministic algorithm of ``FUSED_RELU_MASK`` that runs them.

Timing: CUDA events around each call, contenders interleaved round by round
(a slow moment hits all alike), medians with the min-max spread; ratios are
formed within one run only.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ..backends._cuda_sources import LADDER_KERNELS, compile_options, name_expression, source_dir
from .workloads import seed_workloads

__all__ = ["instruction_mix", "ablation", "fused_relu", "masked_backward", "print_ablation", "main", "LADDER_STEPS"]

LADDER_STEPS = ("wgrad_atomic", "wgrad_shuffle", "wgrad_registers", "wgrad_padded")
WORKLOADS = ("cnn-train-3x3", "ece408-fa19", "ece408-fa21")

# --- instruction mix (static SASS) ---------------------------------------------------

#: (algorithm, part, file, kernel template) for each kernel of the mix table.
#: "{k}" is the layer's kernel size; register_tiled's MT and igemm_big's BM
#: are the instantiations the seed's layers use (their input gradients: 32 or
#: 64 output channels -> fused_gemm / igemm_big with the chunked gather; ECE408:
#: <= 24 -> register_tiled).
MIX_KERNELS = (
    ("wgrad_atomic", "dW", "wgrad_ladder.cu", "wgrad_ladder_atomic"),
    ("wgrad_shuffle", "dW", "wgrad_ladder.cu", "wgrad_ladder_shuffle"),
    ("wgrad_registers", "dW", "wgrad_ladder.cu", "wgrad_ladder_registers@{k}"),
    ("wgrad_padded", "dW", "wgrad_ladder.cu", "wgrad_ladder_padded@{k}"),
    ("fused_gemm", "dW", "implicit_gemm.cu", "conv2d_wgrad_implicit_gemm"),
    ("igemm_big", "dW", "implicit_gemm_big.cu", "conv2d_igemm_wgrad@64"),
    ("fused_gemm (+ ladder)", "dX", "implicit_gemm.cu", "conv2d_implicit_gemm@0"),
    ("igemm_big", "dX", "implicit_gemm_big.cu", "conv2d_igemm_fwd@64,0,1"),
    ("fused_gemm, stride > 1", "dX", "implicit_gemm.cu", "conv2d_dgrad_implicit_gemm"),
    ("register_tiled (ECE408 dX)", "dX", "conv2d.cu", "conv2d_register_tiled@12"),
    ("igemm_big + ReLU", "fwd", "implicit_gemm_big.cu", "conv2d_igemm_fwd@64,1,1"),
    ("fused_gemm + ReLU", "fwd", "implicit_gemm.cu", "conv2d_implicit_gemm@1"),
    # grad_y read through the ReLU output (relu_output=): the cost of the mask in the main loop
    ("fused_gemm + ReLU mask", "dW", "implicit_gemm_masked.cu", "conv2d_wgrad_implicit_gemm_masked"),
    ("igemm_big + ReLU mask", "dW", "implicit_gemm_big_masked.cu", "conv2d_igemm_wgrad_masked@64"),
    ("fused_gemm + ReLU mask", "dX", "implicit_gemm_masked.cu", "conv2d_implicit_gemm_masked"),
    ("igemm_big + ReLU mask", "dX", "implicit_gemm_big_masked.cu", "conv2d_igemm_fwd_masked@64,1"),
    ("register_tiled + ReLU mask (ECE408 dX)", "dX", "conv2d_masked.cu", "conv2d_register_tiled_masked@12"),
)

_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_BRANCH = re.compile(r"0x([0-9a-f]+)")


def _tool(name: str) -> str | None:
    """``name`` on PATH, or from the nvidia-cuda-cuobjdump / -nvdisasm wheels (the ``sass`` extra)."""
    found = shutil.which(name)
    if found:
        return found
    try:
        import nvidia

        for root in nvidia.__path__:
            for candidate in Path(root).glob(f"cu*/bin/{name}"):
                return str(candidate)
    except ImportError:
        pass
    return None


def _compile_cubin(filename: str, expressions: list[str], workdir: Path) -> Path:
    """One cubin for sm_90 holding ``expressions`` (template instantiations) of ``filename``."""
    wrapper = workdir / f"mix_{filename}"
    lines = [f'#include "{source_dir() / filename}"', "void convsuite_instantiate() {"]
    lines += [f"    (void)&{e};" for e in expressions]
    wrapper.write_text("\n".join(lines) + "\n}\n")
    cubin = workdir / f"{filename}.cubin"
    cmd = ["nvcc", "-std=c++17", "-arch=sm_90", "-cubin", *compile_options(), f"-I{source_dir()}", str(wrapper)]
    result = subprocess.run([*cmd, "-o", str(cubin)], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"nvcc failed on {filename}:\n{result.stderr}")
    return cubin


def _functions(sass: str) -> dict[str, list[tuple[int, str, bool]]]:
    """Mangled name -> [(address, opcode, predicated)] from ``cuobjdump -sass`` text."""
    out: dict[str, list] = {}
    current = None
    for line in sass.splitlines():
        if "Function :" in line:
            current = out.setdefault(line.split("Function :")[1].strip(), [])
        elif current is not None:
            m = _LINE.search(line)
            if m:
                current.append((int(m.group(1), 16), m.group(3) + m.group(4), bool(m.group(2))))
    return out


def _is_fma(op: str, dtype: str) -> bool:
    return op.split()[0].split(".")[0] == ("FFMA" if dtype == "float32" else "DFMA")


def loop_mix(code: list[tuple[int, str, bool]], dtype: str = "float32") -> dict:
    """The main loop of one kernel's SASS and its FMA share.

    Loops are found as backward branches (``BRA`` to a lower address); the main
    loop is the one whose body holds the most FMAs (the innermost such loop
    when nested loops tie). Returns the instruction and FMA counts of that body
    and of the whole kernel.
    """
    loops = []
    for addr, op, _ in code:
        if op.startswith("BRA"):
            target = _BRANCH.search(op)
            if target and int(target.group(1), 16) <= addr:
                loops.append((int(target.group(1), 16), addr))
    total = [op for _, op, _ in code if not op.startswith("NOP")]
    kernel_fma = sum(_is_fma(op, dtype) for op in total)
    best = None
    for lo, hi in loops:
        body = [op for a, op, _ in code if lo <= a <= hi and not op.startswith("NOP")]
        fma = sum(_is_fma(op, dtype) for op in body)
        key = (fma, -len(body))
        if best is None or key > best[0]:
            best = (key, len(body), fma)
    loop_n, loop_fma = (best[1], best[2]) if best else (len(total), kernel_fma)
    return dict(
        loop_instructions=loop_n,
        loop_fma=loop_fma,
        loop_fma_share=loop_fma / max(loop_n, 1),
        kernel_instructions=len(total),
        kernel_fma_share=kernel_fma / max(len(total), 1),
        loops=len(loops),
    )


def _registers(cuobjdump: str, cubin: Path) -> dict[str, int]:
    """Mangled name -> registers per thread (``cuobjdump -res-usage``)."""
    text = subprocess.run([cuobjdump, "-res-usage", str(cubin)], capture_output=True, text=True).stdout
    regs, name = {}, None
    for line in text.splitlines():
        if line.strip().startswith("Function "):
            name = line.strip()[len("Function ") :].rstrip(":")
        elif name and "REG:" in line:
            regs[name] = int(re.search(r"REG:(\d+)", line).group(1))
    return regs


def _mangled_match(mangled: str, base: str, extra: list[str]) -> bool:
    """Whether an Itanium-mangled kernel name is ``base<float, extra...>``."""
    if f"{len(base)}{base}I" not in mangled:
        return False
    ints = re.findall(r"Li(\d+)E", mangled.split(f"{base}I", 1)[1].split("Ev", 1)[0])
    return ints == extra


def instruction_mix(kernel_sizes=(3, 5, 7), dtype: str = "float32", files=None) -> list[dict]:
    """Rows of the instruction-mix table (see the module docstring); needs nvcc and cuobjdump.

    ``files`` limits the table to kernels of those sources (default: all of :data:`MIX_KERNELS`).
    """
    cuobjdump = _tool("cuobjdump")
    if shutil.which("nvcc") is None or cuobjdump is None:
        raise RuntimeError(
            "the instruction mix needs nvcc and cuobjdump on PATH (cuobjdump also from `pip install 'convsuite[sass]'`)"
        )
    wanted = []  # (algorithm, part, file, kernel with its size filled in)
    for algorithm, part, filename, kernel in MIX_KERNELS:
        if files is not None and filename not in files:
            continue
        sizes = [k for k in kernel_sizes if k in LADDER_KERNELS] if "{k}" in kernel else [None]
        wanted += [(algorithm, part, filename, kernel.format(k=k)) for k in sizes]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for filename in dict.fromkeys(w[2] for w in wanted):
            mine = [w for w in wanted if w[2] == filename]
            cubin = _compile_cubin(filename, [name_expression(w[3], dtype) for w in mine], Path(tmp))
            sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True).stdout
            functions, regs = _functions(sass), _registers(cuobjdump, cubin)
            for algorithm, part, _, kernel in mine:
                base, _, extra = kernel.partition("@")
                args = extra.split(",") if extra else []
                mangled = next(n for n in functions if _mangled_match(n, base, args))
                rows.append(
                    dict(
                        algorithm=algorithm,
                        part=part,
                        kernel=name_expression(kernel, dtype),
                        registers=regs.get(mangled),
                        **loop_mix(functions[mangled], dtype),
                    )
                )
    return rows


def format_mix(rows: list[dict]) -> str:
    head = (
        "| algorithm | part | kernel (sm_90 SASS) | regs | main loop: instr | FFMA | FFMA share | kernel FFMA share |"
    )
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        lines.append(
            f"| {r['algorithm']} | {r['part']} | `{r['kernel']}` | {r['registers']} | {r['loop_instructions']} | "
            f"{r['loop_fma']} | {r['loop_fma_share']:.0%} | {r['kernel_fma_share']:.0%} |"
        )
    return "\n".join(lines)


# --- timing (GPU) ----------------------------------------------------------------------


def _interleaved(contenders: dict, repeat: int, warmup: int = 2) -> dict:
    """{name: (median, min, max) seconds}: each contender once per round, CUDA events around each call."""
    import cupy as cp

    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, fn in contenders.items():
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples[name].append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return {name: (statistics.median(s), min(s), max(s)) for name, s in samples.items()}


def _layers(workloads, ece408_batch: int | None):
    """(workload, layer name, batch, C, M, H, W, K, padding) of the chosen workloads."""
    table = seed_workloads()
    for name in workloads:
        data = table[name]
        batch = data["batch"] if not name.startswith("ece408") or ece408_batch is None else ece408_batch
        for layer in data["layers"]:
            yield (
                name,
                layer["name"],
                batch,
                layer["C"],
                layer["M"],
                layer["H"],
                layer["W"],
                layer["K"],
                layer["padding"],
            )


def _backward_contenders(backend, spec, x, w, gy) -> tuple[dict, dict]:
    """{(algorithm, part): zero-argument call} and {(algorithm, part): flops} for one layer."""
    import cupy as cp

    from ..backends import _cupy_algorithms as algs

    gx, gw, gb = cp.empty_like(x), cp.empty_like(w), cp.empty(spec.out_channels, cp.float32)
    flops_dw = 2.0 * math.prod(spec.y_shape) * spec.channels_per_group * math.prod(spec.kernel_size)
    contenders, flops = {}, {}  # dX costs what dW costs (and the forward)
    for name in backend.algorithm_table():
        if backend.can_run(spec, name, "backward") is not True:
            continue
        launch = backend.plan(spec, name, "backward")
        contenders[(name, "dX+dW+db")] = lambda launch=launch: launch(gy, x, w, gx, gw, gb)
        flops[(name, "dX+dW+db")] = 2 * flops_dw
        if name in LADDER_STEPS:
            wgrad = algs.ladder_weight_gradient(spec, name)
            contenders[(name, "dW")] = lambda wgrad=wgrad: wgrad(gy, x, gw)
            flops[(name, "dW")] = flops_dw
    dgrad = algs._plan_input_gradient(spec, big=False)
    contenders[("fused_gemm's dX (the ladder's)", "dX")] = lambda: dgrad(gy, w, gx)
    flops[("fused_gemm's dX (the ladder's)", "dX")] = flops_dw
    return contenders, flops


def ablation(workloads=WORKLOADS, repeat: int = 9, ece408_batch: int | None = 1000, peak_gflops: float | None = None):
    """Rows of the backward ablation (float32, on the current GPU)."""
    import cupy as cp

    import convsuite as cs

    backend = cs._registry.get_backend("cupy")
    rs = cp.random.RandomState(0)
    rows = []
    for workload, lname, B, C, M, H, W, K, pad in _layers(workloads, ece408_batch):
        x = rs.standard_normal((B, C, H, W), dtype=cp.float32)
        w = rs.standard_normal((M, C, K, K), dtype=cp.float32)
        spec = cs.explain(x, w, padding=pad).spec
        gy = rs.standard_normal(spec.y_shape, dtype=cp.float32)
        contenders, flops = _backward_contenders(backend, spec, x, w, gy)
        times = _interleaved(contenders, repeat)
        previous = None
        for (name, part), (t, lo, hi) in times.items():
            rate = flops[(name, part)] / t / 1e9
            row = dict(
                workload=workload,
                layer=f"{lname} B={B} C={C} M={M} {H}x{W} K={K} pad={pad}",
                algorithm=name,
                part=part,
                ms=t * 1e3,
                ms_min=lo * 1e3,
                ms_max=hi * 1e3,
                gflops=rate,
                peak=None if not peak_gflops else rate / peak_gflops,
                vs_previous_step=None,
            )
            if part == "dW":
                if previous is not None:
                    row["vs_previous_step"] = previous / t
                previous = t
            rows.append(row)
        contenders = x = w = gy = None  # release this layer's buffers before the next
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def _fused_pair(backend, spec, name: str, x, w, b, out, repeat: int) -> dict:
    """Times of ``name``'s fused forward + ReLU and of its kernel followed by a ReLU pass, and their difference."""
    import cupy as cp

    import convsuite as cs

    from ..backends import _cupy_algorithms as algs

    plain = backend.plan(spec, name, "forward")
    fused = algs.plan_forward_activation(spec, name, "relu")

    def unfused():
        plain(x, w, b, out)
        cp.maximum(out, 0, out=out)  # what the API does after an unfused kernel

    times = _interleaved({"fused": lambda: fused(x, w, b, out), "unfused": unfused}, repeat)
    pad = spec.padding[0][0]
    check = cp.maximum(cs.conv2d(x, w, b, padding=pad, backend="cupy", algorithm="fused_gemm"), 0)
    fused(x, w, b, out)
    err = float(cp.abs(out - check).max() / (cp.abs(check).max() + 1e-30))
    return dict(
        algorithm=name,
        fused_ms=times["fused"][0] * 1e3,
        fused_spread=[t * 1e3 for t in times["fused"][1:]],
        unfused_ms=times["unfused"][0] * 1e3,
        unfused_spread=[t * 1e3 for t in times["unfused"][1:]],
        speedup=times["unfused"][0] / times["fused"][0],
        max_rel_diff=err,
    )


def fused_relu(repeat: int = 15) -> list[dict]:
    """Forward + bias + ReLU fused vs the unfused pair on the cnn-train-3x3 layers (float32)."""
    import cupy as cp

    import convsuite as cs

    from ..backends import _cupy_algorithms as algs

    backend = cs._registry.get_backend("cupy")
    rs = cp.random.RandomState(1)
    rows = []
    for _, lname, B, C, M, H, W, K, pad in _layers(("cnn-train-3x3",), None):
        x = rs.standard_normal((B, C, H, W), dtype=cp.float32)
        w = rs.standard_normal((M, C, K, K), dtype=cp.float32)
        b = rs.standard_normal(M, dtype=cp.float32)
        spec = cs.explain(x, w, b, padding=pad).spec
        out = cp.empty(spec.y_shape, cp.float32)
        for name in algs.FUSED_ACTIVATION:
            if backend.can_run(spec, name, "forward") is True:
                row = _fused_pair(backend, spec, name, x, w, b, out, repeat)
                rows.append(dict(layer=f"{lname} B={B} C={C} M={M} {H}x{W} K={K}", **row))
    return rows


def _masked_pair(backend, spec, name: str, x, w, gy, relu_output, repeat: int) -> dict:
    """Times of ``name``'s backward with the ReLU mask in its kernels and of a masked copy then the plain backward."""
    import cupy as cp

    from .. import _epilogue
    from ..backends import _cupy_algorithms as algs

    plain = backend.plan(spec, name, "backward")
    fused = algs.plan_backward_relu(spec, name)
    outs = {kind: (cp.empty_like(x), cp.empty_like(w), cp.empty(spec.out_channels, x.dtype)) for kind in ("f", "u")}

    def unfused():
        masked = _epilogue.mask_relu_gradient(gy, relu_output, cp)  # what the API does when the mask is not fused
        plain(masked, x, w, *outs["u"])

    times = _interleaved({"fused": lambda: fused(gy, x, w, *outs["f"], relu_output), "unfused": unfused}, repeat)
    diff = max(
        float(cp.abs(f - u).max() / (cp.abs(u).max() + 1e-30)) for f, u in zip(outs["f"], outs["u"])
    )  # both outputs hold their last timed call's gradients
    return dict(
        algorithm=name,
        fused_ms=times["fused"][0] * 1e3,
        fused_spread=[t * 1e3 for t in times["fused"][1:]],
        unfused_ms=times["unfused"][0] * 1e3,
        unfused_spread=[t * 1e3 for t in times["unfused"][1:]],
        speedup=times["unfused"][0] / times["fused"][0],
        max_rel_diff=diff,
    )


def masked_backward(repeat: int = 15) -> list[dict]:
    """Backward with relu_output, mask fused in the kernels vs masked grad_y then backward (cnn-train-3x3, float32)."""
    import cupy as cp

    import convsuite as cs

    from ..backends import _cupy_algorithms as algs

    backend = cs._registry.get_backend("cupy")
    rs = cp.random.RandomState(2)
    rows = []
    for _, lname, B, C, M, H, W, K, pad in _layers(("cnn-train-3x3",), None):
        x = rs.standard_normal((B, C, H, W), dtype=cp.float32)
        w = rs.standard_normal((M, C, K, K), dtype=cp.float32)
        relu_output = cs.conv2d(x, w, padding=pad, backend="cupy", activation="relu")  # about half zeros
        gy = rs.standard_normal(relu_output.shape, dtype=cp.float32)
        spec = cs.explain(x, w, padding=pad).spec
        default = backend.choose_algorithm(spec, "backward")[0]
        for name in algs.FUSED_RELU_MASK:
            if algs.RECORDS[name].deterministic and backend.can_run(spec, name, "backward") is True:
                row = _masked_pair(backend, spec, name, x, w, gy, relu_output, repeat)
                layer = f"{lname} B={B} C={C} M={M} {H}x{W} K={K}"
                rows.append(dict(layer=layer, default=name == default, **row))
        x = w = gy = relu_output = None  # release this layer's buffers before the next
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def format_ablation(rows: list[dict]) -> str:
    lines = [
        "| workload | layer | algorithm | part | ms (median) | min-max | GFLOP/s | of peak | vs previous step |",
        "|" + "---|" * 9,
    ]
    for r in rows:
        peak = "" if r["peak"] is None else f"{r['peak']:.1%}"
        step = "" if r["vs_previous_step"] is None else f"{r['vs_previous_step']:.2f}x"
        lines.append(
            f"| {r['workload']} | {r['layer']} | {r['algorithm']} | {r['part']} | {r['ms']:.3f} | "
            f"{r['ms_min']:.3f}-{r['ms_max']:.3f} | {r['gflops']:.0f} | {peak} | {step} |"
        )
    return "\n".join(lines)


def format_fused(rows: list[dict]) -> str:
    lines = [
        "| layer | algorithm | fused ms | unfused ms (kernel + ReLU pass) | speed-up | max rel diff |",
        "|" + "---|" * 6,
    ]
    for r in rows:
        lines.append(
            f"| {r['layer']} | {r['algorithm']} | {r['fused_ms']:.3f} | {r['unfused_ms']:.3f} | "
            f"{r['speedup']:.2f}x | {r['max_rel_diff']:.1e} |"
        )
    return "\n".join(lines)


def format_masked(rows: list[dict]) -> str:
    lines = [
        "| layer | algorithm | mask in the kernels ms (min-max) | masked copy + backward ms (min-max) | speed-up "
        "| max rel diff |",
        "|" + "---|" * 6,
    ]
    for r in rows:
        default = " (auto's)" if r["default"] else ""
        (flo, fhi), (ulo, uhi) = r["fused_spread"], r["unfused_spread"]
        lines.append(
            f"| {r['layer']} | {r['algorithm']}{default} | {r['fused_ms']:.3f} ({flo:.3f}-{fhi:.3f}) | "
            f"{r['unfused_ms']:.3f} ({ulo:.3f}-{uhi:.3f}) | {r['speedup']:.2f}x | {r['max_rel_diff']:.1e} |"
        )
    return "\n".join(lines)


def _device_line() -> str:
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    driver = cp.cuda.runtime.driverGetVersion()
    return f"{name}, {props['multiProcessorCount']} SMs, driver {driver}, cupy {cp.__version__}"


def print_ablation(workload: str, repeat: int = 5, out=None) -> None:
    """The ablation (and, for cnn-train-3x3, the fused-ReLU table) of one workload, printed:
    the hook of ``convsuite compare --device gpu --workload W`` for the ladder's workloads.
    """
    if workload not in WORKLOADS:
        return
    args = ["--time", "--workload", workload, "--repeat", str(repeat)]
    main(args + (["--out", str(out)] if out else []))


def main(argv=None) -> int:
    """Command line: print the SASS instruction mix and/or time the tables; returns the exit status."""
    from ._arguments import folder, gpu_unavailable, positive

    parser = argparse.ArgumentParser(
        prog="python -m convsuite.bench.backward_ladder", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--sass", action="store_true", help="instruction mix from the sm_90 SASS (nvcc, cuobjdump)")
    parser.add_argument("--time", action="store_true", help="the ablation and fused-epilogue tables (needs a GPU)")
    parser.add_argument("--workload", action="append", choices=WORKLOADS, help="workloads to time (default all)")
    parser.add_argument("--repeat", type=positive, default=9, help="timed rounds per contender")
    parser.add_argument(
        "--ece408-batch", type=positive, default=1000, help="batch of the ECE408 layers (the workload's is 10000)"
    )
    parser.add_argument("--out", type=folder, help="folder for the JSON results")
    args = parser.parse_args(argv)
    if not (args.sass or args.time):
        parser.error("ask for --sass and/or --time")
    if args.time:
        why = gpu_unavailable()
        if why is not None:
            parser.error(f"--time needs the GPU backend (cupy), which is unavailable here: {why}")
    results = {}
    if args.sass:
        results["instruction_mix"] = instruction_mix()
        print("## Instruction mix (float32, sm_90, static SASS; main loop = the loop with the most FFMA)\n")
        print(format_mix(results["instruction_mix"]) + "\n")
    if args.time:
        from .ceilings import measure_gpu_ceilings

        ceilings = measure_gpu_ceilings(copy_mib=256, gemm_n=4096, repeat=5)
        results["device"] = _device_line()
        results["peak"] = ceilings.as_dict()
        print(f"device: {results['device']}")
        print(f"peak: float32 cuBLAS SGEMM {ceilings.gemm_gflops:.0f} GFLOP/s, copy {ceilings.copy_gbs:.0f} GB/s\n")
        workloads = tuple(args.workload or WORKLOADS)
        results["fused_relu"] = fused_relu(repeat=max(args.repeat, 9)) if "cnn-train-3x3" in workloads else []
        results["masked_backward"] = masked_backward(repeat=max(args.repeat, 9)) if "cnn-train-3x3" in workloads else []
        results["ablation"] = ablation(workloads, args.repeat, args.ece408_batch, ceilings.gemm_gflops)
        print("## Backward ablation (float32)\n")
        print(format_ablation(results["ablation"]) + "\n")
        print("## Fused forward + bias + ReLU vs the unfused pair (float32)\n")
        print(format_fused(results["fused_relu"]) + "\n")
        print("## Backward with relu_output: mask fused in the kernels vs masked grad_y then backward (float32)\n")
        print(format_masked(results["masked_backward"]))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "backward_ladder.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
