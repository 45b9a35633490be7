"""The dW ladder's algorithm records without a GPU: backward only, their verdicts, never auto's choice."""

from __future__ import annotations

import numpy as np
import pytest

import convsuite as cs
from convsuite.backends.cupy_backend import CupyBackend
from convsuite.bench.workloads import seed_workloads

#: The write-up's weight-gradient steps, in order (each a named cupy algorithm).
LADDER = ("wgrad_atomic", "wgrad_shuffle", "wgrad_registers", "wgrad_padded")


def _spec(x_shape, w_shape, **kw):
    return cs.explain(np.ones(x_shape, np.float32), np.ones(w_shape, np.float32), backend="numpy", **kw).spec


def test_ladder_records_are_backward_only_and_say_why():
    gpu = CupyBackend()
    table = gpu.algorithm_table()
    for name in LADDER:
        assert table[name].directions == ("backward",)
        assert "atomicAdd" in table[name].summary and "never chosen by auto" in table[name].summary
        assert "backward only" in gpu.can_run(_spec((2, 4, 9, 9), (8, 4, 3, 3), padding=1), name, "forward")
    same = _spec((2, 4, 9, 9), (8, 4, 3, 3), padding="same")
    assert all(gpu.can_run(same, name, "backward") is True for name in LADDER)
    strided = _spec((2, 4, 20, 20), (8, 4, 5, 5), stride=2, dilation=2)
    assert gpu.can_run(strided, "wgrad_registers", "backward") is True
    assert "stride 1 and dilation 1" in gpu.can_run(strided, "wgrad_padded", "backward")
    wide = _spec((2, 4, 20, 20), (8, 4, 3, 5))
    assert gpu.can_run(wide, "wgrad_atomic", "backward") is True
    for name in ("wgrad_registers", "wgrad_padded"):
        verdict = gpu.can_run(wide, name, "backward")
        assert "square kernels 1x1, 3x3, 5x5, 7x7" in verdict and "3x5" in verdict
    assert "2-D" in gpu.can_run(_spec((2, 4, 30), (8, 4, 3)), "wgrad_atomic", "backward")


@pytest.mark.parametrize("workload", ["cnn-train-3x3", "ece408-fa19", "ece408-fa21"])
def test_auto_never_picks_the_ladder(workload):
    gpu = CupyBackend()
    for layer in seed_workloads()[workload]["layers"]:
        spec = _spec((8, layer["C"], layer["H"], layer["W"]), (layer["M"], layer["C"], layer["K"], layer["K"]))
        assert gpu.choose_algorithm(spec, "backward")[0] not in LADDER
