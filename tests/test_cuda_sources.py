"""The CUDA sources without a GPU: shipped in the package, and compiling (nvcc -ptx)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from convsuite.backends._cuda_sources import DEFINES, KERNELS, compile_options, name_expressions, source_dir

REPO = Path(__file__).resolve().parents[1]


def test_every_source_file_is_listed_and_present():
    on_disk = {p.name for p in (REPO / "cuda_src").glob("*.cu")}
    assert on_disk == set(KERNELS)
    assert {p.name for p in source_dir().glob("*.cu")} == set(KERNELS)
    assert (source_dir() / "common.cuh").is_file()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found: CUDA sources not compiled")
@pytest.mark.parametrize("filename", sorted(KERNELS))
def test_sources_compile_to_ptx(filename, tmp_path):
    """Instantiate every kernel the backend uses, for float and double, and compile to PTX."""
    lines = [f'#include "{source_dir() / filename}"', "void convsuite_instantiate_all() {"]
    lines += [f"    (void)&{name};" for name in name_expressions(filename)]
    lines.append("}")
    wrapper = tmp_path / f"instantiate_{filename}"
    wrapper.write_text("\n".join(lines) + "\n")
    ptx = tmp_path / "out.ptx"
    result = subprocess.run(
        ["nvcc", "-std=c++17", "-arch=sm_90", "-ptx", *compile_options(), f"-I{source_dir()}", str(wrapper), "-o", str(ptx)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    text = ptx.read_text()
    for kernel in KERNELS[filename]:
        assert kernel.partition("|")[0].partition("@")[0] in text, f"{kernel} missing from the PTX"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found: CUDA sources not compiled")
def test_sources_refuse_to_compile_without_the_shared_constants(tmp_path):
    """The constants come from DEFINES only: a source compiled without them stops with an error."""
    wrapper = tmp_path / "no_defines.cu"
    wrapper.write_text(f'#include "{source_dir() / "conv2d.cu"}"\n')
    result = subprocess.run(
        ["nvcc", "-std=c++17", "-arch=sm_90", "-ptx", f"-I{source_dir()}", str(wrapper), "-o", str(tmp_path / "x.ptx")],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0 and "compile_options" in result.stderr


def test_shared_constants_are_not_redefined_in_the_sources():
    """No .cu or .cuh file defines a constant that DEFINES provides."""
    for path in [*(REPO / "cuda_src").glob("*.cu"), REPO / "cuda_src" / "common.cuh"]:
        text = path.read_text()
        for name in DEFINES:
            assert f"#define {name}" not in text, f"{path.name} redefines {name}"


def test_a_built_wheel_ships_every_source(tmp_path):
    """An installed, non-editable copy finds every .cu: check the wheel pip builds."""
    # Only the shipped files matter here: build without requiring the extension.
    env_flags = {"CONVSUITE_PORTABLE_BUILD": "1", "CONVSUITE_REQUIRE_EXTENSION": "0"}
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        env={**os.environ, **env_flags},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = tmp_path.glob("convsuite-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for filename in [*KERNELS, "common.cuh"]:
        assert f"convsuite/cuda_src/{filename}" in names
    assert "convsuite/bench/workloads.json" in names
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)], check=True)
    code = (
        "import convsuite.backends._cuda_sources as s, sys;"
        "assert str(s.source_dir()).startswith(sys.argv[1]), s.source_dir();"
        "[s.source_text(f) for f in s.KERNELS]"
    )
    subprocess.run([sys.executable, "-c", code, str(target)], check=True, cwd=tmp_path, env={"PYTHONPATH": str(target)})
