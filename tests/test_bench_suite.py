"""The asv suite: every file's parameters written out, skips that say why, and environments that
carry every dependency of the rungs and anchors (one source of truth with pyproject.toml)."""

from __future__ import annotations

import ast
import importlib
import json
import math
import operator
import os
import re
from pathlib import Path

import pytest

import convsuite as cs
from convsuite.bench.workloads import get_workload

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
#: Every file of the suite, found on disk (never a hand-kept list).
FILES = sorted((ROOT / "benchmarks").glob("*.py"))
MODULES = [f"benchmarks.{path.stem}" for path in FILES if path.stem != "__init__"]


# --- parameters: written out in the files, never computed at import --------------------------------


class Computed(Exception):
    """A parameter list that is not written out (a call, an attribute, a comprehension...)."""


def _top_level_literals(path: Path) -> dict[str, ast.expr]:
    """Name -> expression of every top-level assignment of a file, and the names it imports from .common."""
    tree = ast.parse(path.read_text(), str(path))
    found: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found[node.target.id] = node.value
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module == "common":
            common = _top_level_literals(path.parent / "common.py")
            for alias in node.names:
                if alias.name in common:
                    found[alias.asname or alias.name] = common[alias.name]
    return found


#: Operators of constant expressions (``10**6``, ``BACKENDS + ["new"]``).
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Pow: operator.pow}


def _written_out(node: ast.expr, names: dict[str, ast.expr], where: str):
    """The value of a parameter expression built only from literals and names bound to literals.

    Allowed: constants, list/tuple/dict/set displays, a name bound at the top of
    the file (or imported from ``common``) to such a value, ``list(...)`` /
    ``tuple(...)`` of one (a dict gives its keys), ``+ - * **`` of two and a
    unary minus. Anything else computes the list when the file is imported, from
    whatever is installed then, and raises :class:`Computed`.
    """
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        values = [_written_out(e, names, where) for e in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](values)
    if isinstance(node, ast.Dict):
        return {_written_out(k, names, where): _written_out(v, names, where) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Name) and node.id in names:
        return _written_out(names[node.id], names, where)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("list", "tuple")
        and len(node.args) == 1
        and not node.keywords
    ):
        return {"list": list, "tuple": tuple}[node.func.id](_written_out(node.args[0], names, where))
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        return _ARITHMETIC[type(node.op)](_written_out(node.left, names, where), _written_out(node.right, names, where))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_written_out(node.operand, names, where)
    raise Computed(f"{where}: `{ast.unparse(node)}` is computed at import; write the parameter values out")


def _declared_params(path: Path) -> dict[str, object]:
    """Qualified name -> statically read ``params`` of every benchmark class or function of one file."""
    tree = ast.parse(path.read_text(), str(path))
    names = _top_level_literals(path)
    found = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "params" for t in item.targets
                ):
                    found[node.name] = _written_out(item.value, names, f"{path.name}: {node.name}.params")
        elif isinstance(node, ast.Assign):
            for target in node.targets:  # function benchmarks: ``f.params = ...``
                if isinstance(target, ast.Attribute) and target.attr == "params":
                    where = f"{path.name}: {ast.unparse(target)}"
                    found[ast.unparse(target.value)] = _written_out(node.value, names, where)
    return found


def _runtime_params(module_name: str) -> dict[str, object]:
    """Qualified name -> ``params`` of every parameterised benchmark defined in an imported module."""
    module = importlib.import_module(module_name)
    found = {}
    for attr, obj in vars(module).items():
        if getattr(obj, "__module__", None) == module_name and getattr(obj, "params", None):
            found[attr] = obj.params
    return found


def test_the_suite_is_every_file_of_the_folder():
    assert {"benchmarks.common", "benchmarks.bench_conv", "benchmarks.bench_ratios"} <= set(MODULES)
    parameterised = [m for m in MODULES if _runtime_params(m)]
    assert set(parameterised) == {m for m in MODULES if m != "benchmarks.common"}, "a bench file without params?"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_parameters_are_written_out_in_the_file(path):
    """Read from the source, not run: a list from list_backends() or any other call fails here."""
    declared = _declared_params(path)
    if path.stem == "__init__":
        assert declared == {}
        return
    runtime = _runtime_params(f"benchmarks.{path.stem}")
    assert set(declared) == set(runtime), "params set outside a class body or a top-level assignment"
    for name, params in declared.items():
        assert runtime[name] == params, f"{path.name}: {name}.params changes after the file is read"


