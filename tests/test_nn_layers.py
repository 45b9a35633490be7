"""convsuite.nn layers: forward semantics and backward against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from convsuite import nn

from .nn_gradcheck import check_layer

F64 = dict(dtype="float64")


def _x(shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape)


LAYERS = {
    "conv2d": (lambda: nn.Conv2D(3, 4, 3, padding=1, seed=0, **F64), (2, 3, 6, 5)),
    "conv2d-strided-grouped": (
        lambda: nn.Conv2D(4, 6, (3, 2), stride=2, padding=((1, 0), (0, 1)), groups=2, seed=1, **F64),
        (2, 4, 7, 6),
    ),
    "conv2d-depthwise-nobias": (
        lambda: nn.Conv2D(4, 4, 3, stride=2, padding=1, groups=4, bias=False, seed=2, **F64),
        (1, 4, 6, 6),
    ),
    "conv2d-dilated-same": (lambda: nn.Conv2D(2, 3, 3, dilation=2, padding="same", seed=3, **F64), (2, 2, 7, 7)),
    "conv1d": (lambda: nn.Conv1D(3, 5, 4, stride=2, padding=2, seed=4, **F64), (2, 3, 11)),
    "linear": (lambda: nn.Linear(7, 5, seed=0, **F64), (4, 7)),
    "linear-nobias": (lambda: nn.Linear(7, 3, bias=False, seed=0, **F64), (2, 7)),
    "relu": (lambda: nn.ReLU(), (2, 3, 4, 4)),
    "relu6": (lambda: nn.ReLU6(), (2, 3, 4, 4)),
    "maxpool2d": (lambda: nn.MaxPool2D(2), (2, 3, 6, 7)),
    "maxpool2d-overlap-pad": (lambda: nn.MaxPool2D(3, stride=2, padding=1), (2, 2, 7, 6)),
    "maxpool1d": (lambda: nn.MaxPool1D(3, stride=2, padding=1), (2, 3, 9)),
    "avgpool2d": (lambda: nn.AvgPool2D(2), (2, 3, 6, 6)),
    "avgpool2d-overlap-pad": (lambda: nn.AvgPool2D((3, 2), stride=(2, 1), padding=(1, 1)), (1, 2, 7, 5)),
    "adaptive-avgpool": (lambda: nn.AdaptiveAvgPool2D(1), (2, 3, 5, 4)),
    "batchnorm-train": (lambda: nn.BatchNorm2D(3, **F64), (4, 3, 3, 2)),
    "batchnorm-eval": (lambda: _trained_bn().eval(), (4, 3, 3, 2)),
    "flatten": (lambda: nn.Flatten(), (2, 3, 2, 2)),
    "dropout-eval": (lambda: nn.Dropout(0.3).eval(), (3, 5)),
    "sequential": (
        lambda: nn.Sequential(
            nn.Conv2D(2, 3, 3, padding=1, seed=0, **F64),
            nn.BatchNorm2D(3, **F64),
            nn.ReLU6(),
            nn.MaxPool2D(2),
            nn.Flatten(),
            nn.Linear(12, 4, seed=0, **F64),
        ),
        (3, 2, 4, 4),
    ),
}


def _trained_bn() -> nn.BatchNorm2D:
    """A batch norm with non-trivial running statistics, scale and shift."""
    bn = nn.BatchNorm2D(3, **F64)
    rng = np.random.default_rng(5)
    bn.load_state_dict(
        {
            "weight": rng.uniform(0.5, 2, 3),
            "bias": rng.normal(size=3),
            "running_mean": rng.normal(size=3),
            "running_var": rng.uniform(0.5, 2, 3),
        }
    )
    return bn


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_backward_matches_finite_differences(name):
    make, shape = LAYERS[name]
    check_layer(make(), _x(shape))


def test_conv_layer_backward_on_every_backend(backend):
    layer = nn.Conv2D(2, 4, 3, stride=2, padding=1, groups=2, seed=0, backend=backend, **F64)
    check_layer(layer, _x((2, 2, 5, 6)))


def test_cross_entropy_gradient_and_stability():
    loss = nn.CrossEntropyLoss()
    logits = _x((5, 4)) * 3
    targets = np.array([0, 3, 1, 1, 2])
    value = loss(logits, targets)
    shifted = logits - logits.max(axis=1, keepdims=True)
    expected = -(shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True)))[np.arange(5), targets].mean()
    np.testing.assert_allclose(value, expected)
    grad = loss.backward()
    eps = 1e-6
    for i, j in [(0, 0), (1, 3), (4, 1), (2, 2)]:
        plus, minus = logits.copy(), logits.copy()
        plus[i, j] += eps
        minus[i, j] -= eps
        np.testing.assert_allclose(grad[i, j], (loss(plus, targets) - loss(minus, targets)) / (2 * eps), rtol=1e-6)
    # Huge logits: no overflow, no NaN, the right answer.
    big = np.array([[1000.0, 0.0], [0.0, -1000.0]], dtype=np.float32)
    assert np.isfinite(loss(big, np.array([0, 0]))) and float(loss(big, np.array([0, 0]))) == pytest.approx(0.0)
    assert float(loss(big, np.array([1, 0]))) == pytest.approx(500.0)


@pytest.mark.parametrize(
    "bad, message",
    [
        (np.array([0, 5]), r"\[0, 4\)"),
        (np.array([0.0, 1.0]), "integer class indices"),
        (np.array([0, 1, 2]), r"shape \(2,\)"),
    ],
)
def test_cross_entropy_rejects_bad_targets(bad, message):
    with pytest.raises(ValueError, match=message):
        nn.CrossEntropyLoss()(np.zeros((2, 4)), bad)


def test_relu_family_gradients_at_the_kinks_nan_and_inf_follow_torch():
    """threshold_backward / hardtanh_backward: cut at and beyond the kinks, passed at a NaN input,
    an inf gradient kept where it passes (no inf * 0)."""
    x = np.array([-1.0, 0.0, 3.0, 6.0, 7.0, np.nan])
    g = np.array([1.0, 1.0, np.inf, 1.0, 1.0, 2.0])
    for layer, passed in ((nn.ReLU(), [0, 0, np.inf, 1, 1, 2]), (nn.ReLU6(), [0, 0, np.inf, 0, 0, 2])):
        layer(x)
        np.testing.assert_array_equal(layer.backward(g), passed)
    torch = pytest.importorskip("torch")
    for layer, fn in ((nn.ReLU(), torch.relu), (nn.ReLU6(), torch.nn.functional.relu6)):
        t = torch.tensor(x, requires_grad=True)
        fn(t).backward(torch.tensor(g))
        layer(x)
        np.testing.assert_array_equal(layer.backward(g), t.grad.numpy())


def test_sequential_does_not_fuse_across_a_layer_that_computes():
    class Shift(nn.Identity):
        def forward(self, x):
            return x - 10

    net = nn.Sequential(nn.Conv2D(1, 2, 3, seed=0, **F64), Shift(), nn.ReLU())
    x = _x((1, 1, 6, 6))
    assert nn.Identity().fusion_transparent and not Shift().fusion_transparent
    np.testing.assert_array_equal(net(x), np.maximum(net[0](x) - 10, 0))
    assert net._fused == {}


def test_relu_family_values():
    x = np.array([-2.0, 0.0, 3.0, 6.0, 7.5])
    np.testing.assert_array_equal(nn.ReLU()(x), [0, 0, 3, 6, 7.5])
    np.testing.assert_array_equal(nn.ReLU6()(x), [0, 0, 3, 6, 6])
    assert nn.ReLU6()(x.astype(np.float32)).dtype == np.float32


def test_pools_match_a_loop_definition():
    x = _x((2, 3, 7, 8), seed=3)
    got_max = nn.MaxPool2D(3, stride=2, padding=1)(x)
    got_avg = nn.AvgPool2D(3, stride=2, padding=1)(x)
    padded_max = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    padded_avg = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ho, wo = (7 + 2 - 3) // 2 + 1, (8 + 2 - 3) // 2 + 1
    assert got_max.shape == got_avg.shape == (2, 3, ho, wo)
    for i in range(ho):
        for j in range(wo):
            window = (slice(None), slice(None), slice(2 * i, 2 * i + 3), slice(2 * j, 2 * j + 3))
            np.testing.assert_array_equal(got_max[:, :, i, j], padded_max[window].max(axis=(2, 3)))
            np.testing.assert_allclose(got_avg[:, :, i, j], padded_avg[window].mean(axis=(2, 3)))


def test_dropout_training_mask_scales_and_backward_uses_it():
    layer = nn.Dropout(0.25, seed=0)
    x = np.ones((200, 100))
    y = layer(x)
    kept = y != 0
    assert 0.7 < kept.mean() < 0.8
    np.testing.assert_allclose(y[kept], 1 / 0.75)
    G = _x(x.shape)
    np.testing.assert_array_equal(layer.backward(G), G * y)
    layer.eval()
    assert layer(x) is x
    with pytest.raises(ValueError, match=r"`p` must be a number in \[0, 1\)"):
        nn.Dropout(1.0)


def test_batchnorm_running_statistics_follow_pytorch_rule():
    bn = nn.BatchNorm2D(2, momentum=0.5, **F64)
    x = _x((3, 2, 4, 4))
    y = bn(x)
    n = 3 * 16
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    np.testing.assert_allclose(bn.running_mean, 0.5 * mean)
    np.testing.assert_allclose(bn.running_var, 0.5 + 0.5 * var * n / (n - 1))
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0, atol=1e-12)
    with pytest.raises(ValueError, match="more than one value per channel"):
        bn(np.ones((1, 2, 1, 1)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batchnorm_inference_pass_equals_the_normalising_form(dtype):
    """Without gradients, eval mode runs one affine pass per channel (PyTorch's inference form)."""
    bn = _trained_bn_n(5)
    for name in ("weight", "bias"):
        getattr(bn, name).data = getattr(bn, name).data.astype(dtype)
    bn.running_mean, bn.running_var = bn.running_mean.astype(dtype), bn.running_var.astype(dtype)
    x = _x((2, 5, 4, 3)).astype(dtype)
    x[0, 1, 0, 0], x[1, 2, 3, 2] = np.nan, np.inf
    y_kept = bn(x)  # gradients enabled: the normalising form, with its cache
    with nn.no_grad():
        y = bn(x)
    assert y.dtype == dtype and bn._cache is None
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(y, y_kept, rtol=8 * eps, atol=8 * eps * np.abs(y_kept[np.isfinite(y_kept)]).max())
    assert np.isnan(y[0, 1, 0, 0]) and np.isinf(y[1, 2, 3, 2])


def test_fold_batchnorm_equals_conv_then_bn():
    conv = nn.Conv2D(3, 4, 3, stride=2, padding=1, seed=0, **F64)
    bn = _trained_bn_n(4)
    x = _x((2, 3, 7, 7))
    np.testing.assert_allclose(nn.fold_batchnorm(conv, bn)(x), bn(conv(x)), rtol=1e-12, atol=1e-12)
    net = nn.Sequential(nn.Conv2D(3, 4, 3, bias=False, seed=1, **F64), _trained_bn_n(4), nn.ReLU())
    folded = nn.fold_batchnorms(net)
    assert [type(m).__name__ for m in folded] == ["Conv2D", "Identity", "ReLU"]
    np.testing.assert_allclose(folded(x), net.eval()(x), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="4 output channels"):
        nn.fold_batchnorm(conv, _trained_bn_n(3))


def _trained_bn_n(c: int) -> nn.BatchNorm2D:
    bn = nn.BatchNorm2D(c, **F64)
    rng = np.random.default_rng(c)
    bn.load_state_dict(
        {
            "weight": rng.uniform(0.5, 2, c),
            "bias": rng.normal(size=c),
            "running_mean": rng.normal(size=c),
            "running_var": rng.uniform(0.5, 2, c),
        }
    )
    return bn.eval()


def test_add_layer():
    a, b = _x((2, 3)), _x((2, 3), seed=2)
    add = nn.Add()
    np.testing.assert_array_equal(add(a, b), a + b)
    ga, gb = add.backward(a)
    assert ga is a and gb is a
    with pytest.raises(ValueError, match="one shape"):
        add(a, b[:1])


def test_float32_in_float32_out_through_a_network():
    net = nn.Sequential(
        nn.Conv2D(1, 2, 3, seed=0),
        nn.BatchNorm2D(2),
        nn.ReLU6(),
        nn.AvgPool2D(2),
        nn.AdaptiveAvgPool2D(),
        nn.Flatten(),
        nn.Linear(2, 3, seed=0),
    )
    x = _x((2, 1, 6, 6)).astype(np.float32)
    y = net(x)
    assert y.dtype == np.float32
    grad = net.backward(np.ones_like(y))
    assert grad.dtype == np.float32 and all(p.grad.dtype == np.float32 for p in net.parameters())


def test_backward_without_forward_is_a_clear_error():
    with pytest.raises(RuntimeError, match="needs a forward pass"):
        nn.Conv2D(1, 1, 1).backward(np.ones((1, 1, 2, 2), np.float32))
    layer = nn.Linear(2, 2)
    with nn.no_grad():
        layer(np.ones((1, 2), np.float32))
    with pytest.raises(RuntimeError, match="gradients enabled"):
        layer.backward(np.ones((1, 2), np.float32))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: nn.AdaptiveAvgPool2D(2), "output_size"),
        (lambda: nn.MaxPool2D(2, padding=2), "at most half"),
        (lambda: nn.MaxPool2D(0), "kernel_size"),
        (lambda: nn.Linear(0, 3), "in_features"),
        (lambda: nn.BatchNorm2D(2, momentum=2), "momentum"),
        (lambda: nn.Conv2D(3, 4, 3, groups=2), "groups"),
        (lambda: nn.Conv2D(3, 4, 3, dtype="int8"), "dtype"),
        # named settings are checked when the layer is built, not at its first call
        (lambda: nn.Conv2D(3, 4, 3, backend="bogus"), "`backend` must be one of"),
        (lambda: nn.Conv2D(3, 4, 3, backend=1), "`backend` must be one of"),
        (lambda: nn.Conv1D(3, 4, 3, algorithm="bogus"), "`algorithm` must be 'auto' or one of"),
        (lambda: nn.Conv1D(3, 4, 3, algorithm=3), "`algorithm` must be a string"),
        (lambda: nn.Conv2D(2**40, 2**40, 3), r"in_channels=1099511627776, out_channels=1099511627776"),
    ],
)
def test_bad_settings_name_the_parameter(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()


def test_shape_errors_name_the_layer():
    with pytest.raises(ValueError, match=r"Linear\(4, 2\) expects input of shape \(B, 4\)"):
        nn.Linear(4, 2)(np.ones((3, 5), np.float32))
    with pytest.raises(ValueError, match=r"BatchNorm2D\(3\) expects"):
        nn.BatchNorm2D(3)(np.ones((2, 4, 2, 2), np.float32))
    with pytest.raises(ValueError, match="MaxPool2D expects input"):
        nn.MaxPool2D(2)(np.ones((2, 2), np.float32))


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: nn.Conv2D(2, 3, 3, **kw),
        lambda **kw: nn.Conv1D(2, 3, 3, **kw),
        lambda **kw: nn.Linear(4, 2, **kw),
    ],
)
@pytest.mark.parametrize(
    "kw, error, message",
    [
        (dict(seed=-1), ValueError, "`seed` must be None, an int >= 0"),
        (dict(seed=True), TypeError, "`seed` must be None, an int >= 0"),
        (dict(seed=1.5), TypeError, "`seed`"),
        (dict(dtype=None), TypeError, "`dtype` must be 'float32' or 'float64'"),
        (dict(dtype="int32"), TypeError, "`dtype` must be 'float32' or 'float64'"),
    ],
)
def test_layer_seed_and_dtype_are_validated_like_cs_conv2d_layers(make, kw, error, message):
    """nn layers share the checks of cs.Conv2D: the parameter is named, nothing is accepted silently."""
    with pytest.raises(error, match=message):
        make(**kw)


def test_nets_seed_is_validated():
    from convsuite import nets

    with pytest.raises(ValueError, match="`seed`"):
        nets.lenet5(seed=-3)
