"""A dependency's compile cache, broken on disk, must never break convsuite.

numba keeps the kernels' machine code in ``NUMBA_CACHE_DIR`` (an index
``*.nbi`` and code ``*.nbc`` per kernel) and CuPy its compiled modules in
``CUPY_CACHE_DIR``. A truncated or garbage file, a path that is not a file, a
folder that cannot be read or is a file: each scenario runs in a fresh
interpreter (a numba cache is read at import) against a copy of a warm cache,
and every call must still work, agree with the NumPy backend and leave at
most one warning, which names the broken cache; the next process finds the
cache repaired. CuPy's path is exercised on the CPU with the failure injected.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

from .conftest import BACKENDS

ROOT = Path(__file__).resolve().parents[1]

#: Every numba and auto entry point the failure reached: list_backends, an auto call, explicit
#: forward and backward calls, each checked against the NumPy backend; warnings are reported as JSON.
SCENARIO = textwrap.dedent(
    """
    import json
    import warnings

    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import numpy as np

        import convsuite as cs

        numba_info = {b.name: b for b in cs.list_backends()}["numba"]
        rng = np.random.default_rng(0)
        x = rng.standard_normal((2, 3, 40))
        w = rng.standard_normal((4, 3, 5))
        gy = rng.standard_normal((2, 4, 36))
        want = cs.conv1d(x, w, backend="numpy")
        errors = {"auto": float(np.abs(cs.conv1d(x, w) - want).max())}
        errors["numba"] = float(np.abs(cs.conv1d(x, w, backend="numba", algorithm="direct") - want).max())
        got = cs.conv1d_backward(gy, x, w, backend="numba", algorithm="direct")
        ref = cs.conv1d_backward(gy, x, w, backend="numpy")
        errors["numba backward"] = max(float(np.abs(a - b).max()) for a, b in zip(got, ref))
    print(json.dumps({
        "available": numba_info.available,
        "reason": numba_info.reason,
        "errors": errors,
        "warnings": [str(c.message) for c in caught if "cache" in str(c.message)],
    }))
    """
)

pytestmark = pytest.mark.skipif(not BACKENDS["numba"].available, reason="numba is not installed")


def _run(script: Path, cache: str, *, as_plain_user: bool = False, timeout: float = 400) -> dict:
    """Run the scenario with ``NUMBA_CACHE_DIR=cache``; its report."""
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    try:
        run = subprocess.run(
            [sys.executable, str(script)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            preexec_fn=_without_root_file_access if as_plain_user else None,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the scenario hung\n{exc.stdout}\n{exc.stderr}")
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return json.loads(run.stdout.strip().splitlines()[-1])


def _without_root_file_access() -> None:
    """In the child, before exec: drop the capabilities that let root ignore file permissions.

    Run as root (containers), a folder with mode 000 is still readable; without
    CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH in the bounding set, the program
    exec'd next has them no more, and meets the permissions as any user would.
    """
    if os.geteuid() != 0:
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory) -> Path:
    """A numba cache holding every kernel the scenario loads (compiled once for the module)."""
    root = tmp_path_factory.mktemp("numba-cache")
    script = root / "scenario.py"
    script.write_text(SCENARIO)
    cache = root / "warm"
    report = _run(script, str(cache))
    assert report["available"] and not report["warnings"], report
    assert list(cache.rglob("*.nbi")) and list(cache.rglob("*.nbc"))
    return cache


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 200, dtype=np.uint8).tobytes())


def _not_a_file(path: Path) -> None:
    path.unlink()
    (path / "inside").mkdir(parents=True)


CORRUPTIONS = {
    "index emptied": ("*.nbi", lambda p: p.write_bytes(b"")),
    "index truncated": ("*.nbi", _truncate),
    "index garbage": ("*.nbi", _garbage),
    "index not a file": ("*.nbi", _not_a_file),
    "code truncated": ("*.nbc", _truncate),
    "code garbage": ("*.nbc", _garbage),
    "code not a file": ("*.nbc", _not_a_file),
}


def _assert_works(report: dict) -> None:
    assert report["available"] is True, report["reason"]
    for call, error in report["errors"].items():
        assert error < 1e-12, f"{call}: off by {error}"


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_broken_numba_cache_file_is_moved_aside_once_and_recompiled(warm_cache, tmp_path, corruption):
    pattern, spoil = CORRUPTIONS[corruption]
    cache = tmp_path / "cache"
    shutil.copytree(warm_cache, cache)
    spoiled = sorted(cache.rglob(pattern))
    for path in spoiled:
        spoil(path)
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO)

    report = _run(script, str(cache))
    _assert_works(report)
    assert len(report["warnings"]) == 1, report["warnings"]
    assert str(spoiled[0].parent) in report["warnings"][0]  # names where the broken files were
    moved = sorted(p.name.split(".corrupt-")[0] for p in cache.rglob("*.corrupt-*"))
    assert moved == sorted(p.name for p in spoiled)

    again = _run(script, str(cache))  # repaired: the next process neither warns nor fails
    _assert_works(again)
    assert again["warnings"] == []


def test_convsuite_info_works_with_a_broken_numba_cache(warm_cache, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(warm_cache, cache)
    for path in cache.rglob("*.nbi"):
        path.write_bytes(b"")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    run = subprocess.run(
        [sys.executable, "-m", "convsuite", "info"], cwd=ROOT, capture_output=True, text=True, timeout=400, env=env
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    assert run.stderr.count("moved them aside") == 1, run.stderr[-3000:]
    numba_row = next(line for line in run.stdout.splitlines() if line.split()[:1] == ["numba"])
    assert numba_row.split()[2] == "yes", numba_row  # backend, device, available


#: Where broken files cannot be moved aside (a shared cache folder holding another user's files, its
#: sticky bit set): renaming them is refused, as the OS would.
DENY_MOVES = textwrap.dedent(
    """
    import os

    _replace = os.replace


    def _refuse_moving_aside(src, dst, *args, **kwargs):
        if ".corrupt-" in os.fspath(dst):
            raise PermissionError(1, "Operation not permitted", os.fspath(src))
        return _replace(src, dst, *args, **kwargs)


    os.replace = _refuse_moving_aside
    """
)


def test_broken_files_that_cannot_be_moved_aside_compile_in_memory_with_one_warning(warm_cache, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(warm_cache, cache)
    spoiled = sorted(cache.rglob("*.nbi"))
    for path in spoiled:
        _garbage(path)
    script = tmp_path / "scenario.py"
    script.write_text(DENY_MOVES + SCENARIO)
    report = _run(script, str(cache))
    _assert_works(report)
    assert len(report["warnings"]) == 1, report["warnings"]
    assert str(spoiled[0].parent) in report["warnings"][0] and "in memory" in report["warnings"][0]
    assert not list(cache.rglob("*.corrupt-*"))


#: A numba whose cache cannot be wrapped (hooks renamed in a future release): its loader's errors escape.
UNWRAPPED = textwrap.dedent(
    """
    import json

    import numpy as np

    from convsuite.backends import _numba_cache

    _numba_cache._enable_cache = lambda dispatcher: dispatcher.enable_caching()  # numba's cache, unwrapped

    import convsuite as cs

    info = {b.name: b for b in cs.list_backends()}["numba"]
    x, w = np.arange(40.0).reshape(1, 2, 20), np.ones((3, 2, 3))
    error = float(np.abs(cs.conv1d(x, w) - cs.conv1d(x, w, backend="numpy")).max())  # auto: another backend
    try:
        cs.conv1d(x, w, backend="numba")
    except cs.BackendUnavailableError as exc:
        refused = str(exc)
    else:
        refused = None
    print(json.dumps({"available": info.available, "reason": info.reason, "error": error, "refused": refused}))
    """
)


def test_a_cache_fault_nothing_catches_makes_numba_unavailable_with_the_reason(warm_cache, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(warm_cache, cache)
    for path in cache.rglob("*.nbi"):
        path.write_bytes(b"")
    script = tmp_path / "scenario.py"
    script.write_text(UNWRAPPED)
    report = _run(script, str(cache))
    assert report["available"] is False
    assert "EOFError" in report["reason"] and str(cache) in report["reason"], report["reason"]
    assert report["refused"] is not None and "EOFError" in report["refused"], report["refused"]
    assert report["error"] < 1e-12


def test_an_unreadable_cache_folder_is_not_fatal(warm_cache, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(warm_cache, cache)
    cache.chmod(0)
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO)
    try:
        report = _run(script, str(cache), as_plain_user=True)
    finally:
        cache.chmod(0o755)
    _assert_works(report)
    assert len(report["warnings"]) <= 1, report["warnings"]


def test_a_cache_folder_that_is_a_file_is_not_fatal(tmp_path):
    cache = tmp_path / "not-a-folder"
    cache.write_text("a file where numba expects its cache folder\n")
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO)
    report = _run(script, str(cache))
    _assert_works(report)
    assert len(report["warnings"]) <= 1, report["warnings"]
    assert cache.read_text() == "a file where numba expects its cache folder\n"


# --- CuPy's kernel cache, the failure injected (no CUDA needed) -------------------------------------


class _DriverError(Exception):
    """Stands in for cupy's CUDADriverError: a cubin whose hash matches but the driver refuses."""


