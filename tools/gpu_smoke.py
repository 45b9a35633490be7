"""Run every cupy algorithm once, forward and backward, on small inputs (for compute-sanitizer).

    compute-sanitizer --tool memcheck python3 tools/gpu_smoke.py
    compute-sanitizer --tool racecheck python3 tools/gpu_smoke.py
    compute-sanitizer --tool memcheck python3 tools/gpu_smoke.py wgrad_atomic,fused_gemm   # only these
    compute-sanitizer --tool racecheck python3 tools/gpu_smoke.py not:blocked              # all but these

Forward algorithms that fuse ReLU (activation="relu") also run with it, and
backward algorithms that read grad_y through the ReLU mask (relu_output=)
run their masked kernels.
Exits non-zero if an algorithm gives a wrong result (outside the tolerance the
conformance tests derive from the dtype and the reduction length, against the
float64 reference) or never ran.
"""

import sys

import numpy as np

import convsuite as cs
from convsuite.backends.cupy._catalog import FUSED_RELU_MASK as backend_masks
from convsuite.testing import backward_tolerances, forward_tolerance, reference_backward, reference_forward


def agrees(got, want, tolerance) -> bool:
    """Whether every element of ``got`` is within ``tolerance`` of the float64 ``want`` (NaN never is)."""
    got = np.asarray(got, dtype=np.float64).reshape(np.shape(want))
    return bool(np.all(np.abs(got - want) <= tolerance))


def grads_agree(got, want, tolerances) -> bool:
    return all(agrees(g, r, t) for g, r, t in zip(got, want, tolerances))


rng = np.random.default_rng(0)
backend = cs.get_backend("cupy") if hasattr(cs, "get_backend") else cs._registry.get_backend("cupy")
table = backend.algorithm_table()
backend.relu_mask_in_kernels = True  # the masked backward kernels run too (off by default: slower)
if len(sys.argv) > 1 and sys.argv[1].startswith("not:"):  # all but a comma-separated list
    left_out = sys.argv[1][4:].split(",")
    unknown = sorted(set(left_out) - set(table))
    if unknown:
        sys.exit(f"not an algorithm of the cupy backend: {', '.join(unknown)}; it has {', '.join(table)}")
    table = {name: record for name, record in table.items() if name not in left_out}
elif len(sys.argv) > 1:  # a comma-separated subset
    table = {name: table[name] for name in sys.argv[1].split(",")}
