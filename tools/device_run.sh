#!/usr/bin/env bash
# One call on the lent GPU machine, by section, logs under $OUT, a short summary last.
#   bash tools/device_run.sh tests    GPU tests (every gpu-marked file, cupy rows of the cross-backend suites)
#   bash tools/device_run.sh focus    the GPU tests PYTEST_FILES and PYTEST_K (-k) select
#   bash tools/device_run.sh sanitize compute-sanitizer memcheck and racecheck over tools/gpu_smoke.py
#                                     (SANITIZE=racecheck-rest in a call of its own: the other algorithms' racecheck)
#   bash tools/device_run.sh bench    per-call overhead, MobileNetV2 (52 convs, whole network, CUDA
#                                     graph) and the GPU crossover map
#   bash tools/device_run.sh regret   the regret of auto on held-out cases
#   bash tools/device_run.sh oned     blocked (1-D): tests, sanitizers (ONED_TESTS=0: neither), tools/blocked_probe.py
#   bash tools/device_run.sh hosttime tools/host_time_probe.py: a public call's host time against its launch
#   bash tools/device_run.sh sweeps   the FA19 table (tiled_shared tile_w x tile_h) and tuned vs default
#   bash tools/device_run.sh report   the seed report of every tunable algorithm (swept best vs default)
#   bash tools/device_run.sh cache    a 20-configuration sweep twice, in two processes sharing CuPy's disk cache
#   bash tools/device_run.sh ece408   the course's LeNet-5 inference at batch 10,000 (trained with cupy)
#                                     vs cuDNN, and a profile of the per-call path of a tiny conv
#   bash tools/device_run.sh multi [REPEAT]  several GPUs: the multi-GPU tests (also under memcheck), the
#                                     scaling figures and `compare --scaling gpus`
#   bash tools/device_run.sh probe [LAYERS]  tools/tf32x3_probe.py alone (every tf32x3 register budget against
#                                     cuDNN; LAYERS: comma-separated name prefixes)
#   bash tools/device_run.sh depthwise [LAYERS]  tools/depthwise_probe.py (the forward kernel over px x py
#                                     against torch) and the depthwise targets (its tests: the tests section)
#   bash tools/device_run.sh ncu-layers  Nsight Compute on tf32x3 (3x3 C=64) and the depthwise forward (s2 C=144)
#   bash tools/device_run.sh harness  tf32x3 vs cuDNN on 3x3 C=64 with gpu_targets' torch call and the probe's, one process
#   bash tools/device_run.sh tc       tf32x3: its GPU tests, the probe against igemm_big and cuDNN, Nsight Compute on c1
#   bash tools/device_run.sh multiprobe [REPEAT]  tools/multigpu_probe.py: where a 2-GPU call's time goes
#   bash tools/device_run.sh lonechunk [REPEAT]  tools/lone_chunk_probe.py on the host's CPU (all cores, then two)
#   bash tools/device_run.sh dask [REPEAT]  issue 14's Dask rows on the host's CPU: all cores, then two (taskset)
#   bash tools/device_run.sh taskstream  tools/dask_task_stream.py on the host's CPU: scheduler-placed, then spread chunks
#   bash tools/device_run.sh gather [LAYERS]  tools/gather_probe.py: igemm_big's and tf32x3's table and chunked
#                                     gathers, forward and backward, against cuDNN
#   bash tools/device_run.sh bigcheck igemm_big / tf32x3: their GPU tests, memcheck and racecheck on their smoke cases
#   bash tools/device_run.sh fused    issue 17: forward + ReLU fused vs the unfused pair (tools/fused_relu_api.py)
#   bash tools/device_run.sh ncu-big  Nsight Compute on igemm_big's forward (3x3 C=64): stall reasons, occupancy
#   bash tools/device_run.sh ncu-tx   Nsight Compute on tf32x3's forward (3x3 C=64): pipes, L1/shared wavefronts, stalls
#   bash tools/device_run.sh blocks   tf32x3's register budgets 3 vs 4 by reduction length (its blocks rule)
#   bash tools/device_run.sh targets  gpu_targets (TARGETS=label fragments, comma-separated; all when unset)
#   bash tools/device_run.sh rtsweep [NAMES]  register_tiled's block_w x px on the input-gradient problems it runs
#   bash tools/device_run.sh phases   every kernel of a backward call per algorithm (CUPTI), and register_tiled's
#                                     parameters on two ECE408 problems against cuDNN
#   bash tools/device_run.sh mnet     the network GPU tests; MobileNetV2 batch 1: graph call vs replay vs host time,
#                                     every conv layer vs cuDNN
#   bash tools/device_run.sh relu6    the epilogue tests (relu, relu6), memcheck, MobileNetV2 on the GPU (ReLU6 fused or not)
#   bash tools/device_run.sh cpu2     issue 12's table (CPU2=targets) and issue 10's CPU regret (CPU2=regret) on two
#                                     physical cores of the host, held by taskset (tools/two_cores.py)
#   bash tools/device_run.sh cpu      the compiled CPU rungs' tests on the device's Python (numba, Cython,
#                                     the BLAS they call: scipy-openblas32 when carried in .whl, SciPy's otherwise)
#   bash tools/device_run.sh image    tf32x3 and tf32x3_image GPU tests, the non-finite and big-tile cases, and
#                                     the issue-11 table on the ECE408 and 1-D targets
#   bash tools/device_run.sh launch   the steps of one call and the packed launch vs CuPy's RawKernel call
#                                     (tiny conv, MobileNetV2's 52 convolutions), with a cProfile
#   bash tools/device_run.sh abnet    MobileNetV2's 52 convolutions vs torch: this tree against abtmp/old
#                                     (carried), alternating processes
#   bash tools/device_run.sh stages   tf32x3's forward pipeline depth (tools/tf32x3_stages_probe.py)
#   bash tools/device_run.sh wgmma    tf32x3's forward on Hopper's wgmma (tools/tf32x3_wgmma_probe.py) vs
#                                     tf32x3 and cuDNN, after the descriptor probe (tools/wgmma_probe.py)
#   bash tools/device_run.sh wgmmacheck  tf32x3's GPU tests, memcheck and racecheck on its smoke cases,
#                                     and the wgmma probe table
#   bash tools/device_run.sh ladder   issue 17's backward ablation and fused-epilogue tables (convsuite.bench.backward_ladder)
#   bash tools/device_run.sh abtx     tf32x3's forward vs cuDNN (tools/tf32x3_ab.py): this tree against
#                                     abtmp/old (carried), alternating processes
set -u
LOGS=${OUT:-device-logs}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
SUMMARY="$LOGS/summary.txt"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } | tee "$LOGS/device.txt"
# Packages the machine lacks travel as wheels in .whl (carried; see the device tool's README).
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$LOGS/wheels.log" 2>&1 || { tail -5 "$LOGS/wheels.log"; exit 1; }
  export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-build-isolation --no-deps -e . > "$LOGS/install.log" 2>&1 || { tail -20 "$LOGS/install.log"; exit 1; }
