"""convsuite.nn against torch autograd: outputs, input gradients, parameter gradients, SGD."""

from __future__ import annotations

import numpy as np
import pytest

from convsuite import nn

torch = pytest.importorskip("torch")
tnn = torch.nn

F64 = dict(dtype="float64")


def _copy_weights(ours: nn.Module, theirs) -> None:
    """Load a torch module's parameters and buffers into ours (matching names)."""
    state = {k: v.detach().numpy() for k, v in theirs.state_dict().items() if "num_batches_tracked" not in k}
    ours.load_state_dict(state)


def _pairs():
    torch.manual_seed(0)
    return {
        "conv2d": (
            nn.Conv2D(3, 4, 3, stride=2, padding=1, **F64),
            tnn.Conv2d(3, 4, 3, stride=2, padding=1),
            (2, 3, 7, 6),
        ),
        "conv2d-depthwise": (
            nn.Conv2D(4, 4, 3, padding=1, groups=4, bias=False, **F64),
            tnn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False),
            (2, 4, 5, 5),
        ),
        "conv1d": (
            nn.Conv1D(2, 3, 5, dilation=2, padding=4, **F64),
            tnn.Conv1d(2, 3, 5, dilation=2, padding=4),
            (2, 2, 12),
        ),
        "linear": (nn.Linear(6, 4, **F64), tnn.Linear(6, 4), (5, 6)),
        "relu": (nn.ReLU(), tnn.ReLU(), (2, 3, 4)),
        "relu6": (nn.ReLU6(), tnn.ReLU6(), (2, 3, 4)),
        "maxpool2d": (nn.MaxPool2D(3, stride=2, padding=1), tnn.MaxPool2d(3, stride=2, padding=1), (2, 3, 7, 8)),
        "maxpool1d": (nn.MaxPool1D(2), tnn.MaxPool1d(2), (2, 3, 9)),
        "avgpool2d": (nn.AvgPool2D(3, stride=2, padding=1), tnn.AvgPool2d(3, stride=2, padding=1), (2, 3, 7, 8)),
        "adaptive": (nn.AdaptiveAvgPool2D(1), tnn.AdaptiveAvgPool2d(1), (2, 3, 5, 6)),
        "batchnorm-train": (nn.BatchNorm2D(3, **F64), tnn.BatchNorm2d(3), (4, 3, 3, 5)),
        "flatten": (nn.Flatten(), tnn.Flatten(), (2, 3, 2, 2)),
    }


@pytest.mark.parametrize("name", sorted(_pairs()))
def test_layer_matches_torch_autograd(name):
    ours, theirs, shape = _pairs()[name]
    theirs = theirs.double()
    if list(theirs.state_dict()):
        _copy_weights(ours, theirs)
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape)
    tx = torch.tensor(x, requires_grad=True)
    ty = theirs(tx)
    G = rng.standard_normal(tuple(ty.shape))
    ty.backward(torch.tensor(G))
    y = ours(x)
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ours.backward(G), tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    theirs_params = dict(theirs.named_parameters())
    for key, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad, theirs_params[key].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=key)
    if isinstance(ours, nn.BatchNorm2D):
        np.testing.assert_allclose(ours.running_mean, theirs.running_mean.numpy(), rtol=1e-12)
        np.testing.assert_allclose(ours.running_var, theirs.running_var.numpy(), rtol=1e-12)


_POOL_GEOMETRIES = {
    "2x2 tiling": dict(kernel_size=2),
    "2x2 odd size (a row left out)": dict(kernel_size=2),
    "3x3 s2 p1 overlapping": dict(kernel_size=3, stride=2, padding=1),
    "3x3 s1 p1": dict(kernel_size=3, stride=1, padding=1),
    "2x2 s3 (gaps)": dict(kernel_size=2, stride=3),
    "(3, 2) s(1, 2) p(1, 0)": dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0)),
    "17x17 s5 p8 (int32 tap codes)": dict(kernel_size=17, stride=5, padding=8),
}
_POOL_SHAPES = {"2x2 odd size (a row left out)": (2, 3, 7, 9), "17x17 s5 p8 (int32 tap codes)": (1, 2, 19, 23)}


@pytest.fixture(params=["numba kernels", "numpy expressions"])
def pool_path(request, monkeypatch):
    """Each MaxPool2D path for NumPy arrays: numba's one-pass kernels, and the ufuncs without numba."""
    from convsuite.nn import pooling

    if request.param == "numba kernels":
        pytest.importorskip("numba")
        assert pooling._host_kernels() is not None
    else:
        monkeypatch.setattr(pooling, "_host_module", False)
    return request.param


