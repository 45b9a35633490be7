"""convsuite.nn.Module: names, state_dict round trip and its errors, modes, no_grad, timing."""

from __future__ import annotations

import numpy as np
import pytest

from convsuite import nn


def _small_net() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2D(1, 2, 3, padding=1, seed=0),
        nn.BatchNorm2D(2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Dropout(0.5, seed=0),
        nn.Linear(2 * 4 * 4, 3, seed=0),
    )


def test_names_follow_pytorch_conventions():
    net = _small_net()
    assert list(net.state_dict()) == [
        "0.weight",
        "0.bias",
        "1.weight",
        "1.bias",
        "1.running_mean",
        "1.running_var",
        "5.weight",
        "5.bias",
    ]
    assert [name for name, _ in net.named_parameters()] == [
        "0.weight",
        "0.bias",
        "1.weight",
        "1.bias",
        "5.weight",
        "5.bias",
    ]
    assert len(net.parameters()) == 6
    assert [name for name, _ in net.named_modules()][:3] == ["", "0", "1"]


def test_state_dict_round_trip_copies_values():
    source, target = _small_net(), _small_net()
    rng = np.random.default_rng(0)
    state = {k: rng.standard_normal(v.shape) for k, v in source.state_dict().items()}  # float64 values
    state["1.running_var"] = np.abs(state["1.running_var"]) + 0.5
    target.load_state_dict(state)
    for key, value in target.state_dict().items():
        assert value.dtype == np.float32  # cast to the module's dtype
        np.testing.assert_allclose(value, state[key].astype(np.float32))
    state["0.weight"][...] = 0  # a copy was taken: later changes to the source do not leak in
    assert np.abs(target.state_dict()["0.weight"]).sum() > 0
    nested = [[1.0, 2.0, 3.0]]  # anything asarray accepts
    linear = nn.Linear(3, 1, bias=False)
    linear.load_state_dict({"weight": nested})
    np.testing.assert_array_equal(linear.weight.data, np.array(nested, np.float32))


def test_state_dict_errors_list_missing_and_unexpected_keys():
    net = _small_net()
    state = dict(net.state_dict())
    del state["1.running_var"]
    state["2.weight"] = np.ones(2)
    with pytest.raises(KeyError, match=r"missing \['1.running_var'\]; unexpected \['2.weight'\]"):
        net.load_state_dict(state)
    state = dict(net.state_dict())
    before = {k: v.copy() for k, v in state.items()}
    state["5.weight"] = np.ones((3, 7))
    state["0.weight"] = np.zeros_like(state["0.weight"])
    with pytest.raises(ValueError, match=r"'5.weight' must have shape \(3, 32\); got \(3, 7\)"):
        net.load_state_dict(state)
    for key, value in net.state_dict().items():  # nothing was changed by the failed load
        np.testing.assert_array_equal(value, before[key])
    with pytest.raises(TypeError, match="mapping"):
        net.load_state_dict([("0.weight", 1)])


def test_train_eval_modes_change_batchnorm_and_dropout():
    net = _small_net()
    x = np.random.default_rng(1).standard_normal((4, 1, 4, 4)).astype(np.float32)
    net.train()
    assert all(m.training for _, m in net.named_modules())
    a, b = net(x), net(x)
    assert not np.array_equal(a, b)  # new dropout masks (and running stats moved)
    net.eval()
    assert not any(m.training for _, m in net.named_modules())
    np.testing.assert_array_equal(net(x), net(x))


def test_no_grad_keeps_nothing_for_backward():
    net = _small_net()
    x = np.ones((2, 1, 4, 4), np.float32)
    with nn.no_grad():
        assert not nn.grad_enabled()
        net(x)
    assert nn.grad_enabled()
    assert net[0]._x is None and net[5]._x is None


def test_gradients_accumulate_until_zero_grad():
    layer = nn.Linear(3, 2, seed=0)
    x = np.ones((1, 3), np.float32)
    layer(x)
    layer.backward(np.ones((1, 2), np.float32))
    first = layer.weight.grad.copy()
    layer(x)
    layer.backward(np.ones((1, 2), np.float32))
    np.testing.assert_allclose(layer.weight.grad, 2 * first)
    optimiser = nn.SGD(layer.parameters(), lr=0.1)
    optimiser.zero_grad()
    assert layer.weight.grad is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(lr=0), "`lr` must be positive"),
        (dict(lr=0.1, momentum=1.0), "`momentum`"),
        (dict(lr=0.1, weight_decay=-1), "`weight_decay`"),
    ],
)
def test_sgd_rejects_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        nn.SGD(nn.Linear(2, 2).parameters(), **kwargs)


def test_sequential_rejects_non_modules_and_indexes():
    with pytest.raises(TypeError, match="argument 1 is int"):
        nn.Sequential(nn.ReLU(), 3)
    seq = nn.Sequential(nn.ReLU(), nn.Flatten())
    assert isinstance(seq[1], nn.Flatten) and len(seq) == 2 and isinstance(seq[-1], nn.Flatten)
    assert "(0): ReLU()" in repr(seq)