def test_a_parameter_computed_at_import_is_caught(tmp_path):
    """The reader itself: the regression this guards against (bench_nets once read list_backends())."""
    (tmp_path / "common.py").write_text('BACKENDS = ["numpy", "numba"]\nLAYERS = {"a": 1, "b": 2}\n')
    good = tmp_path / "bench_good.py"
    good.write_text(
        "from .common import BACKENDS, LAYERS\nCASES = {'x': (1, 2)}\n"
        "class A:\n    params = (BACKENDS + ['cupy'], list(LAYERS), list(CASES), [-1, 0.5, 10**3])\n"
        "def time_f(n):\n    pass\ntime_f.params = [1, 2]\n"
    )
    assert _declared_params(good) == {
        "A": (["numpy", "numba", "cupy"], ["a", "b"], ["x"], [-1, 0.5, 1000]),
        "time_f": [1, 2],
    }
    for computed in (
        "[b.name for b in cs.list_backends()]",
        "cs.list_backends()",
        "(sorted(LAYERS),)",
        "(list(range(os.cpu_count())),)",
        "(LAYERS.keys(),)",
    ):
        bad = tmp_path / "bench_bad.py"
        bad.write_text(f"import convsuite as cs\nfrom .common import LAYERS\nclass B:\n    params = {computed}\n")
        with pytest.raises(Computed, match=r"bench_bad.py: B.params: .* is computed at import"):
            _declared_params(bad)


def test_parameters_do_not_depend_on_what_is_installed(monkeypatch):
    """Reload the whole suite in a world where list_backends() fails: the lists must not move."""
    before = {m: _runtime_params(m) for m in MODULES}

    def no_backends():
        raise AssertionError("the benchmark parameters must not be computed from list_backends()")

    monkeypatch.setattr(cs, "list_backends", no_backends)
    try:
        for name in MODULES:
            importlib.reload(importlib.import_module(name))
        after = {m: _runtime_params(m) for m in MODULES}
    finally:
        monkeypatch.undo()
        for name in MODULES:
            importlib.reload(importlib.import_module(name))
    assert before == after


@pytest.mark.parametrize("module", MODULES)
def test_parameter_names_match_and_values_are_distinct(module):
    for name, params in _runtime_params(module).items():
        lists = params if isinstance(params, tuple) else (params,)
        obj = getattr(importlib.import_module(module), name)
        names = getattr(obj, "param_names", None)
        assert names is None or len(names) == len(lists), f"{module}.{name}: param_names and params differ"
        for values in lists:
            assert values and len(set(map(repr, values))) == len(values), f"{module}.{name}: {values}"


def test_backend_list_is_append_only_and_complete():
    from benchmarks.common import BACKENDS

    # The history: these five in this order, forever; new names go after them.
    assert BACKENDS[:5] == ["cupy", "numba", "cython", "numpy", "python"]
    assert len(set(BACKENDS)) == len(BACKENDS)
    missing = {b.name for b in cs.list_backends()} - set(BACKENDS)
    assert not missing, f"append {sorted(missing)} to benchmarks.common.BACKENDS"


def test_cases_follow_the_compare_presets():
    from benchmarks.common import DEFAULT_BACKWARD, DEFAULT_FORWARD

    labels = {c.label for c in get_workload("default")}
    forward = {c.label for c in get_workload("default") if c.direction == "forward"}
    assert forward <= set(DEFAULT_FORWARD), "append new default-workload cases to DEFAULT_FORWARD"
    assert labels - forward <= set(DEFAULT_BACKWARD)


def test_seed_layers_are_the_workload_files_layers():
    """The shapes written out in common.SEED_LAYERS are those of the seed reports (workloads.json)."""
    from benchmarks.common import SEED_LAYERS
    from convsuite.bench.workloads import layer

    for name, workload in (("fa19", "ece408-fa19"), ("fa21", "ece408-fa21")):
        for conv in ("conv1", "conv2"):
            entry = layer(workload, conv)
            x_shape, w_shape, keywords, _ = SEED_LAYERS[f"{name}-{conv}"]
            assert x_shape == (entry["C"], entry["H"], entry["W"])
            assert w_shape == (entry["M"], entry["C"], entry["K"], entry["K"]) and keywords == {}


