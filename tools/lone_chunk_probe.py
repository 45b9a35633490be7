"""Is a lone 1e7-sample chunk slower per sample than one large call? (issue 14's Dask rows)

On the device tool's Xeon host (2026-11-26) one 1e7 chunk of the N=1e8 K=31 signal took
32-42 ms on one thread, against 25.6 ms per chunk and thread inside one 2-thread call of the
whole signal; on the EPYC VM the two agree. This times, interleaved in one process
(medians of ``--repeat``, min-max):

- the whole signal and one chunk, on 1 and on 2 threads, through ``cs.conv1d`` (a fresh
  output each call, as a Dask task gets);
- the same through a held plan writing into a preallocated output (no page faults on the
  output), to separate the kernel from the first touch of fresh memory;

and prints the ms per 1e7 samples and thread of each, with numba's threading layer.

python tools/lone_chunk_probe.py [--n 1e8] [--chunk 1e7] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import convsuite as cs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=1e8)
    parser.add_argument("--chunk", type=float, default=1e7)
    parser.add_argument("--kernel", type=int, default=31)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    n, chunk = int(args.n), int(args.chunk)
    rng = np.random.default_rng(31)
    signal = rng.standard_normal(n, dtype=np.float32)
    mask = rng.standard_normal(args.kernel, dtype=np.float32)
    piece = signal[:chunk].copy()
    kw = dict(padding="same", backend="numba")
    cases = {}
    for threads in (1, 2):
        cs.set_num_threads(threads)  # the plans are sized for this count
        for label, x in (("whole", signal), ("chunk", piece)):
            plan = cs.plan(x, mask, **kw)
            out = np.empty(plan.user_y_shape, np.float32)

            def fresh(x=x, threads=threads):
                cs.set_num_threads(threads)
                cs.conv1d(x, mask, **kw)

            def kept(x=x, plan=plan, out=out, threads=threads):
                cs.set_num_threads(threads)
                plan(x, mask, out=out)

            cases[f"{label} {threads} thr, fresh output"] = (fresh, x.size, threads)
            cases[f"{label} {threads} thr, kept output"] = (kept, x.size, threads)
    for fn, _, _ in cases.values():
        fn()
    times = {k: [] for k in cases}
    for _ in range(args.repeat):
        for k, (fn, _, _) in cases.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    import numba

    print(f"numba {numba.__version__}, threading layer {numba.threading_layer()}, {numba.config.NUMBA_NUM_THREADS} max")
    for k, (_, size, threads) in cases.items():
        med = statistics.median(times[k]) * 1e3
        per = med * threads * 1e7 / size
        print(
            f"{k:32s} {med:8.2f} ms ({min(times[k]) * 1e3:.2f}-{max(times[k]) * 1e3:.2f}), "
            f"{per:6.2f} ms per 1e7 samples and thread"
        )
    cs.set_num_threads(None)


if __name__ == "__main__":
    main()
