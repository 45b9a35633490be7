import numpy as np, sys, convsuite as cs
from convsuite._timing import measure_side_by_side
from convsuite.backends._tiles import prefer_gemm, gemm_check
from convsuite.backends._depthwise_bands import prefer as prefer_dw
from convsuite.backends.numba_backend import _line_check
rng=np.random.default_rng(int(sys.argv[1]))
def old_rule(s, ndim):
    if ndim == 1 and _line_check(s, "forward") is True: return "line1d"
    if prefer_dw(s): return "depthwise"
    g, _ = prefer_gemm(s, "forward")
    return "gemm" if g and gemm_check(s, "forward") is True else "direct"
def case():
    nd = 2 if rng.random() < 0.8 else 1
    B = int(rng.choice([1,2,8,32,64])); C = int(rng.choice([1,1,2,3,4,6,8,16,32]))
    M = int(rng.choice([1,2,4,6,8,16,32])); k = int(rng.choice([1,3,5,7])); s = int(rng.choice([1,1,2]))
    H = int(rng.choice([8,14,28,32,56,86]))
    if nd == 1: H = int(rng.choice([64,256,1024]))
    p = k//2 if rng.random()<0.5 else 0
    return (B,C)+(H,)*nd, (M,C)+(k,)*nd, dict(stride=s, padding=p)
old_r, new_r = [], []
for i in range(int(sys.argv[2])):
    xs, ws, kw = case()
    x=rng.random(xs,dtype=np.float32); w=rng.random(ws,dtype=np.float32)
    f = cs.conv1d if len(xs)==3 else cs.conv2d
    try: e = cs.explain(x,w,backend='numba',**kw)
    except Exception: continue
    new = e.algorithm; old = old_rule(e.spec.as_2d(), len(xs)-2)
    cont = {}
    for a in ['gemm', 'direct', 'depthwise', 'blocked', 'line1d']:
        try:
            f(x,w,backend='numba',algorithm=a,**kw); cont[a] = (lambda a=a: f(x,w,backend='numba',algorithm=a,**kw))
        except Exception: pass
    t = measure_side_by_side(cont, repeat=9, warmup=1, rounds=3)
    med = {a: v.median for a,v in t.items()}; best = min(med.values())
    old_r.append(med[old]/best); new_r.append(med[new]/best)
    print(xs, ws, kw, f"old {old} {old_r[-1]:.2f} new {new} {new_r[-1]:.2f}", flush=True)
g = lambda r: float(np.exp(np.mean(np.log(r))))
print(f"n {len(old_r)}  old: geomean {g(old_r):.3f} p90 {np.percentile(old_r,90):.2f} max {max(old_r):.2f} | new: geomean {g(new_r):.3f} p90 {np.percentile(new_r,90):.2f} max {max(new_r):.2f}")
