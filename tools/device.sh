#!/usr/bin/env bash
# One call on the lent GPU machine (the device tool): set-up, then each section named as an argument,
# every log under $OUT, one summary line per step at the end.
#   tests        the GPU tests (every gpu-marked file) and the cupy rows of the cross-backend suites
#   zoo-gpu      the zoo on the GPU against cuDNN (TF32 off): every cupy algorithm at batch 32 forward and
#                backward (a sample of each network's layers), auto at batches 8 and 1
#   zoo-auto     auto alone against cuDNN on the zoo: batches 32, 8 and 1 forward, 32 backward
#   zoo-high     the zoo's dense layers at precision 'high' against cuDNN with TF32 on and off
#   promote      tf32x3's accumulation: promoted (the default) against CS_TX_PROMOTE=0, error and time
#   zoo-cpu      the zoo on the host's CPU (all cores) against torch, every CPU backend
#   cpu-table    auto on the host's CPU zoo before and after a rule table measured on this host
# Packages the machine lacks travel as wheels in .whl (carried): platformdirs, scipy-openblas32.
set -u
LOGS=${OUT:-device-logs}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE
SUMMARY="$LOGS/summary.txt"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"; date -u; } \
  | tee "$LOGS/device.txt"
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$LOGS/wheels.log" 2>&1 || { tail -5 "$LOGS/wheels.log"; exit 1; }
  export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-build-isolation --no-deps -e . > "$LOGS/install.log" 2>&1 \
  || { tail -20 "$LOGS/install.log"; exit 1; }
export CUPY_CACHE_DIR="$PWD/.cupy_cache"

# run NAME SECONDS COMMAND...: the command's output in $LOGS/NAME.log, a line in the summary.
run() {
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
  rc=$?
  note "$name: rc=$rc $(($(date +%s) - start))s | $(grep -v '^\[' "$LOGS/$name.log" | tail -1)"
}
VERSUS=(python3 -m convsuite.bench.versus)

for section in "$@"; do
  case $section in
    tests)
      run gpu-tests "${GPU_TESTS_LIMIT:-300}" python3 -m pytest -q -p no:cacheprovider -o addopts="" -n "${WORKERS:-8}" \
        -m gpu tests/
      grep -E "^(FAILED|ERROR)" "$LOGS/gpu-tests.log" | head -30 | tee -a "$SUMMARY"
      run cupy-rows 150 python3 -m pytest -q -p no:cacheprovider -o addopts="" -n 8 -k cupy \
        tests/test_agreement.py tests/test_reliability_nonfinite.py tests/test_epilogue.py tests/test_plans.py
      grep -E "^(FAILED|ERROR)" "$LOGS/cupy-rows.log" | head -20 | tee -a "$SUMMARY"
      ;;
    zoo-gpu)
      run zoo-b32-fwd 200 "${VERSUS[@]}" --device gpu --batch 32 --per-network 4 --every-algorithm-of cupy \
        --no-errors --out "$LOGS/zoo-b32-fwd.json"
      run zoo-b32-bwd 140 "${VERSUS[@]}" --device gpu --batch 32 --direction backward --per-network 3 \
        --every-algorithm-of cupy --no-errors --out "$LOGS/zoo-b32-bwd.json"
      run zoo-b8-fwd 70 "${VERSUS[@]}" --device gpu --batch 8 --per-network 4 --no-errors --out "$LOGS/zoo-b8-fwd.json"
      run zoo-b1-fwd 60 "${VERSUS[@]}" --device gpu --batch 1 --per-network 4 --no-errors --out "$LOGS/zoo-b1-fwd.json"
      ;;
    zoo-auto)
      for b in 32 8 1; do
        run "zoo-auto-b$b-fwd" 90 "${VERSUS[@]}" --device gpu --batch "$b" --per-network 4 --no-errors \
          --out "$LOGS/zoo-auto-b$b-fwd.json"
      done
      run zoo-auto-b32-bwd 120 "${VERSUS[@]}" --device gpu --batch 32 --direction backward --per-network 3 \
        --no-errors --out "$LOGS/zoo-auto-b32-bwd.json"
      ;;
    zoo-high)
      run zoo-high-tf32off 120 "${VERSUS[@]}" --device gpu --batch 32 --per-network "${PER_NETWORK:-8}" --precision high \
        --out "$LOGS/zoo-high-tf32off.json"
      run zoo-high-tf32on 120 "${VERSUS[@]}" --device gpu --batch 32 --per-network "${PER_NETWORK:-8}" --precision high \
        --torch-tf32 --out "$LOGS/zoo-high-tf32on.json"
      ;;
    promote)
      for promote in 1 0; do
        run "promote-$promote" 150 python3 tools/tf32x3_accumulation.py --promote "$promote" \
          --out "$LOGS/promote-$promote.json"
      done
      ;;
    zoo-cpu)
      run zoo-cpu-all 280 "${VERSUS[@]}" --device cpu --batch 4 --per-network "${PER_NETWORK:-6}" --no-errors \
        --out "$LOGS/zoo-cpu-all.json"
      ;;
    cpu-table)
      # auto on the zoo with the tables shipped so far, then a table of this host's own (thread counts as a
      # feature), then auto again: the table goes into the package (the editable install) and under $LOGS
      threads=$(nproc)
      run zoo-cpu-before 120 "${VERSUS[@]}" --device cpu --threads "$threads" --batch 4 --per-network 3 --no-errors \
        --out "$LOGS/zoo-cpu-before.json"
      run crossover-cpu 280 python3 -m convsuite.bench.crossover --device cpu --threads "$threads,4" --budget-s 200 \
        --docs "$LOGS/crossover"
      cp convsuite/data/rule-cpu-*.json "$LOGS/" 2> /dev/null
      run zoo-cpu-after 120 "${VERSUS[@]}" --device cpu --threads "$threads" --batch 4 --per-network 3 --no-errors \
        --out "$LOGS/zoo-cpu-after.json"
      ;;
    *) note "unknown section: $section" ;;
  esac
done
echo "--- summary"
cat "$SUMMARY"
