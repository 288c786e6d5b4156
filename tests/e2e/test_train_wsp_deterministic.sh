#!/usr/bin/env bash
# WSP's deterministic mode (issues 13 and 23; docs/hetpipe.md "Deterministic mode") with virtual
# workers of one rank each (test_train_wsp_reference.sh has pipelined ones): with
# hetero.deterministic = true the VWs' server hooks (F: before a forward, U: after an update) take
# turns in a seeded order, serialized by a token, so every parameter-server read and write happens
# in a fixed global order.
# - (a) two runs of the same config give identical metrics: loss, grad_norm, val_loss, clock,
#   c_global and staleness of every VW at every step, compared as the JSON's text;
# - (b) a run equals the single-process reference of the update rule (tests/reference/
#   wsp_reference.cpp, written from the paper: the N VWs in one process, replaying the run's order
#   of hooks from its trace) over 20 steps: 3 VWs, D = 1, Nm = 2, AdamW with clipping and weight
#   decay; and again with VW 1 three times slower (hetero.slowdown, which weighs the schedule) and
#   another seed, with plain SGD: losses, grad norms and validation losses within 1e-6 relative, and
#   every minibatch's clock, c_global, staleness and version vector equal to the run's trace; a
#   reference with a wrong merge rule (the wave's finished minibatches not yet pushed dropped at a
#   pull) must differ, so the test can fail;
# - (c) the refusals: hetero.deterministic without sync = "wsp", with hetero.placement = "local",
#   and a resume off a cut of the order;
# - (d) checkpoints (issue 13 item 6: "resume with the same VWs is exact in a deterministic mode"):
#   the order is cut at every checkpoint, where all VWs meet; an interrupted and resumed run equals
#   the uninterrupted one bit for bit, with D = 1 (a run whose pulls depend on the interleaving).
source "$(dirname "$0")/lib.sh"
: "${WSP_REFERENCE:?}"
use_mpirun
make_tiny_dataset
write_tiny_config
# tiny.toml (lib.sh): 20 steps; 3 VWs of 4 rows (global batch 12), D = 1, Nm = 2, evaluated every 4.
DET=(--set checkpoint.every=0 --set run.trace=true --set train.global_batch=12 --set hetero.sync='"wsp"' --set hetero.staleness=1
     --set hetero.nm=2 --set hetero.deterministic=true --set data.valid='"tiny"' --set train.eval_every=4
     --set train.eval_steps=2)
SLOW=(--set hetero.slowdown='[1, 3, 1]' --set train.seed=7 --set optim.kind=sgd --set optim.lr=0.15
      --set optim.momentum=0 --set optim.weight_decay=0 --set optim.grad_clip=0)

"${MPIRUN[@]}" 3 "$BATON" train tiny.toml "${DET[@]}" --set run.dir=det1 > det1.log
"${MPIRUN[@]}" 3 "$BATON" train tiny.toml "${DET[@]}" --set run.dir=det2 > det2.log
"${MPIRUN[@]}" 3 "$BATON" train tiny.toml "${DET[@]}" "${SLOW[@]}" --set run.dir=slow > slow.log
grep -q "deterministic mode (hetero.deterministic): 120 turns" det1.log || { cat det1.log; fail "no deterministic-mode line"; }
OMP_NUM_THREADS=1 "$WSP_REFERENCE" --run det1 --out ref tiny.toml "${DET[@]}" > ref.log || { cat ref.log; fail "reference"; }
OMP_NUM_THREADS=1 "$WSP_REFERENCE" --run slow --out ref_slow tiny.toml "${DET[@]}" "${SLOW[@]}" > ref_slow.log \
  || { cat ref_slow.log; fail "reference (slowdown)"; }
OMP_NUM_THREADS=1 "$WSP_REFERENCE" --run det1 --out ref_wrong --mutate drop-partial tiny.toml "${DET[@]}" > ref_wrong.log \
  || { cat ref_wrong.log; fail "reference (wrong merge rule)"; }

python3 - <<'PY'
import json, re
FIELDS = ("loss", "grad_norm", "val_loss", "clock", "c_global", "staleness")
def files(d):
    return [f"{d}/metrics.jsonl"] + [f"{d}/metrics-vw{k}.jsonl" for k in (1, 2)]
def raw(path):
    """Per step: each field's text as written (bit for bit), and the parsed record."""
    out = []
    for line in open(path):
        r = json.loads(line)
        text = {f: m.group(1) for f in FIELDS if (m := re.search(rf'"{f}":([^,}}]+)', line))}
        out.append((r, text))
    return out

# (a) Two runs: every field's text identical, every VW, every step.
for a, b in zip(files("det1"), files("det2")):
    ra, rb = raw(a), raw(b)
    assert len(ra) == len(rb) == 20, (a, len(ra), len(rb))
    for (x, tx), (y, ty) in zip(ra, rb):
        assert tx == ty, f"{a} step {x['step']}: the runs differ: {tx} vs {ty}"
print("(a) two deterministic runs: identical loss, grad_norm, val_loss, clock, c_global, staleness (3 VWs x 20 steps)")

