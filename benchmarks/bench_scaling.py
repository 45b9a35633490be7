"""asv benchmarks of scaling: threads over the GIL-free kernels, and Dask workers.

- ``JoblibRung``: the ECE408 layers on the joblib rung (1 and 2 threads),
  beside the single-core Cython rung and Numba's ``prange`` on the same
  thread counts, so a commit that moves any of them shows up side by side.
- ``SeveralGPUs``: the ECE408 layers at batch 10,000 on 1 and 2 GPUs,
  through ``conv_shards`` and ``CapturedShards`` (skipped without two GPUs).
- ``DaskWorkers``: a 1-D signal (N=1e7, K=31, chunks of 1e6) on a
  LocalCluster of 1 and 2 single-threaded worker processes, started once
  per parameter set in ``setup`` (never timed), input already on the workers.

Unavailable pieces (joblib, numba, the Cython extension, Dask) raise
NotImplementedError, which asv reports as skipped.
"""

import numpy as np

import convsuite as cs

from .common import require_backend

LAYERS = {
    # name: (C, M, H, W, K) from convsuite/bench/workloads.json, at a batch of 200
    "fa19-conv1": (1, 12, 48, 48, 5),
    "fa19-conv2": (12, 24, 22, 22, 5),
    "fa21-conv1": (1, 4, 86, 86, 7),
    "fa21-conv2": (4, 16, 40, 40, 7),
}
BATCH = 200


class JoblibRung:
    """The ECE408 layers at batch 200 on the joblib rung, the Cython rung and numba, on 1 and 2 threads."""

    params = (["joblib", "cython", "numba"], list(LAYERS), [1, 2])
    param_names = ["backend", "layer", "threads"]
    timeout = 300

    def setup(self, backend, layer, threads):
        require_backend(backend)
        if backend == "cython" and threads > 1:
            raise NotImplementedError("the cython rung is single-core")
        C, M, H, W, K = LAYERS[layer]
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((BATCH, C, H, W), dtype=np.float32)
        self.w = rng.standard_normal((M, C, K, K), dtype=np.float32)
        self.threads = threads
        cs.set_num_threads(threads)  # numba's pool, and the joblib rung's default worker count
        cs.conv2d(self.x, self.w, backend=backend)  # compile / warm up

    def teardown(self, backend, layer, threads):
        cs.set_num_threads(None)

    def time_forward(self, backend, layer, threads):
        cs.conv2d(self.x, self.w, backend=backend)


class DaskWorkers:
    """A 1-D signal (N=1e7, K=31, chunks of 1e6) on a LocalCluster of 1 and 2 single-threaded workers."""

    params = ([1, 2],)
    param_names = ["workers"]
    timeout = 300
    number = 1
    repeat = 5

    def setup(self, workers):
        try:
            import dask.array as da
            import distributed
        except ImportError as exc:
            raise NotImplementedError(f"the dask extra is not installed ({exc})") from None
        self.cluster = distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
        )
        self.client = distributed.Client(self.cluster, set_as_default=False)
        rng = np.random.default_rng(0)
        self.x = self.client.persist(da.from_array(rng.standard_normal(10**7, dtype=np.float32), chunks=10**6))
        self.w = rng.standard_normal(31, dtype=np.float32)
        self._run()  # warm the workers' kernels

    def _run(self):
        import distributed

        # The defaults a user gets: "auto" on the worker, one thread per task (convsuite.distributed._blocks).
        y = self.client.persist(cs.conv1d(self.x, self.w, padding="same"))
        with self.client.as_current():
            distributed.wait(distributed.futures_of(y))

    def teardown(self, workers):
        self.client.close()
        self.cluster.close()

    def time_signal(self, workers):
        self._run()


class SeveralGPUs:
    """The ECE408 layers at batch 10,000 split across 1 and 2 GPUs, inputs resident on the devices:
    one call per GPU queued from this thread (``conv_shards``) or each GPU's share replayed from a
    CUDA graph (``CapturedShards``). Both wait for every GPU they used."""

    params = (["conv_shards", "captured"], list(LAYERS), [1, 2])
    param_names = ["path", "layer", "gpus"]
    timeout = 300

    def setup(self, path, layer, gpus):
        require_backend("cupy")
        from convsuite.distributed import multigpu

        visible = multigpu.visible_gpus()
        if len(visible) < gpus:
            raise NotImplementedError(f"needs {gpus} GPUs; {len(visible)} visible")
        C, M, H, W, K = LAYERS[layer]
        rng = np.random.default_rng(0)
        x = rng.standard_normal((10000, C, H, W), dtype=np.float32)
        w = rng.standard_normal((M, C, K, K), dtype=np.float32)
        shards = multigpu.scatter(x, visible[:gpus])
        w_on = multigpu.replicate(w, visible[:gpus])
        if path == "captured":
            self.call = multigpu.CapturedShards(shards, w_on)
        else:
            self.call = lambda: multigpu.conv_shards(shards, w_on)
        self.call()  # compile, plan, warm up

    def time_forward(self, path, layer, gpus):
        self.call()
