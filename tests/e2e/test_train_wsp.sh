#!/usr/bin/env bash
# `baton train` with hetero.sync = "wsp" and virtual workers of one rank each (issue 13, milestone 2;
# docs/hetpipe.md "Training with WSP"):
# - the reduction (issue 13 "Reductions to known modes"): D = 0, Nm = 1, plain SGD at lr / N gives the
#   losses of synchronous data parallelism at lr over the same global batches (N = 2 and 4), within a
#   tolerance measured here (2e-8 relative measured: float sums in another order; tested at 1e-6);
# - a WSP run with D = 2, Nm = 2 over 3 VWs trains, and every VW's metrics report its clock, the
#   c_global of its last pull, its waiting time and observed staleness (at most s_global = 7);
# - hetero.sync = "allreduce" (the synchronous baseline: every VW's weights become the wave's start
#   + the mean of the VWs' wave updates): with Nm = 1 and plain SGD at the same lr it is data
#   parallelism (N = 2; 2e-8 relative measured, tested at 1e-6), and with Nm = 2
#   over 3 VWs all VWs evaluate the same weights after every wave (identical val_loss);
# - heterogeneity on one machine (docs/hetpipe.md): with hetero.slowdown = [1, 8] and a D large
#   enough that no pull blocks, VW 1 runs clearly fewer minibatches/s than VW 0; ranks standing for
#   a V100 and a Quadro P4000 get the table's fp32 ratio (15.7 / 5.3) as slowdown, and with D = 0 the
#   fast VW waits for the slow one (idle <= waiting); hetero.jitter's factors are a function of
#   (seed, rank, minibatch) only; a memory limit the model does not fit in is refused;
# - pushes and pulls on the client thread (hetero.overlap, default) and on the training thread give
#   the same losses bit for bit where the run does not depend on timing (D = 0, Nm = 1);
# - what does not run yet is refused with error + hint.
source "$(dirname "$0")/lib.sh"
use_mpirun
make_tiny_dataset
# tiny.toml (lib.sh) as plain SGD: no momentum, weight decay, warm-up, decay or clipping, 12 steps.
write_tiny_config
SGD=("${PLAIN_SGD[@]}")

for n in 2 4; do
  "${MPIRUN[@]}" $n "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=dp$n > dp$n.log
  "${MPIRUN[@]}" $n "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=wsp$n --set hetero.sync='"wsp"' \
    --set optim.lr=$(python3 -c "print(0.4 / $n)") > wsp$n.log
  grep -q "WSP (HetPipe §5): $n virtual workers" wsp$n.log || { cat wsp$n.log; fail "no WSP header"; }
done
# Pushes and pulls on the client thread (hetero.overlap, the default) or on the training thread:
# with D = 0 and Nm = 1 the run does not depend on timing, so the losses are the same bit for bit.
grep -q "push and pull on a thread of their own" wsp2.log || { cat wsp2.log; fail "no client thread"; }
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=inline2 --set hetero.sync='"wsp"' \
  --set optim.lr=0.2 --set hetero.overlap=false > inline2.log
grep -q "thread of their own" inline2.log && { cat inline2.log; fail "hetero.overlap = false still ran the thread"; }
python3 - <<'PY'
import json
for f in ("metrics.jsonl", "metrics-vw1.jsonl"):
    a, b = ([(r["step"], r["loss"]) for r in map(json.loads, open(d + "/" + f))] for d in ("wsp2", "inline2"))
    assert a == b, f"{f}: hetero.overlap = false changed the losses of a timing-independent run"
print("hetero.overlap on and off: the same losses bit for bit (D = 0, Nm = 1)")
PY

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

# The allreduce baseline. (a) Nm = 1, SGD, 2 VWs at the data-parallel lr (0.4, not 0.4 / N: the
# average, not WSP's sum); the VWs are named, since sync = "allreduce" alone is the default [hetero].
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=ar2 --set hetero.sync='"allreduce"' \
  --set hetero.virtual_workers='["0", "1"]' > ar2.log
grep -q "allreduce between virtual workers (HetPipe's synchronous baseline): 2 virtual workers" ar2.log \
  || { cat ar2.log; fail "no allreduce header"; }
# (b) Nm = 2 over 3 VWs (one per rank: nm > 1 selects the VWs), evaluated after every wave.
"${MPIRUN[@]}" 3 "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=ar3 --set hetero.sync='"allreduce"' --set hetero.nm=2 \
  --set train.global_batch=12 --set data.valid='"tiny"' --set train.eval_every=2 --set train.eval_steps=2 > ar3.log
grep -q "in the all-reduce" ar3.log || { cat ar3.log; fail "no all-reduce summary in the log"; }
python3 - <<'PY'
import json
def rows(path):
    return [json.loads(l) for l in open(path)]
