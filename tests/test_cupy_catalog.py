"""The cupy backend's algorithm modules and the tables derived from them, without a GPU.

One place per algorithm: each module of ``convsuite/backends/cupy/algorithms`` declares its records
(``ALGORITHMS``) with every flag, and its ``.cu`` sources beside it; every table the backend reads is
derived from those records (``_catalog``). Checked here: a record cannot leave a flag out, the tables
are what the records say, the records agree with the ``.cu`` files they name (kernel templates,
``-D`` constants), each plan launches only kernels of the sources its record lists (a recording
stand-in for the CUDA runtime), and a new module in the package is discovered by its name alone.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import convsuite as cs
from convsuite.backends import _cupy_runtime as rt
from convsuite.backends import cupy_backend
from convsuite.backends.base import Algorithm
from convsuite.backends.cupy import _catalog as catalog
from convsuite.backends.cupy import _sources
from convsuite.backends.cupy._record import CudaAlgorithm
from convsuite.backends.cupy._sources import SHARED_DEFINES, CudaSource
from convsuite.backends.cupy_backend import CupyBackend

#: The fields a CUDA record adds to Algorithm: each must be declared by every record.
FLAGS = ("sources", "plan_activation", "plan_relu_mask", "ieee_padding", "calls_cublas")


def _spec(x_shape, w_shape, dtype=np.float32, **kw):
    return cs.explain(np.ones(x_shape, dtype), np.ones(w_shape, dtype), backend="numpy", **kw).spec


SPECS = [
    _spec((2, 3, 9, 8), (4, 3, 3, 3), padding=1),
    _spec((2, 64, 20, 20), (200, 64, 3, 3), padding=1),
    _spec((2, 40, 9, 9), (12, 40, 1, 1)),
    _spec((2, 6, 15, 16), (10, 6, 3, 3), stride=2, padding=1),
    _spec((2, 6, 15, 13), (12, 1, 3, 3), groups=6, padding=1),
    _spec((1, 3, 11, 12), (3, 1, 3, 2), groups=3, dilation=2, padding=1),
    _spec((1, 960, 7, 7), (160, 960, 1, 1)),
    _spec((2, 12, 22, 22), (24, 12, 5, 5), np.float64),
    _spec((2, 3, 40), (5, 3, 4), padding="full"),
    _spec((2, 1, 5000), (16, 1, 31)),
]


def test_every_algorithm_module_declares_its_records():
    """Each discovered module holds ALGORITHMS, CudaAlgorithm records; together they are the backend's table."""
    assert catalog.MODULES, "no algorithm module discovered"
    names = []
    for module in catalog.MODULES:
        assert module.__name__.startswith("convsuite.backends.cupy.algorithms.")
        assert not module.__name__.rpartition(".")[2].startswith("_")
        assert isinstance(module.ALGORITHMS, tuple) and module.ALGORITHMS, module.__name__
        assert all(isinstance(r, CudaAlgorithm) for r in module.ALGORITHMS), module.__name__
        names += [r.name for r in module.ALGORITHMS]
    assert len(names) == len(set(names))
    assert set(names) == set(catalog.RECORDS) == set(CupyBackend().algorithm_table())
    assert set(catalog.ALGORITHMS) == set(names) and catalog.ALGORITHMS == CupyBackend.algorithms
    one_d = [n for n in catalog.ALGORITHMS if catalog.RECORDS[n].ndims == (1,)]
    assert list(catalog.ALGORITHMS[-len(one_d) :]) == one_d  # 2-D first
    assert catalog.ALGORITHMS[0] == "direct"  # the backend's first algorithm, as before the modules


@pytest.mark.parametrize("missing", FLAGS)
def test_a_record_that_leaves_out_a_flag_does_not_import(missing):
    """Every flag is keyword-only with no default: leaving one out is a TypeError naming it."""
    given = dict(
        name="toy",
        summary="a toy",
        plan=lambda spec, direction: None,
        sources=catalog.RECORDS["direct"].sources,
        plan_activation=None,
        plan_relu_mask=None,
        ieee_padding=(),
        calls_cublas=False,
    )
    CudaAlgorithm(**given)  # complete: accepted
    del given[missing]
    with pytest.raises(TypeError, match=missing):
        CudaAlgorithm(**given)
    own = {f.name for f in dataclasses.fields(CudaAlgorithm)} - {f.name for f in dataclasses.fields(Algorithm)}
    assert own == set(FLAGS)
    flags = [f for f in dataclasses.fields(CudaAlgorithm) if f.name in own]
    assert all(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING for f in flags)
    assert all(f.kw_only for f in flags)


