#!/usr/bin/env bash
# `baton train` with hetero.sync = "wsp" and virtual workers of one rank each (issue 13, milestone 2;
# docs/hetpipe.md "Training with WSP"):
# - the reduction (issue 13 "Reductions to known modes"): D = 0, Nm = 1, plain SGD at lr / N gives the
#   losses of synchronous data parallelism at lr over the same global batches (N = 2 and 4), within a
#   tolerance measured here (2e-8 relative measured: float sums in another order; tested at 1e-6);
# - a WSP run with D = 2, Nm = 2 over 3 VWs trains, and every VW's metrics report its clock, the
#   c_global of its last pull, its waiting time and observed staleness (at most s_global = 7);
# - what does not run yet is refused with error + hint.
source "$(dirname "$0")/lib.sh"
use_mpirun
make_tiny_dataset
# tiny.toml (lib.sh) as plain SGD: no momentum, weight decay, warm-up, decay or clipping, 12 steps.
write_tiny_config
SGD=(--set optim.kind=sgd --set optim.lr=0.4 --set optim.momentum=0 --set optim.weight_decay=0
     --set optim.warmup_steps=0 --set optim.decay=constant --set optim.grad_clip=0 --set train.steps=12
     --set checkpoint.every=0)

for n in 2 4; do
  "${MPIRUN[@]}" $n "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=dp$n > dp$n.log
  "${MPIRUN[@]}" $n "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=wsp$n --set hetero.sync='"wsp"' \
    --set optim.lr=$(python3 -c "print(0.4 / $n)") > wsp$n.log
  grep -q "WSP (HetPipe §5): $n virtual workers" wsp$n.log || { cat wsp$n.log; fail "no WSP header"; }
done

python3 - <<'PY'
import json
def rows(path):
    return [json.loads(l) for l in open(path)]
for n in (2, 4):
    dp = {r["step"]: r["loss"] for r in rows(f"dp{n}/metrics.jsonl")}
    vws = [rows(f"wsp{n}/metrics.jsonl")] + [rows(f"wsp{n}/metrics-vw{k}.jsonl") for k in range(1, n)]
    worst = 0.0
    for s in range(1, 13):
        # Data parallelism logs the mean loss over the global batch; VW k's loss is over its slice.
        mean = sum(next(r["loss"] for r in v if r["step"] == s) for v in vws) / n
        worst = max(worst, abs(mean - dp[s]) / abs(dp[s]))
    assert dp[12] < dp[1] - 0.1, f"data parallelism did not train: {dp[1]} -> {dp[12]}"
    assert worst < 1e-6, f"N={n}: WSP D=0 Nm=1 differs from data parallelism by {worst:.2e}"
    for k, v in enumerate(vws):
        assert [r["vw"] for r in v] == [k] * 12 and [r["clock"] for r in v] == list(range(12))
        assert all(r["staleness"] == 0 for r in v), "D = 0, Nm = 1: every minibatch sees every update before it"
    print(f"N={n}: WSP (D=0, Nm=1, SGD lr/{n}) = data parallelism within {worst:.1e} relative over 12 steps")
PY

# WSP with staleness: 3 VWs, D = 2, Nm = 2 (s_global = (D+1)·Nm + Nm − 2 = 6), 24 minibatches each.
"${MPIRUN[@]}" 3 "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=stale --set hetero.sync='"wsp"' --set hetero.staleness=2 \
  --set hetero.nm=2 --set train.global_batch=12 --set train.steps=24 --set optim.lr=0.15 > stale.log
grep -q "waiting for the parameter server" stale.log || { cat stale.log; fail "no waiting summary in the log"; }
python3 - <<'PY'
import json
for k in range(3):
    path = "stale/metrics.jsonl" if k == 0 else f"stale/metrics-vw{k}.jsonl"
    v = [json.loads(l) for l in open(path)]
    assert len(v) == 24 and all(r["vw"] == k for r in v)
    first = sum(r["loss"] for r in v[:4]) / 4
    last = sum(r["loss"] for r in v[-4:]) / 4
    assert last < first - 0.1, f"VW {k} did not train: {first:.3f} -> {last:.3f}"
    # c_local after the last wave (11) stays 11: its pull would gate minibatch 26, which never runs.
    assert v[-1]["clock"] == 11, f"VW {k} ends at clock {v[-1]['clock']}, not 24 / Nm - 1 = 11"
    assert max(r["staleness"] for r in v) <= 6 and all(r["wait_s"] >= 0 for r in v)
    assert max(r["c_global"] for r in v) >= 12 - 2 - 1, "pulls never caught up with the other VWs"
    assert abs(v[-1]["wait_total_s"] - sum(r["wait_s"] for r in v)) < 1e-6
    print(f"VW {k}: loss {first:.3f} -> {last:.3f}, max staleness {max(r['staleness'] for r in v)}, "
          f"waited {v[-1]['wait_total_s']:.3f} s")
PY

expect_error "pipelines inside virtual workers" timeout 60 "${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad \
  --set hetero.sync='"wsp"' --set hetero.virtual_workers='["0,1"]'
expect_error "places 1 of the job's 2 ranks" timeout 60 "${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad \
  --set hetero.sync='"wsp"' --set hetero.virtual_workers='["1"]'
expect_error "not a list of ranks" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad --set hetero.sync='"wsp"' \
  --set hetero.virtual_workers='["v100"]'
expect_error "not a whole number of waves" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad --set hetero.sync='"wsp"' \
  --set hetero.nm=5
expect_error "need hetero.sync = \"wsp\"" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad --set hetero.staleness=2
expect_error "checkpoints of WSP runs" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad --set hetero.sync='"wsp"' \
  --set checkpoint.every=4
echo "PASS"
