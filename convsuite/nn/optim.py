"""Stochastic gradient descent with momentum and weight decay (PyTorch's update rule)."""

from __future__ import annotations

from collections.abc import Iterable

from .module import Parameter, _finite_real

__all__ = ["SGD"]


class SGD:
    """``torch.optim.SGD``: ``g = grad + wd * p; v = momentum * v + g; p -= lr * v``.

    Parameters
    ----------
    params : iterable of Parameter
        Usually ``network.parameters()``.
    lr : float
        Learning rate, > 0.
    momentum : float, default 0
        In [0, 1); the first step starts the velocity at ``g`` (as PyTorch).
    weight_decay : float, default 0
        L2 penalty coefficient, >= 0.

    Raises
    ------
    TypeError
        A setting is not a real number (a string, a bool, None).
    ValueError
        A setting is NaN, infinite or out of its range: an infinite ``lr``
        would make every weight non-finite at the first step.
    """

    def __init__(
        self, params: Iterable[Parameter], lr: float, momentum: float = 0.0, weight_decay: float = 0.0
    ) -> None:
        self.params = list(params)
        if not all(isinstance(p, Parameter) for p in self.params):
            raise TypeError("`params` must be Parameter objects, e.g. network.parameters()")
        self.lr = _finite_real(lr, "lr", "positive and finite", lambda v: v > 0)
        self.momentum = _finite_real(momentum, "momentum", "in [0, 1)", lambda v: 0 <= v < 1)
        self.weight_decay = _finite_real(weight_decay, "weight_decay", ">= 0 and finite", lambda v: v >= 0)
        self._velocity: dict[int, object] = {}

    def zero_grad(self) -> None:
        """Forget the accumulated gradients."""
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """Update every parameter that has a gradient, in place."""
        for p in self.params:
            if p.grad is None:
                continue
            g = p.grad
            if self.weight_decay:
                g = g + p.data.dtype.type(self.weight_decay) * p.data
            if self.momentum:
                v = self._velocity.get(id(p))
                if v is None:
                    v = g.copy()
                else:
                    v *= p.data.dtype.type(self.momentum)
                    v += g
                self._velocity[id(p)] = v
                g = v
            p.data -= p.data.dtype.type(self.lr) * g