# --- skips say why --------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["no-such-backend", "cupy"])
def test_missing_or_unavailable_backend_skips(backend):
    from benchmarks.bench_conv import Conv2DForward

    info = {b.name: b for b in cs.list_backends()}.get(backend)
    if info is not None and info.available:
        pytest.skip(f"{backend} is available here")
    with pytest.raises(NotImplementedError):
        Conv2DForward().setup(backend, "fa21-conv1 B=16", "float32")


def test_slow_backend_and_unknown_case_skip():
    from benchmarks.bench_backward import Conv2DBackwardPreset
    from benchmarks.bench_conv import Conv2DForward

    with pytest.raises(NotImplementedError, match="too slow"):
        Conv2DForward().setup("python", "3x3 C16->32 32x32 B=8", "float32")
    with pytest.raises(NotImplementedError, match="no case"):
        Conv2DBackwardPreset().setup("numpy", "a case that was renamed", "float32")


def test_a_benchmark_runs_and_times_the_right_call():
    from benchmarks.bench_backward import Conv2DBackwardPreset
    from benchmarks.bench_overhead import CallOverhead

    bench = Conv2DBackwardPreset()
    bench.setup("numpy", "fa21-conv1 B=16 backward", "float32")
    grads = bench.call()
    assert [g.shape for g in grads] == [(16, 1, 86, 86), (4, 1, 7, 7), (4,)]
    bench.time_backward("numpy", "fa21-conv1 B=16 backward", "float32")
    tiny = CallOverhead()
    tiny.setup("python", "conv1d N=64 K=3 same")
    assert tiny.call().shape == (64,)


def test_gpu_benchmarks_skip_without_a_gpu_and_say_why():
    if cs.get_backend("cupy").available() is True:
        pytest.skip("a GPU is here: the GPU benchmarks run (the device machine checks them)")
    from benchmarks.bench_gpu import BackwardAlgorithms, VsCudnn
    from benchmarks.bench_ratios import CallOverhead

    with pytest.raises(NotImplementedError, match="cupy"):
        VsCudnn().setup("forward", "fa19-conv1")
    with pytest.raises(NotImplementedError, match="cupy"):
        BackwardAlgorithms().setup("cupy", "wgrad_padded", "fa21-conv2 B=1000")
    with pytest.raises(NotImplementedError, match="cupy"):
        CallOverhead().setup("cupy", "cs.conv2d")


def test_without_torch_the_torch_ratios_skip(monkeypatch):
    import sys

    from benchmarks.bench_ratios import CallOverhead, VsTorchBackward, VsTorchForward

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what passive_openmp sets, kept out of later tests
    for bench, params in (
        (VsTorchForward(), ("numba", "fa21-conv1")),
        (VsTorchBackward(), ("auto", "fa21-conv1")),
        (CallOverhead(), ("numpy", "cs.conv2d")),
    ):
        with pytest.raises(NotImplementedError, match="torch is not installed"):
            bench.setup(*params)


# --- the track_ ratios ---------------------------------------------------------------------------


def test_passive_openmp_is_a_default_the_user_can_override(monkeypatch):
    from benchmarks.common import passive_openmp

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    passive_openmp()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    passive_openmp()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_a_ratio_is_ours_over_the_reference_from_the_measuring_core(monkeypatch):
    """Both sides go to convsuite's measure_side_by_side together (interleaved, warm-up, rounds)."""
    import benchmarks.common as common
    from convsuite._timing import Timing

    seen = {}

    def fake_measure(contenders, **settings):
        seen.update(settings, names=list(contenders))
        medians = {"ours": 3.0, "reference": 2.0}
        return {n: Timing(0.0, medians[n], medians[n], medians[n], 0.0, settings["repeat"]) for n in contenders}

    monkeypatch.setattr(common, "measuring_core", lambda: (None, fake_measure))

    class Fake(common.RatioBenchmark):
        params = ([1],)

        def build(self, n):
            return (lambda: n), (lambda: n)

        def track_it(self, n):
            return self.ratio()

    bench = Fake()
    bench.setup(1)
    assert bench.track_it(1) == 1.5
    assert seen["names"] == ["ours", "reference"] and seen["warmup"] >= 1 and seen["rounds"] > 1
    assert seen["repeat"] == common.RATIO_REPEAT