def test_bad_flags_are_refused_with_the_reason():
    base = dict(name="toy", summary="a toy", plan=lambda spec, direction: None, plan_relu_mask=None, calls_cublas=False)
    with pytest.raises(TypeError, match="`sources` must list the CudaSource"):
        CudaAlgorithm(**base, sources=(), plan_activation=None, ieee_padding=())
    with pytest.raises(ValueError, match="`ieee_padding` must be directions"):
        CudaAlgorithm(**base, sources=catalog.SOURCES[:1], plan_activation=None, ieee_padding=("sideways",))
    with pytest.raises(ValueError, match="`plan_activation` needs a forward direction"):
        CudaAlgorithm(
            **base,
            sources=catalog.SOURCES[:1],
            plan_activation=lambda s, p, a: None,
            ieee_padding=(),
            directions=("backward",),
        )


def test_the_side_tables_are_the_records_flags():
    """Each table the backend reads is what the records declare, and the backend answers from the records."""
    records = catalog.RECORDS
    files = {}
    for record in records.values():
        for source in record.sources:
            for each in (*source.includes, source):
                files[each.filename] = each
    assert catalog.KERNELS == {name: list(source.kernels) for name, source in files.items()}
    assert set(catalog.SOURCES) == set(files.values())
    assert (
        catalog.ARCH_TARGETS == {name: s.arch for name, s in files.items() if s.arch} == {"tf32x3_wgmma.cu": "sm_90a"}
    )
    assert catalog.DEFINES == {**SHARED_DEFINES, **{k: v for s in files.values() for k, v in s.defines.items()}}
    for name, (where, values) in catalog.OVERRIDABLE.items():
        assert set(where) == {f for f, s in files.items() if name in s.overridable}
        assert all(files[f].overridable[name] == values for f in where)
    assert catalog.FUSED_ACTIVATION == tuple(n for n, r in records.items() if r.plan_activation is not None)
    assert catalog.FUSED_RELU_MASK == tuple(n for n, r in records.items() if r.plan_relu_mask is not None)
    assert (
        catalog.CALLS_CUBLAS == {n for n, r in records.items() if r.calls_cublas} == {"im2col_gemm", "pointwise_gemm"}
    )
    backend = CupyBackend()
    backend.relu_mask_in_kernels = True
    for name, record in records.items():
        assert backend.fuses_activation(SPECS[0], name, "relu") == (name in catalog.FUSED_ACTIVATION)
        assert backend.fuses_relu_mask(SPECS[0], name) == (name in catalog.FUSED_RELU_MASK)
        assert record.kernels == {s.filename: s.kernels for s in record.sources}
        for spec in SPECS:
            for direction in ("forward", "backward"):
                assert backend.ieee_padding(spec, name, direction) == record.multiplies_padding(spec, direction)
    # depthwise multiplies padding zeros forward where its kernel size and stride are compiled in only
    assert backend.ieee_padding(SPECS[4], "depthwise", "forward") and not backend.ieee_padding(
        SPECS[5], "depthwise", "forward"
    )


def test_cublas_algorithms_are_declined_under_graph_capture(monkeypatch):
    monkeypatch.setattr(cupy_backend, "capturing", lambda: True)
    backend = CupyBackend()
    for name in catalog.ALGORITHMS:
        verdict = backend.can_run(SPECS[2], name, "forward")
        assert ("cuBLAS" in str(verdict)) == (name in catalog.CALLS_CUBLAS), name


def _text_with_includes(source: CudaSource) -> str:
    """The source's text and that of every file it includes (shared headers too)."""
    text = source.path.read_text()
    for name in re.findall(r'#\s*include\s+"([^"]+)"', text):
        text += _sources.source_path(name).read_text()
    for name in re.findall(r'#\s*include\s+"([^"]+)"', text):
        text += _sources.source_path(name).read_text()
    return text


