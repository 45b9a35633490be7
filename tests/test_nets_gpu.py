"""Networks on the GPU (cupy backend) and CUDA-graph replay: run on a GPU machine with `pytest -m gpu`.

Without cupy or a CUDA device every test here is skipped with that reason;
the argument checks of CapturedNetwork run everywhere (tests/test_nets.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import convsuite as cs
from convsuite import nets, nn

from . import mobilenet_recipe as recipe

INFO = {b.name: b for b in cs.list_backends()}["cupy"]
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not INFO.available, reason=f"cupy backend unavailable: {INFO.reason}"),
]
FIXTURE = np.load(Path(__file__).parent / "data" / recipe.FIXTURE)
KEYS = [str(k) for k in FIXTURE["keys"]]
SHAPES = [tuple(int(n) for n in row if n >= 0) for row in FIXTURE["shapes"]]


def _gpu_mobilenet(num_classes=1000):
    net = nets.mobilenet_v2(num_classes, backend="cupy").eval()
    if num_classes == 1000:
        net.load_state_dict(recipe.seeded_state_dict(zip(KEYS, SHAPES), int(FIXTURE["weight_seed"])))
    return net.to("gpu")


def _input(name):
    return recipe.seeded_input(int(FIXTURE["input_seed"]), tuple(FIXTURE[f"input_shape_{name}"]))


def _rel(got, expected) -> float:
    got = got.get() if hasattr(got, "get") else got
    return float(np.abs(got - expected).max() / np.abs(expected).max())


@pytest.mark.parametrize("size", ["224", "32"])
def test_mobilenet_on_the_gpu_matches_torchvision(size):
    import cupy

    net = _gpu_mobilenet()
    logits = net(cupy.asarray(_input(size)))
    assert isinstance(logits, cupy.ndarray) and logits.dtype == np.float32  # CuPy in, CuPy out
    assert _rel(logits, FIXTURE[f"logits_float64_{size}"]) <= 1e-4
    with nn.no_grad():  # the batch norms' inference pass: one affine kernel each
        assert _rel(net(cupy.asarray(_input(size))), FIXTURE[f"logits_float64_{size}"]) <= 1e-4
    assert _rel(nn.fold_batchnorms(net)(cupy.asarray(_input(size))), FIXTURE[f"logits_float64_{size}"]) <= 1e-4


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batchnorm_inference_kernel_equals_the_host_pass(dtype):
    import cupy

    rng = np.random.default_rng(2)
    bn = nn.BatchNorm2D(6, dtype=dtype).eval()
    bn.load_state_dict(
        {
            "weight": rng.uniform(0.5, 2, 6),
            "bias": rng.normal(size=6),
            "running_mean": rng.normal(size=6),
            "running_var": rng.uniform(0.5, 2, 6),
        }
    )
    x = rng.standard_normal((2, 6, 5, 7)).astype(dtype)
    x[1, 3, 2, 2] = np.nan
    with nn.no_grad():
        host = bn(x)
        bn.to("gpu")
        device = bn(cupy.asarray(x))
    assert isinstance(device, cupy.ndarray) and device.dtype == dtype
    eps = np.finfo(dtype).eps  # the kernel may fuse x * a + c into one FMA: an ulp or two apart
    cupy.testing.assert_allclose(device, host, rtol=4 * eps, atol=4 * eps * np.nanmax(np.abs(host)))
    assert bool(cupy.isnan(device[1, 3, 2, 2]))


@pytest.mark.parametrize("fill", ["ties", "nan", "-inf"])
@pytest.mark.parametrize("args", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1)])
def test_maxpool_on_the_gpu_equals_the_host_layer(args, fill):
    """The CuPy pass (NaN tested at every tap, no look first) routes as the NumPy one, which
    tests/test_nn_torch.py checks against torch.
    """
    import cupy

    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 9, 8))
    if fill == "ties":
        x = np.maximum(np.round(x), 0)
    else:
        x[rng.random(x.shape) < 0.3] = np.nan if fill == "nan" else -np.inf
    G = rng.standard_normal(nn.MaxPool2D(**args)(x).shape)
    host, device = nn.MaxPool2D(**args), nn.MaxPool2D(**args)
    expected_y, got_y = host(x), device(cupy.asarray(x))
    assert isinstance(got_y, cupy.ndarray)
    np.testing.assert_array_equal(got_y.get(), expected_y)
    np.testing.assert_allclose(device.backward(cupy.asarray(G)).get(), host.backward(G), rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize(
    "layer",
    [
        lambda: nn.MaxPool2D((1, 2**32), 1, (0, 2**31)),  # more taps than int32 codes hold; a few reach the input
        lambda: nn.MaxPool2D(5, 2, 2),
        lambda: nn.AvgPool2D(3, 2, 1),
        lambda: nn.AvgPool2D((1, 2**32), 1, (0, 2**31)),
        lambda: nn.AdaptiveAvgPool2D(),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_pooling_on_the_gpu_equals_the_host_layer(layer, dtype):
    """The CuPy pass visits the same taps as the NumPy one (only those that reach the input, a few even
    for 2**32-tap windows), pools integers in float64, and checks grad_y as the host layer does."""
    import cupy

    rng = np.random.default_rng(6)
    x = (rng.standard_normal((2, 3, 7, 6)) * 4).astype(dtype)
    host, device = layer(), layer()
    expected_y, got_y = host(x), device(cupy.asarray(x))
    assert isinstance(got_y, cupy.ndarray) and got_y.dtype == expected_y.dtype
    np.testing.assert_allclose(got_y.get(), expected_y, rtol=1e-6, atol=1e-6)
    G = rng.standard_normal(expected_y.shape).astype(expected_y.dtype)
    np.testing.assert_allclose(device.backward(cupy.asarray(G)).get(), host.backward(G), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="grad_y"):
        device.backward(cupy.asarray(G[:1]))


def test_lenet5_trains_on_the_gpu():
    pytest.importorskip("sklearn")
    result = nets.train_lenet5(nets.TrainConfig(backend="cupy", device="gpu"))
    assert result.test_accuracy >= 0.95


def test_graph_replay_equals_eager_and_is_never_stale():
    import cupy

    net = _gpu_mobilenet()
    graph = nn.CapturedNetwork(net)
    x1, x2 = cupy.asarray(_input("224")[:1]), cupy.asarray(_input("224")[1:])
    with nn.no_grad():
        eager1, eager2 = net(x1), net(x2)
    out1 = graph(x1)
    assert graph.fallback_reason is None and graph.captures == 1 and graph.replays == 1
    out2 = graph(x2)
    assert graph.captures == 1 and graph.replays == 2
    # Under capture the plans avoid cuBLAS (CuPy refuses it there), so some
    # layers run another algorithm than eagerly: equal to float32 rounding of
    # a different summation order, not bit for bit.
    assert _rel(out1, eager1.get()) <= 1e-5 and _rel(out2, eager2.get()) <= 1e-5
    assert not cupy.allclose(out1, out2)  # the first result was not overwritten by the second replay
    assert _rel(out1, FIXTURE["logits_float64_224"][:1]) <= 1e-4


def test_graph_recaptures_on_a_new_shape_or_new_weights():
    import cupy

    net = _gpu_mobilenet(num_classes=10)
    graph = nn.CapturedNetwork(net)
    small, large = (cupy.random.standard_normal(s, dtype=np.float32) for s in [(1, 3, 64, 64), (2, 3, 96, 96)])
    graph(small)
    out = graph(large)
    assert graph.captures == 2 and graph.fallback_reason is None
    with nn.no_grad():
        assert _rel(out, net(large).get()) <= 1e-5
    # New weights: the graph must not read the old arrays.
    state = {
        k: cupy.asnumpy(v) * 1.5 if k.endswith("classifier.1.weight") else cupy.asnumpy(v)
        for k, v in net.state_dict().items()
    }
    net.load_state_dict(state)
    out = graph(small)
    assert graph.captures == 3
    with nn.no_grad():
        assert _rel(out, net(small).get()) <= 1e-5


def test_graph_follows_in_place_updates_and_rechecks_replaced_state():
    import cupy

    net = _gpu_mobilenet(num_classes=10)
    graph = nn.CapturedNetwork(net)
    x = cupy.random.standard_normal((1, 3, 64, 64), dtype=np.float32)
    graph(x)
    graph(x)  # the replay path without any state change
    weight = net.classifier[1].weight
    weight.data *= 2  # in place: same address, the graph reads the new values without a recapture
    out = graph(x)
    assert graph.captures == 1
    with nn.no_grad():
        assert _rel(out, net(x).get()) <= 1e-5
    weight.data = cupy.asnumpy(weight.data)  # replaced by a host array: caught on the next call
    with pytest.raises(ValueError, match="parameters on the GPU"):
        graph(x)


def test_graph_eager_fallback_for_new_shapes():
    import cupy

    net = _gpu_mobilenet(num_classes=10)
    graph = nn.CapturedNetwork(net, on_new_shape="eager")
    graph(cupy.random.standard_normal((1, 3, 64, 64), dtype=np.float32))
    other = cupy.random.standard_normal((1, 3, 32, 32), dtype=np.float32)
    out = graph(other)
    assert graph.captures == 1 and graph.eager_calls == 1
    with nn.no_grad():
        cupy.testing.assert_allclose(out, net(other), rtol=1e-6, atol=1e-7)


def test_gpu_profile_times_layers_and_transfers_apart():
    net = _gpu_mobilenet()
    report = nets.profile(net, _input("224")[:1], repeat=3)  # NumPy input: uploaded, timed apart
    assert report.device == "gpu"
    assert report.transfer_s["host_to_device"] > 0 and report.transfer_s["device_to_host"] > 0
    assert report.by_category()["convolution"]["layers"] == 52
    assert all(row["forward_s"] > 0 for row in report.layers)
