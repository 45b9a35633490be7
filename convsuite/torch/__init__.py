"""convsuite inside torch models: drop-in convolution modules, an autograd Function, ``convert``.

Importing :mod:`convsuite` never imports torch; importing this package does.

>>> import torch
>>> import convsuite.torch as cst
>>> _ = torch.manual_seed(0)
>>> conv = cst.Conv2d(3, 4, 3, padding="same", backend="numpy")   # a torch.nn.Conv2d
>>> x = torch.randn(2, 3, 8, 8, requires_grad=True)
>>> y = conv(x)                                   # forward on convsuite
>>> y.shape
torch.Size([2, 4, 8, 8])
>>> y.sum().backward()                            # backward on convsuite, through autograd
>>> x.grad.shape, conv.weight.grad.shape
(torch.Size([2, 3, 8, 8]), torch.Size([4, 3, 3, 3]))
>>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
>>> fast = cst.convert(net, backend="numpy")      # a converted copy; net is unchanged
>>> isinstance(fast[0], cst.Conv2d), type(net[0]) is torch.nn.Conv2d
(True, True)
>>> torch.allclose(fast(x), net(x), atol=1e-5)
True

What it holds:

- :class:`Conv1d`, :class:`Conv2d`: subclasses of ``torch.nn.Conv1d`` /
  ``torch.nn.Conv2d`` (same arguments, initialisation, ``state_dict``,
  ``repr``) with the keywords ``backend`` and ``algorithm``.
- :func:`conv1d`, :func:`conv2d`: ``torch.nn.functional.conv1d/conv2d`` on
  convsuite, forward and backward through one ``torch.autograd.Function``.
- :func:`convert`: every ``Conv1d``/``Conv2d`` of a model run on convsuite.

Tensors go to convsuite and back zero-copy through DLPack (CPU tensors as
NumPy arrays, CUDA tensors as CuPy arrays when CuPy is installed), detached
and made contiguous first. float32 and float64 stay as they are; float16 and
bfloat16 are computed in float32 and returned in their dtype. Operands must
share a dtype and a device, as for torch's convolutions; under
``torch.autocast`` they are cast as torch casts its own.
"""

from ._convert import convert
from ._function import conv1d, conv2d
from ._modules import Conv1d, Conv2d

__all__ = ["Conv1d", "Conv2d", "conv1d", "conv2d", "convert"]
