#!/usr/bin/env bash
# A stopped rank (SIGSTOP: a frozen node) used to stall the whole job forever, every other rank
# blocked in a collective. With run.stall_timeout_s the job ends within seconds of the limit with
# one report naming the rank that stopped and what the others wait on (issue 15, item 4): here
# rank 1, then rank 0 (the report then comes from rank 1); and a rank with no heartbeat at all.
source "$(dirname "$0")/lib.sh"
use_mpirun
make_tiny_dataset
write_tiny_config

for victim_rank in 1 0; do
  rm -rf st
  start=$(date +%s)
  "${MPIRUN[@]}" 2 "$BATON" train tiny.toml --set run.dir=st --set train.steps=100000000 --set train.log_every=100000000 \
    --set checkpoint.every=0 --set run.stall_timeout_s=4 > st.log 2> st.err &
  pid=$!
  victim=$(stop_rank st "$victim_rank") || { cat st.err; fail "no rank $victim_rank process"; }
  rc=0
  timeout 60 tail --pid="$pid" -f /dev/null || { kill -9 "$victim" "$pid" 2>/dev/null; fail "the job did not end within 60 s"; }
  wait "$pid" || rc=$?
  kill -9 "$victim" 2>/dev/null || true
  took=$(( $(date +%s) - start ))
  [ "$rc" -ne 0 ] || fail "a stalled job exited 0"
  [ "$(grep -c '^error: ' st.err)" -eq 1 ] || { cat st.err; fail "victim $victim_rank: not one error line"; }
  grep -q "^error: no progress for [0-9]* s (limit 4 s): rank $victim_rank (its last heartbeat is [0-9]* s old: step [0-9]*, .*) stopped responding; rank $((1 - victim_rank)): step [0-9]*, training, in [a-z_ ()]* with ranks 0,1 for [0-9]* s" st.err ||
    { cat st.err; fail "victim $victim_rank: report"; }
  grep -q "^hint: a stopped or hung process" st.err || fail "hint"
  echo "rank $victim_rank stopped: the job ended in ${took}s with one report"
done
# A rank stopped before its first heartbeat (it writes one a second after the watchdog starts;
# its file removed here stands for never written): named, not "no rank has stopped responding".
rm -rf st
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml --set run.dir=st --set train.steps=100000000 --set train.log_every=100000000 \
  --set checkpoint.every=0 --set run.stall_timeout_s=4 > st.log 2> st.err &
pid=$!
victim=$(stop_rank st 1) || { cat st.err; fail "no rank 1 process"; }
rm -f st/.heartbeat/rank-1
rc=0
timeout 60 tail --pid="$pid" -f /dev/null || { kill -9 "$victim" "$pid" 2>/dev/null; fail "the job did not end within 60 s"; }
wait "$pid" || rc=$?
kill -9 "$victim" 2>/dev/null || true
[ "$rc" -ne 0 ] || fail "a stalled job exited 0"
grep -q "^error: no progress for [0-9]* s (limit 4 s): rank 1 wrote no heartbeat: stopped before its first (or run.dir is not shared between the nodes); rank 0: step [0-9]*, training, in" st.err ||
  { cat st.err; fail "a rank without heartbeat: report"; }
echo "a rank without any heartbeat: named in the report"
echo "PASS"