class CompileException(Exception):
    """Named as NVRTC's error in cupy (cupy.cuda.compiler.CompileException)."""


def _fake_cupy(fault: Exception | None, *, also_in_memory: bool = False):
    """A cupy whose ``RawModule.compile`` raises ``fault`` when it reads the disk cache; the builds, recorded."""
    builds: list[bool] = []

    class RawModule:
        def __init__(self, code, options, name_expressions):
            self.code, self.options, self.name_expressions = code, options, name_expressions

        def compile(self):
            in_memory = os.environ.get("CUPY_CACHE_IN_MEMORY") == "1"
            builds.append(in_memory)
            if fault is not None and (not in_memory or also_in_memory):
                raise fault

    device = types.SimpleNamespace(id=0)
    fake = types.SimpleNamespace(RawModule=RawModule, cuda=types.SimpleNamespace(Device=lambda *a: device))
    return fake, builds


@pytest.fixture
def runtime(monkeypatch, tmp_path):
    """``_cupy_runtime`` with empty module caches and ``CUPY_CACHE_DIR`` in ``tmp_path``."""
    from convsuite.backends import _cupy_runtime as rt

    monkeypatch.setattr(rt, "_modules", {})
    monkeypatch.setattr(rt, "_building", {})
    monkeypatch.setattr(rt, "_warned_caches", set())
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "kernel_cache"))
    monkeypatch.delenv("CUPY_CACHE_IN_MEMORY", raising=False)
    return rt


