#!/usr/bin/env bash
# launch/gpu-first-run.sh BUNDLE OUT [--pack DIR]: the first run of a build on a GPU node, sized for
# ONE command of at most 9 minutes (GPU_FIRST_RUN_DEADLINE, default 530 s), on a node with only the
# NVIDIA driver, CUDA and PyTorch. Writes OUT/summary.md as it goes (a run cut short keeps what it
# did), in this order, each step clipped to what the deadline leaves:
#   1. preflight (stops at once with the reason): nvidia-smi, the driver's CUDA against the build's,
#      the node's glibc against the bundle's need, `ldd` of every bundled program ("not found" and
#      "version ... not found");
#   2. the kernel test programs (bf16 kernels, cuBLASLt GEMMs, flash attention, cuDNN attention,
#      backend ops);
#   3. the GPT-2 124M bf16 model program against the CPU emulation;
#   4. `baton bench` GPT-2 124M bf16 at micro-batch 8, 16 and 32 (one micro-batch per step), and at
#      the best of them with cuDNN's fused attention (precision.attention = "cudnn");
#   5. the PyTorch baseline (tests/bench/pytorch_gpt2.py) at baton's best micro-batch: eager with
#      SDPA's flash backend, eager with SDPA's cuDNN backend, and torch.compile only when the node
#      has a C compiler (Inductor needs one); then the table baton / best PyTorch; 5b. the op-time
#      table (BATON_OP_TIMES=1) at that micro-batch beside launch/step-time-model.py's prediction;
#   6. GPT-2 1.5B (baton bench and PyTorch eager flash, micro-batch 4 x 4) if time remains;
#   7. if time remains: the CNN programs (ops; ResNets and a VGG against the CPU), a ResNet-18 trained
#      by WSP on the GPU against the same run on the CPU (tests/gpu/configs/wsp-cnn.toml), ResNet-50
#      bf16 throughput, NCCL and DeviceComm.
# Every test program runs with BATON_REQUIRE_GPU=1 (no device = failure) and its failed tests again
# with CUDA_LAUNCH_BLOCKING=1. --pack DIR: after every step, DIR/summary.md and DIR/logs.tar.gz
# (every log of OUT) are refreshed, for machines that return only a few files (the device tool
# returns at most 8). Exit status 0 only when everything ran and passed.
# Environment: PYTHON (the one with PyTorch, default python3), GPU_FIRST_RUN_MBS ("8 16 32"),
# GPU_FIRST_RUN_TORCH_COMPILE (auto | on | off), GPU_FIRST_RUN_DEADLINE, GPU_FIRST_RUN_PROGRAM_S.
#
# On the build machine (docs/cuda.md "The first run on a GPU"): the bundle with the GPU test
# programs, as KIT/bundle.tar.xz (refused over 60 MiB: what travels to a device machine is limited):
#   bash launch/gpu-first-run.sh --make-kit build gpu-kit
# On the node, from the repository root:
#   tar -xJf gpu-kit/bundle.tar.xz -C /tmp && bash launch/gpu-first-run.sh /tmp/bundle /tmp/first-run --pack "$OUT"
set -uo pipefail
STOP_NAME=gpu-first-run
if [ "${1:-}" = "--make-kit" ]; then
  build=${2:-build}; kit=${3:-gpu-kit}
  stage=$(mktemp -d) || exit 1
  trap 'rm -rf "$stage"' EXIT
  bash "$(dirname "$0")/gpu-check.sh" --make-bundle "$build" "$stage/bundle" || exit 1
  mkdir -p "$kit" || exit 1
  # The commit the bundle was built from ("dirty" when the tree had changes): the run compares it
  # with its checkout.
  { git -C "$(dirname "$0")" rev-parse --short HEAD; git -C "$(dirname "$0")" status --porcelain -uno | grep -q . && echo dirty; } \
    2> /dev/null | paste -sd' ' > "$stage/bundle/commit.txt"
  echo "kit: compressing (xz, a minute or two)..."
  XZ_OPT=${XZ_OPT:--T0} tar -cJf "$kit/bundle.tar.xz.tmp" -C "$stage" bundle || exit 1
  mv "$kit/bundle.tar.xz.tmp" "$kit/bundle.tar.xz"
  cp "$stage/bundle/commit.txt" "$kit/commit.txt"
  mib=$(( $(stat -c %s "$kit/bundle.tar.xz") / 1048576 ))
  if (( mib >= 60 )); then
    echo "error: $kit/bundle.tar.xz is $mib MiB, over the 60 MiB a device call carries beside the tree" >&2
    echo "hint: build for sm_90 only (cmake -DCMAKE_CUDA_ARCHITECTURES=90) or leave test programs out" >&2
    exit 1
  fi
  echo "kit: $kit/bundle.tar.xz ($mib MiB, commit $(git -C "$(dirname "$0")" rev-parse --short HEAD 2> /dev/null))"
  exit 0
