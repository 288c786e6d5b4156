#!/usr/bin/env bash
# launch/gpu-check.sh [BUNDLE] [OUT]: the GPU validation of a build on a node with only the NVIDIA
# driver and CUDA (docs/cuda.md "Running the GPU tests"), sized for one device call of under 9
# minutes. In order, each result appended to OUT/summary.txt as it comes (a run cut short still
# leaves what it did):
#   1. preflight, stopping at once with the reason: nvidia-smi works, the driver's CUDA version is
#      at least the build's (major), and every bundled program finds every library (ldd through
#      the bundle's own wrapper environment);
#   2. the kernel programs (bf16 kernels, cuBLASLt GEMMs, flash attention, backend ops);
#   3. `baton bench` of GPT-2 124M in bf16 (the figure part B is after);
#   4. the model programs (bf16 GPT against the CPU emulation, CNN ops);
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
KERNEL_TESTS=(test_bf16_kernels test_gemm_lt test_flash_attention test_cuda_ops)
MODEL_TESTS=(test_cuda_bf16_model test_cuda_cnn)
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
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
t0=$(date +%s)
failures=()
say() { echo "$*" | tee -a "$summary"; }
stop() { say "gpu-check: STOPPED in preflight: $1"; say "hint: $2"; exit 2; }
# Seconds for the next step: `want`, clipped to what the deadline leaves (0: none left).
budget() { local left=$(( DEADLINE - ($(date +%s) - t0) )); (( left < $1 )) && echo $(( left > 0 ? left : 0 )) || echo "$1"; }
[ -x "$BUNDLE/run" ] || stop "$BUNDLE is not a bundle with test programs" \
  "on the build machine: bash launch/gpu-check.sh --make-bundle build bundle"

# 1. Preflight.
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || stop "nvidia-smi failed: $(head -2 "$OUT/nvidia-smi.txt" | tr '\n' ' ')" \
  "is the NVIDIA driver loaded and a GPU visible to this job (CUDA_VISIBLE_DEVICES)?"
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)
driver_cuda=$(grep -o 'CUDA Version: *[0-9.]*' "$OUT/nvidia-smi.txt" | grep -o '[0-9.]*$')
build_cuda=$(cat "$BUNDLE/build-cuda.txt" 2>/dev/null)
say "gpu: $gpu | driver supports CUDA ${driver_cuda:-?} | built with CUDA ${build_cuda:-?} | $(date -u +%FT%TZ)"
if [ -n "$driver_cuda" ] && [ -n "$build_cuda" ]; then
  if (( ${driver_cuda%%.*} < ${build_cuda%%.*} )); then
    stop "the driver supports CUDA $driver_cuda, older than the build's $build_cuda" \
      "update the driver, or build with a CUDA $driver_cuda toolkit"
  elif [ "$(printf '%s\n%s\n' "$driver_cuda" "$build_cuda" | sort -V | head -1)" != "$build_cuda" ]; then
    say "preflight: note: driver CUDA $driver_cuda < build CUDA $build_cuda (same major: minor-version compatibility)"
  fi
fi
missing=$(here=$(cd "$BUNDLE" && pwd); export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
          . "$here/node-libs.sh" 2> "$OUT/node-libs.log"
          for b in "$here"/bin/*; do ldd "$b" | sed -n "s|^\s*\(\S*\) => not found|$(basename "$b"): \1|p"; done)
[ -z "$missing" ] || stop "libraries not found: $(echo "$missing" | tr '\n' ';') $(cat "$OUT/node-libs.log")" \
  "install them on the node or add their folder to LD_LIBRARY_PATH (the bundle looks in the CUDA toolkit and in Python's site-packages/nvidia/*/lib)"
say "preflight: ok ($(ls "$BUNDLE/bin" | wc -l) programs, every library found)"

export BATON_REQUIRE_GPU=1
# program NAME [SECONDS]: one gtest program of the bundle (within SECONDS, default PROGRAM_S), its
# line in the summary; failed tests again with CUDA_LAUNCH_BLOCKING=1.
program() {
  local t=$1 limit
  [ -x "$BUNDLE/bin/$t" ] || { say "$t: not in the bundle"; failures+=("$t (missing)"); return; }
  limit=$(budget "${2:-$PROGRAM_S}")
  (( limit > 5 )) || { say "$t: not run (deadline)"; failures+=("$t (deadline)"); return; }
  local start=$(date +%s) rc
  timeout "$limit" "$BUNDLE/run" "$t" > "$OUT/$t.log" 2>&1
  rc=$?
  local passed failed skipped
  passed=$(grep -c '^\[       OK \]' "$OUT/$t.log")
  failed=$(sed -n 's/^\[  FAILED  \] \([A-Za-z][A-Za-z0-9_/.]*\).*/\1/p' "$OUT/$t.log" | sort -u | wc -l)
  skipped=$(grep -c '^\[  SKIPPED \] [A-Za-z]' "$OUT/$t.log")
  local verdict=ok
  if (( rc == 124 )); then verdict="TIMED OUT after ${limit} s"
  elif (( passed + failed == 0 )); then verdict="ZERO TESTS RAN"
  elif (( rc != 0 || failed > 0 || skipped > 0 )); then verdict=FAILED
  fi
  say "$t: $verdict | rc $rc, $passed passed, $failed failed, $skipped skipped, $(( $(date +%s) - start )) s"
  [ "$verdict" = ok ] && return
  failures+=("$t")
  local names
  names=$(sed -n 's/^\[  FAILED  \] \([A-Za-z][A-Za-z0-9_/.]*\).*/\1/p' "$OUT/$t.log" | sort -u | tr '\n' ':')
  limit=$(budget 60)
  if [ -n "$names" ] && (( limit > 5 )); then
    CUDA_LAUNCH_BLOCKING=1 timeout "$limit" "$BUNDLE/run" "$t" --gtest_filter="$names" > "$OUT/$t.blocking.log" 2>&1
    say "  rerun with CUDA_LAUNCH_BLOCKING=1: rc $? (log $OUT/$t.blocking.log)"
  fi
}
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
for t in test_cuda_cnn "${COMM_TESTS[@]}"; do program "$t"; done
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
