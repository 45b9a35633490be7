"""The float32 precision policy: set, scoped, read from the environment, and obeyed by every chooser.

The tensor-core algorithms run on the GPU only; here a CPU backend with an algorithm of each class
stands in for them, so the policy's effect on auto, the rule, autotune, plans and explain is checked
without a GPU. ``tests/test_gpu.py`` holds the accuracy of each class on the device.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import convsuite as cs
from convsuite import _plan_cache, _tuning
from convsuite._precision import PRECISIONS, admits
from convsuite.backends.base import Algorithm, Backend

X = np.random.default_rng(0).standard_normal((2, 3, 9, 9)).astype(np.float32)
W = np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32)


class _Classes(Backend):
    """A CPU backend with one algorithm per precision class, each a correct (numpy) convolution."""

    name = "classes"
    device = "cpu"
    priority = 1000  # first in line, so auto reaches it before the shipped backends
    description = "test stand-in with one algorithm per precision class"

    def __init__(self):
        self.planned = []
        records = {}
        for precision in PRECISIONS:
            records[f"alg_{precision}"] = Algorithm(
                f"alg_{precision}", f"a {precision}-class stand-in", self._planner(precision), precision=precision
            )
        self._records = records
        self.algorithms = tuple(records)

    def _planner(self, precision):
        def plan(spec, direction):
            self.planned.append(precision)
            return cs.get_backend("numpy").plan(spec, "im2col", direction)

        return plan

    def available(self):
        return True

    def algorithm_table(self):
        return self._records

    def choose_algorithm(self, spec, direction):
        # The least accurate first: the policy, not this rule, must keep auto within its class.
        for name in reversed(self.algorithms):
            if admits(cs.get_precision(), self._records[name].precision):
                return name, "least accurate admitted"
        return self.algorithms[0], "fallback"


@pytest.fixture()
def classes():
    backend = _Classes()
    cs.register_backend(backend)
    try:
        yield backend
    finally:
        cs.unregister_backend("classes")
        cs.set_precision(None)


def test_the_default_is_high_and_the_setting_is_checked(monkeypatch):
    monkeypatch.delenv("CONVSUITE_PRECISION", raising=False)
    assert cs.get_precision() == "high"
    for bad, error in (("hgh", ValueError), ("HIGH", ValueError), (3, TypeError), (None, TypeError)):
        with pytest.raises(error, match=r"`precision` must be one of 'highest', 'high', 'medium'"):
            cs.use_precision(bad).__enter__()
    with pytest.raises(ValueError, match="`precision`.*got 'fast'"):
        cs.set_precision("fast")


def test_precedence_scope_then_setting_then_environment(monkeypatch):
    monkeypatch.setenv("CONVSUITE_PRECISION", "medium")
    assert cs.get_precision() == "medium"
    cs.set_precision("high")
    try:
        assert cs.get_precision() == "high"
        with cs.use_precision("highest"):
            assert cs.get_precision() == "highest"
            with cs.use_precision("medium"):
                assert cs.get_precision() == "medium"
            assert cs.get_precision() == "highest"
        assert cs.get_precision() == "high"
    finally:
        cs.set_precision(None)
    assert cs.get_precision() == "medium"
    monkeypatch.setenv("CONVSUITE_PRECISION", "nonsense")
    with pytest.raises(ValueError, match="CONVSUITE_PRECISION"):
        cs.get_precision()


def test_a_scope_is_private_to_its_thread():
    seen = []
    with cs.use_precision("medium"):
        thread = threading.Thread(target=lambda: seen.append(cs.get_precision()))
        thread.start()
        thread.join()
    assert seen == ["high"]  # the default: the block was the main thread's own


def test_setting_the_policy_drops_cached_plans():
    before = _plan_cache.generation()
    cs.set_precision("high")
    cs.set_precision(None)
    assert _plan_cache.generation() >= before + 2


@pytest.mark.parametrize("policy", PRECISIONS)
def test_auto_never_chooses_an_algorithm_less_accurate_than_the_policy(classes, policy):
    with cs.use_precision(policy):
        explanation = cs.explain(X, W, padding=1, backend="classes")
        assert admits(policy, explanation.precision), explanation
        assert explanation.policy == policy
        assert f"policy in force is {policy!r}" in str(explanation)
        # the cheapest admitted is what this backend's rule prefers: the policy bounds it, nothing else
        assert explanation.algorithm == f"alg_{policy}"
        # the whole-registry auto too, whichever backend the rule prefers
        assert admits(policy, cs.explain(X, W, padding=1).precision)
        with cs.use_autotune(True):
            assert admits(policy, cs.explain(X, W, padding=1).precision)


def test_a_named_algorithm_runs_whatever_the_policy(classes):
    with cs.use_precision("highest"):
        y = cs.conv2d(X, W, padding=1, backend="classes", algorithm="alg_medium")
        explanation = cs.explain(X, W, padding=1, backend="classes", algorithm="alg_medium")
    np.testing.assert_allclose(y, cs.conv2d(X, W, padding=1, backend="numpy"), rtol=1e-6, atol=1e-6)
    assert explanation.precision == "medium" and explanation.policy == "highest"


def test_plans_are_keyed_by_the_policy(classes):
    with cs.use_precision("medium"):
        cs.conv2d(X, W, padding=1, backend="classes")
    with cs.use_precision("highest"):
        cs.conv2d(X, W, padding=1, backend="classes")
    assert classes.planned[-2:] == ["medium", "highest"]


def test_autotune_measures_only_admitted_candidates_and_keys_its_cache_by_the_policy(classes, tmp_path, monkeypatch):
    monkeypatch.setenv("CONVSUITE_CACHE_DIR", str(tmp_path))
    _tuning._memory.clear()
    try:
        with cs.use_precision("highest"):
            result = cs.tune(X, W, padding=1, backend="classes", budget_s=0)
        timed = {row[1] for row in result.table}
        assert timed == {"alg_highest"}, result.table
        with cs.use_precision("high"):
            result = cs.tune(X, W, padding=1, backend="classes", budget_s=0)
        assert {row[1] for row in result.table} == {"alg_highest", "alg_high"}
        keys = list(_tuning._read(_tuning.cache_file()))
        assert any("precision=highest" in k for k in keys) and any("precision=high" in k for k in keys)
    finally:
        _tuning._memory.clear()


def test_float64_problems_are_keyed_without_the_policy():
    spec = cs.explain(X.astype(np.float64), W.astype(np.float64)).spec
    with cs.use_precision("medium"):
        key = _tuning.problem_key(spec, "forward", "auto/auto")
    assert "precision" not in key


def test_list_backends_shows_each_algorithms_class():
    rows = {row.name: row for row in cs.list_backends()}
    cupy = rows["cupy"]
    assert cupy.precision["tf32x3"] == "high" and cupy.precision["fused_gemm"] == "highest"
    assert "tf32x3 [high]" in str(cupy)
    assert all(p == "highest" for row in rows.values() if row.device == "cpu" for p in row.precision.values())


def test_a_record_with_an_unknown_class_is_refused():
    with pytest.raises(ValueError, match="`precision` must be 'highest', 'high' or 'medium'; got 'low'"):
        Algorithm("x", "y", lambda spec, direction: None, precision="low")