def test_a_cpu_ratio_runs_checked_and_returns_a_positive_number(monkeypatch):
    pytest.importorskip("torch", reason="torch CPU is the anchor of the ratios (make install brings it)")
    from benchmarks.bench_ratios import CallOverhead, ThreadScaling, VsTorchBackward, VsTorchForward

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what passive_openmp sets, kept out of later tests
    for bench, params in (
        (VsTorchForward(), ("numba", "fa21-conv1")),
        (VsTorchBackward(), ("auto", "dw3x3 s2 C144 56x56")),
        (CallOverhead(), ("cython", "held cs.plan")),
    ):
        bench.setup(*params)
        (track,) = [getattr(bench, n) for n in dir(bench) if n.startswith("track_")]
        value = track(*params)
        assert math.isfinite(value) and value > 0
        if hasattr(bench, "teardown"):
            bench.teardown(*params)
    from convsuite import _threads

    assert not _threads.user_set()  # CallOverhead's teardown gave the thread count back to the default
    scaling = ThreadScaling()
    if cs.get_num_threads() < 2:
        with pytest.raises(NotImplementedError, match="usable core"):
            scaling.setup("numba", "fa21-conv1")
    else:
        scaling.setup("numba", "1-D N=1e6 K=31 same")
        try:
            assert scaling.track_all_cores_vs_one("numba", "1-D N=1e6 K=31 same") > 0
        finally:
            scaling.teardown("numba", "1-D N=1e6 K=31 same")


def test_a_wrong_result_fails_the_ratio_instead_of_being_timed(monkeypatch):
    pytest.importorskip("torch", reason="torch CPU is the anchor of the ratios (make install brings it)")
    from benchmarks.bench_ratios import VsTorchForward

    real = cs.conv2d
    monkeypatch.setattr(cs, "conv2d", lambda *a, **k: real(*a, **k) * 1.01)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what passive_openmp sets, kept out of later tests
    with pytest.raises(AssertionError, match="convsuite's y"):
        VsTorchForward().setup("numba", "fa21-conv1")


def test_version_follows_what_is_measured_not_the_parameter_lists():
    """asv compares only results of equal versions: a changed build() must change it, an appended name not."""
    from benchmarks.common import ConvBenchmark, RatioBenchmark

    class First(ConvBenchmark):
        params = (["numpy"],)

        def build(self, backend):
            return lambda: cs.conv1d([1.0, 2.0], [1.0], backend=backend)

        def time_it(self, backend):
            self.run()

    class MoreParams(ConvBenchmark):
        params = (["numpy", "a-new-backend"],)

        def build(self, backend):
            return lambda: cs.conv1d([1.0, 2.0], [1.0], backend=backend)

        def time_it(self, backend):
            self.run()

    class OtherWork(ConvBenchmark):
        params = (["numpy"],)

        def build(self, backend):
            return lambda: cs.conv1d([1.0, 2.0, 3.0], [1.0], backend=backend)

        def time_it(self, backend):
            self.run()

    class FirstRatio(RatioBenchmark):
        params = (["numpy"],)

        def build(self, backend):
            return (lambda: cs.conv1d([1.0, 2.0], [1.0], backend=backend)), (lambda: None)

        def track_it(self, backend):
            return self.ratio()

    class MoreRatioParams(RatioBenchmark):
        params = (["numpy", "a-new-backend"],)

        def build(self, backend):
            return (lambda: cs.conv1d([1.0, 2.0], [1.0], backend=backend)), (lambda: None)

        def track_it(self, backend):
            return self.ratio()

    class OtherRatioWork(RatioBenchmark):
        params = (["numpy"],)

        def build(self, backend):
            return (lambda: cs.conv1d([1.0, 2.0, 3.0], [1.0], backend=backend)), (lambda: None)

        def track_it(self, backend):
            return self.ratio()

    assert First.version == MoreParams.version != OtherWork.version
    assert FirstRatio.version == MoreRatioParams.version != OtherRatioWork.version
    assert FirstRatio.version != First.version


# --- asv's environments carry every dependency of the rungs and anchors ---------------------------

