"""The plan cache: plans by key, and the settings generation that invalidates them.

:class:`PlanCache` maps a key of everything that determines a plan (op,
direction, operand shapes, dtypes and array types, the geometry keywords as
given, the requested backend and which setting asked for it, the algorithm,
the thread count, the autotune state, the precision and a settings
generation) to the plan. A hit costs a dictionary lookup; the cache is a
bounded LRU, safe to share between threads, and emptied (generation bumped)
whenever a setting that could change a choice changes: backends registered
or removed, ``set_backend``, ``set_autotune``, the tuning cache cleared, a
rule refitted.

A leaf: every module that changes a setting calls :func:`invalidate` without
importing the modules that build plans.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable

from . import _forksafe

__all__ = [
    "PlanCache",
    "cache",
    "clear_plan_cache",
    "generation",
    "invalidate",
    "plan_cache_info",
]

#: Plans kept at once; a network of a few hundred layers fits, and a plan is small.
DEFAULT_MAX_PLANS = 1024

_generation = 0
_generation_lock = _forksafe.lock()


def generation() -> int:
    """The settings generation: part of every plan key, bumped by :func:`invalidate`."""
    return _generation


class PlanCache:
    """A bounded, thread-safe LRU of plans by key.

    Lookups take no lock: ``OrderedDict.get`` and ``move_to_end`` are single
    C calls under the GIL. Insertion and eviction take the lock so that two
    threads building plans at once cannot both evict.
    """

    def __init__(self, maxsize: int = DEFAULT_MAX_PLANS) -> None:
        self.maxsize = maxsize
        self._plans: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = _forksafe.lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Any:
        """The plan under ``key`` (marked most recently used), or None."""
        plan = self._plans.get(key)
        if plan is None:
            self.misses += 1
            return None
        self.hits += 1
        try:
            self._plans.move_to_end(key)
        except KeyError:  # evicted or cleared by another thread meanwhile: still a valid plan
            pass
        return plan

    def put(self, key: Hashable, plan: Any) -> None:
        """Remember ``plan``, evicting the least recently used beyond ``maxsize``."""
        with self._lock:
            self._plans[key] = plan
            self._plans.move_to_end(key)
            while len(self._plans) > self.maxsize:
                self._plans.popitem(last=False)

    def clear(self) -> None:
        """Forget every plan."""
        with self._lock:
            self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)


_CACHE = PlanCache()


def cache() -> PlanCache:
    """The process-wide plan cache."""
    return _CACHE


@_forksafe.at_fork_in_child
def invalidate() -> None:
    """A setting changed (or the process forked, whose plans hold the parent's handles): bump the generation
    and drop every cached plan.
    """
    global _generation
    with _generation_lock:
        _generation += 1
    _CACHE.clear()


def clear_plan_cache() -> None:
    """Drop every cached plan, so the next call validates and chooses again.

    Settings changes made through convsuite's functions do this by
    themselves; call it after changing something convsuite cannot see, such
    as a registered backend object's own state.
    """
    invalidate()


def plan_cache_info() -> dict[str, int]:
    """Hits, misses, current size and capacity of the plan cache."""
    return {"hits": _CACHE.hits, "misses": _CACHE.misses, "size": len(_CACHE), "maxsize": _CACHE.maxsize}
