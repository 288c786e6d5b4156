#!/usr/bin/env bash
# `baton bench` (DESIGN §8): a tiny config with model.vocab_size and no data trains on synthetic
# tokens, prints throughput, TFLOP/s per device, MFU (or that the peak is unknown) and step times,
# writes no files; under mpirun with tp=2 it also reports the share of time in communication; a bad
# flag or a config without a vocabulary is an error with a hint.
source "$(dirname "$0")/lib.sh"
use_mpirun

cat > tiny.toml <<'TOML'
[model]
n_layer = 2
n_head = 4
d_model = 32
seq_len = 16
vocab_size = 300
[train]
global_batch = 8
micro_batch = 2
[run]
dir = "bench-run"
TOML

expect_fields() {
  local log=$1
  for want in "^bench: 2 warm-up \\+ 4 timed steps" "tokens/s" "TFLOP/s per device" \
              "step time: median [0-9.]+ ms, min [0-9.]+ ms" "^mfu: " \
              "^divergence guard \\(train.spike_\\*, as a training run would check\\): no step flagged$"; do
    grep -Eq "$want" "$log" || { cat "$log"; fail "no '$want' in $log"; }
  done
  grep -Eq "mfu: [0-9.]+% of|peak of .* is unknown" "$log" || { cat "$log"; fail "neither MFU nor an unknown peak"; }
}

"$BATON" bench tiny.toml --warmup 2 --steps 4 > one.log
expect_fields one.log
! grep -q "^comm:" one.log || fail "one rank should not report communication"
[ ! -e bench-run ] || fail "bench wrote the run directory"
[ "$(ls)" = "$(printf 'one.log\ntiny.toml')" ] || { ls; fail "bench wrote files"; }

"${MPIRUN[@]}" 2 "$BATON" bench tiny.toml --set parallel.tp=2 --warmup 2 --steps 4 > tp2.log
expect_fields tp2.log
grep -q "tp 2 x dp 1 x pp 1" tp2.log || { cat tp2.log; fail "layout not in the header"; }
grep -Eq "^comm: [0-9.]+% of step time blocked in communication" tp2.log || { cat tp2.log; fail "no comm share"; }
[ "$(grep -c "^throughput:" tp2.log)" -eq 1 ] || fail "rank 0 alone should print"
[ ! -e bench-run ] || fail "bench wrote the run directory"

# --json: the same figures, unrounded, from rank 0 only; tokens/s agrees with the printed rate.
"${MPIRUN[@]}" 2 "$BATON" bench tiny.toml --set parallel.tp=2 --warmup 1 --steps 3 --json b.json > j.log
python3 - <<'PY'
import json, re
j = json.load(open("b.json"))
for k in ["tokens_per_s", "step_ms_median", "tflops_per_device", "flops_per_step", "mfu", "ranks"]:
    assert k in j, f"no {k} in b.json"
assert j["ranks"] == 2 and j["layout"]["tp"] == 2 and j["timed_steps"] == 3, j
printed = re.search(r"throughput: ([0-9.]+)(k?) tokens/s", open("j.log").read())
rate = float(printed.group(1)) * (1000 if printed.group(2) else 1)
assert abs(rate - j["tokens_per_s"]) <= 0.01 * j["tokens_per_s"] + 1, (rate, j["tokens_per_s"])
job = j["tflops_per_device"] * j["ranks"] * 1e12 * j["tokens_per_step"] / j["flops_per_step"]
assert abs(job - j["tokens_per_s"]) <= 1e-6 * j["tokens_per_s"], (job, j["tokens_per_s"])
PY
expect_error "cannot write" "$BATON" bench tiny.toml --warmup 0 --steps 1 --json /nonexistent/dir/b.json

# A CNN benchmarks on random images of its shape (no dataset, even when the config names one):
# images/s, and TFLOP/s from the layers' FLOPs (3 × forward of the convolutions and linear layers).
make_tiny_images 64
write_tiny_cnn_config
"${MPIRUN[@]}" 2 "$BATON" bench cnn.toml --set parallel.pp=2 --set data.train='"missing.idx"' --warmup 1 --steps 3 \
  --json c.json > cnn.log