@pytest.mark.parametrize("source", catalog.SOURCES, ids=lambda s: s.filename)
def test_each_source_record_matches_its_file(source):
    """The kernel templates a record names are defined in the file, the -D constants its text reads are
    the shared ones or the record's, and each constant the record declares is read somewhere."""
    own = source.path.read_text()
    text = _text_with_includes(source)
    for kernel in source.kernels:
        base = kernel.partition("|")[0].partition("@")[0]
        assert re.search(rf"\b{base}\s*\(", text), f"{kernel} is not defined in {source.filename}"
    read = set(re.findall(r"\bCS_[A-Z0-9_]+\b", re.sub(r"//[^\n]*", "", text))) - {"CS_REQUIRE_ARCH_FEATURES"}
    read -= {name for name in read if re.search(rf"#\s*define\s+{name}\b", text)}  # macros the file defines itself
    provided = {*SHARED_DEFINES, *source.constants()}
    assert read <= provided, f"{source.filename} reads {sorted(read - provided)}, which its record does not give"
    assert set(source.defines) <= set(re.findall(r"\bCS_[A-Z0-9_]+\b", own)) | read, source.filename
    assert source.path.parent.name == "algorithms" and source.path.is_file()


class _Recorder:
    """Stands in for the CUDA runtime: every kernel a plan asks for."""

    def __init__(self):
        self.requests = []

    def kernel(self, filename, name, dtype, total=None, overrides=()):
        self.requests.append((filename, name if total is None else f"{name}|I"))  # as rt.kernel names it
        return types.SimpleNamespace(kernel=types.SimpleNamespace(ptr=0))


class _PerStream:
    def __init__(self, make):
        self.make = make


def _recording(monkeypatch) -> _Recorder:
    recorder = _Recorder()
    fake_cupy = types.SimpleNamespace(
        empty=lambda shape, dtype=None: np.zeros(shape, dtype),
        zeros=lambda shape, dtype=None: np.zeros(shape, dtype),
        asarray=np.asarray,
        uint32=np.uint32,
        cuda=types.SimpleNamespace(get_current_stream=lambda: None),
    )
    for name, value in (
        ("kernel", recorder.kernel),
        ("bind", lambda *a, **kw: None),
        ("cupy", lambda: fake_cupy),
        ("sm_count", lambda: 132),
        ("sm_count_or_none", lambda: 132),
        ("resident_blocks", lambda fn, threads, smem: 2),
        ("shared_memory_optin", lambda: 227 * 1024),
        ("compute_capability", lambda: 90),
        ("PerStream", _PerStream),
    ):
        monkeypatch.setattr(rt, name, value)
    return recorder


@pytest.mark.parametrize("name", catalog.ALGORITHMS)
def test_each_plan_launches_only_kernels_of_its_records_sources(name, monkeypatch):
    """``sources`` is complete: every kernel a plan of the record asks for (plain, fused activation, through
    a ReLU mask; every direction and case it runs) is a kernel of one of the sources it lists."""
    recorder = _recording(monkeypatch)
    record = catalog.RECORDS[name]
    backend = CupyBackend()
    planned = 0
    for spec in SPECS:
        for direction in record.directions:
            if backend.can_run(spec, name, direction) is not True:
                continue
            record.build(spec, direction)
            if direction == "forward" and record.fuses_activation:
                catalog.plan_forward_activation(spec, name, "relu6")
            if direction == "backward" and record.fuses_relu_mask:
                catalog.plan_backward_relu(spec, name)
            planned += 1
    assert planned, f"no case of SPECS runs {name}"
    assert recorder.requests or name == "pointwise_gemm"  # cuBLAS only (its bias gradient: backward)
    for filename, kernel in recorder.requests:
        assert filename in record.kernels, f"{name} launches {filename}, which its record does not list"
        assert kernel in record.kernels[filename], f"{name} launches {kernel} of {filename}"


TOY_MODULE = '''
"""A toy algorithm: one thread per output, written to show what adding an algorithm takes."""

from pathlib import Path

from convsuite.backends.cupy._record import CudaAlgorithm
from convsuite.backends.cupy._sources import CudaSource

TOY_CU = CudaSource("toy_scratch.cu", Path(__file__).parent, ("toy_copy|I",), defines={"CS_TOY_SCALE": 2})


def _plan(spec, direction):
    raise NotImplementedError("planned only on a GPU")


ALGORITHMS = (
    CudaAlgorithm(
        name="toy",
        summary="a toy: one thread per output",
        plan=_plan,
        sources=(TOY_CU,),
        plan_activation=None,
        plan_relu_mask=None,
        ieee_padding=(),
        calls_cublas=False,
    ),
)
'''

TOY_CU = """
#include "common.cuh"
template <typename T, typename I>
__global__ void toy_copy(const T* __restrict__ x, T* __restrict__ y, I n) {
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x)
        y[i] = CS_TOY_SCALE * x[i];
}
"""