fi
[ $# -ge 2 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2; }
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
BUNDLE=$(abs "$1")
OUT=$(abs "$2")
PACK=""
if [ "${3:-}" = "--pack" ]; then PACK=$(abs "${4:?--pack DIR}"); mkdir -p "$PACK"; fi
cd "$(dirname "$0")/.." || exit 2
DEADLINE=${GPU_FIRST_RUN_DEADLINE:-530}
PROGRAM_S=${GPU_FIRST_RUN_PROGRAM_S:-90}
PYTHON=${PYTHON:-python3}
MBS=${GPU_FIRST_RUN_MBS:-8 16 32}
COMPILE=${GPU_FIRST_RUN_TORCH_COMPILE:-auto}  # auto: torch.compile only where a C compiler is
SUMMARY="$OUT/summary.md"
. launch/lib-gpu-run.sh
gpu_run_start

pack() {
  [ -n "$PACK" ] || return 0
  cp "$SUMMARY" "$PACK/summary.md.tmp" && mv "$PACK/summary.md.tmp" "$PACK/summary.md"
  tar -czf "$PACK/logs.tar.gz.tmp" -C "$OUT" . 2> /dev/null && mv "$PACK/logs.tar.gz.tmp" "$PACK/logs.tar.gz"
}
section() { say ""; say "## $*"; say ""; pack; }
# json FILE KEY: one value of a JSON file (empty when absent or null).
json() { python3 -c 'import json,sys
try: v = json.load(open(sys.argv[1])).get(sys.argv[2])
except Exception: v = None
print("" if v is None else v)' "$1" "$2" 2> /dev/null; }
pct() { awk -v m="$1" 'BEGIN { if (m == "") print "-"; else printf("%.1f%%", 100 * m) }'; }
int() { awk -v x="$1" 'BEGIN { if (x == "") print "-"; else printf("%.0f", x) }'; }

say "# baton first GPU run"
say ""
here_commit=$(git rev-parse --short HEAD 2> /dev/null || echo unknown)
kit_commit=$(cat "$BUNDLE/commit.txt" 2> /dev/null)
say "commit $here_commit | bundle $BUNDLE${kit_commit:+ (built from $kit_commit)} | deadline ${DEADLINE} s"
[ -z "$kit_commit" ] || [ "$kit_commit" = "$here_commit" ] ||
  say "note: the bundle was built from $kit_commit, this checkout is $here_commit: rebuild the kit if the code differs"
section "1. Preflight"
preflight
pack

section "2. Kernel programs"
for t in test_bf16_kernels test_gemm_lt test_flash_attention test_cudnn_sdpa test_cuda_ops; do program "$t"; pack; done

section "3. GPT-2 124M bf16 against the CPU emulation"
# The program also runs the model on the CPU emulation (the reference): twice the usual time.
program test_cuda_bf16_model $(( 2 * PROGRAM_S ))
pack

# baton_bench NAME SECONDS ARGS...: one `baton bench` with --json OUT/NAME.json; its line.
baton_bench() {
  local name=$1 want=$2 limit rc
  limit=$(budget "$want")
  (( limit > 20 )) || { say "- $name: not run (deadline)"; failures+=("$name (deadline)"); return 1; }
  timeout "$limit" "$BUNDLE/baton" bench "${@:3}" --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  rc=$?
  if (( rc == 0 )); then
    say "- $name: $(int "$(json "$OUT/$name.json" tokens_per_s)") tokens/s, MFU $(pct "$(json "$OUT/$name.json" mfu)"), median step $(json "$OUT/$name.json" step_ms_median) ms$(grep -m1 -E 'device memory|peak' "$OUT/$name.log" | sed 's/^/ | /')$(grep -m1 -E 'cuBLASLt:' "$OUT/$name.log" | sed 's/^/ | /')"
  else
    say "- $name: FAILED rc $rc$( (( rc == 124 )) && echo " (timed out after $limit s)") | $(grep -m1 -E '^error:' "$OUT/$name.log")"
    failures+=("$name")
  fi
  pack
  return $rc
}
# torch_bench NAME SECONDS ARGS...: tests/bench/pytorch_gpt2.py with --json OUT/NAME.json; its line.
torch_bench() {
  local name=$1 want=$2 limit rc
  limit=$(budget "$want")
  (( limit > 20 )) || { say "- $name: not run (deadline)"; return 1; }
  PYTHONUNBUFFERED=1 timeout "$limit" "$PYTHON" tests/bench/pytorch_gpt2.py "${@:3}" --json "$OUT/$name.json" \
    > "$OUT/$name.log" 2>&1
  rc=$?
  if (( rc == 0 )); then
    say "- $name: $(int "$(json "$OUT/$name.json" tokens_per_s)") tokens/s, MFU $(pct "$(json "$OUT/$name.json" mfu)"), median step $(int "$(json "$OUT/$name.json" median_step_ms)") ms, peak $(json "$OUT/$name.json" peak_memory_gib) GiB"
  else
    say "- $name: FAILED rc $rc$( (( rc == 124 )) && echo " (timed out after $limit s)") | $(grep -m1 -iE 'error' "$OUT/$name.log" | cut -c1-200)"
  fi
  pack
  return $rc
}
BF16=(--set 'precision.device="cuda"' --set 'precision.compute="bf16"')

section "4. baton bench GPT-2 124M bf16"
best_mb=""; best_tps=0
for mb in $MBS; do
  if baton_bench "baton-124m-mb$mb" 75 configs/gpt2-124m.toml --warmup 3 --steps 10 "${BF16[@]}" \
       --set "train.micro_batch=$mb" --set "train.global_batch=$mb"; then
    tps=$(json "$OUT/baton-124m-mb$mb.json" tokens_per_s)
    if awk -v a="$tps" -v b="$best_tps" 'BEGIN { exit !(a > b) }'; then best_tps=$tps; best_mb=$mb; fi
  fi
done
# 4b. The same with cuDNN's fused attention (precision.attention = "cudnn"): the faster of the two
# is baton's figure below (and should become "auto"'s choice: docs/cuda.md).
if [ -n "$best_mb" ]; then
  if baton_bench "baton-124m-cudnn-mb$best_mb" 75 configs/gpt2-124m.toml --warmup 3 --steps 10 "${BF16[@]}" \
       --set 'precision.attention="cudnn"' --set "train.micro_batch=$best_mb" --set "train.global_batch=$best_mb"; then
    tps=$(json "$OUT/baton-124m-cudnn-mb$best_mb.json" tokens_per_s)
    say "  cuDNN attention / flash: $(awk -v a="$tps" -v b="$best_tps" 'BEGIN { printf("%.2fx", a / b) }')"
    if awk -v a="$tps" -v b="$best_tps" 'BEGIN { exit !(a > b) }'; then best_tps=$tps; fi
  fi
fi

section "5. PyTorch GPT-2 124M at baton's best micro-batch"
if ! "$PYTHON" -c 'import torch; assert torch.cuda.is_available()' > "$OUT/torch-import.log" 2>&1; then
  say "- PyTorch: not run: $PYTHON cannot use torch with CUDA ($(tail -1 "$OUT/torch-import.log"))"
elif [ -z "$best_mb" ]; then
  say "- PyTorch: not run: no baton figure to compare with"
else
  say "torch: $("$PYTHON" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>&1)"
  T=(--model 124m --micro-batch "$best_mb" --grad-accum 1 --warmup 3 --steps 10)
  torch_bench "torch-124m-eager-flash" 90 "${T[@]}" --no-compile --sdpa-backend flash
  torch_bench "torch-124m-eager-cudnn" 90 "${T[@]}" --no-compile --sdpa-backend cudnn
  if [ "$COMPILE" = on ] || { [ "$COMPILE" = auto ] && { command -v cc || command -v gcc; } > /dev/null; }; then
    torch_bench "torch-124m-compile-flash" 150 "${T[@]}" --sdpa-backend flash
  else
    say "- torch-124m-compile-flash: not run ($([ "$COMPILE" = off ] && echo "GPU_FIRST_RUN_TORCH_COMPILE=off" || echo "no C compiler on this node: torch.compile's Inductor needs one"))"
  fi
  best_torch=0; best_name=""
  for f in "$OUT"/torch-124m-*.json; do
    [ -s "$f" ] || continue
    v=$(json "$f" tokens_per_s)
    if awk -v a="$v" -v b="$best_torch" 'BEGIN { exit !(a > b) }'; then best_torch=$v; best_name=$(basename "$f" .json); fi
  done
  if [ -n "$best_name" ]; then
    say ""
    say "| micro-batch | baton tokens/s | best PyTorch ($best_name) | ratio (goal >= 1.1) |"
    say "| --- | --- | --- | --- |"
    say "| $best_mb | $(int "$best_tps") | $(int "$best_torch") | $(awk -v a="$best_tps" -v b="$best_torch" 'BEGIN { printf("%.2fx", a / b) }') |"
  fi
fi

section "5b. Op by op at baton's best micro-batch, against the step-time model"
if [ -n "$best_mb" ]; then
  if BATON_OP_TIMES=1 baton_bench "baton-124m-optimes-mb$best_mb" 75 configs/gpt2-124m.toml --warmup 3 --steps 10 \
       "${BF16[@]}" --set "train.micro_batch=$best_mb" --set "train.global_batch=$best_mb"; then
    sed -n '/^op (per step)/,/^rest of the step/p' "$OUT/baton-124m-optimes-mb$best_mb.log" > "$OUT/op-times.txt"
    { echo '```'; cat "$OUT/op-times.txt"; echo '```'; echo; } | tee -a "$SUMMARY"
    python3 launch/step-time-model.py --compare "$OUT/baton-124m-optimes-mb$best_mb.json" --model 124m 2>&1 |
      tee -a "$SUMMARY"
    pack
  fi
else
  say "- not run: no baton figure"
fi

section "6. GPT-2 1.5B (if time remains)"
if (( $(budget 200) >= 200 )); then
  baton_bench "baton-1.5b-mb4x4" 120 configs/gpt2-1.5b.toml --warmup 2 --steps 5 "${BF16[@]}" \
    --set "train.micro_batch=4" --set "train.global_batch=16"
  torch_bench "torch-1.5b-eager-flash" 120 --model 1.5b --micro-batch 4 --grad-accum 4 --warmup 2 --steps 5 \
    --no-compile --sdpa-backend flash
else
  say "- not run: $(budget 9999) s left"
fi

section "7. CNNs and WSP on the GPU, the other programs (if time remains)"
for t in test_cuda_cnn test_cuda_cnn_model; do
  if [ -x "$BUNDLE/bin/$t" ]; then program "$t"; pack; else say "$t: not in the bundle (skipped)"; fi
done
# 7b. A ResNet-18 trained by WSP (one virtual worker, Nm = 2) on the GPU and on the CPU, same
# synthetic images: the losses must agree (fp32; 2e-2 relative, as test_cuda_cnn_model's later steps).
wsp_train() {
  local device=$1 limit
  limit=$(budget 60)
  (( limit > 15 )) || { say "- wsp-cnn $device: not run (deadline)"; return 1; }
  rm -rf "$OUT/wsp-cnn-$device"
  timeout "$limit" "$BUNDLE/baton" train tests/gpu/configs/wsp-cnn.toml --set "precision.device=\"$device\"" \
    --set "run.dir=\"$OUT/wsp-cnn-$device\"" > "$OUT/wsp-cnn-$device.log" 2>&1
}
if wsp_train cuda && wsp_train cpu; then
  if python3 - "$OUT/wsp-cnn-cuda/metrics.jsonl" "$OUT/wsp-cnn-cpu/metrics.jsonl" >> "$SUMMARY" <<'PY'
import json, sys
g, c = ([json.loads(l)["loss"] for l in open(f) if '"loss"' in l] for f in sys.argv[1:3])
worst = max(abs(a - b) / abs(b) for a, b in zip(g, c)) if g and len(g) == len(c) else float("inf")
print(f"- wsp-cnn: {len(g)} WSP steps of a ResNet-18 on cuda vs cpu, worst loss difference {worst:.2e} (relative)")
sys.exit(0 if worst < 2e-2 else 1)
PY
  then :; else say "- wsp-cnn: FAILED (losses differ or missing: $OUT/wsp-cnn-*.log)"; failures+=("wsp-cnn"); fi
else
  say "- wsp-cnn: FAILED | $(grep -h -m1 -E '^error:' "$OUT"/wsp-cnn-*.log)"; failures+=("wsp-cnn")
fi
pack
# 7c. ResNet-50 throughput (synthetic ImageNet shapes) in bf16.
if baton_bench "baton-resnet50-bf16" 90 configs/resnet50.toml --warmup 2 --steps 5 "${BF16[@]}"; then
  say "  (images/s: $(int "$(json "$OUT/baton-resnet50-bf16.json" images_per_s)"))"
fi
for t in test_nccl_comm test_device_comm; do
  if [ -x "$BUNDLE/bin/$t" ]; then program "$t"; pack; else say "$t: not in the bundle (skipped)"; fi
done

say ""
if [ ${#failures[@]} -eq 0 ]; then
  say "gpu-first-run: PASS ($(elapsed) s)"
  pack
else
  say "gpu-first-run: FAIL ($(elapsed) s): ${failures[*]}"
  pack
  exit 1
fi