#: Declared in pyproject.toml but not installed in asv's environments, each with the reason.
#: A new dependency of any rung (a backend, an extra) must go into asv.conf.json's matrix, or here.
NOT_IN_ASV = {
    "cupy-cuda13x": "the GPU rung: asv builds CPU environments; on a GPU host run `asv run --python=same` "
    "in an environment with convsuite[cuda] and torch CUDA (bench_gpu skips without them)",
    "scikit-learn": "the digits data set of `convsuite train`; no benchmark trains on it",
    "matplotlib": "plots of the compare and sweep reports; no benchmark draws",
    "asv": "the runner itself",
    "pyyaml": "`convsuite compare --cases FILE.yaml`; no benchmark reads YAML",
    "pytest": "the test suite",
    "pytest-xdist": "the test suite (its workers)",
    "sphinx": "the documentation site (make docs)",
    "numpydoc": "the documentation site (make docs)",
    "pydata-sphinx-theme": "the documentation site (make docs)",
    "hypothesis": "the test suite",
    "setuptools": "the test suite's wheel-contents test (the build has its own)",
    "ruff": "the linter",
    "mypy": "the type checker (make lint)",
}


def _asv_conf(path: Path = ROOT / "asv.conf.json") -> dict:
    """asv.conf.json, read as asv reads it: JSON with whole-line // comments."""
    text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("//"))
    return json.loads(text)


def _declared(pyproject: dict) -> dict[str, str]:
    """Canonical name -> where it is declared, for every requirement of the project and its extras."""
    project = pyproject["project"]
    own = canonicalize_name(project["name"])
    found = {canonicalize_name(Requirement(r).name): "dependencies" for r in project.get("dependencies", [])}
    for extra, requirements in project.get("optional-dependencies", {}).items():
        for text in requirements:
            name = canonicalize_name(Requirement(text).name)
            if name != own:  # convsuite[all] names the other extras
                found.setdefault(name, f"extra {extra!r}")
    return found


def missing_from_matrix(pyproject: dict, asv_conf: dict, not_in_asv: dict[str, str]) -> list[str]:
    """The declared requirements that asv's matrix lacks and no reason leaves out, and stale reasons."""
    matrix = {canonicalize_name(name) for name in asv_conf["matrix"]["req"]}
    declared = _declared(pyproject)
    excused = {canonicalize_name(name) for name in not_in_asv}
    problems = [f"{name} ({where})" for name, where in sorted(declared.items()) if name not in matrix | excused]
    problems += [f"{name}: excused but no longer declared" for name in sorted(excused - set(declared))]
    return problems


def test_asv_matrix_carries_every_declared_runtime_dependency():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    problems = missing_from_matrix(pyproject, _asv_conf(), NOT_IN_ASV)
    assert not problems, (
        "asv.conf.json's matrix lacks what pyproject.toml declares (add it to the matrix, or to NOT_IN_ASV "
        "with the reason): " + "; ".join(problems)
    )
    for name in ("numba", "threadpoolctl", "joblib", "dask", "distributed"):  # the rungs' own, by name
        assert name in _asv_conf()["matrix"]["req"]


def test_the_matrix_check_fails_on_a_new_dependency_of_a_rung():
    conf = {"matrix": {"req": {"numpy": [""], "numba": [""]}}}
    pyproject = {
        "project": {
            "name": "convsuite",
            "dependencies": ["numpy>=1.24"],
            "optional-dependencies": {"numba": ["numba>=0.59", "threadpoolctl>=3"], "all": ["convsuite[numba]"]},
        }
    }
    assert missing_from_matrix(pyproject, conf, {}) == ["threadpoolctl (extra 'numba')"]
    assert missing_from_matrix(pyproject, conf, {"threadpoolctl": "why"}) == []
    assert missing_from_matrix(pyproject, conf, {"threadpoolctl": "why", "gone": "why"}) == [
        "gone: excused but no longer declared"
    ]


def test_torch_in_asv_is_the_makefiles_cpu_pin():
    """One pin: the version that installs a CPU build (others pull a CUDA build of several GB)."""
    anchors = re.search(r"^ANCHORS \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert anchors, "the Makefile's ANCHORS line moved"
    requirement = Requirement(anchors.group(1))
    assert requirement.name == "torch"
    (pin,) = [spec.version for spec in requirement.specifier if spec.operator == "=="]
    assert _asv_conf()["matrix"]["req"]["torch"] == [pin]


def test_asv_config_keeps_its_folders_out_of_git():
    conf = _asv_conf()
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert ".asv/" in ignored
    for key in ("env_dir", "results_dir", "html_dir"):
        assert conf[key].startswith(".asv/")
    assert conf["launch_method"] == "spawn"  # a fresh process per benchmark: passive_openmp() takes effect
