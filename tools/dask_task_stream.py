"""Where a Dask call's time goes: task-stream breakdown of conv1d on 1 and 2 worker processes.

python tools/dask_task_stream.py [--n 1e8] [--chunk 1e7] [--repeat 5] [--spread]

For each worker count: wall time of persist + wait, time to the first task, first start to
last stop, the summed busy time of the compute tasks (``distributed.get_task_stream``), and
per worker its task count and busy time; then, per task kind (key prefix), the count and the
median duration of the compute and transfer spans. The reference is one chunk through
``cs.conv1d`` in this process on one thread (a cluster task's work with no cluster).
``--spread``: the input chunks are scattered to the workers in turn (5 and 5 of 10 on two)
instead of placed by the scheduler while it persists them.
The first call of each cluster is a warm-up (JIT compilation in the workers) and is printed too.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import dask
import dask.array as da
import distributed
import numpy as np

import convsuite as cs


def spread_over_workers(client, signal, chunk):
    """``signal`` as a Dask array whose chunks sit on the workers in turn."""
    workers = sorted(client.scheduler_info()["workers"])
    arrays = []
    for k, lo in enumerate(range(0, signal.size, chunk)):
        piece = signal[lo : lo + chunk]
        future = client.scatter(piece, workers=[workers[k % len(workers)]])
        arrays.append(da.from_delayed(dask.delayed(future), shape=piece.shape, dtype=piece.dtype))
    x = client.persist(da.concatenate(arrays))
    distributed.wait(x)
    return x


def in_process_chunk(signal, mask, chunk, repeat=5) -> float:
    """Median seconds of one chunk through cs.conv1d on one thread, here."""
    piece = signal[:chunk]
    cs.set_num_threads(1)
    try:
        cs.conv1d(piece, mask, padding="same")
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            cs.conv1d(piece, mask, padding="same")
            times.append(time.perf_counter() - t0)
    finally:
        cs.set_num_threads(None)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=1e8)
    parser.add_argument("--chunk", type=float, default=1e7)
    parser.add_argument("--kernel", type=int, default=31)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--spread", action="store_true", help="scatter the input chunks to the workers in turn")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    chunk = int(args.chunk)
    signal = rng.standard_normal(int(args.n), dtype=np.float32)
    mask = rng.standard_normal(args.kernel, dtype=np.float32)
    print(f"one chunk in this process, 1 thread: {in_process_chunk(signal, mask, chunk) * 1e3:.1f} ms", flush=True)
    for workers in (1, 2):
        cluster = distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=40
        )
        client = distributed.Client(cluster)
        if args.spread:
            x = spread_over_workers(client, signal, chunk)
        else:
            x = client.persist(da.from_array(signal, chunks=chunk))
            distributed.wait(x)
        held = client.who_has(x)
        placed = defaultdict(int)
        for where in held.values():
            placed[where[0] if where else None] += 1
        print(f"{workers} worker(s): input chunks per worker {sorted(placed.values())}", flush=True)
        kinds = defaultdict(lambda: defaultdict(list))
        for i in range(args.repeat + 1):
            with distributed.get_task_stream(client) as stream:
                start = time.time()
                # A new mask value each call: new graph keys, so nothing is reused from memory.
                y = client.persist(cs.conv1d(x, mask * np.float32(1 + 1e-6 * i), padding="same"))
                distributed.wait(y)
                end = time.time()
            client.cancel(y)
            spans, per_worker = [], defaultdict(lambda: [0, 0.0])
            for task in stream.data:
                prefix = str(task["key"][0] if isinstance(task["key"], tuple) else task["key"]).rsplit("-", 1)[0]
                for s in task["startstops"]:
                    if i > 0:
                        kinds[prefix][s["action"]].append(s["stop"] - s["start"])
                    if s["action"] == "compute":
                        spans.append((s["start"], s["stop"]))
                        per_worker[task["worker"]][0] += 1
                        per_worker[task["worker"]][1] += s["stop"] - s["start"]
            first, last = min(a for a, _ in spans), max(b for _, b in spans)
            busy = sum(b - a for a, b in spans)
            shares = ", ".join(f"{n} tasks {t * 1e3:.0f} ms" for n, t in sorted(per_worker.values()))
            print(
                f"{workers} worker(s){' (warm-up)' if i == 0 else ''}: wall {(end - start) * 1e3:.0f} ms, "
                f"to first task {(first - start) * 1e3:.0f}, first start to last stop {(last - first) * 1e3:.0f}, "
                f"busy {busy * 1e3:.0f} over {len(spans)} tasks; per worker: {shares}",
                flush=True,
            )
        for prefix, actions in sorted(kinds.items()):
            cells = ", ".join(
                f"{action} {len(d)} x {statistics.median(d) * 1e3:.2f} ms" for action, d in sorted(actions.items())
            )
            print(f"  {prefix}: {cells}", flush=True)
        client.close()
        cluster.close()


if __name__ == "__main__":
    main()