dp = {r["step"]: r["loss"] for r in rows("dp2/metrics.jsonl")}
vws = [rows("ar2/metrics.jsonl"), rows("ar2/metrics-vw1.jsonl")]
worst = 0.0
for s in range(1, 13):
    mean = sum(next(r["loss"] for r in v if r["step"] == s) for v in vws) / 2
    worst = max(worst, abs(mean - dp[s]) / abs(dp[s]))
assert worst < 1e-6, f"allreduce Nm=1 differs from data parallelism by {worst:.2e}"
for k, v in enumerate(vws):
    assert [r["vw"] for r in v] == [k] * 12 and [r["clock"] for r in v] == list(range(12))
    assert [r["c_global"] for r in v] == list(range(1, 13)) and all(r["staleness"] == 0 for r in v)
print(f"allreduce (Nm=1, SGD lr, 2 VWs) = data parallelism dp=2 within {worst:.1e} relative over 12 steps")

vws = [rows("ar3/metrics.jsonl")] + [rows(f"ar3/metrics-vw{k}.jsonl") for k in (1, 2)]
for k, v in enumerate(vws):
    assert [r["step"] for r in v] == list(range(1, 13)) and all(r["vw"] == k for r in v)
    assert [r["clock"] for r in v] == [(s - 1) // 2 for s in range(1, 13)]
    assert [r["c_global"] for r in v] == [s // 2 for s in range(1, 13)]
    assert [r["staleness"] for r in v] == [(s - 1) % 2 for s in range(1, 13)]
    assert all(r["wait_s"] == 0 for r in v if r["step"] % 2 == 1), "an all-reduce inside a wave"
    assert abs(v[-1]["wait_total_s"] - sum(r["wait_s"] for r in v)) < 1e-6
    first, last = sum(r["loss"] for r in v[:2]) / 2, sum(r["loss"] for r in v[-2:]) / 2
    assert last < first - 0.1, f"VW {k} did not train: {first:.3f} -> {last:.3f}"
# After every wave all VWs hold the same weights: the same validation loss, bit for bit (their
# training losses differ: each is over the VW's own rows).
for s in range(2, 13, 2):
    vals = [next(r["val_loss"] for r in v if r["step"] == s) for v in vws]
    assert vals[0] == vals[1] == vals[2], f"step {s}: the VWs' weights differ after the wave: {vals}"
    assert len({next(r["loss"] for r in v if r["step"] == s) for v in vws}) > 1, "VWs trained on the same rows"
print("allreduce (Nm=2, 3 VWs): identical val_loss on every VW after each of the 6 waves")
PY

# Heterogeneity on one machine. (a) VW 1 eight times slower (a factor well above the core
# contention of a loaded 2-core CI machine, which slows the fast VW too), jitter 0.5, D = 6 > the 6 waves: no
# pull ever blocks, so each VW runs at its own speed. (b) The same seed with ranks standing for a
# V100 and a Quadro P4000 (slowdown 15.7 / 5.3 from the device table) and D = 0.
HET=(--set hetero.sync='"wsp"' --set hetero.nm=2 --set train.global_batch=16 --set hetero.jitter=0.5)
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" "${HET[@]}" --set run.dir=het --set hetero.slowdown='[1, 8]' \
  --set hetero.staleness=6 --set optim.lr=0.2 > het.log
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" "${HET[@]}" --set run.dir=vq --set optim.lr=0.2 \
  --set hetero.virtual_workers='["0@V100", "1@P4000"]' > vq.log
# (c) The same seed, every VW's factors its own stream (hetero.jitter_scope = "vw"), only half the
# minibatches straggling (hetero.jitter_probability = 0.5).
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" "${HET[@]}" --set run.dir=hvw --set hetero.staleness=6 \
  --set optim.lr=0.2 --set hetero.jitter_scope='"vw"' --set hetero.jitter_probability=0.5 > hvw.log
grep -q "rank 1 (vw 1): compute x1 x a seeded factor in \[1, 1.5\] per minibatch with probability 0.5 (the VW's factors)" \
  hvw.log || { cat hvw.log; fail "no per-VW jitter line"; }
grep -q "rank 1 (vw 1) emulates QUADRO-P4000: compute x2.96" vq.log || { cat vq.log; fail "no emulation line"; }
grep -q "^vw 1: 12 minibatches in .* minibatches/s (compute x" vq.log || { cat vq.log; fail "no per-VW summary"; }
# Emulated devices share the cores: their waiting ranks sleep between MPI tests (dist/comm.h).
grep -q "waiting ranks sleep between MPI tests" vq.log || { cat vq.log; fail "no wait-policy line"; }
python3 - <<'PY'
import json
def vws(d):
    return [[json.loads(l) for l in open(f"{d}/metrics.jsonl")], [json.loads(l) for l in open(f"{d}/metrics-vw1.jsonl")]]
het, vq, hvw = vws("het"), vws("vq"), vws("hvw")
for v in het + vq:
    assert len(v) == 12
    for r in v:
        for key in ("idle_s", "idle_total_s", "wait_s", "wait_total_s", "minibatches_per_s", "slowdown", "stretch_s"):
            assert key in r, f"no {key} in {r}"
        assert 0 <= r["idle_s"] <= r["wait_s"] + 1e-9 and r["idle_total_s"] <= r["wait_total_s"] + 1e-9
    assert abs(v[-1]["idle_total_s"] - sum(r["idle_s"] for r in v)) < 1e-6
rate = [v[-1]["minibatches_per_s"] for v in het]
assert rate[1] < 0.7 * rate[0], f"slowdown [1, 8]: VW 1 at {rate[1]:.1f} minibatches/s, VW 0 at {rate[0]:.1f}"
assert all(r["wait_s"] == 0 for v in het for r in v), "D = 6 over 6 waves: no pull at all"
# Factors: slowdown x a jitter in [1, 1.5] drawn from (seed, rank, minibatch) alone, so both runs
# (same seed) share each rank's jitter sequence whatever their timing and slowdown.
s_vq = 15.7 / 5.3
for k, (s_het, s_dev) in enumerate([(1, 1), (8, s_vq)]):
    jh = [r["slowdown"] / s_het for r in het[k]]
    jv = [r["slowdown"] / s_dev for r in vq[k]]
    assert all(1 <= j <= 1.5 for j in jh) and len(set(jh)) > 6, f"VW {k}: jitter factors {jh}"
    assert max(abs(a - b) for a, b in zip(jh, jv)) < 1e-9, f"VW {k}: the jitter differs between runs: {jh} {jv}"
assert [r["slowdown"] for r in het[0]] != [r["slowdown"] for r in het[1]], "both ranks drew the same jitter"
# jitter_scope = "vw": factors in the same range from the VW's stream, not the rank's; with
# probability 0.5 some minibatches at full speed (factor 1), the others straggling.
for k in range(2):
    jw, jr = [r["slowdown"] for r in hvw[k]], [r["slowdown"] / (1, 8)[k] for r in het[k]]
    assert len(jw) == 12 and all(1 <= j <= 1.5 for j in jw), f"VW {k}: per-VW factors {jw}"
    assert 2 <= sum(j == 1 for j in jw) <= 10 and len(set(jw)) > 2, f"VW {k}: probability 0.5 gave {jw}"
    assert sum(a != b for a, b in zip(jw, jr)) >= 10, f"VW {k}: jitter_scope = vw drew the rank's factors {jw}"
# The draws are the documented hash (launch/wsp-timing-model.py computes them from the formula in
# compute_stretch.h, for the model of WSP's timing): the metrics' factors are its factors.
import os, subprocess, sys
def port(rank, vw, *args):
    out = subprocess.run([sys.executable, f"{os.environ['SRC']}/launch/wsp-timing-model.py", "--factors", str(rank),
                          str(vw), "12", "--seed", "1234", *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out)
for k in range(2):
    want = {"het": port(k, k, "--slowdown", str((1, 8)[k]), "--jitter", "0.5"),
            "hvw": port(k, k, "--jitter", "0.5", "--scope", "vw", "--probability", "0.5")}
    for name, run in (("het", het), ("hvw", hvw)):
        got = [r["slowdown"] for r in run[k]]
        assert max(abs(a - b) for a, b in zip(got, want[name])) < 1e-12, f"{name} VW {k}: {got} != the formula's {want[name]}"
assert vq[1][-1]["stretch_s"] > 0 and vq[0][-1]["idle_total_s"] > 0, "with D = 0 the fast VW never waited"
print(f"slowdown [1, 8]: {rate[0]:.0f} vs {rate[1]:.0f} minibatches/s; V100 + P4000 (x{s_vq:.2f}), D = 0: VW 0 waited "
      f"{vq[0][-1]['wait_total_s']:.3f} s, idle {vq[0][-1]['idle_total_s']:.3f} s")
PY
# The refusals: a memory limit the model does not fit in, lists of the wrong length or below 1,
# emulation keys without virtual workers, devices the table does not know or without a bf16 peak.
expect_error "out of memory on rank 0: allocating .* would exceed its memory limit of 105 KiB" "$BATON" train tiny.toml \
  "${SGD[@]}" --set run.dir=bad --set hetero.sync='"wsp"' --set hetero.memory_limit='[0.0001]'
BATON_WAIT_POLICY=poll expect_error "BATON_WAIT_POLICY=poll is not a wait policy" "$BATON" train tiny.toml \
  "${SGD[@]}" --set run.dir=bad --set hetero.sync='"wsp"' --set hetero.slowdown='[2]'
expect_error "hetero.jitter_span = 4 sets how long a jitter factor lasts, but hetero.jitter = 0" "$BATON" train \
  tiny.toml "${SGD[@]}" --set run.dir=bad --set hetero.sync='"wsp"' --set hetero.jitter_span=4
expect_error "hetero.jitter_scope = \"vw\" sets whose compute a jitter factor slows, but hetero.jitter = 0" "$BATON" \
  train tiny.toml "${SGD[@]}" --set run.dir=bad --set hetero.sync='"wsp"' --set hetero.jitter_scope='"vw"'
expect_error "hetero.jitter_probability = 0.5 sets how often a jitter episode straggles, but hetero.jitter = 0" \
  "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad --set hetero.sync='"wsp"' --set hetero.jitter_probability=0.5
expect_error "hetero.slowdown has 2 entries but the job has 1 rank" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad \
  --set hetero.sync='"wsp"' --set hetero.slowdown='[1, 3]'
expect_error "hetero.slowdown\[0\] must be >= 1, got 0.5" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad \
  --set hetero.sync='"wsp"' --set hetero.slowdown='[0.5]'
expect_error "hetero.memory_limit\[0\] must be >= 0" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad \
  --set hetero.sync='"wsp"' --set hetero.memory_limit='[-1]'
expect_error "emulate devices on the ranks of virtual workers" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad \
  --set hetero.slowdown='[2]'
expect_error "emulate devices on the ranks of virtual workers" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad \
  --set hetero.jitter=0.2
expect_error "V1000" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad --set hetero.sync='"wsp"' \
  --set hetero.virtual_workers='["0@V1000"]'
expect_error "which has no bf16 peak" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad --set hetero.sync='"wsp"' \
  --set hetero.virtual_workers='["0@V100"]' --set precision.compute=bf16

expect_error "as one micro-batch through its pipeline" timeout 60 "${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" \
  --set run.dir=bad --set hetero.sync='"wsp"' --set hetero.virtual_workers='["0,1"]'
expect_error "places 1 of the job's 2 ranks" timeout 60 "${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad \
  --set hetero.sync='"wsp"' --set hetero.virtual_workers='["1"]'
expect_error "\"v100\" is not a rank" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad --set hetero.sync='"wsp"' \
  --set hetero.virtual_workers='["v100"]'
expect_error "not a whole number of waves" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad --set hetero.sync='"wsp"' \
  --set hetero.nm=5
expect_error "need hetero.sync = \"wsp\"" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad --set hetero.staleness=2
expect_error "virtual-worker checkpoints are taken at the end of a wave whose clock pulls" "$BATON" train tiny.toml "${SGD[@]}" \
  --set run.dir=bad --set hetero.sync='"wsp"' --set hetero.nm=2 --set hetero.staleness=1 --set checkpoint.every=2
# (c) What the allreduce baseline refuses: WSP's staleness bound, pipelines inside VWs, checkpoints
# off wave ends, waves that do not divide train.steps, `baton bench`, tensor parallelism.
expect_error "the other \[hetero\] keys need hetero.sync = \"wsp\"" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad \
  --set hetero.sync='"allreduce"' --set hetero.nm=2 --set hetero.staleness=1
expect_error "virtual workers of several stages under hetero.sync = \"allreduce\" are not built yet" timeout 60 \
  "${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad --set hetero.sync='"allreduce"' \
  --set hetero.virtual_workers='["0,1"]'
expect_error "virtual-worker checkpoints are taken at the end of a wave" "$BATON" train tiny.toml "${SGD[@]}" \
  --set run.dir=bad --set hetero.sync='"allreduce"' --set hetero.nm=2 --set checkpoint.every=3
expect_error "not a whole number of waves" "$BATON" train tiny.toml "${SGD[@]}" --set run.dir=bad --set hetero.sync='"allreduce"' \
  --set hetero.nm=5
expect_error "baton bench does not run allreduce" "$BATON" bench tiny.toml "${SGD[@]}" --set hetero.nm=2 --warmup 1 --steps 3
expect_error "hetero.sync = \"allreduce\" takes its pipelines from hetero.virtual_workers" timeout 60 "${MPIRUN[@]}" 2 "$BATON" train tiny.toml \
  "${SGD[@]}" --set run.dir=bad --set hetero.sync='"allreduce"' --set hetero.nm=2 --set parallel.tp=2
echo "PASS"
