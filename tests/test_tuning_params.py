"""Tunable parameters through the front end: cs.plan(params=), the tuner's search, the cache, explain.

A test backend with one tunable algorithm stands in for the real kernels
here, so the tuner's behaviour is checked where the fastest configuration is
known: its ``reps`` parameter repeats the whole computation, so ``reps=1``
is clearly fastest whatever the machine's noise. The real algorithms'
parameters are checked for correctness in their backends' tests.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import convsuite as cs
from convsuite import _param_search, _tuning
from convsuite._registry import register_backend, unregister_backend
from convsuite._timing import Timing
from convsuite.backends.base import Algorithm, Backend, Tunable
from convsuite.testing import reference_forward

X = np.random.default_rng(3).standard_normal((2, 3, 24, 24)).astype(np.float32)
W = np.random.default_rng(4).standard_normal((4, 3, 3, 3)).astype(np.float32)


def _constraint(spec, direction, params):
    if params["reps"] == 4 and params["tile"] == 2:
        return "reps=4 with tile=2 is refused (the test's stand-in for a shared-memory limit)"
    return True


def _plan(spec, direction, params):
    def run(x, w, bias, out):
        for _ in range(params["reps"]):  # deliberate extra work: reps=1 is the fastest
            out[...] = reference_forward(spec, x, w, bias)

    return run


class _TunableBackend(Backend):
    """A CPU backend whose one algorithm declares two tunables."""

    name = "tunable_test"
    priority = -100
    algorithms = ("loop",)
    description = "test backend with tunable parameters"

    def algorithm_table(self):
        return {
            "loop": Algorithm(
                "loop",
                "reference, repeated reps times",
                _plan,
                tunables=(
                    Tunable("reps", (1, 2, 4, 8), 8, "how many times the work is repeated"),
                    Tunable("tile", (1, 2), lambda spec, direction: 1, "does nothing; its default is a rule"),
                ),
                constraint=_constraint,
            )
        }


@pytest.fixture
def tunable_backend(tmp_path, monkeypatch):
    """The test backend registered, with a private tuning cache."""
    monkeypatch.setenv(_tuning.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(_tuning.AUTOTUNE_ENV, raising=False)
    monkeypatch.delenv(_tuning.BUDGET_ENV, raising=False)
    cs.set_autotune(None)  # re-read the environment
    cs.clear_tuning_cache()
    register_backend(_TunableBackend())
    yield "tunable_test"
    unregister_backend("tunable_test")
    cs.set_autotune(None)
    cs.clear_tuning_cache()


# --- the record ------------------------------------------------------------------


def test_record_resolves_defaults_and_refuses_unknown_names_and_values():
    record = _TunableBackend().algorithm_table()["loop"]
    spec = cs.plan(X, W, backend="numpy").spec
    assert record.resolve(spec, "forward") == {"reps": 8, "tile": 1}
    assert record.resolve(spec, "forward", {"reps": 2}) == {"reps": 2, "tile": 1}
    with pytest.raises(ValueError, match="no tunable parameter 'bogus'.*reps, tile"):
        record.resolve(spec, "forward", {"bogus": 1})
    with pytest.raises(ValueError, match="'reps' accepts 1, 2, 4, 8; got 3"):
        record.resolve(spec, "forward", {"reps": 3})
    with pytest.raises(ValueError, match="got 2.0"):
        record.resolve(spec, "forward", {"reps": 2.0})  # 2.0 == 2, but not an allowed value's type
    assert len(record.configurations()) == 8
    assert record.configurations({"reps": (1, 2)}) == [
        {"reps": 1, "tile": 1},
        {"reps": 1, "tile": 2},
        {"reps": 2, "tile": 1},
        {"reps": 2, "tile": 2},
    ]
    with pytest.raises(ValueError, match="'reps' accepts"):
        record.configurations({"reps": (3,)})
    assert record.can_run(spec, "forward", {"reps": 4, "tile": 2}).startswith("reps=4 with tile=2 is refused")
    assert record.can_run(spec, "forward", {"reps": 4}) is True


def test_algorithm_without_tunables_refuses_params():
    spec = cs.plan(X, W, backend="numpy").spec
    plain = [
        (cs.get_backend(info.name), algorithm)
        for info in cs.list_backends()
        if info.available and cs.get_backend(info.name).algorithm_table()
        for algorithm in info.algorithms
        if not cs.get_backend(info.name).tunables(algorithm)
    ]
    assert plain, "expected some algorithm without tunable parameters (the python backend's)"
    backend, algorithm = plain[0]
    with pytest.raises(ValueError, match="no tunable parameter 'tile'"):
        backend.plan(spec, algorithm, "forward", {"tile": 1})


# --- cs.plan(params=) ----------------------------------------------------------------


def test_plan_with_params_runs_them_and_shows_them(tunable_backend):
    p = cs.plan(X, W, backend=tunable_backend, algorithm="loop", params={"reps": 2})
    assert p.params == {"reps": 2, "tile": 1}
    assert "[reps=2, tile=1]" in repr(p)
    np.testing.assert_allclose(p(X, W), reference_forward(p.spec, X, W), rtol=1e-5, atol=1e-5)
    assert cs.plan(X, W, backend=tunable_backend, algorithm="loop").params == {"reps": 8, "tile": 1}


def test_plan_params_errors_name_what_is_wrong(tunable_backend):
    with pytest.raises(ValueError, match="no tunable parameter 'bogus'"):
        cs.plan(X, W, backend=tunable_backend, algorithm="loop", params={"bogus": 1})
    with pytest.raises(ValueError, match="'reps' accepts 1, 2, 4, 8; got 5"):
        cs.plan(X, W, backend=tunable_backend, algorithm="loop", params={"reps": 5})
    with pytest.raises(cs.UnsupportedCaseError, match="reps=4 with tile=2 is refused"):
        cs.plan(X, W, backend=tunable_backend, algorithm="loop", params={"reps": 4, "tile": 2})
    with pytest.raises(ValueError, match="name the backend and the algorithm"):
        cs.plan(X, W, params={"reps": 1})
    with pytest.raises(ValueError, match="name the backend and the algorithm"):
        cs.plan(X, W, backend=tunable_backend, params={"reps": 1})
    with pytest.raises(TypeError, match="`params` must be a mapping"):
        cs.plan(X, W, backend=tunable_backend, algorithm="loop", params=[("reps", 1)])
    with pytest.raises(TypeError, match="`params` must be a mapping"):
        cs.plan(X, W, backend=tunable_backend, algorithm="loop", params={1: 1})


# --- the tuner -----------------------------------------------------------------------


def test_tune_finds_the_clearly_faster_configuration_and_persists_it(tunable_backend):
    result = cs.tune(X, W, backend=tunable_backend, budget_s=30.0)
    assert (result.backend, result.algorithm) == (tunable_backend, "loop")
    assert result.params["reps"] == 1  # 8x less work than the default
    assert "exhaustive" in result.search
    searched = [row for row in result.param_table if row[0] == "tunable_test/loop"]
    assert len(searched) == 7  # 8 configurations, one refused by the constraint
    assert all(row[1] != {"reps": 4, "tile": 2} for row in searched)
    assert "parameters:" in str(result) and "tunable_test/loop[reps=1" in str(result)
    # On disk, with the parameters and the table.
    data = json.loads(_tuning.cache_file().read_text())
    (entry,) = data["entries"].values()
    assert entry["params"]["reps"] == 1 and entry["param_table"]
    # Another process (memory forgotten) uses them under autotune, and explain shows them.
    _tuning._memory.clear()
    cs.clear_plan_cache()
    with cs.use_autotune(True):
        e = cs.explain(X, W, backend=tunable_backend)
        assert e.decided_by == "measurement" and e.params["reps"] == 1 and e.params_source == "measured"
        assert "parameters (measured): reps=1" in str(e)
        assert "loop[reps=1" in str(e)
        p = cs.plan(X, W, backend=tunable_backend)
        assert p.params["reps"] == 1
        y = cs.conv2d(X, W, backend=tunable_backend)
    np.testing.assert_allclose(y, reference_forward(p.spec, X, W), rtol=1e-5, atol=1e-5)


def test_explain_without_tuning_shows_the_defaults(tunable_backend):
    e = cs.explain(X, W, backend=tunable_backend)
    assert e.params == {"reps": 8, "tile": 1} and e.params_source == "defaults"
    assert "parameters (defaults): reps=8, tile=1" in str(e)


def test_autotune_searches_parameters_on_first_call(tunable_backend, monkeypatch):
    monkeypatch.setenv(_tuning.BUDGET_ENV, "30")
    with cs.use_autotune(True):
        cs.conv2d(X, W, backend=tunable_backend)
        e = cs.explain(X, W, backend=tunable_backend)
    assert e.params["reps"] == 1


def test_budget_zero_searches_nothing(tunable_backend):
    result = cs.tune(X, W, backend=tunable_backend, budget_s=0)
    assert result.params == {} and result.param_table == ()
    assert "budget 0" in result.search


def test_stale_parameters_in_the_cache_are_not_used(tunable_backend):
    result = cs.tune(X, W, backend=tunable_backend, budget_s=30.0)
    data = json.loads(_tuning.cache_file().read_text())
    data["entries"][result.key]["params"] = {"reps": 3}  # not an allowed value (a version that changed)
    _tuning.cache_file().write_text(json.dumps(data))
    _tuning._memory.clear()
    cs.clear_plan_cache()
    e = cs.explain(X, W, backend=tunable_backend)  # explain never measures: the entry is ignored
    assert e.decided_by != "measurement"


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "5", True])
def test_budget_is_validated(tunable_backend, bad):
    with pytest.raises((TypeError, ValueError), match="`budget_s`"):
        cs.tune(X, W, backend=tunable_backend, budget_s=bad)


def test_bad_budget_environment_warns_and_uses_default(monkeypatch):
    monkeypatch.setenv(_tuning.BUDGET_ENV, "lots")
    with pytest.warns(UserWarning, match="CONVSUITE_TUNE_BUDGET"):
        assert _tuning.autotune_budget() == _tuning.AUTOTUNE_BUDGET_S
    monkeypatch.setenv(_tuning.BUDGET_ENV, "0.5")
    assert _tuning.autotune_budget() == 0.5


# --- the pruned search, with a deterministic stand-in for the measuring core ----------


class _GridBackend(Backend):
    """An algorithm with a 9 x 9 grid whose cost has one minimum far from the default."""

    name = "grid_test"
    algorithms = ("grid",)

    def algorithm_table(self):
        values = tuple(range(1, 10))
        return {
            "grid": Algorithm(
                "grid",
                "cost stand-in",
                lambda spec, direction, params: lambda *ops: None,
                tunables=(Tunable("a", values, 1), Tunable("b", values, 1)),
                constraint=lambda spec, direction, p: True if (p["a"], p["b"]) != (9, 9) else "corner refused",
            )
        }


def _cost(params: dict) -> float:
    """A smooth bowl with its minimum at a=7, b=3 (unimodal, so local search must reach it)."""
    return 1.0 + (params["a"] - 7) ** 2 + 2 * (params["b"] - 3) ** 2


def _agrees(*args) -> str:
    """The stand-in kernels compute nothing to compare."""
    return ""


def _fake_measure(contenders, **kw):
    """Medians from the cost function; nothing is run or timed."""
    out = {}
    for key in contenders:
        c = _cost(dict(key))
        out[key] = Timing(c, c, c, c, 0.0, 1)
    return out


def test_pruned_search_reaches_the_optimum_by_local_steps():
    backend = _GridBackend()
    spec = cs.plan(X, W, backend="numpy").spec
    found = _param_search.search_parameters(
        spec, "forward", backend, "grid", (), budget_s=5.0, call_s=1.0, measure=_fake_measure, verify=_agrees
    )
    assert found.valid == 80  # 81 minus the refused corner
    assert found.strategy.startswith("random+local")
    assert found.params == {"a": 7, "b": 3}
    assert found.default == {"a": 1, "b": 1}
    assert len(found.table) < 80  # it did not time everything
    assert found.table[0][0] == {"a": 7, "b": 3}


@pytest.mark.parametrize("backend_type, algorithm", [("grid", "nope"), ("old contract", "a")])
def test_search_refuses_an_algorithm_without_a_record(backend_type, algorithm):
    # A backend of the older contract declares no records (algorithm_table() is None): nothing to search.
    backend = _GridBackend() if backend_type == "grid" else _OldContract()
    spec = cs.plan(X, W, backend="numpy").spec
    with pytest.raises(ValueError, match=rf"`algorithm` must be one of backend .*; got '{algorithm}'"):
        _param_search.search_parameters(
            spec, "forward", backend, algorithm, (), budget_s=1.0, call_s=1.0, measure=_fake_measure, verify=_agrees
        )


def test_search_keeps_the_default_unless_beaten_beyond_noise():
    backend = _GridBackend()
    spec = cs.plan(X, W, backend="numpy").spec

    def nearly_flat(contenders, **kw):  # every other configuration only 1% faster: noise, not a win
        return {k: Timing(1.0, 1.0 if dict(k) == {"a": 1, "b": 1} else 0.99, 1, 1, 0, 1) for k in contenders}

    found = _param_search.search_parameters(
        spec, "forward", backend, "grid", (), budget_s=1e9, call_s=1e-9, measure=nearly_flat, verify=_agrees
    )
    assert found.strategy.startswith("exhaustive")
    assert found.params == {"a": 1, "b": 1}


def test_a_winner_that_loses_the_confirmation_gives_way_to_the_default():
    """The winner's curse: a configuration that only looked fastest among many is re-timed against the default."""
    backend = _GridBackend()
    spec = cs.plan(X, W, backend="numpy").spec

    def lucky_then_honest(contenders, repeat, **kw):
        confirming = repeat == _param_search.CONFIRM_REPEAT
        out = {}
        for key in contenders:
            p = dict(key)
            if p == {"a": 1, "b": 1}:
                m = 1.0
            elif p == {"a": 5, "b": 5} and not confirming:
                m = 0.5  # a lucky measurement among many
            else:
                m = 1.05 if p == {"a": 5, "b": 5} else 2.0
            out[key] = Timing(m, m, m, m, 0.0, 1)
        return out

    found = _param_search.search_parameters(
        spec, "forward", backend, "grid", (), budget_s=1e9, call_s=1e-9, measure=lucky_then_honest, verify=_agrees
    )
    assert found.params == {"a": 1, "b": 1}
    assert "the default won it" in found.strategy
    kept = _param_search.search_parameters(
        spec, "forward", backend, "grid", (), budget_s=5.0, call_s=1.0, measure=_fake_measure, verify=_agrees
    )
    assert kept.params == {"a": 7, "b": 3} and "confirmed against the default" in kept.strategy


