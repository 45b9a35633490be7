"""Settings and extension points never break calls: the tuning cache's entries, the thread
count's environment variable, numba's running pool, a backend's contract and ``warm_up``.

Cases that change ``NUMBA_NUM_THREADS`` around numba's thread pool run in a fresh
subprocess: the pool is started once per process and cannot be undone.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import convsuite as cs
from convsuite import _threads, _tuning
from convsuite.backends.base import Backend

X = np.random.default_rng(5).standard_normal((1, 2, 8, 8)).astype(np.float32)
W = np.random.default_rng(6).standard_normal((2, 2, 3, 3)).astype(np.float32)
CPU_BACKENDS = ("cython", "joblib", "numba", "numpy", "python")


def _run(code: str, **env: str) -> str:
    """Run ``code`` in a fresh interpreter with ``env`` added; its stdout (fails on a non-zero exit)."""
    environment = {k: v for k, v in os.environ.items() if k != "NUMBA_NUM_THREADS"}
    environment.update(env)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# --- 1. a malformed entry of the tuning cache ------------------------------------


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A private tuning cache, empty in memory and on disk, with no parameter search under autotune."""
    monkeypatch.setenv(_tuning.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(_tuning.BUDGET_ENV, "0")
    monkeypatch.delenv(_tuning.AUTOTUNE_ENV, raising=False)
    cs.set_autotune(None)
    cs.clear_tuning_cache()
    yield tmp_path
    cs.set_autotune(None)
    cs.clear_tuning_cache()


def _forget_memory() -> None:
    """As a new process would start: nothing in memory, plans rebuilt."""
    _tuning._memory.clear()
    cs.clear_plan_cache()


MALFORMED = {
    "not an object": lambda entry: "junk",
    "no table": lambda entry: {k: v for k, v in entry.items() if k != "table"},
    "a short table row": lambda entry: {**entry, "table": [[1]]},
    "a table row of 6": lambda entry: {**entry, "table": [[*entry["table"][0], "extra"]]},
    "a NaN median": lambda entry: {**entry, "table": [[*entry["table"][0][:2], float("nan"), 0.1, "ok"]]},
    "param_table a number": lambda entry: {**entry, "param_table": 5},
    "a short param_table row": lambda entry: {**entry, "param_table": [[1, 2]]},
    "params a list": lambda entry: {**entry, "params": [1]},
    "backend a number": lambda entry: {**entry, "backend": 3},
}


@pytest.mark.parametrize("damage", sorted(MALFORMED))
def test_a_malformed_cache_entry_is_measured_again_with_a_warning(cache_dir, damage):
    result = cs.tune(X, W, budget_s=0)
    path = cache_dir / "tuning.json"
    data = json.loads(path.read_text())
    data["entries"][result.key] = MALFORMED[damage](data["entries"][result.key])
    path.write_text(json.dumps(data))
    _forget_memory()
    with pytest.warns(UserWarning, match=re.escape(str(path)) + ".* malformed entry"):
        with cs.use_autotune(True):
            explained = cs.explain(X, W)  # explain never measures: the entry counts as absent
            assert explained.decided_by != "measurement"
            str(explained)
            y = cs.conv2d(X, W)  # measured again, and stored
    np.testing.assert_allclose(y, cs.conv2d(X, W, backend="numpy"), rtol=1e-4, atol=1e-4)
    entry = json.loads(path.read_text())["entries"][result.key]  # overwritten with a whole entry
    assert _tuning._entry_problem(entry) is None and entry["table"]
    _forget_memory()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rewritten file reads back cleanly
        with cs.use_autotune(True):
            assert cs.explain(X, W).decided_by == "measurement"


def test_a_malformed_entry_leaves_the_others_in_use(cache_dir):
    result = cs.tune(X, W, budget_s=0)
    path = cache_dir / "tuning.json"
    data = json.loads(path.read_text())
    data["entries"]["another problem"] = {"table": "junk"}
    data["entries"]["a third problem"] = 7
    path.write_text(json.dumps(data))
    with pytest.warns(UserWarning, match=r"has 2 malformed entries") as caught:
        entries = _tuning._read(path)
    assert len(caught) == 1 and set(entries) == {result.key}
    _forget_memory()
    with pytest.warns(UserWarning, match="malformed"):
        with cs.use_autotune(True):
            assert cs.explain(X, W).decided_by == "measurement"


def test_every_entry_convsuite_writes_is_well_formed(cache_dir):
    cs.tune(X, W, budget_s=0.5)  # with a parameter search: params and param_table filled in where any
    cs.tune(X, W, padding=1, budget_s=0)
    entries = json.loads((cache_dir / "tuning.json").read_text())["entries"]
    assert len(entries) == 2
    assert {key: _tuning._entry_problem(entry) for key, entry in entries.items()} == dict.fromkeys(entries)


# --- 2. NUMBA_NUM_THREADS that int() refuses -------------------------------------


@pytest.mark.parametrize("raw", ["²", "³", "1²", "two", "", "0", "-2"])
def test_a_numba_num_threads_numba_ignores_counts_as_unset(monkeypatch, raw):
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    unset = _threads.max_threads(), cs.get_num_threads()
    monkeypatch.setenv("NUMBA_NUM_THREADS", raw)
    assert (_threads.max_threads(), cs.get_num_threads()) == unset
    assert not _threads.user_set()


def test_numba_num_threads_is_read_on_every_call(monkeypatch):
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    unset = _threads.max_threads()
    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")
    assert _threads.max_threads() == 1 and cs.get_num_threads() == 1 and _threads.user_set()
    monkeypatch.delenv("NUMBA_NUM_THREADS")
    assert _threads.max_threads() == unset and not _threads.user_set()


def test_a_superscript_numba_num_threads_breaks_no_call():
    out = _run(
        """
        import warnings
        warnings.simplefilter("ignore")  # numba's own warning about the value
        import numpy as np, convsuite as cs
        from convsuite import _threads
        x, w = np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3))
        print(cs.get_num_threads() == _threads.usable_cpus())
        for name in ("numba", "joblib"):
            if cs.get_backend(name).available() is True:
                np.testing.assert_allclose(cs.conv2d(x, w, backend=name), cs.conv2d(x, w, backend="numpy"))
        print("ran")
        """,
        NUMBA_NUM_THREADS="²",
    )
    assert out.split() == ["True", "ran"]


# --- 3. NUMBA_NUM_THREADS or set_num_threads above numba's running pool ------------


def _needs_numba():
    verdict = cs.get_backend("numba").available()
    if verdict is not True:
        pytest.skip(f"numba backend unavailable: {verdict}")


def test_raising_numba_num_threads_after_the_pool_started_breaks_no_call():
    _needs_numba()
    out = _run(
        """
        import os
        import numpy as np, convsuite as cs
        from convsuite import _threads
        x, w = np.ones((1, 2, 6, 6)), np.ones((3, 2, 3, 3))
        expected = cs.conv2d(x, w, backend="numpy")
        cs.conv2d(x, w, backend="numba")  # starts numba's pool: 1 thread
        import numba
        assert numba.config.NUMBA_NUM_THREADS == 1
        os.environ["NUMBA_NUM_THREADS"] = "2"
        for algorithm in ("direct", "gemm", "blocked"):
            np.testing.assert_allclose(cs.conv2d(x, w, backend="numba", algorithm=algorithm), expected)
        print(_threads.max_threads(), cs.get_num_threads())  # what the variable asks; what runs
        try:
            cs.set_num_threads(2)
        except ValueError as exc:
            print("refused:", exc)
        del os.environ["NUMBA_NUM_THREADS"]
        np.testing.assert_allclose(cs.conv2d(x, w, backend="numba"), expected)
        print("ran")
        """,
        NUMBA_NUM_THREADS="1",
    )
    counts, refusal, ran = out.strip().splitlines()
    assert counts == "2 1" and ran == "ran"
    assert refusal.startswith("refused: `n` must be between 1 and 1") and "NUMBA_NUM_THREADS" in refusal
    assert refusal.endswith("got 2")


def test_a_count_set_before_the_pool_started_is_clamped_to_it():
    _needs_numba()
    out = _run(
        """
        import os
        import numpy as np, convsuite as cs
        x, w = np.ones((1, 2, 6, 6)), np.ones((3, 2, 3, 3))
        os.environ["NUMBA_NUM_THREADS"] = "3"
        cs.set_num_threads(3)  # accepted: numba has not started
        os.environ["NUMBA_NUM_THREADS"] = "1"  # numba starts its pool with this
        y = cs.conv2d(x, w, backend="numba")
        np.testing.assert_allclose(y, cs.conv2d(x, w, backend="numpy"))
        import numba
        print(numba.config.NUMBA_NUM_THREADS, cs.get_num_threads())
        del os.environ["NUMBA_NUM_THREADS"]
        cs.conv2d(x, w, backend="numba")
        print(cs.get_num_threads())
        """,
    )
    assert out.split() == ["1", "1", "1"]


# --- 4. a backend that implements neither plan nor forward/backward ----------------


class _Nothing(Backend):
    name = "settings_nothing"

    def available(self):
        return True


class _ForwardOnly(Backend):
    name = "settings_forward_only"

    def forward(self, spec, x, w, bias, out, algorithm):
        out[...] = 1.0


@pytest.fixture
def registered():
    names = []

    def register(backend):
        cs.register_backend(backend)
        names.append(backend.name)
        return backend.name

    yield register
    for name in names:
        cs.unregister_backend(name)


def test_a_backend_without_plan_or_forward_says_so(registered):
    name = registered(_Nothing())
    x, w = np.ones((1, 1, 4, 4)), np.ones((1, 1, 3, 3))
    with pytest.raises(NotImplementedError, match=r"'settings_nothing' must implement `plan`.* or `forward`"):
        cs.conv2d(x, w, backend=name)
    with pytest.raises(NotImplementedError, match=r"must implement `plan`.* or `backward`"):
        cs.conv2d_backward(np.ones((1, 1, 2, 2)), x, w, backend=name)


def test_a_forward_only_backend_runs_forward_and_says_what_backward_needs(registered):
    name = registered(_ForwardOnly())
    x, w = np.ones((1, 1, 4, 4)), np.ones((1, 1, 3, 3))
    assert (cs.conv2d(x, w, backend=name) == 1.0).all()
    with pytest.raises(NotImplementedError, match=r"'settings_forward_only' must implement `plan`.* or `backward`"):
        cs.conv2d_backward(np.ones((1, 1, 2, 2)), x, w, backend=name)


# --- 5. Backend.warm_up(dtype): one check for every backend -------------------------


@pytest.fixture(params=CPU_BACKENDS)
def cpu_backend(request):
    backend = cs.get_backend(request.param)
    verdict = backend.available()
    if verdict is not True:
        pytest.skip(f"backend {request.param!r} unavailable: {verdict}")
    return backend


@pytest.mark.parametrize("dtype", ["float16", "int32", np.int64, "complex64", "U3", "float128"])
def test_warm_up_refuses_a_dtype_no_kernel_computes_in(cpu_backend, dtype):
    with pytest.raises(ValueError, match=r"`dtype` must be 'float32' or 'float64' .*; got "):
        cpu_backend.warm_up(dtype)


@pytest.mark.parametrize("dtype", [5, "junk", object(), [1, 2]])
def test_warm_up_refuses_what_is_no_dtype(cpu_backend, dtype):
    with pytest.raises(TypeError, match=r"`dtype` must be 'float32' or 'float64' .*; got "):
        cpu_backend.warm_up(dtype)


@pytest.mark.parametrize(
    "dtype, chosen",
    [
        (">f4", ("float32",)),
        ("<f8", ("float64",)),
        (np.float32, ("float32",)),
        (np.dtype("float64"), ("float64",)),
        (None, ("float32", "float64")),
    ],
)
def test_warm_up_reads_byte_order_as_no_dtype_and_none_as_all(cpu_backend, monkeypatch, dtype, chosen):
    seen = []
    monkeypatch.setattr(cpu_backend, "_warm_up", lambda d: seen.append(d))
    seconds = cpu_backend.warm_up(dtype)
    assert isinstance(seconds, float) and seconds >= 0
    assert [d.name for d in seen] == list(chosen) and all(d.isnative for d in seen)


def test_numba_warm_up_compiles_a_big_endian_float32():
    _needs_numba()
    assert cs.get_backend("numba").warm_up(">f4") >= 0.0


# --- special files in the cache folder -------------------------------------------

_SPECIAL_FILE_CALL = """
import os, warnings, numpy as np, convsuite as cs
x = np.random.default_rng(5).standard_normal((1, 2, 8, 8)).astype(np.float32)
w = np.random.default_rng(6).standard_normal((2, 2, 3, 3)).astype(np.float32)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with cs.use_autotune(True):
        y = cs.conv2d(x, w, padding=1)
        cs.tune(x, w, padding=1, budget_s=0)
np.testing.assert_allclose(y, cs.conv2d(x, w, padding=1, backend="numpy"), rtol=1e-5, atol=1e-5)
print("warned:", " | ".join(str(c.message) for c in caught))
"""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need a POSIX system")
@pytest.mark.parametrize("name", ["tuning.json", ".tuning.lock"])
def test_a_fifo_in_the_cache_folder_never_blocks_a_call(tmp_path, name):
    """A FIFO where the cache (or its lock) should be: open() would wait for a writer forever."""
    os.mkfifo(tmp_path / name)
    out = _run(_SPECIAL_FILE_CALL, CONVSUITE_CACHE_DIR=str(tmp_path), CONVSUITE_TUNE_BUDGET="0")
    assert "not a regular file" in out and str(tmp_path) in out


def test_a_folder_in_place_of_the_cache_file_is_ignored_with_a_warning(tmp_path):
    (tmp_path / "tuning.json").mkdir()
    out = _run(_SPECIAL_FILE_CALL, CONVSUITE_CACHE_DIR=str(tmp_path), CONVSUITE_TUNE_BUDGET="0")
    assert "tuning" in out and "folder" in out
