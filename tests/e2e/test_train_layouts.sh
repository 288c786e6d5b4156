#!/usr/bin/env bash
# Layouts and schedules through the real binary that the runtime restructuring (issue 11) made
# expressible or had to prove: explicit, uneven pipeline stage boundaries (parallel.stages) give
# the single-process losses; pipedream (with vertical sync) and its replicated stages (1F1B-RR,
# parallel.replicas) train through `baton train` and resume from their drain point bit-identically;
# GPT dropout gives the same losses under every layout; keys of features that are not built yet
# are one clear error each, never a silent no-op.
source "$(dirname "$0")/lib.sh"
use_mpirun
make_tiny_dataset
write_tiny_config
# 6 global layers (room for uneven stages); 12 steps, a checkpoint (and asynchronous drain) every 6.
sed -i -e 's/^n_layer = 2$/n_layer = 4/' -e 's/^steps = 20$/steps = 12/' -e 's/^every = 10$/every = 6/' tiny.toml

"$BATON" train tiny.toml --set run.dir=ref > ref.log
# 6 global layers (embedding, 4 blocks, head): stage 0 = embedding + 1 block, stage 1 = 3 blocks +
# head; and three stages with tp 2 (6 ranks).
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml --set parallel.pp=2 --set 'parallel.stages=[[0, 2], [2, 6]]' \
  --set run.dir=uneven > uneven.log
grep -q "model stages (global layers) \[0,2) \[2,6)" uneven.log || { cat uneven.log; fail "stages not in the header"; }
"${MPIRUN[@]}" 6 "$BATON" train tiny.toml --set parallel.tp=2 --set parallel.pp=3 \
  --set 'parallel.stages=[[0, 1], [1, 4], [4, 6]]' --set run.dir=uneven3 > uneven3.log

# pipedream drains at checkpoint.every = 6: a run resumed there repeats the uninterrupted one.
for variant in pd vs rr; do
  case $variant in
    pd) np=2; args=(--set parallel.pp=2 --set parallel.schedule=pipedream) ;;
    vs) np=2; args=(--set parallel.pp=2 --set parallel.schedule=pipedream --set parallel.vertical_sync=true) ;;
    rr) np=4; args=(--set parallel.pp=2 --set parallel.schedule=pipedream --set 'parallel.replicas=[2, 2]') ;;
  esac
  "${MPIRUN[@]}" $np "$BATON" train tiny.toml "${args[@]}" --set run.dir=$variant > $variant.log
  "${MPIRUN[@]}" $np "$BATON" train tiny.toml "${args[@]}" \
    --set checkpoint.resume="\"$variant/ckpt/step-0000006.h5\"" --set checkpoint.dir=${variant}_r \
    --set run.dir=${variant}_r > ${variant}_r.log
  grep -q "resumed from" ${variant}_r.log || { cat ${variant}_r.log; fail "$variant did not resume"; }
done
grep -q "1F1B-RR" rr.log || { cat rr.log; fail "1F1B-RR not in the header"; }
grep -q "replicas 2,2" rr.log || { cat rr.log; fail "replicas not in the layout line"; }

python3 - <<'PY'
import json, math
def rows(path):
    return {r["step"]: r for r in map(json.loads, open(path))}
ref = rows("ref/metrics.jsonl")
for name in ("uneven", "uneven3"):
    got = rows(f"{name}/metrics.jsonl")
    worst = max(abs(got[s][k] - ref[s][k]) / abs(ref[s][k]) for s in range(1, 13) for k in ("loss", "grad_norm"))
    assert worst <= 1e-4, f"{name}: worst relative difference {worst:.2e}"
    print(f"{name}: steps 1..12 within {worst:.1e} of the single-process run")