# CuPy's compile cache travels between calls (a fresh machine has none, and compiling every
# module is minutes of each call): sent back as $OUT/cupy_cache.tgz.part00, .part01, ...; join them
# here into the repo root's .cupy_cache.tgz (git-excluded) and carry it (["...", ".cupy_cache.tgz"]).
export CUPY_CACHE_DIR="$PWD/.cupy_cache"
mkdir -p "$CUPY_CACHE_DIR"
if [ -f .cupy_cache.tgz ]; then tar xzf .cupy_cache.tgz -C "$CUPY_CACHE_DIR"; fi
send_cache() {
  # In parts of at most 15 MB (the device tool returns files of at most 16 MiB; the cache passed that
  # on 2026-11-27): join them here with `cat cupy_cache.tgz.part* > .cupy_cache.tgz`. At most 40 MB in
  # all: with the wheels (~11 MB) it still travels within the 64 MiB a call may carry.
  tar czf "$LOGS/cupy_cache.tgz" -C "$CUPY_CACHE_DIR" . 2> /dev/null
  if [ "$(stat -c %s "$LOGS/cupy_cache.tgz")" -lt 40000000 ]; then
    split -b 15000000 -d "$LOGS/cupy_cache.tgz" "$LOGS/cupy_cache.tgz.part"
  fi
  rm -f "$LOGS/cupy_cache.tgz"
  # The device tool returns at most 8 files: every log and record goes back in one archive
  # (unpack with `tar xzf logs.tgz`), beside the summary and the cache.
  (cd "$LOGS" && find . -mindepth 1 -maxdepth 1 ! -name 'cupy_cache.tgz.part*' ! -name summary.txt ! -name logs.tgz -print0 \
    | tar czf logs.tgz --null -T - --remove-files 2> /dev/null)
}
trap send_cache EXIT
run() {  # run NAME TIMEOUT COMMAND...: log to $LOGS/NAME.log, note the exit status and the last line
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
  note "$name: rc=$? $(tail -1 "$LOGS/$name.log" | cut -c1-160)"
}
# alternate_trees NAME ROUNDS TIMEOUT SCRIPT ARGS...: SCRIPT (this tree's copy) with the working tree's
# convsuite and with an older one in abtmp/old (carried: `git archive REV convsuite cuda_src`, cuda_src
# moved into the package; it gets the Cython extensions just built here), in alternating processes,
# logs $LOGS/NAME-{old,new}-ROUND.log; the summary keeps each log's result lines.
alternate_trees() {
  local name=$1 rounds=$2 limit=$3 round tree path
  shift 3
  if [ ! -d abtmp/old/convsuite ]; then note "$name: no abtmp/old tree carried"; return; fi
  cp convsuite/_cython/*.so abtmp/old/convsuite/_cython/ 2> /dev/null
  for round in $(seq "$rounds"); do
    for tree in old new; do
      if [ $tree = old ]; then path="$PWD/abtmp/old"; else path="$PWD"; fi
      PYTHONPATH="$path${PYTHONPATH:+:$PYTHONPATH}" timeout "$limit" python3 "$@" > "$LOGS/$name-$tree-$round.log" 2>&1
      note "$name $tree $round:"
      grep -E "^52 convs|^host time|^\| (cnn|3x3|1x1|5x5)" "$LOGS/$name-$tree-$round.log" | cut -c1-200 | tee -a "$SUMMARY"
    done
  done
}
# Several sections in one call: `bash tools/device_run.sh tests+cache` (arguments after the first go to each).
IFS=+ read -r -a SECTIONS <<< "${1:-tests}"
for SECTION in "${SECTIONS[@]}"; do
case "$SECTION" in
focus)
  # a part of the GPU tests: PYTEST_FILES (space-separated), PYTEST_K (a -k expression), GPU_TESTS_LIMIT seconds
  run pytest-focus "${GPU_TESTS_LIMIT:-560}" python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu \
    ${PYTEST_K:+-k "$PYTEST_K"} ${PYTEST_FILES:-tests/}
  grep -E "^(FAILED|ERROR)" "$LOGS/pytest-focus.log" | head -20 | tee -a "$SUMMARY"
  ;;
tests)
  run pytest-gpu "${GPU_TESTS_LIMIT:-560}" python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu tests/
  grep -E "^(FAILED|ERROR)" "$LOGS/pytest-gpu.log" | head -20 | tee -a "$SUMMARY"
  run pytest-cupy-rows 120 python3 -m pytest -q -p no:cacheprovider -n 4 -k cupy \
    tests/test_agreement.py tests/test_reliability_nonfinite.py tests/test_epilogue.py tests/test_plans.py
  grep -E "^(FAILED|ERROR)" "$LOGS/pytest-cupy-rows.log" | head -20 | tee -a "$SUMMARY"
  ;;
sanitize)
  # compute-sanitizer over tools/gpu_smoke.py, by part (SANITIZE, space-separated; each part's limit
  # keeps the default pair inside one device call): memcheck (full smoke, MEMCHECK_LIMIT or 200 s) and racecheck-blocked
  # (blocked's cases, every v and both grids, 300 s) by default; racecheck-rest (every other
  # algorithm, 560 s: it ran past 300 s on two hosts on 2026-11-26 and within 300 s on others) alone;
  # memcheck:ALGS and racecheck:ALGS (e.g. racecheck:tf32x3,igemm_big) over those algorithms' cases.
  for part in ${SANITIZE:-memcheck racecheck-blocked}; do
    case $part in
      memcheck) run memcheck "${MEMCHECK_LIMIT:-200}" compute-sanitizer --tool memcheck python3 tools/gpu_smoke.py ;;
      racecheck-blocked) run racecheck-blocked 300 compute-sanitizer --tool racecheck python3 tools/gpu_smoke.py blocked ;;
      racecheck-rest) run racecheck-rest 560 compute-sanitizer --tool racecheck python3 tools/gpu_smoke.py not:blocked ;;
      memcheck:*)  # memcheck:ALGORITHMS (gpu_smoke.py's comma-separated selection), 200 s
        selection=${part#memcheck:}; part=memcheck-${selection//,/-}
        run "$part" 200 compute-sanitizer --tool memcheck python3 tools/gpu_smoke.py "$selection" ;;
      racecheck:*)  # racecheck:ALGORITHMS (gpu_smoke.py's comma-separated selection), 300 s
        selection=${part#racecheck:}; part=racecheck-${selection//,/-}
        run "$part" 300 compute-sanitizer --tool racecheck python3 tools/gpu_smoke.py "$selection" ;;
      *) note "unknown SANITIZE part: $part (memcheck, racecheck-blocked, racecheck-rest, memcheck:ALGS, racecheck:ALGS)"; continue ;;
    esac
    grep -E "RACECHECK SUMMARY|ERROR SUMMARY|WRONG" "$LOGS/$part.log" | head -3 | tee -a "$SUMMARY"
  done
  ;;
image)
  run pytest-image 240 python3 -m pytest -q -p no:cacheprovider -n 4 -m gpu tests/test_gpu.py \
    -k "tf32x3 or nonfinite or big_tile or every_algorithm_matches or relu_every"
  grep -E "^(FAILED|ERROR)" "$LOGS/pytest-image.log" | head -20 | tee -a "$SUMMARY"
  run targets-image 300 python3 -m convsuite.bench.gpu_targets --out "$LOGS/targets-image" --repeat 9 --only "ECE408,1-D"
  grep -E "tf32x3_image|register_tiled|blocked" "$LOGS/targets-image.log" | cut -c1-150 | tee -a "$SUMMARY"
  ;;
cpu)
  python3 -c "import convsuite; from convsuite.backends._blas_routines import gemm_routines as g; print(g())" \
    2>&1 | tee -a "$SUMMARY"
  run pytest-cpu 400 python3 -m pytest -q -p no:cacheprovider -n 4 -k "not cupy" tests/test_blas_routines.py \
    tests/test_numba_backend.py tests/test_cython_backend.py tests/test_cpu_tunables.py \
    tests/test_backward_options.py tests/test_agreement.py tests/test_blas_threads.py
  grep -E "^(FAILED|ERROR)" "$LOGS/pytest-cpu.log" | head -20 | tee -a "$SUMMARY"
  ;;
cpu2)
  # Issues 10 and 12's CPU figures on two physical cores of this host held by taskset (not SMT siblings,
  # not CPU 0 or 1, where the host's interrupts land): a quiet 2-core machine beside the shared CI VM.
  # CPU2=targets (the issue-12 table: a --quick run that compiles numba's kernels, then CPU2_RUNS runs),
  # CPU2=regret (the held-out regret of auto), or both (targets+regret, default targets).
  CORES=$(python3 tools/two_cores.py)
  note "cores: $CORES of $(nproc --all); $(lscpu | grep -E '^(Model name|Thread\(s\) per core)' | tr -s ' ' | tr '\n' ';')"
  case "${CPU2:-targets}" in *targets*)
    run cpu-targets-warm 150 taskset -c "$CORES" python3 -m convsuite.bench.cpu_targets --quick --out "$LOGS/cpu-targets-warm"
    for i in $(seq "${CPU2_RUNS:-2}"); do
      run "cpu-targets-$i" 170 taskset -c "$CORES" python3 -m convsuite.bench.cpu_targets --out "$LOGS/cpu-targets-$i"
      grep -E "^\| " "$LOGS/cpu-targets-$i.log" | cut -d'|' -f2,3,7,10 | cut -c1-120 | tee -a "$SUMMARY"
    done ;;
  esac
  case "${CPU2:-targets}" in *regret*)
    run regret-cpu "${CPU2_REGRET_LIMIT:-480}" taskset -c "$CORES" python3 -m convsuite.bench.regret --device cpu --docs "$LOGS"
    tail -8 "$LOGS/regret-cpu.log" | tee -a "$SUMMARY" ;;
  esac
  ;;
bench)
  run overhead 90 python3 -m convsuite.bench.overhead --device gpu --network
  run networks 120 python3 -m convsuite.bench.networks --gpu --only mobilenet --backends numpy --out "$LOGS/networks.json"
  run crossover 170 python3 -m convsuite.bench.crossover --device gpu --data "$LOGS/rule-gpu.json" --docs "$LOGS"
  [ -f "$LOGS/rule-gpu.json" ] && cp "$LOGS/rule-gpu.json" convsuite/data/rule-gpu.json
  # The held-out regret needs ~5 minutes on its own: `bash tools/device_run.sh regret`.
  ;;
sweeps)
  # Issue 16 on the GPU: the FA19 table (tiled_shared tile_w x tile_h on the ECE408 FA19 layers), the seed
  # report of every tunable algorithm (swept best vs default) and tuned vs default on held-out layers.
  run sweep-fa19 150 python3 -m convsuite sweep --backend cupy --algorithm tiled_shared --workload ece408-fa19 \
    --param tile_w=8,12,16,24,32 --param tile_h=8,12,16,24,32 --out "$LOGS/sweep-fa19"
  tail -12 "$LOGS/sweep-fa19.log" | tee -a "$SUMMARY"
  run tuned 200 python3 -m convsuite.bench.tuned_vs_default --device gpu --budget-s 3 --out "$LOGS/tuned-vs-default-gpu"
  tail -1 "$LOGS/tuned.log" | tee -a "$SUMMARY"
  # The device tool returns a few files per call: the folder travels as one archive.
  tar -czf "$LOGS/sweep-fa19.tar.gz" -C "$LOGS" sweep-fa19 && rm -rf "$LOGS/sweep-fa19"
  ;;
report)
  # The seed report: tunable algorithms swept on the seed workloads, swept best vs default per layer.
  #   bash tools/device_run.sh report [ALGORITHMS [BUDGET_S [LIMIT_S]]]   (a comma-separated subset: a report
  #   split over several calls is joined with `python -m convsuite.bench.sweep_report --summarise DIR`)
  algos=${2:-}; budget=${3:-200}; limit=${4:-400}
  run sweep-report "$limit" python3 -m convsuite.bench.sweep_report --device gpu --budget-s "$budget" \
    ${algos:+--algorithms "$algos"} --out "$LOGS/sweep-gpu"
  cat "$LOGS/sweep-report.log" | tee -a "$SUMMARY"
  tar -czf "$LOGS/sweep-gpu.tar.gz" -C "$LOGS" sweep-gpu && rm -rf "$LOGS/sweep-gpu"
  ;;
oned)
  # blocked (both grids): its GPU tests, memcheck and racecheck on its smoke cases, and three processes
  # of tools/blocked_probe.py (one tile per block vs persistent, and auto, interleaved in each).
  if [ "${ONED_TESTS:-1}" = 1 ]; then  # ONED_TESTS=0: the probe alone
    run pytest-oned 300 python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu tests/test_gpu.py tests/test_cupy_tunables.py \
      -k "blocked or long_signals or 1d or tunable"
    grep -E "^(FAILED|ERROR)" "$LOGS/pytest-oned.log" | head -20 | tee -a "$SUMMARY"
    run memcheck-oned 200 compute-sanitizer --tool memcheck python3 tools/gpu_smoke.py blocked
    grep -E "ERROR SUMMARY|WRONG" "$LOGS/memcheck-oned.log" | head -3 | tee -a "$SUMMARY"
    run racecheck-oned 200 compute-sanitizer --tool racecheck python3 tools/gpu_smoke.py blocked
    grep -E "RACECHECK SUMMARY|ERROR SUMMARY|WRONG" "$LOGS/racecheck-oned.log" | head -3 | tee -a "$SUMMARY"
  fi
  for r in 1 2 3; do run "blocked-probe-$r" 150 python3 tools/blocked_probe.py; done
  python3 tools/blocked_probe.py --summarise "$LOGS"/blocked-*.log 2>&1 | tee -a "$SUMMARY"
  ;;
hosttime)
  # Host time of a public call against its launch alone (1-D, 3x3, depthwise targets), with a cProfile.
  run host-time 200 python3 tools/host_time_probe.py
  grep -E "^==|median" "$LOGS/host-time.log" | tee -a "$SUMMARY"
  ;;
regret)
  # Issue 10 on the GPU: auto's pick (the cupy hand rule) against the fastest algorithm, held-out problems.
  run regret 480 python3 -m convsuite.bench.regret --device gpu --docs "$LOGS"
  tail -6 "$LOGS/regret.log" | tee -a "$SUMMARY"
  ;;
cache)
  # Issue 16's timing target: a 20-configuration sweep on one layer, run twice in two processes sharing a
  # fresh CuPy disk cache (register_tiled mt x px: px is a -D constant, one module per value). The
  # second process should load every module from the cache; module build time is reported apart.
  rm -rf /tmp/cs-cupy-cache
  for pass in cold warm; do
    run "sweep-20-$pass" 200 env CUPY_CACHE_DIR=/tmp/cs-cupy-cache python3 -c '
from convsuite.bench.sweep import run_sweep
from convsuite.bench.sweep_output import format_table, summary_lines
from convsuite.bench.workloads import get_workload
cases = [c for c in get_workload("ece408-fa19", "gpu") if c.label.startswith("conv2")]
r = run_sweep("cupy", "register_tiled", cases, grid={"mt": (4, 8, 12, 16, 24), "px": (1, 2, 4, 8), "block_w": (8,)})
print(format_table(r))
print("\n".join(summary_lines(r)))
'
    grep -E "sweep time|module builds" "$LOGS/sweep-20-$pass.log" | tee -a "$SUMMARY"
  done
  note "disk cache entries: $(find /tmp/cs-cupy-cache -type f | wc -l)"
  ;;
ece408)
  run ece408 300 python3 -m convsuite.bench.ece408 --device gpu --out "$LOGS/ece408.json"
  tail -7 "$LOGS/ece408.log" | tee -a "$SUMMARY"
  run profile 120 python3 tools/profile_call.py --device gpu --calls 20000
  ;;
multi)
  nvidia-smi -L | tee -a "$SUMMARY"
  run pytest-multigpu 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_distributed_gpu.py tests/test_nets_gpu.py
  grep -E "^(FAILED|ERROR)" "$LOGS/pytest-multigpu.log" | head -20 | tee -a "$SUMMARY"
  run memcheck-multigpu 200 compute-sanitizer --tool memcheck python3 -m pytest -q -p no:cacheprovider -m gpu \
    tests/test_distributed_gpu.py
  grep -E "ERROR SUMMARY|passed|failed" "$LOGS/memcheck-multigpu.log" | tail -3 | tee -a "$SUMMARY"
  run scaling 150 python3 -m convsuite.bench.scaling --only gpus --repeat ${2:-15} --out "$LOGS"
  grep -E "^gpus" "$LOGS/scaling.log" | tail -8 | tee -a "$SUMMARY"
  run compare-scaling 90 python3 -m convsuite compare --scaling gpus --repeat 5
  tail -6 "$LOGS/compare-scaling.log" | tee -a "$SUMMARY"
  ;;
multiprobe)
  # Where a 2-GPU call's time goes on the ECE408 layers (tools/multigpu_probe.py).
  run multigpu-probe 300 python3 tools/multigpu_probe.py --repeat ${2:-31} ${MULTIPROBE_ARGS:-}
  grep -E "^  (cs\.conv2d|plan)" "$LOGS/multigpu-probe.log" | tee -a "$SUMMARY"
  sed -n '/=== summary ===/,$p' "$LOGS/multigpu-probe.log" | tee -a "$SUMMARY"
  ;;
lonechunk)
  # A lone 1e7 chunk vs one large call, per sample and thread, fresh or kept output (tools/lone_chunk_probe.py).
  note "cores: $(nproc --all); $(lscpu | grep -E '^(Model name|Thread\(s\) per core|NUMA node\(s\))' | tr -s ' ' | tr '\n' ';')"
  run lone-chunk 200 python3 tools/lone_chunk_probe.py --repeat ${2:-7}
  grep -E "thr|numba" "$LOGS/lone-chunk.log" | tee -a "$SUMMARY"
  run lone-chunk-two-cores 200 taskset -c 0,1 python3 tools/lone_chunk_probe.py --repeat ${2:-7}
  grep -E "thr" "$LOGS/lone-chunk-two-cores.log" | tee -a "$SUMMARY"
  ;;
dask)
  # Issue 14's Dask rows on this host's CPU: once with every core (the scheduler, nannies and client
  # have cores of their own beside the two single-threaded workers) and once held to two cores by
  # taskset (every process of the cluster on the workers' two cores, as on the 2-core CI machine).
  note "cores: $(nproc --all) on the host; dask, distributed: $(python3 -c 'import dask, distributed; print(dask.__version__, distributed.__version__)' 2>&1 | tail -1)"
  run dask-all-cores 300 python3 -m convsuite.bench.scaling --only dask --repeat ${2:-7} --out "$LOGS/dask-all-cores"
  grep -E "^(machine|dask)" "$LOGS/dask-all-cores.log" | tail -8 | tee -a "$SUMMARY"
  run dask-two-cores 300 taskset -c 0,1 python3 -m convsuite.bench.scaling --only dask --repeat ${2:-7} --out "$LOGS/dask-two-cores"
  grep -E "^(machine|dask)" "$LOGS/dask-two-cores.log" | tail -8 | tee -a "$SUMMARY"
  ;;
taskstream)
  # Where a 2-worker Dask call's time goes on this host: scheduler-placed input chunks, then spread in turn.
  run dask-task-stream 200 python3 tools/dask_task_stream.py --repeat 4
  grep -vE "^(20|/tmp|  warn|This may|Consider| or using|See also)" "$LOGS/dask-task-stream.log" | tail -24 | tee -a "$SUMMARY"
  run dask-task-stream-spread 200 python3 tools/dask_task_stream.py --repeat 4 --spread
  grep -vE "^(20|/tmp|  warn|This may|Consider| or using|See also)" "$LOGS/dask-task-stream-spread.log" | tail -24 | tee -a "$SUMMARY"
  ;;
gather)
  # igemm_big's and tf32x3's two im2col gathers against each other and cuDNN (tools/gather_probe.py)
  run gather-probe 400 python3 tools/gather_probe.py ${2:+--layers "$2"}
  grep -E "^==|x table|FAIL" "$LOGS/gather-probe.log" | cut -c1-230 | tee -a "$SUMMARY"
  ;;
targets)
  # The issue-11 table on the targets named by TARGETS (label fragments; all when empty).
  run gpu-targets "${TARGETS_LIMIT:-400}" python3 -m convsuite.bench.gpu_targets --out "$LOGS/targets" --repeat 9 ${TARGETS:+--only "$TARGETS"}
  grep -E "^\|" "$LOGS/gpu-targets.log" | head -24 | tee -a "$SUMMARY"
  ;;
rtsweep)
  run register-tiled-sweep 400 python3 tools/register_tiled_sweep.py ${2:+--only "$2"}
  grep -E "^==|default" "$LOGS/register-tiled-sweep.log" | tee -a "$SUMMARY"
  ;;
phases)
  # Where backward time goes (every kernel of a backward call per algorithm, CUPTI) and register_tiled's
  # parameters on the ECE408 layers against cuDNN.
  run phases 200 python3 tools/backward_phases.py
  grep -E "==|total" "$LOGS/phases.log" | tee -a "$SUMMARY"
  run rt-sweep 200 python3 tools/register_tiled_sweep.py
  grep -E "==|default" "$LOGS/rt-sweep.log" | tee -a "$SUMMARY"
  ;;
harness)
  # tf32x3 on the 3x3 C=64 targets against cuDNN called as gpu_targets calls it and as the probe does
  run harness 120 python3 tools/cudnn_harness_check.py
  cat "$LOGS/harness.log" | tee -a "$SUMMARY"
  ;;
depthwise)
  # the depthwise forward kernel over px x py against torch, then the depthwise targets
  run depthwise-probe 260 python3 tools/depthwise_probe.py ${2:+--layers "$2"}
  sed -n '/== summary/,$p' "$LOGS/depthwise-probe.log" | tee -a "$SUMMARY"
  run targets-depthwise 120 python3 -m convsuite.bench.gpu_targets --out "$LOGS/targets-depthwise" --repeat 15 --only depthwise
  grep -E "^\| (backward )?depthwise" "$LOGS/targets-depthwise.log" | head -4 | tee -a "$SUMMARY"
  ;;
ncu-layers)
  # Nsight Compute on the issue-11 misses: tf32x3 on 3x3 C=64 and the depthwise forward (s2 C=144)
  if command -v ncu > /dev/null; then
    run ncu-layers 300 ncu --kernel-name regex:"tf32x3_fwd|depthwise_forward" --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
      --section SchedulerStats python3 tools/ncu_layers.py
    grep -E "conv2d_|depthwise_|Duration|Throughput|Warp Cycles|Stall|Achieved Occupancy|Registers|Issue Slots|Eligible|No Eligible|Mem Busy|Max Bandwidth|L1/TEX Hit|L2 Hit" "$LOGS/ncu-layers.log" | head -120 | tee -a "$SUMMARY"
  else note "ncu: not on this machine"; fi
  ;;
bigcheck)
  # igemm_big / tf32x3 iteration: their GPU tests, memcheck and racecheck on their smoke cases
  run pytest-big 300 python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu tests/test_gpu.py tests/test_relu_mask_gpu.py \
    -k "igemm or tf32x3 or tunable or every_algorithm or relu or big_tile"
  grep -E "^(FAILED|ERROR)" "$LOGS/pytest-big.log" | head -20 | tee -a "$SUMMARY"
  run memcheck-big 200 compute-sanitizer --tool memcheck python3 tools/gpu_smoke.py igemm_big,tf32x3
  grep -E "ERROR SUMMARY|WRONG" "$LOGS/memcheck-big.log" | head -3 | tee -a "$SUMMARY"
  run racecheck-big 200 compute-sanitizer --tool racecheck python3 tools/gpu_smoke.py igemm_big,tf32x3
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY|WRONG" "$LOGS/racecheck-big.log" | head -3 | tee -a "$SUMMARY"
  ;;
ladder)
  # issue 17's tables: every backward algorithm on cnn-train-3x3 and the ECE408 layers, the fused
  # forward + ReLU and the ReLU-mask tables (python -m convsuite.bench.backward_ladder --time)
  run ladder 400 python3 -m convsuite.bench.backward_ladder --time --repeat "${LADDER_REPEAT:-7}" --out "$LOGS"
  grep -E "^\| cnn-train|^\| c[12] " "$LOGS/ladder.log" | head -70 | tee -a "$SUMMARY"
  ;;
fused)
  # issue 17's fused forward + ReLU against the unfused pair through the public API (cnn-train-3x3 layers)
  run fused-relu 200 python3 tools/fused_relu_api.py
  grep -E "^\|" "$LOGS/fused-relu.log" | tee -a "$SUMMARY"
  ;;
ncu-big)
  # Nsight Compute on igemm_big's forward (3x3 C=64 B=64, the SIMT target): where its warps stall
  if command -v ncu > /dev/null; then
    run ncu-big 200 ncu --kernel-name regex:"igemm_fwd" --section SpeedOfLight --section WarpStateStats \
      --section Occupancy --section LaunchStats --section SchedulerStats --section InstructionStats python3 tools/ncu_layers.py
    grep -E "conv2d_|Duration|Warp Cycles|Stall|Achieved Occupancy|Registers|Issue Slots|Eligible|Executed Ipc" \
      "$LOGS/ncu-big.log" | head -60 | tee -a "$SUMMARY"
  else note "ncu: not on this machine"; fi
  ;;
ncu-tx)
  # Nsight Compute on tf32x3's forward (3x3 C=64 B=64, the tensor-core target): which pipe or memory
  # stage binds (L1/shared wavefronts, tensor pipe, issue slots), stall reasons
  if command -v ncu > /dev/null; then
    run ncu-tx 240 ncu --kernel-name regex:"conv2d_tf32x3_fwd" --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section InstructionStats \
      --section Occupancy --section LaunchStats --section SchedulerStats \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed.sum" \
      python3 tools/ncu_layers.py
    grep -E "conv2d_|Duration|Throughput|Pipe|Wavefront|Bank|Warp Cycles|Stall|Occupancy|Registers|Issue Slots|Eligible|Executed Ipc|Utilization|stalled|hmma|wavefronts|conflicts|inst_executed" \
      "$LOGS/ncu-tx.log" | head -120 | tee -a "$SUMMARY"
  else note "ncu: not on this machine"; fi
  ;;
blocks)
  # tf32x3's register budgets 3 and 4 on layers of growing reduction (the rule of its blocks tunable)
  run blocks 200 python3 tools/tf32x3_blocks_probe.py
  grep -E "Kd=" "$LOGS/blocks.log" | tee -a "$SUMMARY"
  ;;
probe)
  # the probe alone: tf32x3 (every register budget) vs igemm_big vs cuDNN
  run probe 170 python3 tools/tf32x3_probe.py ${2:+--layers "$2"}
  cat "$LOGS/probe.log" | tee -a "$SUMMARY"
  ;;
tc)
  # tf32x3 iteration: its GPU tests, then the probe (tf32x3 vs igemm_big vs cuDNN, fused ReLU).
  run pytest-tc 200 python3 -m pytest -q -p no:cacheprovider -n 4 -m gpu tests/test_gpu.py -k "tf32x3 or big_tile or relu or nonfinite or tunable"
  grep -E "^(FAILED|ERROR)|passed|failed" "$LOGS/pytest-tc.log" | head -20 | tee -a "$SUMMARY"
  run probe 200 python3 tools/tf32x3_probe.py
  cat "$LOGS/probe.log" | tee -a "$SUMMARY"
  if command -v ncu > /dev/null; then
    run ncu 150 ncu --kernel-name regex:"tf32x3|igemm_fwd" --launch-count 2 --section SpeedOfLight \
      --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats python3 tools/ncu_implicit_gemm.py
    grep -E "conv2d_|Duration|Throughput|Warp Cycles|Stall|Achieved Occupancy|Registers|Issue Slots|Eligible|No Eligible|One or More" "$LOGS/ncu.log" | head -80 | tee -a "$SUMMARY"
  else note "ncu: not on this machine"; fi
  ;;
mnet)
  run pytest-nets 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_nets_gpu.py
  grep -E "^(FAILED|ERROR)|passed|failed" "$LOGS/pytest-nets.log" | head -20 | tee -a "$SUMMARY"
  run mnet 400 python3 tools/mnet_gpu_probe.py
  cat "$LOGS/mnet.log" | tee -a "$SUMMARY"
  ;;
relu6)
  run pytest-epilogues 240 python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_gpu.py tests/test_nets_gpu.py \
    tests/test_packed_launch_gpu.py tests/test_epilogue.py tests/test_nn_module.py tests/test_cupy_tunables.py
  grep -E "^(FAILED|ERROR)|passed|failed" "$LOGS/pytest-epilogues.log" | head -20 | tee -a "$SUMMARY"
  run memcheck 150 compute-sanitizer --tool memcheck python3 tools/gpu_smoke.py
  grep -E "ERROR SUMMARY|wrong|agree" "$LOGS/memcheck.log" | head -5 | tee -a "$SUMMARY"
  run networks 200 python3 -m convsuite.bench.networks --gpu --only mobilenet --backends numpy --out "$LOGS/networks.json"
  tail -12 "$LOGS/networks.log" | tee -a "$SUMMARY"
  ;;
launch)
  run launch 200 python3 tools/launch_probe.py --repeat 11
  cat "$LOGS/launch.log" | tee -a "$SUMMARY"
  ;;
abnet)
  # MobileNetV2's 52 convolutions (against torch, in each process) with the working tree's convsuite and
  # with an older one in abtmp/old, in alternating processes, ABNET_ROUNDS rounds (default 3)
  alternate_trees abnet "${ABNET_ROUNDS:-3}" 120 tools/launch_probe.py --net-only --repeat 11
  ;;
stages)
  # tf32x3's forward pipeline depth against cuDNN (tools/tf32x3_stages_probe.py)
  run stages 300 python3 tools/tf32x3_stages_probe.py
  grep -E "^\|" "$LOGS/stages.log" | tee -a "$SUMMARY"
  ;;
wgmma)
  # Hopper's warpgroup MMA: the descriptor layout probe, then tf32x3's forward on wgmma against the
  # mma.sync tf32x3 (public API) and cuDNN (tools/tf32x3_wgmma_probe.py; WGMMA_ARGS passed on)
  run wgmma-layout 120 python3 tools/wgmma_probe.py
  tail -1 "$LOGS/wgmma-layout.log" | tee -a "$SUMMARY"
  run wgmma 400 python3 tools/tf32x3_wgmma_probe.py ${WGMMA_ARGS:-}
  cat "$LOGS/wgmma.log" | tee -a "$SUMMARY"
  ;;
wgmmacheck)
  # tf32x3 with its wgmma kernel: its GPU tests, memcheck and racecheck on its smoke cases, and the
  # wgmma/mma.sync/cuDNN table through the API (tools/tf32x3_wgmma_probe.py). The cross-backend cupy
  # rows are the `tests` section's (together they passed one call's 600 s on 2026-11-27).
  run pytest-tf32x3 "${GPU_TESTS_LIMIT:-300}" python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu tests/test_gpu.py \
    tests/test_nets_gpu.py tests/test_packed_launch_gpu.py -k "tf32x3 or tunable or nonfinite or relu or stream or capture"
  grep -E "^(FAILED|ERROR)" "$LOGS/pytest-tf32x3.log" | head -20 | tee -a "$SUMMARY"
  run memcheck-tf32x3 150 compute-sanitizer --tool memcheck python3 tools/gpu_smoke.py tf32x3
  grep -E "ERROR SUMMARY|WRONG|wrong" "$LOGS/memcheck-tf32x3.log" | head -3 | tee -a "$SUMMARY"
  run wgmma 120 python3 tools/tf32x3_wgmma_probe.py --repeat 15
  cat "$LOGS/wgmma.log" | tee -a "$SUMMARY"
  run racecheck-tf32x3 120 compute-sanitizer --tool racecheck python3 tools/gpu_smoke.py tf32x3
  grep -E "RACECHECK SUMMARY|WRONG|wrong" "$LOGS/racecheck-tf32x3.log" | head -3 | tee -a "$SUMMARY"
  ;;
abtx)
  # tf32x3's forward vs cuDNN (tools/tf32x3_ab.py), this tree against abtmp/old, ABTX_ROUNDS rounds (default 3)
  alternate_trees abtx "${ABTX_ROUNDS:-3}" 150 tools/tf32x3_ab.py ${ABTX_ARGS:-}
  ;;
*) note "unknown section: $SECTION" ;;
esac
done
echo "=== summary"
cat "$SUMMARY"
