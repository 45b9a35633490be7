"""The CUDA sources without a GPU: shipped in the package, and compiling (nvcc -ptx)."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from convsuite.backends.cupy import _sources
from convsuite.backends.cupy._catalog import ARCH_TARGETS, DEFINES, KERNELS, OVERRIDABLE
from convsuite.backends.cupy._sources import (
    INCLUDE_DIR,
    arch_options,
    compile_options,
    include_dirs,
    name_expressions,
    normalize_overrides,
    source_path,
)

REPO = Path(__file__).resolve().parents[1]
#: Where the sources are in the repository: beside their algorithm modules, and the shared headers.
ALGORITHMS_DIR = REPO / "convsuite" / "backends" / "cupy" / "algorithms"
HEADERS_DIR = REPO / "convsuite" / "backends" / "cupy" / "include"


def _configurations() -> list[tuple[str, tuple]]:
    """Every file with its default constants, plus each non-default -D configuration a tunable can ask for.

    Per file: every combination of the extremes (smallest and largest value)
    of its overridable constants, and every other value of each constant
    alone (the rest at their defaults), so each value compiles at least once
    and the extremes compile together.
    """
    configs = [(filename, ()) for filename in sorted(KERNELS)]
    for filename in sorted(KERNELS):
        names = [n for n, (files, _) in OVERRIDABLE.items() if filename in files]
        seen = {()}
        extremes = [[(n, OVERRIDABLE[n][1][0]), (n, OVERRIDABLE[n][1][-1])] for n in names]
        singles = [[(n, v)] for n in names for v in OVERRIDABLE[n][1]]
        for combo in [*itertools.product(*extremes), *singles] if names else []:
            overrides = normalize_overrides(filename, combo)
            if overrides not in seen:
                seen.add(overrides)
                configs.append((filename, overrides))
    return configs


def test_each_kernel_of_a_file_has_its_own_instantiations():
    """A kernel's module (``_cupy_runtime.module(file, kernel=...)``) holds its instantiations, and the
    kernels of a file together hold every instantiation of the file, each once."""
    for filename, kernels in KERNELS.items():
        parts = [name_expressions(filename, kernel) for kernel in kernels]
        assert all(parts), filename
        assert [e for part in parts for e in part] == name_expressions(filename)
    with pytest.raises(KeyError, match=r"'conv2d_nope' is not a kernel of conv2d.cu .*conv2d_direct\|I"):
        name_expressions("conv2d.cu", "conv2d_nope")


def test_every_source_file_is_listed_and_present():
    on_disk = {p.name for p in ALGORITHMS_DIR.glob("*.cu")}
    assert on_disk == set(KERNELS)
    assert all(source_path(filename).is_file() for filename in KERNELS)
    assert (
        {p.name for p in HEADERS_DIR.iterdir()}
        == {"common.cuh", "tf32x3.cuh"}
        == {p.name for p in INCLUDE_DIR.glob("*.cuh")}
    )


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found: CUDA sources not compiled")
@pytest.mark.parametrize(
    "filename, overrides",
    _configurations(),
    ids=lambda v: "-".join(f"{n}={x}" for n, x in v) if isinstance(v, tuple) else v,
)
def test_sources_compile_to_ptx(filename, overrides, tmp_path):
    """Instantiate every kernel the backend uses, for float and double, and compile to PTX.

    Also with each ``-D`` configuration a tunable parameter can select
    (``CudaSource.overridable``), so every configuration a user can ask
    for compiles here before it reaches NVRTC on a GPU.
    """
    text = _compile_ptx(filename, overrides, ARCH_TARGETS.get(filename, "sm_90"), tmp_path)
    for kernel in KERNELS[filename]:
        assert kernel.partition("|")[0].partition("@")[0] in text, f"{kernel} missing from the PTX"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found: CUDA sources not compiled")
@pytest.mark.parametrize("filename", sorted(ARCH_TARGETS))
def test_architecture_specific_sources_assemble(filename, tmp_path):
    """A source for one GPU generation (wgmma: sm_90a) assembles (ptxas, to a cubin, as NVRTC does on
    the GPU): its inline PTX is checked, not only the C++ around it; and on the generic sm_90 target
    it still compiles, to kernels that trap (the backend never launches them there)."""
    text = _compile_ptx(filename, (), ARCH_TARGETS[filename], tmp_path, cubin=True)
    assert "wgmma.mma_async" in text or ARCH_TARGETS[filename] != "sm_90a"
    generic = _compile_ptx(filename, (), "sm_90", tmp_path)
    assert "wgmma.mma_async" not in generic and "trap" in generic
    # With the run-time options (arch_options), a compiler that took another target stops with an error.
    wrapper = tmp_path / "required.cu"
    wrapper.write_text(f'#include "{source_path(filename)}"\n')
    refused = _nvcc(wrapper, "sm_90", tmp_path / "x.ptx", "-DCS_REQUIRE_ARCH_FEATURES=1", *compile_options(filename))
    assert refused.returncode != 0 and "was not taken" in refused.stderr
    assert arch_options(filename) == (f"-arch={ARCH_TARGETS[filename]}", "-DCS_REQUIRE_ARCH_FEATURES=1")
    assert arch_options("conv2d.cu") == ()


#: Sources that need Ampere (sm_80): the TF32 tensor-core MMAs. The backend's
#: can_run declines them on older GPUs (tests/test_cupy_rule.py).
NEEDS_SM80 = {"implicit_gemm_tf32x3.cu", "tf32x3_image.cu"}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found: CUDA sources not compiled")
@pytest.mark.parametrize("filename", sorted(set(KERNELS) - NEEDS_SM80))
def test_sources_compile_for_the_oldest_gpu_cuda_13_targets(filename, tmp_path):
    """Turing (sm_75): every other algorithm runs there, so its source must compile without sm_80
    features (register_tiled's cp.async falls back to plain loads and stores)."""
    text = _compile_ptx(filename, (), "sm_75", tmp_path)
    assert ".target sm_75" in text


def _nvcc(source: Path, arch: str, output: Path, *options: str) -> subprocess.CompletedProcess:
    """``nvcc`` on ``source`` for ``arch``: PTX, or a cubin (through ptxas) where ``output`` ends in .cubin."""
    mode = "-cubin" if output.suffix == ".cubin" else "-ptx"
    command = [
        "nvcc",
        "-std=c++17",
        f"-arch={arch}",
        mode,
        *options,
        *(f"-I{folder}" for folder in include_dirs()),
        str(source),
        "-o",
        str(output),
    ]
    return subprocess.run(command, capture_output=True, text=True)


def _compile_ptx(filename: str, overrides: tuple, arch: str, tmp_path: Path, cubin: bool = False) -> str:
    """PTX of ``filename`` with every kernel the backend uses instantiated (float and double);
    ``cubin``: also assembled by ptxas (the PTX is returned)."""
    lines = [f'#include "{source_path(filename)}"', "void convsuite_instantiate_all() {"]
    lines += [f"    (void)&{name};" for name in name_expressions(filename)]
    lines.append("}")
    wrapper = tmp_path / f"instantiate_{filename}"
    wrapper.write_text("\n".join(lines) + "\n")
    ptx = tmp_path / "out.ptx"
    result = _nvcc(wrapper, arch, ptx, *compile_options(filename, overrides))
    assert result.returncode == 0, result.stderr
    if cubin:  # nvcc runs its own ptxas on the same instantiations
        assembled = _nvcc(wrapper, arch, tmp_path / "out.cubin", *compile_options(filename, overrides))
        assert assembled.returncode == 0, assembled.stderr
    return ptx.read_text()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found: CUDA sources not compiled")
def test_sources_refuse_to_compile_without_the_shared_constants(tmp_path):
    """The constants come from the records only: a source compiled without them stops with an error (the
    shared ones: common.cuh's check; tf32x3's, read by #if, its own check, as they would otherwise read as 0)."""
    for filename in ("conv2d.cu", "implicit_gemm_tf32x3.cu"):
        wrapper = tmp_path / "no_defines.cu"
        wrapper.write_text(f'#include "{source_path(filename)}"\n')
        result = _nvcc(wrapper, "sm_90", tmp_path / "x.ptx")
        assert result.returncode != 0 and "compile_options" in result.stderr, filename
    shared_only = [f"-D{name}={value}" for name, value in _sources.SHARED_DEFINES.items()]
    result = _nvcc(wrapper, "sm_90", tmp_path / "x.ptx", *shared_only)
    assert result.returncode != 0 and "CS_TX_BLOCKS, CS_TX_STAGES" in result.stderr


def test_configurations_cover_every_overridable_value():
    """The PTX check compiles every value of every per-configuration constant, and the extremes together."""
    for name, (files, values) in OVERRIDABLE.items():
        assert DEFINES[name] in values, name
        for filename in files:
            assert filename in KERNELS
            compiled = {dict(o).get(name, DEFINES[name]) for f, o in _configurations() if f == filename}
            assert compiled == set(values), (name, filename)


def test_overrides_are_checked_and_normalised():
    """Defaults drop out (one module for the default configuration); other files' constants and values are refused."""
    assert normalize_overrides("conv2d.cu", {"CS_RT_PX": DEFINES["CS_RT_PX"]}) == ()
    px, py = (next(v for v in OVERRIDABLE[n][1] if v != DEFINES[n]) for n in ("CS_DW_PX", "CS_DW_PY"))
    assert normalize_overrides("depthwise.cu", [("CS_DW_PY", py), ("CS_DW_PX", px)]) == (
        ("CS_DW_PX", px),
        ("CS_DW_PY", py),
    )
    assert normalize_overrides("depthwise.cu", [("CS_DW_PY", DEFINES["CS_DW_PY"]), ("CS_DW_PX", px)]) == (
        ("CS_DW_PX", px),
    )
    assert "-DCS_RT_PX=8" in compile_options("conv2d.cu", (("CS_RT_PX", 8),))
    assert f"-DCS_RT_PX={DEFINES['CS_RT_PX']}" in compile_options("conv2d.cu")
    # A source gets the shared constants and its own (with those of the source it includes), no others.
    assert set(compile_options("conv2d_masked.cu")) == {
        f"-D{name}={DEFINES[name]}" for name in ("CS_THREADS", "CS_CONST_BYTES", "CS_TX_PROMOTE", "CS_RT_PX")
    }
    with pytest.raises(ValueError, match=r"CS_RT_PX is not a per-configuration constant of pointwise.cu"):
        normalize_overrides("pointwise.cu", {"CS_RT_PX": 2})
    with pytest.raises(ValueError, match=r"CS_GEMM_BM is not a per-configuration constant of implicit_gemm.cu"):
        normalize_overrides("implicit_gemm.cu", {"CS_GEMM_BM": 128})
    with pytest.raises(ValueError, match=r"-DCS_RT_PX accepts 1, 2, 4, 8; got 3"):
        normalize_overrides("conv2d.cu", {"CS_RT_PX": 3})
    with pytest.raises(ValueError, match=r"got 2.0"):
        normalize_overrides("conv2d.cu", {"CS_RT_PX": 2.0})


def test_shared_constants_are_not_redefined_in_the_sources():
    """No .cu or .cuh file defines a constant that DEFINES provides."""
    for path in [*ALGORITHMS_DIR.glob("*.cu"), *HEADERS_DIR.glob("*.cuh")]:
        text = path.read_text()
        for name in DEFINES:
            assert f"#define {name}" not in text, f"{path.name} redefines {name}"


def test_a_built_wheel_ships_every_source(tmp_path):
    """An installed, non-editable copy finds every .cu: check the wheel pip builds."""
    # Only the shipped files matter here: build without requiring the extension.
    env_flags = {"CONVSUITE_PORTABLE_BUILD": "1", "CONVSUITE_REQUIRE_EXTENSION": "0"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **env_flags},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = tmp_path.glob("convsuite-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for filename in KERNELS:
        assert f"convsuite/backends/cupy/algorithms/{filename}" in names
    for header in ("common.cuh", "tf32x3.cuh"):
        assert f"convsuite/backends/cupy/include/{header}" in names
    assert "convsuite/bench/workloads.json" in names
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)], check=True
    )
    code = (
        "import convsuite.backends.cupy._catalog as c, convsuite.backends.cupy._sources as s, sys;"
        "assert all(str(s.source_path(f)).startswith(sys.argv[1]) for f in c.KERNELS), s.include_dirs();"
        "[s.compile_source(f) for f in c.KERNELS]"
    )
    subprocess.run([sys.executable, "-c", code, str(target)], check=True, cwd=tmp_path, env={"PYTHONPATH": str(target)})


