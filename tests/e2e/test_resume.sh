#!/usr/bin/env bash
# Exact resume and crash safety of `baton train` with real processes:
# - a run that crashes right after its checkpoint at step k and is resumed (checkpoint.resume =
#   "auto") logs bit-identical losses, grad norms, lrs and val losses to an uninterrupted run, and
#   ends in the same state (checksums): k = 10 (right after an eval step, 2 micro-batches per step)
#   and k = 7 (4 micro-batches per step, between eval and checkpoint cadences), and k = 5 with SGD
#   (Nesterov momentum), and k = 6 with GPT dropout;
# - kill -9 during a save (paused just before the rename) leaves `latest` at the previous
#   checkpoint, and auto-resume from it reaches the same end state.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_checkpoint.sh"
make_tiny_run

check_resume() {
  local k=$1; shift
  local ref=ref$k crash=crash$k
  "$BATON" train tiny.toml --set run.dir=$ref --set checkpoint.every=$k "$@" > $ref.log
  # "Crash" (_exit, no cleanup) right after checkpoint k is complete.
  local rc=0
  BATON_CKPT_FAIL_AT=before_prune@$k "$BATON" train tiny.toml --set run.dir=$crash \
    --set checkpoint.every=$k "$@" > $crash.log 2>&1 || rc=$?
  [ "$rc" -eq 86 ] || { cat $crash.log; fail "injected crash: exit $rc, want 86"; }
  [ "$(cat $crash/ckpt/latest)" = "$(printf 'step-%07d.h5' $k)" ] || fail "latest after crash"
  "$BATON" train tiny.toml --set run.dir=$crash --set checkpoint.every=$k "$@" > $crash-resumed.log
  grep -q "^resumed from $crash/ckpt/$(printf 'step-%07d.h5' $k) at step $k " $crash-resumed.log ||
    { cat $crash-resumed.log; fail "no 'resumed from ... at step $k' line"; }
  same_metrics $ref $crash || fail "k=$k: resumed run differs from the uninterrupted one"
  tensor_checksums $ref/ckpt > $ref.sums
  tensor_checksums $crash/ckpt > $crash.sums
  [ "$(wc -l < $ref.sums)" -gt 30 ] || fail "too few tensors listed"
  cmp -s $ref.sums $crash.sums || { diff $ref.sums $crash.sums | head; fail "k=$k: final states differ"; }
}
check_resume 10
check_resume 7 --set train.micro_batch=2
# SGD with Nesterov momentum: its momentum buffers (optim/momentum/<name>) resume bit for bit too.
check_resume 5 --set optim.kind=sgd --set optim.lr=0.05 --set optim.nesterov=true
grep -q "optim/momentum/wte" <(tensor_checksums ref5/ckpt) || fail "no momentum buffers in the SGD checkpoint"
# Hidden dropout: its masks are keyed by (seed, batch), so a resumed run draws the same ones.
check_resume 6 --set model.dropout=0.1

# kill -9 in the middle of the final save (step 20, checkpoint every 10).
BATON_CKPT_PAUSE_AT=before_rename@20 "$BATON" train tiny.toml --set run.dir=killed > killed.log 2>&1 &
pid=$!
wait_for killed.log "paused at before_rename"
kill -9 $pid
rc=0; wait $pid || rc=$?
[ "$rc" -eq 137 ] || fail "kill -9: exit $rc"
[ "$(cat killed/ckpt/latest)" = "step-0000010.h5" ] || fail "latest moved past the interrupted save"
[ -f killed/ckpt/step-0000020.h5.tmp ] || fail "expected the interrupted .tmp file"
[ ! -e killed/ckpt/step-0000020.h5 ] || fail "incomplete checkpoint published"
"$BATON" ckpt verify killed/ckpt > /dev/null || fail "previous checkpoint damaged"
"$BATON" train tiny.toml --set run.dir=killed > killed-resumed.log
grep -q "^resumed from killed/ckpt/step-0000010.h5 at step 10 " killed-resumed.log || fail "no resume after kill"
[ ! -e killed/ckpt/step-0000020.h5.tmp ] || fail "stale .tmp not cleaned"
same_metrics ref10 killed || fail "run resumed after kill -9 differs"
tensor_checksums killed/ckpt | cmp -s - ref10.sums || fail "state after kill -9 + resume differs"
echo PASS
