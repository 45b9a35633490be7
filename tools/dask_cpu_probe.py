"""CPU time of each process of a 2-worker LocalCluster per Dask call (issue 14's Dask rows).

The N=1e8 K=31 signal in 1e7 chunks, spread 5 and 5 over two single-threaded worker
processes, ``cs.conv1d(..., padding="same")`` persisted and waited for, as
``convsuite.bench.scaling`` times it. For ``--calls`` calls after a warm-up, twice: the wall
time per call and the user and system CPU time per call of this process (the client, and
LocalCluster's scheduler and nannies, which run in it) and of each worker process (psutil);
then the in-memory numba call on two threads, for comparison. On two cores, every CPU
millisecond the cluster's own processes spend is taken from the workers' kernels.

python tools/dask_cpu_probe.py [--calls 5]
(Dask settings through the environment, e.g. DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING=False.)
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import distributed
import numpy as np
import psutil

import convsuite as cs

sys.path.insert(0, str(Path(__file__).parent))
from dask_task_stream import spread_over_workers  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    n, chunk, kernel = 10**8, 10**7, 31
    rng = np.random.default_rng(31)
    signal = rng.standard_normal(n, dtype=np.float32)
    mask = rng.standard_normal(kernel, dtype=np.float32)
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=40
    )
    client = distributed.Client(cluster)
    try:
        x = spread_over_workers(client, signal, chunk)
        calls = itertools.count(1)

        def once():
            # A negligibly different mask each call: new keys, nothing reused from the last call.
            y = client.persist(cs.conv1d(x, mask * np.float32(1 + 1e-6 * next(calls)), padding="same"))
            distributed.wait(y)
            client.cancel(y)

        for _ in range(3):
            once()
        me = psutil.Process()
        workers = [p for p in me.children(recursive=True) if "resource_tracker" not in " ".join(p.cmdline())]
        processes = {"client + scheduler + nannies": me, **{f"worker pid {p.pid}": p for p in workers}}
        for _ in range(2):
            before = {k: p.cpu_times() for k, p in processes.items()}
            t = time.perf_counter()
            for _ in range(args.calls):
                once()
            wall = (time.perf_counter() - t) / args.calls
            after = {k: p.cpu_times() for k, p in processes.items()}
            print(f"{args.calls} calls: wall {wall * 1e3:.1f} ms per call", flush=True)
            for k in processes:
                user = (after[k].user - before[k].user) / args.calls
                system = (after[k].system - before[k].system) / args.calls
                print(f"  {k:30s} user {user * 1e3:6.1f} ms, system {system * 1e3:6.1f} ms per call", flush=True)
    finally:
        client.close()
        cluster.close()
    cs.set_num_threads(2)
    cs.conv1d(signal, mask, backend="numba", padding="same")
    before, t = psutil.Process().cpu_times(), time.perf_counter()
    for _ in range(args.calls):
        cs.conv1d(signal, mask, backend="numba", padding="same")
    wall, after = (time.perf_counter() - t) / args.calls, psutil.Process().cpu_times()
    user, system = (after.user - before.user) / args.calls, (after.system - before.system) / args.calls
    print(
        f"in-memory numba, 2 threads: wall {wall * 1e3:.1f} ms, user {user * 1e3:.1f} ms, "
        f"system {system * 1e3:.1f} ms per call"
    )


if __name__ == "__main__":
    main()