# --- a fast wrong configuration, a failing one, and a backend of the older contract ----


def _plan_modes(spec, direction, params):
    def run(x, w, bias, out):
        if params["mode"] == "raises":
            raise RuntimeError("too many resources requested for launch")
        if params["mode"] == "skips_work":  # fastest of all, and wrong: half the output never written
            out[: max(1, len(out) // 2)] = 0.0
            return
        for _ in range(4):  # the honest configuration, slower
            out[...] = reference_forward(spec, x, w, bias)

    return run


class _ModesBackend(Backend):
    """One algorithm whose fastest configuration is wrong and another raises at launch."""

    name = "modes_test"
    priority = -100
    algorithms = ("modes",)

    def algorithm_table(self):
        modes = ("exact", "raises", "skips_work")
        return {
            "modes": Algorithm("modes", "exact, or broken", _plan_modes, tunables=(Tunable("mode", modes, "exact"),))
        }


def test_a_fast_wrong_configuration_is_rejected_and_a_failing_one_reported(tmp_path, monkeypatch):
    monkeypatch.setenv(_tuning.CACHE_DIR_ENV, str(tmp_path))
    cs.clear_tuning_cache()
    register_backend(_ModesBackend())
    try:
        result = cs.tune(X, W, backend="modes_test", budget_s=30.0)
    finally:
        unregister_backend("modes_test")
        cs.clear_tuning_cache()
    assert result.params == {"mode": "exact"}
    status = {row[1]["mode"]: row[4] for row in result.param_table}
    assert status["raises"].startswith("failed: RuntimeError('too many resources")
    assert status["skips_work"].startswith("rejected: output 0 has NaN")
    assert "the winner was rejected" in result.search


class _OldContract(Backend):
    """A backend written before parameters: three-argument can_run and plan."""

    name = "old_contract_test"
    priority = -100
    algorithms = ("a", "b")

    def can_run(self, spec, algorithm, direction):
        return True

    def plan(self, spec, algorithm, direction):
        def run(x, w, bias, out):
            out[...] = reference_forward(spec, x, w, bias)

        return run


def test_a_backend_of_the_older_contract_is_tuned_and_its_cache_entry_used(tmp_path, monkeypatch):
    monkeypatch.setenv(_tuning.CACHE_DIR_ENV, str(tmp_path))
    cs.clear_tuning_cache()
    register_backend(_OldContract())
    try:
        with cs.use_autotune(True):
            y = cs.conv2d(X, W, backend="old_contract_test")  # measures a and b
            cs.clear_plan_cache()
            _tuning._memory.clear()
            y2 = cs.conv2d(X, W, backend="old_contract_test")  # the cache entry, checked with can_run(3 args)
            e = cs.explain(X, W, backend="old_contract_test")
    finally:
        unregister_backend("old_contract_test")
        cs.clear_tuning_cache()
    assert e.decided_by == "measurement" and e.params == {}
    assert all(row[4] == "ok" for row in e.measured)
    np.testing.assert_array_equal(y, y2)


def test_explicit_params_are_a_request_and_numpy_ints_are_accepted(tunable_backend):
    p = cs.plan(X, W, backend=tunable_backend, algorithm="loop", params={"reps": np.int64(2)})
    assert p.params == {"reps": 2, "tile": 1} and type(p.params["reps"]) is int
    assert p.decision.decided_by == "request" and "parameters given: reps=2" in p.decision.reason
