#!/usr/bin/env bash
# launch/gpu-check.sh [BUNDLE] [OUT]: the GPU validation of a build on a node with only the NVIDIA
# driver and CUDA (docs/cuda.md "Running the GPU tests"): every `gpu` test program from a bundle,
# then a short fp32 and bf16 `baton bench` of GPT-2 124M. Logs and a summary go to OUT.
# Make the bundle on the build machine with the test programs included:
#   bash launch/gpu-check.sh --make-bundle build bundle     # = launch/bundle.sh + the gpu tests
set -uo pipefail
if [ "${1:-}" = "--make-bundle" ]; then
  build=${2:-build}; out=${3:-bundle}
  tests=()
  for t in test_cuda_ops test_cuda_bf16_model test_cuda_cnn test_bf16_kernels test_gemm_lt \
           test_flash_attention test_nccl_comm test_device_comm; do
    [ -x "$build/tests/$t" ] && tests+=("$build/tests/$t")
  done
  [ ${#tests[@]} -gt 0 ] || { echo "error: no GPU test programs in $build/tests" >&2
    echo "hint: configure with CUDA (cmake -DBATON_CUDA=ON) and build the tests" >&2; exit 1; }
  exec bash "$(dirname "$0")/bundle.sh" "$build/baton" "$out" "${tests[@]}"
fi
BUNDLE=${1:-bundle}
OUT=${2:-gpu-check}
mkdir -p "$OUT"
[ -x "$BUNDLE/run" ] || { echo "error: $BUNDLE is not a bundle with test programs" >&2
  echo "hint: on the build machine: bash launch/gpu-check.sh --make-bundle build bundle" >&2; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
# On a GPU node a test that finds no device fails instead of skipping (tests/support/gpu_test.h).
export BATON_REQUIRE_GPU=1
summary="$OUT/summary.txt"
echo "gpu: $(cat "$OUT/gpu.txt") | $(date -u +%F)" > "$summary"
for t in $(ls "$BUNDLE/bin"); do
  [ "$t" = baton ] && continue
  start=$(date +%s)
  timeout 540 "$BUNDLE/run" "$t" > "$OUT/$t.log" 2>&1
  rc=$?
  passed=$(grep -c '^\[       OK \]' "$OUT/$t.log")
  failed=$(grep -c '^\[  FAILED  \]' "$OUT/$t.log")
  skipped=$(grep -c '^\[  SKIPPED \]' "$OUT/$t.log")
  echo "$t: rc $rc, $passed passed, $failed failed lines, $skipped skipped lines, $(( $(date +%s) - start )) s" |
    tee -a "$summary"
done
for compute in fp32 bf16; do
  timeout 300 "$BUNDLE/baton" bench configs/gpt2-124m.toml --warmup 3 --steps 10 \
    --set 'precision.device="cuda"' --set "precision.compute=\"$compute\"" > "$OUT/bench-$compute.log" 2>&1
  echo "bench 124m $compute: rc $? | $(grep -E 'throughput|mfu|device memory' "$OUT/bench-$compute.log" | tr '\n' ' ')" |
    tee -a "$summary"
done
