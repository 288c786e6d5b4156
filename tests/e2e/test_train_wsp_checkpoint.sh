#!/usr/bin/env bash
# Checkpoints of WSP runs with virtual workers of one rank each (issue 13 item 6; docs/hetpipe.md
# "Checkpoints and elastic resume", train/hetero/wsp_checkpoint.h):
# - a checkpoint makes every VW's weights w_global: all VWs' files of a step hold the same tensors;
# - resume with the same VWs is exact: with D = 0, Nm = 1 and two VWs (a WSP run that does not
#   depend on timing) 8 steps + a resumed 4 give every VW's losses of an uninterrupted 12-step run
#   bit for bit (SGD with momentum: the optimizer state is each VW's own, restored);
# - elastic resume: a 3-VW run's checkpoint continues on 2 VWs from the global weights;
# - a run with staleness (D = 2) checkpoints at its pulling clocks and resumes;
# - virtual workers of two stages (their pipelines drain at each checkpoint): the same bit-exact
#   resume, and an elastic restart onto other VWs with other stage boundaries (2 × 2 stages → a
#   VW of stages [0,1) [1,4) beside a one-stage VW); with ED-local placement (every stage its own
#   server client) 8 + 4 steps give the uninterrupted default-placement run's losses bit for bit;
# - the allreduce baseline: checkpoints at wave ends (every VW's weights alike), bit-exact resume
#   with the same 3 VWs, elastic onto 2;
# - refusals.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_checkpoint.sh"
use_mpirun
make_tiny_dataset
write_tiny_config
SGD=(--set optim.kind=sgd --set optim.lr=0.2 --set optim.momentum=0.9 --set optim.weight_decay=0
     --set optim.warmup_steps=0 --set optim.decay=constant --set optim.grad_clip=0 --set train.steps=12)
# D = 0 and Nm = 1: every minibatch waits for the pull of every VW's previous one, so the run does
# not depend on timing (with Nm > 1 a pull the server already allows is merged before the next
# minibatch, and whether it is allowed yet is timing).
WSP=(--set hetero.sync='"wsp"' --set hetero.nm=1 --set checkpoint.every=4)

"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" "${WSP[@]}" --set run.dir=full > full.log
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" "${WSP[@]}" --set run.dir=part --set train.steps=8 > part1.log
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" "${WSP[@]}" --set run.dir=part > part2.log
grep -q "resumed WSP at step 8" part2.log || { cat part2.log; fail "no resume"; }
"${MPIRUN[@]}" 3 "$BATON" train tiny.toml "${SGD[@]}" "${WSP[@]}" --set train.global_batch=12 --set run.dir=el \
  --set train.steps=8 > el1.log
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" "${WSP[@]}" --set train.global_batch=12 --set run.dir=el > el2.log
grep -q "elastic resume at step 8: 2 virtual workers now, 3 in the checkpoint" el2.log || { cat el2.log; fail "no elastic"; }
# Elastic 3 -> 2 from a checkpoint older than the 3 VWs' last records (their run went on to step
# 12; its step-12 marker is gone): VW 2's file, which no VW writes again, ends at the checkpoint
# too (issue 22 item 4: it kept records past it).
"${MPIRUN[@]}" 3 "$BATON" train tiny.toml "${SGD[@]}" "${WSP[@]}" --set train.global_batch=12 --set run.dir=el3 \
  --set checkpoint.every=4 > el3a.log
rm el3/ckpt/wsp-0000012.json
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" "${WSP[@]}" --set train.global_batch=12 --set run.dir=el3 \
  --set checkpoint.every=4 > el3b.log
grep -q "elastic resume at step 8: 2 virtual workers now, 3 in the checkpoint" el3b.log || { cat el3b.log; fail "no elastic (el3)"; }
python3 - <<'PY'
import json
steps = lambda f: [json.loads(l)["step"] for l in open(f"el3/{f}")]
assert steps("metrics-vw2.jsonl") == list(range(1, 9)), steps("metrics-vw2.jsonl")
for f in ("metrics.jsonl", "metrics-vw1.jsonl"):
    assert steps(f) == list(range(1, 13)), (f, steps(f))
print("elastic 3 -> 2 VWs: metrics-vw2.jsonl ends at the checkpoint (step 8), VW 0 and 1 continue to 12")
PY
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" --set hetero.sync='"wsp"' --set hetero.nm=2 \
  --set hetero.staleness=2 --set checkpoint.every=6 --set run.dir=stale --set train.steps=6 > stale1.log
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" --set hetero.sync='"wsp"' --set hetero.nm=2 \
  --set hetero.staleness=2 --set checkpoint.every=6 --set run.dir=stale > stale2.log
grep -q "resumed WSP at step 6" stale2.log || { cat stale2.log; fail "no resume with staleness"; }

PIPE=(--set hetero.sync='"wsp"' --set hetero.nm=1 --set checkpoint.every=4 --set train.micro_batch=4)
"${MPIRUN[@]}" 4 "$BATON" train tiny.toml "${SGD[@]}" "${PIPE[@]}" --set hetero.virtual_workers='["0,1", "2,3"]' \
  --set run.dir=pfull > pfull.log
"${MPIRUN[@]}" 4 "$BATON" train tiny.toml "${SGD[@]}" "${PIPE[@]}" --set hetero.virtual_workers='["0,1", "2,3"]' \
  --set run.dir=ppart --set train.steps=8 > ppart1.log
