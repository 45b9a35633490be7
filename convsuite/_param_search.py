"""The tuner's search over an algorithm's tunable parameters.

:func:`search_parameters` finds the fastest parameter set of one (backend,
algorithm) on one problem, with the measuring core (:mod:`._timing`), under a
time budget:

- **exhaustive** when every valid configuration (those the algorithm's
  constraint accepts on this case) can be timed within the budget: all of them
  side by side, the default among them;
- otherwise a **pruned search**, the strategy Kernel Tuner calls random
  sampling followed by local search (hill climbing): a deterministic random
  sample of configurations plus the default, timed side by side; then, from
  the fastest, its neighbours (each parameter moved one step along its list of
  values, the others kept) timed side by side with it, moving to a neighbour
  only when it is faster by more than :data:`MIN_GAIN`; it stops at a local
  optimum or when the budget is spent.

Every comparison is made inside one side-by-side measurement (interleaved
rounds), never across measurements taken at different moments, and the
default configuration keeps its place unless something beats it by more than
the noise margin. The fastest of many noisy medians is biased low (the
winner's curse: on an H200, a configuration picked out of 103 re-timed 4%
slower than the default it had beaten), so a winner other than the default is
**confirmed** by a final head-to-head with the default, with
:data:`CONFIRM_REPEAT` calls each, and kept only if it wins that too: tuned
parameters are never slower than the defaults beyond noise. Each candidate's
first call (JIT or NVRTC compilation of a new configuration) is timed apart by
the measuring core and counts against the budget but not against the
candidate.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ._spec import ConvSpec
from ._timing import Contender, measure_side_by_side
from .backends.base import Algorithm, Backend

__all__ = ["ParamSearch", "frozen_params", "search_parameters"]

#: A configuration must beat the incumbent by this fraction to replace it:
#: side-by-side medians of equal code differ by a few percent on a shared machine.
MIN_GAIN = 0.03
#: Configurations in the random sample of the pruned search (plus the default).
SAMPLE = 8
#: Calls per configuration per measurement (warm-up, then interleaved rounds).
REPEAT, ROUNDS, WARMUP = 6, 3, 1
#: Calls each of the confirming head-to-head between the winner and the default.
CONFIRM_REPEAT, CONFIRM_ROUNDS = 20, 5


@dataclass(frozen=True)
class ParamSearch:
    """What a parameter search measured.

    Attributes
    ----------
    params : dict
        The fastest parameter set (the default unless something beat it by more than the noise margin).
    default : dict
        The hand-chosen parameter set on this case.
    table : tuple of (dict, float or None, float or None, str)
        ``(params, median seconds, relative spread, status)`` of every
        configuration timed, fastest first (from the last measurement each
        took part in); status ``"ok"``, ``"abandoned"`` or why it failed.
    strategy : str
        ``"exhaustive"`` or ``"random+local"``, with the counts.
    valid : int
        Configurations the constraint accepts on this case.
    elapsed_s : float
        Seconds the search took (compilation included).
    """

    params: dict
    default: dict
    table: tuple[tuple[dict, float | None, float | None, str], ...]
    strategy: str
    valid: int
    elapsed_s: float


def frozen_params(params: Mapping[str, Any] | None) -> tuple:
    """A hashable, order-independent form of a parameter set."""
    return tuple(sorted((params or {}).items()))


def _neighbours(record: Algorithm, params: Mapping[str, Any]) -> list[dict]:
    """Each parameter moved one step along its list of values, the others kept."""
    out = []
    for t in record.tunables:
        value = params[t.name]
        below = [v for v in t.values if v < value]
        above = [v for v in t.values if v > value]
        # A default off the list (a rule's value) has the listed values around it as neighbours.
        out += [{**params, t.name: v} for v in (below[-1:] + above[:1])]
    return out


def search_parameters(
    spec: ConvSpec,
    direction: str,
    backend: Backend,
    algorithm: str,
    operands: tuple,
    *,
    budget_s: float,
    call_s: float | None = None,
    seed: int = 0,
    measure: Callable[..., dict] = measure_side_by_side,
    verify: Callable[..., str] | None = None,
) -> ParamSearch:
    """The fastest parameters of ``algorithm`` on ``spec`` found within ``budget_s`` seconds.

    Parameters
    ----------
    spec, direction
        The problem.
    backend, algorithm
        Whose tunables to search (the algorithm must declare some).
    operands : tuple
        Operands on the backend's device, as a launch takes them (outputs included).
    budget_s : float
        Seconds the search may take; at least the default and one other
        configuration are timed whatever the budget.
    call_s : float, optional
        Seconds of one call at the default (from an earlier measurement);
        sizes the search. Measured here when not given.
    seed : int
        Seed of the random sample (a fixed seed: the same problem searches
        the same configurations).
    measure : callable
        The measuring core (replaceable in tests).
    verify : callable, optional
        ``verify(spec, direction, backend, algorithm, operands, default,
        params) -> str``: why ``params`` computes something else than the
        default ("" when it agrees); default :func:`agrees_with_default`.

    Returns
    -------
    ParamSearch
    """
    start = time.perf_counter()
    verify = agrees_with_default if verify is None else verify
    records = backend.algorithm_table()
    if records is None or algorithm not in records:
        raise ValueError(
            f"`algorithm` must be one of backend {backend.name!r}'s algorithm records "
            f"({', '.join(map(repr, sorted(records or {})))}); got {algorithm!r}"
        )
    record = records[algorithm]
    default = record.resolve(spec, direction, None)
    valid = [c for c in record.configurations() if record.can_run(spec, direction, c) is True]
    if default not in valid:
        valid.insert(0, default)
    results: dict[tuple, tuple[dict, float | None, float | None, str]] = {}

    def time_side_by_side(configs: list[dict], repeat: int = REPEAT, rounds: int = ROUNDS) -> dict[tuple, float]:
        """Medians of ``configs`` measured together; failures recorded with their reason.

        Each configuration is planned and run once first, guarded (a launch
        the constraint let through but the device refuses is a result, not
        a crash); planning stops when the budget is spent (compilation of
        new configurations counts), keeping at least two to compare.
        """
        contenders: dict[tuple, Contender] = {}
        for params in configs:
            key = frozen_params(params)
            if len(contenders) >= 2 and time.perf_counter() - start > budget_s:
                results.setdefault(key, (params, None, None, "not timed: the budget was spent"))
                continue
            try:
                launch = backend.plan(spec, algorithm, direction, params)
                launch(*operands)
                backend.synchronize()
            except Exception as exc:  # a configuration that cannot build or run is reported, not fatal
                results[key] = (params, None, None, f"failed: {exc!r}")
                continue

            def run(launch: Callable[..., None] = launch) -> None:
                launch(*operands)
                backend.synchronize()

            contenders[key] = Contender(run, backend.timer)
        if not contenders:
            return {}
        timings = measure(contenders, repeat=repeat, warmup=WARMUP, rounds=rounds, abandon_ratio=3.0)
        medians = {}
        for key, t in timings.items():
            params = dict(key)
            results[key] = (params, t.median, t.iqr_rel, "abandoned" if t.abandoned else "ok")
            if not t.abandoned:
                medians[key] = t.median
        return medians

    if call_s is None:
        call_s = time_side_by_side([default]).get(frozen_params(default), 0.0)
    # Each configuration of a measurement costs its first call, the warm-up
    # and the timed calls; compilation is not known in advance, hence the margin.
    per_config = 2.0 * (1 + WARMUP * ROUNDS + REPEAT) * max(call_s, 1e-6)
    affordable = int(budget_s / per_config) if per_config > 0 else len(valid)

    if len(valid) <= max(affordable, 2):
        strategy = f"exhaustive ({len(valid)} configurations)"
        # The default first: if the budget runs out while planning, it is among those timed.
        medians = time_side_by_side([default, *(c for c in valid if c != default)])
        incumbent = _winner(medians, frozen_params(default))
    else:
        rng = random.Random(seed)
        others = [c for c in valid if c != default]
        sample = rng.sample(others, min(SAMPLE, len(others), max(1, affordable - 1)))
        medians = time_side_by_side([default, *sample])
        incumbent = _winner(medians, frozen_params(default))
        steps = 0
        valid_keys = {frozen_params(c) for c in valid}
        while time.perf_counter() - start < budget_s:
            near = [n for n in _neighbours(record, dict(incumbent)) if frozen_params(n) in valid_keys]
            near = [n for n in near if frozen_params(n) not in results or results[frozen_params(n)][3] == "ok"]
            fresh = [n for n in near if frozen_params(n) not in results]
            if not fresh:
                break
            medians = time_side_by_side([dict(incumbent), *fresh])
            steps += 1
            moved = _winner(medians, incumbent)
            if moved == incumbent:
                break
            incumbent = moved
        strategy = (
            f"random+local ({len(sample) + 1} sampled, {steps} local steps, {len(results)} of {len(valid)} timed)"
        )
    default_key = frozen_params(default)
    if incumbent != default_key:
        confirmed = incumbent  # a default that failed or was abandoned (far slower) needs no re-timing
        if default_key in results and results[default_key][3] == "ok":
            medians = time_side_by_side([default, dict(incumbent)], CONFIRM_REPEAT, CONFIRM_ROUNDS)
            confirmed = _winner(medians, default_key)
            strategy += "; confirmed against the default" if confirmed == incumbent else "; the default won it"
        if confirmed == incumbent:
            try:
                disagreement = verify(spec, direction, backend, algorithm, operands, default, dict(incumbent))
            except Exception as exc:  # the default itself cannot run: nothing to vouch for the winner
                disagreement = f"could not be compared with the default ({exc!r})"
            if disagreement:
                results[incumbent] = (dict(incumbent), None, None, f"rejected: {disagreement}")
                strategy += f"; the winner was rejected ({disagreement})"
                confirmed = default_key
        incumbent = confirmed
    table = sorted(results.values(), key=lambda row: (row[1] is None, row[1] or 0.0))
    return ParamSearch(
        params=dict(incumbent),
        default=default,
        table=tuple(table),
        strategy=strategy,
        valid=len(valid),
        elapsed_s=time.perf_counter() - start,
    )


def _winner(medians: Mapping[tuple, float], incumbent: tuple) -> tuple:
    """The fastest key, unless the incumbent is within :data:`MIN_GAIN` of it."""
    if not medians:
        return incumbent
    best = min(medians, key=medians.__getitem__)
    if incumbent in medians and medians[best] > (1.0 - MIN_GAIN) * medians[incumbent]:
        return incumbent
    return best


#: Relative disagreement (to the largest magnitude) of a weight or bias gradient
#: with the default's beyond which a configuration is rejected: far above
#: rounding (summation orders differ), far below what skipped work gives.
GRADIENT_AGREEMENT = {"float32": 1e-2, "float64": 1e-8}


def agrees_with_default(
    spec: ConvSpec, direction: str, backend: Backend, algorithm: str, operands: tuple, default: dict, params: dict
) -> str:
    """Why ``params`` does not compute what the default computes ("" when it does).

    The tuner times configurations; this keeps a fast wrong one (a tile that
    skips work) out of the tuning cache. Both run on the search's operands
    into outputs filled with NaN first, so unwritten elements show. Forward
    outputs and the input gradient of the first two images are compared with
    twice the float64 reference's tolerance on that slice (each result is
    within it of the exact value); weight and bias gradients, reductions
    over the whole batch, with :data:`GRADIENT_AGREEMENT`.
    """
    import dataclasses

    import numpy as np

    from .testing import backward_tolerances, forward_tolerance

    outputs = operands[3:]
    results = []
    for config in (default, params):
        for out in outputs:
            out.fill(float("nan"))
        backend.plan(spec, algorithm, direction, config)(*operands)
        backend.synchronize()
        # Copies: on the CPU to_host returns the buffer itself, which the next run overwrites.
        results.append([np.array(backend.to_host(out[:2] if i == 0 else out)) for i, out in enumerate(outputs)])
    # The slice leaves the device.
    host: list[Any] = [None if a is None else backend.to_host(a[:2]) for a in operands[:3]]
    sliced = dataclasses.replace(spec, batch=min(2, spec.batch))
    tolerances: list[np.ndarray | None]  # per element; None where GRADIENT_AGREEMENT applies
    if direction == "forward":
        x, w, bias = (
            host[0],
            backend.to_host(operands[1]),
            None if operands[2] is None else backend.to_host(operands[2]),
        )
        tolerances = [2 * forward_tolerance(sliced, x, w, bias)]
    else:
        grad_y, x, w = host[0], host[1], backend.to_host(operands[2])
        tolerances = [2 * backward_tolerances(sliced, grad_y, x, w)[0], None, None]
    for i, (a, b, tol) in enumerate(zip(*results, tolerances)):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if not np.array_equal(np.isnan(a), np.isnan(b)):
            return f"output {i} has NaN (unwritten) elements where the default's has none, or the reverse"
        finite = ~np.isnan(a)
        err = np.abs(a - b)[finite]
        if not err.size:
            continue
        if tol is not None:
            if np.any(err > np.broadcast_to(np.reshape(tol, a.shape), a.shape)[finite]):
                return f"output {i} differs from the default's beyond tolerance (max {err.max():.3g})"
            continue
        scale = max(float(np.abs(b[finite]).max()), np.finfo(np.float64).tiny)
        if err.max() > GRADIENT_AGREEMENT[str(spec.dtype)] * scale:
            return f"gradient {i} differs from the default's by {err.max() / scale:.3g} of its largest magnitude"
    return ""