ran, wrong = set(), []
CASES = [
    ((2, 3, 37), (4, 3, 5), dict(padding="same")),
    ((2, 4, 29), (6, 2, 3), dict(stride=2, dilation=2, padding=(1,), groups=2)),
    ((2, 3, 13, 11), (4, 3, 3, 3), dict(padding=1)),
    ((2, 4, 12, 9), (8, 1, 3, 2), dict(stride=2, padding="same", groups=4)),
    ((1, 1, 20, 20), (5, 1, 5, 5), {}),
    ((2, 6, 11, 13), (6, 1, 3, 3), dict(stride=2, padding=1, groups=6)),  # depthwise, compiled-in 3x3 s2
    ((1, 4, 15, 12), (4, 1, 5, 5), dict(padding=2, groups=4)),  # depthwise, compiled-in 5x5 s1
    ((2, 8, 9, 7), (6, 4, 1, 1), dict(groups=2)),  # pointwise
    ((1, 70, 9, 9), (66, 70, 3, 3), dict(stride=2, padding=1)),  # implicit GEMM, partial tiles
    ((2, 8, 19, 21), (130, 8, 3, 3), dict(padding=1, dilation=(1, 2))),  # big tiles: 128 rows, dX as a conv
    ((2, 40, 9, 10), (30, 40, 3, 3), dict(padding=2)),  # dX as a conv on the GEMM kernels (> 24 channels)
    ((2, 20, 11, 12), (12, 20, 3, 3), dict(padding=1, stride=(1, 2))),  # tf32x3 dW on 16-row tiles, 2 column tiles
    ((2, 40, 17, 16), (36, 40, 1, 1), {}),  # pointwise: two channel blocks, float4 rows
    ((1, 100, 7, 7), (70, 100, 1, 1), {}),  # pointwise_splitk: several slices, partial 32x32 tiles
    ((3, 6, 14, 15), (20, 6, 5, 5), dict(padding=2)),  # tf32x3_image: 3 channel tiles, 7 pixel-tile pairs
    ((6, 4, 9000), (40, 2, 7), dict(padding="same", groups=2)),  # 1-D: 960 (row, tile) items
    ((1, 2, 3000), (2, 2, 301), dict(dilation=10, padding="same")),  # 1-D: a long dilated mask
]
for dtype in (np.float32, np.float64):
    for x_shape, w_shape, kw in CASES:
        x = rng.standard_normal(x_shape).astype(dtype)
        w = rng.standard_normal(w_shape).astype(dtype)
        fn, bwd = (cs.conv1d, cs.conv1d_backward) if x.ndim == 3 else (cs.conv2d, cs.conv2d_backward)
        spec = cs.explain(x, w, **kw).spec
        ref, tol = reference_forward(spec, x, w), forward_tolerance(spec, x, w)
        gy = rng.standard_normal(spec.y_shape).astype(dtype)
        ref_grads, grad_tols = reference_backward(spec, gy, x, w), backward_tolerances(spec, gy, x, w)
        for name in table:
            if backend.can_run(spec, name, "forward") is True:
                y = fn(x, w, backend="cupy", algorithm=name, **kw)
                if not agrees(y, ref, tol):
                    wrong.append((name, "forward", x_shape))
                ran.add((name, "forward"))
                for activation, applied in (("relu", np.maximum(ref, 0)), ("relu6", np.clip(ref, 0, 6))):
                    if backend.fuses_activation(spec, name, activation):
                        y = fn(x, w, backend="cupy", algorithm=name, activation=activation, **kw)
                        if not agrees(y, applied, tol):
                            wrong.append((name, f"forward+{activation}", x_shape))
                        ran.add((name, f"forward+{activation}"))
            if backend.can_run(spec, name, "backward") is True:
                grads = bwd(gy, x, w, backend="cupy", algorithm=name, **kw)
                if not grads_agree(grads, ref_grads, grad_tols):
                    wrong.append((name, "backward", x_shape))
                ran.add((name, "backward"))
                if backend.fuses_relu_mask(spec, name):
                    relu_y = np.maximum(ref, 0).astype(dtype)
                    relu_y.reshape(-1)[::5] = np.nan  # NaN passes the gradient (torch.threshold_backward)
                    masked_gy = np.where(relu_y <= 0, 0, gy).astype(dtype)
                    want = reference_backward(spec, masked_gy, x, w)
                    tols = backward_tolerances(spec, masked_gy, x, w)
                    grads = bwd(gy, x, w, backend="cupy", algorithm=name, relu_output=relu_y, **kw)
                    if not grads_agree(grads, want, tols):
                        wrong.append((name, "backward+relu", x_shape))
                    ran.add((name, "backward+relu"))
# Every -D configuration a tunable can ask for (one module each: other code than the default's),
# every kernel a tunable selects (blocked's persistent),
# and each template variant of the big implicit GEMMs' gathers, each value alone with the others
# at their defaults, on the first case each algorithm runs.
from convsuite.backends.cupy._catalog import OVERRIDABLE  # noqa: E402