def _a_kernel(rt) -> tuple[str, str]:
    """The first kernel of the first CUDA source: a real entry, compiled only by the fake."""
    from convsuite.backends.cupy._catalog import KERNELS

    filename = sorted(KERNELS)[0]
    return filename, KERNELS[filename][0]


FAULTS = {
    "driver refuses the cached image": _DriverError("CUDA_ERROR_INVALID_IMAGE: device kernel image is invalid"),
    "cache file unreadable": PermissionError(13, "Permission denied", "/cache/0123abcd.cubin"),
    "cache file truncated": EOFError("Ran out of input"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_broken_cupy_cache_entry_is_compiled_again_without_the_cache(runtime, monkeypatch, tmp_path, fault):
    rt = runtime
    fake, builds = _fake_cupy(FAULTS[fault])
    monkeypatch.setattr(rt, "cupy", lambda: fake)
    filename, kernel = _a_kernel(rt)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = rt.module(filename, kernel=kernel)
        again = rt.module(filename, kernel=kernel)
        from convsuite.backends.cupy._catalog import KERNELS

        other = [entry for entry in KERNELS[filename] if entry != kernel]
        if other:  # a second module failing the same way: no second warning
            rt.module(filename, kernel=other[0])
    assert compiled is again and compiled.name_expressions
    assert builds[:2] == [False, True]  # the disk cache, then a build without it
    assert os.environ.get("CUPY_CACHE_IN_MEMORY") is None  # the setting is restored
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    where = getattr(FAULTS[fault], "filename", None) or str(tmp_path / "kernel_cache")
    assert where in messages[0] and type(FAULTS[fault]).__name__ in messages[0]


def test_an_error_that_the_build_without_cache_repeats_is_raised(runtime, monkeypatch):
    rt = runtime
    fault = _DriverError("CUDA_ERROR_NO_BINARY_FOR_GPU")
    fake, builds = _fake_cupy(fault, also_in_memory=True)
    monkeypatch.setattr(rt, "cupy", lambda: fake)
    monkeypatch.setenv("CUPY_CACHE_IN_MEMORY", "0")
    filename, kernel = _a_kernel(rt)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(_DriverError, match="NO_BINARY_FOR_GPU"):
            rt.module(filename, kernel=kernel)
    assert builds == [False, True] and not caught
    assert os.environ["CUPY_CACHE_IN_MEMORY"] == "0"  # the user's setting, restored


def test_an_nvrtc_error_is_raised_at_once(runtime, monkeypatch):
    rt = runtime
    fake, builds = _fake_cupy(CompileException("error: expected a ';'"))
    monkeypatch.setattr(rt, "cupy", lambda: fake)
    filename, kernel = _a_kernel(rt)
    with pytest.raises(CompileException):
        rt.module(filename, kernel=kernel)
    assert builds == [False]