@pytest.fixture
def toy_package(tmp_path, monkeypatch):
    """A package of algorithm modules in ``tmp_path``: the toy, a helper module and the toy's .cu beside it."""
    package = tmp_path / "scratch_algorithms"
    package.mkdir()
    (package / "__init__.py").write_text('"""Scratch algorithms."""\n')
    (package / "_helpers.py").write_text('"""Not an algorithm module (underscore)."""\n')
    (package / "toy.py").write_text(textwrap.dedent(TOY_MODULE))
    (package / "toy_scratch.cu").write_text(TOY_CU)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_sources, "_registry", dict(_sources._registry))  # the toy's source leaves no trace
    yield package
    for name in [m for m in sys.modules if m.startswith("scratch_algorithms")]:
        del sys.modules[name]


def test_a_new_module_is_discovered_by_its_name_alone(toy_package):
    """Adding an algorithm is one module and its .cu: discovered, its tables derived, nothing registered."""
    import scratch_algorithms

    modules = catalog.algorithm_modules(scratch_algorithms)
    assert [m.__name__ for m in modules] == ["scratch_algorithms.toy"]
    records = catalog.records_of((*catalog.MODULES, *modules))
    assert list(records)[-1] == "toy" and set(records) == {*catalog.RECORDS, "toy"}
    sources = catalog.sources_of(records.values())
    assert {s.filename: list(s.kernels) for s in sources}["toy_scratch.cu"] == ["toy_copy|I"]
    assert catalog.defines_of(sources)["CS_TOY_SCALE"] == 2
    assert _sources.name_expressions("toy_scratch.cu") == [
        "toy_copy<float, int>",
        "toy_copy<float, long long>",
        "toy_copy<double, int>",
        "toy_copy<double, long long>",
    ]
    assert "-DCS_TOY_SCALE=2" in _sources.compile_options("toy_scratch.cu")
    assert toy_package in _sources.include_dirs()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found: CUDA sources not compiled")
def test_a_new_modules_kernel_compiles_with_its_records_options(toy_package, tmp_path):
    import scratch_algorithms

    catalog.algorithm_modules(scratch_algorithms)
    wrapper = tmp_path / "toy_all.cu"
    lines = [f'#include "{_sources.source_path("toy_scratch.cu")}"', "void instantiate() {"]
    wrapper.write_text("\n".join([*lines, *(f"(void)&{n};" for n in _sources.name_expressions("toy_scratch.cu")), "}"]))
    command = ["nvcc", "-std=c++17", "-arch=sm_90", "-ptx", *_sources.compile_options("toy_scratch.cu")]
    command += [*(f"-I{d}" for d in _sources.include_dirs()), str(wrapper), "-o", str(tmp_path / "toy.ptx")]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "toy_copy" in (tmp_path / "toy.ptx").read_text()


def test_discovery_refuses_a_module_without_records_and_a_name_taken_twice(toy_package):
    import scratch_algorithms

    (toy_package / "broken.py").write_text('"""Declares no ALGORITHMS."""\n')
    with pytest.raises(TypeError, match=r"scratch_algorithms.broken must declare `ALGORITHMS`"):
        catalog.records_of(catalog.algorithm_modules(scratch_algorithms))
    (toy_package / "broken.py").unlink()
    (toy_package / "twice.py").write_text("from .toy import ALGORITHMS\n")
    with pytest.raises(ValueError, match=r"two cupy algorithms are named 'toy'"):
        catalog.records_of(catalog.algorithm_modules(scratch_algorithms))


def test_a_source_is_checked_when_declared():
    with pytest.raises(ValueError, match="redefines shared constants CS_THREADS"):
        CudaSource("scratch_a.cu", ".", ("k",), defines={"CS_THREADS": 128})
    with pytest.raises(ValueError, match="overridable CS_X is none of its `defines`"):
        CudaSource("scratch_b.cu", ".", ("k",), overridable={"CS_X": (1, 2)})
    with pytest.raises(ValueError, match=r"the default CS_X=3 is not among its overridable values \(1, 2\)"):
        CudaSource("scratch_c.cu", ".", ("k",), defines={"CS_X": 3}, overridable={"CS_X": (1, 2)})
    with pytest.raises(ValueError, match="two different CUDA sources are named 'conv2d.cu'"):
        CudaSource("conv2d.cu", ".", ("k",))
    with pytest.raises(KeyError, match="'nowhere.cu' is not a declared CUDA source"):
        _sources.declared("nowhere.cu")
