"""The machine's ceilings, measured on the spot: memory copy and GEMM rate."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .._timing import measure_side_by_side

__all__ = ["Ceilings", "measure_cpu_ceilings", "measure_gpu_ceilings"]


@dataclass(frozen=True)
class Ceilings:
    """Measured peak rates a result is compared with.

    Attributes
    ----------
    copy_gbs : float
        Memory copy bandwidth, GB/s counting bytes read plus bytes written.
    gemm_gflops : float
        float32 matrix-product rate, GFLOP/s.
    how : str
        What was timed.
    """

    device: str
    copy_gbs: float
    gemm_gflops: float
    how: str

    def as_dict(self) -> dict:
        """The fields as a plain dict (for JSON)."""
        return asdict(self)

    def roof(self, intensity: float) -> float:
        """Attainable GFLOP/s at ``intensity`` FLOP/byte: min(compute, bandwidth * intensity)."""
        return min(self.gemm_gflops, self.copy_gbs * intensity)


def _median_seconds(fn, repeat: int) -> float:
    """Median host seconds of ``fn`` after a warm-up call (the measuring core)."""
    return measure_side_by_side({"fn": fn}, repeat=repeat, warmup=0, rounds=1)["fn"].median


def measure_cpu_ceilings(copy_mib: int = 256, gemm_n: int = 2048, repeat: int = 5) -> Ceilings:
    """Copy bandwidth (``np.copyto`` of ``copy_mib`` MiB) and float32 GEMM (``n^3``) rate via NumPy."""
    src = np.ones(copy_mib * 2**20 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    t_copy = _median_seconds(lambda: np.copyto(dst, src), repeat)
    a = np.random.default_rng(0).standard_normal((gemm_n, gemm_n), dtype=np.float32)
    t_gemm = _median_seconds(lambda: a @ a, max(repeat // 2, 2))
    return Ceilings(
        device="cpu",
        copy_gbs=2 * src.nbytes / t_copy / 1e9,
        gemm_gflops=2 * gemm_n**3 / t_gemm / 1e9,
        how=f"np.copyto of {copy_mib} MiB; float32 {gemm_n}^3 matmul through NumPy's BLAS",
    )


def measure_gpu_ceilings(copy_mib: int = 1024, gemm_n: int = 8192, repeat: int = 10) -> Ceilings:
    """Device-to-device copy and strict-FP32 cuBLAS SGEMM rate through CuPy, timed with CUDA events.

    Raises
    ------
    BackendUnavailableError
        Without CuPy or a CUDA GPU (before anything is allocated).
    """
    from .timing import cuda_events_median as events_median
    from .timing import require_gpu

    require_gpu("measure_gpu_ceilings")
    import cupy as cp

    src = cp.ones(copy_mib * 2**20 // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    t_copy = events_median(lambda: cp.copyto(dst, src), repeat)
    a = cp.random.RandomState(0).standard_normal((gemm_n, gemm_n), dtype=cp.float32)
    t_gemm = events_median(lambda: a @ a, max(repeat // 2, 3))
    nbytes = src.nbytes
    src = dst = a = None  # release the buffers before returning them to the pool
    cp.get_default_memory_pool().free_all_blocks()
    return Ceilings(
        device="gpu",
        copy_gbs=2 * nbytes / t_copy / 1e9,
        gemm_gflops=2 * gemm_n**3 / t_gemm / 1e9,
        how=f"cupy copy of {copy_mib} MiB; float32 {gemm_n}^3 cuBLAS SGEMM (TF32 off), CUDA events",
    )
