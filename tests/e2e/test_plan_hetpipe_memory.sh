#!/usr/bin/env bash
# Planner memory = runtime memory (issue 23 item 4; docs/planner.md "HetPipe memory"): the HetPipe
# planner's memory of a stage is what the trainer allocates for it, so under the memory-limit
# emulation (hetero.memory_limit: the CPU backend refuses an allocation beyond it) the Nm the planner
# plans for a GPU memory M runs and Nm + 1 is refused. A tiny ResNet on 2 virtual workers of 2
# stages (`baton plan --algorithm hetpipe --policy np`, two nodes of two identical GPUs):
#   1. M = the larger GPU memory of the unconstrained plan at Nm = 5; the plan under
#      --gpu-memory-gb M gives Nm = N ≥ 5 (its smallest Max_m: memory alone decides, beyond 2k = 4),
#      with every stage within M;
#   2. `baton train` with its virtual workers and hetero.nm = N under hetero.memory_limit = M on
#      every rank runs; with hetero.nm = N + 1 it is refused (`error: out of memory on rank ...`);
#   3. each rank limited to exactly the planner's bytes for its stage, the run completes (evaluation,
#      checkpoints and WSP's pushes and pulls included); one byte less on one rank, it is refused:
#      the planner counts every byte the trainer allocates.
source "$(dirname "$0")/lib.sh"
use_mpirun
make_tiny_images 96
write_tiny_cnn_config
cat > two-nodes.toml <<'TOML'
name = "two-nodes"
inter_node_gbs = 7
[[nodes]]
name = "V"
device = "TITAN-V"
gpus = 2
intra_node_gbs = 15.75
count = 2
TOML
PLAN=("$BATON" plan cnn.toml --cluster two-nodes.toml --algorithm hetpipe --policy np --vw-size 2 --format json)
"${PLAN[@]}" --nm 5 > plan5.json || fail "plan at Nm = 5"
M=$(python3 -c 'import json; j = json.load(open("plan5.json")); print(max(p["memory_bytes"] for p in j["virtual_workers"][0]["partitions"]))')
"${PLAN[@]}" --gpu-memory-gb "$(python3 -c "print(repr($M / 1e9))")" > plan.json || fail "plan under M = $M bytes"
read -r N VWS EXACT M_GIB < <(python3 - "$M" <<'PY'
import json, sys
M = int(sys.argv[1])
j = json.load(open("plan.json"))
n = j["nm"]
assert j["runnable"]["nm"] == n and len(j["virtual_workers"]) == 2, j
parts = [p for v in j["virtual_workers"] for p in v["partitions"]]
assert n >= 5 and all(p["memory_bytes"] <= M for p in parts), (n, M, [p["memory_bytes"] for p in parts])
# The counts the planner used: stage 0 of 2 holds Nm + 1 slots (evaluation's), stage 1 two; Nm versions each.
assert [(p["slots"], p["weight_versions"]) for p in parts[:2]] == [(n + 1, n), (2, n)], parts
gib = lambda b: repr(b / 2**30)  # exact: hetero.memory_limit is GiB, rounded to bytes
print(n, json.dumps(j["runnable"]["virtual_workers"]).replace(" ", ""),
      "[" + ",".join(gib(p["memory_bytes"]) for p in parts) + "]", gib(M))
PY
) || fail "the plan under M"
echo "M = $M bytes: Nm = $N, virtual workers $VWS"
run() {  # run DIR NM LIMITS: 4 ranks, the planned VWs, WSP D = 0
  local dir=$1 nm=$2 limits=$3
  timeout 300 "${MPIRUN[@]}" 4 "$BATON" train cnn.toml --set run.dir="$dir" --set hetero.sync='"wsp"' \
    --set "hetero.virtual_workers=$VWS" --set hetero.nm="$nm" --set "hetero.memory_limit=$limits" \
    --set train.micro_batch=4 --set train.global_batch=8 --set train.steps=$((2 * nm)) \
    --set train.eval_every="$nm" --set checkpoint.every=$((2 * nm))
}
four() { echo "[$1,$1,$1,$1]"; }
run atM "$N" "$(four "$M_GIB")" > atM.log 2>&1 || { cat atM.log; fail "the planned Nm = $N under M did not run"; }
expect_error "out of memory on rank" run overM $((N + 1)) "$(four "$M_GIB")"
grep -q "exceed its memory limit of" err.txt || { cat err.txt; fail "Nm + 1 was not refused by the memory limit"; }
run exact "$N" "$EXACT" > exact.log 2>&1 || { cat exact.log; fail "Nm = $N with each rank at exactly its planned bytes"; }
for f in metrics.jsonl metrics-vw1.jsonl; do
  [ "$(wc -l < "exact/$f")" -eq $((2 * N)) ] || fail "exact/$f: not $((2 * N)) minibatches"
done
LESS=$(python3 -c "l = $EXACT; l[0] = (round(l[0] * 2**30) - 1) / 2**30; print('[' + ','.join(repr(x) for x in l) + ']')")
expect_error "out of memory on rank 0" run less "$N" "$LESS"
echo "Nm = $N runs within M = $M bytes, Nm + 1 is refused; every rank at exactly its planned bytes runs, 1 byte less does not"
echo "PASS"