def test_layer_times_cover_every_leaf_in_both_directions():
    net = _small_net()
    x = np.ones((2, 1, 4, 4), np.float32)
    with nn.record_layer_times(net) as times:
        y = net(x)
        net.backward(np.ones_like(y))
    names = ["0", "1", "2", "3", "4", "5"]
    assert list(times.totals("forward")) == names
    assert list(times.totals("backward")) == names[::-1]
    assert all(s >= 0 for s in times.totals("forward").values())
    categories = times.by_category("forward")
    assert set(categories) == {"convolution", "batch norm", "activation", "reshape", "element-wise", "fully connected"}
    assert sum(categories.values()) == pytest.approx(sum(times.totals("forward").values()))
    net(x)  # outside the block: nothing more recorded
    assert len(times.samples[("0", "forward")]) == 1


def test_to_cpu_keeps_numpy_and_rejects_unknown_devices():
    net = _small_net().to("cpu")
    assert all(isinstance(p.data, np.ndarray) for p in net.parameters())
    with pytest.raises(ValueError, match="'cpu' or 'gpu'"):
        net.to("tpu")
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="needs CuPy"):
            net.to("gpu")


@pytest.mark.parametrize("backend", ["numpy", "cython"])
def test_sequential_fuses_conv_and_relu_like_the_separate_layers(backend):
    """Conv2D + ReLU and Conv2D + (Identity) + ReLU6 run as one call each (activation='relu' / 'relu6')
    give the separate layers' values and gradients."""
    from convsuite import nn

    def net(fuse):
        return nn.Sequential(
            nn.Conv2D(3, 5, 3, padding=1, backend=backend, seed=1),
            nn.ReLU(),
            nn.Conv2D(5, 4, 3, backend=backend, seed=2),
            nn.Identity(),  # what a folded BatchNorm leaves: the pair is still fused
            nn.ReLU6(),
            nn.Conv2D(4, 4, 1, backend=backend, seed=3),
            fuse_activations=fuse,
        )

    x = 20 * np.random.default_rng(0).standard_normal((2, 3, 9, 8)).astype(np.float32)
    fused, plain = net(True), net(False)
    y_fused, y_plain = fused(x), plain(x)
    assert fused._fused == {1: 0, 4: 2} and plain._fused == {}
    inner = plain[4](plain[3](plain[2](plain[1](plain[0](x)))))  # recomputes plain's caches alike
    assert (inner == 0).any() and (inner == 6).any() and ((inner > 0) & (inner < 6)).any()  # every piece of ReLU6
    np.testing.assert_allclose(y_fused, y_plain, rtol=1e-6, atol=1e-5)
    grad = np.random.default_rng(1).standard_normal(y_plain.shape).astype(np.float32)
    gx_fused, gx_plain = fused.backward(grad), plain.backward(grad)
    np.testing.assert_allclose(gx_fused, gx_plain, rtol=1e-5, atol=1e-6)
    for (name, a), (_, b) in zip(fused.named_parameters(), plain.named_parameters()):
        np.testing.assert_allclose(a.grad, b.grad, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("activation", [nn.ReLU, nn.ReLU6])
def test_fused_gradients_do_not_move_when_the_caller_edits_the_output_in_place(activation, backend):
    """A fused conv + activation keeps its own gradient mask: the array it returns is the caller's.

    It once kept that array as the mask, so ``y -= 1`` before the backward cut the gradient in other
    places (relative error 0.88 against the separate layers, which keep their own masks)."""

    def gradients(fuse, edit):
        conv = nn.Conv2D(4, 4, 3, padding=1, backend=backend, seed=0)
        net = nn.Sequential(conv, activation(), fuse_activations=fuse)
        x = 4 * np.random.default_rng(0).standard_normal((2, 4, 7, 7)).astype(np.float32)
        y = net(x)
        assert net._fused == ({1: 0} if fuse else {})
        if edit:
            y -= 3.0  # moves every output across 0 (and 6) somewhere
        grad_x = net.backward(np.ones_like(y))
        return grad_x, conv.weight.grad, conv.bias.grad

    want = gradients(fuse=False, edit=False)
    for fuse in (True, False):
        for got, expected in zip(gradients(fuse, edit=True), want):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_sequential_fuse_activations_must_be_a_bool():
    from convsuite import nn

    with pytest.raises(TypeError, match="`fuse_activations` must be True or False; got 'yes'"):
        nn.Sequential(nn.ReLU(), fuse_activations="yes")


def test_state_generation_moves_only_when_state_is_replaced():
    # CapturedNetwork re-reads its graphs' addresses only when this number moved.
    from convsuite.nn.module import state_generation

    net = nn.Sequential(nn.Conv2D(1, 2, 3, backend="numpy"), nn.ReLU())
    x = np.ones((1, 1, 5, 5), np.float32)
    before = state_generation()
    net(x)  # a forward pass caches inputs: not state
    net.layer_cache_note = 1  # a plain attribute: not state
    assert state_generation() == before
    conv = net[0]
    conv.weight.data = conv.weight.data.copy()  # a parameter's array replaced
    after_data = state_generation()
    assert after_data != before
    conv.bias = nn.Parameter(np.zeros(2, np.float32))  # a parameter replaced
    after_param = state_generation()
    assert after_param != after_data
    net.extra = nn.ReLU()  # a child added
    assert state_generation() != after_param
    moved = state_generation()
    net.extra = 3  # a child replaced by a plain value: the child is gone
    assert state_generation() != moved
