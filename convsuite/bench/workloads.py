"""The seed workloads of the course reports (a copy of shared/workloads.json)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

__all__ = ["seed_workloads", "layer"]


@lru_cache(maxsize=1)
def seed_workloads() -> dict:
    """The parsed workloads file shipped with the package."""
    return json.loads(resources.files(__package__).joinpath("workloads.json").read_text())


def layer(workload: str, name: str) -> dict:
    """One conv2d layer of a seed workload, e.g. ``layer("ece408-fa19", "conv1")``."""
    data = seed_workloads()
    if workload not in data or "layers" not in data[workload]:
        valid = [k for k, v in data.items() if isinstance(v, dict) and "layers" in v]
        raise ValueError(f"`workload` must be one of {valid}; got {workload!r}")
    for entry in data[workload]["layers"]:
        if entry["name"] == name:
            return {**entry, "batch": data[workload].get("batch"), "cpu_batch": data[workload].get("cpu_batch")}
    names = [entry["name"] for entry in data[workload]["layers"]]
    raise ValueError(f"`name` must be one of {names} for {workload}; got {name!r}")