@pytest.mark.parametrize("fill", ["ties", "nan", "-inf", "inf", "random"])
@pytest.mark.parametrize("geometry", sorted(_POOL_GEOMETRIES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_maxpool_matches_torch_on_ties_and_nonfinite(geometry, fill, dtype, pool_path):
    """Values and routed gradients as torch: first maximum of a tie, the last NaN, ``-inf`` windows."""
    args = _POOL_GEOMETRIES[geometry]
    shape = _POOL_SHAPES.get(geometry, (2, 3, 8, 6))
    rng = np.random.default_rng(hash((geometry, fill)) % 2**32)
    if fill == "ties":  # what ReLU leaves: many zeros, and repeated values
        x = np.maximum(rng.integers(-3, 3, shape), 0).astype(dtype)
    else:
        x = rng.standard_normal(shape).astype(dtype)
        if fill != "random":
            special = {"nan": np.nan, "-inf": -np.inf, "inf": np.inf}[fill]
            x[rng.random(shape) < 0.3] = special
            x[0, 0] = special  # whole windows of it, padding included
    tx = torch.tensor(x, requires_grad=True)
    ty = tnn.MaxPool2d(**args)(tx)
    G = rng.standard_normal(tuple(ty.shape)).astype(dtype)
    ty.backward(torch.tensor(G))
    ours = nn.MaxPool2D(**args)
    y = ours(x)
    assert y.dtype == x.dtype and y.shape == tuple(ty.shape)
    np.testing.assert_array_equal(y, ty.detach().numpy())
    # Overlapping windows sum gradients in another order than torch: a few ulps apart.
    rtol = 4 * np.finfo(dtype).eps
    np.testing.assert_allclose(ours.backward(G), tx.grad.numpy(), rtol=rtol, atol=rtol * np.abs(G).max())
    with nn.no_grad():  # the path that keeps no arg-max computes the same values
        np.testing.assert_array_equal(nn.MaxPool2D(**args)(x), y)


def test_maxpool_takes_strided_inputs_and_checks_the_gradient_shape(pool_path):
    """A non-contiguous input gives the contiguous result; a grad_y of another shape is refused."""
    rng = np.random.default_rng(5)
    base = rng.standard_normal((2, 6, 9, 10)).astype("float32")
    x = base[:, ::2, :, ::-1]
    pool = nn.MaxPool2D(3, stride=2, padding=1)
    y = pool(x)
    tx = torch.tensor(np.ascontiguousarray(x), requires_grad=True)
    ty = tnn.MaxPool2d(3, stride=2, padding=1)(tx)
    np.testing.assert_array_equal(y, ty.detach().numpy())
    G = rng.standard_normal(y.shape).astype("float32")
    ty.backward(torch.tensor(G))
    np.testing.assert_allclose(pool.backward(G[:, :, ::-1].copy()[:, :, ::-1]), tx.grad.numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"grad_y.*\(2, 3, 5, 5\).*\(2, 3, 5, 4\)"):
        pool.backward(G[..., :4])


def test_cross_entropy_matches_torch():
    rng = np.random.default_rng(2)
    logits, targets = rng.standard_normal((6, 5)) * 4, rng.integers(0, 5, 6)
    t = torch.tensor(logits, requires_grad=True)
    expected = tnn.CrossEntropyLoss()(t, torch.tensor(targets))
    expected.backward()
    loss = nn.CrossEntropyLoss()
    np.testing.assert_allclose(loss(logits, targets), expected.item(), rtol=1e-12)
    np.testing.assert_allclose(loss.backward(), t.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_sgd_training_steps_match_torch():
    """Five steps of SGD (momentum, weight decay) on a small CNN: parameters equal torch's."""
    torch.manual_seed(3)
    theirs = tnn.Sequential(
        tnn.Conv2d(1, 3, 3, padding=1),
        tnn.BatchNorm2d(3),
        tnn.ReLU(),
        tnn.MaxPool2d(2),
        tnn.Flatten(),
        tnn.Linear(12, 4),
    ).double()
    ours = nn.Sequential(
        nn.Conv2D(1, 3, 3, padding=1, **F64),
        nn.BatchNorm2D(3, **F64),
        nn.ReLU(),
        nn.MaxPool2D(2),
        nn.Flatten(),
        nn.Linear(12, 4, **F64),
    )
    _copy_weights(ours, theirs)
    settings = dict(lr=0.1, momentum=0.9, weight_decay=1e-3)
    t_opt = torch.optim.SGD(theirs.parameters(), **settings)
    o_opt = nn.SGD(ours.parameters(), **settings)
    loss, t_loss = nn.CrossEntropyLoss(), tnn.CrossEntropyLoss()
    rng = np.random.default_rng(4)
    for _ in range(5):
        x, y = rng.standard_normal((6, 1, 4, 4)), rng.integers(0, 4, 6)
        t_opt.zero_grad()
        t_loss(theirs(torch.tensor(x)), torch.tensor(y)).backward()
        t_opt.step()
        o_opt.zero_grad()
        loss(ours(x), y)
        ours.backward(loss.backward())
        o_opt.step()
    expected = {k: v.detach().numpy() for k, v in theirs.state_dict().items() if "num_batches" not in k}
    for key, value in ours.state_dict().items():
        np.testing.assert_allclose(value, expected[key], rtol=1e-9, atol=1e-12, err_msg=key)
