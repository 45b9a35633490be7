"""``convsuite compare --model NAME``: a whole torch model, torch's convolutions against convsuite's.

:func:`load_model` builds a torchvision classification model without weights
(``weights=None``: nothing is downloaded); :func:`compare_model` takes any
``torch.nn.Module`` (so a test, or a user, can pass their own) and times one
forward pass of it as it is and of its copy with every convolution on
convsuite (:func:`convsuite.torch.convert`, one copy per backend asked for):
each warmed until its time per call is stable, then all timed interleaved,
medians; and the agreement of the logits (largest difference over the
largest magnitude of torch's). Nothing here prints.
"""

from __future__ import annotations

import datetime as dt
import difflib
from dataclasses import asdict, dataclass

from .._timing import Contender, measure_side_by_side
from .._validation import _show
from .machine import machine_metadata
from .measure import ROUNDS, settle_seconds
from .timing import openmp_waits, passive_openmp, round_drift, warm_up

__all__ = ["MODEL_INPUT", "ModelResult", "compare_model", "load_model", "speedup_over_torch"]

#: The input of a torchvision classification model: one 224x224 RGB image.
MODEL_INPUT = (1, 3, 224, 224)


def load_model(name: str):
    """Build torchvision's model ``name`` with random weights (``weights=None``), in eval mode.

    Raises
    ------
    ValueError
        torchvision is not installed, or has no classification model of that
        name (the message lists some); one line each.
    """
    try:
        import torchvision
    except ImportError:
        raise ValueError(
            "--model needs torchvision, which is not installed here (pip install torchvision, "
            "the build matching your torch)"
        ) from None
    names = torchvision.models.list_models(module=torchvision.models)
    if name not in names:
        close = difflib.get_close_matches(str(name), names, n=3)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise ValueError(
            f"--model must be one of torchvision's {len(names)} classification models "
            f"(torchvision.models.list_models()); got {name!r}; {hint}e.g. resnet18, mobilenet_v2"
        )
    return torchvision.models.get_model(name, weights=None).eval()


@dataclass
class ModelResult:
    """One contender's forward pass of the model: times, warm-up, and its logits against torch's."""

    contender: str
    backend: str | None  # None for torch itself; "auto" for convsuite's own choice
    median_s: float
    low_s: float
    high_s: float
    repeats: int
    first_call_s: float
    warmup_s: float
    warmup_stable: bool
    max_rel_diff: float  # against torch's logits: largest |difference| over torch's largest |logit|
    drift: str = ""

    def as_dict(self) -> dict:
        """The fields as a plain dict (for JSON)."""
        return asdict(self)


