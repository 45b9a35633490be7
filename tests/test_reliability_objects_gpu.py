"""This round's reliability fixes where the operands live on the GPU: ``pytest -m gpu``.

CuPy plans and layers pinned to the cupy backend pickle and deep-copy (a plan
as its recipe, planned again on the device), and a fused conv + activation in
``nn.Sequential`` keeps its own gradient mask (a 0/1 ``relu_output`` read by
the cupy backward) whatever the caller does to the output. Without cupy or
a CUDA device every test here is skipped with the reason.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import convsuite as cs
from convsuite import nn

INFO = {b.name: b for b in cs.list_backends()}["cupy"]
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not INFO.available, reason=f"cupy backend unavailable: {INFO.reason}"),
]

RNG = np.random.default_rng(7)


def _cupy():
    import cupy

    return cupy


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("copier", [pickle.loads, copy.deepcopy], ids=["pickle", "deepcopy"])
def test_a_cupy_plan_copies_as_its_recipe_and_computes_the_same(direction, copier):
    cp = _cupy()
    x = cp.asarray(RNG.standard_normal((2, 8, 13, 11)).astype(np.float32))
    w = cp.asarray(RNG.standard_normal((16, 8, 3, 3)).astype(np.float32))
    plan = cs.plan(x, w, padding=1, direction=direction, backend="cupy")
    copied = copier(pickle.dumps(plan)) if copier is pickle.loads else copier(plan)
    assert (copied.backend.name, copied.algorithm, copied.params) == (plan.backend.name, plan.algorithm, plan.params)
    if direction == "forward":
        cp.testing.assert_array_equal(copied(x, w), plan(x, w))
    else:
        grad_y = cp.asarray(RNG.standard_normal((2, 16, 13, 11)).astype(np.float32))
        for got, want in zip(copied(grad_y, x, w), plan(grad_y, x, w)):
            cp.testing.assert_array_equal(got, want)


def test_a_layer_on_the_cupy_backend_deep_copies_with_independent_weights():
    cp = _cupy()
    layer = cs.Conv2D(4, 6, 3, padding=1, seed=0, backend="cupy")
    x = cp.asarray(RNG.standard_normal((2, 4, 9, 9)).astype(np.float32))
    y = layer(x)
    twin = copy.deepcopy(layer)
    cp.testing.assert_array_equal(twin(x), y)
    twin.weight[...] = 0
    cp.testing.assert_array_equal(layer(x), y)  # the original's weights are its own
    loaded = pickle.loads(pickle.dumps(layer))
    cp.testing.assert_array_equal(cp.asarray(loaded(x)), y)


@pytest.mark.parametrize("activation", [nn.ReLU, nn.ReLU6])
def test_fused_gradients_on_the_gpu_do_not_move_when_the_output_is_edited(activation):
    """The fused pair's 0/1 relu_output (ReLU) and cut mask (ReLU6) against the separate layers."""
    cp = _cupy()
    x = cp.asarray(4 * RNG.standard_normal((2, 4, 9, 9)).astype(np.float32))

    def gradients(fuse, edit):
        conv = nn.Conv2D(4, 8, 3, padding=1, backend="cupy", seed=0)
        net = nn.Sequential(conv, activation(), fuse_activations=fuse)
        net.to("gpu")
        y = net(x)
        if edit:
            y -= 3.0
        grad_x = net.backward(cp.ones_like(y))
        return [cp.asnumpy(a) for a in (grad_x, conv.weight.grad, conv.bias.grad)]

    want = gradients(fuse=False, edit=False)
    for got, expected in zip(gradients(fuse=True, edit=True), want):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
