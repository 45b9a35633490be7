"""The same networks in PyTorch, built from a convsuite network, for side-by-side timing.

torchvision cannot be installed beside every torch this project supports,
so the anchor is built here: :func:`to_torch` mirrors a convsuite.nn
network layer by layer (same structure, same weights), and the benchmark
checks that both give the same output before timing either.
"""

from __future__ import annotations

import numpy as np

from .. import nn
from ..nets.mobilenet import InvertedResidual, MobileNetV2

__all__ = ["to_torch", "torch_category"]

_CATEGORIES = {
    "Conv1d": "convolution",
    "Conv2d": "convolution",
    "BatchNorm2d": "batch norm",
    "ReLU": "activation",
    "ReLU6": "activation",
    "MaxPool1d": "pooling",
    "MaxPool2d": "pooling",
    "AvgPool2d": "pooling",
    "AdaptiveAvgPool2d": "pooling",
    "Linear": "fully connected",
    "Flatten": "reshape",
    "Identity": "reshape",
    "Dropout": "element-wise",
    "_Add": "element-wise",
}


def torch_category(module) -> str:
    """The per-layer-type category of a torch leaf module (as convsuite's ``Module.category``)."""
    return _CATEGORIES.get(type(module).__name__, "other")


def to_torch(network: nn.Module):
    """A ``torch.nn.Module`` with the structure and weights of ``network`` (float32, CPU).

    Handles the layers of ``convsuite.nets`` (LeNet-5, MobileNetV2) and any
    :class:`convsuite.nn.Sequential` of the standard layers.
    """
    import torch

    tnn = torch.nn

    class _Add(tnn.Module):
        def forward(self, a, b):
            return a + b

    class _Residual(tnn.Module):
        def __init__(self, block: InvertedResidual) -> None:
            super().__init__()
            self.conv = convert(block.conv)
            self.use_residual = block.use_residual
            if self.use_residual:
                self.add = _Add()

        def forward(self, x):
            y = self.conv(x)
            return self.add(x, y) if self.use_residual else y

    class _MobileNet(tnn.Module):
        def __init__(self, net: MobileNetV2) -> None:
            super().__init__()
            self.features = convert(net.features)
            self.pool = tnn.AdaptiveAvgPool2d(1)
            self.flatten = tnn.Flatten()
            self.classifier = convert(net.classifier)

        def forward(self, x):
            return self.classifier(self.flatten(self.pool(self.features(x))))

    def convert(m: nn.Module):
        if isinstance(m, MobileNetV2):
            return _MobileNet(m)
        if isinstance(m, InvertedResidual):
            return _Residual(m)
        if isinstance(m, nn.Sequential):
            return tnn.Sequential(*[convert(child) for child in m])
        if isinstance(m, nn.Conv2D):
            (pt, pb), (pl, pr) = m.padding if not isinstance(m.padding, str) else ((0, 0), (0, 0))
            if isinstance(m.padding, str) or pt != pb or pl != pr:
                raise ValueError(f"to_torch handles symmetric integer padding only; got {m.padding!r}")
            return tnn.Conv2d(
                m.in_channels,
                m.out_channels,
                m.kernel_size,
                m.stride,
                (pt, pl),
                m.dilation,
                m.groups,
                bias=m.bias is not None,
            )
        if isinstance(m, nn.BatchNorm2D):
            return tnn.BatchNorm2d(m.num_features, m.eps, m.momentum)
        if isinstance(m, nn.Linear):
            return tnn.Linear(m.in_features, m.out_features, bias=m.bias is not None)
        if isinstance(m, nn.ReLU6):
            return tnn.ReLU6()
        if isinstance(m, nn.ReLU):
            return tnn.ReLU()
        if isinstance(m, nn.MaxPool2D):
            return tnn.MaxPool2d(m.kernel_size, m.stride, m.padding)
        if isinstance(m, nn.AvgPool2D):
            return tnn.AvgPool2d(m.kernel_size, m.stride, m.padding)
        if isinstance(m, nn.Flatten):
            return tnn.Flatten()
        if isinstance(m, nn.Dropout):
            return tnn.Dropout(m.p)
        if isinstance(m, nn.Identity):
            return tnn.Identity()
        raise TypeError(f"to_torch does not know {type(m).__name__}")

    model = convert(network).float()
    state = {
        k: torch.from_numpy(np.ascontiguousarray(nn._xp.to_numpy(v), dtype=np.float32))
        for k, v in network.state_dict().items()
    }
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise RuntimeError(f"to_torch: state mismatch, missing {missing}, unexpected {unexpected}")
    return model.train(network.training)
