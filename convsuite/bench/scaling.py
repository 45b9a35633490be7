"""Scaling past one core, one process and one GPU, measured side by side (``convsuite compare --scaling``).

- **joblib**: the joblib rung (threads over the GIL-free Cython kernels)
  against the single-core Cython rung and Numba's ``prange`` on the ECE408
  layers, with the same thread count.
- **dask**: a 1-D signal (N=1e8, K=31, chunks of 1e7) on a LocalCluster of
  one and of two single-threaded worker processes (what ``LocalCluster()``
  starts on a 2-core machine), each chunk computed with the user's default
  settings (``backend="auto"``, one thread per task: see
  :mod:`convsuite.distributed._blocks`), against one in-memory call on the
  same cores; two workers as threads of one process (what the processes
  cost); and the overhead a chunk adds.
- **gpus**: the ECE408 batch split across 1 and 2 GPUs, inputs already on
  the devices (needs CuPy and GPUs; skipped with the reason otherwise).

Every figure is a median of interleaved repeats within this one run (the
measuring core, through :mod:`convsuite.bench.timing`), shown with its
spread; ratios > 1 mean the first-named contender is faster. Every result is
checked against the float64 reference before it is timed. :func:`scaling_rows`
returns the rows; :mod:`convsuite.bench.scaling_view` puts the workers on one
axis and writes the tables. The record over time is the asv suite
(``benchmarks/bench_scaling.py``, ``benchmarks/bench_ratios.py``).
"""

from __future__ import annotations

import itertools

import numpy as np

import convsuite as cs
from convsuite.bench.timing import Timing, time_side_by_side
from convsuite.bench.workloads import layer
from convsuite.testing import forward_tolerance, reference_forward

__all__ = ["SECTIONS", "SIZES", "ms", "scaling_rows"]

ECE408_LAYERS = (("ece408-fa19", "conv1"), ("ece408-fa19", "conv2"), ("ece408-fa21", "conv1"), ("ece408-fa21", "conv2"))


def ms(seconds: float) -> str:
    """Milliseconds to print: three decimals below 10 ms (the GPU rows' sub-millisecond calls), one above."""
    value = seconds * 1e3
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def _check(x, w, kw, y, batch_slice: int = 2) -> float:
    """Relative max error against the float64 reference on a few items; raises when out of bound."""
    xs, ys = (x[:batch_slice], y[:batch_slice]) if x.ndim > 1 else (x, y)
    spec = cs.explain(xs, w, **kw).spec
    ref = reference_forward(spec, xs, w)
    err = np.abs(np.reshape(ys, spec.y_shape) - ref)
    if not np.all(err <= forward_tolerance(spec, xs, w)):
        raise AssertionError("result disagrees with the float64 reference")
    return float(err.max() / max(np.abs(ref).max(), 1e-30))


def _row(section, case, ours, theirs, timings: dict[str, Timing], workers, extra=None) -> dict:
    """One comparison; ``workers`` is (ours, baseline): the workers, threads or GPUs each ran on."""
    a, b = timings[ours], timings[theirs]
    ratio = b.median / a.median
    row = dict(
        section=section,
        case=case,
        ours=ours,
        ours_workers=workers[0],
        ours_ms=a.median * 1e3,
        ours_spread_ms=[a.low * 1e3, a.high * 1e3],
        baseline=theirs,
        baseline_workers=workers[1],
        baseline_ms=b.median * 1e3,
        baseline_spread_ms=[b.low * 1e3, b.high * 1e3],
        ratio=ratio,
        repeats=a.repeats,
        **(extra or {}),
    )
    print(
        f"{section:7s} {case:34s} {ours:>22s} {ms(a.median):>9s} ms [{ms(a.low)}-{ms(a.high)}]"
        f"  vs {theirs:>22s} {ms(b.median):>9s} ms [{ms(b.low)}-{ms(b.high)}]"
        f"  {ratio:5.2f}x",
        flush=True,
    )
    return row


# --- joblib rung ---------------------------------------------------------------


