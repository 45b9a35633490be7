"""The CUDA sources shipped in ``convsuite/cuda_src``, the kernels they define,
and the constants they share with Python.

No cupy import here: the CI syntax check (nvcc -ptx) reads this table too.
Each kernel is a template instantiated for float and double through
``cupy.RawModule(name_expressions=...)``. Constants that both the launch code
and the kernels need (:data:`DEFINES`) are defined here only and reach the
sources as ``-D`` options (:func:`compile_options`); ``common.cuh`` refuses to
compile without them, so a value can never be copied by hand and drift.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from pathlib import Path

__all__ = [
    "ARCH_TARGETS",
    "arch_options",
    "BLOCKED_WIDTHS",
    "DEFINES",
    "DEPTHWISE_FIXED",
    "DEPTHWISE_WGRAD_KMAX",
    "EPILOGUES",
    "KERNELS",
    "LADDER_KERNELS",
    "OVERRIDABLE",
    "POINTWISE_TILES",
    "REGISTER_TILES",
    "compile_options",
    "compile_source",
    "normalize_overrides",
    "name_expression",
    "name_expressions",
    "source_dir",
    "source_text",
]

#: Constants shared by the launch code (cupy_backend) and the kernels.
DEFINES = {
    "CS_THREADS": 256,  # threads per block of the 1-D-block kernels
    "CS_CONST_BYTES": 65536,  # constant memory for the *_const algorithms (the hardware limit)
    "CS_BLOCKED_V": 9,  # outputs per thread of conv1d_blocked (odd: no bank conflicts)
    "CS_RT_PX": 4,  # adjacent outputs per thread of conv2d_register_tiled
    "CS_GEMM_BM": 64,  # implicit-GEMM block tile rows (output channels)
    "CS_GEMM_BN": 64,  # implicit-GEMM block tile columns (pixels)
    "CS_GEMM_BK": 16,  # implicit-GEMM reduction slice per shared-memory stage
    # depthwise outputs per thread along W and H: 2 x 4 ran 1.04-1.35x the old 4 x 2 on 9 of 11 MobileNet-class
    # layers, 1.00x and 0.91x on the two 7x7-14x14 ones (H100, docs/measurements/depthwise-2026-11-26-h100.md)
    "CS_DW_PX": 2,
    "CS_DW_PY": 4,
    "CS_PW_PX": 4,  # pointwise pixels per thread (one float4)
    "CS_SPLITK_TILE": 32,  # pointwise_splitk: output channels and pixels of a block's tile, channels per chunk
    "CS_LADDER_YB": 4,  # output rows per thread of the dW ladder's padded step (the write-up's yBatch)
    # tf32x3 forward: 128-thread blocks per multiprocessor its registers must allow; 0: no minimum.
    # 4: 128 registers, the default module; the backend's rule takes the 3 module (168 registers)
    # from 768 products per output (_cupy_algorithms._default_blocks_tf32x3).
    "CS_TX_BLOCKS": 4,
    # tf32x3 forward at BM = 64: shared-memory stages of its cp.async pipeline (the "stages" tunable)
    "CS_TX_STAGES": 4,
    # tf32x3's wgmma forward (tf32x3_wgmma.cu): cp.async stages in dynamic shared memory, sized from
    # the same value (_cupy_algorithms.TF32X3_WGMMA_SMEM)
    "CS_TW_STAGES": 5,
    # tf32x3 (every kernel): 1 sums each k-step's three MMAs in a zeroed tile that the float32
    # accumulator takes with rounded adds (tx_mma3 in tf32x3.cuh); 0 accumulates in the MMAs themselves
    "CS_TX_PROMOTE": 1,
}

#: The ``-D`` constants a tunable parameter may set per configuration: name ->
#: (the files whose kernels read it, every value proved correct for them). A
#: configuration is compiled as its own module (``_cupy_runtime.module``).
OVERRIDABLE = {
    # acc[MT][PX] and v[PX] are plain per-thread arrays; any PX >= 1 is correct.
    "CS_RT_PX": (("conv2d.cu", "conv2d_masked.cu"), (1, 2, 4, 8)),
    # conv1d_blocked: acc[V] and win[V] per thread; the tile holds blockDim.x * V
    # outputs plus the halo (sized in Python from V), the sliding window reads
    # win0[V + k] < span, the float4 loads end before the mask at span + 8 and
    # the float4 stores read only the staged outputs, whatever V >= 1. Odd V
    # only avoids bank conflicts, so only odd values are offered.
    "CS_BLOCKED_V": (("conv1d.cu",), (1, 3, 5, 7, 9, 11, 13, 15)),
    # depthwise_forward only (the backward kernels do not read them): acc[PY][PX]
    # and, with K fixed, v[(PX-1)*S+K] per row are per-thread arrays over a
    # grid-stride loop with every output bounds-checked; any PX, PY >= 1 is correct.
    # implicit_gemm.cu (fused_gemm, all three kernels): each thread loads BK / 4
    # elements of each operand per stage and 256 / BK threads share a row of
    # the weight-gradient loads, so BK must divide 256 and be a multiple of 4;
    # the kernels #error on anything else. Shared memory at 32 (float64, the
    # padded dW tile): 33.8 KiB.
    "CS_GEMM_BK": (("implicit_gemm.cu", "implicit_gemm_masked.cu"), (8, 16, 32)),
    "CS_DW_PX": (("depthwise.cu",), (1, 2, 4, 8)),
    "CS_DW_PY": (("depthwise.cu",), (1, 2, 4)),
    # conv2d_tf32x3_fwd's __launch_bounds__ minimum blocks (in 128-thread blocks; BM = 128
    # asks half as many; 0: none given): a register budget only, the source is the same for
    # any value, so every value is correct. 3 caps the kernel at 168 registers, 4 at 128
    # (ptxas: no spills at sm_90). 1 and 2 are not offered: a minimum of one block made ptxas
    # take 174 registers, two blocks per multiprocessor, slower than no minimum.
    "CS_TX_BLOCKS": (("implicit_gemm_tf32x3.cu",), (0, 3, 4)),
    # conv2d_tf32x3_fwd at BM = 64: cp.async stages in dynamic shared memory (the launch sizes it from the
    # same value); any S >= 2 keeps the pipeline's order (S - 1 stages in flight, one commit group each).
    "CS_TX_STAGES": (("implicit_gemm_tf32x3.cu",), (2, 3, 4, 5, 6)),
}

#: Square kernel sizes the register steps of the dW ladder are compiled for.
LADDER_KERNELS = (1, 3, 5, 7)

#: Mask widths conv1d_blocked is compiled for (0: any width, read at run time).
BLOCKED_WIDTHS = (0, 3, 5, 7, 9, 31)

#: Output channels per thread of conv2d_register_tiled (template argument MT).
REGISTER_TILES = (4, 8, 12, 16, 24)

#: (kernel size, stride) pairs the depthwise kernels are compiled for with both
#: fixed at compile time (square kernel, dilation 1); (0, 0) reads them at run time.
DEPTHWISE_FIXED = ((3, 1), (3, 2), (5, 1), (5, 2), (7, 1), (7, 2), (0, 0))

#: Output channels per thread of conv2d_pointwise (template argument MT).
POINTWISE_TILES = (8, 16, 24, 32)

#: Activation epilogue codes the forward kernels are compiled for (template
#: argument ACT; ``convsuite._epilogue.ACTIVATION_CODES``): 0 none, 1 ReLU, 2 ReLU6.
EPILOGUES = (0, 1, 2)

#: Largest kernel extents the depthwise weight gradient keeps in registers.
DEPTHWISE_WGRAD_KMAX = (3, 5, 7)

#: file -> kernel templates it defines. The scalar type is the first template
#: argument; "@A,B" adds more (a register tile, a kernel size); a trailing "|I"
#: marks kernels also templated on their index type, instantiated for int (fast
#: division) and long long (grid-stride loops whose last index passes 2^31 - 1:
#: ``_cupy_runtime.needs_wide_index``).
KERNELS = {
    "conv1d.cu": [
        "conv1d_naive|I",
        "conv1d_const_mask|I",
        "conv1d_tiled_halo",
        "conv1d_tiled_cached_halo",
        *[f"conv1d_blocked@{k}" for k in BLOCKED_WIDTHS],
        *[f"conv1d_blocked_pipelined@{k}" for k in BLOCKED_WIDTHS],
    ],
    "conv2d.cu": [
        "conv2d_direct|I",
        "conv2d_const_weights|I",
        "conv2d_tiled_shared",
        *[f"conv2d_register_tiled@{mt}" for mt in REGISTER_TILES],
    ],
    "depthwise.cu": [
        *[f"depthwise_forward@{k},{s},{act}|I" for k, s in DEPTHWISE_FIXED for act in EPILOGUES],
        *[f"depthwise_grad_input@{k},{s}" for k, s in DEPTHWISE_FIXED],
        *[f"depthwise_grad_weight@{k}" for k in DEPTHWISE_WGRAD_KMAX],
        "depthwise_grad_finish",
    ],
    "im2col.cu": ["im2col|I", "col2im"],
    "backward_util.cu": ["bias_grad_partial", "chunk_sums", "flip_weights"],
    "pointwise.cu": [
        *[f"conv2d_pointwise@{mt},{act}" for mt in POINTWISE_TILES for act in EPILOGUES],
        "conv2d_pointwise_splitk",
        *[f"conv2d_pointwise_splitk_reduce@{act}" for act in EPILOGUES],
        *[f"conv2d_pointwise_splitk_fused@{act}" for act in EPILOGUES],
    ],
    "implicit_gemm.cu": [
        *[f"conv2d_implicit_gemm@{act}" for act in EPILOGUES],  # the activation fused into the epilogue
        "conv2d_dgrad_implicit_gemm",
        "conv2d_wgrad_implicit_gemm",
    ],
    "implicit_gemm_big.cu": [
        *[f"conv2d_igemm_fwd@{bm},{act},{chunked}" for bm in (64, 128) for act in EPILOGUES for chunked in (0, 1)],
        *[f"conv2d_igemm_wgrad@{bm}" for bm in (64, 128)],
    ],
    "tf32x3_image.cu": [f"conv2d_tf32x3_image@{nt},{act}" for nt in (1, 2, 3, 4) for act in EPILOGUES],
    "tf32x3_wgmma.cu": [f"conv2d_tf32x3_wgmma@{act}" for act in EPILOGUES],
    "implicit_gemm_tf32x3.cu": [
        *[f"conv2d_tf32x3_fwd@{bm},{act},{chunked}" for bm in (64, 128) for act in EPILOGUES for chunked in (0, 1)],
        *[f"conv2d_tf32x3_wgrad@{bm}" for bm in (16, 32, 64, 128)],
        *[f"tf32x3_split_weights@{chunked}" for chunked in (0, 1)],
    ],
    "wgrad_ladder.cu": [
        "wgrad_ladder_atomic",
        "wgrad_ladder_shuffle",
        *[f"wgrad_ladder_{step}@{k}" for step in ("registers", "padded") for k in LADDER_KERNELS],
    ],
    # The backward kernels that read grad_y through the ReLU output (relu_output=):
    # the "_masked" twins of the templates above (a MASK switch in the same device
    # bodies), each family a module of its own that includes the plain source, so
    # the plain modules compile as before and these only when a masked backward runs.
    "conv2d_masked.cu": [f"conv2d_register_tiled_masked@{mt}" for mt in REGISTER_TILES],
    "implicit_gemm_masked.cu": [
        "conv2d_implicit_gemm_masked",  # the stride-1 dX: the forward kernel with grad_y as x
        "conv2d_dgrad_implicit_gemm_masked",
        "conv2d_wgrad_implicit_gemm_masked",
    ],
    "implicit_gemm_big_masked.cu": [
        *[f"conv2d_igemm_fwd_masked@{bm},{chunked}" for bm in (64, 128) for chunked in (0, 1)],
        *[f"conv2d_igemm_wgrad_masked@{bm}" for bm in (64, 128)],
    ],
    "depthwise_masked.cu": [
        *[f"depthwise_grad_input_masked@{k},{s}" for k, s in DEPTHWISE_FIXED],
        *[f"depthwise_grad_weight_masked@{k}" for k in DEPTHWISE_WGRAD_KMAX],
        "depthwise_grad_finish",  # reads partial sums only; named here so a masked backward needs no plain module
    ],
    # chunk_sums and flip_weights read no grad_y: named here so a masked backward needs no plain module
    "backward_util_masked.cu": ["bias_grad_partial_masked", "chunk_sums", "flip_weights"],
    "wgrad_ladder_masked.cu": [
        "wgrad_ladder_atomic_masked",
        "wgrad_ladder_shuffle_masked",
        *[f"wgrad_ladder_{step}_masked@{k}" for step in ("registers", "padded") for k in LADDER_KERNELS],
    ],
}

#: Sources compiled for an architecture-specific target (``-arch``), where they use instructions of
#: one GPU generation only: file -> target. Hopper's ``wgmma`` needs ``sm_90a``, which runs on
#: compute capability 9.0 alone (the backend launches these kernels nowhere else); the sources
#: compile on any other target too, to kernels that trap.
ARCH_TARGETS = {"tf32x3_wgmma.cu": "sm_90a"}


def arch_options(filename: str) -> tuple[str, ...]:
    """The options that compile ``filename`` for its :data:`ARCH_TARGETS` target at run time (none
    for other files): ``-arch``, and ``-DCS_REQUIRE_ARCH_FEATURES=1``, which makes the source
    refuse to compile (``#error``) if the compiler did not take that target, instead of
    building kernels that trap when launched.
    """
    if filename not in ARCH_TARGETS:
        return ()
    return (f"-arch={ARCH_TARGETS[filename]}", "-DCS_REQUIRE_ARCH_FEATURES=1")


_CTYPES = {"float32": "float", "float64": "double"}


def normalize_overrides(filename: str, overrides=()) -> tuple[tuple[str, int], ...]:
    """``overrides`` (a mapping or ``(name, value)`` pairs) as a sorted tuple without the defaults.

    Values equal to :data:`DEFINES` are dropped, so the default configuration
    is always the empty tuple and shares each kernel's one default module.

    Raises
    ------
    ValueError
        A constant that :data:`OVERRIDABLE` does not list for ``filename``,
        or a value outside its allowed values.
    """
    pairs = dict(overrides.items() if hasattr(overrides, "items") else overrides)
    kept = []
    for name, value in sorted(pairs.items()):
        files, allowed = OVERRIDABLE.get(name, ((), ()))
        if filename not in files:
            tunable = ", ".join(n for n, (f, _) in OVERRIDABLE.items() if filename in f) or "none"
            raise ValueError(f"-D{name} is not a per-configuration constant of {filename} (those that are: {tunable})")
        if value not in allowed or type(value) is not int:
            raise ValueError(f"-D{name} accepts {', '.join(map(str, allowed))}; got {value!r}")
        if value != DEFINES[name]:
            kept.append((name, value))
    return tuple(kept)


def compile_options(overrides=()) -> tuple[str, ...]:
    """The ``-D`` options that give every source the shared constants (``overrides`` replacing some).

    ``overrides`` are ``(name, value)`` pairs already checked by
    :func:`normalize_overrides`.
    """
    values = {**DEFINES, **dict(overrides)}
    return tuple(f"-D{name}={value}" for name, value in values.items())


def name_expression(kernel: str, dtype: str, wide: bool = False) -> str:
    """``"conv2d_register_tiled@8"`` + float32 -> ``"conv2d_register_tiled<float, 8>"``;
    ``"conv2d_direct|I"`` + float32 -> ``"conv2d_direct<float, int>"`` (``long long`` if wide).
    """
    kernel, indexed, _ = kernel.partition("|")
    base, _, extra = kernel.partition("@")
    args = [_CTYPES[dtype], *(extra.split(",") if extra else [])]
    if indexed:
        args.append("long long" if wide else "int")
    return f"{base}<{', '.join(args)}>"


def name_expressions(filename: str, kernel: str | None = None) -> list[str]:
    """Every instantiation of ``filename`` (of its entry ``kernel`` of :data:`KERNELS` only, if given).

    Raises
    ------
    KeyError
        ``kernel`` is not an entry of ``KERNELS[filename]``.
    """
    if kernel is not None and kernel not in KERNELS[filename]:
        raise KeyError(f"{kernel!r} is not a kernel of {filename} (those that are: {', '.join(KERNELS[filename])})")
    names = []
    for entry in KERNELS[filename] if kernel is None else [kernel]:
        for dtype in _CTYPES:
            names.append(name_expression(entry, dtype))
            if entry.endswith("|I"):
                names.append(name_expression(entry, dtype, wide=True))
    return names


def source_dir() -> Path:
    """The folder of the installed ``.cu`` files (also the include path)."""
    return Path(str(resources.files("convsuite.cuda_src")))


def source_text(filename: str) -> str:
    """The CUDA source of ``filename``."""
    return (source_dir() / filename).read_text()


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def _included(text: str) -> set[str]:
    """Every file ``text`` includes, directly or through the files it includes."""
    found: set[str] = set()
    pending = _INCLUDE.findall(text)
    while pending:
        name = pending.pop()
        if name not in found:
            found.add(name)
            pending += _INCLUDE.findall(source_text(name))
    return found


def compile_source(filename: str) -> str:
    """The text NVRTC compiles for ``filename``: the file, then the hash of each file it includes.

    CuPy's disk cache keys a module by its source text, options, architecture
    and compiler version, not by the headers NVRTC reads through ``-I``; the
    trailing comment makes an edited ``common.cuh`` a new key, so a cached
    binary built from an older header is never loaded. Included files count
    transitively (a ``_masked.cu`` module includes its plain source, which
    includes ``common.cuh``). (The comment is last so that compiler messages
    keep the file's line numbers.)
    """
    text = source_text(filename)
    digests = [
        f"// {header} sha256 {hashlib.sha256((source_dir() / header).read_bytes()).hexdigest()}"
        for header in sorted(_included(text))
    ]
    return text + "\n" + "\n".join(digests) + "\n"