# (b) The run against the single-process reference of the rule.
def compare(run, ref, protocol=True):
    worst, exact, n = 0.0, 0, 0
    if protocol:  # every minibatch's start: the run's trace against the reference's
        want = {(r["vw"], r["mb"]): r for r in map(json.loads, open(f"{ref}/starts.jsonl"))}
        for k in range(3):
            got = [e for e in map(json.loads, open(f"{run}/wsp-trace-vw{k}-stage0.jsonl")) if e["e"] == "start"]
            assert len(got) == 20, (run, k, len(got))
            for e in got:
                r = want[(k, e["mb"])]
                for f in ("reads", "c_local", "c_global", "staleness", "w"):
                    assert e[f] == r[f], f"{run} VW {k} minibatch {e['mb']}: {f} {e[f]} vs the reference's {r[f]}"
    for k, (a, b) in enumerate(zip(files(run), files(ref))):
        ra, rb = raw(a), raw(b)
        assert len(ra) == len(rb) == 20, (a, len(ra), b, len(rb))
        for (x, tx), (y, ty) in zip(ra, rb):
            assert x["step"] == y["step"] and x["vw"] == y["vw"] == k
            for f in ("loss", "grad_norm", "val_loss"):
                if f not in x and f not in y:
                    continue
                assert f in x and f in y, f"{run} VW {k} step {x['step']}: {f} in one of them only"
                worst = max(worst, abs(x[f] - y[f]) / abs(y[f]))
                exact += tx[f] == ty[f]
                n += 1
    return worst, exact, n
for run, ref in (("det1", "ref"), ("slow", "ref_slow")):
    worst, exact, n = compare(run, ref)
    print(f"(b) {run} vs the single-process reference: {exact}/{n} values bit-identical, worst {worst:.1e} relative")
    assert worst <= 1e-6, f"{run}: the deterministic run differs from the reference by {worst:.2e}"
    v = [json.loads(l) for l in open(files(run)[0])]
    assert max(r["c_global"] for r in v) >= 8, "the pulls never caught up"
    assert v[-1]["loss"] < v[0]["loss"] - 0.1, f"{run}: did not train"
worst, exact, n = compare("det1", "ref_wrong", protocol=False)
print(f"(b) det1 vs a reference with a wrong merge rule (partial wave dropped): {exact}/{n} bit-identical, "
      f"worst {worst:.1e} relative")
assert worst > 1e-4, f"the comparison cannot tell a wrong merge rule: {worst:.2e}"
PY
# The slower VW 1 changes the order of turns (speeds 1, 1/3, 1).
a=$(grep -o "deterministic mode.*" det1.log | sed 's/.*: //'); b=$(grep -o "deterministic mode.*" slow.log | sed 's/.*: //')
[ "$a" != "$b" ] || fail "hetero.slowdown and train.seed did not change the order of turns: $a"

# (c) Refusals.
expect_error 'hetero.deterministic = true replays a seeded order of WSP' \
  "$BATON" train tiny.toml --set checkpoint.every=0 --set hetero.deterministic=true
expect_error 'hetero.deterministic = true replays a seeded order of WSP' \
  timeout 60 "${MPIRUN[@]}" 2 "$BATON" train tiny.toml --set checkpoint.every=0 --set hetero.deterministic=true \
  --set hetero.virtual_workers='["0", "1"]'
grep -q 'set hetero.sync = "wsp"' err.txt || { cat err.txt; fail "no hint to set sync = wsp"; }
expect_error 'hetero.deterministic = true orders the server accesses of each virtual worker.s first stage' \
  timeout 60 "${MPIRUN[@]}" 2 "$BATON" train tiny.toml --set checkpoint.every=0 --set hetero.deterministic=true \
  --set hetero.sync='"wsp"' --set hetero.virtual_workers='["0, 1"]' --set train.micro_batch=8 \
  --set hetero.placement='"local"' 
# A resume must land on a cut of the order: det1 (checkpoint.every = 0) ended with a checkpoint at
# step 20, which a longer run cannot continue deterministically.
expect_error 'hetero.deterministic = true resumes at a multiple of checkpoint.every only' \
  timeout 60 "${MPIRUN[@]}" 3 "$BATON" train tiny.toml "${DET[@]}" --set run.dir=det1 --set train.steps=24

# (d) Checkpoints: the order is cut every checkpoint.every = 8 steps (segments 8, 8, 4), all VWs
# meet there; 8 steps + a resumed 12 give the uninterrupted run's metrics bit for bit (AdamW: every
# VW's optimizer state restored; D = 1, so which c_global each pull sees is the schedule's).
CK=(--set checkpoint.every=8 --set optim.decay=constant)  # the learning rate must not depend on train.steps
"${MPIRUN[@]}" 3 "$BATON" train tiny.toml "${DET[@]}" "${CK[@]}" --set run.dir=ckfull > ckfull.log
"${MPIRUN[@]}" 3 "$BATON" train tiny.toml "${DET[@]}" "${CK[@]}" --set run.dir=ckpart --set train.steps=8 > ckpart1.log
"${MPIRUN[@]}" 3 "$BATON" train tiny.toml "${DET[@]}" "${CK[@]}" --set run.dir=ckpart > ckpart2.log
grep -q "resumed WSP at step 8" ckpart2.log || { cat ckpart2.log; fail "no deterministic resume"; }
python3 - <<'PY'
import json
keys = ("step", "loss", "grad_norm", "val_loss", "clock", "c_global", "staleness")
for f in ("metrics.jsonl", "metrics-vw1.jsonl", "metrics-vw2.jsonl"):
    a, b = ([tuple(r.get(k) for k in keys) for r in map(json.loads, open(f"{d}/{f}"))] for d in ("ckfull", "ckpart"))
    assert [r[0] for r in b] == list(range(1, 21)), [r[0] for r in b]
    assert a == b, f"{f}: the resumed deterministic run differs from the uninterrupted one"
    assert max(r[6] for r in a) > 0, "D = 1: some minibatch should miss updates"
print("(d) deterministic checkpoints: 8 + 12 resumed steps = 20 uninterrupted, bit for bit (3 VWs, D = 1)")
PY
echo "PASS"