def joblib_rows(batch: int, threads: int, repeat: int) -> list[dict]:
    """Joblib threads vs single-core Cython vs Numba prange on the ECE408 layers."""
    import joblib

    rows = []
    rng = np.random.default_rng(14)
    for workload, name in ECE408_LAYERS:
        entry = layer(workload, name)
        x = rng.standard_normal((batch, entry["C"], entry["H"], entry["W"]), dtype=np.float32)
        w = rng.standard_normal((entry["M"], entry["C"], entry["K"], entry["K"]), dtype=np.float32)
        kw = dict(stride=entry["stride"], padding=entry["padding"])

        def joblib_call(x=x, w=w, kw=kw):
            with joblib.parallel_config(backend="threading", n_jobs=threads):
                return cs.conv2d(x, w, backend="joblib", **kw)

        contenders = {
            f"joblib ({threads} threads)": joblib_call,
            "cython (1 core)": lambda x=x, w=w, kw=kw: cs.conv2d(x, w, backend="cython", **kw),
            f"numba ({threads} threads)": lambda x=x, w=w, kw=kw: cs.conv2d(x, w, backend="numba", **kw),
        }
        for fn in contenders.values():
            _check(x, w, kw, fn())
        cs.set_num_threads(threads)
        try:
            t = time_side_by_side(contenders, repeat=repeat)
        finally:
            cs.set_num_threads(None)
        case = f"{workload} {name} B={batch}"
        ours, extra = f"joblib ({threads} threads)", dict(threads=threads)
        rows.append(_row("joblib", case, ours, "cython (1 core)", t, (threads, 1), extra))
        rows.append(_row("joblib", case, ours, f"numba ({threads} threads)", t, (threads, threads), extra))
    return rows


# --- Dask ------------------------------------------------------------------------


