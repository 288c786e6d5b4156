#!/usr/bin/env bash
# Virtual workers on the one runtime (issue 21; docs/hetpipe.md "Stopping a run"): what the main
# loop gives, VW runs get.
# - (a) SIGTERM to launch/mpirun.sh running 2 VWs x 2 stages under WSP: the VWs agree on a wave's
#   end through the stop board, their pipelines drain there (the hetpipe program is cut), all meet,
#   save and exit 130 within 10 s; with D = 0 and Nm = 1 (a run that does not depend on timing) the
#   checkpoint resumes bit for bit: its continuation equals an uninterrupted run's steps;
# - (b) the same for one-rank VWs with D = 1, Nm = 2 (the stop lands on a wave's end whose clock
#   pulls), and for the wave all-reduce (agreed with a wave's all-reduce);
# - (c) SIGSTOP of one VW's rank with run.stall_timeout_s = 5: the job ends within 30 s, naming the
#   stopped rank, the other waiting in a parameter server pull;
# - (d) an unwritable checkpoint dir is refused before the first minibatch;
# - (e) run.trace of 2 VWs x 2 stages: push, pull and server-wait events on every rank.
source "$(dirname "$0")/lib.sh"
use_mpirun
make_tiny_dataset
write_tiny_config
SGD=("${PLAIN_SGD[@]}")
VW22=(--set hetero.sync='"wsp"' --set hetero.virtual_workers='["0,1", "2,3"]' --set train.micro_batch=4
      --set optim.lr=0.2)
export BATON OVERSUBSCRIBE=1

