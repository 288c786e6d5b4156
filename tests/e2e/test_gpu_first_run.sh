#!/usr/bin/env bash
# launch/gpu-first-run.sh's own logic, without a GPU (issue 20 part A item 1): a fake bundle (test
# programs and `baton` as shell scripts), a fake nvidia-smi, ldd and PyTorch on the PATH.
# - preflight stops, exit 2, with the reason: a node glibc older than the bundle's need; an `ldd`
#   "version ... not found";
# - the order: preflight, kernels, the 124M model program, baton bench at micro-batch 8/16/32, PyTorch
#   (eager flash, eager cuDNN, torch.compile only when allowed) at baton's best micro-batch, the
#   ratio table, the op-time table beside the step-time model, 1.5B, the other programs; a failed test program makes the exit status 1;
# - --pack DIR holds summary.md and logs.tar.gz with every log;
# - a short deadline skips 1.5B and reports what did not run.
source "$(dirname "$0")/lib.sh"
RUN="$SRC/launch/gpu-first-run.sh"

mkdir -p bundle/bin fakebin
cat > bundle/run <<'SH'
#!/usr/bin/env bash
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/bin/$1" "${@:2}"
SH
: > bundle/node-libs.sh
echo 13.0 > bundle/build-cuda.txt
echo 2.36 > bundle/glibc-needed.txt
echo "0000000" > bundle/commit.txt  # not the checkout's: the run notes it
# baton bench: tokens/s by micro-batch (16 is the best), --json as src/app/bench.cpp writes it.
cat > bundle/baton <<'SH'
#!/usr/bin/env bash
echo "baton $*" >> "$FAKE_LOG"
# baton train (the WSP CNN run): metrics.jsonl in run.dir, the GPU's losses 1e-4 off the CPU's
# (FAKE_WSP_OFF: 10% off, a failure).
if [ "$1" = train ]; then
  dir=""; off=1.0001
  [ -n "${FAKE_WSP_OFF:-}" ] && off=1.1
  for a in "$@"; do
    [[ $a == run.dir=* ]] && { dir=${a#run.dir=}; dir=${dir//\"/}; }
    [[ $a == 'precision.device="cpu"' ]] && off=1
  done
  mkdir -p "$dir"
  for i in 1 2 3 4 5 6 7 8; do echo "{\"step\": $i, \"loss\": $(awk -v i=$i -v o=$off 'BEGIN { print (2.4 - i / 100) * o }')}"; done > "$dir/metrics.jsonl"
  exit 0
fi
mb=1; json=""; all="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --set) [[ $2 == train.micro_batch=* ]] && mb=${2#*=}; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) shift ;;
  esac
done
case $mb in 8) tps=100000 ;; 16) tps=150000 ;; 32) tps=120000 ;; *) tps=5000 ;; esac
# cuDNN attention: 160000 at micro-batch 16 (faster than flash: baton's figure in the ratio table).
[[ " $all " == *'precision.attention="cudnn"'* ]] && tps=160000
echo "peak device memory 12.3 GiB"
ops=""
if [ "${BATON_OP_TIMES:-}" = 1 ]; then
  printf 'op (per step)  calls  ms\nmatmul_forward  49  20.0\nall ops  49  20.0\nrest of the step  34.6\n'
  ops=', "op_times": [{"op": "matmul_forward", "calls": 49, "ms": 20.0, "flops": 1, "bytes": 1}]'
fi
printf '{"device": "NVIDIA H100 80GB HBM3", "micro_batch": %s, "global_batch": %s, "tokens_per_s": %s, "images_per_s": %s, "mfu": 0.42, "step_ms_median": 54.6%s}\n' \
  "$mb" "$mb" "$tps" "$tps" "$ops" > "$json"
SH
for t in test_bf16_kernels test_gemm_lt test_flash_attention test_cudnn_sdpa test_cuda_ops test_cuda_bf16_model test_cuda_cnn test_cuda_cnn_model; do
  cat > "bundle/bin/$t" <<SH