def dask_rows(n: int, chunk: int, kernel: int, repeat: int, backend: str | None) -> list[dict]:
    """1 vs 2 single-threaded workers, against in-memory calls on the same 2 cores; chunk overhead.

    ``backend`` computes each chunk (None: the default, ``"auto"`` on the
    worker); the workers keep the thread count a task gets by default.
    """
    import dask.array as da
    import distributed

    rows = []
    rng = np.random.default_rng(31)
    signal = rng.standard_normal(n, dtype=np.float32)
    mask = rng.standard_normal(kernel, dtype=np.float32)
    kw = dict(padding="same")
    clusters = {}
    try:
        # 1 and 2 worker processes, and 2 workers as threads of one process (information:
        # what the processes cost on the same cores; the kernels release the GIL).
        for key, workers, processes in ((1, 1, True), (2, 2, True), ("threads", 2, False)):
            # ":0": any free port for the dashboard; two clusters (or a user's) would both ask for 8787.
            cluster = distributed.LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=processes, dashboard_address=":0", silence_logs=40
            )
            client = distributed.Client(cluster, set_as_default=False)
            x = client.persist(da.from_array(signal, chunks=chunk))
            with client.as_current():
                distributed.wait(distributed.futures_of(x))
            clusters[key] = (cluster, client, x)

        calls = itertools.count(1)

        def fresh_mask():
            """The mask with a negligible change: new graph keys, so no result is reused from memory."""
            return mask * np.float32(1 + 1e-6 * next(calls))

        def persist_and_wait(client, x):
            y = client.persist(cs.conv1d(x, fresh_mask(), backend=backend, **kw))
            with client.as_current():
                distributed.wait(distributed.futures_of(y))
            client.cancel(y)

        def on(workers):
            _, client, x = clusters[workers]
            return lambda: persist_and_wait(client, x)

        # Check the outputs of the first two chunks (their halo crosses a chunk
        # boundary) against the reference on the input they read.
        left = (kernel - 1) // 2
        head = 2 * chunk + left - kernel + 1
        for key in clusters:
            _, client, x = clusters[key]
            got = client.compute(cs.conv1d(x, mask, backend=backend, **kw)[:head]).result()
            _check(signal[: 2 * chunk], mask, dict(padding=((left, 0),)), got)
        t = _time_on_two_threads(
            {
                "dask, 2 workers": on(2),
                "dask, 1 worker": on(1),
                "dask, 2 worker threads": on("threads"),
                "in-memory numba (2 thr)": lambda: cs.conv1d(signal, mask, backend="numba", **kw),
                "in-memory joblib (2 thr)": lambda: cs.conv1d(signal, mask, backend="joblib", **kw),
            },
            repeat,
        )
        case = f"N={n:.0e} K={kernel} chunks {chunk:.0e}"
        extra = dict(backend=backend or "auto")
        rows.append(_row("dask", case, "dask, 2 workers", "dask, 1 worker", t, (2, 1), extra))
        for baseline in ("in-memory numba (2 thr)", "in-memory joblib (2 thr)"):
            rows.append(_row("dask", case, "dask, 2 workers", baseline, t, (2, 2), extra))
        rows.append(_row("dask", case, "dask, 2 worker threads", "in-memory numba (2 thr)", t, (2, 2), extra))

        # The same graph on Dask's threaded scheduler (no LocalCluster): what the per-chunk path
        # costs without distributed's processes. Informative rows.
        rows += _threaded_scheduler_rows(signal, mask, chunk, kw, repeat, backend, fresh_mask)

        # Overhead a chunk adds: the same work in many small chunks vs in 2 chunks.
        _, client, _ = clusters[2]
        small_n = min(n, 10**6)
        few = client.persist(da.from_array(signal[:small_n], chunks=small_n // 2))
        many_chunks = 200
        many = client.persist(da.from_array(signal[:small_n], chunks=small_n // many_chunks))
        with client.as_current():
            distributed.wait(distributed.futures_of(few) + distributed.futures_of(many))

        def run_on(x):
            return lambda: persist_and_wait(client, x)

        t = time_side_by_side({f"{many_chunks} chunks": run_on(many), "2 chunks": run_on(few)}, repeat=repeat)
        per_chunk = (t[f"{many_chunks} chunks"].median - t["2 chunks"].median) / (many_chunks - 2)
        row = _row("dask", f"N={small_n:.0e} K={kernel}", f"{many_chunks} chunks", "2 chunks", t, (2, 2), extra)
        row["overhead_per_chunk_ms"] = per_chunk * 1e3
        print(f"dask    overhead per chunk: {per_chunk * 1e3:.2f} ms (2 workers, 1 thread each)", flush=True)
        rows.append(row)
    finally:
        for cluster, client, _ in clusters.values():
            client.close()
            cluster.close()
    return rows


def _time_on_two_threads(contenders: dict, repeat: int) -> dict[str, Timing]:
    """``time_side_by_side`` with convsuite set to two threads (the in-memory calls' cores), then unset."""
    cs.set_num_threads(2)
    try:
        return time_side_by_side(contenders, repeat=repeat, rounds=min(repeat, 3))
    finally:
        cs.set_num_threads(None)


def _threaded_scheduler_rows(signal, mask, chunk, kw, repeat, backend, fresh_mask) -> list[dict]:
    """1 vs 2 threads of Dask's local threaded scheduler (one thread per task, as on a cluster
    worker), and 2 against the in-memory numba call on the same cores (information).

    2-core EPYC VM, 2026-11-26: 113 ms vs 209 (1.85x) and 0.82x of numba's 93 ms, where the
    2-worker LocalCluster took 177-320 ms: the chunks' path (halo cuts, one plan and kernel per
    block) costs little; the cluster's scheduler, worker and nanny processes on two cores do.
    """
    import dask
    import dask.array as da

    x = da.from_array(signal, chunks=chunk).persist(scheduler="sync")

    def threaded(workers):
        def run():
            cs.set_num_threads(1)  # one thread per task, as a cluster worker's default
            try:
                dask.persist(
                    cs.conv1d(x, fresh_mask(), backend=backend, **kw), scheduler="threads", num_workers=workers
                )
            finally:
                cs.set_num_threads(2)

        return run

    t = _time_on_two_threads(
        {
            "dask threads, 2": threaded(2),
            "dask threads, 1": threaded(1),
            "in-memory numba (2 thr)": lambda: cs.conv1d(signal, mask, backend="numba", **kw),
        },
        repeat,
    )
    case = f"N={signal.size:.0e} K={mask.size} threaded"  # chunks as above; short: the table's width
    extra = dict(backend=backend or "auto")
    return [
        _row("dask", case, "dask threads, 2", "dask threads, 1", t, (2, 1), extra),
        _row("dask", case, "dask threads, 2", "in-memory numba (2 thr)", t, (2, 2), extra),
    ]


# --- several GPUs --------------------------------------------------------------------


def gpu_rows(batch: int, repeat: int) -> list[dict]:
    """The ECE408 layers on 1 GPU vs split across 2, inputs already resident on the devices."""
    import cupy

    from convsuite.distributed import multigpu

    gpus = multigpu.visible_gpus()
    if len(gpus) < 2:
        print(f"gpus    only {len(gpus)} GPU visible: the 2-GPU row needs a machine with two", flush=True)
        return []
    rows = []
    rng = np.random.default_rng(408)
    for workload, name in ECE408_LAYERS:
        entry = layer(workload, name)
        x = rng.standard_normal((batch, entry["C"], entry["H"], entry["W"]), dtype=np.float32)
        w = rng.standard_normal((entry["M"], entry["C"], entry["K"], entry["K"]), dtype=np.float32)
        kw = dict(stride=entry["stride"], padding=entry["padding"])
        one = multigpu.scatter(x, gpus[:1])
        two = multigpu.scatter(x, gpus[:2])
        # Inputs and weights resident on the GPUs, placed once: the calls time the split itself.
        w_on = multigpu.replicate(w, gpus[:2])
        _check(x, w, kw, multigpu.gather(multigpu.conv_shards(two, w_on, **kw)))

        # The same shards replayed from one CUDA graph per GPU (multigpu.CapturedShards): the second
        # GPU then starts a graph launch's host time after the first, not a whole call's.
        graphs = {n: multigpu.CapturedShards(shards, w_on, **kw) for n, shards in (("1", one), ("2", two))}
        _check(x, w, kw, multigpu.gather(graphs["2"]()))

        def run(shards, w=w_on, kw=kw):
            def call():
                multigpu.conv_shards(shards, w, **kw)  # synchronises every device it used

            return call

        t = time_side_by_side(
            {"2 GPUs": run(two), "1 GPU": run(one), "2 GPUs (graphs)": graphs["2"], "1 GPU (graphs)": graphs["1"]},
            repeat=repeat,
        )
        extra = dict(device=cupy.cuda.runtime.getDeviceProperties(0)["name"].decode())
        case = f"{workload} {name} B={batch}"
        rows.append(_row("gpus", case, "2 GPUs", "1 GPU", t, (2, 1), extra))
        fallback = {"fallback": graphs["2"].fallback_reason} if graphs["2"].fallback_reason else {}
        # A case of its own, so that `compare --scaling` rates the graphs against one GPU's graph.
        rows.append(
            _row(
                "gpus",
                f"{case} graphs",
                "2 GPUs (graphs)",
                "1 GPU (graphs)",
                t,
                (2, 1),
                {**extra, **fallback},
            )
        )
    return rows


# --- the table ------------------------------------------------------------------------


#: Problem sizes of a full run and of a quick one (a smoke run, not a figure to report).
SIZES = {
    "full": dict(joblib_batch=None, dask_n=10**8, dask_chunk=10**7, gpu_batch=10000),
    "quick": dict(joblib_batch=20, dask_n=10**6, dask_chunk=10**5, gpu_batch=1000),
}
#: The sections :func:`scaling_rows` knows, in the order it runs them.
SECTIONS = ("joblib", "dask", "gpus")


def scaling_rows(sections=SECTIONS, quick: bool = False, repeat: int = 7, backend: str | None = None) -> list[dict]:
    """Measure the scaling rows of the chosen sections (what ``convsuite compare --scaling`` shows).

    Parameters
    ----------
    sections : sequence of str
        Any of ``"joblib"``, ``"dask"``, ``"gpus"``.
    quick : bool
        The ``"quick"`` sizes of :data:`SIZES` (a smoke run, not a figure to report).
    repeat : int
        Timed calls per contender.
    backend : str or None
        Backend that computes each Dask chunk (default None: what a user gets
        by default, ``"auto"`` chosen on the worker, on one thread per task).
        The in-memory baselines are numba and the joblib rung, both on 2 threads.

    Returns
    -------
    list of dict
        One per comparison: section, case, ``ours`` and ``baseline`` with
        their medians (ms), spreads and worker counts, and the ratio.
    """
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        raise ValueError(f"`sections` must be among {', '.join(SECTIONS)}; got {', '.join(map(repr, unknown))}")
    sizes = SIZES["quick" if quick else "full"]
    rows = []
    if "joblib" in sections:
        # The batch the workloads file names for a 2-core CPU (1000).
        batch = sizes["joblib_batch"] or layer("ece408-fa19", "conv1")["cpu_batch"]
        rows += joblib_rows(batch=batch, threads=2, repeat=repeat)
    if "dask" in sections:
        rows += dask_rows(n=sizes["dask_n"], chunk=sizes["dask_chunk"], kernel=31, repeat=repeat, backend=backend)
    if "gpus" in sections:
        try:
            import cupy  # noqa: F401

            available = {b.name: b.available for b in cs.list_backends()}["cupy"]
        except ImportError:
            available = False
        if available:
            rows += gpu_rows(batch=sizes["gpu_batch"], repeat=repeat)
        else:
            print("gpus    skipped: the cupy backend is unavailable on this machine", flush=True)
    return rows
