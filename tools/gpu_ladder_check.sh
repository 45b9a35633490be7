#!/usr/bin/env bash
# One device run for issue 17 (the dW ladder and the fused epilogues): install, the GPU
# tests of the new algorithms and of the ReLU mask read in the backward kernels, the ablation,
# compute-sanitizer memcheck and racecheck.
# Usage on the GPU machine, from the repository root:  bash tools/gpu_ladder_check.sh
# Logs go to $OUT (or ./gpu-ladder-logs); the tables are printed last. About 4 minutes.
set -u
LOGS=${OUT:-gpu-ladder-logs}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } | tee "$LOGS/device.txt"
if [ "${SKIP_INSTALL:-0}" != "1" ]; then
  timeout 60 python3 -m pip install -q --no-build-isolation --no-deps -e . > "$LOGS/install.log" 2>&1 \
    || { tail -20 "$LOGS/install.log"; exit 1; }
fi
timeout ${TEST_TIMEOUT:-70} python3 -m pytest -q -p no:cacheprovider tests/test_epilogue.py tests/test_gpu.py \
  -k "cupy or ladder or relu_every or through_relu_on or (every_backward and wgrad) or declines" \
  > "$LOGS/pytest.log" 2>&1
echo "pytest: rc=$? $(tail -1 "$LOGS/pytest.log")"
grep -E "^(FAILED|ERROR)|Error|assert" "$LOGS/pytest.log" | head -20
timeout ${TEST_TIMEOUT:-70} python3 -m pytest -q -p no:cacheprovider tests/test_relu_mask_gpu.py tests/test_relu_mask.py \
  > "$LOGS/pytest-relu-mask.log" 2>&1
echo "pytest (relu mask): rc=$? $(tail -1 "$LOGS/pytest-relu-mask.log")"
grep -E "^(FAILED|ERROR)|Error|assert" "$LOGS/pytest-relu-mask.log" | head -20
timeout ${ABLATION_TIMEOUT:-70} python3 -m convsuite.bench.backward_ladder --time --repeat ${REPEAT:-5} \
  --out "$LOGS" > "$LOGS/ablation.md" 2>&1
echo "ablation: rc=$?"
SMOKE=wgrad_atomic,wgrad_shuffle,wgrad_registers,wgrad_padded,fused_gemm,igemm_big,depthwise
timeout 35 compute-sanitizer --tool memcheck python3 tools/gpu_smoke.py $SMOKE > "$LOGS/memcheck.log" 2>&1
echo "memcheck: rc=$? $(grep -E 'ERROR SUMMARY|NOT RUN|WRONG|every algorithm' "$LOGS/memcheck.log" | tr '\n' ' ')"
timeout 35 compute-sanitizer --tool racecheck python3 tools/gpu_smoke.py $SMOKE > "$LOGS/racecheck.log" 2>&1
echo "racecheck: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|NOT RUN|WRONG' "$LOGS/racecheck.log" | tr '\n' ' ')"
grep -v "^| ece408" "$LOGS/ablation.md" | tail -45
