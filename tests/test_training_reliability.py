"""The training side refuses what it cannot honour: nn layers, losses, optimisers, nets and ``convsuite train``.

Each test names a way a bad input used to give a wrong answer, a message
naming nothing, or a late failure (after a whole training run).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings

import numpy as np
import pytest

from convsuite import nets, nn
from convsuite.cli import main
from convsuite.nets import train as train_module


def _state(bn: nn.BatchNorm2D, **values) -> dict:
    state = {k: np.asarray(v).copy() for k, v in bn.state_dict().items()}
    state.update(values)
    return state


# --- 1, 2: BatchNorm2D input dtypes and its running statistics ------------


def test_batchnorm_computes_integer_input_in_float64():
    x = np.arange(16).reshape(1, 1, 4, 4)
    got = nn.BatchNorm2D(1)(x)
    expected = nn.BatchNorm2D(1, dtype="float64")(x.astype(np.float64))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected)
    assert np.abs(got).max() > 1  # it used to be all zeros (truncated mean and 1/std)
    evaluating = nn.BatchNorm2D(1).eval()
    np.testing.assert_allclose(evaluating(x), x / np.sqrt(1 + 1e-5), rtol=1e-6)


@pytest.mark.parametrize("dtype", [bool, complex, object])
def test_batchnorm_refuses_non_real_input(dtype):
    with pytest.raises(TypeError, match="real numeric dtype"):
        nn.BatchNorm2D(1)(np.ones((2, 1, 2, 2), dtype))


@pytest.mark.parametrize("batch_dtype", [np.float64, np.float16, np.int32])
def test_batchnorm_running_statistics_keep_the_layers_dtype(batch_dtype):
    bn = nn.BatchNorm2D(2)
    bn(np.arange(32).reshape(2, 2, 2, 4).astype(batch_dtype))
    assert bn.running_mean.dtype == bn.running_var.dtype == np.float32
    assert all(v.dtype == np.float32 for v in bn.state_dict().values())
    assert bn.running_mean[0] > 0


# --- 3: CrossEntropyLoss on empty batches and bad targets ------------------


@pytest.mark.parametrize("shape", [(0, 3), (0, 0)])
def test_cross_entropy_refuses_an_empty_batch(shape):
    ce = nn.CrossEntropyLoss()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "Mean of empty slice" on the way
        with pytest.raises(ValueError, match="`logits` must hold at least one sample"):
            ce(np.zeros(shape, np.float32), np.zeros(0, int))
    with pytest.raises(RuntimeError, match="needs a forward pass"):
        ce.backward()


def test_cross_entropy_forgets_an_earlier_batch_after_a_failed_call():
    ce = nn.CrossEntropyLoss()
    ce(np.zeros((2, 3), np.float32), np.array([0, 1]))
    with pytest.raises(ValueError):
        ce(np.zeros((0, 3), np.float32), np.zeros(0, int))
    with pytest.raises(RuntimeError, match="needs a forward pass"):
        ce.backward()


@pytest.mark.parametrize(
    "logits, targets, error, message",
    [
        (np.zeros((2, 0), np.float32), [0, 1], ValueError, r"at least one class \(K >= 1\)"),
        (np.zeros((2, 3), np.float32), [0, 3], ValueError, r"\[0, 3\); got values from 0 to 3"),
        (np.zeros((2, 3), np.float32), [-1, 0], ValueError, r"\[0, 3\); got values from -1 to 0"),
        (np.zeros((2, 3), np.float32), [0], ValueError, r"one class index per row .* shape \(2,\); got shape \(1,\)"),
        (np.zeros((2, 3), np.float32), [0.0, 1.0], ValueError, "`targets` must be integer class indices"),
        (np.zeros((2, 3), np.float32), [True, False], ValueError, "`targets` must be integer class indices"),
        (np.zeros((2, 3), complex), [0, 1], TypeError, "`logits` must have a real numeric dtype"),
    ],
)
def test_cross_entropy_checks_logits_and_targets(logits, targets, error, message):
    with pytest.raises(error, match=message):
        nn.CrossEntropyLoss()(logits, np.asarray(targets))


def test_cross_entropy_still_takes_lists_and_integer_logits():
    ce = nn.CrossEntropyLoss()
    assert ce(np.zeros((2, 3), np.int64), [0, 2]) == pytest.approx(math.log(3))
    assert ce.backward().dtype == np.float64


# --- 4: nets.evaluate, ece408_times, profile --------------------------------


@pytest.fixture(scope="module")
def lenet():
    return nets.lenet5().eval()


X3 = np.zeros((3, 1, 32, 32), np.float32)
Y3 = np.zeros(3, np.int64)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(batch=0), ValueError, r"`batch` must be a positive int \(>= 1\); got 0"),
        (dict(batch=-1), ValueError, r"`batch` must be a positive int \(>= 1\); got -1"),
        (dict(batch=True), TypeError, "`batch` must be a positive int; got True"),
        (dict(batch=2.0), TypeError, "`batch` must be a positive int"),
        (dict(x=X3[:0], y=Y3[:0]), ValueError, "`x` must hold at least one image"),
        (dict(y=Y3[:2]), ValueError, r"`y` must have one entry per image of `x` \(3\); got 2"),
        (dict(device="tpu"), ValueError, "`device` must be 'cpu' or 'gpu'"),
        # A column broadcast against the predictions gave an "accuracy" of 3.0; one-hot, float and
        # string labels a silent 0.0.
        (dict(y=Y3[:, None]), ValueError, r"`y` must be 3 integer classes in one axis.*got shape \(3, 1\)"),
        (dict(y=np.eye(3, dtype=np.int64)), ValueError, r"got shape \(3, 3\) of int64"),
        (dict(y=Y3.astype(np.float32)), ValueError, r"integer classes .*got shape \(3,\) of float32"),
        (dict(y=["0", "1", "2"]), ValueError, r"integer classes .*of <U1"),
        (dict(y=[[0], [1, 2], []]), ValueError, r"`y` must be 3 integer classes"),
    ],
)
def test_evaluate_checks_its_arguments(lenet, kwargs, error, message):
    args = {"x": X3, "y": Y3, **kwargs}
    with pytest.raises(error, match=message):
        nets.evaluate(lenet, args.pop("x"), args.pop("y"), **args)


def test_evaluate_counts_every_image(lenet):
    with nn.no_grad():
        y = lenet(X3).argmax(axis=1)
    assert nets.evaluate(lenet, X3, y, batch=2) == 1.0
    assert nets.evaluate(lenet, X3, y.tolist(), batch=2) == 1.0  # a list of classes reads as an array


@pytest.mark.parametrize(
    "x, labels, batch, error, message",
    [
        (X3, Y3, -1, ValueError, "`batch` must be a positive int"),
        (X3, Y3, 0, ValueError, "`batch` must be a positive int"),
        (X3, Y3, False, TypeError, "`batch` must be a positive int"),
        (X3[:0], Y3[:0], None, ValueError, "`x` must hold at least one image"),
        (X3, Y3[:1], None, ValueError, r"`labels` must have one entry per image of `x` \(3\); got 1"),
        (X3, Y3[:, None], None, ValueError, r"`labels` must be 3 integer classes in one axis"),
    ],
)
def test_ece408_times_checks_its_arguments(lenet, x, labels, batch, error, message):
    with pytest.raises(error, match=message):
        nets.ece408_times(lenet, x, labels, batch=batch, warmup=False)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(repeat=True), TypeError, "`repeat` must be a positive int; got True"),
        (dict(repeat=2.0), TypeError, "`repeat` must be a positive int"),
        (dict(warmup=True), TypeError, "`warmup` must be a non-negative int; got True"),
        (dict(warmup=-1), ValueError, r"`warmup` must be a non-negative int \(>= 0\)"),
    ],
)
def test_profile_refuses_bools_and_bad_counts(lenet, kwargs, error, message):
    with pytest.raises(error, match=message):
        nets.profile(lenet, X3[:1], **kwargs)


# --- 5-8: the `convsuite train` command ---------------------------------------


class _Trained(Exception):
    """Raised by the stand-in for train_lenet5: the command got as far as training."""


@pytest.fixture
def no_training(monkeypatch):
    """train_lenet5 replaced: a usage error must come before it, so a wrong answer costs no training."""
    seen = []

    def stand_in(config, **_):
        seen.append(config)
        raise _Trained

    monkeypatch.setattr(train_module, "train_lenet5", stand_in)
    return seen


def test_train_progress_bar_starts_with_the_total_and_no_nan(tmp_path, monkeypatch, capsys):
    """The bar's first state (printed as it stands when the run stops): 0 of the known steps, and no loss yet."""

    def stand_in(config, progress):
        progress(0, 12, None)
        raise _Trained

    monkeypatch.setattr(train_module, "train_lenet5", stand_in)
    with pytest.raises(_Trained):
        main(["train", "lenet5", "--backend", "numpy", "--out", str(tmp_path)])
    bar = capsys.readouterr().out
    assert "0/12" in bar and "loss -" in bar
    assert "?" not in bar and "nan" not in bar.lower()


