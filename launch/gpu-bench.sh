#!/usr/bin/env bash
# launch/gpu-bench.sh [OPTIONS]: baton against PyTorch on the same GPU in one session (issue 6:
# baton tokens/s >= 1.1x PyTorch's for GPT-2 124M and 1.5B, seq 1024, the largest micro-batch
# that fits). For each size: `baton bench configs/gpt2-<size>.toml` in bf16 on CUDA, then
# tests/bench/pytorch_gpt2.py (torch.compile, bf16 autocast, flash SDPA, fused AdamW) with the
# same shapes, micro-batch and micro-batches per step; prints a table with the ratio and writes
# OUT_DIR/<date>-<gpu>.md (GPU, date, commands, tokens/s, ratio, MFU) with the logs beside it in
# OUT_DIR/<date>-<gpu>/. docs/benchmarks.md says how to run it on a GPU node.
#
#   launch/gpu-bench.sh                                   # defaults below
#   BATON=bundle/baton launch/gpu-bench.sh --out-dir "$OUT"   # from a bundle (launch/bundle.sh)
#   launch/gpu-bench.sh --find-max                        # search the largest micro-batch first
#
# Options:
#   --sizes "124m 1.5b"   models to run (default both)
#   --mb-124m N           micro-batch for 124m (default 16)
#   --mb-1.5b N           micro-batch for 1.5b (default 4)
#   --accum-124m N        micro-batches per optimizer step for 124m (default 1: 16 seq/step)
#   --accum-1.5b N        micro-batches per optimizer step for 1.5b (default 4: 16 seq/step)
#   --warmup N --steps N  untimed and timed steps, the same on both sides (default 5 and 20)
#   --find-max            first find each side's largest micro-batch (doubling from the --mb
#                         value, then bisection; baton: until "out of device memory", PyTorch:
#                         pytorch_gpt2.py --find-max-batch) and time both at the smaller of the two
#   --search-only         --find-max without the timed runs (a 1.5b search and timed run may not
#                         fit one 10-minute command on the device machine: split them)
#   --only baton|pytorch  run one side only
#   --out-dir DIR         where the report and logs go (default bench-results)
# The default micro-batches are guesses for an 80 GB H100: the goal asks for the largest that
# fits, so run --find-max once per GPU kind (or pass the sizes it found).
# Environment: BATON (default build/baton; bundle/baton for a bundle), PYTHON (default python3).
set -uo pipefail   # no -e: one side failing must not lose the other side's numbers
cd "$(dirname "$0")/.." || exit 2

BATON=${BATON:-build/baton}
PYTHON=${PYTHON:-python3}
SIZES="124m 1.5b"
declare -A MB=([124m]=16 [1.5b]=4)
declare -A ACCUM=([124m]=1 [1.5b]=4)
# Shapes (configs/gpt2-<size>.toml): layers, d_model (heads: 12 and 25); seq 1024, vocab 50257 padded to 50304.
declare -A LAYERS=([124m]=12 [1.5b]=48)
declare -A DMODEL=([124m]=768 [1.5b]=1600)
SEQ=1024
VPAD=50304
WARMUP=5
STEPS=20
FIND_MAX=0
SEARCH_ONLY=0
ONLY=""
OUT_DIR=bench-results

die() { echo "error: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) SIZES=$2; shift 2 ;;
    --mb-124m) MB[124m]=$2; shift 2 ;;
    --mb-1.5b) MB[1.5b]=$2; shift 2 ;;
    --accum-124m) ACCUM[124m]=$2; shift 2 ;;
    --accum-1.5b) ACCUM[1.5b]=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --find-max) FIND_MAX=1; shift ;;
    --search-only) FIND_MAX=1; SEARCH_ONLY=1; shift ;;
    --only) ONLY=$2; shift 2 ;;
    --out-dir) OUT_DIR=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
for s in $SIZES; do
  [ -n "${LAYERS[$s]:-}" ] || die "--sizes: unknown model '$s' (124m or 1.5b)"
  [[ ${MB[$s]} =~ ^[1-9][0-9]*$ && ${ACCUM[$s]} =~ ^[1-9][0-9]*$ ]] || die "$s: micro-batch and accum must be positive integers"
