#!/usr/bin/env bash
# launch/gpu-check.sh [BUNDLE] [OUT]: the GPU validation of a build on a node with only the NVIDIA
# driver and CUDA (docs/cuda.md "Running the GPU tests"), sized for one device call of under 9
# minutes. In order, each result appended to OUT/summary.txt as it comes (a run cut short still
# leaves what it did):
#   1. preflight, stopping at once with the reason: nvidia-smi works, the driver's CUDA version is
#      at least the build's (major), and every bundled program finds every library (ldd through
#      the bundle's own wrapper environment);
#   2. the kernel programs (bf16 kernels, cuBLASLt GEMMs, flash attention, cuDNN attention, backend ops);
#   3. `baton bench` of GPT-2 124M in bf16 (the figure part B is after);
#   4. the model programs (bf16 GPT against the CPU emulation, CNN ops, CNNs against the CPU);
#   5. NCCL and DeviceComm (one-rank jobs);
#   6. `baton bench` of GPT-2 124M in fp32;
#   7. compute-sanitizer memcheck and racecheck on small cases, where the node has it.
# Every program runs with BATON_REQUIRE_GPU=1 (a test that finds no device fails, naming
# cudaGetErrorString), under its own limit (GPU_CHECK_PROGRAM_S, default 90 s) clipped to the overall
# deadline (GPU_CHECK_DEADLINE, default 510 s); a program that ran zero tests is a failure; the
# failed tests of a program are run again with CUDA_LAUNCH_BLOCKING=1 (OUT/NAME.blocking.log), so an
# asynchronous error names its kernel. Exit status 0 only when everything ran and passed.
# Make the bundle on the build machine with the test programs included:
#   bash launch/gpu-check.sh --make-bundle build bundle     # = launch/bundle.sh + the gpu tests
set -uo pipefail
KERNEL_TESTS=(test_bf16_kernels test_gemm_lt test_flash_attention test_cudnn_sdpa test_cuda_ops)
MODEL_TESTS=(test_cuda_bf16_model test_cuda_cnn test_cuda_cnn_model)
COMM_TESTS=(test_nccl_comm test_device_comm)
if [ "${1:-}" = "--make-bundle" ]; then
  build=${2:-build}; out=${3:-bundle}
  tests=()
  for t in "${KERNEL_TESTS[@]}" "${MODEL_TESTS[@]}" "${COMM_TESTS[@]}"; do
    [ -x "$build/tests/$t" ] && tests+=("$build/tests/$t")
  done
  [ ${#tests[@]} -gt 0 ] || { echo "error: no GPU test programs in $build/tests" >&2
    echo "hint: configure with CUDA (cmake -DBATON_CUDA=ON) and build the tests" >&2; exit 1; }
  bash "$(dirname "$0")/bundle.sh" "$build/baton" "$out" "${tests[@]}" || exit 1
  # What the node is checked against: the CUDA version of the build, and each kernel's registers,
  # shared memory and spills as ptxas reported them (cmake/ptxas-log.sh).
  nvcc=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)
  "${nvcc:-nvcc}" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9.]*\).*/\1/p' > "$out/build-cuda.txt"
  cat "$build"/ptxas-usage/*.txt > "$out/ptxas-usage.txt" 2>/dev/null || true
  echo "bundle: built with CUDA $(cat "$out/build-cuda.txt"); ptxas usage of $(ls "$build"/ptxas-usage 2>/dev/null | wc -l) kernel files"
  exit 0
fi
BUNDLE=${1:-bundle}
OUT=${2:-gpu-check}
DEADLINE=${GPU_CHECK_DEADLINE:-510}
PROGRAM_S=${GPU_CHECK_PROGRAM_S:-90}
SUMMARY="$OUT/summary.txt"
. "$(dirname "$0")/lib-gpu-run.sh"
gpu_run_start

# 1. Preflight.
preflight

bench() {
  local compute=$1 limit
  limit=$(budget 120)
  (( limit > 20 )) || { say "bench 124m $compute: not run (deadline)"; failures+=("bench $compute (deadline)"); return; }
  timeout "$limit" "$BUNDLE/baton" bench configs/gpt2-124m.toml --warmup 3 --steps 10 \
    --set 'precision.device="cuda"' --set "precision.compute=\"$compute\"" > "$OUT/bench-$compute.log" 2>&1
  local rc=$?
  say "bench 124m $compute: rc $rc | $(grep -E 'throughput|mfu|device memory' "$OUT/bench-$compute.log" | tr '\n' ' ')"
  (( rc == 0 )) || failures+=("bench $compute")
}
# sanitize TOOL NAME FILTER: compute-sanitizer on a few small tests of one program.
sanitize() {
  local tool=$1 t=$2 filter=$3 limit
  limit=$(budget 75)
  (( limit > 20 )) || { say "compute-sanitizer $tool $t: not run (deadline)"; return; }
  timeout "$limit" "$sanitizer" --tool "$tool" --error-exitcode 99 "$BUNDLE/run" "$t" --gtest_filter="$filter" \
    > "$OUT/sanitize-$tool-$t.log" 2>&1
  local rc=$?
  say "compute-sanitizer $tool $t ($filter): rc $rc | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize-$tool-$t.log" | tail -1)"
  (( rc == 0 || rc == 124 )) || failures+=("compute-sanitizer $tool $t")
}

for t in "${KERNEL_TESTS[@]}"; do program "$t"; done
bench bf16
# The bf16 model program runs GPT-2 124M's two steps on the CPU emulation too: more time.
program test_cuda_bf16_model $(( 2 * PROGRAM_S ))
for t in test_cuda_cnn test_cuda_cnn_model "${COMM_TESTS[@]}"; do program "$t"; done
bench fp32
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$sanitizer" ]; then
  sanitize memcheck test_bf16_kernels '*Layernorm*:*Embedding*:*SoftmaxCrossEntropy*'
  sanitize racecheck test_flash_attention '*Preconditions*:*LargeScores*'
else
  say "compute-sanitizer: not on this node (skipped)"
fi
if [ ${#failures[@]} -eq 0 ]; then
  say "gpu-check: PASS ($(( $(date +%s) - t0 )) s)"
else
  say "gpu-check: FAIL ($(( $(date +%s) - t0 )) s): ${failures[*]}"
  exit 1
fi
