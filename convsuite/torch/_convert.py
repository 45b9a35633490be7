"""``convert``: run every ``torch.nn.Conv1d``/``Conv2d`` of a model on convsuite."""

from __future__ import annotations

import copy

import torch
from torch.nn.utils import parametrize

from ._checks import checked_settings
from ._modules import Conv1d, Conv2d

__all__ = ["convert"]

#: Torch's convolution classes and the convsuite classes their modules become.
_OURS = ((torch.nn.Conv2d, Conv2d), (torch.nn.Conv1d, Conv1d))


def _is_torch_conv(module: torch.nn.Module) -> bool:
    """A torch Conv1d/Conv2d (or subclass) that is not ours yet; ConvTranspose*d are not Conv*d subclasses."""
    return isinstance(module, (torch.nn.Conv1d, torch.nn.Conv2d)) and not isinstance(module, (Conv1d, Conv2d))


def _ours(module: torch.nn.Module) -> tuple[type[torch.nn.Module], type[torch.nn.Module]]:
    """The torch base class of ``module`` and the convsuite class it becomes."""
    return next((base, ours) for base, ours in _OURS if isinstance(module, base))


def _check_convertible(name: str, module: torch.nn.Module) -> None:
    """Refuse a convolution whose computation convsuite's class would not reproduce."""
    where = f"`model`'s module {name!r}" if name else "`model`"
    base, _ = _ours(module)
    kind = type(module).__name__
    if parametrize.is_parametrized(module):
        raise ValueError(
            f"{where} ({kind}) has parametrizations (torch.nn.utils.parametrize), which convert would drop; "
            "convert the model first and register them afterwards"
        )
    if any(torch.nn.parameter.is_lazy(p) for p in module.parameters(recurse=False)):
        raise ValueError(f"{where} ({kind}) is a lazy module not yet initialised; run one forward pass first")
    for method in ("forward", "_conv_forward"):
        if getattr(type(module), method) is not getattr(base, method):
            raise ValueError(
                f"{where} is a {kind}, a subclass of {base.__module__}.{base.__qualname__} with its own {method}, "
                "which convert would drop; convert the submodules that hold plain convolutions instead"
            )


def convert(
    model: torch.nn.Module, backend: str | None = None, algorithm: str = "auto", inplace: bool = False
) -> torch.nn.Module:
    """Run every ``torch.nn.Conv1d``/``Conv2d`` of ``model`` on convsuite.

    Each such module (the model itself, or any submodule at any depth,
    subclasses included) becomes a :class:`convsuite.torch.Conv1d` /
    :class:`convsuite.torch.Conv2d` with the given settings. Everything else
    is left as it is: other layers, ``ConvTranspose*d`` (not a convolution
    convsuite runs) and modules that are already convsuite's (their settings
    are kept).

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    backend : str, optional
        The convsuite backend of every converted convolution (see
        :func:`convsuite.list_backends`), ``'auto'``, or None for the usual
        selection at each call.
    algorithm : str, default 'auto'
        Pin one of the backend's algorithms.
    inplace : bool, default False
        False converts a deep copy and leaves ``model`` untouched; True
        converts ``model`` itself.

    Returns
    -------
    torch.nn.Module
        The converted model (``model`` itself when ``inplace``).

    Raises
    ------
    TypeError
        ``model`` is not a ``torch.nn.Module``, ``inplace`` is not a bool or
        ``algorithm`` not a string.
    ValueError
        An unknown backend or algorithm; a convolution convert cannot carry
        over faithfully: a subclass with its own ``forward``, one with
        parametrizations, or a lazy module not yet initialised. Nothing is
        changed then.

    Notes
    -----
    A converted module is the same object with the same state: only its
    class changes (as torch's lazy modules become their ``cls_to_become``).
    It keeps its ``Parameter`` objects (so an optimizer made for a model
    converted in place still updates it), buffers, hooks, training mode and
    ``state_dict`` keys; a subclass's own methods other than the forward are
    no longer there. With ``inplace=False`` those are the objects of the copy.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"`model` must be a torch.nn.Module; got {type(model).__name__}")
    backend, algorithm = checked_settings(backend, algorithm)
    if not isinstance(inplace, bool):
        raise TypeError(f"`inplace` must be True or False; got {inplace!r}")
    for name, module in model.named_modules():  # every check before anything changes
        if _is_torch_conv(module):
            _check_convertible(name, module)
    if not inplace:
        model = copy.deepcopy(model)
    for module in [m for m in model.modules() if _is_torch_conv(m)]:
        module.__class__ = _ours(module)[1]
        assert isinstance(module, (Conv1d, Conv2d))  # now one of ours: its settings are attributes, not tensors
        module.backend, module.algorithm = backend, algorithm
    return model
