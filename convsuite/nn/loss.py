"""Losses: ``forward(logits, targets)`` gives the loss, ``backward()`` its gradient."""

from __future__ import annotations

from ._xp import array_module
from .module import Module

__all__ = ["CrossEntropyLoss"]


class CrossEntropyLoss(Module):
    """Mean of ``-log softmax(logits)[target]``, like ``torch.nn.CrossEntropyLoss()``.

    The log-softmax subtracts each row's maximum first, so large logits
    neither overflow nor lose the small ones.

    Call it as ``loss = criterion(logits, targets)`` with ``logits (B, K)``
    and integer ``targets (B,)`` in ``[0, K)``; ``criterion.backward()``
    returns ``d loss / d logits``.
    """

    category = "loss"

    def __init__(self) -> None:
        super().__init__()
        self._cache = None

    def forward(self, logits, targets):
        """Mean cross-entropy of ``logits (B, K)`` against integer ``targets (B,)``."""
        xp = array_module(logits)
        targets = xp.asarray(targets)
        if logits.ndim != 2:
            raise ValueError(f"`logits` must have shape (B, K); got {tuple(logits.shape)}")
        if targets.shape != (logits.shape[0],) or targets.dtype.kind not in "iu":
            raise ValueError(
                f"`targets` must be integer class indices of shape ({logits.shape[0]},); "
                f"got {targets.dtype} of shape {tuple(targets.shape)}"
            )
        if targets.size and (int(targets.min()) < 0 or int(targets.max()) >= logits.shape[1]):
            raise ValueError(f"`targets` must lie in [0, {logits.shape[1]}); got values outside")
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probs = shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
        rows = xp.arange(logits.shape[0])
        self._cache = (log_probs, targets, rows)
        return -log_probs[rows, targets].mean()

    def backward(self, grad_y=1.0):
        """Gradient with respect to the logits (times ``grad_y``, the loss's own gradient)."""
        if self._cache is None:
            raise RuntimeError("CrossEntropyLoss.backward needs a forward pass first")
        log_probs, targets, rows = self._cache
        xp = array_module(log_probs)
        grad = xp.exp(log_probs)
        grad[rows, targets] -= 1
        return grad * log_probs.dtype.type(float(grad_y) / log_probs.shape[0])
