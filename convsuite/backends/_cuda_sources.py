"""The CUDA sources shipped in ``convsuite/cuda_src`` and the kernels they define.

No cupy import here: the CI syntax check (nvcc -ptx) reads this table too.
Each kernel is a template instantiated for float and double through
``cupy.RawModule(name_expressions=...)``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["KERNELS", "REGISTER_TILES", "name_expressions", "source_dir", "source_text"]

#: Mask widths conv1d_blocked is compiled for (0: any width, read at run time).
BLOCKED_WIDTHS = (0, 3, 5, 7, 9, 31)

#: Output channels per thread of conv2d_register_tiled (template argument MT).
REGISTER_TILES = (4, 8, 12, 16, 24)

#: file -> kernel templates it defines. The scalar type is the first template
#: argument; "@N" adds a second one (the register tile); a trailing "|I" marks
#: kernels also templated on their index type, instantiated for int (fast
#: division) and long long (tensors of 2^31 elements or more).
KERNELS = {
    "conv1d.cu": [
        "conv1d_naive|I",
        "conv1d_const_mask|I",
        "conv1d_tiled_halo",
        "conv1d_tiled_cached_halo",
        *[f"conv1d_blocked@{k}" for k in BLOCKED_WIDTHS],
    ],
    "conv2d.cu": [
        "conv2d_direct|I",
        "conv2d_const_weights|I",
        "conv2d_tiled_shared",
        "conv2d_depthwise",
        *[f"conv2d_register_tiled@{mt}" for mt in REGISTER_TILES],
    ],
    "im2col.cu": ["im2col|I", "col2im"],
    "implicit_gemm.cu": ["conv2d_implicit_gemm"],
}

_CTYPES = {"float32": "float", "float64": "double"}


def name_expression(kernel: str, dtype: str, wide: bool = False) -> str:
    """``"conv2d_register_tiled@8"`` + float32 -> ``"conv2d_register_tiled<float, 8>"``;
    ``"conv2d_direct|I"`` + float32 -> ``"conv2d_direct<float, int>"`` (``long long`` if wide)."""
    kernel, indexed, _ = kernel.partition("|")
    base, _, extra = kernel.partition("@")
    args = [_CTYPES[dtype], *([extra] if extra else [])]
    if indexed:
        args.append("long long" if wide else "int")
    return f"{base}<{', '.join(args)}>"


def name_expressions(filename: str) -> list[str]:
    """Every instantiation a module built from ``filename`` provides."""
    names = []
    for kernel in KERNELS[filename]:
        for dtype in _CTYPES:
            names.append(name_expression(kernel, dtype))
            if kernel.endswith("|I"):
                names.append(name_expression(kernel, dtype, wide=True))
    return names


def source_dir() -> Path:
    """The folder of the installed ``.cu`` files (also the include path)."""
    return Path(str(resources.files("convsuite.cuda_src")))


def source_text(filename: str) -> str:
    """The CUDA source of ``filename``."""
    return (source_dir() / filename).read_text()
