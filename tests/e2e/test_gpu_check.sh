#!/usr/bin/env bash
# launch/gpu-check.sh's own logic, without a GPU (issue 14 part A items 1-3): a fake bundle whose
# test programs are shell scripts printing gtest's lines and a fake nvidia-smi on the PATH.
# - preflight stops at once, exit 2, with the reason: nvidia-smi fails; a driver older than the build;
# - a program that ran zero tests, one with a failed test (rerun with CUDA_LAUNCH_BLOCKING=1, only
#   the failed tests), one past its time limit and one missing from the bundle are failures; a
#   passing one is not; the summary names them and the exit status is 1;
# - the overall deadline: what no longer fits is reported "not run (deadline)".
source "$(dirname "$0")/lib.sh"
CHECK="$SRC/launch/gpu-check.sh"

mkdir -p bundle/bin fakebin
cat > bundle/run <<'SH'
#!/usr/bin/env bash
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/bin/$1" "${@:2}"
SH
: > bundle/node-libs.sh
echo 12.4 > bundle/build-cuda.txt
cat > bundle/baton <<'SH'
#!/usr/bin/env bash
echo "throughput 123456 tokens/s | mfu 40.0%"
SH
cat > bundle/bin/test_bf16_kernels <<'SH'
#!/usr/bin/env bash
echo "[       OK ] Bf16Kernels.Cast (1 ms)"
echo "[       OK ] Bf16Kernels.Gelu (1 ms)"
SH
cat > bundle/bin/test_gemm_lt <<'SH'
#!/usr/bin/env bash
echo "[==========] 0 tests from 0 test suites ran."
SH
cat > bundle/bin/test_flash_attention <<'SH'
#!/usr/bin/env bash
echo "args: $* blocking=${CUDA_LAUNCH_BLOCKING:-0} require=${BATON_REQUIRE_GPU:-0}"
echo "[       OK ] FlashAttentionGpu.Preconditions (1 ms)"
echo "[  FAILED  ] FlashAttentionGpu.Fp32MatchesCpuTwin (3 ms)"
echo "[  FAILED  ] 1 test, listed below:"
echo "[  FAILED  ] FlashAttentionGpu.Fp32MatchesCpuTwin"
exit 1
SH
cat > bundle/bin/test_cuda_ops <<'SH'
#!/usr/bin/env bash
sleep 30
SH
chmod +x bundle/run bundle/baton bundle/bin/*

# Preflight: nvidia-smi fails (no driver).
mkdir -p nodriver
cat > nodriver/nvidia-smi <<'SH'
#!/usr/bin/env bash
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
exit 9
SH
chmod +x nodriver/nvidia-smi
rc=0
PATH="$PWD/nodriver:$PATH" bash "$CHECK" bundle out0 > out0.txt 2>&1 || rc=$?
[ "$rc" = 2 ] || { cat out0.txt; fail "no nvidia-smi: rc $rc, not 2"; }
grep -q "STOPPED in preflight: nvidia-smi failed" out0/summary.txt || { cat out0/summary.txt; fail "no preflight reason"; }
grep -q "^hint: " out0/summary.txt || fail "no hint"

# Preflight: a driver that supports CUDA 11.8 only, the build's 12.4.
cat > fakebin/nvidia-smi <<'SH'
#!/usr/bin/env bash
if [ "${1:-}" = "--query-gpu=name,driver_version,memory.total" ]; then echo "NVIDIA H100 80GB HBM3, 520.00, 81559 MiB"; exit 0; fi
echo "| NVIDIA-SMI 520.00    Driver Version: 520.00    CUDA Version: ${FAKE_CUDA:-11.8}     |"
SH
chmod +x fakebin/nvidia-smi
rc=0
PATH="$PWD/fakebin:$PATH" bash "$CHECK" bundle out1 > out1.txt 2>&1 || rc=$?
[ "$rc" = 2 ] || { cat out1.txt; fail "old driver: rc $rc, not 2"; }
grep -q "the driver supports CUDA 11.8, older than the build's 12.4" out1/summary.txt || { cat out1/summary.txt; fail "old driver"; }

# The programs: one passes, one runs no test, one fails a test, one times out, the rest are missing.
rc=0
FAKE_CUDA=12.6 GPU_CHECK_PROGRAM_S=8 PATH="$PWD/fakebin:$PATH" bash "$CHECK" bundle out2 > out2.txt 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat out2.txt; fail "failures: rc $rc, not 1"; }
s=out2/summary.txt
grep -q "preflight: ok" $s || { cat $s; fail "preflight"; }
grep -q "^test_bf16_kernels: ok | rc 0, 2 passed, 0 failed" $s || { cat $s; fail "passing program"; }
grep -q "^test_gemm_lt: ZERO TESTS RAN" $s || { cat $s; fail "zero tests not flagged"; }
grep -q "^test_flash_attention: FAILED | rc 1, 1 passed, 1 failed" $s || { cat $s; fail "failed program"; }
grep -q "rerun with CUDA_LAUNCH_BLOCKING=1: rc 1" $s || { cat $s; fail "no blocking rerun"; }
grep -q "args: --gtest_filter=FlashAttentionGpu.Fp32MatchesCpuTwin: blocking=1 require=1" out2/test_flash_attention.blocking.log \
  || { cat out2/test_flash_attention.blocking.log; fail "the rerun is not the failed tests with CUDA_LAUNCH_BLOCKING=1"; }
grep -q "require=1" out2/test_flash_attention.log || fail "BATON_REQUIRE_GPU=1 not set for the programs"
grep -q "^test_cuda_ops: TIMED OUT after 8 s" $s || { cat $s; fail "no time limit"; }
grep -q "^test_nccl_comm: not in the bundle" $s || { cat $s; fail "missing program"; }
grep -q "^bench 124m bf16: rc 0 | throughput" $s || { cat $s; fail "bench line"; }
grep -q "^gpu-check: FAIL .*test_gemm_lt.*test_flash_attention.*test_cuda_ops" $s || { cat $s; fail "no FAIL line"; }
# The order: kernels, the bf16 bench, models, comms, the fp32 bench.
order=$(grep -oE "^(test_[a-z0-9_]+|bench 124m [a-z0-9]+)" $s | tr '\n' ' ')
[ "$order" = "test_bf16_kernels test_gemm_lt test_flash_attention test_cudnn_sdpa test_cuda_ops bench 124m bf16 test_cuda_bf16_model test_cuda_cnn test_cuda_cnn_model test_nccl_comm test_device_comm bench 124m fp32 " ] \
  || fail "order: $order"

# The deadline: 10 s leave room for the first programs only.
rc=0
FAKE_CUDA=12.6 GPU_CHECK_DEADLINE=10 GPU_CHECK_PROGRAM_S=8 PATH="$PWD/fakebin:$PATH" bash "$CHECK" bundle out3 > out3.txt 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat out3.txt; fail "deadline: rc $rc"; }
grep -q "not run (deadline)" out3/summary.txt || { cat out3/summary.txt; fail "no deadline"; }
echo "PASS"
