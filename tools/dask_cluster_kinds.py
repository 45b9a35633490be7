"""Issue 14's Dask case on a LocalCluster of worker processes and of worker threads, against the in-memory call.

    python tools/dask_cluster_kinds.py [--n 1e8] [--chunk 1e7] [--repeat 7]

A 1-D signal (K=31, "same") persisted on the cluster, one fresh mask per call (new graph keys);
each row is the median of ``repeat`` calls (persist + wait) on a fresh cluster of 2 single-threaded
workers, the in-memory numba call on 2 threads between them; the three alternate twice. Shows
what the worker processes cost over threads on the same cores (the kernels release the GIL).
"""

import argparse
import itertools
import time

import dask.array as da
import distributed
import numpy as np

import convsuite as cs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=1e8)
    parser.add_argument("--chunk", type=float, default=1e7)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    n, chunk, repeat = int(args.n), int(args.chunk), args.repeat
    rng = np.random.default_rng(31)
    signal = rng.standard_normal(n, dtype=np.float32)
    mask = rng.standard_normal(31, dtype=np.float32)
    calls = itertools.count(1)

    def on_cluster(processes):
        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=":0", silence_logs=40
        )
        client = distributed.Client(cluster, set_as_default=False)
        try:
            x = client.persist(da.from_array(signal, chunks=chunk))
            with client.as_current():
                distributed.wait(distributed.futures_of(x))
            times = []
            for i in range(repeat + 1):  # the first call warms the workers (JIT cache, plans)
                t0 = time.perf_counter()
                y = client.persist(cs.conv1d(x, mask * np.float32(1 + 1e-6 * next(calls)), padding="same"))
                with client.as_current():
                    distributed.wait(distributed.futures_of(y))
                if i:
                    times.append(time.perf_counter() - t0)
                client.cancel(y)
                time.sleep(0.1)
            return times
        finally:
            client.close()
            cluster.close()

    def in_memory():
        cs.set_num_threads(2)
        try:
            cs.conv1d(signal, mask, padding="same", backend="numba")
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                cs.conv1d(signal, mask, padding="same", backend="numba")
                times.append(time.perf_counter() - t0)
                time.sleep(0.1)
            return times
        finally:
            cs.set_num_threads(None)

    rows = [
        ("in-memory numba, 2 threads", in_memory),
        ("LocalCluster, 2 worker processes", lambda: on_cluster(True)),
        ("LocalCluster, 2 worker threads", lambda: on_cluster(False)),
    ]
    for label, run in rows * 2:
        ms = np.array(run()) * 1e3
        print(f"{label:34s} median {np.median(ms):7.1f} ms  min {ms.min():7.1f}  max {ms.max():7.1f}", flush=True)


if __name__ == "__main__":
    main()
