"""Train LeNet-5 on the digits with convsuite's own backward passes and SGD."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .. import nn
from .._validation import _is_int, _show, positive_int
from ..nn.module import _finite_real
from .data import load_digits_split
from .lenet import LENET5_VARIANTS, lenet5
from .profile import _check_batch

__all__ = ["TrainConfig", "TrainingDiverged", "evaluate", "train_lenet5"]

#: scikit-learn's bound on ``random_state`` (the split of the digits): seeds are below it.
SEED_LIMIT = 2**32
DEVICES = ("cpu", "gpu")


@dataclass(frozen=True)
class TrainConfig:
    """Settings of :func:`train_lenet5` (the CLI's defaults).

    Attributes
    ----------
    variant : str
        ``"classic"`` (32x32) or ``"ece408-fa21"`` (86x86).
    backend : str or None
        Backend of the convolutions (None: the usual selection).
    epochs, batch : int
        Positive ints (not bools).
    seed : int
        In ``[0, 2**32)``, scikit-learn's bound on the split's ``random_state``.
    lr, momentum, weight_decay : float
        SGD settings (finite; ``lr > 0``, ``momentum`` in [0, 1),
        ``weight_decay >= 0``); the learning rate follows a cosine decay
        from ``lr`` over the epochs.
    device : str
        ``"cpu"`` or ``"gpu"`` (weights and batches on the GPU through CuPy).

    Raises
    ------
    TypeError, ValueError
        At construction, for a field outside what is listed here (each
        message names the field): a bad setting fails before any training,
        not silently (``device="foo"`` used to train on the CPU).
    """

    variant: str = "classic"
    backend: str | None = None
    epochs: int = 10
    batch: int = 32
    seed: int = 0
    lr: float = 0.03
    momentum: float = 0.9
    weight_decay: float = 1e-4
    device: str = "cpu"

    def __post_init__(self) -> None:
        if not isinstance(self.variant, str) or self.variant not in LENET5_VARIANTS:
            raise ValueError(f"`variant` must be one of {', '.join(LENET5_VARIANTS)}; got {self.variant!r}")
        if self.backend is not None and not isinstance(self.backend, str):
            raise TypeError(f"`backend` must be a backend's name or None; got {_show(self.backend)}")
        if not isinstance(self.device, str) or self.device not in DEVICES:
            raise ValueError(f"`device` must be 'cpu' or 'gpu'; got {self.device!r}")
        if not _is_int(self.seed):
            raise TypeError(f"`seed` must be an int in [0, 2**32); got {_show(self.seed)}")
        if not 0 <= self.seed < SEED_LIMIT:
            raise ValueError(
                f"`seed` must be an int in [0, 2**32) (scikit-learn's random_state bound); got {self.seed}"
            )
        # Stored as plain Python numbers: NumPy scalars would not go into train.json.
        normal = {
            "epochs": positive_int(self.epochs, "epochs"),
            "batch": positive_int(self.batch, "batch"),
            "seed": int(self.seed),
            "lr": _finite_real(self.lr, "lr", "positive and finite", lambda v: v > 0),
            "momentum": _finite_real(self.momentum, "momentum", "in [0, 1)", lambda v: 0 <= v < 1),
            "weight_decay": _finite_real(self.weight_decay, "weight_decay", ">= 0 and finite", lambda v: v >= 0),
        }
        for name, value in normal.items():
            object.__setattr__(self, name, value)  # frozen: the dataclass way to set a field here


class TrainingDiverged(FloatingPointError):
    """Training stopped because the loss or the weights stopped being finite numbers.

    A run whose loss turned NaN goes on "training" NaN weights to a chance
    accuracy; it is stopped at the first non-finite loss (or weight, checked
    after each epoch) instead, and reported as what it is.

    Attributes
    ----------
    epoch, step : int
        Where it was noticed: the epoch (from 1) and the step (from 1, over all epochs).
    loss : float
        The last loss (NaN or infinite when the loss diverged).
    what : str
        ``"loss"`` or the name of the first parameter that is not finite.
    config : TrainConfig
    loss_per_epoch, test_accuracy_per_epoch : list of float
        Of the epochs that finished before it diverged.
    """

    def __init__(self, *, epoch: int, step: int, loss: float, what: str, config: TrainConfig, history: tuple) -> None:
        self.epoch, self.step, self.loss, self.what, self.config = epoch, step, loss, what, config
        self.loss_per_epoch, self.test_accuracy_per_epoch = list(history[0]), list(history[1])
        became = f"the loss became {loss!r}" if what == "loss" else f"parameter {what!r} has non-finite values"
        super().__init__(
            f"training diverged at epoch {epoch}, step {step}: {became}; the learning rate "
            f"(lr={config.lr:g}) is likely too large for this network: try a smaller one"
        )


def _first_non_finite(network: nn.Module) -> str | None:
    """The name of the first parameter with a NaN or infinite value, or None."""
    for name, value in network.state_dict().items():
        xp = nn._xp.array_module(value)
        if not bool(xp.isfinite(value).all()):
            return name
    return None


@dataclass
class TrainResult:
    """What a training run produced (written to ``train.json`` by the CLI)."""

    network: nn.Module
    test_accuracy: float
    loss_per_epoch: list[float]
    test_accuracy_per_epoch: list[float]
    seconds: float
    layer_times: nn.LayerTimes
    config: TrainConfig
    sizes: dict = field(default_factory=dict)

    def layer_seconds(self) -> dict[str, dict]:
        """``name -> {type, category, forward, backward}`` total seconds over the run."""
        out: dict[str, dict] = {}
        for name, (layer_type, category) in self.layer_times.kinds.items():
            out[name] = {
                "type": layer_type,
                "category": category,
                **{d: sum(self.layer_times.samples.get((name, d), [])) for d in ("forward", "backward")},
            }
        return out


def _on_device(array, device: str):
    """``array`` on the GPU (CuPy) or as is."""
    if device == "gpu":
        import cupy

        return cupy.asarray(array)
    return array


def evaluate(network: nn.Module, x: np.ndarray, y: np.ndarray, *, batch: int = 256, device: str = "cpu") -> float:
    """Share of ``x`` that ``network`` (set to evaluation mode) classifies as ``y``.

    Parameters
    ----------
    network : convsuite.nn.Module
    x : ndarray
        The images, at least one.
    y : ndarray
        Their integer classes, one per image.
    batch : int, default 256
        Images per forward pass, a positive int.
    device : {'cpu', 'gpu'}, default 'cpu'
        Where the batches go (the network's device).

    Returns
    -------
    float
        The accuracy, in [0, 1].

    Raises
    ------
    TypeError, ValueError
        ``batch`` is not a positive int, ``x`` is empty, ``y`` does not have
        one entry per image, or ``device`` is neither 'cpu' nor 'gpu'.
    """
    batch = _check_batch(x, y, batch, "y")
    if device not in DEVICES:
        raise ValueError(f"`device` must be 'cpu' or 'gpu'; got {device!r}")
    network.eval()
    correct = 0
    with nn.no_grad():
        for start in range(0, len(x), batch):
            logits = network(_on_device(x[start : start + batch], device))
            predicted = nn._xp.to_numpy(logits.argmax(axis=1))
            correct += int((predicted == y[start : start + batch]).sum())
    return correct / len(x)


def train_lenet5(
    config: TrainConfig = TrainConfig(), *, progress: Callable[[int, int, float | None], None] | None = None
) -> TrainResult:
    """Train LeNet-5 on the scikit-learn digits; deterministic for a seed on one backend.

    Parameters
    ----------
    config : TrainConfig
    progress : callable, optional
        Called once before the first batch as ``progress(0, total_steps, None)`` (no loss yet), then
        after each batch as ``progress(step, total_steps, running_loss)``.

    Returns
    -------
    TrainResult
        The trained network, test accuracy, loss per epoch and per-layer times.

    Raises
    ------
    TrainingDiverged
        The loss became NaN or infinite (checked every step), or a weight
        did (checked after every epoch): the run is stopped there.
    """
    if not isinstance(config, TrainConfig):  # its fields were checked when it was made
        raise TypeError(f"`config` must be a TrainConfig; got {type(config).__name__}")
    data = load_digits_split(LENET5_VARIANTS[config.variant], seed=config.seed)
    rng = np.random.default_rng(config.seed)
    network = lenet5(config.variant, backend=config.backend, seed=rng)
    if config.device == "gpu":
        network.to("gpu")
    criterion = nn.CrossEntropyLoss()
    optimiser = nn.SGD(network.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    steps_per_epoch = -(-len(data.x_train) // config.batch)
    total_steps = steps_per_epoch * config.epochs
    losses, accuracies = [], []
    running = None
    step = 0
    if progress is not None:  # the total is known now: a bar shows 0/total before the first batch ends
        progress(0, total_steps, None)
    start = time.perf_counter()
    with nn.record_layer_times(network) as layer_times:
        for epoch in range(config.epochs):
            # Cosine decay of the learning rate: large steps early, small ones
            # at the end, so the final epochs settle instead of oscillating.
            optimiser.lr = config.lr * 0.5 * (1 + math.cos(math.pi * epoch / config.epochs))
            network.train()
            order = rng.permutation(len(data.x_train))
            epoch_loss = 0.0
            for first in range(0, len(order), config.batch):
                index = order[first : first + config.batch]
                x = _on_device(data.x_train[index], config.device)
                y = _on_device(data.y_train[index], config.device)
                optimiser.zero_grad()
                loss = float(criterion(network(x), y))
                if not math.isfinite(loss):  # every later step would only train NaN weights
                    raise TrainingDiverged(
                        epoch=epoch + 1,
                        step=step + 1,
                        loss=loss,
                        what="loss",
                        config=config,
                        history=(losses, accuracies),
                    )
                network.backward(criterion.backward(), input_grad=False)  # the images need none
                optimiser.step()
                epoch_loss += loss * len(index)
                running = loss if running is None else 0.9 * running + 0.1 * loss
                step += 1
                if progress is not None:
                    progress(step, total_steps, running)
            losses.append(epoch_loss / len(order))
            broken = _first_non_finite(network)  # the last step can overflow a weight after a finite loss
            if broken is not None:
                raise TrainingDiverged(
                    epoch=epoch + 1, step=step, loss=running, what=broken, config=config, history=(losses, accuracies)
                )
            accuracies.append(evaluate(network, data.x_test, data.y_test, device=config.device))
    seconds = time.perf_counter() - start
    return TrainResult(
        network=network,
        test_accuracy=accuracies[-1],
        loss_per_epoch=losses,
        test_accuracy_per_epoch=accuracies,
        seconds=seconds,
        layer_times=layer_times,
        config=config,
        sizes={"train": len(data.x_train), "test": len(data.x_test)},
    )
