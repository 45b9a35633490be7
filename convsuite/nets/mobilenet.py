"""MobileNetV2 with torchvision's module names, so its weights load unchanged.

The structure, names and initialisation follow
``torchvision.models.mobilenet_v2`` (width 1.0): ``features.0`` is a
conv-BN-ReLU6 stem, ``features.1..17`` the inverted residual blocks
(``features.N.conv.*``), ``features.18`` the 1x1 conv to 1280 channels, then
global average pooling and ``classifier.1``, a linear layer (after a
dropout, ``classifier.0``). ``state_dict()`` keys and shapes equal
torchvision's without ``num_batches_tracked``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from .._validation import weight_generator

__all__ = ["InvertedResidual", "MobileNetV2", "mobilenet_v2"]

# (expansion t, output channels c, repeats n, first stride s): MobileNetV2 Table 2.
_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class ConvBNActivation(nn.Sequential):
    """``Conv2D (no bias) -> BatchNorm2D -> ReLU6`` (torchvision's ``Conv2dNormActivation``)."""

    def __init__(
        self,
        c_in: int,
        c_out: int,
        kernel: int = 3,
        stride: int = 1,
        groups: int = 1,
        *,
        activation: bool = True,
        **options,
    ) -> None:
        conv = nn.Conv2D(
            c_in,
            c_out,
            kernel,
            stride,
            (kernel - 1) // 2,
            groups=groups,
            bias=False,
            backend=options["backend"],
            dtype=options["dtype"],
        )
        layers = [conv, nn.BatchNorm2D(c_out, dtype=options["dtype"])]
        super().__init__(*layers, *([nn.ReLU6()] if activation else []))


class InvertedResidual(nn.Module):
    """Expand (1x1) -> depthwise 3x3 -> project (1x1), plus the input when shapes allow."""

    def __init__(self, c_in: int, c_out: int, stride: int, expand: int, **options) -> None:
        super().__init__()
        hidden = c_in * expand
        self.use_residual = stride == 1 and c_in == c_out
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(ConvBNActivation(c_in, hidden, 1, **options))
        layers += [
            ConvBNActivation(hidden, hidden, 3, stride, groups=hidden, **options),
            nn.Conv2D(hidden, c_out, 1, bias=False, backend=options["backend"], dtype=options["dtype"]),
            nn.BatchNorm2D(c_out, dtype=options["dtype"]),
        ]
        self.conv = nn.Sequential(*layers)
        if self.use_residual:
            self.add = nn.Add()

    def forward(self, x):
        """The block's output, plus the input when the residual applies."""
        y = self.conv(x)
        return self.add(x, y) if self.use_residual else y

    def backward(self, grad_y):
        """Gradient with respect to the block's input, including the residual path."""
        if not self.use_residual:
            return self.conv.backward(grad_y)
        grad_skip, grad_body = self.add.run_backward(grad_y)
        return self.conv.backward(grad_body) + grad_skip


class MobileNetV2(nn.Module):
    """MobileNetV2-1.0 (see :func:`mobilenet_v2`)."""

    def __init__(
        self,
        num_classes: int = 1000,
        *,
        backend: str | None = None,
        dtype: Any = "float32",
        seed: int | np.random.Generator | None = 0,
    ) -> None:
        super().__init__()
        options = dict(backend=backend, dtype=dtype)
        c_in, last = 32, 1280
        blocks: list[nn.Module] = [ConvBNActivation(3, c_in, 3, 2, **options)]
        for t, c, n, s in _SETTINGS:
            for i in range(n):
                blocks.append(InvertedResidual(c_in, c, s if i == 0 else 1, t, **options))
                c_in = c
        blocks.append(ConvBNActivation(c_in, last, 1, **options))
        self.features = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2D(1)
        self.flatten = nn.Flatten()
        self.classifier = nn.Sequential(nn.Dropout(0.2, seed=seed), nn.Linear(last, num_classes, dtype=dtype))
        _torchvision_init(self, weight_generator(seed))

    def forward(self, x):
        """Logits of shape ``(B, num_classes)`` for images ``x`` of shape ``(B, 3, H, W)``."""
        return self.classifier(self.flatten(self.pool(self.features(x))))

    skips_input_grad = True

    def backward(self, grad_y, input_grad: bool = True):
        """Gradient with respect to the input images, given the gradient of the logits
        (``input_grad=False``: parameter gradients only, None returned).
        """
        grad = self.classifier.backward(grad_y)
        grad = self.pool.run_backward(self.flatten.run_backward(grad))
        return self.features.backward(grad, input_grad=input_grad)


def _torchvision_init(network: nn.Module, rng: np.random.Generator) -> None:
    """Torchvision's initialisation: He-normal (fan out) convs, N(0, 0.01) linear, BN 1/0."""
    for _, layer in network.named_modules():
        if isinstance(layer, nn.Conv2D):
            w = layer.weight.data
            fan_out = w.shape[0] * int(np.prod(w.shape[2:]))
            layer.weight.data = (rng.standard_normal(w.shape) * np.sqrt(2.0 / fan_out)).astype(w.dtype)
        elif isinstance(layer, nn.Linear):
            w = layer.weight.data
            layer.weight.data = (rng.standard_normal(w.shape) * 0.01).astype(w.dtype)
            layer.bias.data = np.zeros_like(layer.bias.data)


def mobilenet_v2(
    num_classes: int = 1000,
    *,
    backend: str | None = None,
    dtype: Any = "float32",
    seed: int | np.random.Generator | None = 0,
) -> MobileNetV2:
    """MobileNetV2-1.0 whose ``state_dict`` is torchvision's (less ``num_batches_tracked``).

    Parameters
    ----------
    num_classes : int, default 1000
    backend : str, optional
        Backend of every convolution (default: the usual selection).
    dtype : {'float32', 'float64'}, default 'float32'
    seed : int or numpy.random.Generator, optional
        Seed of torchvision's initialisation scheme; default 0.

    Returns
    -------
    MobileNetV2
        In training mode; call ``.eval()`` for inference. Input
        ``(B, 3, H, W)`` (224x224 for ImageNet), logits ``(B, num_classes)``.

    Examples
    --------
    Weights exported from torchvision load unchanged::

        sd = {k: v.numpy() for k, v in tv_model.state_dict().items() if "num_batches" not in k}
        net = mobilenet_v2().eval(); net.load_state_dict(sd); logits = net(x)
    """
    return MobileNetV2(num_classes, backend=backend, dtype=dtype, seed=seed)
