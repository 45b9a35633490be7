"""The CUDA sources shipped in ``convsuite/cuda_src`` and the kernels they define.

No cupy import here: the CI syntax check (nvcc -ptx) reads this table too.
Each kernel is a template instantiated for float and double through
``cupy.RawModule(name_expressions=...)``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["KERNELS", "REGISTER_TILES", "name_expressions", "source_dir", "source_text"]

#: Output channels per thread of conv2d_register_tiled (template argument MT).
REGISTER_TILES = (4, 8, 16)

#: file -> kernel templates it defines (the scalar type is the first template argument).
KERNELS = {
    "conv1d.cu": [
        "conv1d_naive",
        "conv1d_const_mask",
        "conv1d_tiled_halo",
        "conv1d_tiled_cached_halo",
        "conv1d_blocked",
    ],
    "conv2d.cu": [
        "conv2d_direct",
        "conv2d_const_weights",
        "conv2d_tiled_shared",
        "conv2d_depthwise",
        *[f"conv2d_register_tiled@{mt}" for mt in REGISTER_TILES],
    ],
    "im2col.cu": ["im2col", "col2im"],
    "implicit_gemm.cu": ["conv2d_implicit_gemm"],
}

_CTYPES = {"float32": "float", "float64": "double"}


def name_expression(kernel: str, dtype: str) -> str:
    """``"conv2d_register_tiled@8"`` + float32 -> ``"conv2d_register_tiled<float, 8>"``."""
    base, _, extra = kernel.partition("@")
    args = [_CTYPES[dtype], *([extra] if extra else [])]
    return f"{base}<{', '.join(args)}>"


def name_expressions(filename: str) -> list[str]:
    """Every instantiation a module built from ``filename`` provides."""
    return [name_expression(k, d) for k in KERNELS[filename] for d in _CTYPES]


def source_dir() -> Path:
    """The folder of the installed ``.cu`` files (also the include path)."""
    return Path(str(resources.files("convsuite.cuda_src")))


def source_text(filename: str) -> str:
    """The CUDA source of ``filename``."""
    return (source_dir() / filename).read_text()
