"""Where a Dask call's time goes: task-stream breakdown of conv1d on 1 and 2 worker processes.

python tools/dask_task_stream.py [--n 1e8] [--chunk 1e7] [--repeat 5]

For each worker count: wall time of persist + wait, time to the first task, first start to
last stop, and the summed busy time of the compute tasks (``distributed.get_task_stream``).
The first call of each cluster is a warm-up (JIT compilation in the workers) and is printed too.
"""

from __future__ import annotations

import argparse
import time

import dask.array as da
import distributed
import numpy as np

import convsuite as cs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=1e8)
    parser.add_argument("--chunk", type=float, default=1e7)
    parser.add_argument("--kernel", type=int, default=31)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    signal = rng.standard_normal(int(args.n), dtype=np.float32)
    mask = rng.standard_normal(args.kernel, dtype=np.float32)
    for workers in (1, 2):
        cluster = distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=40
        )
        client = distributed.Client(cluster)
        x = client.persist(da.from_array(signal, chunks=int(args.chunk)))
        distributed.wait(x)
        for i in range(args.repeat + 1):
            with distributed.get_task_stream(client) as stream:
                start = time.time()
                # A new mask value each call: new graph keys, so nothing is reused from memory.
                y = client.persist(cs.conv1d(x, mask * np.float32(1 + 1e-6 * i), padding="same"))
                distributed.wait(y)
                end = time.time()
            client.cancel(y)
            spans = [(s["start"], s["stop"]) for t in stream.data for s in t["startstops"] if s["action"] == "compute"]
            first, last = min(a for a, _ in spans), max(b for _, b in spans)
            busy = sum(b - a for a, b in spans)
            print(
                f"{workers} worker(s){' (warm-up)' if i == 0 else ''}: wall {(end - start) * 1e3:.0f} ms, "
                f"to first task {(first - start) * 1e3:.0f}, first start to last stop {(last - first) * 1e3:.0f}, "
                f"busy {busy * 1e3:.0f} over {len(spans)} tasks",
                flush=True,
            )
        client.close()
        cluster.close()


if __name__ == "__main__":
    main()
