#!/usr/bin/env bash
# A diverged run (NaN loss) ends with one clear error, never a hang: on one rank, and on four ranks
# (tp 2 x dp 2), where every rank detects it at the same update and the job prints it once
# (core/error.h AgreedError), not once per rank (issue 15, item 8).
source "$(dirname "$0")/lib.sh"
use_mpirun
make_tiny_dataset
write_tiny_config
blowup=(--set optim.lr=1e30 --set optim.warmup_steps=0)

rc=0
timeout 60 "$BATON" train tiny.toml "${blowup[@]}" --set run.dir=one > one.log 2> one.err || rc=$?
[ "$rc" -eq 1 ] || { cat one.err; fail "one rank: exit $rc, want 1"; }
[ "$(grep -c '^error: ' one.err)" -eq 1 ] || { cat one.err; fail "one rank: not one error line"; }
grep -q "^error: training diverged at step 2 " one.err || { cat one.err; fail "one rank: error line"; }
grep -q "^hint: lower optim.lr" one.err || { cat one.err; fail "one rank: hint"; }

rc=0
start=$(date +%s)
timeout 60 "${MPIRUN[@]}" 4 "$BATON" train tiny.toml "${blowup[@]}" --set parallel.tp=2 --set run.dir=four \
  > four.log 2> four.err || rc=$?
took=$(( $(date +%s) - start ))
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat four.err; fail "four ranks: exit $rc (124 = hung)"; }
[ "$(grep -c '^error: ' four.err)" -eq 1 ] || { cat four.err; fail "four ranks: $(grep -c '^error: ' four.err) error lines, want 1"; }
grep -q "^error: training diverged at step 2 .*(every rank)" four.err || { cat four.err; fail "four ranks: error line"; }
[ "$took" -le 20 ] || fail "four ranks took $took s to end"
echo "PASS (four ranks ended in ${took}s)"