def test_compile_source_names_each_included_header_by_its_hash(tmp_path, monkeypatch):
    """CuPy's disk cache keys a module by its source text, not the headers NVRTC reads through -I:
    the compiled text ends with each included header's hash, so an edited header is a new key."""
    import hashlib

    # Headers beyond common.cuh, written out here (not read from the sources' #include lines).
    shared_headers = {f: ["tf32x3.cuh"] for f in ("implicit_gemm_tf32x3.cu", "tf32x3_image.cu", "tf32x3_wgmma.cu")}
    for filename in KERNELS:
        text = _sources.compile_source(filename)
        source = _sources.source_text(filename)
        assert text.startswith(source)  # line numbers of messages unchanged
        headers = ["common.cuh", *shared_headers.get(filename, [])]
        if filename.endswith("_masked.cu"):  # includes its plain source, hashed too
            headers.append(filename.replace("_masked.cu", ".cu"))
        expected = []
        for header in sorted(headers):
            expected += ["//", header, "sha256", hashlib.sha256(source_path(header).read_bytes()).hexdigest()]
        assert text[len(source) :].split() == expected, filename
    headers, sources = tmp_path / "include", tmp_path / "algorithms"
    shutil.copytree(INCLUDE_DIR, headers)
    sources.mkdir()
    for filename in KERNELS:
        shutil.copy(source_path(filename), sources / filename)
    monkeypatch.setattr(_sources, "include_dirs", lambda: (headers, sources))
    assert source_path("conv2d.cu") == sources / "conv2d.cu"
    before = _sources.compile_source("conv2d.cu")
    with open(headers / "common.cuh", "a") as header:
        header.write("\n// an edit\n")
    after = _sources.compile_source("conv2d.cu")
    assert before != after and before.splitlines()[:-1] == after.splitlines()[:-1]
    # A masked module reads common.cuh through its plain source: an edit to either is a new key.
    masked = _sources.compile_source("implicit_gemm_masked.cu")
    with open(headers / "common.cuh", "a") as header:
        header.write("\n// another edit\n")
    assert _sources.compile_source("implicit_gemm_masked.cu") != masked
    masked = _sources.compile_source("implicit_gemm_masked.cu")
    with open(sources / "implicit_gemm.cu", "a") as plain:
        plain.write("\n// an edit\n")
    assert _sources.compile_source("implicit_gemm_masked.cu") != masked


def test_grid_stride_loops_take_64_bit_indices_before_an_int_could_overflow():
    """A ``|I`` kernel's loop index reaches up to total + stride - 1: the int instantiation only while that
    fits in 31 bits (a total just under 2^31 with a large grid's stride would wrap to negative indices)."""
    from convsuite.backends._cupy_runtime import needs_wide_index

    limit, stride = 2**31 - 1, 132 * 32 * 256
    assert not needs_wide_index(1000, stride)
    assert not needs_wide_index(limit - stride, stride)
    assert needs_wide_index(limit - stride + 1, stride)
    assert needs_wide_index(limit - 1, stride)  # the old rule (total >= 2^31 - 1) took int here
    assert needs_wide_index(2**40, stride)
    assert "depthwise_forward<float, 3, 2, 0, long long>" in name_expressions("depthwise.cu")