compiled = {
    "register_tiled": ("px",),
    "blocked": ("v", "persistent"),  # persistent: another kernel (conv1d_blocked_pipelined)
    "depthwise": ("px", "py"),
    "fused_gemm": ("bk",),
    "igemm_big": ("gather",),
    # stages: 5 and 6 pass 48 KiB (the raised ceiling); mma: the wgmma kernel (sm_90a, the default on
    # compute capability 9.0), whose own parameters are fixed: the others are run on mma.sync
    "tf32x3": ("mma", "blocks", "stages", "gather"),
}
assert set(OVERRIDABLE) == {
    "CS_RT_PX",
    "CS_BLOCKED_V",
    "CS_DW_PX",
    "CS_DW_PY",
    "CS_GEMM_BK",
    "CS_TX_BLOCKS",
    "CS_TX_STAGES",
}, "update `compiled`"
for name, knobs in compiled.items():
    if name not in table:
        continue
    record = table[name]
    for x_shape, w_shape, kw in CASES:
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        spec = cs.explain(x, w, **kw).spec
        if backend.can_run(spec, name, "forward") is not True:
            continue
        fn, bwd = (cs.conv1d, cs.conv1d_backward) if x.ndim == 3 else (cs.conv2d, cs.conv2d_backward)
        ref, tol = reference_forward(spec, x, w), forward_tolerance(spec, x, w)
        gy = rng.standard_normal(spec.y_shape).astype(np.float32)
        ref_grads, grad_tols = reference_backward(spec, gy, x, w), backward_tolerances(spec, gy, x, w)
        for knob in knobs:
            for value in next(t for t in record.tunables if t.name == knob).values:
                params = {knob: value} if name != "tf32x3" or knob == "mma" else {"mma": "sync", knob: value}
                for direction in record.directions:
                    if backend.can_run(spec, name, direction, params) is not True:
                        continue
                    plan = cs.plan(x, w, backend="cupy", algorithm=name, direction=direction, params=params, **kw)
                    if direction == "forward":
                        ok = agrees(plan(x, w), ref, tol)
                    else:
                        got = plan(gy, x, w)
                        ok = grads_agree(got, ref_grads, grad_tols)
                    if not ok:
                        wrong.append((name, direction, f"{knob}={value}", x_shape))
                    ran.add((name, f"{knob}={value}"))
        break
# pointwise_splitk's two forms: the fused launch (with groups and several slices per group, called
# twice: the tile counters must be back at zero), and the two launches a graph capture runs.
if "pointwise_splitk" in table:
    from convsuite.backends import _cupy_runtime

    kept = _cupy_runtime.PerStream.get
    splitk_cases = ([(1, 100, 7, 7), (70, 100, 1, 1), {}], [(2, 256, 7, 9), (64, 128, 1, 1), {"groups": 2}])
    for form, get in (("fused", kept), ("two launches", lambda self, stream=None: None)):
        _cupy_runtime.PerStream.get = get
        try:
            for x_shape, w_shape, kw in splitk_cases:
                x = rng.standard_normal(x_shape).astype(np.float32)
                w = rng.standard_normal(w_shape).astype(np.float32)
                spec = cs.explain(x, w, backend="numpy", **kw).spec
                for _ in range(2):
                    y = cs.conv2d(x, w, backend="cupy", algorithm="pointwise_splitk", **kw)
                    if not agrees(y, reference_forward(spec, x, w), forward_tolerance(spec, x, w)):
                        wrong.append(("pointwise_splitk", form, x_shape))
                ran.add(("pointwise_splitk", form))
        finally:
            _cupy_runtime.PerStream.get = kept
# blocked's persistent kernel pinned, both dtypes: blocks walking several items of one input channel
# and of several (more items than 8 blocks on each of 132 multiprocessors), and the one-buffer path
# (two stages of a long dilated float64 mask exceed 48 KiB).
if "blocked" in table:
    persistent_cases = [
        ((40, 8, 9000), (8, 1, 31), dict(padding="same", groups=8)),  # 1280 items, one channel each
        ((16, 4, 9000), (40, 2, 7), dict(padding="same", groups=2)),  # 2560 items, two channel stages
        ((1, 2, 3000), (2, 2, 301), dict(dilation=10, padding="same")),  # float64: one stage
    ]
    for dtype in (np.float32, np.float64):
        for x_shape, w_shape, kw in persistent_cases:
            x = rng.standard_normal(x_shape).astype(dtype)
            w = rng.standard_normal(w_shape).astype(dtype)
            spec = cs.explain(x, w, backend="numpy", **kw).spec
            plan = cs.plan(x, w, backend="cupy", algorithm="blocked", params={"persistent": 1}, **kw)
            if not agrees(plan(x, w), reference_forward(spec, x, w), forward_tolerance(spec, x, w)):
                wrong.append(("blocked", "persistent", x_shape, dtype.__name__))
            ran.add(("blocked", f"persistent {dtype.__name__}"))
expected = {(name, d) for name, record in table.items() for d in record.directions}
expected |= {(name, "backward+relu") for name in table if name in backend_masks}
print("ran:", sorted(ran))
missing = expected - ran
print("every algorithm ran in every direction" if not missing else f"NOT RUN: {sorted(missing)}")
print("all results agree with the float64 reference" if not wrong else f"WRONG: {wrong}")
sys.exit(1 if missing or wrong else 0)
