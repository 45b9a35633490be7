#!/usr/bin/env bash
# One device run: install, GPU tests, compute-sanitizer (memcheck + racecheck), the zoo against cuDNN.
# Usage on the GPU machine, from the repository root:  bash tools/gpu_check.sh [--full]
# Logs go to $OUT (or ./gpu-check-logs); the zoo's summary is printed last.
set -u
LOGS=${OUT:-gpu-check-logs}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } | tee "$LOGS/device.txt"
python3 -m pip install -q --no-build-isolation --no-deps -e . > /tmp/gpu-check-install.log 2>&1 || { tail -20 /tmp/gpu-check-install.log; exit 1; }
timeout ${TEST_TIMEOUT:-240} python3 -m pytest -q ${PYTEST_ARGS:-tests/test_gpu.py} -p no:cacheprovider > "$LOGS/pytest-gpu.log" 2>&1
echo "pytest ${PYTEST_ARGS:-tests/test_gpu.py}: rc=$? $(tail -1 "$LOGS/pytest-gpu.log")"
grep -E "^(FAILED|ERROR)|Error|assert" "$LOGS/pytest-gpu.log" | head -30
timeout 150 compute-sanitizer --tool memcheck python3 tools/gpu_smoke.py > "$LOGS/memcheck.log" 2>&1
echo "memcheck: rc=$? $(grep -E 'ERROR SUMMARY|NOT RUN|WRONG|every algorithm' "$LOGS/memcheck.log" | tr '\n' ' ')"
timeout 150 compute-sanitizer --tool racecheck python3 tools/gpu_smoke.py > "$LOGS/racecheck.log" 2>&1
echo "racecheck: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|NOT RUN|WRONG' "$LOGS/racecheck.log" | tr '\n' ' ')"
# The zoo against cuDNN (TF32 off): a few layers of each network (--full: twice as many, and backward too).
if [ "${1:-}" = "--full" ]; then ZOO="--per-network 4 --direction both"; else ZOO="--per-network 2"; fi
timeout ${ZOO_TIMEOUT:-200} python3 -m convsuite.bench.versus --device gpu $ZOO --out "$LOGS/zoo.json" \
  > "$LOGS/zoo.log" 2> "$LOGS/zoo-progress.log"
echo "zoo: rc=$?"
cat "$LOGS/zoo.log"
if [ "${PROFILE:-0}" = "1" ] && command -v ncu > /dev/null; then
  M=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
  timeout ${PROFILE_TIMEOUT:-120} ncu --clock-control none --csv --metrics $M -k regex:'igemm|register_tiled|blocked|dgrad|wgrad' python3 tools/gpu_profile.py > "$LOGS/ncu.csv" 2> /tmp/gpu-check-ncu.err
  echo "ncu: rc=$? $(grep -c igemm "$LOGS/ncu.csv") igemm rows"
  python3 - "$LOGS/ncu.csv" <<'PY' || true
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, body = rows[0], rows[1:]
k, m, v = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
table = collections.OrderedDict()
for r in body:
    table.setdefault((r[0], r[k][:40]), {})[r[m].split("__")[1][:22]] = r[v]
for (i, name), vals in table.items():
    print(i, name, " ".join(f"{a}={b}" for a, b in vals.items()))
PY
fi
