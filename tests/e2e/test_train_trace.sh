#!/usr/bin/env bash
# run.trace (issue 15 item 9): a pp = 2 1f1b run of 2 steps of 4 micro-batches writes one
# Chrome-trace JSON, <run.dir>/trace.json: every rank a process with its tracks, its F/B events of
# each step in the order of the lowered program `baton schedule` prints for that rank, timestamps
# increasing and spans disjoint per track, receive waits, reductions, optimizer steps, evaluation
# and checkpoint spans, and the simulator's prediction beside them; the log says where it is and
# how to open it. run.trace_steps bounds the steps recorded; without run.trace there is no file;
# run.trace_steps alone is an error. (Virtual workers' traces: e2e/test_train_vw_runtime.sh.)
source "$(dirname "$0")/lib.sh"
use_mpirun
make_tiny_dataset
write_tiny_config
TRACE=(--set train.steps=2 --set checkpoint.every=1 --set data.valid='"tiny"' --set train.eval_every=1
       --set train.eval_steps=1)

"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${TRACE[@]}" --set parallel.pp=2 --set run.trace=true \
  --set run.dir=pp2 > pp2.log
grep -q "^.*trace: pp2/trace.json (.* events of steps 1-2 on 2 ranks" pp2.log || { cat pp2.log; fail "no trace line"; }
grep -q "ui.perfetto.dev" pp2.log || fail "the log does not say how to open the trace"
grep -o "idle share per rank .*)" pp2.log
"$BATON" schedule --kind 1f1b --pp 2 --microbatches 4 > schedule.txt

python3 - <<'PY' || fail "trace.json does not show what ran"
import json, re
t = json.load(open("pp2/trace.json"))
ev = t["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
assert names[0] == "rank 0: stage 0, group 0" and names[1] == "rank 1: stage 1, group 0", names
predicted = [p for p, n in names.items() if n.startswith("predicted")]
assert sorted(predicted) == [2, 3], names
xs = [e for e in ev if e["ph"] == "X"]
# The program each rank runs, from the schedule generator: its compute ops in order ("0F1s1" -> F1).
want = {}
for line in open("schedule.txt"):
    m = re.match(r"rank (\d+): (.*)", line)
    if m:
        want[int(m.group(1))] = [re.match(r"\d+([FB])(\d+)", tok).expand(r"\1\2") for tok in m.group(2).split()]
assert len(want) == 2 and len(want[0]) == 8, want
for r in (0, 1):
    mine = [e for e in xs if e["pid"] == r]
    for step in (1, 2):
        fb = [e["name"] for e in mine if e["tid"] == 0 and e["args"]["step"] == step]
        assert fb == want[r], (r, step, fb, want[r])
        cats = {e["cat"] for e in mine if e["args"]["step"] == step}
        for c in ("REDUCE_GRADS", "OPT_STEP", "SEND_ACT" if r == 0 else "RECV_ACT", "LOAD"):
            assert c in cats, (r, step, c, cats)
    spans = [e["name"] for e in mine if e["tid"] == 5]
    assert spans == ["step 1", "evaluation", "checkpoint", "step 2", "evaluation", "checkpoint"], spans
    # One thread runs each track: starts increase and spans do not overlap (0.002 us of rounding).
    for tid in {e["tid"] for e in mine}:
        track = [e for e in mine if e["tid"] == tid]
        for a, b in zip(track, track[1:]):
            assert a["ts"] < b["ts"] and a["ts"] + a["dur"] <= b["ts"] + 0.002, (r, tid, a, b)
# Rank 1 (the last stage) waits for its first activation: a receive wait on track 1.
assert any(e["pid"] == 1 and e["tid"] == 1 and e["name"] == "RECV_ACT0" for e in xs)
# The prediction: each step's 8 compute ops per pipeline rank, drawn at the step's start.
for p in predicted:
    fb = [e["name"] for e in xs if e["pid"] == p and e["tid"] == 0]
    assert fb == want[p - 2] * 2, (p, fb)
print("trace ok:", len(xs), "events")
PY

# run.trace_steps = 1 on one rank: only step 1; without run.trace: no file.
"$BATON" train tiny.toml "${TRACE[@]}" --set run.trace=true --set run.trace_steps=1 --set run.dir=one > one.log
grep -q "trace: one/trace.json (.* events of steps 1-1 on 1 rank," one.log || { cat one.log; fail "trace_steps"; }
python3 - <<'PY' || fail "run.trace_steps = 1 recorded other steps"
import json
xs = [e for e in json.load(open("one/trace.json"))["traceEvents"] if e["ph"] == "X" and e["pid"] == 0]
assert xs and {e["args"]["step"] for e in xs} == {1}, {e["args"]["step"] for e in xs}
PY
"$BATON" train tiny.toml "${TRACE[@]}" --set run.dir=off > off.log
[ -f off/metrics.jsonl ] && [ ! -e off/trace.json ] || fail "run.trace = false wrote a trace (or the run failed)"
! grep -q "trace:" off.log || fail "run.trace = false logged a trace"

expect_error "run.trace_steps = 3 is set but run.trace = false" "$BATON" train tiny.toml --set run.trace_steps=3
echo "PASS"
