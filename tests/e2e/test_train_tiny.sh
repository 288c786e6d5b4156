#!/usr/bin/env bash
# A tiny GPT trains end to end: data build -> train (loss falls, validation runs, metrics.jsonl and
# the resolved config are written) -> generate; Ctrl-C stops cleanly after the current step.
source "$(dirname "$0")/lib.sh"

source "$(dirname "$0")/lib_checkpoint.sh"
make_tiny_run  # tiny-train/valid datasets, tokenizer and tiny.toml (run dir "run")
# Longer than the checkpoint tests' run: 60 steps, logging every 10, validation every 20.
TINY=(--set train.steps=60 --set train.log_every=10 --set train.eval_every=20 --set checkpoint.every=0)

"$BATON" train tiny.toml "${TINY[@]}" > train.log
cat train.log
[ -f run/config.toml ] || fail "resolved config not written"
[ -z "$(find run -name 'events.out.tfevents.*')" ] || fail "run.tensorboard is off by default, yet events were written"
[ "$(cat run/ckpt/latest)" = "step-0000060.h5" ] || fail "final checkpoint not written"
[ -f run/ckpt/step-0000060.h5 ] || fail "latest names a missing file"
grep -q "^sample: " train.log || fail "no sample printed"
python3 - <<'PY'
import json
rows = [json.loads(l) for l in open("run/metrics.jsonl")]
keys = {"step", "loss", "lr", "grad_norm", "step_ms", "tokens_per_s", "tflops_per_gpu", "mfu"}
assert all(keys <= set(r) for r in rows), "missing keys"
evals = [r for r in rows if "val_loss" in r]
assert [r["step"] for r in evals] == [20, 40, 60], evals
first, last = rows[0]["loss"], rows[-1]["loss"]
assert last < first - 1.0, (first, last)
assert evals[-1]["val_loss"] < evals[0]["val_loss"], evals
print("metrics ok: loss", first, "->", last, "val", [r["val_loss"] for r in evals])
PY

# The resolved config reproduces the run's settings and is itself a valid config.
"$BATON" train run/config.toml --set train.steps=1 --set run.dir=run2 > /dev/null

# generate loads the weights and continues a prompt.
"$BATON" generate --checkpoint run/ckpt --prompt "The cat" --tokens 12 --seed 3 > gen.txt
grep -q "^The cat" gen.txt || { cat gen.txt; fail "generate did not continue the prompt"; }
"$BATON" generate --checkpoint run/ckpt --prompt "The cat" --tokens 12 --seed 3 > gen2.txt
cmp -s gen.txt gen2.txt || fail "same seed gave different samples"
expect_error "nowhere.h5" "$BATON" generate --checkpoint nowhere.h5 --prompt "x"

# Ctrl-C (SIGINT) stops after the current step, saves, exits 130.
"$BATON" train tiny.toml "${TINY[@]}" --set train.steps=100000 --set run.dir=run3 > run3.log 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "^step" run3.log 2>/dev/null && break; sleep 0.1; done
kill -INT $pid
rc=0; wait $pid || rc=$?
[ "$rc" -eq 130 ] || { cat run3.log; fail "SIGINT exit code $rc, want 130"; }
grep -q "stop requested" run3.log || fail "no stop message"
grep -q "^saved step-" run3.log || fail "no checkpoint saved after SIGINT"
[ -f "run3/ckpt/$(cat run3/ckpt/latest)" ] || fail "no checkpoint after SIGINT"
echo "PASS"
