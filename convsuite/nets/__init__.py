"""Whole networks on convsuite.nn: LeNet-5 (classic, ECE408 FA21) and MobileNetV2.

>>> from convsuite import nets
>>> net = nets.mobilenet_v2().eval()     # torchvision's state_dict names and shapes
>>> lenet = nets.lenet5("ece408-fa21")   # 86x86 input, 7x7 kernels

``profile(net, x)`` times every layer and each layer type (convolution,
pooling, element-wise, ...); ``train_lenet5`` trains on scikit-learn's
digits (the ``convsuite train`` command).
"""

from .lenet import LENET5_VARIANTS, lenet5
from .mobilenet import MobileNetV2, mobilenet_v2
from .profile import NetworkProfile, ece408_times, profile
from .train import TrainConfig, evaluate, train_lenet5

__all__ = [
    "LENET5_VARIANTS",
    "MobileNetV2",
    "NetworkProfile",
    "TrainConfig",
    "ece408_times",
    "evaluate",
    "lenet5",
    "mobilenet_v2",
    "profile",
    "train_lenet5",
]