grep -Eq "^bench: 1 warm-up \+ 3 timed steps on synthetic images \| 16 images/step" cnn.log || { cat cnn.log; fail "CNN bench line"; }
grep -Eq "^throughput: [0-9.]+k? images/s" cnn.log || { cat cnn.log; fail "no images/s"; }
python3 - <<'PY'
import json
j = json.load(open("c.json"))
assert j["images_per_step"] == 16 and j["image_size"] == 12, j
# 3 × forward FLOPs × 16 images; forward: 2·C·R·S·K·P·Q per convolution (and 2·in·out for the fc)
# of the ResNet-18 of width 1/8 (channels 8, 16, 32, 64) on 12 px with the small-image stem.
def conv(c, k, r, h, stride):
    p = (h + 2 * (r // 2) - r) // stride + 1
    return 2 * c * r * r * k * p * p, p
fwd, h = conv(1, 8, 3, 12, 1)
c = 8
for k, stride in ((8, 1), (16, 2), (32, 2), (64, 2)):
    for b in range(2):
        s = stride if b == 0 else 1
        f1, h2 = conv(c, k, 3, h, s)
        f2, _ = conv(k, k, 3, h2, 1)
        fwd += f1 + f2 + (conv(c, k, 1, h, s)[0] if (s != 1 or c != k) else 0)
        c, h = k, h2
fwd += 2 * 64 * 10
assert j["flops_per_step"] == 3 * 16 * fwd, (j["flops_per_step"], 3 * 16 * fwd)
assert abs(j["tflops_per_device"] * 2e12 / j["flops_per_step"] - j["images_per_s"] / 16) <= 1e-6 * j["images_per_s"]
PY

# BATON_OP_TIMES=1: the op-time table over the timed steps (tiny: 2 layers, 4 micro-batches of 2 x 16
# tokens a step), and the same rows per step in the JSON; the model's FLOPs by op kind add up.
BATON_OP_TIMES=1 "$BATON" bench tiny.toml --warmup 1 --steps 2 --json ops.json > ops.log
grep -Eq "^op times \(BATON_OP_TIMES=1; rank 0's backend ops over its 2 timed steps, wall clock\)" ops.log \
  || { cat ops.log; fail "no op-time table"; }
for op in matmul_forward matmul_backward attention_forward adamw_step_segments "all ops" "rest of the step"; do
  grep -q "^$op " ops.log || { cat ops.log; fail "no '$op' row"; }
done
python3 - <<'PY'
import json
j = json.load(open("ops.json"))
ops = {r["op"]: r for r in j["op_times"]}
# Per step: 4 micro-batches x (2 blocks x (qkv, proj, fc, fc2) + the head) GEMMs forward.
mm = ops["matmul_forward"]["calls"] + ops.get("matmul_gelu_forward", {"calls": 0})["calls"]
assert mm == 4 * (2 * 4 + 1), ops
# Forward GEMM FLOPs of one micro-batch (2 x 16 rows): per block 2N(C*3C + C*C + C*4C + 4C*C), head 2N*C*V.
N, C, V = 32, 32, j.get("vocab_padded", 300)
fwd_flops = ops["matmul_forward"]["flops"] + ops.get("matmul_gelu_forward", {"flops": 0})["flops"]
blocks = 2 * 2 * N * (3 * C * C + C * C + 4 * C * C + 4 * C * C)
head = fwd_flops / 4 - blocks
assert head > 0 and abs(head / (2 * N * C) - round(head / (2 * N * C))) < 1e-9, (fwd_flops, blocks)
assert ops["adamw_step_segments"]["calls"] >= 1 and all(r["ms"] >= 0 for r in j["op_times"]), ops
PY
BATON_OP_TIMES=1 "$BATON" train tiny.toml --set train.steps=1 > train_ops.log 2>&1 || true  # no data: the note comes first
grep -q "BATON_OP_TIMES=1 is read by .baton bench." train_ops.log || { cat train_ops.log; fail "train: no note on BATON_OP_TIMES"; }
BATON_OP_TIMES=yes "$BATON" bench tiny.toml --warmup 0 --steps 1 > bad_ops.log 2>&1 && fail "BATON_OP_TIMES=yes accepted"
grep -q "^error: BATON_OP_TIMES=yes is not 0 or 1" bad_ops.log || { cat bad_ops.log; fail "BATON_OP_TIMES=yes: no error"; }

expect_error "not expected" "$BATON" bench tiny.toml --bogus
expect_error "not in range" "$BATON" bench tiny.toml --steps 0
expect_error "vocab_size is 0" "$BATON" bench tiny.toml --set model.vocab_size=0
echo "bench e2e ok"