# launch/mpirun.sh N ARGS... in the background until `lines` steps are in DIR's metrics, then
# SIGTERM to the script; sets RC and TOOK (seconds from the signal to the exit).
term_after() {
  local n=$1 dir=$2 lines=$3; shift 3
  bash "$SRC/launch/mpirun.sh" "$n" tiny.toml "$@" --set run.dir="$dir" > "$dir.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 300); do
    [ "$(cat "$dir"/metrics*.jsonl 2>/dev/null | wc -l)" -ge "$lines" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  local t0
  t0=$(date +%s.%N)
  kill -TERM "$pid"
  RC=0
  timeout 60 tail --pid="$pid" -f /dev/null || { kill -9 "$pid"; fail "$dir: no exit within 60 s of SIGTERM"; }
  wait "$pid" || RC=$?
  TOOK=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
}

# The step of the newest WSP marker in DIR's checkpoint dir.
marker_step() { python3 -c "import glob, json; print(max(json.load(open(f))['step'] for f in glob.glob('$1/ckpt/wsp-*.json')))"; }

# (a) 2 VWs x 2 stages, D = 0, Nm = 1.
term_after 4 sig 6 "${SGD[@]}" "${VW22[@]}" --set train.steps=3000
[ "$RC" -eq 130 ] || { cat sig.log; fail "2 VWs x 2 stages: exit $RC after SIGTERM, not 130"; }
python3 -c "import sys; sys.exit(0 if $TOOK <= 10 else 1)" || { cat sig.log; fail "2 VWs x 2 stages: $TOOK s from SIGTERM to the exit"; }
S=$(marker_step sig)
grep -q "stop requested (signal 15): stopping after step $S" sig.log || { cat sig.log; fail "no stop line at step $S"; }
echo "(a) SIGTERM: 2 VWs x 2 stages stopped at step $S with a checkpoint, exit 130 after $TOOK s"
"${MPIRUN[@]}" 4 "$BATON" train tiny.toml "${SGD[@]}" "${VW22[@]}" --set train.steps=$((S + 4)) --set run.dir=sig \
  > sig2.log 2>&1 || { cat sig2.log; fail "resume after SIGTERM"; }
grep -q "resumed WSP at step $S" sig2.log || { cat sig2.log; fail "no resume at step $S"; }
"${MPIRUN[@]}" 4 "$BATON" train tiny.toml "${SGD[@]}" "${VW22[@]}" --set train.steps=$((S + 4)) --set run.dir=full \
  > full.log 2>&1 || { cat full.log; fail "uninterrupted run"; }
python3 - "$S" <<'PY'
import json, sys
S = int(sys.argv[1])
for f in ("metrics.jsonl", "metrics-vw1.jsonl"):
    a = {r["step"]: r["loss"] for r in map(json.loads, open(f"sig/{f}"))}
    b = {r["step"]: r["loss"] for r in map(json.loads, open(f"full/{f}"))}
    assert sorted(a) == sorted(b) == list(range(1, S + 5)), (f, sorted(a)[-3:], sorted(b)[-3:])
    assert all(a[s] == b[s] for s in b), f"{f}: the resumed run differs: " + str([(s, a[s], b[s]) for s in b if a[s] != b[s]][:3])
print(f"(a) stopped at {S} + resumed 4 steps = the uninterrupted {S + 4} steps, bit for bit (both VWs)")
PY

# (b) One-rank VWs with staleness (the stop at a pulling wave's end), and the wave all-reduce.
term_after 3 sig3 9 "${SGD[@]}" --set hetero.sync='"wsp"' --set hetero.staleness=1 --set hetero.nm=2 \
  --set train.global_batch=12 --set train.steps=3000 --set optim.lr=0.15
[ "$RC" -eq 130 ] || { cat sig3.log; fail "3 VWs, D = 1: exit $RC after SIGTERM"; }
S3=$(marker_step sig3)
[ $((S3 % 2)) -eq 0 ] && [ "$S3" -ge 4 ] || fail "3 VWs, D = 1, Nm = 2: stopped at step $S3, not at a pulling wave's end"
for f in sig3/metrics.jsonl sig3/metrics-vw1.jsonl sig3/metrics-vw2.jsonl; do
  last=$(tail -1 "$f" | python3 -c "import json, sys; print(json.load(sys.stdin)['step'])")
  [ "$last" -eq "$S3" ] || fail "$f ends at step $last, the checkpoint is at $S3"
done
term_after 2 sigar 6 "${SGD[@]}" --set hetero.sync='"allreduce"' --set hetero.nm=2 --set train.steps=3000
[ "$RC" -eq 130 ] || { cat sigar.log; fail "allreduce: exit $RC after SIGTERM"; }
SA=$(marker_step sigar)
[ $((SA % 2)) -eq 0 ] || fail "allreduce: stopped at step $SA, not at a wave's end"
echo "(b) SIGTERM: 3 one-rank VWs (D = 1, Nm = 2) stopped at wave end $S3 in $TOOK s; the all-reduce at wave end $SA"

# (c) SIGSTOP of VW 1's rank: the other blocks in a pull; the watchdog ends the job naming rank 1.
# Unbounded steps at a gentle lr: PLAIN_SGD's 0.4 diverges after ~500 steps (the divergence guard
# then ends the run before the stall can be staged), how many depends on the last bits of the ops.
rm -rf st
start=$(date +%s)
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" --set hetero.sync='"wsp"' --set train.steps=100000000 \
  --set optim.lr=0.05 --set train.log_every=100000000 --set run.stall_timeout_s=5 --set run.dir=st > st.log 2> st.err &
pid=$!
victim=$(stop_rank st 1) || { cat st.err; fail "no rank 1 process"; }
rc=0
timeout 60 tail --pid="$pid" -f /dev/null || { kill -9 "$victim" "$pid" 2>/dev/null; fail "the job did not end within 60 s"; }
wait "$pid" || rc=$?
kill -9 "$victim" 2>/dev/null || true
took=$(( $(date +%s) - start ))
[ "$rc" -ne 0 ] && [ "$took" -le 30 ] || { cat st.err; fail "SIGSTOP: exit $rc after $took s"; }
grep -q "^error: no progress for [0-9]* s (limit 5 s): rank 1 (its last heartbeat is [0-9]* s old: .*) stopped responding; rank 0: step [0-9]*, training, in parameter server pull with every virtual worker's wave" st.err ||
  { cat st.err; fail "SIGSTOP: no report naming rank 1 and the pull rank 0 waits in"; }
echo "(c) SIGSTOP of VW 1's rank: the job ended in ${took} s naming it: $(grep '^error' st.err | cut -c1-160)..."

# (d) A checkpoint dir that cannot be created: refused before the first minibatch, every VW's.
echo "a file" > plain
expect_error "checkpoint.dir = plain/ckpt/vw0 cannot be created" timeout 60 "${MPIRUN[@]}" 2 "$BATON" train tiny.toml \
  "${SGD[@]}" --set hetero.sync='"wsp"' --set run.dir=ro --set checkpoint.dir='"plain/ckpt"'
[ ! -s ro/metrics.jsonl ] || fail "a minibatch ran before the unwritable checkpoint dir was refused"
echo "(d) an unwritable checkpoint dir: refused before the first minibatch"

# (e) run.trace of 2 VWs x 2 stages.
"${MPIRUN[@]}" 4 "$BATON" train tiny.toml "${SGD[@]}" "${VW22[@]}" --set train.steps=4 --set run.trace=true \
  --set run.dir=tr > tr.log 2>&1 || { cat tr.log; fail "run.trace with virtual workers"; }
grep -q "trace: tr/trace.json (.* events of steps 1-4 on 4 ranks" tr.log || { cat tr.log; fail "no trace line"; }
python3 - <<'PY'
import json
events = json.load(open("tr/trace.json"))["traceEvents"]
for rank in range(4):
    names = {e["name"] for e in events if e.get("pid") == rank and e.get("ph") == "X"}
    for want in ("push", "merge a pull", "wait for the server"):
        assert want in names, f"rank {rank}: no '{want}' event (has {sorted(names)[:12]})"
    assert any(n.startswith("F") for n in names) and any(n.startswith("B") for n in names), f"rank {rank}: no compute"
print("(e) run.trace, 2 VWs x 2 stages: compute, push, pull and server-wait events on all 4 ranks")
PY
echo "PASS"