for name in ("pd", "vs", "rr"):
    full, resumed = rows(f"{name}/metrics.jsonl"), rows(f"{name}_r/metrics.jsonl")
    for s in range(7, 13):
        assert resumed[s]["loss"] == full[s]["loss"], f"{name} resume: step {s} {resumed[s]['loss']} != {full[s]['loss']}"
    assert all(math.isfinite(full[s]["loss"]) for s in full) and full[12]["loss"] < full[1]["loss"], name
    print(f"{name}: loss {full[1]['loss']:.4f} -> {full[12]['loss']:.4f}; resumed at step 6, steps 7..12 bit-identical")
PY

# GPT hidden dropout (model.dropout): the masks are a function of (seed, batch, token, channel,
# site), so tensor (+ sequence) parallelism, pipelines (zero bubble's split backward too), data
# parallelism and full recomputation train to the single process's losses; and it does change them.
drop=(--set model.dropout=0.2 --set train.steps=4)
"$BATON" train tiny.toml "${drop[@]}" --set run.dir=d_ref > d_ref.log
grep -q "hidden dropout 0.2" d_ref.log || { cat d_ref.log; fail "dropout not in the model line"; }
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${drop[@]}" --set parallel.tp=2 --set parallel.sequence_parallel=true \
  --set run.dir=d_sp > d_sp.log
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${drop[@]}" --set parallel.pp=2 --set parallel.schedule=zb-h1 \
  --set run.dir=d_zb > d_zb.log
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${drop[@]}" --set parallel.recompute=full --set run.dir=d_dp > d_dp.log
python3 - <<'PY'
import json
rows = lambda p: {r["step"]: r for r in map(json.loads, open(p))}
ref, plain = rows("d_ref/metrics.jsonl"), rows("ref/metrics.jsonl")
assert abs(ref[2]["loss"] - plain[2]["loss"]) > 1e-3, "dropout changed nothing"
for name in ("d_sp", "d_zb", "d_dp"):
    got = rows(f"{name}/metrics.jsonl")
    worst = max(abs(got[s][k] - ref[s][k]) / abs(ref[s][k]) for s in range(1, 5) for k in ("loss", "grad_norm"))
    assert worst <= 1e-4, f"{name}: worst relative difference {worst:.2e}"
    print(f"dropout {name}: steps 1..4 within {worst:.1e} of the single-process run")
PY

# Not built yet, or not meaningful: a clear error, never a silent no-op.
expect_error "hetero.placement = \"local\" puts each stage's tensors on its own rank, which needs virtual workers of several stages" \
  "$BATON" train tiny.toml --set hetero.sync=wsp --set hetero.placement=local --set run.dir=bad
expect_error "the other \[hetero\] keys need hetero.sync = \"wsp\"" "$BATON" train tiny.toml --set hetero.staleness=2 --set run.dir=bad
expect_error "needs parallel.pp > 1" "$BATON" train tiny.toml --set parallel.schedule=wsp --set run.dir=bad
expect_error "needs parallel.pp > 1" "$BATON" train tiny.toml --set parallel.schedule=1f1b-star --set run.dir=bad
expect_error "\"wsp\" does not train yet" "${MPIRUN[@]}" 2 "$BATON" train tiny.toml --set parallel.pp=2 \
  --set parallel.schedule=wsp --set run.dir=bad
expect_error "\"1f1b-star\" does not train yet" "${MPIRUN[@]}" 2 "$BATON" train tiny.toml --set parallel.pp=2 \
  --set parallel.schedule=1f1b-star --set run.dir=bad
expect_error "the stages cover global layers .0, 5. but the model has 6" "${MPIRUN[@]}" 2 "$BATON" train \
  tiny.toml --set parallel.pp=2 --set 'parallel.stages=[[0, 2], [2, 5]]' --set run.dir=bad
expect_error "parallel.stages lists 2 stages but parallel.pp × parallel.vp = 3" "${MPIRUN[@]}" 3 "$BATON" \
  train tiny.toml --set parallel.pp=3 --set 'parallel.stages=[[0, 2], [2, 6]]' --set run.dir=bad
[ ! -e bad/metrics.jsonl ] || fail "a refused run wrote metrics"
echo "PASS"
