"""Print two CPUs of this process's affinity that sit on different physical cores, for ``taskset -c``.

Used by ``tools/device_run.sh cpu2`` to hold a benchmark to two cores of a
many-core host, as on the 2-core CI machine but without its neighbours. The
first two CPUs are skipped where there are enough others (the host's
interrupts and daemons tend to run there), and an SMT sibling of a CPU
already taken is never taken: two hyperthreads of one core are not two cores.
"""

from __future__ import annotations

import os
from pathlib import Path


def core_of(cpu: int) -> str:
    """The CPU's SMT siblings list, which names its physical core (the CPU itself where unknown)."""
    path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    try:
        return path.read_text().strip()
    except OSError:
        return str(cpu)


def two_cores() -> list[int]:
    """Two CPUs on different physical cores, past the first two where the machine has enough."""
    cpus = sorted(os.sched_getaffinity(0))
    candidates = [c for c in cpus if c >= 2] if len(cpus) >= 6 else cpus
    chosen: list[int] = []
    cores: set[str] = set()
    for cpu in candidates:
        core = core_of(cpu)
        if core not in cores:
            chosen.append(cpu)
            cores.add(core)
        if len(chosen) == 2:
            return chosen
    raise SystemExit(f"fewer than two physical cores among CPUs {cpus}")


if __name__ == "__main__":
    print(",".join(str(c) for c in two_cores()))
