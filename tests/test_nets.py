"""convsuite.nets: MobileNetV2 equal to torchvision, LeNet-5 shapes and training, profiles, the train command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import convsuite
from convsuite import nets, nn

from . import mobilenet_recipe as recipe

FIXTURE = np.load(Path(__file__).parent / "data" / recipe.FIXTURE)
KEYS = [str(k) for k in FIXTURE["keys"]]
SHAPES = [tuple(int(n) for n in row if n >= 0) for row in FIXTURE["shapes"]]
CPU_FAST = [b.name for b in convsuite.list_backends() if b.device == "cpu" and b.name != "python" and b.available]


def _loaded_mobilenet(backend=None) -> nets.MobileNetV2:
    net = nets.mobilenet_v2(backend=backend).eval()
    net.load_state_dict(recipe.seeded_state_dict(zip(KEYS, SHAPES), int(FIXTURE["weight_seed"])))
    return net


def _relative_error(got, expected) -> float:
    return float(np.abs(got - expected).max() / np.abs(expected).max())


def test_mobilenet_state_dict_is_torchvisions():
    state = nets.mobilenet_v2().state_dict()
    assert list(state) == KEYS  # names and order of torchvision's, without num_batches_tracked
    assert [tuple(v.shape) for v in state.values()] == SHAPES
    assert all(v.dtype == np.float32 for v in state.values())
    assert nets.mobilenet_v2(num_classes=10, dtype="float64").state_dict()["classifier.1.weight"].shape == (10, 1280)


def test_mobilenet_small_input_matches_torchvision_on_every_backend(backend):
    """The 32x32 input: small enough for every backend, the pure-Python one included."""
    net = _loaded_mobilenet(backend)
    x = recipe.seeded_input(int(FIXTURE["input_seed"]), tuple(FIXTURE["input_shape_32"]))
    logits = net(x)
    assert logits.dtype == np.float32 and logits.shape == (1, 1000)
    assert _relative_error(logits, FIXTURE["logits_float64_32"]) <= 1e-4


@pytest.mark.parametrize("backend", CPU_FAST)
def test_mobilenet_224_matches_torchvision(backend):
    net = _loaded_mobilenet(backend)
    x = recipe.seeded_input(int(FIXTURE["input_seed"]), tuple(FIXTURE["input_shape_224"]))
    logits = net(x)
    assert logits.dtype == np.float32 and logits.shape == (2, 1000)
    assert _relative_error(logits, FIXTURE["logits_float64_224"]) <= 1e-4
    assert _relative_error(logits, FIXTURE["logits_float32_224"]) <= 1e-4
    folded = nn.fold_batchnorms(net)
    assert _relative_error(folded(x), FIXTURE["logits_float64_224"]) <= 1e-4
    assert sum(isinstance(m, nn.BatchNorm2D) for _, m in folded.named_modules()) == 0


def test_mobilenet_matches_live_torchvision():
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(weights=None, num_classes=10).eval()
    with torch.no_grad():  # non-trivial running statistics
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    net = nets.mobilenet_v2(num_classes=10).eval()
    net.load_state_dict({k: v.numpy() for k, v in model.state_dict().items() if "num_batches_tracked" not in k})
    x = np.random.default_rng(0).standard_normal((2, 3, 64, 64)).astype(np.float32)
    with torch.no_grad():
        expected = model.double()(torch.from_numpy(x).double()).numpy()
    assert _relative_error(net(x), expected) <= 1e-4


def test_mobilenet_backward_reaches_every_parameter():
    net = nets.mobilenet_v2(num_classes=4)
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    loss = nn.CrossEntropyLoss()
    loss(net(x), np.array([1, 3]))
    grad_x = net.backward(loss.backward())
    assert grad_x.shape == x.shape and np.isfinite(grad_x).all()
    assert all(p.grad is not None and p.grad.shape == p.shape for p in net.parameters())


@pytest.mark.parametrize("variant, size, flat", [("classic", 32, 400), ("ece408-fa21", 86, 4624)])
def test_lenet5_variants(variant, size, flat):
    net = nets.lenet5(variant)
    x = np.zeros((3, 1, size, size), np.float32)
    assert net(x).shape == (3, 10)
    linear = [m for m in net if isinstance(m, nn.Linear)]
    assert linear[0].in_features == flat and linear[-1].out_features == 10
    convs = [m for m in net if isinstance(m, nn.Conv2D)]
    assert [c.kernel_size for c in convs] == [(5, 5)] * 2 if variant == "classic" else [(7, 7)] * 2
    with pytest.raises(ValueError, match="`variant` must be one of 'classic', 'ece408-fa21'"):
        nets.lenet5("alexnet")


def test_lenet5_seed_gives_the_same_weights():
    a, b, c = nets.lenet5(seed=1), nets.lenet5(seed=1), nets.lenet5(seed=2)
    for key, value in a.state_dict().items():
        np.testing.assert_array_equal(value, b.state_dict()[key])
    assert not np.array_equal(a.state_dict()["0.weight"], c.state_dict()["0.weight"])


def test_digits_split_is_stratified_and_resized():
    pytest.importorskip("sklearn")
    data = nets.data.load_digits_split(32)
    assert data.x_train.shape[1:] == (1, 32, 32) and len(data.x_train) + len(data.x_test) == 1797
    assert data.x_train.dtype == np.float32 and 0 <= data.x_train.min() and data.x_train.max() <= 1
    assert set(np.unique(data.y_test)) == set(range(10))
    big = nets.data.load_digits_split(86)
    assert big.x_test.shape[1:] == (1, 86, 86)


def test_training_is_deterministic_for_a_seed():
    pytest.importorskip("sklearn")
    config = nets.TrainConfig(backend="numpy", epochs=1, batch=64, seed=3)
    first, second = nets.train_lenet5(config), nets.train_lenet5(config)
    assert first.loss_per_epoch == second.loss_per_epoch
    for key, value in first.network.state_dict().items():
        np.testing.assert_array_equal(value, second.network.state_dict()[key])
    other = nets.train_lenet5(nets.TrainConfig(backend="numpy", epochs=1, batch=64, seed=4))
    assert other.loss_per_epoch[0] != first.loss_per_epoch[0]


def test_training_learns_the_digits():
    """Three epochs already pass 85% (the default ten reach >= 95%: bench.networks --train)."""
    pytest.importorskip("sklearn")
    backend = "cython" if "cython" in CPU_FAST else "numpy"
    result = nets.train_lenet5(nets.TrainConfig(backend=backend, epochs=3, seed=0, lr=0.05))
    assert result.loss_per_epoch[-1] < 0.25 * result.loss_per_epoch[0]
    assert result.test_accuracy >= 0.85 and result.test_accuracy == result.test_accuracy_per_epoch[-1]


def test_train_command_writes_train_json(tmp_path, capsys):
    pytest.importorskip("sklearn")
    from convsuite.cli import main

    code = main(
        [
            "train",
            "lenet5",
            "--data",
            "digits",
            "--backend",
            "numpy",
            "--epochs",
            "1",
            "--batch",
            "128",
            "--seed",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    report = json.loads((tmp_path / "train.json").read_text())
    assert 0 <= report["test_accuracy"] <= 1 and len(report["loss_per_epoch"]) == 1
    assert report["backend"] == "numpy" and report["epochs"] == 1 and report["batch"] == 128
    layers = report["layer_seconds"]
    assert layers["0"]["category"] == "convolution" and layers["0"]["forward"] > 0 and layers["0"]["backward"] > 0
    assert "test accuracy" in capsys.readouterr().out
    trained = nets.lenet5()
    trained.load_state_dict(np.load(tmp_path / report["weights"]))
    data = nets.data.load_digits_split(32, seed=1)
    assert nets.evaluate(trained, data.x_test, data.y_test) == report["test_accuracy"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--backend", "nosuch"], "--backend must be one of"),
        (["--lr", "-1"], "argument --lr: must be a finite number > 0"),
    ],
)
def test_train_command_rejects_bad_options(argv, message, capsys):
    from convsuite.cli import main

    try:  # a check after parsing returns 2; argparse's own (the --lr type) exits with 2
        status = main(["train", "lenet5", *argv])
    except SystemExit as exc:
        status = exc.code
    assert status == 2
    assert message in capsys.readouterr().err


def test_profile_reports_layers_categories_and_totals():
    net = nets.lenet5().eval()
    x = np.random.default_rng(0).standard_normal((4, 1, 32, 32)).astype(np.float32)
    report = nets.profile(net, x, repeat=2, backward=True)
    assert [row["name"] for row in report.layers] == [str(i) for i in range(len(net))]
    categories = report.by_category()
    assert categories["convolution"]["layers"] == 2 and categories["pooling"]["layers"] == 2
    assert categories["fully connected"]["layers"] == 3
    # A ReLU fused into the convolution before it (Sequential) has a zero row: its work is the conv's.
    fused = {str(i) for end, start in net._fused.items() for i in range(start + 1, end + 1)}
    assert all(row["forward_s"] > 0 and row["backward_s"] > 0 for row in report.layers if row["name"] not in fused)
    assert report.total_s["forward"] > 0 and report.total_s["backward"] > 0 and report.device == "cpu"
    text = report.table()
    assert "convolution" in text and "end to end" in text
    assert json.dumps(report.as_dict())
    with pytest.raises(ValueError, match="`repeat`"):
        nets.profile(net, x, repeat=0)


def test_mobilenet_profile_has_the_kitten_layer_counts():
    """52 convolutions, 10 residual additions, 1 pooling layer (the kitten report's network)."""
    net = nets.mobilenet_v2().eval()
    x = np.zeros((1, 3, 32, 32), np.float32)
    counts = nets.profile(net, x, repeat=1, warmup=0).by_category()
    assert counts["convolution"]["layers"] == 52
    assert counts["element-wise"]["layers"] == 10 + 1  # residual adds and the classifier's dropout
    assert counts["pooling"]["layers"] == 1 and counts["fully connected"]["layers"] == 1


def test_captured_network_checks_its_arguments():
    """The checks come before anything touches CUDA (graph replay itself: tests/test_nets_gpu.py)."""
    with pytest.raises(TypeError, match="convsuite.nn.Module"):
        nn.CapturedNetwork(object())
    with pytest.raises(ValueError, match="'recapture' or 'eager'"):
        nn.CapturedNetwork(nn.ReLU(), on_new_shape="never")
    with pytest.raises(ValueError, match="`max_graphs`"):
        nn.CapturedNetwork(nn.ReLU(), max_graphs=0)
    net = nets.lenet5()
    with pytest.raises(ValueError, match="evaluation mode"):
        nn.CapturedNetwork(net)(np.zeros((1, 1, 32, 32), np.float32))
    with pytest.raises(TypeError, match="CuPy array"):
        nn.CapturedNetwork(net.eval())(np.zeros((1, 1, 32, 32), np.float32))


def test_ece408_times_split_op_and_layer_time():
    net = nets.lenet5("ece408-fa21")
    rng = np.random.default_rng(0)
    x = rng.random((6, 1, 86, 86), dtype=np.float32)
    with nn.no_grad():
        labels = net.eval()(x).argmax(axis=1)
    report = nets.ece408_times(net, x, labels, batch=4)
    assert report["accuracy"] == 1.0 and report["images"] == 6
    assert len(report["op_time_s"]) == len(report["layer_time_s"]) == 2
    for op, layer in zip(report["op_time_s"], report["layer_time_s"]):
        assert 0 < op <= layer  # the kernel window lies inside the layer's
    assert report["total_layer_time_s"] <= report["whole_network_s"]