def test_train_progress_bar_shows_the_running_loss(tmp_path, monkeypatch, capsys):
    def stand_in(config, progress):
        progress(0, 12, None)
        progress(5, 12, 1.23456)
        raise _Trained

    monkeypatch.setattr(train_module, "train_lenet5", stand_in)
    with pytest.raises(_Trained):
        main(["train", "lenet5", "--backend", "numpy", "--out", str(tmp_path)])
    bar = capsys.readouterr().out
    assert "5/12" in bar and "loss 1.2346" in bar and "loss -" not in bar


def test_train_lenet5_reports_the_total_before_the_first_batch():
    pytest.importorskip("sklearn")
    calls = []
    config = nets.TrainConfig(backend="numpy", epochs=2, batch=256, seed=0)
    result = nets.train_lenet5(config, progress=lambda *call: calls.append(call))
    total = 2 * -(-result.sizes["train"] // 256)
    assert calls[0] == (0, total, None)  # before any batch: the total, no loss
    assert [c[0] for c in calls] == list(range(total + 1)) and all(c[1] == total for c in calls)
    assert all(math.isfinite(c[2]) for c in calls[1:])


def test_train_refuses_an_out_that_is_a_file_before_training(tmp_path, no_training, capsys):
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    assert main(["train", "lenet5", "--backend", "numpy", "--out", str(afile)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("convsuite train: error: --out") and "is an existing file, not a folder" in err
    assert afile.read_text() == "keep me" and not no_training
    assert main(["train", "lenet5", "--backend", "numpy", "--out", str(afile / "sub")]) == 2
    assert "cannot be used as the output folder" in capsys.readouterr().err


def test_train_creates_a_new_out_folder_before_training(tmp_path, no_training):
    with pytest.raises(_Trained):
        main(["train", "lenet5", "--backend", "numpy", "--out", str(tmp_path / "a" / "b")])
    assert (tmp_path / "a" / "b").is_dir()


@pytest.mark.parametrize("lr", ["inf", "-inf", "nan", "0", "-0.1"])
def test_train_requires_a_finite_positive_lr(lr, tmp_path, no_training, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "lenet5", f"--lr={lr}", "--out", str(tmp_path)])
    assert exit_.value.code == 2
    assert "argument --lr: must be a finite number > 0" in capsys.readouterr().err and not no_training


@pytest.mark.parametrize("seed", ["99999999999999999999999", str(2**32), "-1", "x"])
def test_train_bounds_the_seed_as_scikit_learn_does(seed, tmp_path, no_training, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "lenet5", f"--seed={seed}", "--out", str(tmp_path)])
    assert exit_.value.code == 2
    assert "[0, 2**32)" in capsys.readouterr().err and not no_training


def test_train_accepts_the_largest_seed(tmp_path, no_training):
    with pytest.raises(_Trained):
        main(["train", "lenet5", "--seed", str(2**32 - 1), "--out", str(tmp_path)])
    assert no_training[0].seed == 2**32 - 1


def test_train_on_gpu_without_cupy_is_a_usage_error(tmp_path, monkeypatch, no_training, capsys):
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` raises ImportError
    assert main(["train", "lenet5", "--device", "gpu", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "--device gpu cannot run here: cupy is not installed" in err and "Traceback" not in err
    assert not no_training and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(device="foo"), ValueError, "`device` must be 'cpu' or 'gpu'; got 'foo'"),
        (dict(device=None), ValueError, "`device` must be 'cpu' or 'gpu'"),
        (dict(epochs=True), TypeError, "`epochs` must be a positive int; got True"),
        (dict(epochs=0), ValueError, "`epochs` must be a positive int"),
        (dict(batch=2.5), TypeError, "`batch` must be a positive int"),
        (dict(seed=2**32), ValueError, r"`seed` must be an int in \[0, 2\*\*32\)"),
        (dict(seed=False), TypeError, "`seed` must be an int"),
        (dict(lr=math.inf), ValueError, "`lr` must be positive and finite"),
        (dict(lr="0.1"), TypeError, "`lr` must be positive and finite"),
        (dict(momentum=1.0), ValueError, r"`momentum` must be in \[0, 1\)"),
        (dict(weight_decay=math.nan), ValueError, "`weight_decay` must be >= 0 and finite"),
        (dict(variant="nosuch"), ValueError, "`variant` must be one of"),
        (dict(backend=3), TypeError, "`backend` must be a backend's name or None"),
    ],
)
def test_train_config_checks_its_fields(kwargs, error, message):
    with pytest.raises(error, match=message):
        nets.TrainConfig(**kwargs)


def test_train_config_keeps_plain_python_numbers():
    config = nets.TrainConfig(epochs=np.int64(2), lr=np.float32(0.5), seed=np.uint32(7))
    assert type(config.epochs) is int and type(config.lr) is float and type(config.seed) is int
    assert nets.TrainConfig() == nets.TrainConfig()  # the defaults pass their own checks


# --- 6: SGD and BatchNorm2D settings ---------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(lr=math.inf), ValueError, "`lr` must be positive and finite; got inf"),
        (dict(lr=math.nan), ValueError, "`lr` must be positive and finite; got nan"),
        (dict(lr="0.1"), TypeError, r"`lr` must be positive and finite \(a real number\); got '0.1'"),
        (dict(lr=True), TypeError, "`lr` must be positive and finite"),
        (dict(lr=None), TypeError, "`lr` must be positive and finite"),
        (dict(lr=0.1, momentum=math.nan), ValueError, r"`momentum` must be in \[0, 1\)"),
        (dict(lr=0.1, momentum=True), TypeError, r"`momentum` must be in \[0, 1\)"),
        (dict(lr=0.1, weight_decay=math.inf), ValueError, "`weight_decay` must be >= 0 and finite"),
        (dict(lr=0.1, weight_decay="0"), TypeError, "`weight_decay`"),
    ],
)
def test_sgd_settings_are_finite_real_numbers(kwargs, error, message):
    with pytest.raises(error, match=message):
        nn.SGD(nn.Linear(2, 2).parameters(), **kwargs)


def test_sgd_takes_numpy_numbers():
    sgd = nn.SGD(nn.Linear(2, 2).parameters(), lr=np.float32(0.5), momentum=np.float64(0.9))
    assert type(sgd.lr) is float and sgd.lr == 0.5


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(eps=math.inf), ValueError, "`eps` must be positive and finite; got inf"),
        (dict(eps=math.nan), ValueError, "`eps` must be positive and finite"),
        (dict(eps="1"), TypeError, r"`eps` must be positive and finite \(a real number\); got '1'"),
        (dict(eps=0), ValueError, "`eps` must be positive and finite"),
        (dict(momentum=True), TypeError, r"`momentum` must be in \[0, 1\] \(a real number\); got True"),
        (dict(momentum=math.nan), ValueError, r"`momentum` must be in \[0, 1\]"),
        (dict(momentum="0.1"), TypeError, r"`momentum` must be in \[0, 1\]"),
    ],
)
def test_batchnorm_settings_are_finite_real_numbers(kwargs, error, message):
    with pytest.raises(error, match=message):
        nn.BatchNorm2D(2, **kwargs)


# --- 9: load_state_dict conversions name the key ----------------------------


@pytest.mark.parametrize(
    "value, dtype_word",
    [
        (np.array(["a", "b"]), "<U1"),
        (np.array([None, None]), "object"),
        (np.array([1 + 2j, 1]), "complex128"),
        (np.array([True, False]), "bool"),
    ],
)
def test_load_state_dict_refuses_non_real_values_by_key(value, dtype_word):
    bn = nn.BatchNorm2D(2)
    before = {k: v.copy() for k, v in bn.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning on the way
        with pytest.raises(TypeError, match=f"'weight' must be an array of real numbers.*{dtype_word}"):
            bn.load_state_dict(_state(bn, weight=value))
    for key, original in before.items():  # nothing changed
        np.testing.assert_array_equal(bn.state_dict()[key], original)


def test_load_state_dict_refuses_values_that_overflow_the_dtype_by_key():
    bn = nn.BatchNorm2D(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow RuntimeWarning on the way
        with pytest.raises(ValueError, match="'running_var' has finite values outside the range of float32"):
            bn.load_state_dict(_state(bn, running_var=np.array([1.0, 1e300])))
    assert np.isfinite(bn.running_var).all()
    # Values that are non-finite already are the caller's to give, and pass through.
    bn.load_state_dict(_state(bn, running_mean=np.array([np.inf, np.nan])))
    assert np.isinf(bn.running_mean[0]) and np.isnan(bn.running_mean[1])
    # float64 layers take them; integers always fit.
    wide = nn.BatchNorm2D(2, dtype="float64")
    wide.load_state_dict(_state(wide, weight=np.array([1e300, 1.0])))
    assert wide.weight.data[0] == 1e300
    bn.load_state_dict(_state(bn, weight=np.array([2**62, 3], np.int64)))
    assert bn.weight.data.dtype == np.float32


def test_a_slice_of_a_sequential_is_a_sequential():
    """``Sequential[0:1]`` returned a plain list (PyTorch returns a Sequential of the same layers)."""
    from convsuite import nn

    net = nn.Sequential(nn.Conv2D(1, 2, 3, padding=1, seed=0), nn.ReLU(), nn.Flatten())
    head = net[0:2]
    assert isinstance(head, nn.Sequential) and len(head) == 2 and head[0] is net[0]
    x = np.random.default_rng(0).standard_normal((2, 1, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(head(x), np.maximum(net[0](x), 0), rtol=1e-6, atol=1e-6)
    assert isinstance(net[-1], nn.Flatten)


# --- outputs checked before training; a diverged run reported as such; files written atomically ---------------


def _strict_json(text: str):
    """Parse as strict JSON: NaN, Infinity and -Infinity are refused."""

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _train(out, *options: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``convsuite train lenet5`` in its own process, on numpy, one epoch."""
    argv = [sys.executable, "-m", "convsuite", "train", "lenet5", "--backend", "numpy", "--epochs", "1"]
    return subprocess.run([*argv, *options, "--out", str(out)], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("blocked", ["train.json", "lenet5-classic.npz"])
def test_train_checks_each_output_file_before_training(blocked, tmp_path, no_training, capsys):
    """A folder where a file goes made the run train fully, then fail with IsADirectoryError."""
    (tmp_path / blocked).mkdir()
    assert main(["train", "lenet5", "--backend", "numpy", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"convsuite train: error: --out '{tmp_path / blocked}' is a folder") and not no_training


def test_train_with_a_folder_in_the_way_stops_before_training_in_a_real_process(tmp_path):
    (tmp_path / "train.json").mkdir()
    result = _train(tmp_path)
    assert result.returncode == 2, result.stderr
    assert "train.json' is a folder, not a file that can be written" in result.stderr
    assert "Traceback" not in result.stderr and "test accuracy" not in result.stdout  # nothing was trained


def test_a_diverged_run_says_so_exits_1_and_writes_strict_json(tmp_path):
    """--lr 1e6 trained NaN weights to chance accuracy, exited 0 and wrote a bare NaN into train.json."""
    result = _train(tmp_path, "--lr", "1e6")
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "convsuite train: error: training diverged at epoch 1, step" in result.stderr
    assert "(lr=1e+06) is likely too large" in result.stderr and "test accuracy" not in result.stdout
    report = _strict_json((tmp_path / "train.json").read_text())
    assert report["status"] == "diverged" and report["diverged_at"]["what"] == "loss"
    assert report["diverged_at"]["loss"] is None and "diverged_at.loss" in report["non_finite"]["values"]
    assert not (tmp_path / "lenet5-classic.npz").exists()  # NaN weights are not saved


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
def test_train_lenet5_raises_training_diverged_on_a_non_finite_loss():
    with pytest.raises(train_module.TrainingDiverged, match="training diverged at epoch 1, step") as info:
        nets.train_lenet5(nets.TrainConfig(backend="numpy", epochs=2, lr=1e6))
    assert info.value.what == "loss" and not math.isfinite(info.value.loss) and info.value.loss_per_epoch == []


def test_a_weight_that_overflows_after_the_last_finite_loss_stops_the_run(monkeypatch):
    """The last step of an epoch can overflow a weight after its loss was finite: the epoch's check catches it."""
    steps = []
    original = nn.SGD.step

    def overflowing_step(self):
        original(self)
        steps.append(1)
        if len(steps) == 43:  # the last step of the first epoch (1347 digits in batches of 32)
            self.params[0].data[...] = np.inf

    monkeypatch.setattr(nn.SGD, "step", overflowing_step)
    with pytest.raises(train_module.TrainingDiverged, match="parameter '.*' has non-finite values") as info:
        nets.train_lenet5(nets.TrainConfig(backend="numpy", epochs=2))
    assert info.value.epoch == 1 and info.value.step == 43 and math.isfinite(info.value.loss)
    assert len(info.value.loss_per_epoch) == 1  # the epoch finished; its accuracy was not measured on inf weights


def test_a_train_json_that_cannot_be_written_is_saved_elsewhere_and_said(tmp_path, monkeypatch, capsys):
    from convsuite import _files

    original = _files._replace_atomically

    def full_for_train_json(target, data):
        if target.name == "train.json":
            raise OSError(28, "No space left on device")
        original(target, data)

    monkeypatch.setattr(_files, "_replace_atomically", full_for_train_json)
    assert main(["train", "lenet5", "--backend", "numpy", "--epochs", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    line = [x for x in err.splitlines() if "warning" in x]
    assert len(line) == 1 and f"could not write {tmp_path / 'train.json'} (No space left on device)" in line[0]
    fallback = line[0].split("saved it to ")[1].removesuffix(" instead")
    report = _strict_json(open(fallback).read())
    assert report["status"] == "ok" and 0 <= report["test_accuracy"] <= 1 and report["weights"] == "lenet5-classic.npz"
    assert (tmp_path / "lenet5-classic.npz").exists() and not (tmp_path / "train.json").exists()
