"""Which work this machine slows down in bursts: pure compute, fresh memory, numba's thread team.

    python tools/vm_stall_probe.py [--seconds 20]

Each probe repeats one piece of work for ``--seconds`` and reports the median call, the 90th and
99th percentiles, the share of calls slower than twice the median and the longest run of such
calls in a row. The probes, one at a time:

- ``spin``: a 64 Ki-element float32 dot product 60 times (~0.2 ms, one BLAS thread, no memory traffic);
- ``touch``: a fresh 40 MB float32 array filled once (page faults and zeroing; one thread);
- ``numba K=31, T threads[, sleep S]``: ``cs.conv1d`` of a 1e7 signal with 31 taps on the numba
  backend (the issue 12 case), back to back or after a pause of S seconds (the pause lets the
  OpenMP team fall asleep, as between the interleaved blocks of a benchmark).

On the 2-core CI VM (2026-11-26) only the two-thread numba calls after a pause had a tail (2-4% of
calls at 4-7x the median): the late wake-up of a sleeping OpenMP worker, not the VM slowing every
thread (see docs/measurements/session21-2026-11-26.md).
"""

import argparse
import time

import numpy as np

import convsuite as cs


def _report(label, seconds, work, pause=0.0):
    work()
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        if pause:
            time.sleep(pause)
        t0 = time.perf_counter()
        work()
        times.append(time.perf_counter() - t0)
    ms = np.array(times) * 1e3
    median = np.median(ms)
    slow = ms > 2 * median
    longest = run = 0
    for s in slow:
        run = run + 1 if s else 0
        longest = max(longest, run)
    print(
        f"{label:34s} calls {len(ms):6d}  median {median:8.3f} ms  p90 {np.percentile(ms, 90):8.3f}"
        f"  p99 {np.percentile(ms, 99):8.3f}  >2x median {100 * slow.mean():5.2f}%  longest run {longest}",
        flush=True,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    seconds = parser.parse_args().seconds
    rng = np.random.default_rng(0)
    vector = rng.standard_normal(2**16).astype(np.float32)
    signal = rng.standard_normal(10**7).astype(np.float32)
    taps = np.ones(31, np.float32)

    def spin():
        total = 0.0
        for _ in range(60):
            total += float(vector @ vector)
        return total

    def touch():
        fresh = np.empty(10**7, np.float32)
        fresh.fill(1.0)
        return fresh

    _report("spin", seconds, spin)
    _report("touch", seconds, touch)
    for threads, pause in ((1, 0.0), (2, 0.0), (1, 0.02), (2, 0.02)):
        cs.set_num_threads(threads)
        label = f"numba K=31, {threads} thread{'s' if threads > 1 else ''}" + (f", sleep {pause}" if pause else "")
        _report(label, seconds, lambda: cs.conv1d(signal, taps, padding="same", backend="numba"), pause)
    cs.set_num_threads(None)


if __name__ == "__main__":
    main()