def _check_model_request(model, input_shape, backends, repeat, device) -> None:
    """Refuse what cannot be measured, naming the parameter, before anything runs."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"`model` must be a torch.nn.Module; got {_show(model)}")
    if not (isinstance(input_shape, tuple) and input_shape and all(isinstance(n, int) and n > 0 for n in input_shape)):
        raise ValueError(f"`input_shape` must be a tuple of positive ints, e.g. {MODEL_INPUT}; got {input_shape!r}")
    if not isinstance(backends, list) or not backends or not all(b is None or isinstance(b, str) for b in backends):
        raise ValueError(
            f"`backends` must be a non-empty list of backend names (None: convsuite's choice); got {backends!r}"
        )
    if device not in ("cpu", "gpu"):
        raise ValueError(f"`device` must be 'cpu' or 'gpu'; got {device!r}")
    if device == "gpu" and not torch.cuda.is_available():
        raise ValueError(f"--device gpu needs a CUDA device that torch {torch.__version__} can use; it sees none")
    if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
        raise ValueError(f"`repeat` must be a positive int; got {repeat!r}")


def _forward(model, x, device: str):
    """One forward pass without autograd, finished on the device inside the call."""
    import torch

    def run():
        with torch.inference_mode():
            out = model(x)
        if device == "gpu":
            torch.cuda.synchronize()
        return out

    return run


def compare_model(
    model,
    input_shape: tuple = MODEL_INPUT,
    backends: list[str | None] | None = None,
    *,
    repeat: int = 5,
    device: str = "cpu",
    seed: int = 0,
) -> tuple[list[ModelResult], dict]:
    """Time a forward pass of ``model`` in torch and on convsuite, interleaved; compare the logits.

    Parameters
    ----------
    model : torch.nn.Module
        The model, put in eval mode (and on the device); its convolutions
        are replaced in copies, never in it.
    input_shape : tuple of int
        The input batch's shape (float32, standard normal, seeded).
    backends : list of str or None, optional
        One convsuite contender per entry: a backend name, or None for
        convsuite's own choice (``"auto"``). Default ``[None]``.
    repeat : int
        Timed forward passes per contender, spread over interleaved rounds.
    device : {"cpu", "gpu"}
        Where the model and input live (on the GPU, CUDA synchronised in each call).
    seed : int
        Seed of the input.

    Returns
    -------
    results : list of ModelResult
        torch first, then one per backend.
    meta : dict
        Date, machine, input shape, device, repeat, rounds, isolation (the
        OpenMP waits in force) and the model's class and parameter count.

    Raises
    ------
    TypeError, ValueError
        A ``model`` that is not a torch module, a bad shape, backend list,
        device or repeat; an unknown backend or algorithm (from
        :func:`convsuite.torch.convert`); before anything is timed.
    """
    passive_openmp()  # before torch's first parallel call here, where it is not too late
    import torch

    from ..torch import convert

    backends = [None] if backends is None else backends
    _check_model_request(model, input_shape, backends, repeat, device)
    where = "cuda" if device == "gpu" else "cpu"
    model = model.eval()
    converted = {f"convsuite ({b or 'auto'})": convert(model, backend=b).to(where) for b in backends}
    reference = model.to(where)
    x = torch.randn(input_shape, generator=torch.Generator().manual_seed(seed)).to(where)
    runs = {"torch": _forward(reference, x, device)}
    runs.update({name: _forward(m, x, device) for name, m in converted.items()})
    warm = {name: warm_up(run) for name, run in runs.items()}
    rounds = min(ROUNDS, repeat)
    timings = measure_side_by_side(
        {name: Contender(run) for name, run in runs.items()},
        repeat=repeat,
        warmup=1,
        rounds=rounds,
        settle_s=settle_seconds(),
    )
    logits = runs["torch"]().float().cpu()
    scale = max(float(logits.abs().max()), torch.finfo(torch.float64).tiny)
    results = []
    for (name, run), backend in zip(runs.items(), [None, *backends]):
        t = timings[name]
        diff = float((run().float().cpu() - logits).abs().max()) / scale
        results.append(
            ModelResult(
                contender=name,
                backend=None if name == "torch" else (backend or "auto"),
                median_s=t.median,
                low_s=t.low,
                high_s=t.high,
                repeats=t.repeats,
                first_call_s=warm[name].first_call_s,
                warmup_s=warm[name].seconds,
                warmup_stable=warm[name].stable,
                max_rel_diff=diff,
                drift=round_drift(t, rounds) or "",
            )
        )
    waits = openmp_waits()
    meta = dict(
        date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        model=type(model).__name__,
        parameters=sum(p.numel() for p in model.parameters()),
        input_shape=list(input_shape),
        device=device,
        repeat=repeat,
        rounds=rounds,
        torch_threads=torch.get_num_threads(),
        isolation=(
            waits.description
            if waits.passive
            else f"{waits.description}: torch and convsuite timed in one process may slow each other down"
        ),
        machine=machine_metadata(),
    )
    return results, meta


def speedup_over_torch(results: list[ModelResult]) -> dict[str, float]:
    """Speed of each contender against torch: torch's median over its own (> 1: faster than torch)."""
    torch_s = next(r.median_s for r in results if r.backend is None)
    return {r.contender: torch_s / r.median_s for r in results}
