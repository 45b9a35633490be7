"""Neural-network layers on top of convsuite's convolutions, with PyTorch's conventions.

>>> import numpy as np
>>> from convsuite import nn
>>> net = nn.Sequential(nn.Conv2D(1, 4, 3, padding=1, seed=0), nn.ReLU(), nn.MaxPool2D(2),
...                     nn.Flatten(), nn.Linear(4 * 4 * 4, 10, seed=0))
>>> x = np.zeros((2, 1, 8, 8), np.float32)
>>> logits = net(x)
>>> loss = nn.CrossEntropyLoss()
>>> float(loss(logits, np.array([1, 2]))) > 0
True
>>> grad_x = net.backward(loss.backward())   # parameter gradients accumulate in .grad

Convolutions run on the convsuite backends (``backend=`` per layer or the
usual selection); every other layer is an array expression on the input's
array module, so NumPy in gives NumPy out and CuPy in stays on the GPU.

What a layer keeps for its backward: the arrays it returns are the caller's
(edit them in place freely: activations keep their own gradient masks), but a
layer's *input* is kept by reference, not copied (a copy per layer would
double the memory of training). Editing an input in place between the forward
and the backward changes the weight gradients computed from it; PyTorch
refuses that backward ("modified by an inplace operation"), NumPy arrays carry
no version counter to tell.
"""

from ._timing import LayerTimes, record_layer_times
from .conv import Conv1D, Conv2D
from .cuda_graph import CapturedNetwork
from .layers import Add, Dropout, Flatten, Identity, Linear, ReLU, ReLU6
from .loss import CrossEntropyLoss
from .module import Module, Parameter, Sequential, grad_enabled, no_grad
from .norm import BatchNorm2D, fold_batchnorm, fold_batchnorms
from .optim import SGD
from .pooling import AdaptiveAvgPool2D, AvgPool2D, MaxPool1D, MaxPool2D

__all__ = [
    "SGD",
    "AdaptiveAvgPool2D",
    "Add",
    "AvgPool2D",
    "BatchNorm2D",
    "CapturedNetwork",
    "Conv1D",
    "Conv2D",
    "CrossEntropyLoss",
    "Dropout",
    "Flatten",
    "Identity",
    "LayerTimes",
    "Linear",
    "MaxPool1D",
    "MaxPool2D",
    "Module",
    "Parameter",
    "ReLU",
    "ReLU6",
    "Sequential",
    "fold_batchnorm",
    "fold_batchnorms",
    "grad_enabled",
    "no_grad",
    "record_layer_times",
]