#!/usr/bin/env bash
echo "$t \$* require=\${BATON_REQUIRE_GPU:-0}" >> "\$FAKE_LOG"
echo "[       OK ] Fake.One (1 ms)"
SH
done
cat > bundle/bin/test_gemm_lt <<'SH'
#!/usr/bin/env bash
echo "test_gemm_lt $* blocking=${CUDA_LAUNCH_BLOCKING:-0}" >> "$FAKE_LOG"
echo "[       OK ] GemmLt.Small (1 ms)"
echo "[  FAILED  ] GemmLt.Epilogue (3 ms)"
exit 1
SH
chmod +x bundle/run bundle/baton bundle/bin/*

cat > fakebin/nvidia-smi <<'SH'
#!/usr/bin/env bash
if [ "${1:-}" = "--query-gpu=name,driver_version,memory.total" ]; then echo "NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB"; exit 0; fi
echo "| NVIDIA-SMI 580.159.04    Driver Version: 580.159.04    CUDA Version: 13.0     |"
SH
# ldd: every library found, unless FAKE_LDD_VERSION names a program that needs a newer glibc.
cat > fakebin/ldd <<'SH'
#!/usr/bin/env bash
echo "	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0000000000)"
if [ -n "${FAKE_LDD_VERSION:-}" ] && [ "$(basename "$1")" = "$FAKE_LDD_VERSION" ]; then
  echo "$1: /lib/x86_64-linux-gnu/libc.so.6: version \`GLIBC_2.99' not found (required by $1)" >&2
fi
SH
cat > fakebin/getconf <<'SH'
#!/usr/bin/env bash
[ "$1" = GNU_LIBC_VERSION ] && { echo "glibc ${FAKE_GLIBC:-2.39}"; exit 0; }
exec /usr/bin/getconf "$@"
SH
# PyTorch: `-c` snippets succeed; pytorch_gpt2.py writes its --json (eager flash fastest).
cat > fakebin/fakepython <<'SH'
#!/usr/bin/env bash
if [ "$1" = -c ]; then echo "2.11.0 CUDA 13.0"; exit 0; fi
echo "python $*" >> "$FAKE_LOG"
json=""; tps=90000
for a in "$@"; do [ "$prev" = --json ] && json=$a; prev=$a; done
[[ " $* " == *" --sdpa-backend cudnn "* ]] && tps=80000
[[ " $* " != *" --no-compile "* ]] && tps=110000
printf '{"tokens_per_s": %s, "mfu": 0.3, "median_step_ms": 70.0, "peak_memory_gib": 20.5}\n' "$tps" > "$json"
SH
chmod +x fakebin/*
export FAKE_LOG=$PWD/calls.log PYTHON=$PWD/fakebin/fakepython
P="$PWD/fakebin:$PATH"

# Preflight: the node's glibc is older than the bundle's need.
rc=0
FAKE_GLIBC=2.35 PATH="$P" bash "$RUN" bundle out0 > out0.txt 2>&1 || rc=$?
[ "$rc" = 2 ] || { cat out0.txt; fail "old glibc: rc $rc, not 2"; }
grep -q "STOPPED in preflight: this node's glibc 2.35 is older than the 2.36" out0/summary.md \
  || { cat out0/summary.md; fail "no glibc reason"; }

# Preflight: ldd names a symbol version the node's glibc lacks.
rc=0
FAKE_LDD_VERSION=test_cuda_ops PATH="$P" bash "$RUN" bundle out1 > out1.txt 2>&1 || rc=$?
[ "$rc" = 2 ] || { cat out1.txt; fail "version not found: rc $rc, not 2"; }
grep -q "test_cuda_ops: version \`GLIBC_2.99' not found" out1/summary.md || { cat out1/summary.md; fail "no version reason"; }

# The whole run; torch.compile refused by the environment.
rc=0
: > calls.log
GPU_FIRST_RUN_TORCH_COMPILE=off PATH="$P" bash "$RUN" bundle out2 --pack pack2 > out2.txt 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat out2.txt; fail "a failed program: rc $rc, not 1"; }
s=out2/summary.md
grep -q "^preflight: ok" $s || { cat $s; fail "preflight"; }
grep -q "^note: the bundle was built from 0000000, this checkout is " $s || { cat $s; fail "no note on the kit's commit"; }
grep -q "^test_gemm_lt: FAILED" $s || { cat $s; fail "failed program not flagged"; }
grep -q "test_gemm_lt --gtest_filter=GemmLt.Epilogue: blocking=1" calls.log || fail "no CUDA_LAUNCH_BLOCKING rerun of the failed test"
grep -q "^test_bf16_kernels .*require=1" calls.log || fail "BATON_REQUIRE_GPU=1 not set"
grep -q "^- baton-124m-mb16: 150000 tokens/s, MFU 42.0%" $s || { cat $s; fail "bench line"; }
grep -q "^python tests/bench/pytorch_gpt2.py --model 124m --micro-batch 16 .*--no-compile --sdpa-backend flash" calls.log \
  || { cat calls.log; fail "PyTorch not at baton's best micro-batch"; }
grep -q "^- torch-124m-compile-flash: not run (GPU_FIRST_RUN_TORCH_COMPILE=off)" $s || { cat $s; fail "compile not skipped"; }
grep -q "^  cuDNN attention / flash: 1.07x" $s || { cat $s; fail "cuDNN attention line"; }
grep -q "^| 16 | 160000 | 90000 | 1.78x |" $s || { cat $s; fail "ratio table"; }
grep -q "^- baton-1.5b-mb4x4: 5000 tokens/s" $s || { cat $s; fail "1.5B"; }
grep -q "^gpu-first-run: FAIL .*test_gemm_lt" $s || { cat $s; fail "no FAIL line"; }
order=$(grep -oE "^(test_[a-z0-9_]+:|- [a-z0-9.-]+:)" $s | tr -d ':' | tr '\n' ' ')
want="test_bf16_kernels test_gemm_lt test_flash_attention test_cudnn_sdpa test_cuda_ops test_cuda_bf16_model - baton-124m-mb8 - baton-124m-mb16 - baton-124m-mb32 - baton-124m-cudnn-mb16 - torch-124m-eager-flash - torch-124m-eager-cudnn - torch-124m-compile-flash - baton-124m-optimes-mb16 - baton-1.5b-mb4x4 - torch-1.5b-eager-flash test_cuda_cnn test_cuda_cnn_model - wsp-cnn - baton-resnet50-bf16 test_nccl_comm test_device_comm "
[ "$order" = "$want" ] || fail "order: $order"
# 7: the WSP CNN run on both devices, its loss comparison, ResNet-50's images/s.
grep -q "^baton train tests/gpu/configs/wsp-cnn.toml --set precision.device=\"cuda\"" calls.log || fail "no WSP run on cuda"
grep -q "^- wsp-cnn: 8 WSP steps of a ResNet-18 on cuda vs cpu, worst loss difference [0-9.]*e-04" $s || { cat $s; fail "wsp-cnn line"; }
grep -q "^  (images/s: 5000)" $s || { cat $s; fail "ResNet-50 images/s"; }
# 5b: the op-time table at the best micro-batch and the step-time model beside it.
grep -q "^matmul_forward  49  20.0" $s || { cat $s; fail "no op-time table"; }
grep -q "^| matmul_forward | [0-9.]* | 20.000 | [0-9.]* |" $s || { cat $s; fail "no step-time model comparison"; }
cmp -s out2/summary.md pack2/summary.md || fail "--pack: summary.md differs"
tar -tzf pack2/logs.tar.gz | grep -q "baton-124m-mb32.log" || fail "--pack: logs.tar.gz lacks the bench log"

# torch.compile where allowed is the fastest PyTorch variant, so the ratio is against it.
rc=0
# (And the GPU's WSP losses 10% off the CPU's: a failure named in the FAIL line.)
FAKE_WSP_OFF=1 GPU_FIRST_RUN_MBS=16 GPU_FIRST_RUN_TORCH_COMPILE=on PATH="$P" bash "$RUN" bundle out3 > out3.txt 2>&1 || rc=$?
grep -q "^| 16 | 160000 | 110000 | 1.45x |" out3/summary.md || { cat out3/summary.md; fail "compile not compared"; }
grep -q "^- wsp-cnn: .*worst loss difference [0-9.]*e-01" out3/summary.md || { cat out3/summary.md; fail "wsp-cnn 10% line"; }
grep -q "^gpu-first-run: FAIL .*wsp-cnn" out3/summary.md || { cat out3/summary.md; fail "wsp-cnn difference not a failure"; }

# A short deadline: the 1.5B section does not run and says why.
rc=0
GPU_FIRST_RUN_MBS=16 GPU_FIRST_RUN_DEADLINE=20 PATH="$P" bash "$RUN" bundle out4 > out4.txt 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat out4.txt; fail "deadline: rc $rc"; }
grep -q "^- not run: .* s left" out4/summary.md || { cat out4/summary.md; fail "1.5B ran past the deadline"; }
echo "PASS"