done
[[ $WARMUP =~ ^[0-9]+$ && $STEPS =~ ^[1-9][0-9]*$ ]] || die "--warmup N (>= 0) --steps N (>= 1)"
case "$ONLY" in ""|baton|pytorch) ;; *) die "--only baton|pytorch" ;; esac
run_baton() { [ "$ONLY" != pytorch ]; }
run_torch() { [ "$ONLY" != baton ]; }
if run_baton; then [ -x "$BATON" ] || die "$BATON is not an executable (build: cmake --build build; or BATON=bundle/baton)"; fi
if run_torch; then "$PYTHON" -c 'import torch' 2>/dev/null || die "$PYTHON cannot import torch (PYTHON=...)"; fi

# ---- the machine ----
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
[ -n "$GPU" ] || GPU=$("$PYTHON" -c 'import torch; print(torch.cuda.get_device_name(0))' 2>/dev/null)
GPU=${GPU:-unknown GPU}
DRIVER=$(nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
DATE=$(date -u +%Y-%m-%d)
STAMP=$(date -u +%Y-%m-%dT%H:%M:%SZ)
GPU_SLUG=$(printf '%s' "$GPU" | tr -c 'A-Za-z0-9._-' '-' | tr -s '-' | sed 's/^-//; s/-$//')
stem="$OUT_DIR/$DATE-$GPU_SLUG"
n=2; base=$stem
while [ -e "$stem.md" ] || [ -e "$stem" ]; do stem="$base-$n"; n=$((n + 1)); done
REPORT="$stem.md"
LOGS="$stem"
mkdir -p "$LOGS" || die "cannot create $LOGS"
BATON_VERSION=$(run_baton && "$BATON" --version 2>&1 | head -1)
TORCH_VERSION=$(run_torch && "$PYTHON" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null)
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "gpu-bench: $GPU | driver, memory: ${DRIVER:-?} | $STAMP | baton: ${BATON_VERSION:-not run} | torch: ${TORCH_VERSION:-not run} | commit $COMMIT"

q() { printf '%q ' "$@" | sed 's/ $//'; }            # a command line as one shell-quoted string
num() { awk -v x="$1" -v f="$2" 'BEGIN { if (x == "") print "-"; else printf(f, x) }'; }
BATON_ARGS=()
set_baton_args() { BATON_ARGS=("$BATON" bench "configs/gpt2-$1.toml" --set 'precision.device="cuda"'
  --set 'precision.compute="bf16"' --set "train.micro_batch=$2" --set "train.global_batch=$(($2 * $3))"
  --warmup "$4" --steps "$5"); }
TORCH_ARGS=()
set_torch_args() { TORCH_ARGS=("$PYTHON" tests/bench/pytorch_gpt2.py --model "$1" --micro-batch "$2"
  --grad-accum "$3" --warmup "$4" --steps "$5" --json "$6"); }

# baton's model FLOPs per step (src/train/observe/metrics.cpp): 72*B*s*l*h^2*(1 + s/6h + V/12lh).
flops_per_step() {  # size global_batch
  awk -v B="$2" -v s=$SEQ -v l="${LAYERS[$1]}" -v h="${DMODEL[$1]}" -v V=$VPAD \
    'BEGIN { printf("%.17g", 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h))) }'
}

# ---- baton's output (src/app/bench.cpp; log lines on stdout, errors as `error: ...` on stderr) ----
#   bench: W warm-up + N timed steps on synthetic tokens | T tokens/step | loss a -> b
#   step time: median X ms, min Y ms (over N timed steps)
#   throughput: 12.34k tokens/s | 123.456 TFLOP/s per device (1 device, ...)
#   mfu: 41.2% of the 989 TFLOP/s peak of NAME    |    mfu: not reported: ...
# tokens/s is printed rounded (human_rate: 3-4 digits), TFLOP/s with 3 decimals: tokens/s is
# recomputed from TFLOP/s by baton's FLOPs formula (tokens/s = TFLOP/s * 1e12 * tokens/step /
# FLOPs/step, exact as both come from the same sum of step times) after checking that the formula
# gives the "flops: ... per step" line's value; else the printed rate is used.
parse_baton() {  # log size global_batch -> sets B_TOKS B_MFU B_MEDIAN B_NOTE
  local log=$1 part tps_h tflops tokens printed_flops flops
  part=$(sed -n '/^=== timed run/,$p' "$log")
  B_TOKS=""; B_MFU=""; B_MEDIAN=""; B_NOTE=""
  tps_h=$(sed -n 's/^.*throughput: \([0-9.]*[kM]\{0,1\}\) tokens\/s.*$/\1/p' <<<"$part" | tail -1)
  tflops=$(sed -n 's/^.*throughput: .* | \([0-9.]*\) TFLOP\/s per device.*$/\1/p' <<<"$part" | tail -1)
  tokens=$(sed -n 's/^.*bench: .* | \([0-9]*\) tokens\/step.*$/\1/p' <<<"$part" | tail -1)
  printed_flops=$(sed -n 's/^.*flops: .* = \([0-9.e+-]*\) per step.*$/\1/p' <<<"$part" | tail -1)
  B_MEDIAN=$(sed -n 's/^.*step time: median \([0-9.]*\) ms.*$/\1/p' <<<"$part" | tail -1)
  B_MFU=$(sed -n 's/^.*mfu: \([0-9.]*\)% of.*$/\1/p' <<<"$part" | tail -1)
  [ -n "$tps_h" ] || { B_NOTE="no throughput line"; return 1; }
  flops=$(flops_per_step "$2" "$3")
  if [ -n "$tflops" ] && [ -n "$tokens" ] && [ -n "$printed_flops" ] &&
     awk -v a="$printed_flops" -v b="$flops" -v t="$tflops" 'BEGIN { d = a / b - 1; exit !(d < 0.01 && d > -0.01 && t >= 1) }'; then
    B_TOKS=$(awk -v t="$tflops" -v k="$tokens" -v f="$flops" 'BEGIN { printf("%.1f", t * 1e12 * k / f) }')
  else
    B_TOKS=$(awk -v x="$tps_h" 'BEGIN { m = 1; if (x ~ /k$/) m = 1e3; if (x ~ /M$/) m = 1e6; sub(/[kM]$/, "", x); printf("%.1f", x * m) }')
    B_NOTE="tokens/s as printed (rounded)"
  fi
  return 0
}

# pytorch_gpt2.py --json: one key of the JSON file (empty when absent or null).
jget() { "$PYTHON" -c 'import json,sys
try: v = json.load(open(sys.argv[1])).get(sys.argv[2])
except Exception: v = None
print("" if v is None else v)' "$1" "$2"; }

# ---- --find-max: baton by doubling then bisection on "out of device memory" ----
baton_fits() {  # size b log -> 0 fits, 1 out of memory, 2 other failure
  local out rc
  set_baton_args "$1" "$2" 1 1 1
  echo "=== find-max: $(q "${BATON_ARGS[@]}")" >>"$3"
  out=$("${BATON_ARGS[@]}" 2>&1); rc=$?
  printf '%s\n' "$out" >>"$3"
  if [ $rc -eq 0 ]; then echo "  baton $1 micro-batch $2: fits"; return 0; fi
  if grep -qi 'out of device memory\|out of memory' <<<"$out"; then echo "  baton $1 micro-batch $2: out of memory"; return 1; fi
  echo "  baton $1 micro-batch $2: failed (rc $rc): $(grep -m1 '^error:' <<<"$out")"; return 2
}
baton_find_max() {  # size start log -> prints the largest micro-batch that fits (0: none / failure)
  local s=$1 b=$2 log=$3 lo=0 hi=0 r cap=1024
  while :; do
    baton_fits "$s" "$b" "$log" >&2; r=$?
    if [ $r -eq 0 ]; then lo=$b; [ "$b" -ge $cap ] && break; b=$((b * 2)); [ $b -gt $cap ] && b=$cap
    elif [ $r -eq 1 ]; then hi=$b; break
    else echo 0; return; fi
  done
  if [ "$hi" -gt 0 ] && [ "$lo" -eq 0 ]; then  # the start did not fit: halve until one does
    b=$((hi / 2))
    while [ $b -ge 1 ]; do
      baton_fits "$s" "$b" "$log" >&2; r=$?
      [ $r -eq 0 ] && { lo=$b; break; }
      [ $r -eq 2 ] && { echo 0; return; }
      hi=$b; b=$((b / 2))
    done
  fi
  while [ "$lo" -ge 1 ] && [ "$hi" -gt 0 ] && [ $((hi - lo)) -gt 1 ]; do
    b=$(((lo + hi) / 2))
    baton_fits "$s" "$b" "$log" >&2; r=$?
    if [ $r -eq 0 ]; then lo=$b; elif [ $r -eq 1 ]; then hi=$b; else echo 0; return; fi
  done
  echo "$lo"
}

# ---- the runs ----
declare -A R_MB R_ACC R_BT R_BMFU R_BMED R_BNOTE R_PT R_PMFU R_PMED R_PMEM R_BMAX R_PMAX R_BCMD R_PCMD R_BRC R_PRC
for s in $SIZES; do
  b=${MB[$s]}; a=${ACCUM[$s]}
  blog="$LOGS/baton-$s.log"; plog="$LOGS/pytorch-$s.log"; pjson="$LOGS/pytorch-$s.json"
  : >"$blog"; : >"$plog"
  if [ $FIND_MAX -eq 1 ]; then
    echo "== $s: finding the largest micro-batch (from $b)"
    if run_baton; then R_BMAX[$s]=$(baton_find_max "$s" "$b" "$blog"); echo "  baton $s: largest micro-batch ${R_BMAX[$s]}"; fi
    if run_torch; then
      echo "=== find-max: $(q "$PYTHON" tests/bench/pytorch_gpt2.py --model "$s" --find-max-batch --micro-batch "$b")" >>"$plog"
      PYTHONUNBUFFERED=1 "$PYTHON" tests/bench/pytorch_gpt2.py --model "$s" --find-max-batch --micro-batch "$b" 2>&1 | tee -a "$plog" | grep 'find-max-batch:'
      R_PMAX[$s]=$(sed -n 's/^RESULT .*"max_micro_batch": \([0-9]*\).*$/\1/p' "$plog" | tail -1)
      R_PMAX[$s]=${R_PMAX[$s]:-0}
      echo "  PyTorch $s: largest micro-batch ${R_PMAX[$s]}"
    fi
    # The same micro-batch on both sides: the smaller of the two maxima (0 = a search failed).
    nb=0
    for m in "${R_BMAX[$s]:-}" "${R_PMAX[$s]:-}"; do
      [ -n "$m" ] && [ "$m" -gt 0 ] && { [ "$nb" -eq 0 ] || [ "$m" -lt "$nb" ]; } && nb=$m
    done
    if [ "$nb" -gt 0 ]; then b=$nb; else echo "  $s: no maximum found; timing at micro-batch $b"; fi
  fi
  R_MB[$s]=$b; R_ACC[$s]=$a
  gb=$((b * a))
  [ $SEARCH_ONLY -eq 1 ] && continue
  if run_baton; then
    set_baton_args "$s" "$b" "$a" "$WARMUP" "$STEPS"
    R_BCMD[$s]=$(q "${BATON_ARGS[@]}")
    echo "== baton $s: ${R_BCMD[$s]}"
    echo "=== timed run: ${R_BCMD[$s]}" >>"$blog"
    bjson=$(mktemp)  # baton bench --json: the figures unrounded (kept out of OUT_DIR)
    "${BATON_ARGS[@]}" --json "$bjson" >>"$blog" 2>&1; R_BRC[$s]=$?
    grep -E 'throughput:|mfu:|step time:|^error:|^hint:' <(sed -n '/^=== timed run/,$p' "$blog") | sed 's/^/  /'
    if [ "${R_BRC[$s]}" -eq 0 ] && [ -s "$bjson" ]; then
      R_BT[$s]=$(jget "$bjson" tokens_per_s); R_BMED[$s]=$(jget "$bjson" step_ms_median); R_BNOTE[$s]=""
      R_BMFU[$s]=$(awk -v m="$(jget "$bjson" mfu)" 'BEGIN { if (m != "") printf("%.1f", 100 * m) }')
    elif [ "${R_BRC[$s]}" -eq 0 ] && parse_baton "$blog" "$s" "$gb"; then
      R_BT[$s]=$B_TOKS; R_BMFU[$s]=$B_MFU; R_BMED[$s]=$B_MEDIAN; R_BNOTE[$s]=$B_NOTE
    else
      R_BNOTE[$s]="failed (rc ${R_BRC[$s]}): $(grep -m1 '^error:' "$blog" | cut -c1-160)"
    fi
  fi
  if run_torch; then
    set_torch_args "$s" "$b" "$a" "$WARMUP" "$STEPS" "$pjson"
    R_PCMD[$s]=$(q "${TORCH_ARGS[@]}")
    echo "== PyTorch $s: ${R_PCMD[$s]}"
    echo "=== timed run: ${R_PCMD[$s]}" >>"$plog"
    rm -f "$pjson"
    PYTHONUNBUFFERED=1 "${TORCH_ARGS[@]}" >>"$plog" 2>&1; R_PRC[$s]=$?
    grep -E '^(throughput|mfu|step time|memory):|Error|error:' <(sed -n '/^=== timed run/,$p' "$plog") | tail -6 | sed 's/^/  /'
    if [ "${R_PRC[$s]}" -eq 0 ] && [ -s "$pjson" ]; then
      R_PT[$s]=$(jget "$pjson" tokens_per_s); R_PMFU[$s]=$(jget "$pjson" mfu)
      R_PMED[$s]=$(jget "$pjson" median_step_ms); R_PMEM[$s]=$(jget "$pjson" peak_memory_gib)
      [ -n "${R_PMFU[$s]}" ] && R_PMFU[$s]=$(awk -v x="${R_PMFU[$s]}" 'BEGIN { printf("%.1f", 100 * x) }')
    fi
  fi
done

# ---- the table and the report ----
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf("%.2f", a / b) }'; }
goal() { [ -n "$1" ] && awk -v r="$1" 'BEGIN { print (r >= 1.1 ? "meets 1.1x" : "below 1.1x") }'; }
pct() { [ -n "$1" ] && printf '%s%%' "$1" || printf -- '-'; }
TABLE="| model | micro-batch x accum (seq/step) | baton tok/s | PyTorch tok/s | ratio baton/PyTorch | goal | baton MFU | PyTorch MFU | baton median step ms | PyTorch median step ms | PyTorch peak GiB |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
DOCROWS=""
for s in $SIZES; do
  r=$(ratio "${R_BT[$s]:-}" "${R_PT[$s]:-}")
  TABLE+=$'\n'"| $s | ${R_MB[$s]} x ${R_ACC[$s]} ($((R_MB[$s] * R_ACC[$s]))) | $(num "${R_BT[$s]:-}" %.0f) | $(num "${R_PT[$s]:-}" %.0f) | ${r:--} | $(goal "$r" || echo -) | $(pct "${R_BMFU[$s]:-}") | $(pct "${R_PMFU[$s]:-}") | $(num "${R_BMED[$s]:-}" %.1f) | $(num "${R_PMED[$s]:-}" %.1f) | $(num "${R_PMEM[$s]:-}" %.1f) |"
  DOCROWS+="| $DATE | $GPU | $s | ${R_MB[$s]} x ${R_ACC[$s]} | $(num "${R_BT[$s]:-}" %.0f) | $(num "${R_PT[$s]:-}" %.0f) | ${r:--} | $(pct "${R_BMFU[$s]:-}") | $(pct "${R_PMFU[$s]:-}") |"$'\n'
done

{
  echo "# baton vs PyTorch: GPT-2 training throughput on $GPU"
  echo
  echo "- date: $STAMP"
  echo "- GPU: $GPU (driver, memory: ${DRIVER:-unknown})"
  echo "- baton: ${BATON_VERSION:-not run} ($BATON), commit $COMMIT"
  echo "- PyTorch: ${TORCH_VERSION:-not run}"
  echo "- both: bf16 compute with fp32 master weights, AdamW, grad clip 1.0, seq 1024, vocab 50257 padded"
  echo "  to 50304, synthetic uniform tokens, $WARMUP warm-up + $STEPS timed steps, each step timed between"
  echo "  device synchronisations; tokens/s over the sum of the timed steps; TFLOP/s and MFU by baton's"
  echo "  PTD-P formula against 989 TFLOP/s (H100/H200) or 312 (A100)"
  echo "- goal (issue 6): baton tokens/s >= 1.1x PyTorch's at the largest micro-batch that fits"
  echo
  [ $SEARCH_ONLY -eq 0 ] && { echo "$TABLE"; echo; }
  for s in $SIZES; do
    echo "## $s"
    echo
    if [ $SEARCH_ONLY -eq 1 ]; then
      echo "largest micro-batch found: baton ${R_BMAX[$s]:-not searched}, PyTorch ${R_PMAX[$s]:-not searched} (search only: time both at ${R_MB[$s]} with --mb-$s ${R_MB[$s]})"
      echo
      continue
    elif [ $FIND_MAX -eq 1 ]; then
      echo "largest micro-batch found: baton ${R_BMAX[$s]:-not searched}, PyTorch ${R_PMAX[$s]:-not searched}; timed at ${R_MB[$s]} on both"
      echo
    else
      echo "micro-batch ${R_MB[$s]} given (not searched: run with --find-max to check it is the largest that fits)"
      echo
    fi
    echo '```sh'
    [ -n "${R_BCMD[$s]:-}" ] && echo "${R_BCMD[$s]}"
    [ -n "${R_PCMD[$s]:-}" ] && echo "${R_PCMD[$s]}"
    echo '```'
    echo
    [ -n "${R_BNOTE[$s]:-}" ] && { echo "baton: ${R_BNOTE[$s]}"; echo; }
    if run_baton; then
      echo "baton output (timed run):"; echo; echo '```'
      sed -n '/^=== timed run/,$p' "$LOGS/baton-$s.log" | sed 1d | tail -40; echo '```'; echo
    fi
    if run_torch; then
      echo "PyTorch output (timed run):"; echo; echo '```'
      sed -n '/^=== timed run/,$p' "$LOGS/pytorch-$s.log" | sed 1d | grep -v '^RESULT' | tail -20; echo '```'; echo
    fi
  done
  if [ $SEARCH_ONLY -eq 0 ]; then
    echo "Rows for docs/benchmarks.md:"
    echo
    echo '```'
    printf '%s' "$DOCROWS"
    echo '```'
    echo
  fi
  echo "Logs: $LOGS/"
} >"$REPORT"

echo
echo "$GPU | $STAMP"
[ $SEARCH_ONLY -eq 0 ] && echo "$TABLE"
echo
echo "report: $REPORT (logs in $LOGS/)"
ok=1
[ $SEARCH_ONLY -eq 1 ] && for s in $SIZES; do
  echo "$s: largest micro-batch: baton ${R_BMAX[$s]:-not searched}, PyTorch ${R_PMAX[$s]:-not searched} -> --mb-$s ${R_MB[$s]}"
  [ "${R_BMAX[$s]:-1}" != 0 ] && [ "${R_PMAX[$s]:-1}" != 0 ] || ok=0
done
[ $SEARCH_ONLY -eq 0 ] && for s in $SIZES; do
  if run_baton && [ -z "${R_BT[$s]:-}" ]; then ok=0; fi
  if run_torch && [ -z "${R_PT[$s]:-}" ]; then ok=0; fi
done
[ $ok -eq 1 ] || { echo "some runs failed: see the logs" >&2; exit 1; }
