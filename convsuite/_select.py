"""The one policy that chooses a backend and algorithm for a problem.

In order: a named backend and algorithm are taken as requested (a named
backend never falls back silently); under autotune, the measurement in the
tuning cache, or a new one (:mod:`convsuite._tuning`); otherwise the fitted
rule (:mod:`convsuite._rule`: this machine's calibrated table, else the
shipped table of the nearest machine); where there is no fitted data, backends by
priority and the first one's own algorithm rule.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Sequence

from . import _registry, _rule, _tuning
from ._errors import UnsupportedCaseError
from ._plans import Decision
from ._spec import ConvSpec
from .backends.base import Backend

__all__ = ["choose"]


def choose(
    spec: ConvSpec,
    direction: str,
    name: str,
    source: str,
    algorithm: str,
    home: Backend | None,
    *,
    measure: bool | None = None,
) -> tuple[Backend, str, Decision]:
    """The backend and algorithm for one problem, and how they were decided.

    ``measure=None`` measures when autotune is on; ``False`` only consults
    the tuning cache (``explain`` runs nothing).
    """
    tuning = _tuning.autotune_enabled()
    if measure is None:
        measure = tuning
    device = _tuning.data_device(home)
    request = _tuning.request_label(name, algorithm)

    if name != "auto":
        chosen = _registry.select(spec, name, algorithm, direction, source)
        backend = chosen.backend
        if tuning and (algorithm == "auto" or backend.tunables(chosen.algorithm)):
            pairs = _registry.request_candidates(spec, direction, name, algorithm, device)[0]
            if _worth_measuring(pairs):
                found = _tuning.measured_choice(spec, direction, pairs, request, device, measure=measure)
                if found is not None:
                    (backend, algo), decision = found
                    return backend, algo, _with_source(decision, source, chosen.considered)
        decided_by = "rule" if algorithm == "auto" and len(backend.algorithms) > 1 else "request"
        return backend, chosen.algorithm, Decision(source, decided_by, chosen.reason, chosen.considered)

    if algorithm != "auto":
        _registry.check_algorithm_exists(algorithm)
    pairs, considered = _registry.request_candidates(spec, direction, name, algorithm, device)
    if not pairs:
        details = "; ".join(f"{n}: {why}" for n, why in considered)
        raise UnsupportedCaseError(f"no backend can run this {direction} case ({details})")
    if tuning and _worth_measuring(_tuning.contenders(pairs)):
        found = _tuning.measured_choice(spec, direction, pairs, request, device, measure=measure)
        if found is not None:
            (backend, algo), decision = found
            return backend, algo, _with_source(decision, source, tuple(considered))
    ranked = _ranked(spec, direction, pairs)
    if ranked is not None:
        backend, algo, reason = ranked
        return backend, algo, Decision(source, "rule", reason, tuple(considered))
    first = pairs[0][0]
    algo, why = first.choose_algorithm(spec, direction)
    if (first, algo) not in pairs:
        algo = next(a for b, a in pairs if b is first)
    reason = f"highest-priority backend that is available and can run the case (no fitted rule data); algorithm: {why}"
    return first, algo, Decision(source, "priority", reason, tuple(considered))


def _worth_measuring(pairs: Sequence[tuple[Backend, str]]) -> bool:
    """Whether timing can choose anything: several candidates, or one with tunable parameters."""
    return len(pairs) > 1 or any(b.tunables(a) for b, a in pairs)


def _with_source(decision: Decision, source: str, considered: Iterable[tuple[str, str]]) -> Decision:
    """The decision with who asked, and the skipped backends, filled in."""
    return replace(decision, source=source, considered=tuple(considered))


def _ranked(spec: ConvSpec, direction: str, pairs: Sequence[tuple[Backend, str]]) -> tuple[Backend, str, str] | None:
    """The fitted rule's first among ``pairs`` and why, or None where its tables have nothing to say."""
    labels = {f"{b.name}/{a}": (b, a) for b, a in pairs}
    # This machine's calibrated table lives beside the tuning cache (convsuite.calibrate writes it there).
    ranking = _rule.rank(spec, direction, list(labels), pairs[0][0].device, calibrated_dir=_tuning.cache_dir())
    if not ranking or ranking[0][1] is None:
        return None
    backend, algo = labels[ranking[0][0]]
    return backend, algo, ranking.reason()
