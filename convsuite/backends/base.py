"""The contract every backend fulfils.

A backend receives a validated :class:`~convsuite._spec.ConvSpec` and
contiguous arrays of the spec's dtype, in canonical layout (``(B, C, ...)``),
plus output buffers allocated by the front end. It writes every element of
those buffers and nothing else. It never re-validates user input; when it
cannot handle a case it says so beforehand through :meth:`Backend.can_run`.

"Yes" is ``True``; "no" is a string that says why. That string is what
``list_backends()`` prints, what ``explain()`` reports, what an explicit
request raises and what a skipped test shows.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Literal, Union

from .._spec import ConvSpec

__all__ = ["Backend", "Verdict", "DIRECTIONS"]

#: ``True`` for yes, or a sentence saying why not.
Verdict = Union[Literal[True], str]

DIRECTIONS = ("forward", "backward")


class Backend(abc.ABC):
    """Base class of convsuite backends.

    Subclasses set the class attributes and implement :meth:`forward` and
    :meth:`backward`; they override :meth:`available`, :meth:`can_run` and
    :meth:`choose_algorithm` when the defaults do not fit.

    Attributes
    ----------
    name : str
        Registry name, e.g. ``"numpy"``.
    device : str
        ``"cpu"`` or ``"gpu"``.
    priority : int
        Higher is tried first by ``backend="auto"``.
    algorithms : tuple of str
        Names accepted by ``algorithm=``; the first is the default.
    description : str
        One line for ``list_backends()`` and ``convsuite info``.
    """

    name: ClassVar[str]
    device: ClassVar[str] = "cpu"
    priority: ClassVar[int] = 0
    algorithms: ClassVar[tuple[str, ...]] = ("direct",)
    description: ClassVar[str] = ""

    def available(self) -> Verdict:
        """Whether the backend can run on this machine, or why not."""
        return True

    def can_run(self, spec: ConvSpec, algorithm: str, direction: str) -> Verdict:
        """Whether ``algorithm`` (never ``"auto"``) can run this case, or why not."""
        return True

    def choose_algorithm(self, spec: ConvSpec, direction: str) -> tuple[str, str]:
        """The algorithm ``algorithm="auto"`` picks for this case, and why."""
        for name in self.algorithms:
            if self.can_run(spec, name, direction) is True:
                reason = "the only algorithm" if len(self.algorithms) == 1 else "first that can run"
                return name, reason
        return self.algorithms[0], "no algorithm can run this case"

    @abc.abstractmethod
    def forward(self, spec: ConvSpec, x: Any, w: Any, bias: Any, out: Any, algorithm: str) -> None:
        """Write ``conv(x, w) + bias`` into ``out`` (shape ``spec.y_shape``)."""

    @abc.abstractmethod
    def backward(
        self,
        spec: ConvSpec,
        grad_y: Any,
        x: Any,
        w: Any,
        grad_x: Any,
        grad_w: Any,
        grad_b: Any,
        algorithm: str,
    ) -> None:
        """Write the gradients of ``sum(y * grad_y)`` into the three buffers."""

    def __repr__(self) -> str:
        return f"<convsuite backend {self.name!r} ({self.device})>"