cp -r ppart pel  # the same checkpoint, resumed elastically below
"${MPIRUN[@]}" 4 "$BATON" train tiny.toml "${SGD[@]}" "${PIPE[@]}" --set hetero.virtual_workers='["0,1", "2,3"]' \
  --set run.dir=ppart > ppart2.log
grep -q "resumed WSP at step 8" ppart2.log || { cat ppart2.log; fail "no pipelined resume"; }
# The same with ED-local placement (every stage its own server client, at the meetings too).
for i in 1 2; do
  "${MPIRUN[@]}" 4 "$BATON" train tiny.toml "${SGD[@]}" "${PIPE[@]}" --set hetero.virtual_workers='["0,1", "2,3"]' \
    --set hetero.placement='"local"' --set run.dir=plocal $([ $i = 1 ] && echo --set train.steps=8) > plocal$i.log
done
grep -q "resumed WSP at step 8" plocal2.log || { cat plocal2.log; fail "no resume with placement local"; }
"${MPIRUN[@]}" 3 "$BATON" train tiny.toml "${SGD[@]}" "${PIPE[@]}" --set hetero.virtual_workers='["0:0-1, 1:1-4", "2"]' \
  --set run.dir=pel > pel.log
grep -q "elastic resume at step 8: 2 virtual workers now, 2 in the checkpoint" pel.log || { cat pel.log; fail "no elastic"; }

# The allreduce baseline (3 VWs, Nm = 2): checkpoints at wave ends, where every VW's weights are the
# same; 8 + 4 resumed steps = 12 uninterrupted bit for bit; elastic onto 2 VWs.
AR=(--set hetero.sync='"allreduce"' --set hetero.nm=2 --set checkpoint.every=4 --set train.global_batch=12)
"${MPIRUN[@]}" 3 "$BATON" train tiny.toml "${SGD[@]}" "${AR[@]}" --set run.dir=arfull > arfull.log
"${MPIRUN[@]}" 3 "$BATON" train tiny.toml "${SGD[@]}" "${AR[@]}" --set run.dir=arpart --set train.steps=8 > arpart1.log
cp -r arpart arel
"${MPIRUN[@]}" 3 "$BATON" train tiny.toml "${SGD[@]}" "${AR[@]}" --set run.dir=arpart > arpart2.log
grep -q "resumed allreduce at step 8" arpart2.log || { cat arpart2.log; fail "no allreduce resume"; }
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" "${AR[@]}" --set run.dir=arel > arel.log
grep -q "elastic resume at step 8: 2 virtual workers now, 3 in the checkpoint" arel.log || { cat arel.log; fail "no elastic"; }

# Every VW's file of a step holds w_global: the same parameters (`baton ckpt inspect` checksums).
for spec in "full 4,8,12 2" "el 4,8 3" "stale 6,12 2" "pfull 4,8,12 2" "plocal 4,8,12 2" "arfull 4,8,12 3"; do
  read -r run steps vws <<< "$spec"
  for s in ${steps//,/ }; do
    f0=$(printf "%s/ckpt/vw0/step-%07d.h5" "$run" "$s")
    tensor_checksums "$f0" | grep '^  params/' > p0.txt
    [ -s p0.txt ] || fail "$f0: no parameters"
    for k in $(seq 1 $((vws - 1))); do
      diff -q p0.txt <(tensor_checksums "$(printf "%s/ckpt/vw%d/step-%07d.h5" "$run" "$k" "$s")" | grep '^  params/') \
        > /dev/null || fail "$run step $s: VW $k's weights are not VW 0's (w_global)"
    done
  done
  [ -f "$(printf "%s/ckpt/wsp-%07d.json" "$run" "${steps##*,}")" ] || fail "$run: no marker of the last checkpoint"
done
python3 - <<'PY'
import json
def rows(path):
    return [json.loads(l) for l in open(path)]
# Exact resume: every VW's records of the resumed run are the uninterrupted run's, bit for bit.
for full, part in (("full", "part"), ("pfull", "ppart"), ("pfull", "plocal"), ("arfull", "arpart")):
    for f in ("metrics.jsonl", "metrics-vw1.jsonl") + (("metrics-vw2.jsonl",) if full == "arfull" else ()):
        a, b = rows(f"{full}/{f}"), rows(f"{part}/{f}")
        assert [r["step"] for r in b] == list(range(1, 13)), [r["step"] for r in b]
        assert [r["loss"] for r in a] == [r["loss"] for r in b], (part, f)
r = rows("pel/metrics-vw1.jsonl")
assert [x["step"] for x in r] == list(range(1, 13)) and r[-1]["loss"] < r[0]["loss"], "pipelined elastic"
# Elastic: both VWs of the 2-VW runs continue at step 9 and train.
for f in ("el/metrics.jsonl", "el/metrics-vw1.jsonl", "arel/metrics.jsonl", "arel/metrics-vw1.jsonl"):
    r = rows(f)
    assert [x["step"] for x in r] == list(range(1, 13)) and r[-1]["loss"] < r[0]["loss"], f
print("VW checkpoints (WSP, allreduce): every VW holds w_global; same-VW resume bit-exact; elastic 3 -> 2 VWs continues")
PY

expect_error "virtual-worker checkpoints are taken at the end of a wave whose clock pulls" "$BATON" train tiny.toml "${SGD[@]}" \
  --set run.dir=bad --set hetero.sync='"wsp"' --set hetero.nm=2 --set hetero.staleness=1 --set checkpoint.every=2
echo "PASS"
